// Receive coalescing (GRO) for the DPDK driver: the in-order TCP segments of
// one flow that arrive in one rx burst go up the graph as one segment -- one
// trip through eth, IP and TCP, one ACK decision -- as Linux's GRO does for
// a NAPI poll. Private to the driver (it works on mbufs); see
// docs/dpdk-driver.md, "Receive coalescing".
//
// What merges: TCP segments with data over IPv4 (no options, not a
// fragment) or IPv6 (TCP straight behind the fixed header), flags ACK or
// ACK|PSH only, of one 4-tuple and Ethernet addresses, each starting where
// the one before ended, with the same ACK number, window, TCP options, and
// IP fields: TOS/ECN bits, TTL and DF bit (IPv4); traffic class, hop limit
// and flow label (IPv6) -- except that the timestamp option's TSval may
// grow (TSecr must be equal; the merged segment keeps the first TSval, the
// earliest, which is what a delayed ACK echoes, RFC 7323 section 4.3). A
// segment no longer than the first closes its group when it is shorter,
// and one with PSH closes it after joining; a group stops short of 64 KB.
// What never merges: SYN, FIN, RST, URG, ECE, CWR, a segment without data,
// a hole or a step back in sequence, different options or windows, a bad
// IPv4 header checksum, IPv6 extension headers, a TCP checksum the port or
// (with verify) the check here found bad. Order within a flow is kept:
// anything of a flow that cannot join its group ends the group before it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/ipv4_wire.hpp"

struct rte_mbuf;

namespace xk::drivers::gro {

// How segments' TCP checksums are dealt with.
enum class Csum : std::uint8_t {
  // Each segment's checksum is checked before it may merge (a bad one goes
  // up alone, for TCP to count and drop); what was checked is marked good,
  // so TCP does not sum it again. The stack checks checksums: no extra work.
  verify,
  // Not checked here: the merged segment's checksum is computed from the
  // parts' checksum fields (right exactly when every part's was), in time
  // independent of the length. For stacks with checksums off.
  carry,
};

struct Stats {
  std::uint64_t merged = 0;   // segments joined onto an earlier one
  std::uint64_t groups = 0;   // frames delivered holding more than one segment
  std::uint64_t bad_csum = 0; // segments whose TCP checksum failed the check (left alone)
};

// The largest merged frame by default: an IPv4 datagram of 64 KB (an IPv6
// packet of as many bytes, its header included).
inline constexpr std::size_t kMaxFrame = eth::Header::kSize + ipv4::Header::kMaxTotal;

// Coalesces frames[0..n) in place: on return frames[0..result) are the
// frames to deliver, in order, merged ones as mbuf chains with their IP
// and TCP headers rewritten and tso_segsz set to the payload bytes of their
// first segment (the size a forwarder cuts them back to). Frames merged
// away are chained into their group's frame (never freed here). No merged
// frame exceeds max_frame bytes (Ethernet header included).
std::size_t coalesce(rte_mbuf** frames, std::size_t n, Csum csum, Stats& stats,
                     std::size_t max_frame = kMaxFrame) noexcept;

}  // namespace xk::drivers::gro

#pragma once
// What the engine's IPv4 (filter.cpp) and IPv6 (filter_v6.cpp) halves
// share: a parsed frame and the verdicts in short.

#include <cstddef>

#include "filter_fragments.hpp"
#include "xk/filterd/filter.hpp"
#include "xk/protocols/eth_wire.hpp"

namespace xk::filterd {

inline constexpr std::size_t kEthHeader = eth::Header::kSize;

constexpr Decision deliver(Reason r, Target t) noexcept { return Decision{Action::to_node, r, t}; }
constexpr Decision drop(Reason r) noexcept { return Decision{Action::drop, r, {}}; }
constexpr Decision local(Reason r) noexcept { return Decision{Action::local, r, {}}; }
constexpr EgressVerdict allow(EgressReason r) noexcept { return EgressVerdict{true, r, false}; }
constexpr EgressVerdict deny(EgressReason r) noexcept { return EgressVerdict{false, r, false}; }

// Later fragments go where the first went when that was a delivery.
constexpr bool delivers(Action a) noexcept { return a == Action::to_node || a == Action::local; }

// One frame's headers, as far as the filter needs them.
struct FilterEngine::Parsed {
  enum class Kind : std::uint8_t {
    decided,  // `decision` is final (local, drop)
    flow,     // `key` goes to the exact table first
    other,    // the rest of the order: decide()
  };
  Kind kind;
  Decision decision;
  PackedKey key;       // valid when has_key (IPv4)
  Packed6Key key6;     // valid when has_key (IPv6)
  std::uint64_t hash;  // of key, for the exact table, when kind == flow (IPv4)
  bool v6;
  bool icmp;           // ICMP of the packet's family (ICMPv6 over IPv6)
  bool has_key;
  bool fragment;        // MF or an offset
  bool later_fragment;  // an offset: no transport header here
  bool broadcast;       // limited broadcast or multicast destination
  std::uint8_t proto;
  std::uint8_t tcp_flags;
  std::uint8_t icmp_type;
  FragKey frag;             // the datagram, when fragment
  std::uint32_t l4_offset;  // transport header, from the frame's start
  std::uint32_t l4_length;  // transport bytes in this packet (or fragment)
};

}  // namespace xk::filterd

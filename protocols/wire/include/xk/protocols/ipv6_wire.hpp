#pragma once
// IPv6 header layout (RFC 8200 section 3), the fragment header (4.5) and a
// walk of the extension-header chain (4.1) with limits on what it accepts.
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-------+---------------+---------------------------------------+
//   |Version| Traffic Class |              Flow Label               |
//   +-------+---------------+-------+---------------+---------------+
//   |         Payload Length        |  Next Header  |   Hop Limit   |
//   +-------------------------------+---------------+---------------+
//   |                  Source Address (16 bytes)                    |
//   |               Destination Address (16 bytes)                  |
//   +---------------------------------------------------------------+
//
// Addresses are IpAddr (xk/ip_addr.hpp); an IPv4-mapped address never
// appears on an IPv6 wire (RFC 4291 2.5.5.2), and a caller drops a packet
// that carries one.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "xk/byteorder.hpp"
#include "xk/ip_addr.hpp"

namespace xk::ipv6 {

// Next Header values (IANA "Assigned Internet Protocol Numbers").
inline constexpr std::uint8_t kHopByHop = 0;
inline constexpr std::uint8_t kTcp = 6;
inline constexpr std::uint8_t kUdp = 17;
inline constexpr std::uint8_t kRouting = 43;
inline constexpr std::uint8_t kFragment = 44;
inline constexpr std::uint8_t kEsp = 50;
inline constexpr std::uint8_t kAuth = 51;
inline constexpr std::uint8_t kIcmpv6 = 58;
inline constexpr std::uint8_t kNoNext = 59;
inline constexpr std::uint8_t kDestOptions = 60;

// Every link carries at least this many bytes in one packet (RFC 8200 5).
inline constexpr std::size_t kMinMtu = 1280;

inline constexpr bool is_multicast(const IpAddr& a) noexcept { return a.bytes()[0] == 0xff; }

struct Header {
  static constexpr std::size_t kSize = 40;
  static constexpr std::size_t kMaxPayload = 65535;  // no jumbograms (RFC 2675)
  static constexpr std::size_t kNextHeaderOffset = 6;

  std::uint8_t version = 6;
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;  // 20 bits
  std::uint16_t payload_length = 0;
  std::uint8_t next_header = kNoNext;
  std::uint8_t hop_limit = 0;
  IpAddr src;
  IpAddr dst;

  static Header read(std::span<const std::byte, kSize> b) noexcept {
    Header h;
    const std::uint32_t w = load_be32(b.data());
    h.version = static_cast<std::uint8_t>(w >> 28);
    h.traffic_class = static_cast<std::uint8_t>(w >> 20);
    h.flow_label = w & 0xfffff;
    h.payload_length = load_be16(b.data() + 4);
    h.next_header = std::to_integer<std::uint8_t>(b[6]);
    h.hop_limit = std::to_integer<std::uint8_t>(b[7]);
    h.src = address_at(b.data() + 8);
    h.dst = address_at(b.data() + 24);
    return h;
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    store_be32(b.data(), std::uint32_t{version} << 28 | std::uint32_t{traffic_class} << 20 | (flow_label & 0xfffff));
    store_be16(b.data() + 4, payload_length);
    b[6] = std::byte{next_header};
    b[7] = std::byte{hop_limit};
    std::memcpy(b.data() + 8, src.bytes().data(), 16);
    std::memcpy(b.data() + 24, dst.bytes().data(), 16);
  }
  static IpAddr address_at(const std::byte* p) noexcept {
    IpAddr::Bytes a;
    std::memcpy(a.data(), p, 16);
    return IpAddr::from_bytes(a);  // a mapped one shows as IPv4, for the caller to drop
  }
};

// The fragment header (RFC 8200 4.5).
//   | Next Header | Reserved | Fragment Offset (13) |Res|M| | Identification (32) |
struct FragmentHeader {
  static constexpr std::size_t kSize = 8;
  std::uint8_t next_header = kNoNext;
  std::uint16_t offset_units = 0;  // 8-byte units
  bool more = false;
  std::uint32_t id = 0;

  std::size_t offset() const noexcept { return std::size_t{offset_units} * 8; }
  // RFC 6946: offset 0 and no more fragments -- a whole packet behind a
  // fragment header, processed as such, never with other fragments.
  bool atomic() const noexcept { return offset_units == 0 && !more; }

  static FragmentHeader read(std::span<const std::byte, kSize> b) noexcept {
    const std::uint16_t w = load_be16(b.data() + 2);
    return FragmentHeader{std::to_integer<std::uint8_t>(b[0]), static_cast<std::uint16_t>(w >> 3), (w & 1) != 0,
                          load_be32(b.data() + 4)};
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    b[0] = std::byte{next_header};
    b[1] = std::byte{0};
    store_be16(b.data() + 2, static_cast<std::uint16_t>(offset_units << 3 | (more ? 1 : 0)));
    store_be32(b.data() + 4, id);
  }
};

// How far a walk of the extension headers goes before it refuses a packet
// (RFC 8504 5.3 asks hosts for such limits; RFC 9098 says why).
struct ChainLimits {
  std::size_t max_headers = 8;       // extension headers before the upper layer
  std::size_t max_options = 8;       // non-padding options in one options header
  std::size_t max_padding = 7;       // consecutive padding bytes in one options header
};

// What a walk found in an acceptable packet.
struct Chain {
  std::uint8_t upper = kNoNext;       // the protocol after the last extension header
  std::size_t upper_offset = 0;       // where it starts, from the IPv6 header's first byte
  std::size_t next_header_offset = Header::kNextHeaderOffset;  // the byte that named `upper`
  std::size_t headers = 0;            // extension headers walked
  bool router_alert = false;          // a hop-by-hop Router Alert option (RFC 2711)
  // A fragment header, where the walk stops: `upper` and `upper_offset`
  // then describe the fragment's contents, which only the first fragment
  // begins with the upper-layer header.
  std::optional<FragmentHeader> fragment;
  std::size_t fragment_offset = 0;    // of the fragment header, when there is one
  std::size_t fragment_named_at = 0;  // the Next Header byte that named it
};

// Why a walk refused a packet, and what RFC 8200 says to tell the sender.
enum class ChainError : std::uint8_t {
  truncated,            // a header runs past the payload: drop
  too_many_headers,     // over max_headers: drop
  too_many_options,     // over max_options or max_padding: drop
  bad_option_length,    // an option runs past its header: drop
  hop_by_hop_not_first, // Parameter Problem code 1 at the Next Header byte
  unknown_option,       // the option type's top two bits say what: see `icmp`
  unknown_routing,      // segments left > 0 of a type we do not route: Parameter Problem code 0
};
const char* to_string(ChainError e) noexcept;

// ICMPv6 Parameter Problem codes (RFC 4443 3.4).
inline constexpr std::uint8_t kErroneousField = 0;
inline constexpr std::uint8_t kUnrecognizedNextHeader = 1;
inline constexpr std::uint8_t kUnrecognizedOption = 2;

struct ChainProblem {
  ChainError error = ChainError::truncated;
  // Answer with Parameter Problem `code` pointing at `pointer` (from the
  // IPv6 header's first byte); for an unknown option whose type says "only
  // if the destination was not multicast", `unless_multicast` is set.
  bool icmp = false;
  bool unless_multicast = false;
  std::uint8_t code = 0;
  std::uint32_t pointer = 0;
};

// Walks `packet`, the IPv6 header and exactly its payload_length bytes
// after it (the caller has checked both), through hop-by-hop, destination
// options, routing, fragment and authentication headers to the upper layer
// or a fragment header. Returns the chain, or why the packet is refused.
struct ChainResult {
  std::optional<Chain> chain;
  ChainProblem problem;  // when !chain
};
ChainResult walk_chain(std::span<const std::byte> packet, const ChainLimits& limits = {});

}  // namespace xk::ipv6

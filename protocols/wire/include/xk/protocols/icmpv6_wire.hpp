#pragma once
// ICMPv6 (RFC 4443) and Neighbor Discovery (RFC 4861) message layouts, and
// the addresses ND works with: link-local addresses from a MAC (RFC 4291
// 2.5.1 and appendix A), solicited-node groups (2.7.1) and the Ethernet
// address of a multicast group (RFC 2464 7).
//
//    0                   1                   2                   3
//   +---------------+---------------+-------------------------------+
//   |     Type      |     Code      |          Checksum             |
//   +---------------+---------------+-------------------------------+
//   |                  rest of header (by type)                     |
//
// The checksum covers the IPv6 pseudo-header (RFC 8200 8.1, next header 58)
// and the whole message: csum::pseudo_header(src, dst, kIcmpv6, length).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "xk/address.hpp"
#include "xk/byteorder.hpp"
#include "xk/protocols/icmp_wire.hpp"
#include "xk/ip_addr.hpp"
#include "xk/result.hpp"

namespace xk::icmpv6 {

// Errors (type < 128).
inline constexpr std::uint8_t kDestUnreachable = 1;
inline constexpr std::uint8_t kPacketTooBig = 2;
inline constexpr std::uint8_t kTimeExceeded = 3;
inline constexpr std::uint8_t kParamProblem = 4;
// Informational.
inline constexpr std::uint8_t kEchoRequest = 128;
inline constexpr std::uint8_t kMldQuery = 130;     // RFC 2710 3; RFC 3810 5.1
inline constexpr std::uint8_t kMldv1Report = 131;
inline constexpr std::uint8_t kMldv1Done = 132;
inline constexpr std::uint8_t kEchoReply = 129;
inline constexpr std::uint8_t kRouterSolicit = 133;
inline constexpr std::uint8_t kRouterAdvert = 134;
inline constexpr std::uint8_t kNeighborSolicit = 135;
inline constexpr std::uint8_t kNeighborAdvert = 136;
inline constexpr std::uint8_t kRedirect = 137;
inline constexpr std::uint8_t kMldv2Report = 143;  // RFC 3810

// Destination unreachable codes.
inline constexpr std::uint8_t kNoRoute = 0;
inline constexpr std::uint8_t kAdminProhibited = 1;
inline constexpr std::uint8_t kAddressUnreachable = 3;
inline constexpr std::uint8_t kPortUnreachable = 4;

// RFC 4443 2.4: an error is never sent about an error.
inline constexpr bool is_error(std::uint8_t type) noexcept { return type < 128; }

// A link's own housekeeping: MLD (RFC 2710, RFC 3810), Router and Neighbor
// Discovery and Redirect (RFC 4861 4) -- never part of a transport flow.
inline constexpr bool is_discovery(std::uint8_t type) noexcept {
  return (type >= kMldQuery && type <= kRedirect) || type == kMldv2Report;
}

// The header is ICMP's (type, code, checksum, four bytes by type): echo
// keeps its identifier and sequence there, Packet Too Big its MTU,
// Parameter Problem its pointer.
using Header = icmp::Header;

// Fills the checksum field of a whole message from `src` to `dst` (the
// field zero until then): the pseudo-header and every byte.
void fill_checksum(std::span<std::byte> message, const IpAddr& src, const IpAddr& dst) noexcept;

// ---- Neighbor Discovery ------------------------------------------------------

// Every ND message arrives with hop limit 255, or it came from off-link
// (RFC 4861 6.1.1, 7.1.1) and is dropped.
inline constexpr std::uint8_t kNdHopLimit = 255;

// Neighbor Solicitation and Advertisement: the header (NA's flags in the
// top bits of `rest`), then the 16-byte target address, then options.
inline constexpr std::size_t kNeighborMessageSize = Header::kSize + 16;
inline constexpr std::uint32_t kNaRouter = 0x80000000u;
inline constexpr std::uint32_t kNaSolicited = 0x40000000u;
inline constexpr std::uint32_t kNaOverride = 0x20000000u;
// Router Advertisement: header (cur hop limit, M/O flags, router lifetime
// in `rest`), reachable time, retrans timer, then options.
inline constexpr std::size_t kRouterAdvertSize = Header::kSize + 8;
inline constexpr std::size_t kRouterSolicitSize = Header::kSize;

// ND options (RFC 4861 4.6): type, length in 8-byte units (never 0).
inline constexpr std::uint8_t kOptSourceLinkAddr = 1;
inline constexpr std::uint8_t kOptTargetLinkAddr = 2;
inline constexpr std::uint8_t kOptPrefixInfo = 3;
inline constexpr std::uint8_t kOptMtu = 5;

struct PrefixInfo {
  std::uint8_t length = 0;  // prefix length in bits
  bool on_link = false;     // L
  bool autonomous = false;  // A: usable for SLAAC (RFC 4862)
  std::uint32_t valid_lifetime = 0;
  std::uint32_t preferred_lifetime = 0;
  IpAddr prefix;
  friend bool operator==(const PrefixInfo&, const PrefixInfo&) = default;
};

struct NdOptions {
  std::optional<MacAddr> source_link;
  std::optional<MacAddr> target_link;
  std::optional<std::uint32_t> mtu;
  std::vector<PrefixInfo> prefixes;
};

// The options after an ND message's fixed part. An option of length 0 or one
// that runs past the message refuses the whole message (invalid_argument);
// unknown options are skipped (RFC 4861 4.6).
Result<NdOptions> read_nd_options(std::span<const std::byte> options);
// A link-layer address option (source or target), 8 bytes on Ethernet.
inline constexpr std::size_t kLinkAddrOptionSize = 8;
void write_link_addr_option(std::span<std::byte, kLinkAddrOptionSize> b, std::uint8_t type, const MacAddr& mac) noexcept;

// ---- addresses -----------------------------------------------------------------

// fe80::/10.
inline constexpr bool is_link_local(const IpAddr& a) noexcept {
  return a.bytes()[0] == 0xfe && (a.bytes()[1] & 0xc0) == 0x80;
}
// fe80::/64 with the modified EUI-64 interface identifier of `mac`.
IpAddr link_local_from_mac(const MacAddr& mac) noexcept;
// ff02::1:ffXX:XXXX, the group a solicitation for `a` goes to.
IpAddr solicited_node(const IpAddr& a) noexcept;
// 33:33 and the group's low 32 bits.
MacAddr multicast_mac(const IpAddr& group) noexcept;
// ff02::1 and ff02::2.
IpAddr all_nodes() noexcept;
IpAddr all_routers() noexcept;

}  // namespace xk::icmpv6

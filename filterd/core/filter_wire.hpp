#pragma once
// The wire formats the engine reads, from the protocols' own headers (the
// IPv6 extension-header walk is xk_wire's, linked in).
// xk_filterd_core links only xkernel (filterd/CMakeLists.txt), so the
// protocols' include directories are not on its path: these headers are
// reached by their place in the tree. They depend on xkernel alone. TCP's
// and ARP's wire headers pull in more of their libraries, so the few TCP and
// ARP fields the filter needs are read here with the same big-endian loads.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/icmp_wire.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/ipv4_wire.hpp"
#include "xk/protocols/ipv6_wire.hpp"
#include "xk/protocols/udp_wire.hpp"
#include "xk/byteorder.hpp"

namespace xk::filterd::wire {

// TCP (RFC 9293 3.1): ports at 0 and 2, data offset in the top nibble of
// byte 12, the control bits in byte 13.
inline constexpr std::size_t kTcpMinHeader = 20;
inline constexpr std::uint8_t kTcpSyn = 0x02;
inline constexpr std::uint8_t kTcpRst = 0x04;
inline std::uint16_t tcp_src_port(const std::byte* tcp) noexcept { return load_be16(tcp); }
inline std::uint16_t tcp_dst_port(const std::byte* tcp) noexcept { return load_be16(tcp + 2); }
inline std::size_t tcp_header_length(const std::byte* tcp) noexcept {
  return static_cast<std::size_t>(std::to_integer<std::uint8_t>(tcp[12]) >> 4) * 4;
}
inline std::uint8_t tcp_flags(const std::byte* tcp) noexcept { return std::to_integer<std::uint8_t>(tcp[13]); }

// A MAC address as a number, for a compare without memcmp: the data path
// checks every frame's destination.
// Two loads combined in registers: six bytes copied into an 8-byte variable
// would be two stores and a wider load, which store forwarding cannot serve.
inline std::uint64_t mac_bits(const std::byte* mac) noexcept {
  std::uint32_t lo;
  std::uint16_t hi;
  std::memcpy(&lo, mac, 4);
  std::memcpy(&hi, mac + 4, 2);
  return lo | (std::uint64_t{hi} << 32);
}
inline std::uint64_t mac_bits(const MacAddr& mac) noexcept {
  return mac_bits(reinterpret_cast<const std::byte*>(mac.bytes.data()));
}

// ARP for Ethernet and IPv4 (RFC 826), 28 bytes.
inline constexpr std::size_t kArpSize = 28;
inline bool arp_is_ethernet_ipv4(const std::byte* arp) noexcept {
  return load_be16(arp) == 1 && load_be16(arp + 2) == eth::kTypeIpv4 && std::to_integer<std::uint8_t>(arp[4]) == 6 &&
         std::to_integer<std::uint8_t>(arp[5]) == 4;
}
inline Ipv4Addr arp_sender_ip(const std::byte* arp) noexcept { return Ipv4Addr{load_be32(arp + 14)}; }
inline Ipv4Addr arp_target_ip(const std::byte* arp) noexcept { return Ipv4Addr{load_be32(arp + 24)}; }

// The IPv4 header checksum check (RFC 1071): the one's complement sum of the
// header, checksum included, is all ones. Summed 32 bits at a time (IHL is in
// words), inline: this runs for every frame.
inline bool ipv4_header_checksum_ok(const std::byte* header, std::size_t length) noexcept {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < length; i += 4) {
    std::uint32_t w;
    std::memcpy(&w, header + i, 4);
    sum += w;
  }
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffffu) + (sum >> 16);
  sum = (sum & 0xffffu) + (sum >> 16);
  return sum == 0xffff;
}

}  // namespace xk::filterd::wire

#pragma once
// The ARP packet (RFC 826) for Ethernet hardware and IPv4 protocol
// addresses, apart from the protocol logic (docs/style.md). 28 bytes:
//
//   0       2       4   5   6       8
//   +-------+-------+---+---+-------+
//   | htype | ptype |hln|pln|  op   |
//   +-------+-------+---+---+-------+------------------+
//   |  sender hardware address (6)  | sender IPv4 (4)  |
//   +-------------------------------+------------------+
//   |  target hardware address (6)  | target IPv4 (4)  |
//   +-------------------------------+------------------+
//
// htype 1 is Ethernet, ptype 0x0800 IPv4. op 1 is a request, 2 a reply.

#include <cstddef>
#include <cstdint>
#include <span>

#include "xk/address.hpp"
#include "xk/byteorder.hpp"
#include "xk/protocols/eth_wire.hpp"

namespace xk::arp {

inline constexpr std::uint16_t kHtypeEthernet = 1;
inline constexpr std::uint16_t kPtypeIpv4 = 0x0800;
inline constexpr std::uint8_t kHlenEthernet = 6;
inline constexpr std::uint8_t kPlenIpv4 = 4;
inline constexpr std::uint16_t kOpRequest = 1;
inline constexpr std::uint16_t kOpReply = 2;

struct Packet {
  static constexpr std::size_t kSize = 28;
  std::uint16_t htype = kHtypeEthernet;
  std::uint16_t ptype = kPtypeIpv4;
  std::uint8_t hlen = kHlenEthernet;
  std::uint8_t plen = kPlenIpv4;
  std::uint16_t op = kOpRequest;
  MacAddr sha;
  Ipv4Addr spa;
  MacAddr tha;
  Ipv4Addr tpa;

  static Packet read(std::span<const std::byte, kSize> b) noexcept {
    Packet p;
    p.htype = load_be16(b.data());
    p.ptype = load_be16(b.data() + 2);
    p.hlen = static_cast<std::uint8_t>(b[4]);
    p.plen = static_cast<std::uint8_t>(b[5]);
    p.op = load_be16(b.data() + 6);
    p.sha = eth::load_mac(b.data() + 8);
    p.spa = Ipv4Addr{load_be32(b.data() + 14)};
    p.tha = eth::load_mac(b.data() + 18);
    p.tpa = Ipv4Addr{load_be32(b.data() + 24)};
    return p;
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    store_be16(b.data(), htype);
    store_be16(b.data() + 2, ptype);
    b[4] = std::byte{hlen};
    b[5] = std::byte{plen};
    store_be16(b.data() + 6, op);
    eth::store_mac(b.data() + 8, sha);
    store_be32(b.data() + 14, spa.value);
    eth::store_mac(b.data() + 18, tha);
    store_be32(b.data() + 24, tpa.value);
  }
};

}  // namespace xk::arp

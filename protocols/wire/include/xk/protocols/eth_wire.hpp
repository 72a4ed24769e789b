#pragma once
// Ethernet II framing (IEEE 802.3 with an EtherType) and the 802.1Q tag,
// apart from the protocol logic (docs/style.md).
//
//   0               6               12      14
//   +---------------+---------------+-------+------------- - -
//   |  destination  |    source     | type  | payload (46..1500)
//   +---------------+---------------+-------+------------- - -
//
// With an 802.1Q tag, `type` is the TPID 0x8100 and four more bytes follow:
// TCI (priority 3 bits, DEI 1 bit, VLAN id 12 bits) and the inner type.
// A type below 0x0600 is an 802.3 length field (LLC frames), not a type.
// The frame check sequence is the NIC's business and never appears here.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "xk/address.hpp"
#include "xk/byteorder.hpp"

namespace xk::eth {

inline constexpr std::uint16_t kTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kTypeArp = 0x0806;
inline constexpr std::uint16_t kTypeVlan = 0x8100;  // 802.1Q TPID
inline constexpr std::uint16_t kTypeQinQ = 0x88a8;  // 802.1ad service tag TPID
inline constexpr std::uint16_t kTypeIpv6 = 0x86dd;
// Values below this are 802.3 lengths, not EtherTypes.
inline constexpr std::uint16_t kMinEtherType = 0x0600;

// Shortest frame on the wire without the 4-byte FCS (IEEE 802.3 minimum of 64).
inline constexpr std::size_t kMinFrame = 60;

inline constexpr MacAddr kBroadcast{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};

// The I/G bit: the lowest bit of the first byte marks a group address.
constexpr bool is_multicast(const MacAddr& a) noexcept { return (a.bytes[0] & 0x01) != 0; }
constexpr bool is_broadcast(const MacAddr& a) noexcept { return a == kBroadcast; }
constexpr bool is_zero(const MacAddr& a) noexcept { return a == MacAddr{}; }

inline MacAddr load_mac(const std::byte* p) noexcept {
  MacAddr m;
  std::memcpy(m.bytes.data(), p, 6);
  return m;
}
inline void store_mac(std::byte* p, const MacAddr& m) noexcept { std::memcpy(p, m.bytes.data(), 6); }

struct Header {
  static constexpr std::size_t kSize = 14;
  MacAddr dst;
  MacAddr src;
  std::uint16_t type = 0;

  static Header read(std::span<const std::byte, kSize> b) noexcept {
    return Header{load_mac(b.data()), load_mac(b.data() + 6), load_be16(b.data() + 12)};
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    store_mac(b.data(), dst);
    store_mac(b.data() + 6, src);
    store_be16(b.data() + 12, type);
  }
};

// What follows a TPID: the tag control information and the inner type.
struct VlanTag {
  static constexpr std::size_t kSize = 4;
  std::uint16_t tci = 0;
  std::uint16_t type = 0;

  std::uint16_t vlan_id() const noexcept { return tci & 0x0fff; }
  std::uint8_t priority() const noexcept { return static_cast<std::uint8_t>(tci >> 13); }

  static VlanTag read(std::span<const std::byte, kSize> b) noexcept {
    return VlanTag{load_be16(b.data()), load_be16(b.data() + 2)};
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    store_be16(b.data(), tci);
    store_be16(b.data() + 2, type);
  }
};

}  // namespace xk::eth

#pragma once
// IPv4 header layout (RFC 791 section 3.1), read and written by value.
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-------+-------+---------------+-------------------------------+
//   |Version|  IHL  |Type of Service|          Total Length         |
//   +-------+-------+---------------+-----+-------------------------+
//   |         Identification        |Flags|      Fragment Offset    |
//   +---------------+---------------+-----+-------------------------+
//   |  Time to Live |    Protocol   |         Header Checksum       |
//   +---------------+---------------+-------------------------------+
//   |                       Source Address                          |
//   |                    Destination Address                        |
//   |                    Options (IHL > 5)                          |
//
// Only the fixed 20 bytes are decoded; options are IHL*4 - 20 bytes that the
// caller skips (or copies) as a block, so nothing reads past IHL.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "xk/address.hpp"
#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"

namespace xk::ipv4 {

inline constexpr std::uint8_t kProtoIcmp = 1;
inline constexpr std::uint8_t kProtoTcp = 6;
inline constexpr std::uint8_t kProtoUdp = 17;

inline constexpr Ipv4Addr kLimitedBroadcast{0xffffffffu};

inline constexpr bool is_multicast(Ipv4Addr a) noexcept { return (a.value >> 28) == 0xe; }

struct Header {
  static constexpr std::size_t kMinSize = 20;
  static constexpr std::size_t kMaxSize = 60;
  static constexpr std::size_t kMaxTotal = 65535;
  static constexpr std::size_t kChecksumOffset = 10;
  static constexpr std::uint16_t kFlagReserved = 0x8000;
  static constexpr std::uint16_t kFlagDf = 0x4000;
  static constexpr std::uint16_t kFlagMf = 0x2000;
  static constexpr std::uint16_t kOffsetMask = 0x1fff;

  std::uint8_t version = 4;
  std::uint8_t ihl = 5;  // header length in 32-bit words
  std::uint8_t tos = 0;
  std::uint16_t total_length = 0;
  std::uint16_t id = 0;
  std::uint16_t flags_offset = 0;  // flags (top 3 bits) and offset in 8-byte units
  std::uint8_t ttl = 0;
  std::uint8_t protocol = 0;
  std::uint16_t checksum = 0;  // as the big-endian field reads
  Ipv4Addr src;
  Ipv4Addr dst;

  std::size_t header_length() const noexcept { return std::size_t{ihl} * 4; }
  // Option bytes after the fixed header (0 for a malformed IHL < 5).
  std::size_t options_length() const noexcept { return ihl > 5 ? header_length() - kMinSize : 0; }
  bool df() const noexcept { return (flags_offset & kFlagDf) != 0; }
  bool mf() const noexcept { return (flags_offset & kFlagMf) != 0; }
  // Fragment offset in bytes.
  std::size_t frag_offset() const noexcept { return static_cast<std::size_t>(flags_offset & kOffsetMask) * 8; }
  bool is_fragment() const noexcept { return mf() || (flags_offset & kOffsetMask) != 0; }

  static Header read(std::span<const std::byte, kMinSize> b) noexcept {
    Header h;
    auto v = std::to_integer<std::uint8_t>(b[0]);
    h.version = static_cast<std::uint8_t>(v >> 4);
    h.ihl = static_cast<std::uint8_t>(v & 0x0f);
    h.tos = std::to_integer<std::uint8_t>(b[1]);
    h.total_length = load_be16(b.data() + 2);
    h.id = load_be16(b.data() + 4);
    h.flags_offset = load_be16(b.data() + 6);
    h.ttl = std::to_integer<std::uint8_t>(b[8]);
    h.protocol = std::to_integer<std::uint8_t>(b[9]);
    h.checksum = load_be16(b.data() + 10);
    h.src = Ipv4Addr{load_be32(b.data() + 12)};
    h.dst = Ipv4Addr{load_be32(b.data() + 16)};
    return h;
  }

  // Writes the fixed 20 bytes with the checksum field as held here.
  void write(std::span<std::byte, kMinSize> b) const noexcept {
    b[0] = std::byte{static_cast<std::uint8_t>((version << 4) | (ihl & 0x0f))};
    b[1] = std::byte{tos};
    store_be16(b.data() + 2, total_length);
    store_be16(b.data() + 4, id);
    store_be16(b.data() + 6, flags_offset);
    b[8] = std::byte{ttl};
    b[9] = std::byte{protocol};
    store_be16(b.data() + 10, checksum);
    store_be32(b.data() + 12, src.value);
    store_be32(b.data() + 16, dst.value);
  }
};

// Header checksum over a whole header (options included) whose checksum field
// is zero, stored into the field. RFC 791: one's complement of the one's
// complement sum of the header's 16-bit words.
inline void fill_header_checksum(std::span<std::byte> header) noexcept {
  header[10] = std::byte{0};
  header[11] = std::byte{0};
  std::uint16_t c = csum::finish(csum::partial(header.data(), header.size()));
  std::memcpy(header.data() + 10, &c, 2);  // finish() is in memory order
}

// A received header (options included) is intact when its sum folds to zero.
inline bool header_checksum_ok(std::span<const std::byte> header) noexcept {
  return csum::finish(csum::partial(header.data(), header.size())) == 0;
}

}  // namespace xk::ipv4

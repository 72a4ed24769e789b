#pragma once
// ICMP message header (RFC 792), read and written by value.
//
//    0                   1                   2                   3
//   +---------------+---------------+-------------------------------+
//   |     Type      |     Code      |          Checksum             |
//   +---------------+---------------+-------------------------------+
//   |            rest of header (meaning depends on type)           |
//   +---------------------------------------------------------------+
//
// rest: echo -> identifier (high 16) and sequence (low 16); destination
// unreachable code 4 -> next-hop MTU in the low 16 bits (RFC 1191); other
// errors -> unused (zero). Errors then quote the offending IP header and at
// least the first 8 bytes of its payload.

#include <cstddef>
#include <cstdint>
#include <span>

#include "xk/byteorder.hpp"

namespace xk::icmp {

inline constexpr std::uint8_t kEchoReply = 0;
inline constexpr std::uint8_t kDestUnreachable = 3;
inline constexpr std::uint8_t kSourceQuench = 4;
inline constexpr std::uint8_t kRedirect = 5;
inline constexpr std::uint8_t kEchoRequest = 8;
inline constexpr std::uint8_t kTimeExceeded = 11;
inline constexpr std::uint8_t kParamProblem = 12;

// Destination unreachable codes.
inline constexpr std::uint8_t kNetUnreachable = 0;
inline constexpr std::uint8_t kHostUnreachable = 1;
inline constexpr std::uint8_t kProtoUnreachable = 2;
inline constexpr std::uint8_t kPortUnreachable = 3;
inline constexpr std::uint8_t kFragNeeded = 4;

// Error messages, which are never answered with another error (RFC 1122 3.2.2).
inline constexpr bool is_error(std::uint8_t type) noexcept {
  return type == kDestUnreachable || type == kSourceQuench || type == kRedirect || type == kTimeExceeded ||
         type == kParamProblem;
}

struct Header {
  static constexpr std::size_t kSize = 8;
  std::uint8_t type = 0;
  std::uint8_t code = 0;
  std::uint16_t checksum = 0;  // as the big-endian field reads
  std::uint32_t rest = 0;

  std::uint16_t identifier() const noexcept { return static_cast<std::uint16_t>(rest >> 16); }
  std::uint16_t sequence() const noexcept { return static_cast<std::uint16_t>(rest); }
  std::uint16_t next_hop_mtu() const noexcept { return static_cast<std::uint16_t>(rest); }

  static Header read(std::span<const std::byte, kSize> b) noexcept {
    return Header{std::to_integer<std::uint8_t>(b[0]), std::to_integer<std::uint8_t>(b[1]), load_be16(b.data() + 2),
                  load_be32(b.data() + 4)};
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    b[0] = std::byte{type};
    b[1] = std::byte{code};
    store_be16(b.data() + 2, checksum);
    store_be32(b.data() + 4, rest);
  }
};

}  // namespace xk::icmp

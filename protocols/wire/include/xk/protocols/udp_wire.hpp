#pragma once
// Wire format of UDP (RFC 768), apart from its logic (docs/style.md).
//
//   0               1               2               3
//   +-------------------------------+-------------------------------+
//   |          source port          |       destination port        |
//   +-------------------------------+-------------------------------+
//   |            length             |           checksum            |
//   +-------------------------------+-------------------------------+
//
// length: header plus data, in bytes (so at least 8). checksum: over the IPv4
// pseudo-header, the header and the data; 0 means "not computed".

#include <cstddef>
#include <cstdint>
#include <span>

#include "xk/byteorder.hpp"

namespace xk::udp {

inline constexpr std::uint8_t kIpProtocol = 17;

struct Header {
  static constexpr std::size_t kSize = 8;
  static constexpr std::size_t kChecksumOffset = 6;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  std::uint16_t length = 0;
  std::uint16_t checksum = 0;  // host order, as loaded; only its zero-ness matters here

  static Header read(std::span<const std::byte, kSize> b) noexcept {
    return Header{load_be16(b.data()), load_be16(b.data() + 2), load_be16(b.data() + 4),
                  load_be16(b.data() + 6)};
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    store_be16(b.data(), src_port);
    store_be16(b.data() + 2, dst_port);
    store_be16(b.data() + 4, length);
    store_be16(b.data() + 6, checksum);
  }
};

}  // namespace xk::udp

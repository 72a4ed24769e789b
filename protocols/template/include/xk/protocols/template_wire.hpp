#pragma once
// Wire format of the template protocol, apart from its logic (docs/style.md).
//
//   0                   1                   2                   3
//   +-------------------------------+-------------------------------+
//   |              tag              |            length             |
//   +-------------------------------+-------------------------------+
//
// tag: which session (like a port); length: header plus payload, in bytes.

#include <cstddef>
#include <cstdint>
#include <span>

#include "xk/byteorder.hpp"

namespace xk::tmpl {

struct Header {
  static constexpr std::size_t kSize = 4;
  std::uint16_t tag = 0;
  std::uint16_t length = 0;

  static Header read(std::span<const std::byte, kSize> b) noexcept {
    return Header{load_be16(b.data()), load_be16(b.data() + 2)};
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    store_be16(b.data(), tag);
    store_be16(b.data() + 2, length);
  }
};

}  // namespace xk::tmpl

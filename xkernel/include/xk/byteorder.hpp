#pragma once
// Big-endian loads and stores for wire formats. Headers are parsed by value
// with these (never by casting a struct onto the frame), so alignment and
// padding never matter.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace xk {

inline std::uint16_t load_be16(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return __builtin_bswap16(v);
}
inline std::uint32_t load_be32(const std::byte* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}
inline void store_be16(std::byte* p, std::uint16_t v) noexcept {
  v = __builtin_bswap16(v);
  std::memcpy(p, &v, 2);
}
inline void store_be32(std::byte* p, std::uint32_t v) noexcept {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}

}  // namespace xk

#include "xk/filterd/filter_hash.hpp"

#include <bit>
#include <random>

namespace xk::filterd {
namespace {

std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

struct SipState {
  std::uint64_t v0, v1, v2, v3;
  void round() noexcept {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }
  void compress(std::uint64_t m) noexcept {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace

HashKey random_hash_key() {
  std::random_device rd;
  HashKey key{};
  for (std::size_t i = 0; i < key.size(); i += 4) {
    std::uint32_t r = rd();
    for (std::size_t j = 0; j < 4; ++j) key[i + j] = static_cast<std::byte>(r >> (8 * j));
  }
  return key;
}

std::uint64_t siphash24(const HashKey& key, std::span<const std::byte> msg) noexcept {
  const std::uint64_t k0 = load_le64(key.data());
  const std::uint64_t k1 = load_le64(key.data() + 8);
  SipState s{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
             k1 ^ 0x7465646279746573ull};
  const std::size_t n = msg.size();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) s.compress(load_le64(msg.data() + i));
  // The last word: the remaining bytes, little-endian, with the length's low
  // byte on top.
  std::uint64_t last = static_cast<std::uint64_t>(n & 0xff) << 56;
  for (std::size_t j = 0; i + j < n; ++j) last |= std::to_integer<std::uint64_t>(msg[i + j]) << (8 * j);
  s.compress(last);
  s.v2 ^= 0xff;
  for (int r = 0; r < 4; ++r) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace xk::filterd

#include "xk/hash.hpp"

#include <bit>
#include <cstring>

namespace xk {
namespace {

std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// The state: four 64-bit words mixed by SipRound.
struct SipState {
  std::uint64_t v0, v1, v2, v3;

  void round() noexcept {
    v0 += v1;
    v1 = std::rotl(v1, 13) ^ v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16) ^ v2;
    v0 += v3;
    v3 = std::rotl(v3, 21) ^ v0;
    v2 += v1;
    v1 = std::rotl(v1, 17) ^ v2;
    v2 = std::rotl(v2, 32);
  }
  // Two compression rounds per message word: the "2" of SipHash-2-4.
  void absorb(std::uint64_t m) noexcept {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace

std::uint64_t siphash24(const SipKey& key, std::span<const std::byte> msg) noexcept {
  const std::uint64_t k0 = load_le64(key.data());
  const std::uint64_t k1 = load_le64(key.data() + 8);
  // The initial constants spell "somepseudorandomlygeneratedbytes".
  SipState s{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
             k1 ^ 0x7465646279746573ull};
  const std::size_t whole = msg.size() & ~std::size_t{7};
  for (std::size_t i = 0; i < whole; i += 8) s.absorb(load_le64(msg.data() + i));
  // Last word: the 0..7 remaining bytes, zero padding, the length mod 256 on top.
  std::byte last[8] = {};
  if (msg.size() > whole) std::memcpy(last, msg.data() + whole, msg.size() - whole);
  last[7] = std::byte{static_cast<std::uint8_t>(msg.size())};
  s.absorb(load_le64(last));
  // Four finalization rounds: the "4".
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace xk

// The test stream (include/xk/apps/stream.hpp).

#include "xk/apps/stream.hpp"

#include <cstring>

#include "xk/sha256.hpp"

namespace xk::apps {

std::vector<std::byte> stream_block(std::uint64_t seed) {
  std::vector<std::byte> block(kStreamBlockSize);
  for (std::uint32_t c = 0; c < kStreamBlockSize / 32; ++c) {
    std::byte in[12];
    for (int i = 0; i < 8; ++i) in[i] = std::byte(static_cast<unsigned char>(seed >> (8 * i)));
    for (int i = 0; i < 4; ++i) in[8 + i] = std::byte(static_cast<unsigned char>(c >> (8 * i)));
    Sha256::Digest d = Sha256::of(in);
    std::memcpy(block.data() + std::size_t{c} * 32, d.data(), 32);
  }
  return block;
}

}  // namespace xk::apps

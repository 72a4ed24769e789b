// The test stream (include/xk/apps/stream.hpp).

#include "xk/apps/stream.hpp"

#include <openssl/evp.h>

#include <cstring>
#include <stdexcept>

namespace xk::apps {

std::vector<std::byte> stream_block(std::uint64_t seed) {
  std::vector<std::byte> block(kStreamBlockSize);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr;
  for (std::uint32_t c = 0; ok && c < kStreamBlockSize / 32; ++c) {
    unsigned char in[12];
    for (int i = 0; i < 8; ++i) in[i] = static_cast<unsigned char>(seed >> (8 * i));
    for (int i = 0; i < 4; ++i) in[8 + i] = static_cast<unsigned char>(c >> (8 * i));
    unsigned int len = 0;
    ok = EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 && EVP_DigestUpdate(ctx, in, sizeof in) == 1 &&
         EVP_DigestFinal_ex(ctx, reinterpret_cast<unsigned char*>(block.data()) + std::size_t{c} * 32, &len) == 1 &&
         len == 32;
  }
  EVP_MD_CTX_free(ctx);
  if (!ok) throw std::runtime_error("SHA-256 from libcrypto failed");
  return block;
}

}  // namespace xk::apps

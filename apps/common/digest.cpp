// SHA-256 of a stream through OpenSSL's EVP interface (xk/apps/digest.hpp).
#include "xk/apps/digest.hpp"

#include <openssl/evp.h>

#include <stdexcept>
#include <utility>

namespace xk::apps {

StreamDigest::StreamDigest() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw std::runtime_error("OpenSSL: cannot start a SHA-256 digest");
  }
}

StreamDigest::~StreamDigest() { EVP_MD_CTX_free(ctx_); }

StreamDigest::StreamDigest(StreamDigest&& o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)) {}

StreamDigest& StreamDigest::operator=(StreamDigest&& o) noexcept {
  if (this != &o) {
    EVP_MD_CTX_free(ctx_);
    ctx_ = std::exchange(o.ctx_, nullptr);
  }
  return *this;
}

void StreamDigest::update(std::span<const std::byte> data) noexcept {
  if (!data.empty()) (void)EVP_DigestUpdate(ctx_, data.data(), data.size());
}

std::string StreamDigest::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_, md, &n) != 1 || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: SHA-256 digest failed");
  }
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned int i = 0; i < n; ++i) {
    out += digits[md[i] >> 4];
    out += digits[md[i] & 15];
  }
  return out;
}

}  // namespace xk::apps

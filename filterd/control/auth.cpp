// HMAC-SHA256 proofs of the control token (xk/filterd/auth.hpp).
#include "xk/filterd/auth.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

namespace xk::filterd::ctl {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) noexcept { return std::as_bytes(std::span(s.data(), s.size())); }

// Domain separation: a proof says which side made it.
constexpr std::string_view kServerLabel = "xk-filterd control v1: filterd proves the token";
constexpr std::string_view kNodeLabel = "xk-filterd control v1: the node proves the token";

}  // namespace

Proof hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts) noexcept {
  // RFC 2104 HMAC with SHA-256, from OpenSSL's libcrypto.
  Proof out{};
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
  // An empty key is a valid HMAC key; OpenSSL wants a non-null pointer for it.
  static const unsigned char kNoKey = 0;
  const auto* k = key.empty() ? &kNoKey : reinterpret_cast<const unsigned char*>(key.data());
  bool ok = ctx != nullptr && EVP_MAC_init(ctx, k, key.size(), params) == 1;
  for (std::span<const std::byte> p : parts) {
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  }
  std::size_t len = 0;
  ok = ok && EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) == 1 && len == out.size();
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  // Without libcrypto's HMAC nothing can be proved: an all-zero proof, which
  // no peer's real proof equals, refuses the peer rather than crash.
  if (!ok) out.fill(std::byte{0});
  return out;
}

Proof server_proof(std::span<const std::byte> token, const Nonce& node_nonce, const Nonce& filterd_nonce) noexcept {
  return hmac_sha256(token, {bytes_of(kServerLabel), node_nonce, filterd_nonce});
}

Proof node_proof(std::span<const std::byte> token, const Nonce& node_nonce, const Nonce& filterd_nonce) noexcept {
  return hmac_sha256(token, {bytes_of(kNodeLabel), node_nonce, filterd_nonce});
}

bool proofs_equal(const Proof& a, const Proof& b) noexcept {
  unsigned diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ b[i]);
  return diff == 0;
}

Nonce fresh_nonce() {
  Nonce n{};
  std::size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<std::size_t>(r);
  }
  return n;
}

}  // namespace xk::filterd::ctl

// HMAC-SHA256 proofs of the control token (xk/filterd/auth.hpp).
#include "xk/filterd/auth.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "xk/sha256.hpp"

namespace xk::filterd::ctl {
namespace {

constexpr std::size_t kBlock = 64;  // SHA-256's block size

std::span<const std::byte> bytes_of(std::string_view s) noexcept { return std::as_bytes(std::span(s.data(), s.size())); }

// Domain separation: a proof says which side made it.
constexpr std::string_view kServerLabel = "xk-filterd control v1: filterd proves the token";
constexpr std::string_view kNodeLabel = "xk-filterd control v1: the node proves the token";

}  // namespace

Proof hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts) noexcept {
  // RFC 2104: a key longer than the block is hashed first; then
  // H((K ^ opad) || H((K ^ ipad) || message)).
  std::array<std::byte, kBlock> k{};
  if (key.size() > kBlock) {
    const Sha256::Digest d = Sha256::of(key);
    std::memcpy(k.data(), d.data(), d.size());
  } else if (!key.empty()) {
    std::memcpy(k.data(), key.data(), key.size());
  }
  std::array<std::byte, kBlock> pad{};
  for (std::size_t i = 0; i < kBlock; ++i) pad[i] = k[i] ^ std::byte{0x36};
  Sha256 inner;
  inner.update(pad);
  for (std::span<const std::byte> p : parts) inner.update(p);
  const Sha256::Digest inner_digest = inner.digest();
  for (std::size_t i = 0; i < kBlock; ++i) pad[i] = k[i] ^ std::byte{0x5c};
  Sha256 outer;
  outer.update(pad);
  outer.update(inner_digest);
  return outer.digest();
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

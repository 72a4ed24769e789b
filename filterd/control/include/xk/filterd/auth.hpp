#pragma once
// Proving knowledge of filterd's token without sending it (docs/control-
// protocol.md, "Proving the token"). Over TCP the node opens with AUTH and a
// fresh nonce; filterd answers AUTH_REPLY with a fresh nonce of its own and
// its proof; the node checks that, then sends HELLO with its proof. Each
// proof is HMAC-SHA256 (RFC 2104) keyed with the token over a label that
// says who proves, and both nonces -- so a proof is good for one connection
// only, and neither side's proof can be reflected back as the other's.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>

namespace xk::filterd::ctl {

inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kProofSize = 32;
using Nonce = std::array<std::byte, kNonceSize>;
using Proof = std::array<std::byte, kProofSize>;

// HMAC-SHA256 of the concatenated parts.
Proof hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts) noexcept;

// filterd's proof (in AUTH_REPLY) and the node's (in HELLO).
Proof server_proof(std::span<const std::byte> token, const Nonce& node_nonce, const Nonce& filterd_nonce) noexcept;
Proof node_proof(std::span<const std::byte> token, const Nonce& node_nonce, const Nonce& filterd_nonce) noexcept;

// Compares in time that depends on the length only.
bool proofs_equal(const Proof& a, const Proof& b) noexcept;

// A nonce from the kernel's random source (getrandom); throws if it fails.
Nonce fresh_nonce();

}  // namespace xk::filterd::ctl

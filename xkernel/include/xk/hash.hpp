#pragma once
// The hashes every layer shares (one implementation each):
// - SipHash-2-4 (Aumasson and Bernstein, 2012): the keyed hash behind TCP's
//   initial sequence numbers and SYN cookies (RFC 6528) and filterd's group
//   listeners. Keyed, so a remote peer cannot choose inputs that collide.
// - mix64: the demux maps' and filterd's rendezvous finalizer.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace xk {

// A 128-bit key, read as two little-endian 64-bit words, as the paper defines.
using SipKey = std::array<std::byte, 16>;

std::uint64_t siphash24(const SipKey& key, std::span<const std::byte> msg) noexcept;

// A 64-bit finalizer (multiply-xorshift): a bijection in which every input
// bit affects every output bit. The demux maps hash keys with it; filterd's
// rendezvous hashing scores a group member with mix64(flow_hash ^ member_seed).
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

}  // namespace xk

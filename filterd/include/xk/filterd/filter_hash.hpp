#pragma once
// The keyed hash behind filterd's group listeners: SipHash-2-4 (Aumasson and
// Bernstein, 2012). Keyed, so a remote peer cannot pick 4-tuples that all
// land on one member of a group.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace xk::filterd {

// A 128-bit SipHash key; its bytes are read as two little-endian 64-bit words,
// as the paper defines.
using HashKey = std::array<std::byte, 16>;

// 16 bytes from std::random_device. Configuration time only (may throw).
HashKey random_hash_key();

std::uint64_t siphash24(const HashKey& key, std::span<const std::byte> msg) noexcept;

// A 64-bit finalizer (multiply-xorshift): a bijection in which every input bit
// affects every output bit. Rendezvous hashing scores a member with
// mix64(flow_hash ^ member_seed).
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

}  // namespace xk::filterd

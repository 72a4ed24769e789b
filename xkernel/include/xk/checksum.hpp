#pragma once
// The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//
// A checksum is built in two steps. partial() adds up 16-bit words as they lie
// in memory into an unfolded 32-bit sum; sums of separate pieces combine with
// add() (or combine() when a piece starts at an odd offset). finish() folds the
// sum to 16 bits and complements it. Because the one's complement sum does not
// depend on byte order (RFC 1071 section 2(B)), nothing is byte-swapped: the
// value finish() returns, stored with memcpy, puts the checksum bytes in
// network order on any host.
//
// partial() runs the fastest kernel this CPU has (AVX2, SSE2 or portable C++),
// chosen once at the first call. implementation() gives each kernel by name so
// tests and benchmarks can run all of them.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "xk/address.hpp"
#include "xk/result.hpp"

namespace xk {

class Msg;

namespace csum {

// An unfolded one's complement sum. Any value is valid input to fold(); only the
// sum of all-zero data (or of nothing) is 0.
using PartialFn = std::uint32_t (*)(const void* data, std::size_t len,
                                    std::uint32_t sum) noexcept;

// Sum of the bytes [data, data+len) taken as 16-bit words in memory order (an
// odd last byte is padded with a zero byte), added to `sum`. Any alignment and
// any length; the result is exact for every length a size_t can hold.
std::uint32_t partial(const void* data, std::size_t len, std::uint32_t sum = 0) noexcept;

enum class Impl : std::uint8_t { scalar, sse2, avx2 };

// The kernel for `impl`, or nullptr when this CPU (or build) cannot run it.
PartialFn implementation(Impl impl) noexcept;
// The kernel partial() uses.
Impl selected() noexcept;
const char* to_string(Impl impl) noexcept;

// One's complement addition of two partial sums.
constexpr std::uint32_t add(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint32_t s = a + b;
  return s + (s < a ? 1u : 0u);  // end-around carry
}

// Fold a partial sum to 16 bits. The result is 0 only for a sum of zeros.
constexpr std::uint16_t fold(std::uint32_t sum) noexcept {
  sum = (sum & 0xffffu) + (sum >> 16);
  sum = (sum & 0xffffu) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

// The checksum field value: the complemented folded sum, in memory order.
constexpr std::uint16_t finish(std::uint32_t sum) noexcept {
  return static_cast<std::uint16_t>(~fold(sum));
}

// Add `block` (the partial sum of bytes that start `offset` bytes into the
// checksummed data) to `sum`. A block at an odd offset pairs its bytes the
// other way round, so its sum is byte-swapped first (RFC 1071 section 2(B)).
// Rotating the 32-bit sum by 8 is that swap modulo 0xffff.
constexpr std::uint32_t combine(std::uint32_t sum, std::uint32_t block,
                                std::size_t offset) noexcept {
  return add(sum, (offset & 1) != 0 ? std::rotl(block, 8) : block);
}

// Incremental update, RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'). `check` is the
// stored checksum, `old_value`/`new_value` the field before and after. All three
// must be in the same byte order (all as loaded from memory, or all host order
// values of the big-endian fields); the result is in that order too. The field
// must start at an even offset of the checksummed data. Equal to a full
// recompute unless the checksummed data is all zero (never true of a header).
constexpr std::uint16_t update16(std::uint16_t check, std::uint16_t old_value,
                                 std::uint16_t new_value) noexcept {
  std::uint32_t s = static_cast<std::uint16_t>(~check);
  s += static_cast<std::uint16_t>(~old_value);
  s += new_value;
  return finish(s);
}

// As update16 for a 32-bit field (an address, a sequence number).
constexpr std::uint16_t update32(std::uint16_t check, std::uint32_t old_value,
                                 std::uint32_t new_value) noexcept {
  std::uint32_t s = static_cast<std::uint16_t>(~check);
  s += static_cast<std::uint16_t>(~(old_value >> 16));
  s += static_cast<std::uint16_t>(~old_value);
  s += new_value >> 16;
  s += new_value & 0xffffu;
  return finish(s);
}

// As update16 for a field of any length: the bytes were `old_bytes` and are now
// `new_bytes` (same size). `check` is as loaded from memory.
std::uint16_t update(std::uint16_t check, std::span<const std::byte> old_bytes,
                     std::span<const std::byte> new_bytes) noexcept;

// Partial sum of the IPv4 pseudo-header (RFC 793 section 3.1, RFC 768): source,
// destination, zero, protocol, and the TCP/UDP length. Addresses in host order
// (as Ipv4Addr holds them); the sum is in memory order, ready to add() to the
// partial sum of the segment.
constexpr std::uint32_t pseudo_header_v4(Ipv4Addr src, Ipv4Addr dst, std::uint8_t proto,
                                         std::uint16_t length) noexcept {
  std::uint32_t s = (src.value >> 16) + (src.value & 0xffffu) + (dst.value >> 16) +
                    (dst.value & 0xffffu) + proto + length;
  // s is the sum of host-order values of big-endian words; on a little-endian
  // host the words in memory are byte-swapped, and so is their sum.
  if constexpr (std::endian::native == std::endian::little) s = std::rotl(s, 8);
  return s;
}

// The same for either family: IPv4's above when both addresses are IPv4,
// else IPv6's (RFC 8200 8.1: source, destination, the upper-layer length as
// 32 bits, three zero bytes, the next header).
constexpr std::uint32_t pseudo_header(const IpAddr& src, const IpAddr& dst, std::uint8_t proto,
                                      std::uint32_t length) noexcept {
  if (src.is_v4() && dst.is_v4()) {
    return pseudo_header_v4(src.v4(), dst.v4(), proto, static_cast<std::uint16_t>(length));
  }
  std::uint32_t s = (length >> 16) + (length & 0xffffu) + proto;
  for (const IpAddr* a : {&src, &dst}) {
    for (std::size_t i = 0; i < 16; i += 2) s += std::uint32_t{a->bytes()[i]} << 8 | a->bytes()[i + 1];
  }
  if constexpr (std::endian::native == std::endian::little) s = std::rotl(s, 8);
  return s;
}

// Partial sum over a whole message: fragments of any length (odd, zero) join as
// one contiguous run of bytes would.
std::uint32_t partial(const Msg& msg, std::uint32_t sum = 0) noexcept;
// Partial sum of the bytes [off, off+len) of a message, as if they started at
// an even offset. out_of_range if the range runs past the end.
Result<std::uint32_t> partial(const Msg& msg, std::size_t off, std::size_t len,
                              std::uint32_t sum = 0) noexcept;

// Does in software what a transmit request (Offload::tx_udp_csum or
// tx_tcp_csum) asked of the port, for an IP layer that finds no port to
// ask -- a packet to itself, or one it must fragment: the checksum field
// of the transport segment `payload` holds the pseudo-header sum, so the
// sum over the whole segment, complemented, is the checksum. Clears the
// request; invalid_argument if the segment is too short to have the field.
Status finish_requested(Msg& payload);

}  // namespace csum
}  // namespace xk

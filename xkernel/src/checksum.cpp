#include "xk/checksum.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "xk/msg.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#define XK_CSUM_X86 1
#endif

// Every kernel computes the exact integer sum of the 16-bit words (in wide
// accumulators) and folds it to 32 bits with end-around carries at the end.
// Folding keeps the value modulo 0xffff and never turns a nonzero sum into 0,
// so all kernels give the same fold() for the same bytes, +0 and -0 included.

namespace xk::csum {
namespace {

__extension__ using U128 = unsigned __int128;

template <class T>
[[gnu::always_inline]] inline T load(const unsigned char* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// 2^32 = 1 (mod 0xffff), so adding the high half to the low half keeps the value.
constexpr std::uint32_t fold64(std::uint64_t s) noexcept {
  s = (s & 0xffffffffu) + (s >> 32);
  s = (s & 0xffffffffu) + (s >> 32);
  return static_cast<std::uint32_t>(s);
}

// 2^64 = 1 (mod 0xffff) likewise.
constexpr std::uint64_t fold128(U128 s) noexcept {
  U128 t = (s & 0xffffffffffffffffu) + (s >> 64);
  t = (t & 0xffffffffffffffffu) + (t >> 64);
  return static_cast<std::uint64_t>(t);
}

// Sum of fewer than 32 bytes that start at an even offset. A lone last byte is
// the first byte of a word whose second byte is zero, in either byte order.
[[gnu::always_inline]] inline std::uint64_t sum_tail(const unsigned char* p,
                                                     std::size_t len) noexcept {
  std::uint64_t s = 0;
  if ((len & 16) != 0) {
    std::uint64_t a = load<std::uint64_t>(p);
    std::uint64_t b = load<std::uint64_t>(p + 8);
    s += (a & 0xffffffffu) + (a >> 32) + (b & 0xffffffffu) + (b >> 32);
    p += 16;
  }
  if ((len & 8) != 0) {
    std::uint64_t a = load<std::uint64_t>(p);
    s += (a & 0xffffffffu) + (a >> 32);
    p += 8;
  }
  if ((len & 4) != 0) {
    s += load<std::uint32_t>(p);
    p += 4;
  }
  if ((len & 2) != 0) {
    s += load<std::uint16_t>(p);
    p += 2;
  }
  if ((len & 1) != 0) {
    std::uint16_t last = 0;
    std::memcpy(&last, p, 1);
    s += last;
  }
  return s;
}

// Portable kernel: 64-bit words into 128-bit accumulators (add + adc), four
// independent chains so the adds overlap.
std::uint32_t partial_scalar(const void* data, std::size_t len, std::uint32_t sum) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  U128 a0 = sum, a1 = 0, a2 = 0, a3 = 0;
  while (len >= 32) {
    a0 += load<std::uint64_t>(p);
    a1 += load<std::uint64_t>(p + 8);
    a2 += load<std::uint64_t>(p + 16);
    a3 += load<std::uint64_t>(p + 24);
    p += 32;
    len -= 32;
  }
  // Each accumulator stays below 2^123 for any size_t length: no overflow.
  std::uint64_t s = fold64(fold128(a0 + a1));
  s += fold64(fold128(a2 + a3));
  return fold64(s + sum_tail(p, len));
}

#if XK_CSUM_X86

// The SIMD kernels use pmaddwd, which multiplies signed 16-bit words by 1 and
// adds neighbours into 32-bit lanes. Flipping the top bit of each word first
// turns unsigned w into signed w - 32768 exactly, so each lane receives
// (w0 + w1 - 65536); the bias is added back per block. Per vector that is
// three instructions (xor, madd, add) and no carries to track.
//
// A loop turn reads eight vectors into four accumulators. A lane moves by at
// most 65536 per vector, and a block is limited to kBlockTurns turns so that
// the four accumulators, added together, still fit a signed 32-bit lane: with
// the tail (at most seven more vectors) that is 4 * 2 * 4095 + 7 = 32767
// vectors, and 32767 * 65536 < 2^31.
constexpr std::size_t kBlockTurns = 4095;

// Bias owed by a block: 65536 for every 32-bit lane result, one per 4 bytes.
constexpr std::int64_t bias_for(std::size_t bytes) noexcept {
  return static_cast<std::int64_t>(bytes) * 16384;
}

[[gnu::always_inline]] inline __m128i step_sse2(__m128i acc, const unsigned char* p) noexcept {
  const __m128i flip = _mm_set1_epi16(static_cast<short>(0x8000));
  __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm_add_epi32(acc, _mm_madd_epi16(_mm_xor_si128(w, flip), _mm_set1_epi16(1)));
}

std::uint32_t partial_sse2(const void* data, std::size_t len, std::uint32_t sum) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t total = sum;
  while (len >= 16) {
    std::size_t turns = std::min(len / 128, kBlockTurns);
    __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
    for (std::size_t i = 0; i < turns; ++i) {
      a0 = step_sse2(a0, p);
      a1 = step_sse2(a1, p + 16);
      a2 = step_sse2(a2, p + 32);
      a3 = step_sse2(a3, p + 48);
      a0 = step_sse2(a0, p + 64);
      a1 = step_sse2(a1, p + 80);
      a2 = step_sse2(a2, p + 96);
      a3 = step_sse2(a3, p + 112);
      p += 128;
    }
    std::size_t bytes = turns * 128;
    len -= bytes;
    if (len < 128) {  // up to seven whole vectors left
      if (len >= 64) {
        a0 = step_sse2(a0, p);
        a1 = step_sse2(a1, p + 16);
        a2 = step_sse2(a2, p + 32);
        a3 = step_sse2(a3, p + 48);
        p += 64;
        len -= 64;
        bytes += 64;
      }
      if (len >= 16) a0 = step_sse2(a0, p);
      if (len >= 32) a1 = step_sse2(a1, p + 16);
      if (len >= 48) a2 = step_sse2(a2, p + 32);
      std::size_t rest = len & ~std::size_t{15};
      p += rest;
      len -= rest;
      bytes += rest;
    }
    __m128i a = _mm_add_epi32(_mm_add_epi32(a0, a1), _mm_add_epi32(a2, a3));
    alignas(16) std::int32_t lanes[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), a);
    std::int64_t block = std::int64_t{lanes[0]} + lanes[1] + lanes[2] + lanes[3] + bias_for(bytes);
    total += static_cast<std::uint64_t>(block);
  }
  return fold64(total + sum_tail(p, len));
}

[[gnu::target("avx2"), gnu::always_inline]] inline __m256i step_avx2(
    __m256i acc, const unsigned char* p) noexcept {
  const __m256i flip = _mm256_set1_epi16(static_cast<short>(0x8000));
  __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_xor_si256(w, flip), _mm256_set1_epi16(1)));
}

[[gnu::target("avx2")]] std::uint32_t partial_avx2(const void* data, std::size_t len,
                                                    std::uint32_t sum) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  if (len < 128) {
    // Short buffers (headers, small packets): at most three vectors, whose
    // eight lanes add up in 32 bits without the block bookkeeping below.
    __m256i a = _mm256_setzero_si256();
    if (len >= 32) a = step_avx2(a, p);
    if (len >= 64) a = step_avx2(a, p + 32);
    if (len >= 96) a = step_avx2(a, p + 64);
    std::size_t bytes = len & ~std::size_t{31};
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    std::int64_t block = _mm_cvtsi128_si32(h) + bias_for(bytes);
    return fold64(std::uint64_t{sum} + static_cast<std::uint64_t>(block) +
                  sum_tail(p + bytes, len - bytes));
  }
  std::uint64_t total = sum;
  while (len >= 32) {
    std::size_t turns = std::min(len / 256, kBlockTurns);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (std::size_t i = 0; i < turns; ++i) {
      a0 = step_avx2(a0, p);
      a1 = step_avx2(a1, p + 32);
      a2 = step_avx2(a2, p + 64);
      a3 = step_avx2(a3, p + 96);
      a0 = step_avx2(a0, p + 128);
      a1 = step_avx2(a1, p + 160);
      a2 = step_avx2(a2, p + 192);
      a3 = step_avx2(a3, p + 224);
      p += 256;
    }
    std::size_t bytes = turns * 256;
    len -= bytes;
    if (len < 256) {  // up to seven whole vectors left
      if (len >= 128) {
        a0 = step_avx2(a0, p);
        a1 = step_avx2(a1, p + 32);
        a2 = step_avx2(a2, p + 64);
        a3 = step_avx2(a3, p + 96);
        p += 128;
        len -= 128;
        bytes += 128;
      }
      if (len >= 32) a0 = step_avx2(a0, p);
      if (len >= 64) a1 = step_avx2(a1, p + 32);
      if (len >= 96) a2 = step_avx2(a2, p + 64);
      std::size_t rest = len & ~std::size_t{31};
      p += rest;
      len -= rest;
      bytes += rest;
    }
    __m256i a = _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3));
    // Sign-extend the eight lanes to 64 bits and add them up.
    __m256i wide = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(a)),
                                    _mm256_cvtepi32_epi64(_mm256_extracti128_si256(a, 1)));
    __m128i half = _mm_add_epi64(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
    half = _mm_add_epi64(half, _mm_unpackhi_epi64(half, half));
    std::int64_t block = _mm_cvtsi128_si64(half) + bias_for(bytes);
    total += static_cast<std::uint64_t>(block);
  }
  return fold64(total + sum_tail(p, len));
}

bool cpu_has_avx2() noexcept {
  __builtin_cpu_init();  // may run before the constructors that would call it
  return __builtin_cpu_supports("avx2") != 0;
}

Impl best_impl() noexcept { return cpu_has_avx2() ? Impl::avx2 : Impl::sse2; }

#else

Impl best_impl() noexcept { return Impl::scalar; }

#endif

std::uint32_t resolve_and_run(const void* data, std::size_t len, std::uint32_t sum) noexcept;

// The kernel partial() calls. Starts at a resolver that installs the best
// kernel on first use; a race only makes two threads store the same pointer.
std::atomic<PartialFn> g_partial{&resolve_and_run};

std::uint32_t resolve_and_run(const void* data, std::size_t len, std::uint32_t sum) noexcept {
  PartialFn f = implementation(best_impl());
  g_partial.store(f, std::memory_order_relaxed);
  return f(data, len, sum);
}

}  // namespace

PartialFn implementation(Impl impl) noexcept {
  switch (impl) {
    case Impl::scalar: return &partial_scalar;
#if XK_CSUM_X86
    case Impl::sse2: return &partial_sse2;
    case Impl::avx2: return cpu_has_avx2() ? &partial_avx2 : nullptr;
#else
    case Impl::sse2:
    case Impl::avx2: return nullptr;
#endif
  }
  return nullptr;
}

Impl selected() noexcept {
  static const Impl impl = best_impl();
  return impl;
}

const char* to_string(Impl impl) noexcept {
  switch (impl) {
    case Impl::scalar: return "scalar";
    case Impl::sse2: return "sse2";
    case Impl::avx2: return "avx2";
  }
  return "?";
}

std::uint32_t partial(const void* data, std::size_t len, std::uint32_t sum) noexcept {
  return g_partial.load(std::memory_order_relaxed)(data, len, sum);
}

std::uint16_t update(std::uint16_t check, std::span<const std::byte> old_bytes,
                     std::span<const std::byte> new_bytes) noexcept {
  // RFC 1624 eqn. 3 with m and m' the sums of the old and new bytes.
  std::uint32_t s = static_cast<std::uint16_t>(~check);
  s = add(s, static_cast<std::uint16_t>(~fold(partial(old_bytes.data(), old_bytes.size()))));
  s = partial(new_bytes.data(), new_bytes.size(), s);
  return finish(s);
}

std::uint32_t partial(const Msg& msg, std::uint32_t sum) noexcept {
  PartialFn f = g_partial.load(std::memory_order_relaxed);
  std::size_t pos = 0;
  for (const Frag& fr : msg.fragments()) {
    if (fr.len == 0) continue;
    // A fragment at an even position continues the word pairing; one at an odd
    // position is summed alone and byte-swapped in.
    sum = (pos & 1) == 0 ? f(fr.data(), fr.len, sum) : combine(sum, f(fr.data(), fr.len, 0), 1);
    pos += fr.len;
  }
  return sum;
}

Result<std::uint32_t> partial(const Msg& msg, std::size_t off, std::size_t len,
                              std::uint32_t sum) noexcept {
  if (off > msg.size() || len > msg.size() - off) return Errc::out_of_range;
  PartialFn f = g_partial.load(std::memory_order_relaxed);
  std::size_t pos = 0;  // bytes of the range summed so far
  for (const Frag& fr : msg.fragments()) {
    if (len == 0) break;
    if (off >= fr.len) {
      off -= fr.len;
      continue;
    }
    std::size_t n = std::min<std::size_t>(fr.len - off, len);
    const std::byte* d = fr.data() + off;
    sum = (pos & 1) == 0 ? f(d, n, sum) : combine(sum, f(d, n, 0), 1);
    pos += n;
    len -= n;
    off = 0;
  }
  return sum;
}

Status finish_requested(Msg& payload) {
  const bool udp = payload.offload().has(Offload::tx_udp_csum);
  const std::size_t at = udp ? 6 : 16;  // RFC 768 / RFC 9293 3.1: the checksum field
  if (payload.size() < at + 2) return Errc::invalid_argument;
  std::uint16_t ck = finish(partial(payload));
  if (udp && ck == 0) ck = 0xffff;  // RFC 768: 0 on the wire means "none"
  // The head up to the field is rewritten through a copy, wherever the
  // message's fragments put it.
  std::array<std::byte, 18> head{};
  if (Status st = payload.copy_out(0, std::span(head).first(at + 2)); !st) return st;
  std::memcpy(head.data() + at, &ck, 2);  // already in network order, like the sum
  if (Status st = payload.trim_front(at + 2); !st) return st;
  Result<std::span<std::byte>> room = payload.push(at + 2);
  if (!room) return room.status();
  std::memcpy(room->data(), head.data(), at + 2);
  payload.offload().flags &= static_cast<std::uint8_t>(~(Offload::tx_udp_csum | Offload::tx_tcp_csum));
  return {};
}

}  // namespace xk::csum

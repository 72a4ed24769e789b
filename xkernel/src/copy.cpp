#include "xk/copy.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xk::detail {

namespace {

using CopyFn = void (*)(void*, const void*, std::size_t) noexcept;

void copy_memcpy(void* dst, const void* src, std::size_t n) noexcept { std::memcpy(dst, src, n); }

#if defined(__x86_64__)
// 128 bytes a step through four 32-byte registers: plain loads and stores,
// which the hardware prefetchers follow (the point: not `rep movsb`).
[[gnu::target("avx2")]] void copy_avx2(void* dst, const void* src, std::size_t n) noexcept {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  while (n >= 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 96), e);
    s += 128;
    d += 128;
    n -= 128;
  }
  if (n != 0) std::memcpy(d, s, n);
}
#endif

CopyFn pick() noexcept {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") != 0) return &copy_avx2;
#endif
  return &copy_memcpy;
}

}  // namespace

void copy_large(void* dst, const void* src, std::size_t n) noexcept {
  static const CopyFn copy = pick();  // (a guard: safe from static initializers too)
  copy(dst, src, n);
}

}  // namespace xk::detail

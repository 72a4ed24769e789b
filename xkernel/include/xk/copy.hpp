#pragma once
// Copying a program's bytes into the stack and out of it: the two copies a
// POSIX program's byte costs (docs/copies.md).
//
// glibc's memcpy moves large blocks with `rep movsb`, which on this
// project's machines stalls when the lines it writes or reads were last
// touched by the other core -- exactly the case of a send buffer the peer
// process has just read, or of received data another core has just
// written: bulk over the shm link ran at 75 or 115 Gbit/s from run to run
// with it, and steadily at 115 with vector loads and stores
// (docs/BENCHMARKS.md, "Our own shared-memory link"). Large copies go
// through vector registers here; small ones stay with memcpy.

#include <cstddef>
#include <cstring>

namespace xk {

namespace detail {
void copy_large(void* dst, const void* src, std::size_t n) noexcept;
}

// Below this many bytes memcpy's own small-size paths are the fastest.
inline constexpr std::size_t kLargeCopy = 2048;

// memcpy's contract (no overlap).
inline void copy_bytes(void* dst, const void* src, std::size_t n) noexcept {
  if (n < kLargeCopy) {
    std::memcpy(dst, src, n);
  } else {
    detail::copy_large(dst, src, n);
  }
}

}  // namespace xk

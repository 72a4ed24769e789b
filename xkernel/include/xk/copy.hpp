#pragma once
// Copying a program's bytes into the stack and out of it: the two copies a
// POSIX program's byte costs (docs/copies.md). Each side of the copy is
// usually memory the *other* core touched last, and the two directions want
// different loops (docs/BENCHMARKS.md, "Large copies"):
//
// - Out of the stack (copy_bytes): the source was written by the other core
//   (the peer's frame, a PMD's mbuf). glibc's memcpy moves large blocks with
//   `rep movsb`, which was seen to stall on such lines from run to run; 32-
//   byte vector loads and stores ran steadily. Large copies go through
//   vector registers here, small ones stay with memcpy.
// - Into the stack (copy_into_shared): the destination -- a send buffer's
//   chunk, a shm link's copy chunk -- was last *read* by the other core. A
//   vector store must first fetch each such line (a read for ownership, a
//   round trip between the cores per line); `rep movsb` writes whole lines
//   without fetching them. Bulk over shm, AMD EPYC, MTU 1500: 37 -> 88
//   Gbit/s with the vCPUs far apart, 86 -> 108 near.

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

// memcpy's contract (no overlap); for destinations another core has read.
inline void copy_into_shared(void* dst, const void* src, std::size_t n) noexcept { std::memcpy(dst, src, n); }

}  // namespace xk

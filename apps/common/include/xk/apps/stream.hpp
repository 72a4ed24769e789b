#pragma once
// The test stream of xk-tcp-perf and xk-ttcp: a 1 MiB block of
// SHA-256(seed as 8 little-endian bytes, counter as 4 little-endian bytes)
// outputs, repeated. tests/integration/tcp_peer.py makes the same one, so the
// SHA-256 of what one end sent and the other received can be compared
// whichever programs the two ends are.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xk::apps {

inline constexpr std::size_t kStreamBlockSize = std::size_t{1} << 20;

// One block of the stream of `seed` (kStreamBlockSize bytes); byte i of the
// stream is block[i % kStreamBlockSize].
std::vector<std::byte> stream_block(std::uint64_t seed);

}  // namespace xk::apps

#pragma once
// Counts calls to global operator new in a benchmark program, so a benchmark
// can report allocations per iteration (the framework promises zero on some
// paths). The replacement operators live in alloc_count.cpp.

#include <cstdint>

namespace xk::bench {
std::uint64_t allocations() noexcept;
}  // namespace xk::bench

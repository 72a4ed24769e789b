// Msg micro-benchmarks: what a layer pays to put on and take off its header.
//
// Target: push+pop <= 10 ns per header with zero allocations. The
// reference in the same run is the naive way a stack without headroom builds a
// frame: allocate a new buffer and copy header and payload into it.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "alloc_count.hpp"
#include "ratio.hpp"
#include "xk/msg.hpp"

namespace {

constexpr std::size_t kPayload = 1460;

// Three headers (eth 14, ip 20, tcp 20) pushed then popped: one send and one
// receive path of a TCP segment. Reported per header.
void BM_Msg_PushPopHeaders(benchmark::State& state) {
  xk::Msg m = xk::Msg::alloc(kPayload);
  std::uint64_t allocs = xk::bench::allocations();
  std::uint64_t bufs = xk::Buf::created();
  for (auto _ : state) {
    for (std::size_t n : {20u, 20u, 14u}) {
      auto h = m.push(n);
      benchmark::DoNotOptimize(h->data());
      (*h)[0] = std::byte{1};
    }
    for (std::size_t n : {14u, 20u, 20u}) {
      auto h = m.pop(n);
      benchmark::DoNotOptimize(h->data());
    }
  }
  double iters = static_cast<double>(state.iterations());
  state.counters["allocs_per_header"] =
      static_cast<double>(xk::bench::allocations() - allocs + (xk::Buf::created() - bufs)) / (iters * 3);
  // Rate of (headers / 1e9), inverted: nanoseconds per header.
  state.counters["ns_per_header"] = benchmark::Counter(iters * 3 * 1e-9, benchmark::Counter::kIsRate |
                                                                      benchmark::Counter::kInvert);
  state.SetItemsProcessed(state.iterations() * 3);
}
BENCHMARK(BM_Msg_PushPopHeaders);

// Reference: no headroom, so each header means a new buffer and a copy of
// everything behind it (what a flat-buffer stack does on the send path).
void BM_Copy_PrependHeaders(benchmark::State& state) {
  std::vector<std::byte> payload(kPayload, std::byte{7});
  for (auto _ : state) {
    std::unique_ptr<std::byte[]> cur(new std::byte[kPayload]);
    std::memcpy(cur.get(), payload.data(), kPayload);
    std::size_t len = kPayload;
    for (std::size_t n : {20u, 20u, 14u}) {
      std::unique_ptr<std::byte[]> next(new std::byte[len + n]);
      next[0] = std::byte{1};
      std::memcpy(next.get() + n, cur.get(), len);
      cur = std::move(next);
      len += n;
    }
    benchmark::DoNotOptimize(cur.get());
    // Receive side: strip the headers (pointer moves, as any stack would).
    std::byte* p = cur.get();
    for (std::size_t n : {14u, 20u, 20u}) p += n;
    benchmark::DoNotOptimize(p);
  }
  state.counters["ns_per_header"] = benchmark::Counter(static_cast<double>(state.iterations()) * 3 * 1e-9,
                                                       benchmark::Counter::kIsRate |
                                                           benchmark::Counter::kInvert);
  state.SetItemsProcessed(state.iterations() * 3);
}
BENCHMARK(BM_Copy_PrependHeaders);

// Sharing a message (retransmit queue keeps a reference) and splitting it at
// MSS boundaries: reference counts only, no copies.
void BM_Msg_ShareSplit(benchmark::State& state) {
  xk::Msg big = xk::Msg::alloc(64 * 1024);
  for (auto _ : state) {
    xk::Msg m = big.share();
    while (m.size() > kPayload) {
      auto seg = m.split(kPayload);
      benchmark::DoNotOptimize(seg->size());
      m = std::move(*seg);
    }
  }
  state.SetBytesProcessed(state.iterations() * 64 * 1024);
}
BENCHMARK(BM_Msg_ShareSplit);

}  // namespace

int main(int argc, char** argv) {
  using xk::bench::Metric;
  return xk::bench::run_with_ratios(
      argc, argv,
      {
          {"Msg push+pop per header vs copy-prepend (speed-up)", "BM_Msg_PushPopHeaders",
           "BM_Copy_PrependHeaders", Metric::counter, 1.0, "ns_per_header"},
          {"Msg push+pop ns per header (target <= 10 ns)", "BM_Msg_PushPopHeaders", "", Metric::counter,
           10.0, "ns_per_header"},
          {"Msg push+pop allocations per header (target 0)", "BM_Msg_PushPopHeaders", "",
           Metric::counter, 0.0, "allocs_per_header"},
      });
}

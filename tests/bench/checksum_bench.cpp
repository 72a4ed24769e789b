// Internet checksum throughput: each kernel, the dispatched one, and DPDK's
// rte_raw_cksum as the reference measured in the same run.
//
// Target: the dispatched checksum at least 2x rte_raw_cksum at 1500 B, 9000 B
// and 64 KB. Every iteration sums the same buffer, so the data sits in cache:
// this measures the arithmetic, not memory bandwidth (a packet being
// checksummed has normally just been written or received, so it is hot too).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ratio.hpp"
#include "xk/checksum.hpp"

#if XK_HAVE_DPDK
#include <rte_ip.h>
#endif

namespace {

constexpr std::int64_t kSizes[] = {64, 1500, 9000, 65536};

std::vector<std::byte> bench_data(std::size_t n) {
  std::mt19937 rng(42);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = std::byte(static_cast<unsigned char>(rng()));
  return v;
}

template <class Fn>
void run(benchmark::State& state, Fn&& checksum) {
  auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> data = bench_data(n);
  for (auto _ : state) {
    const std::byte* p = data.data();
    benchmark::DoNotOptimize(p);  // the compiler may not assume the same bytes each time
    std::uint16_t c = checksum(p, n);
    benchmark::DoNotOptimize(c);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_Csum_Kernel(benchmark::State& state, xk::csum::Impl impl) {
  xk::csum::PartialFn fn = xk::csum::implementation(impl);
  if (fn == nullptr) {
    state.SkipWithError("kernel not supported on this CPU");
    return;
  }
  run(state, [fn](const std::byte* p, std::size_t n) { return xk::csum::finish(fn(p, n, 0)); });
}

void BM_Csum_Auto(benchmark::State& state) {
  run(state, [](const std::byte* p, std::size_t n) {
    return xk::csum::finish(xk::csum::partial(p, n));
  });
}
BENCHMARK(BM_Csum_Auto)->ArgsProduct({{std::begin(kSizes), std::end(kSizes)}});

BENCHMARK_CAPTURE(BM_Csum_Kernel, scalar, xk::csum::Impl::scalar)
    ->ArgsProduct({{std::begin(kSizes), std::end(kSizes)}});
BENCHMARK_CAPTURE(BM_Csum_Kernel, sse2, xk::csum::Impl::sse2)
    ->ArgsProduct({{std::begin(kSizes), std::end(kSizes)}});
BENCHMARK_CAPTURE(BM_Csum_Kernel, avx2, xk::csum::Impl::avx2)
    ->ArgsProduct({{std::begin(kSizes), std::end(kSizes)}});

#if XK_HAVE_DPDK
// Reference: DPDK's raw checksum (header-only, inlined here), complemented like
// ours so both do the same job.
void BM_Csum_RteRaw(benchmark::State& state) {
  run(state, [](const std::byte* p, std::size_t n) {
    return static_cast<std::uint16_t>(~rte_raw_cksum(p, n));
  });
}
BENCHMARK(BM_Csum_RteRaw)->ArgsProduct({{std::begin(kSizes), std::end(kSizes)}});
#endif

}  // namespace

int main(int argc, char** argv) {
  std::vector<xk::bench::Ratio> ratios;
  for (std::int64_t n : kSizes) {
    std::string size = std::to_string(n);
    std::string target_note = n == 64 ? " (no target)" : "";
    ratios.push_back({"checksum " + size + " B: auto vs rte_raw_cksum" + target_note,
                      "BM_Csum_Auto/" + size, "BM_Csum_RteRaw/" + size,
                      xk::bench::Metric::bytes_per_second, n == 64 ? 0.0 : 2.0, ""});
  }
  return xk::bench::run_with_ratios(argc, argv, ratios);
}

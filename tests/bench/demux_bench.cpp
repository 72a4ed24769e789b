// Demux map micro-benchmarks: lookups of TCP-like 4-tuples among 1M sessions,
// FlatMap against std::unordered_map measured in the same run; and TCP's
// TupleMap (FourTuple keys of either family) against a bare 12-byte key.
#include <benchmark/benchmark.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "ratio.hpp"
#include "xk/demux.hpp"
#include "xk/endpoint.hpp"

namespace {

struct FourTuple {
  std::uint32_t local_ip;
  std::uint32_t remote_ip;
  std::uint16_t local_port;
  std::uint16_t remote_port;
  friend bool operator==(const FourTuple&, const FourTuple&) = default;
};

struct StdHash {
  std::size_t operator()(const FourTuple& k) const noexcept { return xk::KeyHash<FourTuple>{}(k); }
};

constexpr std::size_t kKeys = 1 << 20;  // 1M sessions
constexpr std::size_t kProbes = 1 << 16;

struct Data {
  std::vector<FourTuple> keys;
  std::vector<FourTuple> probes;  // random order, all hits
  std::vector<xk::FourTuple> wide_keys;  // the same tuples as TCP keys them
  std::vector<xk::FourTuple> wide_probes;
  Data() {
    std::mt19937_64 rng(1);
    keys.reserve(kKeys);
    for (std::size_t i = 0; i < kKeys; ++i) {
      keys.push_back(FourTuple{0xC0000201, 0xCB007100u + static_cast<std::uint32_t>(i >> 16),
                               static_cast<std::uint16_t>(5001), static_cast<std::uint16_t>(i)});
    }
    for (std::size_t i = 0; i < kProbes; ++i) probes.push_back(keys[rng() % kKeys]);
    auto wide = [](const FourTuple& k) {
      return xk::FourTuple{{xk::Ipv4Addr{k.local_ip}, k.local_port}, {xk::Ipv4Addr{k.remote_ip}, k.remote_port}};
    };
    for (const FourTuple& k : keys) wide_keys.push_back(wide(k));
    for (const FourTuple& k : probes) wide_probes.push_back(wide(k));
  }
};

const Data& data() {
  static const Data d;
  return d;
}

// Looks `probes` up in `map` in turn, one lookup an iteration.
template <class Map, class Key>
void lookups(benchmark::State& state, Map& map, const std::vector<Key>& probes) {
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(map.find(probes[i]));
    i = (i + 1) & (kProbes - 1);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_FlatMap_Lookup(benchmark::State& state) {
  const Data& d = data();
  xk::FlatMap<FourTuple, std::uint32_t> map(kKeys);
  for (std::size_t i = 0; i < kKeys; ++i) map.insert(d.keys[i], static_cast<std::uint32_t>(i));
  lookups(state, map, d.probes);
}
BENCHMARK(BM_FlatMap_Lookup);

// TCP's own map (xk::TupleMap): FourTuple keys of either family, IPv4's kept
// in 12 bytes.
void BM_TupleMap_Lookup(benchmark::State& state) {
  const Data& d = data();
  xk::TupleMap<std::uint32_t> map(kKeys);
  for (std::size_t i = 0; i < kKeys; ++i) map.insert(d.wide_keys[i], static_cast<std::uint32_t>(i));
  lookups(state, map, d.wide_probes);
}
BENCHMARK(BM_TupleMap_Lookup);

// Bursts of 32 as they come off a NIC: hash all, prefetch all, then look up.
void BM_FlatMap_BulkLookup32(benchmark::State& state) {
  const Data& d = data();
  xk::FlatMap<FourTuple, std::uint32_t> map(kKeys);
  for (std::size_t i = 0; i < kKeys; ++i) map.insert(d.keys[i], static_cast<std::uint32_t>(i));
  std::size_t i = 0;
  std::uint64_t hashes[32];
  for (auto _ : state) {
    for (std::size_t j = 0; j < 32; ++j) {
      hashes[j] = map.hash_of(d.probes[i + j]);
      map.prefetch(hashes[j]);
    }
    for (std::size_t j = 0; j < 32; ++j) benchmark::DoNotOptimize(map.find_hashed(d.probes[i + j], hashes[j]));
    i = (i + 32) & (kProbes - 1);
  }
  state.SetItemsProcessed(state.iterations() * 32);
}
BENCHMARK(BM_FlatMap_BulkLookup32);

void BM_UnorderedMap_Lookup(benchmark::State& state) {
  const Data& d = data();
  std::unordered_map<FourTuple, std::uint32_t, StdHash> map;
  map.reserve(kKeys);
  for (std::size_t i = 0; i < kKeys; ++i) map.emplace(d.keys[i], static_cast<std::uint32_t>(i));
  lookups(state, map, d.probes);
}
BENCHMARK(BM_UnorderedMap_Lookup);

// Connection churn: erase one session and insert another, at 1M live.
void BM_FlatMap_InsertErase(benchmark::State& state) {
  const Data& d = data();
  xk::FlatMap<FourTuple, std::uint32_t> map(kKeys + 1);
  for (std::size_t i = 0; i < kKeys; ++i) map.insert(d.keys[i], static_cast<std::uint32_t>(i));
  std::size_t i = 0;
  for (auto _ : state) {
    FourTuple k = d.probes[i];
    map.erase(k);
    map.insert(k, 1);
    i = (i + 1) & (kProbes - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlatMap_InsertErase);

void BM_UnorderedMap_InsertErase(benchmark::State& state) {
  const Data& d = data();
  std::unordered_map<FourTuple, std::uint32_t, StdHash> map;
  map.reserve(kKeys + 1);
  for (std::size_t i = 0; i < kKeys; ++i) map.emplace(d.keys[i], static_cast<std::uint32_t>(i));
  std::size_t i = 0;
  for (auto _ : state) {
    FourTuple k = d.probes[i];
    map.erase(k);
    map.emplace(k, 1);
    i = (i + 1) & (kProbes - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UnorderedMap_InsertErase);

}  // namespace

int main(int argc, char** argv) {
  using xk::bench::Metric;
  return xk::bench::run_with_ratios(
      argc, argv,
      {
          {"demux lookup, 1M keys: FlatMap vs std::unordered_map", "BM_FlatMap_Lookup",
           "BM_UnorderedMap_Lookup", Metric::items_per_second, 1.0, ""},
          {"demux bulk lookup (32, prefetched) vs std::unordered_map", "BM_FlatMap_BulkLookup32",
           "BM_UnorderedMap_Lookup", Metric::items_per_second, 1.0, ""},
          {"demux erase+insert, 1M keys vs std::unordered_map", "BM_FlatMap_InsertErase",
           "BM_UnorderedMap_InsertErase", Metric::items_per_second, 1.0, ""},
          {"demux lookup, TCP's TupleMap vs a bare 12-byte IPv4 key", "BM_TupleMap_Lookup",
           "BM_FlatMap_Lookup", Metric::items_per_second, 0.8, ""},
      });
}

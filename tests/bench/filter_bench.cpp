// filterd's filter engine: frames classified per second with 1M exact flows
// installed, in bursts of 32 as they come off a NIC and one by one, the frames
// in random order over all flows (a pool of 64K prebuilt frames, so the pool
// fits in the last-level cache and the table does not). The reference in the
// same run is std::unordered_map looking up the same keys, already extracted
// (no parsing); xk::FlatMap's own bulk lookup of those keys shows what parsing
// and counting add. Then the control-path rates: flow add/remove at 1M, a
// fill from empty, rule compile/remove, and the slower paths (a group
// listener's rendezvous choice, a frame matched by the 10th rule).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "alloc_count.hpp"
#include "ratio.hpp"
#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"
#include "xk/demux.hpp"
#include "xk/filterd/filter.hpp"

namespace {

using xk::Ipv4Addr;
using xk::filterd::Decision;
using xk::filterd::FilterConfig;
using xk::filterd::FilterEngine;
using xk::filterd::FlowKey;
using xk::filterd::Frame;
using xk::filterd::Proto;
using xk::filterd::Target;
using Bytes = std::vector<std::byte>;

constexpr std::size_t kFlows = 1 << 20;
constexpr std::size_t kFrames = 1 << 16;
constexpr std::size_t kBurst = 32;
constexpr Ipv4Addr kShared{0xC000020A};  // 192.0.2.10

FilterConfig bench_config() {
  FilterConfig c;
  c.shared_ip = kShared;
  c.shared_mac = xk::MacAddr{{0x02, 0, 0, 0, 0, 0x0a}};
  c.group_key = xk::filterd::HashKey{};
  return c;
}

// Flow i: 3 in 4 TCP, the rest UDP; 16K remote hosts of 64 ports each.
FlowKey flow_key(std::size_t i) {
  return FlowKey{i % 4 == 3 ? Proto::udp : Proto::tcp, Ipv4Addr{0x0A000000u + static_cast<std::uint32_t>(i >> 6)},
                 static_cast<std::uint16_t>(20000 + (i & 63)), 443};
}

// A minimum-size frame from the flow's remote end: a TCP ACK or an 18-byte
// UDP datagram, padded to 60 bytes.
Bytes frame_for(const FlowKey& k, std::uint8_t tcp_flags = 0x10) {
  const bool tcp = k.proto == Proto::tcp;
  const std::size_t l4 = tcp ? 20 : 8 + 18;
  Bytes f(std::max<std::size_t>(60, 14 + 20 + l4));
  std::byte* p = f.data();
  const std::uint8_t mac[6] = {0x02, 0, 0, 0, 0, 0x0a};
  std::memcpy(p, mac, 6);
  p[6] = std::byte{0x02};
  xk::store_be16(p + 12, 0x0800);
  std::byte* ip = p + 14;
  ip[0] = std::byte{0x45};
  xk::store_be16(ip + 2, static_cast<std::uint16_t>(20 + l4));
  xk::store_be16(ip + 4, 1);
  ip[8] = std::byte{64};
  ip[9] = std::byte{static_cast<std::uint8_t>(k.proto)};
  xk::store_be32(ip + 12, k.remote.v4().value);
  xk::store_be32(ip + 16, kShared.value);
  const std::uint16_t c = xk::csum::finish(xk::csum::partial(ip, 20));
  std::memcpy(ip + 10, &c, 2);
  std::byte* t = ip + 20;
  xk::store_be16(t, k.remote_port);
  xk::store_be16(t + 2, k.local_port);
  if (tcp) {
    t[12] = std::byte{0x50};
    t[13] = std::byte{tcp_flags};
  } else {
    xk::store_be16(t + 4, static_cast<std::uint16_t>(l4));
  }
  return f;
}

struct PackedKey {
  std::uint32_t remote;
  std::uint16_t remote_port;
  std::uint16_t local_port;
  std::uint32_t proto;
  friend bool operator==(const PackedKey&, const PackedKey&) = default;
};
PackedKey packed(const FlowKey& k) {
  return PackedKey{k.remote.v4().value, k.remote_port, k.local_port, static_cast<std::uint32_t>(k.proto)};
}
struct StdHash {
  std::size_t operator()(const PackedKey& k) const noexcept { return xk::KeyHash<PackedKey>{}(k); }
};

struct World {
  xk::ManualClock clock;
  std::unique_ptr<FilterEngine> engine;
  std::vector<Bytes> frames;  // random flows, random order
  std::vector<Frame> views;
  std::vector<PackedKey> probe_keys;  // the same flows' keys, for the references
  World() {
    FilterConfig c = bench_config();
    c.expected_flows = kFlows;
    engine = std::make_unique<FilterEngine>(c, clock);
    for (std::size_t i = 0; i < kFlows; ++i) {
      (void)engine->add_flow(flow_key(i), Target{static_cast<std::uint16_t>(i % 64), static_cast<std::uint16_t>(i % 4)});
    }
    std::mt19937_64 rng(1);
    for (std::size_t i = 0; i < kFrames; ++i) {
      const FlowKey k = flow_key(rng() % kFlows);
      frames.push_back(frame_for(k));
      probe_keys.push_back(packed(k));
    }
    views.assign(frames.begin(), frames.end());
  }
};

World& world() {
  static World w;
  return w;
}

void per_frame_counters(benchmark::State& state, std::uint64_t allocs_before, std::size_t per_iteration) {
  const double frames = static_cast<double>(state.iterations() * per_iteration);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * per_iteration));
  state.counters["allocs_per_frame"] = static_cast<double>(xk::bench::allocations() - allocs_before) / frames;
}

void BM_Classify_Burst32(benchmark::State& state) {
  World& w = world();
  Decision out[kBurst];
  std::size_t i = 0;
  const std::uint64_t allocs = xk::bench::allocations();
  for (auto _ : state) {
    w.engine->classify(std::span(w.views).subspan(i, kBurst), out);
    benchmark::DoNotOptimize(out);
    i = (i + kBurst) & (kFrames - 1);
  }
  per_frame_counters(state, allocs, kBurst);
  if (w.engine->count(xk::filterd::Reason::exact_hit) == 0) state.SkipWithError("no exact hits");
}
BENCHMARK(BM_Classify_Burst32);

void BM_Classify_Single(benchmark::State& state) {
  World& w = world();
  std::size_t i = 0;
  const std::uint64_t allocs = xk::bench::allocations();
  for (auto _ : state) {
    benchmark::DoNotOptimize(w.engine->classify(w.views[i]));
    i = (i + 1) & (kFrames - 1);
  }
  per_frame_counters(state, allocs, 1);
}
BENCHMARK(BM_Classify_Single);

void BM_UnorderedMap_Lookup(benchmark::State& state) {
  World& w = world();
  std::unordered_map<PackedKey, Target, StdHash> map;
  map.reserve(kFlows);
  for (std::size_t i = 0; i < kFlows; ++i) map.emplace(packed(flow_key(i)), Target{1, 0});
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(map.find(w.probe_keys[i]));
    i = (i + 1) & (kFrames - 1);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_UnorderedMap_Lookup);

void BM_FlatMap_BulkLookup32(benchmark::State& state) {
  World& w = world();
  xk::FlatMap<PackedKey, Target> map(kFlows);
  for (std::size_t i = 0; i < kFlows; ++i) map.insert(packed(flow_key(i)), Target{1, 0});
  std::size_t i = 0;
  std::uint64_t hashes[kBurst];
  for (auto _ : state) {
    for (std::size_t j = 0; j < kBurst; ++j) {
      hashes[j] = map.hash_of(w.probe_keys[i + j]);
      map.prefetch(hashes[j]);
    }
    for (std::size_t j = 0; j < kBurst; ++j) benchmark::DoNotOptimize(map.find_hashed(w.probe_keys[i + j], hashes[j]));
    i = (i + kBurst) & (kFrames - 1);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBurst));
}
BENCHMARK(BM_FlatMap_BulkLookup32);

// New connections to a group of 8 members: no exact flow, a keyed hash of the
// 4-tuple and a score per member.
void BM_Classify_GroupSyn(benchmark::State& state) {
  xk::ManualClock clock;
  FilterEngine engine(bench_config(), clock);
  for (std::uint16_t n = 0; n < 8; ++n) (void)engine.join_group(Proto::tcp, 8080, Target{n, 0});
  std::vector<Bytes> frames;
  for (std::size_t i = 0; i < 1024; ++i) {
    FlowKey k = flow_key(i * 4);
    k.local_port = 8080;
    frames.push_back(frame_for(k, 0x02));
  }
  std::vector<Frame> views(frames.begin(), frames.end());
  Decision out[kBurst];
  std::size_t i = 0;
  for (auto _ : state) {
    engine.classify(std::span(views).subspan(i, kBurst), out);
    benchmark::DoNotOptimize(out);
    i = (i + kBurst) & 1023;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBurst));
}
BENCHMARK(BM_Classify_GroupSyn);

// Ten pcap rules; every frame misses both tables and matches only the last.
void BM_Classify_TenthRule(benchmark::State& state) {
  xk::ManualClock clock;
  FilterEngine engine(bench_config(), clock);
  for (int r = 0; r < 10; ++r) (void)engine.add_rule("udp dst port " + std::to_string(9000 + r), Target{1, 0});
  std::vector<Bytes> frames;
  for (std::size_t i = 0; i < 1024; ++i) {
    FlowKey k = flow_key(i * 4 + 3);
    k.local_port = 9009;
    frames.push_back(frame_for(k));
  }
  std::vector<Frame> views(frames.begin(), frames.end());
  Decision out[kBurst];
  std::size_t i = 0;
  for (auto _ : state) {
    engine.classify(std::span(views).subspan(i, kBurst), out);
    benchmark::DoNotOptimize(out);
    i = (i + kBurst) & 1023;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBurst));
  if (engine.count(xk::filterd::Reason::rule_hit) == 0) state.SkipWithError("no rule hits");
}
BENCHMARK(BM_Classify_TenthRule);

// ---- Control path ----

// Connection churn at 1M flows: one flow removed and another added.
void BM_Flow_RemoveAdd(benchmark::State& state) {
  xk::ManualClock clock;
  FilterConfig c = bench_config();
  c.expected_flows = kFlows + 1;
  FilterEngine engine(c, clock);
  for (std::size_t i = 0; i < kFlows; ++i) (void)engine.add_flow(flow_key(i), Target{1, 0});
  std::mt19937_64 rng(2);
  std::vector<FlowKey> keys(kFrames);
  for (FlowKey& k : keys) k = flow_key(rng() % kFlows);
  std::size_t i = 0;
  for (auto _ : state) {
    (void)engine.remove_flow(keys[i]);
    (void)engine.add_flow(keys[i], Target{2, 0});
    i = (i + 1) & (kFrames - 1);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_Flow_RemoveAdd);

void BM_UnorderedMap_EraseInsert(benchmark::State& state) {
  std::unordered_map<PackedKey, Target, StdHash> map;
  map.reserve(kFlows + 1);
  for (std::size_t i = 0; i < kFlows; ++i) map.emplace(packed(flow_key(i)), Target{1, 0});
  std::mt19937_64 rng(2);
  std::vector<PackedKey> keys(kFrames);
  for (PackedKey& k : keys) k = packed(flow_key(rng() % kFlows));
  std::size_t i = 0;
  for (auto _ : state) {
    map.erase(keys[i]);
    map.emplace(keys[i], Target{2, 0});
    i = (i + 1) & (kFrames - 1);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_UnorderedMap_EraseInsert);

// 1M flows into an empty engine, growing as it goes (no reserve).
void BM_Flow_Fill1M(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    xk::ManualClock clock;
    auto engine = std::make_unique<FilterEngine>(bench_config(), clock);
    state.ResumeTiming();
    for (std::size_t i = 0; i < kFlows; ++i) (void)engine->add_flow(flow_key(i), Target{1, 0});
    state.PauseTiming();
    engine.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kFlows));
}
BENCHMARK(BM_Flow_Fill1M)->Unit(benchmark::kMillisecond)->Iterations(3);

// A rule compiled by libpcap (optimizer on) and removed again.
void BM_Rule_AddRemove(benchmark::State& state) {
  xk::ManualClock clock;
  FilterEngine engine(bench_config(), clock);
  int port = 0;
  for (auto _ : state) {
    auto r = engine.add_rule("udp dst port " + std::to_string(1000 + (port++ & 1023)) + " and src net 10.0.0.0/8",
                             Target{1, 0});
    (void)engine.remove_rule(r.id);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_Rule_AddRemove);

}  // namespace

int main(int argc, char** argv) {
  using xk::bench::Metric;
  return xk::bench::run_with_ratios(
      argc, argv,
      {
          {"classify, bursts of 32, 1M flows vs unordered_map lookup", "BM_Classify_Burst32", "BM_UnorderedMap_Lookup",
           Metric::items_per_second, 1.0, ""},
          {"classify one by one, 1M flows vs unordered_map lookup", "BM_Classify_Single", "BM_UnorderedMap_Lookup",
           Metric::items_per_second, 1.0, ""},
          {"classify, bursts of 32, 1M flows: frames/s per core", "BM_Classify_Burst32", "", Metric::items_per_second,
           20e6, ""},
          {"flow remove+add at 1M vs unordered_map erase+insert", "BM_Flow_RemoveAdd", "BM_UnorderedMap_EraseInsert",
           Metric::items_per_second, 1.0, ""},
      });
}

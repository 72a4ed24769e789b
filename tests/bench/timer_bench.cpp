// Timer micro-benchmarks: what a TCP stack pays to schedule, cancel and re-arm
// its timers (retransmission, delayed ACK, keepalive) with 1M of them armed,
// and how many expiries per second the wheel delivers.
//
// The reference in the same run is the ordered-map timer queue many stacks
// start with: std::multimap<deadline, timer>, O(log n) per operation, one node
// allocation per insert. Both sides use the same random deadlines.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "alloc_count.hpp"
#include "ratio.hpp"
#include "xk/clock.hpp"
#include "xk/timer.hpp"

namespace {

using namespace std::chrono_literals;
using xk::Duration;
using xk::Time;

constexpr std::size_t kArmed = 1 << 20;  // timers armed while measuring
constexpr std::size_t kDeadlines = 1 << 16;
const Time kStart = Time(1000s);

// Random offsets from the start, 1 ms to 60 s: the span of RTO, delayed-ACK
// and persist timers. Fixed seed: both sides see the same sequence.
std::vector<Duration> random_offsets(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> d(Duration(1ms).count(), Duration(60s).count());
  std::vector<Duration> v(n);
  for (Duration& x : v) x = Duration(d(rng));
  return v;
}

void report_per_op(benchmark::State& state, std::uint64_t allocs_before) {
  double iters = static_cast<double>(state.iterations());
  state.counters["allocs_per_op"] =
      static_cast<double>(xk::bench::allocations() - allocs_before) / iters;
  state.counters["ns_per_op"] =
      benchmark::Counter(iters * 1e-9, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// --- The wheel, 1M armed -----------------------------------------------------

struct WheelWorld {
  xk::ManualClock clock{kStart};
  xk::TimerWheel wheel{clock};
  std::deque<xk::Timer> armed;   // the 1M background timers
  std::deque<xk::Timer> probes;  // armed and cancelled in the timed loop
  std::vector<Duration> offsets = random_offsets(kDeadlines, 2);
  WheelWorld() {
    std::vector<Duration> background = random_offsets(kArmed, 1);
    for (std::size_t i = 0; i < kArmed; ++i) {
      armed.emplace_back(wheel, [] {});
      armed.back().arm(kStart + background[i]);
    }
    for (int i = 0; i < 1024; ++i) probes.emplace_back(wheel, [] {});
  }
  static WheelWorld& get() {
    static WheelWorld w;
    return w;
  }
};

void BM_TimerWheel_ArmCancel(benchmark::State& state) {
  WheelWorld& w = WheelWorld::get();
  std::size_t i = 0;
  std::uint64_t allocs = xk::bench::allocations();
  for (auto _ : state) {
    xk::Timer& t = w.probes[i & 1023];
    t.arm(kStart + w.offsets[i & (kDeadlines - 1)]);
    t.cancel();
    ++i;
  }
  report_per_op(state, allocs);
  state.counters["armed"] = static_cast<double>(w.wheel.armed_count());
}
BENCHMARK(BM_TimerWheel_ArmCancel);

// Re-arming one of the 1M at random: the retransmission-timer pattern (every
// ACK pushes the RTO of some connection further out). Cache misses included.
void BM_TimerWheel_Rearm(benchmark::State& state) {
  WheelWorld& w = WheelWorld::get();
  std::mt19937_64 rng(3);
  std::vector<std::uint32_t> victims(kDeadlines);
  for (auto& v : victims) v = static_cast<std::uint32_t>(rng() % kArmed);
  std::size_t i = 0;
  std::uint64_t allocs = xk::bench::allocations();
  for (auto _ : state) {
    std::size_t k = i & (kDeadlines - 1);
    w.armed[victims[k]].arm(kStart + w.offsets[k]);
    ++i;
  }
  report_per_op(state, allocs);
}
BENCHMARK(BM_TimerWheel_Rearm);

// --- Reference: std::multimap, 1M entries ---------------------------------------

struct MapTimer;
using TimerMap = std::multimap<Time, MapTimer*>;
struct MapTimer {
  TimerMap::iterator pos;
  bool armed = false;
};

struct MapWorld {
  TimerMap map;
  std::vector<MapTimer> armed = std::vector<MapTimer>(kArmed);
  MapTimer probe;
  std::vector<Duration> offsets = random_offsets(kDeadlines, 2);
  MapWorld() {
    std::vector<Duration> background = random_offsets(kArmed, 1);
    for (std::size_t i = 0; i < kArmed; ++i) {
      armed[i].pos = map.emplace(kStart + background[i], &armed[i]);
      armed[i].armed = true;
    }
  }
  static MapWorld& get() {
    static MapWorld w;
    return w;
  }
};

void BM_Multimap_InsertErase(benchmark::State& state) {
  MapWorld& w = MapWorld::get();
  std::size_t i = 0;
  std::uint64_t allocs = xk::bench::allocations();
  for (auto _ : state) {
    auto it = w.map.emplace(kStart + w.offsets[i & (kDeadlines - 1)], &w.probe);
    w.map.erase(it);
    ++i;
  }
  report_per_op(state, allocs);
  state.counters["armed"] = static_cast<double>(w.map.size());
}
BENCHMARK(BM_Multimap_InsertErase);

void BM_Multimap_Rearm(benchmark::State& state) {
  MapWorld& w = MapWorld::get();
  std::mt19937_64 rng(3);
  std::vector<std::uint32_t> victims(kDeadlines);
  for (auto& v : victims) v = static_cast<std::uint32_t>(rng() % kArmed);
  std::size_t i = 0;
  std::uint64_t allocs = xk::bench::allocations();
  for (auto _ : state) {
    std::size_t k = i & (kDeadlines - 1);
    MapTimer& t = w.armed[victims[k]];
    // The node is reused (extract + reinsert): no allocation, a fair reference.
    auto node = w.map.extract(t.pos);
    node.key() = kStart + w.offsets[k];
    t.pos = w.map.insert(std::move(node));
    ++i;
  }
  report_per_op(state, allocs);
}
BENCHMARK(BM_Multimap_Rearm);

// --- Expiry throughput ---------------------------------------------------------
//
// N periodic timers (periods 1 ms .. 1 s, each re-arms at deadline + period);
// each iteration moves the clock 100 us and runs what is due. Items = timers
// fired, so items_per_second is expiries (callback + re-arm) per second.

constexpr Duration kStep = 100us;

std::vector<Duration> random_periods(std::size_t n) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<std::int64_t> d(Duration(1ms).count(), Duration(1s).count());
  std::vector<Duration> v(n);
  for (Duration& x : v) x = Duration(d(rng));
  return v;
}

// A periodic timer with its period next to it, as a session holds its timers
// next to its state: the callback touches nothing else.
struct Periodic {
  xk::Timer timer;
  Duration period;
  Periodic(xk::TimerWheel& wheel, Duration p) : timer(wheel, [this] { rearm(); }), period(p) {}
  void rearm() { timer.arm(timer.deadline() + period); }
};

struct PeriodicWheel {
  xk::ManualClock clock{kStart};
  xk::TimerWheel wheel{clock};
  std::deque<Periodic> timers;
  explicit PeriodicWheel(std::size_t n) {
    std::vector<Duration> period = random_periods(n);
    for (std::size_t i = 0; i < n; ++i) {
      timers.emplace_back(wheel, period[i]);
      timers.back().timer.arm(kStart + period[i]);
    }
  }
  static PeriodicWheel& get(std::size_t n) {  // built once per size: runs continue its timeline
    static std::map<std::size_t, std::unique_ptr<PeriodicWheel>> worlds;
    auto& w = worlds[n];
    if (!w) w = std::make_unique<PeriodicWheel>(n);
    return *w;
  }
};

void BM_TimerWheel_RunExpired(benchmark::State& state) {
  PeriodicWheel& w = PeriodicWheel::get(static_cast<std::size_t>(state.range(0)));
  std::uint64_t fired = 0;
  std::uint64_t allocs = 0;
  for (auto _ : state) {
    w.clock.advance(kStep);
    std::uint64_t before = xk::bench::allocations();
    fired += w.wheel.advance();
    allocs += xk::bench::allocations() - before;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(fired));
  state.counters["fired_per_step"] = static_cast<double>(fired) / static_cast<double>(state.iterations());
  state.counters["allocs_per_fire"] = static_cast<double>(allocs) / static_cast<double>(fired ? fired : 1);
}
// 16k timers stay in cache; 1M (90 MB of timers) do not, and every cascade
// and expiry then waits for memory.
BENCHMARK(BM_TimerWheel_RunExpired)->Arg(1 << 14)->Arg(kArmed)->Unit(benchmark::kMicrosecond);

// The same with the period in the map's node.
struct PeriodicMap {
  std::multimap<Time, Duration> map;
  Time now = kStart;
  explicit PeriodicMap(std::size_t n) {
    std::vector<Duration> period = random_periods(n);
    for (std::size_t i = 0; i < n; ++i) map.emplace(kStart + period[i], period[i]);
  }
  static PeriodicMap& get(std::size_t n) {
    static std::map<std::size_t, std::unique_ptr<PeriodicMap>> worlds;
    auto& m = worlds[n];
    if (!m) m = std::make_unique<PeriodicMap>(n);
    return *m;
  }
};

void BM_Multimap_RunExpired(benchmark::State& state) {
  PeriodicMap& m = PeriodicMap::get(static_cast<std::size_t>(state.range(0)));
  auto& map = m.map;
  Time& now = m.now;
  std::uint64_t fired = 0;
  for (auto _ : state) {
    now += kStep;
    while (!map.empty() && map.begin()->first <= now) {
      auto node = map.extract(map.begin());
      node.key() += node.mapped();  // the "callback": re-arm one period later
      map.insert(std::move(node));
      ++fired;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(fired));
  state.counters["fired_per_step"] = static_cast<double>(fired) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_Multimap_RunExpired)->Arg(1 << 14)->Arg(kArmed)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  using xk::bench::Metric;
  return xk::bench::run_with_ratios(
      argc, argv,
      {
          {"TimerWheel arm+cancel vs multimap insert+erase, 1M armed", "BM_TimerWheel_ArmCancel",
           "BM_Multimap_InsertErase", Metric::time_ns, 1.0, ""},
          {"TimerWheel re-arm of 1 of 1M vs multimap extract+insert", "BM_TimerWheel_Rearm",
           "BM_Multimap_Rearm", Metric::time_ns, 1.0, ""},
          {"TimerWheel expiries/s vs multimap (16k periodic)", "BM_TimerWheel_RunExpired/16384",
           "BM_Multimap_RunExpired/16384", Metric::items_per_second, 1.0, ""},
          {"TimerWheel expiries/s vs multimap (1M periodic)", "BM_TimerWheel_RunExpired/1048576",
           "BM_Multimap_RunExpired/1048576", Metric::items_per_second, 1.0, ""},
          {"TimerWheel arm+cancel allocations per op (target 0)", "BM_TimerWheel_ArmCancel", "",
           Metric::counter, 0.0, "allocs_per_op"},
          {"TimerWheel re-arm allocations per op (target 0)", "BM_TimerWheel_Rearm", "",
           Metric::counter, 0.0, "allocs_per_op"},
          {"TimerWheel expiry allocations per fire (target 0)", "BM_TimerWheel_RunExpired/1048576", "",
           Metric::counter, 0.0, "allocs_per_fire"},
      });
}

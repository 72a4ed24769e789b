#include "xk/timer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "xk/clock.hpp"

namespace xk {
namespace {

using namespace std::chrono_literals;

constexpr Time kStart = Time(1000s);  // aligned to every tick used here
constexpr std::uint64_t kMaxTick = std::numeric_limits<std::uint64_t>::max();

// --- Clock and tick arithmetic ---------------------------------------------

TEST(Clock, ManualClockMovesOnlyWhenTold) {
  ManualClock clock(kStart);
  EXPECT_EQ(clock.now(), kStart);
  clock.advance(5us);
  EXPECT_EQ(clock.now(), kStart + 5us);
  clock.set(Time::max() - 1s);
  clock.advance(2s);  // saturates
  EXPECT_EQ(clock.now(), Time::max());
}

TEST(Clock, MonotonicClockDoesNotGoBack) {
  MonotonicClock clock;
  Time a = clock.now();
  Time b = clock.now();
  EXPECT_LE(a, b);
  EXPECT_GT(a.time_since_epoch().count(), 0);
}

TEST(Clock, SaturatingAddClamps) {
  EXPECT_EQ(saturating_add(Time::max() - 1s, 2s), Time::max());
  EXPECT_EQ(saturating_add(Time::min() + 1s, -2s), Time::min());
  EXPECT_EQ(saturating_add(kStart, 1s), kStart + 1s);
}

TEST(TimerWheel, TickArithmeticBracketsEveryTime) {
  ManualClock clock(kStart);
  std::mt19937_64 rng(7);
  for (Duration tick : {Duration(1), Duration(1000), Duration(1024), Duration(10'000), Duration(999'983)}) {
    TimerWheel wheel(clock, tick);
    EXPECT_EQ(wheel.tick(), tick);
    for (int i = 0; i < 20000; ++i) {
      Time t(Duration(static_cast<std::int64_t>(rng())));
      std::uint64_t k = wheel.to_tick(t);
      ASSERT_LE(wheel.from_tick(k), t);
      if (k < kMaxTick) {
        ASSERT_GT(wheel.from_tick(k + 1), t);
      }
      bool aligned = wheel.from_tick(k) == t;
      ASSERT_EQ(wheel.to_tick_ceil(t), aligned ? k : k + 1);
    }
    // Ticks are ordered like times, across the sign change of the count.
    EXPECT_LT(wheel.to_tick(Time(-1s)), wheel.to_tick(Time(1s)));
    EXPECT_EQ(wheel.to_tick(Time::min()), 0u);
  }
}

TEST(TimerWheel, RejectsNonPositiveTick) {
  ManualClock clock;
  EXPECT_THROW(TimerWheel(clock, Duration(0)), std::invalid_argument);
  EXPECT_THROW(TimerWheel(clock, Duration(-5)), std::invalid_argument);
}

// --- Basic behaviour -------------------------------------------------------

TEST(TimerWheel, FiresAtDeadlineNotBefore) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int fired = 0;
  Time fired_at{};
  // A callback holds at most two pointers: a pointer to more.
  struct Seen {
    int& fired;
    Time& at;
  } seen{fired, fired_at};
  Timer t(wheel, [&seen, &clock] {
    ++seen.fired;
    seen.at = clock.now();
  });
  t.arm(kStart + 10us);
  EXPECT_TRUE(t.armed());
  EXPECT_EQ(t.deadline(), kStart + 10us);
  EXPECT_EQ(wheel.armed_count(), 1u);

  clock.set(kStart + 10us - 1ns);
  EXPECT_EQ(wheel.advance(), 0u);
  EXPECT_EQ(fired, 0);
  clock.set(kStart + 10us);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(fired_at, kStart + 10us);
  EXPECT_FALSE(t.armed());
  EXPECT_EQ(wheel.armed_count(), 0u);
  clock.advance(1h);
  EXPECT_EQ(wheel.advance(), 0u);
  EXPECT_EQ(fired, 1);
}

TEST(TimerWheel, UnalignedDeadlineFiresAtTheNextTickBoundary) {
  ManualClock clock(kStart + 123ns);
  TimerWheel wheel(clock);  // 1 us
  int fired = 0;
  Timer t(wheel, [&] { ++fired; });
  Time deadline = kStart + 5us + 7ns;
  t.arm(deadline);
  wheel.run_expired(deadline - 1ns);
  wheel.run_expired(deadline);
  wheel.run_expired(kStart + 6us - 1ns);
  EXPECT_EQ(fired, 0);  // never before the deadline, nor before its tick is reached
  wheel.run_expired(kStart + 6us);
  EXPECT_EQ(fired, 1);  // less than one tick late
}

TEST(TimerWheel, DeadlineInThePastFiresOnNextRun) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int fired = 0;
  Timer t(wheel, [&] { ++fired; });
  t.arm(kStart - 1s);
  ASSERT_TRUE(wheel.next_deadline());
  EXPECT_LE(*wheel.next_deadline(), clock.now());
  EXPECT_EQ(wheel.advance(), 1u);  // the clock has not moved
  EXPECT_EQ(fired, 1);
  // At exactly "now" (an aligned present): also due at once.
  t.arm(clock.now());
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(fired, 2);
}

// run_due(): the timers armed in the past fire, the clock's do not (even when
// the clock is past them), and a callback re-arming in the past waits for the
// next call.
TEST(TimerWheel, RunDueFiresOnlyTimersArmedAlreadyDue) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int now_fired = 0, later_fired = 0, again = 0;
  Timer now_t(wheel, [&] { ++now_fired; });
  Timer later_t(wheel, [&] { ++later_fired; });
  Timer self(wheel, [&] {
    if (++again < 3) self.arm(Time{});
  });
  later_t.arm_after(1ms);
  clock.advance(2ms);  // later_t is due by the clock, but no run has seen it
  now_t.arm(Time{});
  self.arm(Time{});
  EXPECT_EQ(wheel.run_due(), 2u);
  EXPECT_EQ(now_fired, 1);
  EXPECT_EQ(again, 1);
  EXPECT_EQ(later_fired, 0);
  EXPECT_EQ(wheel.run_due(), 1u);  // self, re-armed in the past
  EXPECT_EQ(again, 2);
  EXPECT_EQ(wheel.advance(), 2u);  // self again, and later_t
  EXPECT_EQ(later_fired, 1);
  EXPECT_EQ(wheel.run_due(), 0u);
}

TEST(TimerWheel, CancelAndRearm) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int fired = 0;
  Timer t(wheel, [&] { ++fired; });
  t.cancel();  // not armed: no-op
  t.arm(kStart + 1ms);
  t.cancel();
  EXPECT_FALSE(t.armed());
  EXPECT_EQ(wheel.armed_count(), 0u);
  EXPECT_FALSE(wheel.next_deadline());
  clock.advance(2ms);
  EXPECT_EQ(wheel.advance(), 0u);

  // Re-arm later, then earlier, then later again: only the last one counts.
  t.arm(clock.now() + 1s);
  t.arm(clock.now() + 10us);
  t.arm(clock.now() + 20us);
  EXPECT_EQ(wheel.armed_count(), 1u);
  EXPECT_EQ(t.deadline(), clock.now() + 20us);
  clock.advance(19us);
  EXPECT_EQ(wheel.advance(), 0u);
  clock.advance(1us);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(fired, 1);
}

TEST(TimerWheel, ArmAfterUsesTheClockAndSaturates) {
  ManualClock clock(Time::max() - 1h);
  TimerWheel wheel(clock, Duration(1));
  int fired = 0;
  Timer t(wheel, [&] { ++fired; });
  t.arm_after(30min);
  EXPECT_EQ(t.deadline(), Time::max() - 30min);
  Timer never(wheel, [&] { fired += 100; });
  never.arm_after(24h);  // past the end of time: Time::max(), which never comes
  EXPECT_EQ(never.deadline(), Time::max());
  clock.set(Time::max());
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(never.armed());
}

TEST(TimerWheel, WheelDestroyedFirstDisarmsItsTimers) {
  ManualClock clock(kStart);
  auto wheel = std::make_unique<TimerWheel>(clock);
  Timer a(*wheel, [] {});
  Timer b(*wheel, [] {});
  a.arm(kStart + 1us);
  b.arm(kStart + 1h);
  wheel.reset();
  EXPECT_FALSE(a.armed());
  EXPECT_FALSE(b.armed());
}  // a and b are destroyed after the wheel: must not touch it (ASan)

TEST(TimerWheel, FiresInDeadlineOrderAcrossTicksAndLevels) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  std::vector<int> order;
  std::deque<Timer> timers;
  // Deadlines in reverse order of arming, far and near.
  const Duration offsets[] = {48h, 1h, 65s, 1s, 4096us, 4095us, 64us, 63us, 2us, 1us};
  for (int i = 0; i < 10; ++i) {
    std::vector<int>* o = &order;
    timers.emplace_back(wheel, [o, i] { o->push_back(i); });
    timers.back().arm(kStart + offsets[i]);
  }
  clock.advance(49h);
  EXPECT_EQ(wheel.advance(), 10u);
  EXPECT_EQ(order, (std::vector<int>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
}

// --- Many random timers ----------------------------------------------------

struct RandomCase {
  Duration tick;
  Time start;
  int count;
  bool with_past;  // some deadlines before the start
};

class RandomTimers : public ::testing::TestWithParam<RandomCase> {};

// Every timer fires exactly once, never before its deadline, never a tick
// later than a run that could have fired it, in order of due tick.
TEST_P(RandomTimers, FireInOrderExactlyOnceNoneEarlyNoneLate) {
  const RandomCase& c = GetParam();
  ManualClock clock(c.start);
  TimerWheel wheel(clock, c.tick);
  std::mt19937_64 rng(c.count + c.tick.count());

  struct Ctx {
    ManualClock* clock;
    TimerWheel* wheel;
    Time start;
    std::vector<Time> deadline;
    std::vector<int> fired;
    std::uint64_t last_tick = 0;
    bool in_order = true;
    bool early = false;
    std::size_t n_fired = 0;
  } ctx{&clock, &wheel, c.start, {}, {}, 0, true, false, 0};

  const Duration ranges[] = {1ms, 1s, 1h, 240h};
  std::deque<Timer> timers;
  for (int i = 0; i < c.count; ++i) {
    Duration range = ranges[rng() % 4];
    auto off = Duration(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(range.count())));
    if (c.with_past && rng() % 64 == 0) off = -off;
    Time d = saturating_add(c.start, off);
    ctx.deadline.push_back(d);
    ctx.fired.push_back(0);
    Ctx* p = &ctx;
    timers.emplace_back(wheel, [p, i] {
      ++p->fired[i];
      ++p->n_fired;
      Time now = p->clock->now();
      if (now < p->deadline[i]) p->early = true;
      if (p->deadline[i] < p->start) return;  // due when armed: fires first, in no set order
      std::uint64_t due = p->wheel->to_tick_ceil(p->deadline[i]);
      if (due < p->last_tick) p->in_order = false;
      p->last_tick = due;
    });
    timers.back().arm(d);
  }
  ASSERT_EQ(wheel.armed_count(), static_cast<std::size_t>(c.count));

  std::vector<int> by_deadline(c.count);
  for (int i = 0; i < c.count; ++i) by_deadline[i] = i;
  std::sort(by_deadline.begin(), by_deadline.end(),
            [&](int a, int b) { return ctx.deadline[a] < ctx.deadline[b]; });
  Time last = ctx.deadline[by_deadline.back()];

  // Steps from 1 ns to a day, log-uniform: fine near the start, big jumps later.
  std::size_t checked = 0;
  int runs = 0;
  while (clock.now() < last + c.tick) {
    double exponent = std::uniform_real_distribution<double>(0, std::log(86400e9))(rng);
    clock.advance(Duration(static_cast<std::int64_t>(std::exp(exponent))));
    ctx.last_tick = 0;  // order is per run (timers due before the run go first)
    wheel.advance();
    ++runs;
    ASSERT_FALSE(ctx.early) << "a timer fired before its deadline";
    ASSERT_TRUE(ctx.in_order) << "timers fired out of due-tick order";
    // Not late: everything due a whole tick ago has fired.
    Time late_line = clock.now() - c.tick;
    while (checked < by_deadline.size() && ctx.deadline[by_deadline[checked]] <= late_line) {
      ASSERT_EQ(ctx.fired[by_deadline[checked]], 1) << "timer " << by_deadline[checked] << " is late";
      ++checked;
    }
  }
  EXPECT_EQ(ctx.n_fired, static_cast<std::size_t>(c.count));
  for (int i = 0; i < c.count; ++i) ASSERT_EQ(ctx.fired[i], 1) << i;
  EXPECT_EQ(wheel.armed_count(), 0u);
  EXPECT_FALSE(wheel.next_deadline());
  // Each timer is moved down at most once per level.
  EXPECT_LE(wheel.stats().cascaded, static_cast<std::uint64_t>(c.count) * (TimerWheel::kLevels - 1));
  EXPECT_GT(runs, 10);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RandomTimers,
    ::testing::Values(
        RandomCase{1us, Time(1234567891ns), 100000, true},        // default tick, unaligned start
        RandomCase{Duration(1), Time(7ns), 20000, true},           // 1 ns tick: 50-bit spans
        RandomCase{10us, Time(999999999999ns), 20000, true},       // coarser tick
        RandomCase{Duration(1024), Time(-3s - 17ns), 20000, true}, // power-of-two tick, negative count
        RandomCase{1ms, Time(5ms + 1ns), 20000, true},
        // Near the top of the range: 1 ns ticks reach the top level of the wheel.
        RandomCase{Duration(1), Time::max() - 300h - 17ns, 20000, true},
        RandomCase{1us, Time::max() - 300h - 999ns, 20000, true},
        // At the bottom: ticks start near 0.
        RandomCase{Duration(1), Time::min() + 3ns, 20000, false}));

// --- Slot boundaries at every level ----------------------------------------

// Deadlines straddling the 64-slot boundaries of every level, including the
// top of the 64-bit tick range: each fires exactly in its tick, in order.
TEST(TimerWheel, WrapsAtEveryLevelBoundary) {
  ManualClock clock;
  std::vector<std::uint64_t> boundaries;
  for (unsigned level = 0; level < TimerWheel::kLevels; ++level) {
    unsigned shift = level * TimerWheel::kSlotBits;
    boundaries.push_back(std::uint64_t{42} << shift >> (shift >= 60 ? 2 : 0));  // inside a level
    if (shift + 6 < 64) {
      boundaries.push_back(std::uint64_t{1} << (shift + 6));         // next level's first boundary
      boundaries.push_back(std::uint64_t{3} << (shift + 6));
      boundaries.push_back(kMaxTick - (std::uint64_t{1} << (shift + 6)) + 1);  // near the top
    }
  }
  boundaries.push_back(std::uint64_t{1} << 63);
  boundaries.push_back(kMaxTick - 1);

  for (std::uint64_t b : boundaries) {
    for (std::uint64_t start_off : {std::uint64_t{5}, std::uint64_t{1}, std::uint64_t{4097}}) {
      if (b < start_off + 1) continue;
      std::uint64_t start = b - start_off;
      TimerWheel probe(clock, Duration(1));
      clock.set(probe.from_tick(start));
      TimerWheel wheel(clock, Duration(1));

      std::vector<std::uint64_t> ticks;
      for (std::int64_t d : {-3, -2, -1, 0, 1, 2, 63, 64, 65, 4095, 4096, 4097, 262144}) {
        // Wrap-safe: keep ticks after the start and below the never-run last tick.
        std::uint64_t t = b + static_cast<std::uint64_t>(d);
        if (d < 0 && static_cast<std::uint64_t>(-d) > b) continue;
        if (d > 0 && t < b) continue;
        if (t > start && t < kMaxTick) ticks.push_back(t);
      }
      std::sort(ticks.begin(), ticks.end());
      ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());

      std::vector<std::uint64_t> fired;
      std::deque<Timer> timers;
      // Armed in a scrambled order.
      for (std::size_t i = 0; i < ticks.size(); ++i) {
        std::uint64_t t = ticks[(i * 7) % ticks.size()];
        std::vector<std::uint64_t>* f = &fired;
        timers.emplace_back(wheel, [f, t] { f->push_back(t); });
        timers.back().arm(wheel.from_tick(t));
      }
      ASSERT_EQ(wheel.armed_count(), ticks.size());
      for (std::size_t i = 0; i < ticks.size(); ++i) {
        ASSERT_EQ(wheel.run_expired(wheel.from_tick(ticks[i] - 1)), 0u)
            << "boundary " << b << " tick " << ticks[i] << " fired early";
        ASSERT_EQ(wheel.run_expired(wheel.from_tick(ticks[i])), 1u)
            << "boundary " << b << " tick " << ticks[i] << " did not fire in its tick";
        ASSERT_EQ(fired.back(), ticks[i]);
      }
      ASSERT_EQ(wheel.armed_count(), 0u);
    }
  }
}

// One tick at a time across boundaries: exactly one timer per tick.
TEST(TimerWheel, TickByTickAcrossBoundaries) {
  ManualClock clock(Time(Duration(-5000)));  // crosses the sign change of the count
  TimerWheel wheel(clock, Duration(1));
  std::uint64_t first = wheel.to_tick(clock.now()) + 1;
  const int n = 10000;
  std::vector<int> fired;
  std::deque<Timer> timers;
  for (int i = n - 1; i >= 0; --i) {
    std::vector<int>* f = &fired;
    timers.emplace_back(wheel, [f, i] { f->push_back(i); });
    timers.back().arm(wheel.from_tick(first + static_cast<std::uint64_t>(i)));
  }
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(wheel.run_expired(wheel.from_tick(first + static_cast<std::uint64_t>(i))), 1u) << i;
    ASSERT_EQ(fired.back(), i);
  }
}

// --- Callbacks changing the wheel ------------------------------------------

TEST(TimerWheel, CallbackCancelsAnotherDueInTheSameTick) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int fired = 0;
  std::optional<Timer> a, b;
  a.emplace(wheel, [&] { ++fired; b->cancel(); });
  b.emplace(wheel, [&] { ++fired; a->cancel(); });
  a->arm(kStart + 5us);
  b->arm(kStart + 5us);
  clock.advance(5us);
  EXPECT_EQ(wheel.advance(), 1u);  // same-tick order is unspecified: one of them
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(a->armed());
  EXPECT_FALSE(b->armed());
  EXPECT_EQ(wheel.armed_count(), 0u);
}

TEST(TimerWheel, CallbackCancelsATimerDueLaterInTheSameRun) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int a_fired = 0, c_fired = 0;
  Timer c(wheel, [&] { ++c_fired; });
  Timer a(wheel, [&] {
    ++a_fired;
    c.cancel();
  });
  a.arm(kStart + 1us);
  c.arm(kStart + 1h);  // a higher level, still inside this run
  clock.advance(2h);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(a_fired, 1);
  EXPECT_EQ(c_fired, 0);
}

TEST(TimerWheel, CallbackCancelsItself) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int fired = 0;
  std::optional<Timer> t;
  t.emplace(wheel, [&] {
    ++fired;
    EXPECT_FALSE(t->armed());
    t->cancel();
  });
  t->arm(kStart + 1us);
  clock.advance(1us);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(fired, 1);
}

// Many timers in one tick, each cancelling a random other: each fires at most
// once, and a cancelled one never fires afterwards.
TEST(TimerWheel, CancelStormInOneTick) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  const int n = 2000;
  struct Ctx {
    std::deque<Timer> timers;
    std::vector<int> fired;
    std::vector<bool> cancelled;
    std::mt19937 rng{3};
    bool fired_after_cancel = false;
  } ctx;
  ctx.fired.assign(n, 0);
  ctx.cancelled.assign(n, false);
  Ctx* p = &ctx;
  for (int i = 0; i < n; ++i) {
    ctx.timers.emplace_back(wheel, [p, i] {
      if (p->cancelled[i]) p->fired_after_cancel = true;
      ++p->fired[i];
      int victim = static_cast<int>(p->rng() % n);
      if (p->timers[victim].armed()) {
        p->timers[victim].cancel();
        p->cancelled[victim] = true;
      }
    });
  }
  for (int i = 0; i < n; ++i) ctx.timers[i].arm(kStart + 7us + Duration(i % 3));  // same tick
  clock.advance(1ms);
  std::size_t fired = wheel.advance();
  EXPECT_FALSE(ctx.fired_after_cancel);
  int total = 0, cancelled = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_LE(ctx.fired[i], 1);
    total += ctx.fired[i];
    cancelled += ctx.cancelled[i] && ctx.fired[i] == 0;
  }
  EXPECT_EQ(static_cast<std::size_t>(total), fired);
  EXPECT_EQ(total + cancelled, n);
  EXPECT_EQ(wheel.armed_count(), 0u);
}

TEST(TimerWheel, SelfRearmInThePastFiresOncePerRun) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int fired = 0;
  std::optional<Timer> t;
  struct Ctx {
    int& fired;
    std::optional<Timer>& t;
    ManualClock& clock;
  } ctx{fired, t, clock};
  t.emplace(wheel, [&ctx] {
    ++ctx.fired;
    ctx.t->arm(ctx.clock.now());  // due at once: must wait for the next run
  });
  t->arm(kStart + 1us);
  clock.advance(1us);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(fired, 3);
  EXPECT_TRUE(t->armed());
}

TEST(TimerWheel, PeriodicRearmCatchesUpOneFiringPerRun) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int fired = 0;
  std::optional<Timer> t;
  t.emplace(wheel, [&] {
    ++fired;
    t->arm(t->deadline() + 1ms);
  });
  t->arm(kStart + 1ms);
  clock.advance(1s);  // 1000 periods at once
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(fired, 2);
  EXPECT_EQ(t->deadline(), kStart + 3ms);
  // Each further run fires the next period of the backlog, up to the present.
  for (int i = 0; i < 2000; ++i) wheel.advance();
  EXPECT_EQ(fired, 1000);
  EXPECT_EQ(t->deadline(), kStart + 1s + 1ms);
  // Keeping pace again: one firing per period.
  clock.set(kStart + 1s + 1ms);
  EXPECT_EQ(wheel.advance(), 1u);
  clock.set(kStart + 1s + 1ms + 999us);
  EXPECT_EQ(wheel.advance(), 0u);
}

TEST(TimerWheel, SelfRearmIntoTheFutureKeepsPeriod) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  std::vector<Time> at;
  std::optional<Timer> t;
  struct Ctx {
    std::vector<Time>& at;
    std::optional<Timer>& t;
    ManualClock& clock;
  } ctx{at, t, clock};
  t.emplace(wheel, [&ctx] {
    ctx.at.push_back(ctx.clock.now());
    if (ctx.at.size() < 5) ctx.t->arm(ctx.t->deadline() + 100us);
  });
  t->arm(kStart + 100us);
  for (int i = 0; i < 1000; ++i) {
    clock.advance(1us);
    wheel.advance();
  }
  ASSERT_EQ(at.size(), 5u);
  for (std::size_t i = 0; i < at.size(); ++i) EXPECT_EQ(at[i], kStart + (i + 1) * 100us);
}

TEST(TimerWheel, TimersArmedFromACallback) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  std::vector<char> order;
  Timer inside(wheel, [&] { order.push_back('i'); });   // due within the run being done
  Timer beyond(wheel, [&] { order.push_back('b'); });   // due after it
  struct Ctx {
    std::vector<char>& order;
    Timer& inside;
    Timer& beyond;
  } ctx{order, inside, beyond};
  Timer first(wheel, [&ctx] {
    ctx.order.push_back('f');
    ctx.inside.arm(kStart + 50us);
    ctx.beyond.arm(kStart + 200us);
  });
  first.arm(kStart + 10us);
  clock.set(kStart + 100us);
  EXPECT_EQ(wheel.advance(), 1u);  // 'inside' is due now: it waits for the next run
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(order, (std::vector<char>{'f', 'i'}));
  clock.set(kStart + 200us);
  EXPECT_EQ(wheel.advance(), 1u);
  EXPECT_EQ(order, (std::vector<char>{'f', 'i', 'b'}));
}

TEST(TimerWheel, CallbackDestroysAnotherTimer) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  int fired = 0;
  auto later = std::make_unique<Timer>(wheel, [&] { fired += 100; });
  auto same = std::make_unique<Timer>(wheel, [&] { fired += 1000; });
  struct Ctx {
    int& fired;
    std::unique_ptr<Timer>& later;
    std::unique_ptr<Timer>& same;
  } ctx{fired, later, same};
  Timer killer(wheel, [&ctx] {
    ++ctx.fired;
    ctx.later.reset();
    ctx.same.reset();
  });
  killer.arm(kStart + 3us);
  same.get()->arm(kStart + 3us + 500ns);  // same tick (1 us), order unspecified
  later->arm(kStart + 1h);
  clock.advance(2h);
  std::size_t n = wheel.advance();
  // Either killer went first (1 fired), or `same` fired, then killer destroyed it.
  EXPECT_TRUE((n == 1 && fired == 1) || (n == 2 && fired == 1001)) << n << " " << fired;
  EXPECT_EQ(wheel.armed_count(), 0u);
}

TEST(TimerWheel, CallbackDestroysItsOwnTimer) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  // The TIME_WAIT pattern: the session owning the timer is freed by its callback.
  struct Session {
    explicit Session(TimerWheel& w, std::unique_ptr<Session>* owner, int* closed)
        : timer(w, [this] { close(); }), owner_(owner), closed_(closed) {}
    void close() {
      ++*closed_;
      owner_->reset();  // destroys this, and the timer whose callback is running
    }
    Timer timer;
    std::unique_ptr<Session>* owner_;
    int* closed_;
  };
  int closed = 0;
  std::vector<std::unique_ptr<Session>> sessions(50);
  for (auto& s : sessions) {
    s = std::make_unique<Session>(wheel, &s, &closed);
    s->timer.arm(kStart + 60s);
  }
  clock.advance(61s);
  EXPECT_EQ(wheel.advance(), 50u);
  EXPECT_EQ(closed, 50);
  for (auto& s : sessions) EXPECT_EQ(s, nullptr);
  EXPECT_EQ(wheel.armed_count(), 0u);
}

TEST(TimerWheel, NestedRunFromACallbackDoesNothing) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  std::size_t nested = 99;
  Timer t(wheel, [&] { nested = wheel.advance(); });
  Timer u(wheel, [] {});
  t.arm(kStart + 1us);
  u.arm(kStart + 2us);
  clock.advance(5us);
  EXPECT_EQ(wheel.advance(), 2u);
  EXPECT_EQ(nested, 0u);
}

// --- Jumps and sleeping ------------------------------------------------------

TEST(TimerWheel, IdleJumpsCostNothing) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  for (Duration jump : {Duration(1s), Duration(1h), Duration(24h * 365 * 100)}) {
    clock.advance(jump);
    EXPECT_EQ(wheel.advance(), 0u);
  }
  EXPECT_EQ(wheel.stats().steps, 0u);
}

// An idle stack waking after a long time skips the empty span: the work is a
// few slot visits per level, not one per tick.
TEST(TimerWheel, LongJumpWithFewTimersCostsFewSteps) {
  ManualClock clock(kStart + 777ns);
  TimerWheel wheel(clock);
  int fired = 0;
  std::deque<Timer> timers;
  for (Duration d : {Duration(1s), Duration(1h), Duration(30 * 24h)}) {
    timers.emplace_back(wheel, [&fired] { ++fired; });
    timers.back().arm(clock.now() + d);
  }
  clock.advance(1s + 1us);  // the start is not on a tick boundary
  EXPECT_EQ(wheel.advance(), 1u);
  clock.advance(31 * 24h);
  EXPECT_EQ(wheel.advance(), 2u);
  EXPECT_EQ(fired, 3);
  EXPECT_LE(wheel.stats().steps, 3u * TimerWheel::kLevels);
}

TEST(TimerWheel, NextDeadline) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  EXPECT_FALSE(wheel.next_deadline());
  Timer near(wheel, [] {});
  Timer far(wheel, [] {});
  near.arm(kStart + 5us);
  far.arm(kStart + 10s);
  EXPECT_EQ(wheel.next_deadline(), kStart + 5us);  // level 0: exact
  near.cancel();
  std::optional<Time> next = wheel.next_deadline();
  ASSERT_TRUE(next);
  EXPECT_GT(*next, kStart);
  EXPECT_LE(*next, kStart + 10s);  // a cascade boundary at the latest
  far.cancel();
  EXPECT_FALSE(wheel.next_deadline());
}

// Sleeping from next_deadline() to next_deadline() reaches each timer in at
// most one wake-up per level, and wakes exactly at its due boundary.
TEST(TimerWheel, SleepingToNextDeadlineNeverOvershoots) {
  for (Duration d : {Duration(1us), Duration(63us), Duration(64us), Duration(4097us), Duration(1s),
                     Duration(1h + 7ns), Duration(24h * 40 + 3us)}) {
    for (Time start : {kStart, kStart + 12345ns, Time::max() - 24h * 41}) {
      ManualClock clock(start);
      TimerWheel wheel(clock);
      Time fired_at{};
      Timer t(wheel, [&] { fired_at = clock.now(); });
      Time deadline = start + d;
      t.arm(deadline);
      Time due = wheel.from_tick(wheel.to_tick_ceil(deadline));
      int wakes = 0;
      while (t.armed()) {
        std::optional<Time> next = wheel.next_deadline();
        ASSERT_TRUE(next);
        ASSERT_LE(*next, due);
        ASSERT_GT(*next, clock.now()) << "next_deadline does not move forward";
        clock.set(*next);
        wheel.advance();
        ASSERT_LE(++wakes, static_cast<int>(TimerWheel::kLevels) + 1);
      }
      EXPECT_EQ(fired_at, due);
      EXPECT_GE(fired_at, deadline);
    }
  }
}

TEST(TimerWheel, BigJumpOverManyTimersFiresThemAllInOrder) {
  ManualClock clock(kStart);
  TimerWheel wheel(clock);
  std::mt19937_64 rng(11);
  const int n = 50000;
  std::vector<Time> deadlines;
  std::vector<Time> fired;
  std::deque<Timer> timers;
  for (int i = 0; i < n; ++i) {
    // Multiples of the tick: fired deadlines must then be exactly nondecreasing.
    deadlines.push_back(kStart + std::chrono::microseconds(rng() % 3'600'000'000ull));
    Time d = deadlines.back();
    std::vector<Time>* f = &fired;
    timers.emplace_back(wheel, [f, d] { f->push_back(d); });
    timers.back().arm(d);
  }
  clock.advance(2h);
  EXPECT_EQ(wheel.advance(), static_cast<std::size_t>(n));
  ASSERT_EQ(fired.size(), static_cast<std::size_t>(n));
  EXPECT_TRUE(std::is_sorted(fired.begin(), fired.end()));
  std::sort(deadlines.begin(), deadlines.end());
  EXPECT_EQ(fired, deadlines);
}

// --- Model check: random arm / cancel / run against a simple reference ------

TEST(TimerWheel, MatchesAReferenceModelUnderRandomOperations) {
  for (Duration tick : {Duration(1), Duration(1000), Duration(4096)}) {
    ManualClock clock(Time(123456789ns));
    TimerWheel wheel(clock, tick);
    std::mt19937_64 rng(tick.count());
    const int n = 500;

    struct Model {
      bool armed = false;
      std::uint64_t due = 0;  // tick
      bool due_now = false;   // armed with its tick already run: fires next run
    };
    std::vector<Model> model(n);
    std::vector<int> fired_now;
    std::deque<Timer> timers;
    for (int i = 0; i < n; ++i) {
      std::vector<int>* f = &fired_now;
      timers.emplace_back(wheel, [f, i] { f->push_back(i); });
    }
    std::uint64_t last_target = wheel.to_tick(clock.now());

    for (int op = 0; op < 20000; ++op) {
      int i = static_cast<int>(rng() % n);
      switch (rng() % 8) {
        case 0:
        case 1:
        case 2: {  // arm: past, near, far
          static const std::int64_t spans[] = {1000, 100'000, 100'000'000, 1'000'000'000'000};
          std::int64_t span = spans[rng() % 4];
          auto off = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(2 * span)) - span / 8;
          Time d = clock.now() + Duration(off);
          timers[i].arm(d);
          model[i].armed = true;
          model[i].due = wheel.to_tick_ceil(d);
          model[i].due_now = model[i].due <= last_target;
          break;
        }
        case 3:
          timers[i].cancel();
          model[i].armed = false;
          break;
        default: {  // run
          static const std::int64_t steps[] = {0, 1, 700, 50'000, 20'000'000, 5'000'000'000};
          clock.advance(Duration(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(steps[rng() % 6] + 1))));
          fired_now.clear();
          wheel.advance();
          std::uint64_t target = wheel.to_tick(clock.now());
          std::vector<int> expect_now, expect_later;
          for (int j = 0; j < n; ++j) {
            if (!model[j].armed) continue;
            if (model[j].due_now) {
              expect_now.push_back(j);
            } else if (model[j].due <= target) {
              expect_later.push_back(j);
            }
          }
          // Already-due timers first, then by due tick.
          ASSERT_EQ(fired_now.size(), expect_now.size() + expect_later.size()) << "op " << op;
          std::vector<int> got_now(fired_now.begin(), fired_now.begin() + static_cast<std::ptrdiff_t>(expect_now.size()));
          std::vector<int> got_later(fired_now.begin() + static_cast<std::ptrdiff_t>(expect_now.size()), fired_now.end());
          std::sort(got_now.begin(), got_now.end());
          ASSERT_EQ(got_now, expect_now) << "op " << op;
          for (std::size_t k = 1; k < got_later.size(); ++k) {
            ASSERT_LE(model[got_later[k - 1]].due, model[got_later[k]].due) << "op " << op;
          }
          std::sort(got_later.begin(), got_later.end());
          ASSERT_EQ(got_later, expect_later) << "op " << op;
          for (int j : fired_now) model[j].armed = false;
          if (target > last_target) last_target = target;
          for (int j = 0; j < n; ++j) ASSERT_EQ(timers[j].armed(), model[j].armed) << j;
          std::size_t armed = 0;
          for (const Model& m : model) armed += m.armed;
          ASSERT_EQ(wheel.armed_count(), armed);
          break;
        }
      }
    }
  }
}

}  // namespace
}  // namespace xk

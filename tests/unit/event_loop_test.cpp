#include "xk/event_loop.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace xk {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

// Wait (yielding) until `done()` or a generous deadline; false on timeout. The
// deadline only turns a hang into a failure: it never decides a pass.
template <class Pred>
bool eventually(Pred done, std::chrono::milliseconds limit = 10s) {
  auto end = Steady::now() + limit;
  while (!done()) {
    if (Steady::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

Duration thread_cpu_time() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// The lowest CPU this thread may run on (CPU_SETSIZE if none is found).
int first_allowed_cpu() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return CPU_SETSIZE;
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(static_cast<std::size_t>(cpu), &allowed)) ++cpu;
  return cpu;
}

// A source with a fixed amount of work; optionally an eventfd that makes it
// ready (the way a driver queue with an interrupt or a doorbell looks).
class FakeSource : public Pollable {
 public:
  explicit FakeSource(bool with_fd = false) {
    if (with_fd) fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~FakeSource() override {
    if (fd_ >= 0) close(fd_);
  }
  std::size_t poll(std::size_t budget) override {
    ++polls;
    max_budget_seen = std::max(max_budget_seen, budget);
    if (fd_ >= 0) {
      std::uint64_t n = 0;
      if (read(fd_, &n, sizeof n) == sizeof n) pending += n;
    }
    std::size_t n = std::min<std::size_t>(budget, pending);
    pending -= n;
    done.fetch_add(n, std::memory_order_release);
    return n;
  }
  int wait_fd() const noexcept override { return fd_; }
  bool before_sleep() noexcept override {
    ++before;
    return !refuse_sleep;
  }
  void after_sleep() noexcept override { ++after; }

  void ring() const {
    std::uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }

  std::size_t pending = 0;
  std::size_t polls = 0;
  std::size_t max_budget_seen = 0;
  int before = 0;
  int after = 0;
  bool refuse_sleep = false;
  std::atomic<std::size_t> done{0};

 private:
  int fd_ = -1;
};

// --- Task ----------------------------------------------------------------------

TEST(Task, SmallInlineLargeOnHeapMoveOnlyCaptures) {
  int calls = 0;
  Task small([&calls] { ++calls; });
  std::array<char, 200> big{};
  big[199] = 7;
  Task large([&calls, big] { calls += big[199]; });
  auto owned = std::make_unique<int>(5);
  Task move_only([&calls, p = std::move(owned)] { calls += *p; });
  small();
  large();
  move_only();
  EXPECT_EQ(calls, 13);
  Task moved = std::move(large);
  EXPECT_FALSE(large);  // NOLINT: checking the moved-from state on purpose
  ASSERT_TRUE(moved);
  moved();
  EXPECT_EQ(calls, 20);
  moved = std::move(move_only);
  moved();
  EXPECT_EQ(calls, 25);
  moved.reset();
  EXPECT_FALSE(moved);
}  // ASan: captures are freed exactly once

// --- One thread: run_once, pollables, wait ----------------------------------------

TEST(EventLoop, RunOncePollsEverySourceWithinItsBudget) {
  EventLoopConfig cfg;
  cfg.poll_budget = 8;
  cfg.drain_rounds = 1;  // one burst per pass
  EventLoop loop(cfg);
  FakeSource a, b;
  a.pending = 20;
  b.pending = 3;
  loop.add(a);
  loop.add(b);
  EXPECT_EQ(loop.run_once(), 8u + 3u);
  EXPECT_EQ(loop.run_once(), 8u);
  EXPECT_EQ(loop.run_once(), 4u);
  EXPECT_EQ(loop.run_once(), 0u);
  EXPECT_EQ(a.max_budget_seen, 8u);
  EXPECT_EQ(a.polls, 4u);
  EXPECT_EQ(loop.counters().value("polls"), 4u);
  EXPECT_EQ(loop.counters().value("idle_polls"), 1u);
  loop.remove(b);
  loop.run_once();
  EXPECT_EQ(b.polls, 4u);
  EXPECT_EQ(a.polls, 5u);
}

// A source that fills its budget is polled again before the clock's timers
// run, so a timer that came due while the input queued acts on what the whole
// backlog said; a timer armed "due now" runs between the bursts.
TEST(EventLoop, InputDrainsBeforeTheClocksTimersUpToDrainRounds) {
  ManualClock clock(Time(1000s));
  EventLoopConfig cfg;
  cfg.poll_budget = 8;
  cfg.drain_rounds = 4;
  EventLoop loop(clock, cfg);
  FakeSource a, b;
  loop.add(a);
  loop.add(b);
  std::size_t done_when_fired = 0;
  Timer rto(loop.timers(), [&] { done_when_fired = a.done.load(); });
  std::vector<std::size_t> due_now_at;  // a.done when each "due now" timer ran
  Timer burst_end(loop.timers(), [&] { due_now_at.push_back(a.done.load()); });
  rto.arm_after(1ms);
  clock.advance(2ms);
  a.pending = 20;  // two full bursts and a short one
  b.pending = 3;
  burst_end.arm(Time{});
  EXPECT_EQ(loop.run_once(), 20u + 3u + 1u + 1u);  // the input, the first due-now timer, the RTO
  EXPECT_EQ(done_when_fired, 20u) << "the timer ran before the backlog was read";
  ASSERT_EQ(due_now_at.size(), 1u);
  EXPECT_EQ(due_now_at[0], 8u) << "a due-now timer runs at the end of the first burst";
  EXPECT_EQ(a.polls, 3u);
  EXPECT_EQ(b.polls, 3u);
  EXPECT_EQ(loop.counters().value("drain_rounds"), 2u);

  // Bounded: a source that never runs dry gets drain_rounds bursts, then the
  // timers run anyway.
  a.pending = 1000;
  rto.arm_after(1ms);
  clock.advance(1ms);
  loop.run_once();
  EXPECT_EQ(done_when_fired, 20u + 4 * 8u);
  EXPECT_EQ(a.pending, 1000u - 4 * 8u);
  EXPECT_EQ(loop.counters().value("drain_rounds"), 2u + 3u);
}

// A pollable that stops the loop (its work is done) is not polled again in
// the same pass, though another source still has a backlog to drain.
TEST(EventLoop, AStopEndsTheDrainingRounds) {
  ManualClock clock(Time(1000s));
  EventLoopConfig cfg;
  cfg.poll_budget = 8;
  cfg.drain_rounds = 4;
  EventLoop loop(clock, cfg);
  struct Stopper : Pollable {
    EventLoop* loop = nullptr;
    int polls = 0;
    std::size_t poll(std::size_t) override {
      ++polls;
      loop->stop();
      return 1;
    }
  } stopper;
  stopper.loop = &loop;
  FakeSource backlog;
  backlog.pending = 20;
  loop.add(backlog);
  loop.add(stopper);
  loop.run_once();
  EXPECT_EQ(stopper.polls, 1) << "polled again after it stopped the loop";
  EXPECT_EQ(backlog.polls, 1u);
  EXPECT_EQ(loop.counters().value("drain_rounds"), 0u);
  loop.remove(stopper);
  loop.remove(backlog);
}

TEST(EventLoop, SourcesMayRemoveThemselvesAndAddOthersWhilePolled) {
  EventLoop loop;
  struct SelfRemoving : Pollable {
    EventLoop* loop = nullptr;
    Pollable* to_add = nullptr;
    int polls = 0;
    std::size_t poll(std::size_t) override {
      ++polls;
      loop->remove(*this);
      if (to_add != nullptr) loop->add(*to_add);
      return 1;
    }
  } first;
  FakeSource added;
  first.loop = &loop;
  first.to_add = &added;
  loop.add(first);
  loop.run_once();
  loop.run_once();
  EXPECT_EQ(first.polls, 1);
  EXPECT_EQ(added.polls, 2u);  // appended during the first pass: polled in it too
}

TEST(EventLoop, PostedTasksRunInOrderOnRunOnce) {
  EventLoop loop;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) loop.post([&order, i] { order.push_back(i); });
  EXPECT_EQ(loop.run_once(), 5u);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(loop.counters().value("tasks_run"), 5u);
  EXPECT_TRUE(loop.try_post([&order] { order.push_back(5); }));
  loop.run_once();
  EXPECT_EQ(order.size(), 6u);
}

TEST(EventLoop, PostOnTheLoopThreadWithAFullRingDoesNotDeadlock) {
  EventLoopConfig cfg;
  cfg.post_capacity = 2;
  EventLoop loop(cfg);
  std::vector<int> order;
  // The first two fill the ring; each further post makes room by running them.
  for (int i = 0; i < 10; ++i) loop.post([&order, i] { order.push_back(i); });
  EXPECT_FALSE(loop.try_post([] {}));
  loop.run_once();
  ASSERT_EQ(order.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(EventLoop, TimersRunOnTheInjectedClock) {
  ManualClock clock(Time(1000s));
  EventLoop loop(clock);
  int fired = 0;
  Timer t(loop.timers(), [&fired] { ++fired; });
  t.arm_after(5ms);
  EXPECT_EQ(loop.run_once(), 0u);
  clock.advance(5ms);
  EXPECT_EQ(loop.run_once(), 1u);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(loop.counters().value("timers_fired"), 1u);
}

// flush_output() is the output half of a pass: the posted tasks, the timers
// due now and each pollable's flush_output(), but no pollable's input.
TEST(EventLoop, FlushOutputRunsTasksTimersAndFlushesButTakesNoInput) {
  struct Flushing : FakeSource {
    std::size_t flush_output() override {
      ++flushes;
      return queued;
    }
    std::size_t flushes = 0;
    std::size_t queued = 2;
  };
  ManualClock clock(Time(1000s));
  EventLoop loop(clock);
  Flushing src;
  src.pending = 5;
  loop.add(src);
  int posted = 0, fired = 0, later = 0;
  loop.post([&posted] { ++posted; });
  Timer due(loop.timers(), [&fired] { ++fired; });
  due.arm_after(0ms);
  Timer not_yet(loop.timers(), [&later] { ++later; });
  not_yet.arm_after(1ms);
  EXPECT_EQ(loop.flush_output(), 1u + 1u + 2u);
  EXPECT_EQ(posted, 1);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(later, 0);
  EXPECT_EQ(src.flushes, 1u);
  EXPECT_EQ(src.polls, 0u);     // the input waits for a pass
  EXPECT_EQ(src.pending, 5u);
  EXPECT_EQ(loop.counters().value("polls"), 0u);
  loop.run_once();
  EXPECT_EQ(src.polls, 1u);
  EXPECT_EQ(src.pending, 0u);
}

TEST(EventLoop, WaitReChecksBeforeSleeping) {
  EventLoop loop;
  FakeSource src;
  loop.add(src);
  // Work already queued: no sleep.
  loop.post([] {});
  EXPECT_FALSE(loop.wait());
  loop.run_once();
  // A wake() before the sleep: no sleep.
  loop.wake();
  EXPECT_FALSE(loop.wait());
  // A source that reports work at the last moment: no sleep, no after_sleep.
  src.refuse_sleep = true;
  EXPECT_FALSE(loop.wait(1s));
  EXPECT_EQ(src.before, 1);
  EXPECT_EQ(src.after, 0);
  // A due timer: no sleep.
  src.refuse_sleep = false;
  Timer t(loop.timers(), [] {});
  t.arm(loop.clock().now() - 1ms);
  EXPECT_FALSE(loop.wait(1s));
  loop.run_once();
  // Nothing to do: sleeps for the limit, and tells the source it woke.
  auto start = Steady::now();
  EXPECT_TRUE(loop.wait(2ms));
  EXPECT_GE(Steady::now() - start, 2ms);
  EXPECT_EQ(src.after, 1);
  EXPECT_EQ(loop.counters().value("sleeps"), 1u);
  EXPECT_EQ(loop.counters().value("timeouts"), 1u);
  EXPECT_GE(loop.counters().value("sleep_aborts"), 4u);
}

TEST(EventLoop, WaitEndsAtTheNextTimer) {
  EventLoop loop;
  Timer t(loop.timers(), [] {});
  auto start = Steady::now();
  t.arm_after(5ms);
  EXPECT_TRUE(loop.wait());  // no limit: the timer bounds the sleep
  EXPECT_GE(Steady::now() - start, 5ms);
  EXPECT_EQ(loop.run_once(), 1u);
}

// --- A loop on its own thread ---------------------------------------------------

TEST(EventLoop, PostsFromManyThreadsRunExactlyOnceOnTheLoopThread) {
  EventLoop loop;
  constexpr int kThreads = 4;
  constexpr std::uint32_t kPerThread = 100000;
  struct State {
    std::vector<std::vector<std::uint8_t>> seen;
    std::vector<std::int64_t> last;
    bool off_thread = false;
    bool out_of_order = false;
    std::uint64_t ran = 0;
  } st;
  st.seen.assign(kThreads, std::vector<std::uint8_t>(kPerThread, 0));
  st.last.assign(kThreads, -1);
  loop.start_thread();

  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&loop, &st, t] {
      for (std::uint32_t i = 0; i < kPerThread; ++i) {
        loop.post([&loop, &st, t, i] {
          // Runs on the loop thread only: plain data, no locks.
          if (!loop.in_loop_thread()) st.off_thread = true;
          ++st.seen[static_cast<std::size_t>(t)][i];
          if (static_cast<std::int64_t>(i) <= st.last[static_cast<std::size_t>(t)]) st.out_of_order = true;
          st.last[static_cast<std::size_t>(t)] = i;
          ++st.ran;
        });
      }
    });
  }
  for (std::thread& p : posters) p.join();
  std::atomic<bool> drained{false};
  loop.post([&drained] { drained.store(true, std::memory_order_release); });  // FIFO: after all of them
  ASSERT_TRUE(eventually([&] { return drained.load(std::memory_order_acquire); }));
  loop.stop();
  loop.join();  // makes the loop thread's writes visible here

  EXPECT_FALSE(st.off_thread);
  EXPECT_FALSE(st.out_of_order);
  EXPECT_EQ(st.ran, std::uint64_t{kThreads} * kPerThread);
  for (const auto& per_thread : st.seen) {
    for (std::uint8_t n : per_thread) ASSERT_EQ(n, 1);
  }
  EXPECT_EQ(loop.counters().value("tasks_run"), std::uint64_t{kThreads} * kPerThread + 1);
}

// The loop goes to sleep as soon as it is idle (no spin), and the test posts
// again right after each task ran: every post races with the loop falling
// asleep. A lost wake-up would leave a task unrun (the loop has no timers).
TEST(EventLoop, NoLostWakeupsInSleepPostCycles) {
  EventLoopConfig cfg;
  cfg.spin = Duration(0);
  EventLoop loop(cfg);
  loop.start_thread();
  std::atomic<int> done{0};
  const int cycles = 5000;
  int failed_at = -1;
  for (int i = 0; i < cycles; ++i) {
    loop.post([&done, i] { done.store(i + 1, std::memory_order_release); });
    if (!eventually([&] { return done.load(std::memory_order_acquire) == i + 1; })) {
      failed_at = i;
      break;
    }
    if (i % 3 == 1) std::this_thread::sleep_for(std::chrono::microseconds(i % 50));  // let it reach epoll
  }
  loop.stop();
  loop.join();
  EXPECT_EQ(failed_at, -1) << "a posted task was not run: lost wake-up";
  std::uint64_t sleeps = loop.counters().value("sleeps");
  EXPECT_GT(sleeps, 0u);
  // At most one doorbell per announced sleep (taken or given up), plus the stop.
  EXPECT_LE(loop.counters().value("doorbells"), sleeps + loop.counters().value("sleep_aborts") + 1);
}

TEST(EventLoop, WakesForAPollableDescriptor) {
  EventLoopConfig cfg;
  cfg.spin = Duration(0);
  EventLoop loop(cfg);
  FakeSource src(/*with_fd=*/true);
  loop.add(src);
  loop.start_thread();
  for (std::size_t i = 1; i <= 200; ++i) {
    src.ring();
    ASSERT_TRUE(eventually([&] { return src.done.load(std::memory_order_acquire) == i; })) << i;
  }
  loop.stop();
  loop.join();
  EXPECT_GT(loop.counters().value("wakeups"), 0u);
  EXPECT_EQ(src.before, src.after);  // every armed sleep was followed by after_sleep
}

TEST(EventLoop, StopFromAnotherThreadEndsASleepingLoop) {
  EventLoop loop;
  std::atomic<bool> returned{false};
  std::thread runner([&] {
    loop.run();
    returned.store(true);
  });
  std::this_thread::sleep_for(20ms);  // long past the spin: asleep in epoll
  EXPECT_FALSE(returned.load());
  loop.stop();
  bool ok = eventually([&] { return returned.load(); }, 5s);
  if (!ok) loop.stop();
  runner.join();
  EXPECT_TRUE(ok) << "stop() did not end run()";
  EXPECT_GE(loop.counters().value("sleeps"), 1u);
  // A stop before run() starts makes it return at once (and is consumed).
  loop.stop();
  loop.run();
}

TEST(EventLoop, TimersFireFromRun) {
  EventLoop loop;
  struct Ctx {
    EventLoop* loop = nullptr;
    Timer* timer = nullptr;
    std::vector<Time> deadlines, at;
    std::atomic<int> fired{0};
  } ctx;
  ctx.loop = &loop;
  Timer timer(loop.timers(), [&ctx] {
    ctx.at.push_back(ctx.loop->clock().now());
    ctx.deadlines.push_back(ctx.timer->deadline());
    if (ctx.at.size() < 5) ctx.timer->arm(ctx.timer->deadline() + 2ms);  // periodic
    ctx.fired.fetch_add(1, std::memory_order_release);
  });
  ctx.timer = &timer;
  // Timers belong to the loop thread: arm through post().
  loop.post([&ctx] { ctx.timer->arm_after(10ms); });
  auto start = Steady::now();
  loop.start_thread();
  bool ok = eventually([&] { return ctx.fired.load(std::memory_order_acquire) == 5; });
  auto elapsed = Steady::now() - start;
  loop.stop();
  loop.join();
  ASSERT_TRUE(ok);
  EXPECT_GE(elapsed, 18ms);
  ASSERT_EQ(ctx.at.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_GE(ctx.at[i], ctx.deadlines[i]) << "fired early";
    EXPECT_EQ(ctx.deadlines[i], ctx.deadlines[0] + i * 2ms);
  }
  EXPECT_EQ(loop.counters().value("timers_fired"), 5u);
  EXPECT_GE(loop.counters().value("sleeps"), 1u);  // 2 ms gaps are far longer than the spin
}

TEST(EventLoop, IdleLoopSleepsInsteadOfSpinning) {
  EventLoop loop;  // spin_then_sleep, 50 us spin
  loop.start_thread();
  std::atomic<std::int64_t> cpu_start{-1}, cpu_end{-1};
  loop.post([&] { cpu_start.store(thread_cpu_time().count()); });
  ASSERT_TRUE(eventually([&] { return cpu_start.load() >= 0; }));
  auto wall_start = Steady::now();
  std::this_thread::sleep_for(300ms);
  loop.post([&] { cpu_end.store(thread_cpu_time().count()); });
  ASSERT_TRUE(eventually([&] { return cpu_end.load() >= 0; }));
  auto wall = Steady::now() - wall_start;
  loop.stop();
  loop.join();
  Duration cpu(cpu_end.load() - cpu_start.load());
  EXPECT_GE(wall, 300ms);
  EXPECT_LT(cpu, 100ms) << "an idle loop burned " << cpu.count() << " ns of CPU";
  EXPECT_GE(loop.counters().value("sleeps"), 1u);
}

TEST(EventLoop, BusyPollNeverSleeps) {
  EventLoopConfig cfg;
  cfg.idle = IdleMode::busy_poll;
  EventLoop loop(cfg);
  loop.start_thread();
  std::this_thread::sleep_for(20ms);
  std::atomic<bool> ran{false};
  loop.post([&ran] { ran.store(true); });
  ASSERT_TRUE(eventually([&] { return ran.load(); }));
  loop.stop();
  loop.join();
  EXPECT_EQ(loop.counters().value("sleeps"), 0u);
  EXPECT_GT(loop.counters().value("polls"), 1u);
}

TEST(EventLoop, IdleModesByName) {
  for (IdleMode m : {IdleMode::busy_poll, IdleMode::spin_then_sleep, IdleMode::yield_then_sleep}) {
    EXPECT_EQ(parse_idle_mode(idle_mode_name(m)), m) << idle_mode_name(m);
  }
  EXPECT_EQ(parse_idle_mode("yield"), IdleMode::yield_then_sleep);
  EXPECT_FALSE(parse_idle_mode("sleep").has_value());
  EXPECT_FALSE(parse_idle_mode("").has_value());
  EXPECT_FALSE(parse_idle_mode("Yield").has_value());
}

TEST(EventLoop, YieldingLoopSleepsWhenIdleToo) {
  EventLoopConfig cfg;
  cfg.idle = IdleMode::yield_then_sleep;
  EventLoop loop(cfg);
  loop.start_thread();
  std::atomic<std::int64_t> cpu_start{-1}, cpu_end{-1};
  loop.post([&] { cpu_start.store(thread_cpu_time().count()); });
  ASSERT_TRUE(eventually([&] { return cpu_start.load() >= 0; }));
  std::this_thread::sleep_for(300ms);
  loop.post([&] { cpu_end.store(thread_cpu_time().count()); });
  ASSERT_TRUE(eventually([&] { return cpu_end.load() >= 0; }));
  loop.stop();
  loop.join();
  Duration cpu(cpu_end.load() - cpu_start.load());
  EXPECT_LT(cpu, 100ms) << "an idle loop burned " << cpu.count() << " ns of CPU";
  EXPECT_GE(loop.counters().value("sleeps"), 1u);
}

// The point of yield_then_sleep: while it spins, a thread that shares its
// core gets the core. Both threads on one CPU for 300 ms, the loop spinning
// all along (its spin is longer than the test): with the pause hint the
// scheduler splits the core about evenly; yielding, the loop takes a sliver.
// Measured as the two threads' CPU times, so other load on the machine
// changes both alike.
TEST(EventLoop, YieldingLoopGivesItsCoreToAThreadOnTheSameCpu) {
  const int cpu = first_allowed_cpu();
  ASSERT_LT(cpu, CPU_SETSIZE);

  auto share = [cpu](IdleMode mode) {
    EventLoopConfig cfg;
    cfg.idle = mode;
    cfg.spin = 60s;
    EventLoop loop(cfg);
    loop.start_thread(ThreadOptions{.cpu = cpu, .name = "xk-yield-test"});
    std::atomic<std::int64_t> loop_cpu0{-1}, loop_cpu1{-1};
    loop.post([&] { loop_cpu0.store(thread_cpu_time().count()); });
    EXPECT_TRUE(eventually([&] { return loop_cpu0.load() >= 0; }));
    Duration other_cpu{};
    std::thread other([&] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(static_cast<std::size_t>(cpu), &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      const Duration t0 = thread_cpu_time();
      const auto until = Steady::now() + 300ms;
      while (Steady::now() < until) {
      }
      other_cpu = thread_cpu_time() - t0;
    });
    other.join();
    loop.post([&] { loop_cpu1.store(thread_cpu_time().count()); });
    EXPECT_TRUE(eventually([&] { return loop_cpu1.load() >= 0; }));
    loop.stop();
    loop.join();
    EXPECT_EQ(loop.counters().value("sleeps"), 0u) << "the spin outlasts the test";
    const Duration loop_cpu(loop_cpu1.load() - loop_cpu0.load());
    return std::pair{loop_cpu, other_cpu};
  };
  const auto [spin_loop, spin_other] = share(IdleMode::spin_then_sleep);
  const auto [yield_loop, yield_other] = share(IdleMode::yield_then_sleep);
  EXPECT_GT(spin_loop, spin_other / 4) << "pausing, the loop keeps its share of the core";
  EXPECT_LT(yield_loop, yield_other / 4) << "yielding, the loop leaves the core to the other thread";
  EXPECT_GT(yield_other, spin_other) << "the other thread got more of the core";
}

TEST(EventLoop, ThreadNameAndAffinity) {
  const int cpu = first_allowed_cpu();
  ASSERT_LT(cpu, CPU_SETSIZE);

  EventLoop loop(EventLoopConfig{.name = "stack0"});
  loop.start_thread(ThreadOptions{.cpu = cpu, .name = "xk-stack0-with-a-long-name"});
  std::atomic<bool> ran{false};
  std::string name;
  int on_cpu = -1;
  loop.post([&] {
    char buf[32] = {};
    pthread_getname_np(pthread_self(), buf, sizeof buf);
    name = buf;
    on_cpu = sched_getcpu();
    ran.store(true, std::memory_order_release);
  });
  ASSERT_TRUE(eventually([&] { return ran.load(std::memory_order_acquire); }));
  loop.stop();
  loop.join();
  EXPECT_EQ(name, "xk-stack0-with-");  // 15 characters kept
  EXPECT_EQ(on_cpu, cpu);
  EXPECT_EQ(loop.counters().owner(), "stack0");
  EXPECT_THROW(
      {
        EventLoop other;
        other.start_thread(ThreadOptions{.cpu = CPU_SETSIZE + 5, .name = {}});
      },
      std::system_error);
}

TEST(EventLoop, DestructorStopsItsThread) {
  auto loop = std::make_unique<EventLoop>();
  loop->start_thread();
  std::atomic<bool> ran{false};
  loop->post([&ran] { ran.store(true); });
  ASSERT_TRUE(eventually([&] { return ran.load(); }));
  loop.reset();  // must not hang
}

}  // namespace
}  // namespace xk

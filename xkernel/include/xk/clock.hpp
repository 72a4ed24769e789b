#pragma once
// Time for the framework comes from an injected Clock (docs/style.md), so
// tests and fuzzers drive it: production code uses MonotonicClock, tests a
// ManualClock they move by hand.
//
// Time is a point on the steady clock with nanosecond resolution; durations are
// plain std::chrono durations. The whole signed 64-bit range is valid, so a
// ManualClock may start anywhere, including next to Time::max().

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace xk {

using Duration = std::chrono::nanoseconds;
using Time = std::chrono::time_point<std::chrono::steady_clock, Duration>;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Time now() const noexcept = 0;
};

// CLOCK_MONOTONIC: never jumps back, not moved by settimeofday/NTP steps.
class MonotonicClock final : public Clock {
 public:
  Time now() const noexcept override;
};

// A clock that moves only when told to. Safe to read from one thread while
// another moves it (the loop thread reads, the test thread advances).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Time start = Time{}) noexcept : ns_(start.time_since_epoch().count()) {}

  Time now() const noexcept override { return Time(Duration(ns_.load(std::memory_order_acquire))); }
  void set(Time t) noexcept { ns_.store(t.time_since_epoch().count(), std::memory_order_release); }
  // Saturates at Time::min()/max() rather than wrapping.
  void advance(Duration d) noexcept;

 private:
  std::atomic<std::int64_t> ns_;
};

// t + d, clamped to [Time::min(), Time::max()] instead of overflowing: "arm in
// a day" near the end of the range means "never".
Time saturating_add(Time t, Duration d) noexcept;

// A duration (not negative) as the timespec a system call's timeout takes.
inline timespec to_timespec(Duration d) noexcept {
  return {static_cast<time_t>(d.count() / 1'000'000'000), static_cast<long>(d.count() % 1'000'000'000)};
}

}  // namespace xk

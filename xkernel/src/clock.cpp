#include "xk/clock.hpp"

#include <time.h>

namespace xk {

Time MonotonicClock::now() const noexcept {
  timespec ts{};
  // Cannot fail for CLOCK_MONOTONIC with a valid pointer (vDSO, no syscall).
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Time(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

void ManualClock::advance(Duration d) noexcept {
  std::int64_t cur = ns_.load(std::memory_order_relaxed);
  while (!ns_.compare_exchange_weak(cur, saturating_add(Time(Duration(cur)), d).time_since_epoch().count(),
                                    std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

Time saturating_add(Time t, Duration d) noexcept {
  std::int64_t r = 0;
  if (__builtin_add_overflow(t.time_since_epoch().count(), d.count(), &r)) {
    return d.count() > 0 ? Time::max() : Time::min();
  }
  return Time(Duration(r));
}

}  // namespace xk

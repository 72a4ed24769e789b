#pragma once
// Runs an event loop until a condition holds or a wall-clock limit passes:
// the wait every suite with real drivers (pair, memif, shm) needs. A pass
// that found nothing to do yields the CPU for a moment, so a loaded machine
// (or the other end's thread) gets on with it.
#include <chrono>
#include <thread>

#include "xk/event_loop.hpp"

namespace xk::test {

template <class F>
bool run_until(EventLoop& loop, F&& done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    if (loop.run_once() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

}  // namespace xk::test

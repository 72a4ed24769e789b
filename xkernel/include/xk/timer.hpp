#pragma once
// Timers: a hierarchical timer wheel over an injected Clock.
//
// A Timer is an RAII object owned by its user (typically a member of a TCP
// session): it is built once with its callback, armed and cancelled any number
// of times, and cancelled by its destructor. Arming and cancelling are O(1) and
// never allocate: each Timer carries its own list links, and the wheel keeps
// one 64-bit occupancy bitmap per level.
//
// The wheel counts time in ticks (default 1 us). It has 11 levels of 64 slots,
// which covers every 64-bit tick distance, so there is no overflow list. A
// timer due at tick T sits at the level of the highest bit in which T differs
// from the wheel's current tick, in the slot given by T's bits at that level;
// when the current tick reaches the start of a slot above level 0, the slot is
// cascaded (its timers move to lower levels). run_expired() finds the next
// occupied slot from the bitmaps, so an idle span of any length costs a few bit
// scans, not one step per tick.
//
// Guarantees:
// - A timer never fires before its deadline: it is due at the first tick
//   boundary at or after the deadline, and fires in the first run_expired(now)
//   with now at or past that boundary. Called with now >= deadline + tick, it
//   has fired: never more than one tick late with respect to the calls made.
// - Timers fire in order of their due tick. Within one tick the order is
//   unspecified. Timers that were already due when armed fire first.
// - A timer armed (or re-armed) with a due tick at or before the instant being
//   run to -- or before the last instant already run -- is "due now": it fires
//   at the start of the next run_expired() call, never within the current one.
//   So a callback that re-arms itself in the past fires once per call, and one
//   run_expired() always terminates.
// - Inside a callback it is safe to cancel, re-arm or destroy any timer of the
//   wheel, including the one whose callback is running, and to arm new ones. A
//   cancelled or destroyed timer that was due in the same run does not fire.
// - Callbacks must not throw (run_expired is noexcept) and must not destroy
//   the wheel. A nested run_expired() from a callback does nothing.
//
// Single-threaded: a wheel and its timers belong to one thread (one stack).

#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <type_traits>

#include "xk/clock.hpp"

namespace xk {

class TimerWheel;

// The callback of a Timer: any callable `void()` that is trivially copyable and
// at most two pointers in size (a lambda capturing `this` and one value): a
// TCP connection holds five timers, and every byte of a callback's room is
// paid five times per idle connection.
// No allocation, and the wheel invokes a copy, so a callback may destroy its
// own Timer. Needing more state means capturing a pointer to it.
class TimerCallback {
 public:
  static constexpr std::size_t kCapacity = 2 * sizeof(void*);

  TimerCallback() noexcept = default;

  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, TimerCallback> &&
             std::is_invocable_r_v<void, std::remove_cvref_t<F>&>)
  TimerCallback(F&& f) noexcept {  // NOLINT: implicit, so a lambda can be passed directly
    using Fn = std::remove_cvref_t<F>;
    static_assert(std::is_trivially_copyable_v<Fn> && std::is_trivially_destructible_v<Fn>,
                  "a timer callback must be trivially copyable: capture pointers, not owners");
    static_assert(sizeof(Fn) <= kCapacity && alignof(Fn) <= alignof(void*),
                  "a timer callback may hold at most two pointers: capture a pointer to more");
    ::new (static_cast<void*>(buf_)) Fn(static_cast<F&&>(f));
    call_ = [](void* p) { (*std::launder(static_cast<Fn*>(p)))(); };
  }

  explicit operator bool() const noexcept { return call_ != nullptr; }
  void operator()() { call_(static_cast<void*>(buf_)); }

 private:
  alignas(void*) unsigned char buf_[kCapacity] = {};
  void (*call_)(void*) = nullptr;
};

namespace detail {
// Intrusive circular doubly linked list node; a list is a sentinel node.
struct TimerLink {
  TimerLink* prev = this;
  TimerLink* next = this;
  TimerLink() noexcept = default;
  TimerLink(const TimerLink&) = delete;
  TimerLink& operator=(const TimerLink&) = delete;
};
}  // namespace detail

class Timer : private detail::TimerLink {
 public:
  // The wheel must outlive the timer while it is armed (a wheel destroyed first
  // disarms its timers; such a timer may then only be destroyed).
  Timer(TimerWheel& wheel, TimerCallback callback) noexcept : wheel_(&wheel), callback_(callback) {}
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Arm at an absolute deadline (re-arms if armed). A deadline already passed
  // fires on the next run_expired().
  void arm(Time deadline) noexcept;
  // Arm at wheel.clock().now() + d (saturating: a huge d means never).
  void arm_after(Duration d) noexcept;
  // Disarm; no-op if not armed.
  void cancel() noexcept;

  bool armed() const noexcept { return where_ != Where::none; }
  // The deadline of the last arm() (meaningful while armed).
  Time deadline() const noexcept { return deadline_; }
  TimerWheel& wheel() const noexcept { return *wheel_; }

 private:
  friend class TimerWheel;
  enum class Where : std::uint8_t { none, wheel, due };

  // What cascading reads comes first, next to the links: one cache line.
  std::uint64_t tick_ = 0;  // due tick: first tick boundary at or after deadline_
  Where where_ = Where::none;
  std::uint8_t level_ = 0;
  std::uint8_t slot_ = 0;
  TimerWheel* wheel_;
  Time deadline_{};
  TimerCallback callback_;
};

class TimerWheel {
 public:
  // Why 1 us: on one machine a frame crosses memif in a few microseconds, so
  // retransmission and pacing timers of a fast LAN need sub-millisecond
  // resolution. A finer tick costs nothing while idle (empty spans are
  // skipped with the bitmaps) and only adds cascades to long timers, which TCP
  // mostly cancels before they come due; a coarser tick makes short timers
  // late. A tick that is a power of two nanoseconds saves a division per arm.
  static constexpr Duration kDefaultTick = std::chrono::microseconds(1);
  static constexpr unsigned kSlotBits = 6;
  static constexpr unsigned kSlots = 1u << kSlotBits;
  static constexpr unsigned kLevels = (64 + kSlotBits - 1) / kSlotBits;  // 11: every 64-bit span

  // Throws std::invalid_argument if tick <= 0 (configuration error). The wheel
  // starts at clock.now(): ticks up to it count as already run.
  explicit TimerWheel(const Clock& clock, Duration tick = kDefaultTick);
  ~TimerWheel();
  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;

  const Clock& clock() const noexcept { return clock_; }
  Duration tick() const noexcept { return Duration(tick_ns_); }

  // Fire every timer due at or before `now`, in due-tick order. Returns the
  // number fired. A `now` earlier than a previous call's runs only timers that
  // are due now (the wheel never goes back).
  std::size_t run_expired(Time now) noexcept;
  std::size_t advance() noexcept { return run_expired(clock_.now()); }
  // Fire only the timers that were armed already due (a deadline before the
  // last instant run: "as soon as the current work is done"), without moving
  // time; the clock's timers wait for the next run_expired(). Returns the
  // number fired. Nothing inside a run.
  std::size_t run_due() noexcept;

  // When run_expired() may next have work: nullopt if no timer is armed. Exact
  // when the earliest timer shares its slot with few others; otherwise it may
  // be early (the start of the slot, which must be cascaded), and it is the
  // last instant run if timers are already due. Never later than the first
  // due timer.
  std::optional<Time> next_deadline() const noexcept;

  std::size_t armed_count() const noexcept { return armed_; }

  // Tick arithmetic, public for tests and tools. Tick boundaries are whole
  // multiples of the tick since the clock's epoch; ticks are numbered from the
  // one holding Time::min(), so every Time maps to a 64-bit tick. The tick of
  // Time::max() at a 1 ns tick is never run: a timer armed there never fires.
  std::uint64_t to_tick(Time t) const noexcept;       // floor
  std::uint64_t to_tick_ceil(Time t) const noexcept;  // first tick boundary >= t
  Time from_tick(std::uint64_t tick) const noexcept;  // saturates at Time::min()/max()

  struct Stats {
    std::uint64_t fired = 0;     // callbacks run
    std::uint64_t cascaded = 0;  // timers moved down a level
    std::uint64_t steps = 0;     // slots visited by run_expired (fired or cascaded)
  };
  const Stats& stats() const noexcept { return stats_; }

 private:
  friend class Timer;
  using Link = detail::TimerLink;

  void arm(Timer& t, Time deadline) noexcept;
  void remove(Timer& t) noexcept;
  void place(Timer& t) noexcept;
  void move_to(std::uint64_t tick) noexcept;
  void cascade(unsigned level, unsigned slot) noexcept;
  std::size_t fire(Link& batch) noexcept;
  void take(Link& from, Link& to) noexcept;
  struct Split {
    std::uint64_t tick;
    bool exact;  // t is on a tick boundary
  };
  Split split(Time t) const noexcept;

  const Clock& clock_;
  std::int64_t tick_ns_;
  int shift_;             // log2(tick_ns_) if a power of two, else -1
  std::uint64_t first_;   // floor(Time::min() / tick) as unsigned: tick 0
  std::uint64_t now_;     // next tick to run; every timer in the wheel is due at or after it
  bool running_ = false;  // inside run_expired
  std::uint64_t run_target_ = 0;  // while running: the last tick this run reaches
  std::size_t armed_ = 0;
  std::uint32_t level_mask_ = 0;            // bit L: occupied_[L] != 0
  std::uint64_t occupied_[kLevels] = {};    // bit s: slots_[L][s] non-empty
  Link due_;                                // armed when already due
  Link slots_[kLevels][kSlots];
  Stats stats_;
};

}  // namespace xk

#pragma once
// EventLoop: what drives one stack instance. One thread owns it and runs it to
// completion -- posted tasks, due timers, then every registered Pollable
// (driver queues, filterd channels) -- and nothing on that path takes a lock.
//
// Other threads talk to the loop only through post() (a bounded lock-free MPMC
// ring of Tasks), wake() and stop(). Everything else (timers, add/remove,
// run_once) belongs to the loop's thread.
//
// Idle policy: busy-poll, or spin for a bounded time and then sleep in epoll on
// the loop's eventfd and the pollables' file descriptors, with a timeout of the
// time to the next timer. The doorbell protocol that makes sleeping safe:
//
//   loop:   sleeping = true; fence(seq_cst); re-check queue, wake flag,
//           pollables (before_sleep) and timers; sleep only if all are idle
//   poster: push; fence(seq_cst); if sleeping: clear it and write the eventfd
//
// Either the loop's re-check sees the new item, or the poster sees the flag
// and rings; a poster rings at most once per sleep (the one that clears it).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "xk/clock.hpp"
#include "xk/counters.hpp"
#include "xk/ring.hpp"
#include "xk/timer.hpp"

namespace xk {

// A move-only `void()` callable. Small callables (up to 48 bytes, nothrow
// movable) are stored inline, so posting a lambda that captures a few values
// allocates nothing; larger ones go to the heap.
class Task {
 public:
  static constexpr std::size_t kInline = 48;

  Task() noexcept = default;

  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, Task> &&
             std::is_invocable_r_v<void, std::decay_t<F>&>)
  Task(F&& f) noexcept {  // NOLINT: implicit, so a lambda can be posted directly
    using Fn = std::decay_t<F>;
    if constexpr (fits_inline<Fn>()) {
      ::new (static_cast<void*>(buf_)) Fn(std::forward<F>(f));
      ops_ = &kInlineOps<Fn>;
    } else {
      // Out of memory here ends the program (noexcept): a claimed ring slot
      // must be filled.
      ::new (static_cast<void*>(buf_)) Fn*(new Fn(std::forward<F>(f)));
      ops_ = &kHeapOps<Fn>;
    }
  }

  Task(Task&& other) noexcept { take(other); }
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  void operator()() { ops_->call(buf_); }
  void reset() noexcept {
    if (ops_ != nullptr) {
      ops_->destroy(buf_);
      ops_ = nullptr;
    }
  }

 private:
  struct Ops {
    void (*call)(void* self);
    void (*move)(void* dst, void* src) noexcept;  // move-construct dst, destroy src
    void (*destroy)(void* self) noexcept;
  };

  template <class Fn>
  static constexpr bool fits_inline() {
    return sizeof(Fn) <= kInline && alignof(Fn) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Fn>;
  }
  template <class P>
  static P* as(void* p) noexcept {
    return std::launder(static_cast<P*>(p));
  }

  template <class Fn>
  static constexpr Ops kInlineOps = {
      [](void* self) { (*as<Fn>(self))(); },
      [](void* dst, void* src) noexcept {
        ::new (dst) Fn(std::move(*as<Fn>(src)));
        as<Fn>(src)->~Fn();
      },
      [](void* self) noexcept { as<Fn>(self)->~Fn(); },
  };
  template <class Fn>
  static constexpr Ops kHeapOps = {
      [](void* self) { (**as<Fn*>(self))(); },
      [](void* dst, void* src) noexcept { ::new (dst) Fn*(*as<Fn*>(src)); },
      [](void* self) noexcept { delete *as<Fn*>(self); },
  };

  void take(Task& other) noexcept {
    if (other.ops_ != nullptr) {
      other.ops_->move(buf_, other.buf_);
      ops_ = other.ops_;
      other.ops_ = nullptr;
    }
  }

  alignas(std::max_align_t) unsigned char buf_[kInline];
  const Ops* ops_ = nullptr;
};

// A source of work the loop polls: a driver's receive queue, a control socket,
// a ring from the application.
class Pollable {
 public:
  virtual ~Pollable() = default;

  // Do at most `budget` units of work (frames, messages); return how many were
  // done. 0 means idle.
  virtual std::size_t poll(std::size_t budget) = 0;

  // Send what poll() would send at its end, taking no input (a driver's
  // queued frames); how many units went. EventLoop::flush_output().
  virtual std::size_t flush_output() { return 0; }

  // A descriptor that becomes readable when there is work, so a sleeping loop
  // wakes for it (level-triggered: poll() must drain it), or -1. Read once, in
  // EventLoop::add(); it must stay open until remove().
  virtual int wait_fd() const noexcept { return -1; }

  // The loop is about to sleep. Arm the wake-up (e.g. set the "asleep" flag a
  // peer reads before ringing a doorbell), re-check for work, and return false
  // if there is some (the loop then does not sleep). A source with no
  // descriptor that can get work without the loop noticing must return false.
  virtual bool before_sleep() noexcept { return true; }
  // The loop woke (or gave up sleeping) after before_sleep() returned true.
  virtual void after_sleep() noexcept {}
};

enum class IdleMode : std::uint8_t {
  busy_poll,        // never sleep: lowest latency, one core at 100 %
  spin_then_sleep,  // poll for `spin` after the last work, then sleep
  // As spin_then_sleep, but between idle polls give the core to whoever else
  // is runnable on it (sched_yield). For more busy processes than cores: a
  // peer that shares this core runs at once instead of after a sleep and a
  // wake-up (docs/timers-and-loop.md, "Yielding").
  yield_then_sleep,
};

// "busy", "spin" or "yield"; nullopt for anything else.
std::optional<IdleMode> parse_idle_mode(std::string_view name) noexcept;
const char* idle_mode_name(IdleMode mode) noexcept;
// One pause of an idle poll before the loop sleeps: the CPU's pause hint, or
// sched_yield in yield_then_sleep.
void idle_pause(IdleMode mode) noexcept;

struct EventLoopConfig {
  std::string name = "loop";  // counter set owner; default thread name
  IdleMode idle = IdleMode::spin_then_sleep;
  // About the cost of two trips through the kernel to sleep and wake: shorter
  // and a burst that pauses briefly pays for a sleep; longer and an idle
  // stack burns CPU that other stacks on the core could use.
  Duration spin = std::chrono::microseconds(50);
  Duration tick = TimerWheel::kDefaultTick;
  std::size_t post_capacity = 4096;  // tasks waiting in the post ring
  std::size_t poll_budget = 32;      // per pollable per pass: a burst
  // Input before timers, up to this many bursts: while a pollable keeps
  // filling its budget, the pass polls again before the clock's timers run,
  // so a loop that fell behind its ring acts on the ACKs waiting there
  // instead of firing an RTO for data they acknowledge. Timers armed "due
  // now" (TCP's ACK for a burst) still run after every round. 1: one burst.
  std::size_t drain_rounds = 32;
  std::size_t task_budget = 256;     // posted tasks run per pass
};

struct ThreadOptions {
  int cpu = -1;      // pin to this CPU (pthread_setaffinity_np); -1: not pinned
  std::string name;  // thread name (15 chars kept); empty: the loop's name
};

class EventLoop {
 public:
  // Timers run on the loop's own MonotonicClock, or on `clock` (which must
  // outlive the loop). A ManualClock works, but sleeps are real-time: move the
  // clock, then wake() the loop. Throws std::system_error if the eventfd or
  // the epoll instance cannot be created.
  explicit EventLoop(EventLoopConfig config = {});
  explicit EventLoop(const Clock& clock, EventLoopConfig config = {});
  // The same, for a clock that may be absent (null: the loop's own), as a
  // holder that takes an optional clock from its own configuration needs.
  EventLoop(const Clock* clock, EventLoopConfig config);
  // Stops and joins a thread started with start_thread().
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  const Clock& clock() const noexcept { return clock_; }
  TimerWheel& timers() noexcept { return wheel_; }
  CounterSet& counters() noexcept { return counters_; }
  const EventLoopConfig& config() const noexcept { return config_; }

  // --- loop thread only -----------------------------------------------------
  // Register a source (throws std::system_error if its descriptor cannot be
  // added to epoll). remove() may be called from inside a poll().
  void add(Pollable& p);
  void remove(Pollable& p) noexcept;

  // One pass: posted tasks, due timers, each pollable once. Never sleeps.
  // Returns the work done (tasks + timers fired + what the pollables report).
  std::size_t run_once();
  // The output half of a pass: posted tasks, the timers due now (TCP's ACK
  // at the end of a burst), then each pollable's flush_output(). Takes no
  // input: for a caller that only queued output (a read's window update)
  // and will look at the input later.
  std::size_t flush_output();
  // Sleep until a descriptor is ready, a task is posted, wake()/stop() is
  // called, the next timer is due, or `max` passes (nullopt: no limit) --
  // unless the doorbell re-check finds work first. Returns whether it slept.
  bool wait(std::optional<Duration> max = std::nullopt);

  // wait() in steps, for an owner whose threads take turns at the loop and
  // who lets another thread run it while one sleeps (xk::Stack: its hybrid
  // thread, or a caller asleep beside its own descriptors, sleeps without
  // the stack's lock, so a call that comes meanwhile need not wake it and
  // wait for it to let go):
  //   prepare_sleep -- the loop's: the doorbell protocol's re-check; `busy`
  //                    means do not sleep (finish at once);
  //   the sleep     -- the owner's own system call (ppoll), with wait_fd()
  //                    among its descriptors: it polls readable when the
  //                    loop has something to do; it touches nothing of the
  //                    loop, so any thread may run the loop meanwhile;
  //   finish_sleep  -- the loop's, exactly once per prepare_sleep and before
  //                    anything else runs the loop: by the sleeper, or by
  //                    whoever takes the loop first (`woke` unknown then).
  //                    The sleeper, if wait_fd() woke it, first takes what
  //                    it reported with reap() (the doorbell).
  struct Sleep {
    bool busy = false;
    std::optional<Duration> timeout;
    std::size_t prepared = 0;  // the pollables whose before_sleep() ran
  };
  enum class Woke : std::uint8_t { descriptor, timeout, interrupted };
  Sleep prepare_sleep(std::optional<Duration> max = std::nullopt);
  void finish_sleep(const Sleep& sleep, std::optional<Woke> woke) noexcept;
  int wait_fd() const noexcept { return epoll_fd_; }
  Woke reap() noexcept;
  // Pass after pass, applying the idle policy, until stop(). Makes the calling
  // thread the loop's thread.
  void run();

  // --- any thread -------------------------------------------------------------
  // Ask run() to return after the current pass (a stop before run() starts
  // makes it return at once). Consumed when run() returns.
  void stop() noexcept;
  // Make a sleeping loop do a pass.
  void wake() noexcept;
  // When the latest pass started (a caller deciding whether what it saw is
  // recent enough to skip a pass) -- on the loop's own clock only: an
  // injected one need not move with the world, where frames keep arriving.
  std::optional<Time> last_pass() const noexcept {
    if (&clock_ != &own_clock_) return std::nullopt;
    return Time(Duration(last_pass_.load(std::memory_order_relaxed)));
  }

  // Queue `f` to run on the loop thread. try_post returns false if the ring is
  // full (and leaves `f` untouched); post() waits for room. On the loop thread
  // post() runs queued tasks to make room, so it never deadlocks.
  template <class F>
  bool try_post(F&& f) noexcept {
    if (!posts_.try_emplace(std::forward<F>(f))) return false;
    notify();
    return true;
  }
  template <class F>
  void post(F&& f) {
    while (!posts_.try_emplace(std::forward<F>(f))) {  // consumed only on success
      if (in_loop_thread()) {
        run_posted(posts_.capacity());
      } else {
        std::this_thread::yield();
      }
    }
    notify();
  }

  // Run run() on a new thread. Throws std::system_error if it cannot be
  // pinned, std::logic_error if a thread is already running. The loop's thread
  // is the one that constructed it until run() is called. The new thread
  // blocks every signal: the program's handlers run on its own threads, and
  // its blocking calls are the ones a signal interrupts.
  void start_thread(const ThreadOptions& options = {});
  // The same, running `body` instead of run(): for an owner that drives the
  // loop its own way (run_once/wait, enter/leave; a hybrid xk::Stack), and
  // ends it by a signal of its own before join().
  void start_thread(const ThreadOptions& options, Task body);
  // Wait for the thread started by start_thread() (after stop()).
  void join();
  bool in_loop_thread() const noexcept {
    return loop_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  // For a loop that threads take turns to run, under a lock of the owner's:
  // the holder is the loop's thread from enter() to leave(), and nobody is
  // in between (others post()).
  void enter() noexcept { loop_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed); }
  void leave() noexcept { loop_thread_.store(std::thread::id(), std::memory_order_relaxed); }

 private:
  void notify() noexcept;
  void ring_doorbell() noexcept;
  // wait()'s sleep: epoll on the loop's set, the doorbell drained.
  Woke block(const Sleep& sleep) noexcept;
  std::size_t run_posted(std::size_t budget);
  // The timers armed "due now" (the end of a burst), counted; how many fired.
  std::size_t run_due_timers();
  void drain_doorbell() noexcept;
  void compact_sources() noexcept;

  // The clock the timer wheel (and through it every protocol) reads. During
  // the timer and receive part of a pass it answers the time the pass
  // started: one clock read per pass instead of several per packet (a
  // vDSO read costs tens of ns, more in a VM); outside passes it reads the
  // loop's clock. A pass lasts microseconds, well under any TCP timer.
  class PassClock final : public Clock {
   public:
    explicit PassClock(const Clock& base) noexcept : base_(base) {}
    Time now() const noexcept override { return frozen_ ? at_ : base_.now(); }
    Time freeze() noexcept {
      at_ = base_.now();
      frozen_ = true;
      return at_;
    }
    void thaw() noexcept { frozen_ = false; }

   private:
    const Clock& base_;
    Time at_{};
    bool frozen_ = false;
  };

  EventLoopConfig config_;
  MonotonicClock own_clock_;
  const Clock& clock_;
  PassClock pass_clock_;
  TimerWheel wheel_;
  MpmcRing<Task> posts_;
  struct Source {
    Pollable* pollable;  // null once removed during a pass
    int fd;              // as registered with epoll, or -1
  };
  std::vector<Source> pollables_;
  bool polling_ = false;          // inside the pollable pass of run_once
  bool pollables_removed_ = false;  // null entries to compact after the pass

  int doorbell_fd_ = -1;  // eventfd
  int epoll_fd_ = -1;
  bool have_epoll_pwait2_ = true;

  // Shared with other threads.
  alignas(detail::kCacheLine) std::atomic<bool> sleeping_{false};
  std::atomic<bool> wake_requested_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<std::uint64_t> doorbells_rung_{0};
  std::atomic<std::thread::id> loop_thread_;
  std::atomic<Duration::rep> last_pass_{0};
  std::thread thread_;

  CounterSet counters_;
  Counter& polls_;
  Counter& idle_polls_;
  Counter& drain_rounds_;
  Counter& tasks_run_;
  Counter& timers_fired_;
  Counter& sleeps_;
  Counter& wakeups_;
  Counter& timeouts_;
  Counter& sleep_aborts_;
  Counter& doorbells_;
};

}  // namespace xk

#include "xk/event_loop.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <stdexcept>
#include <system_error>

#include "xk/own_fds.hpp"

namespace xk {
namespace {

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// epoll_data.u64 of the loop's own eventfd; pollables' descriptors carry 1.
constexpr std::uint64_t kDoorbellTag = 0;
constexpr std::uint64_t kPollableTag = 1;

}  // namespace

std::optional<IdleMode> parse_idle_mode(std::string_view name) noexcept {
  if (name == "busy") return IdleMode::busy_poll;
  if (name == "spin") return IdleMode::spin_then_sleep;
  if (name == "yield") return IdleMode::yield_then_sleep;
  return std::nullopt;
}

const char* idle_mode_name(IdleMode mode) noexcept {
  switch (mode) {
    case IdleMode::busy_poll:
      return "busy";
    case IdleMode::spin_then_sleep:
      return "spin";
    case IdleMode::yield_then_sleep:
      return "yield";
  }
  return "?";
}

void idle_pause(IdleMode mode) noexcept {
  if (mode == IdleMode::yield_then_sleep) {
    sched_yield();
  } else {
    cpu_relax();
  }
}

EventLoop::EventLoop(EventLoopConfig config) : EventLoop(nullptr, std::move(config)) {}

EventLoop::EventLoop(const Clock& clock, EventLoopConfig config) : EventLoop(&clock, std::move(config)) {}

EventLoop::EventLoop(const Clock* clock, EventLoopConfig config)
    : config_(std::move(config)),
      clock_(clock != nullptr ? *clock : own_clock_),  // own_clock_ is built by now
      pass_clock_(clock_),
      wheel_(pass_clock_, config_.tick),
      posts_(config_.post_capacity),
      loop_thread_(std::this_thread::get_id()),
      counters_(config_.name),
      polls_(counters_.add("polls", "passes over tasks, timers and pollables")),
      idle_polls_(counters_.add("idle_polls", "passes that found no work")),
      drain_rounds_(counters_.add("drain_rounds", "extra rounds of input a pass ran before its timers")),
      tasks_run_(counters_.add("tasks_run", "posted tasks run")),
      timers_fired_(counters_.add("timers_fired", "timer callbacks run")),
      sleeps_(counters_.add("sleeps", "times the loop slept in epoll")),
      wakeups_(counters_.add("wakeups", "sleeps ended by a descriptor (doorbell or pollable)")),
      timeouts_(counters_.add("timeouts", "sleeps ended by the timeout (a timer or the limit)")),
      sleep_aborts_(counters_.add("sleep_aborts", "sleeps given up: the re-check found work")),
      doorbells_(counters_.add("doorbells", "eventfd writes by posters, wake() and stop()")) {
  doorbell_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (doorbell_fd_ < 0) throw_errno("EventLoop: eventfd");
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) {
    int e = errno;
    close(doorbell_fd_);
    throw std::system_error(e, std::generic_category(), "EventLoop: epoll_create1");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kDoorbellTag;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, doorbell_fd_, &ev) != 0) {
    int e = errno;
    close(epoll_fd_);
    close(doorbell_fd_);
    throw std::system_error(e, std::generic_category(), "EventLoop: epoll_ctl(eventfd)");
  }
}

EventLoop::~EventLoop() {
  if (thread_.joinable()) {
    stop();
    thread_.join();
  }
  close(epoll_fd_);
  close(doorbell_fd_);
}

void EventLoop::add(Pollable& p) {
  int fd = p.wait_fd();
  if (fd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kPollableTag;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("EventLoop::add: epoll_ctl");
  }
  pollables_.push_back(Source{&p, fd});
}

void EventLoop::remove(Pollable& p) noexcept {
  for (Source& entry : pollables_) {
    if (entry.pollable != &p) continue;
    // Fails harmlessly if the source already closed its descriptor.
    if (entry.fd >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, entry.fd, nullptr);
    entry.pollable = nullptr;
    pollables_removed_ = true;
    break;
  }
  if (!polling_) compact_sources();
}

void EventLoop::compact_sources() noexcept {
  if (!pollables_removed_) return;
  std::erase_if(pollables_, [](const Source& e) { return e.pollable == nullptr; });
  pollables_removed_ = false;
}

std::size_t EventLoop::run_posted(std::size_t budget) {
  std::size_t n = 0;
  while (n < budget) {
    std::optional<Task> task = posts_.try_pop();
    if (!task) break;
    ++n;
    (*task)();
  }
  tasks_run_.inc(n);
  return n;
}

std::size_t EventLoop::run_once() {
  ++polls_;
  std::size_t work = run_posted(config_.task_budget);

  // Input before timers: a timer that came due while the thread was not
  // running (descheduled, or asleep) must not act on state the input waiting
  // in a ring would have changed -- an RTO firing for data whose ACK sits in
  // the receive ring retransmits what the peer already has. So while some
  // pollable fills its budget (more is waiting), the pass polls again, up to
  // drain_rounds bursts; between rounds only the timers armed "due now" run
  // (the end of a burst), and the clock moves on with the input.
  Time now = pass_clock_.freeze();
  last_pass_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  polling_ = true;
  for (std::size_t round = 1;; ++round) {
    bool more = false;
    // By index: a poll() may add (appended, polled this pass) or remove (nulled).
    for (std::size_t i = 0; i < pollables_.size(); ++i) {
      if (Pollable* p = pollables_[i].pollable) {
        std::size_t n = p->poll(config_.poll_budget);
        work += n;
        more = more || n >= config_.poll_budget;
      }
    }
    // A stop() (from a pollable, say, whose work is done) ends the draining:
    // another round would poll that pollable again after it said stop --
    // xk-tcp-perf's client once read its closed socket there and failed.
    if (!more || round >= config_.drain_rounds || stop_requested_.load(std::memory_order_relaxed)) break;
    work += run_due_timers();
    ++drain_rounds_;
    now = pass_clock_.freeze();
  }
  polling_ = false;

  std::size_t fired = wheel_.run_expired(now);
  timers_fired_.inc(fired);
  work += fired;
  pass_clock_.thaw();
  compact_sources();

  if (work == 0) ++idle_polls_;
  doorbells_.set(doorbells_rung_.load(std::memory_order_relaxed));
  return work;
}

std::size_t EventLoop::run_due_timers() {
  const std::size_t due = wheel_.run_due();
  timers_fired_.inc(due);
  return due;
}

std::size_t EventLoop::flush_output() {
  std::size_t work = run_posted(config_.task_budget);
  work += run_due_timers();  // after the tasks, as in a pass
  for (std::size_t i = 0; i < pollables_.size(); ++i) {
    if (Pollable* p = pollables_[i].pollable) work += p->flush_output();
  }
  compact_sources();
  return work;
}

bool EventLoop::wait(std::optional<Duration> max) {
  const Sleep sleep = prepare_sleep(max);
  const std::optional<Woke> woke = sleep.busy ? std::nullopt : std::optional<Woke>(block(sleep));
  finish_sleep(sleep, woke);
  return !sleep.busy;
}

EventLoop::Sleep EventLoop::prepare_sleep(std::optional<Duration> max) {
  // Announce the sleep, then look again at everything that could have arrived
  // before the announcement became visible (the other half of the fence pair
  // is in notify()).
  sleeping_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);

  Sleep sleep;
  sleep.busy = !posts_.empty() || wake_requested_.load(std::memory_order_relaxed) ||
               stop_requested_.load(std::memory_order_relaxed);
  sleep.timeout = max;
  if (!sleep.busy) {
    if (std::optional<Time> next = wheel_.next_deadline()) {
      Time now = clock_.now();
      if (*next <= now) {
        sleep.busy = true;
      } else if (!sleep.timeout || *next - now < *sleep.timeout) {
        sleep.timeout = *next - now;
      }
    }
  }
  if (sleep.timeout && sleep.timeout->count() <= 0) sleep.busy = true;
  while (!sleep.busy && sleep.prepared < pollables_.size()) {
    Pollable* p = pollables_[sleep.prepared].pollable;
    if (p != nullptr && !p->before_sleep()) {
      sleep.busy = true;
      break;
    }
    ++sleep.prepared;
  }
  if (sleep.busy) {
    ++sleep_aborts_;
  } else {
    ++sleeps_;
  }
  return sleep;
}

EventLoop::Woke EventLoop::block(const Sleep& sleep) noexcept {
  epoll_event events[8];
  int n = -1;
  if (have_epoll_pwait2_) {
    const timespec ts = sleep.timeout ? to_timespec(*sleep.timeout) : timespec{};
    n = epoll_pwait2(epoll_fd_, events, 8, sleep.timeout ? &ts : nullptr, nullptr);
    if (n < 0 && errno == ENOSYS) have_epoll_pwait2_ = false;
  }
  if (!have_epoll_pwait2_) {
    // Milliseconds, rounded up: never wake before the timer is due.
    int ms = -1;
    if (sleep.timeout) {
      auto rounded = std::chrono::ceil<std::chrono::milliseconds>(*sleep.timeout).count();
      ms = rounded > INT_MAX ? INT_MAX : static_cast<int>(rounded);
    }
    n = epoll_wait(epoll_fd_, events, 8, ms);
  }
  if (n == 0) return Woke::timeout;
  if (n < 0) return Woke::interrupted;  // EINTR, a signal; just do a pass
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 == kDoorbellTag) drain_doorbell();
  }
  return Woke::descriptor;
}

EventLoop::Woke EventLoop::reap() noexcept {
  epoll_event events[8];
  const int n = epoll_wait(epoll_fd_, events, 8, 0);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 == kDoorbellTag) drain_doorbell();
  }
  return n > 0 ? Woke::descriptor : Woke::timeout;
}

void EventLoop::finish_sleep(const Sleep& sleep, std::optional<Woke> woke) noexcept {
  if (woke == Woke::descriptor) ++wakeups_;
  if (woke == Woke::timeout) ++timeouts_;
  sleeping_.store(false, std::memory_order_relaxed);
  wake_requested_.store(false, std::memory_order_relaxed);
  for (std::size_t i = 0; i < sleep.prepared; ++i) {
    if (Pollable* p = pollables_[i].pollable) p->after_sleep();
  }
}

void EventLoop::run() {
  loop_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  MonotonicClock real;  // spinning is about CPU time, whatever clock the timers use
  std::optional<Time> idle_since;
  while (!stop_requested_.load(std::memory_order_acquire)) {
    if (run_once() != 0) {
      idle_since.reset();
      continue;
    }
    if (config_.idle == IdleMode::busy_poll) {
      cpu_relax();
      continue;
    }
    Time now = real.now();
    if (!idle_since) idle_since = now;
    if (now - *idle_since < config_.spin) {
      idle_pause(config_.idle);
      continue;
    }
    wait();
    idle_since.reset();
  }
  stop_requested_.store(false, std::memory_order_relaxed);
  doorbells_.set(doorbells_rung_.load(std::memory_order_relaxed));
}

void EventLoop::stop() noexcept {
  stop_requested_.store(true, std::memory_order_release);
  wake();
}

void EventLoop::wake() noexcept {
  wake_requested_.store(true, std::memory_order_relaxed);
  notify();
}

void EventLoop::notify() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Only the poster that clears the flag rings: one eventfd write per sleep.
  if (sleeping_.load(std::memory_order_relaxed) &&
      sleeping_.exchange(false, std::memory_order_relaxed)) {
    ring_doorbell();
  }
}

void EventLoop::ring_doorbell() noexcept {
  std::uint64_t one = 1;
  // Cannot fail short of a counter overflow (2^64 - 2 unread writes); EAGAIN
  // then still leaves the descriptor readable, which is all that matters.
  ssize_t r = write(doorbell_fd_, &one, sizeof one);
  (void)r;
  doorbells_rung_.fetch_add(1, std::memory_order_relaxed);
}

void EventLoop::drain_doorbell() noexcept {
  std::uint64_t count = 0;
  ssize_t r = read(doorbell_fd_, &count, sizeof count);  // EAGAIN if already drained
  (void)r;
}

void EventLoop::start_thread(const ThreadOptions& options) { start_thread(options, Task([this] { run(); })); }

void EventLoop::start_thread(const ThreadOptions& options, Task body) {
  if (thread_.joinable()) throw std::logic_error("EventLoop::start_thread: already running");
  // Nobody is the loop thread until run() says so: a post() from this thread
  // in between must not mistake itself for the loop and run tasks.
  loop_thread_.store(std::thread::id(), std::memory_order_relaxed);
  // The thread inherits the mask in force when it is made: all blocked.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    thread_ = std::thread([body = std::move(body)]() mutable {
      mark_library_thread();  // what it opens and closes is the library's (own_fds.hpp)
      body();
    });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  std::string name = options.name.empty() ? config_.name : options.name;
  name.resize(std::min<std::size_t>(name.size(), 15));  // the kernel keeps 16 bytes with the NUL
  pthread_setname_np(thread_.native_handle(), name.c_str());  // cosmetic: ignore failure
  if (options.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<std::size_t>(options.cpu), &set);
    int rc = pthread_setaffinity_np(thread_.native_handle(), sizeof set, &set);
    if (rc != 0) {
      stop();
      thread_.join();
      throw std::system_error(rc, std::generic_category(), "EventLoop: pthread_setaffinity_np");
    }
  }
}

void EventLoop::join() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace xk

// libxk_preload.so: waiting -- poll, ppoll, select, pselect and epoll -- on
// sets that may mix xk sockets and kernel descriptors.
//
// A set with xk sockets first looks at both sides without blocking, spins
// on the xk side for XK_SPIN_US, and then sleeps in the kernel on its kernel
// descriptors and on the stack's own wake-ups at once (xk_epoll_psleep),
// running the stack itself when one comes: nothing spins while all is
// idle, a signal interrupts the sleep with EINTR as it would the kernel's
// own wait, and either side wakes it. (A set of kernel descriptors only is
// the kernel's call as it is.)

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory_resource>
#include <optional>
#include <vector>

#include "exports.hpp"
#include "process.hpp"
#include "signals.hpp"

using namespace xk::preload;

namespace {

using Clock = std::chrono::steady_clock;

Slot where(int fd) {
  const Process* p = Process::instance();
  return p != nullptr ? p->slot(fd) : Slot{Slot::Kind::kernel, -1};
}

// The lists a wait makes of its set live on the stack while they fit (a
// program's sets are small: iperf3 asks about two or three descriptors on
// every select): nothing allocated per call. A larger set spills to the heap.
template <std::size_t kBytes>
struct Scratch {
  alignas(std::max_align_t) std::byte bytes[kBytes];
  std::pmr::monotonic_buffer_resource pool{bytes, kBytes};
};

// When a wait ends: none = never.
struct Deadline {
  std::optional<Clock::time_point> at;
  static Deadline after(const timespec* ts) {
    if (ts == nullptr) return {};
    return {Clock::now() + std::chrono::seconds(ts->tv_sec) + std::chrono::nanoseconds(ts->tv_nsec)};
  }
  static Deadline after_ms(int ms) { return ms < 0 ? Deadline{} : Deadline{Clock::now() + std::chrono::milliseconds(ms)}; }
  bool passed() const { return at && Clock::now() >= *at; }
  bool zero_wait(const timespec* ts) const { return ts != nullptr && ts->tv_sec == 0 && ts->tv_nsec == 0; }
  // What is left, for ppoll (null: forever).
  const timespec* left(timespec& buf) const {
    if (!at) return nullptr;
    const auto ns = std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(*at - Clock::now()).count());
    buf.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    buf.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    return &buf;
  }
};

// Spins on `ready` (true: done) for the process's XK_SPIN_US. A handler of
// the program that has run since the call began (`signals`, handlers_run()
// then) ends it, as it would end the sleep in the kernel that follows
// (poll, select and epoll never restart: EINTR).
enum class Spun : std::uint8_t { ready, idle, interrupted };
template <class F>
Spun spin(std::uint64_t signals, F&& ready) {
  const Process* p = Process::instance();
  const auto until = Clock::now() + std::chrono::microseconds(p != nullptr ? p->spin_us() : 0);
  while (Clock::now() < until) {
    if (ready()) return Spun::ready;
    if (handlers_run() != signals) return Spun::interrupted;
  }
  return Spun::idle;
}

// The signal mask of one wait. The program's own (ppoll, pselect,
// epoll_pwait) holds for the whole call, spin included, as the kernel's
// call applies it at once; the thread's comes back at the end.
class CallMask {
 public:
  explicit CallMask(const sigset_t* mask) : set_(mask != nullptr) {
    if (set_) pthread_sigmask(SIG_SETMASK, mask, &before_);
  }
  ~CallMask() {
    if (!set_) return;
    const int saved = errno;
    pthread_sigmask(SIG_SETMASK, &before_, nullptr);
    errno = saved;
  }
  CallMask(const CallMask&) = delete;
  CallMask& operator=(const CallMask&) = delete;

  // `in_kernel(mask)`, a sleep that puts `mask` in force as ppoll does --
  // unless a handler of the program has run since `signals`: then EINTR.
  // Every signal is blocked from before that last look until the sleep
  // puts the call's mask back, so a handler cannot land unseen between the
  // two (the kernel delivers it in the sleep).
  template <class Sleep>
  static int sleep(std::uint64_t signals, Sleep&& in_kernel) {
    sigset_t all;
    sigset_t call;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &call);
    const int r = handlers_run() != signals ? fail(EINTR) : in_kernel(&call);
    const int saved = errno;
    pthread_sigmask(SIG_SETMASK, &call, nullptr);
    errno = saved;
    return r;
  }

 private:
  bool set_;
  sigset_t before_{};
};

// ---- poll ---------------------------------------------------------------------------

// A progress loop (Open MPI's) waits on its set with a zero timeout on every
// turn. Its xk sockets are answered here, but each turn would still ask the
// kernel about its kernel descriptors, a system call of 0.5-2 us for what is
// nearly always "nothing" (an eventfd and a listening socket, in Open MPI's
// case). As OpenOnload's fast poll does, a zero-timeout look at a kernel
// set that found it idle is taken as still true for XK_KERNEL_POLL_US: a
// kernel descriptor that becomes ready is reported at most that much later
// to a program that keeps looking, and a look that found one ready is never
// reused. A wait that may block always asks the kernel. Per thread, a few
// sets at a time (keyed by their descriptors and events, or the epoll set).
struct KernelLook {
  std::uint64_t key = 0;
  std::optional<Clock::time_point> idle_since;
};

class KernelLooks {
 public:
  // What `ask_kernel` (a zero-timeout look at the kernel descriptors of set
  // `key`) returns -- or 0 without asking, while the kernel said "idle" of
  // the set less than XK_KERNEL_POLL_US ago. Only for a call that must not
  // block (`at_once`); any other asks.
  template <class Ask>
  static int ask(bool at_once, std::uint64_t key, Ask&& ask_kernel) {
    if (!at_once) return ask_kernel();
    const Clock::time_point now = Clock::now();
    if (!due(key, now)) return 0;
    const int r = ask_kernel();
    if (r >= 0) saw(key, now, r == 0);
    return r;
  }
  static std::uint64_t key_of(const pollfd* fds, std::size_t n) {
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over (fd, events)
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t v = (std::uint64_t{static_cast<std::uint32_t>(fds[i].fd)} << 16) |
                              static_cast<std::uint16_t>(fds[i].events);
      h = (h ^ v) * 0x100000001b3ull;
    }
    return h ^ n;
  }

 private:
  static bool due(std::uint64_t key, Clock::time_point now) {
    const Process* p = Process::instance();
    const unsigned us = p != nullptr ? p->kernel_poll_us() : 0;
    if (us == 0) return true;
    for (const KernelLook& e : looks_) {
      if (e.key == key && e.idle_since.has_value()) return now - *e.idle_since >= std::chrono::microseconds(us);
    }
    return true;
  }
  static void saw(std::uint64_t key, Clock::time_point now, bool idle) {
    KernelLook* slot = nullptr;
    for (KernelLook& e : looks_) {
      if (e.key == key) slot = &e;
    }
    if (slot == nullptr) {  // the oldest entry makes room
      slot = &looks_[next_];
      next_ = (next_ + 1) % kLooks;
    }
    slot->key = key;
    if (idle) slot->idle_since = now;
    else slot->idle_since.reset();
  }

  static constexpr std::size_t kLooks = 4;
  static inline thread_local KernelLook looks_[kLooks]{};
  static inline thread_local std::size_t next_ = 0;
};

// A set whose only non-kernel entries are stale (inherited across fork):
// those read POLLNVAL, which makes the call return at once, as the kernel's
// does for a closed descriptor; the kernel answers for the rest.
int merge_stale_only(pollfd* fds, nfds_t n, std::pmr::vector<pollfd>& ks, const std::pmr::vector<nfds_t>& k_at,
                     const sigset_t* mask) {
  const timespec now{0, 0};
  const int r = ks.empty() ? 0 : libc().ppoll(ks.data(), ks.size(), &now, mask);
  if (r < 0) return -1;
  int ready = 0;
  for (std::size_t j = 0; j < ks.size(); ++j) fds[k_at[j]].revents = ks[j].revents;
  for (nfds_t i = 0; i < n; ++i) ready += fds[i].revents != 0;
  return ready;
}

int poll_mixed(pollfd* fds, nfds_t n, const timespec* ts, const sigset_t* mask) {
  // Most sets in most programs hold no xk socket: those go to the kernel
  // before anything is allocated.
  bool any = false;
  for (nfds_t i = 0; i < n && !any; ++i) {
    const Slot::Kind k = fds[i].fd >= 0 ? where(fds[i].fd).kind : Slot::Kind::kernel;
    any = k == Slot::Kind::xk || k == Slot::Kind::stale;
  }
  if (!any) return libc().ppoll(fds, n, ts, mask);
  const std::uint64_t signals = handlers_run();
  const CallMask call_mask(mask);
  // The xk sockets, with their xk numbers; the rest as they are.
  Scratch<4096> scratch;  // the four lists of up to 128 descriptors
  std::pmr::vector<nfds_t> xk_at(&scratch.pool);
  std::pmr::vector<pollfd> xs(&scratch.pool);
  std::pmr::vector<nfds_t> k_at(&scratch.pool);
  std::pmr::vector<pollfd> ks(&scratch.pool);
  for (auto* v : {&xk_at, &k_at}) v->reserve(n);
  for (auto* v : {&xs, &ks}) v->reserve(n);
  for (nfds_t i = 0; i < n; ++i) {
    fds[i].revents = 0;
    const Slot s = fds[i].fd >= 0 ? where(fds[i].fd) : Slot{Slot::Kind::kernel, -1};
    if (s.kind == Slot::Kind::xk) {
      xk_at.push_back(i);
      xs.push_back({s.xk, fds[i].events, 0});
    } else if (s.kind == Slot::Kind::stale) {
      fds[i].revents = POLLNVAL;
    } else if (fds[i].fd >= 0) {
      k_at.push_back(i);
      ks.push_back(fds[i]);
    }
  }
  if (xs.empty()) return merge_stale_only(fds, n, ks, k_at, mask);
  bool stale = false;
  for (nfds_t i = 0; i < n; ++i) stale = stale || fds[i].revents == POLLNVAL;
  const Deadline deadline = Deadline::after(ts);
  auto merge = [&] {
    int ready = 0;
    for (std::size_t j = 0; j < xs.size(); ++j) fds[xk_at[j]].revents = xs[j].revents;
    for (std::size_t j = 0; j < ks.size(); ++j) fds[k_at[j]].revents = ks[j].revents;
    for (nfds_t i = 0; i < n; ++i) ready += fds[i].revents != 0;
    return ready;
  };
  const bool at_once = deadline.zero_wait(ts);
  const std::uint64_t kernel_key = at_once ? KernelLooks::key_of(ks.data(), ks.size()) : 0;
  auto look = [&]() -> int {
    const int a = xk_poll(xs.data(), xs.size(), 0);
    if (a < 0) return -1;
    if (ks.empty()) return a;
    const int b = KernelLooks::ask(at_once, kernel_key, [&] { return libc().poll(ks.data(), ks.size(), 0); });
    if (b < 0) return -1;
    return a + b;
  };
  bool slept = false;  // woken, it looks and sleeps again without a spin
  for (;;) {
    const int r = look();
    if (r < 0) return -1;
    if (r > 0 || stale || at_once || deadline.passed()) return merge();
    if (!slept) {
      const Spun spun = spin(signals, [&] { return xk_poll(xs.data(), xs.size(), 0) > 0; });
      if (spun == Spun::interrupted) return fail(EINTR);
      if (spun == Spun::ready) continue;
    }
    // Sleep in the kernel: the kernel descriptors, the xk sockets (through
    // a set of their own) and the stack.
    const int ep = xk_epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return -1;
    for (const pollfd& x : xs) {
      epoll_event e{};
      e.events = static_cast<std::uint16_t>(x.events) | EPOLLERR | EPOLLHUP;
      (void)xk_epoll_ctl(ep, EPOLL_CTL_ADD, x.fd, &e);
    }
    std::pmr::vector<pollfd> sleep(ks, &scratch.pool);
    timespec buf{};
    const int w = CallMask::sleep(signals, [&](const sigset_t* call) {
      return xk_epoll_psleep(ep, sleep.data(), sleep.size(), deadline.left(buf), call);
    });
    const int saved = errno;
    (void)xk_close(ep);
    if (w < 0) return fail(saved);
    slept = true;  // the look above says what woke it (or that the deadline passed)
  }
}

// ---- select ---------------------------------------------------------------------------

int select_mixed(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* ts, const sigset_t* mask,
                 bool* any_xk) {
  // A set of kernel descriptors only is the kernel's: found before anything is allocated.
  *any_xk = false;
  for (int fd = 0; fd < nfds && !*any_xk; ++fd) {
    const bool asked = (r != nullptr && FD_ISSET(fd, r)) || (w != nullptr && FD_ISSET(fd, w)) ||
                       (e != nullptr && FD_ISSET(fd, e));
    const Slot::Kind k = asked ? where(fd).kind : Slot::Kind::kernel;
    *any_xk = k == Slot::Kind::xk || k == Slot::Kind::stale;
  }
  if (!*any_xk) return 0;
  Scratch<2048> scratch;  // up to 256 descriptors
  std::pmr::vector<pollfd> fds(&scratch.pool);
  for (int fd = 0; fd < nfds; ++fd) {
    short ev = 0;
    if (r != nullptr && FD_ISSET(fd, r)) ev |= POLLIN;
    if (w != nullptr && FD_ISSET(fd, w)) ev |= POLLOUT;
    if (e != nullptr && FD_ISSET(fd, e)) ev |= POLLPRI;
    if (ev != 0) fds.push_back({fd, ev, 0});
  }
  const int n = poll_mixed(fds.data(), fds.size(), ts, mask);
  if (n < 0) return -1;
  int count = 0;
  for (const pollfd& p : fds) {
    if (p.revents & POLLNVAL) return fail(EBADF);
  }
  // Only the bits below nfds: a program may size its sets to nfds (as the
  // kernel's select allows), and FD_ZERO would clear a whole fd_set.
  for (fd_set* set : {r, w, e}) {
    if (set == nullptr) continue;
    for (int fd = 0; fd < nfds; ++fd) FD_CLR(fd, set);
  }
  for (const pollfd& p : fds) {
    // As Linux's select reads poll bits: a hang-up or an error is readable,
    // an error writable.
    if ((p.events & POLLIN) && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(p.fd, r);
      ++count;
    }
    if ((p.events & POLLOUT) && (p.revents & (POLLOUT | POLLERR))) {
      FD_SET(p.fd, w);
      ++count;
    }
    if ((p.events & POLLPRI) && (p.revents & POLLPRI)) {
      FD_SET(p.fd, e);
      ++count;
    }
  }
  return count;
}

// ---- epoll ----------------------------------------------------------------------------

// `deadline` as the call's timeout gave it; `at_once`: the timeout was zero.
int epoll_mixed(int epfd, int side, epoll_event* ev, int max, Deadline deadline, bool at_once, const sigset_t* mask) {
  if (max <= 0 || ev == nullptr) return fail(EINVAL);
  const std::uint64_t signals = handlers_run();
  const CallMask call_mask(mask);
  const std::uint64_t kernel_key = ~static_cast<std::uint64_t>(static_cast<std::uint32_t>(epfd));
  auto look = [&]() -> int {
    int n = xk_epoll_wait(side, ev, max, 0);
    if (n < 0) return -1;
    if (n < max) {
      const int m = KernelLooks::ask(at_once, kernel_key, [&] { return libc().epoll_wait(epfd, ev + n, max - n, 0); });
      if (m < 0) return n > 0 ? n : -1;
      n += m;
    }
    return n;
  };
  bool slept = false;  // woken, it looks and sleeps again without a spin
  for (;;) {
    const int n = look();
    if (n != 0 || at_once || deadline.passed()) return n;
    if (!slept) {
      int got = 0;
      const Spun spun = spin(signals, [&] { return (got = xk_epoll_wait(side, ev, max, 0)) != 0; });
      if (spun == Spun::interrupted) return fail(EINTR);
      if (spun == Spun::ready) {
        if (got < 0) return -1;
        if (got < max) {
          const int m = libc().epoll_wait(epfd, ev + got, max - got, 0);
          if (m > 0) got += m;
        }
        return got;
      }
    }
    pollfd sleep[1] = {{epfd, POLLIN, 0}};
    timespec buf{};
    const int w = CallMask::sleep(
        signals, [&](const sigset_t* call) { return xk_epoll_psleep(side, sleep, 1, deadline.left(buf), call); });
    if (w < 0) return -1;
    slept = true;  // the look above says what woke it (or that the deadline passed)
  }
}

}  // namespace

XK_EXPORT int poll(pollfd* fds, nfds_t n, int timeout_ms) {
  if (timeout_ms < 0) return poll_mixed(fds, n, nullptr, nullptr);
  const timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1'000'000L};
  // (poll_mixed hands a set without xk sockets straight to the kernel.)
  return poll_mixed(fds, n, &ts, nullptr);
}

XK_EXPORT int ppoll(pollfd* fds, nfds_t n, const timespec* ts, const sigset_t* mask) {
  return poll_mixed(fds, n, ts, mask);
}

XK_EXPORT int __poll_chk(pollfd* fds, nfds_t n, int timeout_ms, size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __builtin_trap();
  return poll(fds, n, timeout_ms);
}

XK_EXPORT int __ppoll_chk(pollfd* fds, nfds_t n, const timespec* ts, const sigset_t* mask, size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __builtin_trap();
  return ppoll(fds, n, ts, mask);
}

XK_EXPORT int select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* tv) {
  if (tv != nullptr && (tv->tv_sec < 0 || tv->tv_usec < 0)) return fail(EINVAL);
  timespec ts{};
  if (tv != nullptr) ts = {tv->tv_sec, tv->tv_usec * 1000};
  const auto start = Clock::now();
  bool any_xk = false;
  const int n = select_mixed(nfds, r, w, e, tv != nullptr ? &ts : nullptr, nullptr, &any_xk);
  if (!any_xk) return libc().select(nfds, r, w, e, tv);
  if (tv != nullptr) {
    // Linux's select leaves the time not slept in *tv.
    const auto spent = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
    const auto left = std::max<std::int64_t>(0, std::int64_t{tv->tv_sec} * 1'000'000 + tv->tv_usec - spent);
    tv->tv_sec = static_cast<time_t>(left / 1'000'000);
    tv->tv_usec = static_cast<suseconds_t>(left % 1'000'000);
  }
  return n;
}

XK_EXPORT int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* ts, const sigset_t* mask) {
  bool any_xk = false;
  const int n = select_mixed(nfds, r, w, e, ts, mask, &any_xk);
  if (!any_xk) return libc().pselect(nfds, r, w, e, ts, mask);
  return n;
}

// A set is the kernel's until an xk socket joins it (its side set is made
// then). One made on a library thread is the library's own: DPDK's
// interrupt thread makes its set again each time its sources change (a
// memif peer comes or goes), under a new number.
XK_EXPORT int epoll_create1(int flags) { return Process::adopt_if_made_by_library(libc().epoll_create1(flags)); }

XK_EXPORT int epoll_create(int size) {
  if (size <= 0) return fail(EINVAL);
  return epoll_create1(0);
}

XK_EXPORT int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
  const Slot s = where(fd);
  if (s.kind == Slot::Kind::xk) {
    const int side = Process::instance()->side_of(epfd);
    return side < 0 ? -1 : xk_epoll_ctl(side, op, s.xk, ev);
  }
  if (s.kind == Slot::Kind::stale) return fail(EIO);
  const int r = libc().epoll_ctl(epfd, op, fd, ev);
  // Undecided: if it goes to xk, the registration moves with it.
  if (r == 0 && s.kind == Slot::Kind::pending) Process::instance()->note_watch(fd, epfd, op, ev);
  return r;
}

XK_EXPORT int epoll_wait(int epfd, epoll_event* ev, int max, int timeout_ms) {
  const Slot s = where(epfd);
  if (s.kind != Slot::Kind::side) return libc().epoll_wait(epfd, ev, max, timeout_ms);
  return epoll_mixed(epfd, s.xk, ev, max, Deadline::after_ms(timeout_ms), timeout_ms == 0, nullptr);
}

XK_EXPORT int epoll_pwait(int epfd, epoll_event* ev, int max, int timeout_ms, const sigset_t* mask) {
  const Slot s = where(epfd);
  if (s.kind != Slot::Kind::side) return libc().epoll_pwait(epfd, ev, max, timeout_ms, mask);
  return epoll_mixed(epfd, s.xk, ev, max, Deadline::after_ms(timeout_ms), timeout_ms == 0, mask);
}

// As epoll_pwait, the timeout to the nanosecond (null: none).
XK_EXPORT int epoll_pwait2(int epfd, epoll_event* ev, int max, const timespec* ts, const sigset_t* mask) {
  const Slot s = where(epfd);
  if (s.kind != Slot::Kind::side) return libc().epoll_pwait2(epfd, ev, max, ts, mask);
  if (ts != nullptr && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1'000'000'000)) return fail(EINVAL);
  const Deadline deadline = Deadline::after(ts);
  return epoll_mixed(epfd, s.xk, ev, max, deadline, deadline.zero_wait(ts), mask);
}

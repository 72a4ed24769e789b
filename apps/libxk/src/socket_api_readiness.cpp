// The C API's readiness: a socket's events word and whom it wakes (on the
// stack's thread), epoll sets, and poll (which waits through a private epoll
// set).

#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "socket_api_internal.hpp"
#include "xk/own_fds.hpp"

namespace xk::capi {

Epoll::~Epoll() {
  if (efd >= 0) {
    own_fd_closing(efd);
    ::close(efd);
  }
}

void Epoll::sync_efd() {
  if (efd < 0 || signalled == !ready.empty()) return;
  signalled = !ready.empty();
  if (signalled) {
    (void)eventfd_write(efd, 1);
  } else {
    eventfd_t v;
    (void)eventfd_read(efd, &v);
  }
}

namespace {

void queue_reg(Reg& r, std::uint32_t ev) {
  if (r.disabled || (ev & (r.mask | EPOLLERR | EPOLLHUP)) == 0) return;
  {
    std::lock_guard<std::mutex> lock(r.ep->mu);
    if (!r.queued) {
      r.queued = true;
      r.ep->ready.push_back(&r);
      r.ep->sync_efd();
    }
  }
  r.ep->wp.bump();
}

std::uint32_t compute_events(Sock& s) {
  std::uint32_t ev = 0;
  if (s.type == SOCK_DGRAM) {
    if (!s.udp.is_open()) return EPOLLHUP;
    ev |= EPOLLOUT | EPOLLWRNORM;
    if (s.udp.readable()) ev |= EPOLLIN | EPOLLRDNORM;
    if (s.udp.session()->pending_error() != Errc::ok) ev |= EPOLLERR;
    return ev;
  }
  if (s.listening) {
    if (s.listener.events() & tcp::ev_acceptable) ev |= EPOLLIN | EPOLLRDNORM;
    return ev;
  }
  if (!s.connected) return EPOLLOUT | EPOLLHUP;  // as Linux reports a fresh TCP socket
  const tcp::StreamEndpoint* c = s.conn.endpoint();
  if (c == nullptr) return EPOLLHUP;
  const std::uint32_t t = c->events();
  const bool gone = c->detached();
  // SO_RCVLOWAT: data short of it is not yet "readable" (an end of stream
  // or an error still is: nothing queued then).
  const bool below_lowat = s.rcvlowat > 1 && c->rcv_queued() != 0 && c->rcv_queued() < s.rcvlowat &&
                           (t & (tcp::ev_hangup | tcp::ev_error)) == 0;
  if ((t & tcp::ev_readable) && !below_lowat) ev |= EPOLLIN | EPOLLRDNORM;
  // TCP_NOTSENT_LOWAT: writable only while less than it waits unsent.
  const bool over_lowat = s.notsent_lowat != SIZE_MAX && c->stats().notsent >= s.notsent_lowat;
  if ((t & tcp::ev_writable) && !over_lowat) ev |= EPOLLOUT | EPOLLWRNORM;
  if (t & tcp::ev_error) ev |= EPOLLERR;
  if (t & tcp::ev_urgent) ev |= EPOLLPRI;  // the peer's urgent byte waits, in line
  if (t & tcp::ev_hangup) ev |= EPOLLRDHUP | EPOLLIN | EPOLLRDNORM;
  // Hung up: both directions done, or the connection is gone. A write then
  // fails at once, so the socket reads as writable (Linux does the same).
  if (gone || ((t & tcp::ev_hangup) && s.shut_wr)) ev |= EPOLLHUP;
  if (gone && !s.shut_wr) ev |= EPOLLOUT | EPOLLWRNORM;
  if (s.shut_rd) ev |= EPOLLIN | EPOLLRDNORM;
  return ev;
}

}  // namespace

void refresh(Sock& s, bool forced) {
  const std::uint32_t ev = s.closed.load(std::memory_order_relaxed) ? 0 : compute_events(s);
  const std::uint32_t old = s.events.exchange(ev, std::memory_order_acq_rel);
  if (!forced && old == ev) return;
  s.wp.bump();
  for (Reg* r : s.watchers) queue_reg(*r, ev);
}

void watch(Sock& s) {
  auto cb = [p = &s] { refresh(*p, true); };
  if (s.type == SOCK_DGRAM) {
    s.udp.set_on_readable(cb);
  } else if (s.listening) {
    s.listener.set_on_event(cb);
  } else {
    s.conn.set_on_event(cb);
  }
}

void unwatch_all(Sock& s) {
  for (Reg* r : s.watchers) {
    Epoll* ep = r->ep;
    std::lock_guard<std::mutex> lock(ep->mu);
    std::erase(ep->ready, r);
    ep->regs.erase(r->key);  // frees r
    ep->sync_efd();
  }
  s.watchers.clear();
}

void close_epoll(Epoll& ep) {
  Stack* stack;
  {
    std::lock_guard<std::mutex> lock(ep.mu);
    stack = ep.stack;
  }
  if (stack == nullptr) return;
  stack->call([&] {
    std::lock_guard<std::mutex> lock(ep.mu);
    for (auto& [key, r] : ep.regs) std::erase(r->sock->watchers, r.get());
    ep.ready.clear();
    ep.regs.clear();
    ep.sync_efd();
  });
  ep.wp.bump();
}

namespace {

// ---- epoll ---------------------------------------------------------------------------

int collect(Epoll& ep, epoll_event* out, int max) {
  std::lock_guard<std::mutex> lock(ep.mu);
  int n = 0;
  std::size_t left = ep.ready.size();
  while (left-- > 0 && n < max) {
    Reg* r = ep.ready.front();
    ep.ready.pop_front();
    const std::uint32_t ev = r->sock->events.load(std::memory_order_acquire) & (r->mask | EPOLLERR | EPOLLHUP);
    if (r->disabled || ev == 0) {
      r->queued = false;
      continue;
    }
    out[n].events = ev;
    out[n].data = r->data;
    ++n;
    if (r->mask & EPOLLONESHOT) {
      r->disabled = true;
      r->queued = false;
    } else if (r->mask & EPOLLET) {
      r->queued = false;
    } else {
      ep.ready.push_back(r);  // level-triggered: stays while ready, behind the others
    }
  }
  ep.sync_efd();
  return n;
}

int epoll_wait_on(Epoll& ep, epoll_event* events, int maxevents, int timeout_ms) {
  const Deadline deadline =
      timeout_ms < 0 ? Deadline{} : Deadline{Clock::now() + std::chrono::milliseconds(timeout_ms)};
  Stack* stack;
  {
    std::lock_guard<std::mutex> lock(ep.mu);
    stack = ep.stack;
  }
  bool first = true;
  for (;;) {
    const std::uint32_t seen = ep.wp.gen();
    if (first && stack != nullptr) (void)stack->poll();  // an inline stack moves at least once
    first = false;
    if (int n = collect(ep, events, maxevents); n > 0) return n;
    if (timeout_ms == 0) return 0;
    const WaitEnd w = stack != nullptr ? stack->wait(ep.wp, seen, deadline) : ep.wp.wait(seen, deadline, {});
    if (w == WaitEnd::interrupted) return fail(EINTR, "epoll_wait: interrupted by a signal");
    if (w == WaitEnd::deadline) return 0;
  }
}

// Adds, changes or removes a Reg (on the socket's stack thread).
int epoll_change(Epoll& ep, int op, int key, const std::shared_ptr<Sock>& sp, const epoll_event* event) {
  Sock& s = *sp;
  {
    std::lock_guard<std::mutex> lock(ep.mu);
    if (ep.stack == nullptr) ep.stack = s.stack;
    if (ep.stack != s.stack) return fail(EINVAL, "epoll_ctl: an xk epoll instance watches the sockets of one stack");
  }
  int err = s.stack->call([&]() -> int {
    if (s.closed.load()) return EBADF;
    Reg* r = nullptr;
    {
      std::lock_guard<std::mutex> lock(ep.mu);
      auto it = ep.regs.find(key);
      if (it != ep.regs.end() && it->second->sock != &s) return EBADF;  // a stale number
      if (op == EPOLL_CTL_ADD) {
        if (it != ep.regs.end()) return EEXIST;
        auto reg = std::make_unique<Reg>(Reg{&ep, &s, key, event->events, event->data});
        r = reg.get();
        ep.regs.emplace(key, std::move(reg));
        s.watchers.push_back(r);
      } else if (it == ep.regs.end()) {
        return ENOENT;
      } else if (op == EPOLL_CTL_MOD) {
        r = it->second.get();
        r->mask = event->events;
        r->data = event->data;
        r->disabled = false;
      } else {
        std::erase(s.watchers, it->second.get());
        std::erase(ep.ready, it->second.get());
        ep.regs.erase(it);
        ep.sync_efd();
        return 0;
      }
    }
    queue_reg(*r, s.events.load());
    return 0;
  });
  if (err != 0) return fail(err, "epoll_ctl");
  return 0;
}

}  // namespace
}  // namespace xk::capi

using namespace xk;
using namespace xk::capi;

// ---- readiness ---------------------------------------------------------------------

extern "C" int xk_epoll_create1(int flags) {
  if (flags & ~EPOLL_CLOEXEC) return fail(EINVAL, "epoll_create1: EPOLL_CLOEXEC only");
  return guarded("epoll_create1", [&] {
    int fd = table().add(std::make_shared<Epoll>());
    if (fd < 0) return fail(EMFILE, "epoll_create1: too many xk descriptors");
    return fd;
  });
}

extern "C" int xk_epoll_ctl(int epfd, int op, int fd, struct epoll_event* event) {
  std::shared_ptr<File> f = table().get(epfd);
  if (!f) return fail(EBADF, "epoll_ctl: not an xk descriptor");
  if (f->kind != File::Kind::epoll || epfd == fd) return fail(EINVAL, "epoll_ctl: not an xk epoll instance");
  if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL) return fail(EINVAL, "epoll_ctl: bad op");
  if (op != EPOLL_CTL_DEL && event == nullptr) return fail(EFAULT, "epoll_ctl: no event");
  std::shared_ptr<File> t = table().get(fd);
  if (!t) return fail(EBADF, "epoll_ctl: not an xk descriptor");
  if (t->kind != File::Kind::socket) return fail(EPERM, "epoll_ctl: xk epoll instances watch sockets only");
  return guarded("epoll_ctl", [&] {
    return epoll_change(static_cast<Epoll&>(*f), op, fd, std::static_pointer_cast<Sock>(t), event);
  });
}

extern "C" int xk_epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout_ms) {
  std::shared_ptr<File> f = table().get(epfd);
  if (!f) return fail(EBADF, "epoll_wait: not an xk descriptor");
  if (f->kind != File::Kind::epoll) return fail(EINVAL, "epoll_wait: not an xk epoll instance");
  if (maxevents <= 0 || events == nullptr) return fail(EINVAL, "epoll_wait: maxevents must be positive");
  return guarded("epoll_wait", [&] { return epoll_wait_on(static_cast<Epoll&>(*f), events, maxevents, timeout_ms); });
}

extern "C" int xk_epoll_fd(int epfd) {
  std::shared_ptr<File> f = table().get(epfd);
  if (!f) return fail(EBADF, "epoll_fd: not an xk descriptor");
  if (f->kind != File::Kind::epoll) return fail(EINVAL, "epoll_fd: not an xk epoll instance");
  auto& ep = static_cast<Epoll&>(*f);
  std::lock_guard<std::mutex> lock(ep.mu);
  if (ep.efd < 0) {
    ep.efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ep.efd < 0) return fail(errno, "epoll_fd: eventfd");
    own_fd_opened(ep.efd);
    ep.signalled = false;
    ep.sync_efd();
  }
  // The caller is about to sleep on it (a hybrid stack's thread takes over).
  if (ep.stack != nullptr) ep.stack->hand_over();
  return ep.efd;
}

namespace {
// The sleep on the set's eventfd, the stack's thread (if any) running the
// stack: ppoll on `fds` and the eventfd.
int sleep_on_efd(int epfd, pollfd* fds, nfds_t nfds, std::optional<Duration> left, const sigset_t* sigmask) {
  const int efd = xk_epoll_fd(epfd);
  if (efd < 0) return -1;
  std::vector<pollfd> all(fds, fds + nfds);
  all.push_back({efd, POLLIN, 0});
  const timespec ts = left ? to_timespec(*left) : timespec{};
  // The system call itself: a preloaded program's ppoll is the preload library's.
  const long r = syscall(SYS_ppoll, all.data(), all.size(), left ? &ts : nullptr, sigmask, _NSIG / 8);
  if (r < 0) return fail(errno, "epoll_psleep: ppoll");
  for (nfds_t i = 0; i < nfds; ++i) fds[i].revents = all[i].revents;
  return static_cast<int>(r) - (all.back().revents != 0 ? 1 : 0);
}
}  // namespace

extern "C" int xk_epoll_psleep(int epfd, struct pollfd* fds, nfds_t nfds, const struct timespec* timeout,
                               const sigset_t* sigmask) {
  std::shared_ptr<File> f = table().get(epfd);
  if (!f) return fail(EBADF, "epoll_psleep: not an xk descriptor");
  if (f->kind != File::Kind::epoll) return fail(EINVAL, "epoll_psleep: not an xk epoll instance");
  if (nfds != 0 && fds == nullptr) return fail(EFAULT, "epoll_psleep: no descriptors");
  if (timeout != nullptr && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1'000'000'000)) {
    return fail(EINVAL, "epoll_psleep: bad timeout");
  }
  auto& ep = static_cast<Epoll&>(*f);
  Stack* stack;
  {
    std::lock_guard<std::mutex> lock(ep.mu);
    stack = ep.stack;
  }
  using Steady = std::chrono::steady_clock;
  std::optional<Steady::time_point> deadline;
  if (timeout != nullptr) {
    deadline = Steady::now() + std::chrono::seconds(timeout->tv_sec) + std::chrono::nanoseconds(timeout->tv_nsec);
  }
  auto ready = [&ep] {
    std::lock_guard<std::mutex> lock(ep.mu);
    return !ep.ready.empty();
  };
  auto left = [&]() -> std::optional<Duration> {
    if (!deadline) return std::nullopt;
    return std::max(Duration(0), std::chrono::duration_cast<Duration>(*deadline - Steady::now()));
  };
  if (stack != nullptr && stack->can_sleep_beside()) {
    return guarded("epoll_psleep", [&]() -> int {
      for (;;) {
        bool taken = false;
        const std::optional<Duration> max = left();
        const int n = stack->sleep_beside({fds, nfds}, max, sigmask, ready, taken);
        if (n < 0) return fail(errno, "epoll_psleep: ppoll");
        // A pass ran: what it found, the deadline or a timer that fired
        // for someone else (sleep again).
        if (n > 0 || ready() || (max && *max <= Duration(0)) || (deadline && Steady::now() >= *deadline)) return n;
        if (taken) break;
      }
      return sleep_on_efd(epfd, fds, nfds, left(), sigmask);
    });
  }
  return guarded("epoll_psleep", [&] { return sleep_on_efd(epfd, fds, nfds, left(), sigmask); });
}

namespace {
// poll() looks at the sockets first and runs a pass of an inline stack only
// when none it reads is readable yet, or the stack's latest pass is older
// than this. A program that polls before every read (iperf3 select()s before
// each 128 KiB) reads next anyway, and its read runs the stack; a pass here
// as well polled the ring after every read instead of once the data was
// drained, in bursts of 5 frames instead of 10 -- GRO merged less, and the
// sender got more ACKs (docs/BENCHMARKS.md). Write readiness alone
// never skips poll()'s pass; a send with room skips its own only under the
// same age (blocking()). So nothing goes longer than this without a pass: a
// program that only writes, or polls a readable socket it does not read,
// still lets the stack take its input (ACKs, ARP replies) and fire timers.
constexpr Duration kFresh = std::chrono::microseconds(50);
}  // namespace

bool xk::capi::fresh(Stack& stack) {
  const EventLoop& loop = stack.loop();
  const std::optional<Time> last = loop.last_pass();
  return last && loop.clock().now() - *last < kFresh;
}

extern "C" int xk_poll(struct pollfd* fds, nfds_t nfds, int timeout_ms) {
  if (nfds > 0 && fds == nullptr) return fail(EFAULT, "poll: no array");
  return guarded("poll", [&]() -> int {
    // The sockets, checked once; an unknown descriptor reads POLLNVAL.
    std::vector<std::shared_ptr<Sock>> socks(nfds);
    Stack* stack = nullptr;
    for (nfds_t i = 0; i < nfds; ++i) {
      fds[i].revents = 0;
      if (fds[i].fd < 0) continue;
      std::shared_ptr<File> f = table().get(fds[i].fd);
      if (!f || f->kind != File::Kind::socket) continue;
      socks[i] = std::static_pointer_cast<Sock>(f);
      if (stack == nullptr) stack = socks[i]->stack;
      if (stack != socks[i]->stack) return fail(EINVAL, "poll: the sockets of one stack");
    }
    bool readable = false;  // a socket the caller reads has something to read
    auto scan = [&] {
      int ready = 0;
      readable = false;
      for (nfds_t i = 0; i < nfds; ++i) {
        if (fds[i].fd < 0) continue;
        if (!socks[i] || socks[i]->closed.load()) {
          fds[i].revents = POLLNVAL;
        } else {
          // POLL* and EPOLL* share their values for these bits on Linux.
          std::uint32_t ev = socks[i]->events.load();
          fds[i].revents = static_cast<short>(ev & (static_cast<std::uint16_t>(fds[i].events) | POLLERR | POLLHUP));
        }
        if (fds[i].revents != 0) ++ready;
        readable = readable || (fds[i].revents & (POLLIN | POLLHUP)) != 0;
      }
      return ready;
    };
    int n = scan();
    if (stack != nullptr && !(readable && fresh(*stack))) {
      (void)stack->poll();
      n = scan();
    }
    if (n > 0 || timeout_ms == 0) return n;
    if (stack == nullptr) {
      if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      return 0;
    }
    // Wait through a private epoll set.
    Epoll ep;
    for (nfds_t i = 0; i < nfds; ++i) {
      if (!socks[i] || fds[i].fd < 0) continue;
      epoll_event e{};
      e.events = static_cast<std::uint16_t>(fds[i].events) | EPOLLERR | EPOLLHUP;
      e.data.u64 = i;
      if (epoll_change(ep, EPOLL_CTL_ADD, static_cast<int>(i), socks[i], &e) != 0) return -1;
    }
    epoll_event dummy[1];
    const int r = epoll_wait_on(ep, dummy, 1, timeout_ms);
    close_epoll(ep);
    if (r < 0) return -1;  // EINTR
    return scan();
  });
}

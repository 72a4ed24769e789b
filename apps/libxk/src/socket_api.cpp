// The C API (xk/xk.h): POSIX-style descriptors over xk::Stack.
//
// Every descriptor is a File in one process-wide table: a Sock (a TCP or UDP
// socket) or an Epoll. A Sock's protocol objects (TcpSocket, TcpListener,
// UdpSocket) and its bookkeeping live on its stack's thread: they are touched
// only inside Stack::call(). What other threads may read is atomic: the
// readiness word `events` (EPOLL* bits, recomputed on the stack's thread each
// time the socket reports a change) and the WaitPoint that blocked callers
// sleep on. A blocking call is: sample the WaitPoint, try on the stack's
// thread, and if it would block, sleep until the WaitPoint moves, then try
// again -- so a wake-up between the try and the sleep is never lost.
//
// An Epoll keeps one Reg per watched socket and a ready queue. The socket's
// stack thread queues a Reg when the socket's events meet the Reg's interest;
// xk_epoll_wait takes the queue under the Epoll's mutex, re-reads each
// socket's events, and keeps level-triggered entries queued while they stay
// ready. A Reg is added and removed on the socket's stack thread (under the
// Epoll's mutex too), so a socket never reports to a Reg that is gone and a
// waiter never reads a socket that is gone.

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"
#include "xk/stack.hpp"
#include "xk/xk.h"

struct xk_stack {
  std::unique_ptr<xk::Stack> stack;
};

namespace xk::capi {
namespace {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;

thread_local std::string t_last_error;

// Fails the call: errno and the message of xk_last_error().
int fail(int err, std::string message) {
  t_last_error = std::move(message);
  errno = err;
  return -1;
}

int errno_of(Errc e) noexcept {
  switch (e) {
    case Errc::ok: return 0;
    case Errc::would_block: return EAGAIN;
    case Errc::closed: return EBADF;
    case Errc::bad_state: return EINVAL;
    case Errc::exists: return EADDRINUSE;
    case Errc::invalid_argument: return EINVAL;
    case Errc::no_route: return ENETUNREACH;
    case Errc::port_unreachable: return ECONNREFUSED;
    case Errc::proto_unreachable: return ECONNREFUSED;
    case Errc::refused: return ECONNREFUSED;
    case Errc::reset: return ECONNRESET;
    case Errc::timed_out: return ETIMEDOUT;
    case Errc::not_connected: return ENOTCONN;
    case Errc::too_large: return EMSGSIZE;
    case Errc::no_memory: return ENOMEM;
    case Errc::unsupported: return EOPNOTSUPP;
    case Errc::not_found: return ENOENT;
    case Errc::malformed: return EPROTO;
    case Errc::no_headroom:
    case Errc::out_of_range: return EIO;
  }
  return EIO;
}

int fail(Errc e, const char* what) { return fail(errno_of(e), std::string(what) + ": " + to_string(e)); }

// ---- files and the descriptor table --------------------------------------------

struct File {
  enum class Kind : std::uint8_t { socket, epoll };
  explicit File(Kind k) : kind(k) {}
  virtual ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  const Kind kind;
};

struct Epoll;
struct Sock;

// One socket watched by one epoll instance.
struct Reg {
  Epoll* ep;
  Sock* sock;
  int key;  // the descriptor it was added as (a pollfd index for xk_poll)
  std::uint32_t mask;
  epoll_data_t data;
  bool queued = false;
  bool disabled = false;  // EPOLLONESHOT fired; MOD re-arms
};

struct Epoll final : File {
  Epoll() : File(Kind::epoll) {}
  std::mutex mu;
  Stack* stack = nullptr;  // of the sockets it watches: set by the first ADD
  std::map<int, std::unique_ptr<Reg>> regs;
  std::deque<Reg*> ready;
  WaitPoint wp;
};

struct Linger {
  bool on = false;
  int seconds = 0;
};

struct Sock final : File {
  Sock(Stack& s, int t) : File(Kind::socket), stack(&s), type(t) {}
  ~Sock() override = default;

  Stack* const stack;
  const int type;  // SOCK_STREAM or SOCK_DGRAM
  std::atomic<bool> nonblock{false};
  std::atomic<std::int64_t> rcvtimeo_ns{0};  // 0: none
  std::atomic<std::int64_t> sndtimeo_ns{0};

  // ---- the stack's thread only -------------------------------------------------
  tcp::TcpSocket conn;     // a stream socket before listen(), and after connect/accept
  tcp::TcpListener listener;
  udp::UdpSocket udp;
  bool listening = false;
  bool connected = false;  // connect() issued, or accepted
  bool reserved = false;   // bind() holds (bind_addr, bind_port) in tcp
  Ipv4Addr bind_addr;
  Port bind_port;
  bool reuse_addr = false;
  bool reuse_port = false;  // listen as one of a group of nodes (filterd)
  bool keepalive = false;
  bool nodelay = false;
  bool cork = false;
  std::size_t sndbuf = 0;  // 0: the stack's default
  std::size_t rcvbuf = 0;
  std::optional<ChecksumMode> csum;
  Linger linger;
  bool shut_rd = false;
  bool shut_wr = false;
  bool closing = false;
  std::vector<Reg*> watchers;

  // ---- any thread -------------------------------------------------------------
  std::atomic<std::uint32_t> events{0};
  std::atomic<bool> closed{false};
  WaitPoint wp;
};

class FdTable {
 public:
  static constexpr int kMaxFds = 1 << 20;

  int add(std::shared_ptr<File> f) {
    std::lock_guard<std::mutex> lock(mu_);
    int fd;
    if (!free_.empty()) {
      fd = *free_.begin();  // the lowest free number, as POSIX hands out
      free_.erase(free_.begin());
    } else {
      if (files_.size() >= static_cast<std::size_t>(kMaxFds)) return -1;
      fd = static_cast<int>(files_.size());
      files_.emplace_back();
    }
    files_[static_cast<std::size_t>(fd)] = std::move(f);
    return fd;
  }
  std::shared_ptr<File> get(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd < 0 || static_cast<std::size_t>(fd) >= files_.size()) return nullptr;
    return files_[static_cast<std::size_t>(fd)];
  }
  std::shared_ptr<File> take(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd < 0 || static_cast<std::size_t>(fd) >= files_.size() || !files_[static_cast<std::size_t>(fd)]) {
      return nullptr;
    }
    free_.insert(fd);
    return std::move(files_[static_cast<std::size_t>(fd)]);
  }
  // The descriptors whose file `pred` picks.
  template <class Pred>
  std::vector<int> select(Pred pred) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int> out;
    for (std::size_t i = 0; i < files_.size(); ++i) {
      if (files_[i] && pred(*files_[i])) out.push_back(static_cast<int>(i));
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<File>> files_;
  std::set<int> free_;
};

FdTable& table() {
  static FdTable* t = new FdTable;  // never destroyed: descriptors may outlive static destruction
  return *t;
}

std::shared_ptr<Sock> get_sock(int fd) {
  std::shared_ptr<File> f = table().get(fd);
  if (!f) {
    fail(EBADF, "not an xk descriptor");
    return nullptr;
  }
  if (f->kind != File::Kind::socket) {
    fail(ENOTSOCK, "not a socket");
    return nullptr;
  }
  return std::static_pointer_cast<Sock>(f);
}

Deadline deadline_after_ns(std::int64_t ns) {
  if (ns <= 0) return std::nullopt;
  return Clock::now() + std::chrono::nanoseconds(ns);
}

// ---- readiness (stack's thread) ---------------------------------------------------

void queue_reg(Reg& r, std::uint32_t ev) {
  if (r.disabled || (ev & (r.mask | EPOLLERR | EPOLLHUP)) == 0) return;
  {
    std::lock_guard<std::mutex> lock(r.ep->mu);
    if (!r.queued) {
      r.queued = true;
      r.ep->ready.push_back(&r);
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
  if (t & tcp::ev_readable) ev |= EPOLLIN | EPOLLRDNORM;
  if (t & tcp::ev_writable) ev |= EPOLLOUT | EPOLLWRNORM;
  if (t & tcp::ev_error) ev |= EPOLLERR;
  if (t & tcp::ev_hangup) ev |= EPOLLRDHUP | EPOLLIN | EPOLLRDNORM;
  // Hung up: both directions done, or the connection is gone. A write then
  // fails at once, so the socket reads as writable (Linux does the same).
  if (gone || ((t & tcp::ev_hangup) && s.shut_wr)) ev |= EPOLLHUP;
  if (gone && !s.shut_wr) ev |= EPOLLOUT | EPOLLWRNORM;
  if (s.shut_rd) ev |= EPOLLIN | EPOLLRDNORM;
  return ev;
}

// After anything that may have changed the socket: new events, wake the
// blocked callers and the epoll sets. `forced`: the socket itself said so
// (new data is news to an edge-triggered watcher even if the bits stay).
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

void apply_conn_options(Sock& s) {
  if (s.nodelay) s.conn.set_nodelay(true);
  if (s.cork) s.conn.set_cork(true);
  if (s.keepalive) s.conn.set_keepalive(true);
  if (s.sndbuf != 0) s.conn.set_sndbuf(s.sndbuf);
  if (s.rcvbuf != 0) s.conn.set_rcvbuf(s.rcvbuf);
  if (s.csum) s.conn.set_checksum(*s.csum);
}

// Unregisters from every epoll set (stack's thread).
void unwatch_all(Sock& s) {
  for (Reg* r : s.watchers) {
    Epoll* ep = r->ep;
    std::lock_guard<std::mutex> lock(ep->mu);
    std::erase(ep->ready, r);
    ep->regs.erase(r->key);  // frees r
  }
  s.watchers.clear();
}

// ---- results of work on the stack's thread -----------------------------------------

struct Outcome {
  Errc err = Errc::ok;
  std::size_t n = 0;
  static Outcome ok(std::size_t n = 0) { return {Errc::ok, n}; }
  static Outcome error(Errc e) { return {e, 0}; }
};

// The standard blocking loop: try `op` on the stack's thread; while it would
// block and the call may block, sleep until the socket changes.
template <class Op>
Outcome blocking(Sock& s, bool may_block, Deadline deadline, Op&& op) {
  for (;;) {
    const std::uint32_t seen = s.wp.gen();
    Outcome o = s.stack->call([&] {
      if (s.closed.load(std::memory_order_relaxed)) return Outcome::error(Errc::closed);
      Outcome r = op();
      refresh(s, false);
      return r;
    });
    if (o.err != Errc::would_block || !may_block) return o;
    if (!s.stack->wait(s.wp, seen, deadline)) return o;
  }
}

sockaddr_in to_sockaddr(Ipv4Addr a, Port p) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(p.value);
  sin.sin_addr.s_addr = htonl(a.value);
  return sin;
}

void write_sockaddr(Ipv4Addr a, Port p, sockaddr* addr, socklen_t* len) {
  if (addr == nullptr || len == nullptr) return;
  sockaddr_in sin = to_sockaddr(a, p);
  std::memcpy(addr, &sin, std::min<std::size_t>(*len, sizeof sin));
  *len = sizeof sin;
}

bool read_sockaddr(const sockaddr* addr, socklen_t len, Ipv4Addr& a, Port& p, int& err) {
  if (addr == nullptr || len < static_cast<socklen_t>(sizeof(sockaddr_in))) {
    err = EINVAL;
    return false;
  }
  sockaddr_in sin;
  std::memcpy(&sin, addr, sizeof sin);
  if (sin.sin_family != AF_INET) {
    err = EAFNOSUPPORT;
    return false;
  }
  a = Ipv4Addr{ntohl(sin.sin_addr.s_addr)};
  p = Port{ntohs(sin.sin_port)};
  return true;
}

// Runs `body`, turning what escapes into errno (the C API never throws).
template <class Body>
auto guarded(const char* what, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return static_cast<decltype(body())>(fail(ENOMEM, std::string(what) + ": out of memory"));
  } catch (const std::exception& e) {
    return static_cast<decltype(body())>(fail(EIO, std::string(what) + ": " + e.what()));
  }
}

// ---- stream data ------------------------------------------------------------------

ssize_t stream_recv(Sock& s, const iovec* iov, int iovcnt, int flags) {
  std::size_t want = 0;
  for (int i = 0; i < iovcnt; ++i) want += iov[i].iov_len;
  const bool may_block = !(flags & MSG_DONTWAIT) && !s.nonblock.load(std::memory_order_relaxed);
  const bool waitall = (flags & MSG_WAITALL) != 0;
  const Deadline deadline = deadline_after_ns(s.rcvtimeo_ns.load(std::memory_order_relaxed));
  std::size_t done = 0;
  for (;;) {
    Outcome o = blocking(s, may_block, deadline, [&]() -> Outcome {
      if (s.listening || !s.connected) return Outcome::error(Errc::not_connected);
      if (s.shut_rd) return Outcome::ok(0);
      std::size_t got = 0, skip = done;
      for (int i = 0; i < iovcnt; ++i) {
        std::size_t len = iov[i].iov_len;
        if (skip >= len) {
          skip -= len;
          continue;
        }
        auto* base = static_cast<std::byte*>(iov[i].iov_base) + skip;
        Result<std::size_t> r = s.conn.read(std::span<std::byte>(base, len - skip));
        skip = 0;
        if (!r) {
          if (got != 0) break;
          return Outcome::error(r.error());
        }
        got += *r;
        if (*r < len) break;  // drained (or end of stream)
      }
      return Outcome::ok(got);
    });
    if (o.err != Errc::ok) {
      if (done != 0) return static_cast<ssize_t>(done);
      if (o.err == Errc::closed) return fail(EBADF, "recv: the socket was closed");
      return fail(o.err, "recv");
    }
    done += o.n;
    if (o.n == 0 || !waitall || done >= want || !may_block) return static_cast<ssize_t>(done);
  }
}

ssize_t stream_send(Sock& s, const iovec* iov, int iovcnt, int flags) {
  std::size_t want = 0;
  for (int i = 0; i < iovcnt; ++i) want += iov[i].iov_len;
  const bool may_block = !(flags & MSG_DONTWAIT) && !s.nonblock.load(std::memory_order_relaxed);
  const Deadline deadline = deadline_after_ns(s.sndtimeo_ns.load(std::memory_order_relaxed));
  std::size_t done = 0;
  for (;;) {
    Outcome o = blocking(s, may_block, deadline, [&]() -> Outcome {
      if (s.listening || !s.connected) return Outcome::error(Errc::not_connected);
      if (s.shut_wr) return Outcome::error(Errc::closed);
      std::size_t put = 0, skip = done;
      for (int i = 0; i < iovcnt; ++i) {
        std::size_t len = iov[i].iov_len;
        if (skip >= len) {
          skip -= len;
          continue;
        }
        const auto* base = static_cast<const std::byte*>(iov[i].iov_base) + skip;
        Result<std::size_t> r = s.conn.write(std::span<const std::byte>(base, len - skip));
        skip = 0;
        if (!r) {
          if (put != 0) break;
          return Outcome::error(r.error());
        }
        put += *r;
        if (*r < len) break;  // the send buffer is full
      }
      if (put == 0 && want != done) return Outcome::error(Errc::would_block);
      return Outcome::ok(put);
    });
    if (o.err != Errc::ok) {
      if (done != 0) return static_cast<ssize_t>(done);
      // No SIGPIPE, ever: EPIPE for a connection that can take no more data.
      if (o.err == Errc::closed && !s.closed.load()) return fail(EPIPE, "send: the connection is shut down for writing");
      if (o.err == Errc::closed) return fail(EBADF, "send: the socket was closed");
      return fail(o.err, "send");
    }
    done += o.n;
    if (done >= want || !may_block) return static_cast<ssize_t>(done);
  }
}

// ---- datagrams ------------------------------------------------------------------

ssize_t dgram_recv(Sock& s, void* buf, std::size_t len, int flags, sockaddr* from, socklen_t* fromlen) {
  const bool may_block = !(flags & MSG_DONTWAIT) && !s.nonblock.load(std::memory_order_relaxed);
  const Deadline deadline = deadline_after_ns(s.rcvtimeo_ns.load(std::memory_order_relaxed));
  Ipv4Addr src;
  Port sport;
  Outcome o = blocking(s, may_block, deadline, [&]() -> Outcome {
    Result<udp::Datagram> d = s.udp.recvfrom();
    if (!d) return Outcome::error(d.error());
    std::size_t n = std::min(len, d->payload.size());
    if (Status st = d->payload.copy_out(0, std::span<std::byte>(static_cast<std::byte*>(buf), n)); !st) {
      return Outcome::error(st.error());
    }
    src = d->from;
    sport = d->from_port;
    return Outcome::ok(n);  // the rest of a longer datagram is discarded, as recv(2) does
  });
  if (o.err == Errc::closed) return fail(EBADF, "recvfrom: the socket was closed");
  if (o.err != Errc::ok) return fail(o.err, "recvfrom");
  write_sockaddr(src, sport, from, fromlen);
  return static_cast<ssize_t>(o.n);
}

ssize_t dgram_send(Sock& s, const void* buf, std::size_t len, const sockaddr* to, socklen_t tolen) {
  Ipv4Addr a;
  Port p;
  if (to != nullptr) {
    int err = 0;
    if (!read_sockaddr(to, tolen, a, p, err)) return fail(err, "sendto: bad address");
  }
  if (len > udp::UdpProtocol::kMaxPayload) return fail(EMSGSIZE, "sendto: over 65507 bytes");
  auto bytes = std::span<const std::byte>(static_cast<const std::byte*>(buf), len);
  Outcome o = s.stack->call([&]() -> Outcome {
    if (s.closed.load()) return Outcome::error(Errc::closed);
    Status st;
    if (to != nullptr) {
      st = s.udp.sendto(bytes, a, p);
    } else if (!s.udp.session()->connected()) {
      return Outcome::error(Errc::not_found);
    } else {
      st = s.udp.send(bytes);
    }
    refresh(s, false);
    return st ? Outcome::ok(len) : Outcome::error(st.error());
  });
  if (o.err == Errc::not_found) return fail(EDESTADDRREQ, "send: the socket is not connected");
  if (o.err != Errc::ok) return fail(o.err, "sendto");
  return static_cast<ssize_t>(o.n);
}

// ---- close ------------------------------------------------------------------------

// Closes the socket on its stack's thread: abortive (`reset`), with SO_LINGER
// as set, or graceful.
int close_sock(const std::shared_ptr<Sock>& sp, bool reset) {
  Sock& s = *sp;
  Ref<tcp::StreamEndpoint> lingering;
  Linger linger;
  s.stack->call([&] {
    s.closed.store(true);
    s.closing = true;
    unwatch_all(s);
    linger = s.linger;
    if (s.reserved) {
      s.stack->tcp()->release_port(s.bind_addr, s.bind_port);
      s.reserved = false;
    }
    if (s.type == SOCK_DGRAM) {
      (void)s.udp.close();
    } else if (s.listening) {
      (void)s.listener.close();
    } else if (reset || (linger.on && linger.seconds == 0)) {
      s.conn.abort();  // RFC 9293 3.10.5 ABORT: RST, queued data dropped
    } else {
      if (linger.on && s.conn.endpoint() != nullptr) lingering = Ref<tcp::StreamEndpoint>(s.conn.endpoint());
      (void)s.conn.close();
      if (lingering) lingering->set_on_event([p = &s] { p->wp.bump(); });
    }
    s.wp.bump();  // blocked callers wake and see EBADF
  });
  if (!lingering) return 0;
  // SO_LINGER with a timeout: wait until our FIN is acknowledged (all data
  // delivered) or the time is up; after that the connection finishes on its
  // own, as on Linux.
  const Deadline deadline = Clock::now() + std::chrono::seconds(linger.seconds);
  for (;;) {
    const std::uint32_t seen = s.wp.gen();
    bool done = s.stack->call([&] {
      tcp::State st = lingering->state();
      return lingering->detached() || st == tcp::State::fin_wait_2 || st == tcp::State::time_wait ||
             st == tcp::State::closed;
    });
    if (done || !s.stack->wait(s.wp, seen, deadline)) break;
  }
  s.stack->call([&] {
    lingering->set_on_event({});
    lingering = nullptr;
  });
  return 0;
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
  });
  ep.wp.bump();
}

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
    const bool moved = stack != nullptr ? stack->wait(ep.wp, seen, deadline) : ep.wp.wait(seen, deadline, {});
    if (!moved) return 0;
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

// ---- stacks ----------------------------------------------------------------------

extern "C" void xk_stack_config_init(struct xk_stack_config* c) {
  *c = xk_stack_config{};
  c->csum = 1;
  c->mode = XK_MODE_INLINE;
  c->idle = XK_IDLE_SPIN_THEN_SLEEP;
  c->spin_us = 50;
  c->cpu = -1;
  c->link_wait_ms = 5000;
}

namespace {
std::string env_or(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) throw std::invalid_argument("cannot read " + path + ": " + std::strerror(errno));
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

// enum xk_idle and the loop's IdleMode (whose names parse_idle_mode knows).
constexpr std::pair<int, IdleMode> kIdleModes[] = {{XK_IDLE_SPIN_THEN_SLEEP, IdleMode::spin_then_sleep},
                                                   {XK_IDLE_BUSY_POLL, IdleMode::busy_poll},
                                                   {XK_IDLE_YIELD_THEN_SLEEP, IdleMode::yield_then_sleep}};

unsigned env_number(const char* name, unsigned fallback, unsigned max) {
  std::string v = env_or(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  unsigned long n = std::strtoul(v.c_str(), &end, 10);
  if (*end != '\0' || n > max) throw std::invalid_argument(std::string(name) + "='" + v + "' is not a number in 0.." + std::to_string(max));
  return static_cast<unsigned>(n);
}

StackConfig config_from(const xk_stack_config* c) {
  StackConfig sc;
  xk_stack_config env;
  std::string graph_text;
  SimpleGraph g;
  std::string filterd;
  if (c == nullptr) {
    xk_stack_config_init(&env);
    filterd = env_or("XK_FILTERD");
    std::string file = env_or("XK_GRAPH");
    if (!file.empty()) {
      graph_text = read_file(file);
      sc.source = file;
    }
    g.port = env_or("XK_PORT");
    g.ip = env_or("XK_IP");
    g.gw = env_or("XK_GW");
    g.mac = env_or("XK_MAC");
    g.tcp_opts = env_or("XK_TCP_OPTS");
    std::string csum = env_or("XK_CSUM", "on");
    if (csum != "on" && csum != "off") throw std::invalid_argument("XK_CSUM='" + csum + "': on or off");
    g.csum = csum == "on";
    std::string mode = env_or("XK_MODE", "inline");
    if (mode != "inline" && mode != "service") throw std::invalid_argument("XK_MODE='" + mode + "': inline or service");
    env.mode = mode == "service" ? XK_MODE_SERVICE : XK_MODE_INLINE;
    std::string idle = env_or("XK_IDLE", "spin");
    std::optional<IdleMode> m = parse_idle_mode(idle);
    if (!m) throw std::invalid_argument("XK_IDLE='" + idle + "': spin, busy or yield");
    for (const auto& [c_idle, loop_idle] : kIdleModes) {
      if (loop_idle == *m) env.idle = c_idle;
    }
    env.spin_us = env_number("XK_SPIN_US", 50, 1'000'000);
    std::string cpu = env_or("XK_CPU");
    env.cpu = cpu.empty() ? -1 : static_cast<int>(env_number("XK_CPU", 0, 4095));
    c = &env;
  } else {
    if (c->filterd != nullptr) filterd = c->filterd;
    if (c->graph != nullptr) graph_text = c->graph;
    g.port = c->port != nullptr ? c->port : "";
    g.ip = c->ip != nullptr ? c->ip : "";
    g.gw = c->gw != nullptr ? c->gw : "";
    g.mac = c->mac != nullptr ? c->mac : "";
    g.tcp_opts = c->tcp_opts != nullptr ? c->tcp_opts : "";
    g.csum = c->csum != 0;
  }
  if (c->mode != XK_MODE_INLINE && c->mode != XK_MODE_SERVICE) throw std::invalid_argument("mode: inline or service");
  const auto* idle = std::find_if(std::begin(kIdleModes), std::end(kIdleModes),
                                  [c](const auto& e) { return e.first == c->idle; });
  if (idle == std::end(kIdleModes)) throw std::invalid_argument("idle: spin, busy or yield");
  if (!filterd.empty()) {
    sc.filterd = filterd;  // the graph comes from filterd
    sc.tcp_opts = g.tcp_opts;
    // Over TCP, on another host: the node's own port and MAC (XK_PORT, XK_MAC).
    sc.node_port = g.port;
    sc.node_mac = g.mac;
  } else {
    sc.graph = graph_text.empty() ? compose_graph(g) : graph_text;
  }
  sc.mode = c->mode == XK_MODE_SERVICE ? StackMode::service_thread : StackMode::inline_calls;
  sc.loop.idle = idle->second;
  sc.loop.spin = std::chrono::microseconds(c->spin_us);
  sc.thread.cpu = c->cpu;
  sc.link_wait = std::chrono::milliseconds(c->link_wait_ms);
  return sc;
}
}  // namespace

extern "C" xk_stack* xk_stack_create(const struct xk_stack_config* config) {
  StackConfig sc;
  try {
    sc = config_from(config);
  } catch (const std::exception& e) {
    fail(EINVAL, std::string("xk_stack_create: ") + e.what());
    return nullptr;
  }
  try {
    auto* h = new xk_stack{Stack::create(std::move(sc))};
    t_last_error.clear();
    return h;
  } catch (const GraphError& e) {
    fail(EINVAL, std::string("xk_stack_create: bad graph:\n") + e.what());
  } catch (const std::bad_alloc&) {
    fail(ENOMEM, "xk_stack_create: out of memory");
  } catch (const std::exception& e) {
    fail(EIO, std::string("xk_stack_create: ") + e.what());
  }
  return nullptr;
}

extern "C" int xk_node_create(const struct xk_stack_config* config, unsigned count, xk_stack** stacks) {
  if (stacks == nullptr) return fail(EINVAL, "xk_node_create: no array for the stacks");
  if (count == 0 || count > 64) return fail(EINVAL, "xk_node_create: count " + std::to_string(count) + " is not in 1..64");
  const char* filterd = config != nullptr ? config->filterd : std::getenv("XK_FILTERD");
  if (filterd == nullptr || *filterd == '\0') {
    return fail(EINVAL, "xk_node_create: several stacks sharing an address need filterd (XK_FILTERD)");
  }
  StackConfig sc;
  try {
    sc = config_from(config);
  } catch (const std::exception& e) {
    return fail(EINVAL, std::string("xk_node_create: ") + e.what());
  }
  try {
    std::vector<std::unique_ptr<Stack>> built = Stack::create_node(std::move(sc), count);
    std::vector<std::unique_ptr<xk_stack>> handles;
    for (auto& st : built) handles.push_back(std::make_unique<xk_stack>(xk_stack{std::move(st)}));
    for (unsigned i = 0; i < count; ++i) stacks[i] = handles[i].release();
    t_last_error.clear();
    return 0;
  } catch (const std::invalid_argument& e) {
    return fail(EINVAL, std::string("xk_node_create: ") + e.what());
  } catch (const std::bad_alloc&) {
    return fail(ENOMEM, "xk_node_create: out of memory");
  } catch (const std::exception& e) {
    return fail(EIO, std::string("xk_node_create: ") + e.what());
  }
}

xk_stack* xk::adopt_for_c_api(std::unique_ptr<Stack> stack) {
  if (stack == nullptr) throw std::invalid_argument("adopt_for_c_api: no stack");
  return new xk_stack{std::move(stack)};
}

extern "C" void xk_stack_destroy(xk_stack* h) {
  if (h == nullptr) return;
  Stack* stack = h->stack.get();
  // Sockets first (reset: nobody will read what they hold), then epoll sets.
  std::vector<int> fds = table().select([&](const File& f) {
    return f.kind == File::Kind::socket && static_cast<const Sock&>(f).stack == stack;
  });
  for (int fd : fds) {
    if (auto f = table().take(fd)) (void)guarded("close", [&] { return close_sock(std::static_pointer_cast<Sock>(f), true); });
  }
  std::vector<int> eps = table().select([&](const File& f) {
    if (f.kind != File::Kind::epoll) return false;
    auto& ep = const_cast<Epoll&>(static_cast<const Epoll&>(f));
    std::lock_guard<std::mutex> lock(ep.mu);
    return ep.stack == stack;
  });
  for (int fd : eps) {
    if (auto f = table().get(fd)) {
      auto& ep = static_cast<Epoll&>(*f);
      std::lock_guard<std::mutex> lock(ep.mu);
      ep.stack = nullptr;  // its sockets are gone; it may watch another stack's
    }
  }
  delete h;
}

extern "C" int xk_stack_poll(xk_stack* h) {
  if (h == nullptr) return fail(EINVAL, "xk_stack_poll: no stack");
  return guarded("xk_stack_poll", [&] { return static_cast<int>(std::min<std::size_t>(h->stack->poll(), INT32_MAX)); });
}

extern "C" int xk_stack_counter(xk_stack* h, const char* instance, const char* name, unsigned long long* value) {
  if (h == nullptr || instance == nullptr || name == nullptr || value == nullptr) {
    return fail(EINVAL, "xk_stack_counter: a null argument");
  }
  return guarded("xk_stack_counter", [&] {
    const std::optional<std::uint64_t> got = h->stack->call([&]() -> std::optional<std::uint64_t> {
      const Protocol* p = h->stack->graph().find(instance);
      if (p == nullptr) return std::nullopt;
      const std::string_view n = name;
      if (const auto* t = dynamic_cast<const tcp::TcpProtocol*>(p); t != nullptr) {
        if (n == "connections") return t->connection_count();
        if (n == "time_wait") return t->time_wait_count();
        if (n.starts_with("state:")) {
          std::uint64_t k = 0;
          for (const tcp::TcpProtocol::ConnectionInfo& c : t->connections()) k += n.substr(6) == tcp::to_string(c.state);
          return k;
        }
      }
      const Counter* c = p->counters().find(n);
      if (c == nullptr) return std::nullopt;
      return c->value();
    });
    if (!got) return fail(ENOENT, std::string("xk_stack_counter: no counter ") + instance + "." + name);
    *value = *got;
    return 0;
  });
}

extern "C" const char* xk_last_error(void) { return t_last_error.c_str(); }

// ---- sockets ---------------------------------------------------------------------------

extern "C" int xk_socket(xk_stack* h, int domain, int type, int protocol) {
  if (h == nullptr) return fail(EINVAL, "socket: no stack");
  if (domain != AF_INET) return fail(EAFNOSUPPORT, "socket: AF_INET only");
  const int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  Stack& stack = *h->stack;
  if (base == SOCK_STREAM) {
    if (protocol != 0 && protocol != IPPROTO_TCP) return fail(EPROTONOSUPPORT, "socket: SOCK_STREAM is TCP");
    if (stack.tcp() == nullptr) return fail(EPROTONOSUPPORT, "socket: the stack has no tcp");
  } else if (base == SOCK_DGRAM) {
    if (protocol != 0 && protocol != IPPROTO_UDP) return fail(EPROTONOSUPPORT, "socket: SOCK_DGRAM is UDP");
    if (stack.udp() == nullptr) return fail(EPROTONOSUPPORT, "socket: the stack has no udp");
  } else {
    return fail(ESOCKTNOSUPPORT, "socket: SOCK_STREAM or SOCK_DGRAM");
  }
  return guarded("socket", [&] {
    auto s = std::make_shared<Sock>(stack, base);
    s->nonblock.store((type & SOCK_NONBLOCK) != 0);
    stack.call([&] {
      if (base == SOCK_STREAM) {
        s->conn = stack.tcp()->socket();
      } else {
        s->udp = stack.udp()->socket();
      }
      watch(*s);
      refresh(*s, false);
    });
    int fd = table().add(s);
    if (fd < 0) {
      close_sock(s, true);
      return fail(EMFILE, "socket: too many xk descriptors");
    }
    return fd;
  });
}

extern "C" int xk_bind(int fd, const struct sockaddr* addr, socklen_t len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  Ipv4Addr a;
  Port p;
  int err = 0;
  if (!read_sockaddr(addr, len, a, p, err)) return fail(err, "bind: bad address");
  return guarded("bind", [&] {
    Errc e = s->stack->call([&]() -> Errc {
      if (s->closed.load()) return Errc::closed;
      if (s->type == SOCK_DGRAM) return s->udp.bind(a, p).error();
      if (s->reserved || s->listening || s->connected) return Errc::bad_state;
      Result<Port> r = s->stack->tcp()->reserve_port(a, p, s->reuse_addr);
      if (!r) return r.error();
      s->reserved = true;
      s->bind_addr = a;
      s->bind_port = *r;
      return Errc::ok;
    });
    if (e == Errc::bad_state) return fail(EINVAL, "bind: the socket is already bound");
    if (e != Errc::ok) return fail(e, "bind");
    return 0;
  });
}

extern "C" int xk_listen(int fd, int backlog) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (s->type != SOCK_STREAM) return fail(EOPNOTSUPP, "listen: not a stream socket");
  return guarded("listen", [&] {
    Errc e = s->stack->call([&]() -> Errc {
      if (s->closed.load()) return Errc::closed;
      if (s->listening) return Errc::ok;
      if (s->connected) return Errc::bad_state;
      auto n = static_cast<std::size_t>(std::clamp(backlog, 1, 65535));
      if (s->reserved) s->stack->tcp()->release_port(s->bind_addr, s->bind_port);
      Result<tcp::TcpListener> l = s->stack->tcp()->listen(s->bind_addr, s->bind_port, n, s->reuse_port);
      if (!l) {
        if (s->reserved) (void)s->stack->tcp()->reserve_port(s->bind_addr, s->bind_port, true);
        return l.error();
      }
      s->reserved = false;
      s->listener = std::move(*l);
      s->bind_port = s->listener.port();
      if (s->csum) s->listener.set_checksum(*s->csum);
      s->conn = tcp::TcpSocket();
      s->listening = true;
      watch(*s);
      refresh(*s, true);
      return Errc::ok;
    });
    if (e == Errc::bad_state) return fail(EINVAL, "listen: the socket is connected");
    if (e != Errc::ok) return fail(e, "listen");
    return 0;
  });
}

extern "C" int xk_accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (s->type != SOCK_STREAM) return fail(EOPNOTSUPP, "accept: not a stream socket");
  if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) return fail(EINVAL, "accept4: flags are SOCK_NONBLOCK, SOCK_CLOEXEC");
  return guarded("accept", [&] {
    std::shared_ptr<Sock> child;
    tcp::FourTuple tuple{};
    const bool may_block = !s->nonblock.load();
    Outcome o = blocking(*s, may_block, deadline_after_ns(s->rcvtimeo_ns.load()), [&]() -> Outcome {
      if (!s->listening) return Outcome::error(Errc::invalid_argument);
      Result<tcp::TcpSocket> c = s->listener.accept();
      if (!c) return Outcome::error(c.error());
      child = std::make_shared<Sock>(*s->stack, SOCK_STREAM);
      child->conn = std::move(*c);
      child->connected = true;
      // What the listener was given, its connections inherit (as on Linux).
      child->nodelay = s->nodelay;
      child->cork = s->cork;
      child->keepalive = s->keepalive;
      child->sndbuf = s->sndbuf;
      child->rcvbuf = s->rcvbuf;
      child->csum = s->csum;
      child->linger = s->linger;
      apply_conn_options(*child);
      tuple = child->conn.tuple();
      watch(*child);
      refresh(*child, false);
      return Outcome::ok();
    });
    if (o.err == Errc::invalid_argument) return fail(EINVAL, "accept: the socket is not listening");
    if (o.err == Errc::closed) return fail(EBADF, "accept: the socket was closed");
    if (o.err != Errc::ok) return fail(o.err, "accept");
    child->nonblock.store((flags & SOCK_NONBLOCK) != 0);
    child->rcvtimeo_ns.store(s->rcvtimeo_ns.load());
    child->sndtimeo_ns.store(s->sndtimeo_ns.load());
    int nfd = table().add(child);
    if (nfd < 0) {
      close_sock(child, true);
      return fail(EMFILE, "accept: too many xk descriptors");
    }
    write_sockaddr(tuple.remote_addr, Port{tuple.remote_port}, addr, len);
    return nfd;
  });
}

extern "C" int xk_accept(int fd, struct sockaddr* addr, socklen_t* len) { return xk_accept4(fd, addr, len, 0); }

extern "C" int xk_connect(int fd, const struct sockaddr* addr, socklen_t len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  Ipv4Addr a;
  Port p;
  int err = 0;
  if (!read_sockaddr(addr, len, a, p, err)) return fail(err, "connect: bad address");
  return guarded("connect", [&]() -> int {
    if (s->type == SOCK_DGRAM) {
      Errc e = s->stack->call([&] {
        if (s->closed.load()) return Errc::closed;
        Errc r = s->udp.connect(a, p).error();
        refresh(*s, false);
        return r;
      });
      if (e != Errc::ok) return fail(e, "connect");
      return 0;
    }
    if (p.value == 0 || a.value == 0) return fail(EINVAL, "connect: no address or port");
    // 1: started now, 2: in progress already, 3: connected already.
    Result<int> started = s->stack->call([&]() -> Result<int> {
      if (s->closed.load()) return Errc::closed;
      if (s->listening) return Errc::bad_state;
      if (s->connected) {
        tcp::StreamEndpoint* c = s->conn.endpoint();
        if (c != nullptr && c->pending_error() != Errc::ok) return c->take_error();
        return s->conn.state() == tcp::State::syn_sent ? 2 : 3;
      }
      if (s->reserved) s->stack->tcp()->release_port(s->bind_addr, s->bind_port);
      Status st = s->conn.connect(a, p, s->bind_addr, s->bind_port);
      if (!st) {
        if (s->reserved) (void)s->stack->tcp()->reserve_port(s->bind_addr, s->bind_port, true);
        return st.error();
      }
      s->reserved = false;
      s->connected = true;
      apply_conn_options(*s);
      refresh(*s, false);
      return 1;
    });
    if (!started) {
      Errc e = started.error();
      if (e == Errc::bad_state) return fail(EISCONN, "connect: the socket is listening");
      if (e == Errc::exists) return fail(EADDRNOTAVAIL, "connect: no free local port for that peer");
      if (e == Errc::closed) return fail(EBADF, "connect: the socket was closed");
      return fail(e, "connect");
    }
    if (*started == 3) return fail(EISCONN, "connect: already connected");
    if (s->nonblock.load()) {
      return fail(*started == 2 ? EALREADY : EINPROGRESS, "connect: in progress");
    }
    // Blocking: wait for the handshake to end one way or the other.
    const Deadline deadline = deadline_after_ns(s->sndtimeo_ns.load());
    Outcome o = blocking(*s, true, deadline, [&]() -> Outcome {
      tcp::StreamEndpoint* c = s->conn.endpoint();
      if (c == nullptr) return Outcome::error(Errc::closed);
      if (c->pending_error() != Errc::ok) return Outcome::error(c->take_error());
      if (s->conn.state() == tcp::State::syn_sent || s->conn.state() == tcp::State::syn_received) {
        return Outcome::error(Errc::would_block);
      }
      if (c->detached()) return Outcome::error(Errc::reset);
      return Outcome::ok();
    });
    if (o.err == Errc::would_block) return fail(EINPROGRESS, "connect: timed out (SO_SNDTIMEO), still in progress");
    if (o.err == Errc::closed) return fail(EBADF, "connect: the socket was closed");
    if (o.err != Errc::ok) return fail(o.err, "connect");
    return 0;
  });
}

namespace {
ssize_t recv_any(int fd, const iovec* iov, int iovcnt, int flags, const char* what) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (iovcnt < 0 || iovcnt > IOV_MAX) return fail(EINVAL, std::string(what) + ": bad iovcnt");
  if (flags & ~(MSG_DONTWAIT | MSG_WAITALL | MSG_NOSIGNAL)) return fail(EOPNOTSUPP, std::string(what) + ": unsupported flags");
  return guarded(what, [&]() -> ssize_t {
    if (s->type == SOCK_DGRAM) {
      if (iovcnt == 1) return dgram_recv(*s, iov[0].iov_base, iov[0].iov_len, flags, nullptr, nullptr);
      return fail(EOPNOTSUPP, std::string(what) + ": one buffer per datagram");
    }
    return stream_recv(*s, iov, iovcnt, flags);
  });
}
ssize_t send_any(int fd, const iovec* iov, int iovcnt, int flags, const char* what) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (iovcnt < 0 || iovcnt > IOV_MAX) return fail(EINVAL, std::string(what) + ": bad iovcnt");
  if (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE)) return fail(EOPNOTSUPP, std::string(what) + ": unsupported flags");
  return guarded(what, [&]() -> ssize_t {
    if (s->type == SOCK_DGRAM) {
      if (iovcnt == 1) return dgram_send(*s, iov[0].iov_base, iov[0].iov_len, nullptr, 0);
      return fail(EOPNOTSUPP, std::string(what) + ": one buffer per datagram");
    }
    return stream_send(*s, iov, iovcnt, flags);
  });
}
}  // namespace

extern "C" ssize_t xk_read(int fd, void* buf, size_t len) {
  iovec v{buf, len};
  return recv_any(fd, &v, 1, 0, "read");
}
extern "C" ssize_t xk_write(int fd, const void* buf, size_t len) {
  iovec v{const_cast<void*>(buf), len};
  return send_any(fd, &v, 1, 0, "write");
}
extern "C" ssize_t xk_readv(int fd, const struct iovec* iov, int iovcnt) { return recv_any(fd, iov, iovcnt, 0, "readv"); }
extern "C" ssize_t xk_writev(int fd, const struct iovec* iov, int iovcnt) { return send_any(fd, iov, iovcnt, 0, "writev"); }
extern "C" ssize_t xk_recv(int fd, void* buf, size_t len, int flags) {
  iovec v{buf, len};
  return recv_any(fd, &v, 1, flags, "recv");
}
extern "C" ssize_t xk_send(int fd, const void* buf, size_t len, int flags) {
  iovec v{const_cast<void*>(buf), len};
  return send_any(fd, &v, 1, flags, "send");
}

extern "C" ssize_t xk_recvfrom(int fd, void* buf, size_t len, int flags, struct sockaddr* from, socklen_t* fromlen) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (s->type == SOCK_STREAM) {
    iovec v{buf, len};
    ssize_t n = recv_any(fd, &v, 1, flags, "recvfrom");
    if (n >= 0 && fromlen != nullptr) *fromlen = 0;  // a stream has no per-read source (as on Linux)
    return n;
  }
  if (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL)) return fail(EOPNOTSUPP, "recvfrom: unsupported flags");
  return guarded("recvfrom", [&] { return dgram_recv(*s, buf, len, flags, from, fromlen); });
}

extern "C" ssize_t xk_sendto(int fd, const void* buf, size_t len, int flags, const struct sockaddr* to, socklen_t tolen) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (s->type == SOCK_STREAM) {
    if (to != nullptr) return fail(EISCONN, "sendto: a stream socket takes no address");
    iovec v{const_cast<void*>(buf), len};
    return send_any(fd, &v, 1, flags, "sendto");
  }
  if (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL)) return fail(EOPNOTSUPP, "sendto: unsupported flags");
  return guarded("sendto", [&] { return dgram_send(*s, buf, len, to, tolen); });
}

extern "C" int xk_shutdown(int fd, int how) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL, "shutdown: SHUT_RD, SHUT_WR or SHUT_RDWR");
  return guarded("shutdown", [&] {
    Errc e = s->stack->call([&]() -> Errc {
      if (s->closed.load()) return Errc::closed;
      if (s->type == SOCK_DGRAM) return s->udp.session()->connected() ? Errc::ok : Errc::not_connected;
      if (!s->connected || s->listening) return Errc::not_connected;
      if (how != SHUT_WR) s->shut_rd = true;
      if (how != SHUT_RD && !s->shut_wr) {
        s->shut_wr = true;
        Status st = s->conn.shutdown_write();
        if (!st && st.error() != Errc::closed) return st.error();
      }
      refresh(*s, true);
      return Errc::ok;
    });
    if (e != Errc::ok) return fail(e, "shutdown");
    return 0;
  });
}

extern "C" int xk_close(int fd) {
  std::shared_ptr<File> f = table().take(fd);
  if (!f) return fail(EBADF, "close: not an xk descriptor");
  return guarded("close", [&] {
    if (f->kind == File::Kind::epoll) {
      close_epoll(static_cast<Epoll&>(*f));
      return 0;
    }
    return close_sock(std::static_pointer_cast<Sock>(f), false);
  });
}

// ---- options ------------------------------------------------------------------------

namespace {
template <class T>
bool opt_in(const void* value, socklen_t len, T& out) {
  if (value == nullptr || len < static_cast<socklen_t>(sizeof(T))) return false;
  std::memcpy(&out, value, sizeof(T));
  return true;
}
template <class T>
int opt_out(void* value, socklen_t* len, const T& v) {
  if (value == nullptr || len == nullptr) return fail(EFAULT, "getsockopt: no buffer");
  std::memcpy(value, &v, std::min<std::size_t>(*len, sizeof(T)));
  *len = static_cast<socklen_t>(std::min<std::size_t>(*len, sizeof(T)));
  return 0;
}
std::int64_t timeval_ns(const timeval& tv) { return std::int64_t{tv.tv_sec} * 1'000'000'000 + std::int64_t{tv.tv_usec} * 1000; }
timeval ns_timeval(std::int64_t ns) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  tv.tv_usec = static_cast<suseconds_t>((ns % 1'000'000'000) / 1000);
  return tv;
}
}  // namespace

extern "C" int xk_setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  int iv = 0;
  if (level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO)) {
    timeval tv{};
    if (!opt_in(value, len, tv) || tv.tv_sec < 0 || tv.tv_usec < 0 || tv.tv_usec >= 1'000'000) {
      return fail(EINVAL, "setsockopt: a struct timeval");
    }
    (name == SO_RCVTIMEO ? s->rcvtimeo_ns : s->sndtimeo_ns).store(timeval_ns(tv));
    return 0;
  }
  linger lg{};
  if (level == SOL_SOCKET && name == SO_LINGER) {
    if (!opt_in(value, len, lg) || lg.l_linger < 0) return fail(EINVAL, "setsockopt: a struct linger");
  } else if (!opt_in(value, len, iv)) {
    return fail(EINVAL, "setsockopt: an int");
  }
  return guarded("setsockopt", [&] {
    int err = s->stack->call([&]() -> int {
      if (s->closed.load()) return EBADF;
      const bool stream = s->type == SOCK_STREAM;
      tcp::StreamEndpoint* c = stream ? s->conn.endpoint() : nullptr;
      auto buf_size = [&] { return static_cast<std::size_t>(std::clamp(iv, 2048, 64 << 20)); };
      if (level == SOL_SOCKET) {
        switch (name) {
          case SO_REUSEADDR:
            s->reuse_addr = iv != 0;
            if (!stream) {
              udp::SocketOptions o = s->udp.session()->options();
              o.reuse_addr = s->reuse_addr;
              if (!s->udp.set_options(o)) return EINVAL;  // after bind()
            }
            return 0;
          case SO_REUSEPORT:
            // Nodes sharing an address through filterd: listen as one of a
            // group that new connections are spread over.
            if (s->listening) return EINVAL;
            s->reuse_port = iv != 0;
            return 0;
          case SO_KEEPALIVE:
            if (!stream) return ENOPROTOOPT;
            s->keepalive = iv != 0;
            if (c != nullptr) s->conn.set_keepalive(s->keepalive);
            return 0;
          case SO_SNDBUF:
            s->sndbuf = buf_size();
            if (c != nullptr) s->conn.set_sndbuf(s->sndbuf);
            return 0;  // a datagram socket sends without a buffer: recorded only
          case SO_RCVBUF:
            s->rcvbuf = buf_size();
            if (c != nullptr) s->conn.set_rcvbuf(s->rcvbuf);
            if (!stream) {
              udp::SocketOptions o = s->udp.session()->options();
              o.rcvbuf_bytes = s->rcvbuf;
              (void)s->udp.set_options(o);
            }
            return 0;
          case SO_LINGER:
            s->linger = Linger{lg.l_onoff != 0, lg.l_linger};
            return 0;
          default:
            return ENOPROTOOPT;
        }
      }
      if (level == IPPROTO_TCP && stream) {
        switch (name) {
          case TCP_NODELAY:
            s->nodelay = iv != 0;
            if (c != nullptr) s->conn.set_nodelay(s->nodelay);
            return 0;
          case TCP_CORK:
            s->cork = iv != 0;
            if (c != nullptr) s->conn.set_cork(s->cork);
            return 0;
          case XK_TCP_CHECKSUM:
            if (iv < 0 || iv > 3) return EINVAL;
            s->csum = static_cast<ChecksumMode>(iv);
            if (c != nullptr) s->conn.set_checksum(*s->csum);
            if (s->listening) s->listener.set_checksum(*s->csum);
            return 0;
          default:
            return ENOPROTOOPT;
        }
      }
      return ENOPROTOOPT;
    });
    if (err != 0) return fail(err, "setsockopt: option " + std::to_string(level) + "/" + std::to_string(name));
    return 0;
  });
}

extern "C" int xk_getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO)) {
    return opt_out(value, len, ns_timeval((name == SO_RCVTIMEO ? s->rcvtimeo_ns : s->sndtimeo_ns).load()));
  }
  return guarded("getsockopt", [&] {
    struct Answer {
      int err = 0;
      int iv = 0;
      linger lg{};
      bool is_linger = false;
    };
    Answer a = s->stack->call([&]() -> Answer {
      Answer r;
      if (s->closed.load()) return Answer{EBADF};
      const bool stream = s->type == SOCK_STREAM;
      tcp::StreamEndpoint* c = stream ? s->conn.endpoint() : nullptr;
      if (level == SOL_SOCKET) {
        switch (name) {
          case SO_TYPE: r.iv = s->type; return r;
          case SO_ACCEPTCONN: r.iv = s->listening ? 1 : 0; return r;
          case SO_REUSEADDR: r.iv = s->reuse_addr ? 1 : 0; return r;
          case SO_REUSEPORT: r.iv = s->reuse_port ? 1 : 0; return r;
          case SO_KEEPALIVE: r.iv = s->keepalive ? 1 : 0; return r;
          case SO_SNDBUF:
            r.iv = static_cast<int>(s->sndbuf != 0 ? s->sndbuf : s->stack->tcp() ? s->stack->tcp()->config().sndbuf : 0);
            return r;
          case SO_RCVBUF:
            if (!stream) {
              r.iv = static_cast<int>(s->udp.session()->options().rcvbuf_bytes);
            } else {
              r.iv = static_cast<int>(s->rcvbuf != 0 ? s->rcvbuf : s->stack->tcp()->config().rcvbuf);
            }
            return r;
          case SO_LINGER:
            r.is_linger = true;
            r.lg.l_onoff = s->linger.on ? 1 : 0;
            r.lg.l_linger = s->linger.seconds;
            return r;
          case SO_ERROR: {
            Errc e = stream ? (c != nullptr ? c->take_error() : Errc::ok) : s->udp.take_error();
            r.iv = errno_of(e);
            refresh(*s, false);
            return r;
          }
          default: return Answer{ENOPROTOOPT};
        }
      }
      if (level == IPPROTO_TCP && stream) {
        switch (name) {
          case TCP_NODELAY: r.iv = s->nodelay ? 1 : 0; return r;
          case TCP_CORK: r.iv = s->cork ? 1 : 0; return r;
          case TCP_MAXSEG: r.iv = c != nullptr ? c->stats().mss : 536; return r;
          case XK_TCP_CHECKSUM:
            r.iv = static_cast<int>(s->csum.value_or(s->stack->tcp()->checksum_mode()));
            return r;
          default: return Answer{ENOPROTOOPT};
        }
      }
      return Answer{ENOPROTOOPT};
    });
    if (a.err != 0) return fail(a.err, "getsockopt: option " + std::to_string(level) + "/" + std::to_string(name));
    if (a.is_linger) return opt_out(value, len, a.lg);
    return opt_out(value, len, a.iv);
  });
}

extern "C" int xk_getsockname(int fd, struct sockaddr* addr, socklen_t* len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (addr == nullptr || len == nullptr) return fail(EFAULT, "getsockname: no buffer");
  return guarded("getsockname", [&] {
    std::pair<Ipv4Addr, Port> ep = s->stack->call([&]() -> std::pair<Ipv4Addr, Port> {
      if (s->type == SOCK_DGRAM) {
        Result<udp::Endpoint> e = s->udp.local_endpoint();
        if (!e) return {};
        return {e->addr, e->port};
      }
      if (s->listening) return {s->bind_addr, s->listener.port()};
      if (s->connected) {
        tcp::FourTuple t = s->conn.tuple();
        return {t.local_addr, Port{t.local_port}};
      }
      return {s->bind_addr, s->bind_port};
    });
    write_sockaddr(ep.first, ep.second, addr, len);
    return 0;
  });
}

extern "C" int xk_getpeername(int fd, struct sockaddr* addr, socklen_t* len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (addr == nullptr || len == nullptr) return fail(EFAULT, "getpeername: no buffer");
  return guarded("getpeername", [&] {
    std::optional<std::pair<Ipv4Addr, Port>> ep = s->stack->call([&]() -> std::optional<std::pair<Ipv4Addr, Port>> {
      if (s->type == SOCK_DGRAM) {
        Result<udp::Endpoint> e = s->udp.remote_endpoint();
        if (!e) return std::nullopt;
        return std::pair{e->addr, e->port};
      }
      if (!s->connected || s->listening) return std::nullopt;
      tcp::State st = s->conn.state();
      if (st == tcp::State::syn_sent || st == tcp::State::closed) return std::nullopt;
      tcp::FourTuple t = s->conn.tuple();
      return std::pair{t.remote_addr, Port{t.remote_port}};
    });
    if (!ep) return fail(ENOTCONN, "getpeername: not connected");
    write_sockaddr(ep->first, ep->second, addr, len);
    return 0;
  });
}

extern "C" int xk_fcntl(int fd, int cmd, ...) {
  std::shared_ptr<File> f = table().get(fd);
  if (!f) return fail(EBADF, "fcntl: not an xk descriptor");
  switch (cmd) {
    case F_GETFD:
      return 0;
    case F_SETFD:
      return 0;  // xk descriptors do not cross exec()
    case F_GETFL:
      if (f->kind != File::Kind::socket) return O_RDWR;
      return O_RDWR | (static_cast<Sock&>(*f).nonblock.load() ? O_NONBLOCK : 0);
    case F_SETFL: {
      va_list ap;
      va_start(ap, cmd);
      int flags = va_arg(ap, int);
      va_end(ap);
      if (f->kind == File::Kind::socket) static_cast<Sock&>(*f).nonblock.store((flags & O_NONBLOCK) != 0);
      return 0;
    }
    default:
      return fail(EINVAL, "fcntl: F_GETFL, F_SETFL, F_GETFD, F_SETFD");
  }
}

extern "C" int xk_get_tcp_info(int fd, struct xk_tcp_info* info) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (info == nullptr) return fail(EFAULT, "xk_get_tcp_info: no buffer");
  if (s->type != SOCK_STREAM) return fail(EOPNOTSUPP, "xk_get_tcp_info: not a TCP socket");
  return guarded("xk_get_tcp_info", [&] {
    tcp::ConnStats st = s->stack->call([&] {
      if (s->listening) {
        tcp::ConnStats l;
        l.state = tcp::State::listen;
        return l;
      }
      return s->conn.stats();
    });
    auto us = [](Duration d) {
      return static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
    };
    *info = xk_tcp_info{};
    info->state = static_cast<std::uint8_t>(st.state);
    info->snd_wscale = st.snd_wscale;
    info->rcv_wscale = st.rcv_wscale;
    info->sack = st.sack ? 1 : 0;
    info->timestamps = st.timestamps ? 1 : 0;
    info->mss = st.mss;
    info->srtt_us = us(st.srtt);
    info->rttvar_us = us(st.rttvar);
    info->rto_us = us(st.rto);
    info->cwnd = st.cwnd;
    info->ssthresh = st.ssthresh;
    info->snd_wnd = st.snd_wnd;
    info->rcv_wnd = st.rcv_wnd;
    info->bytes_sent = st.bytes_sent;
    info->bytes_acked = st.bytes_acked;
    info->bytes_received = st.bytes_received;
    info->segs_out = st.segs_out;
    info->segs_in = st.segs_in;
    info->retransmits = st.retransmits;
    info->rto_expiries = st.rto_expiries;
    info->fast_retransmits = st.fast_retransmits;
    info->sack_blocks_in = st.sack_blocks_in;
    info->sack_blocks_out = st.sack_blocks_out;
    info->dup_acks_in = st.dup_acks_in;
    info->ooo_segments = st.ooo_segments;
    return 0;
  });
}

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
    auto scan = [&] {
      int ready = 0;
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
      }
      return ready;
    };
    if (stack != nullptr) (void)stack->poll();
    if (int n = scan(); n > 0 || timeout_ms == 0) return n;
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
    (void)epoll_wait_on(ep, dummy, 1, timeout_ms);
    close_epoll(ep);
    return scan();
  });
}

// The C API's descriptors: errors and errno, the process-wide descriptor
// table, socket addresses, and the calls that make and end a descriptor
// (xk_socket, xk_bind, xk_close, xk_fcntl).

#include <fcntl.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>

#include "socket_api_internal.hpp"

namespace xk::capi {

thread_local LastError t_last_error;

const char* LastError::text() {
  if (what_ != nullptr) {
    text_ = std::string(what_) + ": " + to_string(code_);
    what_ = nullptr;
  }
  return text_.c_str();
}

// Fails the call: errno and the message of xk_last_error().
int fail(int err, std::string message) {
  t_last_error.set(std::move(message));
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
    case Errc::interrupted: return EINTR;
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

int fail(Errc e, const char* what) {
  t_last_error.set(what, e);
  errno = errno_of(e);
  return -1;
}

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

namespace {
template <class S>
void copy_out(const S& sa, sockaddr* addr, socklen_t* len) {
  std::memcpy(addr, &sa, std::min<std::size_t>(*len, sizeof sa));
  *len = sizeof sa;
}
}  // namespace

void write_sockaddr(const Sock& s, const Endpoint& e, sockaddr* addr, socklen_t* len) {
  if (addr == nullptr || len == nullptr) return;
  if (s.family == AF_INET) {
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(e.port);
    sin.sin_addr.s_addr = htonl(e.addr.v4().value);
    copy_out(sin, addr, len);
    return;
  }
  // IpAddr keeps an IPv4 address in its mapped form: the bytes are the
  // sockaddr_in6's either way (0.0.0.0, the IPv4 wildcard, shows as ::).
  sockaddr_in6 sin6{};
  sin6.sin6_family = AF_INET6;
  sin6.sin6_port = htons(e.port);
  if (e.addr != kAnyIpv4) std::memcpy(sin6.sin6_addr.s6_addr, e.addr.bytes().data(), 16);
  copy_out(sin6, addr, len);
}

bool read_sockaddr(const Sock& s, const sockaddr* addr, socklen_t len, Endpoint& e, int& err) {
  if (addr == nullptr || len < static_cast<socklen_t>(sizeof(sa_family_t))) {
    err = EINVAL;
    return false;
  }
  sa_family_t family;
  std::memcpy(&family, addr, sizeof family);
  if (family != s.family) {
    err = EAFNOSUPPORT;
    return false;
  }
  if (family == AF_INET) {
    sockaddr_in sin;
    if (len < static_cast<socklen_t>(sizeof sin)) {
      err = EINVAL;
      return false;
    }
    std::memcpy(&sin, addr, sizeof sin);
    e = Endpoint{Ipv4Addr{ntohl(sin.sin_addr.s_addr)}, ntohs(sin.sin_port)};
    return true;
  }
  // RFC 2133's sockaddr_in6 had no scope id: 24 bytes are enough, as on Linux.
  constexpr socklen_t kRfc2133Size = 24;
  sockaddr_in6 sin6{};
  if (len < kRfc2133Size) {
    err = EINVAL;
    return false;
  }
  std::memcpy(&sin6, addr, std::min<std::size_t>(static_cast<std::size_t>(len), sizeof sin6));
  IpAddr::Bytes b;
  std::memcpy(b.data(), sin6.sin6_addr.s6_addr, 16);
  e = Endpoint{IpAddr::from_bytes(b), ntohs(sin6.sin6_port)};
  return true;
}

// ---- close ------------------------------------------------------------------------

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
    // (A signal does not cut the lingering short: close has no EINTR to give.)
    if (done || s.stack->wait(s.wp, seen, deadline) == WaitEnd::deadline) break;
  }
  s.stack->call([&] {
    lingering->set_on_event({});
    lingering = nullptr;
  });
  return 0;
}

}  // namespace xk::capi

using namespace xk;
using namespace xk::capi;

extern "C" const char* xk_last_error(void) { return t_last_error.text(); }

// ---- sockets ---------------------------------------------------------------------------

extern "C" int xk_set_fd_limit(int limit) {
  if (limit < 1 || limit > FdTable::kMaxLimit) {
    return fail(EINVAL, "xk_set_fd_limit: " + std::to_string(limit) + " is not in 1.." + std::to_string(FdTable::kMaxLimit));
  }
  if (!table().set_limit(limit)) return fail(EBUSY, "xk_set_fd_limit: a descriptor at or above " + std::to_string(limit) + " is open");
  return 0;
}

extern "C" int xk_get_fd_limit(void) { return table().limit(); }

extern "C" int xk_socket(xk_stack* h, int domain, int type, int protocol) {
  if (h == nullptr) return fail(EINVAL, "socket: no stack");
  if (domain != AF_INET && domain != AF_INET6) return fail(EAFNOSUPPORT, "socket: AF_INET or AF_INET6");
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
    auto s = std::make_shared<Sock>(stack, base, domain);
    s->nonblock.store((type & SOCK_NONBLOCK) != 0);
    stack.call([&] {
      if (base == SOCK_STREAM) {
        s->conn = stack.tcp()->socket();
      } else {
        s->udp = stack.udp()->socket();
        // An AF_INET socket's implicit bind is IPv4's wildcard: no IPv6
        // datagram reaches it.
        if (domain == AF_INET) {
          udp::SocketOptions o = s->udp.session()->options();
          o.implicit_bind = kAnyIpv4;
          (void)s->udp.set_options(o);
        }
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
  Endpoint at;
  int err = 0;
  if (!read_sockaddr(*s, addr, len, at, err)) return fail(err, "bind: bad address");
  // IPV6_V6ONLY refuses IPv4 (mapped) addresses (Linux: EINVAL).
  if (s->v6only && at.addr.is_v4()) return fail(EINVAL, "bind: an IPv4 address on an IPV6_V6ONLY socket");
  const Port p{at.port};
  return guarded("bind", [&] {
    Errc e = s->stack->call([&]() -> Errc {
      if (s->closed.load()) return Errc::closed;
      if (s->type == SOCK_DGRAM) return s->udp.bind(at.addr, p).error();
      if (s->reserved || s->listening || s->connected) return Errc::bad_state;
      Result<Port> r = s->stack->tcp()->reserve_port(at.addr, p, s->reuse_addr, s->reuse_port, s->v6only);
      if (!r) return r.error();
      s->reserved = true;
      s->bind_addr = at.addr;
      s->bind_port = *r;
      return Errc::ok;
    });
    if (e == Errc::bad_state) return fail(EINVAL, "bind: the socket is already bound");
    if (e != Errc::ok) return fail(e, "bind");
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

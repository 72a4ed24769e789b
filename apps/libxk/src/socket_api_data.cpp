// The C API's data calls: the read/write family, recvfrom and sendto, and
// the code under them for each kind of socket -- a byte stream (TCP) moved
// through an iovec, or one datagram (UDP) per call.

#include <climits>
#include <cstring>
#include <span>

#include "socket_api_internal.hpp"

namespace xk::capi {
namespace {

// ---- stream data ------------------------------------------------------------------

ssize_t stream_recv(Sock& s, const iovec* iov, int iovcnt, int flags) {
  std::size_t want = 0;
  for (int i = 0; i < iovcnt; ++i) want += iov[i].iov_len;
  const bool may_block = !(flags & MSG_DONTWAIT) && !s.nonblock.load(std::memory_order_relaxed);
  // MSG_PEEK: what a read would return, left in place (once: no WAITALL).
  const bool peek = (flags & MSG_PEEK) != 0;
  const bool waitall = (flags & MSG_WAITALL) != 0 && !peek;
  const Deadline deadline = deadline_after_ns(s.rcvtimeo_ns.load(std::memory_order_relaxed));
  std::size_t done = 0;
  for (;;) {
    Outcome o = blocking(s, may_block, deadline, [&]() -> Outcome {
      if (s.listening || !s.connected) return Outcome::error(Errc::not_connected);
      if (s.shut_rd) return Outcome::ok(0);
      // SO_RCVLOWAT: a blocking read waits for that many bytes (or what the
      // buffer asks for, if less), unless the stream ends or fails first.
      if (may_block && s.rcvlowat > 1 && done == 0) {
        const tcp::StreamEndpoint* c = s.conn.endpoint();
        const std::size_t queued = c != nullptr ? c->rcv_queued() : 0;
        if (queued != 0 && queued < std::min(s.rcvlowat, want) && (c->events() & tcp::ev_hangup) == 0 &&
            c->pending_error() == Errc::ok) {
          return Outcome::error(Errc::would_block);
        }
      }
      std::size_t got = 0, skip = done;
      for (int i = 0; i < iovcnt; ++i) {
        std::size_t len = iov[i].iov_len;
        if (skip >= len) {
          skip -= len;
          continue;
        }
        auto* base = static_cast<std::byte*>(iov[i].iov_base) + skip;
        const std::span<std::byte> dst(base, len - skip);
        Result<std::size_t> r = peek ? s.conn.peek(dst, got) : s.conn.read(dst);
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
      if (o.err == Errc::unsupported) return fail(EOPNOTSUPP, "recv: MSG_PEEK on a relayed stream");
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
      // MSG_MORE: more follows, so the short tail waits (as corked) until a
      // send without it, or the FIN.
      if ((flags & MSG_MORE) != 0 && !s.more) {
        s.more = true;
        if (!s.cork) s.conn.set_cork(true);
      }
      const bool uncork = (flags & MSG_MORE) == 0 && s.more;
      // MSG_OOB: the send's last byte is urgent (in line, RFC 6093); the
      // mark is made before the bytes are queued so their segments carry it.
      const bool oob = (flags & MSG_OOB) != 0;
      if (oob && want != done) {
        // (Other refusals are the write's to report.)
        if (Status st = s.conn.mark_urgent(want - done); !st && st.error() == Errc::unsupported) {
          return Outcome::error(Errc::unsupported);
        }
      }
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
      if (uncork && (put != 0 || want == done)) {
        s.more = false;
        if (!s.cork) s.conn.set_cork(false);  // what was held goes now
      }
      // A short send: its last byte queued is the urgent one.
      if (oob && put != 0 && done + put < want && !may_block) (void)s.conn.mark_urgent(0);
      if (put == 0 && want != done) return Outcome::error(Errc::would_block);
      return Outcome::ok(put);
    });
    if (o.err != Errc::ok) {
      if (done != 0) return static_cast<ssize_t>(done);
      // No SIGPIPE, ever: EPIPE for a connection that can take no more data.
      if (o.err == Errc::closed && !s.closed.load()) return fail(EPIPE, "send: the connection is shut down for writing");
      if (o.err == Errc::closed) return fail(EBADF, "send: the socket was closed");
      if (o.err == Errc::unsupported) return fail(EOPNOTSUPP, "send: MSG_OOB on a relayed stream");
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
    if (flags & MSG_PEEK) {
      const udp::Datagram* f = s.udp.front();
      if (f == nullptr) {
        if (Errc e = s.udp.session()->pending_error(); e != Errc::ok) return Outcome::error(e);
        return Outcome::error(s.udp.is_open() ? Errc::would_block : Errc::closed);
      }
      const std::size_t n = std::min(len, f->payload.size());
      if (Status st = f->payload.copy_out(0, std::span<std::byte>(static_cast<std::byte*>(buf), n)); !st) {
        return Outcome::error(st.error());
      }
      src = f->from;
      sport = f->from_port;
      return Outcome::ok(n);
    }
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

}  // namespace
}  // namespace xk::capi

using namespace xk;
using namespace xk::capi;

namespace {
ssize_t recv_any(int fd, const iovec* iov, int iovcnt, int flags, const char* what) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (iovcnt < 0 || iovcnt > IOV_MAX) return fail(EINVAL, std::string(what) + ": bad iovcnt");
  // MSG_OOB: urgent data is always in line (SO_OOBINLINE, RFC 6093), where
  // Linux refuses MSG_OOB too.
  if (flags & MSG_OOB) return fail(EINVAL, std::string(what) + ": urgent data is delivered in line (SO_OOBINLINE)");
  if (flags & ~(MSG_DONTWAIT | MSG_WAITALL | MSG_NOSIGNAL | MSG_PEEK)) {
    return fail(EOPNOTSUPP, std::string(what) + ": unsupported flags");
  }
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
  // MSG_EOR: a stream has no records; taken as a plain send (as Linux's TCP
  // takes it: the data is not merged with what a later send adds).
  if (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_EOR | MSG_OOB)) {
    return fail(EOPNOTSUPP, std::string(what) + ": unsupported flags");
  }
  return guarded(what, [&]() -> ssize_t {
    if (s->type == SOCK_DGRAM) {
      if (flags & MSG_OOB) return fail(EOPNOTSUPP, std::string(what) + ": MSG_OOB on a datagram socket");
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
  if (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_PEEK)) return fail(EOPNOTSUPP, "recvfrom: unsupported flags");
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

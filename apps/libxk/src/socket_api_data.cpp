// The C API's data calls: the read/write family, recvfrom and sendto,
// recvmsg and sendmsg, and the code under them for each kind of socket -- a
// byte stream (TCP) moved through an iovec, or one datagram (UDP) per call.

#include <netinet/tcp.h>

#include <climits>
#include <cstring>
#include <span>

#include "socket_api_internal.hpp"

namespace xk::capi {
namespace {

// ---- stream data ------------------------------------------------------------------

// Bytes into the buffers; `inq` (if not null) gets what is left to read
// afterwards, as TCP_INQ reports it: 1 when nothing is but the stream has
// ended, so a reader knows one more read will tell it.
ssize_t stream_recv(Sock& s, const iovec* iov, int iovcnt, int flags, std::size_t* inq) {
  std::size_t want = 0;
  for (int i = 0; i < iovcnt; ++i) want += iov[i].iov_len;
  const bool may_block = !(flags & MSG_DONTWAIT) && !s.nonblock.load(std::memory_order_relaxed);
  // MSG_PEEK: what a read would return, left in place (once: no WAITALL).
  const bool peek = (flags & MSG_PEEK) != 0;
  const bool waitall = (flags & MSG_WAITALL) != 0 && !peek;
  const Deadline deadline = deadline_after_ns(s.rcvtimeo_ns.load(std::memory_order_relaxed));
  std::size_t done = 0;
  for (;;) {
    // Bytes waiting already (a program that polls before it reads, as
    // iperf3 does, or one woken by them): no pass before the read.
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
      if (inq != nullptr) {
        const tcp::StreamEndpoint* c = s.conn.endpoint();
        *inq = c != nullptr ? c->rcv_queued() : 0;
        if (*inq == 0 && (c == nullptr || (c->events() & tcp::ev_hangup) != 0)) *inq = 1;
      }
      return Outcome::ok(got);
    }, EPOLLIN);
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
      // The buffers are one write: segments span them, and only the last
      // byte of the last one has the PSH.
      int last = iovcnt - 1;
      while (last > 0 && iov[last].iov_len == 0) --last;
      std::size_t put = 0, skip = done;
      for (int i = 0; i < iovcnt; ++i) {
        const std::size_t len = iov[i].iov_len;
        if (skip >= len) {
          skip -= len;
          continue;
        }
        const auto* base = static_cast<const std::byte*>(iov[i].iov_base) + skip;
        const std::size_t part = len - skip;
        Result<std::size_t> r = s.conn.write(std::span<const std::byte>(base, part), i < last);
        skip = 0;
        if (!r) {
          if (put != 0) break;
          return Outcome::error(r.error());
        }
        put += *r;
        if (*r < part) break;  // the send buffer is full
      }
      if (uncork && (put != 0 || want == done)) {
        s.more = false;
        if (!s.cork) s.conn.set_cork(false);  // what was held goes now
      }
      // A short send: its last byte queued is the urgent one.
      if (oob && put != 0 && done + put < want && !may_block) (void)s.conn.mark_urgent(0);
      if (put == 0 && want != done) return Outcome::error(Errc::would_block);
      return Outcome::ok(put);
    }, EPOLLOUT);
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

// Who sent a datagram and how long it was (recvfrom, recvmsg).
struct DgramInfo {
  Endpoint from;
  std::size_t length = 0;  // the whole datagram
  std::size_t copied = 0;  // what of it fit in the buffers
};

// Copies the front of `payload` into the buffers, as much as fits.
Result<std::size_t> scatter(const Msg& payload, const iovec* iov, int iovcnt) {
  std::size_t done = 0;
  for (int i = 0; i < iovcnt && done < payload.size(); ++i) {
    const std::size_t n = std::min(iov[i].iov_len, payload.size() - done);
    if (Status st = payload.copy_out(done, std::span<std::byte>(static_cast<std::byte*>(iov[i].iov_base), n)); !st) {
      return st.error();
    }
    done += n;
  }
  return done;
}

// One datagram into the buffers; the rest of a longer one is discarded, as
// recv(2) does (MSG_TRUNC in `flags`: the call returns its whole length).
ssize_t dgram_recv(Sock& s, const iovec* iov, int iovcnt, int flags, DgramInfo& info) {
  const bool may_block = !(flags & MSG_DONTWAIT) && !s.nonblock.load(std::memory_order_relaxed);
  const Deadline deadline = deadline_after_ns(s.rcvtimeo_ns.load(std::memory_order_relaxed));
  Outcome o = blocking(s, may_block, deadline, [&]() -> Outcome {
    udp::Datagram taken;
    const udp::Datagram* d = nullptr;
    if (flags & MSG_PEEK) {
      d = s.udp.front();  // stays first in line
      if (d == nullptr) {
        if (Errc e = s.udp.session()->pending_error(); e != Errc::ok) return Outcome::error(e);
        return Outcome::error(s.udp.is_open() ? Errc::would_block : Errc::closed);
      }
    } else {
      Result<udp::Datagram> r = s.udp.recvfrom();
      if (!r) return Outcome::error(r.error());
      taken = std::move(*r);
      d = &taken;
    }
    Result<std::size_t> n = scatter(d->payload, iov, iovcnt);
    if (!n) return Outcome::error(n.error());
    info = DgramInfo{Endpoint{d->from, d->from_port.value}, d->payload.size(), *n};
    return Outcome::ok(*n);
  });
  if (o.err == Errc::closed) return fail(EBADF, "recvfrom: the socket was closed");
  if (o.err != Errc::ok) return fail(o.err, "recvfrom");
  return static_cast<ssize_t>((flags & MSG_TRUNC) ? info.length : o.n);
}

// One datagram of the buffers' bytes, to `to` (null: the connected peer).
ssize_t dgram_send(Sock& s, const iovec* iov, int iovcnt, const sockaddr* to, socklen_t tolen) {
  Endpoint dest;
  if (to != nullptr) {
    int err = 0;
    if (!read_sockaddr(s, to, tolen, dest, err)) return fail(err, "sendto: bad address");
    if (s.v6only && dest.addr.is_v4()) return fail(ENETUNREACH, "sendto: an IPv4 peer on an IPV6_V6ONLY socket");
  }
  const IpAddr a = dest.addr;
  const Port p{dest.port};
  std::size_t len = 0;
  for (int i = 0; i < iovcnt; ++i) {
    len += iov[i].iov_len;
    if (len > udp::UdpProtocol::kMaxPayload) return fail(EMSGSIZE, "sendto: over 65507 bytes");
  }
  // One buffer goes as it is; several are joined first (a datagram leaves whole).
  std::vector<std::byte> joined;
  std::span<const std::byte> bytes;
  if (iovcnt == 1) {
    bytes = std::span<const std::byte>(static_cast<const std::byte*>(iov[0].iov_base), len);
  } else if (iovcnt > 1) {
    joined.reserve(len);
    for (int i = 0; i < iovcnt; ++i) {
      const auto* b = static_cast<const std::byte*>(iov[i].iov_base);
      joined.insert(joined.end(), b, b + iov[i].iov_len);
    }
    bytes = joined;
  }
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

// ---- control messages (recvmsg, sendmsg) -------------------------------------------

// Appends one control message after the `used` bytes of m's control buffer;
// one that does not fit is left out and MSG_CTRUNC says so (as Linux does).
void put_cmsg(msghdr& m, std::size_t& used, int level, int type, const void* data, std::size_t len) {
  if (m.msg_control == nullptr || m.msg_controllen < used + CMSG_LEN(len)) {
    m.msg_flags |= MSG_CTRUNC;
    return;
  }
  auto* c = reinterpret_cast<cmsghdr*>(static_cast<char*>(m.msg_control) + used);
  c->cmsg_level = level;
  c->cmsg_type = type;
  c->cmsg_len = CMSG_LEN(len);
  std::memcpy(CMSG_DATA(c), data, len);
  used += std::min<std::size_t>(CMSG_SPACE(len), m.msg_controllen - used);
}

// sendmsg's control messages, checked as Linux checks them: malformed ones
// are EINVAL; SCM_RIGHTS and SCM_CREDENTIALS mean nothing to an AF_INET
// socket and are ignored, as are other levels on a stream; the rest (e.g.
// SO_TIMESTAMPING, IP_PKTINFO, IP_TOS per datagram) asks for something xk
// does not do and is refused (EINVAL) rather than silently dropped.
int check_send_control(const msghdr& m, bool stream) {
  if (m.msg_controllen == 0) return 0;
  if (m.msg_control == nullptr) return fail(EFAULT, "sendmsg: msg_control is null");
  // CMSG_NXTHDR wants a mutable header; the walk only reads.
  msghdr walk = m;
  for (cmsghdr* c = CMSG_FIRSTHDR(&walk); c != nullptr; c = CMSG_NXTHDR(&walk, c)) {
    const std::size_t at = static_cast<std::size_t>(reinterpret_cast<char*>(c) - static_cast<char*>(walk.msg_control));
    if (c->cmsg_len < sizeof(cmsghdr) || c->cmsg_len > walk.msg_controllen - at) {
      return fail(EINVAL, "sendmsg: a malformed control message");
    }
    if (c->cmsg_level == SOL_SOCKET && (c->cmsg_type == SCM_RIGHTS || c->cmsg_type == SCM_CREDENTIALS)) continue;
    if (c->cmsg_level != SOL_SOCKET && (stream || c->cmsg_level != IPPROTO_IP)) continue;
    return fail(EINVAL, "sendmsg: control message " + std::to_string(c->cmsg_level) + "/" +
                            std::to_string(c->cmsg_type) + " is not supported");
  }
  return 0;
}

}  // namespace
}  // namespace xk::capi

using namespace xk;
using namespace xk::capi;

namespace {
// The buffers of a call: iovcnt within bounds, no null buffer with a length,
// a total a return value can hold. Returns 0, or -1 with errno set.
int check_iov(const iovec* iov, long iovcnt, const char* what, int too_many) {
  if (iovcnt < 0 || iovcnt > IOV_MAX) return fail(too_many, std::string(what) + ": bad iovcnt");
  if (iovcnt > 0 && iov == nullptr) return fail(EFAULT, std::string(what) + ": null iovec");
  std::size_t total = 0;
  for (long i = 0; i < iovcnt; ++i) {
    if (iov[i].iov_base == nullptr && iov[i].iov_len != 0) return fail(EFAULT, std::string(what) + ": null buffer");
    if (iov[i].iov_len > static_cast<std::size_t>(SSIZE_MAX) - total) {
      return fail(EINVAL, std::string(what) + ": buffers longer than SSIZE_MAX");
    }
    total += iov[i].iov_len;
  }
  return 0;
}

// What a receive may be asked, and refuses.
int check_recv_flags(const Sock& s, int flags, int extra, const char* what) {
  // MSG_OOB: urgent data is always in line (SO_OOBINLINE, RFC 6093), where
  // Linux refuses MSG_OOB too.
  if (flags & MSG_OOB) return fail(EINVAL, std::string(what) + ": urgent data is delivered in line (SO_OOBINLINE)");
  int allowed = MSG_DONTWAIT | MSG_WAITALL | MSG_NOSIGNAL | MSG_PEEK | extra;
  if (s.type == SOCK_DGRAM) allowed |= MSG_TRUNC;
  if (flags & ~allowed) return fail(EOPNOTSUPP, std::string(what) + ": unsupported flags");
  return 0;
}

ssize_t recv_any(int fd, const iovec* iov, int iovcnt, int flags, const char* what) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (check_iov(iov, iovcnt, what, EINVAL) != 0 || check_recv_flags(*s, flags, 0, what) != 0) return -1;
  return guarded(what, [&]() -> ssize_t {
    if (s->type == SOCK_DGRAM) {
      DgramInfo info;
      return dgram_recv(*s, iov, iovcnt, flags, info);
    }
    return stream_recv(*s, iov, iovcnt, flags, nullptr);
  });
}

int check_send_flags(int flags, const char* what) {
  // MSG_EOR: a stream has no records; taken as a plain send (as Linux's TCP
  // takes it: the data is not merged with what a later send adds).
  if (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_EOR | MSG_OOB)) {
    return fail(EOPNOTSUPP, std::string(what) + ": unsupported flags");
  }
  return 0;
}

// A send to `to` (datagrams; a stream ignores it, as Linux does).
ssize_t send_any(int fd, const iovec* iov, int iovcnt, int flags, const sockaddr* to, socklen_t tolen,
                 const char* what) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (check_iov(iov, iovcnt, what, EINVAL) != 0 || check_send_flags(flags, what) != 0) return -1;
  return guarded(what, [&]() -> ssize_t {
    if (s->type == SOCK_DGRAM) {
      if (flags & MSG_OOB) return fail(EOPNOTSUPP, std::string(what) + ": MSG_OOB on a datagram socket");
      return dgram_send(*s, iov, iovcnt, to, tolen);
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
  return send_any(fd, &v, 1, 0, nullptr, 0, "write");
}
extern "C" ssize_t xk_readv(int fd, const struct iovec* iov, int iovcnt) { return recv_any(fd, iov, iovcnt, 0, "readv"); }
extern "C" ssize_t xk_writev(int fd, const struct iovec* iov, int iovcnt) {
  return send_any(fd, iov, iovcnt, 0, nullptr, 0, "writev");
}
extern "C" ssize_t xk_recv(int fd, void* buf, size_t len, int flags) {
  iovec v{buf, len};
  return recv_any(fd, &v, 1, flags, "recv");
}
extern "C" ssize_t xk_send(int fd, const void* buf, size_t len, int flags) {
  iovec v{const_cast<void*>(buf), len};
  return send_any(fd, &v, 1, flags, nullptr, 0, "send");
}

extern "C" ssize_t xk_recvfrom(int fd, void* buf, size_t len, int flags, struct sockaddr* from, socklen_t* fromlen) {
  auto s = get_sock(fd);
  if (!s) return -1;
  iovec v{buf, len};
  if (s->type == SOCK_STREAM) {
    ssize_t n = recv_any(fd, &v, 1, flags, "recvfrom");
    if (n >= 0 && fromlen != nullptr) *fromlen = 0;  // a stream has no per-read source (as on Linux)
    return n;
  }
  if (check_iov(&v, 1, "recvfrom", EINVAL) != 0 || check_recv_flags(*s, flags, 0, "recvfrom") != 0) return -1;
  return guarded("recvfrom", [&]() -> ssize_t {
    DgramInfo info;
    const ssize_t n = dgram_recv(*s, &v, 1, flags, info);
    if (n >= 0) write_sockaddr(*s, info.from, from, fromlen);
    return n;
  });
}

extern "C" ssize_t xk_sendto(int fd, const void* buf, size_t len, int flags, const struct sockaddr* to, socklen_t tolen) {
  iovec v{const_cast<void*>(buf), len};
  return send_any(fd, &v, 1, flags, to, tolen, "sendto");
}

extern "C" ssize_t xk_recvmsg(int fd, struct msghdr* msg, int flags) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (msg == nullptr) return fail(EFAULT, "recvmsg: null msghdr");
  if (check_iov(msg->msg_iov, static_cast<long>(msg->msg_iovlen), "recvmsg", EMSGSIZE) != 0 ||
      check_recv_flags(*s, flags, MSG_CMSG_CLOEXEC, "recvmsg") != 0) {
    return -1;
  }
  const int iovcnt = static_cast<int>(msg->msg_iovlen);
  flags &= ~MSG_CMSG_CLOEXEC;  // no descriptors ever arrive on an AF_INET socket
  return guarded("recvmsg", [&]() -> ssize_t {
    msg->msg_flags = 0;
    std::size_t used = 0;
    ssize_t n;
    if (s->type == SOCK_DGRAM) {
      DgramInfo info;
      n = dgram_recv(*s, msg->msg_iov, iovcnt, flags, info);
      if (n < 0) return n;
      if (info.length > info.copied) msg->msg_flags |= MSG_TRUNC;
      if (msg->msg_name != nullptr) {
        write_sockaddr(*s, info.from, static_cast<sockaddr*>(msg->msg_name), &msg->msg_namelen);
      } else {
        msg->msg_namelen = 0;
      }
    } else {
      std::size_t inq = 0;
      n = stream_recv(*s, msg->msg_iov, iovcnt, flags, &inq);
      if (n < 0) return n;
      msg->msg_namelen = 0;  // a stream has no per-read source (as on Linux)
      if (s->inq) {
        const int v = static_cast<int>(std::min<std::size_t>(inq, INT_MAX));
        put_cmsg(*msg, used, IPPROTO_TCP, TCP_CM_INQ, &v, sizeof v);
      }
    }
    msg->msg_controllen = used;
    return n;
  });
}

extern "C" ssize_t xk_sendmsg(int fd, const struct msghdr* msg, int flags) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (msg == nullptr) return fail(EFAULT, "sendmsg: null msghdr");
  if (check_iov(msg->msg_iov, static_cast<long>(msg->msg_iovlen), "sendmsg", EMSGSIZE) != 0 ||
      check_send_control(*msg, s->type == SOCK_STREAM) != 0) {
    return -1;
  }
  // No name (or a zero length): the connected peer, as Linux takes it.
  const bool named = msg->msg_name != nullptr && msg->msg_namelen != 0;
  const auto* to = named ? static_cast<const sockaddr*>(msg->msg_name) : nullptr;
  return send_any(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags, to, named ? msg->msg_namelen : 0, "sendmsg");
}

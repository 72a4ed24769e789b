// The C API's connection calls: listen, accept, connect and shutdown (TCP,
// plus what connect and shutdown mean for a UDP socket).

#include <algorithm>

#include "socket_api_internal.hpp"

namespace xk::capi {
namespace {

void apply_conn_options(Sock& s) {
  if (s.nodelay) s.conn.set_nodelay(true);
  if (s.cork) s.conn.set_cork(true);
  if (s.keepalive) s.conn.set_keepalive(true);
  if (s.sndbuf != 0) s.conn.set_sndbuf(s.sndbuf);
  if (s.rcvbuf != 0) s.conn.set_rcvbuf(s.rcvbuf);
  if (s.csum) s.conn.set_checksum(*s.csum);
  (void)s.conn.tune(s.tuning);  // a relay's stream takes none of it
}

}  // namespace
}  // namespace xk::capi

using namespace xk;
using namespace xk::capi;

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
      // The bind's reservation (and behind filterd its claim) becomes the listener.
      tcp::TcpProtocol* tcp = s->stack->tcp();
      Result<tcp::TcpListener> l = s->reserved
                                       ? tcp->listen_reserved(s->bind_addr, s->bind_port, n, s->reuse_port, s->v6only)
                                       : tcp->listen(s->bind_addr, s->bind_port, n, s->reuse_port, s->v6only);
      if (!l) return l.error();
      s->reserved = false;
      s->listener = std::move(*l);
      s->bind_port = s->listener.port();
      if (s->csum) s->listener.set_checksum(*s->csum);
      // TCP_MAXSEG set before listen(): the SYN-ACKs offer it (a relay's
      // listener takes none).
      if (s->tuning.max_segment) (void)s->listener.set_max_segment(s->tuning.max_segment);
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
      child = std::make_shared<Sock>(*s->stack, SOCK_STREAM, s->family);
      child->conn = std::move(*c);
      child->connected = true;
      child->v6only = s->v6only;
      // What the listener was given, its connections inherit (as on Linux).
      child->nodelay = s->nodelay;
      child->cork = s->cork;
      child->keepalive = s->keepalive;
      child->sndbuf = s->sndbuf;
      child->rcvbuf = s->rcvbuf;
      child->csum = s->csum;
      child->linger = s->linger;
      child->tuning = s->tuning;
      child->rcvlowat = s->rcvlowat;
      child->notsent_lowat = s->notsent_lowat;
      child->inq = s->inq;
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
    write_sockaddr(*s, tuple.remote, addr, len);
    return nfd;
  });
}

extern "C" int xk_accept(int fd, struct sockaddr* addr, socklen_t* len) { return xk_accept4(fd, addr, len, 0); }

extern "C" int xk_connect(int fd, const struct sockaddr* addr, socklen_t len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  Endpoint to;
  int err = 0;
  if (!read_sockaddr(*s, addr, len, to, err)) return fail(err, "connect: bad address");
  // IPV6_V6ONLY: no IPv4 peer (Linux: ENETUNREACH).
  if (s->v6only && to.addr.is_v4()) return fail(ENETUNREACH, "connect: an IPv4 peer on an IPV6_V6ONLY socket");
  const Port p{to.port};
  return guarded("connect", [&]() -> int {
    if (s->type == SOCK_DGRAM) {
      Errc e = s->stack->call([&] {
        if (s->closed.load()) return Errc::closed;
        Errc r = s->udp.connect(to.addr, p).error();
        refresh(*s, false);
        return r;
      });
      if (e != Errc::ok) return fail(e, "connect");
      return 0;
    }
    if (p.value == 0 || to.addr.is_unspecified()) return fail(EINVAL, "connect: no address or port");
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
      Status st = s->conn.connect(to.addr, p, s->bind_addr, s->bind_port);
      if (!st) {
        if (s->reserved) (void)s->stack->tcp()->reserve_port(s->bind_addr, s->bind_port, true, s->reuse_port);
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

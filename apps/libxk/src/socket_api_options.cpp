// The C API's socket options and names: setsockopt, getsockopt,
// getsockname, getpeername, ioctl, and xk_get_tcp_info.

#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cstring>

#include "socket_api_internal.hpp"
#include "socket_api_tcp_info.hpp"

using namespace xk;
using namespace xk::capi;

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
// What getsockopt says of a buffer size a program set (see SO_SNDBUF).
int doubled(std::size_t bytes) { return static_cast<int>(std::min<std::size_t>(2 * bytes, INT32_MAX)); }

// ---- setsockopt: one handler per level, on the stack's thread --------------------

// An option's value as the program passed it, read before the stack is
// called: an int for most, a struct linger for SO_LINGER.
struct SetValue {
  int iv = 0;
  linger lg{};
};

// What a handler sees: the socket, its connection (null for a datagram
// socket or one not yet connected), and the value. It returns 0 or an errno.
struct SetCall {
  Sock& s;
  bool stream;
  tcp::StreamEndpoint* c;
  const SetValue& v;
};

// A buffer size a program asks for, within what the stack takes.
std::size_t buffer_size(int bytes) { return static_cast<std::size_t>(std::clamp(bytes, 2048, 64 << 20)); }

// Per-connection settings: applied to the connection, if there is one, and
// remembered for a connect to come and the connections a listener accepts.
// EINVAL if the connection refuses them (a relayed stream takes none:
// remembered only).
int apply_tuning(Sock& s, const tcp::Tuning& t) {
  if (s.conn.endpoint() != nullptr) {
    if (Status st = s.conn.tune(t); !st && st.error() != Errc::unsupported) return EINVAL;
  }
  s.tuning.update(t);
  return 0;
}

int set_sol_socket(SetCall& k, int name) {
  Sock& s = k.s;
  const int iv = k.v.iv;
  switch (name) {
    case SO_REUSEADDR:
      s.reuse_addr = iv != 0;
      if (!k.stream) {
        udp::SocketOptions o = s.udp.session()->options();
        o.reuse_addr = s.reuse_addr;
        if (!s.udp.set_options(o)) return EINVAL;  // after bind()
      }
      return 0;
    case SO_REUSEPORT:
      // Nodes sharing an address through filterd: listen as one of a
      // group that new connections are spread over.
      if (s.listening) return EINVAL;
      s.reuse_port = iv != 0;
      return 0;
    case SO_OOBINLINE:
      // Urgent data is always delivered in line (RFC 6093 asks no less);
      // out-of-line urgent bytes are not offered.
      return iv != 0 ? 0 : EINVAL;
    case SO_KEEPALIVE:
      if (!k.stream) return ENOPROTOOPT;
      s.keepalive = iv != 0;
      if (k.c != nullptr) s.conn.set_keepalive(s.keepalive);
      return 0;
    // Linux doubles the value it is given (for its bookkeeping) and reads
    // back the double; xk keeps the value and reads back twice it, so
    // programs that check what they set see what they expect.
    case SO_SNDBUF:
      s.sndbuf = buffer_size(iv);
      if (k.c != nullptr) s.conn.set_sndbuf(s.sndbuf);
      return 0;  // a datagram socket sends without a buffer: recorded only
    case SO_RCVBUF:
      s.rcvbuf = buffer_size(iv);
      if (k.c != nullptr) s.conn.set_rcvbuf(s.rcvbuf);
      if (!k.stream) {
        udp::SocketOptions o = s.udp.session()->options();
        o.rcvbuf_bytes = s.rcvbuf;
        (void)s.udp.set_options(o);
      }
      return 0;
    case SO_LINGER:
      s.linger = Linger{k.v.lg.l_onoff != 0, k.v.lg.l_linger};
      return 0;
    case SO_RCVLOWAT:
      // Readable (and a blocking read satisfied) from this many bytes.
      if (iv < 0) return EINVAL;
      s.rcvlowat = static_cast<std::size_t>(std::max(iv, 1));
      refresh(s, false);
      return 0;
    default:
      return ENOPROTOOPT;
  }
}

// IP_TTL and IPV6_UNICAST_HOPS: the hop limit of what the socket sends (0:
// the IP layer's default).
int set_hop_limit(SetCall& k, std::uint8_t hops) {
  if (k.stream) {
    tcp::Tuning t;
    t.hop_limit = hops;
    return apply_tuning(k.s, t);
  }
  udp::SocketOptions o = k.s.udp.session()->options();
  o.hop_limit = hops;
  return k.s.udp.set_options(o) ? 0 : EINVAL;
}

int set_ip(SetCall& k, int name) {
  if (k.s.family != AF_INET) return ENOPROTOOPT;
  if (name == IP_TTL) {
    // 1..255; -1 goes back to the default (as Linux).
    if (k.v.iv < -1 || k.v.iv == 0 || k.v.iv > 255) return EINVAL;
    return set_hop_limit(k, static_cast<std::uint8_t>(k.v.iv < 0 ? 0 : k.v.iv));
  }
  if (name != IP_TOS) return ENOPROTOOPT;
  if (k.stream) {
    // The DSCP bits of every packet the connection sends (the ECN bits are
    // the stack's, as on Linux); remembered for what a listener accepts and
    // for a connect to come.
    tcp::Tuning t;
    t.tos = static_cast<std::uint8_t>(k.v.iv & 0xfc);
    (void)apply_tuning(k.s, t);
    return 0;
  }
  // A datagram socket: the whole byte, ECN bits too (as Linux).
  udp::SocketOptions o = k.s.udp.session()->options();
  o.tos = static_cast<std::uint8_t>(k.v.iv);
  return k.s.udp.set_options(o) ? 0 : EINVAL;
}

// IPPROTO_IPV6 on an AF_INET6 socket (RFC 3493 5.3, RFC 3542 6.5).
int set_ipv6(SetCall& k, int name) {
  if (k.s.family != AF_INET6) return ENOPROTOOPT;
  const int iv = k.v.iv;
  switch (name) {
    case IPV6_V6ONLY: {
      // Before bind(): it decides which wildcard the socket takes.
      if (k.s.reserved || k.s.listening || k.s.connected) return EINVAL;
      if (!k.stream) {
        if (k.s.udp.session()->bound()) return EINVAL;
        udp::SocketOptions o = k.s.udp.session()->options();
        o.v6only = iv != 0;
        if (!k.s.udp.set_options(o)) return EINVAL;
      }
      k.s.v6only = iv != 0;
      return 0;
    }
    case IPV6_UNICAST_HOPS:
      if (iv < -1 || iv > 255) return EINVAL;
      // -1: the default; 0 is a hop limit of its own on Linux, which xk
      // does not send (a packet that cannot leave the host).
      if (iv == 0) return EINVAL;
      return set_hop_limit(k, static_cast<std::uint8_t>(iv < 0 ? 0 : iv));
    case IPV6_TCLASS: {
      if (iv < -1 || iv > 255) return EINVAL;
      const auto tclass = static_cast<std::uint8_t>(iv < 0 ? 0 : iv);
      if (k.stream) {
        tcp::Tuning t;
        t.tos = static_cast<std::uint8_t>(tclass & 0xfc);  // the ECN bits are the stack's
        return apply_tuning(k.s, t);
      }
      udp::SocketOptions o = k.s.udp.session()->options();
      o.tos = tclass;
      return k.s.udp.set_options(o) ? 0 : EINVAL;
    }
    default: return ENOPROTOOPT;
  }
}

// The TCP options that become a per-connection Tuning (apply_tuning;
// quick-ACK mode is a moment's state, not inherited).
int set_tcp_tuning(SetCall& k, int name) {
  Sock& s = k.s;
  const int iv = k.v.iv;
  tcp::Tuning t;
  using std::chrono::seconds, std::chrono::milliseconds;
  switch (name) {
    case TCP_KEEPIDLE:
    case TCP_KEEPINTVL:
      if (iv < 1 || iv > 32767) return EINVAL;  // Linux's bounds, in seconds
      (name == TCP_KEEPIDLE ? t.keepalive_idle : t.keepalive_interval) = seconds(iv);
      break;
    case TCP_KEEPCNT:
      if (iv < 1 || iv > 127) return EINVAL;
      t.keepalive_probes = static_cast<unsigned>(iv);
      break;
    case TCP_USER_TIMEOUT:
      if (iv < 0) return EINVAL;
      t.user_timeout = milliseconds(iv);
      break;
    case TCP_MAXSEG:
      // 0 takes the option back; else 88..32767 (Linux's bounds).
      if (iv != 0 && (iv < 88 || iv > 32767)) return EINVAL;
      if (iv == 0) {
        s.tuning.max_segment.reset();
        if (s.listening) (void)s.listener.set_max_segment(std::nullopt);
        return 0;
      }
      t.max_segment = static_cast<std::uint16_t>(iv);
      // A listener: what its SYN-ACKs offer from now on.
      if (s.listening) (void)s.listener.set_max_segment(t.max_segment);
      break;
    default:  // TCP_QUICKACK
      t.quickack = iv != 0;
      s.quickack = iv != 0;
      break;
  }
  return apply_tuning(s, t);
}

int set_tcp(SetCall& k, int name) {
  if (!k.stream) return ENOPROTOOPT;
  Sock& s = k.s;
  const int iv = k.v.iv;
  switch (name) {
    case TCP_NODELAY:
      s.nodelay = iv != 0;
      if (k.c != nullptr) s.conn.set_nodelay(s.nodelay);
      return 0;
    case TCP_CORK:
      s.cork = iv != 0;
      if (k.c != nullptr) s.conn.set_cork(s.cork);
      return 0;
    case TCP_KEEPIDLE:
    case TCP_KEEPINTVL:
    case TCP_KEEPCNT:
    case TCP_USER_TIMEOUT:
    case TCP_MAXSEG:
    case TCP_QUICKACK:
      return set_tcp_tuning(k, name);
    case TCP_NOTSENT_LOWAT:
      // Writable only while fewer bytes than this wait unsent (0: none may).
      if (iv < 0) return EINVAL;
      s.notsent_lowat = static_cast<std::size_t>(iv);
      refresh(s, false);
      return 0;
    case TCP_INQ:
      // recvmsg adds a TCP_CM_INQ message: the bytes left to read.
      if (iv < 0 || iv > 1) return EINVAL;
      s.inq = iv != 0;
      return 0;
    case TCP_DEFER_ACCEPT:
      // Accepted for programs that set it (nginx); connections are handed
      // to accept() once established, data or not.
      if (iv < 0) return EINVAL;
      s.defer_accept = iv;
      return 0;
    case XK_TCP_CHECKSUM:
      if (iv < 0 || iv > 3) return EINVAL;
      s.csum = static_cast<ChecksumMode>(iv);
      if (k.c != nullptr) s.conn.set_checksum(*s.csum);
      if (s.listening) s.listener.set_checksum(*s.csum);
      return 0;
    default:
      return ENOPROTOOPT;
  }
}

// An option level's handler, and the one a table has for a level (null: the
// level is not offered).
template <class Handler>
struct ByLevel {
  int level;
  Handler handle;
};
template <class Handler, std::size_t N>
Handler handler_for(const ByLevel<Handler> (&table)[N], int level) noexcept {
  for (const ByLevel<Handler>& l : table) {
    if (l.level == level) return l.handle;
  }
  return nullptr;
}

constexpr ByLevel<int (*)(SetCall&, int)> kSetters[] = {
    {SOL_SOCKET, &set_sol_socket},
    {IPPROTO_IP, &set_ip},
    {IPPROTO_IPV6, &set_ipv6},
    {IPPROTO_TCP, &set_tcp},
};

// SO_RCVTIMEO / SO_SNDTIMEO: a struct timeval, kept by the C API itself.
int set_timeout(Sock& s, int name, const void* value, socklen_t len) {
  timeval tv{};
  if (!opt_in(value, len, tv) || tv.tv_sec < 0 || tv.tv_usec < 0 || tv.tv_usec >= 1'000'000) {
    return fail(EINVAL, "setsockopt: a struct timeval");
  }
  (name == SO_RCVTIMEO ? s.rcvtimeo_ns : s.sndtimeo_ns).store(timeval_ns(tv));
  return 0;
}

// TCP_CONGESTION: a name, not an int -- "cubic", or "reno"/"newreno"
// (Linux's reno is NewReno, RFC 6582, as xk's is).
int set_congestion(Sock& s, const void* value, socklen_t len) {
  if (value == nullptr || len == 0) return fail(EINVAL, "setsockopt: TCP_CONGESTION takes a name");
  std::string want(static_cast<const char*>(value), strnlen(static_cast<const char*>(value), len));
  if (want == "reno") want = "newreno";
  if (s.type != SOCK_STREAM) return fail(ENOPROTOOPT, "setsockopt: TCP_CONGESTION of a datagram socket");
  return guarded("setsockopt", [&] {
    const int err = s.stack->call([&]() -> int {
      if (s.closed.load()) return EBADF;
      const auto names = tcp::congestion_control_names();
      if (std::find(names.begin(), names.end(), want) == names.end()) return ENOENT;  // as Linux
      tcp::Tuning t;
      t.congestion = want;
      return apply_tuning(s, t);
    });
    if (err != 0) return fail(err, "setsockopt: TCP_CONGESTION " + want);
    return 0;
  });
}

// What a getsockopt handler gives back: an int or a struct linger, or an errno.
struct Got {
  int err = 0;
  int iv = 0;
  linger lg{};
  bool is_linger = false;
};

// What a handler sees, as for the setters.
struct GetCall {
  Sock& s;
  bool stream;
  tcp::StreamEndpoint* c;
};

Got get_sol_socket(GetCall& k, int name) {
  Got r;
  switch (name) {
    case SO_TYPE: r.iv = k.s.type; return r;
    case SO_DOMAIN: r.iv = k.s.family; return r;
    case SO_ACCEPTCONN: r.iv = k.s.listening ? 1 : 0; return r;
    case SO_REUSEADDR: r.iv = k.s.reuse_addr ? 1 : 0; return r;
    case SO_REUSEPORT: r.iv = k.s.reuse_port ? 1 : 0; return r;
    case SO_KEEPALIVE: r.iv = k.s.keepalive ? 1 : 0; return r;
    case SO_OOBINLINE: r.iv = 1; return r;
    // Not set: the size now (autotuning grows it), as Linux reports.
    case SO_SNDBUF:
      if (k.s.sndbuf != 0) {
        r.iv = doubled(k.s.sndbuf);
      } else if (k.c != nullptr && k.c->tcb() != nullptr) {
        r.iv = static_cast<int>(k.c->stats().sndbuf);
      } else {
        r.iv = static_cast<int>(k.s.stack->tcp() ? k.s.stack->tcp()->config().sndbuf : 0);
      }
      return r;
    case SO_RCVBUF:
      if (!k.stream) {
        r.iv = k.s.rcvbuf != 0 ? doubled(k.s.rcvbuf) : static_cast<int>(k.s.udp.session()->options().rcvbuf_bytes);
      } else if (k.s.rcvbuf != 0) {
        r.iv = doubled(k.s.rcvbuf);
      } else if (k.c != nullptr && k.c->tcb() != nullptr) {
        r.iv = static_cast<int>(k.c->stats().rcvbuf);
      } else {
        r.iv = static_cast<int>(k.s.stack->tcp()->config().rcvbuf);
      }
      return r;
    case SO_LINGER:
      r.is_linger = true;
      r.lg.l_onoff = k.s.linger.on ? 1 : 0;
      r.lg.l_linger = k.s.linger.seconds;
      return r;
    case SO_RCVLOWAT: r.iv = static_cast<int>(k.s.rcvlowat); return r;
    case SO_ERROR: {
      Errc e = k.stream ? (k.c != nullptr ? k.c->take_error() : Errc::ok) : k.s.udp.take_error();
      r.iv = errno_of(e);
      refresh(k.s, false);
      return r;
    }
    default: return Got{ENOPROTOOPT};
  }
}

// The hop limit the socket's packets carry: asked for, else the default.
int hop_limit_of(GetCall& k) {
  const std::uint8_t asked = k.stream ? k.s.tuning.hop_limit.value_or(0) : k.s.udp.session()->options().hop_limit;
  return asked != 0 ? asked : 64;  // ipv4's ttl and ipv6's hop_limit default
}

Got get_ip(GetCall& k, int name) {
  if (k.s.family != AF_INET) return Got{ENOPROTOOPT};
  Got r;
  if (name == IP_TTL) {
    r.iv = hop_limit_of(k);
    return r;
  }
  if (name != IP_TOS) return Got{ENOPROTOOPT};
  r.iv = k.stream ? k.s.tuning.tos.value_or(0) : k.s.udp.session()->options().tos;
  return r;
}

Got get_ipv6(GetCall& k, int name) {
  if (k.s.family != AF_INET6) return Got{ENOPROTOOPT};
  Got r;
  switch (name) {
    case IPV6_V6ONLY: r.iv = k.s.v6only ? 1 : 0; return r;
    case IPV6_UNICAST_HOPS: r.iv = hop_limit_of(k); return r;
    case IPV6_TCLASS: r.iv = k.stream ? k.s.tuning.tos.value_or(0) : k.s.udp.session()->options().tos; return r;
    default: return Got{ENOPROTOOPT};
  }
}

Got get_tcp(GetCall& k, int name) {
  if (!k.stream) return Got{ENOPROTOOPT};
  Got r;
  switch (name) {
    case TCP_NODELAY: r.iv = k.s.nodelay ? 1 : 0; return r;
    case TCP_CORK: r.iv = k.s.cork ? 1 : 0; return r;
    case TCP_MAXSEG: {
      // Connected: the MSS in use; before: what was asked, or the default.
      const tcp::State st = k.c != nullptr ? k.c->state() : tcp::State::closed;
      if (st != tcp::State::closed && st != tcp::State::listen && st != tcp::State::syn_sent) {
        r.iv = k.c->stats().mss;
      } else {
        r.iv = k.s.tuning.max_segment ? *k.s.tuning.max_segment : 536;
      }
      return r;
    }
    case TCP_KEEPIDLE:
    case TCP_KEEPINTVL: {
      const tcp::TcpConfig& cfg = k.s.stack->tcp()->config();
      const auto& set = name == TCP_KEEPIDLE ? k.s.tuning.keepalive_idle : k.s.tuning.keepalive_interval;
      const Duration d = set ? *set : name == TCP_KEEPIDLE ? cfg.keepalive_idle : cfg.keepalive_interval;
      r.iv = static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(d).count());
      return r;
    }
    case TCP_KEEPCNT:
      r.iv = static_cast<int>(k.s.tuning.keepalive_probes.value_or(k.s.stack->tcp()->config().keepalive_probes));
      return r;
    case TCP_USER_TIMEOUT:
      r.iv = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  k.s.tuning.user_timeout.value_or(Duration{0}))
                                  .count());
      return r;
    case TCP_QUICKACK: r.iv = k.s.quickack ? 1 : 0; return r;
    case TCP_NOTSENT_LOWAT:
      r.iv = k.s.notsent_lowat == SIZE_MAX ? 0 : static_cast<int>(std::min<std::size_t>(k.s.notsent_lowat, INT32_MAX));
      return r;
    case TCP_DEFER_ACCEPT: r.iv = k.s.defer_accept; return r;
    case TCP_INQ: r.iv = k.s.inq ? 1 : 0; return r;
    case XK_TCP_CHECKSUM:
      r.iv = static_cast<int>(k.s.csum.value_or(k.s.stack->tcp()->checksum_mode()));
      return r;
    default: return Got{ENOPROTOOPT};
  }
}

constexpr ByLevel<Got (*)(GetCall&, int)> kGetters[] = {
    {SOL_SOCKET, &get_sol_socket},
    {IPPROTO_IP, &get_ip},
    {IPPROTO_IPV6, &get_ipv6},
    {IPPROTO_TCP, &get_tcp},
};

}  // namespace

extern "C" int xk_setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO)) return set_timeout(*s, name, value, len);
  if (level == IPPROTO_TCP && name == TCP_CONGESTION) return set_congestion(*s, value, len);
  SetValue v;
  if (level == SOL_SOCKET && name == SO_LINGER) {
    if (!opt_in(value, len, v.lg) || v.lg.l_linger < 0) return fail(EINVAL, "setsockopt: a struct linger");
  } else if (!opt_in(value, len, v.iv)) {
    return fail(EINVAL, "setsockopt: an int");
  }
  const auto setter = handler_for(kSetters, level);
  return guarded("setsockopt", [&] {
    const int err = s->stack->call([&]() -> int {
      if (s->closed.load()) return EBADF;
      if (setter == nullptr) return ENOPROTOOPT;
      const bool stream = s->type == SOCK_STREAM;
      SetCall k{*s, stream, stream ? s->conn.endpoint() : nullptr, v};
      return setter(k, name);
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
  if (level == IPPROTO_TCP && name == TCP_CONGESTION) {
    if (s->type != SOCK_STREAM) return fail(ENOPROTOOPT, "getsockopt: TCP_CONGESTION of a datagram socket");
    if (value == nullptr || len == nullptr) return fail(EFAULT, "getsockopt: no buffer");
    return guarded("getsockopt", [&] {
      std::string name_now = s->stack->call([&] {
        return s->tuning.congestion.value_or(s->stack->tcp()->config().cc);
      });
      if (name_now == "newreno") name_now = "reno";  // Linux's name for it
      char buf[16] = {};  // TCP_CA_NAME_MAX
      std::memcpy(buf, name_now.data(), std::min(name_now.size(), sizeof buf - 1));
      const std::size_t n = std::min<std::size_t>(*len, sizeof buf);
      std::memcpy(value, buf, n);
      *len = static_cast<socklen_t>(n);
      return 0;
    });
  }
  if (level == IPPROTO_TCP && name == TCP_INFO) {
    if (s->type != SOCK_STREAM) return fail(ENOPROTOOPT, "getsockopt: TCP_INFO of a datagram socket");
    if (value == nullptr || len == nullptr) return fail(EFAULT, "getsockopt: no buffer");
    return guarded("getsockopt", [&] {
      const tcp::ConnStats st = s->stack->call([&] {
        if (s->listening) {
          tcp::ConnStats l;
          l.state = tcp::State::listen;
          return l;
        }
        return s->conn.stats();
      });
      *len = static_cast<socklen_t>(linux_tcp_info(st, value, *len));
      return 0;
    });
  }
  const auto getter = handler_for(kGetters, level);
  return guarded("getsockopt", [&] {
    Got a = s->stack->call([&]() -> Got {
      if (s->closed.load()) return Got{EBADF};
      if (getter == nullptr) return Got{ENOPROTOOPT};
      const bool stream = s->type == SOCK_STREAM;
      GetCall k{*s, stream, stream ? s->conn.endpoint() : nullptr};
      return getter(k, name);
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
    Endpoint ep = s->stack->call([&]() -> Endpoint {
      if (s->type == SOCK_DGRAM) {
        Result<Endpoint> e = s->udp.local_endpoint();
        if (!e) return Endpoint{IpAddr{}, 0};
        return *e;
      }
      // (An unbound socket's is the wildcard of its family: write_sockaddr
      // writes 0.0.0.0 or ::.)
      const IpAddr bound = s->bind_addr;
      if (s->listening) return {bound, s->listener.port().value};
      if (s->connected) return s->conn.tuple().local;
      return {bound, s->bind_port.value};
    });
    write_sockaddr(*s, ep, addr, len);
    return 0;
  });
}

extern "C" int xk_getpeername(int fd, struct sockaddr* addr, socklen_t* len) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (addr == nullptr || len == nullptr) return fail(EFAULT, "getpeername: no buffer");
  return guarded("getpeername", [&] {
    std::optional<Endpoint> ep = s->stack->call([&]() -> std::optional<Endpoint> {
      if (s->type == SOCK_DGRAM) {
        Result<Endpoint> e = s->udp.remote_endpoint();
        if (!e) return std::nullopt;
        return *e;
      }
      if (!s->connected || s->listening) return std::nullopt;
      tcp::State st = s->conn.state();
      if (st == tcp::State::syn_sent || st == tcp::State::closed) return std::nullopt;
      return s->conn.tuple().remote;
    });
    if (!ep) return fail(ENOTCONN, "getpeername: not connected");
    write_sockaddr(*s, *ep, addr, len);
    return 0;
  });
}

extern "C" int xk_ioctl(int fd, unsigned long request, void* arg) {
  auto s = get_sock(fd);
  if (!s) return -1;
  if (arg == nullptr) return fail(EFAULT, "ioctl: no argument");
  if (request == FIONBIO) {
    int on = 0;
    std::memcpy(&on, arg, sizeof on);
    s->nonblock.store(on != 0);
    return 0;
  }
  if (request != FIONREAD && request != SIOCOUTQ && request != SIOCOUTQNSD && request != SIOCATMARK) {
    return fail(ENOTTY, "ioctl: request " + std::to_string(request) + " is not one a socket takes here");
  }
  return guarded("ioctl", [&] {
    struct Answer {
      int err = 0;
      int bytes = 0;
    };
    const Answer a = s->stack->call([&]() -> Answer {
      if (s->closed.load()) return Answer{EBADF};
      auto clamp = [](std::size_t n) { return static_cast<int>(std::min<std::size_t>(n, INT32_MAX)); };
      if (s->type == SOCK_DGRAM) {
        // FIONREAD: the next datagram's size, as on Linux; the others are
        // a stream's.
        if (request == SIOCATMARK) return Answer{0, 0};  // no urgent data in a datagram
        if (request != FIONREAD) return Answer{EOPNOTSUPP};
        return Answer{0, clamp(s->udp.next_datagram_size())};
      }
      if (s->listening) return Answer{EINVAL};
      tcp::StreamEndpoint* c = s->conn.endpoint();
      if (c == nullptr) return Answer{0, 0};
      if (request == FIONREAD) return Answer{0, clamp(c->rcv_queued())};  // SIOCINQ
      if (request == SIOCATMARK) return Answer{0, c->at_urgent_mark() ? 1 : 0};  // the next byte is urgent
      if (request == SIOCOUTQ) return Answer{0, clamp(c->snd_queued())};  // sent or not, not acknowledged
      return Answer{0, static_cast<int>(c->stats().notsent)};             // SIOCOUTQNSD: not sent
    });
    if (a.err != 0) return fail(a.err, "ioctl");
    std::memcpy(arg, &a.bytes, sizeof a.bytes);
    return 0;
  });
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

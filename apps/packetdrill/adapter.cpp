// libxk_packetdrill.so: packetdrill's --so_filename interface over one xk
// stack (docs/packetdrill.md).
//
// The stack is a graph with no real network under it:
//
//   memdev net0  mtu=M                       <- netdev_send injects, netdev_receive takes
//   ipv4   ip0   below=net0 addr=L/N gw=G    (bare IP on the driver: no eth, no arp)
//   icmp, udp, tcp over ip0
//
// or, for packetdrill's --ip_version=ipv6 (so_flags ip_version=ipv6), the
// same with ipv6 (no nd: nothing to resolve on a bare IP link), icmpv6.
//
// and runs on virtual time: a ManualClock that moves only when packetdrill
// lets time pass -- usleep() moves it by the time asked, gettimeofday() by a
// microsecond (packetdrill spins on it for the last few microseconds before
// an event), and netdev_receive() moves it from timer to timer while it
// waits for a packet that only a timer can send (a retransmission, a delayed
// ACK). Each move runs the timers that come due at their own instants, so a
// packet is stamped with the time the stack would have sent it.
//
// The sockets are libxk's C API on an inline stack: packetdrill's blocking
// calls (in its system call thread) drive the stack while they wait, and the
// main thread's calls take turns with them under the stack's lock.

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "packetdrill_interface.h"
#include "xk/address.hpp"
#include "xk/clock.hpp"
#include "xk/drivers/memdev.hpp"
#include "xk/options.hpp"
#include "xk/stack.hpp"
#include "xk/xk.h"

// The table is packetdrill's ABI: 33 pointers in its order. A member moved,
// added or retyped to a different size breaks every run, so pin a few.
static_assert(sizeof(packetdrill_interface) == 33 * sizeof(void*));
static_assert(offsetof(packetdrill_interface, socket) == 2 * sizeof(void*));
static_assert(offsetof(packetdrill_interface, poll) == 23 * sizeof(void*));
static_assert(offsetof(packetdrill_interface, netdev_send) == 24 * sizeof(void*));
static_assert(offsetof(packetdrill_interface, gettimeofday) == 27 * sizeof(void*));
static_assert(offsetof(packetdrill_interface, splice) == 32 * sizeof(void*));

namespace xk::packetdrill {
namespace {

using namespace std::chrono_literals;

// packetdrill's --ip_version: the wire's family, and the sockets' (AF_INET6
// with IPv4-mapped addresses over IPv4 for ipv4-mapped-ipv6: xk's C API
// takes those as Linux does, so the stack is IPv4's).
enum class IpVersion : std::uint8_t { ipv4, ipv4_mapped_ipv6, ipv6 };

// packetdrill's own IPv6 defaults: a ULA for the local end, /48, the
// gateway the next address of it; the remote lies off the prefix.
const IpAddr kLocal6 = *parse_ip("fd3d:fa7b:d17d::1");
const IpAddr kGateway6 = *parse_ip("fd3d:fa7b:d17d::2");

// What --so_flags says (docs/packetdrill.md, "Flags").
struct Options {
  IpVersion version = IpVersion::ipv4;
  std::optional<IpAddr> local;  // default 192.168.0.1 (packetdrill's usual --local_ip), fd3d:fa7b:d17d::1
  std::optional<int> prefix;    // default /16 (packetdrill's IPv4 netmask), /48
  std::optional<IpAddr> gw;     // default: the first other host of the subnet (IPv6: fd3d:fa7b:d17d::2)
  std::size_t mtu = 1500;
  bool csum = true;
  std::string tcp_opts;        // tcp.KEY=VALUE flags, for the graph's tcp line
  Duration horizon = std::chrono::minutes(10);  // netdev_receive's longest wait
  bool verbose = false;
};

int parse_int(std::string_view key, std::string_view v, long min, long max) {
  std::string s(v);
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || n < min || n > max) {
    throw std::invalid_argument(std::string(key) + "='" + s + "' is not a number in " + std::to_string(min) + ".." +
                                std::to_string(max));
  }
  return static_cast<int>(n);
}

IpAddr parse_addr(std::string_view key, std::string_view v) {
  Result<IpAddr> a = parse_ip(v);
  if (!a) throw std::invalid_argument(std::string(key) + "='" + std::string(v) + "' is neither A.B.C.D nor an IPv6 address");
  return *a;
}

// Words separated by spaces or commas, each KEY=VALUE (a leading "--" is
// allowed, so the flags may be written like packetdrill's own).
Options parse_flags(const char* text) {
  Options o;
  if (text == nullptr) return o;
  std::string_view rest(text);
  while (!rest.empty()) {
    std::size_t start = rest.find_first_not_of(" \t\n,");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    std::size_t len = std::min(rest.find_first_of(" \t\n,"), rest.size());
    std::string_view word = rest.substr(0, len);
    rest.remove_prefix(len);
    if (word.starts_with("--")) word.remove_prefix(2);
    std::size_t eq = word.find('=');
    std::string_view key = word.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view{} : word.substr(eq + 1);
    if (key == "verbose" && eq == std::string_view::npos) {
      o.verbose = true;
      continue;
    }
    if (eq == std::string_view::npos || value.empty()) {
      throw std::invalid_argument("'" + std::string(word) + "' is not KEY=VALUE");
    }
    if (key == "ip_version") {
      if (value == "ipv4") {
        o.version = IpVersion::ipv4;
      } else if (value == "ipv4-mapped-ipv6") {
        o.version = IpVersion::ipv4_mapped_ipv6;
      } else if (value == "ipv6") {
        o.version = IpVersion::ipv6;
      } else {
        throw std::invalid_argument("ip_version='" + std::string(value) + "': ipv4, ipv4-mapped-ipv6 or ipv6");
      }
    } else if (key == "local_ip") {
      o.local = parse_addr(key, value);
    } else if (key == "prefix") {
      o.prefix = parse_int(key, value, 1, 127);
    } else if (key == "gw" || key == "gateway_ip") {
      o.gw = parse_addr(key, value);
    } else if (key == "mtu") {
      o.mtu = static_cast<std::size_t>(parse_int(key, value, 576, 65535));
    } else if (key == "csum") {
      if (value != "on" && value != "off") throw std::invalid_argument("csum='" + std::string(value) + "': on or off");
      o.csum = value == "on";
    } else if (key == "horizon_ms") {
      o.horizon = std::chrono::milliseconds(parse_int(key, value, 1, 24 * 3600 * 1000));
    } else if (key == "verbose") {
      if (value != "on" && value != "off") throw std::invalid_argument("verbose='" + std::string(value) + "': on or off");
      o.verbose = value == "on";
    } else if (key.starts_with("tcp.") && key.size() > 4) {
      // Checked by the graph's parser, which names the option if it is wrong.
      if (!o.tcp_opts.empty()) o.tcp_opts += ' ';
      o.tcp_opts += std::string(key.substr(4)) + "=" + std::string(value);
    } else {
      throw std::invalid_argument("unknown flag '" + std::string(key) +
                                  "' (ip_version, local_ip, prefix, gw, mtu, csum, horizon_ms, verbose, tcp.KEY)");
    }
  }
  // The addresses are of the wire's family.
  const bool v6 = o.version == IpVersion::ipv6;
  for (const auto& [name, a] : {std::pair{"local_ip", o.local}, std::pair{"gw", o.gw}}) {
    if (a && a->is_v4() == v6) {
      throw std::invalid_argument(std::string(name) + "=" + to_string(*a) + " is not an " + (v6 ? "IPv6" : "IPv4") +
                                  " address (ip_version=" + (v6 ? "ipv6" : "ipv4") + ")");
    }
  }
  if (o.prefix && *o.prefix > (v6 ? 127 : 30)) {
    throw std::invalid_argument("prefix=" + std::to_string(*o.prefix) + ": at most " + (v6 ? "127" : "30"));
  }
  if (v6 && o.mtu < 1280) throw std::invalid_argument("mtu=" + std::to_string(o.mtu) + ": IPv6 needs 1280 or more");
  return o;
}

std::uint32_t mask_of(int prefix) { return prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix); }

// The IP layer's lines: ip0 (IPv4) or ip6 (IPv6) and its ICMP.
std::string ip_lines(const Options& o) {
  // The gateway only routes: on a bare IP link its address never reaches
  // the wire, but the remote (192.0.2.1, 2001:db8::1) is off-link and
  // needs one.
  if (o.version == IpVersion::ipv6) {
    const IpCidr local{o.local.value_or(kLocal6), static_cast<std::uint8_t>(o.prefix.value_or(48))};
    const IpAddr gw = o.gw.value_or(kGateway6);
    if (!local.contains(gw)) {
      throw std::invalid_argument("gw " + to_string(gw) + " is not on " + to_string(local) + "'s prefix");
    }
    // No link-local address: a bare IP link has no MAC to make one from.
    return "ipv6   ip6   below=net0 addr=" + to_string(local) + " gw=" + to_string(gw) + " link_local=off\n" +
           "icmpv6 icmp6 below=ip6\n";
  }
  const Ipv4Addr addr = o.local.value_or(IpAddr(Ipv4Addr{0xC0A80001})).v4();
  const int prefix = o.prefix.value_or(16);
  const std::uint32_t mask = mask_of(prefix);
  const std::uint32_t net = addr.value & mask;
  if (addr.value == net || addr.value == (net | ~mask)) {
    throw std::invalid_argument("local_ip " + to_string(addr) + " is the network or broadcast address of its /" +
                                std::to_string(prefix));
  }
  const Ipv4Addr gw = o.gw ? o.gw->v4() : Ipv4Addr{net + 1 == addr.value ? net + 2 : net + 1};
  return "ipv4   ip0   below=net0 addr=" + to_string(addr) + "/" + std::to_string(prefix) + " gw=" + to_string(gw) +
         "\n" + "icmp   icmp0 below=ip0\n";
}

std::string compose(const Options& o) {
  const std::string ip = o.version == IpVersion::ipv6 ? "ip6" : "ip0";
  std::string g;
  g += "memdev net0  mtu=" + std::to_string(o.mtu) + "\n";
  g += ip_lines(o);
  g += "udp    udp0  below=" + ip + " csum=" + (o.csum ? "on" : "off") + "\n";
  g += "tcp    tcp0  below=" + ip + " csum=" + (o.csum ? "on" : "off");
  if (!o.tcp_opts.empty()) g += " " + o.tcp_opts;
  g += "\n";
  return g;
}

class Adapter {
 public:
  explicit Adapter(const char* flags) {
    timeval tv{};
    ::gettimeofday(&tv, nullptr);
    // Virtual time starts at the wall-clock time of the run, so what
    // packetdrill prints looks like a date and not 1970.
    wall_base_us_ = static_cast<long long>(tv.tv_sec) * 1'000'000 + tv.tv_usec;
    try {
      options_ = parse_flags(flags);
      StackConfig c;
      c.graph = compose(options_);
      c.source = "so_flags";
      c.clock = &clock_;
      c.mode = StackMode::inline_calls;
      c.loop.idle = IdleMode::spin_then_sleep;
      auto stack = Stack::create(std::move(c));
      stack_ = stack.get();
      dev_ = stack->graph().find_as<drivers::MemDev>("net0");
      if (dev_ == nullptr) throw std::logic_error("the graph has no memdev net0");
      handle_ = adopt_for_c_api(std::move(stack));
    } catch (const std::exception& e) {
      error_ = e.what();
      std::fprintf(stderr, "libxk_packetdrill: bad --so_flags: %s\n", error_.c_str());
    }
    if (options_.verbose && ok()) {
      std::fprintf(stderr, "libxk_packetdrill: stack graph:\n%s", stack_->config().graph.c_str());
    }
  }

  ~Adapter() {
    // Every socket is reset and freed with the stack, before the clock goes.
    if (handle_ != nullptr) xk_stack_destroy(handle_);
  }
  Adapter(const Adapter&) = delete;
  Adapter& operator=(const Adapter&) = delete;

  bool ok() const noexcept { return handle_ != nullptr; }
  xk_stack* handle() const noexcept { return handle_; }
  const std::string& error() const noexcept { return error_; }

  long long to_usecs(Time t) const noexcept {
    return wall_base_us_ + std::chrono::duration_cast<std::chrono::microseconds>(t - kStart).count();
  }
  long long now_usecs() const noexcept { return to_usecs(clock_.now()); }

  // Let `d` of virtual time pass, running each timer at the instant it is due.
  void advance(Duration d) {
    if (!ok()) {
      clock_.advance(d);
      return;
    }
    stack_->call([&] { advance_locked(saturating_add(clock_.now(), d)); });
  }

  int inject(const void* buf, std::size_t count) {
    if (!ok()) return fail(EINVAL);
    if (buf == nullptr || count == 0) return fail(EINVAL);
    Status st = stack_->call([&] {
      return dev_->inject(std::span<const std::byte>(static_cast<const std::byte*>(buf), count));
    });
    if (!st) return fail(st.error() == Errc::too_large ? EMSGSIZE : ENOBUFS);
    return 0;
  }

  // The next packet the stack sends, waiting (in virtual time, timer to
  // timer) up to the horizon; nothing in that time: *count = 0.
  int sniff(void* buf, std::size_t* count, long long* time_usecs) {
    if (count == nullptr) return fail(EINVAL);
    const std::size_t room = *count;
    *count = 0;
    if (!ok()) {
      std::fprintf(stderr, "libxk_packetdrill: no stack (bad --so_flags: %s)\n", error_.c_str());
      return 0;
    }
    const Time until = saturating_add(clock_.now(), options_.horizon);
    // A call in packetdrill's other thread may be about to send (it holds
    // the stack now and then): give it a few real milliseconds before
    // concluding that only time can bring the packet.
    int grace = 20;
    for (;;) {
      std::optional<drivers::MemDev::Sent> sent = stack_->call([&] { return dev_->take_sent(); });
      if (sent) {
        const std::size_t n = sent->frame.size();
        if (n > room || buf == nullptr) {
          std::fprintf(stderr, "libxk_packetdrill: a %zu-byte packet does not fit packetdrill's %zu bytes\n", n, room);
          return fail(EMSGSIZE);
        }
        (void)sent->frame.copy_out(0, std::span<std::byte>(static_cast<std::byte*>(buf), n));
        *count = n;
        if (time_usecs != nullptr) *time_usecs = to_usecs(sent->at);
        return 0;
      }
      bool moved = stack_->call([&] {
        std::optional<Time> next = stack_->loop().timers().next_deadline();
        if (!next || *next > until) return false;
        advance_locked(std::max(*next, clock_.now()));
        return true;
      });
      if (moved) continue;
      if (grace-- > 0) {
        std::this_thread::sleep_for(1ms);
        continue;
      }
      if (options_.verbose) {
        std::fprintf(stderr, "libxk_packetdrill: the stack sent nothing (and no timer of its own was due) "
                             "within %lld ms of virtual time\n",
                     static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(options_.horizon).count()));
      }
      return 0;
    }
  }

  // poll/epoll_wait with a timeout: it ends at `timeout_ms` of virtual time
  // (which packetdrill's other thread moves) or of real time, whichever
  // comes first, so a wait nobody moves time for still ends.
  template <class Try>
  int wait_ready(int timeout_ms, Try&& try_once) {
    if (timeout_ms == 0) return try_once(0);
    const Time vdeadline = saturating_add(clock_.now(), std::chrono::milliseconds(std::max(timeout_ms, 0)));
    const auto rdeadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    for (;;) {
      int r = try_once(1);  // waits up to a real millisecond, running the stack
      if (r != 0) return r;
      if (timeout_ms > 0 && (clock_.now() >= vdeadline || std::chrono::steady_clock::now() >= rdeadline)) return 0;
    }
  }

  static int fail(int err) {
    errno = err;
    return -1;
  }

 private:
  // On the stack's thread: move the clock to `target` through every timer
  // due before it.
  void advance_locked(Time target) {
    EventLoop& loop = stack_->loop();
    // Bounded: a timer that keeps re-arming at "now" must not hold us here.
    for (int i = 0; i < 100'000; ++i) {
      std::optional<Time> next = loop.timers().next_deadline();
      if (!next || *next > target) break;
      if (*next > clock_.now()) clock_.set(*next);
      loop.run_once();
    }
    if (clock_.now() < target) clock_.set(target);
    loop.run_once();
  }

  // Not 0: some code reads a zero time as "unset".
  static constexpr Time kStart = Time(std::chrono::hours(1));
  ManualClock clock_{kStart};
  long long wall_base_us_ = 0;  // what kStart reads as, in gettimeofday's microseconds
  Options options_;
  std::string error_;
  Stack* stack_ = nullptr;
  drivers::MemDev* dev_ = nullptr;
  xk_stack* handle_ = nullptr;
};

Adapter& self(void* userdata) { return *static_cast<Adapter*>(userdata); }

// ---- the table --------------------------------------------------------------

void pd_free(void* u) { delete static_cast<Adapter*>(u); }

int pd_socket(void* u, int domain, int type, int protocol) {
  Adapter& a = self(u);
  if (!a.ok()) return Adapter::fail(EINVAL);
  return xk_socket(a.handle(), domain, type, protocol);
}

int pd_bind(void*, int fd, const sockaddr* addr, socklen_t len) { return xk_bind(fd, addr, len); }
int pd_listen(void*, int fd, int backlog) { return xk_listen(fd, backlog); }
int pd_accept(void*, int fd, sockaddr* addr, socklen_t* len) { return xk_accept(fd, addr, len); }
int pd_connect(void*, int fd, const sockaddr* addr, socklen_t len) { return xk_connect(fd, addr, len); }
ssize_t pd_read(void*, int fd, void* buf, size_t n) { return xk_read(fd, buf, n); }
ssize_t pd_readv(void*, int fd, const iovec* iov, int cnt) { return xk_readv(fd, iov, cnt); }
ssize_t pd_recv(void*, int fd, void* buf, size_t n, int flags) { return xk_recv(fd, buf, n, flags); }
ssize_t pd_recvfrom(void*, int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* len) {
  return xk_recvfrom(fd, buf, n, flags, from, len);
}
ssize_t pd_write(void*, int fd, const void* buf, size_t n) { return xk_write(fd, buf, n); }
ssize_t pd_writev(void*, int fd, const iovec* iov, int cnt) { return xk_writev(fd, iov, cnt); }
ssize_t pd_send(void*, int fd, const void* buf, size_t n, int flags) { return xk_send(fd, buf, n, flags); }
ssize_t pd_sendto(void*, int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t len) {
  return xk_sendto(fd, buf, n, flags, to, len);
}

// recvmsg/sendmsg: the C API's own (iovecs, names, TCP_INQ's control message).
ssize_t pd_recvmsg(void*, int fd, msghdr* m, int flags) { return xk_recvmsg(fd, m, flags); }
ssize_t pd_sendmsg(void*, int fd, const msghdr* m, int flags) { return xk_sendmsg(fd, m, flags); }

int pd_fcntl(void*, int fd, int cmd, ...) {
  // Only the commands that take an argument read one.
  if (cmd == F_SETFL || cmd == F_SETFD) {
    va_list ap;
    va_start(ap, cmd);
    int arg = va_arg(ap, int);
    va_end(ap);
    return xk_fcntl(fd, cmd, arg);
  }
  return xk_fcntl(fd, cmd);
}

int pd_ioctl(void*, int fd, unsigned long request, ...) {
  if (request == FIONBIO) {
    va_list ap;
    va_start(ap, request);
    const int* on = va_arg(ap, const int*);
    va_end(ap);
    if (on == nullptr) return Adapter::fail(EFAULT);
    int fl = xk_fcntl(fd, F_GETFL);
    if (fl < 0) return -1;
    return xk_fcntl(fd, F_SETFL, *on != 0 ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK)) < 0 ? -1 : 0;
  }
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return xk_ioctl(fd, request, arg);  // SIOCINQ, SIOCOUTQ, SIOCOUTQNSD
}

int pd_close(void*, int fd) { return xk_close(fd); }
int pd_shutdown(void*, int fd, int how) { return xk_shutdown(fd, how); }
int pd_getsockopt(void*, int fd, int level, int name, void* value, socklen_t* len) {
  return xk_getsockopt(fd, level, name, value, len);
}
int pd_setsockopt(void*, int fd, int level, int name, const void* value, socklen_t len) {
  return xk_setsockopt(fd, level, name, value, len);
}

int pd_poll(void* u, pollfd* fds, nfds_t n, int timeout) {
  return self(u).wait_ready(timeout, [&](int ms) { return xk_poll(fds, n, ms); });
}

int pd_netdev_send(void* u, const void* buf, size_t count) { return self(u).inject(buf, count); }

int pd_netdev_receive(void* u, void* buf, size_t* count, long long* time_usecs) {
  return self(u).sniff(buf, count, time_usecs);
}

int pd_usleep(void* u, useconds_t usec) {
  self(u).advance(std::chrono::microseconds(usec));
  return 0;
}

int pd_gettimeofday(void* u, timeval* tv, struct timezone*) {
  Adapter& a = self(u);
  // Time passes as packetdrill watches it: it spins on this clock for the
  // last microseconds before an event.
  a.advance(1us);
  if (tv != nullptr) {
    long long us = a.now_usecs();
    tv->tv_sec = static_cast<time_t>(us / 1'000'000);
    tv->tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  }
  return 0;
}

int pd_epoll_create(void*, int size) {
  if (size <= 0) return Adapter::fail(EINVAL);  // as epoll_create(2)
  return xk_epoll_create1(0);
}
int pd_epoll_ctl(void*, int epfd, int op, int fd, epoll_event* ev) { return xk_epoll_ctl(epfd, op, fd, ev); }
int pd_epoll_wait(void* u, int epfd, epoll_event* events, int maxevents, int timeout) {
  return self(u).wait_ready(timeout, [&](int ms) { return xk_epoll_wait(epfd, events, maxevents, ms); });
}

// xk has sockets only.
int pd_pipe(void*, int*) { return Adapter::fail(ENOSYS); }
int pd_splice(void*, int, loff_t*, int, loff_t*, size_t, unsigned int) { return Adapter::fail(ENOSYS); }

}  // namespace
}  // namespace xk::packetdrill

extern "C" __attribute__((visibility("default"))) void packetdrill_interface_init(const char* flags,
                                                                                   packetdrill_interface* ifc) {
  using namespace xk::packetdrill;
  if (ifc == nullptr) return;
  *ifc = packetdrill_interface{};
  ifc->userdata = new Adapter(flags);
  ifc->free = pd_free;
  ifc->socket = pd_socket;
  ifc->bind = pd_bind;
  ifc->listen = pd_listen;
  ifc->accept = pd_accept;
  ifc->connect = pd_connect;
  ifc->read = pd_read;
  ifc->readv = pd_readv;
  ifc->recv = pd_recv;
  ifc->recvfrom = pd_recvfrom;
  ifc->recvmsg = pd_recvmsg;
  ifc->write = pd_write;
  ifc->writev = pd_writev;
  ifc->send = pd_send;
  ifc->sendto = pd_sendto;
  ifc->sendmsg = pd_sendmsg;
  ifc->fcntl = pd_fcntl;
  ifc->ioctl = pd_ioctl;
  ifc->close = pd_close;
  ifc->shutdown = pd_shutdown;
  ifc->getsockopt = pd_getsockopt;
  ifc->setsockopt = pd_setsockopt;
  ifc->poll = pd_poll;
  ifc->netdev_send = pd_netdev_send;
  ifc->netdev_receive = pd_netdev_receive;
  ifc->usleep = pd_usleep;
  ifc->gettimeofday = pd_gettimeofday;
  ifc->epoll_create = pd_epoll_create;
  ifc->epoll_ctl = pd_epoll_ctl;
  ifc->epoll_wait = pd_epoll_wait;
  ifc->pipe = pd_pipe;
  ifc->splice = pd_splice;
}

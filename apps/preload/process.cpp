// libxk_preload.so: the real libc calls, the policy, the descriptor table and
// the process's stack (docs/preload.md).

#include "process.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "signals.hpp"
#include "xk/own_fds.hpp"
#include "xk/stack.hpp"

namespace xk::preload {
namespace {

template <class F>
void resolve(F*& f, const char* name) {
  f = reinterpret_cast<F*>(dlsym(RTLD_NEXT, name));
  if (f == nullptr) {
    std::fprintf(stderr, "xkrun: libc has no %s\n", name);
    std::abort();
  }
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "xkrun: %s\n", why.c_str());
  std::fflush(stderr);
  _exit(1);
}

// A count from the environment, 0..max (`unit`: what it counts); unset, `fallback`.
unsigned env_number(const char* name, unsigned long max, const char* unit, unsigned fallback) {
  const char* s = std::getenv(name);
  if (s == nullptr) return fallback;
  char* end = nullptr;
  const unsigned long v = std::strtoul(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v > max) {
    die(std::string(name) + "='" + s + "': " + unit + ", 0.." + std::to_string(max));
  }
  return static_cast<unsigned>(v);
}

// "A.B.C.D/N" or "X:X::X/N" (no prefix: one address).
bool parse_net(const std::string& s, xk::IpCidr& net) {
  if (s.find('/') == std::string::npos) {
    xk::Result<xk::IpAddr> a = xk::parse_ip(s);
    if (!a) return false;
    net = xk::IpCidr{*a, static_cast<std::uint8_t>(a->is_v4() ? 32 : 128)};
    return true;
  }
  xk::Result<xk::IpCidr> c = xk::parse_ip_cidr(s);
  if (!c) return false;
  net = *c;
  return true;
}

// The descriptors open now, in order (from /proc/self/fd, less its own).
std::vector<int> open_fds() {
  std::vector<int> fds;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return fds;
  const int own = dirfd(d);
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != own) fds.push_back(fd);
  }
  closedir(d);
  std::sort(fds.begin(), fds.end());
  return fds;
}

}  // namespace

const Libc& libc() {
  static const Libc l = [] {
    Libc c{};
    resolve(c.socket, "socket");
    resolve(c.bind, "bind");
    resolve(c.listen, "listen");
    resolve(c.accept, "accept");
    resolve(c.accept4, "accept4");
    resolve(c.connect, "connect");
    resolve(c.read, "read");
    resolve(c.write, "write");
    resolve(c.readv, "readv");
    resolve(c.writev, "writev");
    resolve(c.recv, "recv");
    resolve(c.send, "send");
    resolve(c.recvfrom, "recvfrom");
    resolve(c.sendto, "sendto");
    resolve(c.recvmsg, "recvmsg");
    resolve(c.sendmsg, "sendmsg");
    resolve(c.recvmmsg, "recvmmsg");
    resolve(c.sendmmsg, "sendmmsg");
    resolve(c.close, "close");
    resolve(c.shutdown, "shutdown");
    resolve(c.getsockopt, "getsockopt");
    resolve(c.setsockopt, "setsockopt");
    resolve(c.getsockname, "getsockname");
    resolve(c.getpeername, "getpeername");
    resolve(c.fcntl, "fcntl");
    resolve(c.ioctl, "ioctl");
    resolve(c.dup, "dup");
    resolve(c.dup2, "dup2");
    resolve(c.dup3, "dup3");
    resolve(c.poll, "poll");
    resolve(c.ppoll, "ppoll");
    resolve(c.select, "select");
    resolve(c.pselect, "pselect");
    resolve(c.epoll_create, "epoll_create");
    resolve(c.epoll_create1, "epoll_create1");
    resolve(c.epoll_ctl, "epoll_ctl");
    resolve(c.epoll_wait, "epoll_wait");
    resolve(c.epoll_pwait, "epoll_pwait");
    resolve(c.epoll_pwait2, "epoll_pwait2");
    resolve(c.sendfile, "sendfile");
    resolve(c.getifaddrs, "getifaddrs");
    resolve(c.freeifaddrs, "freeifaddrs");
    resolve(c.sigaction, "sigaction");
    return c;
  }();
  return l;
}

int fail(int err) {
  errno = err;
  return -1;
}

// ---- policy -------------------------------------------------------------------------

std::uint32_t Policy::addr4() const noexcept {
  for (const xk::IpCidr& c : addrs) {
    if (c.addr.is_v4()) return c.addr.v4().value;
  }
  return 0;
}

std::uint32_t Policy::mask4() const noexcept {
  for (const xk::IpCidr& c : addrs) {
    if (c.addr.is_v4()) return c.prefix_len == 0 ? 0 : ~std::uint32_t{0} << (32 - c.prefix_len);
  }
  return 0;
}

bool Policy::to_xk(const xk::IpAddr& d) const {
  // Loopback is the kernel's: 127/8 and ::1.
  xk::IpAddr::Bytes one{};
  one[15] = 1;
  if (d.is_v4() ? (d.v4().value >> 24) == 127 : d == xk::IpAddr::from_bytes(one)) return false;
  for (const xk::IpCidr& k : kernel_nets) {
    if (k.contains(d)) return false;
  }
  bool family = false;  // the stack has an address of d's family
  for (const xk::IpCidr& c : addrs) {
    if (c.addr.is_v4() != d.is_v4()) continue;
    family = true;
    if (c.addr == d || c.contains(d)) return true;
  }
  if (!family) return false;
  // fe80::/10 is on-link wherever the stack has IPv6.
  if (!d.is_v4() && d.bytes()[0] == 0xfe && (d.bytes()[1] & 0xc0) == 0x80) return true;
  return d.is_v4() ? gateway4 : gateway6;
}

bool Policy::bind_to_xk(const xk::IpAddr& a) const {
  if (a.is_unspecified()) return !addrs.empty();
  return std::any_of(addrs.begin(), addrs.end(), [&](const xk::IpCidr& c) { return c.addr == a; });
}

bool address_of(const sockaddr* a, socklen_t len, xk::IpAddr& out) {
  if (a == nullptr || len < static_cast<socklen_t>(sizeof(sa_family_t))) return false;
  sa_family_t family;
  std::memcpy(&family, a, sizeof family);
  if (family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    sockaddr_in in;
    std::memcpy(&in, a, sizeof in);
    out = xk::Ipv4Addr{ntohl(in.sin_addr.s_addr)};
    return true;
  }
  if (family == AF_INET6 && len >= 24) {  // RFC 2133's size will do
    xk::IpAddr::Bytes b;
    std::memcpy(b.data(), reinterpret_cast<const char*>(a) + offsetof(sockaddr_in6, sin6_addr), 16);
    out = xk::IpAddr::from_bytes(b);
    return true;
  }
  return false;
}

// ---- the process ----------------------------------------------------------------------

void Process::start() {
  if (instance_.load() != nullptr) return;
  instance_.store(new Process(), std::memory_order_release);  // never freed: calls come during exit too
}

Process::Process() {
  (void)libc();
  rlimit rl{};
  std::size_t n = 1 << 16;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    const rlim_t most = rl.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : rl.rlim_max;
    n = static_cast<std::size_t>(std::min<rlim_t>(std::max<rlim_t>(most, n), rlim_t{1} << 22));
  }
  // Zero pages cost nothing until a slot is written.
  void* mem = mmap(nullptr, n * sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die("cannot map the descriptor table");
  slots_ = static_cast<std::atomic<int>*>(mem);
  size_ = n;

  // Only the process xkrun started gets a stack: the programs it starts in
  // turn (which inherit LD_PRELOAD) use the kernel, since the port is taken.
  const char* pid = std::getenv("XKRUN_PID");
  if (pid == nullptr || std::to_string(getpid()) != pid) return;
  owner_ = getpid();
  // The stack must run while the program does something else: on its own
  // thread (service), or on the caller's while it calls and on its own
  // thread otherwise (hybrid, the default).
  const char* mode = std::getenv("XK_MODE");
  if (mode != nullptr && std::strcmp(mode, "service") != 0 && std::strcmp(mode, "hybrid") != 0) {
    die(std::string("XK_MODE='") + mode + "': an unmodified program needs a stack with a thread of its own (hybrid or service)");
  }
  if (mode == nullptr) setenv("XK_MODE", "hybrid", 1);
  spin_us_ = env_number("XK_SPIN_US", 1'000'000, "microseconds", spin_us_);
  kernel_poll_us_ = env_number("XK_KERNEL_POLL_US", 1'000'000, "microseconds", kernel_poll_us_);
  if (const char* k = std::getenv("XK_PRELOAD_KERNEL"); k != nullptr) {
    std::string list = k;
    for (char& c : list) c = c == ',' ? ' ' : c;
    std::istringstream in(list);
    for (std::string w; in >> w;) {
      xk::IpCidr net;
      if (!parse_net(w, net)) die("XK_PRELOAD_KERNEL: '" + w + "' is not a network (A.B.C.D/N or X:X::X/N)");
      policy_.kernel_nets.push_back(net);
    }
  }
  exit_linger_ms_ = env_number("XK_EXIT_LINGER_MS", 600'000, "milliseconds", exit_linger_ms_);
  if (const char* f = std::getenv("XK_STATS"); f != nullptr) {
    if (*f == '\0') die("XK_STATS='': a file for the stack's counters at exit, or - for stderr");
    stats_path_ = f;
  }
  // A blocked call that spins sees the program's handlers run (EINTR).
  xk::set_signal_count(&interrupting_handlers_run);
  const std::vector<int> before = open_fds();
  xk_stack* const made = xk_stack_create(nullptr);
  if (made == nullptr) die(std::string("the xk stack did not start: ") + xk_last_error());
  // The program's main has not run, but the DPDK EAL has parsed its own
  // arguments with glibc's getopt, which keeps (beyond optind) how to order
  // them: it was set up for the EAL's option string, and the program's
  // first getopt would take it over -- GNU env, whose '+' says "stop at the
  // command", went on parsing the command's own options ("env: invalid
  // option -- 'c'" from `env python3 -c ...`). optind = 0 is glibc's "start
  // afresh": the program's first getopt sets up from its own option string
  // (and optind reads 1 from then on).
  optind = 0;
  mark_opened_since(before);
  // And those it opens from now on (a sleeping thread's bell, an epoll
  // set's eventfd).
  xk::set_own_fd_watcher({[](int fd) noexcept {
                            if (Process* p = instance()) p->mark_own(fd);
                          },
                          [](int fd) noexcept {
                            if (Process* p = instance()) p->unmark_own(fd);
                          }});
  stack_.store(made, std::memory_order_release);
  in_addr a{}, gw{};
  int prefix = 0;
  if (xk_stack_addr(made, &a, &prefix, &gw) == 0) {
    policy_.addrs.push_back(xk::IpCidr{xk::Ipv4Addr{ntohl(a.s_addr)}, static_cast<std::uint8_t>(prefix)});
    policy_.gateway4 = gw.s_addr != 0;
  }
  in6_addr a6{}, gw6{};
  for (unsigned i = 0; xk_stack_addr6(made, i, &a6, &prefix, &gw6) == 0; ++i) {
    xk::IpAddr::Bytes b;
    std::memcpy(b.data(), a6.s6_addr, 16);
    policy_.addrs.push_back(xk::IpCidr{xk::IpAddr::from_bytes(b), static_cast<std::uint8_t>(prefix)});
    policy_.gateway6 = !IN6_IS_ADDR_UNSPECIFIED(&gw6);
  }
  if (policy_.addrs.empty()) die("the xk stack has no address (neither an ipv4 nor an ipv6 layer)");
  pthread_atfork(nullptr, nullptr, &Process::after_fork_child);
}

void Process::after_fork_child() {
  // The stack (its thread, its port) stays with the parent: the child's xk
  // sockets fail with EIO, and its new sockets are the kernel's.
  forked_ = true;
}

void Process::touch(int fd) noexcept {
  std::size_t top = top_.load(std::memory_order_relaxed);
  const std::size_t want = static_cast<std::size_t>(fd) + 1;
  while (top < want && !top_.compare_exchange_weak(top, want, std::memory_order_release)) {
  }
}

void Process::mark_opened_since(const std::vector<int>& before) {
  for (const int fd : open_fds()) {
    if (!std::binary_search(before.begin(), before.end(), fd)) (void)adopt(fd);
  }
}

int Process::adopt(int fd) noexcept {
  if (fd < 0) return fd;
  mark_own(fd);
  // DPDK leaves its own (the EAL's pipes, epoll set and timer, the
  // memory's memfd, a port's socket) open across exec: a program that
  // execs another (a shell script, a wrapper) would hand each stack's on
  // to the next, memory and packet sockets included.
  const int flags = libc().fcntl(fd, F_GETFD);
  if (flags >= 0 && (flags & FD_CLOEXEC) == 0) (void)libc().fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  return fd;
}

int Process::adopt_if_made_by_library(int fd) noexcept {
  Process* p = instance();
  return fd >= 0 && p != nullptr && xk::on_library_thread() ? p->adopt(fd) : fd;
}

void Process::mark_own(int fd) noexcept {
  if (fd < 0 || static_cast<std::size_t>(fd) >= size_) return;
  touch(fd);
  slots_[fd].store(kOwn, std::memory_order_release);
}

void Process::unmark_own(int fd) noexcept {
  if (fd < 0 || static_cast<std::size_t>(fd) >= size_) return;
  int v = kOwn;
  (void)slots_[fd].compare_exchange_strong(v, 0, std::memory_order_acq_rel);
}

bool Process::may_close(int fd) const noexcept {
  return slot(fd).kind != Slot::Kind::own || exiting_.load(std::memory_order_acquire) || xk::on_library_thread();
}

void Process::add_pending(int fd, int type, int family) {
  if (static_cast<std::size_t>(fd) >= size_) return;  // beyond the table: the kernel's
  touch(fd);
  std::lock_guard<std::mutex> lock(mu_);
  pending_[fd] = Pending{type, family, {}, {}};
  slots_[fd].store(-1, std::memory_order_release);
}

void Process::keep_in_kernel(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slots_[fd].load() != -1) return;
  pending_.erase(fd);
  slots_[fd].store(0, std::memory_order_release);
}

void Process::note_option(int fd, int level, int name, const void* value, socklen_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  const auto* v = static_cast<const char*>(value);
  it->second.options.push_back({level, name, std::vector<char>(v, v + (v != nullptr ? len : 0))});
}

void Process::note_watch(int fd, int epfd, int op, const epoll_event* ev) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  auto& w = it->second.watches;
  std::erase_if(w, [&](const Pending::Watch& x) { return x.epfd == epfd; });
  if (op != EPOLL_CTL_DEL && ev != nullptr) w.push_back({epfd, *ev});
}

int Process::promote(int fd) {
  xk_stack* s = stack();
  if (s == nullptr) return fail(ENETUNREACH);
  std::unique_lock<std::mutex> lock(mu_);
  const int v = slots_[fd].load();
  if (v > 0) return v - 1;  // another thread was first
  auto it = pending_.find(fd);
  if (v != -1 || it == pending_.end()) return fail(EBADF);
  const bool nonblock = (libc().fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
  const int x = xk_socket(s, it->second.family, it->second.type | (nonblock ? SOCK_NONBLOCK : 0), 0);
  if (x < 0) return -1;
  // What the kernel socket was told, the xk socket is told too; what xk
  // does not take (an option it refuses) the program already had its
  // answer to from the kernel, so it is dropped here.
  for (const Pending::Option& o : it->second.options) {
    (void)xk_setsockopt(x, o.level, o.name, o.value.data(), static_cast<socklen_t>(o.value.size()));
  }
  std::vector<Pending::Watch> watches = std::move(it->second.watches);
  pending_.erase(it);
  refs_[x] = 1;
  slots_[fd].store(x + 1, std::memory_order_release);
  lock.unlock();
  for (Pending::Watch& w : watches) {
    (void)libc().epoll_ctl(w.epfd, EPOLL_CTL_DEL, fd, nullptr);
    const int side = side_of(w.epfd);
    if (side >= 0) (void)xk_epoll_ctl(side, EPOLL_CTL_ADD, x, &w.event);
  }
  return x;
}

void Process::map_xk(int fd, int x) {
  touch(fd);
  std::lock_guard<std::mutex> lock(mu_);
  ++refs_[x];
  slots_[fd].store(x + 1, std::memory_order_release);
}

int Process::side_of(int epfd) {
  if (static_cast<std::size_t>(epfd) >= size_) return fail(EMFILE);
  std::lock_guard<std::mutex> lock(mu_);
  const int v = slots_[epfd].load();
  if (v == kOwn) return fail(EBADF);  // the library's: not open, to the program
  if (v < -1) return -v - 2;
  if (v != 0) return fail(EINVAL);
  touch(epfd);
  const int e = xk_epoll_create1(EPOLL_CLOEXEC);
  if (e < 0) return -1;
  refs_[e] = 1;
  slots_[epfd].store(-(e + 2), std::memory_order_release);
  return e;
}

void Process::release(int fd) {
  if (fd < 0 || static_cast<std::size_t>(fd) >= size_ || slots_[fd].load(std::memory_order_acquire) == 0) return;
  int closing = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int v = slots_[fd].exchange(0, std::memory_order_acq_rel);
    if (v == kOwn) return;  // the library closing its own
    if (v == -1) pending_.erase(fd);
    if (v > 0 || v < -1) {
      const int x = v > 0 ? v - 1 : -v - 2;
      auto it = refs_.find(x);
      if (it != refs_.end() && --it->second == 0) {
        refs_.erase(it);
        closing = x;
      }
    }
  }
  // A child after fork leaves the parent's stack alone.
  if (closing >= 0 && !forked_) (void)xk_close(closing);
}

void Process::duplicate(int from, int to) {
  if (static_cast<std::size_t>(to) >= size_ || static_cast<std::size_t>(from) >= size_) return;
  touch(to);
  std::lock_guard<std::mutex> lock(mu_);
  int v = slots_[from].load();
  if (v == kOwn) v = 0;  // a copy of the library's descriptor is the caller's
  if (v == -1) {
    auto it = pending_.find(from);
    if (it != pending_.end()) pending_[to] = it->second;
  } else if (v != 0) {
    ++refs_[v > 0 ? v - 1 : -v - 2];
  }
  slots_[to].store(v, std::memory_order_release);
}

void Process::shut_down() {
  if (stack() == nullptr || getpid() != owner_) return;
  exiting_.store(true, std::memory_order_release);  // the stack's descriptors close with it
  std::vector<int> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t fd = 0; fd < size_; ++fd) {
      const int v = slots_[fd].load(std::memory_order_relaxed);
      if (v != 0 && v != -1) slots_[fd].store(0);
    }
    for (const auto& [x, n] : refs_) open.push_back(x);
    refs_.clear();
  }
  // As the kernel closes a process's sockets when it exits: FIN after the
  // data (SO_LINGER as set). The kernel would go on sending after the
  // process is gone; the stack cannot outlive it, so it runs until what the
  // sockets closed now or before still hold is delivered and the FINs are
  // exchanged, for at most XK_EXIT_LINGER_MS (1 s). Then it stops -- its
  // thread must not run on while the exit destroys the library's statics.
  for (int x : open) (void)xk_close(x);
  xk_stack* s = stack_.exchange(nullptr, std::memory_order_acq_rel);
  const int left = xk_stack_drain(s, static_cast<int>(exit_linger_ms_));
  if (left > 0) {
    std::fprintf(stderr, "xkrun: %d connection%s still sending after %u ms at exit: dropped\n", left,
                 left == 1 ? "" : "s", exit_linger_ms_);
  }
  if (!stats_path_.empty()) write_stats(s);
  xk_stack_destroy(s);
}

// The stack's counters at exit (XK_STATS), after the last FINs: what it did
// for the whole run, the apps' --stats table.
void Process::write_stats(xk_stack* s) const {
  const bool to_stderr = stats_path_ == "-";
  const int fd = to_stderr ? 2 : ::open(stats_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || xk_stack_write_counters(s, fd) != 0) {
    std::fprintf(stderr, "xkrun: XK_STATS: cannot write %s: %s\n", stats_path_.c_str(), std::strerror(errno));
  }
  if (!to_stderr && fd >= 0) (void)libc().close(fd);
}

namespace {
__attribute__((constructor)) void start() { Process::start(); }
__attribute__((destructor)) void stop() {
  if (Process* p = Process::instance()) p->shut_down();
}
}  // namespace

}  // namespace xk::preload

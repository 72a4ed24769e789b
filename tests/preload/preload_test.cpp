// libxk_preload.so under a program that knows nothing of xk: plain libc
// calls (socket, poll, epoll, select, dup, fork, exec ...). The program
// starts itself again under xkrun with a loopback graph (192.0.2.1/24, the
// stack talking to its own address), so its AF_INET sockets to 192.0.2.1
// are xk's and everything else -- pipes, eventfds, AF_UNIX, 127.0.0.1 --
// the kernel's.

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>


namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in addr(const char* ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}
const sockaddr* sa(const sockaddr_in& a) { return reinterpret_cast<const sockaddr*>(&a); }

int listener(const char* ip, std::uint16_t port) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(l, 0);
  int one = 1;
  EXPECT_EQ(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
  const sockaddr_in a = addr(ip, port);
  EXPECT_EQ(bind(l, sa(a), sizeof a), 0) << std::strerror(errno);
  EXPECT_EQ(listen(l, 16), 0) << std::strerror(errno);
  return l;
}

// A connected pair through blocking calls (the stack has its own thread).
std::pair<int, int> pair_on(const char* ip, std::uint16_t port) {
  const int l = listener(ip, port);
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in a = addr(ip, port);
  EXPECT_EQ(connect(c, sa(a), sizeof a), 0) << std::strerror(errno);
  const int s = accept(l, nullptr, nullptr);
  EXPECT_GE(s, 0) << std::strerror(errno);
  close(l);
  return {c, s};
}
std::pair<int, int> xk_pair(std::uint16_t port) { return pair_on("192.0.2.1", port); }

bool is_socket(int fd) {
  struct stat st{};
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

void send_all(int fd, const std::string& s) { ASSERT_EQ(write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size())); }

std::string read_some(int fd, std::size_t max = 4096) {
  std::string buf(max, '\0');
  const ssize_t n = read(fd, buf.data(), buf.size());
  return n > 0 ? buf.substr(0, static_cast<std::size_t>(n)) : std::string();
}

// The descriptors open now above stderr, in order.
std::vector<int> open_above_stderr() {
  std::vector<int> fds;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return fds;
  while (const dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] != '.' && fd > 2 && fd != dirfd(d)) fds.push_back(fd);
  }
  closedir(d);
  std::sort(fds.begin(), fds.end());
  return fds;
}

TEST(Preload, TheSocketCallsAreTheLibrarys) {
  Dl_info info{};
  ASSERT_NE(dladdr(dlsym(RTLD_DEFAULT, "socket"), &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("libxk_preload"), std::string::npos) << info.dli_fname;
}

TEST(Preload, TcpToTheStacksAddressIsXksWithKernelNumbers) {
  auto [c, s] = xk_pair(7001);
  // Kernel descriptor numbers, sockets to fstat, and xk's names.
  EXPECT_TRUE(is_socket(c) && is_socket(s));
  EXPECT_GE(fcntl(c, F_GETFD), 0);
  sockaddr_in me{}, peer{};
  socklen_t len = sizeof me;
  ASSERT_EQ(getsockname(c, reinterpret_cast<sockaddr*>(&me), &len), 0);
  len = sizeof peer;
  ASSERT_EQ(getpeername(c, reinterpret_cast<sockaddr*>(&peer), &len), 0);
  EXPECT_EQ(me.sin_addr.s_addr, addr("192.0.2.1", 0).sin_addr.s_addr);
  EXPECT_EQ(ntohs(peer.sin_port), 7001);
  // The kernel of the test machine has no 192.0.2.1: only xk can carry this.
  send_all(c, "over xk");
  EXPECT_EQ(read_some(s), "over xk");
  int one = 1;
  EXPECT_EQ(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
  tcp_info ti{};
  len = sizeof ti;
  ASSERT_EQ(getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
  EXPECT_EQ(ti.tcpi_state, 1) << "TCP_ESTABLISHED";
  // Close: the peer reads the end.
  EXPECT_EQ(close(c), 0);
  EXPECT_EQ(read(s, &one, 1), 0);
  EXPECT_EQ(close(s), 0);
}

// The stack is the interface "xk0" in the lists a program reads to learn
// its addresses (Open MPI publishes these to its peers): getifaddrs() and
// SIOCGIFCONF, after the kernel's own, and the SIOCGIF* requests on it.
TEST(Preload, TheStackIsTheInterfaceXk0) {
  ifaddrs* list = nullptr;
  ASSERT_EQ(getifaddrs(&list), 0);
  int xk0 = 0, kernel_lo = 0;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (std::strcmp(i->ifa_name, "lo") == 0) ++kernel_lo;
    if (std::strcmp(i->ifa_name, "xk0") != 0) continue;
    ++xk0;
    ASSERT_NE(i->ifa_addr, nullptr);
    EXPECT_EQ(i->ifa_addr->sa_family, AF_INET);
    EXPECT_EQ(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr, addr("192.0.2.1", 0).sin_addr.s_addr);
    EXPECT_EQ(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr, htonl(0xffffff00u));
    EXPECT_TRUE((i->ifa_flags & IFF_UP) != 0 && (i->ifa_flags & IFF_LOOPBACK) == 0);
  }
  freeifaddrs(list);
  EXPECT_EQ(xk0, 1);
  EXPECT_GE(kernel_lo, 1) << "the kernel's interfaces are still there";

  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  std::vector<ifreq> reqs(32);
  ifconf ifc{};
  ifc.ifc_len = static_cast<int>(reqs.size() * sizeof(ifreq));
  ifc.ifc_req = reqs.data();
  ASSERT_EQ(ioctl(fd, SIOCGIFCONF, &ifc), 0) << std::strerror(errno);
  const int n = ifc.ifc_len / static_cast<int>(sizeof(ifreq));
  ASSERT_GE(n, 2);
  EXPECT_STREQ(reqs[n - 1].ifr_name, "xk0");
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&reqs[n - 1].ifr_addr)->sin_addr.s_addr,
            addr("192.0.2.1", 0).sin_addr.s_addr);
  // The room it needs, asked with no buffer; a buffer one entry short gets
  // the kernel's list cut, and xk0 still in it, as a full buffer says.
  ifconf ask{};
  ASSERT_EQ(ioctl(fd, SIOCGIFCONF, &ask), 0);
  EXPECT_EQ(ask.ifc_len, ifc.ifc_len);
  ifc.ifc_len = static_cast<int>((n - 1) * sizeof(ifreq));
  ASSERT_EQ(ioctl(fd, SIOCGIFCONF, &ifc), 0);
  EXPECT_EQ(ifc.ifc_len, static_cast<int>((n - 1) * sizeof(ifreq)));
  EXPECT_STREQ(reqs[n - 2].ifr_name, "xk0");

  ifreq r{};
  std::strcpy(r.ifr_name, "xk0");
  ASSERT_EQ(ioctl(fd, SIOCGIFFLAGS, &r), 0);
  EXPECT_TRUE((r.ifr_flags & IFF_UP) != 0 && (r.ifr_flags & IFF_RUNNING) != 0);
  ASSERT_EQ(ioctl(fd, SIOCGIFADDR, &r), 0);
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&r.ifr_addr)->sin_addr.s_addr, addr("192.0.2.1", 0).sin_addr.s_addr);
  ASSERT_EQ(ioctl(fd, SIOCGIFNETMASK, &r), 0);
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&r.ifr_netmask)->sin_addr.s_addr, htonl(0xffffff00u));
  ASSERT_EQ(ioctl(fd, SIOCGIFINDEX, &r), 0);
  const int index = r.ifr_ifindex;
  ifreq byindex{};
  byindex.ifr_ifindex = index;
  ASSERT_EQ(ioctl(fd, SIOCGIFNAME, &byindex), 0);
  EXPECT_STREQ(byindex.ifr_name, "xk0");
  ASSERT_EQ(ioctl(fd, SIOCGIFMTU, &r), 0);
  EXPECT_EQ(r.ifr_mtu, 1500);
  EXPECT_EQ(ioctl(fd, SIOCSIFMTU, &r), -1) << "nothing about xk0 can be set";
  EXPECT_EQ(errno, EOPNOTSUPP);
  // The kernel's interfaces are the kernel's.
  std::strcpy(r.ifr_name, "lo");
  ASSERT_EQ(ioctl(fd, SIOCGIFFLAGS, &r), 0);
  EXPECT_TRUE((r.ifr_flags & IFF_LOOPBACK) != 0);
  close(fd);
}

// The library puts a trampoline in front of the program's signal handlers
// (docs/preload.md, "Signals during a spin"): sigaction and signal still
// report the program's own handlers and flags.
void first_handler(int) {}
void second_handler(int, siginfo_t*, void*) {}
TEST(Preload, SigactionReportsTheProgramsOwnHandlers) {
  struct sigaction a {};
  a.sa_handler = &first_handler;
  sigemptyset(&a.sa_mask);
  a.sa_flags = SA_RESTART;
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR2, &a, &old), 0);
  EXPECT_EQ(old.sa_handler, SIG_DFL);
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &old), 0);
  EXPECT_EQ(old.sa_handler, &first_handler);
  EXPECT_EQ(old.sa_flags & (SA_RESTART | SA_SIGINFO), SA_RESTART);
  struct sigaction b {};
  b.sa_sigaction = &second_handler;
  sigemptyset(&b.sa_mask);
  b.sa_flags = SA_SIGINFO;
  ASSERT_EQ(sigaction(SIGUSR2, &b, &old), 0);
  EXPECT_EQ(old.sa_handler, &first_handler) << "the one it replaced";
  EXPECT_EQ(reinterpret_cast<void*>(signal(SIGUSR2, SIG_DFL)), reinterpret_cast<void*>(&second_handler));
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &old), 0);
  EXPECT_EQ(old.sa_handler, SIG_DFL);
}

// What libc's own sigaction says is installed (the library's trampoline,
// when it put one in front of the program's handler).
struct sigaction installed(int sig) {
  using Sigaction = int (*)(int, const struct sigaction*, struct sigaction*);
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(libc, nullptr);
  const auto real = reinterpret_cast<Sigaction>(dlsym(libc, "sigaction"));
  struct sigaction now {};
  EXPECT_EQ(real(sig, nullptr, &now), 0);
  dlclose(libc);
  return now;
}

volatile sig_atomic_t g_old_style = 0;
void old_style_handler(int) { g_old_style = g_old_style + 1; }

// The System V and BSD ways to install a handler go through the library's
// trampoline as sigaction and signal do, each with its own semantics.
TEST(Preload, OldStyleSignalCallsAreCountedToo) {
  using Install = sighandler_t (*)(int, sighandler_t);
  struct Way {
    const char* name;
    int flags;  // as sigaction reports them back
  };
  constexpr int kOneShot = static_cast<int>(SA_RESETHAND | SA_NODEFER);
  for (const Way way : {Way{"bsd_signal", SA_RESTART}, Way{"ssignal", SA_RESTART}, Way{"sysv_signal", kOneShot},
                        Way{"__sysv_signal", kOneShot}, Way{"sigset", 0}}) {
    SCOPED_TRACE(way.name);
    const auto call = reinterpret_cast<Install>(dlsym(RTLD_DEFAULT, way.name));
    ASSERT_NE(call, nullptr);
    Dl_info info{};
    ASSERT_NE(dladdr(reinterpret_cast<void*>(call), &info), 0);
    EXPECT_NE(std::string(info.dli_fname).find("libxk_preload"), std::string::npos) << info.dli_fname;
    EXPECT_EQ(call(SIGUSR2, &old_style_handler), SIG_DFL);
    const struct sigaction kernel = installed(SIGUSR2);
    EXPECT_TRUE((kernel.sa_flags & SA_SIGINFO) != 0 && reinterpret_cast<void*>(kernel.sa_sigaction) !=
                                                            reinterpret_cast<void*>(&old_style_handler))
        << "the trampoline is what the kernel runs";
    struct sigaction seen {};
    ASSERT_EQ(sigaction(SIGUSR2, nullptr, &seen), 0);
    EXPECT_EQ(seen.sa_handler, &old_style_handler);
    EXPECT_EQ(seen.sa_flags & (SA_RESTART | kOneShot | SA_SIGINFO), way.flags);
    const int before = g_old_style;
    raise(SIGUSR2);
    EXPECT_EQ(g_old_style, before + 1);
    ASSERT_EQ(sigaction(SIGUSR2, nullptr, &seen), 0);
    if ((way.flags & SA_RESETHAND) != 0) {
      EXPECT_EQ(seen.sa_handler, SIG_DFL) << "one shot";
    } else {
      EXPECT_EQ(seen.sa_handler, &old_style_handler);
    }
    signal(SIGUSR2, SIG_DFL);
  }
  // sigset's SIG_HOLD blocks the signal and keeps the handler; the next
  // sigset answers SIG_HOLD and unblocks it, and the held signal arrives.
  // (Called by address: the declaration is deprecated.)
  const auto sigset = reinterpret_cast<Install>(dlsym(RTLD_DEFAULT, "sigset"));
  ASSERT_EQ(sigset(SIGUSR2, &old_style_handler), SIG_DFL);
  EXPECT_EQ(sigset(SIGUSR2, SIG_HOLD), &old_style_handler);
  const int before = g_old_style;
  raise(SIGUSR2);
  EXPECT_EQ(g_old_style, before) << "held";
  EXPECT_EQ(sigset(SIGUSR2, &old_style_handler), SIG_HOLD);
  EXPECT_EQ(g_old_style, before + 1) << "delivered when unblocked";
  EXPECT_EQ(sigset(0, &old_style_handler), SIG_ERR);
  EXPECT_EQ(errno, EINVAL);
  signal(SIGUSR2, SIG_DFL);
}

TEST(Preload, LoopbackAndUnixStayWithTheKernel) {
  auto [c, s] = pair_on("127.0.0.1", 7002);
  send_all(c, "kernel");
  EXPECT_EQ(read_some(s), "kernel");
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  send_all(sv[0], "unix");
  EXPECT_EQ(read_some(sv[1]), "unix");
  for (int fd : {c, s, sv[0], sv[1]}) close(fd);
}

TEST(Preload, DatagramsToTheStacksAddress) {
  const int a = socket(AF_INET, SOCK_DGRAM, 0);
  const int b = socket(AF_INET, SOCK_DGRAM, 0);
  const sockaddr_in ba = addr("192.0.2.1", 7003);
  ASSERT_EQ(bind(b, sa(ba), sizeof ba), 0);
  ASSERT_EQ(sendto(a, "dgram", 5, 0, sa(ba), sizeof ba), 5) << std::strerror(errno);
  char buf[16];
  sockaddr_in from{};
  socklen_t len = sizeof from;
  ASSERT_EQ(recvfrom(b, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len), 5);
  EXPECT_EQ(std::string(buf, 5), "dgram");
  EXPECT_EQ(from.sin_addr.s_addr, ba.sin_addr.s_addr);
  close(a);
  close(b);
}

// sendmmsg and recvmmsg on xk sockets: several datagrams a call, each with
// its length; MSG_WAITFORONE returns what is there after the first; an
// empty socket with MSG_DONTWAIT says EAGAIN.
TEST(Preload, SendmmsgAndRecvmmsgCarrySeveralDatagrams) {
  const int a = socket(AF_INET, SOCK_DGRAM, 0);
  const int b = socket(AF_INET, SOCK_DGRAM, 0);
  const sockaddr_in ba = addr("192.0.2.1", 7011);
  ASSERT_EQ(bind(b, sa(ba), sizeof ba), 0);
  const char* words[3] = {"one", "three", "seven!!"};
  iovec out[3];
  mmsghdr send[3]{};
  for (int i = 0; i < 3; ++i) {
    out[i] = {const_cast<char*>(words[i]), std::strlen(words[i])};
    send[i].msg_hdr.msg_iov = &out[i];
    send[i].msg_hdr.msg_iovlen = 1;
    send[i].msg_hdr.msg_name = const_cast<sockaddr_in*>(&ba);
    send[i].msg_hdr.msg_namelen = sizeof ba;
  }
  ASSERT_EQ(sendmmsg(a, send, 3, 0), 3) << std::strerror(errno);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(send[i].msg_len, std::strlen(words[i]));
  char bufs[4][16];
  iovec in[4];
  mmsghdr recv[4]{};
  for (int i = 0; i < 4; ++i) {
    in[i] = {bufs[i], sizeof bufs[i]};
    recv[i].msg_hdr.msg_iov = &in[i];
    recv[i].msg_hdr.msg_iovlen = 1;
  }
  int got = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (got < 3 && Clock::now() < deadline) {
    const int r = recvmmsg(b, recv + got, 4 - got, MSG_WAITFORONE, nullptr);
    ASSERT_GT(r, 0) << std::strerror(errno);
    got += r;
  }
  ASSERT_EQ(got, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(std::string(bufs[i], recv[i].msg_len), words[i]);
  }
  EXPECT_EQ(recvmmsg(b, recv, 4, MSG_DONTWAIT, nullptr), -1);
  EXPECT_EQ(errno, EAGAIN);
  close(a);
  close(b);
}

TEST(Preload, PollMixesSocketsAndPipes) {
  auto [c, s] = xk_pair(7004);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pollfd fds[2] = {{s, POLLIN, 0}, {p[0], POLLIN, 0}};
  // Nothing ready: the timeout is honoured.
  auto t0 = Clock::now();
  EXPECT_EQ(poll(fds, 2, 50), 0);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(45));
  // The pipe only, then the socket only -- each wakes a sleeping poll.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    (void)write(p[1], "x", 1);
  });
  EXPECT_EQ(poll(fds, 2, 5000), 1);
  writer.join();
  EXPECT_EQ(fds[0].revents, 0);
  EXPECT_EQ(fds[1].revents, POLLIN);
  char x;
  ASSERT_EQ(read(p[0], &x, 1), 1);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    (void)write(c, "y", 1);
  });
  EXPECT_EQ(poll(fds, 2, 5000), 1);
  sender.join();
  EXPECT_EQ(fds[0].revents, POLLIN);
  EXPECT_EQ(fds[1].revents, 0);
  // A closed number reads POLLNVAL, as the kernel says.
  pollfd bad{p[1], POLLIN, 0};
  close(p[1]);
  EXPECT_EQ(poll(&bad, 1, 0), 1);
  EXPECT_EQ(bad.revents, POLLNVAL);
  for (int fd : {c, s, p[0]}) close(fd);
}

// An epoll set holding an xk socket (data 1) and a kernel descriptor (data
// 2), both level-triggered for reading.
int epoll_of(int xk_sock, int kernel_fd) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  EXPECT_GE(ep, 0) << std::strerror(errno);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u64 = 1;
  EXPECT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, xk_sock, &e), 0) << std::strerror(errno);
  e.data.u64 = 2;
  EXPECT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, kernel_fd, &e), 0) << std::strerror(errno);
  return ep;
}

// A progress loop's zero-timeout waits answer for their kernel descriptors
// from the last look while it found them idle less than XK_KERNEL_POLL_US
// ago (kKernelPollUs here, set in main) -- and never later: a look that
// starts past the bound asks the kernel, a ready descriptor is never
// answered from memory, and a wait that may block always asks.
constexpr int kKernelPollUs = 2000;

// Makes a kernel descriptor ready right after `look` (a zero-timeout wait)
// found everything idle, then looks until it is seen: every look that still
// said "idle" must have started within the bound of the idle one.
template <class Look, class MakeReady>
void seen_within_bound(Look&& look, MakeReady&& make_ready) {
  const auto bound = std::chrono::microseconds(kKernelPollUs);
  ASSERT_EQ(look(), 0);  // idle: remembered
  const auto idle_end = Clock::now();
  make_ready();
  int n = 0;
  for (auto until = Clock::now() + std::chrono::seconds(5); n == 0 && Clock::now() < until;) {
    const auto start = Clock::now();
    n = look();
    ASSERT_GE(n, 0);
    if (n == 0) {
      ASSERT_LT(start - idle_end, bound) << "a look past the bound answered from memory";
    }
  }
  ASSERT_EQ(n, 1) << "the kernel descriptor was never seen";
}

TEST(Preload, AZeroTimeoutLoopSeesAReadyKernelDescriptorWithinItsBound) {
  auto [c, s] = xk_pair(7014);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pollfd fds[2] = {{s, POLLIN, 0}, {p[0], POLLIN, 0}};
  for (int round = 0; round < 20; ++round) {
    seen_within_bound([&] { return poll(fds, 2, 0); }, [&] { ASSERT_EQ(write(p[1], "x", 1), 1); });
    EXPECT_EQ(fds[1].revents, POLLIN);
    EXPECT_EQ(poll(fds, 2, 0), 1) << "a ready descriptor is asked about again";
    char x;
    ASSERT_EQ(read(p[0], &x, 1), 1);
  }
  // A wait that may block asks the kernel at once.
  ASSERT_EQ(poll(fds, 2, 0), 0);
  ASSERT_EQ(write(p[1], "y", 1), 1);
  auto t0 = Clock::now();
  EXPECT_EQ(poll(fds, 2, 1000), 1);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_EQ(fds[1].revents, POLLIN);
  char y;
  ASSERT_EQ(read(p[0], &y, 1), 1);
  // The same for an epoll set that holds both kinds.
  const int ev = eventfd(0, EFD_NONBLOCK);
  const int ep = epoll_of(s, ev);
  epoll_event out[4];
  for (int round = 0; round < 20; ++round) {
    seen_within_bound([&] { return epoll_wait(ep, out, 4, 0); }, [&] { ASSERT_EQ(eventfd_write(ev, 1), 0); });
    EXPECT_EQ(out[0].data.u64, 2u);
    eventfd_t v;
    ASSERT_EQ(eventfd_read(ev, &v), 0);
  }
  for (int fd : {c, s, p[0], p[1], ev, ep}) close(fd);
}

TEST(Preload, EpollMixesSocketsEventfdsAndPipes) {
  auto [c, s] = xk_pair(7005);
  const int ev = eventfd(0, EFD_NONBLOCK);
  const int ep = epoll_of(s, ev);
  ASSERT_GE(ep, 0);
  epoll_event out[4];
  EXPECT_EQ(epoll_wait(ep, out, 4, 30), 0);
  // Both sides at once.
  send_all(c, "z");
  ASSERT_EQ(eventfd_write(ev, 1), 0);
  int got = 0;
  std::uint64_t seen = 0;
  for (auto until = Clock::now() + std::chrono::seconds(5); got < 2 && Clock::now() < until;) {
    const int n = epoll_wait(ep, out, 4, 1000);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i) seen |= out[i].data.u64;
    got = seen == 3 ? 2 : 1;
  }
  EXPECT_EQ(seen, 3u) << "the socket (1) and the eventfd (2)";
  // Level-triggered: still there until read.
  EXPECT_GE(epoll_wait(ep, out, 4, 0), 2);
  EXPECT_EQ(read_some(s), "z");
  eventfd_t v;
  ASSERT_EQ(eventfd_read(ev, &v), 0);
  EXPECT_EQ(epoll_wait(ep, out, 4, 0), 0);
  // Edge-triggered and one-shot on the socket.
  epoll_event e{};
  e.events = EPOLLIN | EPOLLONESHOT;
  e.data.u64 = 1;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_MOD, s, &e), 0);
  send_all(c, "a");
  ASSERT_EQ(epoll_wait(ep, out, 4, 2000), 1);
  EXPECT_EQ(out[0].data.u64, 1u);
  EXPECT_EQ(epoll_wait(ep, out, 4, 20), 0) << "one shot";
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_DEL, s, nullptr), 0);
  for (int fd : {c, s, ev, ep}) close(fd);
}

TEST(Preload, EpollPwait2TimesOutToTheNanosecondAndWakesOnEitherSide) {
  auto [c, s] = xk_pair(7019);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const int ep = epoll_of(s, p[0]);
  epoll_event out[4];
  const timespec zero{0, 0};
  EXPECT_EQ(epoll_pwait2(ep, out, 4, &zero, nullptr), 0);
  // 30 ms given as nanoseconds: no sooner (the kernel's side would say 0 at once).
  const timespec t30{0, 30'000'000};
  auto t0 = Clock::now();
  EXPECT_EQ(epoll_pwait2(ep, out, 4, &t30, nullptr), 0);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(29));
  const timespec bad{0, 1'000'000'000};
  EXPECT_EQ(epoll_pwait2(ep, out, 4, &bad, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  // No timeout: woken by the xk socket, then by the pipe.
  std::thread later([c = c] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    send_all(c, "x");
  });
  ASSERT_EQ(epoll_pwait2(ep, out, 4, nullptr, nullptr), 1);
  EXPECT_EQ(out[0].data.u64, 1u);
  later.join();
  EXPECT_EQ(read_some(s), "x");
  ASSERT_EQ(write(p[1], "y", 1), 1);
  ASSERT_EQ(epoll_pwait2(ep, out, 4, nullptr, nullptr), 1);
  EXPECT_EQ(out[0].data.u64, 2u);
  for (int fd : {c, s, p[0], p[1], ep}) close(fd);
}

TEST(Preload, EpollRegistrationBeforeConnectFollowsTheSocket) {
  const int l = listener("192.0.2.1", 7006);
  // Added while the socket is undecided (a kernel socket), connected after:
  // the registration must move to xk with it.
  const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int ep = epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLOUT;
  e.data.fd = c;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e), 0);
  const sockaddr_in a = addr("192.0.2.1", 7006);
  const int r = connect(c, sa(a), sizeof a);
  EXPECT_TRUE(r == 0 || errno == EINPROGRESS) << std::strerror(errno);
  epoll_event out[2];
  ASSERT_EQ(epoll_wait(ep, out, 2, 5000), 1);
  EXPECT_EQ(out[0].data.fd, c);
  EXPECT_TRUE(out[0].events & EPOLLOUT);
  int err = -1;
  socklen_t len = sizeof err;
  ASSERT_EQ(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, 0);
  const int s = accept(l, nullptr, nullptr);
  ASSERT_GE(s, 0);
  for (int fd : {c, s, l, ep}) close(fd);
}

TEST(Preload, SelectMixesAndLeavesTheTimeLeft) {
  auto [c, s] = xk_pair(7007);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(s, &rd);
  FD_SET(p[0], &rd);
  timeval tv{0, 40'000};
  EXPECT_EQ(select(std::max(s, p[0]) + 1, &rd, nullptr, nullptr, &tv), 0);
  EXPECT_EQ(tv.tv_sec, 0);
  EXPECT_LT(tv.tv_usec, 5'000) << "the time left";
  send_all(c, "q");
  (void)write(p[1], "p", 1);
  FD_ZERO(&rd);
  FD_SET(s, &rd);
  FD_SET(p[0], &rd);
  fd_set wr;
  FD_ZERO(&wr);
  FD_SET(c, &wr);
  tv = {5, 0};
  // Both readable, the client writable: 3 bits (they may arrive apart).
  int n = 0;
  for (auto until = Clock::now() + std::chrono::seconds(5); n < 3 && Clock::now() < until;) {
    fd_set r2 = rd, w2 = wr;
    n = select(std::max({s, p[0], c}) + 1, &r2, &w2, nullptr, &tv);
    ASSERT_GE(n, 0);
    if (n == 3) {
      EXPECT_TRUE(FD_ISSET(s, &r2) && FD_ISSET(p[0], &r2) && FD_ISSET(c, &w2));
    }
  }
  EXPECT_EQ(n, 3);
  for (int fd : {c, s, p[0], p[1]}) close(fd);
}

volatile sig_atomic_t g_signals = 0;
void on_signal(int) { g_signals = g_signals + 1; }

TEST(Preload, ASignalInterruptsAWaitWithEintr) {
  auto [c, s] = xk_pair(7008);
  struct sigaction act{};
  act.sa_handler = on_signal;  // no SA_RESTART
  sigemptyset(&act.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &act, nullptr), 0);
  const pthread_t me = pthread_self();
  auto poke = [me] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pthread_kill(me, SIGUSR1);
  };
  std::thread t1(poke);
  pollfd p{s, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 5000), -1);
  EXPECT_EQ(errno, EINTR);
  t1.join();
  const int ep = epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLIN;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, s, &e), 0);
  std::thread t2(poke);
  EXPECT_EQ(epoll_wait(ep, &e, 1, 5000), -1);
  EXPECT_EQ(errno, EINTR);
  t2.join();
  EXPECT_EQ(g_signals, 2);
  signal(SIGUSR1, SIG_DFL);
  for (int fd : {c, s, ep}) close(fd);
}

// A signal timed around the end of the spin -- where poll and epoll_wait
// stop looking at the handlers' count and go to sleep in the kernel -- ends
// every wait with EINTR: nothing blocks signals unseen between the last
// look and the sleep (docs/preload.md, "Signals during a spin"). The
// sender busy-waits to its moment, spread over 150-330 us after the call
// (the spin is 200 us), many times for each kind of wait. A shot sent
// before the call began (this thread preempted on a loaded machine) would
// not interrupt the kernel's wait either: that round is not counted.
TEST(Preload, ASignalAtTheEndOfTheSpinStillInterrupts) {
  auto [c, s] = xk_pair(7009);
  struct sigaction act{}, old{};
  act.sa_handler = on_signal;  // no SA_RESTART
  sigemptyset(&act.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &act, &old), 0);
  const int ep = epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLIN;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, s, &e), 0);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const pthread_t me = pthread_self();
  std::atomic<Clock::time_point> at{};
  std::atomic<Clock::time_point> sent{};
  std::atomic<bool> stop{false};
  std::atomic<int> shots{0};
  std::thread shooter([&] {
    int done = 0;
    while (!stop.load()) {
      if (shots.load() == done || Clock::now() < at.load()) continue;
      sent.store(Clock::now());
      pthread_kill(me, SIGUSR1);
      ++done;
    }
  });
  int timed_out = 0;
  int ready = 0;
  int early = 0;
  const int rounds = 150;
  for (int i = 0; i < 2 * rounds; ++i) {
    g_signals = 0;
    at = Clock::now() + std::chrono::microseconds(150 + (i * 37) % 180);
    shots.fetch_add(1);
    const Clock::time_point began = Clock::now();
    int r;
    if (i % 2 == 0) {
      pollfd fds[2] = {{s, POLLIN, 0}, {p[0], POLLIN, 0}};
      r = poll(fds, 2, 1000);
    } else {
      r = epoll_wait(ep, &e, 1, 1000);
    }
    const int err = errno;
    while (g_signals == 0) std::this_thread::yield();  // the shot landed
    if (sent.load() < began) {
      ++early;
      continue;
    }
    if (r == 0) ++timed_out;
    if (r > 0) ++ready;
    if (r < 0) {
      EXPECT_EQ(err, EINTR);
    }
  }
  stop = true;
  shooter.join();
  EXPECT_EQ(timed_out, 0) << "waits slept through their signal";
  EXPECT_EQ(ready, 0);
  EXPECT_LT(early, rounds) << "most shots must land inside the wait for the test to say anything";
  sigaction(SIGUSR1, &old, nullptr);
  for (int fd : {c, s, ep, p[0], p[1]}) close(fd);
}

TEST(Preload, DupFcntlAndCloseKeepOneSocket) {
  auto [c, s] = xk_pair(7009);
  const int d = dup(c);
  ASSERT_GE(d, 0);
  EXPECT_EQ(close(c), 0) << "a duplicate still holds the connection";
  send_all(d, "via dup");
  EXPECT_EQ(read_some(s), "via dup");
  // dup2 onto a pipe's number: it becomes the socket.
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(dup2(d, p[1]), p[1]);
  send_all(p[1], "via dup2");
  EXPECT_EQ(read_some(s), "via dup2");
  const int d3 = fcntl(d, F_DUPFD_CLOEXEC, 100);
  ASSERT_GE(d3, 100);
  EXPECT_EQ(fcntl(d3, F_GETFD), FD_CLOEXEC);
  // O_NONBLOCK through fcntl: a read with nothing there is EAGAIN.
  ASSERT_EQ(fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK), 0);
  EXPECT_NE(fcntl(s, F_GETFL) & O_NONBLOCK, 0);
  char x;
  EXPECT_EQ(read(s, &x, 1), -1);
  EXPECT_EQ(errno, EAGAIN);
  int queued = -1;
  send_all(d3, "abc");
  pollfd pf{s, POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, 2000), 1);
  ASSERT_EQ(ioctl(s, FIONREAD, &queued), 0);
  EXPECT_EQ(queued, 3);
  // The last of the three numbers closes the connection.
  close(d);
  close(p[1]);
  EXPECT_EQ(read_some(s), "abc");
  close(d3);
  ASSERT_EQ(fcntl(s, F_SETFL, 0), 0);
  EXPECT_EQ(read(s, &x, 1), 0) << "the end of the stream";
  close(p[0]);
  close(s);
}

TEST(Preload, ManyThreadsAtOnce) {
  constexpr int kThreads = 8;
  const int l = listener("192.0.2.1", 7010);
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&, i] {
      const int c = socket(AF_INET, SOCK_STREAM, 0);
      const sockaddr_in a = addr("192.0.2.1", 7010);
      if (connect(c, sa(a), sizeof a) != 0) return;
      const int s = accept(l, nullptr, nullptr);
      if (s < 0) return;
      const std::string msg(100000 + i, static_cast<char>('a' + i));
      std::thread w([&] { (void)write(c, msg.data(), msg.size()); shutdown(c, SHUT_WR); });
      std::string got;
      for (std::string part; !(part = read_some(s, 65536)).empty();) got += part;
      w.join();
      // Accepts may pair threads crosswise: whatever arrived is one whole message.
      if (got.size() >= 100000 && got.find_first_not_of(got[0]) == std::string::npos) ++ok;
      close(c);
      close(s);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), kThreads);
  close(l);
}

TEST(Preload, ADaemonsCloseEverythingLeavesTheStacksOwnDescriptors) {
  auto [c, s] = xk_pair(7014);
  pollfd pf{s, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 20), 0);  // it sleeps beside the stack: this thread has a bell now
  // What a daemon does as it starts: every number above stderr but what it keeps.
  std::vector<int> refused;
  for (const int fd : open_above_stderr()) {
    if (fd == c || fd == s || close(fd) == 0) continue;
    EXPECT_EQ(errno, EBADF) << fd;
    refused.push_back(fd);
  }
  ASSERT_FALSE(refused.empty()) << "the stack's loop has descriptors of its own";
  for (const int fd : refused) {
    EXPECT_EQ(fcntl(fd, F_GETFD), FD_CLOEXEC) << fd << " is still open";
    EXPECT_EQ(dup2(0, fd), -1) << "dup2 onto the library's " << fd;
    EXPECT_EQ(errno, EBUSY);
  }
  // The stack goes on: a wait that sleeps is woken by data sent meanwhile.
  std::thread later([c = c] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    send_all(c, "still here");
  });
  pf = {s, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 5000), 1);
  later.join();
  EXPECT_EQ(read_some(s), "still here");
  close(c);
  close(s);
}

TEST(Preload, CloseRangeAndClosefromCloseXkSocketsButNotTheStacksOwn) {
  const int l = listener("192.0.2.1", 7015);
  auto [c, s] = xk_pair(7016);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(close_range(3, ~0u, 0), 0) << std::strerror(errno);
  for (const int fd : {l, c, s, p[0], p[1]}) {
    EXPECT_EQ(fcntl(fd, F_GETFD), -1) << fd << " is closed";
    EXPECT_EQ(errno, EBADF);
  }
  const std::vector<int> left = open_above_stderr();
  EXPECT_FALSE(left.empty()) << "the stack's own descriptors stay";
  // The xk listener went with its number: the port is free again.
  const int l2 = listener("192.0.2.1", 7015);
  auto [c2, s2] = xk_pair(7017);
  send_all(c2, "after close_range");
  EXPECT_EQ(read_some(s2), "after close_range");
  // CLOSE_RANGE_CLOEXEC only marks them.
  ASSERT_EQ(close_range(static_cast<unsigned>(c2), static_cast<unsigned>(c2), static_cast<int>(CLOSE_RANGE_CLOEXEC)), 0);
  EXPECT_EQ(fcntl(c2, F_GETFD), FD_CLOEXEC);
  closefrom(3);
  EXPECT_EQ(open_above_stderr(), left);
  const int l3 = listener("192.0.2.1", 7015);
  auto [c3, s3] = xk_pair(7018);
  send_all(c3, "after closefrom");
  EXPECT_EQ(read_some(s3), "after closefrom");
  for (const int fd : {l2, l3, c3, s3}) close(fd);
}

// A child forked from this multi-threaded process inherits the other
// threads' thread-local storage with no thread to free it: LeakSanitizer
// (ASan builds) would report that at the child's exit, which is not a leak
// of anything here. Its documented hook turns it off in such a child.
bool g_forked_child = false;
extern "C" int __lsan_is_turned_off() { return g_forked_child ? 1 : 0; }

TEST(Preload, AForkedChildGetsEioOnXkSocketsAndKernelSockets) {
  auto [c, s] = xk_pair(7011);
  const int kl = listener("127.0.0.1", 7012);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    g_forked_child = true;
    int code = 0;
    char x;
    if (read(s, &x, 1) != -1 || errno != EIO) code |= 1;          // the parent's stack
    if (write(c, "x", 1) != -1 || errno != EIO) code |= 2;
    const int k = socket(AF_INET, SOCK_STREAM, 0);               // the kernel's
    const sockaddr_in a = addr("127.0.0.1", 7012);
    if (connect(k, sa(a), sizeof a) != 0) code |= 4;
    pollfd pf{s, POLLIN, 0};
    if (poll(&pf, 1, 5000) != 1 || pf.revents != POLLNVAL) code |= 16;  // at once, not after 5 s
    if (close(s) != 0) code |= 8;  // closing the child's copy is fine
    exit(code);                    // exit handlers must not touch the parent's stack
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit 1/2: no EIO on an xk socket; 4: no kernel socket; 8: close; 16: poll";
  // The parent's connection is untouched.
  send_all(c, "after fork");
  EXPECT_EQ(read_some(s), "after fork");
  const int k = accept(kl, nullptr, nullptr);
  EXPECT_GE(k, 0);
  for (int fd : {c, s, kl, k}) close(fd);
}

TEST(Preload, ExecClosesCloexecSocketsAndTheOthersAreKernelSockets) {
  const int l = listener("192.0.2.1", 7013);
  const int keep = socket(AF_INET, SOCK_STREAM, 0);
  const int gone = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in a = addr("192.0.2.1", 7013);
  ASSERT_EQ(connect(keep, sa(a), sizeof a), 0);
  ASSERT_EQ(connect(gone, sa(a), sizeof a), 0);
  // The new program: the close-on-exec number is gone; the other is a
  // kernel socket with no connection (ENOTCONN), never the old connection.
  const std::string script = "[ ! -e /proc/self/fd/" + std::to_string(gone) + " ] && [ -S /proc/self/fd/" +
                             std::to_string(keep) + " ]";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << script;
  for (int fd : {l, keep, gone}) close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  // Not yet under xkrun: start again under it (the stack comes from the
  // loopback graph), the same arguments.
  if (std::getenv("XKRUN_PID") == nullptr) {
    // The kernel-poll bound long enough to observe (AZeroTimeoutLoop...).
    const std::string kernel_poll = std::to_string(kKernelPollUs);
    std::vector<char*> args = {const_cast<char*>(XK_XKRUN),          const_cast<char*>("--graph"),
                               const_cast<char*>(XK_PRELOAD_GRAPH),  const_cast<char*>("--kernel-poll-us"),
                               const_cast<char*>(kernel_poll.c_str()), const_cast<char*>("--")};
    for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execv(XK_XKRUN, args.data());
    std::perror("exec xkrun");
    return 127;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

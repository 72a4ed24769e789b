// The C API (apps/libxk, xk/xk.h) on a real stack: loopback driver -> ipv4
// -> tcp, udp, the stack talking to its own address. Every test runs in both
// modes: inline (the calling threads run the stack) and service (a thread of
// the stack's own).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <net/if.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "xk/clock.hpp"
#include "xk/stack.hpp"
#include "xk/xk.h"

namespace {

constexpr const char* kGraph =
    "loopback lo0 mtu=9000\n"
    "ipv4     ip0  below=lo0 addr=192.0.2.1/24\n"
    "udp      udp0 below=ip0\n"
    "tcp      tcp0 below=ip0 rto_min_ms=20 rto_initial_ms=100 delack_ms=1 msl_ms=100\n";

sockaddr_in addr(const char* ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}
const sockaddr* sa(const sockaddr_in& a) { return reinterpret_cast<const sockaddr*>(&a); }

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(x >> 24);
  }
  return v;
}

// How the stack runs (enum xk_mode) and idles (enum xk_idle): every test
// runs in each way.
struct Way {
  int mode;
  int idle;
};

class CApi : public ::testing::TestWithParam<Way> {
 protected:
  void SetUp() override {
    xk_stack_config c;
    xk_stack_config_init(&c);
    c.graph = kGraph;
    c.mode = GetParam().mode;
    c.idle = GetParam().idle;
    c.spin_us = 20;
    stack_ = xk_stack_create(&c);
    ASSERT_NE(stack_, nullptr) << xk_last_error();
  }
  void TearDown() override { xk_stack_destroy(stack_); }

  int tcp(int flags = 0) {
    int fd = xk_socket(stack_, AF_INET, SOCK_STREAM | flags, 0);
    EXPECT_GE(fd, 0) << xk_last_error();
    return fd;
  }
  int listener(std::uint16_t port, int backlog = 16) {
    int fd = tcp();
    sockaddr_in a = addr("192.0.2.1", port);
    EXPECT_EQ(xk_bind(fd, sa(a), sizeof a), 0) << xk_last_error();
    EXPECT_EQ(xk_listen(fd, backlog), 0) << xk_last_error();
    return fd;
  }
  // A connected pair through a non-blocking connect and epoll (works in both
  // modes from one thread).
  std::pair<int, int> pair(std::uint16_t port) {
    int l = listener(port);
    int c = tcp(SOCK_NONBLOCK);
    sockaddr_in a = addr("192.0.2.1", port);
    EXPECT_EQ(xk_connect(c, sa(a), sizeof a), -1);
    EXPECT_EQ(errno, EINPROGRESS);
    int ep = xk_epoll_create1(0);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = l;
    EXPECT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, l, &e), 0) << xk_last_error();
    e.events = EPOLLOUT;
    e.data.fd = c;
    EXPECT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, c, &e), 0) << xk_last_error();
    bool writable = false, acceptable = false;
    // Until both, or 10 s (the client is writable, level-triggered, long
    // before the server has the last ACK of the handshake).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(writable && acceptable) && std::chrono::steady_clock::now() < deadline) {
      epoll_event out[4];
      int n = xk_epoll_wait(ep, out, 4, 100);
      for (int k = 0; k < n; ++k) {
        if (out[k].data.fd == c && (out[k].events & EPOLLOUT)) writable = true;
        if (out[k].data.fd == l && (out[k].events & EPOLLIN)) acceptable = true;
      }
    }
    EXPECT_TRUE(writable && acceptable) << "writable " << writable << " acceptable " << acceptable;
    int s = xk_accept4(l, nullptr, nullptr, SOCK_NONBLOCK);
    EXPECT_GE(s, 0) << xk_last_error();
    int err = -1;
    socklen_t len = sizeof err;
    EXPECT_EQ(xk_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
    EXPECT_EQ(err, 0);
    xk_close(ep);
    xk_close(l);
    return {c, s};
  }

  xk_stack* stack_ = nullptr;
};

// Moves `data` from `from` to `to` with non-blocking calls and epoll, one
// thread; returns what arrived once `from` shut down its side.
std::vector<unsigned char> pump(int from, int to, const std::vector<unsigned char>& data) {
  int ep = xk_epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLOUT;
  e.data.fd = from;
  EXPECT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, from, &e), 0);
  e.events = EPOLLIN | EPOLLRDHUP;
  e.data.fd = to;
  EXPECT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, to, &e), 0);
  std::vector<unsigned char> got;
  std::vector<unsigned char> buf(65536);
  std::size_t sent = 0;
  bool eof = false, shut = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!eof && std::chrono::steady_clock::now() < deadline) {
    epoll_event out[2];
    int n = xk_epoll_wait(ep, out, 2, 100);
    EXPECT_GE(n, 0) << xk_last_error();
    for (int k = 0; k < n; ++k) {
      if (out[k].data.fd == from && sent < data.size()) {
        ssize_t w = xk_write(from, data.data() + sent, std::min<std::size_t>(data.size() - sent, 100000));
        if (w > 0) sent += static_cast<std::size_t>(w);
        if (w < 0) {
          EXPECT_EQ(errno, EAGAIN);
        }
      }
      if (out[k].data.fd == to) {
        for (;;) {
          ssize_t r = xk_read(to, buf.data(), buf.size());
          if (r > 0) {
            got.insert(got.end(), buf.begin(), buf.begin() + r);
            continue;
          }
          if (r == 0) eof = true;
          if (r < 0) {
            EXPECT_EQ(errno, EAGAIN) << xk_last_error();
          }
          break;
        }
      }
    }
    if (sent == data.size() && !shut) {
      EXPECT_EQ(xk_shutdown(from, SHUT_WR), 0) << xk_last_error();
      e.events = 0;
      e.data.fd = from;
      EXPECT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_MOD, from, &e), 0);
      shut = true;
    }
  }
  xk_close(ep);
  EXPECT_TRUE(eof) << "no end of stream after " << got.size() << " bytes";
  return got;
}

TEST(CApiStack, BadGraphIsEinvalWithTheLine) {
  xk_stack_config c;
  xk_stack_config_init(&c);
  c.graph = "loopback lo0\nipv4 ip0 below=nothere addr=192.0.2.1/24\n";
  errno = 0;
  EXPECT_EQ(xk_stack_create(&c), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(xk_last_error()).find("config:2"), std::string::npos) << xk_last_error();
}

TEST(CApiStack, UnknownIdleModeIsEinval) {
  xk_stack_config c;
  xk_stack_config_init(&c);
  c.graph = kGraph;
  c.idle = 7;
  errno = 0;
  EXPECT_EQ(xk_stack_create(&c), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(xk_last_error()).find("idle: spin, busy or yield"), std::string::npos) << xk_last_error();
}

TEST(CApiStack, EnvironmentWithoutAPortIsEinval) {
  ::unsetenv("XK_GRAPH");
  ::unsetenv("XK_PORT");
  ::setenv("XK_IP", "192.0.2.1/24", 1);
  errno = 0;
  EXPECT_EQ(xk_stack_create(nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(xk_last_error()).find("no port"), std::string::npos) << xk_last_error();
  ::setenv("XK_MODE", "sideways", 1);
  EXPECT_EQ(xk_stack_create(nullptr), nullptr);
  EXPECT_NE(std::string(xk_last_error()).find("XK_MODE"), std::string::npos) << xk_last_error();
  ::unsetenv("XK_MODE");
  ::setenv("XK_IDLE", "nap", 1);
  EXPECT_EQ(xk_stack_create(nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(xk_last_error()).find("XK_IDLE='nap': spin, busy or yield"), std::string::npos)
      << xk_last_error();
  ::setenv("XK_IDLE", "yield", 1);
  EXPECT_EQ(xk_stack_create(nullptr), nullptr);
  EXPECT_NE(std::string(xk_last_error()).find("no port"), std::string::npos)
      << "yield is a good XK_IDLE, so the missing port is what is wrong: " << xk_last_error();
  ::unsetenv("XK_IDLE");
  ::unsetenv("XK_IP");
}

// The ephemeral range is the graph's (as ip_local_port_range): two ports,
// two connections to one peer port, and the third finds none free.
TEST(CApiStack, EphemeralPortsComeFromTheConfiguredRange) {
  xk_stack_config c;
  xk_stack_config_init(&c);
  c.graph =
      "loopback lo0 mtu=9000\n"
      "ipv4 ip0 below=lo0 addr=192.0.2.1/24\n"
      "tcp tcp0 below=ip0 ephemeral_min=40000 ephemeral_max=40001\n";
  xk_stack* st = xk_stack_create(&c);
  ASSERT_NE(st, nullptr) << xk_last_error();
  const int l = xk_socket(st, AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = addr("192.0.2.1", 5100);
  ASSERT_EQ(xk_bind(l, sa(a), sizeof a), 0) << xk_last_error();
  ASSERT_EQ(xk_listen(l, 16), 0) << xk_last_error();
  std::vector<int> got;
  for (int i = 0; i < 2; ++i) {
    const int fd = xk_socket(st, AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(xk_connect(fd, sa(a), sizeof a), 0) << xk_last_error();
    sockaddr_in me{};
    socklen_t len = sizeof me;
    ASSERT_EQ(xk_getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len), 0);
    got.push_back(ntohs(me.sin_port));
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{40000, 40001}));
  const int third = xk_socket(st, AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(xk_connect(third, sa(a), sizeof a), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL) << xk_last_error();
  xk_stack_destroy(st);

  c.graph =
      "loopback lo0\n"
      "ipv4 ip0 below=lo0 addr=192.0.2.1/24\n"
      "tcp tcp0 below=ip0 ephemeral_min=50000 ephemeral_max=40000\n";
  EXPECT_EQ(xk_stack_create(&c), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(xk_last_error()).find("ephemeral_min=50000 is above ephemeral_max=40000"), std::string::npos)
      << xk_last_error();
}

// The descriptor limit: EMFILE past it, EBUSY when lowering it below an
// open descriptor, EINVAL out of range; XK_MAX_FDS sets it too.
TEST(CApiStack, DescriptorLimitIsConfigurable) {
  xk_stack_config c;
  xk_stack_config_init(&c);
  c.graph = kGraph;
  xk_stack* st = xk_stack_create(&c);
  ASSERT_NE(st, nullptr) << xk_last_error();
  const int before = xk_get_fd_limit();
  EXPECT_EQ(before, 1 << 20);
  const int first = xk_socket(st, AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(first, 0);
  ASSERT_EQ(xk_set_fd_limit(first + 2), 0) << xk_last_error();
  const int second = xk_socket(st, AF_INET, SOCK_DGRAM, 0);
  EXPECT_EQ(second, first + 1);
  EXPECT_EQ(xk_socket(st, AF_INET, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, EMFILE);
  EXPECT_EQ(xk_epoll_create1(0), -1);
  EXPECT_EQ(errno, EMFILE);
  EXPECT_EQ(xk_set_fd_limit(first + 1), -1);
  EXPECT_EQ(errno, EBUSY) << "descriptor " << second << " is open";
  EXPECT_EQ(xk_set_fd_limit(0), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(xk_set_fd_limit((1 << 30) + 1), -1);
  EXPECT_EQ(errno, EINVAL);
  xk_close(second);
  EXPECT_EQ(xk_set_fd_limit(first + 1), 0) << xk_last_error();
  EXPECT_EQ(xk_get_fd_limit(), first + 1);
  xk_close(first);
  ASSERT_EQ(xk_set_fd_limit(before), 0);
  xk_stack_destroy(st);

  const std::string file = "/tmp/xk-capi-graph-" + std::to_string(::getpid()) + ".conf";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(kGraph, f);
    std::fclose(f);
  }
  ::setenv("XK_GRAPH", file.c_str(), 1);
  ::setenv("XK_MAX_FDS", "0", 1);
  EXPECT_EQ(xk_stack_create(nullptr), nullptr);
  EXPECT_NE(std::string(xk_last_error()).find("XK_MAX_FDS=0"), std::string::npos) << xk_last_error();
  ::setenv("XK_MAX_FDS", "lots", 1);
  EXPECT_EQ(xk_stack_create(nullptr), nullptr);
  EXPECT_NE(std::string(xk_last_error()).find("XK_MAX_FDS='lots'"), std::string::npos) << xk_last_error();
  ::setenv("XK_MAX_FDS", "4096", 1);
  st = xk_stack_create(nullptr);
  EXPECT_NE(st, nullptr) << xk_last_error();
  EXPECT_EQ(xk_get_fd_limit(), 4096);
  if (st != nullptr) xk_stack_destroy(st);
  ASSERT_EQ(xk_set_fd_limit(before), 0);
  ::unsetenv("XK_MAX_FDS");
  ::unsetenv("XK_GRAPH");
  std::remove(file.c_str());
}

volatile sig_atomic_t g_handled = 0;
void count_signal(int) { g_handled = g_handled + 1; }

// A blocking call asleep on a service stack ends with EINTR when a signal
// handler (without SA_RESTART) runs, as the kernel's own calls do; with
// SA_RESTART, an untimed read goes on sleeping.
TEST(CApiStack, ASignalInterruptsABlockingCallWithEintr) {
  xk_stack_config c;
  xk_stack_config_init(&c);
  c.graph = kGraph;
  c.mode = XK_MODE_SERVICE;
  xk_stack* st = xk_stack_create(&c);
  ASSERT_NE(st, nullptr) << xk_last_error();
  const int l = xk_socket(st, AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = addr("192.0.2.1", 5090);
  ASSERT_EQ(xk_bind(l, sa(a), sizeof a), 0);
  ASSERT_EQ(xk_listen(l, 4), 0);
  const int cl = xk_socket(st, AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(xk_connect(cl, sa(a), sizeof a), 0) << xk_last_error();
  const int sv = xk_accept(l, nullptr, nullptr);
  ASSERT_GE(sv, 0);

  struct sigaction act{}, old{};
  act.sa_handler = count_signal;
  sigemptyset(&act.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &act, &old), 0);
  const pthread_t me = pthread_self();
  auto poke = [me](int times) {
    for (int i = 0; i < times; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      pthread_kill(me, SIGUSR2);
    }
  };
  char b;
  std::thread t1(poke, 1);
  EXPECT_EQ(xk_read(sv, &b, 1), -1);
  EXPECT_EQ(errno, EINTR);
  t1.join();
  std::thread t2(poke, 1);
  epoll_event e{};
  const int ep = xk_epoll_create1(0);
  e.events = EPOLLIN;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, sv, &e), 0);
  EXPECT_EQ(xk_epoll_wait(ep, &e, 1, 5000), -1);
  EXPECT_EQ(errno, EINTR);
  t2.join();
  // SA_RESTART: the read sleeps on through the signal and gets the byte.
  act.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGUSR2, &act, nullptr), 0);
  std::thread t3([&] {
    poke(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)xk_write(cl, "k", 1);
  });
  EXPECT_EQ(xk_read(sv, &b, 1), 1) << xk_last_error();
  t3.join();
  EXPECT_EQ(g_handled, 3);
  sigaction(SIGUSR2, &old, nullptr);
  xk_stack_destroy(st);
}

// A handler that lands between a wait's last look at the signal count and
// its futex sleep (docs/preload.md, "Signals during a spin"): the count's
// keeper raises the signal from inside its own look, after reading the
// count, so the handler runs exactly in that gap -- at the wait's first
// look, at the top of its loop, and at its last look before the sleep.
std::atomic<std::uint64_t> g_landed{0};
std::atomic<int> g_looks{0};
int g_raise_at = 0;
bool g_tell_the_wait = true;
std::uint64_t count_and_raise() noexcept {
  const std::uint64_t now = g_landed.load();
  if (++g_looks == g_raise_at) raise(SIGUSR2);
  return now;
}
void land(int) {
  g_landed.fetch_add(1);
  if (g_tell_the_wait) xk::signal_landed();
}

TEST(CApiStack, AHandlerLandingJustBeforeTheSleepEndsTheWait) {
  struct sigaction act{}, old{};
  act.sa_handler = land;
  sigemptyset(&act.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &act, &old), 0);
  xk::set_signal_count(&count_and_raise);
  // (After its deadline a wait that a handler ran in says `interrupted`
  // too: what tells a wait that slept from one that did not is the time.)
  using clock = std::chrono::steady_clock;
  for (int at = 1; at <= 3; ++at) {
    SCOPED_TRACE(at);
    xk::WaitPoint wp;
    const std::uint32_t seen = wp.gen();
    g_looks = 0;
    g_raise_at = at;
    const auto t0 = clock::now();
    EXPECT_EQ(wp.wait(seen, t0 + std::chrono::seconds(10), std::chrono::nanoseconds(0)), xk::WaitEnd::interrupted);
    EXPECT_LT(clock::now() - t0, std::chrono::seconds(5)) << "slept to the deadline";
    EXPECT_GE(g_looks.load(), at);
  }
  // The gap is real: a handler that only counts, landing after the last
  // look, leaves the wait asleep until its deadline.
  g_tell_the_wait = false;
  xk::WaitPoint wp;
  g_looks = 0;
  g_raise_at = 3;
  const auto t0 = clock::now();
  EXPECT_EQ(wp.wait(wp.gen(), t0 + std::chrono::milliseconds(100), std::chrono::nanoseconds(0)),
            xk::WaitEnd::interrupted);
  EXPECT_GE(clock::now() - t0, std::chrono::milliseconds(100));
  g_tell_the_wait = true;
  // A wait that began before the handler ran (wait_since) ends at once.
  const std::uint64_t before = xk::signal_count();
  g_raise_at = 0;
  raise(SIGUSR2);
  EXPECT_EQ(wp.wait_since(before, wp.gen(), clock::now() + std::chrono::seconds(10), std::chrono::nanoseconds(0), xk::IdleMode::spin_then_sleep),
            xk::WaitEnd::interrupted);
  xk::set_signal_count(nullptr);
  sigaction(SIGUSR2, &old, nullptr);
}

TEST(CApiStack, AdoptedStackRunsOnItsInjectedClock) {
  // A stack built in C++ with a clock of the program's own, handed to the C
  // API: its sockets are C API descriptors, and its timers follow the clock.
  xk::ManualClock clock(xk::Time(std::chrono::seconds(10)));
  xk::StackConfig c;
  c.graph = "loopback lo0\nipv4 ip0 below=lo0 addr=192.0.2.1/24\ntcp tcp0 below=ip0\nudp udp0 below=ip0\n";
  c.clock = &clock;
  auto stack = xk::Stack::create(c);
  xk::Stack* raw = stack.get();
  EXPECT_EQ(&raw->loop().clock(), &clock);
  xk_stack* h = xk::adopt_for_c_api(std::move(stack));
  ASSERT_NE(h, nullptr);
  int fd = xk_socket(h, AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  // A connect to a port nobody listens on is refused at once (loopback).
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(0xC0000201);
  to.sin_port = htons(9);
  EXPECT_EQ(xk_connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  // Timers run on the injected clock only: one armed 1 s ahead fires when
  // the clock is moved, not before.
  {
    bool fired = false;
    xk::Timer t(raw->loop().timers(), [&] { fired = true; });
    raw->call([&] { t.arm_after(std::chrono::seconds(1)); });
    raw->poll();
    EXPECT_FALSE(fired);
    clock.advance(std::chrono::seconds(1));
    raw->poll();
    EXPECT_TRUE(fired);
  }
  EXPECT_EQ(xk_close(fd), 0);
  xk_stack_destroy(h);
  EXPECT_THROW((void)xk::adopt_for_c_api(nullptr), std::invalid_argument);
}

// An inline stack of `graph` handed to the C API, and its loop's count of
// passes (what the tests of skipped passes watch).
struct CountedStack {
  xk_stack* h = nullptr;
  const xk::Counter* passes = nullptr;
};
CountedStack inline_stack(const char* graph) {
  xk::StackConfig c;
  c.graph = graph;
  c.mode = xk::StackMode::inline_calls;
  auto stack = xk::Stack::create(c);
  const xk::Counter* passes = stack->loop().counters().find("polls");
  return {xk::adopt_for_c_api(std::move(stack)), passes};
}

// poll() on a set where a socket is readable already skips the stack's pass
// when one ran moments ago (the program reads next, and its read runs the
// stack), but not for long: input that needs a pass -- here a datagram the
// fault layer holds 5 ms on the loop's timers -- still arrives while the
// program polls nothing but that set, the readable socket unread.
TEST(CApiStack, PollOfAReadableSetSkipsAFreshPassButNotForLong) {
  auto [h, passes] = inline_stack(
      "loopback lo0\nipv4 ip0 below=lo0 addr=192.0.2.1/24\n"
      "fault f0 below=ip0 delay=5\nudp udp0 below=f0\n");
  ASSERT_NE(h, nullptr);
  ASSERT_NE(passes, nullptr);
  int a = xk_socket(h, AF_INET, SOCK_DGRAM, 0);
  int b1 = xk_socket(h, AF_INET, SOCK_DGRAM, 0);
  int b2 = xk_socket(h, AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to1 = addr("192.0.2.1", 6101), to2 = addr("192.0.2.1", 6102);
  ASSERT_EQ(xk_bind(b1, sa(to1), sizeof to1), 0) << xk_last_error();
  ASSERT_EQ(xk_bind(b2, sa(to2), sizeof to2), 0) << xk_last_error();
  ASSERT_EQ(xk_sendto(a, "x", 1, 0, sa(to1), sizeof to1), 1) << xk_last_error();
  pollfd p[2] = {{b1, POLLIN, 0}, {b2, POLLIN, 0}};
  ASSERT_EQ(xk_poll(p, 1, 2000), 1);
  // Readable, a pass just ran: twenty polls in a row run (almost) none.
  const std::uint64_t before = passes->value();
  for (int i = 0; i < 20; ++i) ASSERT_EQ(xk_poll(p, 1, 0), 1);
  EXPECT_LT(passes->value() - before, 20u) << "every poll of a readable socket ran a pass";
  // The datagram to b2 is held on a timer: only a pass sees it.
  ASSERT_EQ(xk_sendto(a, "y", 1, 0, sa(to2), sizeof to2), 1) << xk_last_error();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    ASSERT_GE(xk_poll(p, 2, 0), 1);
    EXPECT_TRUE(p[0].revents & POLLIN);
    seen = (p[1].revents & POLLIN) != 0;
  }
  EXPECT_TRUE(seen) << "a readable socket kept the stack from running";
  char buf[4];
  EXPECT_EQ(xk_recv(b2, buf, sizeof buf, MSG_DONTWAIT), 1);
  EXPECT_EQ(buf[0], 'y');
  for (int fd : {a, b1, b2}) EXPECT_EQ(xk_close(fd), 0);
  xk_stack_destroy(h);
}

// A send with room, right after a pass, runs no pass before it and only
// flushes what it queued; a program that only sends still gets a pass
// (its ACKs, ARP replies) at least every 50 us.
TEST(CApiStack, SendWithRoomSkipsAFreshPassButNotForLong) {
  auto [h, passes] = inline_stack(kGraph);
  ASSERT_NE(h, nullptr);
  ASSERT_NE(passes, nullptr);
  int l = xk_socket(h, AF_INET, SOCK_STREAM, 0);
  sockaddr_in at = addr("192.0.2.1", 6201);
  ASSERT_EQ(xk_bind(l, sa(at), sizeof at), 0) << xk_last_error();
  ASSERT_EQ(xk_listen(l, 4), 0) << xk_last_error();
  int cl = xk_socket(h, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_EQ(xk_connect(cl, sa(at), sizeof at), -1);
  ASSERT_EQ(errno, EINPROGRESS);
  pollfd pc{cl, POLLOUT, 0};
  ASSERT_EQ(xk_poll(&pc, 1, 2000), 1);
  int sv = xk_accept4(l, nullptr, nullptr, 0);
  ASSERT_GE(sv, 0) << xk_last_error();
  int one = 1;
  ASSERT_EQ(xk_setsockopt(cl, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
  ASSERT_EQ(xk_poll(&pc, 1, 2000), 1);  // write readiness alone: a pass ran
  std::uint64_t before = passes->value();
  for (int i = 0; i < 20; ++i) ASSERT_EQ(xk_send(cl, "z", 1, MSG_DONTWAIT), 1) << xk_last_error();
  EXPECT_LT(passes->value() - before, 20u) << "every send with room ran a pass";
  // What they queued went out: the server has all twenty bytes.
  char buf[32];
  std::size_t got = 0;
  while (got < 20) {
    const ssize_t n = xk_recv(sv, buf + got, sizeof buf - got, 0);
    ASSERT_GT(n, 0) << xk_last_error();
    got += static_cast<std::size_t>(n);
  }
  EXPECT_EQ(got, 20u);
  // A program that only sends: passes still run.
  before = passes->value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (passes->value() == before && std::chrono::steady_clock::now() < deadline) {
    (void)xk_send(cl, "z", 1, MSG_DONTWAIT);
  }
  EXPECT_GT(passes->value(), before) << "sends with room kept the stack from running";
  for (int fd : {cl, sv, l}) EXPECT_EQ(xk_close(fd), 0);
  xk_stack_destroy(h);
}

// A hybrid stack with a 1 ms hand_back and a 20 us spin, owned by the C
// API; `counter` reads the loop's table under the stack.
struct HybridStack {
  xk::Stack* raw = nullptr;
  xk_stack* h = nullptr;
  HybridStack() {
    xk::StackConfig c;
    c.graph = kGraph;
    c.mode = xk::StackMode::hybrid;
    c.hand_back = std::chrono::milliseconds(1);
    c.loop.spin = std::chrono::microseconds(20);
    auto stack = xk::Stack::create(c);
    raw = stack.get();
    h = xk::adopt_for_c_api(std::move(stack));
  }
  ~HybridStack() { xk_stack_destroy(h); }
  std::uint64_t counter(const char* name) {
    return raw->call([&] {
      raw->sync_counters();
      return raw->loop().counters().value(name);
    });
  }
};

// A hybrid stack's thread looks whether the calls stopped after hand_back,
// and less often while they keep coming (each look is a wake-up on some
// program thread's CPU): here a pass every ~20 us for 300 ms with a 1 ms
// hand_back, which looked about 300 times when the interval was fixed. And
// when the calls stop it still takes the stack over: a timer fires with
// nobody calling.
TEST(CApiStack, HybridThreadLooksLessOftenWhileCallsComeAndTakesOverWhenTheyStop) {
  HybridStack hs;
  ASSERT_NE(hs.h, nullptr);
  xk::Stack* raw = hs.raw;
  auto counter = [&](const char* name) { return hs.counter(name); };
  const std::uint64_t looks0 = counter("hand_back_looks");
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < end) {
    raw->poll();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  const std::uint64_t looks = counter("hand_back_looks") - looks0;
  EXPECT_GE(looks, 5u) << "the thread stopped looking";
  EXPECT_LT(looks, 150u) << "the thread looked every hand_back while the calls kept coming";

  const std::uint64_t takeovers0 = counter("takeovers");
  std::atomic<bool> fired{false};
  std::optional<xk::Timer> t;  // made, armed and destroyed under the stack: its thread runs the wheel
  raw->call([&] {
    t.emplace(raw->loop().timers(), [&] { fired.store(true); });
    t->arm_after(std::chrono::milliseconds(2));
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!fired.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(fired.load()) << "nobody ran the stack after the calls stopped";
  EXPECT_GT(counter("takeovers"), takeovers0);
  raw->call([&] { t.reset(); });
}

// The hybrid thread sleeps in the loop without the stack's lock: a call
// that comes then takes the stack at once and ends that sleep for it
// (sleep_takeovers), instead of waking the thread and waiting for it to let
// go (some 60 us on a VM). The thread, woken as the call leaves, parks, and
// runs the stack again once the calls stop (a timer armed by the call fires
// with nobody calling), and the stack still shuts down.
TEST(CApiStack, HybridCallTakesTheStackFromItsSleepingThread) {
  HybridStack hs;
  ASSERT_NE(hs.h, nullptr);
  xk::Stack* raw = hs.raw;
  auto counter = [&](const char* name) { return hs.counter(name); };
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    const std::uint64_t before = counter("sleep_takeovers");
    // Idle long enough for the thread to take over, spin and sleep (it
    // looks within 8 hand_backs); then one call, which finds it asleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    const std::uint64_t sleeps = counter("sleeps");
    EXPECT_GE(sleeps, 1u);
    EXPECT_EQ(counter("sleep_takeovers"), before + 1) << "the call did not find the thread asleep";
    std::atomic<bool> fired{false};
    std::optional<xk::Timer> t;
    raw->call([&] {
      t.emplace(raw->loop().timers(), [&] { fired.store(true); });
      t->arm_after(std::chrono::milliseconds(5));
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!fired.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(fired.load()) << "nobody ran the stack after the calls stopped";
    raw->call([&] { t.reset(); });
  }
}

// A caller asleep in xk_epoll_psleep on a hybrid stack sleeps on the
// stack's wake-ups too and runs the stack itself when one comes: a timer
// that falls due in its sleep fires on the caller's own thread, and the
// stack's thread stays parked (it would cost a second wake-up).
TEST(CApiStack, ACallerSleepingBesideAHybridStackRunsItItself) {
  HybridStack hs;
  ASSERT_NE(hs.h, nullptr);
  xk::Stack* raw = hs.raw;
  const int l = xk_socket(hs.h, AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = addr("192.0.2.1", 5095);
  ASSERT_EQ(xk_bind(l, sa(a), sizeof a), 0);
  ASSERT_EQ(xk_listen(l, 4), 0);
  const int ep = xk_epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLIN;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, l, &e), 0);
  const std::uint64_t beside0 = hs.counter("beside_sleeps");
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    std::atomic<bool> fired{false};
    std::thread::id on;
    std::optional<xk::Timer> t;
    raw->call([&] {
      t.emplace(raw->loop().timers(), [&] {
        on = std::this_thread::get_id();
        fired.store(true);
      });
      t->arm_after(std::chrono::milliseconds(5));
    });
    // (It sleeps on after the timer: the set has nothing to report.)
    const auto t0 = std::chrono::steady_clock::now();
    const timespec ms20{0, 20'000'000};
    while (!fired.load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
      ASSERT_EQ(xk_epoll_psleep(ep, nullptr, 0, &ms20, nullptr), 0) << xk_last_error();
    }
    ASSERT_TRUE(fired.load());
    EXPECT_EQ(on, std::this_thread::get_id()) << "the stack's thread ran the timer, not the sleeping caller";
    raw->call([&] { t.reset(); });
  }
  EXPECT_GE(hs.counter("beside_sleeps"), beside0 + 3);
  xk_close(ep);
  xk_close(l);
}

// The whole counter table, as xkrun --stats writes it at exit: a header,
// then "owner counter value" lines, the graph's and the loop's ("stack").
TEST(CApiStack, WriteCountersGivesTheWholeTable) {
  xk_stack_config c;
  xk_stack_config_init(&c);
  c.graph = kGraph;
  xk_stack* st = xk_stack_create(&c);
  ASSERT_NE(st, nullptr) << xk_last_error();
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_EQ(xk_stack_write_counters(st, p[1]), 0) << xk_last_error();
  ::close(p[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  EXPECT_EQ(text.substr(0, text.find('\n')).find("owner"), 0u) << text.substr(0, 200);
  for (const char* want : {"\ntcp0 ", "\nudp0 ", "\nip0 ", "\nlo0 ", "\nstack "}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << " missing in:\n" << text.substr(0, 400);
  }
  EXPECT_NE(text.find(" polls "), std::string::npos);
  EXPECT_EQ(xk_stack_write_counters(st, -1), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(xk_stack_write_counters(nullptr, 1), -1);
  EXPECT_EQ(errno, EINVAL);
  xk_stack_destroy(st);
}

TEST(CApiStack, BadDescriptorsAndArguments) {
  char b[4];
  EXPECT_EQ(xk_read(12345, b, 4), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(xk_close(-1), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(xk_socket(nullptr, AF_INET, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  int ep = xk_epoll_create1(0);
  ASSERT_GE(ep, 0);
  EXPECT_EQ(xk_read(ep, b, 4), -1);
  EXPECT_EQ(errno, ENOTSOCK);
  epoll_event out[1];
  EXPECT_EQ(xk_epoll_wait(ep, out, 0, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(xk_epoll_wait(ep, out, 1, 10), 0);  // nothing watched: times out
  EXPECT_EQ(xk_close(ep), 0);
}

TEST_P(CApi, TheLastErrorNamesTheCallAndWhatWentWrong) {
  int fd = tcp();
  char b[4];
  ASSERT_EQ(xk_read(fd, b, 4), -1);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_STREQ(xk_last_error(), "recv: not connected");
  // Asked again, the same text; a later failure replaces it.
  EXPECT_STREQ(xk_last_error(), "recv: not connected");
  EXPECT_EQ(xk_close(-1), -1);
  EXPECT_EQ(std::string(xk_last_error()).find("recv"), std::string::npos) << xk_last_error();
  auto [c, s] = pair(5091);
  ASSERT_EQ(xk_read(s, b, 4), -1);  // non-blocking, nothing there
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_STREQ(xk_last_error(), "recv: would block");
  // One failure after a message made from text, and back.
  EXPECT_EQ(xk_close(-1), -1);
  const std::string closed = xk_last_error();
  ASSERT_EQ(xk_read(s, b, 4), -1);
  EXPECT_STREQ(xk_last_error(), "recv: would block");
  EXPECT_NE(closed, xk_last_error());
  for (int x : {fd, c, s}) xk_close(x);
}

TEST_P(CApi, SocketArgumentsAreChecked) {
  EXPECT_EQ(xk_socket(stack_, AF_UNIX, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  EXPECT_EQ(xk_socket(stack_, AF_INET, SOCK_RAW, 0), -1);
  EXPECT_EQ(errno, ESOCKTNOSUPPORT);
  EXPECT_EQ(xk_socket(stack_, AF_INET, SOCK_STREAM, IPPROTO_UDP), -1);
  EXPECT_EQ(errno, EPROTONOSUPPORT);
  int fd = tcp();
  char b[4];
  EXPECT_EQ(xk_read(fd, b, 4), -1);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_EQ(xk_write(fd, b, 4), -1);
  EXPECT_EQ(errno, ENOTCONN);
  sockaddr_in6 six{};
  six.sin6_family = AF_INET6;
  EXPECT_EQ(xk_connect(fd, reinterpret_cast<sockaddr*>(&six), sizeof six), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  EXPECT_EQ(xk_setsockopt(fd, SOL_SOCKET, SO_BROADCAST + 1000, b, 4), -1);
  EXPECT_EQ(errno, ENOPROTOOPT);
  const int on = 1;
  EXPECT_EQ(xk_setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on), -1) << "IPv6's options on an AF_INET socket";
  EXPECT_EQ(errno, ENOPROTOOPT);
  EXPECT_EQ(xk_setsockopt(fd, IPPROTO_IP, IP_TTL + 1000, &on, sizeof on), -1);
  EXPECT_EQ(errno, ENOPROTOOPT);
  EXPECT_EQ(xk_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, b, 2), -1) << "an int's value two bytes long";
  EXPECT_EQ(errno, EINVAL);
  const int dgram = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(dgram, 0);
  EXPECT_EQ(xk_setsockopt(dgram, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on), -1) << "TCP_NODELAY is a stream's";
  EXPECT_EQ(errno, ENOPROTOOPT);
  EXPECT_EQ(xk_setsockopt(dgram, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on), -1);
  EXPECT_EQ(errno, ENOPROTOOPT);
  EXPECT_EQ(xk_close(dgram), 0);
  int type = 0;
  socklen_t len = sizeof type;
  EXPECT_EQ(xk_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len), 0);
  EXPECT_EQ(type, SOCK_STREAM);
  EXPECT_EQ(xk_fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(xk_fcntl(fd, F_SETFL, O_NONBLOCK), 0);
  EXPECT_NE(xk_fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(xk_close(fd), 0);
  EXPECT_EQ(xk_close(fd), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST_P(CApi, StreamThroughEpollArrivesIntactAndEnds) {
  auto [c, s] = pair(5001);
  auto data = pattern(3 << 20, 1);
  EXPECT_EQ(pump(c, s, data), data);
  // And back the other way on the same connection (half-close kept it open).
  auto back = pattern(200000, 2);
  EXPECT_EQ(pump(s, c, back), back);
  EXPECT_EQ(xk_close(c), 0);
  EXPECT_EQ(xk_close(s), 0);
}

// The stack's counters through the C API: a connection's two ends in one
// stack, the gauges before and after close, and clear errors for bad names.
TEST_P(CApi, CountersAndGaugesOfTheStack) {
  unsigned long long v = 99;
  ASSERT_EQ(xk_stack_counter(stack_, "tcp0", "connections", &v), 0) << xk_last_error();
  EXPECT_EQ(v, 0u);
  auto [c, s] = pair(5009);
  ASSERT_EQ(xk_stack_counter(stack_, "tcp0", "connections", &v), 0);
  EXPECT_EQ(v, 2u) << "both ends of the connection are in this stack";
  ASSERT_EQ(xk_stack_counter(stack_, "tcp0", "state:ESTABLISHED", &v), 0);
  EXPECT_EQ(v, 2u);
  ASSERT_EQ(xk_stack_counter(stack_, "tcp0", "state:TIME-WAIT", &v), 0);
  EXPECT_EQ(v, 0u);
  ASSERT_EQ(xk_stack_counter(stack_, "tcp0", "active_opens", &v), 0);
  EXPECT_EQ(v, 1u);
  ASSERT_EQ(xk_stack_counter(stack_, "tcp0", "passive_opens", &v), 0);
  EXPECT_EQ(v, 1u);
  ASSERT_EQ(xk_stack_counter(stack_, "ip0", "tx_loopback", &v), 0) << xk_last_error();
  EXPECT_GE(v, 3u) << "the handshake went to our own address, looped back in IP";
  EXPECT_EQ(xk_close(c), 0);
  EXPECT_EQ(xk_close(s), 0);
  // The one that closed first waits in TIME-WAIT (2 MSL = 200 ms here),
  // then the table is empty.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    (void)xk_stack_poll(stack_);
    ASSERT_EQ(xk_stack_counter(stack_, "tcp0", "connections", &v), 0);
  } while (v != 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(v, 0u);
  ASSERT_EQ(xk_stack_counter(stack_, "tcp0", "time_wait", &v), 0);
  EXPECT_EQ(v, 0u);

  v = 7;
  EXPECT_EQ(xk_stack_counter(stack_, "tcp9", "established", &v), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_NE(std::string(xk_last_error()).find("tcp9.established"), std::string::npos) << xk_last_error();
  EXPECT_EQ(xk_stack_counter(stack_, "tcp0", "no_such_counter", &v), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(v, 7u) << "a failed call leaves *value alone";
  EXPECT_EQ(xk_stack_counter(stack_, "tcp0", "established", nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(xk_stack_counter(nullptr, "tcp0", "established", &v), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_P(CApi, NamesOfBothEnds) {
  auto [c, s] = pair(5002);
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ASSERT_EQ(xk_getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  EXPECT_EQ(ntohs(a.sin_port), 5002);
  std::uint16_t server_port = ntohs(a.sin_port);
  ASSERT_EQ(xk_getpeername(c, reinterpret_cast<sockaddr*>(&a), &len), 0);
  EXPECT_EQ(ntohs(a.sin_port), server_port);
  ASSERT_EQ(xk_getsockname(c, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::uint16_t client_port = ntohs(a.sin_port);
  EXPECT_GE(client_port, 49152);
  ASSERT_EQ(xk_getpeername(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  EXPECT_EQ(ntohs(a.sin_port), client_port);
  EXPECT_EQ(a.sin_addr.s_addr, htonl(0xC0000201));
  xk_tcp_info info{};
  ASSERT_EQ(xk_get_tcp_info(c, &info), 0);
  EXPECT_EQ(info.state, 4);  // ESTABLISHED
  EXPECT_TRUE(info.sack && info.timestamps);
  EXPECT_GT(info.mss, 1000);
  xk_close(c);
  xk_close(s);
}

TEST_P(CApi, BlockingCallsAcrossThreads) {
  int l = listener(5003);
  auto data = pattern(2 << 20, 3);
  std::vector<unsigned char> got;
  std::thread server([&] {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    int s = xk_accept(l, reinterpret_cast<sockaddr*>(&peer), &len);
    ASSERT_GE(s, 0) << xk_last_error();
    EXPECT_EQ(len, sizeof peer);
    std::vector<unsigned char> buf(100000);
    for (;;) {
      ssize_t r = xk_read(s, buf.data(), buf.size());
      ASSERT_GE(r, 0) << xk_last_error();
      if (r == 0) break;
      got.insert(got.end(), buf.begin(), buf.begin() + r);
    }
    const char bye[] = "bye";
    EXPECT_EQ(xk_write(s, bye, 3), 3);
    EXPECT_EQ(xk_close(s), 0);
  });
  int c = tcp();
  sockaddr_in a = addr("192.0.2.1", 5003);
  ASSERT_EQ(xk_connect(c, sa(a), sizeof a), 0) << xk_last_error();
  // writev: a blocking write takes everything, in pieces the iovecs give.
  iovec iov[3] = {{data.data(), 1}, {data.data() + 1, 1000}, {data.data() + 1001, data.size() - 1001}};
  EXPECT_EQ(xk_writev(c, iov, 3), static_cast<ssize_t>(data.size())) << xk_last_error();
  EXPECT_EQ(xk_shutdown(c, SHUT_WR), 0);
  EXPECT_EQ(xk_write(c, "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  char reply[8] = {};
  EXPECT_EQ(xk_recv(c, reply, sizeof reply, MSG_WAITALL), 3);  // 3 then end of stream
  EXPECT_STREQ(reply, "bye");
  server.join();
  EXPECT_EQ(got, data);
  EXPECT_EQ(xk_close(c), 0);
  EXPECT_EQ(xk_close(l), 0);
}

TEST_P(CApi, ReadvFillsBuffersInOrder) {
  auto [c, s] = pair(5004);
  const char msg[] = "abcdefghij";
  ASSERT_EQ(xk_write(c, msg, 10), 10);
  char a[3], b[7];
  iovec iov[2] = {{a, 3}, {b, 7}};
  ssize_t n = 0;
  for (int i = 0; i < 1000 && n <= 0; ++i) {
    n = xk_readv(s, iov, 2);
    if (n < 0) {
      ASSERT_EQ(errno, EAGAIN);
      xk_stack_poll(stack_);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  ASSERT_EQ(n, 10);
  EXPECT_EQ(std::string(a, 3), "abc");
  EXPECT_EQ(std::string(b, 7), "defghij");
  xk_close(c);
  xk_close(s);
}

TEST_P(CApi, ConnectToNobodyIsRefused) {
  int c = tcp();
  sockaddr_in a = addr("192.0.2.1", 5999);
  EXPECT_EQ(xk_connect(c, sa(a), sizeof a), -1);
  EXPECT_EQ(errno, ECONNREFUSED) << xk_last_error();
  xk_close(c);
  // Non-blocking: EINPROGRESS, then SO_ERROR says why.
  c = tcp(SOCK_NONBLOCK);
  EXPECT_EQ(xk_connect(c, sa(a), sizeof a), -1);
  EXPECT_EQ(errno, EINPROGRESS);
  pollfd p{c, POLLOUT, 0};
  EXPECT_EQ(xk_poll(&p, 1, 2000), 1);
  EXPECT_NE(p.revents & (POLLERR | POLLHUP), 0);
  int err = 0;
  socklen_t len = sizeof err;
  EXPECT_EQ(xk_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, ECONNREFUSED);
  xk_close(c);
}

TEST_P(CApi, PortsInUseAndReuseAddr) {
  int l = listener(5005);
  int other = tcp();
  sockaddr_in a = addr("192.0.2.1", 5005);
  EXPECT_EQ(xk_bind(other, sa(a), sizeof a), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  sockaddr_in any = addr("0.0.0.0", 5005);
  EXPECT_EQ(xk_bind(other, sa(any), sizeof any), -1);  // the wildcard overlaps
  EXPECT_EQ(errno, EADDRINUSE);
  xk_close(other);
  xk_close(l);

  // An active close leaves TIME-WAIT on the client's port: binding it again
  // needs SO_REUSEADDR.
  auto [c, s] = pair(5006);
  sockaddr_in mine{};
  socklen_t len = sizeof mine;
  ASSERT_EQ(xk_getsockname(c, reinterpret_cast<sockaddr*>(&mine), &len), 0);
  xk_close(c);
  char b[8];
  // The server reads the end of stream and closes too.
  for (int i = 0; i < 2000; ++i) {
    ssize_t r = xk_read(s, b, sizeof b);
    if (r == 0) break;
    ASSERT_EQ(errno, EAGAIN);
    xk_stack_poll(stack_);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  xk_close(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  int again = tcp();
  EXPECT_EQ(xk_bind(again, sa(mine), sizeof mine), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  int one = 1;
  ASSERT_EQ(xk_setsockopt(again, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
  EXPECT_EQ(xk_bind(again, sa(mine), sizeof mine), 0) << xk_last_error();
  // Bound but not listening still holds the port.
  int third = tcp();
  ASSERT_EQ(xk_setsockopt(third, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
  EXPECT_EQ(xk_bind(third, sa(mine), sizeof mine), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  xk_close(third);
  xk_close(again);
}

TEST_P(CApi, BoundClientConnectsFromItsPort) {
  int l = listener(5007);
  int c = tcp();
  sockaddr_in from = addr("192.0.2.1", 40000);
  ASSERT_EQ(xk_bind(c, sa(from), sizeof from), 0) << xk_last_error();
  sockaddr_in a = addr("192.0.2.1", 5007);
  ASSERT_EQ(xk_connect(c, sa(a), sizeof a), 0) << xk_last_error();
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  int s = xk_accept(l, reinterpret_cast<sockaddr*>(&peer), &len);
  ASSERT_GE(s, 0);
  EXPECT_EQ(ntohs(peer.sin_port), 40000);
  xk_close(s);
  xk_close(c);
  xk_close(l);
}

TEST_P(CApi, LingerZeroResetsThePeer) {
  auto [c, s] = pair(5008);
  linger lg{1, 0};
  ASSERT_EQ(xk_setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  ASSERT_EQ(xk_close(c), 0);
  pollfd p{s, POLLIN, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  char b[4];
  ASSERT_EQ(xk_fcntl(s, F_SETFL, 0), 0);
  EXPECT_EQ(xk_read(s, b, 4), -1);
  EXPECT_EQ(errno, ECONNRESET);
  xk_close(s);
}

TEST_P(CApi, LingerWithTimeoutWaitsForTheData) {
  auto [c, s] = pair(5009);
  linger lg{1, 5};
  ASSERT_EQ(xk_setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  auto data = pattern(500000, 9);
  ASSERT_EQ(xk_fcntl(c, F_SETFL, 0), 0);
  ASSERT_EQ(xk_write(c, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  // The reader drains on another thread while close() lingers.
  std::vector<unsigned char> got;
  std::thread reader([&, s = s] {
    ASSERT_EQ(xk_fcntl(s, F_SETFL, 0), 0);
    std::vector<unsigned char> buf(65536);
    for (;;) {
      ssize_t r = xk_read(s, buf.data(), buf.size());
      ASSERT_GE(r, 0) << xk_last_error();
      if (r == 0) break;
      got.insert(got.end(), buf.begin(), buf.begin() + r);
    }
  });
  ASSERT_EQ(xk_close(c), 0);
  reader.join();
  EXPECT_EQ(got, data);
  xk_close(s);
}

TEST_P(CApi, ReceiveTimeoutAndCloseFromAnotherThread) {
  auto [c, s] = pair(5010);
  ASSERT_EQ(xk_fcntl(s, F_SETFL, 0), 0);
  timeval tv{0, 50'000};
  ASSERT_EQ(xk_setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  char b[4];
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(xk_read(s, b, 4), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(45));
  if (GetParam().mode != XK_MODE_INLINE) {
    // A reader blocked with no timeout wakes with EBADF when its socket is
    // closed by another thread.
    tv = timeval{0, 0};
    ASSERT_EQ(xk_setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    std::atomic<int> result{1}, err{0};
    std::thread reader([&, s = s] {
      result = static_cast<int>(xk_read(s, b, 4));
      err = errno;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(result.load(), 1);  // still blocked
    xk_close(s);
    reader.join();
    EXPECT_EQ(result.load(), -1);
    EXPECT_EQ(err.load(), EBADF);
  } else {
    xk_close(s);
  }
  xk_close(c);
}

TEST_P(CApi, EpollLevelEdgeAndOneShot) {
  auto [c, s] = pair(5011);
  int ep = xk_epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u64 = 7;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, s, &e), 0);
  EXPECT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, s, &e), -1);
  EXPECT_EQ(errno, EEXIST);
  epoll_event out[4];
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 0);  // nothing to read yet
  ASSERT_EQ(xk_write(c, "hello", 5), 5);
  ASSERT_EQ(xk_epoll_wait(ep, out, 4, 2000), 1);
  EXPECT_EQ(out[0].data.u64, 7u);
  EXPECT_EQ(out[0].events, static_cast<std::uint32_t>(EPOLLIN));
  // Level-triggered: still readable, still reported.
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 1);
  // Edge-triggered: once for the data there is, then not until more comes.
  e.events = EPOLLIN | EPOLLET;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_MOD, s, &e), 0);
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 1);
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 0);
  ASSERT_EQ(xk_write(c, "more", 4), 4);
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 2000), 1);
  // One-shot: once, then disabled until MOD re-arms it.
  e.events = EPOLLIN | EPOLLONESHOT;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_MOD, s, &e), 0);
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 1);
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 0);
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_MOD, s, &e), 0);
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 1);
  // Drained: nothing. Peer closes: readable (end of stream) and RDHUP.
  char b[16];
  EXPECT_EQ(xk_read(s, b, sizeof b), 9);
  e.events = EPOLLIN | EPOLLRDHUP;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_MOD, s, &e), 0);
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 0);
  xk_close(c);
  ASSERT_EQ(xk_epoll_wait(ep, out, 4, 2000), 1);
  EXPECT_EQ(out[0].events & (EPOLLIN | EPOLLRDHUP), static_cast<std::uint32_t>(EPOLLIN | EPOLLRDHUP));
  // A closed socket leaves the set by itself.
  xk_close(s);
  EXPECT_EQ(xk_epoll_wait(ep, out, 4, 0), 0);
  EXPECT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_DEL, s, nullptr), -1);
  EXPECT_EQ(errno, EBADF);
  xk_close(ep);
}

TEST_P(CApi, OptionsRoundTrip) {
  int fd = tcp();
  int v = 1;
  socklen_t len = sizeof v;
  ASSERT_EQ(xk_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v), 0);
  v = 0;
  ASSERT_EQ(xk_getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
  EXPECT_EQ(v, 1);
  v = 1 << 22;
  ASSERT_EQ(xk_setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v), 0);
  ASSERT_EQ(xk_getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len), 0);
  EXPECT_EQ(v, 1 << 23) << "read back doubled, as Linux does";
  v = 0;
  ASSERT_EQ(xk_setsockopt(fd, IPPROTO_TCP, XK_TCP_CHECKSUM, &v, sizeof v), 0);
  v = 3;
  ASSERT_EQ(xk_getsockopt(fd, IPPROTO_TCP, XK_TCP_CHECKSUM, &v, &len), 0);
  EXPECT_EQ(v, 0);
  v = 4;
  EXPECT_EQ(xk_setsockopt(fd, IPPROTO_TCP, XK_TCP_CHECKSUM, &v, sizeof v), -1);
  EXPECT_EQ(errno, EINVAL);
  linger lg{1, 3};
  ASSERT_EQ(xk_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  lg = {};
  len = sizeof lg;
  ASSERT_EQ(xk_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &len), 0);
  EXPECT_EQ(lg.l_onoff, 1);
  EXPECT_EQ(lg.l_linger, 3);
  timeval tv{1, 500000};
  ASSERT_EQ(xk_setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
  tv = {};
  len = sizeof tv;
  ASSERT_EQ(xk_getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len), 0);
  EXPECT_EQ(tv.tv_sec, 1);
  EXPECT_EQ(tv.tv_usec, 500000);
  xk_close(fd);
}

// The TCP options programs set: each reads back what was set
// (or the stack's default before), and out-of-range values are EINVAL.
TEST_P(CApi, TcpOptionsRoundTripAndRefuseBadValues) {
  int fd = tcp();
  auto get = [&](int name) {
    int v = -1;
    socklen_t len = sizeof v;
    EXPECT_EQ(xk_getsockopt(fd, IPPROTO_TCP, name, &v, &len), 0) << name << ": " << xk_last_error();
    return v;
  };
  auto set = [&](int name, int v) { return xk_setsockopt(fd, IPPROTO_TCP, name, &v, sizeof v); };
  EXPECT_EQ(get(TCP_KEEPIDLE), 7200) << "the stack's 2 h";
  EXPECT_EQ(get(TCP_KEEPINTVL), 75);
  EXPECT_EQ(get(TCP_KEEPCNT), 9);
  EXPECT_EQ(get(TCP_USER_TIMEOUT), 0);
  EXPECT_EQ(get(TCP_QUICKACK), 1);
  EXPECT_EQ(get(TCP_DEFER_ACCEPT), 0);
  ASSERT_EQ(set(TCP_KEEPIDLE, 30), 0);
  ASSERT_EQ(set(TCP_KEEPINTVL, 5), 0);
  ASSERT_EQ(set(TCP_KEEPCNT, 4), 0);
  ASSERT_EQ(set(TCP_USER_TIMEOUT, 2500), 0);
  ASSERT_EQ(set(TCP_MAXSEG, 1200), 0);
  ASSERT_EQ(set(TCP_QUICKACK, 0), 0);
  ASSERT_EQ(set(TCP_DEFER_ACCEPT, 10), 0);
  EXPECT_EQ(get(TCP_KEEPIDLE), 30);
  EXPECT_EQ(get(TCP_KEEPINTVL), 5);
  EXPECT_EQ(get(TCP_KEEPCNT), 4);
  EXPECT_EQ(get(TCP_USER_TIMEOUT), 2500);
  EXPECT_EQ(get(TCP_MAXSEG), 1200) << "before connect: what was asked";
  EXPECT_EQ(get(TCP_QUICKACK), 0);
  EXPECT_EQ(get(TCP_DEFER_ACCEPT), 10);
  for (auto [name, bad] : {std::pair{TCP_KEEPIDLE, 0}, std::pair{TCP_KEEPINTVL, 40000}, std::pair{TCP_KEEPCNT, 0},
                           std::pair{TCP_KEEPCNT, 128}, std::pair{TCP_USER_TIMEOUT, -1}, std::pair{TCP_MAXSEG, 50},
                           std::pair{TCP_MAXSEG, 40000}}) {
    EXPECT_EQ(set(name, bad), -1) << name << " = " << bad;
    EXPECT_EQ(errno, EINVAL);
  }
  EXPECT_EQ(set(TCP_MAXSEG, 0), 0) << "0 takes TCP_MAXSEG back";
  EXPECT_EQ(get(TCP_MAXSEG), 536);
  xk_close(fd);
}

// A connection's TCP_MAXSEG holds on the wire, and its keepalive settings
// are inherited by what a listener accepts.
TEST_P(CApi, MaxSegmentSetBeforeConnectIsTheMssInUse) {
  int l = listener(5013);
  int idle = 45;
  ASSERT_EQ(xk_setsockopt(l, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle), 0);
  int c = tcp();
  int mss = 700;
  ASSERT_EQ(xk_setsockopt(c, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss), 0);
  sockaddr_in a = addr("192.0.2.1", 5013);
  std::thread t([&] { EXPECT_EQ(xk_connect(c, sa(a), sizeof a), 0) << xk_last_error(); });
  int s = xk_accept(l, nullptr, nullptr);
  t.join();
  ASSERT_GE(s, 0);
  int v = 0;
  socklen_t len = sizeof v;
  ASSERT_EQ(xk_getsockopt(c, IPPROTO_TCP, TCP_MAXSEG, &v, &len), 0);
  EXPECT_EQ(v, 700);
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_TCP, TCP_MAXSEG, &v, &len), 0);
  EXPECT_EQ(v, 700) << "the server sends no more than the client offered";
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0);
  EXPECT_EQ(v, 45);
  xk_close(c);
  xk_close(s);
  xk_close(l);
}

// TCP_MAXSEG on a listener (set before listen() or after) is what its
// SYN-ACKs offer: the client then sends with no more, and so does the
// accepted connection.
TEST_P(CApi, MaxSegmentOnAListenerIsOfferedInItsSynAck) {
  for (const bool before_listen : {true, false}) {
    SCOPED_TRACE(before_listen ? "set before listen()" : "set after listen()");
    const std::uint16_t port = before_listen ? 5061 : 5062;
    int l = tcp();
    sockaddr_in a = addr("192.0.2.1", port);
    ASSERT_EQ(xk_bind(l, sa(a), sizeof a), 0) << xk_last_error();
    int mss = 600;
    if (before_listen) {
      ASSERT_EQ(xk_setsockopt(l, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss), 0);
    }
    ASSERT_EQ(xk_listen(l, 16), 0) << xk_last_error();
    if (!before_listen) {
      ASSERT_EQ(xk_setsockopt(l, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss), 0);
    }
    int c = tcp();
    std::thread t([&] { EXPECT_EQ(xk_connect(c, sa(a), sizeof a), 0) << xk_last_error(); });
    int s = xk_accept(l, nullptr, nullptr);
    t.join();
    ASSERT_GE(s, 0) << xk_last_error();
    int v = 0;
    socklen_t len = sizeof v;
    ASSERT_EQ(xk_getsockopt(c, IPPROTO_TCP, TCP_MAXSEG, &v, &len), 0);
    EXPECT_EQ(v, 600) << "the client sends no more than the SYN-ACK offered";
    ASSERT_EQ(xk_getsockopt(s, IPPROTO_TCP, TCP_MAXSEG, &v, &len), 0);
    EXPECT_EQ(v, 600);
    xk_close(c);
    xk_close(s);
    xk_close(l);
  }
}

// getsockopt(TCP_INFO) fills Linux's struct tcp_info: glibc's part of it
// (what <netinet/tcp.h> declares) and the fields after it.
TEST_P(CApi, TcpInfoInLinuxLayout) {
  auto [c, s] = pair(5014);
  auto data = pattern(100000, 6);
  EXPECT_EQ(pump(c, s, data), data);
  tcp_info ti{};
  socklen_t len = sizeof ti;
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &len), 0) << xk_last_error();
  EXPECT_EQ(len, sizeof ti);
  EXPECT_EQ(ti.tcpi_state, 8) << "CLOSE-WAIT, in Linux's numbering (the client shut down)";
  EXPECT_EQ(ti.tcpi_options & (TCPI_OPT_SACK | TCPI_OPT_TIMESTAMPS | TCPI_OPT_WSCALE),
            TCPI_OPT_SACK | TCPI_OPT_TIMESTAMPS | TCPI_OPT_WSCALE);
  EXPECT_GT(ti.tcpi_snd_mss, 500u);
  EXPECT_GT(ti.tcpi_rto, 0u);
  // Past glibc's struct: Linux's tcpi_bytes_received (a u64 at offset 128).
  std::array<unsigned char, 512> whole{};
  len = sizeof whole;
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_TCP, TCP_INFO, whole.data(), &len), 0);
  EXPECT_GT(len, sizeof ti);
  EXPECT_LT(len, sizeof whole);
  std::uint64_t received = 0;
  std::memcpy(&received, whole.data() + 128, sizeof received);
  EXPECT_EQ(received, data.size());
  len = 8;  // a short buffer gets the first bytes
  ASSERT_EQ(xk_getsockopt(c, IPPROTO_TCP, TCP_INFO, whole.data(), &len), 0);
  EXPECT_EQ(len, 8u);
  xk_close(c);
  xk_close(s);
}

TEST_P(CApi, IoctlQueueSizes) {
  auto [c, s] = pair(5015);
  auto data = pattern(1000, 7);
  ASSERT_EQ(xk_write(c, data.data(), data.size()), 1000) << xk_last_error();
  pollfd p{s, POLLIN, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  int n = -1;
  ASSERT_EQ(xk_ioctl(s, FIONREAD, &n), 0) << xk_last_error();
  EXPECT_EQ(n, 1000);
  ASSERT_EQ(xk_ioctl(c, SIOCOUTQNSD, &n), 0);
  EXPECT_EQ(n, 0) << "all sent";
  ASSERT_EQ(xk_ioctl(c, SIOCOUTQ, &n), 0);
  EXPECT_GE(n, 0);
  EXPECT_LE(n, 1000);
  EXPECT_EQ(xk_ioctl(c, SIOCGIFMTU, &n), -1);
  EXPECT_EQ(errno, ENOTTY);
  // A datagram socket's FIONREAD is the next datagram's size.
  int a = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  int b = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  sockaddr_in ba = addr("192.0.2.1", 6001);
  ASSERT_EQ(xk_bind(b, sa(ba), sizeof ba), 0);
  ASSERT_EQ(xk_sendto(a, data.data(), 300, 0, sa(ba), sizeof ba), 300);
  ASSERT_EQ(xk_sendto(a, data.data(), 200, 0, sa(ba), sizeof ba), 200);
  p = pollfd{b, POLLIN, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  ASSERT_EQ(xk_ioctl(b, FIONREAD, &n), 0);
  EXPECT_EQ(n, 300);
  xk_close(a);
  xk_close(b);
  xk_close(c);
  xk_close(s);
}

TEST_P(CApi, MsgPeekLeavesTheData) {
  auto [c, s] = pair(5016);
  ASSERT_EQ(xk_write(c, "hello", 5), 5);
  pollfd p{s, POLLIN, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  char buf[16] = {};
  ASSERT_EQ(xk_recv(s, buf, 3, MSG_PEEK), 3) << xk_last_error();
  EXPECT_EQ(std::string(buf, 3), "hel");
  ASSERT_EQ(xk_recv(s, buf, sizeof buf, MSG_PEEK), 5);
  ASSERT_EQ(xk_recv(s, buf, sizeof buf, 0), 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_EQ(xk_recv(s, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  // A datagram peeked stays first in line.
  int a = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  int b = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  sockaddr_in ba = addr("192.0.2.1", 6002);
  ASSERT_EQ(xk_bind(b, sa(ba), sizeof ba), 0);
  ASSERT_EQ(xk_sendto(a, "one", 3, 0, sa(ba), sizeof ba), 3);
  ASSERT_EQ(xk_sendto(a, "two", 3, 0, sa(ba), sizeof ba), 3);
  p = pollfd{b, POLLIN, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  ASSERT_EQ(xk_recv(b, buf, sizeof buf, MSG_PEEK), 3);
  EXPECT_EQ(std::string(buf, 3), "one");
  ASSERT_EQ(xk_recv(b, buf, sizeof buf, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "one");
  ASSERT_EQ(xk_recv(b, buf, sizeof buf, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "two");
  xk_close(a);
  xk_close(b);
  xk_close(c);
  xk_close(s);
}

// MSG_MORE holds a short tail until a send without it; MSG_EOR is taken.
TEST_P(CApi, MsgMoreHoldsTheTailUntilASendWithoutIt) {
  auto [c, s] = pair(5017);
  int one = 1;
  ASSERT_EQ(xk_setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
  ASSERT_EQ(xk_send(c, "head-", 5, MSG_MORE), 5) << xk_last_error();
  pollfd p{s, POLLIN, 0};
  EXPECT_EQ(xk_poll(&p, 1, 200), 0) << "held, Nagle off or not";
  ASSERT_EQ(xk_send(c, "tail", 4, MSG_EOR), 4) << xk_last_error();
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  char buf[16] = {};
  std::size_t got = 0;
  while (got < 9) {
    ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
    const ssize_t n = xk_recv(s, buf + got, sizeof buf - got, 0);
    ASSERT_GT(n, 0);
    got += static_cast<std::size_t>(n);
  }
  EXPECT_EQ(std::string(buf, 9), "head-tail");
  xk_close(c);
  xk_close(s);
}

// Urgent data in line (RFC 6093): MSG_OOB marks the send's last byte; the
// receiver sees POLLPRI, a read stops before the urgent byte, SIOCATMARK
// says it is next, and reading it ends POLLPRI. Receiving with MSG_OOB is
// EINVAL (as on Linux with SO_OOBINLINE), which is always on.
TEST_P(CApi, UrgentDataArrivesInLineWithItsMark) {
  auto [c, s] = pair(5060);
  ASSERT_EQ(xk_send(c, "abc", 3, 0), 3) << xk_last_error();
  ASSERT_EQ(xk_send(c, "!", 1, MSG_OOB), 1) << xk_last_error();
  ASSERT_EQ(xk_send(c, "def", 3, 0), 3) << xk_last_error();
  pollfd p{s, POLLPRI, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  EXPECT_TRUE(p.revents & POLLPRI);
  // Until all seven bytes are in (the mark may come before the rest).
  for (int i = 0; i < 200; ++i) {
    int q = 0;
    ASSERT_EQ(xk_ioctl(s, FIONREAD, &q), 0);
    if (q == 7) break;
    p = {s, POLLIN, 0};
    (void)xk_poll(&p, 1, 10);
  }
  int mark = -1;
  ASSERT_EQ(xk_ioctl(s, SIOCATMARK, &mark), 0) << xk_last_error();
  EXPECT_EQ(mark, 0);
  char buf[16] = {};
  EXPECT_EQ(xk_recv(s, buf, sizeof buf, MSG_OOB), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(xk_recv(s, buf, sizeof buf, 0), 3) << "a read stops at the mark";
  EXPECT_EQ(std::string(buf, 3), "abc");
  ASSERT_EQ(xk_ioctl(s, SIOCATMARK, &mark), 0);
  EXPECT_EQ(mark, 1);
  p = {s, POLLPRI, 0};
  EXPECT_EQ(xk_poll(&p, 1, 0), 1) << "still pending until the urgent byte is read";
  ASSERT_EQ(xk_recv(s, buf, sizeof buf, 0), 4);
  EXPECT_EQ(std::string(buf, 4), "!def");
  ASSERT_EQ(xk_ioctl(s, SIOCATMARK, &mark), 0);
  EXPECT_EQ(mark, 0);
  p = {s, POLLPRI, 0};
  EXPECT_EQ(xk_poll(&p, 1, 0), 0);
  int v = 0;
  socklen_t len = sizeof v;
  ASSERT_EQ(xk_getsockopt(s, SOL_SOCKET, SO_OOBINLINE, &v, &len), 0);
  EXPECT_EQ(v, 1);
  v = 0;
  EXPECT_EQ(xk_setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &v, sizeof v), -1) << "out-of-line urgent data is not offered";
  EXPECT_EQ(errno, EINVAL);
  v = 1;
  EXPECT_EQ(xk_setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &v, sizeof v), 0);
  xk_close(c);
  xk_close(s);
}

TEST_P(CApi, RcvLowatHoldsReadinessUntilEnoughArrived) {
  auto [c, s] = pair(5018);
  int lowat = 1000;
  ASSERT_EQ(xk_setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat), 0);
  int v = 0;
  socklen_t len = sizeof v;
  ASSERT_EQ(xk_getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, &len), 0);
  EXPECT_EQ(v, 1000);
  auto data = pattern(1500, 8);
  ASSERT_EQ(xk_write(c, data.data(), 500), 500);
  pollfd p{s, POLLIN, 0};
  EXPECT_EQ(xk_poll(&p, 1, 200), 0) << "500 bytes: under the low-water mark";
  int queued = 0;
  ASSERT_EQ(xk_ioctl(s, FIONREAD, &queued), 0);
  EXPECT_EQ(queued, 500);
  ASSERT_EQ(xk_write(c, data.data() + 500, 1000), 1000);
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  std::vector<unsigned char> got(1500);
  std::size_t n = 0;
  while (n < 1500) {
    const ssize_t r = xk_recv(s, got.data() + n, got.size() - n, 0);
    ASSERT_GT(r, 0);
    n += static_cast<std::size_t>(r);
  }
  EXPECT_EQ(got, data);
  xk_close(c);
  xk_close(s);
}

TEST_P(CApi, CongestionControlAndNotsentLowatPerSocket) {
  auto [c, s] = pair(5019);
  char name[16] = {};
  socklen_t len = sizeof name;
  ASSERT_EQ(xk_getsockopt(c, IPPROTO_TCP, TCP_CONGESTION, name, &len), 0);
  EXPECT_STREQ(name, "cubic");
  ASSERT_EQ(xk_setsockopt(c, IPPROTO_TCP, TCP_CONGESTION, "reno", 4), 0) << xk_last_error();
  len = sizeof name;
  ASSERT_EQ(xk_getsockopt(c, IPPROTO_TCP, TCP_CONGESTION, name, &len), 0);
  EXPECT_STREQ(name, "reno");
  EXPECT_EQ(xk_setsockopt(c, IPPROTO_TCP, TCP_CONGESTION, "bbr", 3), -1);
  EXPECT_EQ(errno, ENOENT);
  int lowat = 16384;
  ASSERT_EQ(xk_setsockopt(c, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat), 0);
  int v = 0;
  len = sizeof v;
  ASSERT_EQ(xk_getsockopt(c, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &len), 0);
  EXPECT_EQ(v, 16384);
  pollfd p{c, POLLOUT, 0};
  EXPECT_EQ(xk_poll(&p, 1, 1000), 1) << "nothing waits unsent: writable";
  auto data = pattern(200000, 9);
  EXPECT_EQ(pump(c, s, data), data) << "a reno connection carries data";
  xk_close(c);
  xk_close(s);
}

// IP_TOS: the DSCP bits are kept (the ECN bits are the stack's, as on
// Linux), before and after connect; the connection still carries data.
TEST_P(CApi, IpTosKeepsTheDscpBits) {
  int c = tcp();
  int tos = 0xb9;  // EF (0xb8) with an ECN bit a program may not set
  ASSERT_EQ(xk_setsockopt(c, IPPROTO_IP, IP_TOS, &tos, sizeof tos), 0) << xk_last_error();
  int v = 0;
  socklen_t len = sizeof v;
  ASSERT_EQ(xk_getsockopt(c, IPPROTO_IP, IP_TOS, &v, &len), 0);
  EXPECT_EQ(v, 0xb8);
  xk_close(c);
  auto [c2, s2] = pair(5021);
  tos = 0x28;
  ASSERT_EQ(xk_setsockopt(c2, IPPROTO_IP, IP_TOS, &tos, sizeof tos), 0);
  len = sizeof v;
  ASSERT_EQ(xk_getsockopt(c2, IPPROTO_IP, IP_TOS, &v, &len), 0);
  EXPECT_EQ(v, 0x28);
  auto data = pattern(100000, 4);
  EXPECT_EQ(pump(c2, s2, data), data);
  xk_close(c2);
  xk_close(s2);
  // A datagram socket keeps the whole byte (as Linux).
  int u = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(u, 0);
  tos = 0xb9;
  ASSERT_EQ(xk_setsockopt(u, IPPROTO_IP, IP_TOS, &tos, sizeof tos), 0) << xk_last_error();
  len = sizeof v;
  ASSERT_EQ(xk_getsockopt(u, IPPROTO_IP, IP_TOS, &v, &len), 0);
  EXPECT_EQ(v, 0xb9);
  xk_close(u);
}

TEST_P(CApi, ConnectionsWithChecksumsOffStillCarryData) {
  int l = listener(5012);
  int off = 0;
  ASSERT_EQ(xk_setsockopt(l, IPPROTO_TCP, XK_TCP_CHECKSUM, &off, sizeof off), 0);
  int c = tcp();
  ASSERT_EQ(xk_setsockopt(c, IPPROTO_TCP, XK_TCP_CHECKSUM, &off, sizeof off), 0);
  sockaddr_in a = addr("192.0.2.1", 5012);
  std::thread t([&] { EXPECT_EQ(xk_connect(c, sa(a), sizeof a), 0) << xk_last_error(); });
  int s = xk_accept(l, nullptr, nullptr);
  t.join();
  ASSERT_GE(s, 0);
  int v = 3;
  socklen_t len = sizeof v;
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_TCP, XK_TCP_CHECKSUM, &v, &len), 0);
  EXPECT_EQ(v, 0);  // inherited from the listener
  auto data = pattern(300000, 5);
  ASSERT_EQ(xk_fcntl(c, F_SETFL, O_NONBLOCK), 0);
  ASSERT_EQ(xk_fcntl(s, F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(pump(c, s, data), data);
  xk_close(c);
  xk_close(s);
  xk_close(l);
}

TEST_P(CApi, DatagramsBothWays) {
  int a = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  int b = xk_socket(stack_, AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  sockaddr_in ba = addr("192.0.2.1", 6000);
  ASSERT_EQ(xk_bind(b, sa(ba), sizeof ba), 0) << xk_last_error();
  char buf[2000];
  EXPECT_EQ(xk_recv(b, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(xk_send(a, "x", 1, 0), -1);
  EXPECT_EQ(errno, EDESTADDRREQ);
  auto msg = pattern(1400, 4);
  ASSERT_EQ(xk_sendto(a, msg.data(), msg.size(), 0, sa(ba), sizeof ba), 1400) << xk_last_error();
  pollfd p{b, POLLIN, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  sockaddr_in from{};
  socklen_t len = sizeof from;
  ASSERT_EQ(xk_recvfrom(b, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len), 1400);
  EXPECT_EQ(std::memcmp(buf, msg.data(), 1400), 0);
  // Reply to the sender's address; a's blocking recv gets it, truncated to its buffer.
  ASSERT_EQ(xk_sendto(b, "pong!", 5, 0, reinterpret_cast<sockaddr*>(&from), len), 5);
  timeval tv{2, 0};
  ASSERT_EQ(xk_setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  EXPECT_EQ(xk_recv(a, buf, 4, 0), 4);
  EXPECT_EQ(std::string(buf, 4), "pong");
  EXPECT_EQ(xk_sendto(a, buf, 70000, 0, sa(ba), sizeof ba), -1);
  EXPECT_EQ(errno, EMSGSIZE);
  xk_close(a);
  xk_close(b);
}

// recvmsg/sendmsg on a stream: gather and scatter, the name ignored (as
// Linux), and TCP_INQ's control message with what is left to read.
TEST_P(CApi, RecvmsgSendmsgOnAStreamWithInq) {
  auto [c, s] = pair(5022);
  char h[] = "head-", m[] = "middle-", t[] = "tail";
  iovec out[3] = {{h, 5}, {m, 7}, {t, 4}};
  sockaddr_in elsewhere = addr("192.0.2.99", 9);
  msghdr sm{};
  sm.msg_name = &elsewhere;  // a stream ignores it
  sm.msg_namelen = sizeof elsewhere;
  sm.msg_iov = out;
  sm.msg_iovlen = 3;
  ASSERT_EQ(xk_sendmsg(c, &sm, 0), 16) << xk_last_error();
  pollfd p{s, POLLIN, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);

  int v = -1;
  socklen_t vl = sizeof v;
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_TCP, TCP_INQ, &v, &vl), 0);
  EXPECT_EQ(v, 0);
  // Without TCP_INQ: no control message; the buffers fill in order.
  char a[3], b[4];
  iovec in[2] = {{a, 3}, {b, 4}};
  sockaddr_in from{};
  alignas(cmsghdr) char control[64];
  msghdr rm{};
  rm.msg_name = &from;
  rm.msg_namelen = sizeof from;
  rm.msg_iov = in;
  rm.msg_iovlen = 2;
  rm.msg_control = control;
  rm.msg_controllen = sizeof control;
  ASSERT_EQ(xk_recvmsg(s, &rm, 0), 7) << xk_last_error();
  EXPECT_EQ(std::string(a, 3) + std::string(b, 4), "head-mi");
  EXPECT_EQ(rm.msg_namelen, 0u) << "a stream read has no source";
  EXPECT_EQ(rm.msg_controllen, 0u);
  EXPECT_EQ(rm.msg_flags, 0);

  v = 1;
  ASSERT_EQ(xk_setsockopt(s, IPPROTO_TCP, TCP_INQ, &v, sizeof v), 0) << xk_last_error();
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_TCP, TCP_INQ, &v, &vl), 0);
  EXPECT_EQ(v, 1);
  rm.msg_iovlen = 1;  // 3 bytes: "ddl", 6 left
  rm.msg_controllen = sizeof control;
  ASSERT_EQ(xk_recvmsg(s, &rm, 0), 3);
  EXPECT_EQ(std::string(a, 3), "ddl");
  cmsghdr* cm = CMSG_FIRSTHDR(&rm);
  ASSERT_NE(cm, nullptr);
  EXPECT_EQ(cm->cmsg_level, IPPROTO_TCP);
  EXPECT_EQ(cm->cmsg_type, TCP_CM_INQ);
  ASSERT_EQ(cm->cmsg_len, CMSG_LEN(sizeof(int)));
  int inq = -1;
  std::memcpy(&inq, CMSG_DATA(cm), sizeof inq);
  EXPECT_EQ(inq, 6);
  EXPECT_EQ(rm.msg_flags, 0);
  // A control buffer too small for it: MSG_CTRUNC, nothing written.
  rm.msg_controllen = 4;
  ASSERT_EQ(xk_recvmsg(s, &rm, 0), 3);
  EXPECT_EQ(std::string(a, 3), "e-t");
  EXPECT_EQ(rm.msg_flags, MSG_CTRUNC);
  EXPECT_EQ(rm.msg_controllen, 0u);
  // The rest, then the end: TCP_INQ says 1 once the peer's FIN is in, so the
  // reader knows to read again and see the end.
  ASSERT_EQ(xk_shutdown(c, SHUT_WR), 0);
  p = pollfd{s, POLLRDHUP, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  for (ssize_t want : {3, 0}) {
    rm.msg_controllen = sizeof control;
    ASSERT_EQ(xk_recvmsg(s, &rm, 0), want) << xk_last_error();
    cm = CMSG_FIRSTHDR(&rm);
    ASSERT_NE(cm, nullptr);
    std::memcpy(&inq, CMSG_DATA(cm), sizeof inq);
    EXPECT_EQ(inq, 1) << "after reading " << want;
  }
  EXPECT_EQ(std::string(a, 3), "ail");

  v = 2;
  EXPECT_EQ(xk_setsockopt(s, IPPROTO_TCP, TCP_INQ, &v, sizeof v), -1);
  EXPECT_EQ(errno, EINVAL);
  int u = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  v = 1;
  EXPECT_EQ(xk_setsockopt(u, IPPROTO_TCP, TCP_INQ, &v, sizeof v), -1);
  EXPECT_EQ(errno, ENOPROTOOPT) << "TCP_INQ is a stream's";
  xk_close(u);
  xk_close(c);
  xk_close(s);
}

// What recvmsg/sendmsg refuse, and the control messages sendmsg lets by.
TEST_P(CApi, RecvmsgSendmsgRefuseWhatTheyCannotDo) {
  auto [c, s] = pair(5023);
  char x = 'x';
  iovec one{&x, 1};
  msghdr m{};
  m.msg_iov = &one;
  m.msg_iovlen = 1;
  EXPECT_EQ(xk_sendmsg(c, nullptr, 0), -1);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(xk_recvmsg(s, nullptr, 0), -1);
  EXPECT_EQ(errno, EFAULT);
  msghdr big = m;
  big.msg_iovlen = IOV_MAX + 1;
  EXPECT_EQ(xk_sendmsg(c, &big, 0), -1);
  EXPECT_EQ(errno, EMSGSIZE);
  EXPECT_EQ(xk_recvmsg(s, &big, 0), -1);
  EXPECT_EQ(errno, EMSGSIZE);
  iovec null_buf{nullptr, 10};
  msghdr nb = m;
  nb.msg_iov = &null_buf;
  EXPECT_EQ(xk_sendmsg(c, &nb, 0), -1);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(xk_recvmsg(s, &m, MSG_OOB), -1);
  EXPECT_EQ(errno, EINVAL) << "urgent data is in line";
  EXPECT_EQ(xk_recvmsg(s, &m, MSG_TRUNC | MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EOPNOTSUPP) << "MSG_TRUNC discarding stream data is not offered";

  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  auto* cm = reinterpret_cast<cmsghdr*>(control);
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  // Another level on a stream: ignored (Linux's TCP reads only SOL_SOCKET's).
  cm->cmsg_level = IPPROTO_IP;
  cm->cmsg_type = IP_TOS;
  EXPECT_EQ(xk_sendmsg(c, &m, 0), 1) << xk_last_error();
  // SO_TIMESTAMPING asks for something xk does not do: refused, not dropped.
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SO_TIMESTAMPING;
  EXPECT_EQ(xk_sendmsg(c, &m, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(xk_last_error()).find("not supported"), std::string::npos) << xk_last_error();
  cm->cmsg_len = sizeof control + 1;  // runs past the buffer
  EXPECT_EQ(xk_sendmsg(c, &m, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  m.msg_control = nullptr;
  EXPECT_EQ(xk_sendmsg(c, &m, 0), -1);
  EXPECT_EQ(errno, EFAULT);
  m.msg_controllen = 0;
  // What was sent arrived: one byte of the accepted control message only.
  char got[4];
  iovec in{got, sizeof got};
  msghdr rm{};
  rm.msg_iov = &in;
  rm.msg_iovlen = 1;
  pollfd p{s, POLLIN, 0};
  ASSERT_EQ(xk_poll(&p, 1, 2000), 1);
  EXPECT_EQ(xk_recvmsg(s, &rm, MSG_DONTWAIT), 1);
  EXPECT_EQ(got[0], 'x');
  xk_close(c);
  xk_close(s);
}

// recvmsg/sendmsg on datagrams: one datagram from several buffers, its
// source, MSG_TRUNC both ways; readv/writev too.
TEST_P(CApi, RecvmsgSendmsgOnDatagrams) {
  int a = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  int b = xk_socket(stack_, AF_INET, SOCK_DGRAM, 0);
  sockaddr_in aa = addr("192.0.2.1", 6004), ba = addr("192.0.2.1", 6003);
  ASSERT_EQ(xk_bind(a, sa(aa), sizeof aa), 0);
  ASSERT_EQ(xk_bind(b, sa(ba), sizeof ba), 0);
  timeval tv{2, 0};
  ASSERT_EQ(xk_setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  char p1[] = "one ", p2[] = "datagram", p3[] = "!";
  iovec out[3] = {{p1, 4}, {p2, 8}, {p3, 1}};
  msghdr sm{};
  sm.msg_iov = out;
  sm.msg_iovlen = 3;
  EXPECT_EQ(xk_sendmsg(a, &sm, 0), -1);
  EXPECT_EQ(errno, EDESTADDRREQ) << "no name, not connected";
  sm.msg_name = &ba;
  sm.msg_namelen = sizeof ba;
  ASSERT_EQ(xk_sendmsg(a, &sm, 0), 13) << xk_last_error();
  ASSERT_EQ(xk_sendmsg(a, &sm, 0), 13);
  ASSERT_EQ(xk_sendmsg(a, &sm, 0), 13);

  char x[5], y[20];
  iovec in[2] = {{x, 5}, {y, 20}};
  sockaddr_in from{};
  msghdr rm{};
  rm.msg_name = &from;
  rm.msg_namelen = sizeof from;
  rm.msg_iov = in;
  rm.msg_iovlen = 2;
  ASSERT_EQ(xk_recvmsg(b, &rm, 0), 13) << xk_last_error();
  EXPECT_EQ(std::string(x, 5) + std::string(y, 8), "one datagram!");
  EXPECT_EQ(rm.msg_namelen, sizeof(sockaddr_in));
  EXPECT_EQ(from.sin_port, htons(6004));
  EXPECT_EQ(from.sin_addr.s_addr, aa.sin_addr.s_addr);
  EXPECT_EQ(rm.msg_flags, 0);
  // Shorter buffers: the rest is gone and MSG_TRUNC says so ...
  in[1].iov_len = 3;
  ASSERT_EQ(xk_recvmsg(b, &rm, 0), 8);
  EXPECT_EQ(rm.msg_flags, MSG_TRUNC);
  EXPECT_EQ(std::string(x, 5) + std::string(y, 3), "one data");
  // ... and with MSG_TRUNC asked, the call returns the whole length.
  ASSERT_EQ(xk_recvmsg(b, &rm, MSG_TRUNC), 13);
  EXPECT_EQ(rm.msg_flags, MSG_TRUNC);

  // A per-datagram IP option xk does not take is refused.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  sm.msg_control = control;
  sm.msg_controllen = sizeof control;
  auto* cm = reinterpret_cast<cmsghdr*>(control);
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  cm->cmsg_level = IPPROTO_IP;
  cm->cmsg_type = IP_TOS;
  EXPECT_EQ(xk_sendmsg(a, &sm, 0), -1);
  EXPECT_EQ(errno, EINVAL);

  // writev/readv on a connected datagram socket: one datagram each.
  ASSERT_EQ(xk_connect(a, sa(ba), sizeof ba), 0) << xk_last_error();
  ASSERT_EQ(xk_writev(a, out, 3), 13) << xk_last_error();
  in[1].iov_len = 20;
  ASSERT_EQ(xk_readv(b, in, 2), 13) << xk_last_error();
  EXPECT_EQ(std::string(x, 5) + std::string(y, 8), "one datagram!");
  xk_close(a);
  xk_close(b);
}

// xk_epoll_fd: a kernel descriptor readable while the set has entries to
// report, so an xk set can wait inside a kernel poll.
TEST_P(CApi, EpollFdIsReadableWhileTheSetHasSomethingToReport) {
  auto [c, s] = pair(5024);
  const int ep = xk_epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = s;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, s, &e), 0);
  const int efd = xk_epoll_fd(ep);
  ASSERT_GE(efd, 0) << xk_last_error();
  EXPECT_EQ(xk_epoll_fd(ep), efd) << "one per set";
  pollfd k{efd, POLLIN, 0};
  EXPECT_EQ(::poll(&k, 1, 0), 0) << "nothing to report";
  ASSERT_EQ(xk_write(c, "ping", 4), 4);
  // (An inline stack moves only when called.)
  int r = 0;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       r == 0 && std::chrono::steady_clock::now() < until;) {
    xk_stack_poll(stack_);
    r = ::poll(&k, 1, 1);
  }
  ASSERT_EQ(r, 1) << "the data made it readable";
  epoll_event out[2];
  ASSERT_EQ(xk_epoll_wait(ep, out, 2, 0), 1);
  EXPECT_EQ(::poll(&k, 1, 0), 1) << "level-triggered: still to report";
  char buf[8];
  ASSERT_EQ(xk_read(s, buf, sizeof buf), 4);
  EXPECT_EQ(xk_epoll_wait(ep, out, 2, 0), 0);
  EXPECT_EQ(::poll(&k, 1, 0), 0) << "drained";
  EXPECT_EQ(xk_epoll_fd(s), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(xk_epoll_fd(123456), -1);
  EXPECT_EQ(errno, EBADF);
  xk_close(ep);  // closes the eventfd too
  EXPECT_EQ(fcntl(efd, F_GETFD), -1);
  xk_close(c);
  xk_close(s);
}

// xk_epoll_psleep is ppoll over kernel descriptors that also ends when
// the xk set has something to report -- in every mode, whoever runs the
// stack: a pipe, the set (data written by another thread), the timeout
// and a signal handler each end it.
TEST_P(CApi, EpollPsleepEndsForAKernelDescriptorTheSetTheTimeoutAndASignal) {
  using clock = std::chrono::steady_clock;
  auto [c, s] = pair(5026);
  const int ep = xk_epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = s;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, s, &e), 0);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  pollfd k{p[0], POLLIN, 0};

  const timespec ms30{0, 30'000'000};
  auto t0 = clock::now();
  EXPECT_EQ(xk_epoll_psleep(ep, &k, 1, &ms30, nullptr), 0) << xk_last_error();
  EXPECT_GE(clock::now() - t0, std::chrono::milliseconds(30)) << "woke before its timeout";
  EXPECT_EQ(k.revents, 0);

  const timespec s5{5, 0};
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(::write(p[1], "x", 1), 1);
  });
  EXPECT_EQ(xk_epoll_psleep(ep, &k, 1, &s5, nullptr), 1) << xk_last_error();
  EXPECT_EQ(k.revents, POLLIN);
  writer.join();
  char b;
  ASSERT_EQ(::read(p[0], &b, 1), 1);

  // The set: 0 may come early (the stack ran for something else), so
  // sleep again until it reports.
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(xk_write(c, "ping", 4), 4);
  });
  t0 = clock::now();
  epoll_event out[2];
  int got = 0;
  while (got == 0 && clock::now() - t0 < std::chrono::seconds(5)) {
    ASSERT_EQ(xk_epoll_psleep(ep, &k, 1, &s5, nullptr), 0) << xk_last_error();
    got = xk_epoll_wait(ep, out, 2, 0);
  }
  sender.join();
  ASSERT_EQ(got, 1) << "the data never woke the sleep";
  char buf[8];
  ASSERT_EQ(xk_read(s, buf, sizeof buf), 4);
  EXPECT_EQ(xk_epoll_wait(ep, out, 2, 0), 0) << "read: nothing more to report";

  struct sigaction act{}, old{};
  act.sa_handler = count_signal;
  sigemptyset(&act.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &act, &old), 0);
  const pthread_t me = pthread_self();
  std::thread poke([me] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    pthread_kill(me, SIGUSR2);
  });
  t0 = clock::now();
  EXPECT_EQ(xk_epoll_psleep(ep, &k, 1, &s5, nullptr), -1);
  EXPECT_EQ(errno, EINTR);
  EXPECT_LT(clock::now() - t0, std::chrono::seconds(4));
  poke.join();
  sigaction(SIGUSR2, &old, nullptr);

  EXPECT_EQ(xk_epoll_psleep(ep, nullptr, 1, &s5, nullptr), -1);
  EXPECT_EQ(errno, EFAULT);
  const timespec bad{0, 1'000'000'000};
  EXPECT_EQ(xk_epoll_psleep(ep, &k, 1, &bad, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(xk_epoll_psleep(s, &k, 1, &s5, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  ::close(p[0]);
  ::close(p[1]);
  xk_close(ep);
  xk_close(c);
  xk_close(s);
}

TEST_P(CApi, TheStacksAddress) {
  in_addr a{}, gw{};
  int prefix = -1;
  ASSERT_EQ(xk_stack_addr(stack_, &a, &prefix, &gw), 0) << xk_last_error();
  EXPECT_EQ(a.s_addr, addr("192.0.2.1", 0).sin_addr.s_addr);
  EXPECT_EQ(prefix, 24);
  EXPECT_EQ(gw.s_addr, 0u) << "no gateway";
  EXPECT_EQ(xk_stack_addr(nullptr, &a, nullptr, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_P(CApi, ManyConnectionsThroughOneEpoll) {
  constexpr int kConns = 20;
  int l = listener(5013, 64);
  ASSERT_EQ(xk_fcntl(l, F_SETFL, O_NONBLOCK), 0);
  std::vector<int> clients;
  for (int i = 0; i < kConns; ++i) {
    int c = tcp(SOCK_NONBLOCK);
    sockaddr_in a = addr("192.0.2.1", 5013);
    ASSERT_EQ(xk_connect(c, sa(a), sizeof a), -1);
    clients.push_back(c);
  }
  int ep = xk_epoll_create1(0);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = l;
  ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, l, &e), 0);
  std::vector<int> servers;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (servers.size() < kConns && std::chrono::steady_clock::now() < deadline) {
    epoll_event out[8];
    int n = xk_epoll_wait(ep, out, 8, 100);
    for (int k = 0; k < n; ++k) {
      if (out[k].data.fd == l) {
        for (int s; (s = xk_accept4(l, nullptr, nullptr, SOCK_NONBLOCK)) >= 0;) {
          servers.push_back(s);
          e.events = EPOLLIN;
          e.data.fd = s;
          ASSERT_EQ(xk_epoll_ctl(ep, EPOLL_CTL_ADD, s, &e), 0);
        }
        EXPECT_EQ(errno, EAGAIN);
      }
    }
  }
  ASSERT_EQ(servers.size(), static_cast<std::size_t>(kConns));
  // Each client says its index; every server reads one message.
  for (int i = 0; i < kConns; ++i) {
    unsigned char b = static_cast<unsigned char>(i);
    for (int tries = 0; xk_write(clients[i], &b, 1) != 1 && tries < 1000; ++tries) {
      xk_stack_poll(stack_);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  std::vector<int> seen(kConns, 0);
  int got = 0;
  while (got < kConns && std::chrono::steady_clock::now() < deadline) {
    epoll_event out[8];
    int n = xk_epoll_wait(ep, out, 8, 100);
    for (int k = 0; k < n; ++k) {
      unsigned char b;
      if (out[k].data.fd != l && xk_read(out[k].data.fd, &b, 1) == 1) {
        ++seen[b];
        ++got;
      }
    }
  }
  EXPECT_EQ(got, kConns);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), kConns);
  for (int fd : clients) xk_close(fd);
  for (int fd : servers) xk_close(fd);
  xk_close(ep);
  xk_close(l);
}

INSTANTIATE_TEST_SUITE_P(Modes, CApi,
                         ::testing::Values(Way{XK_MODE_INLINE, XK_IDLE_SPIN_THEN_SLEEP},
                                           Way{XK_MODE_SERVICE, XK_IDLE_SPIN_THEN_SLEEP},
                                           Way{XK_MODE_INLINE, XK_IDLE_YIELD_THEN_SLEEP},
                                           Way{XK_MODE_SERVICE, XK_IDLE_YIELD_THEN_SLEEP},
                                           Way{XK_MODE_HYBRID, XK_IDLE_SPIN_THEN_SLEEP},
                                           Way{XK_MODE_HYBRID, XK_IDLE_YIELD_THEN_SLEEP}),
                         [](const ::testing::TestParamInfo<Way>& i) {
                           return std::string(i.param.mode == XK_MODE_INLINE    ? "Inline"
                                              : i.param.mode == XK_MODE_SERVICE ? "Service"
                                                                                : "Hybrid") +
                                  (i.param.idle == XK_IDLE_YIELD_THEN_SLEEP ? "Yielding" : "");
                         });

}  // namespace

// The C API's two families on one dual-stack stack (RFC 3493): AF_INET6
// sockets, a [::] listener taking IPv4 peers as v4-mapped addresses,
// IPV6_V6ONLY and the binds it lets coexist, the family checks, and the
// IPv6 socket options. Everything goes to the stack's own addresses.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "xk/xk.h"

namespace {

// eth over the loopback driver: ipv4 and ipv6 side by side (nd without a
// duplicate check: the addresses are usable at once).
constexpr const char* kGraph =
    "loopback lo0 mtu=9000\n"
    "eth      eth0 below=lo0 mac=02:00:00:00:00:01\n"
    "arp      arp0 below=eth0\n"
    "nd       nd0  below=eth0 dad=0\n"
    "ipv4     ip0  below=eth0,arp0 addr=192.0.2.1/24\n"
    "ipv6     ip6  below=eth0,nd0 addr=2001:db8::1/64\n"
    "udp      udp0 below=ip0,ip6\n"
    "tcp      tcp0 below=ip0,ip6 rto_min_ms=20 rto_initial_ms=100 delack_ms=1 msl_ms=100\n";

sockaddr_in v4(const char* ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

sockaddr_in6 v6(const char* ip, std::uint16_t port) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  inet_pton(AF_INET6, ip, &a.sin6_addr);
  return a;
}

template <class A>
const sockaddr* sa(const A& a) {
  return reinterpret_cast<const sockaddr*>(&a);
}

std::string text_of(const sockaddr_in6& a) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
  return std::string("[") + buf + "]:" + std::to_string(ntohs(a.sin6_port));
}

class CApiDual : public ::testing::Test {
 protected:
  void SetUp() override {
    xk_stack_config c;
    xk_stack_config_init(&c);
    c.graph = kGraph;
    stack_ = xk_stack_create(&c);
    ASSERT_NE(stack_, nullptr) << xk_last_error();
  }
  void TearDown() override { xk_stack_destroy(stack_); }

  int sock(int family, int type = SOCK_STREAM) {
    int fd = xk_socket(stack_, family, type, 0);
    EXPECT_GE(fd, 0) << xk_last_error();
    return fd;
  }
  int listen6(std::uint16_t port, bool v6only) {
    int fd = sock(AF_INET6);
    const int on = v6only ? 1 : 0;
    EXPECT_EQ(xk_setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on), 0) << xk_last_error();
    sockaddr_in6 any = v6("::", port);
    EXPECT_EQ(xk_bind(fd, sa(any), sizeof any), 0) << xk_last_error();
    EXPECT_EQ(xk_listen(fd, 16), 0) << xk_last_error();
    return fd;
  }
  // Connects `c` (non-blocking) to `to` and accepts it on `l`; the accepted
  // descriptor, or -1 with the connect's error in `err`.
  template <class A>
  int connect_accept(int l, int c, const A& to, int* err = nullptr) {
    EXPECT_EQ(xk_fcntl(c, F_SETFL, O_NONBLOCK), 0);
    const int r = xk_connect(c, sa(to), sizeof to);
    if (r != 0 && errno != EINPROGRESS) {
      if (err != nullptr) *err = errno;
      return -1;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      (void)xk_stack_poll(stack_);
      int so_error = 0;
      socklen_t len = sizeof so_error;
      EXPECT_EQ(xk_getsockopt(c, SOL_SOCKET, SO_ERROR, &so_error, &len), 0);
      if (so_error != 0) {
        if (err != nullptr) *err = so_error;
        return -1;
      }
      const int s = xk_accept4(l, nullptr, nullptr, SOCK_NONBLOCK);
      if (s >= 0) return s;
    }
    ADD_FAILURE() << "no connection within 5 s";
    return -1;
  }

  xk_stack* stack_ = nullptr;
};

TEST_F(CApiDual, AnIpv6ListenerOnTheWildcardTakesBothFamilies) {
  const int l = listen6(7000, false);
  sockaddr_in6 name{};
  socklen_t len = sizeof name;
  ASSERT_EQ(xk_getsockname(l, reinterpret_cast<sockaddr*>(&name), &len), 0);
  EXPECT_EQ(len, sizeof(sockaddr_in6));
  EXPECT_EQ(name.sin6_family, AF_INET6);
  EXPECT_EQ(text_of(name), "[::]:7000");

  const int c6 = sock(AF_INET6);
  const int s6 = connect_accept(l, c6, v6("2001:db8::1", 7000));
  ASSERT_GE(s6, 0);
  sockaddr_in6 peer{};
  len = sizeof peer;
  ASSERT_EQ(xk_getpeername(s6, reinterpret_cast<sockaddr*>(&peer), &len), 0);
  EXPECT_EQ(peer.sin6_family, AF_INET6);
  EXPECT_EQ(text_of(peer).rfind("[2001:db8::1]:", 0), 0u) << text_of(peer);

  const int c4 = sock(AF_INET);
  const int s4 = connect_accept(l, c4, v4("192.0.2.1", 7000));
  ASSERT_GE(s4, 0);
  len = sizeof peer;
  ASSERT_EQ(xk_getpeername(s4, reinterpret_cast<sockaddr*>(&peer), &len), 0);
  EXPECT_EQ(len, sizeof(sockaddr_in6)) << "an AF_INET6 socket names an IPv4 peer in its own family";
  EXPECT_EQ(text_of(peer).rfind("[::ffff:192.0.2.1]:", 0), 0u) << text_of(peer);
  sockaddr_in6 local{};
  len = sizeof local;
  ASSERT_EQ(xk_getsockname(s4, reinterpret_cast<sockaddr*>(&local), &len), 0);
  EXPECT_EQ(text_of(local), "[::ffff:192.0.2.1]:7000");
  // And the IPv4 client sees its peer as an AF_INET one.
  sockaddr_in p4{};
  len = sizeof p4;
  ASSERT_EQ(xk_getpeername(c4, reinterpret_cast<sockaddr*>(&p4), &len), 0);
  EXPECT_EQ(len, sizeof(sockaddr_in));
  EXPECT_EQ(p4.sin_family, AF_INET);
  EXPECT_EQ(ntohs(p4.sin_port), 7000);

  // Bytes cross both ways over IPv6.
  const char msg[] = "over six";
  ASSERT_EQ(xk_write(c6, msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
  char got[16] = {};
  ssize_t n = -1;
  for (int i = 0; i < 10000 && n < 0; ++i) {
    (void)xk_stack_poll(stack_);
    n = xk_read(s6, got, sizeof got);
  }
  EXPECT_EQ(n, static_cast<ssize_t>(sizeof msg));
  EXPECT_STREQ(got, msg);
  for (int fd : {s4, c4, s6, c6, l}) xk_close(fd);
}

TEST_F(CApiDual, V6OnlyRefusesIpv4AndLetsAnIpv4WildcardShareThePort) {
  const int l6 = listen6(7001, true);
  int on = 0;
  socklen_t len = sizeof on;
  ASSERT_EQ(xk_getsockopt(l6, IPPROTO_IPV6, IPV6_V6ONLY, &on, &len), 0);
  EXPECT_EQ(on, 1);
  // 0.0.0.0 of the same port coexists with [::] that takes IPv6 alone...
  const int l4 = sock(AF_INET);
  sockaddr_in any4 = v4("0.0.0.0", 7001);
  ASSERT_EQ(xk_bind(l4, sa(any4), sizeof any4), 0) << xk_last_error();
  ASSERT_EQ(xk_listen(l4, 16), 0);
  // ...and each takes its own family.
  const int c4 = sock(AF_INET);
  const int s4 = connect_accept(l4, c4, v4("192.0.2.1", 7001));
  EXPECT_GE(s4, 0);
  const int c6 = sock(AF_INET6);
  const int s6 = connect_accept(l6, c6, v6("2001:db8::1", 7001));
  EXPECT_GE(s6, 0);
  // Without V6ONLY, [::] would have overlapped 0.0.0.0.
  const int dual = sock(AF_INET6);
  sockaddr_in6 any6 = v6("::", 7001);
  EXPECT_EQ(xk_bind(dual, sa(any6), sizeof any6), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  for (int fd : {s4, c4, s6, c6, l4, l6, dual}) xk_close(fd);

  // A V6ONLY socket refuses an IPv4 peer, and a v4-mapped bind.
  const int only = sock(AF_INET6);
  const int yes = 1;
  ASSERT_EQ(xk_setsockopt(only, IPPROTO_IPV6, IPV6_V6ONLY, &yes, sizeof yes), 0);
  sockaddr_in6 mapped = v6("::ffff:192.0.2.1", 7002);
  EXPECT_EQ(xk_connect(only, sa(mapped), sizeof mapped), -1);
  EXPECT_EQ(errno, ENETUNREACH);
  EXPECT_EQ(xk_bind(only, sa(mapped), sizeof mapped), -1);
  EXPECT_EQ(errno, EINVAL);
  xk_close(only);
}

TEST_F(CApiDual, AnIpv4PeerReachesNoV6OnlyListener) {
  const int l6 = listen6(7003, true);
  const int c4 = sock(AF_INET);
  int err = 0;
  EXPECT_EQ(connect_accept(l6, c4, v4("192.0.2.1", 7003), &err), -1);
  EXPECT_EQ(err, ECONNREFUSED) << "nobody listens for IPv4 on the port";
  xk_close(c4);
  xk_close(l6);
}

TEST_F(CApiDual, FamiliesAreChecked) {
  const int s4 = sock(AF_INET);
  sockaddr_in6 six = v6("2001:db8::1", 80);
  EXPECT_EQ(xk_connect(s4, sa(six), sizeof six), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  const int s6 = sock(AF_INET6);
  sockaddr_in four = v4("192.0.2.1", 80);
  EXPECT_EQ(xk_connect(s6, sa(four), sizeof four), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  EXPECT_EQ(xk_bind(s6, sa(six), 20), -1) << "shorter than RFC 2133's sockaddr_in6";
  EXPECT_EQ(errno, EINVAL);
  int domain = 0;
  socklen_t len = sizeof domain;
  ASSERT_EQ(xk_getsockopt(s6, SOL_SOCKET, SO_DOMAIN, &domain, &len), 0);
  EXPECT_EQ(domain, AF_INET6);
  const int on = 1;
  EXPECT_EQ(xk_setsockopt(s4, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on), -1);
  EXPECT_EQ(errno, ENOPROTOOPT);
  EXPECT_EQ(xk_setsockopt(s6, IPPROTO_IP, IP_TOS, &on, sizeof on), -1);
  EXPECT_EQ(errno, ENOPROTOOPT);
  // V6ONLY is a choice made before bind.
  sockaddr_in6 any = v6("::", 7004);
  ASSERT_EQ(xk_bind(s6, sa(any), sizeof any), 0);
  EXPECT_EQ(xk_setsockopt(s6, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on), -1);
  EXPECT_EQ(errno, EINVAL);
  xk_close(s4);
  xk_close(s6);
}

TEST_F(CApiDual, Ipv6OptionsAreCheckedAndReadBack) {
  const int s = sock(AF_INET6);
  int v = 0;
  socklen_t len = sizeof v;
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &v, &len), 0);
  EXPECT_EQ(v, 64);
  const int hops = 7, tclass = 0xb8;
  ASSERT_EQ(xk_setsockopt(s, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &hops, sizeof hops), 0);
  ASSERT_EQ(xk_setsockopt(s, IPPROTO_IPV6, IPV6_TCLASS, &tclass, sizeof tclass), 0);
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &v, &len), 0);
  EXPECT_EQ(v, 7);
  ASSERT_EQ(xk_getsockopt(s, IPPROTO_IPV6, IPV6_TCLASS, &v, &len), 0);
  EXPECT_EQ(v, 0xb8);
  const int bad = 256;
  EXPECT_EQ(xk_setsockopt(s, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &bad, sizeof bad), -1);
  EXPECT_EQ(errno, EINVAL);
  const int ttl = 9;
  const int s4 = sock(AF_INET);
  ASSERT_EQ(xk_setsockopt(s4, IPPROTO_IP, IP_TTL, &ttl, sizeof ttl), 0);
  ASSERT_EQ(xk_getsockopt(s4, IPPROTO_IP, IP_TTL, &v, &len), 0);
  EXPECT_EQ(v, 9);
  xk_close(s4);
  xk_close(s);
}

TEST_F(CApiDual, UdpOnAnIpv6SocketSpeaksToBothFamilies) {
  const int srv = sock(AF_INET6, SOCK_DGRAM);
  sockaddr_in6 any = v6("::", 9000);
  ASSERT_EQ(xk_bind(srv, sa(any), sizeof any), 0) << xk_last_error();
  const int c6 = sock(AF_INET6, SOCK_DGRAM);
  const int c4 = sock(AF_INET, SOCK_DGRAM);
  sockaddr_in6 to6 = v6("2001:db8::1", 9000);
  sockaddr_in to4 = v4("192.0.2.1", 9000);
  ASSERT_EQ(xk_sendto(c6, "six", 3, 0, sa(to6), sizeof to6), 3) << xk_last_error();
  ASSERT_EQ(xk_sendto(c4, "four", 4, 0, sa(to4), sizeof to4), 4) << xk_last_error();
  std::string froms;
  for (int got = 0, i = 0; got < 2 && i < 100000; ++i) {
    (void)xk_stack_poll(stack_);
    char buf[8];
    sockaddr_in6 from{};
    socklen_t len = sizeof from;
    const ssize_t n = xk_recvfrom(srv, buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 0) continue;
    ++got;
    EXPECT_EQ(len, sizeof(sockaddr_in6));
    char a[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &from.sin6_addr, a, sizeof a);
    froms += std::string(buf, static_cast<std::size_t>(n)) + "@" + a + " ";
  }
  EXPECT_EQ(froms, "six@2001:db8::1 four@::ffff:192.0.2.1 ");
  // The AF_INET client's implicit bind took 0.0.0.0: an IPv6 datagram to
  // its port does not reach it, the IPv6 server's reply to the IPv4 one does.
  sockaddr_in name{};
  socklen_t len = sizeof name;
  ASSERT_EQ(xk_getsockname(c4, reinterpret_cast<sockaddr*>(&name), &len), 0);
  sockaddr_in6 to_c4 = v6("2001:db8::1", ntohs(name.sin_port));
  ASSERT_EQ(xk_sendto(srv, "x", 1, 0, sa(to_c4), sizeof to_c4), 1);
  sockaddr_in6 back4 = v6("::ffff:192.0.2.1", ntohs(name.sin_port));
  ASSERT_EQ(xk_sendto(srv, "y", 1, 0, sa(back4), sizeof back4), 1);
  std::string got;
  for (int i = 0; i < 100000 && got.size() < 2; ++i) {
    (void)xk_stack_poll(stack_);
    char c;
    if (xk_recvfrom(c4, &c, 1, MSG_DONTWAIT, nullptr, nullptr) == 1) got += c;
    if (got == "y") {
      for (int k = 0; k < 1000; ++k) (void)xk_stack_poll(stack_);
      if (xk_recvfrom(c4, &c, 1, MSG_DONTWAIT, nullptr, nullptr) == 1) got += c;
      break;
    }
  }
  EXPECT_EQ(got, "y");
  for (int fd : {srv, c6, c4}) xk_close(fd);
}

}  // namespace

// Two dual-stack nodes built from graph specs (pair -> eth -> arp + nd ->
// ipv4 + ipv6 -> icmp + icmpv6, udp and tcp on both families) talking in
// one process: ping, UDP of every size and TCP over IPv6, and one TCP
// listener on the wildcard taking both families.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "xk/checksum.hpp"
#include "xk/clock.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/kinds.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/ipv6.hpp"
#include "xk/protocols/nd.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk {
namespace {

using namespace std::chrono_literals;

IpAddr ip(std::string_view text) { return *parse_ip(text); }

const IpAddr kV4A = ip("192.0.2.10");
const IpAddr kV4B = ip("192.0.2.20");
const IpAddr kV6A = ip("2001:db8::10");
const IpAddr kV6B = ip("2001:db8::20");

std::string spec(const char* mac, const char* v4, const char* v6, bool offload,
                 const std::string& tcp = "tcp    tcp0  below=ip0,ip6\n") {
  return std::string("pair net0 link=wire mac=") + mac + " csum_offload=" + (offload ? "on" : "off") + "\n" +
         "eth    eth0  below=net0\n"
         "arp    arp0  below=eth0\n"
         "nd     nd0   below=eth0\n"
         "ipv4   ip0   below=eth0,arp0 addr=" + v4 + "\n" +
         "ipv6   ip6   below=eth0,nd0 addr=" + v6 + "\n" +
         "icmp   icmp0 below=ip0\n"
         "icmpv6 icmp6 below=ip6,nd0\n"
         "udp    udp0  below=ip0,ip6\n" + tcp;
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<unsigned char>(i * 7 + seed));
  return v;
}

std::vector<std::byte> contents(const Msg& m) {
  std::vector<std::byte> out(m.size());
  EXPECT_TRUE(m.copy_out(0, out).ok());
  return out;
}

struct DualStack : ::testing::Test {
  ManualClock clock;
  EventLoop loop_a{clock};
  EventLoop loop_b{clock};
  drivers::PairHub hub;
  Registry registry;
  std::unique_ptr<Graph> a;
  std::unique_ptr<Graph> b;

  // Whether the pair "ports" fill and check the checksums asked of them.
  virtual bool port_offloads() const { return false; }
  // A's TCP (and what lies between it and the IP layers).
  virtual std::string tcp_a() const { return "tcp    tcp0  below=ip0,ip6\n"; }

  void SetUp() override {
    register_all_kinds(registry);
    drivers::register_pair(registry, hub);
    a = std::make_unique<Graph>(Graph::build(
        spec("02:00:00:00:00:0a", "192.0.2.10/24", "2001:db8::10/64", port_offloads(), tcp_a()), registry, &loop_a,
        "A"));
    b = std::make_unique<Graph>(Graph::build(
        spec("02:00:00:00:00:14", "192.0.2.20/24", "2001:db8::20/64", port_offloads()), registry, &loop_b, "B"));
    // Past the duplicate address checks.
    for (int i = 0; i < 12; ++i) {
      clock.advance(100ms);
      pump();
    }
  }
  void TearDown() override {
    b.reset();
    a.reset();
  }
  void pump() {
    for (int i = 0; i < 100000; ++i) {
      if (loop_a.run_once() + loop_b.run_once() == 0) return;
    }
    ADD_FAILURE() << "the loops never went idle";
  }
  std::uint64_t counter(Graph& g, const char* proto, const char* name) {
    return g.find(proto)->counters().value(name);
  }
  udp::UdpProtocol& udp_of(Graph& g) { return *g.find_as<udp::UdpProtocol>("udp0"); }
  tcp::TcpProtocol& tcp_of(Graph& g) { return *g.find_as<tcp::TcpProtocol>("tcp0"); }

  // Accepts on `l` and moves `n` bytes from `client` to the accepted side.
  void transfer(tcp::TcpListener& l, tcp::TcpSocket& client, std::size_t n, tcp::TcpSocket& accepted) {
    pump();
    Result<tcp::TcpSocket> s = l.accept();
    ASSERT_TRUE(s.ok()) << to_string(s.error());
    accepted = std::move(*s);
    const std::vector<std::byte> data = pattern(n, 3);
    std::vector<std::byte> got;
    std::size_t written = 0;
    for (int round = 0; round < 100000 && got.size() < n; ++round) {
      if (written < n) {
        Result<std::size_t> w = client.write(std::span(data).subspan(written));
        if (w) written += *w;
      }
      pump();
      std::vector<std::byte> buf(65536);
      Result<std::size_t> r = accepted.read(buf);
      if (r && *r > 0) got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*r));
      clock.advance(1ms);
    }
    EXPECT_EQ(got, data);
  }
};

TEST_F(DualStack, BothFamiliesPassTheirChecksAndPingAcross) {
  auto* ip6 = a->find_as<ipv6::Ipv6Protocol>("ip6");
  ASSERT_NE(ip6, nullptr);
  EXPECT_EQ(counter(*a, "nd0", "dad_ok"), 2u) << "link-local and global";
  EXPECT_EQ(counter(*a, "nd0", "dad_duplicate"), 0u);
  for (std::size_t size : {56u, 1452u, 1453u, 4000u}) {
    std::vector<std::byte> m(icmpv6::Header::kSize + size);
    icmpv6::Header h;
    h.type = icmpv6::kEchoRequest;
    h.rest = 0x42;
    h.write(std::span(m).first<icmpv6::Header::kSize>());
    const std::uint32_t pseudo = csum::pseudo_header(kV6A, kV6B, ipv6::kIcmpv6, static_cast<std::uint32_t>(m.size()));
    const std::uint16_t c = csum::finish(csum::partial(m.data(), m.size(), pseudo));
    std::memcpy(m.data() + 2, &c, 2);
    ASSERT_TRUE(ip6->send(kV6B, ipv6::kIcmpv6, Msg::copy_of(m)).ok()) << size;
    pump();
  }
  EXPECT_EQ(counter(*b, "icmp6", "tx_echo_reply"), 4u);
  EXPECT_EQ(counter(*a, "icmp6", "rx_echo_reply"), 4u);
  EXPECT_EQ(counter(*a, "ip6", "tx_fragments"), 5u) << "1453 and 4000 bytes do not fit 1500: 2 + 3 pieces";
  EXPECT_EQ(counter(*a, "ip6", "reasm_ok"), 2u) << "and their replies came back in pieces";
}

TEST_F(DualStack, UdpOverIpv6OfEverySizeUpTo60000Bytes) {
  udp::UdpSocket server = udp_of(*b).socket();
  ASSERT_TRUE(server.bind(IpAddr{}, Port{7}).ok());
  udp::UdpSocket client = udp_of(*a).socket();
  ASSERT_TRUE(client.connect(kV6B, Port{7}).ok());
  for (std::size_t size : {1u, 1452u, 1453u, 8000u, 60000u}) {
    auto data = pattern(size, static_cast<unsigned>(size));
    ASSERT_TRUE(client.send(Msg::copy_of(data)).ok()) << size;
    pump();
    auto got = server.recvfrom();
    ASSERT_TRUE(got.ok()) << size << ": " << to_string(got.error());
    EXPECT_EQ(got->from, kV6A);
    EXPECT_EQ(contents(got->payload), data) << size;
    ASSERT_TRUE(server.sendto(std::move(got->payload), got->from, got->from_port).ok()) << size;
    pump();
    auto back = client.recvfrom();
    ASSERT_TRUE(back.ok()) << size;
    EXPECT_EQ(contents(back->payload), data) << size;
  }
  // The same wildcard socket takes IPv4 too.
  udp::UdpSocket v4 = udp_of(*a).socket();
  ASSERT_TRUE(v4.connect(kV4B, Port{7}).ok());
  ASSERT_TRUE(v4.send(Msg::copy_of(pattern(100, 1))).ok());
  pump();
  auto got = server.recvfrom();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->from, kV4A);
  EXPECT_EQ(counter(*b, "udp0", "drop_bad_csum"), 0u);
}

TEST_F(DualStack, TcpOverIpv6CarriesAMegabyteInFullSizedSegments) {
  Result<tcp::TcpListener> l = tcp_of(*b).listen(kV6B, Port{5001});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket client = tcp_of(*a).socket();
  ASSERT_TRUE(client.connect(kV6B, Port{5001}).ok());
  tcp::TcpSocket server;
  transfer(*l, client, 1 << 20, server);
  EXPECT_EQ(server.tuple().remote.addr, kV6A);
  EXPECT_EQ(server.tuple().local.addr, kV6B);
  EXPECT_EQ(client.stats().mss, 1440u) << "1500 - 40 (IPv6) - 20 (TCP)";
  EXPECT_EQ(counter(*a, "ip6", "tx_fragments"), 0u) << "TCP segments fit the path";
  EXPECT_EQ(counter(*b, "tcp0", "drop_bad_csum"), 0u);
  EXPECT_GT(counter(*a, "ip6", "tx_packets"), (1u << 20) / 1440);
}

TEST_F(DualStack, OneWildcardListenerAcceptsBothFamilies) {
  Result<tcp::TcpListener> l = tcp_of(*b).listen(IpAddr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket over6 = tcp_of(*a).socket();
  ASSERT_TRUE(over6.connect(kV6B, Port{80}).ok());
  tcp::TcpSocket s6;
  transfer(*l, over6, 10000, s6);
  EXPECT_EQ(s6.tuple().remote.addr, kV6A);
  tcp::TcpSocket over4 = tcp_of(*a).socket();
  ASSERT_TRUE(over4.connect(kV4B, Port{80}).ok());
  tcp::TcpSocket s4;
  transfer(*l, over4, 10000, s4);
  EXPECT_EQ(s4.tuple().remote.addr, kV4A) << "an IPv4 peer in its (mapped) IpAddr form";
  EXPECT_EQ(s4.tuple().local.addr, kV4B);
}

// Ports that fill transport checksums serve IPv6 as they serve IPv4:
// whole packets leave theirs to the port, and what ipv6 must fragment (or
// keeps to itself) it finishes in software.
struct DualStackOffload : DualStack {
  bool port_offloads() const override { return true; }
};

TEST_F(DualStackOffload, Ipv6LeavesWholePacketsChecksumsToThePort) {
  udp::UdpSocket server = udp_of(*b).socket();
  ASSERT_TRUE(server.bind(IpAddr{}, Port{7}).ok());
  udp::UdpSocket client = udp_of(*a).socket();
  ASSERT_TRUE(client.connect(kV6B, Port{7}).ok());
  for (std::size_t size : {1u, 1452u, 1453u, 8000u}) {
    auto data = pattern(size, static_cast<unsigned>(size));
    ASSERT_TRUE(client.send(Msg::copy_of(data)).ok()) << size;
    pump();
    auto got = server.recvfrom();
    ASSERT_TRUE(got.ok()) << size;
    EXPECT_EQ(contents(got->payload), data) << size;
  }
  EXPECT_EQ(counter(*a, "udp0", "tx_csum_by_port"), 4u);
  EXPECT_EQ(counter(*a, "ip6", "tx_l4_csum_resolved"), 2u) << "1453 and 8000 bytes go in fragments";
  EXPECT_EQ(counter(*b, "udp0", "drop_bad_csum"), 0u);

  Result<tcp::TcpListener> l = tcp_of(*b).listen(kV6B, Port{5001});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*a).socket();
  ASSERT_TRUE(c.connect(kV6B, Port{5001}).ok());
  tcp::TcpSocket s6;
  transfer(*l, c, 200000, s6);
  EXPECT_GT(counter(*a, "tcp0", "tx_csum_by_port"), 200000u / 1440);
  EXPECT_EQ(counter(*b, "tcp0", "drop_bad_csum"), 0u);
  EXPECT_EQ(counter(*a, "net0", "drop_bad_offload"), 0u);
  EXPECT_GT(counter(*a, "net0", "tx_csum_filled"), 200000u / 1440);

  // To ourselves no port is on the way: ipv6 finishes the checksum.
  udp::UdpSocket self = udp_of(*a).socket();
  ASSERT_TRUE(self.bind(kV6A, Port{9}).ok());
  udp::UdpSocket to_self = udp_of(*a).socket();
  ASSERT_TRUE(to_self.connect(kV6A, Port{9}).ok());
  ASSERT_TRUE(to_self.send(Msg::copy_of(pattern(100, 5))).ok());
  pump();
  auto mine = self.recvfrom();
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(contents(mine->payload), pattern(100, 5));
  EXPECT_EQ(counter(*a, "udp0", "drop_bad_csum"), 0u);
  EXPECT_EQ(counter(*a, "ip6", "tx_l4_csum_resolved"), 3u);
}

// The fault layer over IPv6 as over IPv4: between A's TCP and its ipv6 it
// marks ECN-capable packets Congestion Experienced (ECN rides in the
// traffic class), B echoes the marks, and A's window shrinks with no loss
// (RFC 3168 over IPv6, RFC 8200 7).
struct DualStackCongested : DualStack {
  std::string tcp_a() const override {
    return "fault  f6    below=ip6 dir=tx ce=0.02 seed=3\n"
           "tcp    tcp0  below=ip0,f6 ecn=on\n";
  }
};

TEST_F(DualStackCongested, EcnMarksInTheTrafficClassCutTheWindowWithoutALoss) {
  Result<tcp::TcpListener> l = tcp_of(*b).listen(kV6B, Port{5001});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket client = tcp_of(*a).socket();
  ASSERT_TRUE(client.connect(kV6B, Port{5001}).ok());
  tcp::TcpSocket server;
  transfer(*l, client, 1 << 20, server);
  EXPECT_EQ(server.tuple().remote.addr, kV6A);
  EXPECT_GT(counter(*a, "f6", "tx_ce_marked"), 0u);
  EXPECT_GT(counter(*b, "tcp0", "ecn_ce_received"), 0u) << "B saw CE in the IPv6 traffic class";
  EXPECT_GT(counter(*a, "tcp0", "ecn_reductions"), 0u);
  EXPECT_EQ(counter(*a, "tcp0", "retransmits"), 0u) << "marks, not losses";
}

}  // namespace
}  // namespace xk

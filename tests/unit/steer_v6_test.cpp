// filterd's data path over IPv6 (docs/filterd.md, "IPv6"), whole stacks in
// one process: a dual-stack peer (2001:db8::1) on the external link,
// filterd sharing 2001:db8::10 with two dual-stack nodes, each checking the
// shared address (unanswered: the nodes share it) and finding its
// neighbours through filterd's proxy Neighbor Discovery.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "filterd_fixture.hpp"
#include "xk/filterd/steer.hpp"
#include "xk/protocols/ipv6.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk::filterd {
namespace {

using namespace std::chrono_literals;
using test::DirectAuthority;

IpAddr ip(std::string_view text) { return *parse_ip(text); }

const IpAddr kPeer = ip("2001:db8::1");
const IpAddr kShared = ip("2001:db8::10");

// `dad`: duplicate-address probes (the nodes' go unanswered by filterd).
// A node (`node`) shares the address: its hairpin sends what another node
// owns to filterd's channel MAC, as filterd's client builds it.
std::string dual_stack(const std::string& link, const std::string& mac, const std::string& v4, const std::string& v6,
                       int dad, bool node = false) {
  const std::string nd_extra = node ? " static=2001:db8::10@02:78:6b:00:00:01" : "";
  const std::string ip6_extra = node ? " hairpin=on" : "";
  return "pair   net0  link=" + link + " mac=" + mac + " queue=4096\n" +
         "eth    eth0  below=net0\n"
         "arp    arp0  below=eth0\n"
         "nd     nd0   below=eth0 dad=" + std::to_string(dad) + " retrans_ms=10" + nd_extra + "\n" +
         "ipv4   ip0   below=eth0,arp0 addr=" + v4 + "\n" +
         "ipv6   ip6   below=eth0,nd0 addr=" + v6 + ip6_extra + "\n" +
         "icmp   icmp0 below=ip0\n"
         "icmpv6 icmp6 below=ip6,nd0\n"
         "udp    udp0  below=ip0,ip6\n"
         "tcp    tcp0  below=ip0,ip6 rto_min_ms=10\n";
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<unsigned char>(i * 31 + seed));
  return v;
}

class SteerV6Test : public test::FilterdWithNodes {
 public:
  void SetUp() override {
    Setup s;
    s.peer_stack = dual_stack("ext", "02:00:00:00:00:01", "192.0.2.1/24", "2001:db8::1/64", 0);
    s.shared6 = "2001:db8::10/64";
    s.node_stack = [](const std::string& link, const std::string& mac) {
      return dual_stack(link, mac, "192.0.2.10/24", "2001:db8::10/64", 1, true);
    };
    build(s);
    if (HasFatalFailure()) return;
    auth1 = std::make_unique<DirectAuthority>(steer->filter(), 1);
    auth2 = std::make_unique<DirectAuthority>(steer->filter(), 2);
    for (auto [g, a] : {std::pair{&*node1, auth1.get()}, std::pair{&*node2, auth2.get()}}) {
      tcp_of(*g).set_port_authority(a);
      udp_of(*g).set_port_authority(a);
    }
    // Past the nodes' duplicate checks of the shared address.
    ASSERT_TRUE(run_until([&] {
      return node1->find_as<ipv6::Ipv6Protocol>("ip6")->source_for(kPeer).has_value() &&
             node2->find_as<ipv6::Ipv6Protocol>("ip6")->source_for(kPeer).has_value();
    }));
  }
  void TearDown() override { tear_down(); }

  // Moves `data` from one socket to the other, running everything.
  bool move(tcp::TcpSocket& from, tcp::TcpSocket& to, const std::vector<std::byte>& data) {
    std::size_t sent = 0;
    std::vector<std::byte> got, buf(65536);
    const bool done = run_until([&] {
      while (sent < data.size()) {
        auto n = from.write(std::span<const std::byte>(data).subspan(sent));
        if (!n || *n == 0) break;
        sent += *n;
      }
      for (auto n = to.read(buf); n && *n > 0; n = to.read(buf)) {
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
      }
      return got.size() >= data.size();
    });
    return done && got == data;
  }

  std::unique_ptr<DirectAuthority> auth1, auth2;
};

TEST_F(SteerV6Test, APeersConnectionReachesTheListeningNodeAndDataFlowsBothWays) {
  EXPECT_GE(steer_counter("node_nd_ignored"), 2u) << "both nodes' duplicate checks, unanswered";
  Result<tcp::TcpListener> l = tcp_of(*node2).listen(IpAddr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket client = tcp_of(*peer).socket();
  ASSERT_TRUE(client.connect(kShared, Port{80}).ok());
  tcp::TcpSocket server;
  ASSERT_TRUE(run_until([&] {
    if (auto s = l->accept()) server = std::move(*s);
    return server.is_open();
  }));
  EXPECT_EQ(server.tuple().remote.addr, kPeer);
  EXPECT_TRUE(move(client, server, pattern(300000, 1)));
  EXPECT_TRUE(move(server, client, pattern(200000, 2)));
  EXPECT_GE(steer_counter("proxy_nd"), 1u) << "node 2 asked filterd for the peer's address";
  EXPECT_EQ(steer_counter("learned_flows"), 1u) << "its SYN-ACK made the connection an exact flow";
  EXPECT_EQ(steer->filter().find_flow(FlowKey{Proto::tcp, kPeer, client.tuple().local.port, 80}),
            (Target{2, 0}));
  EXPECT_EQ(steer_counter("tx_denied"), 0u);
  EXPECT_EQ(steer->filter().count(Reason::bad_source), 0u);
  EXPECT_EQ(node1->find("tcp0")->counters().value("rx_segments"), 0u) << "nothing of it went to node 1";
}

TEST_F(SteerV6Test, ANodeConnectsOutAndSegmentsForNobodyGetFilterdsRst) {
  Result<tcp::TcpListener> l = tcp_of(*peer).listen(IpAddr{}, Port{5001});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket out = tcp_of(*node1).socket();
  ASSERT_TRUE(out.connect(kPeer, Port{5001}).ok());
  tcp::TcpSocket accepted;
  ASSERT_TRUE(run_until([&] {
    if (auto s = l->accept()) accepted = std::move(*s);
    return accepted.is_open();
  }));
  EXPECT_EQ(accepted.tuple().remote.addr, kShared);
  EXPECT_TRUE(move(out, accepted, pattern(100000, 3)));
  // A port nobody listens on: filterd's own TCP (over its ipv6) refuses it.
  tcp::TcpSocket refused = tcp_of(*peer).socket();
  ASSERT_TRUE(refused.connect(kShared, Port{81}).ok());
  ASSERT_TRUE(run_until([&] { return refused.state() == tcp::State::closed; }));
  EXPECT_GE(steer->filter().count(Reason::default_rst), 1u);
  // A UDP datagram for nobody: port unreachable, from filterd's icmpv6.
  udp::UdpSocket u = udp_of(*peer).socket();
  ASSERT_TRUE(u.connect(kShared, Port{9999}).ok());
  ASSERT_TRUE(u.send(Msg::copy_of(pattern(20, 4))).ok());
  ASSERT_TRUE(run_until([&] { return peer->find("udp0")->counters().value("icmp_errors") >= 1; }));
}

// Node to node over the shared IPv6 address: node 1's ipv6 finds the
// connection is not its own (ctl::ClaimsOwn) and sends it out to filterd,
// whose filter steers it to node 2's listener; the answers come back the
// same way. Each node's own connections stay in its loopback.
TEST_F(SteerV6Test, ANodeReachesAnotherNodeOverTheSharedAddressThroughTheHairpin) {
  Result<tcp::TcpListener> l = tcp_of(*node2).listen(IpAddr{}, Port{90});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket out = tcp_of(*node1).socket();
  ASSERT_TRUE(out.connect(kShared, Port{90}).ok());
  tcp::TcpSocket in;
  ASSERT_TRUE(run_until([&] {
    if (auto s = l->accept()) in = std::move(*s);
    return in.is_open();
  }));
  EXPECT_EQ(in.tuple().remote.addr, kShared);
  EXPECT_EQ(in.tuple().remote.port, out.tuple().local.port);
  EXPECT_TRUE(move(out, in, pattern(200000, 5)));
  EXPECT_TRUE(move(in, out, pattern(150000, 6)));
  EXPECT_GT(node1->find("ip6")->counters().value("tx_hairpin"), 0u);
  EXPECT_GT(node2->find("ip6")->counters().value("tx_hairpin"), 0u);
  EXPECT_EQ(node1->find("ip6")->counters().value("tx_loopback"), 0u);
  EXPECT_EQ(steer_counter("tx_denied"), 0u);
  // A node's connection to its own listener stays inside it.
  Result<tcp::TcpListener> own = tcp_of(*node1).listen(IpAddr{}, Port{91});
  ASSERT_TRUE(own.ok());
  tcp::TcpSocket self = tcp_of(*node1).socket();
  ASSERT_TRUE(self.connect(kShared, Port{91}).ok());
  tcp::TcpSocket self_in;
  ASSERT_TRUE(run_until([&] {
    if (auto s = own->accept()) self_in = std::move(*s);
    return self_in.is_open();
  }));
  EXPECT_TRUE(move(self, self_in, pattern(50000, 7)));
  EXPECT_GT(node1->find("ip6")->counters().value("tx_loopback"), 0u);
}

}  // namespace
}  // namespace xk::filterd


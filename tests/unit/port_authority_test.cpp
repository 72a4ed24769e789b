// TCP asking a PortAuthority (filterd, for nodes sharing one address) for its
// ports: listen and connect take what the authority grants, and give it back
// when the listener closes and when the connection is over (after TIME-WAIT).

#include <algorithm>
#include <chrono>
#include <optional>
#include <ostream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "run_until.hpp"
#include "xk/drivers/loopback.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/kinds.hpp"
#include "xk/port_authority.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk {
namespace {

struct Call {
  std::string what;
  std::uint16_t port;
  std::uint32_t remote;
  std::uint16_t remote_port;
  bool group;
  friend bool operator==(const Call&, const Call&) = default;
  friend void PrintTo(const Call& c, std::ostream* os) {
    *os << c.what << " " << c.port << " " << to_string(Ipv4Addr{c.remote}) << ":" << c.remote_port
        << (c.group ? " group" : "");
  }
};

class FakeAuthority final : public PortAuthority {
 public:
  Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool group) override {
    calls.push_back({proto == 17 ? "udp-bind" : "listen", port, 0, 0, group});
    if (refuse) return Errc::exists;
    return port != 0 ? port : next_listen++;
  }
  void release_listen(std::uint8_t proto, std::uint16_t port) noexcept override {
    calls.push_back({proto == 17 ? "udp-unbind" : "unlisten", port, 0, 0, false});
  }
  Result<std::uint16_t> claim_connect(std::uint8_t, std::uint16_t port, const IpAddr& remote,
                                      std::uint16_t remote_port) override {
    calls.push_back({"connect", port, remote.v4().value, remote_port, false});
    if (refuse) return Errc::exists;
    return port != 0 ? port : next_connect++;
  }
  void release_connect(std::uint8_t, std::uint16_t port, const IpAddr& remote, std::uint16_t remote_port) noexcept override {
    calls.push_back({"release", port, remote.v4().value, remote_port, false});
  }

  std::vector<Call> calls;
  std::uint16_t next_listen = 7000;
  std::uint16_t next_connect = 40000;
  bool refuse = false;
};

class PortAuthorityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    register_all_kinds(registry);
    graph.emplace(Graph::build(
        "loopback lo0\nipv4 ip0 below=lo0 addr=192.0.2.1/24\ntcp tcp0 below=ip0 msl_ms=2 delack_ms=1\n"
        "udp udp0 below=ip0\n",
        registry, &loop));
    tcp = graph->find_as<tcp::TcpProtocol>("tcp0");
    tcp->set_port_authority(&authority);
    udp = graph->find_as<udp::UdpProtocol>("udp0");
    udp->set_port_authority(&authority);
  }
  void TearDown() override {
    graph.reset();
  }
  // Runs the loop until `done`, at most 2 s.
  template <class Pred>
  bool run_until(Pred done) {
    return test::run_until(loop, std::move(done), std::chrono::seconds(2));
  }

  Registry registry;
  EventLoop loop;
  std::optional<Graph> graph;
  tcp::TcpProtocol* tcp = nullptr;
  udp::UdpProtocol* udp = nullptr;
  FakeAuthority authority;
};

constexpr std::uint32_t kSelf = 0xC0000201;  // 192.0.2.1

TEST_F(PortAuthorityTest, ListenAndConnectUseTheGrantedPortsAndGiveThemBack) {
  Result<tcp::TcpListener> l = tcp->listen(Ipv4Addr{}, Port{0}, 8, /*group=*/true);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->port(), Port{7000});
  tcp::TcpSocket c = tcp->socket();
  ASSERT_TRUE(c.connect(Ipv4Addr{kSelf}, Port{7000}).ok());
  EXPECT_EQ(c.tuple().local.port, 40000);
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (Result<tcp::TcpSocket> a = l->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value();
  }));
  EXPECT_EQ(s->tuple().remote.port, 40000);
  // The active side closes first and so holds TIME-WAIT: its port is given
  // back only when that is over.
  ASSERT_TRUE(c.close().ok());
  ASSERT_TRUE(run_until([&] { return s->events() & tcp::ev_hangup; }));
  ASSERT_TRUE(s->close().ok());
  ASSERT_TRUE(run_until([&] { return tcp->connection_count() == 1 && tcp->time_wait_count() == 1; }));
  // The accepted side ended (LAST-ACK): the flow filterd learnt from its
  // SYN-ACK is given back; the connecting side's is not yet.
  const Call passive_release{"release", 7000, kSelf, 40000, false};
  auto called = [&](const Call& call) {
    return std::find(authority.calls.begin(), authority.calls.end(), call) != authority.calls.end();
  };
  ASSERT_TRUE(run_until([&] { return called(passive_release); }));
  ASSERT_TRUE(run_until([&] { return tcp->connection_count() == 0; }));
  // Given back on the pass after, so what the last pass queued leaves first.
  const Call active_release{"release", 40000, kSelf, 7000, false};
  ASSERT_TRUE(run_until([&] { return called(active_release); }));
  ASSERT_TRUE(l->close().ok());
  std::vector<Call> want = {
      {"listen", 0, 0, 0, true},
      {"connect", 0, kSelf, 7000, false},
      passive_release,
      active_release,
      {"unlisten", 7000, 0, 0, false},
  };
  EXPECT_EQ(authority.calls, want);
}

TEST_F(PortAuthorityTest, ARefusalIsTheCallersError) {
  authority.refuse = true;
  Result<tcp::TcpListener> l = tcp->listen(Ipv4Addr{}, Port{80});
  EXPECT_EQ(l.error(), Errc::exists);
  tcp::TcpSocket c = tcp->socket();
  EXPECT_EQ(c.connect(Ipv4Addr{kSelf}, Port{80}).error(), Errc::exists);
  EXPECT_EQ(tcp->connection_count(), 0u);
  // Nothing was granted, so nothing is given back.
  for (const Call& call : authority.calls) EXPECT_TRUE(call.what == "listen" || call.what == "connect") << call.what;
}

TEST_F(PortAuthorityTest, AnExplicitLocalPortIsAskedFor) {
  Result<tcp::TcpListener> l = tcp->listen(Ipv4Addr{}, Port{5000});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp->socket();
  ASSERT_TRUE(c.connect(Ipv4Addr{kSelf}, Port{5000}, Ipv4Addr{}, Port{41000}).ok());
  EXPECT_EQ(c.tuple().local.port, 41000);
  EXPECT_EQ(authority.calls[1], (Call{"connect", 41000, kSelf, 5000, false}));
  c.abort();
  EXPECT_EQ(authority.calls.back().what, "connect");  // the RST goes out first
  ASSERT_TRUE(run_until([&] { return authority.calls.back().what == "release"; }));
  EXPECT_EQ(authority.calls.back(), (Call{"release", 41000, kSelf, 5000, false}));
}

// bind() to a named port claims it host-wide at once, as a listener's (so a
// bind to a port another node holds fails, as Open MPI expects); releasing
// the reservation gives it back. An ephemeral bind asks nobody.
TEST_F(PortAuthorityTest, ABindToANamedPortClaimsItAtOnce) {
  Result<Port> r = tcp->reserve_port(Ipv4Addr{}, Port{6000}, false, true);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(authority.calls.size(), 1u);
  EXPECT_EQ(authority.calls[0], (Call{"listen", 6000, 0, 0, true}));
  tcp->release_port(Ipv4Addr{}, Port{6000});
  ASSERT_EQ(authority.calls.size(), 2u);
  EXPECT_EQ(authority.calls[1], (Call{"unlisten", 6000, 0, 0, false}));
  ASSERT_TRUE(tcp->reserve_port(Ipv4Addr{}, Port{0}, false).ok());
  EXPECT_EQ(authority.calls.size(), 2u);
  authority.refuse = true;
  EXPECT_EQ(tcp->reserve_port(Ipv4Addr{}, Port{6001}, false).error(), Errc::exists);
  authority.refuse = false;
  EXPECT_TRUE(tcp->reserve_port(Ipv4Addr{}, Port{6001}, false).ok()) << "a refused bind held nothing";
}

// bind() then listen(): the bind's claim is the listener's, so filterd is
// asked once and the port is never free in between; the listener's close
// gives it back. A bind to an ephemeral port asked nobody, so its listen asks.
TEST_F(PortAuthorityTest, AListenOnABoundPortKeepsTheBindsClaim) {
  ASSERT_TRUE(tcp->reserve_port(Ipv4Addr{}, Port{6000}, false, true).ok());
  EXPECT_EQ(tcp->listen(Ipv4Addr{}, Port{6000}).error(), Errc::exists) << "held by the reservation";
  Result<tcp::TcpListener> l = tcp->listen_reserved(Ipv4Addr{}, Port{6000}, 16, true);
  ASSERT_TRUE(l.ok()) << to_string(l.error());
  EXPECT_EQ(l->port(), Port{6000});
  ASSERT_EQ(authority.calls.size(), 1u) << "no release and claim again";
  EXPECT_EQ(authority.calls[0], (Call{"listen", 6000, 0, 0, true}));
  EXPECT_EQ(tcp->reserve_port(Ipv4Addr{}, Port{6000}, false).error(), Errc::exists) << "the listener holds it";
  EXPECT_EQ(tcp->listen_reserved(Ipv4Addr{}, Port{6000}).error(), Errc::not_found) << "nothing reserved any more";
  (void)l->close();
  ASSERT_EQ(authority.calls.size(), 2u);
  EXPECT_EQ(authority.calls[1], (Call{"unlisten", 6000, 0, 0, false}));

  Result<Port> eph = tcp->reserve_port(Ipv4Addr{}, Port{0}, false);
  ASSERT_TRUE(eph.ok());
  EXPECT_EQ(authority.calls.size(), 2u);
  authority.refuse = true;
  EXPECT_EQ(tcp->listen_reserved(Ipv4Addr{}, *eph).error(), Errc::exists);
  const std::size_t asked = authority.calls.size();
  EXPECT_EQ(tcp->listen(Ipv4Addr{}, *eph).error(), Errc::exists);
  EXPECT_EQ(authority.calls.size(), asked) << "refused at home: the reservation is held again";
  authority.refuse = false;
  Result<tcp::TcpListener> e = tcp->listen_reserved(Ipv4Addr{}, *eph);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(authority.calls.back(), (Call{"listen", eph->value, 0, 0, false}));
  (void)e->close();
}

TEST_F(PortAuthorityTest, UdpPortsAreClaimedByTheFirstSocketAndReleasedByTheLast) {
  udp::SocketOptions shared;
  shared.reuse_addr = true;
  udp::UdpSocket a = udp->socket(shared);
  udp::UdpSocket b = udp->socket(shared);
  ASSERT_TRUE(a.bind(Ipv4Addr{}, Port{0}).ok());
  Result<udp::Endpoint> ea = a.local_endpoint();
  ASSERT_TRUE(ea.ok());
  EXPECT_EQ(ea->port, 7000);  // the authority's pick
  ASSERT_TRUE(b.bind(Ipv4Addr{kSelf}, Port{7000}).ok());  // the same port: no second claim
  // What a RESYNC declares: the port once, however many sockets share it.
  EXPECT_EQ(udp->bound_ports(), std::vector<std::uint16_t>{7000});
  ASSERT_TRUE(a.close().ok());
  EXPECT_EQ(authority.calls.size(), 1u);
  EXPECT_EQ(udp->bound_ports(), std::vector<std::uint16_t>{7000});
  ASSERT_TRUE(b.close().ok());
  std::vector<Call> want = {{"udp-bind", 0, 0, 0, false}, {"udp-unbind", 7000, 0, 0, false}};
  EXPECT_EQ(authority.calls, want);
  EXPECT_TRUE(udp->bound_ports().empty());
  authority.refuse = true;
  udp::UdpSocket c = udp->socket();
  EXPECT_EQ(c.bind(Ipv4Addr{}, Port{53}).error(), Errc::exists);
}

}  // namespace
}  // namespace xk

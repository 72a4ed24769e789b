// filterd's data path (steer) with whole stacks around it, in one process:
//
//   peer  (192.0.2.1, "a Linux host")  --pair "ext"--  filterd (steer + its own
//   eth/arp/ipv4/icmp/udp/tcp for 192.0.2.10)  --pair "node1"/"node2"--  two
//   nodes, each a whole xk stack with the shared address 192.0.2.10; and
//   filterd's node port --pair "nodeport"-- a node on "another host".
//
// The control plane is not here: the tests fill the filter tables directly
// (and a PortAuthority that does so stands in for the control socket).

#include <array>
#include <chrono>
#include <string>
#include <memory>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "tcb.hpp"
#include "filterd_fixture.hpp"
#include "run_until.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/steer.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk::filterd {
namespace {

using namespace std::chrono_literals;

constexpr Ipv4Addr kPeer{0xC0000201};    // 192.0.2.1
constexpr Ipv4Addr kShared{0xC000020A};  // 192.0.2.10
using test::kNode1;
using test::kNode2;

std::string stack(const std::string& link, const std::string& mac, const std::string& addr) {
  return "pair net0 link=" + link + " mac=" + mac + " queue=4096\n"
         "eth  eth0 below=net0\n"
         "arp  arp0 below=eth0\n"
         "ipv4 ip0  below=eth0,arp0 addr=" + addr + "\n"
         "icmp icmp0 below=ip0\n"
         "udp  udp0 below=ip0\n"
         "tcp  tcp0 below=ip0 rto_min_ms=10\n";
}

using test::DirectAuthority;

class SteerTest : public test::FilterdWithNodes {
 public:
  void SetUp() override {
    Setup s;
    s.peer_stack = stack("ext", "02:00:00:00:00:01", "192.0.2.1/24");
    s.node_port = true;
    s.node_stack = [](const std::string& link, const std::string& mac) { return stack(link, mac, "192.0.2.10/24"); };
    build(s);
    if (HasFatalFailure()) return;
    auth1 = std::make_unique<DirectAuthority>(steer->filter(), 1);
    auth2 = std::make_unique<DirectAuthority>(steer->filter(), 2);
    tcp_of(*node1).set_port_authority(auth1.get());
    tcp_of(*node2).set_port_authority(auth2.get());
    udp_of(*node2).set_port_authority(auth2.get());
  }
  void TearDown() override { tear_down(); }
  std::unique_ptr<DirectAuthority> auth1, auth2;
};

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = std::byte(static_cast<unsigned char>(x >> 24));
  }
  return v;
}

// Pushes `data` from one socket to the other, running everything.
bool move_bytes(SteerTest& t, tcp::TcpSocket& from, tcp::TcpSocket& to, const std::vector<std::byte>& data,
                std::vector<std::byte>& got) {
  std::size_t sent = 0;
  std::vector<std::byte> buf(65536);
  return t.run_until([&] {
    while (sent < data.size()) {
      auto n = from.write(std::span<const std::byte>(data).subspan(sent));
      if (!n) break;
      sent += *n;
    }
    for (;;) {
      auto n = to.read(buf);
      if (!n || *n == 0) break;
      got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
    }
    return got.size() >= data.size();
  }, 10000ms);
}

TEST_F(SteerTest, APeersConnectionReachesTheListeningNodeAndDataFlowsBothWays) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (auto a = l->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value();
  }));
  auto up = pattern(1 << 20, 1), down = pattern(300000, 2);
  std::vector<std::byte> got_up, got_down;
  ASSERT_TRUE(move_bytes(*this, c, *s, up, got_up));
  ASSERT_TRUE(move_bytes(*this, *s, c, down, got_down));
  EXPECT_EQ(got_up, up);
  EXPECT_EQ(got_down, down);
  EXPECT_GT(steer_counter("rx_to_node"), 700u);
  EXPECT_GT(steer_counter("tx_from_nodes"), 200u);
  EXPECT_GE(steer_counter("proxy_arp"), 1u);  // the node asked filterd for the peer's MAC
  EXPECT_EQ(steer_counter("tx_denied"), 0u);
  // Node 2 saw none of it.
  EXPECT_EQ(tcp_of(*node2).counters().value("rx_segments"), 0u);
}

TEST_F(SteerTest, ANodeConnectsOutThroughTheRuleItsAuthorityInstalled) {
  Result<tcp::TcpListener> l = tcp_of(*peer).listen(Ipv4Addr{}, Port{7});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*node2).socket();
  ASSERT_TRUE(c.connect(kPeer, Port{7}).ok());
  EXPECT_EQ(c.tuple().local.port, 50000);
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (auto a = l->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value() && c.state() == tcp::State::established;
  }));
  auto data = pattern(200000, 3);
  std::vector<std::byte> got;
  ASSERT_TRUE(move_bytes(*this, c, *s, data, got));
  EXPECT_EQ(got, data);
}

TEST_F(SteerTest, SegmentsForNobodyGetFilterdsRst) {
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{81}).ok());
  ASSERT_TRUE(run_until([&] { return c.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c.connection()->pending_error(), Errc::refused);
  EXPECT_GE(steer->filter().count(Reason::default_rst), 1u);
  EXPECT_GE(filterd->find("tcp0")->counters().value("resets_sent"), 1u);
}

TEST_F(SteerTest, DatagramsForNobodyAreUnreachableAndARuleSteersThem) {
  udp::UdpSocket u = udp_of(*peer).socket();
  ASSERT_TRUE(u.connect(kShared, Port{9999}).ok());
  ASSERT_TRUE(u.send(std::as_bytes(std::span("hello", 5))).ok());
  ASSERT_TRUE(run_until([&] { return u.session()->pending_error() != Errc::ok; }));
  EXPECT_EQ(u.session()->pending_error(), Errc::port_unreachable);
  (void)u.take_error();
  // A user rule in pcap syntax gives the port to node 2.
  RuleResult r = steer->filter().add_rule("udp dst port 9999", Target{2, 0});
  ASSERT_TRUE(r.ok()) << r.error;
  udp::UdpSocket n2 = udp_of(*node2).socket();
  udp_of(*node2).set_port_authority(nullptr);  // the rule is the authority here
  ASSERT_TRUE(n2.bind(Ipv4Addr{}, Port{9999}).ok());
  ASSERT_TRUE(u.send(std::as_bytes(std::span("again", 5))).ok());
  ASSERT_TRUE(run_until([&] { return n2.readable(); }));
  Result<udp::Datagram> d = n2.recvfrom();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->from, kPeer);
  EXPECT_EQ(steer->filter().count(Reason::rule_hit), 1u);
  // Counted per rule (xkctl rules) and per node (xkctl nodes).
  ASSERT_EQ(steer->filter().rules().size(), 1u);
  EXPECT_EQ(steer->filter().rules()[0].hits, 1u);
  EXPECT_EQ(steer->filter().rules()[0].expression, "udp dst port 9999");
  EXPECT_EQ(steer->rx_frames(2), 1u);
}

TEST_F(SteerTest, ANodeForgingAnotherNodesFlowIsDroppedAndCounted) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  // Node 2 sends from port 80 (node 1's) without asking: no authority.
  tcp_of(*node2).set_port_authority(nullptr);
  tcp::TcpSocket forged = tcp_of(*node2).socket();
  ASSERT_TRUE(forged.connect(kPeer, Port{7}, Ipv4Addr{}, Port{80}).ok());
  ASSERT_TRUE(run_until([&] { return steer_counter("tx_denied") >= 1; }));
  EXPECT_EQ(tcp_of(*peer).counters().value("rx_segments"), 0u);
  // The denials are the forger's (xkctl nodes / counters), none node 1's.
  EXPECT_EQ(steer->filter().egress_counts(2).denied, steer_counter("tx_denied"));
  EXPECT_EQ(steer->filter().egress_counts(2).allowed, 0u);
  EXPECT_EQ(steer->filter().egress_counts(1).denied, 0u);
  forged.abort();
}

TEST_F(SteerTest, ADetachedNodeLosesItsPortsAndItsPeersGetRst) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (auto a = l->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value();
  }));
  steer->detach(1);  // the node died
  EXPECT_FALSE(steer->attached(1));
  std::byte b[100] = {};
  ASSERT_TRUE(c.write(b).ok());
  ASSERT_TRUE(run_until([&] { return c.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c.connection()->pending_error(), Errc::reset);
  tcp_of(*node1).set_port_authority(nullptr);
}

// A filterd that (re)starts does not know the connections its nodes kept:
// until they are declared again, a segment of one is dropped unanswered
// instead of meeting an RST that would kill it; a SYN is still refused.
TEST_F(SteerTest, ARestartedFilterdKeepsQuietAboutFlowsItDoesNotKnowYet) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (auto a = l->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value() && c.state() == tcp::State::established;
  }));
  // The restart: the filter forgets the node's listener and flows.
  steer->filter().remove_node(1);
  steer->keep_quiet_until(loop.clock().now() + std::chrono::hours(1));
  const std::vector<std::byte> data = pattern(3000, 5);
  ASSERT_TRUE(c.write(data).ok());
  ASSERT_TRUE(run_until([&] { return steer_counter("rx_quiet") >= 1; }));
  EXPECT_EQ(c.connection()->pending_error(), Errc::ok);
  EXPECT_EQ(filterd->find("tcp0")->counters().value("resets_sent"), 0u);
  // A new connection to a port nobody has is refused as usual.
  tcp::TcpSocket refused = tcp_of(*peer).socket();
  ASSERT_TRUE(refused.connect(kShared, Port{81}).ok());
  ASSERT_TRUE(run_until([&] { return refused.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(refused.connection()->pending_error(), Errc::refused);
  // The node declares the connection again (RESYNC): the peer's
  // retransmission gets through, and the stream carries on.
  const tcp::FourTuple t = c.tuple();
  ASSERT_TRUE(steer->filter().add_flow(FlowKey{Proto::tcp, t.local.addr.v4(), t.local.port, 80}, Target{1, 0}).ok());
  std::vector<std::byte> got;
  std::vector<std::byte> buf(4096);
  ASSERT_TRUE(run_until([&] {
    for (;;) {
      auto n = s->read(buf);
      if (!n || *n == 0) break;
      got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
    }
    return got.size() >= data.size();
  }));
  EXPECT_EQ(got, data);
  EXPECT_EQ(c.connection()->pending_error(), Errc::ok);
  tcp_of(*node1).set_port_authority(nullptr);
}

// A node connects out from a port it leased (a listen-table entry, no exact
// flow) while a (re)started filterd keeps quiet: only that node opens
// connections from the port, so the peer's SYN-ACK and the stream's segments
// reach it (held back, the connection would wait for retransmissions that
// meet the same silence, and a node started with filterd would crawl).
class LeasedAuthority final : public PortAuthority {
 public:
  Result<std::uint16_t> claim_listen(std::uint8_t, std::uint16_t port, bool) override { return port; }
  void release_listen(std::uint8_t, std::uint16_t) noexcept override {}
  Result<std::uint16_t> claim_connect(std::uint8_t, std::uint16_t, const IpAddr&, std::uint16_t) override { return 40000; }
  void release_connect(std::uint8_t, std::uint16_t, const IpAddr&, std::uint16_t) noexcept override {}
};

TEST_F(SteerTest, ALeasedPortsSegmentsPassWhileFilterdKeepsQuiet) {
  Result<tcp::TcpListener> l = tcp_of(*peer).listen(Ipv4Addr{}, Port{7});
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(steer->filter().lease(Proto::tcp, 40000, Target{1, 0}).ok());
  LeasedAuthority leased;
  tcp_of(*node1).set_port_authority(&leased);
  steer->keep_quiet_until(loop.clock().now() + std::chrono::hours(1));
  tcp::TcpSocket c = tcp_of(*node1).socket();
  ASSERT_TRUE(c.connect(kPeer, Port{7}).ok());
  EXPECT_EQ(c.tuple().local.port, 40000);
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (auto a = l->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value() && c.state() == tcp::State::established;
  }, 3000ms));
  EXPECT_EQ(tcp_of(*node1).counters().value("retransmits"), 0u);
  // The stream both ways, with no exact flow ever installed.
  const std::vector<std::byte> data = pattern(200000, 6);
  std::vector<std::byte> got;
  ASSERT_TRUE(move_bytes(*this, *s, c, data, got));
  EXPECT_EQ(got, data);
  got.clear();
  ASSERT_TRUE(move_bytes(*this, c, *s, data, got));
  EXPECT_EQ(got, data);
  EXPECT_EQ(steer_counter("rx_quiet"), 0u);
  // Nothing of the stream was held back: the peer repaired no loss. (Its
  // probes, 2.5 ms after a burst with rto_min 10 ms, and a timeout its late
  // ACKs then undo, are the wall clock's: an ASan run on two busy cores
  // stalls this one-thread loop longer than that.)
  const CounterSet& pc = tcp_of(*peer).counters();
  const std::string why = "the peer's retransmits " + std::to_string(pc.value("retransmits")) + ", probes " +
                          std::to_string(pc.value("loss_probes")) + ", timeouts " +
                          std::to_string(pc.value("rto_expiries")) + " (" + std::to_string(pc.value("spurious_rtos")) +
                          " undone), window probes " + std::to_string(pc.value("window_probes"));
  EXPECT_EQ(pc.value("fast_retransmits"), 0u) << why;
  EXPECT_EQ(pc.value("loss_probe_repairs"), 0u) << why;
  EXPECT_EQ(pc.value("rto_expiries"), pc.value("spurious_rtos")) << why;
  EXPECT_GE(steer->filter().counters().value("lease_hit"), 10u);
  // A listener's port is still held back: the lease is what lets it through.
  ASSERT_TRUE(steer->filter().unlisten(Proto::tcp, 40000).ok());
  ASSERT_TRUE(steer->filter().listen(Proto::tcp, 40000, Target{1, 0}).ok());
  ASSERT_TRUE(s->write(data).ok());
  ASSERT_TRUE(run_until([&] { return steer_counter("rx_quiet") >= 1; }));
  EXPECT_EQ(filterd->find("tcp0")->counters().value("resets_sent"), 0u);
  c.abort();
  tcp_of(*node1).set_port_authority(nullptr);
}

// ---- a node that runs several stacks, one channel (queue) each -----------------
//
// Node 1 runs three stacks (queues 0..2), node 2 two; every stack is a whole
// xk stack with the shared address, on a channel of its own, and asks an
// authority that installs its (node, queue) as the target.

class QueueAuthority final : public PortAuthority {
 public:
  QueueAuthority(FilterEngine& f, Target t, std::uint16_t first_port) : f_(f), t_(t), next_(first_port) {}
  Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool group) override {
    Status st = group ? f_.join_group(static_cast<Proto>(proto), port, t_) : f_.listen(static_cast<Proto>(proto), port, t_);
    if (!st) return st.error();
    return port;
  }
  void release_listen(std::uint8_t proto, std::uint16_t port) noexcept override {
    (void)f_.leave_group(static_cast<Proto>(proto), port, t_);
  }
  Result<std::uint16_t> claim_connect(std::uint8_t proto, std::uint16_t port, const IpAddr& remote,
                                      std::uint16_t remote_port) override {
    std::uint16_t p = port != 0 ? port : next_++;
    if (Status st = f_.add_flow(FlowKey{static_cast<Proto>(proto), remote.v4(), remote_port, p}, t_); !st) return st.error();
    return p;
  }
  void release_connect(std::uint8_t proto, std::uint16_t port, const IpAddr& remote, std::uint16_t remote_port) noexcept override {
    (void)f_.remove_flow(FlowKey{static_cast<Proto>(proto), remote.v4(), remote_port, port});
  }

 private:
  FilterEngine& f_;
  Target t_;
  std::uint16_t next_;
};

class SteerQueuesTest : public ::testing::Test {
 public:
  static constexpr std::size_t kStacks = 5;  // node 1 queues 0..2, node 2 queues 0..1
  static Target target_of(std::size_t i) {
    return i < 3 ? Target{1, static_cast<std::uint16_t>(i)} : Target{2, static_cast<std::uint16_t>(i - 3)};
  }
  void SetUp() override {
    test::register_filterd_kinds(registry, hub);
    peer.emplace(Graph::build(stack("ext", "02:00:00:00:00:01", "192.0.2.1/24"), registry, &loop, "peer"));
    std::string spec = "pair  net0 link=ext mac=02:00:00:00:00:10 queue=4096\n";
    for (std::size_t i = 0; i < kStacks; ++i) {
      spec += "pair  ch" + std::to_string(i) + " link=s" + std::to_string(i) + " mac=02:78:6b:00:00:01 queue=4096\n";
    }
    spec +=
        "steer st0  below=net0 addr=192.0.2.10/24\n"
        "eth   eth0 below=st0\n"
        "arp   arp0 below=eth0\n"
        "ipv4  ip0  below=eth0,arp0 addr=192.0.2.10/24\n"
        "icmp  icmp0 below=ip0\n"
        "udp   udp0 below=ip0\n"
        "tcp   tcp0 below=ip0\n";
    filterd.emplace(Graph::build(spec, registry, &loop, "filterd"));
    steer = filterd->find_as<Steer>("st0");
    steer->set_resolver(filterd->find_as<arp::ArpProtocol>("arp0"));
    for (std::size_t i = 0; i < kStacks; ++i) {
      const std::string mac = "02:00:00:00:01:0" + std::to_string(i);
      stacks[i].emplace(Graph::build(stack("s" + std::to_string(i), mac, "192.0.2.10/24"), registry, &loop,
                                     "stack" + std::to_string(i)));
      const Target t = target_of(i);
      ASSERT_TRUE(steer->attach(t.node, t.queue, *filterd->find("ch" + std::to_string(i)), *parse_mac(mac)).ok());
      auth[i] = std::make_unique<QueueAuthority>(steer->filter(), t, static_cast<std::uint16_t>(50000 + 1000 * i));
      tcp_of(i).set_port_authority(auth[i].get());
    }
    // A channel per queue, once.
    EXPECT_EQ(steer->attach(1, 2, *filterd->find("ch0"), kNode1).error(), Errc::exists);
    EXPECT_TRUE(steer->attached(1, 2));
    EXPECT_FALSE(steer->attached(1, 3));
  }
  void TearDown() override {
    for (auto& s : stacks) s.reset();
    filterd.reset();
    peer.reset();
  }
  tcp::TcpProtocol& tcp_of(std::size_t i) { return *stacks[i]->find_as<tcp::TcpProtocol>("tcp0"); }
  std::uint64_t steer_counter(const char* name) { return steer->counters().value(name); }
  template <class F>
  bool run_until(F&& done, std::chrono::milliseconds limit = 10000ms) {
    return test::run_until(loop, std::forward<F>(done), limit);
  }

  EventLoop loop;
  drivers::PairHub hub;
  Registry registry;
  std::optional<Graph> peer, filterd;
  std::array<std::optional<Graph>, kStacks> stacks;
  std::array<std::unique_ptr<QueueAuthority>, kStacks> auth;
  Steer* steer = nullptr;
};

TEST_F(SteerQueuesTest, AFlowsFramesArriveOnItsQueuesChannelOnly) {
  tcp::TcpProtocol& p = *peer->find_as<tcp::TcpProtocol>("tcp0");
  Result<tcp::TcpListener> echo = p.listen(Ipv4Addr{}, Port{9});
  ASSERT_TRUE(echo.ok());
  // Queue 1 of node 1 connects out: only its channel carries the replies.
  tcp::TcpSocket c = tcp_of(1).socket();
  ASSERT_TRUE(c.connect(kPeer, Port{9}).ok());
  EXPECT_EQ(c.tuple().local.port, 51000);
  EXPECT_EQ((steer->filter().find_flow(FlowKey{Proto::tcp, kPeer, 9, 51000})), (Target{1, 1}));
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (auto a = echo->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value() && c.state() == tcp::State::established;
  }));
  const auto data = pattern(200000, 7);
  std::vector<std::byte> got;
  std::size_t sent = 0;
  std::vector<std::byte> buf(65536);
  ASSERT_TRUE(run_until([&] {
    while (sent < data.size()) {
      auto n = s->write(std::span<const std::byte>(data).subspan(sent));
      if (!n) break;
      sent += *n;
    }
    for (;;) {
      auto n = c.read(buf);
      if (!n || *n == 0) break;
      got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
    }
    return got.size() >= data.size();
  }));
  EXPECT_EQ(got, data);
  EXPECT_GT(steer->rx_frames(1, 1), 100u);
  EXPECT_EQ(steer->rx_frames(1, 0), 0u);
  EXPECT_EQ(steer->rx_frames(1, 2), 0u);
  EXPECT_EQ(steer->rx_frames(2), 0u);
  EXPECT_EQ(steer->rx_frames(1), steer->rx_frames(1, 1));
  for (std::size_t i : {0u, 2u, 3u, 4u}) EXPECT_EQ(tcp_of(i).counters().value("rx_segments"), 0u) << i;
  EXPECT_EQ(steer_counter("tx_other_queue"), 0u);
  EXPECT_EQ(steer_counter("tx_denied"), 0u);
  // The channel's own counters, for STATS.
  bool found = false;
  for (const CounterSet* cs : steer->channel_counters()) {
    if (cs->owner() == "st0/node1q1") {
      found = true;
      EXPECT_EQ(cs->value("rx_frames"), steer->rx_frames(1, 1));
      EXPECT_GT(cs->value("tx_frames"), 10u);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(steer->channel_counters().size(), kStacks);
}

TEST_F(SteerQueuesTest, AGroupSpreadsConnectionsOverTheQueuesOfOneNodeAndOfSeveral) {
  std::vector<tcp::TcpListener> listeners;
  for (std::size_t i = 0; i < kStacks; ++i) {
    Result<tcp::TcpListener> l = tcp_of(i).listen(Ipv4Addr{}, Port{80}, 128, true);
    ASSERT_TRUE(l.ok()) << i;
    listeners.push_back(std::move(*l));
  }
  ASSERT_EQ(steer->filter().listener(Proto::tcp, 80)->members.size(), kStacks);
  tcp::TcpProtocol& p = *peer->find_as<tcp::TcpProtocol>("tcp0");
  constexpr std::size_t kConns = 64;
  std::vector<tcp::TcpSocket> clients;
  for (std::size_t k = 0; k < kConns; ++k) {
    clients.push_back(p.socket());
    ASSERT_TRUE(clients.back().connect(kShared, Port{80}).ok());
  }
  std::array<std::vector<tcp::TcpSocket>, kStacks> accepted;
  std::size_t total = 0;
  ASSERT_TRUE(run_until([&] {
    for (std::size_t i = 0; i < kStacks; ++i) {
      while (auto a = listeners[i].accept()) {
        accepted[i].push_back(std::move(*a));
        ++total;
      }
    }
    return total == kConns;
  }));
  for (std::size_t i = 0; i < kStacks; ++i) {
    EXPECT_GE(accepted[i].size(), 1u) << "stack " << i << " served no connection";
    // Each accepted connection was learned at its SYN-ACK as an exact flow
    // of the queue that answered.
    for (const tcp::TcpSocket& s : accepted[i]) {
      const tcp::FourTuple t = s.tuple();
      std::optional<Target> f = steer->filter().find_flow(FlowKey{Proto::tcp, t.remote.addr.v4(), t.remote.port, 80});
      ASSERT_TRUE(f.has_value());
      EXPECT_EQ(*f, target_of(i));
    }
  }
  // Every client got its own server side, once.
  ASSERT_TRUE(run_until([&] {
    for (const tcp::TcpSocket& c : clients) {
      if (c.state() != tcp::State::established) return false;
    }
    return true;
  }));
  EXPECT_EQ(steer_counter("learned_flows"), kConns);
  EXPECT_EQ(steer_counter("tx_other_queue"), 0u);
  EXPECT_EQ(steer_counter("tx_denied"), 0u);
  // A node that goes takes all its queues' channels; node 2's stay.
  steer->detach(1);
  for (std::uint16_t q = 0; q < 3; ++q) EXPECT_FALSE(steer->attached(1, q));
  EXPECT_TRUE(steer->attached(2, 0));
  EXPECT_TRUE(steer->attached(2, 1));
  EXPECT_EQ(steer->filter().listener(Proto::tcp, 80)->members.size(), 2u);
  for (std::size_t i = 0; i < 3; ++i) tcp_of(i).set_port_authority(nullptr);
}

TEST_F(SteerQueuesTest, TheEgressCheckGuardsNodesAndCountsAStackSendingForAnotherQueue) {
  tcp::TcpProtocol& p = *peer->find_as<tcp::TcpProtocol>("tcp0");
  Result<tcp::TcpListener> echo = p.listen(Ipv4Addr{}, Port{9});
  ASSERT_TRUE(echo.ok());
  tcp::TcpSocket c = tcp_of(1).socket();
  ASSERT_TRUE(c.connect(kPeer, Port{9}).ok());
  const std::uint16_t lport = c.tuple().local.port;
  ASSERT_TRUE(run_until([&] { return c.state() == tcp::State::established; }));
  const std::uint64_t denied_before = steer_counter("tx_denied");
  // Queue 0 of the same node sends on queue 1's 4-tuple: it goes (the node
  // is what the check guards), counted as another queue's.
  tcp_of(0).set_port_authority(nullptr);
  tcp::TcpSocket same_node = tcp_of(0).socket();
  ASSERT_TRUE(same_node.connect(kPeer, Port{9}, Ipv4Addr{}, Port{lport}).ok());
  ASSERT_TRUE(run_until([&] { return steer_counter("tx_other_queue") >= 1; }));
  EXPECT_EQ(steer_counter("tx_denied"), denied_before);
  // Node 2 doing the same is denied.
  tcp_of(3).set_port_authority(nullptr);
  tcp::TcpSocket other_node = tcp_of(3).socket();
  ASSERT_TRUE(other_node.connect(kPeer, Port{9}, Ipv4Addr{}, Port{lport}).ok());
  ASSERT_TRUE(run_until([&] { return steer_counter("tx_denied") > denied_before; }));
  EXPECT_GE(steer->filter().egress_counts(2).denied, 1u);
  same_node.abort();
  other_node.abort();
}

}  // namespace
}  // namespace xk::filterd

namespace xk::filterd {
namespace {

// A node on another host: its own port on filterd's node port (plain
// Ethernet), steered to by its MAC, its frames known by their source MAC.
class SteerNodePortTest : public SteerTest {
 public:
  void SetUp() override {
    SteerTest::SetUp();
    node3.emplace(Graph::build(stack("nodeport", "02:00:00:00:0c:03", "192.0.2.10/24"), registry, &loop, "node3"));
    ASSERT_TRUE(steer->attach_node_port(*filterd->find("np0"), kPortMac).ok());
    auth3 = std::make_unique<DirectAuthority>(steer->filter(), 3);
    tcp_of(*node3).set_port_authority(auth3.get());
  }
  void TearDown() override {
    node3.reset();
    SteerTest::TearDown();
  }
  const MacAddr kPortMac{{0x02, 0x78, 0x6b, 0, 0, 0x99}};
  const MacAddr kNode3{{0x02, 0, 0, 0, 0x0c, 0x03}};
  std::optional<Graph> node3;
  std::unique_ptr<DirectAuthority> auth3;
};

TEST_F(SteerNodePortTest, ARemoteNodeIsSteeredToByItsMacAndConnectsOut) {
  ASSERT_TRUE(steer->attach_ethernet(3, kNode3).ok());
  EXPECT_TRUE(steer->attached(3));
  // The same MAC or node twice is refused.
  EXPECT_EQ(steer->attach_ethernet(4, kNode3).error(), Errc::exists);
  EXPECT_EQ(steer->attach_ethernet(3, MacAddr{{0x02, 0, 0, 0, 0x0c, 0x09}}).error(), Errc::exists);
  Result<tcp::TcpListener> l = tcp_of(*node3).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (auto a = l->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value();
  }));
  auto up = pattern(300000, 7), down = pattern(200000, 8);
  std::vector<std::byte> got_up, got_down;
  ASSERT_TRUE(move_bytes(*this, c, *s, up, got_up));
  ASSERT_TRUE(move_bytes(*this, *s, c, down, got_down));
  EXPECT_EQ(got_up, up);
  EXPECT_EQ(got_down, down);
  EXPECT_GT(steer->rx_frames(3), 200u);
  EXPECT_EQ(steer->rx_frames(1), 0u);
  EXPECT_GE(steer_counter("proxy_arp"), 1u);  // answered on the node port, with its MAC
  auto entry = node3->find_as<arp::ArpProtocol>("arp0")->lookup(kPeer);
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->mac, kPortMac);
  EXPECT_EQ(steer_counter("tx_denied"), 0u);
  EXPECT_EQ(steer_counter("node_port_unknown_mac"), 0u);

  // And out: the flow its authority installed.
  Result<tcp::TcpListener> pl = tcp_of(*peer).listen(Ipv4Addr{}, Port{7});
  ASSERT_TRUE(pl.ok());
  tcp::TcpSocket out = tcp_of(*node3).socket();
  ASSERT_TRUE(out.connect(kPeer, Port{7}).ok());
  std::optional<tcp::TcpSocket> in;
  ASSERT_TRUE(run_until([&] {
    if (auto a = pl->accept(); a.ok()) in.emplace(std::move(*a));
    return in.has_value() && out.state() == tcp::State::established;
  }));
  auto data = pattern(100000, 9);
  std::vector<std::byte> got;
  ASSERT_TRUE(move_bytes(*this, out, *in, data, got));
  EXPECT_EQ(got, data);
}

TEST_F(SteerNodePortTest, FramesFromAnUnknownMacAreDroppedAndCounted) {
  // filterd knows node 3 by another MAC: everything it sends (its ARP
  // requests, its SYN) comes from a MAC no node has.
  ASSERT_TRUE(steer->attach_ethernet(3, MacAddr{{0x02, 0, 0, 0, 0x0c, 0x77}}).ok());
  Result<tcp::TcpListener> pl = tcp_of(*peer).listen(Ipv4Addr{}, Port{7});
  ASSERT_TRUE(pl.ok());
  tcp::TcpSocket out = tcp_of(*node3).socket();
  ASSERT_TRUE(out.connect(kPeer, Port{7}).ok());
  ASSERT_TRUE(run_until([&] { return steer_counter("node_port_unknown_mac") >= 2; }));
  EXPECT_EQ(steer_counter("proxy_arp"), 0u);
  EXPECT_EQ(steer_counter("tx_from_nodes"), 0u);
  EXPECT_EQ(steer->filter().egress_counts(3).allowed + steer->filter().egress_counts(3).denied, 0u);
  out.abort();
}

TEST_F(SteerNodePortTest, ARemoteNodeForgingAnotherNodesFlowIsDeniedAndCounted) {
  ASSERT_TRUE(steer->attach_ethernet(3, kNode3).ok());
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp_of(*node3).set_port_authority(nullptr);  // it asks nobody
  tcp::TcpSocket forged = tcp_of(*node3).socket();
  ASSERT_TRUE(forged.connect(kPeer, Port{7}, Ipv4Addr{}, Port{80}).ok());
  ASSERT_TRUE(run_until([&] { return steer_counter("tx_denied") >= 1; }));
  EXPECT_EQ(tcp_of(*peer).counters().value("rx_segments"), 0u);
  EXPECT_EQ(steer->filter().egress_counts(3).denied, steer_counter("tx_denied"));
  EXPECT_EQ(steer->filter().egress_counts(1).denied, 0u);
  forged.abort();
}

TEST_F(SteerNodePortTest, ADetachedRemoteNodesPeersGetRstAndItsMacIsForgotten) {
  ASSERT_TRUE(steer->attach_ethernet(3, kNode3).ok());
  Result<tcp::TcpListener> l = tcp_of(*node3).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s;
  ASSERT_TRUE(run_until([&] {
    if (auto a = l->accept(); a.ok()) s.emplace(std::move(*a));
    return s.has_value();
  }));
  steer->detach(3);  // its control connection closed
  EXPECT_FALSE(steer->attached(3));
  std::byte b[100] = {};
  ASSERT_TRUE(c.write(b).ok());
  ASSERT_TRUE(run_until([&] { return c.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c.connection()->pending_error(), Errc::reset);
  // What it still sends comes from a MAC filterd no longer knows.
  std::byte more[10] = {};
  (void)s->write(more);
  ASSERT_TRUE(run_until([&] { return steer_counter("node_port_unknown_mac") >= 1; }));
  // The MAC is free for the next node.
  EXPECT_TRUE(steer->attach_ethernet(5, kNode3).ok());
  tcp_of(*node3).set_port_authority(nullptr);
}

}  // namespace
}  // namespace xk::filterd

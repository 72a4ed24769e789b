// Central mode with whole stacks in one process, no DPDK (docs/filterd.md):
//
//   peer (192.0.2.1)  --pair "ext"--  filterd (steer + its own TCP, the
//   Central bridge)  --pair "node1"/"node2"--  two nodes whose tcp0 is the
//   relay backend (relay0 over eth0): the node-side library and filterd's
//   bridge, tested together.
//
// The node channels hold only 16 frames, so both sides meet a full channel
// all the time and must keep (never drop) what it refuses.

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "tcb.hpp"
#include "filterd_fixture.hpp"
#include "run_until.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/central.hpp"
#include "xk/filterd/steer.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/relay.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk::filterd {
namespace {

using namespace std::chrono_literals;

constexpr Ipv4Addr kPeer{0xC0000201};    // 192.0.2.1
constexpr Ipv4Addr kShared{0xC000020A};  // 192.0.2.10
using test::kNode1;
using test::kNode2;

std::string node_stack(const std::string& link, const std::string& mac) {
  return "pair  net0 link=" + link + " mac=" + mac + " queue=16\n"
         "eth   eth0 below=net0\n"
         "arp   arp0 below=eth0\n"
         "ipv4  ip0  below=eth0,arp0 addr=192.0.2.10/24\n"
         "udp   udp0 below=ip0\n"
         "relay relay0 below=eth0 peer=02:78:6b:00:00:01 window=64k\n"
         "tcp   tcp0 below=relay0 backend=relay\n";
}

// What the control socket does in central mode: the filter learns the
// listener (its group choice picks the node), the bridge listens.
class CentralAuthority final : public PortAuthority {
 public:
  CentralAuthority(FilterEngine& f, Central& c, NodeId node) : f_(f), c_(c), node_(node) {}
  Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool group) override {
    Status st = group ? f_.join_group(static_cast<Proto>(proto), port, Target{node_, 0})
                      : f_.listen(static_cast<Proto>(proto), port, Target{node_, 0});
    if (!st) return st.error();
    groups_[port] = group;
    c_.listened(node_, port);
    return port;
  }
  void release_listen(std::uint8_t proto, std::uint16_t port) noexcept override {
    if (groups_[port]) {
      (void)f_.leave_group(static_cast<Proto>(proto), port, Target{node_, 0});
    } else {
      (void)f_.unlisten(static_cast<Proto>(proto), port);
    }
    c_.unlistened(node_, port);
  }
  Result<std::uint16_t> claim_connect(std::uint8_t, std::uint16_t port, const IpAddr&, std::uint16_t) override {
    ++connect_claims;
    return port;
  }
  void release_connect(std::uint8_t, std::uint16_t, const IpAddr&, std::uint16_t) noexcept override {}
  int connect_claims = 0;

 private:
  FilterEngine& f_;
  Central& c_;
  NodeId node_;
  std::map<std::uint16_t, bool> groups_;
};

class CentralTest : public test::FilterdWithNodes {
 public:
  void SetUp() override {
    Setup s;
    s.peer_stack = "pair net0 link=ext mac=02:00:00:00:00:01 queue=4096\n"
                   "eth  eth0 below=net0\narp  arp0 below=eth0\n"
                   "ipv4 ip0  below=eth0,arp0 addr=192.0.2.1/24\n"
                   "tcp  tcp0 below=ip0 rto_min_ms=10\n";
    start(s);
  }
  void start(Setup s) {
    s.channel_queue = 16;
    s.filterd_tcp = "rto_min_ms=10";
    s.node_stack = node_stack;
    build(s);
    if (HasFatalFailure()) return;
    CentralConfig cc;
    cc.sndbuf = 128 * 1024;
    cc.rcvbuf = 128 * 1024;
    cc.channel_mtu = 1500;
    central = std::make_unique<Central>(tcp_of(*filterd), *steer, &loop, cc);
    auth1 = std::make_unique<CentralAuthority>(steer->filter(), *central, 1);
    auth2 = std::make_unique<CentralAuthority>(steer->filter(), *central, 2);
    tcp_of(*node1).set_port_authority(auth1.get());
    tcp_of(*node2).set_port_authority(auth2.get());
  }
  void TearDown() override {
    node2.reset();
    node1.reset();
    central.reset();
    tear_down();
  }
  static relay::RelayProtocol& relay_of(Graph& g) { return *g.find_as<relay::RelayProtocol>("relay0"); }
  std::uint64_t central_counter(const char* name) { return central->counters().value(name); }
  void run_passes(int n) {
    for (int i = 0; i < n; ++i) loop.run_once();
  }

  // A peer's connection to `port`, accepted by whichever node's listener
  // gets it.
  std::optional<tcp::TcpSocket> accept_on(tcp::TcpListener& l) {
    std::optional<tcp::TcpSocket> s;
    run_until([&] {
      if (auto a = l.accept(); a.ok()) s.emplace(std::move(*a));
      return s.has_value();
    });
    return s;
  }

  std::unique_ptr<Central> central;
  std::unique_ptr<CentralAuthority> auth1, auth2;
};

// Stands for the eth session frames come up through.
class Below final : public Session {
 public:
  explicit Below(Protocol& p) : Session(p, nullptr) {}
  Status push(Msg) override { return Errc::unsupported; }
  Status pop(Session&, Msg) override { return Errc::unsupported; }
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

void drain(tcp::TcpSocket& s, std::vector<std::byte>& got) {
  std::vector<std::byte> buf(65536);
  for (;;) {
    auto n = s.read(buf);
    if (!n || *n == 0) break;
    got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
  }
}

// From `sent` on (what was written before is on its way already).
bool move_bytes(CentralTest& t, tcp::TcpSocket& from, tcp::TcpSocket& to, const std::vector<std::byte>& data,
                std::vector<std::byte>& got, std::size_t sent = 0) {
  return t.run_until([&] {
    while (sent < data.size()) {
      auto n = from.write(std::span<const std::byte>(data).subspan(sent));
      if (!n) break;
      sent += *n;
    }
    drain(to, got);
    return got.size() >= data.size();
  });
}

TEST_F(CentralTest, PeersConnectionsToAGroupReachBothNodesAndStreamBothWays) {
  Result<tcp::TcpListener> l1 = tcp_of(*node1).listen(Ipv4Addr{}, Port{80}, 128, true);
  Result<tcp::TcpListener> l2 = tcp_of(*node2).listen(Ipv4Addr{}, Port{80}, 128, true);
  ASSERT_TRUE(l1.ok() && l2.ok());
  EXPECT_EQ(central->listen_count(), 1u);
  constexpr int kConns = 12;
  std::vector<tcp::TcpSocket> clients;
  for (int i = 0; i < kConns; ++i) {
    clients.push_back(tcp_of(*peer).socket());
    ASSERT_TRUE(clients.back().connect(kShared, Port{80}).ok());
  }
  std::vector<tcp::TcpSocket> servers;
  std::vector<int> owner;
  ASSERT_TRUE(run_until([&] {
    for (auto* l : {&*l1, &*l2}) {
      while (auto a = l->accept()) {
        owner.push_back(l == &*l1 ? 1 : 2);
        servers.push_back(std::move(*a));
      }
    }
    return servers.size() == kConns;
  }));
  EXPECT_GT(std::count(owner.begin(), owner.end(), 1), 0);
  EXPECT_GT(std::count(owner.begin(), owner.end(), 2), 0);
  // Each accepted stream knows its peer: the 4-tuple filterd's TCP has.
  for (auto& s : servers) {
    EXPECT_EQ(s.tuple().local.addr, kShared);
    EXPECT_EQ(s.tuple().local.port, 80);
    EXPECT_EQ(s.tuple().remote.addr, kPeer);
    EXPECT_EQ(s.state(), tcp::State::established);
    EXPECT_EQ(s.connection(), nullptr);  // no TCB on the node: a relayed stream
    ASSERT_NE(s.endpoint(), nullptr);
  }
  // Match client to server by the peer's port, then 200 KB up and 100 KB down.
  for (auto& s : servers) {
    tcp::TcpSocket* c = nullptr;
    for (auto& cl : clients) {
      if (cl.tuple().local.port == s.tuple().remote.port) c = &cl;
    }
    ASSERT_NE(c, nullptr);
    auto up = pattern(200000, s.tuple().remote.port), down = pattern(100000, s.tuple().remote.port + 1u);
    std::vector<std::byte> got_up, got_down;
    ASSERT_TRUE(move_bytes(*this, *c, s, up, got_up));
    ASSERT_TRUE(move_bytes(*this, s, *c, down, got_down));
    EXPECT_EQ(got_up, up);
    EXPECT_EQ(got_down, down);
  }
  EXPECT_EQ(central_counter("accepted"), static_cast<std::uint64_t>(kConns));
  EXPECT_GE(central_counter("bytes_to_nodes"), 200000u * kConns);
  EXPECT_GE(central_counter("bytes_from_nodes"), 100000u * kConns);
  // The small channels refused frames; they were kept and sent later.
  EXPECT_GT(central_counter("frames_queued"), 0u);
  EXPECT_GT(relay_of(*node1).counters().value("tx_queued") + relay_of(*node2).counters().value("tx_queued"), 0u);
  EXPECT_EQ(central_counter("malformed") + central_counter("over_credit"), 0u);
  EXPECT_EQ(relay_of(*node1).counters().value("drop_over_credit"), 0u);
  // Close from both ends: every relayed connection ends with both FINs.
  for (auto& s : servers) ASSERT_TRUE(s.close().ok());
  ASSERT_TRUE(run_until([&] {
    bool all = true;
    for (auto& c : clients) {
      std::vector<std::byte> rest;
      drain(c, rest);
      if ((c.events() & tcp::ev_hangup) == 0) all = false;
    }
    return all;
  }));
  for (auto& c : clients) ASSERT_TRUE(c.close().ok());
  ASSERT_TRUE(run_until([&] { return central->bridge_count() == 0; }));
  EXPECT_EQ(central_counter("closed"), static_cast<std::uint64_t>(kConns));
  // The last FINs reach the nodes: their streams are over too.
  ASSERT_TRUE(run_until([&] { return tcp_of(*node1).connection_count() + tcp_of(*node2).connection_count() == 0; }));
}

TEST_F(CentralTest, ANodeConnectsOutThroughFilterdsTcp) {
  Result<tcp::TcpListener> l = tcp_of(*peer).listen(Ipv4Addr{}, Port{7});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*node2).socket();
  ASSERT_TRUE(c.connect(kPeer, Port{7}).ok());
  EXPECT_EQ(c.state(), tcp::State::syn_sent);
  EXPECT_EQ(c.write(std::as_bytes(std::span("x", 1))).error(), Errc::would_block);
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE(run_until([&] { return (c.events() & tcp::ev_writable) != 0; }));
  EXPECT_EQ(c.state(), tcp::State::established);
  EXPECT_EQ(c.tuple().local.addr, kShared);
  EXPECT_EQ(c.tuple().remote.addr, kPeer);
  EXPECT_EQ(c.tuple().remote.port, 7);
  EXPECT_EQ(c.tuple().local.port, s->tuple().remote.port);
  EXPECT_EQ(auth2->connect_claims, 0);  // filterd's TCP picks the port itself
  auto up = pattern(300000, 3), down = pattern(250000, 4);
  std::vector<std::byte> got_up, got_down;
  ASSERT_TRUE(move_bytes(*this, c, *s, up, got_up));
  ASSERT_TRUE(move_bytes(*this, *s, c, down, got_down));
  EXPECT_EQ(got_up, up);
  EXPECT_EQ(got_down, down);
  EXPECT_EQ(central_counter("connected"), 1u);
}

TEST_F(CentralTest, AConnectToNobodyIsRefused) {
  tcp::TcpSocket c = tcp_of(*node1).socket();
  ASSERT_TRUE(c.connect(kPeer, Port{9}).ok());
  ASSERT_TRUE(run_until([&] { return c.endpoint()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c.endpoint()->pending_error(), Errc::refused);
  EXPECT_TRUE(c.events() & tcp::ev_error);
  EXPECT_EQ(central_counter("connect_failed"), 1u);
  EXPECT_EQ(central->bridge_count(), 0u);
}

TEST_F(CentralTest, AStalledReaderClosesTheWindowEndToEndAndNothingIsLost) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  // The node does not read: the peer can hand over only what the node's
  // window (64 KiB), filterd's receive buffer (128 KiB) and its own send
  // buffer (1 MiB) hold, then its writes block.
  auto data = pattern(4 << 20, 5);
  std::size_t sent = 0;
  for (int round = 0; round < 400; ++round) {
    while (sent < data.size()) {
      auto n = c.write(std::span<const std::byte>(data).subspan(sent));
      if (!n) break;
      sent += *n;
    }
    loop.run_once();
  }
  EXPECT_LT(sent, data.size());
  EXPECT_LE(s->endpoint()->rcv_queued(), 64u * 1024);
  // In flight at most: the node's window, filterd's receive buffer, the
  // peer's send buffer, and the peer's first window before scaling bit.
  EXPECT_LE(sent, (64u + 128u + 1024u + 64u) * 1024);
  EXPECT_LT(c.connection()->stats().snd_wnd, 4096u) << "filterd's TCP advertises a (nearly) closed window";
  // The reader wakes: everything arrives, in order.
  std::vector<std::byte> got;
  ASSERT_TRUE(move_bytes(*this, c, *s, data, got, sent));
  EXPECT_EQ(got, data);
  // The other way: the peer stops reading, the node's writes block.
  auto back = pattern(4 << 20, 6);
  std::size_t node_sent = 0;
  for (int round = 0; round < 400; ++round) {
    while (node_sent < back.size()) {
      auto n = s->write(std::span<const std::byte>(back).subspan(node_sent));
      if (!n) break;
      node_sent += *n;
    }
    loop.run_once();
  }
  EXPECT_LT(node_sent, back.size());
  EXPECT_EQ(s->write(std::span<const std::byte>(back).subspan(node_sent)).error(), Errc::would_block);
  EXPECT_FALSE(s->events() & tcp::ev_writable);
  std::vector<std::byte> got_back;
  ASSERT_TRUE(move_bytes(*this, *s, c, back, got_back, node_sent));
  EXPECT_EQ(got_back, back);
  EXPECT_EQ(central_counter("over_credit"), 0u);
}

// A node's Msg write through the relay takes what the credit and the frame
// queue allow and leaves the rest in the Msg, as TCP's send buffer does: a
// writable relay stream always takes something, and no byte is lost.
TEST_F(CentralTest, ANodesMsgWriteTakesWhatTheCreditAllowsAndKeepsTheRest) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE(run_until([&] { return (s->events() & tcp::ev_writable) != 0; }));
  const auto data = pattern(4 << 20, 8);
  Msg m = Msg::copy_of(data);
  Status st = s->write(m);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error(), Errc::would_block);
  EXPECT_GT(m.size(), 0u);
  EXPECT_LT(m.size(), data.size()) << "a part went";
  std::vector<std::byte> got;
  ASSERT_TRUE(run_until([&] {
    if (!m.empty() && (s->events() & tcp::ev_writable)) {
      const std::size_t before = m.size();
      (void)s->write(m);
      EXPECT_LT(m.size(), before) << "writable, yet nothing taken";
    }
    drain(c, got);
    return got.size() >= data.size();
  }));
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(got, data);
  EXPECT_EQ(central_counter("over_credit"), 0u);
}

TEST_F(CentralTest, HalfCloseWorksEachWay) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  // The peer says all it has to say, then FIN.
  auto up = pattern(50000, 7);
  std::vector<std::byte> got;
  ASSERT_TRUE(move_bytes(*this, c, *s, up, got));
  ASSERT_TRUE(c.shutdown_write().ok());
  ASSERT_TRUE(run_until([&] { return (s->events() & tcp::ev_hangup) != 0; }));
  std::byte b[16];
  EXPECT_EQ(*s->read(b), 0u) << "end of stream on the node";
  EXPECT_EQ(s->state(), tcp::State::close_wait);
  // The node still answers, then closes its side.
  auto down = pattern(80000, 8);
  std::vector<std::byte> got_down;
  ASSERT_TRUE(move_bytes(*this, *s, c, down, got_down));
  EXPECT_EQ(got_down, down);
  ASSERT_TRUE(s->shutdown_write().ok());
  ASSERT_TRUE(run_until([&] { return (c.events() & tcp::ev_hangup) != 0; }));
  EXPECT_EQ(*c.read(b), 0u);
  ASSERT_TRUE(run_until([&] { return central->bridge_count() == 0; }));
  EXPECT_TRUE(s->endpoint()->detached());

  // And the node first: its FIN reaches the peer, which goes on sending.
  tcp::TcpSocket c2 = tcp_of(*peer).socket();
  ASSERT_TRUE(c2.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s2 = accept_on(*l);
  ASSERT_TRUE(s2.has_value());
  ASSERT_TRUE(s2->shutdown_write().ok());
  EXPECT_EQ(s2->state(), tcp::State::fin_wait_2);
  EXPECT_EQ(s2->write(std::as_bytes(std::span("x", 1))).error(), Errc::closed);
  ASSERT_TRUE(run_until([&] { return (c2.events() & tcp::ev_hangup) != 0; }));
  EXPECT_EQ(*c2.read(b), 0u);
  auto late = pattern(70000, 9);
  std::vector<std::byte> got_late;
  ASSERT_TRUE(move_bytes(*this, c2, *s2, late, got_late));
  EXPECT_EQ(got_late, late);
  ASSERT_TRUE(c2.close().ok());
  ASSERT_TRUE(run_until([&] { return central->bridge_count() == 0 && s2->state() == tcp::State::closed; }));
  EXPECT_TRUE(s2->endpoint()->detached());
}

TEST_F(CentralTest, ResetsCrossTheRelayBothWays) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  // The peer aborts: the node's stream fails with reset.
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  c.abort();
  ASSERT_TRUE(run_until([&] { return s->endpoint()->pending_error() != Errc::ok; }));
  EXPECT_EQ(s->endpoint()->pending_error(), Errc::reset);
  std::byte b[8];
  EXPECT_EQ(s->read(b).error(), Errc::reset);
  EXPECT_EQ(*s->read(b), 0u) << "then end of stream, as TCP";
  ASSERT_TRUE(run_until([&] { return central->bridge_count() == 0; }));
  // The node aborts: the peer gets a RST.
  tcp::TcpSocket c2 = tcp_of(*peer).socket();
  ASSERT_TRUE(c2.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s2 = accept_on(*l);
  ASSERT_TRUE(s2.has_value());
  s2->abort();
  ASSERT_TRUE(run_until([&] { return c2.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c2.connection()->pending_error(), Errc::reset);
  EXPECT_EQ(central_counter("rst_from_nodes"), 1u);
  EXPECT_EQ(central->bridge_count(), 0u);
}

TEST_F(CentralTest, ANodeThatGoesHasItsConnectionsResetAndItsPortClosed) {
  Result<tcp::TcpListener> l = tcp_of(*node2).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(central->bridge_count(), 1u);
  // What the daemon's detach hook does when node 2's control connection closes.
  central->node_gone(2);
  steer->detach(2);
  EXPECT_EQ(central->bridge_count(), 0u);
  EXPECT_EQ(central->listen_count(), 0u);
  ASSERT_TRUE(run_until([&] { return c.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c.connection()->pending_error(), Errc::reset);
  EXPECT_EQ(central_counter("aborted_node_gone"), 1u);
  // The port is nobody's now: a new connection is refused by filterd's TCP.
  tcp::TcpSocket c2 = tcp_of(*peer).socket();
  ASSERT_TRUE(c2.connect(kShared, Port{80}).ok());
  ASSERT_TRUE(run_until([&] { return c2.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c2.connection()->pending_error(), Errc::refused);
  tcp_of(*node2).set_port_authority(nullptr);
}

TEST_F(CentralTest, AnOpenForAPortTheNodeNoLongerListensOnIsReset) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  // The node's listener goes, but (as if its UNLISTEN were still on its way)
  // filterd keeps listening for it.
  ASSERT_TRUE(l->close().ok());
  ASSERT_TRUE(steer->filter().listen(Proto::tcp, 80, Target{1, 0}).ok());
  central->listened(1, 80);
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  ASSERT_TRUE(run_until([&] { return c.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c.connection()->pending_error(), Errc::reset);
  EXPECT_EQ(relay_of(*node1).counters().value("opens_refused"), 1u);
}

TEST_F(CentralTest, MalformedRelayFramesAreCountedAndHarmNoConnection) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(Ipv4Addr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  const std::uint32_t id = static_cast<relay::RelayConnection*>(s->endpoint())->id();
  auto raw = [](std::vector<std::uint8_t> v) {
    std::vector<std::byte> b(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) b[i] = std::byte{v[i]};
    return Msg::copy_of(b);
  };
  // To filterd, as node 1: short, bad version, bad op, length past the end,
  // zero credit, an OPEN (filterd's to send), and DATA for nobody.
  central->from_node(1, raw({1, 5}));
  central->from_node(1, raw({9, 6, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  central->from_node(1, raw({1, 42, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  central->from_node(1, raw({1, 4, 0, 200, 0, 0, 0, 1, 0, 0, 0, 0, 7}));
  central->from_node(1, raw({1, 5, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  central->from_node(1, raw({1, 1, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4, 1, 2, 3, 4, 0, 80, 0, 81}));
  central->from_node(1, raw({1, 4, 0, 1, 0, 0, 0x33, 0x33, 0, 0, 0, 0, 7}));
  EXPECT_EQ(central_counter("malformed"), 6u);
  EXPECT_EQ(central_counter("unknown_id"), 1u);
  // To the node, as filterd (through its eth session): the same kind of junk.
  relay::RelayProtocol& r = relay_of(*node1);
  std::uint64_t before = r.counters().value("drop_malformed");
  Ref<Below> dummy = make_ref<Below>(r);
  (void)r.demux(*dummy, raw({1, 2}));
  (void)r.demux(*dummy, raw({1, 7, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));  // RST without a code
  (void)r.demux(*dummy, raw({1, 2, 0, 8, 0x80, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4, 0, 7, 0, 0}));  // CONNECT to a node
  EXPECT_EQ(r.counters().value("drop_malformed"), before + 3);
  // DATA beyond the credit the node granted: that stream (only) is reset.
  std::vector<std::uint8_t> over(12 + 1400, 0x55);
  over[0] = 1;
  over[1] = 4;
  over[2] = 1400 >> 8;
  over[3] = 1400 & 0xff;
  over[4] = static_cast<std::uint8_t>(id >> 24);
  over[5] = static_cast<std::uint8_t>(id >> 16);
  over[6] = static_cast<std::uint8_t>(id >> 8);
  over[7] = static_cast<std::uint8_t>(id);
  over[8] = over[9] = over[10] = over[11] = 0;
  for (int i = 0; i < 60; ++i) (void)r.demux(*dummy, raw(over));  // 84 000 bytes > 64 KiB
  EXPECT_EQ(r.counters().value("drop_over_credit"), 1u);
  EXPECT_EQ(s->endpoint()->pending_error(), Errc::reset);
  ASSERT_TRUE(run_until([&] { return c.connection()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c.connection()->pending_error(), Errc::reset);
}

}  // namespace
}  // namespace xk::filterd

namespace xk::filterd {
namespace {

// Central mode over IPv6: filterd holds 2001:db8::10 beside 192.0.2.10;
// its TCP ends the peer's IPv6 connections and the relay carries their
// 16-byte addresses to the nodes (docs/relay-protocol.md).
class CentralV6Test : public CentralTest {
 public:
  void SetUp() override {
    Setup s;
    s.peer_stack = "pair   net0  link=ext mac=02:00:00:00:00:01 queue=4096\n"
                   "eth    eth0  below=net0\narp    arp0  below=eth0\n"
                   "nd     nd0   below=eth0 dad=0\n"
                   "ipv4   ip0   below=eth0,arp0 addr=192.0.2.1/24\n"
                   "ipv6   ip6   below=eth0,nd0 addr=2001:db8::1/64\n"
                   "icmpv6 icmp6 below=ip6,nd0\n"
                   "tcp    tcp0  below=ip0,ip6 rto_min_ms=10\n";
    s.shared6 = "2001:db8::10/64";
    start(s);
  }
  const IpAddr kPeer6 = *parse_ip("2001:db8::1");
  const IpAddr kShared6 = *parse_ip("2001:db8::10");
};

TEST_F(CentralV6Test, APeersIpv6ConnectionReachesANodeWithItsAddresses) {
  Result<tcp::TcpListener> l = tcp_of(*node1).listen(IpAddr{}, Port{80});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*peer).socket();
  ASSERT_TRUE(c.connect(kShared6, Port{80}).ok());
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  // The node's socket names the connection as filterd's TCP sees it.
  EXPECT_EQ(s->tuple().local.addr, kShared6);
  EXPECT_EQ(s->tuple().remote.addr, kPeer6);
  EXPECT_FALSE(s->tuple().remote.addr.is_v4());
  EXPECT_EQ(s->tuple().remote.port, c.tuple().local.port);
  auto up = pattern(300000, 11), down = pattern(200000, 12);
  std::vector<std::byte> got_up, got_down;
  ASSERT_TRUE(move_bytes(*this, c, *s, up, got_up));
  ASSERT_TRUE(move_bytes(*this, *s, c, down, got_down));
  EXPECT_EQ(got_up, up);
  EXPECT_EQ(got_down, down);
  EXPECT_EQ(central_counter("accepted"), 1u);
  EXPECT_GT(steer_counter("rx_central_tcp"), 0u);
  EXPECT_EQ(central_counter("malformed") + relay_of(*node1).counters().value("drop_malformed"), 0u);
  // The same listener takes the peer's IPv4 connections too ([::]).
  tcp::TcpSocket c4 = tcp_of(*peer).socket();
  ASSERT_TRUE(c4.connect(kShared, Port{80}).ok());
  std::optional<tcp::TcpSocket> s4 = accept_on(*l);
  ASSERT_TRUE(s4.has_value());
  EXPECT_EQ(s4->tuple().remote.addr, IpAddr(kPeer));
}

TEST_F(CentralV6Test, ANodeConnectsToAnIpv6PeerThroughFilterdsTcp) {
  Result<tcp::TcpListener> l = tcp_of(*peer).listen(IpAddr{}, Port{7});
  ASSERT_TRUE(l.ok());
  tcp::TcpSocket c = tcp_of(*node2).socket();
  ASSERT_TRUE(c.connect(kPeer6, Port{7}).ok());
  std::optional<tcp::TcpSocket> s = accept_on(*l);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE(run_until([&] { return (c.events() & tcp::ev_writable) != 0; }));
  EXPECT_EQ(c.tuple().local.addr, kShared6);
  EXPECT_EQ(c.tuple().remote.addr, kPeer6);
  EXPECT_EQ(s->tuple().remote.addr, kShared6);
  EXPECT_EQ(c.tuple().local.port, s->tuple().remote.port);
  auto up = pattern(250000, 13), down = pattern(250000, 14);
  std::vector<std::byte> got_up, got_down;
  ASSERT_TRUE(move_bytes(*this, c, *s, up, got_up));
  ASSERT_TRUE(move_bytes(*this, *s, c, down, got_down));
  EXPECT_EQ(got_up, up);
  EXPECT_EQ(got_down, down);
  EXPECT_EQ(central_counter("connected"), 1u);
}

TEST_F(CentralV6Test, AnIpv6ConnectToNobodyIsRefused) {
  tcp::TcpSocket c = tcp_of(*node1).socket();
  ASSERT_TRUE(c.connect(kPeer6, Port{9}).ok());
  ASSERT_TRUE(run_until([&] { return c.endpoint()->pending_error() != Errc::ok; }));
  EXPECT_EQ(c.endpoint()->pending_error(), Errc::refused);
  EXPECT_EQ(central_counter("connect_failed"), 1u);
}

}  // namespace
}  // namespace xk::filterd

// The node's side of a filterd restart (xk/filterd_client.hpp): the client
// notices its control connection close, says "try again" meanwhile,
// reconnects with back-off, resumes its id and channels, and RESYNCs what
// the stack holds; it gives up when filterd stays away, or when another node
// has its id. filterd here is its real control plane (NodeRegistry behind a
// ControlServer) on a thread of its own; the node's loop runs on a manual
// clock, so back-off and giving up are steps, not waits.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "xk/clock.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/control_server.hpp"
#include "xk/filterd/registry.hpp"
#include "xk/filterd_client.hpp"

namespace xk {
namespace {

namespace fc = filterd::ctl;
using filterd::FlowKey;
using filterd::Proto;

std::string socket_path() {
  static std::atomic<int> n{0};
  return "/tmp/xk-fc-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".sock";
}

// filterd's control plane, serving on `path` from a thread of its own until
// stop() (what kill -9 does to the nodes' connections: they close).
// With `tcp` ("127.0.0.1:PORT") it serves TCP too, with kToken, and has a
// node port for nodes on other hosts.
const std::vector<std::byte> kToken(32, std::byte{0x42});
const MacAddr kNodePortMac{{0x02, 0x78, 0x6b, 0, 0, 0x99}};

class Filterd {
 public:
  // `shared6`: an IPv6 address to share too (its router fe80::1).
  explicit Filterd(const std::string& path, const std::string& tcp = {}, std::optional<IpCidr> shared6 = {}) {
    filterd::FilterConfig f;
    f.shared_ip = Ipv4Addr{0xC000020A};
    if (shared6) f.shared_ip6 = shared6->addr;
    filter_.emplace(f, clock_);
    filterd::RegistryConfig c;
    c.shared = Ipv4Cidr{Ipv4Addr{0xC000020A}, 24};
    c.shared6 = shared6;
    if (shared6) c.gateway6 = *parse_ip("fe80::1");
    c.secret[0] = std::byte{7};  // the same in every run, as --secret gives it
    if (!tcp.empty()) c.node_port_mac = kNodePortMac;
    registry_.emplace(c, *filter_, filterd::NodeRegistry::Hooks{});
    filterd::ControlServer::Config cc;
    cc.path = path;
    cc.tcp = tcp;
    if (!tcp.empty()) cc.token = kToken;
    server_.emplace(loop_, *registry_, cc);
    tcp_port_ = server_->tcp_port();
    loop_.start_thread();
  }
  ~Filterd() { stop(); }

  // Stops serving and closes every connection; the tables stay readable.
  void stop() {
    if (!server_) return;
    loop_.stop();
    loop_.join();
    server_.reset();
  }
  // Runs `f` on filterd's thread, between two requests, and waits for it.
  template <class F>
  void on_loop(F f) {
    std::promise<void> done;
    loop_.post([&f, &done] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
  filterd::NodeRegistry& registry() { return *registry_; }
  filterd::FilterEngine& filter() { return *filter_; }
  std::uint16_t tcp_port() const { return tcp_port_; }

 private:
  ManualClock clock_;
  EventLoop loop_;
  std::optional<filterd::FilterEngine> filter_;
  std::optional<filterd::NodeRegistry> registry_;
  std::optional<filterd::ControlServer> server_;
  std::uint16_t tcp_port_ = 0;
};

class FilterdClientTest : public ::testing::Test {
 protected:
  FilterdClientTest() : loop(clock) {}

  void connect_node() {
    FilterdClient::Options o;
    o.reconnect_for = std::chrono::seconds(10);
    o.backoff_min = std::chrono::milliseconds(20);
    o.backoff_max = std::chrono::milliseconds(200);
    client = FilterdClient::connect(path, "node", o);
    FilterdClient::Hooks h;
    h.holdings = [this] { return held; };
    h.resumed = [this] { ++resumed; };
    client->attach(loop, std::move(h));
  }
  // Passes until the client has seen its connection close (it looks every
  // few thousand passes), at most a bounded number.
  void notice_loss() {
    for (int i = 0; i < 100000 && client->state() == FilterdClient::State::connected; ++i) loop.run_once();
  }
  // Time moves in back-off steps until the client is no longer reconnecting.
  void let_time_pass(std::chrono::milliseconds total) {
    for (auto t = std::chrono::milliseconds(0); t < total && client->state() == FilterdClient::State::reconnecting;
         t += std::chrono::milliseconds(10)) {
      clock.advance(std::chrono::milliseconds(10));
      loop.run_once();
    }
  }

  const std::string path = socket_path();
  const Ipv4Addr peer{0xC0000201};
  ManualClock clock;
  EventLoop loop;
  std::unique_ptr<FilterdClient> client;
  FilterdClient::Holdings held;
  int resumed = 0;
};

TEST_F(FilterdClientTest, ReconnectsResumesAndResyncsAfterFilterdRestarts) {
  auto first = std::make_unique<Filterd>(path);
  connect_node();
  const std::uint16_t id = client->hello().node_id;
  const std::vector<fc::Channel> channels = client->hello().channels;
  ASSERT_TRUE(client->claim_listen(6, 5001, true).ok());
  Result<std::uint16_t> lport = client->claim_connect(6, 0, peer, 7001);
  ASSERT_TRUE(lport.ok());
  const IpAddr peer6 = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5});
  Result<std::uint16_t> lport6 = client->claim_connect(17, 0, peer6, 53);
  ASSERT_TRUE(lport6.ok());
  // What the stack holds: the listener, a connection it accepted, the two it opened.
  held.listeners = {fc::ListenerEntry{fc::Proto::tcp, 5001, true, 0}};
  held.flows = {fc::FlowEntry{fc::Proto::tcp, 5001, peer, 40000, 0, true},
                fc::FlowEntry{fc::Proto::tcp, *lport, peer, 7001, 0, false},
                fc::FlowEntry{fc::Proto::udp, *lport6, peer6, 53, 0, false}};

  first->stop();  // filterd dies: the control connection closes
  notice_loss();
  ASSERT_EQ(client->state(), FilterdClient::State::reconnecting);
  EXPECT_EQ(client->stats().lost, 1u);
  // Meanwhile a listen or connect is told to try again, and nothing breaks.
  Result<std::uint16_t> away = client->claim_listen(6, 6000, false);
  ASSERT_FALSE(away.ok());
  EXPECT_EQ(away.error(), Errc::would_block);
  EXPECT_EQ(client->claim_connect(6, 0, peer, 9).error(), Errc::would_block);
  client->release_connect(6, 50000, peer, 9);  // no filterd to tell: nothing happens
  let_time_pass(std::chrono::milliseconds(300));
  EXPECT_EQ(client->state(), FilterdClient::State::reconnecting);

  first.reset();
  Filterd second(path);  // a fresh filterd knows nobody
  let_time_pass(std::chrono::milliseconds(1000));
  ASSERT_EQ(client->state(), FilterdClient::State::connected);
  EXPECT_EQ(resumed, 1);
  EXPECT_EQ(client->stats().resumes, 1u);
  EXPECT_EQ(client->stats().resynced, 4u);
  EXPECT_EQ(client->stats().resync_refused, 0u);
  EXPECT_GE(client->stats().attempts, 2u);  // it tried while nobody was there
  EXPECT_EQ(client->hello().node_id, id);
  EXPECT_EQ(client->hello().channels, channels);
  // The new filterd has it all, under the same node.
  second.on_loop([&] {
    ASSERT_NE(second.registry().node(id), nullptr);
    EXPECT_EQ(second.registry().node(id)->channels, channels);
    EXPECT_EQ(second.filter().find_flow(FlowKey{Proto::tcp, peer, 40000, 5001})->node, id);
    EXPECT_EQ(second.filter().find_flow(FlowKey{Proto::tcp, peer, 7001, *lport})->node, id);
    EXPECT_EQ(second.filter().find_flow(FlowKey{Proto::udp, peer6, 53, *lport6})->node, id);
    EXPECT_EQ(second.filter().listener_for(FlowKey{Proto::tcp, peer, 1, 5001})->node, id);
  });
}

// The end of an accepted connection is a RELEASE nobody waits for: those
// the stack's own loop makes wait in an outbox and go together -- after a
// millisecond, at 32, before any other request, before the loop sleeps.
TEST_F(FilterdClientTest, ReleasesOfEndedConnectionsGoTogether) {
  Filterd fd(path);
  connect_node();
  const std::uint16_t id = client->hello().node_id;
  ASSERT_TRUE(client->claim_listen(6, 80, false).ok());
  auto key = [&](int i) { return FlowKey{Proto::tcp, peer, static_cast<std::uint16_t>(40000 + i), 80}; };
  constexpr int kFlows = 47;
  fd.on_loop([&] {
    for (int i = 0; i < kFlows; ++i) ASSERT_TRUE(fd.filter().add_flow(key(i), filterd::Target{id, 0}).ok());  // as steer learns them
  });
  auto release = [&](int from, int to) {
    for (int i = from; i < to; ++i) client->release_connect(6, 80, peer, static_cast<std::uint16_t>(40000 + i));
  };
  auto flows_left = [&] {
    (void)client->request(fc::Ping{});  // filterd reads in order: what came before is done
    int n = 0;
    fd.on_loop([&] {
      for (int i = 0; i < kFlows; ++i) n += fd.filter().find_flow(key(i)).has_value() ? 1 : 0;
    });
    return n;
  };

  release(0, 5);
  EXPECT_EQ(client->held_releases(), 5u);
  clock.advance(std::chrono::microseconds(900));
  loop.run_once();
  EXPECT_EQ(client->held_releases(), 5u) << "under a millisecond old";
  clock.advance(std::chrono::microseconds(200));
  loop.run_once();
  EXPECT_EQ(client->held_releases(), 0u);
  EXPECT_EQ(client->stats().release_batches, 1u);
  EXPECT_EQ(flows_left(), kFlows - 5);

  release(5, 5 + 31);
  EXPECT_EQ(client->held_releases(), 31u);
  release(36, 37);  // the 32nd: sent at once, no time passing
  EXPECT_EQ(client->held_releases(), 0u);
  EXPECT_EQ(client->stats().release_batches, 2u);

  release(37, 40);
  ASSERT_TRUE(client->claim_listen(6, 81, false).ok());  // a request: they go first
  EXPECT_EQ(client->held_releases(), 0u);
  EXPECT_EQ(flows_left(), kFlows - 40);

  release(40, 45);
  EXPECT_TRUE(client->before_sleep());  // the loop would sleep: they go now
  EXPECT_EQ(client->held_releases(), 0u);
  EXPECT_EQ(client->stats().release_batches, 4u);
  EXPECT_EQ(client->stats().releases_held, 45u);
  EXPECT_EQ(flows_left(), kFlows - 45);

  release(45, kFlows);
  client->detach_queue(0);  // the watching stack goes: nothing waits for its passes
  EXPECT_EQ(client->held_releases(), 0u);
  EXPECT_EQ(flows_left(), 0);
  // Their answers were read along the way: nothing piles up for filterd to
  // drop us over, and the connection is still fine.
  EXPECT_EQ(client->state(), FilterdClient::State::connected);
  fd.on_loop([&] { EXPECT_EQ(fd.registry().counters().value("refused"), 0u); });
}

// A release still held when filterd dies reaches the filterd that comes
// back, after the RESYNC (which may still declare the connection).
TEST_F(FilterdClientTest, AHeldReleaseOutlivesARestart) {
  auto first = std::make_unique<Filterd>(path);
  connect_node();
  const std::uint16_t id = client->hello().node_id;
  ASSERT_TRUE(client->claim_listen(6, 80, false).ok());
  const FlowKey gone{Proto::tcp, peer, 40001, 80}, kept{Proto::tcp, peer, 40002, 80};
  // The holdings were read before the connection ended: both declared.
  held.listeners = {fc::ListenerEntry{fc::Proto::tcp, 80, false, 0}};
  held.flows = {fc::FlowEntry{fc::Proto::tcp, 80, peer, 40001, 0, true},
                fc::FlowEntry{fc::Proto::tcp, 80, peer, 40002, 0, true}};
  client->release_connect(6, 80, peer, 40001);
  ASSERT_EQ(client->held_releases(), 1u);

  first->stop();
  notice_loss();
  ASSERT_EQ(client->state(), FilterdClient::State::reconnecting);
  EXPECT_EQ(client->held_releases(), 0u);
  first.reset();
  Filterd second(path);
  let_time_pass(std::chrono::milliseconds(1000));
  ASSERT_EQ(client->state(), FilterdClient::State::connected);
  (void)client->request(fc::Ping{});
  second.on_loop([&] {
    EXPECT_FALSE(second.filter().find_flow(gone).has_value()) << "the held release came after the RESYNC";
    EXPECT_EQ(second.filter().find_flow(kept)->node, id);
  });
}

// A TCP connect from an ephemeral port takes a port of the node's lease:
// one LEASE per block, no CONNECT and no RELEASE per connection; a port
// given back is reused last. UDP, and a connect from a port of the
// caller's choosing, still ask filterd each time.
TEST_F(FilterdClientTest, ConnectsFromLeasedPortsWithoutARoundTripEach) {
  Filterd fd(path);
  FilterdClient::Options o;
  o.lease_block = 4;
  client = FilterdClient::connect(path, "node", o);
  const std::uint16_t id = client->hello().node_id;
  std::vector<std::uint16_t> ports;
  for (int i = 0; i < 5; ++i) {
    Result<std::uint16_t> p = client->claim_connect(6, 0, peer, static_cast<std::uint16_t>(7000 + i));
    ASSERT_TRUE(p.ok()) << to_string(p.error());
    ports.push_back(*p);
  }
  EXPECT_EQ(std::set<std::uint16_t>(ports.begin(), ports.end()).size(), 5u);
  EXPECT_EQ(client->stats().leases, 2u) << "a block of 4, then another";
  EXPECT_EQ(client->stats().leased_connects, 5u);
  EXPECT_EQ(client->leased_ports(), 8u);
  EXPECT_EQ(client->free_leased_ports(), 3u);
  std::uint64_t requests = 0;
  fd.on_loop([&] {
    requests = fd.registry().counters().value("requests");
    for (std::uint16_t p : ports) {
      // Steered to the node, whatever the remote; no exact flow was needed.
      EXPECT_EQ(fd.filter().listener_for(FlowKey{Proto::tcp, Ipv4Addr{0xCB007101}, 443, p}), (filterd::Target{id, 0}));
      EXPECT_FALSE(fd.filter().find_flow(FlowKey{Proto::tcp, peer, 7000, p}).has_value());
    }
  });
  // Given back: to the pool, and used again after the three still free.
  client->release_connect(6, ports[0], peer, 7000);
  EXPECT_EQ(client->free_leased_ports(), 4u);
  std::vector<std::uint16_t> next;
  for (int i = 0; i < 4; ++i) next.push_back(*client->claim_connect(6, 0, peer, 8000));
  EXPECT_EQ(next.back(), ports[0]);
  EXPECT_EQ(std::count(next.begin(), next.end(), ports[0]), 1);
  EXPECT_EQ(client->stats().leases, 2u);
  // UDP and an explicit port: CONNECT.
  Result<std::uint16_t> udp = client->claim_connect(17, 0, peer, 53);
  ASSERT_TRUE(udp.ok());
  Result<std::uint16_t> fixed = client->claim_connect(6, 40000, peer, 80);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(*fixed, 40000);
  fd.on_loop([&] {
    // The release and the four connects from the pool asked nothing.
    EXPECT_EQ(fd.registry().counters().value("requests"), requests + 2);
    EXPECT_EQ(fd.filter().find_flow(FlowKey{Proto::tcp, peer, 80, 40000})->node, id);
  });
}

TEST_F(FilterdClientTest, WithoutLeasesEveryConnectAsks) {
  Filterd fd(path);
  FilterdClient::Options o;
  o.lease_block = 0;
  client = FilterdClient::connect(path, "node", o);
  Result<std::uint16_t> p = client->claim_connect(6, 0, peer, 7000);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(client->stats().leases, 0u);
  EXPECT_EQ(client->leased_ports(), 0u);
  fd.on_loop([&] { EXPECT_TRUE(fd.filter().find_flow(FlowKey{Proto::tcp, peer, 7000, *p}).has_value()); });
}

// After filterd restarts, the node asks for its leased ports back before
// its RESYNC: a connection from one of them carries on, and the pool is
// still the node's.
TEST_F(FilterdClientTest, LeasedPortsComeBackAfterARestart) {
  auto first = std::make_unique<Filterd>(path);
  connect_node();
  const std::uint16_t id = client->hello().node_id;
  Result<std::uint16_t> lport = client->claim_connect(6, 0, peer, 7001);
  ASSERT_TRUE(lport.ok());
  const std::size_t leased = client->leased_ports();
  ASSERT_GT(leased, 1u);
  held.flows = {fc::FlowEntry{fc::Proto::tcp, *lport, peer, 7001, 0, false}};
  first.reset();
  notice_loss();
  Filterd second(path);
  let_time_pass(std::chrono::milliseconds(1000));
  ASSERT_EQ(client->state(), FilterdClient::State::connected);
  EXPECT_EQ(client->stats().resync_refused, 0u);
  EXPECT_EQ(client->leased_ports(), leased);
  EXPECT_EQ(client->free_leased_ports(), leased - 1);
  second.on_loop([&] {
    // The connection: an exact flow (steer lets it through the resync grace).
    EXPECT_EQ(second.filter().find_flow(FlowKey{Proto::tcp, peer, 7001, *lport})->node, id);
    EXPECT_EQ(second.registry().counters().value("leased"), leased);
    EXPECT_EQ(second.filter().listener_for(FlowKey{Proto::tcp, peer, 9, *lport})->node, id);
  });
  // And the next connect needs no LEASE.
  const std::uint64_t leases = client->stats().leases;
  ASSERT_TRUE(client->claim_connect(6, 0, peer, 7002).ok());
  EXPECT_EQ(client->stats().leases, leases);
}

TEST_F(FilterdClientTest, RequestsWorkAgainAfterTheResume) {
  auto first = std::make_unique<Filterd>(path);
  connect_node();
  first.reset();
  notice_loss();
  Filterd second(path);
  // No waiting for the timer: a listen tries at once, and gets its port.
  Result<std::uint16_t> p = client->claim_listen(6, 6000, false);
  ASSERT_TRUE(p.ok()) << to_string(p.error());
  EXPECT_EQ(*p, 6000);
  EXPECT_EQ(client->state(), FilterdClient::State::connected);
}

TEST_F(FilterdClientTest, GivesUpWhenFilterdStaysAway) {
  auto first = std::make_unique<Filterd>(path);
  connect_node();
  first.reset();
  notice_loss();
  let_time_pass(std::chrono::seconds(11));  // past reconnect_for
  ASSERT_EQ(client->state(), FilterdClient::State::failed);
  EXPECT_EQ(client->claim_listen(6, 80, false).error(), Errc::no_route);
  // A filterd that comes later finds nobody asking.
  Filterd late(path);
  let_time_pass(std::chrono::seconds(1));
  EXPECT_EQ(client->state(), FilterdClient::State::failed);
  EXPECT_EQ(resumed, 0);
}

TEST_F(FilterdClientTest, GivesUpWhenAnotherNodeHasItsId) {
  auto first = std::make_unique<Filterd>(path);
  connect_node();
  first.reset();
  notice_loss();
  Filterd second(path);
  // A new node gets there first, and takes id 1 -- ours.
  std::unique_ptr<FilterdClient> other = FilterdClient::connect(path, "other");
  ASSERT_EQ(other->hello().node_id, client->hello().node_id);
  let_time_pass(std::chrono::seconds(1));
  EXPECT_EQ(client->state(), FilterdClient::State::failed);
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(other->state(), FilterdClient::State::connected);
}

// A node on another host: TCP with the token, its own port on the node
// port. It resumes over TCP after a restart like a local node.
TEST_F(FilterdClientTest, ARemoteNodeRegistersOverTcpAndResumesAfterARestart) {
  auto first = std::make_unique<Filterd>(path, "127.0.0.1:0");
  const std::uint16_t port = first->tcp_port();
  ASSERT_NE(port, 0);
  const std::string where = "tcp:127.0.0.1:" + std::to_string(port);
  EXPECT_TRUE(FilterdClient::is_tcp(where));
  EXPECT_TRUE(FilterdClient::is_tcp("127.0.0.1:" + std::to_string(port)));
  EXPECT_FALSE(FilterdClient::is_tcp(path));
  EXPECT_FALSE(FilterdClient::is_tcp("/run/xk/a:1"));
  FilterdClient::Options o;
  o.reconnect_for = std::chrono::seconds(10);
  o.backoff_min = std::chrono::milliseconds(20);
  o.backoff_max = std::chrono::milliseconds(200);
  o.node_port = "net_af_packet0,iface=veth9";
  const MacAddr mac{{0x02, 0, 0, 0, 0x0c, 0x01}};
  o.node_mac = mac;
  // Without the token the node cannot start; with a wrong one, filterd's
  // proof (AUTH_REPLY) does not check out and the node goes no further, so
  // nothing it could not prove is sent.
  EXPECT_THROW(FilterdClient::connect(where, "far", o), std::runtime_error);
  o.token = std::vector<std::byte>(32, std::byte{0x41});
  try {
    (void)FilterdClient::connect(where, "far", o);
    ADD_FAILURE() << "a wrong token was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("did not prove it knows the token"), std::string::npos) << e.what();
  }
  o.token = kToken;
  FilterdClient::Options no_port = o;
  no_port.node_port.clear();
  EXPECT_THROW(FilterdClient::connect(where, "far", no_port), std::runtime_error);
  // The node port gives a node one channel: several stacks are refused.
  FilterdClient::Options two = o;
  two.queues = 2;
  try {
    (void)FilterdClient::connect(where, "far", two);
    ADD_FAILURE() << "a remote node of two stacks was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("one stack"), std::string::npos) << e.what();
  }

  client = FilterdClient::connect(where, "far", o);
  FilterdClient::Hooks h;
  h.holdings = [this] { return held; };
  h.resumed = [this] { ++resumed; };
  client->attach(loop, std::move(h));
  EXPECT_TRUE(client->ethernet());
  ASSERT_EQ(client->hello().channels.size(), 1u);
  EXPECT_EQ(client->hello().channels[0].memif_id, 0u);
  EXPECT_EQ(client->hello().channels[0].node_mac, mac);
  EXPECT_EQ(client->hello().filterd_mac, kNodePortMac);
  // Its graph: the same stack on its own port, with the MAC filterd knows.
  const std::string g = client->graph_spec();
  EXPECT_NE(g.find("devargs=net_af_packet0,iface=veth9 mtu=1500 mac=02:00:00:00:0c:01"), std::string::npos) << g;
  EXPECT_EQ(g.find("memif"), std::string::npos) << g;
  const std::uint16_t id = client->hello().node_id;
  ASSERT_TRUE(client->claim_listen(6, 5001, false).ok());
  held.listeners = {fc::ListenerEntry{fc::Proto::tcp, 5001, false, 0}};

  first->stop();
  notice_loss();
  ASSERT_EQ(client->state(), FilterdClient::State::reconnecting);
  first.reset();
  Filterd second(path, "127.0.0.1:" + std::to_string(port));
  let_time_pass(std::chrono::milliseconds(2000));
  ASSERT_EQ(client->state(), FilterdClient::State::connected);
  EXPECT_EQ(resumed, 1);
  EXPECT_EQ(client->hello().node_id, id);
  second.on_loop([&] {
    const filterd::NodeInfo* n = second.registry().node(id);
    ASSERT_NE(n, nullptr);
    EXPECT_TRUE(n->ethernet);
    EXPECT_EQ(n->channels.front().node_mac, mac);
    EXPECT_EQ(second.filter().listener_for(FlowKey{Proto::tcp, peer, 1, 5001})->node, id);
  });
}

// A node that runs three stacks: one HELLO with queues=3, a channel each,
// every port operation of stack q on queue q, and after a filterd restart
// A filterd that shares an IPv6 address too: the node's HELLO reply says
// so, and its graph gets IPv6 under its transports -- no duplicate check
// (every node holds the address; filterd checks it outside), no reports.
TEST_F(FilterdClientTest, AnIpv6SharedAddressGivesTheNodeADualStack) {
  Filterd f(path, {}, IpCidr{*parse_ip("2001:db8::10"), 64});
  connect_node();
  ASSERT_TRUE(client->hello().address6.has_value());
  EXPECT_EQ(*client->hello().address6, *parse_ip("2001:db8::10"));
  EXPECT_EQ(client->hello().prefix6_len, 64);
  const std::string g = client->graph_spec();
  // (Its hairpin: the shared address leads to filterd, as IPv4's does.)
  const std::string nd = "nd   nd0  below=eth0 dad=0 mld=off static=2001:db8::10@" +
                         to_string(client->hello().filterd_mac) + "\n";
  for (const char* line : {nd.c_str(), "ipv6 ip6  below=eth0,nd0 addr=2001:db8::10/64 hairpin=on ra=off gw=fe80::1\n",
                           "icmpv6 icmp6 below=ip6,nd0\n", "udp  udp0 below=ip0,ip6\n", "tcp  tcp0 below=ip0,ip6 secret="}) {
    EXPECT_NE(g.find(line), std::string::npos) << line << " in\n" << g;
  }
  // A filterd without one: IPv4 only, as before.
  client.reset();
  f.stop();
  Filterd v4(path + ".4");
  FilterdClient::Options o;
  std::unique_ptr<FilterdClient> c4 = FilterdClient::connect(path + ".4", "node", o);
  EXPECT_FALSE(c4->hello().address6.has_value());
  EXPECT_EQ(c4->graph_spec().find("ipv6"), std::string::npos);
  EXPECT_NE(c4->graph_spec().find("tcp  tcp0 below=ip0 secret="), std::string::npos);
}

// one resume with all three channels and a RESYNC of each stack's holdings
// on its queue.
TEST_F(FilterdClientTest, ANodeWithThreeStacksSharesOneConnectionAndResyncsEachQueue) {
  auto first = std::make_unique<Filterd>(path);
  FilterdClient::Options o;
  o.reconnect_for = std::chrono::seconds(10);
  o.queues = 3;
  client = FilterdClient::connect(path, "node", o);
  ASSERT_EQ(client->hello().channels.size(), 3u);
  EXPECT_EQ(client->queues(), 3);
  const std::uint16_t id = client->hello().node_id;
  first->on_loop([&] { EXPECT_EQ(first->registry().node(id)->queues, 3); });
  // Each stack's graph is on its own channel, with its own DPDK port name.
  for (std::uint16_t q = 0; q < 3; ++q) {
    const std::string g = client->graph_spec("", q);
    EXPECT_NE(g.find("net_memif" + std::to_string(q) + ",role=client,id=" +
                     std::to_string(client->hello().channels[q].memif_id)),
              std::string::npos)
        << g;
    EXPECT_NE(g.find("mac=" + to_string(client->hello().channels[q].node_mac)), std::string::npos) << g;
  }
  EXPECT_THROW(client->queue(3), std::out_of_range);
  EXPECT_THROW(client->graph_spec("", 3), std::out_of_range);
  // Three loops (on this thread: their tables are read directly).
  std::array<std::unique_ptr<EventLoop>, 3> loops;
  std::array<FilterdClient::Holdings, 3> stack_held;
  std::array<int, 3> stack_resumed{};
  for (std::uint16_t q = 0; q < 3; ++q) {
    loops[q] = std::make_unique<EventLoop>(clock);
    FilterdClient::Hooks h;
    h.holdings = [&stack_held, q] { return stack_held[q]; };
    h.resumed = [&stack_resumed, q] { ++stack_resumed[q]; };
    client->attach_queue(q, *loops[q], std::move(h));
  }
  EXPECT_THROW(client->attach_queue(1, *loops[1], {}), std::logic_error);
  // Every stack joins the group on 5001 from its queue, and connects out.
  std::array<std::uint16_t, 3> lports{};
  for (std::uint16_t q = 0; q < 3; ++q) {
    ASSERT_TRUE(client->queue(q).claim_listen(6, 5001, true).ok()) << q;
    Result<std::uint16_t> p = client->queue(q).claim_connect(6, 0, peer, 7001);
    ASSERT_TRUE(p.ok());
    lports[q] = *p;
  }
  first->on_loop([&] {
    EXPECT_EQ(first->filter().listener(Proto::tcp, 5001)->members.size(), 3u);
    // Each stack's connection from a port of its queue's lease.
    for (std::uint16_t q = 0; q < 3; ++q) {
      EXPECT_EQ((first->filter().listener_for(FlowKey{Proto::tcp, peer, 7001, lports[q]})),
                (filterd::Target{id, q}));
    }
  });
  // Stack 2's listener closes: only its membership goes.
  client->queue(2).release_listen(6, 5001);
  first->on_loop([&] { EXPECT_EQ(first->filter().listener(Proto::tcp, 5001)->members.size(), 2u); });

  // Holdings (queue 0 in each entry, as filterd_holdings makes them).
  for (std::uint16_t q = 0; q < 2; ++q) stack_held[q].listeners = {fc::ListenerEntry{fc::Proto::tcp, 5001, true, 0}};
  for (std::uint16_t q = 0; q < 3; ++q) {
    stack_held[q].flows = {fc::FlowEntry{fc::Proto::tcp, lports[q], peer, 7001, 0, false},
                           fc::FlowEntry{fc::Proto::tcp, 5001, peer, static_cast<std::uint16_t>(40000 + q), 0, true}};
  }
  first->stop();
  for (int i = 0; i < 100000 && client->state() == FilterdClient::State::connected; ++i) loops[0]->run_once();
  ASSERT_EQ(client->state(), FilterdClient::State::reconnecting);
  EXPECT_EQ(client->queue(1).claim_listen(6, 6000, false).error(), Errc::would_block);
  first.reset();
  Filterd second(path);
  for (int i = 0; i < 200 && client->state() == FilterdClient::State::reconnecting; ++i) {
    clock.advance(std::chrono::milliseconds(10));
    loops[0]->run_once();
  }
  ASSERT_EQ(client->state(), FilterdClient::State::connected);
  EXPECT_EQ(client->stats().resynced, 2u + 6u);
  EXPECT_EQ(client->stats().resync_refused, 0u);
  EXPECT_EQ(stack_resumed, (std::array<int, 3>{1, 1, 1}));
  second.on_loop([&] {
    const filterd::NodeInfo* n = second.registry().node(id);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->channels.size(), 3u);
    std::optional<filterd::ListenerInfo> l = second.filter().listener(Proto::tcp, 5001);
    ASSERT_TRUE(l.has_value());
    ASSERT_EQ(l->members.size(), 2u);
    EXPECT_EQ(l->members[0].queue + l->members[1].queue, 1);  // queues 0 and 1
    for (std::uint16_t q = 0; q < 3; ++q) {
      EXPECT_EQ((second.filter().find_flow(FlowKey{Proto::tcp, peer, 7001, lports[q]})), (filterd::Target{id, q}));
      EXPECT_EQ((second.filter().find_flow(FlowKey{Proto::tcp, peer, static_cast<std::uint16_t>(40000 + q), 5001})),
                (filterd::Target{id, q}));
    }
  });
  // The stacks go before the client: the watcher first.
  for (std::uint16_t q = 0; q < 3; ++q) client->detach_queue(q);
  client.reset();
}

TEST(FilterdClientHoldings, NothingWithoutProtocols) {
  FilterdClient::Holdings h = filterd_holdings(nullptr, nullptr);
  EXPECT_TRUE(h.listeners.empty());
  EXPECT_TRUE(h.flows.empty());
}

}  // namespace
}  // namespace xk

// filterd's control plane: what each request does to the nodes, the
// host-wide ports and the filter (xk/filterd/registry.hpp).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "xk/clock.hpp"
#include "xk/filterd/registry.hpp"

#include <map>

namespace xk::filterd {
namespace {

using ctl::ErrorCode;
using ctl::Message;

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() { start(); }

  // A fresh filterd: an empty filter and registry (what a restart leaves).
  void start() {
    reg.reset();
    FilterConfig f;
    f.shared_ip = Ipv4Addr{0xC000020A};
    filter = std::make_unique<FilterEngine>(f, clock);
    RegistryConfig c;
    c.shared = Ipv4Cidr{Ipv4Addr{0xC000020A}, 24};
    c.ephemeral_min = 50000;
    c.ephemeral_max = 50003;  // four ports: exhaustion is reachable
    c.node_port_mac = node_port_mac;
    c.rules_file = rules_file;
    reg = std::make_unique<NodeRegistry>(
        c, *filter,
        NodeRegistry::Hooks{[this](const NodeInfo& n) {
                              attached.push_back(n.id);
                              return fail_attach ? Status(Errc::no_memory) : Status();
                            },
                            [this](NodeId n) { detached.push_back(n); }, {}, {}});
  }

  Message ask(NodeId& node, ctl::Body body, std::uint32_t pid = 0) {
    return reg->handle(Message{++seq, std::move(body)}, node, pid);
  }
  NodeId hello(const char* name, std::uint16_t queues = 1) {
    NodeId n = 0;
    Message r = ask(n, ctl::Hello{name, 100, queues});
    EXPECT_TRUE(std::holds_alternative<ctl::HelloReply>(r.body));
    if (const auto* h = std::get_if<ctl::HelloReply>(&r.body)) channels[n] = h->channels;
    return n;
  }
  // A node that outlived its filterd: HELLO asking for `id` and its channels.
  Message resume(NodeId& conn, NodeId id, std::vector<ctl::Channel> chans, const char* name = "again") {
    ctl::Hello h{name, 100, static_cast<std::uint16_t>(chans.size())};
    h.resume = ctl::Resume{id, std::move(chans)};
    return ask(conn, h);
  }
  template <class T>
  static bool is(const Message& m) {
    return std::holds_alternative<T>(m.body);
  }
  static ErrorCode code(const Message& m) {
    const auto* e = std::get_if<ctl::Error>(&m.body);
    return e == nullptr ? ErrorCode{} : e->code;
  }

  ManualClock clock;
  std::unique_ptr<FilterEngine> filter;
  std::unique_ptr<NodeRegistry> reg;
  std::vector<NodeId> attached, detached;
  std::map<NodeId, std::vector<ctl::Channel>> channels;
  bool fail_attach = false;
  std::uint32_t seq = 0;
  std::optional<MacAddr> node_port_mac;  // filterd --node-port
  std::string rules_file;                // filterd --rules-file
};

TEST_F(RegistryTest, HelloRegistersAndAnswersWithTheChannelAndTheSharedAddress) {
  NodeId n = 0;
  Message r = ask(n, ctl::Hello{"node-a", 100, 2}, 100);
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(r.body));
  EXPECT_EQ(r.request_id, seq);  // a reply echoes its request's id
  const auto& h = std::get<ctl::HelloReply>(r.body);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(h.node_id, 1);
  EXPECT_EQ(h.channels.size(), 2u);
  EXPECT_NE(h.channels[0].memif_id, h.channels[1].memif_id);
  EXPECT_NE(h.channels[0].node_mac, h.channels[1].node_mac);
  EXPECT_EQ(h.address, Ipv4Addr{0xC000020A});
  EXPECT_EQ(h.prefix_len, 24);
  EXPECT_EQ(attached, std::vector<NodeId>{1});
  // Once per connection.
  EXPECT_EQ(code(ask(n, ctl::Hello{"again", 100, 1})), ErrorCode::bad_message);
  // The next node gets the next id.
  EXPECT_EQ(hello("node-b"), 2);
}

TEST_F(RegistryTest, NothingBeforeHelloAndThePeersPidMustMatch) {
  NodeId n = 0;
  EXPECT_EQ(code(ask(n, ctl::Listen{ctl::Proto::tcp, 80})), ErrorCode::not_registered);
  EXPECT_EQ(code(ask(n, ctl::Hello{"liar", 4242, 1}, /*peer_pid=*/100)), ErrorCode::permission_denied);
  EXPECT_EQ(n, 0);
  constexpr std::uint8_t kNewer = ctl::kProtocolVersion + 1;
  EXPECT_EQ(code(ask(n, ctl::Hello{"new", 100, 1, kNewer, kNewer + 1})), ErrorCode::unsupported_version);
  fail_attach = true;
  EXPECT_EQ(code(ask(n, ctl::Hello{"no channel", 100, 1})), ErrorCode::internal);
  EXPECT_EQ(reg->node_count(), 0u);
  // PING needs no registration (a liveness check).
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(n, ctl::Ping{}).body));
}

TEST_F(RegistryTest, PortsAreHostWideExceptForGroups) {
  NodeId a = hello("a"), b = hello("b");
  Message r = ask(a, ctl::Listen{ctl::Proto::tcp, 80});
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(r.body));
  EXPECT_EQ(code(ask(b, ctl::Listen{ctl::Proto::tcp, 80})), ErrorCode::port_in_use);
  EXPECT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(b, ctl::Listen{ctl::Proto::udp, 80}).body));
  // A group: both join; a third listener alone is refused.
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(a, ctl::Listen{ctl::Proto::tcp, 8080, true}).body));
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(b, ctl::Listen{ctl::Proto::tcp, 8080, true}).body));
  NodeId c = hello("c");
  EXPECT_EQ(code(ask(c, ctl::Listen{ctl::Proto::tcp, 8080, false})), ErrorCode::port_in_use);
  // Port 0: filterd picks one.
  Message p = ask(c, ctl::Listen{ctl::Proto::tcp, 0});
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(p.body));
  EXPECT_GE(std::get<ctl::ListenReply>(p.body).port, 50000);
  // UNLISTEN gives the port back.
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(a, ctl::Unlisten{ctl::Proto::tcp, 80}).body));
  EXPECT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(b, ctl::Listen{ctl::Proto::tcp, 80}).body));
  EXPECT_EQ(code(ask(a, ctl::Unlisten{ctl::Proto::tcp, 80})), ErrorCode::not_found);
}

TEST_F(RegistryTest, ConnectInstallsTheFlowBeforeTheReplyAndReleaseRemovesIt) {
  NodeId a = hello("a"), b = hello("b");
  const Ipv4Addr peer{0xC0000201};
  Message r = ask(a, ctl::Connect{ctl::Proto::tcp, peer, 7});
  ASSERT_TRUE(std::holds_alternative<ctl::ConnectReply>(r.body));
  std::uint16_t lport = std::get<ctl::ConnectReply>(r.body).local_port;
  std::optional<Target> t = filter->find_flow(FlowKey{Proto::tcp, peer, 7, lport});
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->node, a);
  // The port is nobody else's now, not even for another peer.
  EXPECT_EQ(code(ask(b, ctl::Connect{ctl::Proto::tcp, peer, 9, 0, lport})), ErrorCode::port_in_use);
  EXPECT_EQ(code(ask(b, ctl::Listen{ctl::Proto::tcp, lport})), ErrorCode::port_in_use);
  // Only the owner releases it.
  EXPECT_EQ(code(ask(b, ctl::Release{ctl::Proto::tcp, lport, peer, 7})), ErrorCode::permission_denied);
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(a, ctl::Release{ctl::Proto::tcp, lport, peer, 7}).body));
  EXPECT_FALSE(filter->find_flow(FlowKey{Proto::tcp, peer, 7, lport}).has_value());
  EXPECT_EQ(code(ask(a, ctl::Release{ctl::Proto::tcp, lport, peer, 7})), ErrorCode::not_found);
}

// A peer may be IPv6 (protocol version 4): the flow is the node's, listed
// and released like any other.
TEST_F(RegistryTest, AnIpv6PeersFlowIsClaimedListedAndReleased) {
  NodeId a = hello("a");
  const IpAddr peer = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42});
  Message r = ask(a, ctl::Connect{ctl::Proto::udp, peer, 53});
  ASSERT_TRUE(std::holds_alternative<ctl::ConnectReply>(r.body)) << static_cast<int>(code(r));
  const std::uint16_t lport = std::get<ctl::ConnectReply>(r.body).local_port;
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::udp, peer, 53, lport}), (Target{a, 0}));
  EXPECT_FALSE(filter->find_flow(FlowKey{Proto::udp, Ipv4Addr{0xC0000242}, 53, lport}).has_value());
  NodeId admin = 0;
  Message list = ask(admin, ctl::Flows{.node = a, .cursor = {}, .limit = 0});
  ASSERT_TRUE(std::holds_alternative<ctl::FlowsReply>(list.body));
  const auto& flows = std::get<ctl::FlowsReply>(list.body).flows;
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_EQ(flows[0].flow.remote_addr, peer);
  EXPECT_EQ(flows[0].flow.local_port, lport);
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(a, ctl::Release{ctl::Proto::udp, lport, peer, 53}).body));
  EXPECT_FALSE(filter->find_flow(FlowKey{Proto::udp, peer, 53, lport}).has_value());
}

// An accepted connection's flow is one steer made at the node's SYN-ACK, on
// the node's listening port: the node releases it when the connection is
// over, and the port stays its listener's.
TEST_F(RegistryTest, ReleaseEndsAnAcceptedConnectionsLearntFlowAndKeepsTheListener) {
  NodeId a = hello("a"), b = hello("b");
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(a, ctl::Listen{ctl::Proto::tcp, 80}).body));
  const Ipv4Addr peer{0xC0000201};
  const FlowKey key{Proto::tcp, peer, 40000, 80};
  ASSERT_TRUE(filter->add_flow(key, Target{a, 0}).ok());  // as steer learns it
  EXPECT_EQ(code(ask(b, ctl::Release{ctl::Proto::tcp, 80, peer, 40000})), ErrorCode::permission_denied);
  EXPECT_TRUE(filter->find_flow(key).has_value());
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(a, ctl::Release{ctl::Proto::tcp, 80, peer, 40000}).body));
  EXPECT_FALSE(filter->find_flow(key).has_value());
  EXPECT_EQ(code(ask(a, ctl::Release{ctl::Proto::tcp, 80, peer, 40000})), ErrorCode::not_found);
  // Port 80 is still a's: nobody else may listen on it.
  EXPECT_EQ(code(ask(b, ctl::Listen{ctl::Proto::tcp, 80})), ErrorCode::port_in_use);
}

TEST_F(RegistryTest, TheEphemeralRangeRunsOut) {
  NodeId a = hello("a");
  const Ipv4Addr peer{0xC0000201};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(std::holds_alternative<ctl::ConnectReply>(ask(a, ctl::Connect{ctl::Proto::tcp, peer, 7}).body)) << i;
  }
  EXPECT_EQ(code(ask(a, ctl::Connect{ctl::Proto::tcp, peer, 7})), ErrorCode::no_ports);
}

// LEASE (version 3): ports of the ephemeral range, the node's alone,
// steered by the listen table to the queue that asked, for any remote.
TEST_F(RegistryTest, ALeaseGivesPortsSteeredToItsQueueAndNobodyElsesPort) {
  NodeId a = hello("a", 2), b = hello("b");
  Message r = ask(a, ctl::Lease{ctl::Proto::tcp, 1, 3});
  ASSERT_TRUE(is<ctl::LeaseReply>(r)) << ctl::to_string(ctl::type_of(r.body));
  const std::vector<std::uint16_t> ports = std::get<ctl::LeaseReply>(r.body).ports;
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(std::set<std::uint16_t>(ports.begin(), ports.end()).size(), 3u);
  for (std::uint16_t p : ports) {
    EXPECT_GE(p, 50000);
    EXPECT_LE(p, 50003);
    std::optional<ListenerInfo> l = filter->listener(Proto::tcp, p);
    ASSERT_TRUE(l.has_value()) << p;
    EXPECT_FALSE(l->group);
    EXPECT_EQ(l->members, (std::vector<Target>{Target{a, 1}}));
    // Any remote: the frames of every connection from it go to queue 1.
    EXPECT_EQ(filter->listener_for(FlowKey{Proto::tcp, Ipv4Addr{0xC6336401}, 443, p}), (Target{a, 1}));
    EXPECT_EQ(code(ask(b, ctl::Listen{ctl::Proto::tcp, p})), ErrorCode::port_in_use);
    EXPECT_EQ(code(ask(b, ctl::Connect{ctl::Proto::tcp, Ipv4Addr{0xC0000201}, 7, 0, p})), ErrorCode::port_in_use);
    EXPECT_EQ(code(ask(b, ctl::Lease{ctl::Proto::tcp, 0, 0, {p}})), ErrorCode{}) << "a reply, without the port";
  }
  // One port left in the range: CONNECT gets it, the next LEASE nothing.
  EXPECT_TRUE(is<ctl::ConnectReply>(ask(b, ctl::Connect{ctl::Proto::tcp, Ipv4Addr{0xC0000201}, 7})));
  EXPECT_EQ(code(ask(b, ctl::Lease{ctl::Proto::tcp, 0, 4})), ErrorCode::no_ports);
  EXPECT_EQ(code(ask(a, ctl::Lease{ctl::Proto::tcp, 2, 4})), ErrorCode::bad_message) << "no queue 2";
  EXPECT_EQ(reg->counters().value("leased"), 3u);
  // PORTS lists them as leases of queue 1.
  NodeId admin = 0;
  Message list = ask(admin, ctl::Ports{});
  ASSERT_TRUE(is<ctl::PortsReply>(list));
  std::size_t leases = 0;
  for (const ctl::PortRecord& rec : std::get<ctl::PortsReply>(list.body).ports) {
    if (!rec.lease) continue;
    ++leases;
    EXPECT_EQ(rec.node, a);
    EXPECT_EQ(rec.queue, 1);
    EXPECT_FALSE(rec.listen);
  }
  EXPECT_EQ(leases, 3u);
  // Its connections need no CONNECT; b's RELEASE of one is refused.
  EXPECT_EQ(code(ask(b, ctl::Release{ctl::Proto::tcp, ports[0], Ipv4Addr{0xC6336401}, 443})), ErrorCode::not_found);
  // The node goes: the ports are free again.
  reg->node_gone(a);
  for (std::uint16_t p : ports) EXPECT_FALSE(filter->listener(Proto::tcp, p).has_value());
  r = ask(b, ctl::Lease{ctl::Proto::tcp, 0, 4});
  ASSERT_TRUE(is<ctl::LeaseReply>(r));
  EXPECT_EQ(std::get<ctl::LeaseReply>(r.body).ports.size(), 3u) << "the three a had";
}

TEST_F(RegistryTest, ALeaseIsCappedPerNodeAndRefusedInCentralMode) {
  RegistryConfig c;
  c.shared = Ipv4Cidr{Ipv4Addr{0xC000020A}, 24};
  c.max_leased_ports = 2;
  NodeRegistry capped(c, *filter, {});
  NodeId a = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(capped.handle(Message{1, ctl::Hello{"a", 100, 1}}, a, 0)));
  Message r = capped.handle(Message{2, ctl::Lease{ctl::Proto::tcp, 0, 2}}, a, 0);
  ASSERT_TRUE(is<ctl::LeaseReply>(r));
  EXPECT_EQ(std::get<ctl::LeaseReply>(r.body).ports.size(), 2u);
  EXPECT_EQ(code(capped.handle(Message{3, ctl::Lease{ctl::Proto::tcp, 0, 1}}, a, 0)), ErrorCode::too_many);
  c.central = true;
  FilterEngine other(FilterConfig{}, clock);
  NodeRegistry central(c, other, {});
  NodeId b = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(central.handle(Message{1, ctl::Hello{"b", 100, 1}}, b, 0)));
  EXPECT_EQ(code(central.handle(Message{2, ctl::Lease{ctl::Proto::tcp, 0, 1}}, b, 0)), ErrorCode::bad_message);
}

// After a restart of filterd: a resumed node asks for its leased ports back
// (those someone took meanwhile are refused), then RESYNCs its connections,
// those from leased ports as exact flows (steer holds listen-table frames
// back for the grace period; exact flows pass).
TEST_F(RegistryTest, AResumedNodeGetsItsLeasedPortsBackAndItsConnectionsOnThem) {
  NodeId a = hello("a");
  Message r = ask(a, ctl::Lease{ctl::Proto::tcp, 0, 3});
  ASSERT_TRUE(is<ctl::LeaseReply>(r));
  const std::vector<std::uint16_t> ports = std::get<ctl::LeaseReply>(r.body).ports;
  ASSERT_EQ(ports.size(), 3u);
  const std::vector<ctl::Channel> chans = channels[a];
  start();  // filterd restarted
  NodeId conn = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(resume(conn, a, chans)));
  NodeId other = hello("other");
  ASSERT_TRUE(is<ctl::ListenReply>(ask(other, ctl::Listen{ctl::Proto::tcp, ports[2]})));  // took one meanwhile
  r = ask(conn, ctl::Lease{ctl::Proto::tcp, 0, 0, ports});
  ASSERT_TRUE(is<ctl::LeaseReply>(r));
  EXPECT_EQ(std::get<ctl::LeaseReply>(r.body).ports, (std::vector<std::uint16_t>{ports[0], ports[1]}));
  // Asking again is harmless: they are ours.
  r = ask(conn, ctl::Lease{ctl::Proto::tcp, 0, 0, {ports[0]}});
  EXPECT_EQ(std::get<ctl::LeaseReply>(r.body).ports, (std::vector<std::uint16_t>{ports[0]}));
  const Ipv4Addr peer{0xC6336401};
  ctl::Resync rs;
  rs.flows = {{ctl::Proto::tcp, ports[0], peer, 443, 0}, {ctl::Proto::tcp, ports[2], peer, 443, 0}};
  Message answer = ask(conn, rs);
  EXPECT_EQ(code(answer), ErrorCode::port_in_use) << "the flow on the port another node holds now";
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 443, ports[0]}), (Target{a, 0}));
  EXPECT_FALSE(filter->find_flow(FlowKey{Proto::tcp, peer, 443, ports[2]}).has_value());
  // The exact flow goes with the node, as the lease does.
  reg->node_gone(a);
  EXPECT_FALSE(filter->find_flow(FlowKey{Proto::tcp, peer, 443, ports[0]}).has_value());
  EXPECT_FALSE(filter->listener(Proto::tcp, ports[0]).has_value());
}

TEST_F(RegistryTest, ANodeThatGoesLosesEverythingButItsGroupPeersKeepThePort) {
  NodeId a = hello("a"), b = hello("b");
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(a, ctl::Listen{ctl::Proto::tcp, 80}).body));
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(a, ctl::Listen{ctl::Proto::tcp, 8080, true}).body));
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(b, ctl::Listen{ctl::Proto::tcp, 8080, true}).body));
  ASSERT_TRUE(std::holds_alternative<ctl::ConnectReply>(ask(a, ctl::Connect{ctl::Proto::tcp, Ipv4Addr{0xC0000201}, 7}).body));
  Message rule = ask(a, ctl::RuleAdd{"udp dst port 9999", 0, 0});
  ASSERT_TRUE(std::holds_alternative<ctl::RuleAddReply>(rule.body));
  reg->node_gone(a);
  EXPECT_EQ(detached, std::vector<NodeId>{a});
  EXPECT_EQ(filter->flow_count(), 0u);
  EXPECT_EQ(filter->rule_count(), 0u);
  // Port 80 is free again; the group lives on with b.
  NodeId c = hello("c");
  EXPECT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(c, ctl::Listen{ctl::Proto::tcp, 80}).body));
  FlowKey any{Proto::tcp, Ipv4Addr{0xC6336401}, 1234, 8080};
  std::optional<Target> t = filter->listener_for(any);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->node, b);
  EXPECT_EQ(reg->node(a), nullptr);
}

TEST_F(RegistryTest, RulesAreCompiledAndOwned) {
  NodeId a = hello("a"), b = hello("b");
  Message bad = ask(a, ctl::RuleAdd{"udp dst port banana", 0, 0});
  EXPECT_EQ(code(bad), ErrorCode::bad_rule);
  EXPECT_FALSE(std::get<ctl::Error>(bad.body).text.empty());  // libpcap's reason
  Message ok = ask(a, ctl::RuleAdd{"udp dst port 9999", 0, 5});
  ASSERT_TRUE(std::holds_alternative<ctl::RuleAddReply>(ok.body));
  std::uint32_t id = std::get<ctl::RuleAddReply>(ok.body).rule_id;
  EXPECT_EQ(code(ask(b, ctl::RuleDel{id})), ErrorCode::not_found);
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(a, ctl::RuleDel{id}).body));
  EXPECT_EQ(filter->rule_count(), 0u);
}

TEST_F(RegistryTest, ResyncRebuildsWhatANodeHadAndRefusesWhatOthersTook) {
  NodeId a = hello("a"), b = hello("b");
  const Ipv4Addr peer{0xC0000201};
  // b re-declares first and takes port 80.
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(b, ctl::Listen{ctl::Proto::tcp, 80}).body));
  ctl::Resync rs;
  rs.listeners.push_back(ctl::ListenerEntry{ctl::Proto::tcp, 80, false, 0});
  rs.listeners.push_back(ctl::ListenerEntry{ctl::Proto::tcp, 81, false, 0});
  rs.flows.push_back(ctl::FlowEntry{ctl::Proto::tcp, 40000, peer, 7, 0});
  Message r = ask(a, rs);
  EXPECT_EQ(code(r), ErrorCode::port_in_use);  // one entry refused...
  EXPECT_TRUE(filter->listener_for(FlowKey{Proto::tcp, peer, 1, 81}).has_value());  // ...the rest installed
  std::optional<Target> f = filter->find_flow(FlowKey{Proto::tcp, peer, 7, 40000});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->node, a);
}

TEST_F(RegistryTest, AResumingNodeGetsItsIdAndChannelsBackFromAFreshFilterd) {
  NodeId a = hello("a", 2), b = hello("b");
  const std::vector<ctl::Channel> a_channels = channels[a];
  start();  // filterd restarted: it knows nobody
  attached.clear();
  NodeId conn = 0;
  Message r = resume(conn, b, channels[b]);
  ASSERT_TRUE(is<ctl::HelloReply>(r));
  EXPECT_EQ(conn, b);
  EXPECT_EQ(std::get<ctl::HelloReply>(r.body).node_id, b);
  EXPECT_EQ(std::get<ctl::HelloReply>(r.body).channels, channels[b]);
  NodeId conn_a = 0;
  r = resume(conn_a, a, a_channels);
  ASSERT_TRUE(is<ctl::HelloReply>(r));
  EXPECT_EQ(std::get<ctl::HelloReply>(r.body).channels, a_channels);
  EXPECT_EQ(attached, (std::vector<NodeId>{b, a}));  // the daemon made their channels again
  // Fresh ids go on after the resumed ones.
  EXPECT_GT(hello("c"), b);
}

TEST_F(RegistryTest, AResumeIsRefusedWhenTheIdOrAChannelIsAnotherNodes) {
  NodeId a = hello("a"), b = hello("b");
  const std::vector<ctl::Channel> a_ch = channels[a], b_ch = channels[b];
  start();
  attached.clear();
  // A new node registered first and got id 1 -- a's old id.
  NodeId first = hello("newcomer");
  ASSERT_EQ(first, a);
  NodeId conn = 0;
  EXPECT_EQ(code(resume(conn, a, a_ch)), ErrorCode::port_in_use);
  EXPECT_EQ(conn, 0);
  // Another id, but the newcomer's memif id or MAC.
  std::vector<ctl::Channel> stolen = channels[first];
  EXPECT_EQ(code(resume(conn, 40, stolen)), ErrorCode::port_in_use);
  stolen[0].memif_id = 4000;  // the MAC alone is still the newcomer's
  EXPECT_EQ(code(resume(conn, 40, stolen)), ErrorCode::port_in_use);
  // Two channels of one node may not share an interface.
  EXPECT_EQ(code(resume(conn, 41, {ctl::Channel{900, MacAddr{{2, 0, 0, 0, 0, 1}}},
                                   ctl::Channel{900, MacAddr{{2, 0, 0, 0, 0, 2}}}})),
            ErrorCode::bad_message);
  EXPECT_EQ(attached, std::vector<NodeId>{first});  // nothing made for the refused ones
  // b's id and channels are free: b comes back.
  EXPECT_TRUE(is<ctl::HelloReply>(resume(conn, b, b_ch)));
  // A second HELLO on a registered connection is refused, resume or not.
  EXPECT_EQ(code(resume(conn, 50, {ctl::Channel{5000, MacAddr{{2, 0, 0, 0, 0, 9}}}})), ErrorCode::bad_message);
}

TEST_F(RegistryTest, FreshIdsSkipChannelsAResumedNodeHolds) {
  start();
  NodeId conn = 0;
  // A node resumed with id 1 but with the interface id 2 would get (2 * 64).
  ASSERT_TRUE(is<ctl::HelloReply>(resume(conn, 1, {ctl::Channel{128, MacAddr{{2, 0x11, 0, 0, 0, 1}}}})));
  NodeId fresh = hello("fresh");
  EXPECT_NE(fresh, 1);
  for (const ctl::Channel& c : channels[fresh]) EXPECT_NE(c.memif_id, 128u);
}

TEST_F(RegistryTest, ResyncAfterARestartRebuildsListenersGroupsAndFlows) {
  NodeId a = hello("a"), b = hello("b");
  const auto a_ch = channels[a], b_ch = channels[b];
  const Ipv4Addr peer{0xC0000201};
  start();
  NodeId ca = 0, cb = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(resume(ca, a, a_ch)));
  ASSERT_TRUE(is<ctl::HelloReply>(resume(cb, b, b_ch)));
  // a: a member of the group on 5001 with one accepted connection, and a
  // connection it opened from 50001; b: the other member, one accepted.
  ctl::Resync ra;
  ra.listeners = {ctl::ListenerEntry{ctl::Proto::tcp, 5001, true, 0}, ctl::ListenerEntry{ctl::Proto::udp, 53, false, 0}};
  ra.flows = {ctl::FlowEntry{ctl::Proto::tcp, 5001, peer, 40000, 0, true},
              ctl::FlowEntry{ctl::Proto::tcp, 50001, peer, 7001, 0, false}};
  ctl::Resync rb;
  rb.listeners = {ctl::ListenerEntry{ctl::Proto::tcp, 5001, true, 0}};
  rb.flows = {ctl::FlowEntry{ctl::Proto::tcp, 5001, peer, 40001, 0, true}};
  ASSERT_TRUE(is<ctl::Ok>(ask(ca, ra)));
  ASSERT_TRUE(is<ctl::Ok>(ask(cb, rb)));
  // Each accepted connection is its node's exact flow, whatever the group's
  // rendezvous choice for its 4-tuple.
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 40000, 5001})->node, a);
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 40001, 5001})->node, b);
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 7001, 50001})->node, a);
  EXPECT_TRUE(filter->listener_for(FlowKey{Proto::udp, peer, 9, 53}).has_value());
  // The group has both members again: b leaving keeps a's share.
  reg->node_gone(b);
  ASSERT_TRUE(filter->listener_for(FlowKey{Proto::tcp, peer, 1, 5001}).has_value());
  EXPECT_EQ(filter->listener_for(FlowKey{Proto::tcp, peer, 1, 5001})->node, a);
  // The connected flow's port is a's: nobody else gets it, and a's RELEASE
  // after TIME-WAIT gives it back.
  NodeId c = hello("c");
  EXPECT_EQ(code(ask(c, ctl::Connect{ctl::Proto::tcp, peer, 9, 0, 50001})), ErrorCode::port_in_use);
  EXPECT_TRUE(is<ctl::Ok>(ask(ca, ctl::Release{ctl::Proto::tcp, 50001, peer, 7001})));
  EXPECT_TRUE(is<ctl::ConnectReply>(ask(c, ctl::Connect{ctl::Proto::tcp, peer, 9, 0, 50001})));
  // The same declaration again changes nothing and is not an error.
  ra.flows.pop_back();
  EXPECT_TRUE(is<ctl::Ok>(ask(ca, ra)));
}

TEST_F(RegistryTest, ResyncRefusesWhatAnotherNodeTookMeanwhileAndInstallsTheRest) {
  (void)hello("gone for good");
  NodeId a = hello("a");
  const auto a_ch = channels[a];
  const Ipv4Addr peer{0xC0000201};
  start();
  // While a was away, c took port 80 alone and a connection from 50000.
  NodeId c = hello("c");
  ASSERT_NE(c, a);
  ASSERT_TRUE(is<ctl::ListenReply>(ask(c, ctl::Listen{ctl::Proto::tcp, 80})));
  Message cr = ask(c, ctl::Connect{ctl::Proto::tcp, peer, 7});
  ASSERT_TRUE(is<ctl::ConnectReply>(cr));
  const std::uint16_t taken = std::get<ctl::ConnectReply>(cr.body).local_port;
  NodeId ca = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(resume(ca, a, a_ch)));
  ctl::Resync rs;
  rs.listeners = {ctl::ListenerEntry{ctl::Proto::tcp, 80, false, 0},   // c's now
                  ctl::ListenerEntry{ctl::Proto::tcp, 81, false, 0},
                  ctl::ListenerEntry{ctl::Proto::tcp, 82, false, 3}};  // a has one queue
  rs.flows = {ctl::FlowEntry{ctl::Proto::tcp, taken, peer, 8, 0, false},     // c's port
              ctl::FlowEntry{ctl::Proto::tcp, 80, peer, 40000, 0, true},     // on c's listener
              ctl::FlowEntry{ctl::Proto::tcp, 81, peer, 40001, 0, true},     // fine
              ctl::FlowEntry{ctl::Proto::tcp, taken, peer, 7, 0, false},     // c's very flow
              ctl::FlowEntry{ctl::Proto::tcp, 60000, peer, 7, 0, false}};    // fine
  Message r = ask(ca, rs);
  ASSERT_EQ(code(r), ErrorCode::port_in_use);
  const std::string& text = std::get<ctl::Error>(r.body).text;
  EXPECT_EQ(text.rfind("listener 0: ", 0), 0u) << text;
  EXPECT_NE(text.find("(and 4 more refused)"), std::string::npos) << text;
  // The rest is a's.
  EXPECT_EQ(filter->listener_for(FlowKey{Proto::tcp, peer, 1, 81})->node, a);
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 40001, 81})->node, a);
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 7, 60000})->node, a);
  // c keeps all it had.
  EXPECT_EQ(filter->listener_for(FlowKey{Proto::tcp, peer, 1, 80})->node, c);
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 7, taken})->node, c);
  EXPECT_FALSE(filter->find_flow(FlowKey{Proto::tcp, peer, 40000, 80}).has_value());
  EXPECT_FALSE(filter->find_flow(FlowKey{Proto::tcp, peer, 8, taken}).has_value());
  EXPECT_FALSE(filter->listener_for(FlowKey{Proto::tcp, peer, 1, 82}).has_value());
}

TEST_F(RegistryTest, StatsCarryTheCountersAndByeLeaves) {
  NodeId a = hello("a");
  Message s = ask(a, ctl::Stats{});
  ASSERT_TRUE(std::holds_alternative<ctl::StatsReply>(s.body));
  bool found = false;
  for (const ctl::Counter& c : std::get<ctl::StatsReply>(s.body).counters) found = found || c.name == "registry.hellos";
  EXPECT_TRUE(found);
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(a, ctl::Bye{}).body));
  EXPECT_EQ(a, 0);
  EXPECT_EQ(reg->node_count(), 0u);
  EXPECT_EQ(code(ask(a, ctl::Listen{ctl::Proto::tcp, 80})), ErrorCode::not_registered);
}

// ---- administration (protocol version 2) ------------------------------------------

TEST_F(RegistryTest, HelloNegotiatesTheHighestCommonVersion) {
  NodeId n = 0;
  Message r = ask(n, ctl::Hello{"v1", 100, 1, 1, 1});
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(r.body));
  EXPECT_EQ(std::get<ctl::HelloReply>(r.body).version, 1);
  n = 0;
  r = ask(n, ctl::Hello{"v1-9", 100, 1, 1, 9});
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(r.body));
  EXPECT_EQ(std::get<ctl::HelloReply>(r.body).version, ctl::kProtocolVersion);
}

TEST_F(RegistryTest, AnAdminConnectionListsNodesPortsFlowsAndRules) {
  NodeId a = hello("alpha", 2), b = hello("beta");
  const Ipv4Addr peer{0xC0000201};
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(a, ctl::Listen{ctl::Proto::tcp, 80, false, 1}).body));
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(a, ctl::Listen{ctl::Proto::tcp, 8080, true, 0}).body));
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(b, ctl::Listen{ctl::Proto::tcp, 8080, true, 0}).body));
  Message c = ask(b, ctl::Connect{ctl::Proto::udp, peer, 53});
  ASSERT_TRUE(std::holds_alternative<ctl::ConnectReply>(c.body));
  const std::uint16_t lport = std::get<ctl::ConnectReply>(c.body).local_port;
  // An accepted connection steer learned: in the filter only.
  ASSERT_TRUE(filter->add_flow(FlowKey{Proto::tcp, peer, 40001, 80}, Target{a, 1}).ok());
  ASSERT_TRUE(std::holds_alternative<ctl::RuleAddReply>(ask(b, ctl::RuleAdd{"udp dst port 9999", 0, 3}).body));

  NodeId admin = 0;  // never says HELLO
  Message r = ask(admin, ctl::Nodes{});
  ASSERT_TRUE(std::holds_alternative<ctl::NodesReply>(r.body));
  const auto& nodes = std::get<ctl::NodesReply>(r.body);
  ASSERT_EQ(nodes.nodes.size(), 2u);
  EXPECT_TRUE(nodes.cursor.empty());
  EXPECT_EQ(nodes.nodes[0].id, a);
  EXPECT_EQ(nodes.nodes[0].name, "alpha");
  EXPECT_EQ(nodes.nodes[0].pid, 100u);
  EXPECT_EQ(nodes.nodes[0].queues, 2);
  EXPECT_EQ(nodes.nodes[0].memif_id, reg->node(a)->channels[0].memif_id);
  EXPECT_EQ(nodes.nodes[0].listeners, 2u);
  EXPECT_EQ(nodes.nodes[0].flows, 1u);
  EXPECT_EQ(nodes.nodes[0].rules, 0u);
  EXPECT_EQ(nodes.nodes[1].name, "beta");
  EXPECT_EQ(nodes.nodes[1].listeners, 1u);
  EXPECT_EQ(nodes.nodes[1].flows, 1u);
  EXPECT_EQ(nodes.nodes[1].rules, 1u);

  r = ask(admin, ctl::Ports{});
  ASSERT_TRUE(std::holds_alternative<ctl::PortsReply>(r.body));
  const std::vector<ctl::PortRecord> want = {
      {ctl::Proto::tcp, 80, false, true, a, 1},
      {ctl::Proto::tcp, 8080, true, true, a, 0},
      {ctl::Proto::tcp, 8080, true, true, b, 0},
      {ctl::Proto::udp, lport, false, false, b, 0},
  };
  EXPECT_EQ(std::get<ctl::PortsReply>(r.body).ports, want);

  r = ask(admin, ctl::Flows{.node = a, .cursor = {}, .limit = 0});
  ASSERT_TRUE(std::holds_alternative<ctl::FlowsReply>(r.body));
  const auto& fa = std::get<ctl::FlowsReply>(r.body);
  EXPECT_EQ(fa.total, 1u);
  ASSERT_EQ(fa.flows.size(), 1u);
  EXPECT_EQ(fa.flows[0], (ctl::NodeFlow{a, {ctl::Proto::tcp, 80, peer, 40001, 1}}));
  r = ask(admin, ctl::Flows{});
  EXPECT_EQ(std::get<ctl::FlowsReply>(r.body).total, 2u);
  EXPECT_EQ(code(ask(admin, ctl::Flows{.node = 99, .cursor = {}, .limit = 0})), ErrorCode::not_found);

  r = ask(admin, ctl::Rules{});
  ASSERT_TRUE(std::holds_alternative<ctl::RulesReply>(r.body));
  const auto& rules = std::get<ctl::RulesReply>(r.body).rules;
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].expression, "udp dst port 9999");
  EXPECT_EQ(rules[0].node, b);
  EXPECT_EQ(rules[0].priority, 3);
  EXPECT_EQ(rules[0].hits, 0u);
  // Nothing else an admin connection may do without HELLO.
  EXPECT_EQ(code(ask(admin, ctl::Listen{ctl::Proto::tcp, 81})), ErrorCode::not_registered);
  EXPECT_EQ(admin, 0);
}

TEST_F(RegistryTest, AdminRulesForAnyNodeAndNodesOnlyForThemselves) {
  NodeId a = hello("a", 2), b = hello("b");
  NodeId admin = 0;
  EXPECT_EQ(code(ask(admin, ctl::RuleAdd{"udp", 0, 0})), ErrorCode::bad_message);  // which node?
  EXPECT_EQ(code(ask(admin, ctl::RuleAdd{"udp", 0, 0, 77})), ErrorCode::not_found);
  EXPECT_EQ(code(ask(admin, ctl::RuleAdd{"udp", 2, 0, b})), ErrorCode::bad_message);  // b has one queue
  EXPECT_EQ(code(ask(admin, ctl::RuleAdd{"udp port", 0, 0, b})), ErrorCode::bad_rule);
  Message r = ask(admin, ctl::RuleAdd{"udp dst port 9999", 1, 7, a});
  ASSERT_TRUE(std::holds_alternative<ctl::RuleAddReply>(r.body));
  const std::uint32_t ra = std::get<ctl::RuleAddReply>(r.body).rule_id;
  // The rule steers to a's queue 1, and is a's.
  Message rules = ask(admin, ctl::Rules{});
  ASSERT_EQ(std::get<ctl::RulesReply>(rules.body).rules.size(), 1u);
  EXPECT_EQ(std::get<ctl::RulesReply>(rules.body).rules[0],
            (ctl::RuleRecord{ra, a, 1, 7, 0, "udp dst port 9999"}));
  EXPECT_EQ(reg->node(a)->rules.count(ra), 1u);
  // A node adds rules for itself only, and deletes only its own.
  EXPECT_EQ(code(ask(b, ctl::RuleAdd{"tcp", 0, 0, a})), ErrorCode::permission_denied);
  Message rb = ask(b, ctl::RuleAdd{"tcp", 0, 0, b});
  ASSERT_TRUE(std::holds_alternative<ctl::RuleAddReply>(rb.body));
  EXPECT_EQ(code(ask(b, ctl::RuleDel{ra})), ErrorCode::not_found);
  // The admin deletes any rule.
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(admin, ctl::RuleDel{ra}).body));
  EXPECT_TRUE(std::holds_alternative<ctl::Ok>(ask(admin, ctl::RuleDel{std::get<ctl::RuleAddReply>(rb.body).rule_id}).body));
  EXPECT_EQ(code(ask(admin, ctl::RuleDel{ra})), ErrorCode::not_found);
  EXPECT_EQ(filter->rule_count(), 0u);
  EXPECT_TRUE(reg->node(a)->rules.empty());
  // A rule an admin added for a node goes with the node.
  ASSERT_TRUE(std::holds_alternative<ctl::RuleAddReply>(ask(admin, ctl::RuleAdd{"udp", 0, 0, b}).body));
  reg->node_gone(b);
  EXPECT_EQ(filter->rule_count(), 0u);
}

// filterd --rules-file: an administrator's rules outlive a filterd restart.
class RulesFileTest : public RegistryTest {
 protected:
  RulesFileTest() {
    char tmpl[] = "/tmp/xk-rules-XXXXXX";
    dir = mkdtemp(tmpl);
    rules_file = dir + "/rules";
    start();
  }
  ~RulesFileTest() override {
    reg.reset();
    std::filesystem::remove_all(dir);
  }
  std::vector<std::string> lines() const {
    std::ifstream in(rules_file);
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);) {
      if (!l.empty() && l[0] != '#') out.push_back(l);
    }
    return out;
  }
  std::string dir;
};

TEST_F(RulesFileTest, RulesComeBackToTheirNodesWhenTheyResume) {
  NodeId a = hello("a", 2), b = hello("b");
  const auto a_channels = channels[a], b_channels = channels[b];
  NodeId admin = 0;
  ASSERT_TRUE(is<ctl::RuleAddReply>(ask(admin, ctl::RuleAdd{"udp dst port 9999", 1, 7, a})));
  ASSERT_TRUE(is<ctl::RuleAddReply>(ask(admin, ctl::RuleAdd{"tcp dst port 7", 0, -3, b})));
  EXPECT_EQ(lines(), (std::vector<std::string>{std::to_string(a) + "\t1\t7\ta\tudp dst port 9999",
                                               std::to_string(b) + "\t0\t-3\tb\ttcp dst port 7"}));
  // One line a rule: a tab would split it.
  EXPECT_EQ(code(ask(admin, ctl::RuleAdd{"udp\tdst port 1", 0, 0, a})), ErrorCode::bad_rule);

  reg->stopping();  // filterd stops: its nodes' connections close, the file stays
  reg->node_gone(a);
  reg->node_gone(b);
  EXPECT_EQ(lines().size(), 2u);
  start();
  EXPECT_EQ(filter->rule_count(), 0u) << "nothing until the node is back";

  NodeId ca = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(resume(ca, a, a_channels, "a")));
  ASSERT_EQ(filter->rule_count(), 1u);
  const RuleInfo ri = filter->rules().front();
  EXPECT_EQ(ri.expression, "udp dst port 9999");
  EXPECT_EQ(ri.target.node, a);
  EXPECT_EQ(ri.target.queue, 1u);
  EXPECT_EQ(ri.priority, 7);
  EXPECT_EQ(reg->node(a)->rules.size(), 1u);
  EXPECT_EQ(reg->counters().value("rules_restored"), 1u);
  // b's rule waits for b; another program resuming b's id does not get it.
  EXPECT_EQ(lines().size(), 2u);
  NodeId cb = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(resume(cb, b, b_channels, "not-b")));
  EXPECT_EQ(filter->rule_count(), 1u);
  EXPECT_EQ(reg->counters().value("rules_dropped"), 1u);
  EXPECT_EQ(lines(), (std::vector<std::string>{std::to_string(a) + "\t1\t7\ta\tudp dst port 9999"}));

  // A node that goes while filterd runs takes its rules out of the file.
  reg->node_gone(a);
  EXPECT_TRUE(lines().empty());
  EXPECT_EQ(reg->counters().value("rules_file_errors"), 0u);
}

TEST_F(RulesFileTest, ANewNodeGivenASavedIdDoesNotInheritItsRules) {
  NodeId a = hello("a");
  NodeId admin = 0;
  ASSERT_TRUE(is<ctl::RuleAddReply>(ask(admin, ctl::RuleAdd{"udp", 0, 0, a})));
  reg->stopping();
  start();
  NodeId fresh = hello("a");  // same name, but a new registration
  EXPECT_EQ(fresh, a);        // a fresh filterd hands out ids from the start
  EXPECT_EQ(filter->rule_count(), 0u);
  EXPECT_EQ(reg->counters().value("rules_dropped"), 1u);
  EXPECT_TRUE(lines().empty());
}

TEST_F(RulesFileTest, ABadRulesFileIsRefusedWithItsLine) {
  {
    std::ofstream out(rules_file);
    out << "# comment\n3\t0\t0\tn\tudp\n3\t99\t0\tn\tudp\n";
  }
  try {
    start();
    FAIL() << "a queue of 99 is not a rule";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(rules_file + ":3: bad queue '99'"), std::string::npos) << e.what();
  }
  {
    std::ofstream out(rules_file);
    out << "3\t0\tudp\n";
  }
  EXPECT_THROW(start(), std::runtime_error);
}

TEST_F(RegistryTest, FlowsArePagedInOrderWithoutGapsOrRepeats) {
  NodeId a = hello("a"), b = hello("b");
  // 2500 flows in the filter's hash table, for two nodes; every third
  // one's peer is IPv6.
  using Order = std::tuple<NodeId, std::uint16_t, IpAddr::Bytes, std::uint16_t>;
  std::set<Order> want_a;
  for (std::uint32_t i = 0; i < 2500; ++i) {
    const NodeId owner = i % 5 == 0 ? b : a;
    const auto low = static_cast<std::uint8_t>((i * 7919) % 251);
    const IpAddr remote = i % 3 == 0 ? IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, low})
                                     : IpAddr(Ipv4Addr{0xC6336400u + low});
    const FlowKey k{Proto::tcp, remote, static_cast<std::uint16_t>(1024 + i), 80};
    ASSERT_TRUE(filter->add_flow(k, Target{owner, 0}).ok());
    if (owner == a) want_a.insert({owner, k.local_port, k.remote.bytes(), k.remote_port});
  }
  NodeId admin = 0;
  std::vector<ctl::NodeFlow> got;
  ctl::Cursor cursor;
  int pages = 0;
  do {
    Message r = ask(admin, ctl::Flows{.node = a, .cursor = cursor, .limit = 300});
    ASSERT_TRUE(std::holds_alternative<ctl::FlowsReply>(r.body)) << static_cast<int>(code(r));
    const auto& page = std::get<ctl::FlowsReply>(r.body);
    EXPECT_EQ(page.total, want_a.size());
    EXPECT_LE(page.flows.size(), 300u);
    got.insert(got.end(), page.flows.begin(), page.flows.end());
    cursor = page.cursor;
    ++pages;
    ASSERT_LT(pages, 100);
  } while (!cursor.empty());
  EXPECT_EQ(pages, 7);  // 2000 flows, 300 a page
  ASSERT_EQ(got.size(), want_a.size());
  std::set<Order> seen;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].node, a);
    seen.insert({got[i].node, got[i].flow.local_port, got[i].flow.remote_addr.bytes(), got[i].flow.remote_port});
    if (i > 0) {
      const auto& p = got[i - 1].flow;
      const auto& q = got[i].flow;
      EXPECT_LT(std::tie(p.local_port, p.remote_addr.bytes(), p.remote_port),
                std::tie(q.local_port, q.remote_addr.bytes(), q.remote_port));
    }
  }
  EXPECT_EQ(seen, want_a);
  // A cursor that is not the reply's is refused; the rest goes on.
  EXPECT_EQ(code(ask(admin, ctl::Flows{.node = a, .cursor = ctl::Cursor(3), .limit = 0})), ErrorCode::bad_message);
  EXPECT_TRUE(std::holds_alternative<ctl::FlowsReply>(ask(admin, ctl::Flows{}).body));
}

TEST_F(RegistryTest, PortsAndNodesArePagedToo) {
  std::vector<NodeId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(hello(("n" + std::to_string(i)).c_str()));
  for (NodeId n : ids) {
    NodeId conn = n;
    ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(ask(conn, ctl::Listen{ctl::Proto::udp, 53, true}).body));
    ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(
        ask(conn, ctl::Listen{ctl::Proto::tcp, static_cast<std::uint16_t>(1000 + n)}).body));
  }
  NodeId admin = 0;
  // A group's members are split across pages: limit 2 of 10 records.
  std::vector<ctl::PortRecord> all;
  ctl::Cursor cursor;
  do {
    Message r = ask(admin, ctl::Ports{cursor, 2});
    ASSERT_TRUE(std::holds_alternative<ctl::PortsReply>(r.body));
    const auto& page = std::get<ctl::PortsReply>(r.body);
    EXPECT_LE(page.ports.size(), 2u);
    all.insert(all.end(), page.ports.begin(), page.ports.end());
    cursor = page.cursor;
  } while (!cursor.empty());
  ASSERT_EQ(all.size(), 10u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(all[i], (ctl::PortRecord{ctl::Proto::tcp, static_cast<std::uint16_t>(1000 + ids[i]), false, true, ids[i], 0}));
    EXPECT_EQ(all[5 + i], (ctl::PortRecord{ctl::Proto::udp, 53, true, true, ids[i], 0}));
  }
  std::vector<ctl::NodeRecord> nodes;
  cursor.clear();
  do {
    Message r = ask(admin, ctl::Nodes{cursor, 2});
    const auto& page = std::get<ctl::NodesReply>(r.body);
    nodes.insert(nodes.end(), page.nodes.begin(), page.nodes.end());
    cursor = page.cursor;
  } while (!cursor.empty());
  ASSERT_EQ(nodes.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(nodes[i].id, ids[i]);
  EXPECT_EQ(code(ask(admin, ctl::Nodes{ctl::Cursor(5), 0})), ErrorCode::bad_message);
  EXPECT_EQ(code(ask(admin, ctl::Ports{ctl::Cursor(2), 0})), ErrorCode::bad_message);
  EXPECT_EQ(code(ask(admin, ctl::Rules{ctl::Cursor(1), 0})), ErrorCode::bad_message);
}

TEST_F(RegistryTest, RulesArePagedWithinAFrame) {
  NodeId a = hello("a");
  // 100 rules of ~1000 bytes: about 60 fit in one reply.
  std::string expr = "udp dst port 1";
  while (expr.size() < 1000) expr += " or udp dst port 1";
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(std::holds_alternative<ctl::RuleAddReply>(ask(a, ctl::RuleAdd{expr, 0, static_cast<std::int16_t>(i % 3)}).body));
  }
  NodeId admin = 0;
  std::vector<ctl::RuleRecord> all;
  ctl::Cursor cursor;
  int pages = 0;
  do {
    Message r = ask(admin, ctl::Rules{cursor, 0});
    ASSERT_TRUE(std::holds_alternative<ctl::RulesReply>(r.body));
    EXPECT_TRUE(ctl::encode(r).ok());
    const auto& page = std::get<ctl::RulesReply>(r.body);
    all.insert(all.end(), page.rules.begin(), page.rules.end());
    cursor = page.cursor;
    ++pages;
  } while (!cursor.empty());
  EXPECT_EQ(pages, 2);
  ASSERT_EQ(all.size(), 100u);
  // In the order they are tried: priority 2 first.
  for (std::size_t i = 1; i < all.size(); ++i) EXPECT_GE(all[i - 1].priority, all[i].priority);
}

TEST_F(RegistryTest, EgressDenialsAndStatsAreCountedPerNodeForAdmins) {
  NodeId a = hello("a"), b = hello("b");
  const std::array<std::byte, 10> runt{};  // not even an Ethernet header
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(filter->egress_allowed(runt, b));
  NodeId admin = 0;
  Message r = ask(admin, ctl::Nodes{});
  const auto& nodes = std::get<ctl::NodesReply>(r.body).nodes;
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].id, a);
  EXPECT_EQ(nodes[0].egress_denied, 0u);
  EXPECT_EQ(nodes[1].egress_denied, 3u);
  EXPECT_EQ(nodes[1].egress_allowed, 0u);
  // STATS needs no HELLO either, and carries the filter's reasons.
  Message s = ask(admin, ctl::Stats{});
  ASSERT_TRUE(std::holds_alternative<ctl::StatsReply>(s.body));
  std::map<std::string, std::uint64_t> by_name;
  for (const ctl::Counter& c : std::get<ctl::StatsReply>(s.body).counters) by_name[c.name] = c.value;
  EXPECT_EQ(by_name["filter.egress_denied"], 3u);
  EXPECT_EQ(by_name["registry.nodes"], 2u);
  // The node leaves: its counts go with it.
  reg->node_gone(b);
  EXPECT_EQ(filter->egress_counts(b).denied, 0u);
}

// ---- a node that runs several stacks: one queue (channel) each ----------------

TEST_F(RegistryTest, ANodesQueuesJoinOneGroupAndLeaveItOneByOne) {
  NodeId a = hello("a", 3), b = hello("b", 2);
  for (std::uint16_t q = 0; q < 3; ++q) {
    ASSERT_TRUE(is<ctl::ListenReply>(ask(a, ctl::Listen{ctl::Proto::tcp, 80, true, q}))) << q;
  }
  // The same queue twice is refused; another node's queues join too.
  EXPECT_EQ(code(ask(a, ctl::Listen{ctl::Proto::tcp, 80, true, 1})), ErrorCode::port_in_use);
  EXPECT_EQ(code(ask(a, ctl::Listen{ctl::Proto::tcp, 80, true, 3})), ErrorCode::bad_message);  // no such queue
  for (std::uint16_t q = 0; q < 2; ++q) {
    ASSERT_TRUE(is<ctl::ListenReply>(ask(b, ctl::Listen{ctl::Proto::tcp, 80, true, q}))) << q;
  }
  std::optional<ListenerInfo> l = filter->listener(Proto::tcp, 80);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->members.size(), 5u);
  // A plain listener of one queue keeps the port from the node's other queues.
  ASSERT_TRUE(is<ctl::ListenReply>(ask(a, ctl::Listen{ctl::Proto::udp, 53, false, 2})));
  EXPECT_EQ(code(ask(a, ctl::Listen{ctl::Proto::udp, 53, false, 0})), ErrorCode::port_in_use);
  EXPECT_EQ(filter->listener_for(FlowKey{Proto::udp, Ipv4Addr{0xC0000201}, 9, 53})->queue, 2);
  // Every flow lands on one of the five (node, queue) members, and each
  // member gets some of 200 4-tuples.
  std::set<std::pair<NodeId, std::uint16_t>> seen;
  for (std::uint16_t p = 1; p <= 200; ++p) {
    std::optional<Target> t = filter->listener_for(FlowKey{Proto::tcp, Ipv4Addr{0xC0000201}, p, 80});
    ASSERT_TRUE(t.has_value());
    seen.insert({t->node, t->queue});
  }
  EXPECT_EQ(seen.size(), 5u);
  // UNLISTEN with a queue: that stack's membership only.
  ctl::Unlisten u{ctl::Proto::tcp, 80};
  u.queue = 1;
  ASSERT_TRUE(is<ctl::Ok>(ask(a, u)));
  EXPECT_EQ(code(ask(a, u)), ErrorCode::not_found);
  EXPECT_EQ(filter->listener(Proto::tcp, 80)->members.size(), 4u);
  // A node that goes takes its remaining queues with it; b's stay.
  reg->node_gone(a);
  l = filter->listener(Proto::tcp, 80);
  ASSERT_TRUE(l.has_value());
  ASSERT_EQ(l->members.size(), 2u);
  for (const Target& t : l->members) EXPECT_EQ(t.node, b);
  // UNLISTEN without a queue: every queue of the node; the port is free.
  ASSERT_TRUE(is<ctl::Ok>(ask(b, ctl::Unlisten{ctl::Proto::tcp, 80})));
  EXPECT_FALSE(filter->listener(Proto::tcp, 80).has_value());
  NodeId c = hello("c");
  EXPECT_TRUE(is<ctl::ListenReply>(ask(c, ctl::Listen{ctl::Proto::tcp, 80, false, 0})));
}

TEST_F(RegistryTest, ConnectsOfEachQueueSteerToThatQueue) {
  NodeId a = hello("a", 2);
  const Ipv4Addr peer{0xC0000201};
  auto r0 = ask(a, ctl::Connect{ctl::Proto::tcp, peer, 7, 0});
  auto r1 = ask(a, ctl::Connect{ctl::Proto::tcp, peer, 7, 1});
  ASSERT_TRUE(is<ctl::ConnectReply>(r0));
  ASSERT_TRUE(is<ctl::ConnectReply>(r1));
  const std::uint16_t p0 = std::get<ctl::ConnectReply>(r0.body).local_port;
  const std::uint16_t p1 = std::get<ctl::ConnectReply>(r1.body).local_port;
  EXPECT_NE(p0, p1);
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 7, p0})->queue, 0);
  EXPECT_EQ(filter->find_flow(FlowKey{Proto::tcp, peer, 7, p1})->queue, 1);
  EXPECT_EQ(code(ask(a, ctl::Connect{ctl::Proto::tcp, peer, 7, 2})), ErrorCode::bad_message);
}

TEST_F(RegistryTest, ANodeWithSeveralQueuesResumesWithAllItsChannelsAndResyncsEachQueue) {
  NodeId a = hello("a", 3);
  const auto a_ch = channels[a];
  ASSERT_EQ(a_ch.size(), 3u);
  const Ipv4Addr peer{0xC0000201};
  start();  // filterd restarted
  NodeId ca = 0;
  Message r = resume(ca, a, a_ch);
  ASSERT_TRUE(is<ctl::HelloReply>(r));
  EXPECT_EQ(std::get<ctl::HelloReply>(r.body).channels, a_ch);
  ASSERT_EQ(attached.back(), a);
  EXPECT_EQ(reg->node(a)->channels.size(), 3u);
  // Each stack's listener in the group, each one's connections on its queue.
  ctl::Resync rs;
  for (std::uint16_t q = 0; q < 3; ++q) rs.listeners.push_back(ctl::ListenerEntry{ctl::Proto::tcp, 5001, true, q});
  rs.flows = {ctl::FlowEntry{ctl::Proto::tcp, 5001, peer, 40000, 2, true},
              ctl::FlowEntry{ctl::Proto::tcp, 50001, peer, 7001, 1, false},
              ctl::FlowEntry{ctl::Proto::tcp, 50002, peer, 7001, 0, false}};
  ASSERT_TRUE(is<ctl::Ok>(ask(ca, rs)));
  EXPECT_EQ(filter->listener(Proto::tcp, 5001)->members.size(), 3u);
  EXPECT_EQ((filter->find_flow(FlowKey{Proto::tcp, peer, 40000, 5001})), (Target{a, 2}));
  EXPECT_EQ((filter->find_flow(FlowKey{Proto::tcp, peer, 7001, 50001})), (Target{a, 1}));
  EXPECT_EQ((filter->find_flow(FlowKey{Proto::tcp, peer, 7001, 50002})), (Target{a, 0}));
  // Declared again: nothing changes, no error. A queue the node does not
  // have is refused.
  EXPECT_TRUE(is<ctl::Ok>(ask(ca, rs)));
  ctl::Resync bad;
  bad.listeners = {ctl::ListenerEntry{ctl::Proto::tcp, 5002, true, 3}};
  EXPECT_EQ(code(ask(ca, bad)), ErrorCode::port_in_use);
  // A resume asking for another number of channels than it had is the
  // node's business; one whose channels another node holds is refused.
  NodeId other = 0;
  EXPECT_EQ(code(resume(other, 9, {a_ch[1]})), ErrorCode::port_in_use);
}

}  // namespace
}  // namespace xk::filterd

namespace xk::filterd {
namespace {

const MacAddr kPortMac{{0x02, 0x78, 0x6b, 0, 0, 0x99}};
const MacAddr kRemote{{0x02, 0, 0, 0, 0x0c, 0x01}};

// Nodes on other hosts: on the node port, known by their MAC.
class RemoteRegistryTest : public RegistryTest {
 protected:
  RemoteRegistryTest() {
    node_port_mac = kPortMac;
    start();
  }
  Message ether_hello(NodeId& n, MacAddr mac, std::uint16_t queues = 1) {
    ctl::Hello h{"remote", 100, queues};
    h.ethernet = mac;
    return ask(n, h);
  }
};

TEST_F(RemoteRegistryTest, AnEthernetNodeGetsItsOwnMacAsChannelAndFilterdsNodePortMac) {
  NodeId n = 0;
  Message r = ether_hello(n, kRemote);
  const auto* h = std::get_if<ctl::HelloReply>(&r.body);
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->channels.size(), 1u);
  EXPECT_EQ(h->channels[0].memif_id, 0u);
  EXPECT_EQ(h->channels[0].node_mac, kRemote);
  EXPECT_EQ(h->filterd_mac, kPortMac);  // its next hop is the node port
  ASSERT_NE(reg->node(n), nullptr);
  EXPECT_TRUE(reg->node(n)->ethernet);
  // A second Ethernet node (memif id 0 too) and a memif node live beside it.
  NodeId n2 = 0, m = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(ether_hello(n2, MacAddr{{0x02, 0, 0, 0, 0x0c, 0x02}})));
  Message mr = ask(m, ctl::Hello{"local", 100, 1});
  ASSERT_TRUE(is<ctl::HelloReply>(mr));
  EXPECT_NE(std::get<ctl::HelloReply>(mr.body).channels[0].memif_id, 0u);
  EXPECT_EQ(std::get<ctl::HelloReply>(mr.body).filterd_mac, RegistryConfig{}.filterd_mac);
  // xkctl nodes shows who is where.
  NodeId admin = 0;
  Message list = ask(admin, ctl::Nodes{});
  const auto& nodes = std::get<ctl::NodesReply>(list.body).nodes;
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_TRUE(nodes[0].ethernet);
  EXPECT_EQ(nodes[0].mac, kRemote);
  EXPECT_FALSE(nodes[2].ethernet);
  EXPECT_EQ(nodes[2].mac, MacAddr{});
  // The listing round-trips through the codec.
  Result<std::vector<std::byte>> bytes = ctl::encode(list);
  ASSERT_TRUE(bytes.ok());
  ctl::FrameReader rd;
  rd.feed(*bytes);
  ctl::ReadResult back = rd.next();
  ASSERT_TRUE(back.has_message());
  EXPECT_EQ(back.message(), list);
}

TEST_F(RemoteRegistryTest, BadEthernetHellosAreRefused) {
  NodeId n = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(ether_hello(n, kRemote)));
  NodeId a = 0, b = 0, c = 0, d = 0;
  EXPECT_EQ(code(ether_hello(a, kRemote)), ErrorCode::port_in_use);  // another node's MAC
  EXPECT_EQ(code(ether_hello(b, MacAddr{{0x03, 0, 0, 0, 0, 1}})), ErrorCode::bad_message);  // multicast
  EXPECT_EQ(code(ether_hello(c, kPortMac)), ErrorCode::port_in_use);  // filterd's own
  EXPECT_EQ(code(ether_hello(d, MacAddr{{0x02, 0, 0, 0, 0x0c, 0x05}}, 2)), ErrorCode::bad_message);  // one queue
  EXPECT_EQ(a + b + c + d, 0);
  // Without a node port there is nowhere to reach it.
  node_port_mac.reset();
  start();
  NodeId e = 0;
  EXPECT_EQ(code(ether_hello(e, kRemote)), ErrorCode::bad_message);
}

TEST_F(RemoteRegistryTest, FilterdPicksAMacWhenTheNodeLeavesItOpen) {
  NodeId n = 0;
  Message r = ether_hello(n, MacAddr{});
  ASSERT_TRUE(is<ctl::HelloReply>(r));
  const MacAddr picked = std::get<ctl::HelloReply>(r.body).channels[0].node_mac;
  EXPECT_NE(picked, MacAddr{});
  EXPECT_EQ(picked.bytes[0] & 0x03, 0x02);  // locally administered, unicast
  // A node that wants that MAC now cannot have it.
  NodeId m = 0;
  EXPECT_EQ(code(ether_hello(m, picked)), ErrorCode::port_in_use);
}

TEST_F(RemoteRegistryTest, AnEthernetNodeResumesWithItsMacAndNodeGoneForgetsIt) {
  NodeId n = 0;
  ASSERT_TRUE(is<ctl::HelloReply>(ether_hello(n, kRemote)));
  const NodeId id = n;
  ASSERT_TRUE(is<ctl::ListenReply>(ask(n, ctl::Listen{ctl::Proto::tcp, 5001, false, 0})));
  // Its control connection closes: ports and channel go.
  reg->node_gone(id);
  EXPECT_EQ(detached, std::vector<NodeId>{id});
  EXPECT_FALSE(filter->listener(Proto::tcp, 5001).has_value());
  // A filterd restart: it comes back with the same id and MAC.
  start();
  NodeId again = 0;
  ctl::Hello h{"remote", 100, 1};
  h.ethernet = kRemote;
  h.resume = ctl::Resume{id, {ctl::Channel{0, kRemote}}};
  Message r = ask(again, h);
  ASSERT_TRUE(is<ctl::HelloReply>(r));
  EXPECT_EQ(again, id);
  EXPECT_EQ(std::get<ctl::HelloReply>(r.body).channels[0].node_mac, kRemote);
  // A resume whose channel is not its ethernet MAC is nonsense.
  start();
  NodeId other = 0;
  h.resume = ctl::Resume{id, {ctl::Channel{0, MacAddr{{0x02, 0, 0, 0, 0x0c, 0x09}}}}};
  EXPECT_EQ(code(ask(other, h)), ErrorCode::bad_message);
}

}  // namespace
}  // namespace xk::filterd

// filterd's control plane: what each request does to the nodes, the
// host-wide ports and the filter (xk/filterd/registry.hpp).

#include <gtest/gtest.h>

#include "xk/clock.hpp"
#include "xk/filterd/registry.hpp"

namespace xk::filterd {
namespace {

using ctl::ErrorCode;
using ctl::Message;

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() {
    FilterConfig f;
    f.shared_ip = Ipv4Addr{0xC000020A};
    filter = std::make_unique<FilterEngine>(f, clock);
    RegistryConfig c;
    c.shared = Ipv4Cidr{Ipv4Addr{0xC000020A}, 24};
    c.ephemeral_min = 50000;
    c.ephemeral_max = 50003;  // four ports: exhaustion is reachable
    reg = std::make_unique<NodeRegistry>(
        c, *filter,
        NodeRegistry::Hooks{[this](const NodeInfo& n) {
                              attached.push_back(n.id);
                              return fail_attach ? Status(Errc::no_memory) : Status();
                            },
                            [this](NodeId n) { detached.push_back(n); }});
  }

  Message ask(NodeId& node, ctl::Body body, std::uint32_t pid = 0) {
    return reg->handle(Message{++seq, std::move(body)}, node, pid);
  }
  NodeId hello(const char* name, std::uint16_t queues = 1) {
    NodeId n = 0;
    Message r = ask(n, ctl::Hello{name, 100, queues});
    EXPECT_TRUE(std::holds_alternative<ctl::HelloReply>(r.body));
    return n;
  }
  static ErrorCode code(const Message& m) {
    const auto* e = std::get_if<ctl::Error>(&m.body);
    return e == nullptr ? ErrorCode{} : e->code;
  }

  ManualClock clock;
  std::unique_ptr<FilterEngine> filter;
  std::unique_ptr<NodeRegistry> reg;
  std::vector<NodeId> attached, detached;
  bool fail_attach = false;
  std::uint32_t seq = 0;
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
  EXPECT_EQ(code(ask(n, ctl::Hello{"old", 100, 1, 2, 3})), ErrorCode::unsupported_version);
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

TEST_F(RegistryTest, TheEphemeralRangeRunsOut) {
  NodeId a = hello("a");
  const Ipv4Addr peer{0xC0000201};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(std::holds_alternative<ctl::ConnectReply>(ask(a, ctl::Connect{ctl::Proto::tcp, peer, 7}).body)) << i;
  }
  EXPECT_EQ(code(ask(a, ctl::Connect{ctl::Proto::tcp, peer, 7})), ErrorCode::no_ports);
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
  EXPECT_EQ(code(ask(a, ctl::Stats{})), ErrorCode::not_registered);
}

}  // namespace
}  // namespace xk::filterd

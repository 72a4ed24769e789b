// filterd's filter engine: real Ethernet frames, built here with the
// protocols' wire headers, classified and checked for egress. Time is a
// ManualClock, so fragment timeouts run without waiting.
#include "xk/filterd/filter.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "filter_frames.hpp"
#include "xk/protocols/arp_wire.hpp"
#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/icmp_wire.hpp"
#include "xk/protocols/ipv4_wire.hpp"
#include "xk/protocols/tcp_wire.hpp"
#include "xk/protocols/udp_wire.hpp"

namespace xk::filterd {
namespace {

using namespace std::chrono_literals;
using namespace frames;

constexpr Ipv4Addr kShared{0xC000020A};   // 192.0.2.10
constexpr Ipv4Addr kRemote{0xC6336407};   // 198.51.100.7
constexpr Ipv4Addr kRemote2{0xC6336408};  // 198.51.100.8
constexpr Ipv4Addr kRouter{0xCB007101};   // 203.0.113.1
constexpr Ipv4Addr kOther{0xC0000263};    // 192.0.2.99

constexpr Target kNode1{1, 0};
constexpr Target kNode2{2, 0};
constexpr Target kNode3{3, 1};

HashKey fixed_key() {
  HashKey k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::byte>(0x40 + i);
  return k;
}

FilterConfig config() {
  FilterConfig c;
  c.shared_ip = kShared;
  c.shared_mac = kSharedMac;
  c.group_key = fixed_key();
  return c;
}

// ---- Frame builders ----

struct Ip {
  Ipv4Addr src = kRemote;
  Ipv4Addr dst = kShared;
  std::uint8_t proto = ipv4::kProtoTcp;
  std::uint16_t id = 7;
  std::uint16_t flags_offset = 0;
  MacAddr mac = kSharedMac;
};

Bytes ip_packet(const Ip& ip, std::span<const std::byte> l4) {
  Bytes pkt(ipv4::Header::kMinSize + l4.size());
  ipv4::Header h;
  h.total_length = static_cast<std::uint16_t>(pkt.size());
  h.id = ip.id;
  h.flags_offset = ip.flags_offset;
  h.ttl = 64;
  h.protocol = ip.proto;
  h.src = ip.src;
  h.dst = ip.dst;
  h.write(std::span<std::byte, ipv4::Header::kMinSize>(pkt.data(), ipv4::Header::kMinSize));
  ipv4::fill_header_checksum(std::span(pkt.data(), ipv4::Header::kMinSize));
  if (!l4.empty()) std::memcpy(pkt.data() + ipv4::Header::kMinSize, l4.data(), l4.size());
  return pkt;
}

Bytes ip_frame(const Ip& ip, std::span<const std::byte> l4) {
  return eth_frame(ip.mac, eth::kTypeIpv4, ip_packet(ip, l4));
}

Bytes tcp_frame(Ipv4Addr src, std::uint16_t sport, std::uint16_t dport, std::uint8_t flags = tcp::kAck,
                std::size_t payload = 0) {
  return ip_frame(Ip{src, kShared, ipv4::kProtoTcp}, tcp_segment(sport, dport, flags, payload));
}

Bytes udp_frame(Ipv4Addr src, std::uint16_t sport, std::uint16_t dport, std::size_t payload = 8) {
  return ip_frame(Ip{src, kShared, ipv4::kProtoUdp}, udp_datagram(sport, dport, payload));
}

Bytes arp_frame(std::uint16_t op, Ipv4Addr spa, Ipv4Addr tpa, MacAddr dst = eth::kBroadcast) {
  Bytes a(arp::Packet::kSize);
  arp::Packet p;
  p.op = op;
  p.sha = kPeerMac;
  p.spa = spa;
  p.tpa = tpa;
  p.write(std::span<std::byte, arp::Packet::kSize>(a.data(), arp::Packet::kSize));
  return eth_frame(dst, eth::kTypeArp, a);
}

// An ICMP error from a router about a datagram the shared address sent.
Bytes icmp_error_frame(std::uint8_t type, std::uint8_t code, const Ip& quoted_ip, std::span<const std::byte> quoted_l4) {
  Bytes quoted = ip_packet(quoted_ip, quoted_l4);
  quoted.resize(std::min<std::size_t>(quoted.size(), ipv4::Header::kMinSize + 8));  // header + 64 bits (RFC 792)
  return ip_frame(Ip{kRouter, kShared, ipv4::kProtoIcmp}, icmp_message(type, code, 0, quoted));
}

// One fragment of `l4` (RFC 791): bytes [off, off + len), MF when `more`.
Bytes fragment(Ip ip, const Bytes& l4, std::size_t off, std::size_t len, bool more) {
  ip.flags_offset = static_cast<std::uint16_t>((off / 8) | (more ? ipv4::Header::kFlagMf : 0));
  return ip_frame(ip, std::span(l4).subspan(off, len));
}

constexpr Decision to_node(Reason r, Target t) { return Decision{Action::to_node, r, t}; }
constexpr Decision dropped(Reason r) { return Decision{Action::drop, r, {}}; }

std::uint64_t counter(const FilterEngine& e, const char* name) { return e.counters().value(name); }

class FilterTest : public ::testing::Test {
 protected:
  ManualClock clock{Time{} + 1000s};
  FilterEngine engine{config(), clock};

  Decision classify(const Bytes& f) { return engine.classify(f); }
};

// ---- The keyed hash ----

TEST(FilterHash, SipHashMatchesReferenceVectors) {
  std::ifstream in(std::string(XK_GOLDEN_DIR) + "/siphash_vectors.txt");
  ASSERT_TRUE(in.good());
  HashKey key{};
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::byte>(i);
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::size_t n = 0;
    std::string hex;
    ls >> n >> hex;
    Bytes msg(n);
    for (std::size_t i = 0; i < n; ++i) msg[i] = static_cast<std::byte>(i);
    EXPECT_EQ(siphash24(key, msg), std::stoull(hex, nullptr, 16)) << "length " << n;
    ++checked;
  }
  EXPECT_GE(checked, 16);
}

// ---- Exact flows ----

TEST_F(FilterTest, ExactHitAndMiss) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}, kNode3).ok());
  EXPECT_EQ(engine.add_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}, kNode1).error(), Errc::exists);
  EXPECT_EQ(engine.flow_count(), 1u);
  EXPECT_EQ(engine.find_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}), kNode3);

  EXPECT_EQ(classify(tcp_frame(kRemote, 40000, 80)), to_node(Reason::exact_hit, kNode3));
  // Any other element of the key is another flow.
  EXPECT_EQ(classify(tcp_frame(kRemote, 40001, 80)).action, Action::reset);
  EXPECT_EQ(classify(tcp_frame(kRemote2, 40000, 80)).action, Action::reset);
  EXPECT_EQ(classify(tcp_frame(kRemote, 40000, 81)).action, Action::reset);
  EXPECT_EQ(classify(udp_frame(kRemote, 40000, 80)).action, Action::port_unreachable);

  ASSERT_TRUE(engine.remove_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}).ok());
  EXPECT_EQ(engine.remove_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}).error(), Errc::not_found);
  EXPECT_EQ(classify(tcp_frame(kRemote, 40000, 80)).action, Action::reset);
  EXPECT_EQ(counter(engine, "exact_hit"), 1u);
  EXPECT_EQ(counter(engine, "default_rst"), 4u);
  EXPECT_EQ(counter(engine, "default_unreachable"), 1u);
}

TEST_F(FilterTest, UdpAndIcmpEchoFlows) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::udp, kRemote, 53, 33000}, kNode2).ok());
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::icmp, kRemote, 0, 0x1234}, kNode1).ok());
  EXPECT_EQ(engine.add_flow(FlowKey{Proto::icmp, kRemote, 5, 0x1234}, kNode1).error(), Errc::invalid_argument);
  EXPECT_EQ(classify(udp_frame(kRemote, 53, 33000)), to_node(Reason::exact_hit, kNode2));
  // An echo reply's identifier names the node's ping.
  Bytes reply = ip_frame(Ip{kRemote, kShared, ipv4::kProtoIcmp}, icmp_message(icmp::kEchoReply, 0, 0x12340001));
  EXPECT_EQ(classify(reply), to_node(Reason::exact_hit, kNode1));
  Bytes stray = ip_frame(Ip{kRemote, kShared, ipv4::kProtoIcmp}, icmp_message(icmp::kEchoReply, 0, 0x99990001));
  EXPECT_EQ(classify(stray), dropped(Reason::no_owner));
}

TEST_F(FilterTest, BulkClassifyAgreesWithOneByOne) {
  ManualClock clock2{Time{} + 1000s};
  FilterEngine single{config(), clock2};
  std::mt19937 rng(3);
  for (FilterEngine* e : {&engine, &single}) {
    for (std::uint16_t i = 0; i < 200; ++i) ASSERT_TRUE(e->add_flow(FlowKey{Proto::tcp, kRemote, i, 80}, Target{static_cast<NodeId>(i % 7), i}).ok());
    ASSERT_TRUE(e->listen(Proto::udp, 5000, kNode2).ok());
    ASSERT_TRUE(e->add_rule("udp dst port 7000", kNode3).ok());
  }
  std::vector<Bytes> frames;
  for (int i = 0; i < 100; ++i) {
    switch (rng() % 6) {
      case 0: frames.push_back(tcp_frame(kRemote, static_cast<std::uint16_t>(rng() % 300), 80)); break;
      case 1: frames.push_back(udp_frame(kRemote, 1, 5000)); break;
      case 2: frames.push_back(udp_frame(kRemote, 1, 7000)); break;
      case 3: frames.push_back(arp_frame(arp::kOpRequest, kRemote, kShared)); break;
      case 4: frames.push_back(tcp_frame(kOther, 1, 80)); break;
      default: frames.push_back(Bytes(rng() % 80, std::byte{0x45})); break;
    }
  }
  std::vector<Frame> views(frames.begin(), frames.end());
  std::vector<Decision> out(views.size());
  engine.classify(views, out);
  for (std::size_t i = 0; i < views.size(); ++i) EXPECT_EQ(out[i], single.classify(views[i])) << "frame " << i;
  // Each frame is counted once, under one reason.
  std::uint64_t total = 0;
  for (std::size_t r = 0; r < kReasonCount; ++r) total += engine.count(static_cast<Reason>(r));
  EXPECT_EQ(total, views.size());
}

// ---- Listeners ----

TEST_F(FilterTest, SingleListenerTakesNewConnectionsAndStraySegments) {
  ASSERT_TRUE(engine.listen(Proto::tcp, 80, kNode1).ok());
  ASSERT_TRUE(engine.listen(Proto::udp, 80, kNode2).ok());
  EXPECT_EQ(classify(tcp_frame(kRemote, 41000, 80, tcp::kSyn)), to_node(Reason::listen_hit, kNode1));
  // A segment of no known connection goes to the listener's node, whose TCP
  // answers it (RST, or a SYN cookie's ACK).
  EXPECT_EQ(classify(tcp_frame(kRemote2, 41001, 80, tcp::kAck)), to_node(Reason::listen_hit, kNode1));
  EXPECT_EQ(classify(udp_frame(kRemote, 41000, 80)), to_node(Reason::listen_hit, kNode2));
  // An exact flow comes first.
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 41000, 80}, kNode3).ok());
  EXPECT_EQ(classify(tcp_frame(kRemote, 41000, 80)), to_node(Reason::exact_hit, kNode3));

  EXPECT_EQ(engine.listen(Proto::tcp, 80, kNode2).error(), Errc::exists);
  EXPECT_EQ(engine.join_group(Proto::tcp, 80, kNode2).error(), Errc::exists);
  EXPECT_EQ(engine.listen(Proto::icmp, 80, kNode2).error(), Errc::invalid_argument);
  EXPECT_EQ(engine.leave_group(Proto::tcp, 80, kNode1).error(), Errc::not_found);
  ASSERT_TRUE(engine.unlisten(Proto::tcp, 80).ok());
  EXPECT_EQ(engine.unlisten(Proto::tcp, 80).error(), Errc::not_found);
  EXPECT_EQ(classify(tcp_frame(kRemote2, 41001, 80, tcp::kSyn)).action, Action::reset);
  EXPECT_EQ(counter(engine, "listen_hit"), 3u);
}

// A leased port steers like a single listener, under a reason of its own
// (steer lets it through while a restarted filterd keeps quiet).
TEST_F(FilterTest, ALeasedPortGoesToItsNodeAsALeaseHit) {
  ASSERT_TRUE(engine.lease(Proto::tcp, 50001, kNode2).ok());
  EXPECT_EQ(engine.lease(Proto::tcp, 50001, kNode1).error(), Errc::exists);
  EXPECT_EQ(engine.listen(Proto::tcp, 50001, kNode1).error(), Errc::exists);
  EXPECT_EQ(engine.join_group(Proto::tcp, 50001, kNode1).error(), Errc::exists);
  EXPECT_EQ(classify(tcp_frame(kRemote, 80, 50001, tcp::kSyn | tcp::kAck)), to_node(Reason::lease_hit, kNode2));
  EXPECT_EQ(classify(tcp_frame(kRemote2, 443, 50001, tcp::kAck)), to_node(Reason::lease_hit, kNode2));
  EXPECT_EQ(engine.counters().value("lease_hit"), 2u);
  EXPECT_EQ(engine.counters().value("listen_hit"), 0u);
  EXPECT_EQ(engine.lease(Proto::icmp, 7, kNode2).error(), Errc::invalid_argument);
  ASSERT_TRUE(engine.unlisten(Proto::tcp, 50001).ok());
  EXPECT_EQ(classify(tcp_frame(kRemote, 80, 50001, tcp::kAck)).reason, Reason::default_rst);
}

// The flow table takes peers of either family; an IPv6 flow and an IPv4
// one with the same ports are different flows. (Frames are parsed as IPv4
// only: IPv6 steering comes with the IPv6 parser.)
TEST_F(FilterTest, FlowsOfBothFamiliesAreKeptApart) {
  const IpAddr v6 = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9});
  const FlowKey k6{Proto::tcp, v6, 40000, 80};
  const FlowKey k4{Proto::tcp, kRemote, 40000, 80};
  ASSERT_TRUE(engine.add_flow(k6, kNode2).ok());
  EXPECT_EQ(engine.add_flow(k6, kNode1).error(), Errc::exists);
  EXPECT_FALSE(engine.find_flow(k4).has_value());
  ASSERT_TRUE(engine.add_flow(k4, kNode1).ok());
  EXPECT_EQ(engine.find_flow(k6), kNode2);
  EXPECT_EQ(engine.find_flow(k4), kNode1);
  EXPECT_EQ(engine.flow_count(), 2u);
  std::vector<FlowKey> seen;
  engine.for_each_flow([&](const FlowKey& k, Target) { seen.push_back(k); });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(std::find(seen.begin(), seen.end(), k6) != seen.end());
  EXPECT_TRUE(std::find(seen.begin(), seen.end(), k4) != seen.end());
  // A group spreads IPv6 peers too, the same one to the same member.
  for (Target m : {Target{1, 0}, Target{2, 0}, Target{3, 0}}) ASSERT_TRUE(engine.join_group(Proto::tcp, 443, m).ok());
  std::map<NodeId, int> per_member;
  for (std::uint8_t i = 0; i < 48; ++i) {
    const FlowKey k{Proto::tcp, IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, i}), 50000, 443};
    const std::optional<Target> t = engine.listener_for(k);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(engine.listener_for(k), t);
    ++per_member[t->node];
  }
  EXPECT_EQ(per_member.size(), 3u);
  // A node's flows go with it, of both families.
  engine.remove_node(kNode2.node);
  EXPECT_FALSE(engine.find_flow(k6).has_value());
  EXPECT_TRUE(engine.remove_flow(k4).ok());
  EXPECT_EQ(engine.remove_flow(k6).error(), Errc::not_found);
  EXPECT_EQ(engine.flow_count(), 0u);
}

TEST_F(FilterTest, GroupSpreadsStablyAndMovesOnlyTheLeaversFlows) {
  const Target members[] = {{1, 0}, {2, 0}, {3, 0}, {4, 0}};
  for (Target m : members) ASSERT_TRUE(engine.join_group(Proto::tcp, 443, m).ok());
  EXPECT_EQ(engine.join_group(Proto::tcp, 443, members[0]).error(), Errc::exists);
  EXPECT_EQ(engine.listen(Proto::tcp, 443, kNode1).error(), Errc::exists);

  auto syn = [](int i) {
    return tcp_frame(Ipv4Addr{kRemote.value + static_cast<std::uint32_t>(i % 5)},
                     static_cast<std::uint16_t>(50000 + i * 7), 443, tcp::kSyn);
  };
  std::vector<Target> first;
  std::map<NodeId, int> per_member;
  for (int i = 0; i < 64; ++i) {
    Decision d = classify(syn(i));
    ASSERT_EQ(d.action, Action::to_node);
    EXPECT_EQ(d.reason, Reason::group_hit);
    first.push_back(d.target);
    ++per_member[d.target.node];
  }
  EXPECT_EQ(per_member.size(), 4u) << "every member gets some of 64 flows";
  for (auto [node, n] : per_member) EXPECT_GT(n, 0) << "node " << node;
  for (int i = 0; i < 64; ++i) EXPECT_EQ(classify(syn(i)).target, first[i]) << "stable on repeat";

  // Member 2 leaves: its flows move, nobody else's do.
  ASSERT_TRUE(engine.leave_group(Proto::tcp, 443, members[1]).ok());
  int moved = 0;
  for (int i = 0; i < 64; ++i) {
    Target now = classify(syn(i)).target;
    if (first[i] == members[1]) {
      EXPECT_NE(now, members[1]);
      ++moved;
    } else {
      EXPECT_EQ(now, first[i]) << "flow " << i << " moved though its member stayed";
    }
  }
  EXPECT_EQ(moved, per_member[2]);
  // It comes back: everything is where it was.
  ASSERT_TRUE(engine.join_group(Proto::tcp, 443, members[1]).ok());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(classify(syn(i)).target, first[i]);

  // The same key chooses the same members in another engine (a restarted filterd).
  ManualClock clock2;
  FilterEngine again{config(), clock2};
  for (Target m : members) ASSERT_TRUE(again.join_group(Proto::tcp, 443, m).ok());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(again.classify(syn(i)).target, first[i]);

  // listener_for tells a flow's member without a frame.
  EXPECT_EQ(engine.listener_for(FlowKey{Proto::tcp, kRemote, 50000, 443}), first[0]);
  for (Target m : members) ASSERT_TRUE(engine.leave_group(Proto::tcp, 443, m).ok());
  EXPECT_EQ(engine.listener_count(), 0u);
}

// ---- User rules ----

TEST_F(FilterTest, PcapRuleSteersUdpPort9999ToNode2) {
  RuleResult r = engine.add_rule("udp dst port 9999", kNode2);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(engine.rule_count(), 1u);
  EXPECT_EQ(classify(udp_frame(kRemote, 1234, 9999)), to_node(Reason::rule_hit, kNode2));
  EXPECT_EQ(classify(udp_frame(kRemote, 1234, 9998)).action, Action::port_unreachable);
  EXPECT_EQ(classify(tcp_frame(kRemote, 1234, 9999)).action, Action::reset);
  // Rules come after the exact and listen tables.
  ASSERT_TRUE(engine.listen(Proto::udp, 9999, kNode1).ok());
  EXPECT_EQ(classify(udp_frame(kRemote, 1234, 9999)), to_node(Reason::listen_hit, kNode1));
  ASSERT_TRUE(engine.remove_rule(r.id).ok());
  EXPECT_EQ(engine.remove_rule(r.id).error(), Errc::not_found);
  EXPECT_EQ(counter(engine, "rule_hit"), 1u);
}

TEST_F(FilterTest, BadPcapExpressionReportsLibpcapsError) {
  RuleResult r = engine.add_rule("udp dst port 9999 and", kNode2);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("syntax error"), std::string::npos) << r.error;
  r = engine.add_rule("tcp port 99999", kNode2);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.error.empty());
  EXPECT_EQ(engine.rule_count(), 0u);
}

// libpcap takes a C string: "udp\0 and port 1" would compile as "udp" and
// steer every UDP datagram while the rule is listed as something narrower.
TEST_F(FilterTest, ExpressionWithANulByteIsRefused) {
  using namespace std::string_view_literals;
  RuleResult r = engine.add_rule("udp\0 and dst port 9999"sv, kNode2);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("NUL"), std::string::npos) << r.error;
  EXPECT_EQ(engine.rule_count(), 0u);
  EXPECT_EQ(classify(udp_frame(kRemote, 5000, 7000)).action, Action::port_unreachable);
}

TEST_F(FilterTest, RulesByPriorityThenInsertion) {
  RuleResult low = engine.add_rule("udp", kNode1, 0);
  RuleResult first = engine.add_rule("udp dst port 7", kNode2, 5);
  RuleResult second = engine.add_rule("udp and src host 198.51.100.7", kNode3, 5);
  ASSERT_TRUE(low && first && second);
  EXPECT_EQ(classify(udp_frame(kRemote, 1, 7)).target, kNode2);
  ASSERT_TRUE(engine.remove_rule(first.id).ok());
  EXPECT_EQ(classify(udp_frame(kRemote, 1, 7)).target, kNode3);
  EXPECT_EQ(classify(udp_frame(kRemote2, 1, 7)).target, kNode1);
}

// ---- Defaults, local, not ours ----

TEST_F(FilterTest, DefaultsResetTcpAndRefuseUdp) {
  EXPECT_EQ(classify(tcp_frame(kRemote, 1000, 22, tcp::kSyn)), (Decision{Action::reset, Reason::default_rst, {}}));
  // RFC 9293 3.10.7.1: never an RST for an RST.
  EXPECT_EQ(classify(tcp_frame(kRemote, 1000, 22, tcp::kRst)), dropped(Reason::no_owner));
  EXPECT_EQ(classify(udp_frame(kRemote, 1000, 22)),
            (Decision{Action::port_unreachable, Reason::default_unreachable, {}}));
  // Another protocol (GRE) for nobody: dropped.
  EXPECT_EQ(classify(ip_frame(Ip{kRemote, kShared, 47}, Bytes(8))), dropped(Reason::no_owner));
}

TEST_F(FilterTest, ArpAndEchoForTheSharedAddressAreLocal) {
  const Decision local_arp{Action::local, Reason::local_arp, {}};
  EXPECT_EQ(classify(arp_frame(arp::kOpRequest, kRemote, kShared)), local_arp);
  EXPECT_EQ(classify(arp_frame(arp::kOpReply, kRemote, kShared, kSharedMac)), local_arp);
  EXPECT_EQ(classify(arp_frame(arp::kOpRequest, kShared, kRemote)), local_arp) << "a conflict is filterd's";
  EXPECT_EQ(classify(arp_frame(arp::kOpRequest, kRemote, kOther)), dropped(Reason::not_ours));
  // A neighbour announcing itself (perhaps with a new MAC): ARP refreshes
  // the entry it has. Not an RFC 5227 probe (sender 0.0.0.0): nothing to learn.
  EXPECT_EQ(classify(arp_frame(arp::kOpRequest, kRemote, kRemote)), local_arp);
  EXPECT_EQ(classify(arp_frame(arp::kOpRequest, Ipv4Addr{0}, Ipv4Addr{0})), dropped(Reason::not_ours));
  Bytes echo = ip_frame(Ip{kRemote, kShared, ipv4::kProtoIcmp}, icmp_message(icmp::kEchoRequest, 0, 0x00010001));
  EXPECT_EQ(classify(echo), (Decision{Action::local, Reason::local_icmp_echo, {}}));
  EXPECT_EQ(counter(engine, "local_arp"), 4u);
  EXPECT_EQ(counter(engine, "local_icmp_echo"), 1u);
}

// Node to node (the hairpin): a node's packet for the shared address, with
// the shared address as source and filterd's channel MAC as destination --
// which classify() drops as spoofed -- goes to the owner of its destination.
TEST_F(FilterTest, AHairpinGoesToTheOwnerOfItsDestination) {
  ASSERT_TRUE(engine.listen(Proto::tcp, 5001, kNode1).ok());
  ASSERT_TRUE(engine.lease(Proto::tcp, 50001, kNode2).ok());
  const Bytes syn = ip_frame(Ip{kShared, kShared, ipv4::kProtoTcp, 1, 0, kOtherMac}, tcp_segment(50001, 5001, tcp::kSyn));
  EXPECT_EQ(classify(syn), dropped(Reason::not_ours)) << "from outside, neither MAC nor source can be ours";
  EXPECT_EQ(engine.classify_hairpin(syn), to_node(Reason::listen_hit, kNode1));
  const Bytes syn_ack = ip_frame(Ip{kShared, kShared, ipv4::kProtoTcp}, tcp_segment(5001, 50001, tcp::kSyn | tcp::kAck));
  EXPECT_EQ(classify(syn_ack), dropped(Reason::bad_source));
  EXPECT_EQ(engine.classify_hairpin(syn_ack), to_node(Reason::lease_hit, kNode2));
  const Bytes nobody = ip_frame(Ip{kShared, kShared, ipv4::kProtoTcp}, tcp_segment(50001, 5999, tcp::kSyn));
  EXPECT_EQ(engine.classify_hairpin(nobody).action, Action::reset);
  // Another source is still judged as from outside.
  EXPECT_EQ(engine.classify_hairpin(tcp_frame(Ipv4Addr{0x7F000001}, 1, 5001, tcp::kSyn)), dropped(Reason::bad_source));
}

TEST_F(FilterTest, FramesNotForUsAreDropped) {
  ASSERT_TRUE(engine.listen(Proto::tcp, 80, kNode1).ok());
  EXPECT_EQ(classify(ip_frame(Ip{kRemote, kOther, ipv4::kProtoTcp}, tcp_segment(1, 80, tcp::kSyn))),
            dropped(Reason::not_ours));
  EXPECT_EQ(classify(ip_frame(Ip{kRemote, kShared, ipv4::kProtoTcp, 1, 0, kOtherMac}, tcp_segment(1, 80, tcp::kSyn))),
            dropped(Reason::not_ours));
  // IPv6 is another EtherType to an engine without an IPv6 address.
  EXPECT_EQ(classify(eth_frame(kSharedMac, eth::kTypeIpv6, Bytes(40))), dropped(Reason::other_type));
  EXPECT_EQ(classify(eth_frame(kSharedMac, 0x0040, Bytes(40))), dropped(Reason::other_type));
  // 802.1Q: tag then an IPv4 packet.
  Bytes tagged(4);
  eth::VlanTag{5, eth::kTypeIpv4}.write(std::span<std::byte, 4>(tagged.data(), 4));
  Bytes inner = ip_packet(Ip{}, tcp_segment(1, 80, tcp::kSyn));
  tagged.insert(tagged.end(), inner.begin(), inner.end());
  EXPECT_EQ(classify(eth_frame(kSharedMac, eth::kTypeVlan, tagged)), dropped(Reason::vlan));
  // Sources that cannot be: ourselves, loopback, multicast, broadcast.
  for (Ipv4Addr bad : {kShared, Ipv4Addr{0x7F000001}, Ipv4Addr{0xE0000001}, Ipv4Addr{0xFFFFFFFF}, Ipv4Addr{0}}) {
    EXPECT_EQ(classify(tcp_frame(bad, 1, 80, tcp::kSyn)), dropped(Reason::bad_source));
  }
  Bytes corrupt = tcp_frame(kRemote, 1, 80, tcp::kSyn);
  corrupt[eth::Header::kSize + 8] = std::byte{1};  // TTL changed, checksum not
  EXPECT_EQ(classify(corrupt), dropped(Reason::bad_ip_checksum));
  // Broadcast: only a rule takes it, and nothing is answered.
  Bytes dhcp = ip_frame(Ip{kRemote, ipv4::kLimitedBroadcast, ipv4::kProtoUdp, 1, 0, eth::kBroadcast}, udp_datagram(68, 67));
  EXPECT_EQ(classify(dhcp), dropped(Reason::no_owner));
  ASSERT_TRUE(engine.add_rule("udp dst port 67", kNode3).ok());
  EXPECT_EQ(classify(dhcp), to_node(Reason::rule_hit, kNode3));
}

// ---- Fragments ----

class FragmentTest : public FilterTest {
 protected:
  // A 3000-byte UDP datagram to port 7777 from kRemote, in three fragments.
  Bytes datagram = udp_datagram(6000, 7777, 2992);
  Ip ip{kRemote, kShared, ipv4::kProtoUdp, 0x4242, 0};
  Bytes frag0 = fragment(ip, datagram, 0, 1480, true);
  Bytes frag1 = fragment(ip, datagram, 1480, 1480, true);
  Bytes frag2 = fragment(ip, datagram, 2960, 40, false);

  void SetUp() override { ASSERT_TRUE(engine.add_flow(FlowKey{Proto::udp, kRemote, 6000, 7777}, kNode2).ok()); }
};

TEST_F(FragmentTest, FirstThenRestFollowTheFirst) {
  EXPECT_EQ(classify(frag0), to_node(Reason::exact_hit, kNode2));
  EXPECT_EQ(classify(frag1), to_node(Reason::frag_follow, kNode2));
  EXPECT_EQ(classify(frag2), to_node(Reason::frag_follow, kNode2));
  EXPECT_EQ(engine.tracked_datagrams(), 1u);
  EXPECT_EQ(counter(engine, "frag_tracked"), 1u);
  EXPECT_EQ(counter(engine, "frag_follow"), 2u);
  // Another datagram (IP id) of the same flow is tracked on its own.
  Ip other = ip;
  other.id = 0x4243;
  EXPECT_EQ(classify(fragment(other, datagram, 1480, 1480, true)).action, Action::held);
}

TEST_F(FragmentTest, RestBeforeFirstAreHeldThenReleased) {
  EXPECT_EQ(classify(frag2), (Decision{Action::held, Reason::frag_held, {}}));
  EXPECT_EQ(classify(frag1).action, Action::held);
  EXPECT_EQ(engine.held_fragments(), 2u);
  EXPECT_EQ(engine.held_fragment_bytes(), frag1.size() + frag2.size());
  EXPECT_FALSE(engine.has_released());
  EXPECT_EQ(classify(frag0), to_node(Reason::exact_hit, kNode2));
  ASSERT_TRUE(engine.has_released());
  std::vector<ReleasedFrame> out = engine.take_released();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].frame, frag2);
  EXPECT_EQ(out[1].frame, frag1);
  for (const ReleasedFrame& r : out) EXPECT_EQ(r.decision, to_node(Reason::frag_follow, kNode2));
  EXPECT_EQ(engine.held_fragments(), 0u);
  EXPECT_EQ(engine.held_fragment_bytes(), 0u);
  EXPECT_FALSE(engine.has_released());
  EXPECT_EQ(counter(engine, "frag_released"), 2u);
  EXPECT_EQ(counter(engine, "frag_held"), 2u);
}

TEST_F(FragmentTest, HeldFragmentsTimeOut) {
  EXPECT_EQ(classify(frag1).action, Action::held);
  clock.advance(29s);
  engine.expire();
  EXPECT_EQ(engine.held_fragments(), 1u);
  clock.advance(2s);
  engine.expire();
  EXPECT_EQ(engine.held_fragments(), 0u);
  EXPECT_EQ(engine.tracked_datagrams(), 0u);
  EXPECT_EQ(counter(engine, "frag_dropped"), 1u);
  // The first now starts afresh, and releases nothing.
  EXPECT_EQ(classify(frag0), to_node(Reason::exact_hit, kNode2));
  EXPECT_TRUE(engine.take_released().empty());
  EXPECT_EQ(classify(frag2), to_node(Reason::frag_follow, kNode2));
  // A remembered decision times out too: a straggler is held again.
  clock.advance(31s);
  EXPECT_EQ(classify(frag1).action, Action::held);
}

TEST_F(FragmentTest, HoldingIsBounded) {
  ManualClock c2;
  FilterConfig cfg = config();
  cfg.fragment_max_held_frames = 3;
  cfg.fragment_max_held_bytes = 4 * frag1.size();
  cfg.fragment_max_datagrams = 2;
  FilterEngine small{cfg, c2};
  auto later = [&](std::uint16_t id) {
    Ip i = ip;
    i.id = id;
    return fragment(i, datagram, 1480, 1480, true);
  };
  EXPECT_EQ(small.classify(later(1)).action, Action::held);
  EXPECT_EQ(small.classify(later(2)).action, Action::held);
  // A third datagram evicts the oldest, whose held fragment is dropped.
  EXPECT_EQ(small.classify(later(3)).action, Action::held);
  EXPECT_EQ(small.tracked_datagrams(), 2u);
  EXPECT_EQ(small.held_fragments(), 2u);
  EXPECT_EQ(small.counters().value("frag_dropped"), 1u);
  EXPECT_EQ(small.classify(later(3)).action, Action::held);
  // Frame limit: 3 held.
  EXPECT_EQ(small.classify(later(3)), dropped(Reason::frag_limit));
  EXPECT_EQ(small.held_fragments(), 3u);

  FilterConfig bytes_cfg = config();
  bytes_cfg.fragment_max_held_bytes = frag1.size() + 10;
  FilterEngine tight{bytes_cfg, c2};
  EXPECT_EQ(tight.classify(later(1)).action, Action::held);
  EXPECT_EQ(tight.classify(later(2)), dropped(Reason::frag_limit));
  EXPECT_EQ(tight.counters().value("frag_limit"), 1u);
}

TEST_F(FragmentTest, FirstForNobodyDropsTheRest) {
  Ip nobody = ip;
  nobody.id = 99;
  Bytes d = udp_datagram(6000, 7778, 2992);
  EXPECT_EQ(classify(fragment(nobody, d, 1480, 1480, true)).action, Action::held);
  EXPECT_EQ(classify(fragment(nobody, d, 0, 1480, true)).action, Action::port_unreachable);
  EXPECT_TRUE(engine.take_released().empty());
  EXPECT_EQ(counter(engine, "frag_dropped"), 1u);
  EXPECT_EQ(classify(fragment(nobody, d, 2960, 40, false)), dropped(Reason::frag_unowned));
  EXPECT_EQ(engine.held_fragments(), 0u);
}

TEST_F(FragmentTest, TinyAndOverlappingTcpFragmentsAreMalformed) {
  Bytes seg = tcp_segment(1, 80, tcp::kSyn, 64);
  Ip t{kRemote, kShared, ipv4::kProtoTcp, 5, 0};
  // RFC 1858 3.1: a first fragment without the whole TCP header.
  EXPECT_EQ(classify(fragment(t, seg, 0, 8, true)), dropped(Reason::malformed));
  // RFC 1858 3.2: offset 8 rewrites the header.
  EXPECT_EQ(classify(fragment(t, seg, 8, 16, true)), dropped(Reason::malformed));
  // Not a multiple of 8 with MF set (RFC 791).
  EXPECT_EQ(classify(fragment(t, seg, 24, 12, true)), dropped(Reason::malformed));
  // Past 65535 bytes.
  Ip far = t;
  far.flags_offset = static_cast<std::uint16_t>(65528 / 8);
  EXPECT_EQ(classify(ip_frame(far, Bytes(16))), dropped(Reason::malformed));
}

// ---- ICMP errors ----

TEST_F(FilterTest, IcmpErrorsGoToTheQuotedFlowsOwner) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 80, 5555}, kNode3).ok());
  ASSERT_TRUE(engine.listen(Proto::udp, 5353, kNode1).ok());
  const Ip out_tcp{kShared, kRemote, ipv4::kProtoTcp};
  const Ip out_udp{kShared, kRemote2, ipv4::kProtoUdp};
  EXPECT_EQ(classify(icmp_error_frame(icmp::kDestUnreachable, icmp::kFragNeeded, out_tcp, tcp_segment(5555, 80, tcp::kAck))),
            to_node(Reason::icmp_error, kNode3));
  EXPECT_EQ(classify(icmp_error_frame(icmp::kTimeExceeded, 0, out_udp, udp_datagram(5353, 9))),
            to_node(Reason::icmp_error, kNode1));
  EXPECT_EQ(classify(icmp_error_frame(icmp::kParamProblem, 0, out_tcp, tcp_segment(5555, 80, tcp::kAck))),
            to_node(Reason::icmp_error, kNode3));
  // Unknown flow; a quote of somebody else's datagram; a truncated quote.
  EXPECT_EQ(classify(icmp_error_frame(icmp::kDestUnreachable, 1, out_tcp, tcp_segment(5556, 80, tcp::kAck))),
            dropped(Reason::icmp_error_unknown));
  EXPECT_EQ(classify(icmp_error_frame(icmp::kDestUnreachable, 1, Ip{kOther, kRemote, ipv4::kProtoTcp},
                                      tcp_segment(5555, 80, tcp::kAck))),
            dropped(Reason::icmp_error_unknown));
  Bytes short_quote = ip_frame(Ip{kRouter, kShared, ipv4::kProtoIcmp},
                               icmp_message(icmp::kDestUnreachable, 1, 0, Bytes(12)));
  EXPECT_EQ(classify(short_quote), dropped(Reason::malformed));
  // A ping of a node answered with an error.
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::icmp, kRemote, 0, 77}, kNode2).ok());
  EXPECT_EQ(classify(icmp_error_frame(icmp::kDestUnreachable, 1, Ip{kShared, kRemote, ipv4::kProtoIcmp},
                                      icmp_message(icmp::kEchoRequest, 0, (77u << 16) | 1))),
            to_node(Reason::icmp_error, kNode2));
  EXPECT_EQ(counter(engine, "icmp_error_delivered"), 4u);
  EXPECT_EQ(counter(engine, "icmp_error_unknown"), 2u);
}

// ---- Egress ----

Bytes from_node(std::uint8_t proto, std::span<const std::byte> l4, Ipv4Addr src = kShared, Ipv4Addr dst = kRemote) {
  return ip_frame(Ip{src, dst, proto, 9, 0, kPeerMac}, l4);
}

TEST_F(FilterTest, EgressAllowsOwnFlowsAndDeniesForgedOnes) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 80, 40000}, kNode1).ok());
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 80, 40001}, kNode2).ok());
  ASSERT_TRUE(engine.join_group(Proto::tcp, 443, kNode1).ok());
  ASSERT_TRUE(engine.join_group(Proto::tcp, 443, kNode2).ok());
  ASSERT_TRUE(engine.listen(Proto::udp, 53, kNode3).ok());

  EXPECT_TRUE(engine.egress_allowed(from_node(ipv4::kProtoTcp, tcp_segment(40000, 80, tcp::kAck)), 1));
  EXPECT_EQ(engine.egress_check(from_node(ipv4::kProtoTcp, tcp_segment(40000, 80, tcp::kAck)), 1).reason,
            EgressReason::flow);
  // Node 1 forging node 2's connection, or one nobody has.
  EgressVerdict v = engine.egress_check(from_node(ipv4::kProtoTcp, tcp_segment(40001, 80, tcp::kAck)), 1);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, EgressReason::not_owner);
  EXPECT_FALSE(engine.egress_allowed(from_node(ipv4::kProtoTcp, tcp_segment(40002, 80, tcp::kAck)), 1));
  // Group members answer from the group's port; others may not.
  EXPECT_EQ(engine.egress_check(from_node(ipv4::kProtoTcp, tcp_segment(443, 50000, tcp::kSyn | tcp::kAck)), 2).reason,
            EgressReason::listener);
  EXPECT_FALSE(engine.egress_allowed(from_node(ipv4::kProtoTcp, tcp_segment(443, 50000, tcp::kAck)), 3));
  EXPECT_TRUE(engine.egress_allowed(from_node(ipv4::kProtoUdp, udp_datagram(53, 7000)), 3));
  EXPECT_FALSE(engine.egress_allowed(from_node(ipv4::kProtoUdp, udp_datagram(53, 7000)), 1));
  // Not the shared address; ARP; an echo reply (filterd's); another protocol.
  EXPECT_EQ(engine.egress_check(from_node(ipv4::kProtoTcp, tcp_segment(40000, 80, tcp::kAck), kOther), 1).reason,
            EgressReason::bad_source);
  EXPECT_EQ(engine.egress_check(arp_frame(arp::kOpRequest, kShared, kRouter), 1).reason, EgressReason::not_ip);
  EXPECT_EQ(engine.egress_check(from_node(ipv4::kProtoIcmp, icmp_message(icmp::kEchoReply, 0, 1)), 1).reason,
            EgressReason::protocol);
  EXPECT_EQ(engine.egress_check(from_node(47, Bytes(8)), 1).reason, EgressReason::protocol);
  EXPECT_EQ(engine.egress_check(Bytes(10), 1).reason, EgressReason::malformed);

  EXPECT_EQ(counter(engine, "egress_allowed"), 4u);
  EXPECT_EQ(counter(engine, "egress_denied"), 9u);
  EXPECT_EQ(counter(engine, "egress_not_owner"), 4u);
}

TEST_F(FilterTest, EgressIcmpAndFragments) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::icmp, kRemote, 0, 77}, kNode1).ok());
  ASSERT_TRUE(engine.listen(Proto::udp, 5000, kNode2).ok());
  EXPECT_EQ(engine.egress_check(from_node(ipv4::kProtoIcmp, icmp_message(icmp::kEchoRequest, 0, (77u << 16) | 1)), 1).reason,
            EgressReason::flow);
  EXPECT_FALSE(engine.egress_allowed(from_node(ipv4::kProtoIcmp, icmp_message(icmp::kEchoRequest, 0, (78u << 16) | 1)), 1));
  // A port unreachable about a datagram the node received on its port.
  Bytes quoted = ip_packet(Ip{kRemote, kShared, ipv4::kProtoUdp}, udp_datagram(9000, 5000));
  quoted.resize(28);
  Bytes unreach = icmp_message(icmp::kDestUnreachable, icmp::kPortUnreachable, 0, quoted);
  EXPECT_EQ(engine.egress_check(from_node(ipv4::kProtoIcmp, unreach), 2).reason, EgressReason::icmp_error);
  EXPECT_FALSE(engine.egress_allowed(from_node(ipv4::kProtoIcmp, unreach), 1));

  // A fragmented datagram: later fragments belong to the sender of the first.
  Bytes d = udp_datagram(5000, 9000, 2992);
  Ip out{kShared, kRemote, ipv4::kProtoUdp, 0x77, 0, kPeerMac};
  EXPECT_FALSE(engine.egress_allowed(fragment(out, d, 1480, 1480, true), 2)) << "no first yet";
  EXPECT_TRUE(engine.egress_allowed(fragment(out, d, 0, 1480, true), 2));
  EXPECT_EQ(engine.egress_check(fragment(out, d, 1480, 1480, true), 2).reason, EgressReason::fragment);
  EXPECT_FALSE(engine.egress_allowed(fragment(out, d, 2960, 40, false), 1));
  clock.advance(31s);
  EXPECT_FALSE(engine.egress_allowed(fragment(out, d, 2960, 40, false), 2)) << "timed out";
}

// ---- A node dies ----

TEST_F(FilterTest, RemoveNodeForgetsEverythingItOwned) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 80, 40000}, kNode1).ok());
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 80, 40001}, Target{1, 3}).ok());
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 80, 40002}, kNode2).ok());
  ASSERT_TRUE(engine.listen(Proto::tcp, 22, kNode1).ok());
  ASSERT_TRUE(engine.join_group(Proto::udp, 53, kNode1).ok());
  ASSERT_TRUE(engine.join_group(Proto::udp, 53, Target{1, 1}).ok());
  ASSERT_TRUE(engine.join_group(Proto::udp, 53, kNode2).ok());
  ASSERT_TRUE(engine.add_rule("udp dst port 9999", kNode1).ok());
  ASSERT_TRUE(engine.add_rule("udp dst port 9998", kNode2).ok());
  // A datagram in flight to node 1.
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::udp, kRemote, 6000, 6000}, kNode1).ok());
  Bytes big = udp_datagram(6000, 6000, 2000);
  Ip ip{kRemote, kShared, ipv4::kProtoUdp, 0x55, 0};
  EXPECT_EQ(classify(fragment(ip, big, 0, 1480, true)).target, kNode1);

  engine.remove_node(1);
  EXPECT_EQ(engine.flow_count(), 1u);
  EXPECT_EQ(classify(tcp_frame(kRemote, 80, 40000)).action, Action::reset);
  EXPECT_EQ(classify(tcp_frame(kRemote, 80, 40002)), to_node(Reason::exact_hit, kNode2));
  EXPECT_EQ(classify(tcp_frame(kRemote, 1, 22, tcp::kSyn)).action, Action::reset);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(classify(udp_frame(kRemote, static_cast<std::uint16_t>(1000 + i), 53)), to_node(Reason::group_hit, kNode2));
  }
  EXPECT_EQ(engine.rule_count(), 1u);
  EXPECT_EQ(classify(udp_frame(kRemote, 1, 9999)).action, Action::port_unreachable);
  EXPECT_EQ(classify(udp_frame(kRemote, 1, 9998)), to_node(Reason::rule_hit, kNode2));
  EXPECT_EQ(classify(fragment(ip, big, 1480, 528, false)), dropped(Reason::frag_unowned));
  EXPECT_FALSE(engine.egress_allowed(from_node(ipv4::kProtoTcp, tcp_segment(40000, 80, tcp::kAck)), 1));
}

// ---- Malformed input never crashes ----

TEST_F(FilterTest, MalformedSweepNeverCrashes) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}, kNode1).ok());
  ASSERT_TRUE(engine.listen(Proto::udp, 53, kNode1).ok());
  ASSERT_TRUE(engine.add_rule("tcp[13] & 2 != 0", kNode2).ok());
  const Bytes valid = tcp_frame(kRemote, 40000, 80, tcp::kAck, 20);
  ASSERT_EQ(valid.size(), 74u);
  ASSERT_EQ(classify(valid), to_node(Reason::exact_hit, kNode1));

  // Every truncation: the IPv4 total length no longer fits.
  for (std::size_t n = 0; n < valid.size(); ++n) {
    Bytes cut(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(classify(cut), dropped(Reason::malformed)) << "length " << n;
    (void)engine.egress_check(cut, 1);
  }
  // The same truncations with the IPv4 total length shrunk to match (a short
  // but consistent datagram): still never a crash; the transport is checked.
  for (std::size_t n = eth::Header::kSize + 20; n < valid.size(); ++n) {
    Bytes cut(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(n));
    store_be16(cut.data() + eth::Header::kSize + 2, static_cast<std::uint16_t>(n - eth::Header::kSize));
    ipv4::fill_header_checksum(std::span(cut.data() + eth::Header::kSize, 20));
    Decision d = classify(cut);
    if (n < eth::Header::kSize + 40) {
      EXPECT_EQ(d, dropped(Reason::malformed)) << "length " << n;
    } else {
      EXPECT_EQ(d, to_node(Reason::exact_hit, kNode1)) << "length " << n;
    }
  }
  // Bad IHL: below 5, and past the datagram.
  for (std::uint8_t ihl : {0, 1, 4, 15}) {
    Bytes f = valid;
    f[eth::Header::kSize] = std::byte{static_cast<std::uint8_t>(0x40 | ihl)};
    ipv4::fill_header_checksum(std::span(f.data() + eth::Header::kSize, 20));
    EXPECT_EQ(classify(f).action, Action::drop) << "ihl " << int{ihl};
  }
  Bytes v6 = valid;
  v6[eth::Header::kSize] = std::byte{0x65};
  EXPECT_EQ(classify(v6), dropped(Reason::malformed));
  // Bad total length: shorter than the header, longer than the frame.
  for (std::uint16_t total : {0, 19, 21, 61, 1500, 65535}) {
    Bytes f = valid;
    store_be16(f.data() + eth::Header::kSize + 2, total);
    ipv4::fill_header_checksum(std::span(f.data() + eth::Header::kSize, 20));
    EXPECT_EQ(classify(f).action, Action::drop) << "total " << total;
  }
  // Bad TCP data offset.
  for (std::uint8_t off : {0, 4, 11, 15}) {
    Bytes f = valid;
    f[eth::Header::kSize + 20 + 12] = std::byte{static_cast<std::uint8_t>(off << 4)};
    EXPECT_EQ(classify(f), dropped(Reason::malformed)) << "data offset " << int{off};
  }
  // Random bytes, and random corruptions of valid frames (checksum fixed up,
  // so the corruption reaches the layers behind it).
  std::mt19937 rng(42);
  const Bytes udp = udp_frame(kRemote, 1, 53);
  const Bytes icmp_err = icmp_error_frame(icmp::kDestUnreachable, 3, Ip{kShared, kRemote, ipv4::kProtoUdp},
                                          udp_datagram(53, 1));
  const Bytes arp = arp_frame(arp::kOpRequest, kRemote, kShared);
  for (int i = 0; i < 20000; ++i) {
    Bytes f;
    if (i % 4 == 0) {
      f.resize(rng() % 120);
      for (std::byte& b : f) b = static_cast<std::byte>(rng());
      if (f.size() >= 14 && i % 8 == 0) store_be16(f.data() + 12, eth::kTypeIpv4);
    } else {
      const Bytes* base[] = {&valid, &udp, &icmp_err, &arp};
      f = *base[rng() % 4];
      for (int k = 0, flips = 1 + static_cast<int>(rng() % 4); k < flips; ++k) {
        f[rng() % f.size()] = static_cast<std::byte>(rng());
      }
      if (rng() % 2 == 0) f.resize(rng() % (f.size() + 1));
      if (f.size() >= 34 && rng() % 2 == 0) ipv4::fill_header_checksum(std::span(f.data() + 14, 20));
    }
    (void)classify(f);
    (void)engine.egress_check(f, static_cast<NodeId>(rng() % 3));
  }
  std::vector<Frame> burst;
  std::vector<Bytes> keep;
  for (int i = 0; i < 77; ++i) {
    keep.emplace_back(rng() % 100);
    for (std::byte& b : keep.back()) b = static_cast<std::byte>(rng());
  }
  burst.assign(keep.begin(), keep.end());
  std::vector<Decision> out(burst.size());
  engine.classify(burst, out);
  EXPECT_GT(counter(engine, "malformed"), 74u);
}

TEST_F(FilterTest, CountersAreNamedAndDumpable) {
  (void)classify(tcp_frame(kRemote, 1, 2));
  const CounterSet* sets[] = {&engine.counters()};
  const std::string table = counters_table(sets);
  for (std::size_t r = 0; r < kReasonCount; ++r) {
    EXPECT_NE(table.find(to_string(static_cast<Reason>(r))), std::string::npos) << to_string(static_cast<Reason>(r));
  }
  EXPECT_NE(table.find("egress_denied"), std::string::npos);
  EXPECT_EQ(engine.counters().owner(), "filter");
}

}  // namespace
}  // namespace xk::filterd

// filterd's filter engine over IPv6 (docs/filterd.md, "IPv6"): frames built
// with the protocols' wire headers, classified and checked for egress, beside
// IPv4 flows in the same tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "filter_frames.hpp"
#include "xk/checksum.hpp"
#include "xk/filterd/filter.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/ipv6_wire.hpp"

namespace xk::filterd {
namespace {

using namespace std::chrono_literals;
using namespace frames;

IpAddr ip(std::string_view text) { return *parse_ip(text); }

const IpAddr kShared6 = ip("2001:db8::10");
const IpAddr kLinkLocal = ip("fe80::a");
const IpAddr kRemote = ip("2001:db8:1::7");
const IpAddr kRemote2 = ip("2001:db8:1::8");
const IpAddr kRouter = ip("fe80::1");
constexpr Ipv4Addr kShared4{0xC000020A};
constexpr Target kNode1{1, 0};
constexpr Target kNode2{2, 0};

FilterConfig config() {
  FilterConfig c;
  c.shared_ip = kShared4;
  c.shared_ip6 = kShared6;
  c.link_local6 = kLinkLocal;
  c.shared_mac = kSharedMac;
  return c;
}

// An IPv6 packet: the fixed header, then `body` (extension headers and the
// upper layer) whose first header is `next_header`.
Bytes ip6_packet(const IpAddr& src, const IpAddr& dst, std::uint8_t next_header, std::span<const std::byte> body,
                 std::uint8_t hop_limit = 64) {
  Bytes p(ipv6::Header::kSize + body.size());
  ipv6::Header h;
  h.payload_length = static_cast<std::uint16_t>(body.size());
  h.next_header = next_header;
  h.hop_limit = hop_limit;
  h.src = src;
  h.dst = dst;
  h.write(std::span<std::byte, ipv6::Header::kSize>(p.data(), ipv6::Header::kSize));
  if (!body.empty()) std::memcpy(p.data() + ipv6::Header::kSize, body.data(), body.size());
  return p;
}

Bytes ip6_frame(const IpAddr& src, const IpAddr& dst, std::uint8_t next_header, std::span<const std::byte> body,
                MacAddr mac = kSharedMac) {
  return eth_frame(mac, eth::kTypeIpv6, ip6_packet(src, dst, next_header, body));
}

Bytes tcp6(const IpAddr& remote, std::uint16_t sport, std::uint16_t dport, std::uint8_t flags = tcp::kAck) {
  return ip6_frame(remote, kShared6, ipv6::kTcp, tcp_segment(sport, dport, flags));
}

// An ICMPv6 message (type, code, the 4 bytes after the checksum, body).
Bytes icmp6(std::uint8_t type, std::uint32_t rest, std::span<const std::byte> body = {}) {
  return icmp_message(type, 0, rest, body);
}

// A header of `next` in front of `body`: a destination options header of
// 8 bytes (PadN), or a fragment header.
Bytes with_dest_options(std::uint8_t next, const Bytes& body) {
  Bytes b(8 + body.size());
  b[0] = std::byte{next};
  b[1] = std::byte{0};  // 8 bytes
  b[2] = std::byte{1};  // PadN
  b[3] = std::byte{4};
  std::copy(body.begin(), body.end(), b.begin() + 8);
  return b;
}
Bytes with_fragment(std::uint8_t next, std::size_t offset, bool more, std::uint32_t id, std::span<const std::byte> body) {
  Bytes b(ipv6::FragmentHeader::kSize + body.size());
  ipv6::FragmentHeader{next, static_cast<std::uint16_t>(offset / 8), more, id}.write(
      std::span<std::byte, ipv6::FragmentHeader::kSize>(b.data(), ipv6::FragmentHeader::kSize));
  if (!body.empty()) std::memcpy(b.data() + ipv6::FragmentHeader::kSize, body.data(), body.size());
  return b;
}

constexpr Decision to_node(Reason r, Target t) { return Decision{Action::to_node, r, t}; }
constexpr Decision dropped(Reason r) { return Decision{Action::drop, r, {}}; }
constexpr Decision locally(Reason r) { return Decision{Action::local, r, {}}; }

class FilterV6 : public ::testing::Test {
 protected:
  ManualClock clock{Time{} + 1000s};
  FilterEngine engine{config(), clock};

  Decision classify(const Bytes& f) { return engine.classify(f); }
};

TEST_F(FilterV6, FlowsOfBothFamiliesLiveSideBySide) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}, kNode1).ok());
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, IpAddr(Ipv4Addr{0xC6336407}), 40000, 80}, kNode2).ok());
  EXPECT_EQ(engine.flow_count(), 2u);
  EXPECT_EQ(classify(tcp6(kRemote, 40000, 80)), to_node(Reason::exact_hit, kNode1));
  EXPECT_EQ(classify(tcp6(kRemote2, 40000, 80, tcp::kAck | tcp::kRst)), dropped(Reason::no_owner))
      << "a reset for nobody is not answered";
  EXPECT_EQ(classify(tcp6(kRemote2, 40000, 80)), (Decision{Action::reset, Reason::default_rst, {}}));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kUdp, udp_datagram(5000, 53))),
            (Decision{Action::port_unreachable, Reason::default_unreachable, {}}));
  ASSERT_TRUE(engine.remove_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}).ok());
  EXPECT_EQ(engine.find_flow(FlowKey{Proto::tcp, IpAddr(Ipv4Addr{0xC6336407}), 40000, 80}), kNode2);
}

TEST_F(FilterV6, ListenersAndGroupsServeBothFamilies) {
  ASSERT_TRUE(engine.listen(Proto::tcp, 80, kNode1).ok());
  EXPECT_EQ(classify(tcp6(kRemote, 40000, 80, tcp::kSyn)), to_node(Reason::listen_hit, kNode1));
  ASSERT_TRUE(engine.join_group(Proto::udp, 9000, kNode1).ok());
  ASSERT_TRUE(engine.join_group(Proto::udp, 9000, kNode2).ok());
  // Every flow has one member, the same each time; both members get some.
  std::set<NodeId> chosen;
  for (std::uint16_t port = 1000; port < 1064; ++port) {
    const Decision d = classify(ip6_frame(kRemote, kShared6, ipv6::kUdp, udp_datagram(port, 9000)));
    ASSERT_EQ(d.reason, Reason::group_hit);
    EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kUdp, udp_datagram(port, 9000))), d);
    EXPECT_EQ(engine.listener_for(FlowKey{Proto::udp, kRemote, port, 9000}), d.target);
    chosen.insert(d.target.node);
  }
  EXPECT_EQ(chosen.size(), 2u);
}

TEST_F(FilterV6, WhatIsNotForTheSharedAddressIsDropped) {
  ASSERT_TRUE(engine.listen(Proto::tcp, 80, kNode1).ok());
  auto syn = tcp_segment(40000, 80, tcp::kSyn);
  EXPECT_EQ(classify(ip6_frame(kRemote, ip("2001:db8::99"), ipv6::kTcp, syn)), dropped(Reason::not_ours));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kTcp, syn, kOtherMac)), dropped(Reason::not_ours));
  EXPECT_EQ(classify(ip6_frame(kRouter, kLinkLocal, ipv6::kTcp, syn)), dropped(Reason::not_ours))
      << "filterd's link-local address carries its own ND and echo only";
  for (const char* src : {"ff02::1", "::1", "::ffff:198.51.100.7", "2001:db8::10", "fe80::a", "::"}) {
    EXPECT_EQ(classify(ip6_frame(ip(src), kShared6, ipv6::kTcp, syn)), dropped(Reason::bad_source)) << src;
  }
  Bytes short_header = ip6_packet(kRemote, kShared6, ipv6::kTcp, syn);
  short_header.resize(30);
  EXPECT_EQ(classify(eth_frame(kSharedMac, eth::kTypeIpv6, short_header)), dropped(Reason::malformed));
  Bytes overlong = ip6_packet(kRemote, kShared6, ipv6::kTcp, syn);
  store_be16(overlong.data() + 4, 200);  // more payload than the frame holds
  EXPECT_EQ(classify(eth_frame(kSharedMac, eth::kTypeIpv6, overlong, false)), dropped(Reason::malformed));
  Bytes v4_version = ip6_packet(kRemote, kShared6, ipv6::kTcp, syn);
  v4_version[0] = std::byte{0x45};
  EXPECT_EQ(classify(eth_frame(kSharedMac, eth::kTypeIpv6, v4_version)), dropped(Reason::malformed));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kTcp, Bytes(12))), dropped(Reason::malformed))
      << "a TCP header cut short";
}

TEST_F(FilterV6, ExtensionHeadersAreWalkedToTheTransport) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 40000, 80}, kNode2).ok());
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kDestOptions,
                               with_dest_options(ipv6::kTcp, tcp_segment(40000, 80, tcp::kAck)))),
            to_node(Reason::exact_hit, kNode2));
  // An atomic fragment (RFC 6946) is a whole packet.
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kFragment,
                               with_fragment(ipv6::kTcp, 0, false, 9, tcp_segment(40000, 80, tcp::kAck)))),
            to_node(Reason::exact_hit, kNode2));
  // A chain ipv6 itself would refuse: a header running past the packet,
  // hop-by-hop not first.
  Bytes cut = with_dest_options(ipv6::kTcp, {});
  cut.resize(6);
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kDestOptions, cut)), dropped(Reason::malformed));
  Bytes late_hbh = with_dest_options(ipv6::kHopByHop, with_dest_options(ipv6::kTcp, tcp_segment(40000, 80, tcp::kAck)));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kDestOptions, late_hbh)), dropped(Reason::malformed));
}

TEST_F(FilterV6, NeighborDiscoveryAndEchoAreFilterdsOwn) {
  const IpAddr solicited = icmpv6::solicited_node(kShared6);
  const MacAddr group_mac = icmpv6::multicast_mac(solicited);
  EXPECT_EQ(classify(ip6_frame(kRouter, solicited, ipv6::kIcmpv6, icmp6(icmpv6::kNeighborSolicit, 0, Bytes(16)),
                               group_mac)),
            locally(Reason::local_nd));
  EXPECT_EQ(classify(ip6_frame(IpAddr{}, solicited, ipv6::kIcmpv6, icmp6(icmpv6::kNeighborSolicit, 0, Bytes(16)),
                               group_mac)),
            locally(Reason::local_nd))
      << "a duplicate address check comes from ::";
  EXPECT_EQ(classify(ip6_frame(kRouter, kLinkLocal, ipv6::kIcmpv6, icmp6(icmpv6::kNeighborAdvert, 0, Bytes(16)))),
            locally(Reason::local_nd));
  EXPECT_EQ(classify(ip6_frame(kRouter, icmpv6::all_nodes(), ipv6::kIcmpv6, icmp6(icmpv6::kRouterAdvert, 0, Bytes(8)),
                               icmpv6::multicast_mac(icmpv6::all_nodes()))),
            locally(Reason::local_nd));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kIcmpv6, icmp6(icmpv6::kEchoRequest, 0x00070001))),
            locally(Reason::local_icmp_echo));
  EXPECT_EQ(classify(ip6_frame(kRouter, kLinkLocal, ipv6::kIcmpv6, icmp6(icmpv6::kEchoRequest, 0x00070001))),
            locally(Reason::local_icmp_echo));
  // An echo reply is the node's whose ping it answers (its ICMP flow).
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::icmp, kRemote, 0, 0x1234}, kNode2).ok());
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kIcmpv6, icmp6(icmpv6::kEchoReply, 0x12340001))),
            to_node(Reason::exact_hit, kNode2));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kIcmpv6, icmp6(icmpv6::kEchoReply, 0x43210001))),
            dropped(Reason::no_owner));
  EXPECT_EQ(engine.count(Reason::local_nd), 4u);
}

TEST_F(FilterV6, ErrorsGoToTheOwnerOfTheFlowTheyQuote) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 5001, 40000}, kNode2).ok());
  // Packet Too Big from a router about a segment the node sent (RFC 8201).
  const Bytes sent = ip6_packet(kShared6, kRemote, ipv6::kTcp, tcp_segment(40000, 5001, tcp::kAck, 1200));
  EXPECT_EQ(classify(ip6_frame(ip("2001:db8:ff::1"), kShared6, ipv6::kIcmpv6, icmp6(icmpv6::kPacketTooBig, 1280, sent))),
            to_node(Reason::icmp_error, kNode2));
  // Quoting a fragment of offset 0: the ports are there.
  const Bytes frag = ip6_packet(kShared6, kRemote, ipv6::kFragment,
                                with_fragment(ipv6::kTcp, 0, true, 77, tcp_segment(40000, 5001, tcp::kAck)));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kIcmpv6, icmp6(icmpv6::kDestUnreachable, 0, frag))),
            to_node(Reason::icmp_error, kNode2));
  // A flow nobody owns, a packet that was not ours, a quote cut short.
  const Bytes other = ip6_packet(kShared6, kRemote2, ipv6::kTcp, tcp_segment(40000, 5001, tcp::kAck));
  EXPECT_EQ(classify(ip6_frame(kRemote2, kShared6, ipv6::kIcmpv6, icmp6(icmpv6::kDestUnreachable, 0, other))),
            dropped(Reason::icmp_error_unknown));
  const Bytes not_ours = ip6_packet(kRemote, kRemote2, ipv6::kTcp, tcp_segment(40000, 5001, tcp::kAck));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kIcmpv6, icmp6(icmpv6::kTimeExceeded, 0, not_ours))),
            dropped(Reason::icmp_error_unknown));
  EXPECT_EQ(classify(ip6_frame(kRemote, kShared6, ipv6::kIcmpv6, icmp6(icmpv6::kDestUnreachable, 0, Bytes(20)))),
            dropped(Reason::malformed));
}

TEST_F(FilterV6, LaterFragmentsFollowTheFirstOrWaitForIt) {
  ASSERT_TRUE(engine.listen(Proto::udp, 9000, kNode1).ok());
  const Bytes dgram = udp_datagram(5000, 9000, 3000);
  auto piece = [&](std::size_t off, std::size_t len, bool more, std::uint32_t id) {
    return ip6_frame(kRemote, kShared6, ipv6::kFragment,
                     with_fragment(ipv6::kUdp, off, more, id, std::span(dgram).subspan(off, len)));
  };
  EXPECT_EQ(classify(piece(0, 1448, true, 1)), to_node(Reason::listen_hit, kNode1));
  EXPECT_EQ(classify(piece(1448, 1448, true, 1)), to_node(Reason::frag_follow, kNode1));
  // Another datagram's tail first: held, then released by its first.
  EXPECT_EQ(classify(piece(2896, dgram.size() - 2896, false, 2)).action, Action::held);
  EXPECT_EQ(engine.held_fragments(), 1u);
  EXPECT_EQ(classify(piece(0, 1448, true, 2)), to_node(Reason::listen_hit, kNode1));
  std::vector<ReleasedFrame> released = engine.take_released();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].decision, to_node(Reason::frag_follow, kNode1));
  EXPECT_EQ(released[0].frame, piece(2896, dgram.size() - 2896, false, 2));
  // The same id from another source is another datagram (RFC 8200 4.5).
  const Bytes stray = ip6_frame(kRemote2, kShared6, ipv6::kFragment,
                                with_fragment(ipv6::kUdp, 1448, true, 1, std::span(dgram).subspan(1448, 1448)));
  EXPECT_EQ(classify(stray).action, Action::held);
  clock.advance(31s);
  engine.expire();
  EXPECT_EQ(engine.held_fragments(), 0u);
}

TEST_F(FilterV6, RulesSeeIpv6Frames) {
  RuleResult r = engine.add_rule("ip6 and udp dst port 5353", kNode2);
  ASSERT_TRUE(r.ok()) << r.error;
  const IpAddr mdns = ip("ff02::fb");
  EXPECT_EQ(classify(ip6_frame(kRemote, mdns, ipv6::kUdp, udp_datagram(5353, 5353), icmpv6::multicast_mac(mdns))),
            to_node(Reason::rule_hit, kNode2));
  EXPECT_EQ(classify(ip6_frame(kRemote, mdns, ipv6::kUdp, udp_datagram(5353, 5354), icmpv6::multicast_mac(mdns))),
            dropped(Reason::no_owner))
      << "multicast for nobody: no ICMPv6 error (RFC 4443 2.4 (e))";
}

TEST_F(FilterV6, WithoutAnIpv6AddressIpv6IsAnotherEtherType) {
  FilterConfig c = config();
  c.shared_ip6 = IpAddr{};
  FilterEngine v4_only(c, clock);
  EXPECT_EQ(v4_only.classify(tcp6(kRemote, 40000, 80)), dropped(Reason::other_type));
  EXPECT_EQ(v4_only.egress_check(ip6_frame(kShared6, kRemote, ipv6::kTcp, tcp_segment(80, 40000, tcp::kAck)), 1).reason,
            EgressReason::not_ip);
}

// ---- Egress ----

Bytes from_node(const IpAddr& dst, std::uint8_t next_header, const Bytes& body, const IpAddr& src = kShared6) {
  return ip6_frame(src, dst, next_header, body);
}

TEST_F(FilterV6, ANodeSendsOnlyFromTheSharedAddressAndForItsOwnFlows) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::tcp, kRemote, 5001, 40000}, kNode1).ok());
  ASSERT_TRUE(engine.listen(Proto::tcp, 80, kNode2).ok());
  EXPECT_EQ(engine.egress_check(from_node(kRemote, ipv6::kTcp, tcp_segment(40000, 5001, tcp::kAck)), 1).reason,
            EgressReason::flow);
  EXPECT_EQ(engine.egress_check(from_node(kRemote, ipv6::kTcp, tcp_segment(40000, 5001, tcp::kAck)), 2).reason,
            EgressReason::not_owner);
  EXPECT_EQ(engine.egress_check(from_node(kRemote2, ipv6::kTcp, tcp_segment(80, 1234, tcp::kSyn | tcp::kAck)), 2).reason,
            EgressReason::listener);
  EXPECT_EQ(
      engine.egress_check(from_node(kRemote, ipv6::kTcp, tcp_segment(40000, 5001, tcp::kAck), ip("2001:db8::11")), 1)
          .reason,
      EgressReason::bad_source);
  // A node's Neighbor Discovery (from its link-local address) is steer's
  // to answer; echo replies and ND from the shared address are filterd's.
  EXPECT_EQ(engine.egress_check(from_node(icmpv6::solicited_node(kRemote), ipv6::kIcmpv6,
                                          icmp6(icmpv6::kNeighborSolicit, 0, Bytes(16)), ip("fe80::2")),
                                1)
                .reason,
            EgressReason::bad_source);
  EXPECT_EQ(engine.egress_check(from_node(kRemote, ipv6::kIcmpv6, icmp6(icmpv6::kEchoReply, 0x00010001)), 1).reason,
            EgressReason::protocol);
  EXPECT_EQ(engine.egress_check(from_node(kRemote, ipv6::kIcmpv6, icmp6(icmpv6::kNeighborAdvert, 0, Bytes(16))), 1)
                .reason,
            EgressReason::protocol);
  EXPECT_EQ(engine.egress_check(from_node(kRemote, ipv6::kTcp, Bytes(10)), 1).reason, EgressReason::malformed);
}

TEST_F(FilterV6, ANodesPingsErrorsAndFragmentsAreChecked) {
  ASSERT_TRUE(engine.add_flow(FlowKey{Proto::icmp, kRemote, 0, 0x0042}, kNode1).ok());
  EXPECT_TRUE(engine.egress_check(from_node(kRemote, ipv6::kIcmpv6, icmp6(icmpv6::kEchoRequest, 0x00420001)), 1).allowed);
  EXPECT_EQ(engine.egress_check(from_node(kRemote, ipv6::kIcmpv6, icmp6(icmpv6::kEchoRequest, 0x00420001)), 2).reason,
            EgressReason::not_owner);
  // Port unreachable about a datagram node 1 received on its port.
  ASSERT_TRUE(engine.listen(Proto::udp, 9000, kNode1).ok());
  const Bytes got = ip6_packet(kRemote, kShared6, ipv6::kUdp, udp_datagram(5000, 9000));
  EXPECT_EQ(engine.egress_check(from_node(kRemote, ipv6::kIcmpv6, icmp6(icmpv6::kDestUnreachable, 0, got)), 1).reason,
            EgressReason::icmp_error);
  EXPECT_EQ(engine.egress_check(from_node(kRemote, ipv6::kIcmpv6, icmp6(icmpv6::kDestUnreachable, 0, got)), 2).reason,
            EgressReason::not_owner);
  // A fragmented datagram: its first fragment names the flow, the rest
  // are the sender's.
  const Bytes dgram = udp_datagram(9000, 5000, 3000);
  auto piece = [&](std::size_t off, std::size_t len, bool more) {
    return from_node(kRemote, ipv6::kFragment, with_fragment(ipv6::kUdp, off, more, 5, std::span(dgram).subspan(off, len)));
  };
  EXPECT_EQ(engine.egress_check(piece(0, 1448, true), 1).reason, EgressReason::listener);
  EXPECT_EQ(engine.egress_check(piece(1448, 1448, true), 1).reason, EgressReason::fragment);
  EXPECT_EQ(engine.egress_check(piece(1448, 1448, true), 2).reason, EgressReason::not_owner);
  EXPECT_EQ(engine.egress_counts(1).allowed, 4u);
}

}  // namespace
}  // namespace xk::filterd

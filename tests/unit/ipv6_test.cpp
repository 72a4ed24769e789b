// ipv6 alone over a capturing link that carries bare IP packets (packets
// built by hand, fed to demux, what it sends read back), then whole IPv6
// nodes -- eth, nd, ipv6, icmpv6 -- on a pair link: duplicate address
// detection, neighbour resolution and unreachability detection, echo,
// errors and Packet Too Big.
#include "xk/protocols/ipv6.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "doubles.hpp"
#include "xk/checksum.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/icmpv6.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/nd.hpp"

namespace xk {
namespace {

using namespace std::chrono_literals;
using ipv6::FragmentHeader;
using ipv6::Header;

IpAddr v6(std::string_view text) {
  Result<IpAddr> a = parse_ip(text);
  EXPECT_TRUE(a.ok()) << text;
  return a ? *a : IpAddr{};
}

const IpAddr kUs = v6("2001:db8::10");
const IpAddr kPeer = v6("2001:db8::20");
const IpAddr kFar = v6("2001:db8:ffff::7");
const IpAddr kRouter = v6("fe80::1");

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
  return v;
}

std::vector<std::byte> bytes_of(const Msg& m) {
  std::vector<std::byte> v(m.size());
  EXPECT_TRUE(m.copy_out(0, v).ok());
  return v;
}

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + 7) & 0xff);
  return s;
}

// A hand-made IPv6 packet: header, extension bytes, payload.
struct Pkt {
  IpAddr src = kPeer;
  IpAddr dst = kUs;
  std::uint8_t next_header = ipv6::kUdp;
  std::uint8_t hop_limit = 64;
  std::uint8_t version = 6;
  std::vector<std::byte> ext;  // between the header and the payload
  std::string payload;
  std::optional<std::uint16_t> payload_length;

  std::vector<std::byte> bytes() const {
    std::vector<std::byte> b(Header::kSize + ext.size() + payload.size());
    Header h;
    h.version = version;
    h.payload_length = payload_length.value_or(static_cast<std::uint16_t>(ext.size() + payload.size()));
    h.next_header = next_header;
    h.hop_limit = hop_limit;
    h.src = src;
    h.dst = dst;
    h.write(std::span(b).first<Header::kSize>());
    std::copy(ext.begin(), ext.end(), b.begin() + Header::kSize);
    std::memcpy(b.data() + Header::kSize + ext.size(), payload.data(), payload.size());
    return b;
  }
  Msg msg() const { return Msg::copy_of(bytes()); }
};

std::vector<std::byte> fragment_header(std::uint8_t next, std::size_t offset, bool more, std::uint32_t id) {
  std::vector<std::byte> b(FragmentHeader::kSize);
  FragmentHeader f{next, static_cast<std::uint16_t>(offset / 8), more, id};
  f.write(std::span(b).first<FragmentHeader::kSize>());
  return b;
}

Header header_of(const Msg& m) {
  std::array<std::byte, Header::kSize> b{};
  EXPECT_TRUE(m.copy_out(0, b).ok());
  return Header::read(b);
}

// Stands in for icmpv6: records what ipv6 asks for.
class ErrorSink final : public ipv6::IcmpErrorSink {
 public:
  Status send_error(std::uint8_t type, std::uint8_t code, std::uint32_t param, const Msg& original) override {
    calls.push_back({type, code, param, original.size()});
    return {};
  }
  struct Call {
    std::uint8_t type, code;
    std::uint32_t param;
    std::size_t original_size;
  };
  std::vector<Call> calls;
};

Participants remote(const IpAddr& peer, std::uint32_t proto) {
  Participants p;
  p.remote.push(peer);
  p.remote.push(ProtoNum{proto});
  return p;
}

Participants local_proto(std::uint32_t proto) {
  Participants p;
  p.local.push(ProtoNum{proto});
  return p;
}

struct Ipv6Test : ::testing::Test {
  ManualClock clock;
  EventLoop loop{clock};
  test::CaptureDriver link{{.mac = std::nullopt, .mtu = 1500, .header_room = std::size_t{0}}};
  std::unique_ptr<ipv6::Ipv6Protocol> ip;
  test::App tp{"tp0"};
  ErrorSink errors;
  SessionRef rx;

  void SetUp() override { make(config()); }
  static ipv6::Config config() {
    ipv6::Config c;
    c.addrs = {IpCidr{kUs, 64}};
    return c;
  }
  void make(ipv6::Config c) {
    rx = nullptr;
    ip.reset();
    ip = std::make_unique<ipv6::Ipv6Protocol>("ip6", link, nullptr, loop.timers(), std::move(c));
    ip->attach_icmp(&errors);
    rx = link.rx_session();
  }
  void TearDown() override {
    tp.opened.clear();
    rx = nullptr;
    ip.reset();
  }
  Status feed(const Pkt& p) { return ip->demux(*rx, p.msg()); }
  Status feed(Msg m) { return ip->demux(*rx, std::move(m)); }
  void listen(std::uint32_t proto = ipv6::kUdp) {
    auto en = local_proto(proto);
    ASSERT_TRUE(ip->open_enable(tp, en).ok());
  }
  std::uint64_t count(std::string_view name) const { return ip->counters().value(name); }
  void advance(Duration d) {
    clock.advance(d);
    loop.timers().advance();
  }
  // What we sent, turned around: as if the peer had sent it to us.
  Msg reflected(const Msg& sent) {
    std::vector<std::byte> b = bytes_of(sent);
    Header h = Header::read(std::span(b).first<Header::kSize>());
    std::swap(h.src, h.dst);
    h.write(std::span(b).first<Header::kSize>());
    return Msg::copy_of(b);
  }
};

// ---- receive ----------------------------------------------------------------

TEST_F(Ipv6Test, DeliversToTheEnabledProtocolWithThePacketsFacts) {
  listen();
  EXPECT_EQ(link.enabled_type, 0x86ddu);
  Pkt p;
  p.payload = "hello";
  p.hop_limit = 3;
  ASSERT_TRUE(feed(p).ok());
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, "hello");
  EXPECT_EQ(tp.received[0].info.src, kPeer);
  EXPECT_EQ(tp.received[0].info.dst, kUs);
  EXPECT_EQ(tp.received[0].info.protocol, ipv6::kUdp);
  EXPECT_EQ(tp.received[0].info.hop_limit, 3);
  EXPECT_FALSE(tp.received[0].info.reassembled);
  EXPECT_EQ(*tp.last_parts.remote.pop<ProtoNum>(), ProtoNum{ipv6::kUdp});
  EXPECT_EQ(*tp.last_parts.remote.pop<IpAddr>(), kPeer);
  EXPECT_EQ(*tp.last_parts.local.pop<IpAddr>(), kUs);
  ASSERT_TRUE(feed(p).ok());
  EXPECT_EQ(tp.opened.size(), 1u) << "the second packet finds the session";
  EXPECT_EQ(count("rx_delivered"), 2u);
}

TEST_F(Ipv6Test, RefusesWhatIsNotAWellFormedPacketForUs) {
  listen();
  EXPECT_EQ(feed(Msg::copy_of(bytes_of("short"))).error(), Errc::malformed);
  EXPECT_EQ(count("drop_truncated"), 1u);
  Pkt p;
  p.payload = "x";
  p.version = 4;
  EXPECT_FALSE(feed(p).ok());
  EXPECT_EQ(count("drop_bad_version"), 1u);
  p = Pkt{};
  p.payload = "abc";
  p.payload_length = 10;
  EXPECT_FALSE(feed(p).ok());
  EXPECT_EQ(count("drop_truncated"), 2u);
  p = Pkt{};
  p.src = v6("ff02::1");
  EXPECT_FALSE(feed(p).ok());
  p.src = IpAddr(Ipv4Addr{0xC0000201});  // ::ffff:192.0.2.1 on an IPv6 wire
  EXPECT_FALSE(feed(p).ok());
  EXPECT_EQ(count("drop_bad_src"), 2u);
  p = Pkt{};
  p.dst = kPeer;
  EXPECT_FALSE(feed(p).ok());
  p.dst = v6("ff02::2");  // all-routers: we are a host
  EXPECT_FALSE(feed(p).ok());
  EXPECT_EQ(count("drop_not_for_us"), 2u);
  EXPECT_TRUE(tp.received.empty());
}

TEST_F(Ipv6Test, TrimsLinkPaddingAndTakesOurGroups) {
  listen();
  Pkt p;
  p.payload = "data";
  std::vector<std::byte> b = p.bytes();
  b.resize(b.size() + 10);  // Ethernet's padding
  ASSERT_TRUE(feed(Msg::copy_of(b)).ok());
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, "data");
  p.dst = v6("ff02::1");
  ASSERT_TRUE(feed(p).ok());
  p.dst = icmpv6::solicited_node(kUs);
  ASSERT_TRUE(feed(p).ok());
  ASSERT_EQ(tp.received.size(), 3u);
  EXPECT_TRUE(tp.received[1].info.broadcast) << "a group destination is not unicast";
}

TEST_F(Ipv6Test, WalksExtensionHeadersToTheTransport) {
  listen();
  Pkt p;
  p.next_header = ipv6::kHopByHop;
  // Hop-by-hop: next = destination options, length 0, PadN of 4.
  p.ext = {std::byte{ipv6::kDestOptions}, std::byte{0}, std::byte{1}, std::byte{4},
           std::byte{0},                  std::byte{0}, std::byte{0}, std::byte{0},
           // Destination options: next = UDP, length 0, Pad1 x6.
           std::byte{ipv6::kUdp}, std::byte{0}, std::byte{0}, std::byte{0},
           std::byte{0},          std::byte{0}, std::byte{0}, std::byte{0}};
  p.payload = "behind two headers";
  ASSERT_TRUE(feed(p).ok());
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, "behind two headers");
  EXPECT_EQ(count("rx_ext_headers"), 1u);
}

TEST_F(Ipv6Test, AChainItRefusesIsDroppedAndAnsweredWithTheRightPointer) {
  listen();
  Pkt p;
  p.next_header = ipv6::kDestOptions;
  // Destination options, then hop-by-hop, which may only come first.
  p.ext = {std::byte{ipv6::kHopByHop}, std::byte{0}, std::byte{1}, std::byte{4},
           std::byte{0},               std::byte{0}, std::byte{0}, std::byte{0},
           std::byte{ipv6::kUdp},      std::byte{0}, std::byte{1}, std::byte{4},
           std::byte{0},               std::byte{0}, std::byte{0}, std::byte{0}};
  EXPECT_FALSE(feed(p).ok());
  EXPECT_EQ(count("drop_chain"), 1u);
  ASSERT_EQ(errors.calls.size(), 1u);
  EXPECT_EQ(errors.calls[0].type, icmpv6::kParamProblem);
  EXPECT_EQ(errors.calls[0].code, ipv6::kUnrecognizedNextHeader);
  EXPECT_EQ(errors.calls[0].param, 40u) << "the Next Header byte of the destination options";
  EXPECT_TRUE(tp.received.empty());
}

TEST_F(Ipv6Test, UnknownNextHeaderAsksForAParameterProblemAtItsByte) {
  Pkt p;
  p.next_header = 253;  // experimental (RFC 3692): nobody enabled it
  p.payload = "??";
  EXPECT_EQ(feed(p).error(), Errc::proto_unreachable);
  EXPECT_EQ(count("drop_unknown_next_header"), 1u);
  ASSERT_EQ(errors.calls.size(), 1u);
  EXPECT_EQ(errors.calls[0].code, ipv6::kUnrecognizedNextHeader);
  EXPECT_EQ(errors.calls[0].param, 6u);
  // Not about a packet to a group.
  p.dst = v6("ff02::1");
  (void)feed(p);
  EXPECT_EQ(errors.calls.size(), 1u);
}

TEST_F(Ipv6Test, PortUnreachableFromTheTransportIsAskedOfIcmpv6) {
  listen();
  tp.answer = Errc::port_unreachable;
  Pkt p;
  p.payload = "to a closed port";
  (void)feed(p);
  ASSERT_EQ(errors.calls.size(), 1u);
  EXPECT_EQ(errors.calls[0].type, icmpv6::kDestUnreachable);
  EXPECT_EQ(errors.calls[0].code, icmpv6::kPortUnreachable);
  EXPECT_EQ(errors.calls[0].original_size, Header::kSize + p.payload.size()) << "quoted from the IPv6 header";
}

// ---- send -------------------------------------------------------------------

TEST_F(Ipv6Test, SendsAWellFormedHeaderWithOneFlowLabelPerFlow) {
  auto parts = remote(kPeer, ipv6::kUdp);
  Result<SessionRef> s = ip->open(tp, parts);
  ASSERT_TRUE(s.ok());
  auto udp_like = [](std::uint16_t sport, std::uint16_t dport) {
    std::vector<std::byte> b(12);
    store_be16(b.data(), sport);
    store_be16(b.data() + 2, dport);
    return Msg::copy_of(b);
  };
  ASSERT_TRUE((*s)->push(udp_like(1000, 2000)).ok());
  ASSERT_TRUE((*s)->push(udp_like(1000, 2000)).ok());
  ASSERT_TRUE((*s)->push(udp_like(1001, 2000)).ok());
  ASSERT_TRUE((*s)->push(udp_like(1000, 2000)).ok());  // the session remembers one flow's label
  ASSERT_TRUE(ip->send(kPeer, ipv6::kUdp, udp_like(1000, 2000)).ok());  // and no session at all
  ASSERT_EQ(link.sent.size(), 5u);
  const Header h = header_of(link.sent[0]);
  EXPECT_EQ(h.version, 6);
  EXPECT_EQ(h.payload_length, 12);
  EXPECT_EQ(h.next_header, ipv6::kUdp);
  EXPECT_EQ(h.hop_limit, 64);
  EXPECT_EQ(h.src, kUs);
  EXPECT_EQ(h.dst, kPeer);
  EXPECT_NE(h.flow_label, 0u);
  EXPECT_EQ(header_of(link.sent[1]).flow_label, h.flow_label) << "one flow, one label";
  EXPECT_NE(header_of(link.sent[2]).flow_label, h.flow_label) << "another port, another flow";
  EXPECT_EQ(header_of(link.sent[3]).flow_label, h.flow_label) << "the first flow again";
  EXPECT_EQ(header_of(link.sent[4]).flow_label, h.flow_label) << "the label is the flow's, not the session's";
  EXPECT_EQ(*(*s)->control(ctl::GetMtu{}), 1460u);
  Result<Participant> local = (*s)->control(ctl::GetLocalAddr{});
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local->peek<IpAddr>(), kUs);
}

TEST_F(Ipv6Test, ASocketsHopLimitAndTrafficClassReachTheHeader) {
  Msg m = Msg::copy_of(bytes_of("tuned"));
  m.offload().hop_limit = 7;  // IPV6_UNICAST_HOPS
  m.offload().tos = 0xb8;     // IPV6_TCLASS
  ASSERT_TRUE(ip->send(kPeer, ipv6::kUdp, std::move(m)).ok());
  ASSERT_TRUE(ip->send(kPeer, ipv6::kUdp, Msg::copy_of(bytes_of("plain"))).ok());
  ASSERT_EQ(link.sent.size(), 2u);
  EXPECT_EQ(header_of(link.sent[0]).hop_limit, 7);
  EXPECT_EQ(header_of(link.sent[0]).traffic_class, 0xb8);
  EXPECT_EQ(header_of(link.sent[1]).hop_limit, 64);
  EXPECT_EQ(header_of(link.sent[1]).traffic_class, 0);
}

TEST_F(Ipv6Test, RoutesOnLinkDirectAndElsewhereOnlyThroughARouter) {
  EXPECT_EQ(ip->send(kFar, ipv6::kUdp, Msg::copy_of(bytes_of("x"))).error(), Errc::no_route);
  EXPECT_EQ(count("drop_no_route"), 1u);
  ipv6::Config c = config();
  c.gw = kRouter;
  make(c);
  ASSERT_TRUE(ip->send(kFar, ipv6::kUdp, Msg::copy_of(bytes_of("x"))).ok());
  EXPECT_EQ(header_of(link.sent.back()).dst, kFar);
  // A router off every prefix and not link-local is a configuration error.
  c.gw = kFar;
  EXPECT_THROW(make(c), std::invalid_argument);
}

TEST_F(Ipv6Test, FragmentsWhatDoesNotFitAndReassemblesItBack) {
  listen();
  const std::string data = pattern(3000);
  ASSERT_TRUE(ip->send(kPeer, ipv6::kUdp, Msg::copy_of(bytes_of(data))).ok());
  ASSERT_EQ(link.sent.size(), 3u);
  std::uint32_t id = 0;
  std::size_t next_offset = 0;
  for (std::size_t i = 0; i < link.sent.size(); ++i) {
    const Msg& m = link.sent[i];
    EXPECT_LE(m.size(), 1500u);
    const Header h = header_of(m);
    EXPECT_EQ(h.next_header, ipv6::kFragment);
    std::array<std::byte, FragmentHeader::kSize> fb{};
    ASSERT_TRUE(m.copy_out(Header::kSize, fb).ok());
    const FragmentHeader f = FragmentHeader::read(fb);
    EXPECT_EQ(f.next_header, ipv6::kUdp);
    EXPECT_EQ(f.offset(), next_offset);
    EXPECT_EQ(f.more, i + 1 < link.sent.size());
    if (i == 0) id = f.id;
    EXPECT_EQ(f.id, id);
    next_offset += m.size() - Header::kSize - FragmentHeader::kSize;
  }
  EXPECT_EQ(next_offset, data.size());
  EXPECT_EQ(count("tx_fragments"), 3u);
  // Back in, last first.
  for (std::size_t i = link.sent.size(); i-- > 0;) ASSERT_TRUE(feed(reflected(link.sent[i])).ok());
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, data);
  EXPECT_TRUE(tp.received[0].info.reassembled);
  EXPECT_EQ(count("reasm_ok"), 1u);
  EXPECT_EQ(ip->reassemblies(), 0u);
}

TEST_F(Ipv6Test, OverlappingFragmentsDropTheWholePacket) {
  listen();
  auto frag = [](std::size_t offset, bool more, const std::string& body) {
    Pkt p;
    p.next_header = ipv6::kFragment;
    p.ext = fragment_header(ipv6::kUdp, offset, more, 77);
    p.payload = body;
    return p;
  };
  ASSERT_TRUE(feed(frag(0, true, std::string(16, 'a'))).ok());
  EXPECT_FALSE(feed(frag(8, true, std::string(16, 'b'))).ok());  // overlaps 8..16
  EXPECT_TRUE(feed(frag(16, false, std::string(8, 'c'))).ok());
  EXPECT_TRUE(tp.received.empty());
  EXPECT_EQ(count("drop_reasm_overlap"), 1u);
  // The timeout clears what is left.
  advance(61s);
  EXPECT_EQ(ip->reassemblies(), 0u);
}

TEST_F(Ipv6Test, AnAtomicFragmentIsAWholePacket) {
  listen();
  Pkt p;
  p.next_header = ipv6::kFragment;
  p.ext = fragment_header(ipv6::kUdp, 0, false, 5);
  p.payload = "atomic";
  ASSERT_TRUE(feed(p).ok());
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, "atomic");
  EXPECT_TRUE(tp.received[0].info.reassembled) << "it came with a fragment header (RFC 6980 looks)";
  EXPECT_EQ(count("rx_atomic_fragments"), 1u);
  EXPECT_EQ(ip->reassemblies(), 0u);
}

TEST_F(Ipv6Test, NoFragmentsWhenTheSessionAsksForNone) {
  auto parts = remote(kPeer, ipv6::kTcp);
  Result<SessionRef> s = ip->open(tp, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->control(ctl::SetDontFragment{true}).ok());
  EXPECT_EQ((*s)->push(Msg::copy_of(bytes_of(pattern(1461)))).error(), Errc::too_large);
  ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of(pattern(1460)))).ok());
  EXPECT_EQ(count("drop_tx_too_large"), 1u);
}

TEST_F(Ipv6Test, PacketTooBigLowersThePathMtuUntilItTimesOut) {
  EXPECT_EQ(ip->path_mtu(kPeer), 1500u);
  EXPECT_EQ(ip->update_path_mtu(kPeer, 1400), 1400u);
  EXPECT_EQ(ip->update_path_mtu(kPeer, 1450), 1400u) << "an increase is ignored";
  EXPECT_EQ(ip->update_path_mtu(kPeer, 600), 1280u) << "never below the IPv6 minimum";
  EXPECT_EQ(ip->path_mtu(v6("2001:db8::21")), 1500u) << "per destination";
  ASSERT_TRUE(ip->send(kPeer, ipv6::kUdp, Msg::copy_of(bytes_of(pattern(1400)))).ok());
  ASSERT_EQ(link.sent.size(), 2u) << "cut for 1280";
  EXPECT_LE(link.sent[0].size(), 1280u);
  EXPECT_EQ(count("pmtu_lowered"), 2u);
  advance(601s);
  EXPECT_EQ(ip->path_mtu(kPeer), 1500u) << "RFC 8201: tried larger again after the timeout";
}

TEST_F(Ipv6Test, APacketToOurselvesComesBackWithoutTheLink) {
  listen();
  ASSERT_TRUE(ip->send(kUs, ipv6::kUdp, Msg::copy_of(bytes_of("me"))).ok());
  EXPECT_TRUE(link.sent.empty());
  EXPECT_TRUE(tp.received.empty()) << "delivered from the loop, not inside send";
  advance(0s);
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, "me");
  EXPECT_EQ(tp.received[0].info.src, kUs);
}

TEST_F(Ipv6Test, RefusesTheOtherFamilysPeersAndAddresses) {
  auto parts = remote(IpAddr(Ipv4Addr{0xC0000214}), ipv6::kUdp);
  EXPECT_EQ(ip->open(tp, parts).error(), Errc::unsupported) << "ipv4's";
  ipv6::Config c;
  c.addrs = {IpCidr{IpAddr(Ipv4Addr{0xC000020A}), 24}};
  EXPECT_THROW(make(c), std::invalid_argument);
}

// ---- whole nodes on a pair link -----------------------------------------------

const MacAddr kMacA{{0x02, 0, 0, 0, 0, 0x0a}};
const MacAddr kMacB{{0x02, 0, 0, 0, 0, 0x0b}};

struct Node {
  Node(drivers::PairHub& hub, EventLoop& loop, const std::string& tag, MacAddr mac, std::vector<IpCidr> addrs,
       nd::NdConfig ndc, std::optional<ipv6::Config> ipc = std::nullopt)
      : drv("net" + tag, hub.link("wire"), driver_config(mac), &loop),
        eth("eth" + tag, drv),
        nd("nd" + tag, eth, loop, std::move(ndc)),
        ip("ip" + tag, eth, &nd, loop.timers(), ipc.value_or(ip_config(std::move(addrs)))),
        icmp("icmp" + tag, ip, &nd, &loop.clock(), icmpv6::Config{}),
        app("app" + tag) {
    auto en = local_proto(ipv6::kUdp);
    EXPECT_TRUE(ip.open_enable(app, en).ok());
  }
  static drivers::PairDriver::Config driver_config(MacAddr m) {
    drivers::PairDriver::Config c;
    c.mac = m;
    return c;
  }
  static ipv6::Config ip_config(std::vector<IpCidr> addrs) {
    ipv6::Config c;
    c.addrs = std::move(addrs);
    return c;
  }
  std::uint64_t nd_count(std::string_view n) const { return nd.counters().value(n); }
  std::uint64_t icmp_count(std::string_view n) const { return icmp.counters().value(n); }

  drivers::PairDriver drv;
  eth::EthProtocol eth;
  nd::NdProtocol nd;
  ipv6::Ipv6Protocol ip;
  icmpv6::Icmpv6Protocol icmp;
  test::App app;
};

// An ICMPv6 message with its checksum, for `ip` to send.
Msg icmp_message(std::uint8_t type, std::uint32_t rest, std::string_view body, const IpAddr& src, const IpAddr& dst) {
  std::vector<std::byte> m(icmpv6::Header::kSize + body.size());
  icmpv6::Header h;
  h.type = type;
  h.rest = rest;
  h.write(std::span(m).first<icmpv6::Header::kSize>());
  std::memcpy(m.data() + icmpv6::Header::kSize, body.data(), body.size());
  const std::uint32_t pseudo = csum::pseudo_header(src, dst, ipv6::kIcmpv6, static_cast<std::uint32_t>(m.size()));
  const std::uint16_t c = csum::finish(csum::partial(m.data(), m.size(), pseudo));
  std::memcpy(m.data() + 2, &c, 2);
  return Msg::copy_of(m);
}

struct Ipv6Pair : ::testing::Test {
  ManualClock clock;
  EventLoop loop_a{clock};
  EventLoop loop_b{clock};
  drivers::PairHub hub;
  std::unique_ptr<Node> a;
  std::unique_ptr<Node> b;
  const IpAddr ga = v6("2001:db8::a");
  const IpAddr gb = v6("2001:db8::b");

  void make(nd::NdConfig ca = {}, nd::NdConfig cb = {}, std::optional<IpAddr> b_addr = std::nullopt) {
    a = std::make_unique<Node>(hub, loop_a, "A", kMacA, std::vector<IpCidr>{{ga, 64}}, ca);
    b = std::make_unique<Node>(hub, loop_b, "B", kMacB, std::vector<IpCidr>{{b_addr.value_or(gb), 64}}, cb);
    pump();
  }
  void TearDown() override {
    b.reset();
    a.reset();
  }
  void pump() {
    for (int i = 0; i < 1000; ++i) {
      if (loop_a.run_once() + loop_b.run_once() == 0) return;
    }
    ADD_FAILURE() << "the loops never went idle";
  }
  void advance_in_steps(Duration total, Duration step = 100ms) {
    for (Duration t{0}; t < total; t += step) {
      clock.advance(step);
      pump();
    }
  }
  // Both nodes past their duplicate checks.
  void settle() { advance_in_steps(1100ms); }
};

TEST_F(Ipv6Pair, AddressesAreTentativeUntilTheirDuplicateCheckPasses) {
  make();
  EXPECT_EQ(a->nd.address_state(ga), nd::NdProtocol::AddrState::tentative);
  EXPECT_FALSE(a->ip.source_for(gb).has_value()) << "a tentative address is not a source";
  EXPECT_EQ(a->ip.send(gb, ipv6::kUdp, Msg::copy_of(bytes_of("early"))).error(), Errc::bad_state);
  EXPECT_EQ(a->nd_count("tx_solicits"), 2u) << "one probe from :: per address (link-local and global)";
  EXPECT_EQ(a->nd_count("tx_reports"), 1u) << "both addresses end in ::a: one solicited-node group, one report";
  settle();
  EXPECT_EQ(a->nd.address_state(ga), nd::NdProtocol::AddrState::preferred);
  EXPECT_EQ(a->nd.address_state(*a->ip.link_local()), nd::NdProtocol::AddrState::preferred);
  EXPECT_EQ(a->nd_count("dad_ok"), 2u);
  EXPECT_EQ(b->nd_count("dad_duplicate"), 0u);
}

TEST_F(Ipv6Pair, ANodeCheckingAnAddressInUseGivesItUp) {
  make();
  settle();
  // B goes, and another node comes up with A's global address: A defends it.
  b.reset();
  Node c(hub, loop_b, "C", MacAddr{{0x02, 0, 0, 0, 0, 0x0c}}, {{ga, 64}}, {});
  for (int i = 0; i < 20; ++i) {
    clock.advance(100ms);
    pump();
  }
  EXPECT_EQ(c.nd.address_state(ga), nd::NdProtocol::AddrState::duplicate);
  EXPECT_EQ(c.nd_count("dad_duplicate"), 1u);
  EXPECT_EQ(c.nd.address_state(*c.ip.link_local()), nd::NdProtocol::AddrState::preferred)
      << "its link-local address is its own";
  EXPECT_EQ(a->nd.address_state(ga), nd::NdProtocol::AddrState::preferred) << "A keeps it";
  EXPECT_EQ(c.ip.send(v6("2001:db8::99"), ipv6::kUdp, Msg::copy_of(bytes_of("x"))).error(), Errc::bad_state)
      << "no global source to send from";
}

TEST_F(Ipv6Pair, AProbeForOurTentativeAddressMeansTwoNodesCheckIt) {
  make();
  ASSERT_EQ(b->nd.address_state(gb), nd::NdProtocol::AddrState::tentative);
  // Another node's duplicate check for gb, from :: as RFC 4862 5.4.2 has it.
  std::string body(16, '\0');
  std::memcpy(body.data(), gb.bytes().data(), 16);
  const IpAddr group = icmpv6::solicited_node(gb);
  ipv6::Ipv6Protocol::SendOptions opts;
  opts.src = IpAddr{};
  opts.hop_limit = 255;
  ASSERT_TRUE(
      a->ip.send(group, ipv6::kIcmpv6, icmp_message(icmpv6::kNeighborSolicit, 0, body, IpAddr{}, group), opts).ok());
  pump();
  EXPECT_EQ(b->nd.address_state(gb), nd::NdProtocol::AddrState::duplicate);
  EXPECT_EQ(b->nd_count("dad_duplicate"), 1u);
  settle();
  EXPECT_EQ(b->nd.address_state(gb), nd::NdProtocol::AddrState::duplicate) << "for good";
}

TEST_F(Ipv6Pair, ResolvesTheNeighbourQueuesMeanwhileAndDelivers) {
  make();
  settle();
  ASSERT_TRUE(a->ip.send(gb, ipv6::kUdp, Msg::copy_of(bytes_of("one"))).ok());
  ASSERT_TRUE(a->ip.send(gb, ipv6::kUdp, Msg::copy_of(bytes_of("two"))).ok());
  std::optional<nd::NdProtocol::EntryView> e = a->nd.lookup(gb);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->state, nd::NdProtocol::State::incomplete);
  EXPECT_EQ(e->pending, 2u);
  pump();
  ASSERT_EQ(b->app.received.size(), 2u);
  EXPECT_EQ(b->app.received[0].text, "one");
  EXPECT_EQ(b->app.received[1].text, "two");
  EXPECT_EQ(b->app.received[0].info.src, ga);
  e = a->nd.lookup(gb);
  EXPECT_EQ(e->state, nd::NdProtocol::State::reachable) << "a solicited advertisement";
  EXPECT_EQ(e->mac, kMacB);
  std::optional<nd::NdProtocol::EntryView> back = b->nd.lookup(ga);
  ASSERT_TRUE(back.has_value()) << "B learned A from the solicitation's link address";
  EXPECT_EQ(back->state, nd::NdProtocol::State::delay) << "STALE, then used for the advertisement";
  EXPECT_EQ(back->mac, kMacA);
}

TEST_F(Ipv6Pair, UnreachabilityDetectionProbesAStaleNeighbourAndForgetsASilentOne) {
  make();
  settle();
  ASSERT_TRUE(a->ip.send(gb, ipv6::kUdp, Msg::copy_of(bytes_of("hi"))).ok());
  pump();
  ASSERT_EQ(a->nd.lookup(gb)->state, nd::NdProtocol::State::reachable);
  advance_in_steps(46s, 1s);  // past 1.5x the reachable time
  EXPECT_EQ(a->nd.lookup(gb)->state, nd::NdProtocol::State::stale);
  ASSERT_TRUE(a->ip.send(gb, ipv6::kUdp, Msg::copy_of(bytes_of("again"))).ok());
  EXPECT_EQ(a->nd.lookup(gb)->state, nd::NdProtocol::State::delay) << "sent at once, confirmation later";
  pump();
  EXPECT_EQ(b->app.received.size(), 2u);
  const std::uint64_t solicits = a->nd_count("tx_solicits");
  advance_in_steps(5100ms);
  EXPECT_GT(a->nd_count("tx_solicits"), solicits) << "a unicast probe";
  EXPECT_EQ(a->nd.lookup(gb)->state, nd::NdProtocol::State::reachable) << "B answered the probe";
  // B goes away: the probes go unanswered and the entry goes.
  b.reset();
  advance_in_steps(46s, 1s);
  ASSERT_TRUE(a->ip.send(gb, ipv6::kUdp, Msg::copy_of(bytes_of("anyone?"))).ok());
  advance_in_steps(9s);
  EXPECT_FALSE(a->nd.lookup(gb).has_value());
  EXPECT_EQ(a->nd_count("probe_failed"), 1u);
}

TEST_F(Ipv6Pair, AnUnansweredResolutionDropsItsQueue) {
  make();
  settle();
  const IpAddr nobody = v6("2001:db8::99");
  ASSERT_TRUE(a->ip.send(nobody, ipv6::kUdp, Msg::copy_of(bytes_of("lost"))).ok());
  advance_in_steps(3500ms);
  EXPECT_FALSE(a->nd.lookup(nobody).has_value());
  EXPECT_EQ(a->nd_count("resolve_failed"), 1u);
  EXPECT_EQ(a->nd_count("drop_unresolved"), 1u);
}

TEST_F(Ipv6Pair, EchoRequestsAreAnsweredToUnicastAndToAllNodes) {
  make();
  settle();
  ASSERT_TRUE(a->ip.send(gb, ipv6::kIcmpv6, icmp_message(icmpv6::kEchoRequest, 0x12340001, "ping", ga, gb)).ok());
  pump();
  EXPECT_EQ(b->icmp_count("rx_echo_request"), 1u);
  EXPECT_EQ(a->icmp_count("rx_echo_reply"), 1u);
  const IpAddr all = icmpv6::all_nodes();
  const IpAddr lla = *a->ip.link_local();
  ipv6::Ipv6Protocol::SendOptions opts;
  opts.src = lla;
  ASSERT_TRUE(
      a->ip.send(all, ipv6::kIcmpv6, icmp_message(icmpv6::kEchoRequest, 0x12340002, "all", lla, all), opts).ok());
  pump();
  EXPECT_EQ(b->icmp_count("rx_echo_request"), 2u);
  EXPECT_EQ(a->icmp_count("rx_echo_reply"), 2u);
  // A bad checksum is dropped.
  Msg bad = icmp_message(icmpv6::kEchoRequest, 0x12340003, "bad", ga, gb);
  std::vector<std::byte> raw = bytes_of(bad);
  raw[9] ^= std::byte{1};
  ASSERT_TRUE(a->ip.send(gb, ipv6::kIcmpv6, Msg::copy_of(raw)).ok());
  pump();
  EXPECT_EQ(b->icmp_count("drop_bad_csum"), 1u);
  EXPECT_EQ(a->icmp_count("rx_echo_reply"), 2u);
}

TEST_F(Ipv6Pair, AClosedPortIsReportedBackToTheSendersTransport) {
  make();
  settle();
  b->app.answer = Errc::port_unreachable;
  std::vector<std::byte> udp(8);
  store_be16(udp.data(), 4000);
  store_be16(udp.data() + 2, 5000);
  ASSERT_TRUE(a->ip.send(gb, ipv6::kUdp, Msg::copy_of(udp)).ok());
  pump();
  EXPECT_EQ(b->icmp_count("tx_errors"), 1u);
  ASSERT_EQ(a->app.net_errors.size(), 1u);
  const ctl::NetError& e = a->app.net_errors[0];
  EXPECT_EQ(e.kind, ctl::NetError::Kind::unreachable);
  EXPECT_EQ(e.icmp_code, icmpv6::kPortUnreachable);
  EXPECT_EQ(e.local, ga);
  EXPECT_EQ(e.remote, gb);
  EXPECT_EQ(e.local_port.value, 4000);
  EXPECT_EQ(e.remote_port.value, 5000);
}

TEST_F(Ipv6Pair, PacketTooBigLowersThePathAndTellsTheTransport) {
  make();
  settle();
  // B quotes a packet A sent it, as a router on the way would.
  Pkt quoted;
  quoted.src = ga;
  quoted.dst = gb;
  quoted.payload = std::string("\x0f\xa0\x13\x88", 4) + std::string(100, 'q');
  std::string body(reinterpret_cast<const char*>(quoted.bytes().data()), quoted.bytes().size());
  ASSERT_TRUE(b->ip.send(ga, ipv6::kIcmpv6, icmp_message(icmpv6::kPacketTooBig, 1300, body, gb, ga)).ok());
  pump();
  EXPECT_EQ(a->ip.path_mtu(gb), 1300u);
  ASSERT_EQ(a->app.net_errors.size(), 1u);
  EXPECT_EQ(a->app.net_errors[0].kind, ctl::NetError::Kind::frag_needed);
  EXPECT_EQ(a->app.net_errors[0].next_hop_mtu, 1300);
  EXPECT_EQ(a->app.net_errors[0].local_port.value, 4000);
}

TEST_F(Ipv6Pair, NeighborDiscoveryFromBeyondTheLinkIsDropped) {
  make();
  settle();
  // A solicitation for B's address with hop limit 254: routed, so forged.
  std::string body(16, '\0');
  std::memcpy(body.data(), gb.bytes().data(), 16);
  ipv6::Ipv6Protocol::SendOptions opts;
  opts.hop_limit = 254;
  opts.src = ga;  // a group destination would get the link-local source
  const IpAddr group = icmpv6::solicited_node(gb);
  ASSERT_TRUE(a->ip.send(group, ipv6::kIcmpv6, icmp_message(icmpv6::kNeighborSolicit, 0, body, ga, group), opts).ok());
  pump();
  EXPECT_EQ(b->nd_count("drop_hop_limit"), 1u);
  EXPECT_EQ(b->nd_count("rx_solicits"), 0u);

}

// A Router Advertisement from B's link-local address: B as default router
// for `lifetime` s, hop limit 64, an MTU option, and 2001:db8:1::/64 on-link
// and autonomous for `valid`/`preferred` s (RFC 4861 4.2, 4.6).
void advertise(Node& b, std::uint16_t lifetime, std::uint32_t valid, std::uint32_t preferred, std::uint32_t mtu) {
  std::string body(8, '\0');  // reachable time, retrans timer: unspecified
  auto put32 = [](std::string& s, std::uint32_t v) {
    for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>(v >> (8 * i)));
  };
  body += std::string("\x01\x01", 2);  // source link-layer address
  body += std::string(reinterpret_cast<const char*>(kMacB.bytes.data()), 6);
  body += std::string("\x03\x04\x40\xc0", 4);  // prefix information: /64, L and A
  put32(body, valid);
  put32(body, preferred);
  put32(body, 0);
  const IpAddr prefix = v6("2001:db8:1::");
  body += std::string(reinterpret_cast<const char*>(prefix.bytes().data()), 16);
  body += std::string("\x05\x01\x00\x00", 4);  // MTU
  put32(body, mtu);
  const IpAddr src = *b.ip.link_local();
  const IpAddr all_nodes = icmpv6::all_nodes();
  ipv6::Ipv6Protocol::SendOptions opts;
  opts.hop_limit = 255;
  opts.src = src;
  const std::uint32_t rest = std::uint32_t{64} << 24 | lifetime;
  ASSERT_TRUE(b.ip.send(all_nodes, ipv6::kIcmpv6, icmp_message(icmpv6::kRouterAdvert, rest, body, src, all_nodes), opts).ok());
}

// A host learns from a router's advertisement what it was not given: its
// default router, an on-link prefix, an address of its own on it (SLAAC,
// after its duplicate check), the link MTU; a lifetime of 0 takes the
// router back, and a short valid lifetime cannot end the address at once.
TEST_F(Ipv6Pair, RouterAdvertisementsGiveARouterAPrefixAnAddressAndTheMtu) {
  make();
  settle();
  EXPECT_GE(a->nd_count("tx_router_solicits"), 1u) << "a host asks for routers when it starts";
  const IpAddr far = v6("2001:db8:99::1");
  EXPECT_EQ(a->ip.send(far, ipv6::kUdp, Msg::copy_of(bytes_of("x"))).error(), Errc::no_route);

  advertise(*b, 1800, 3600, 1800, 1400);
  pump();
  EXPECT_EQ(a->nd_count("rx_router_adverts"), 1u);
  ASSERT_EQ(a->ip.default_routers().size(), 1u);
  EXPECT_EQ(a->ip.default_routers()[0], *b->ip.link_local());
  EXPECT_EQ(a->ip.link_mtu(), 1400u);
  EXPECT_EQ(a->ip.config().hop_limit, 64);
  // Off-link now goes to the router (B's MAC: B receives it, not for it).
  const std::uint64_t b_not_for_us = b->ip.counters().value("drop_not_for_us");
  ASSERT_TRUE(a->ip.send(far, ipv6::kUdp, Msg::copy_of(bytes_of("x"))).ok());
  pump();
  EXPECT_EQ(b->ip.counters().value("drop_not_for_us"), b_not_for_us + 1);
  // SLAAC: 2001:db8:1:: with A's interface identifier, tentative first.
  IpAddr::Bytes mine = v6("2001:db8:1::").bytes();
  const IpAddr ll = *a->ip.link_local();
  std::copy(ll.bytes().begin() + 8, ll.bytes().end(), mine.begin() + 8);
  const IpAddr slaac = IpAddr::v6(mine);
  EXPECT_TRUE(a->ip.is_ours(slaac));
  EXPECT_EQ(a->ip.counters().value("ra_addresses"), 1u);
  EXPECT_EQ(a->nd.address_state(slaac), nd::NdProtocol::AddrState::tentative);
  settle();
  EXPECT_EQ(a->nd.address_state(slaac), nd::NdProtocol::AddrState::preferred);
  EXPECT_EQ(a->ip.source_for(v6("2001:db8:1::77")), slaac) << "the source on the advertised prefix";
  const std::uint64_t solicits = a->nd_count("tx_solicits");
  ASSERT_TRUE(a->ip.send(v6("2001:db8:1::77"), ipv6::kUdp, Msg::copy_of(bytes_of("y"))).ok());
  pump();
  EXPECT_GT(a->nd_count("tx_solicits"), solicits) << "on-link: resolved directly, not sent to the router";
  EXPECT_EQ(a->nd_count("tx_router_solicits"), 1u) << "no more solicitations once a router spoke";

  // A valid lifetime of 10 s cannot end the address at once (RFC 4862
  // 5.5.3 e); the router's lifetime 0 withdraws it as a default router.
  advertise(*b, 0, 10, 5, 1400);
  pump();
  EXPECT_TRUE(a->ip.default_routers().empty());
  EXPECT_EQ(a->ip.send(far, ipv6::kUdp, Msg::copy_of(bytes_of("x"))).error(), Errc::no_route);
  advance_in_steps(60s, 5s);
  EXPECT_TRUE(a->ip.is_ours(slaac));
  // Past its valid lifetime (an hour) the address is gone.
  advance_in_steps(3700s, 100s);
  EXPECT_FALSE(a->ip.is_ours(slaac));
  EXPECT_EQ(a->ip.source_for(v6("2001:db8:1::77")), ga);
}

// ra=off: advertisements teach the router's link address only.
TEST_F(Ipv6Pair, WithRaOffAdvertisementsConfigureNothing) {
  make();
  ipv6::Config c = Node::ip_config({{ga, 64}});
  c.accept_ra = false;
  a.reset();
  a = std::make_unique<Node>(hub, loop_a, "A", kMacA, std::vector<IpCidr>{{ga, 64}}, nd::NdConfig{}, c);
  settle();
  EXPECT_EQ(a->nd_count("tx_router_solicits"), 0u);
  advertise(*b, 1800, 3600, 1800, 1400);
  pump();
  EXPECT_EQ(a->nd_count("rx_router_adverts"), 1u);
  EXPECT_TRUE(a->ip.default_routers().empty());
  EXPECT_EQ(a->ip.counters().value("ra_addresses"), 0u);
  EXPECT_EQ(a->ip.link_mtu(), 1500u);
}

}  // namespace
}  // namespace xk

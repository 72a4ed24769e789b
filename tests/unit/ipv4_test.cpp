// ipv4 over a capturing fake link that carries bare IP packets (no eth, no
// arp: the graph composes without them), with a fake NextHopResolver where
// routing is checked. Frames are built by hand, fed to demux, and what ipv4
// sends is read back from the capture.
#include "xk/protocols/ipv4.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "doubles.hpp"
#include "xk/checksum.hpp"
#include "xk/drivers/loopback.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/icmp_wire.hpp"
#include "xk/protocols/tcp.hpp"

namespace xk {
namespace {

using ipv4::Header;

constexpr Ipv4Addr kUs{0xC000020A};       // 192.0.2.10
constexpr Ipv4Addr kPeer{0xC0000214};     // 192.0.2.20
constexpr Ipv4Addr kGw{0xC0000201};       // 192.0.2.1
constexpr Ipv4Addr kFar{0xC6336407};      // 198.51.100.7
constexpr Ipv4Addr kSubnetBcast{0xC00002FF};
constexpr Ipv4Addr kOther{0xC0000263};    // 192.0.2.99: on-link, not us

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

std::string text_of(const Msg& m) {
  std::string s(m.size(), '\0');
  EXPECT_TRUE(m.copy_out(0, std::as_writable_bytes(std::span(s))).ok());
  return s;
}

std::string pattern(std::size_t n, unsigned seed = 0) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) & 0xff);
  return s;
}

// A hand-made IP packet; every field can be wrong on purpose.
struct Pkt {
  Ipv4Addr src = kPeer;
  Ipv4Addr dst = kUs;
  std::uint8_t proto = 17;
  std::uint16_t id = 0x1234;
  std::uint16_t flags_offset = 0;
  std::uint8_t ttl = 64;
  std::uint8_t version = 4;
  std::optional<std::uint8_t> ihl;              // default: from options
  std::optional<std::uint16_t> total_length;    // default: header + payload
  std::vector<std::byte> options;               // multiple of 4
  std::string payload;
  bool corrupt_csum = false;
  std::size_t padding = 0;  // link bytes after the packet

  std::vector<std::byte> bytes() const {
    const std::size_t hl = Header::kMinSize + options.size();
    std::vector<std::byte> b(hl + payload.size() + padding, std::byte{0});
    Header h;
    h.version = version;
    h.ihl = ihl.value_or(static_cast<std::uint8_t>(hl / 4));
    h.total_length = total_length.value_or(static_cast<std::uint16_t>(hl + payload.size()));
    h.id = id;
    h.flags_offset = flags_offset;
    h.ttl = ttl;
    h.protocol = proto;
    h.src = src;
    h.dst = dst;
    h.write(std::span(b).first<Header::kMinSize>());
    std::copy(options.begin(), options.end(), b.begin() + Header::kMinSize);
    ipv4::fill_header_checksum(std::span(b).first(hl));
    if (corrupt_csum) b[10] ^= std::byte{0x01};
    std::memcpy(b.data() + hl, payload.data(), payload.size());
    return b;
  }
  Msg msg() const { return Msg::copy_of(bytes()); }
};

// A resolver in the graph (below[1]): records what ipv4 asks of it.
class FakeResolver final : public Protocol, public NextHopResolver {
 public:
  FakeResolver() : Protocol("arp0", "fake-resolver") {}
  Status send_to(const IpAddr& next_hop, Msg packet) override {
    hops.push_back(next_hop.v4());
    sent.push_back(std::move(packet));
    return answer;
  }
  void add_local_address(const IpAddr& a) override { locals.push_back(a.v4()); }
  std::vector<Ipv4Addr> hops;
  std::vector<Msg> sent;
  std::vector<Ipv4Addr> locals;
  Status answer;
};

// A transport above ipv4 (tests/unit/support/doubles.hpp): records
// deliveries with their packet facts, answers as told, and says which port is
// its own when ipv4 asks (ClaimsOwn).
struct Transport : test::App {
  Transport() : test::App("tp0") { claimed_port = 0; }
};

// Stands in for icmp: records what ipv4 asks for.
class ErrorSink final : public ipv4::IcmpErrorSink {
 public:
  Status send_dest_unreachable(std::uint8_t code, const Msg& original, std::uint16_t mtu) override {
    calls.push_back({code, bytes_of(original), mtu});
    return {};
  }
  struct Call {
    std::uint8_t code;
    std::vector<std::byte> original;
    std::uint16_t mtu;
  };
  std::vector<Call> calls;
};

Participants remote(Ipv4Addr peer, std::uint32_t proto) {
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

Header header_of(const Msg& m) {
  std::array<std::byte, Header::kMinSize> b{};
  EXPECT_TRUE(m.copy_out(0, b).ok());
  return Header::read(b);
}

bool checksum_ok(const Msg& m) {
  Header h = header_of(m);
  std::vector<std::byte> b(h.header_length());
  EXPECT_TRUE(m.copy_out(0, b).ok());
  return ipv4::header_checksum_ok(b);
}

std::string payload_of(const Msg& m) {
  Header h = header_of(m);
  std::string all = text_of(m);
  return all.substr(h.header_length());
}

ipv4::Config config_for(Ipv4Cidr addr) {
  ipv4::Config c;
  c.addr = addr;
  return c;
}

constexpr Ipv4Cidr kCidr{kUs, 24};

struct Ipv4Test : ::testing::Test {
  ManualClock clock;
  EventLoop loop{clock};
  // The link below: a 1500-byte MTU, no header room, records what is pushed.
  test::CaptureDriver link{{.mac = std::nullopt, .mtu = 1500, .header_room = std::size_t{0}}};
  std::unique_ptr<ipv4::Ipv4Protocol> ip;
  Transport tp;
  SessionRef rx;

  void SetUp() override { make(config_for(kCidr)); }
  void make(ipv4::Config c, NextHopResolver* resolver = nullptr) {
    rx = nullptr;
    ip.reset();
    ip = std::make_unique<ipv4::Ipv4Protocol>("ip0", link, resolver, loop.timers(), c);
    rx = link.rx_session();
  }
  void TearDown() override {
    tp.opened.clear();
    rx = nullptr;
    ip.reset();
  }
  Status feed(const Pkt& p) { return ip->demux(*rx, p.msg()); }
  Status feed(Msg m) { return ip->demux(*rx, std::move(m)); }
  void listen(std::uint32_t proto = 17) {
    auto en = local_proto(proto);
    ASSERT_TRUE(ip->open_enable(tp, en).ok());
  }
  std::uint64_t count(std::string_view name) const { return ip->counters().value(name); }
  void advance(Duration d) {
    clock.advance(d);
    loop.timers().advance();
  }
};

// ---- receive: validation ------------------------------------------------

TEST_F(Ipv4Test, PassiveOpenDeliversPayloadAndNamesTheParticipants) {
  listen();
  EXPECT_EQ(link.enabled_type, 0x0800u) << "ipv4 enables its EtherType on the link";
  Pkt p;
  p.payload = "hello";
  ASSERT_TRUE(feed(p).ok());
  ASSERT_EQ(tp.opened.size(), 1u);
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, "hello");
  EXPECT_EQ(tp.received[0].session, tp.opened[0].get());
  EXPECT_EQ(tp.received[0].info.src, IpAddr(kPeer));
  EXPECT_EQ(tp.received[0].info.dst, IpAddr(kUs));
  EXPECT_EQ(tp.received[0].info.protocol, 17);
  EXPECT_FALSE(tp.received[0].info.broadcast);
  EXPECT_FALSE(tp.received[0].info.reassembled);
  // open_done parts: remote {Ipv4Addr peer, ProtoNum} (top last), local {Ipv4Addr dst}.
  EXPECT_EQ(*tp.last_parts.remote.pop<ProtoNum>(), ProtoNum{17});
  EXPECT_EQ(*tp.last_parts.remote.pop<IpAddr>(), IpAddr(kPeer));
  EXPECT_EQ(*tp.last_parts.local.pop<IpAddr>(), IpAddr(kUs));
  // A second packet finds the session in the active map.
  p.payload = "again";
  ASSERT_TRUE(feed(p).ok());
  EXPECT_EQ(tp.opened.size(), 1u);
  EXPECT_EQ(tp.received.size(), 2u);
  EXPECT_EQ(ip->session_count(), 1u);
  EXPECT_EQ(count("rx_delivered"), 2u);
  ASSERT_TRUE(tp.opened[0]->close().ok());
  EXPECT_EQ(ip->session_count(), 0u);
}

TEST_F(Ipv4Test, ActiveSessionSendsAWellFormedHeaderAndReceivesItsPeer) {
  auto parts = remote(kPeer, 6);
  auto s = ip->open(tp, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("segment"))).ok());
  ASSERT_EQ(link.sent.size(), 1u);
  const Msg& out = link.sent[0];
  Header h = header_of(out);
  EXPECT_EQ(h.version, 4);
  EXPECT_EQ(h.ihl, 5);
  EXPECT_EQ(h.total_length, 27);
  EXPECT_EQ(h.ttl, 64);
  EXPECT_EQ(h.protocol, 6);
  EXPECT_EQ(h.src, kUs);
  EXPECT_EQ(h.dst, kPeer);
  EXPECT_FALSE(h.df());
  EXPECT_FALSE(h.is_fragment());
  EXPECT_TRUE(checksum_ok(out));
  EXPECT_EQ(payload_of(out), "segment");
  // Consecutive datagrams get consecutive identifications.
  ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("x"))).ok());
  EXPECT_EQ(header_of(link.sent[1]).id, static_cast<std::uint16_t>(h.id + 1));
  // Inbound from that peer and protocol reaches the active session.
  Pkt p;
  p.proto = 6;
  p.payload = "reply";
  ASSERT_TRUE(feed(p).ok());
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].session, s->get());
  // Same key twice is refused; a wrong local address too.
  auto again = remote(kPeer, 6);
  EXPECT_EQ(ip->open(tp, again).error(), Errc::exists);
  auto bad_local = remote(kPeer, 17);
  bad_local.local.push(kOther);
  EXPECT_EQ(ip->open(tp, bad_local).error(), Errc::invalid_argument);
  auto too_big = remote(kPeer, 256);
  EXPECT_EQ(ip->open(tp, too_big).error(), Errc::invalid_argument);
  ASSERT_TRUE((*s)->close().ok());
}

TEST_F(Ipv4Test, EachBadHeaderFieldHasItsCounter) {
  listen();
  EXPECT_EQ(feed(Msg::copy_of(bytes_of(std::string(19, 'x')))).error(), Errc::malformed);
  EXPECT_EQ(count("drop_truncated"), 1u);
  EXPECT_EQ(feed(Msg()).error(), Errc::malformed);
  EXPECT_EQ(count("drop_truncated"), 2u);

  Pkt v6;
  v6.version = 6;
  EXPECT_EQ(feed(v6).error(), Errc::malformed);
  EXPECT_EQ(count("drop_bad_version"), 1u);

  Pkt short_ihl;
  short_ihl.ihl = 4;
  EXPECT_EQ(feed(short_ihl).error(), Errc::malformed);
  EXPECT_EQ(count("drop_bad_ihl"), 1u);

  Pkt short_total;
  short_total.payload = "abcd";
  short_total.total_length = 19;
  EXPECT_EQ(feed(short_total).error(), Errc::malformed);
  EXPECT_EQ(count("drop_bad_len"), 1u);

  Pkt long_total;
  long_total.payload = "abcd";
  long_total.total_length = 25;
  EXPECT_EQ(feed(long_total).error(), Errc::malformed);
  EXPECT_EQ(count("drop_truncated"), 3u);

  // IHL says 60 bytes of header, the frame has 24 (and total length agrees).
  Pkt ihl_past_frame;
  ihl_past_frame.ihl = 15;
  ihl_past_frame.payload = "abcd";
  EXPECT_EQ(feed(ihl_past_frame).error(), Errc::malformed);
  EXPECT_EQ(count("drop_bad_len"), 2u);

  Pkt bad_csum;
  bad_csum.corrupt_csum = true;
  EXPECT_EQ(feed(bad_csum).error(), Errc::malformed);
  EXPECT_EQ(count("drop_bad_csum"), 1u);

  Pkt bcast_src;
  bcast_src.src = kSubnetBcast;
  EXPECT_EQ(feed(bcast_src).error(), Errc::malformed);
  Pkt mcast_src;
  mcast_src.src = Ipv4Addr{0xE0000001};
  EXPECT_EQ(feed(mcast_src).error(), Errc::malformed);
  EXPECT_EQ(count("drop_bad_src"), 2u);

  Pkt other;
  other.dst = kOther;
  EXPECT_EQ(feed(other).error(), Errc::not_found);
  Pkt mcast;
  mcast.dst = Ipv4Addr{0xE0000001};
  EXPECT_EQ(feed(mcast).error(), Errc::not_found);
  EXPECT_EQ(count("drop_not_for_us"), 2u);

  EXPECT_TRUE(tp.received.empty());
  EXPECT_EQ(count("rx_packets"), 12u);
}

TEST_F(Ipv4Test, ChecksumOffAcceptsABadChecksumAndTtlZeroIsAccepted) {
  listen();
  Pkt p;
  p.ttl = 0;  // a host does not check TTL (RFC 1122 3.2.1.7)
  p.payload = "ttl0";
  ASSERT_TRUE(feed(p).ok());
  ASSERT_TRUE(ip->control(ctl::SetChecksum{ChecksumMode::off}).ok());
  EXPECT_EQ(*ip->control(ctl::GetChecksum{}), ChecksumMode::off);
  p.corrupt_csum = true;
  p.payload = "unchecked";
  ASSERT_TRUE(feed(p).ok());
  ASSERT_EQ(tp.received.size(), 2u);
  EXPECT_EQ(tp.received[1].text, "unchecked");
  EXPECT_EQ(count("drop_bad_csum"), 0u);
}

TEST_F(Ipv4Test, OptionsAreSkippedAndNeverReachThePayload) {
  listen();
  for (std::size_t words : {1u, 2u, 10u}) {
    Pkt p;
    // Record Route with garbage pointers and a NOP: we never parse them.
    p.options.assign(words * 4, std::byte{0x01});
    p.options[0] = std::byte{7};
    p.options[1] = std::byte{0xff};  // a length past IHL: must not matter
    p.payload = "after options " + std::to_string(words);
    ASSERT_TRUE(feed(p).ok()) << words;
    EXPECT_EQ(tp.received.back().text, p.payload);
  }
  EXPECT_EQ(count("rx_options"), 3u);
}

TEST_F(Ipv4Test, LinkPaddingIsTrimmed) {
  listen();
  Pkt p;
  p.payload = "ab";
  p.padding = 24;  // a 60-byte Ethernet minimum
  ASSERT_TRUE(feed(p).ok());
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, "ab");
}

TEST_F(Ipv4Test, BroadcastsAreAcceptedAndMarked) {
  listen();
  Pkt limited;
  limited.dst = ipv4::kLimitedBroadcast;
  ASSERT_TRUE(feed(limited).ok());
  Pkt directed;
  directed.dst = kSubnetBcast;
  ASSERT_TRUE(feed(directed).ok());
  ASSERT_EQ(tp.received.size(), 2u);
  EXPECT_TRUE(tp.received[0].info.broadcast);
  EXPECT_TRUE(tp.received[1].info.broadcast);
  EXPECT_EQ(tp.received[1].info.dst, IpAddr(kSubnetBcast));
}

TEST_F(Ipv4Test, UnknownProtocolIsCountedAndOpenDisableStopsPassiveOpens) {
  Pkt p;
  p.proto = 99;
  EXPECT_EQ(feed(p).error(), Errc::proto_unreachable);
  EXPECT_EQ(count("drop_no_session"), 1u);
  listen(99);
  ASSERT_TRUE(feed(p).ok());
  ASSERT_TRUE(tp.opened[0]->close().ok());
  auto dis = local_proto(99);
  ASSERT_TRUE(ip->open_disable(tp, dis).ok());
  EXPECT_EQ(feed(p).error(), Errc::proto_unreachable);
  Transport other;
  listen(17);
  auto steal = local_proto(17);
  EXPECT_EQ(ip->open_enable(other, steal).error(), Errc::exists);
}

// ---- unreachables and errors -------------------------------------------

TEST_F(Ipv4Test, PortUnreachableFromTheTransportAsksIcmpWithTheWholeOriginal) {
  ErrorSink sink;
  ip->attach_icmp(&sink);
  listen();
  tp.answer = Errc::port_unreachable;
  Pkt p;
  p.payload = "to a closed port, longer than eight bytes";
  EXPECT_EQ(feed(p).error(), Errc::port_unreachable);
  ASSERT_EQ(sink.calls.size(), 1u);
  EXPECT_EQ(sink.calls[0].code, 3);
  EXPECT_EQ(sink.calls[0].original, p.bytes()) << "the header and payload as received";
  EXPECT_EQ(count("icmp_port_unreach"), 1u);
  // Never about a broadcast (RFC 1122 3.2.2).
  p.dst = kSubnetBcast;
  EXPECT_EQ(feed(p).error(), Errc::port_unreachable);
  EXPECT_EQ(sink.calls.size(), 1u);
  // Unknown protocol: protocol unreachable.
  Pkt q;
  q.proto = 200;
  EXPECT_EQ(feed(q).error(), Errc::proto_unreachable);
  ASSERT_EQ(sink.calls.size(), 2u);
  EXPECT_EQ(sink.calls[1].code, 2);
  q.dst = ipv4::kLimitedBroadcast;
  EXPECT_EQ(feed(q).error(), Errc::proto_unreachable);
  EXPECT_EQ(sink.calls.size(), 2u);
  ip->attach_icmp(nullptr);
}

TEST_F(Ipv4Test, DeliverErrorReachesTheProtocolThatEnabledTheNumber) {
  listen(6);
  ctl::NetError e;
  e.kind = ctl::NetError::Kind::frag_needed;
  e.next_hop_mtu = 1400;
  e.local = kUs;
  e.remote = kFar;
  e.protocol = 6;
  ASSERT_TRUE(ip->deliver_error(e).ok());
  ASSERT_EQ(tp.net_errors.size(), 1u);
  EXPECT_EQ(tp.net_errors[0].next_hop_mtu, 1400);
  EXPECT_EQ(tp.net_errors[0].remote, kFar);
  e.protocol = 17;
  EXPECT_EQ(ip->deliver_error(e).error(), Errc::not_found);
  EXPECT_EQ(count("drop_error_no_owner"), 1u);
  // An active session's upper owns its flows too.
  auto parts = remote(kFar, 17);
  auto s = ip->open(tp, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(ip->deliver_error(e).ok());
  EXPECT_EQ(tp.net_errors.size(), 2u);
  EXPECT_EQ(count("errors_delivered"), 2u);
  ASSERT_TRUE((*s)->close().ok());
}

// ---- send: routing, fragmentation ---------------------------------------

TEST_F(Ipv4Test, RoutingOnLinkViaGatewayAndNoRoute) {
  FakeResolver arp;
  ipv4::Config c = config_for(kCidr);
  c.gw = kGw;
  make(c, &arp);
  ASSERT_EQ(arp.locals.size(), 1u);
  EXPECT_EQ(arp.locals[0], kUs);
  EXPECT_EQ(ip->below().size(), 2u);
  ASSERT_TRUE(ip->send(kPeer, 17, Msg::copy_of(bytes_of("on-link"))).ok());
  ASSERT_TRUE(ip->send(kFar, 17, Msg::copy_of(bytes_of("far"))).ok());
  ASSERT_TRUE(ip->send(ipv4::kLimitedBroadcast, 17, Msg::copy_of(bytes_of("all"))).ok());
  ASSERT_TRUE(ip->send(kSubnetBcast, 17, Msg::copy_of(bytes_of("subnet"))).ok());
  ASSERT_EQ(arp.hops.size(), 4u);
  EXPECT_EQ(arp.hops[0], kPeer);
  EXPECT_EQ(arp.hops[1], kGw);
  EXPECT_EQ(header_of(arp.sent[1]).dst, kFar) << "the header names the destination, not the gateway";
  EXPECT_EQ(arp.hops[2], ipv4::kLimitedBroadcast) << "broadcasts: the resolver gets 255.255.255.255";
  EXPECT_EQ(arp.hops[3], ipv4::kLimitedBroadcast);
  EXPECT_EQ(header_of(arp.sent[3]).dst, kSubnetBcast);
  EXPECT_TRUE(link.sent.empty()) << "with a resolver nothing goes to the link directly";
  // The resolver's refusal comes back and is counted.
  arp.answer = Errc::no_route;
  EXPECT_EQ(ip->send(kPeer, 17, Msg::copy_of(bytes_of("x"))).error(), Errc::no_route);
  EXPECT_EQ(count("drop_tx_link"), 1u);

  make(config_for(kCidr), &arp);  // no gateway
  EXPECT_EQ(ip->send(kFar, 17, Msg::copy_of(bytes_of("far"))).error(), Errc::no_route);
  EXPECT_EQ(count("drop_no_route"), 1u);
}

TEST_F(Ipv4Test, GatewayOffTheSubnetIsAConfigurationError) {
  ipv4::Config c = config_for(kCidr);
  c.gw = kFar;
  EXPECT_THROW(ipv4::Ipv4Protocol("ipx", link, nullptr, loop.timers(), c), std::invalid_argument);
}

// Reassemble what we sent by feeding it back, with src/dst swapped so it is
// addressed to us.
Msg as_received(const Msg& sent) {
  std::vector<std::byte> b = bytes_of(sent);
  Header h = Header::read(std::span(b).first<Header::kMinSize>());
  std::swap(h.src, h.dst);
  h.write(std::span(b).first<Header::kMinSize>());
  ipv4::fill_header_checksum(std::span(b).first(h.header_length()));
  return Msg::copy_of(b);
}

TEST_F(Ipv4Test, FragmentationAroundTheMtu) {
  listen();
  struct Case {
    std::size_t payload;
    std::vector<std::size_t> pieces;
  };
  // MTU 1500: 1480 bytes per packet, 1480 (a multiple of 8) per fragment.
  const std::vector<Case> cases = {
      {0, {0}},
      {1479, {1479}},
      {1480, {1480}},
      {1481, {1480, 1}},
      {2960, {1480, 1480}},
      {2961, {1480, 1480, 1}},
      {65515, std::vector<std::size_t>(44, 1480)},
  };
  for (const Case& c : cases) {
    link.sent.clear();
    tp.received.clear();
    std::string data = pattern(c.payload, static_cast<unsigned>(c.payload));
    ASSERT_TRUE(ip->send(kPeer, 17, Msg::copy_of(bytes_of(data))).ok()) << c.payload;
    std::vector<std::size_t> want = c.pieces;
    if (c.payload == 65515) want.push_back(65515 - 44 * 1480);
    ASSERT_EQ(link.sent.size(), want.size()) << c.payload;
    std::size_t offset = 0;
    const std::uint16_t id = header_of(link.sent[0]).id;
    for (std::size_t i = 0; i < want.size(); ++i) {
      Header h = header_of(link.sent[i]);
      EXPECT_EQ(h.total_length, want[i] + 20) << c.payload << " piece " << i;
      EXPECT_LE(link.sent[i].size(), 1500u);
      EXPECT_EQ(h.frag_offset(), offset);
      EXPECT_EQ(h.mf(), i + 1 < want.size());
      EXPECT_EQ(h.id, id);
      EXPECT_TRUE(checksum_ok(link.sent[i]));
      offset += want[i];
    }
    // Feed them back (last first): they reassemble to the original bytes.
    for (std::size_t i = link.sent.size(); i-- > 0;) ASSERT_TRUE(feed(as_received(link.sent[i])).ok());
    ASSERT_EQ(tp.received.size(), 1u) << c.payload;
    EXPECT_EQ(tp.received[0].text, data);
  }
  EXPECT_EQ(count("tx_fragments"), 2u + 2 + 3 + 45);
  EXPECT_EQ(ip->reassemblies(), 0u);
  EXPECT_EQ(ip->reassembly_memory(), 0u);
  tp.opened.clear();
}

TEST_F(Ipv4Test, DontFragmentAndSizeLimits) {
  auto parts = remote(kPeer, 6);
  auto s = ip->open(tp, parts);
  ASSERT_TRUE(s.ok());
  auto* ips = dynamic_cast<ipv4::Ipv4Session*>(s->get());
  ASSERT_NE(ips, nullptr);
  ASSERT_TRUE(ips->control(ctl::SetDontFragment{true}).ok());
  EXPECT_EQ(*(*s)->control(ctl::GetMtu{}), 1480u);
  ASSERT_TRUE((*s)->push(Msg::alloc(1480)).ok());
  EXPECT_TRUE(header_of(link.sent[0]).df());
  EXPECT_EQ((*s)->push(Msg::alloc(1481)).error(), Errc::too_large);
  EXPECT_EQ(count("drop_tx_too_large"), 1u);
  EXPECT_EQ(link.sent.size(), 1u);
  ASSERT_TRUE(ips->control(ctl::SetDontFragment{false}).ok());
  EXPECT_EQ((*s)->push(Msg::alloc(65516)).error(), Errc::too_large);
  EXPECT_EQ(count("drop_tx_too_large"), 2u);
  ASSERT_TRUE((*s)->close().ok());
  // The mtu option overrides the link: 576 leaves 552 per fragment.
  ipv4::Config c = config_for(kCidr);
  c.mtu = 576;
  make(c);
  link.sent.clear();
  ASSERT_TRUE(ip->send(kPeer, 17, Msg::alloc(1000)).ok());
  ASSERT_EQ(link.sent.size(), 2u);
  EXPECT_EQ(header_of(link.sent[0]).total_length, 572);
  EXPECT_EQ(header_of(link.sent[1]).total_length, 20 + 1000 - 552);
  EXPECT_EQ(*ip->control(ctl::GetMtu{}), 556u);
  EXPECT_EQ(*ip->control(ctl::GetHeaderRoom{}), 20u);
}

TEST_F(Ipv4Test, LinkRefusalIsReturnedAndCounted) {
  link.fail_next = true;
  EXPECT_EQ(ip->send(kPeer, 17, Msg::alloc(10)).error(), Errc::would_block);
  EXPECT_EQ(count("drop_tx_link"), 1u);
  EXPECT_EQ(count("tx_packets"), 0u);
}

// Participants carry addresses of either family; IPv4 takes its own and
// says another is not its to open. A local :: is "any", as 0.0.0.0 is.
TEST_F(Ipv4Test, OpensIpv4PeersAndRefusesAnotherFamily) {
  Participants v6;
  v6.remote.push(IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
  v6.remote.push(ProtoNum{17});
  EXPECT_EQ(ip->open(tp, v6).error(), Errc::unsupported);
  auto parts = remote(kPeer, 17);
  parts.local.push(IpAddr{});
  auto s = ip->open(tp, parts);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(parts.local.empty());
  auto other = remote(Ipv4Addr{kPeer.value + 1}, 17);
  other.local.push(Ipv4Addr{kUs.value + 1});  // not our address
  EXPECT_EQ(ip->open(tp, other).error(), Errc::invalid_argument);
  ASSERT_TRUE((*s)->close().ok());
}

TEST_F(Ipv4Test, SessionControlsNameBothEnds) {
  auto parts = remote(kPeer, 17);
  auto s = ip->open(tp, parts);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*(*s)->control(ctl::GetLocalAddr{})->peek<IpAddr>(), IpAddr(kUs));
  EXPECT_EQ(*(*s)->control(ctl::GetPeerAddr{})->peek<IpAddr>(), IpAddr(kPeer));
  EXPECT_EQ((*ip->control(ctl::GetCounters{}))->owner(), "ip0");
  ASSERT_TRUE((*s)->close().ok());
}

TEST_F(Ipv4Test, PacketsToOurselvesAreDeliveredLaterWithoutTheLink) {
  listen();
  ASSERT_TRUE(ip->send(kUs, 17, Msg::copy_of(bytes_of("me"))).ok());
  EXPECT_TRUE(link.sent.empty());
  EXPECT_TRUE(tp.received.empty()) << "not inside the sender's push";
  loop.timers().advance();
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, "me");
  EXPECT_EQ(tp.received[0].info.src, IpAddr(kUs));
  EXPECT_EQ(count("tx_loopback"), 1u);
}

// hairpin=on (filterd's nodes share one address): a datagram to our own
// address is delivered here only when our transport claims its flow; any
// other goes out through the link to our own address, for filterd to steer.
TEST_F(Ipv4Test, HairpinSendsWhatOurTransportDoesNotClaimOutThroughTheLink) {
  ipv4::Config c = config_for(kCidr);
  c.hairpin = true;
  make(c);
  listen(17);
  tp.claimed_port = 7;
  auto datagram = [](std::uint16_t from, std::uint16_t to) {
    std::vector<std::byte> b(12, std::byte{0x55});
    store_be16(b.data(), from);
    store_be16(b.data() + 2, to);
    return Msg::copy_of(b);
  };
  ASSERT_TRUE(ip->send(kUs, 17, datagram(40000, 7)).ok());
  EXPECT_TRUE(link.sent.empty()) << "ours: looped back";
  ASSERT_TRUE(ip->send(kUs, 17, datagram(40000, 8)).ok());
  ASSERT_EQ(link.sent.size(), 1u) << "another stack's: out through the link";
  EXPECT_EQ(header_of(link.sent[0]).dst, kUs);
  EXPECT_EQ(header_of(link.sent[0]).src, kUs);
  ASSERT_EQ(tp.claims_asked.size(), 2u);
  EXPECT_EQ(tp.claims_asked[1].from.value, 40000);
  EXPECT_EQ(tp.claims_asked[1].to.value, 8);
  EXPECT_EQ(tp.claims_asked[1].addr, kUs);
  EXPECT_FALSE(tp.claims_asked[1].opens);
  loop.timers().advance();
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(count("tx_loopback"), 1u);
  EXPECT_EQ(count("tx_hairpin"), 1u);
  // Without hairpin, nothing is asked: our address is ours alone.
  make(config_for(kCidr));
  listen(17);
  ASSERT_TRUE(ip->send(kUs, 17, datagram(40000, 9)).ok());
  EXPECT_EQ(tp.claims_asked.size(), 2u);
  EXPECT_EQ(count("tx_loopback"), 1u);
}

TEST_F(Ipv4Test, LoopbackQueueIsBoundedAndFreedOnDestruction) {
  ipv4::Config c = config_for(kCidr);
  c.loopback_queue = 2;
  make(c);
  ASSERT_TRUE(ip->send(kUs, 17, Msg::alloc(5)).ok());
  ASSERT_TRUE(ip->send(kUs, 17, Msg::alloc(5)).ok());
  EXPECT_EQ(ip->send(kUs, 17, Msg::alloc(5)).error(), Errc::would_block);
  EXPECT_EQ(count("drop_loopback_full"), 1u);
  // Destroyed with two queued: the leak check proves they were freed.
}

// ---- reassembly ---------------------------------------------------------

// Fragments of one datagram as a sender would cut them.
std::vector<Pkt> fragments(const std::string& data, std::size_t per_piece, std::uint16_t id = 7) {
  std::vector<Pkt> out;
  for (std::size_t off = 0; off < data.size() || (data.empty() && out.empty()); off += per_piece) {
    Pkt p;
    p.id = id;
    p.payload = data.substr(off, per_piece);
    bool more = off + per_piece < data.size();
    p.flags_offset = static_cast<std::uint16_t>(off / 8 | (more ? Header::kFlagMf : 0));
    out.push_back(p);
    if (data.empty()) break;
  }
  return out;
}

TEST_F(Ipv4Test, ReassemblyInOrderReversedAndRandom) {
  listen();
  std::mt19937 rng(12345);
  for (int round = 0; round < 30; ++round) {
    const std::size_t piece = 8 * (1 + rng() % 100);
    const std::size_t size = piece + 1 + rng() % 5000;  // at least two pieces
    std::string data = pattern(size, static_cast<unsigned>(round));
    std::vector<Pkt> frags = fragments(data, piece, static_cast<std::uint16_t>(round));
    if (round == 1) std::reverse(frags.begin(), frags.end());
    if (round >= 2) std::shuffle(frags.begin(), frags.end(), rng);
    tp.received.clear();
    for (std::size_t i = 0; i < frags.size(); ++i) {
      ASSERT_TRUE(feed(frags[i]).ok());
      EXPECT_EQ(tp.received.size(), i + 1 == frags.size() ? 1u : 0u) << "round " << round;
    }
    ASSERT_EQ(tp.received.size(), 1u);
    EXPECT_EQ(tp.received[0].text, data) << "round " << round;
    EXPECT_TRUE(tp.received[0].info.reassembled);
  }
  EXPECT_EQ(count("reasm_ok"), 30u);
  EXPECT_EQ(ip->reassemblies(), 0u);
  EXPECT_EQ(ip->reassembly_memory(), 0u);
}

TEST_F(Ipv4Test, InterleavedDatagramsAreKeptApart) {
  listen();
  std::string a = pattern(100, 1);
  std::string b = pattern(100, 2);
  auto fa = fragments(a, 48, 1);
  auto fb = fragments(b, 48, 2);
  Pkt other_src = fb[0];
  other_src.src = kOther;  // same id, another source: another datagram
  ASSERT_TRUE(feed(fa[0]).ok());
  ASSERT_TRUE(feed(fb[0]).ok());
  ASSERT_TRUE(feed(other_src).ok());
  ASSERT_TRUE(feed(fb[1]).ok());
  ASSERT_TRUE(feed(fa[1]).ok());
  ASSERT_TRUE(feed(fa[2]).ok());
  ASSERT_TRUE(feed(fb[2]).ok());
  ASSERT_EQ(tp.received.size(), 2u);
  EXPECT_EQ(tp.received[0].text, a);
  EXPECT_EQ(tp.received[1].text, b);
  EXPECT_EQ(ip->reassemblies(), 1u) << "the other source's is still waiting";
}

TEST_F(Ipv4Test, FirstFragmentOptionsAndHeaderSurviveReassembly) {
  ErrorSink sink;
  ip->attach_icmp(&sink);
  listen();
  tp.answer = Errc::port_unreachable;
  std::string data = pattern(40, 9);
  auto frags = fragments(data, 24);
  frags[0].options.assign(8, std::byte{1});  // NOPs, in the first fragment only
  ASSERT_TRUE(feed(frags[1]).ok());
  EXPECT_EQ(feed(frags[0]).error(), Errc::port_unreachable);
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, data);
  // The quoted original is the rebuilt datagram: first header, no fragment bits.
  ASSERT_EQ(sink.calls.size(), 1u);
  Msg orig = Msg::copy_of(sink.calls[0].original);
  Header h = header_of(orig);
  EXPECT_EQ(h.ihl, 7);
  EXPECT_FALSE(h.is_fragment());
  EXPECT_EQ(h.total_length, 28 + 40);
  EXPECT_TRUE(checksum_ok(orig));
  ip->attach_icmp(nullptr);
}

TEST_F(Ipv4Test, DuplicateAndOverlappingFragmentsDropTheDatagram) {
  listen();
  std::string data = pattern(64);
  auto frags = fragments(data, 16);  // 4 pieces
  // An exact duplicate.
  ASSERT_TRUE(feed(frags[0]).ok());
  EXPECT_EQ(feed(frags[0]).error(), Errc::malformed);
  EXPECT_EQ(count("drop_reasm_overlap"), 1u);
  EXPECT_EQ(ip->reassemblies(), 0u);
  // A partial overlap: [8, 24) against [0, 16).
  ASSERT_TRUE(feed(frags[0]).ok());
  Pkt overlap = frags[1];
  overlap.flags_offset = static_cast<std::uint16_t>(1 | Header::kFlagMf);
  EXPECT_EQ(feed(overlap).error(), Errc::malformed);
  EXPECT_EQ(count("drop_reasm_overlap"), 2u);
  // Overlap with the next one: [16,32) arrives, then [8,24).
  ASSERT_TRUE(feed(frags[1]).ok());
  EXPECT_EQ(feed(overlap).error(), Errc::malformed);
  EXPECT_EQ(count("drop_reasm_overlap"), 3u);
  // The rest of the poisoned datagram starts a new one that never completes.
  ASSERT_TRUE(feed(frags[2]).ok());
  ASSERT_TRUE(feed(frags[3]).ok());
  EXPECT_TRUE(tp.received.empty());
  EXPECT_EQ(ip->reassemblies(), 1u);
  advance(std::chrono::seconds(31));
  EXPECT_EQ(ip->reassemblies(), 0u);
  EXPECT_EQ(ip->reassembly_memory(), 0u);
}

TEST_F(Ipv4Test, BogusFragmentsAreCounted) {
  listen();
  Pkt odd;  // MF with 7 bytes
  odd.payload = "1234567";
  odd.flags_offset = Header::kFlagMf;
  EXPECT_EQ(feed(odd).error(), Errc::malformed);
  Pkt empty_mf;
  empty_mf.flags_offset = Header::kFlagMf | 3;
  EXPECT_EQ(feed(empty_mf).error(), Errc::malformed);
  EXPECT_EQ(count("drop_frag_bad_len"), 2u);
  // Ping of death: offset 65528 + 8 bytes ends past 65535.
  Pkt death;
  death.payload = "12345678";
  death.flags_offset = 8191;
  EXPECT_EQ(feed(death).error(), Errc::too_large);
  EXPECT_EQ(count("drop_frag_too_big"), 1u);
  // Two different last fragments, or data past the last one.
  auto frags = fragments(pattern(48), 16);
  ASSERT_TRUE(feed(frags[2]).ok());  // last: ends at 48
  Pkt far_end = frags[1];
  far_end.flags_offset = static_cast<std::uint16_t>(8 | Header::kFlagMf);  // [64, 80) past the end
  EXPECT_EQ(feed(far_end).error(), Errc::malformed);
  EXPECT_EQ(count("drop_frag_bad_len"), 3u);
  ASSERT_TRUE(feed(frags[2]).ok());
  ASSERT_TRUE(feed(frags[0]).ok());
  Pkt short_end = frags[1];
  short_end.flags_offset = 2;  // a last fragment ending at 32, but 48 was said
  EXPECT_EQ(feed(short_end).error(), Errc::malformed);
  EXPECT_EQ(count("drop_frag_bad_len"), 4u);
  EXPECT_TRUE(tp.received.empty());
  EXPECT_EQ(ip->reassemblies(), 0u);
  EXPECT_EQ(ip->reassembly_memory(), 0u);
}

TEST_F(Ipv4Test, ReassemblyTimeoutFreesAndCounts) {
  listen();
  auto frags = fragments(pattern(64), 16);
  ASSERT_TRUE(feed(frags[0]).ok());
  ASSERT_TRUE(feed(frags[2]).ok());
  EXPECT_GT(ip->reassembly_memory(), 0u);
  advance(std::chrono::seconds(29));
  EXPECT_EQ(ip->reassemblies(), 1u);
  advance(std::chrono::seconds(2));
  EXPECT_EQ(ip->reassemblies(), 0u);
  EXPECT_EQ(ip->reassembly_memory(), 0u);
  EXPECT_EQ(count("drop_reasm_timeout"), 1u);
  // Late fragments start over.
  ASSERT_TRUE(feed(frags[1]).ok());
  ASSERT_TRUE(feed(frags[3]).ok());
  EXPECT_TRUE(tp.received.empty());
}

TEST_F(Ipv4Test, GlobalMemoryCapEvictsTheOldest) {
  ipv4::Config c = config_for(kCidr);
  c.reasm_mem = 6000;
  make(c);
  listen();
  // Each held 1000-byte fragment costs a bit more than 1000 bytes.
  std::vector<std::vector<Pkt>> dgrams;
  for (std::uint16_t id = 1; id <= 6; ++id) {
    dgrams.push_back(fragments(pattern(2000, id), 1000, id));
    ASSERT_TRUE(feed(dgrams.back()[0]).ok());
    EXPECT_LE(ip->reassembly_memory(), 6000u);
  }
  EXPECT_GT(count("drop_reasm_mem"), 0u);
  EXPECT_LT(ip->reassemblies(), 6u);
  // The newest survived and completes; the oldest was evicted.
  ASSERT_TRUE(feed(dgrams[5][1]).ok());
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, pattern(2000, 6));
  ASSERT_TRUE(feed(dgrams[0][1]).ok());
  EXPECT_EQ(tp.received.size(), 1u);
  // A fragment bigger than the whole cap is refused outright.
  ipv4::Config tiny = config_for(kCidr);
  tiny.reasm_mem = 100;
  make(tiny);
  listen();
  EXPECT_EQ(feed(dgrams[0][0]).error(), Errc::no_memory);
  EXPECT_EQ(count("drop_reasm_mem"), 1u);
  EXPECT_EQ(ip->reassemblies(), 0u);
}

TEST_F(Ipv4Test, PerDatagramLimits) {
  ipv4::Config c = config_for(kCidr);
  c.reasm_max_datagram = 1500;
  make(c);
  listen();
  // Ends past 1500 - 20 bytes of payload: refused.
  Pkt big;
  big.payload = pattern(8);
  big.flags_offset = static_cast<std::uint16_t>(1480 / 8 | Header::kFlagMf);
  EXPECT_EQ(feed(big).error(), Errc::too_large);
  EXPECT_EQ(count("drop_frag_too_big"), 1u);
  // Tiny fragments in big buffers are copied, so their cost stays small, and
  // a datagram cut into many of them stays under its own cap.
  std::string data = pattern(1480);
  auto frags = fragments(data, 8);
  for (Pkt& p : frags) {
    std::vector<std::byte> b = p.bytes();
    Msg m = Msg::copy_of(b, 4000);  // 8 data bytes in a 4 KB buffer
    Status st = feed(std::move(m));
    if (!st) {
      EXPECT_EQ(st.error(), Errc::no_memory);
      break;
    }
  }
  EXPECT_LE(ip->reassembly_memory(), 2 * 1500u + 64 * 64u);
  if (tp.received.empty()) {
    EXPECT_EQ(count("drop_reasm_mem"), 1u);
  } else {
    EXPECT_EQ(tp.received[0].text, data);
  }
}

// Fragments cut by scapy (tests/golden/ip_vectors.txt) reassemble to the
// payload of the datagram scapy cut them from, in order and reversed.
TEST_F(Ipv4Test, ScapyFragmentsReassemble) {
  listen();
  std::ifstream in(std::string(XK_GOLDEN_DIR) + "/ip_vectors.txt");
  ASSERT_TRUE(in.good());
  auto from_hex = [](std::string_view hex) {
    std::vector<std::byte> v(hex.size() / 2);
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = std::byte{static_cast<std::uint8_t>(std::stoul(std::string(hex.substr(2 * i, 2)), nullptr, 16))};
    }
    return v;
  };
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("frag ", 0) != 0) continue;
    std::istringstream words(line);
    std::string kind, whole_hex, frags_hex;
    words >> kind >> whole_hex >> frags_hex;
    std::vector<std::vector<std::byte>> frags;
    std::istringstream list(frags_hex);
    for (std::string f; std::getline(list, f, ',');) frags.push_back(from_hex(f));
    ASSERT_GE(frags.size(), 2u) << line.substr(0, 60);
    Msg whole = Msg::copy_of(from_hex(whole_hex));
    const std::string want = payload_of(whole);
    for (bool reversed : {false, true}) {
      tp.received.clear();
      if (reversed) std::reverse(frags.begin(), frags.end());
      for (const auto& f : frags) ASSERT_TRUE(feed(Msg::copy_of(f)).ok());
      ASSERT_EQ(tp.received.size(), 1u);
      EXPECT_EQ(tp.received[0].text, want);
    }
    ++n;
  }
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(ip->reassemblies(), 0u);
}

// ---- graph --------------------------------------------------------------

TEST(Ipv4Graph, ComposesOverABareIpDriverWithoutEth) {
  ManualClock clock;
  EventLoop loop(clock);
  Registry registry;
  drivers::register_loopback(registry);
  ipv4::register_ipv4(registry);
  Graph graph = Graph::build(R"(
    loopback lo0 mtu=1000
    ipv4 ip0 below=lo0 addr=192.0.2.10/24 ttl=9 reasm_timeout=5
  )", registry, &loop);
  auto* lo = graph.find_as<drivers::Loopback>("lo0");
  auto* ip = graph.find_as<ipv4::Ipv4Protocol>("ip0");
  ASSERT_NE(ip, nullptr);
  EXPECT_EQ(ip->config().ttl, 9);
  EXPECT_EQ(ip->config().reasm_timeout, std::chrono::seconds(5));
  EXPECT_EQ(*ip->control(ctl::GetMtu{}), 980u);
  Transport tp;
  auto en = local_proto(17);
  ASSERT_TRUE(ip->open_enable(tp, en).ok());
  // A broadcast comes back through the loopback driver, fragmented on the way.
  std::string data = pattern(2500);
  ASSERT_TRUE(ip->send(ipv4::kLimitedBroadcast, 17, Msg::copy_of(bytes_of(data))).ok());
  EXPECT_EQ(lo->poll(10), 3u);
  ASSERT_EQ(tp.received.size(), 1u);
  EXPECT_EQ(tp.received[0].text, data);
  EXPECT_EQ(tp.received[0].info.hop_limit, 9);
  tp.opened.clear();
}

// ---- TCP over ipv4: DF and a frag-needed from a router (RFC 1191) ----------

// The transport bytes of a packet ipv4 sent.
std::vector<std::byte> l4_of(const Msg& m) {
  std::vector<std::byte> b = bytes_of(m);
  b.erase(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(header_of(m).header_length()));
  return b;
}

std::string as_text(std::span<const std::byte> b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

// ICMP destination unreachable, fragmentation needed (RFC 792, RFC 1191 4),
// from a router about `packet`: its IP header and first 8 bytes of TCP.
Pkt frag_needed_about(const Msg& packet, std::uint16_t mtu) {
  std::vector<std::byte> quote = bytes_of(packet);
  quote.resize(Header::kMinSize + 8);
  std::vector<std::byte> m(icmp::Header::kSize + quote.size());
  icmp::Header{icmp::kDestUnreachable, icmp::kFragNeeded, 0, mtu}.write(std::span(m).first<icmp::Header::kSize>());
  std::copy(quote.begin(), quote.end(), m.begin() + icmp::Header::kSize);
  const std::uint16_t ck = csum::finish(csum::partial(m.data(), m.size()));
  std::memcpy(m.data() + 2, &ck, 2);
  Pkt p;
  p.src = kGw;
  p.proto = 1;
  p.payload = as_text(m);
  return p;
}

TEST_F(Ipv4Test, TcpSendsWithDfAndTakesAFragNeededFromARouter) {
  icmp::IcmpProtocol icmp0("icmp0", *ip, &clock, icmp::Config{});
  tcp::TcpProtocol tcp0("tcp0", *ip, loop.timers(), tcp::TcpConfig{});
  tcp::TcpSocket s = tcp0.socket();
  ASSERT_TRUE(s.connect(kPeer, Port{80}).ok());
  ASSERT_EQ(link.sent.size(), 1u);
  EXPECT_TRUE(header_of(link.sent[0]).df()) << "RFC 1191: TCP's segments carry DF";
  std::vector<std::byte> syn = l4_of(link.sent[0]);
  const tcp::Header our_syn = tcp::Header::read(std::span(syn).first<tcp::Header::kMinSize>());

  // The peer's SYN-ACK offers MSS 1460 and nothing else.
  std::vector<std::byte> sa(tcp::Header::kMinSize + 4);
  tcp::Header h;
  h.src_port = 80;
  h.dst_port = our_syn.src_port;
  h.seq = tcp::SeqNum(5000);
  h.ack = our_syn.seq + 1;
  h.data_offset = 6;
  h.flags = tcp::kSyn | tcp::kAck;
  h.window = 65535;
  h.write(std::span(sa).first<tcp::Header::kMinSize>());
  sa[20] = std::byte{2};
  sa[21] = std::byte{4};
  sa[22] = std::byte{0x05};
  sa[23] = std::byte{0xb4};
  ASSERT_TRUE(tcp::fill_checksum(kPeer, kUs, sa).ok());
  Pkt synack;
  synack.proto = 6;
  synack.payload = as_text(sa);
  ASSERT_TRUE(feed(synack).ok());
  ASSERT_EQ(s.state(), tcp::State::established);
  ASSERT_EQ(link.sent.size(), 2u);  // our ACK

  std::vector<std::byte> data(2920, std::byte{0x5a});
  ASSERT_EQ(*s.write(data), 2920u);
  ASSERT_EQ(link.sent.size(), 4u);
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(header_of(link.sent[i]).total_length, 1500);
    EXPECT_TRUE(header_of(link.sent[i]).df());
  }

  // A router with a 1280-byte link refuses the second segment.
  ASSERT_TRUE(feed(frag_needed_about(link.sent[3], 1280)).ok());
  EXPECT_EQ(icmp0.counters().value("rx_errors"), 1u);
  EXPECT_EQ(count("errors_delivered"), 1u);
  EXPECT_EQ(tcp0.stats().pmtu_updates.value(), 1u);
  EXPECT_EQ(s.stats().pmtu, 1280);
  EXPECT_EQ(s.stats().mss, 1240);
  ASSERT_EQ(link.sent.size(), 7u) << "what was in flight is sent again at once";
  const std::uint16_t want[] = {1280, 1280, 480};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(header_of(link.sent[4 + i]).total_length, want[i]);
    EXPECT_TRUE(header_of(link.sent[4 + i]).df());
  }

  // One below 576: the MSS stops at 536 and routers may fragment the rest.
  ASSERT_TRUE(feed(frag_needed_about(link.sent[4], 500)).ok());
  EXPECT_EQ(s.stats().pmtu, 576);
  EXPECT_EQ(s.stats().mss, 536);
  ASSERT_EQ(link.sent.size(), 13u);
  for (std::size_t i = 7; i < 13; ++i) {
    EXPECT_EQ(header_of(link.sent[i]).total_length, i < 12 ? 576 : 280);
    EXPECT_FALSE(header_of(link.sent[i]).df());
  }
  EXPECT_EQ(tcp0.stats().pmtu_updates.value(), 2u);
  s.abort();
}

TEST(Ipv4Graph, ConfigurationErrorsSayWhatIsWrong) {
  Registry registry;
  drivers::register_loopback(registry);
  ipv4::register_ipv4(registry);
  try {
    (void)Graph::build("loopback lo0\nipv4 ip0 below=lo0 addr=192.0.2.10/24\n", registry);
    FAIL() << "no loop";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("event loop"), std::string::npos) << e.what();
  }
  ManualClock clock;
  EventLoop loop(clock);
  try {
    (void)Graph::build("loopback lo0\nloopback lo1\nipv4 ip0 below=lo0,lo1 addr=192.0.2.10/24\n", registry, &loop);
    FAIL() << "below[1] is no resolver";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("not a next-hop resolver"), std::string::npos) << e.what();
    EXPECT_EQ(e.line(), 3u);
  }
  EXPECT_THROW((void)Graph::build("loopback lo0\nipv4 ip0 below=lo0\n", registry, &loop), GraphError);
  EXPECT_THROW((void)Graph::build("loopback lo0\nipv4 ip0 below=lo0 addr=192.0.2.10/24 gw=10.0.0.1\n", registry, &loop),
               GraphError);
}

}  // namespace
}  // namespace xk

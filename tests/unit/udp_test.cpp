// UDP and its socket API over a fake IP layer that keeps the ipv4 contract of
// docs/architecture.md (tests/unit/support/fake_ip.hpp).
#include "xk/protocols/udp.hpp"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "doubles.hpp"
#include "fake_ip.hpp"
#include "xk/checksum.hpp"
#include "xk/protocols/udp_wire.hpp"

namespace xk {
namespace {

using udp::Datagram;
using udp::SocketOptions;
using udp::UdpConfig;
using udp::UdpProtocol;
using udp::UdpSocket;

Ipv4Addr ip(const char* text) { return *parse_ipv4(text); }

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
  return v;
}

std::vector<std::byte> from_hex(std::string_view hex) {
  std::vector<std::byte> v;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    v.push_back(static_cast<std::byte>(std::stoul(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return v;
}

std::string text_of(const Msg& m) {
  std::string s(m.size(), '\0');
  EXPECT_TRUE(m.copy_out(0, std::as_writable_bytes(std::span(s))).ok());
  return s;
}

std::string hex_of(const Msg& m) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (char c : text_of(m)) {
    auto b = static_cast<unsigned char>(c);
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

using test::FakeIp;

// A datagram as a peer would send it, with a checksum from xk::csum (itself
// checked against scapy in checksum_test) or none.
std::vector<std::byte> datagram(Ipv4Addr src, Ipv4Addr dst, std::uint16_t sport, std::uint16_t dport,
                                std::string_view payload, bool with_csum = true) {
  std::vector<std::byte> v(udp::Header::kSize + payload.size());
  auto len = static_cast<std::uint16_t>(v.size());
  udp::Header{sport, dport, len, 0}.write(std::span(v).first<udp::Header::kSize>());
  if (!payload.empty()) std::memcpy(v.data() + 8, payload.data(), payload.size());
  if (with_csum) {
    std::uint16_t ck = csum::finish(csum::partial(v.data(), v.size(), csum::pseudo_header_v4(src, dst, 17, len)));
    if (ck == 0) ck = 0xffff;
    std::memcpy(v.data() + 6, &ck, 2);
  }
  return v;
}

// ---- golden checksums -----------------------------------------------------
//
// Produced by scapy 2.5.0 (Debian python3-scapy), /usr/bin/python3:
//   from scapy.all import IP, UDP, raw
//   p = IP(raw(IP(src=SRC, dst=DST)/UDP(sport=SP, dport=DP)/PAYLOAD))
//   raw(p[UDP]).hex()
// The zero case: the 2-byte payload 0x7016 makes the computed checksum 0, which
// scapy (like RFC 768) sends as 0xffff.
struct Golden {
  const char* src;
  const char* dst;
  std::uint16_t sport;
  std::uint16_t dport;
  std::string payload;
  const char* udp_hex;
};
const Golden kGolden[] = {
    {"192.0.2.1", "192.0.2.10", 1234, 5678, "hello", "04d2162e000d1cf668656c6c6f"},
    {"10.0.0.1", "10.0.0.2", 53, 49152, "xk udp golden vector, odd length!",
     "0035c00000291293786b2075647020676f6c64656e20766563746f722c206f6464206c656e67746821"},
    {"198.51.100.7", "203.0.113.200", 65535, 1, "", "ffff0001000898d9"},
    {"192.0.2.1", "192.0.2.10", 1000, 2000, std::string("\x70\x16", 2), "03e807d0000affff7016"},
};

TEST(UdpGolden, SendMatchesScapy) {
  for (const Golden& g : kGolden) {
    FakeIp fip(ip(g.src), udp::kIpProtocol);
    UdpProtocol u0("u0", fip);
    UdpSocket sock = u0.socket();
    ASSERT_TRUE(sock.bind(Ipv4Addr{}, Port{g.sport}).ok());
    ASSERT_TRUE(sock.sendto(bytes_of(g.payload), ip(g.dst), Port{g.dport}).ok());
    ASSERT_EQ(fip.sent.size(), 1u);
    EXPECT_EQ(fip.sent[0].peer, ip(g.dst));
    EXPECT_EQ(hex_of(fip.sent[0].msg), g.udp_hex) << g.src << " -> " << g.dst;
  }
}

TEST(UdpGolden, ReceiveAcceptsScapyDatagrams) {
  for (const Golden& g : kGolden) {
    FakeIp fip(ip(g.dst), udp::kIpProtocol);
    UdpProtocol u0("u0", fip);
    UdpSocket sock = u0.socket();
    ASSERT_TRUE(sock.bind(Ipv4Addr{}, Port{g.dport}).ok());
    ASSERT_TRUE(fip.receive(ip(g.src), from_hex(g.udp_hex)).ok());
    Result<Datagram> d = sock.recvfrom();
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(text_of(d->payload), g.payload);
    EXPECT_EQ(d->from, ip(g.src));
    EXPECT_EQ(d->from_port, Port{g.sport});
    EXPECT_EQ(u0.counters().value("drop_bad_csum"), 0u);
  }
}

// ---- scripted ---------------------------------------------------------------

const Ipv4Addr kLocal = ip("192.0.2.10");
const Ipv4Addr kPeer = ip("192.0.2.1");
const Ipv4Addr kOther = ip("192.0.2.77");

struct Udp : ::testing::Test {
  FakeIp fip{kLocal, udp::kIpProtocol};
  UdpProtocol u0{"u0", fip};

  Status from_peer(std::uint16_t sport, std::uint16_t dport, std::string_view payload, Ipv4Addr src = kPeer) {
    return fip.receive(src, datagram(src, kLocal, sport, dport, payload));
  }
};

TEST_F(Udp, ReceivePayloadIsZeroCopy) {
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{5678}).ok());
  Msg m = Msg::copy_of(datagram(kPeer, kLocal, 1234, 5678, "zero copy"));
  const std::byte* wire = m.fragments()[0].data();
  ASSERT_TRUE(fip.receive(kPeer, std::move(m)).ok());
  Result<Datagram> d = s.recvfrom();
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->payload.fragment_count(), 1u);
  EXPECT_EQ(d->payload.fragments()[0].data(), wire + udp::Header::kSize) << "the payload is the buffer from below";
  EXPECT_EQ(text_of(d->payload), "zero copy");
  EXPECT_EQ(u0.counters().value("rx_datagrams"), 1u);
}

TEST_F(Udp, EmptyQueueWouldBlock) {
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{7}).ok());
  EXPECT_FALSE(s.readable());
  EXPECT_TRUE(s.writable());
  EXPECT_EQ(s.recvfrom().error(), Errc::would_block);
}

TEST_F(Udp, EnablesIpWhenBuiltAndDisablesOnDestruction) {
  {
    UdpProtocol u1("u1", fip);
    EXPECT_EQ(fip.enabled, &u1) << "protocol 17 is taken before any bind (RFC 1122 3.2.2.1)";
    UdpSocket a = u1.socket();
    UdpSocket b = u1.socket();
    ASSERT_TRUE(a.bind(Ipv4Addr{}, Port{1}).ok());
    ASSERT_TRUE(b.bind(Ipv4Addr{}, Port{2}).ok());
    EXPECT_EQ(fip.enabled, &u1);
  }
  EXPECT_EQ(fip.disables, 1);
}

TEST_F(Udp, EphemeralPortsComeFromTheDynamicRange) {
  UdpSocket a = u0.socket();
  UdpSocket b = u0.socket();
  ASSERT_TRUE(a.bind(Ipv4Addr{}, Port{0}).ok());
  ASSERT_TRUE(b.bind(Ipv4Addr{}, Port{0}).ok());
  std::uint16_t pa = a.local_endpoint()->port;
  std::uint16_t pb = b.local_endpoint()->port;
  EXPECT_GE(pa, 49152);
  EXPECT_GE(pb, 49152);
  EXPECT_NE(pa, pb);
  // sendto on an unbound socket binds one first.
  UdpSocket c = u0.socket();
  EXPECT_EQ(c.local_endpoint().error(), Errc::bad_state);
  ASSERT_TRUE(c.sendto(bytes_of("x"), kPeer, Port{9}).ok());
  ASSERT_TRUE(c.local_endpoint().ok());
  EXPECT_GE(c.local_endpoint()->port, 49152);
  ASSERT_EQ(fip.sent.size(), 1u);
  EXPECT_EQ(load_be16(fip.sent[0].msg.fragments()[0].data()), c.local_endpoint()->port);
}

// IP_TOS: every datagram carries the socket's TOS byte to IPv4, ECN bits
// as given (a datagram socket's own, as on Linux).
TEST_F(Udp, TosRidesOnEveryDatagram) {
  UdpSocket s = u0.socket();
  udp::SocketOptions o = s.session()->options();
  o.tos = 0xb9;
  ASSERT_TRUE(s.set_options(o).ok());
  ASSERT_TRUE(s.sendto(bytes_of("a"), kPeer, Port{9}).ok());
  ASSERT_TRUE(s.connect(kPeer, Port{9}).ok());
  ASSERT_TRUE(s.send(bytes_of("b")).ok());
  ASSERT_EQ(fip.sent.size(), 2u);
  EXPECT_EQ(fip.sent[0].msg.offload().tos, 0xb9);
  EXPECT_EQ(fip.sent[1].msg.offload().tos, 0xb9);
  UdpSocket plain = u0.socket();
  ASSERT_TRUE(plain.sendto(bytes_of("c"), kPeer, Port{9}).ok());
  EXPECT_EQ(fip.sent[2].msg.offload().tos, 0);
}

TEST_F(Udp, EphemeralRangeCanRunOut) {
  UdpConfig cfg;
  cfg.ephemeral_min = 40000;
  cfg.ephemeral_max = 40001;
  UdpProtocol u1("u1", fip, cfg);
  UdpSocket a = u1.socket(), b = u1.socket(), c = u1.socket();
  ASSERT_TRUE(a.bind(Ipv4Addr{}, Port{0}).ok());
  ASSERT_TRUE(b.bind(Ipv4Addr{}, Port{0}).ok());
  EXPECT_EQ(c.bind(Ipv4Addr{}, Port{0}).error(), Errc::exists);
  ASSERT_TRUE(a.close().ok());
  EXPECT_TRUE(c.bind(Ipv4Addr{}, Port{0}).ok()) << "a closed socket frees its port";
  EXPECT_EQ(c.local_endpoint()->port, 40000);
}

TEST_F(Udp, PortInUse) {
  UdpSocket a = u0.socket();
  UdpSocket b = u0.socket();
  ASSERT_TRUE(a.bind(Ipv4Addr{}, Port{53}).ok());
  EXPECT_EQ(b.bind(Ipv4Addr{}, Port{53}).error(), Errc::exists);
  EXPECT_EQ(b.bind(kLocal, Port{53}).error(), Errc::exists) << "the wildcard covers every address";
  EXPECT_EQ(a.bind(Ipv4Addr{}, Port{54}).error(), Errc::bad_state) << "bound already";
  ASSERT_TRUE(a.close().ok());
  EXPECT_TRUE(b.bind(kLocal, Port{53}).ok());
  EXPECT_EQ(a.bind(Ipv4Addr{}, Port{1}).error(), Errc::closed);
}

TEST_F(Udp, ReuseAddrSharesAPortAcrossAddresses) {
  SocketOptions reuse;
  reuse.reuse_addr = true;
  UdpSocket a = u0.socket(reuse);
  UdpSocket b = u0.socket(reuse);
  UdpSocket c = u0.socket(reuse);
  UdpSocket plain = u0.socket();
  ASSERT_TRUE(a.bind(Ipv4Addr{}, Port{53}).ok());
  ASSERT_TRUE(b.bind(kLocal, Port{53}).ok());
  EXPECT_EQ(c.bind(kLocal, Port{53}).error(), Errc::exists) << "the very same address and port";
  EXPECT_EQ(plain.bind(kOther, Port{53}).error(), Errc::exists) << "both must ask for reuse";
}

TEST_F(Udp, DemuxPrefersConnectedThenBoundThenWildcard) {
  SocketOptions reuse;
  reuse.reuse_addr = true;
  UdpSocket any = u0.socket(reuse);
  UdpSocket bound = u0.socket(reuse);
  UdpSocket conn = u0.socket(reuse);
  // Connected first: two unconnected bindings of one (address, port) are refused.
  ASSERT_TRUE(conn.bind(Ipv4Addr{}, Port{7000}).ok());
  ASSERT_TRUE(conn.connect(kPeer, Port{9}).ok());
  ASSERT_TRUE(any.bind(Ipv4Addr{}, Port{7000}).ok());
  ASSERT_TRUE(bound.bind(kLocal, Port{7000}).ok());
  ASSERT_TRUE(from_peer(9, 7000, "to-conn").ok());
  ASSERT_TRUE(from_peer(10, 7000, "to-bound").ok());
  EXPECT_EQ(text_of(conn.recvfrom()->payload), "to-conn");
  EXPECT_EQ(text_of(bound.recvfrom()->payload), "to-bound");
  EXPECT_FALSE(any.readable());
  ASSERT_TRUE(bound.close().ok());
  ASSERT_TRUE(from_peer(10, 7000, "to-any").ok());
  EXPECT_EQ(text_of(any.recvfrom()->payload), "to-any");
  ASSERT_TRUE(any.close().ok());
  EXPECT_EQ(from_peer(10, 7000, "nobody").error(), Errc::port_unreachable) << "connected to :9 only";
  ASSERT_TRUE(conn.close().ok());
  EXPECT_EQ(from_peer(9, 7000, "nobody").error(), Errc::port_unreachable);
  EXPECT_EQ(u0.counters().value("drop_no_session"), 2u);
}

// The checksum and the socket lookup use the packet's destination, as IP
// delivered it: a broadcast datagram (checksummed over the broadcast address)
// reaches a wildcard-bound socket, not one bound to the unicast address.
TEST_F(Udp, BroadcastDatagramsReachWildcardSockets) {
  const Ipv4Addr bcast = ip("255.255.255.255");
  SocketOptions reuse;
  reuse.reuse_addr = true;
  UdpSocket any = u0.socket(reuse);
  UdpSocket bound = u0.socket(reuse);
  ASSERT_TRUE(any.bind(Ipv4Addr{}, Port{67}).ok());
  ASSERT_TRUE(bound.bind(kLocal, Port{67}).ok());
  ASSERT_TRUE(fip.receive(kPeer, datagram(kPeer, bcast, 68, 67, "discover"), bcast).ok());
  EXPECT_EQ(u0.counters().value("drop_bad_csum"), 0u);
  ASSERT_TRUE(any.readable());
  EXPECT_EQ(text_of(any.recvfrom()->payload), "discover");
  EXPECT_FALSE(bound.readable());
  // Checksummed over our unicast address instead: damage, as on the wire.
  EXPECT_EQ(fip.receive(kPeer, datagram(kPeer, kLocal, 68, 67, "x"), bcast).error(), Errc::malformed);
  EXPECT_EQ(u0.counters().value("drop_bad_csum"), 1u);
}

TEST_F(Udp, NoListenerIsPortUnreachable) {
  // No socket at all: still a closed port, never protocol unreachable.
  EXPECT_EQ(from_peer(1, 2, "x").error(), Errc::port_unreachable);
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{1}).ok());
  EXPECT_EQ(from_peer(1, 2, "x").error(), Errc::port_unreachable);
  EXPECT_EQ(u0.counters().value("drop_no_session"), 2u);
}

TEST_F(Udp, AnIpv6PeerIsUnsupportedBelowAndNothingLeaves) {
  UdpSocket s = u0.socket();
  const IpAddr v6 = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10});
  EXPECT_EQ(s.sendto(bytes_of("x"), v6, Port{53}).error(), Errc::unsupported);
  EXPECT_EQ(s.connect(v6, Port{53}).error(), Errc::unsupported);
  EXPECT_TRUE(fip.sent.empty());
  ASSERT_TRUE(s.sendto(bytes_of("x"), kPeer, Port{53}).ok());
  EXPECT_EQ(fip.sent.size(), 1u);
}

TEST_F(Udp, ConnectedSocketSendsToItsPeerAndIgnoresOthers) {
  UdpSocket s = u0.socket();
  EXPECT_EQ(s.send(bytes_of("x")).error(), Errc::bad_state) << "not connected";
  EXPECT_EQ(s.connect(Ipv4Addr{}, Port{1}).error(), Errc::invalid_argument);
  ASSERT_TRUE(s.connect(kPeer, Port{53}).ok());
  EXPECT_EQ(s.remote_endpoint()->port, 53);
  ASSERT_TRUE(s.send(bytes_of("query")).ok());
  ASSERT_EQ(fip.sent.size(), 1u);
  EXPECT_EQ(fip.sent[0].peer, kPeer);
  Msg& m = fip.sent[0].msg;
  ASSERT_TRUE(m.trim_front(2).ok());
  EXPECT_EQ(text_of(m).substr(0, 2), std::string("\x00\x35", 2));
  std::uint16_t lport = s.local_endpoint()->port;
  EXPECT_EQ(from_peer(54, lport, "other port").error(), Errc::port_unreachable);
  EXPECT_EQ(fip.receive(kOther, datagram(kOther, kLocal, 53, lport, "other host")).error(), Errc::port_unreachable);
  ASSERT_TRUE(from_peer(53, lport, "answer").ok());
  Result<Datagram> d = s.recvfrom();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(text_of(d->payload), "answer");
  // The session's control answers with the 4-tuple.
  auto local = s.session()->control(ctl::GetLocalAddr{});
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local->peek<Port>(), Port{lport});
  EXPECT_EQ(*s.session()->control(ctl::GetMtu{}), 1472u);
}

TEST_F(Udp, RepliesUseThePassiveIpSession) {
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{69}).ok());
  ASSERT_TRUE(from_peer(3000, 69, "rrq").ok());
  Result<Datagram> d = s.recvfrom();
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(s.sendto(bytes_of("data"), d->from, d->from_port).ok());
  EXPECT_EQ(fip.opens, 0) << "the session ipv4 opened passively carries the reply";
  ASSERT_EQ(fip.sent.size(), 1u);
  EXPECT_EQ(fip.sent[0].peer, kPeer);
}

TEST_F(Udp, ChecksumRules) {
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{80}).ok());
  // A damaged payload fails the checksum.
  std::vector<std::byte> bad = datagram(kPeer, kLocal, 1, 80, "payload");
  bad.back() ^= std::byte{1};
  EXPECT_EQ(fip.receive(kPeer, bad).error(), Errc::malformed);
  EXPECT_EQ(u0.counters().value("drop_bad_csum"), 1u);
  // RFC 768: 0 means the sender computed none; accepted even when verifying.
  ASSERT_TRUE(fip.receive(kPeer, datagram(kPeer, kLocal, 1, 80, "no csum", false)).ok());
  EXPECT_EQ(u0.counters().value("rx_no_csum"), 1u);
  // With verification off, the damaged one gets through.
  ASSERT_TRUE(u0.control(ctl::SetChecksum{ChecksumMode::off}).ok());
  EXPECT_EQ(*u0.control(ctl::GetChecksum{}), ChecksumMode::off);
  ASSERT_TRUE(fip.receive(kPeer, bad).ok());
  EXPECT_EQ(s.queued_datagrams(), 2u);
  // ... and nothing is computed on send.
  ASSERT_TRUE(s.sendto(bytes_of("abc"), kPeer, Port{1}).ok());
  ASSERT_EQ(fip.sent.size(), 1u);
  EXPECT_EQ(hex_of(fip.sent[0].msg).substr(12, 4), "0000");
}

TEST(UdpConfigured, ChecksumOffFromTheGraph) {
  Registry reg;
  reg.add(KindSpec("fakeip", "test IP").with_factory(
      [](const BuildArgs&) -> std::unique_ptr<Protocol> {
        auto ip = std::make_unique<FakeIp>(kLocal, udp::kIpProtocol);
        ip->header_room = 34;  // Ethernet and IPv4
        return ip;
      }));
  udp::register_udp(reg);
  Graph g = Graph::build("fakeip ip0\nudp u0 below=ip0 csum=off ephemeral_min=50000 ephemeral_max=50000\n", reg);
  auto* u0 = g.find_as<UdpProtocol>("u0");
  ASSERT_NE(u0, nullptr);
  EXPECT_EQ(u0->checksum_mode(), ChecksumMode::off);
  EXPECT_EQ(*u0->control(ctl::GetMtu{}), 1472u);
  EXPECT_EQ(*u0->control(ctl::GetHeaderRoom{}), 42u);
  UdpSocket s = u0->socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{0}).ok());
  EXPECT_EQ(s.local_endpoint()->port, 50000);
  ASSERT_TRUE(s.close().ok());
}

TEST_F(Udp, LengthFieldIsValidated) {
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{80}).ok());
  std::vector<std::byte> d = datagram(kPeer, kLocal, 1, 80, "abcdef", false);
  // Shorter than a header.
  EXPECT_EQ(fip.receive(kPeer, std::span(d).first(7)).error(), Errc::malformed);
  EXPECT_EQ(u0.counters().value("drop_truncated"), 1u);
  // Length below 8, and past what IP carried.
  std::vector<std::byte> small = d;
  store_be16(small.data() + 4, 7);
  EXPECT_EQ(fip.receive(kPeer, small).error(), Errc::malformed);
  std::vector<std::byte> big = d;
  store_be16(big.data() + 4, static_cast<std::uint16_t>(d.size() + 1));
  EXPECT_EQ(fip.receive(kPeer, big).error(), Errc::malformed);
  EXPECT_EQ(u0.counters().value("drop_bad_length"), 2u);
  // IP payload longer than the UDP length: the rest is trimmed (and the
  // checksum covers only the UDP length).
  std::vector<std::byte> padded = datagram(kPeer, kLocal, 1, 80, "abc");
  padded.resize(padded.size() + 5, std::byte{0xee});
  ASSERT_TRUE(fip.receive(kPeer, padded).ok());
  EXPECT_EQ(u0.counters().value("rx_trimmed"), 1u);
  EXPECT_EQ(text_of(s.recvfrom()->payload), "abc");
  EXPECT_EQ(s.queued_datagrams(), 0u);
}

TEST_F(Udp, ReceiveQueueIsBounded) {
  SocketOptions small;
  small.rcvbuf_datagrams = 2;
  small.rcvbuf_bytes = 10;
  UdpSocket s = u0.socket(small);
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{80}).ok());
  ASSERT_TRUE(from_peer(1, 80, "12345").ok());
  EXPECT_EQ(from_peer(1, 80, "123456").error(), Errc::would_block) << "11 bytes > 10";
  ASSERT_TRUE(from_peer(1, 80, "12345").ok());
  EXPECT_EQ(from_peer(1, 80, "").error(), Errc::would_block) << "2 datagrams already";
  EXPECT_EQ(s.rx_dropped(), 2u);
  EXPECT_EQ(u0.counters().value("drop_rcvbuf_full"), 2u);
  EXPECT_EQ(s.queued_bytes(), 10u);
  EXPECT_TRUE(s.recvfrom().ok());
  EXPECT_TRUE(s.recvfrom().ok());
  EXPECT_EQ(s.recvfrom().error(), Errc::would_block);
  ASSERT_TRUE(from_peer(1, 80, "").ok()) << "room again";
}

TEST_F(Udp, ReadableCallbackFires) {
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{80}).ok());
  int calls = 0;
  s.set_on_readable([&] { ++calls; });
  ASSERT_TRUE(from_peer(1, 80, "a").ok());
  ASSERT_TRUE(from_peer(1, 80, "b").ok());
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(s.readable());
}

ctl::NetError port_unreachable(Ipv4Addr local, std::uint16_t lport, Ipv4Addr remote, std::uint16_t rport) {
  ctl::NetError e;
  e.kind = ctl::NetError::Kind::unreachable;
  e.icmp_type = 3;
  e.icmp_code = 3;
  e.local = local;
  e.remote = remote;
  e.protocol = 17;
  e.local_port = Port{lport};
  e.remote_port = Port{rport};
  return e;
}

TEST_F(Udp, IcmpPortUnreachableReachesTheConnectedSocketOnce) {
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.connect(kPeer, Port{53}).ok());
  std::uint16_t lport = s.local_endpoint()->port;
  int calls = 0;
  s.set_on_readable([&] { ++calls; });
  ASSERT_TRUE(u0.control(ctl::DeliverError{port_unreachable(kLocal, lport, kPeer, 53)}).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(s.readable());
  EXPECT_EQ(s.recvfrom().error(), Errc::port_unreachable);
  EXPECT_EQ(s.recvfrom().error(), Errc::would_block) << "reported once";
  // The next one is returned by a send.
  ASSERT_TRUE(u0.control(ctl::DeliverError{port_unreachable(kLocal, lport, kPeer, 53)}).ok());
  EXPECT_EQ(s.send(bytes_of("again")).error(), Errc::port_unreachable);
  EXPECT_TRUE(s.send(bytes_of("again")).ok());
  EXPECT_EQ(u0.counters().value("icmp_errors"), 2u);
  // Host unreachable maps to no_route.
  ctl::NetError host = port_unreachable(kLocal, lport, kPeer, 53);
  host.icmp_code = 1;
  ASSERT_TRUE(u0.control(ctl::DeliverError{host}).ok());
  EXPECT_EQ(s.recvfrom().error(), Errc::no_route);
}

TEST_F(Udp, IcmpErrorsForUnconnectedSocketsAreIgnored) {
  UdpSocket s = u0.socket();
  ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{5000}).ok());
  ASSERT_TRUE(u0.control(ctl::DeliverError{port_unreachable(kLocal, 5000, kPeer, 53)}).ok());
  EXPECT_FALSE(s.readable());
  ctl::NetError ttl = port_unreachable(kLocal, 5000, kPeer, 53);
  ttl.kind = ctl::NetError::Kind::time_exceeded;
  ASSERT_TRUE(u0.control(ctl::DeliverError{ttl}).ok());
  EXPECT_EQ(u0.counters().value("icmp_errors_ignored"), 2u);
}

TEST_F(Udp, TooLargeAndClosed) {
  UdpSocket s = u0.socket();
  EXPECT_EQ(s.sendto(Msg::alloc(UdpProtocol::kMaxPayload + 1), kPeer, Port{1}).error(), Errc::too_large);
  EXPECT_TRUE(s.sendto(Msg::alloc(UdpProtocol::kMaxPayload), kPeer, Port{1}).ok());
  EXPECT_EQ(s.sendto(bytes_of("x"), kPeer, Port{0}).error(), Errc::invalid_argument);
  ASSERT_TRUE(s.close().ok());
  EXPECT_FALSE(s.is_open());
  EXPECT_EQ(s.close().error(), Errc::closed);
  EXPECT_EQ(s.sendto(bytes_of("x"), kPeer, Port{1}).error(), Errc::closed);
  EXPECT_EQ(s.recvfrom().error(), Errc::closed);
  UdpSocket empty;
  EXPECT_EQ(empty.bind(Ipv4Addr{}, Port{1}).error(), Errc::closed);
}

TEST_F(Udp, MovedSocketKeepsItsBinding) {
  UdpSocket a = u0.socket();
  ASSERT_TRUE(a.bind(Ipv4Addr{}, Port{80}).ok());
  UdpSocket b = std::move(a);
  ASSERT_TRUE(from_peer(1, 80, "moved").ok());
  EXPECT_EQ(text_of(b.recvfrom()->payload), "moved");
  UdpSocket c = u0.socket();
  ASSERT_TRUE(c.bind(Ipv4Addr{}, Port{81}).ok());
  c = std::move(b);  // closes what c had
  EXPECT_EQ(from_peer(1, 81, "x").error(), Errc::port_unreachable);
  EXPECT_EQ(u0.session_count(), 1u);
}

TEST(UdpLifetime, SocketOutlivingItsProtocolIsClosed) {
  FakeIp fip(kLocal, udp::kIpProtocol);
  UdpSocket s;
  {
    UdpProtocol u0("u0", fip);
    s = u0.socket();
    ASSERT_TRUE(s.bind(Ipv4Addr{}, Port{80}).ok());
    ASSERT_TRUE(fip.receive(kPeer, datagram(kPeer, kLocal, 1, 80, "queued")).ok());
  }
  EXPECT_FALSE(s.is_open());
  EXPECT_EQ(s.recvfrom().error(), Errc::closed);
  EXPECT_EQ(s.sendto(bytes_of("x"), kPeer, Port{1}).error(), Errc::closed);
}


using test::App;

TEST_F(Udp, OpenGivesAConnectedSessionToAnUpperProtocol) {
  App app;
  Participants parts;
  parts.remote.push(kPeer);
  parts.remote.push(Port{4242});
  parts.local.push(Port{4000});
  Result<SessionRef> s = u0.open(app, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("via upi"))).ok());
  ASSERT_EQ(fip.sent.size(), 1u);
  EXPECT_EQ(hex_of(fip.sent[0].msg).substr(0, 8), "0fa01092");
  ASSERT_TRUE(from_peer(4242, 4000, "back").ok());
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].session, s->get());
  EXPECT_EQ(app.received[0].text, "back");
  auto peer = (*s)->control(ctl::GetPeerAddr{});
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(*peer->peek<Port>(), Port{4242});
  Participants missing;
  EXPECT_EQ(u0.open(app, missing).error(), Errc::not_found);
  Participants again;
  again.remote.push(kPeer);
  again.remote.push(Port{4242});
  again.local.push(Port{4000});
  EXPECT_EQ(u0.open(app, again).error(), Errc::exists);
  ASSERT_TRUE((*s)->close().ok());
  EXPECT_EQ(u0.session_count(), 0u);
}

}  // namespace
}  // namespace xk

// icmp over ipv4 over a capturing fake link carrying bare IP packets. Echo
// and unreachable messages are checked byte for byte against packets scapy
// built (tests/golden/ip_vectors.txt, from gen_ip_vectors.py).
#include "doubles.hpp"
#include "xk/protocols/icmp.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "xk/drivers/loopback.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/icmp_wire.hpp"
#include "xk/protocols/ipv4.hpp"

namespace xk {
namespace {

constexpr Ipv4Addr kUs{0xC000020A};    // 192.0.2.10
constexpr Ipv4Addr kPeer{0xC0000214};  // 192.0.2.20
constexpr Ipv4Addr kGw{0xC0000201};    // 192.0.2.1
constexpr Ipv4Addr kFar{0xC6336407};   // 198.51.100.7
constexpr Ipv4Addr kSubnetBcast{0xC00002FF};

std::vector<std::byte> from_hex(std::string_view hex) {
  std::vector<std::byte> v(hex.size() / 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = std::byte{static_cast<std::uint8_t>(std::stoul(std::string(hex.substr(2 * i, 2)), nullptr, 16))};
  }
  return v;
}

std::vector<std::byte> bytes_of(const Msg& m) {
  std::vector<std::byte> v(m.size());
  EXPECT_TRUE(m.copy_out(0, v).ok());
  return v;
}

std::string hex_of(std::span<const std::byte> b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s += digits[std::to_integer<unsigned>(x) >> 4];
    s += digits[std::to_integer<unsigned>(x) & 15];
  }
  return s;
}

// Lines of the golden file whose first word is `kind`, split into words.
std::vector<std::vector<std::string>> vectors(std::string_view kind) {
  std::ifstream in(std::string(XK_GOLDEN_DIR) + "/ip_vectors.txt");
  EXPECT_TRUE(in.good()) << "missing ip_vectors.txt";
  std::vector<std::vector<std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (!w.empty() && w[0] == kind) out.push_back(w);
  }
  EXPECT_FALSE(out.empty()) << kind;
  return out;
}

// An IP packet around an ICMP (or any) payload, as a peer would send it.
std::vector<std::byte> ip_packet(Ipv4Addr src, Ipv4Addr dst, std::uint8_t proto, std::span<const std::byte> payload,
                                 std::uint16_t flags_offset = 0) {
  std::vector<std::byte> b(ipv4::Header::kMinSize + payload.size());
  ipv4::Header h;
  h.total_length = static_cast<std::uint16_t>(b.size());
  h.id = 0x3333;
  h.flags_offset = flags_offset;
  h.ttl = 64;
  h.protocol = proto;
  h.src = src;
  h.dst = dst;
  h.write(std::span(b).first<ipv4::Header::kMinSize>());
  ipv4::fill_header_checksum(std::span(b).first(ipv4::Header::kMinSize));
  std::copy(payload.begin(), payload.end(), b.begin() + ipv4::Header::kMinSize);
  return b;
}

std::vector<std::byte> icmp_message(std::uint8_t type, std::uint8_t code, std::uint32_t rest,
                                    std::span<const std::byte> body) {
  std::vector<std::byte> m(icmp::Header::kSize + body.size());
  icmp::Header{type, code, 0, rest}.write(std::span(m).first<icmp::Header::kSize>());
  std::copy(body.begin(), body.end(), m.begin() + icmp::Header::kSize);
  std::uint16_t c = csum::finish(csum::partial(m.data(), m.size()));
  std::memcpy(m.data() + 2, &c, 2);
  return m;
}

using test::CaptureDriver;

// The link under ipv4: a 1500-byte MTU, nothing else said.
CaptureDriver::Config link_config() { return {.mac = std::nullopt, .mtu = 1500, .header_room = std::nullopt}; }

// A transport (tests/unit/support/doubles.hpp): answers port_unreachable
// when told, records NetErrors, keeps no session.
struct Transport : test::App {
  Transport() : test::App("tp0") {
    answer = Errc::port_unreachable;
    keep_opened = false;
  }
};

struct IcmpTest : ::testing::Test {
  ManualClock clock;
  EventLoop loop{clock};
  CaptureDriver link{link_config()};
  std::unique_ptr<ipv4::Ipv4Protocol> ip;
  std::unique_ptr<icmp::IcmpProtocol> icmp0;
  Transport tp;
  SessionRef rx;

  void SetUp() override { make(icmp::Config{}); }
  void make(icmp::Config c) {
    icmp0.reset();
    ip.reset();
    ipv4::Config ic;
    ic.addr = Ipv4Cidr{kUs, 24};
    ic.gw = kGw;
    ip = std::make_unique<ipv4::Ipv4Protocol>("ip0", link, nullptr, loop.timers(), ic);
    icmp0 = std::make_unique<icmp::IcmpProtocol>("icmp0", *ip, &clock, c);
    Participants none;
    rx = *link.open(*ip, none);
  }
  void TearDown() override {
    rx = nullptr;
    icmp0.reset();
    ip.reset();
  }
  Status feed(std::span<const std::byte> packet) { return ip->demux(*rx, Msg::copy_of(packet)); }
  void listen(std::uint32_t proto) {
    Participants en;
    en.local.push(ProtoNum{proto});
    ASSERT_TRUE(ip->open_enable(tp, en).ok());
  }
  std::uint64_t count(std::string_view name) const { return icmp0->counters().value(name); }
  ipv4::Header sent_header(std::size_t i) {
    std::array<std::byte, ipv4::Header::kMinSize> b{};
    EXPECT_TRUE(link.sent.at(i).copy_out(0, b).ok());
    return ipv4::Header::read(b);
  }
  std::vector<std::byte> sent_icmp(std::size_t i) {
    std::vector<std::byte> all = bytes_of(link.sent.at(i));
    return {all.begin() + static_cast<std::ptrdiff_t>(sent_header(i).header_length()), all.end()};
  }
};

TEST_F(IcmpTest, EchoRepliesMatchScapy) {
  std::size_t n = 0;
  for (const auto& v : vectors("echo")) {
    ASSERT_EQ(v.size(), 3u);
    const std::size_t first = link.sent.size();
    ASSERT_TRUE(feed(from_hex(v[1])).ok()) << v[1];
    ASSERT_GT(link.sent.size(), first);
    // A reply too big for the MTU leaves in fragments: join their payloads.
    std::vector<std::byte> reply;
    for (std::size_t i = first; i < link.sent.size(); ++i) {
      ipv4::Header h = sent_header(i);
      EXPECT_EQ(h.src, kUs);
      EXPECT_EQ(h.dst, kPeer);
      EXPECT_EQ(h.protocol, ipv4::kProtoIcmp);
      EXPECT_EQ(h.frag_offset(), reply.size());
      auto part = sent_icmp(i);
      reply.insert(reply.end(), part.begin(), part.end());
    }
    EXPECT_EQ(hex_of(reply), v[2]);
    ++n;
  }
  EXPECT_EQ(count("tx_echo_reply"), n);
  EXPECT_EQ(ip->session_count(), 0u) << "icmp keeps no session per peer";
  EXPECT_EQ(ip->counters().value("tx_fragments"), 2u) << "the 1473-byte echo's reply";
}

TEST_F(IcmpTest, BroadcastEchoIsIgnoredAndCounted) {
  auto msg = icmp_message(icmp::kEchoRequest, 0, 0x00010001, from_hex("abcd"));
  ASSERT_TRUE(feed(ip_packet(kPeer, kSubnetBcast, 1, msg)).ok());
  ASSERT_TRUE(feed(ip_packet(kPeer, ipv4::kLimitedBroadcast, 1, msg)).ok());
  EXPECT_TRUE(link.sent.empty());
  EXPECT_EQ(count("drop_echo_broadcast"), 2u);
}

TEST_F(IcmpTest, MalformedMessagesAreCounted) {
  auto msg = icmp_message(icmp::kEchoRequest, 0, 1, from_hex("0102030405"));
  msg[6] ^= std::byte{1};
  EXPECT_EQ(feed(ip_packet(kPeer, kUs, 1, msg)).error(), Errc::malformed);
  EXPECT_EQ(count("drop_bad_csum"), 1u);
  EXPECT_EQ(feed(ip_packet(kPeer, kUs, 1, from_hex("0800f7"))).error(), Errc::malformed);
  EXPECT_EQ(count("drop_truncated"), 1u);
  // An unreachable quoting less than an IP header.
  auto bad = icmp_message(icmp::kDestUnreachable, 3, 0, from_hex("4500001c"));
  EXPECT_EQ(feed(ip_packet(kGw, kUs, 1, bad)).error(), Errc::malformed);
  EXPECT_EQ(count("drop_malformed"), 1u);
  // Types we do not act on are counted, not answered.
  ASSERT_TRUE(feed(ip_packet(kPeer, kUs, 1, icmp_message(13, 0, 0, {}))).ok());
  EXPECT_EQ(count("rx_other"), 1u);
  EXPECT_TRUE(link.sent.empty());
}

TEST_F(IcmpTest, PortUnreachableMatchesScapy) {
  listen(17);
  std::size_t n = 0;
  for (const auto& v : vectors("port_unreach")) {
    ASSERT_EQ(v.size(), 3u);
    EXPECT_EQ(feed(from_hex(v[1])).error(), Errc::port_unreachable);
    ASSERT_EQ(link.sent.size(), n + 1);
    EXPECT_EQ(sent_header(n).dst, kPeer);
    EXPECT_EQ(hex_of(sent_icmp(n)), v[2]);
    ++n;
  }
  EXPECT_EQ(count("tx_dest_unreach"), n);
}

TEST_F(IcmpTest, ProtocolUnreachableButNeverAboutBroadcastsOrErrors) {
  auto payload = from_hex("00112233445566778899");
  EXPECT_EQ(feed(ip_packet(kPeer, kUs, 99, payload)).error(), Errc::proto_unreachable);
  ASSERT_EQ(link.sent.size(), 1u);
  auto msg = sent_icmp(0);
  EXPECT_EQ(std::to_integer<int>(msg[0]), icmp::kDestUnreachable);
  EXPECT_EQ(std::to_integer<int>(msg[1]), icmp::kProtoUnreachable);
  EXPECT_EQ(msg.size(), 8u + 20 + 8);
  EXPECT_EQ(csum::finish(csum::partial(msg.data(), msg.size())), 0);
  EXPECT_EQ(feed(ip_packet(kPeer, kSubnetBcast, 99, payload)).error(), Errc::proto_unreachable);
  EXPECT_EQ(link.sent.size(), 1u) << "not about a broadcast";
  // Not about an ICMP error (asked directly: ipv4 never routes one here).
  auto err = icmp_message(icmp::kDestUnreachable, 3, 0, from_hex("45000000"));
  Msg about_error = Msg::copy_of(ip_packet(kPeer, kUs, 1, err));
  EXPECT_EQ(icmp0->send_dest_unreachable(icmp::kPortUnreachable, about_error, 0).error(), Errc::bad_state);
  // Nor about a non-first fragment.
  Msg frag = Msg::copy_of(ip_packet(kPeer, kUs, 17, payload, 5));
  EXPECT_EQ(icmp0->send_dest_unreachable(icmp::kPortUnreachable, frag, 0).error(), Errc::bad_state);
  EXPECT_EQ(count("tx_suppressed"), 2u);
  // About an echo request is fine.
  auto echo = icmp_message(icmp::kEchoRequest, 0, 0, {});
  Msg about_echo = Msg::copy_of(ip_packet(kPeer, kUs, 1, echo));
  EXPECT_TRUE(icmp0->send_dest_unreachable(icmp::kPortUnreachable, about_echo, 0).ok());
}

TEST_F(IcmpTest, FragNeededCarriesTheMtu) {
  auto payload = from_hex("0102030405060708090a0b0c");
  Msg original = Msg::copy_of(ip_packet(kPeer, kUs, 6, payload));
  ASSERT_TRUE(icmp0->send_dest_unreachable(icmp::kFragNeeded, original, 1280).ok());
  ASSERT_EQ(link.sent.size(), 1u);
  auto msg = sent_icmp(0);
  auto h = icmp::Header::read(std::span<const std::byte>(msg).first<icmp::Header::kSize>());
  EXPECT_EQ(h.type, icmp::kDestUnreachable);
  EXPECT_EQ(h.code, icmp::kFragNeeded);
  EXPECT_EQ(h.next_hop_mtu(), 1280);
  EXPECT_EQ(msg.size(), 8u + 28) << "IP header + 8 bytes";
}

TEST_F(IcmpTest, ErrorsAreRateLimited) {
  icmp::Config c;
  c.err_rate = 10;  // one per 100 ms
  c.err_burst = 2;
  make(c);
  listen(17);
  auto udp = from_hex("1234000900080000");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(feed(ip_packet(kPeer, kUs, 17, udp)).error(), Errc::port_unreachable);
  EXPECT_EQ(link.sent.size(), 2u);
  EXPECT_EQ(count("tx_rate_limited"), 1u);
  clock.advance(std::chrono::milliseconds(100));
  EXPECT_EQ(feed(ip_packet(kPeer, kUs, 17, udp)).error(), Errc::port_unreachable);
  EXPECT_EQ(link.sent.size(), 3u);
  EXPECT_EQ(feed(ip_packet(kPeer, kUs, 17, udp)).error(), Errc::port_unreachable);
  EXPECT_EQ(link.sent.size(), 3u);
  EXPECT_EQ(count("tx_rate_limited"), 2u);
}

TEST_F(IcmpTest, FragNeededFromARouterReachesTheTransportAsNetError) {
  listen(6);
  tp.answer = Status{};
  for (const auto& v : vectors("frag_needed")) {
    ASSERT_EQ(v.size(), 4u);
    tp.net_errors.clear();
    ASSERT_TRUE(feed(ip_packet(kGw, kUs, 1, from_hex(v[3]))).ok()) << v[3];
    ASSERT_EQ(tp.net_errors.size(), 1u);
    const ctl::NetError& e = tp.net_errors[0];
    EXPECT_EQ(e.kind, ctl::NetError::Kind::frag_needed);
    EXPECT_EQ(e.icmp_type, 3);
    EXPECT_EQ(e.icmp_code, 4);
    EXPECT_EQ(e.next_hop_mtu, std::stoul(v[1]));
    EXPECT_EQ(e.local, kUs);
    EXPECT_EQ(e.remote, kFar);
    EXPECT_EQ(e.protocol, 6);
    EXPECT_EQ(e.local_port, Port{43210});
    EXPECT_EQ(e.remote_port, Port{80});
    EXPECT_EQ(e.inner_seq, 0x01020304u);
  }
  EXPECT_EQ(count("rx_errors"), 3u);
}

TEST_F(IcmpTest, OtherErrorsAndErrorsNobodyOwns) {
  listen(17);
  auto udp = ip_packet(kUs, kFar, 17, from_hex("d431003500080000"));
  auto quote = std::span<const std::byte>(udp).first(28);
  ASSERT_TRUE(feed(ip_packet(kGw, kUs, 1, icmp_message(icmp::kTimeExceeded, 0, 0, quote))).ok());
  ASSERT_TRUE(feed(ip_packet(kFar, kUs, 1, icmp_message(icmp::kDestUnreachable, 3, 0, quote))).ok());
  ASSERT_EQ(tp.net_errors.size(), 2u);
  EXPECT_EQ(tp.net_errors[0].kind, ctl::NetError::Kind::time_exceeded);
  EXPECT_EQ(tp.net_errors[1].kind, ctl::NetError::Kind::unreachable);
  EXPECT_EQ(tp.net_errors[1].local_port, Port{0xd431});
  EXPECT_EQ(tp.net_errors[1].remote_port, Port{53});
  // Quoting somebody else's datagram.
  auto foreign = ip_packet(kPeer, kFar, 17, from_hex("d431003500080000"));
  auto fquote = std::span<const std::byte>(foreign).first(28);
  EXPECT_FALSE(feed(ip_packet(kGw, kUs, 1, icmp_message(icmp::kDestUnreachable, 3, 0, fquote))).ok());
  EXPECT_EQ(count("drop_error_not_ours"), 1u);
  // Quoting a protocol nobody enabled.
  auto tcp = ip_packet(kUs, kFar, 6, from_hex("d431003500000001"));
  auto tquote = std::span<const std::byte>(tcp).first(28);
  EXPECT_EQ(feed(ip_packet(kGw, kUs, 1, icmp_message(icmp::kDestUnreachable, 1, 0, tquote))).error(),
            Errc::not_found);
  EXPECT_EQ(count("drop_error_no_owner"), 1u);
}

TEST(IcmpGraph, BuildsOverIpv4AndRefusesAnythingElse) {
  ManualClock clock;
  EventLoop loop(clock);
  Registry registry;
  drivers::register_loopback(registry);
  ipv4::register_ipv4(registry);
  icmp::register_icmp(registry);
  {
    Graph g = Graph::build("loopback lo0\nipv4 ip0 below=lo0 addr=192.0.2.10/24\nicmp icmp0 below=ip0 err_rate=5\n",
                           registry, &loop);
    auto* lo = g.find_as<drivers::Loopback>("lo0");
    auto* ip = g.find_as<ipv4::Ipv4Protocol>("ip0");
    auto* ic = g.find_as<icmp::IcmpProtocol>("icmp0");
    ASSERT_NE(ic, nullptr);
    // Ping ourselves through the loop: request and reply both stay inside.
    auto echo = icmp_message(icmp::kEchoRequest, 0, 0x00050006, from_hex("cafe"));
    ASSERT_TRUE(ip->send(kUs, 1, Msg::copy_of(echo)).ok());
    loop.timers().advance();
    loop.timers().advance();
    EXPECT_EQ(ic->counters().value("tx_echo_reply"), 1u);
    EXPECT_EQ(ic->counters().value("rx_echo_reply"), 1u);
    EXPECT_EQ(lo->poll(10), 0u);
  }
  try {
    (void)Graph::build("loopback lo0\nicmp icmp0 below=lo0\n", registry, &loop);
    FAIL() << "icmp over a driver";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("is not ipv4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xk

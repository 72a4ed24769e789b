// Malformed frames into a whole stack (pair -> eth -> arp -> ipv4 -> icmp,
// udp, tcp) with an established connection: truncated frames, lengths that
// lie, bad header lengths, bad TCP options (zero-length, length 1 -- the loop
// that never advances --, running past the header), fragments that overlap or
// run past 65535, bad checksums. Each one must be dropped and counted once,
// in the counter of the layer that saw it, and leave the connection working.
// The shared main's leak check and the ASan build see that nothing leaks.
// Frames are built byte by byte (tests/unit/support/raw_stack.hpp), not with
// the stack's own wire code.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "raw_stack.hpp"

namespace xk::test::raw {
namespace {

// A segment from the peer on the established flow 0, in window, ACKing what
// the stack sent, with `options` (padded to 4 bytes with EOL) and `payload` bytes.
Bytes flow0_segment(Stack& s, std::span<const std::byte> options, std::size_t payload = 0, std::uint8_t flags = 0x18) {
  Flow& f = s.peer->flows[0];
  return s.segment(f, f.peer_nxt, f.stack_nxt, flags, 1024, options, payload, std::nullopt);
}

Bytes bytes(std::initializer_list<int> v) {
  Bytes b;
  for (int x : v) b.push_back(std::byte(static_cast<unsigned char>(x)));
  return b;
}

// An IPv4 packet with every checksum made right.
Bytes good_ip(std::uint8_t proto, std::span<const std::byte> body) {
  Bytes p = ip_packet(proto, body);
  fix_ip(p, 7);
  return p;
}

// A fragment of a 64-byte UDP datagram to port 7: payload bytes
// [off, off + len) of it, MF as given, id 77.
Bytes udp_fragment(std::size_t off, std::size_t len, bool mf, std::uint16_t id = 77) {
  Bytes body(64, std::byte{0x61});
  put16(body, 0, 40100);
  put16(body, 2, 7);
  put16(body, 4, 64);
  Bytes whole = ip_packet(17, body, id, 0);
  fix_ip(whole, 7);
  std::span<const std::byte> l4(whole.data() + 20, whole.size() - 20);
  Bytes chunk(len, std::byte{0x62});
  for (std::size_t i = 0; i < len && off + i < l4.size(); ++i) chunk[i] = l4[off + i];
  Bytes p = ip_packet(17, chunk, id, static_cast<std::uint16_t>((mf ? 0x2000 : 0) | (off / 8)));
  fix_ip(p, 1);
  return p;
}

struct Case {
  std::string name;
  std::string layer;    // the protocol instance that must count it
  std::string counter;  // and the counter
  // Sends the bad frame(s) into the stack.
  std::function<void(Stack&)> inject;
};

// GoogleTest names a failing case by this (not by its bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

void send_ip(Stack& s, Bytes p) { s.inject_ip(p); }

std::vector<Case> cases() {
  std::vector<Case> v;
  // ---- Ethernet ----
  v.push_back({"EthShorterThanItsHeader", "eth0", "drop_truncated", [](Stack& s) {
                 Bytes f = eth_frame(0x0800, {});
                 f.resize(10);
                 s.peer->send(f);
                 s.settle();
               }});
  v.push_back({"Eth8023LengthInsteadOfType", "eth0", "drop_llc", [](Stack& s) {
                 s.peer->send(eth_frame(0x0040, Bytes(64)));
                 s.settle();
               }});
  // ---- IPv4 header ----
  v.push_back({"IpShorterThan20Bytes", "ip0", "drop_truncated", [](Stack& s) {
                 Bytes p = good_ip(17, Bytes(8));
                 p.resize(12);
                 send_ip(s, p);
               }});
  v.push_back({"IpVersion6", "ip0", "drop_bad_version", [](Stack& s) {
                 Bytes p = ip_packet(17, Bytes(8));
                 p[0] = std::byte{0x65};
                 fix_ip(p, 1);
                 send_ip(s, p);
               }});
  v.push_back({"IpHeaderLengthBelow5", "ip0", "drop_bad_ihl", [](Stack& s) {
                 Bytes p = ip_packet(17, Bytes(8));
                 p[0] = std::byte{0x44};
                 send_ip(s, p);
               }});
  v.push_back({"IpTotalLengthBelowHeader", "ip0", "drop_bad_len", [](Stack& s) {
                 Bytes p = ip_packet(17, Bytes(8));
                 put16(p, 2, 19);
                 fix_ip(p, 1);
                 send_ip(s, p);
               }});
  v.push_back({"IpHeaderLengthPastTotalLength", "ip0", "drop_bad_len", [](Stack& s) {
                 Bytes p = ip_packet(17, Bytes(40));
                 p[0] = std::byte{0x4f};  // 60 bytes of header in a 28-byte packet
                 put16(p, 2, 28);
                 send_ip(s, p);
               }});
  v.push_back({"IpTotalLengthPastTheFrame", "ip0", "drop_truncated", [](Stack& s) {
                 Bytes p = good_ip(17, Bytes(20));
                 put16(p, 2, 200);
                 fix_ip(p, 1);
                 send_ip(s, p);
               }});
  v.push_back({"IpBadHeaderChecksum", "ip0", "drop_bad_csum", [](Stack& s) {
                 Bytes p = good_ip(17, Bytes(20));
                 p[10] ^= std::byte{0x01};
                 send_ip(s, p);
               }});
  // ---- fragments ----
  v.push_back({"FragmentsOverlapping", "ip0", "drop_reasm_overlap", [](Stack& s) {
                 send_ip(s, udp_fragment(0, 32, true));
                 send_ip(s, udp_fragment(24, 40, false));  // bytes 24..31 twice
               }});
  v.push_back({"FragmentDuplicated", "ip0", "drop_reasm_overlap", [](Stack& s) {
                 send_ip(s, udp_fragment(0, 32, true));
                 send_ip(s, udp_fragment(0, 32, true));
               }});
  v.push_back({"FragmentNotAMultipleOf8WithMoreToCome", "ip0", "drop_frag_bad_len",
               [](Stack& s) { send_ip(s, udp_fragment(0, 30, true)); }});
  v.push_back({"FragmentEndingPast65535", "ip0", "drop_frag_too_big",
               [](Stack& s) { send_ip(s, udp_fragment(8189 * 8, 48, false)); }});
  v.push_back({"FragmentsWithTwoDifferentEnds", "ip0", "drop_frag_bad_len", [](Stack& s) {
                 send_ip(s, udp_fragment(32, 32, false));
                 send_ip(s, udp_fragment(8, 16, false));
               }});
  v.push_back({"FragmentsNeverCompleted", "ip0", "drop_reasm_timeout", [](Stack& s) {
                 send_ip(s, udp_fragment(0, 32, true));
                 s.advance(std::chrono::seconds(31));  // reasm_timeout is 30 s
               }});
  // ---- TCP header ----
  v.push_back({"TcpShorterThan20Bytes", "tcp0", "drop_malformed", [](Stack& s) {
                 Bytes seg = flow0_segment(s, {});
                 seg.resize(12);
                 send_ip(s, good_ip(6, seg));
               }});
  v.push_back({"TcpDataOffsetBelow5", "tcp0", "drop_malformed", [](Stack& s) {
                 Bytes seg = flow0_segment(s, {}, 8);
                 seg[12] = std::byte{0x40};
                 send_ip(s, good_ip(6, seg));
               }});
  v.push_back({"TcpDataOffsetPastTheSegment", "tcp0", "drop_malformed", [](Stack& s) {
                 Bytes seg = flow0_segment(s, {}, 4);
                 seg[12] = std::byte{0xf0};  // 60 bytes of header in 24
                 send_ip(s, good_ip(6, seg));
               }});
  v.push_back({"TcpBadChecksum", "tcp0", "drop_bad_csum", [](Stack& s) {
                 Bytes p = good_ip(6, flow0_segment(s, {}, 10));
                 p[20 + 16] ^= std::byte{0x80};
                 send_ip(s, p);
               }});
  // ---- TCP options (RFC 9293 3.1, RFC 1122 4.2.2.5) ----
  struct Opt {
    const char* name;
    Bytes opts;
  };
  for (Opt o : {Opt{"TcpOptionOfLengthZero", bytes({30, 0, 1, 1})},
                Opt{"TcpOptionOfLengthOneWouldLoop", bytes({1, 1, 30, 1})},
                Opt{"TcpOptionRunningPastTheHeader", bytes({30, 10, 0, 0})},
                Opt{"TcpOptionKindWithoutALength", bytes({1, 1, 1, 30})},
                Opt{"TcpMssOptionOfWrongLength", bytes({2, 3, 5, 1})},
                Opt{"TcpSackOptionWithoutBlocks", bytes({1, 1, 5, 2})},
                Opt{"TcpSackOptionWithAPartialBlock", bytes({5, 6, 0, 0, 0, 1, 1, 1})},
                Opt{"TcpTimestampsOptionOfWrongLength", bytes({8, 6, 0, 0, 0, 1, 1, 1})},
                Opt{"TcpWindowScaleOptionOfWrongLength", bytes({3, 4, 7, 0})}}) {
    v.push_back({o.name, "tcp0", "drop_malformed",
                 [opts = o.opts](Stack& s) { send_ip(s, good_ip(6, flow0_segment(s, opts, 10))); }});
  }
  // ---- UDP ----
  v.push_back({"UdpShorterThanItsHeader", "udp0", "drop_truncated",
               [](Stack& s) { send_ip(s, good_ip(17, bytes({0x9c, 0xa4, 0, 7}))); }});
  v.push_back({"UdpLengthPastThePayload", "udp0", "drop_bad_length", [](Stack& s) {
                 Bytes d = bytes({0x9c, 0xa4, 0, 7, 0, 100, 0, 0, 1, 2, 3, 4});
                 send_ip(s, good_ip(17, d));
               }});
  v.push_back({"UdpLengthBelow8", "udp0", "drop_bad_length", [](Stack& s) {
                 Bytes d = bytes({0x9c, 0xa4, 0, 7, 0, 6, 0, 0, 1, 2, 3, 4});
                 send_ip(s, good_ip(17, d));
               }});
  v.push_back({"UdpBadChecksum", "udp0", "drop_bad_csum", [](Stack& s) {
                 Bytes p = good_ip(17, bytes({0x9c, 0xa4, 0, 7, 0, 12, 0, 0, 1, 2, 3, 4}));
                 p[20 + 7] ^= std::byte{0x01};
                 send_ip(s, p);
               }});
  // ---- ICMP ----
  v.push_back({"IcmpShorterThanItsHeader", "icmp0", "drop_truncated",
               [](Stack& s) { send_ip(s, good_ip(1, bytes({8, 0}))); }});
  v.push_back({"IcmpBadChecksum", "icmp0", "drop_bad_csum", [](Stack& s) {
                 Bytes p = good_ip(1, bytes({8, 0, 0, 0, 0, 1, 0, 1, 9, 9}));
                 p[20 + 2] ^= std::byte{0x01};
                 send_ip(s, p);
               }});
  v.push_back({"IcmpErrorQuotingATruncatedHeader", "icmp0", "drop_malformed", [](Stack& s) {
                 Bytes q = ip_packet(6, Bytes(20));
                 q.resize(10);
                 Bytes body(8 + q.size());
                 body[0] = std::byte{3};
                 body[1] = std::byte{4};
                 std::memcpy(body.data() + 8, q.data(), q.size());
                 send_ip(s, good_ip(1, body));
               }});
  return v;
}

// Every drop_* counter of every layer, summed: a frame must be counted once.
std::uint64_t all_drops(const Graph& g) {
  std::uint64_t n = 0;
  for (const CounterSet* set : g.counters()) {
    for (const CounterSet::Entry& e : set->entries()) {
      if (e.name.rfind("drop_", 0) == 0) n += e.counter.value();
    }
  }
  return n;
}

class Malformed : public ::testing::TestWithParam<Case> {};

TEST_P(Malformed, IsDroppedCountedOnceAndHarmsNothing) {
  const Case& c = GetParam();
  Stack s;
  s.open_flows();
  Protocol* layer = s.graph->find(c.layer);
  ASSERT_NE(layer, nullptr);
  const Counter* counter = layer->counters().find(c.counter);
  ASSERT_NE(counter, nullptr) << c.layer << " has no counter " << c.counter;
  const std::uint64_t before = counter->value();
  const std::uint64_t drops_before = all_drops(*s.graph);
  const std::uint64_t tx_before = s.graph->find("tcp0")->counters().value("tx_segments");

  c.inject(s);

  EXPECT_EQ(counter->value(), before + 1) << c.layer << "." << c.counter;
  EXPECT_EQ(all_drops(*s.graph), drops_before + 1) << "counted once, in one place";
  EXPECT_EQ(s.graph->find("tcp0")->counters().value("tx_segments"), tx_before)
      << "a dropped frame is not answered (no RST, no ACK)";
  EXPECT_EQ(s.udp.recvfrom().error(), Errc::would_block) << "nothing reached the UDP socket";

  // The established connection still carries data both ways.
  Flow& f = s.peer->flows[0];
  s.send_tcp(f, f.peer_nxt, f.stack_nxt, 0x18, 1024, s.ts_opt(), 100);
  f.peer_nxt += 100;
  std::vector<std::byte> buf(1000);
  auto n = s.socks[0].read(buf);
  ASSERT_TRUE(n.ok()) << to_string(n.error());
  EXPECT_EQ(*n, 100u);
  EXPECT_EQ(s.socks[0].state(), tcp::State::established);
}

INSTANTIATE_TEST_SUITE_P(Frames, Malformed, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// RFC 7323 2.3: a window scale above 14 is not an error; it is used as 14.
TEST(MalformedSyn, WindowScaleAbove14IsUsedAs14) {
  Stack s;
  s.open_flows();
  Flow& f = s.peer->flows[2];
  const Bytes opts = bytes({2, 4, 0x05, 0xb4, 1, 3, 3, 200});
  s.send_tcp(f, f.peer_nxt, 0, 0x02, 65535, opts, 0);
  f.peer_nxt += 1;
  s.send_tcp(f, f.peer_nxt, f.stack_nxt, 0x10, 1024, {}, 0);
  auto a = s.listener.accept();
  ASSERT_TRUE(a.ok()) << to_string(a.error());
  EXPECT_EQ(a->state(), tcp::State::established);
  EXPECT_EQ(a->stats().snd_wscale, 14);
  EXPECT_EQ(s.graph->find("tcp0")->counters().value("drop_malformed"), 0u);
}

// The harness's stack keeps 4 half-open connections per listener
// (syn_backlog=4); the fifth new client gets a SYN cookie, so the fuzzer's
// SYNs reach the cookie code. The cookie's ACK still makes a connection.
TEST(MalformedSyn, TheFifthNewClientIsAnsweredWithACookie) {
  Stack s;
  s.open_flows();
  const auto& tcp = *s.graph->find("tcp0");
  const Bytes mss = bytes({2, 4, 0x05, 0xb4});
  for (int i = 2; i < 7; ++i) {
    Flow& f = s.peer->flows[static_cast<std::size_t>(i)];
    s.send_tcp(f, f.peer_nxt, 0, 0x02, 65535, mss, 0);
    f.peer_nxt += 1;
  }
  EXPECT_EQ(tcp.counters().value("syncookies_sent"), 1u) << "four SYNs fill the queue, the fifth gets a cookie";
  Flow& fifth = s.peer->flows[6];
  s.send_tcp(fifth, fifth.peer_nxt, fifth.stack_nxt, 0x10, 1024, {}, 0);
  EXPECT_EQ(tcp.counters().value("syncookies_ok"), 1u);
  auto a = s.listener.accept();
  ASSERT_TRUE(a.ok()) << to_string(a.error());
  EXPECT_EQ(a->state(), tcp::State::established);
}

}  // namespace
}  // namespace xk::test::raw

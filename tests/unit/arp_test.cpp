// arp: exact request bytes over a capturing driver, then two stacks (pair +
// eth + arp each) on ManualClock-driven event loops: resolution, queued
// packets, expiry and re-resolution, retries and the failed hold-down, static
// entries, gratuitous ARP, malformed packets and storms. A tiny fake upper
// stands in for ipv4: it enables 0x0800 on eth and records what arrives.
#include "doubles.hpp"
#include "xk/kinds.hpp"
#include "xk/protocols/arp.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "xk/drivers/pair.hpp"
#include "xk/protocols/arp_wire.hpp"
#include "xk/protocols/eth.hpp"

namespace xk {
namespace {

using arp::ArpConfig;
using arp::ArpProtocol;
using State = ArpProtocol::State;
using namespace std::chrono_literals;

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
  return v;
}

std::string text_of(const Msg& m) {
  std::string s(m.size(), '\0');
  EXPECT_TRUE(m.copy_out(0, std::as_writable_bytes(std::span(s))).ok());
  return s;
}

Msg packet(std::string_view s) { return Msg::copy_of(bytes_of(s)); }

MacAddr mac(std::uint8_t last) { return MacAddr{{0x02, 0, 0, 0, 0, last}}; }
Ipv4Addr ip(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  return Ipv4Addr{(std::uint32_t{a} << 24) | (std::uint32_t{b} << 16) | (std::uint32_t{c} << 8) | d};
}

const MacAddr kMacA = mac(0xa);
const MacAddr kMacB = mac(0xb);
const Ipv4Addr kIpA = ip(10, 0, 0, 1);
const Ipv4Addr kIpB = ip(10, 0, 0, 2);
const Ipv4Addr kNobody = ip(10, 0, 0, 99);

std::string eth_header(const MacAddr& dst, const MacAddr& src, std::uint16_t type) {
  std::string s(eth::Header::kSize, '\0');
  eth::Header{dst, src, type}.write(std::as_writable_bytes(std::span(s)).first<eth::Header::kSize>());
  return s;
}

std::string arp_bytes(const arp::Packet& p) {
  std::string s(arp::Packet::kSize, '\0');
  p.write(std::as_writable_bytes(std::span(s)).first<arp::Packet::kSize>());
  return s;
}

arp::Packet arp_packet(std::uint16_t op, MacAddr sha, Ipv4Addr spa, MacAddr tha, Ipv4Addr tpa) {
  arp::Packet p;
  p.op = op;
  p.sha = sha;
  p.spa = spa;
  p.tha = tha;
  p.tpa = tpa;
  return p;
}

// Stands in for ipv4: receives EtherType 0x0800 from eth.
class IpSink final : public Protocol {
 public:
  explicit IpSink(std::string name) : Protocol(std::move(name), "fake-ip") {}
  Status demux(Session& lower, Msg msg) override {
    auto peer = lower.control(ctl::GetPeerAddr{});
    from.push_back(peer ? *peer->peek<MacAddr>() : MacAddr{});
    texts.push_back(text_of(msg));
    return {};
  }
  std::vector<std::string> texts;
  std::vector<MacAddr> from;
};

// A protocol that only owns sessions (to push raw frames into a driver).
class Raw final : public Protocol {
 public:
  Raw() : Protocol("raw", "raw") {}
};

// ---- exact bytes over a capturing driver ------------------------------------

using test::CaptureDriver;

TEST(ArpWire, RequestAndGratuitousBytesAreExact) {
  ManualClock clock;
  EventLoop loop(clock);
  CaptureDriver cap{CaptureDriver::Config{.mac = kMacA, .mtu = 1514, .header_room = std::nullopt}};
  eth::EthProtocol e0("eth0", cap);
  ArpProtocol a0("arp0", e0, loop);
  a0.add_local_address(kIpA);
  ASSERT_EQ(cap.sent.size(), 1u);
  // Hand-assembled from RFC 826 / RFC 5227 2.3: broadcast, 0x0806, htype 1,
  // ptype 0x0800, 6, 4, op 1, sender = target = 10.0.0.1, zero target MAC,
  // zero padding to 60 bytes.
  const std::string gratuitous = std::string(
      "\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x0a\x08\x06"
      "\x00\x01\x08\x00\x06\x04\x00\x01"
      "\x02\x00\x00\x00\x00\x0a\x0a\x00\x00\x01"
      "\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x01",
      42) + std::string(18, '\0');
  EXPECT_EQ(cap.sent_text(0), gratuitous);
  ASSERT_TRUE(a0.send_to(kIpB, packet("ip")).ok());
  ASSERT_EQ(cap.sent.size(), 2u);
  const std::string request = std::string(
      "\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x0a\x08\x06"
      "\x00\x01\x08\x00\x06\x04\x00\x01"
      "\x02\x00\x00\x00\x00\x0a\x0a\x00\x00\x01"
      "\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x02",
      42) + std::string(18, '\0');
  EXPECT_EQ(cap.sent_text(1), request);
  EXPECT_EQ(a0.counters().value("tx_requests"), 1u);
  EXPECT_EQ(a0.counters().value("tx_gratuitous"), 1u);
  // Once the link is up (libxk's Stack, after waiting for it): the same
  // announcement again, for neighbours that heard nothing the first time.
  a0.announce();
  ASSERT_EQ(cap.sent.size(), 3u);
  EXPECT_EQ(cap.sent_text(2), gratuitous);
  EXPECT_EQ(a0.counters().value("tx_gratuitous"), 2u);
}

TEST(ArpWire, StaticEntryText) {
  auto e = arp::parse_static_entry("192.0.2.1@02:00:00:00:00:01");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->ip, ip(192, 0, 2, 1));
  EXPECT_EQ(e->mac, mac(1));
  EXPECT_FALSE(arp::parse_static_entry("192.0.2.1").ok());
  EXPECT_FALSE(arp::parse_static_entry("192.0.2.1@zz").ok());
  EXPECT_FALSE(arp::parse_static_entry("192.0.2@02:00:00:00:00:01").ok());
  EXPECT_FALSE(arp::parse_static_entry("192.0.2.1@ff:ff:ff:ff:ff:ff").ok());
}

// ---- two stacks over a pair link --------------------------------------------

struct Stack {
  Stack(drivers::PairHub& hub, EventLoop& loop, const std::string& tag, MacAddr m, Ipv4Addr addr,
        ArpConfig cfg)
      : drv("net" + tag, hub.link("wire"), driver_config(m), &loop),
        eth("eth" + tag, drv),
        arp("arp" + tag, eth, loop, std::move(cfg)),
        ip_sink("ip" + tag) {
    Participants en;
    en.local.push(ProtoNum{eth::kTypeIpv4});
    EXPECT_TRUE(eth.open_enable(ip_sink, en).ok());
    arp.add_local_address(addr);
  }
  static drivers::PairDriver::Config driver_config(MacAddr m) {
    drivers::PairDriver::Config c;
    c.mac = m;
    return c;
  }
  drivers::PairDriver drv;
  eth::EthProtocol eth;
  ArpProtocol arp;
  IpSink ip_sink;
};

struct ArpPair : ::testing::Test {
  ManualClock clock;
  EventLoop loop_a{clock};
  EventLoop loop_b{clock};
  drivers::PairHub hub;
  std::unique_ptr<Stack> a;
  std::unique_ptr<Stack> b;
  Raw raw;
  SessionRef raw_b;  // pushes hand-made frames into B's end: they arrive at A

  void make(ArpConfig ca = {}, ArpConfig cb = {}) {
    a = std::make_unique<Stack>(hub, loop_a, "A", kMacA, kIpA, std::move(ca));
    b = std::make_unique<Stack>(hub, loop_b, "B", kMacB, kIpB, std::move(cb));
    Participants none;
    raw_b = *b->drv.open(raw, none);
    pump();
  }
  void TearDown() override {
    raw_b = nullptr;
    b.reset();
    a.reset();
  }
  // Run both loops until neither has anything to do.
  void pump() {
    for (int i = 0; i < 1000; ++i) {
      std::size_t work = loop_a.run_once() + loop_b.run_once();
      if (work == 0) return;
    }
    ADD_FAILURE() << "the loops never went idle";
  }
  void advance(Duration d) {
    clock.advance(d);
    pump();
  }
  // Step time in small increments, so every retry timer gets its turn.
  void advance_in_steps(Duration total, Duration step = 100ms) {
    for (Duration t{0}; t < total; t += step) advance(step);
  }
  void inject_to_a(const std::string& frame) { ASSERT_TRUE(raw_b->push(packet(frame)).ok()); }
  void inject_arp_to_a(const arp::Packet& p, MacAddr eth_src = kMacB, MacAddr eth_dst = kMacA) {
    inject_to_a(eth_header(eth_dst, eth_src, eth::kTypeArp) + arp_bytes(p));
  }
  std::uint64_t ca(std::string_view name) const { return a->arp.counters().value(name); }
  std::uint64_t cb(std::string_view name) const { return b->arp.counters().value(name); }
};

TEST_F(ArpPair, ResolvesAndFlushesQueuedPacketsInOrder) {
  make();
  EXPECT_EQ(cb("rx_gratuitous"), 0u) << "A announced itself before B was plugged in";
  EXPECT_EQ(ca("rx_gratuitous"), 1u) << "B's announcement reached A";
  EXPECT_FALSE(a->arp.lookup(kIpB).has_value()) << "a gratuitous ARP adds nothing (RFC 826 merge)";
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("p1")).ok());
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("p2")).ok());
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("p3")).ok());
  auto pending = a->arp.lookup(kIpB);
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(pending->state, State::incomplete);
  EXPECT_EQ(pending->pending, 3u);
  EXPECT_EQ(a->arp.pending_packets(), 3u);
  EXPECT_EQ(ca("tx_requests"), 1u) << "one request for the three packets";
  pump();
  EXPECT_EQ(cb("rx_requests"), 1u) << "A's request (A's announcement found no peer yet)";
  EXPECT_EQ(a->drv.counters().value("drop_no_peer"), 1u);
  EXPECT_EQ(cb("tx_replies"), 1u);
  EXPECT_EQ(cb("cache_adds"), 1u) << "B learned A: the request was aimed at it";
  EXPECT_EQ(ca("rx_replies"), 1u);
  EXPECT_EQ(ca("cache_updates"), 1u) << "the reply completed A's incomplete entry";
  ASSERT_EQ(b->ip_sink.texts.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    // 46 bytes: eth pads, and only ipv4's total length would trim it.
    EXPECT_EQ(b->ip_sink.texts[i].substr(0, 2), "p" + std::to_string(i + 1));
    EXPECT_EQ(b->ip_sink.from[i], kMacA);
  }
  auto ea = a->arp.lookup(kIpB);
  ASSERT_TRUE(ea.has_value());
  EXPECT_EQ(ea->state, State::reachable);
  EXPECT_EQ(ea->mac, kMacB);
  EXPECT_EQ(ea->pending, 0u);
  EXPECT_EQ(a->arp.pending_packets(), 0u);
  auto eb = b->arp.lookup(kIpA);
  ASSERT_TRUE(eb.has_value());
  EXPECT_EQ(eb->mac, kMacA);
  // Known now: straight out, no request. And B answers without asking.
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("p4")).ok());
  ASSERT_TRUE(b->arp.send_to(kIpA, packet("back")).ok());
  pump();
  EXPECT_EQ(ca("tx_requests"), 1u);
  EXPECT_EQ(cb("tx_requests"), 0u);
  ASSERT_EQ(b->ip_sink.texts.size(), 4u);
  ASSERT_EQ(a->ip_sink.texts.size(), 1u);
  EXPECT_EQ(a->ip_sink.texts[0].substr(0, 4), "back");
  EXPECT_EQ(ca("tx_data"), 4u);
  // ARP's per-frame eth sessions are gone; the data sessions remain.
  EXPECT_EQ(a->eth.session_count(), 2u) << "broadcast 0x0806 + (B, 0x0800)";
}

TEST_F(ArpPair, BroadcastAndMulticastNextHopsNeedNoResolution) {
  make();
  // ipv4 sends every broadcast to 255.255.255.255 and a group to itself.
  ASSERT_TRUE(a->arp.send_to(Ipv4Addr{0xffffffffu}, packet("to all")).ok());
  ASSERT_TRUE(b->eth.join_multicast(MacAddr{{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}}).ok());
  ASSERT_TRUE(a->arp.send_to(Ipv4Addr{0xe00000fbu}, packet("to group")).ok());  // 224.0.0.251
  pump();
  EXPECT_EQ(ca("tx_requests"), 0u) << "nothing to ask: the link address follows from the IP";
  ASSERT_EQ(b->ip_sink.texts.size(), 2u);
  EXPECT_EQ(b->ip_sink.texts[0].substr(0, 6), "to all");
  EXPECT_EQ(b->ip_sink.texts[1].substr(0, 8), "to group");
  auto group = a->arp.lookup(Ipv4Addr{0xe00000fbu});
  ASSERT_TRUE(group.has_value());
  EXPECT_EQ(group->mac, (MacAddr{{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}}));
  EXPECT_EQ(group->state, State::permanent);
}

TEST_F(ArpPair, EntriesExpireAndAreResolvedAgain) {
  make();
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("one")).ok());
  pump();
  ASSERT_EQ(a->arp.lookup(kIpB)->state, State::reachable);
  advance(59s);
  EXPECT_TRUE(a->arp.lookup(kIpB).has_value());
  advance(1s);
  EXPECT_FALSE(a->arp.lookup(kIpB).has_value()) << "60 s lifetime";
  EXPECT_FALSE(b->arp.lookup(kIpA).has_value());
  EXPECT_EQ(ca("cache_expired"), 1u);
  EXPECT_EQ(cb("cache_expired"), 1u);
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("two")).ok());
  EXPECT_EQ(ca("tx_requests"), 2u) << "resolved again";
  pump();
  ASSERT_EQ(b->ip_sink.texts.size(), 2u);
  EXPECT_EQ(b->ip_sink.texts[1].substr(0, 3), "two");
  EXPECT_EQ(a->arp.lookup(kIpB)->state, State::reachable);
}

TEST_F(ArpPair, AnyArpPacketRefreshesTheLifetime) {
  ArpConfig one_shot;
  one_shot.retries = 0;  // B asks once, so A hears from B exactly at 40 s
  make({}, one_shot);
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("x")).ok());
  pump();
  advance(40s);
  // B asks A for some other host: not for A, but it refreshes B's entry.
  ASSERT_TRUE(b->arp.send_to(kNobody, packet("y")).ok());
  pump();
  EXPECT_EQ(ca("rx_request_not_for_us"), 2u) << "B's announcement and B's question";
  advance(30s);
  EXPECT_TRUE(a->arp.lookup(kIpB).has_value()) << "refreshed at 40 s, so alive at 70 s";
  advance(30s);
  EXPECT_FALSE(a->arp.lookup(kIpB).has_value());
}

TEST_F(ArpPair, RetriesThenFailsDropsPendingAndHoldsDown) {
  make();
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(a->arp.send_to(kNobody, packet("q")).ok());
  EXPECT_EQ(a->arp.send_to(kNobody, packet("q")).error(), Errc::would_block) << "64 per neighbour";
  EXPECT_EQ(ca("drop_pending_full"), 1u);
  EXPECT_EQ(ca("tx_requests"), 1u);
  advance_in_steps(1s);
  EXPECT_EQ(ca("tx_requests"), 2u) << "one retry per second (RFC 1122 2.3.2.1)";
  advance_in_steps(2s);
  EXPECT_EQ(ca("tx_requests"), 4u) << "the first and 3 retries";
  EXPECT_EQ(a->arp.lookup(kNobody)->state, State::incomplete);
  advance_in_steps(1s);
  auto failed = a->arp.lookup(kNobody);
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->state, State::failed);
  EXPECT_EQ(ca("resolve_failed"), 1u);
  EXPECT_EQ(ca("drop_unresolved"), 64u);
  EXPECT_EQ(a->arp.pending_packets(), 0u);
  EXPECT_EQ(cb("rx_request_not_for_us"), 4u);
  // Hold-down: no_route at once, no new request.
  EXPECT_EQ(a->arp.send_to(kNobody, packet("q")).error(), Errc::no_route);
  EXPECT_EQ(ca("drop_hold_down"), 1u);
  advance(19s);
  EXPECT_EQ(a->arp.send_to(kNobody, packet("q")).error(), Errc::no_route);
  EXPECT_EQ(ca("tx_requests"), 4u);
  advance(1s);
  EXPECT_FALSE(a->arp.lookup(kNobody).has_value()) << "the hold-down is over";
  ASSERT_TRUE(a->arp.send_to(kNobody, packet("q")).ok());
  EXPECT_EQ(ca("tx_requests"), 5u);
}

TEST_F(ArpPair, AReplyDuringTheHoldDownRevivesTheEntry) {
  ArpConfig c;
  c.retries = 0;
  make(c);
  ASSERT_TRUE(a->arp.send_to(kNobody, packet("q")).ok());
  advance_in_steps(1s);
  ASSERT_EQ(a->arp.lookup(kNobody)->state, State::failed);
  inject_arp_to_a(arp_packet(arp::kOpReply, mac(0x99), kNobody, kMacA, kIpA), mac(0x99));
  pump();
  auto e = a->arp.lookup(kNobody);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->state, State::reachable);
  EXPECT_EQ(e->mac, mac(0x99));
  ASSERT_TRUE(a->arp.send_to(kNobody, packet("now")).ok());
}

TEST_F(ArpPair, StaticEntriesNeverExpireAndAreNeverOverwritten) {
  ArpConfig c;
  c.statics.push_back({kIpB, kMacB});
  c.statics.push_back({ip(10, 0, 0, 50), mac(0x50)});
  make(c);
  auto e = a->arp.lookup(kIpB);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->state, State::permanent);
  EXPECT_EQ(a->arp.dynamic_entries(), 0u);
  EXPECT_EQ(a->arp.total_entries(), 2u);
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("direct")).ok());
  EXPECT_EQ(ca("tx_requests"), 0u);
  pump();
  ASSERT_EQ(b->ip_sink.texts.size(), 1u);
  advance(3600s);
  EXPECT_EQ(a->arp.lookup(kIpB)->state, State::permanent);
  // Somebody claims B's address with another MAC: counted, not believed.
  inject_arp_to_a(arp_packet(arp::kOpReply, mac(0x66), kIpB, kMacA, kIpA), mac(0x66));
  pump();
  EXPECT_EQ(ca("static_conflicts"), 1u);
  EXPECT_EQ(a->arp.lookup(kIpB)->mac, kMacB);
}

TEST_F(ArpPair, GratuitousArpUpdatesThePeersExistingEntry) {
  make();
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("x")).ok());
  pump();
  std::uint64_t updates = ca("cache_updates");
  // B announces a second address A knows nothing about: nothing is added.
  b->arp.add_local_address(ip(10, 0, 0, 3));
  pump();
  EXPECT_FALSE(a->arp.lookup(ip(10, 0, 0, 3)).has_value());
  EXPECT_EQ(ca("cache_updates"), updates);
  // B's address moves to a new MAC (a failover): its announcement updates A.
  inject_arp_to_a(arp_packet(arp::kOpRequest, mac(0x77), kIpB, MacAddr{}, kIpB), mac(0x77),
                  eth::kBroadcast);
  pump();
  EXPECT_EQ(ca("cache_updates"), updates + 1);
  EXPECT_EQ(ca("rx_gratuitous"), 3u);
  EXPECT_EQ(a->arp.lookup(kIpB)->mac, mac(0x77));
  // The old eth session was dropped: data now goes to the new MAC (and B's
  // eth filters it out).
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("moved")).ok());
  pump();
  EXPECT_EQ(b->eth.counters().value("drop_not_for_us"), 1u);
  EXPECT_EQ(b->ip_sink.texts.size(), 1u);
}

TEST_F(ArpPair, GratuitousCanBeTurnedOff) {
  ArpConfig quiet;
  quiet.gratuitous = false;
  make({}, quiet);
  EXPECT_EQ(ca("rx_gratuitous"), 0u);
  EXPECT_EQ(cb("tx_gratuitous"), 0u);
}

TEST_F(ArpPair, RequestFromOurOwnAddressIsADuplicate) {
  make();
  inject_arp_to_a(arp_packet(arp::kOpRequest, mac(0x55), kIpA, MacAddr{}, kIpB), mac(0x55), eth::kBroadcast);
  inject_arp_to_a(arp_packet(arp::kOpReply, mac(0x55), kIpA, kMacA, kIpA), mac(0x55));
  pump();
  EXPECT_EQ(ca("dup_addr_detected"), 2u);
  EXPECT_FALSE(a->arp.lookup(kIpA).has_value());
  EXPECT_EQ(ca("tx_replies"), 0u);
}

TEST_F(ArpPair, ProbesAreAnsweredButTeachNothing) {
  make();
  // RFC 5227 probe: sender 0.0.0.0.
  inject_arp_to_a(arp_packet(arp::kOpRequest, kMacB, Ipv4Addr{}, MacAddr{}, kIpA), kMacB, eth::kBroadcast);
  pump();
  EXPECT_EQ(ca("tx_replies"), 1u);
  EXPECT_EQ(a->arp.total_entries(), 0u);
  EXPECT_EQ(cb("rx_replies"), 1u);
  EXPECT_EQ(cb("rx_reply_not_for_us"), 1u) << "aimed at 0.0.0.0";
}

TEST_F(ArpPair, ReplyGoesToTheSenderHardwareAddress) {
  make();
  // The frame comes from B's MAC, but the packet names another sender MAC.
  inject_arp_to_a(arp_packet(arp::kOpRequest, mac(0x44), ip(10, 0, 0, 44), MacAddr{}, kIpA), kMacB,
                  eth::kBroadcast);
  pump();
  EXPECT_EQ(ca("tx_replies"), 1u);
  EXPECT_EQ(b->eth.counters().value("drop_not_for_us"), 1u) << "sent to 02:..:44, which B filters";
  EXPECT_EQ(a->arp.lookup(ip(10, 0, 0, 44))->mac, mac(0x44));
}

TEST_F(ArpPair, MalformedPacketsAreCountedAndDropped) {
  make();
  arp::Packet good = arp_packet(arp::kOpRequest, kMacB, kIpB, MacAddr{}, kIpA);
  std::string bytes = arp_bytes(good);
  // Every truncation: 0..27 bytes of ARP after the Ethernet header (raw
  // frames, so nothing pads them).
  for (std::size_t len = 0; len < arp::Packet::kSize; ++len) {
    inject_to_a(eth_header(kMacA, kMacB, eth::kTypeArp) + bytes.substr(0, len));
    pump();
  }
  EXPECT_EQ(ca("drop_truncated"), 28u);
  auto with = [&](auto change) {
    arp::Packet p = good;
    change(p);
    inject_arp_to_a(p);
    pump();
  };
  with([](arp::Packet& p) { p.htype = 6; });
  with([](arp::Packet& p) { p.htype = 0; });
  with([](arp::Packet& p) { p.ptype = 0x86dd; });
  with([](arp::Packet& p) { p.hlen = 8; });
  with([](arp::Packet& p) { p.plen = 16; });
  with([](arp::Packet& p) { p.op = 0; });
  with([](arp::Packet& p) { p.op = 3; });  // RARP request
  with([](arp::Packet& p) { p.sha = eth::kBroadcast; });
  with([](arp::Packet& p) { p.sha = MacAddr{}; });
  EXPECT_EQ(ca("drop_bad_htype"), 2u);
  EXPECT_EQ(ca("drop_bad_ptype"), 1u);
  EXPECT_EQ(ca("drop_bad_hlen"), 1u);
  EXPECT_EQ(ca("drop_bad_plen"), 1u);
  EXPECT_EQ(ca("drop_bad_op"), 2u);
  EXPECT_EQ(ca("drop_bad_sender"), 2u);
  EXPECT_EQ(ca("rx_requests"), 1u) << "only B's announcement at start-up";
  EXPECT_EQ(ca("tx_replies"), 0u);
  EXPECT_EQ(a->arp.total_entries(), 0u) << "nothing learned from junk";
  // Trailing bytes (Ethernet padding) are fine: the good packet still works.
  inject_to_a(eth_header(kMacA, kMacB, eth::kTypeArp) + bytes + std::string(18, '\0'));
  pump();
  EXPECT_EQ(ca("tx_replies"), 1u);
  EXPECT_EQ(a->eth.session_count(), 1u) << "only the broadcast session: per-frame ones were closed";
}

TEST_F(ArpPair, StormsAreBoundedByMaxEntries) {
  make();
  std::mt19937 rng(826);
  auto random_mac = [&] {
    MacAddr m;
    for (auto& b8 : m.bytes) b8 = static_cast<std::uint8_t>(rng());
    m.bytes[0] = static_cast<std::uint8_t>((m.bytes[0] & 0xfe) | 0x02);  // individual, local
    return m;
  };
  const std::uint32_t base = ip(172, 16, 0, 0).value;
  // 10k requests from distinct random senders; every other one asks for A.
  for (std::uint32_t i = 0; i < 10000; ++i) {
    MacAddr m = random_mac();
    Ipv4Addr target = (i % 2 == 0) ? kIpA : Ipv4Addr{static_cast<std::uint32_t>(rng()) | 0x01000000u};
    if (target == kIpB) target = kNobody;
    inject_arp_to_a(arp_packet(arp::kOpRequest, m, Ipv4Addr{base + i}, MacAddr{}, target), m, eth::kBroadcast);
    if (i % 256 == 255) pump();
  }
  pump();
  // (+1: B's announcement at start-up.)
  EXPECT_EQ(ca("rx_requests"), 10000u + 1u);
  EXPECT_EQ(ca("cache_adds"), 5000u);
  EXPECT_EQ(ca("tx_replies"), 5000u);
  EXPECT_EQ(ca("rx_request_not_for_us"), 5000u + 1u);
  EXPECT_EQ(ca("cache_evictions"), 5000u - 1024u);
  EXPECT_EQ(a->arp.dynamic_entries(), 1024u);
  EXPECT_EQ(a->arp.total_entries(), 1024u);
  // The newest stayed, the oldest went.
  EXPECT_TRUE(a->arp.lookup(Ipv4Addr{base + 9998}).has_value());
  EXPECT_FALSE(a->arp.lookup(Ipv4Addr{base + 0}).has_value());
  // 10k unsolicited replies from unknown senders, aimed at nobody we are.
  for (std::uint32_t i = 0; i < 10000; ++i) {
    MacAddr m = random_mac();
    inject_arp_to_a(arp_packet(arp::kOpReply, m, Ipv4Addr{base + 20000 + i}, random_mac(), kNobody), m);
    if (i % 256 == 255) pump();
  }
  pump();
  EXPECT_EQ(ca("rx_replies"), 10000u);
  EXPECT_EQ(ca("rx_reply_not_for_us"), 10000u);
  EXPECT_EQ(ca("cache_updates"), 0u);
  EXPECT_EQ(a->arp.total_entries(), 1024u);
  // An unsolicited reply about a neighbour we do know still refreshes it (RFC 826).
  inject_arp_to_a(arp_packet(arp::kOpReply, mac(0x42), Ipv4Addr{base + 9998}, mac(0x43), kNobody), mac(0x42));
  pump();
  EXPECT_EQ(ca("cache_updates"), 1u);
  EXPECT_EQ(a->arp.lookup(Ipv4Addr{base + 9998})->mac, mac(0x42));
  // Nothing piled up below ARP either.
  EXPECT_EQ(a->eth.session_count(), 1u);
  EXPECT_EQ(a->drv.counters().value("drop_queue_full"), 0u);
  EXPECT_EQ(b->drv.counters().value("drop_queue_full"), 0u);
}

TEST_F(ArpPair, SendStormsAreBoundedToo) {
  ArpConfig c;
  c.max_entries = 64;
  c.pending_total = 100;
  make(c);
  std::size_t accepted = 0, refused = 0;
  for (std::uint32_t i = 0; i < 2000; ++i) {
    Status st = a->arp.send_to(Ipv4Addr{ip(172, 16, 0, 0).value + i}, packet("data"));
    (st ? accepted : refused) += 1;
  }
  pump();
  EXPECT_EQ(a->arp.dynamic_entries(), 64u);
  EXPECT_LE(a->arp.pending_packets(), 64u);
  EXPECT_EQ(refused, ca("drop_pending_full"));
  EXPECT_EQ(accepted, ca("drop_evicted") + a->arp.pending_packets());
  EXPECT_EQ(ca("cache_evictions"), 2000u - 64u);
  // Let them all fail: every queued packet is accounted for.
  advance_in_steps(5s, 500ms);
  EXPECT_EQ(a->arp.pending_packets(), 0u);
  EXPECT_EQ(accepted, ca("drop_evicted") + ca("drop_unresolved"));
  EXPECT_EQ(ca("resolve_failed"), 64u);
  advance(20s);
  EXPECT_EQ(a->arp.total_entries(), 0u);
}

TEST_F(ArpPair, GlobalPendingCapHolds) {
  ArpConfig c;
  c.pending_total = 10;
  make(c);
  for (std::uint32_t i = 0; i < 5; ++i) {
    for (int k = 0; k < 4; ++k) (void)a->arp.send_to(Ipv4Addr{ip(172, 16, 1, 0).value + i}, packet("d"));
  }
  EXPECT_EQ(a->arp.pending_packets(), 10u);
  EXPECT_EQ(ca("drop_pending_full"), 10u);
}

TEST_F(ArpPair, DataWithNobodyListeningIsCountedAtTheSink) {
  make();
  ASSERT_TRUE(a->arp.send_to(kIpB, packet("x")).ok());
  pump();
  // B sends IPv4 to A before anyone on A enabled 0x0800: make A's sink the
  // only listener by disabling the fake ipv4.
  Participants dis;
  dis.local.push(ProtoNum{eth::kTypeIpv4});
  ASSERT_TRUE(a->eth.open_disable(a->ip_sink, dis).ok());
  ASSERT_TRUE(b->arp.send_to(kIpA, packet("y")).ok());
  pump();
  EXPECT_EQ(ca("drop_data_no_listener"), 1u);
  EXPECT_TRUE(a->ip_sink.texts.empty());
}

// What an arp graph built from a spec needs: the kinds and a loop.
struct ArpKinds {
  ArpKinds() {
    register_all_kinds(reg);
    drivers::register_pair(reg, hub);
  }
  Graph build(const std::string& spec) { return Graph::build(spec, reg, &loop); }
  drivers::PairHub hub;
  Registry reg;
  ManualClock clock;
  EventLoop loop{clock};
};

TEST(ArpGraph, BuiltFromSpecsWithOptionsAndALoop) {
  ArpKinds k;
  Graph g = k.build(
      "pair net0 link=w mac=02:00:00:00:00:01\n"
      "eth eth0 below=net0\n"
      "arp arp0 below=eth0 timeout=30 retries=1 retry_ms=250 hold_down=5 pending=2 pending_total=4 "
      "max_entries=16 gratuitous=off static=10.0.0.7@02:00:00:00:00:07,10.0.0.8@02:00:00:00:00:08\n");
  auto* a0 = g.find_as<ArpProtocol>("arp0");
  ASSERT_NE(a0, nullptr);
  EXPECT_NE(dynamic_cast<NextHopResolver*>(g.find("arp0")), nullptr);
  EXPECT_EQ(a0->config().timeout, 30s);
  EXPECT_EQ(a0->config().retries, 1u);
  EXPECT_EQ(a0->config().retry_interval, 250ms);
  EXPECT_EQ(a0->config().hold_down, 5s);
  EXPECT_EQ(a0->config().pending_per_entry, 2u);
  EXPECT_EQ(a0->config().pending_total, 4u);
  EXPECT_EQ(a0->config().max_entries, 16u);
  EXPECT_FALSE(a0->config().gratuitous);
  EXPECT_EQ(a0->lookup(ip(10, 0, 0, 8))->mac, mac(8));
  EXPECT_EQ(a0->total_entries(), 2u);
}

// A graph built without options queues as many packets per neighbour as
// ArpConfig says (the spec's default is not a second number to keep in step),
// and that is a window of handshakes: 16 SYN-ACKs to a neighbour not yet
// resolved all leave when it answers (8 once did not, and the connections
// whose SYN-ACKs were dropped waited a second for the SYN's retransmission).
TEST(ArpGraph, DefaultsQueueAWindowOfHandshakes) {
  ArpKinds k;
  Graph g = k.build("pair net0 link=w mac=02:00:00:00:00:01\neth eth0 below=net0\narp arp0 below=eth0\n");
  auto* a0 = g.find_as<ArpProtocol>("arp0");
  ASSERT_NE(a0, nullptr);
  EXPECT_EQ(a0->config().pending_per_entry, ArpConfig{}.pending_per_entry);
  EXPECT_EQ(a0->config().pending_total, ArpConfig{}.pending_total);
  EXPECT_GE(a0->config().pending_per_entry, 16u);
}

TEST_F(ArpPair, AWindowOfPacketsToAnUnresolvedNeighbourAllLeaveOnItsReply) {
  make();
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(a->arp.send_to(kIpB, packet("s" + std::to_string(i))).ok()) << i;
  EXPECT_EQ(ca("tx_requests"), 1u);
  pump();
  EXPECT_EQ(ca("drop_pending_full"), 0u);
  ASSERT_EQ(b->ip_sink.texts.size(), 16u);
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(b->ip_sink.texts[i].substr(0, 2 + (i >= 10)), "s" + std::to_string(i)) << "in order";
  }
}

TEST(ArpGraph, ConfigurationErrorsAreReported) {
  drivers::PairHub hub;
  Registry reg;
  register_all_kinds(reg);
  drivers::register_pair(reg, hub);
  const char* spec = "pair net0 link=w mac=02:00:00:00:00:01\neth eth0 below=net0\narp arp0 below=eth0\n";
  try {
    (void)Graph::build(spec, reg);
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("EventLoop"), std::string::npos) << e.what();
    EXPECT_EQ(e.line(), 3u);
  }
  ManualClock clock;
  EventLoop loop(clock);
  EXPECT_THROW((void)Graph::build("pair net0 link=x mac=02:00:00:00:00:01\neth eth0 below=net0\n"
                                  "arp arp0 below=eth0 static=10.0.0.1\n",
                                  reg, &loop),
               GraphError);
  EXPECT_THROW((void)Graph::build("pair net0 link=y mac=02:00:00:00:00:01\neth eth0 below=net0\n"
                                  "arp arp0 below=eth0 retries=-1\n",
                                  reg, &loop),
               GraphError);
}

}  // namespace
}  // namespace xk

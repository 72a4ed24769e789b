// eth: scripted frames through a capturing fake driver (exact bytes sent,
// padding, MAC filter, VLAN tags, multicast groups, malformed input counted),
// session sharing and hand-over, then two stacks over the pair driver.
#include "doubles.hpp"
#include "xk/protocols/eth.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "xk/drivers/pair.hpp"
#include "xk/protocols/eth_wire.hpp"

namespace xk {
namespace {

using eth::EthProtocol;

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

MacAddr mac(std::uint8_t last) { return MacAddr{{0x02, 0, 0, 0, 0, last}}; }
const MacAddr kUs = mac(1);
const MacAddr kPeer = mac(2);
const MacAddr kGroup{{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}};  // 224.0.0.251

// Bottom of the graph for scripted tests: records every frame pushed into it.
using test::CaptureDriver;


using test::App;

std::string wire(const MacAddr& dst, const MacAddr& src, std::uint16_t type, std::string_view payload) {
  std::string s(eth::Header::kSize, '\0');
  eth::Header{dst, src, type}.write(std::as_writable_bytes(std::span(s)).first<eth::Header::kSize>());
  return s + std::string(payload);
}

std::string tag(std::uint16_t tci, std::uint16_t inner) {
  std::string s(eth::VlanTag::kSize, '\0');
  eth::VlanTag{tci, inner}.write(std::as_writable_bytes(std::span(s)).first<eth::VlanTag::kSize>());
  return s;
}

Msg frame(std::string_view bytes) { return Msg::copy_of(bytes_of(bytes)); }

Participants to(const MacAddr& dst, std::uint32_t type) {
  Participants p;
  p.remote.push(dst);
  p.remote.push(ProtoNum{type});
  return p;
}

Participants type_key(std::uint32_t type) {
  Participants p;
  p.local.push(ProtoNum{type});
  return p;
}

struct Scripted : ::testing::Test {
  CaptureDriver cap{CaptureDriver::Config{.mac = kUs}};
  EthProtocol e0{"eth0", cap};
  App app;
  SessionRef rx() {
    Participants none;
    return *cap.open(e0, none);
  }
  void enable(std::uint16_t type, Protocol& who) {
    auto p = type_key(type);
    ASSERT_TRUE(e0.open_enable(who, p).ok());
  }
};

TEST_F(Scripted, BecomesTheDriversReceiverWithItsMac) {
  EXPECT_EQ(cap.receiver, &e0);
  EXPECT_EQ(e0.mac(), kUs);
}

TEST_F(Scripted, PushWritesTheHeaderAndPadsTo60Bytes) {
  auto parts = to(kPeer, 0x0800);
  auto s = e0.open(app, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(frame("hello")).ok());
  ASSERT_EQ(cap.sent.size(), 1u);
  std::string expect = wire(kPeer, kUs, 0x0800, "hello") + std::string(60 - 14 - 5, '\0');
  EXPECT_EQ(text_of(cap.sent[0]), expect);
  EXPECT_EQ(std::string("\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00hello", 19), expect.substr(0, 19));
  EXPECT_EQ(e0.counters().value("tx_padded"), 1u);
  // A frame of 60 bytes or more goes out as it is.
  ASSERT_TRUE((*s)->push(frame(std::string(46, 'x'))).ok());
  EXPECT_EQ(cap.sent[1].size(), 60u);
  ASSERT_TRUE((*s)->push(frame(std::string(1000, 'y'))).ok());
  EXPECT_EQ(cap.sent[2].size(), 1014u);
  EXPECT_EQ(e0.counters().value("tx_padded"), 1u);
  EXPECT_EQ(e0.counters().value("tx_frames"), 3u);
}

TEST_F(Scripted, MtuIsTheDriversMinusTheHeader) {
  auto parts = to(kPeer, 0x0800);
  auto s = e0.open(app, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(Msg::alloc(1500)).ok());
  EXPECT_EQ((*s)->push(Msg::alloc(1501)).error(), Errc::too_large);
  EXPECT_EQ(e0.counters().value("drop_too_big"), 1u);
  EXPECT_EQ(cap.sent.size(), 1u);
}

TEST(EthConfig, PaddingCanBeTurnedOffAndMacOverridden) {
  CaptureDriver cap{CaptureDriver::Config{.mac = kUs}};
  EthProtocol::Config c;
  c.pad = false;
  c.mac = mac(9);
  EthProtocol e0("eth0", cap, c);
  App app;
  auto parts = to(eth::kBroadcast, 0x88b5);
  auto s = e0.open(app, parts);
  ASSERT_TRUE(s.ok()) << "the broadcast MAC is a valid destination";
  ASSERT_TRUE((*s)->push(frame("hi")).ok());
  ASSERT_EQ(cap.sent.size(), 1u);
  EXPECT_EQ(text_of(cap.sent[0]), wire(eth::kBroadcast, mac(9), 0x88b5, "hi"));
  EXPECT_EQ(*(*e0.control(ctl::GetLocalAddr{})).peek<MacAddr>(), mac(9));
}

TEST(EthConfig, NoMacAnywhereIsAConfigurationError) {
  CaptureDriver cap{CaptureDriver::Config{.mac = std::nullopt}};
  EXPECT_THROW(EthProtocol("eth0", cap), std::invalid_argument);
  EthProtocol::Config c;
  c.mac = kGroup;
  EXPECT_THROW(EthProtocol("eth0", cap, c), std::invalid_argument);
}

TEST_F(Scripted, OpenNeedsTypeAndMac) {
  Participants none;
  EXPECT_EQ(e0.open(app, none).error(), Errc::not_found);
  Participants only_type;
  only_type.remote.push(ProtoNum{0x0800});
  EXPECT_EQ(e0.open(app, only_type).error(), Errc::not_found);
  EXPECT_EQ(only_type.remote.size(), 1u) << "left as it was";
  auto small = to(kPeer, 0x05ff);
  EXPECT_EQ(e0.open(app, small).error(), Errc::invalid_argument);
  auto vlan = to(kPeer, 0x8100);
  EXPECT_EQ(e0.open(app, vlan).error(), Errc::invalid_argument);
  auto big = to(kPeer, 0x10000);
  EXPECT_EQ(e0.open(app, big).error(), Errc::invalid_argument);
  EXPECT_EQ(e0.session_count(), 0u);
}

TEST_F(Scripted, OwnAndBroadcastFramesAreAcceptedOthersCounted) {
  enable(0x0800, app);
  SessionRef lower = rx();
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x0800, "unicast"))).ok());
  ASSERT_TRUE(e0.demux(*lower, frame(wire(eth::kBroadcast, kPeer, 0x0800, "bcast"))).ok());
  EXPECT_EQ(e0.demux(*lower, frame(wire(mac(3), kPeer, 0x0800, "not ours"))).error(), Errc::not_found);
  EXPECT_EQ(e0.demux(*lower, frame(wire(kGroup, kPeer, 0x0800, "group"))).error(), Errc::not_found);
  ASSERT_EQ(app.received.size(), 2u);
  EXPECT_EQ(app.received[0].text, "unicast");
  EXPECT_EQ(app.received[1].text, "bcast");
  EXPECT_EQ(app.received[0].session, app.received[1].session) << "one session per (source, type)";
  EXPECT_EQ(e0.counters().value("drop_not_for_us"), 2u);
  EXPECT_EQ(e0.counters().value("rx_frames"), 2u);
  EXPECT_EQ(e0.counters().value("rx_multicast"), 1u);
}

TEST_F(Scripted, JoinedMulticastGroupsAreAccepted) {
  enable(0x0800, app);
  SessionRef lower = rx();
  EXPECT_EQ(e0.join_multicast(kPeer).error(), Errc::invalid_argument) << "not a group address";
  EXPECT_EQ(e0.join_multicast(eth::kBroadcast).error(), Errc::invalid_argument) << "always accepted";
  ASSERT_TRUE(e0.join_multicast(kGroup).ok());
  ASSERT_TRUE(e0.join_multicast(kGroup).ok());
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kGroup, kPeer, 0x0800, "mdns"))).ok());
  ASSERT_TRUE(e0.leave_multicast(kGroup).ok());
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kGroup, kPeer, 0x0800, "still joined once"))).ok());
  ASSERT_TRUE(e0.leave_multicast(kGroup).ok());
  EXPECT_EQ(e0.leave_multicast(kGroup).error(), Errc::not_found);
  EXPECT_EQ(e0.demux(*lower, frame(wire(kGroup, kPeer, 0x0800, "left"))).error(), Errc::not_found);
  EXPECT_EQ(app.received.size(), 2u);
  EXPECT_EQ(e0.counters().value("drop_not_for_us"), 1u);
}

TEST_F(Scripted, VlanTagsAreSkippedAndTheInnerTypeUsed) {
  enable(0x0800, app);
  SessionRef lower = rx();
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x8100, tag(0x2005, 0x0800) + "tagged"))).ok());
  ASSERT_TRUE(
      e0.demux(*lower, frame(wire(kUs, kPeer, 0x88a8, tag(7, 0x8100) + tag(5, 0x0800) + "q-in-q"))).ok());
  ASSERT_EQ(app.received.size(), 2u);
  EXPECT_EQ(app.received[0].text, "tagged");
  EXPECT_EQ(app.received[1].text, "q-in-q");
  EXPECT_EQ(e0.counters().value("rx_vlan"), 2u);
  // Three tags, a cut tag, and a tag whose inner type is a length are junk.
  EXPECT_EQ(e0.demux(*lower, frame(wire(kUs, kPeer, 0x8100,
                                        tag(1, 0x8100) + tag(2, 0x8100) + tag(3, 0x0800) + "x")))
                .error(),
            Errc::malformed);
  EXPECT_EQ(e0.demux(*lower, frame(wire(kUs, kPeer, 0x8100, "\x20"))).error(), Errc::malformed);
  EXPECT_EQ(e0.demux(*lower, frame(wire(kUs, kPeer, 0x8100, tag(1, 0x0040) + "llc"))).error(), Errc::malformed);
  EXPECT_EQ(e0.counters().value("drop_too_many_tags"), 1u);
  EXPECT_EQ(e0.counters().value("drop_truncated"), 1u);
  EXPECT_EQ(e0.counters().value("drop_llc"), 1u);
  EXPECT_EQ(app.received.size(), 2u);
}

TEST_F(Scripted, MalformedFramesAreCountedAndDropped) {
  enable(0x0800, app);
  SessionRef lower = rx();
  std::string good = wire(kUs, kPeer, 0x0800, "");
  for (std::size_t len = 0; len < eth::Header::kSize; ++len) {
    EXPECT_EQ(e0.demux(*lower, frame(good.substr(0, len))).error(), Errc::malformed) << len;
  }
  EXPECT_EQ(e0.counters().value("drop_truncated"), 14u);
  EXPECT_EQ(e0.demux(*lower, frame(wire(kUs, kPeer, 46, "802.3 length"))).error(), Errc::malformed);
  EXPECT_EQ(e0.counters().value("drop_llc"), 1u);
  EXPECT_EQ(e0.demux(*lower, frame(wire(kUs, kGroup, 0x0800, "group source"))).error(), Errc::malformed);
  EXPECT_EQ(e0.counters().value("drop_bad_src"), 1u);
  EXPECT_EQ(e0.demux(*lower, frame(wire(kUs, kPeer, 0x86dd, "nobody enabled v6"))).error(), Errc::not_found);
  EXPECT_EQ(e0.counters().value("drop_no_session"), 1u);
  EXPECT_TRUE(app.received.empty());
  EXPECT_TRUE(app.opened.empty());
  // An exactly 14-byte frame is a valid, empty one.
  ASSERT_TRUE(e0.demux(*lower, frame(good)).ok());
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].text, "");
}

TEST_F(Scripted, PassiveOpenTellsTheUpperAndRepliesGoBackToTheSource) {
  enable(0x88b5, app);
  SessionRef lower = rx();
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x88b5, "first"))).ok());
  ASSERT_EQ(app.opened.size(), 1u);
  EXPECT_EQ(*app.last_parts.remote.peek<ProtoNum>(), ProtoNum{0x88b5});
  (void)app.last_parts.remote.pop<ProtoNum>();
  EXPECT_EQ(*app.last_parts.remote.peek<MacAddr>(), kPeer);
  EXPECT_EQ(*app.last_parts.local.peek<ProtoNum>(), ProtoNum{0x88b5});
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x88b5, "second"))).ok());
  EXPECT_EQ(app.opened.size(), 1u) << "found in the active map the second time";
  EXPECT_EQ(app.received.size(), 2u);
  EXPECT_EQ(*(*app.opened[0]->control(ctl::GetPeerAddr{})).peek<MacAddr>(), kPeer);
  ASSERT_TRUE(app.opened[0]->push(frame("answer")).ok());
  ASSERT_EQ(cap.sent.size(), 1u);
  EXPECT_EQ(text_of(cap.sent[0]).substr(0, 20), wire(kPeer, kUs, 0x88b5, "answer"));
  ASSERT_TRUE(app.opened[0]->close().ok());
  EXPECT_EQ(e0.session_count(), 0u);
}

TEST_F(Scripted, RefusedPassiveOpenDropsTheFrame) {
  enable(0x88b5, app);
  app.refuse = true;
  SessionRef lower = rx();
  EXPECT_FALSE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x88b5, "no"))).ok());
  EXPECT_EQ(e0.session_count(), 0u);
  EXPECT_EQ(e0.counters().value("drop_no_session"), 1u);
}

TEST_F(Scripted, EnableIsCountedAndOwnedByOneUpper) {
  App other("other");
  enable(0x88b5, app);
  enable(0x88b5, app);
  auto steal = type_key(0x88b5);
  EXPECT_EQ(e0.open_enable(other, steal).error(), Errc::exists);
  auto bad = type_key(0x10);
  EXPECT_EQ(e0.open_enable(app, bad).error(), Errc::invalid_argument);
  auto d1 = type_key(0x88b5);
  ASSERT_TRUE(e0.open_disable(app, d1).ok());
  SessionRef lower = rx();
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x88b5, "still"))).ok());
  auto d2 = type_key(0x88b5);
  ASSERT_TRUE(e0.open_disable(app, d2).ok());
  auto d3 = type_key(0x88b5);
  EXPECT_EQ(e0.open_disable(app, d3).error(), Errc::not_found);
  EXPECT_EQ(e0.demux(*lower, frame(wire(kUs, mac(5), 0x88b5, "gone"))).error(), Errc::not_found);
}

TEST_F(Scripted, PassiveSessionsAreBoundedByMaxSessions) {
  CaptureDriver cap2{CaptureDriver::Config{.mac = kUs}};
  EthProtocol::Config c;
  c.max_sessions = 3;
  EthProtocol small("eth1", cap2, c);
  auto en = type_key(0x88b5);
  ASSERT_TRUE(small.open_enable(app, en).ok());
  Participants none;
  SessionRef lower = *cap2.open(small, none);
  for (std::uint8_t i = 10; i < 20; ++i) (void)small.demux(*lower, frame(wire(kUs, mac(i), 0x88b5, "storm")));
  EXPECT_EQ(small.session_count(), 3u);
  EXPECT_EQ(small.counters().value("drop_session_limit"), 7u);
  EXPECT_EQ(app.received.size(), 3u);
  app.opened.clear();  // the protocols die before the sessions
}

TEST_F(Scripted, ActiveOpensShareASessionUntilTheLastClose) {
  App other("other");
  auto p1 = to(kPeer, 0x0800);
  auto p2 = to(kPeer, 0x0800);
  auto s1 = e0.open(app, p1);
  auto s2 = e0.open(other, p2);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1->get(), s2->get());
  EXPECT_EQ(e0.session_count(), 1u);
  ASSERT_TRUE((*s1)->close().ok());
  EXPECT_EQ(e0.session_count(), 1u);
  ASSERT_TRUE((*s2)->close().ok());
  EXPECT_EQ(e0.session_count(), 0u);
  EXPECT_EQ((*s2)->close().error(), Errc::closed);
}

TEST_F(Scripted, ASendOnlySessionIsHandedToTheProtocolThatEnabledItsType) {
  App sender("sender");  // like arp: opens (peer, 0x0800) only to send
  auto parts = to(kPeer, 0x0800);
  auto s = e0.open(sender, parts);
  ASSERT_TRUE(s.ok());
  SessionRef lower = rx();
  // Nobody enabled 0x0800 yet: the opener receives.
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x0800, "to opener"))).ok());
  EXPECT_EQ(sender.received.size(), 1u);
  enable(0x0800, app);  // like ipv4
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x0800, "to listener"))).ok());
  ASSERT_EQ(app.opened.size(), 1u);
  EXPECT_EQ(app.opened[0].get(), s->get()) << "the same session, handed over";
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].text, "to listener");
  EXPECT_EQ(sender.received.size(), 1u);
  ASSERT_TRUE(e0.demux(*lower, frame(wire(kUs, kPeer, 0x0800, "again"))).ok());
  EXPECT_EQ(app.opened.size(), 1u);
  EXPECT_EQ(app.received.size(), 2u);
  // The opener still sends through it, and its close leaves the listener's use.
  ASSERT_TRUE((*s)->push(frame("out")).ok());
  EXPECT_EQ(cap.sent.size(), 1u);
  ASSERT_TRUE((*s)->close().ok());
  EXPECT_EQ(e0.session_count(), 1u);
  ASSERT_TRUE(app.opened[0]->close().ok());
  EXPECT_EQ(e0.session_count(), 0u);
}

TEST_F(Scripted, ControlsComposeWithTheDriver) {
  EXPECT_EQ(*e0.control(ctl::GetMtu{}), 1500u);
  EXPECT_EQ(*e0.control(ctl::GetHeaderRoom{}), 14u);
  EXPECT_EQ(*(*e0.control(ctl::GetLocalAddr{})).peek<MacAddr>(), kUs);
  EXPECT_EQ(e0.control(ctl::GetChecksum{}).error(), Errc::unsupported);
  auto parts = to(kPeer, 0x0800);
  auto s = e0.open(app, parts);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*(*s)->control(ctl::GetMtu{}), 1500u);
  EXPECT_EQ(*(*(*s)->control(ctl::GetPeerAddr{})).peek<MacAddr>(), kPeer);
}

// ---- two stacks over the pair driver ---------------------------------------

TEST(EthOverPair, TwoStacksExchangeFrames) {
  drivers::PairHub hub;
  drivers::PairDriver::Config ca, cb;
  ca.mac = mac(0xa);
  cb.mac = mac(0xb);
  drivers::PairDriver da("net0", hub.link("w"), ca);
  drivers::PairDriver db("net1", hub.link("w"), cb);
  EthProtocol ea("ethA", da);
  EthProtocol eb("ethB", db);
  App app_a("appA"), app_b("appB");
  auto en = type_key(0x88b5);
  ASSERT_TRUE(eb.open_enable(app_b, en).ok());
  auto parts = to(mac(0xb), 0x88b5);
  auto s = ea.open(app_a, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(frame("hello B")).ok());
  EXPECT_EQ(db.poll(10), 1u);
  ASSERT_EQ(app_b.received.size(), 1u);
  EXPECT_EQ(app_b.received[0].text, "hello B" + std::string(46 - 7, '\0')) << "padding stays on for the upper";
  // B answers through the session its passive open made; A gets it on its session.
  ASSERT_TRUE(app_b.opened[0]->push(frame("hello A")).ok());
  EXPECT_EQ(da.poll(10), 1u);
  ASSERT_EQ(app_a.received.size(), 1u);
  EXPECT_EQ(app_a.received[0].session, s->get());
  // A frame for a third MAC is filtered at B.
  auto other = to(mac(0xc), 0x88b5);
  auto s3 = ea.open(app_a, other);
  ASSERT_TRUE((*s3)->push(frame("lost")).ok());
  EXPECT_EQ(db.poll(10), 1u);
  EXPECT_EQ(eb.counters().value("drop_not_for_us"), 1u);
  app_b.opened.clear();
}

TEST(EthOverPair, BuiltFromSpecsInTwoGraphs) {
  drivers::PairHub hub;
  Registry reg;
  drivers::register_pair(reg, hub);
  eth::register_eth(reg);
  ManualClock clock;
  EventLoop la(clock), lb(clock);
  Graph ga = Graph::build("pair net0 link=w mac=02:00:00:00:00:0a\neth eth0 below=net0\n", reg, &la);
  Graph gb = Graph::build("pair net0 link=w mac=02:00:00:00:00:0b\neth eth0 below=net0 pad=off\n", reg, &lb);
  auto* ea = ga.find_as<EthProtocol>("eth0");
  auto* eb = gb.find_as<EthProtocol>("eth0");
  ASSERT_NE(ea, nullptr);
  ASSERT_NE(eb, nullptr);
  EXPECT_EQ(ea->mac(), mac(0xa)) << "taken from the driver";
  EXPECT_EQ(*eb->control(ctl::GetMtu{}), 1500u);
  App app_a("appA"), app_b("appB");
  auto en = type_key(0x88b5);
  ASSERT_TRUE(ea->open_enable(app_a, en).ok());
  auto parts = to(eth::kBroadcast, 0x88b5);
  auto s = eb->open(app_b, parts);
  ASSERT_TRUE((*s)->push(frame("unpadded bcast")).ok());
  lb.run_once();
  EXPECT_TRUE(app_a.received.empty());
  la.run_once();
  ASSERT_EQ(app_a.received.size(), 1u);
  EXPECT_EQ(app_a.received[0].text, "unpadded bcast");
  app_a.opened.clear();
  EXPECT_THROW((void)Graph::build("pair n link=z mac=02:00:00:00:00:01\neth e below=n mac=01:00:5e:00:00:01\n", reg),
               GraphError);
}

}  // namespace
}  // namespace xk

// The template protocol end to end: over a capturing fake driver (to see the
// exact bytes it sends and feed it hand-made frames) and over the loopback
// driver (a round trip through a real bottom protocol).
#include "doubles.hpp"
#include "xk/protocols/template.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "xk/drivers/loopback.hpp"
#include "xk/protocols/template_wire.hpp"

namespace xk {
namespace {

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

// Bottom of the graph for scripted tests: records every frame pushed into it.
using test::CaptureDriver;


using test::App;

// Every open_done a template session makes carries its tag.
void expect_tag(Participants& parts) {
  auto tag = parts.remote.peek<ProtoNum>();
  EXPECT_TRUE(tag.ok());
}

Msg frame(std::uint16_t tag, std::uint16_t length, std::string_view payload) {
  Msg m = Msg::copy_of(bytes_of(payload));
  auto h = m.push(tmpl::Header::kSize);
  EXPECT_TRUE(h.ok());
  tmpl::Header{tag, length}.write(h->first<tmpl::Header::kSize>());
  return m;
}

Participants remote_tag(std::uint32_t tag) {
  Participants p;
  p.remote.push(ProtoNum{tag});
  return p;
}

Participants local_tag(std::uint32_t tag) {
  Participants p;
  p.local.push(ProtoNum{tag});
  return p;
}

struct Scripted : ::testing::Test {
  CaptureDriver cap{CaptureDriver::Config{.mac = std::nullopt, .mtu = 1500, .header_room = std::size_t{14}}};
  tmpl::TemplateProtocol t0{"t0", cap};
  App app;
  Scripted() { app.on_open = expect_tag; }
  SessionRef lower_session() {
    Participants none;
    return *cap.open(t0, none);
  }
};

TEST_F(Scripted, PushPutsHeaderInFrontOfPayload) {
  auto parts = remote_tag(0x1234);
  auto s = t0.open(app, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("hello"))).ok());
  ASSERT_EQ(cap.sent.size(), 1u);
  EXPECT_EQ(text_of(cap.sent[0]), std::string("\x12\x34\x00\x09hello", 9));
  EXPECT_EQ(t0.counters().value("tx_msgs"), 1u);
}

TEST_F(Scripted, ActiveSessionReceivesItsTag) {
  auto parts = remote_tag(7);
  auto s = t0.open(app, parts);
  ASSERT_TRUE(s.ok());
  SessionRef lower = lower_session();
  ASSERT_TRUE(t0.demux(*lower, frame(7, 4 + 3, "abc")).ok());
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].session, s->get());
  EXPECT_EQ(app.received[0].text, "abc");
}

TEST_F(Scripted, DuplicateActiveOpenIsRefused) {
  auto p1 = remote_tag(7);
  auto p2 = remote_tag(7);
  auto s = t0.open(app, p1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(t0.open(app, p2).error(), Errc::exists);
}

TEST_F(Scripted, OpenWithoutTagFailsCleanly) {
  Participants none;
  EXPECT_EQ(t0.open(app, none).error(), Errc::not_found);
  auto wrong = Participants{};
  wrong.remote.push(Port{80});
  EXPECT_EQ(t0.open(app, wrong).error(), Errc::invalid_argument);
  auto too_big = remote_tag(70000);
  EXPECT_EQ(t0.open(app, too_big).error(), Errc::invalid_argument);
}

TEST_F(Scripted, PassiveOpenCreatesSessionAndCallsOpenDone) {
  auto en = local_tag(9);
  ASSERT_TRUE(t0.open_enable(app, en).ok());
  SessionRef lower = lower_session();
  ASSERT_TRUE(t0.demux(*lower, frame(9, 6, "hi")).ok());
  ASSERT_EQ(app.opened.size(), 1u);
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].session, app.opened[0].get());
  EXPECT_EQ(app.received[0].text, "hi");
  // The second message finds the session in the active map: no new open_done.
  ASSERT_TRUE(t0.demux(*lower, frame(9, 7, "you")).ok());
  EXPECT_EQ(app.opened.size(), 1u);
  EXPECT_EQ(app.received.size(), 2u);
  // Replies go back out with the same tag.
  ASSERT_TRUE(app.opened[0]->push(Msg::copy_of(bytes_of("ok"))).ok());
  ASSERT_EQ(cap.sent.size(), 1u);
  EXPECT_EQ(text_of(cap.sent[0]), std::string("\x00\x09\x00\x06ok", 6));
  ASSERT_TRUE(app.opened[0]->close().ok());
  EXPECT_EQ(t0.session_count(), 0u);
}

TEST_F(Scripted, OpenDoneRefusalDropsTheMessage) {
  auto en = local_tag(9);
  ASSERT_TRUE(t0.open_enable(app, en).ok());
  app.refuse = true;
  SessionRef lower = lower_session();
  EXPECT_FALSE(t0.demux(*lower, frame(9, 6, "hi")).ok());
  EXPECT_TRUE(app.received.empty());
  EXPECT_EQ(t0.session_count(), 0u);
  EXPECT_EQ(t0.counters().value("drop_no_session"), 1u);
}

TEST_F(Scripted, OpenDisableStopsPassiveOpens) {
  auto en = local_tag(9);
  ASSERT_TRUE(t0.open_enable(app, en).ok());
  auto en2 = local_tag(9);
  ASSERT_TRUE(t0.open_enable(app, en2).ok());  // counted twice
  auto dis = local_tag(9);
  ASSERT_TRUE(t0.open_disable(app, dis).ok());
  SessionRef lower = lower_session();
  ASSERT_TRUE(t0.demux(*lower, frame(9, 4, "")).ok()) << "still enabled once";
  auto dis2 = local_tag(9);
  ASSERT_TRUE(t0.open_disable(app, dis2).ok());
  auto dis3 = local_tag(9);
  EXPECT_EQ(t0.open_disable(app, dis3).error(), Errc::not_found);
  app.opened.clear();
  ASSERT_TRUE(t0.demux(*lower, frame(10, 4, "")).error() == Errc::not_found);
}

TEST_F(Scripted, OtherUpperCannotStealAnEnabledTag) {
  App other;
  other.on_open = expect_tag;
  auto en = local_tag(9);
  ASSERT_TRUE(t0.open_enable(app, en).ok());
  auto en2 = local_tag(9);
  EXPECT_EQ(t0.open_enable(other, en2).error(), Errc::exists);
}

TEST_F(Scripted, MalformedFramesAreCountedAndDropped) {
  auto en = local_tag(9);
  ASSERT_TRUE(t0.open_enable(app, en).ok());
  SessionRef lower = lower_session();
  EXPECT_EQ(t0.demux(*lower, Msg::copy_of(bytes_of("\x00\x09"))).error(), Errc::malformed);  // short
  EXPECT_EQ(t0.demux(*lower, frame(9, 3, "x")).error(), Errc::malformed);     // length < header
  EXPECT_EQ(t0.demux(*lower, frame(9, 100, "x")).error(), Errc::malformed);   // length > frame
  EXPECT_EQ(t0.demux(*lower, Msg()).error(), Errc::malformed);                // empty
  EXPECT_EQ(t0.counters().value("drop_malformed"), 4u);
  EXPECT_TRUE(app.received.empty());
  EXPECT_TRUE(app.opened.empty());
}

TEST_F(Scripted, UnknownTagIsCountedAsNoSession) {
  SessionRef lower = lower_session();
  EXPECT_EQ(t0.demux(*lower, frame(3, 4, "")).error(), Errc::not_found);
  EXPECT_EQ(t0.counters().value("drop_no_session"), 1u);
}

TEST_F(Scripted, PaddingBeyondLengthIsRemoved) {
  auto parts = remote_tag(7);
  auto s = t0.open(app, parts);
  ASSERT_TRUE(s.ok());
  SessionRef lower = lower_session();
  ASSERT_TRUE(t0.demux(*lower, frame(7, 4 + 2, "ab\0\0\0\0")).ok());
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].text, "ab");
}

TEST_F(Scripted, ControlComposesDownTheGraph) {
  EXPECT_EQ(*t0.control(ctl::GetMtu{}), 1496u);
  EXPECT_EQ(*t0.control(ctl::GetHeaderRoom{}), 18u);
  EXPECT_EQ(t0.control(ctl::GetChecksum{}).error(), Errc::unsupported);
  auto counters = t0.control(ctl::GetCounters{});
  ASSERT_TRUE(counters.ok());
  EXPECT_EQ((*counters)->owner(), "t0");
  auto parts = remote_tag(7);
  auto s = t0.open(app, parts);
  ASSERT_TRUE(s.ok());
  auto peer = (*s)->control(ctl::GetPeerAddr{});
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->peek<ProtoNum>()->value, 7u);
  EXPECT_EQ(*(*s)->control(ctl::GetMtu{}), 1496u) << "sessions fall back to their protocol";
}

TEST(TemplateOverLoopback, RoundTripThroughTheDriver) {
  drivers::Loopback lo("lo0", {.mtu = 100, .queue_limit = 8});
  tmpl::TemplateProtocol t0("t0", lo);
  App app;
  app.on_open = expect_tag;
  auto parts = remote_tag(5);
  auto s = t0.open(app, parts);
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("ping" + std::to_string(i)))).ok());
  EXPECT_EQ(lo.queued(), 3u);
  EXPECT_EQ(lo.poll(2), 2u);
  EXPECT_EQ(lo.poll(10), 1u);
  ASSERT_EQ(app.received.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(app.received[static_cast<std::size_t>(i)].text, "ping" + std::to_string(i));
    EXPECT_EQ(app.received[static_cast<std::size_t>(i)].session, s->get());
  }
  EXPECT_EQ(lo.counters().value("rx_frames"), 3u);
  // MTU and queue limits are enforced and counted.
  EXPECT_EQ((*s)->push(Msg::alloc(97)).error(), Errc::too_large);
  EXPECT_EQ(lo.counters().value("drop_too_big"), 1u);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE((*s)->push(Msg::alloc(1)).ok());
  EXPECT_EQ((*s)->push(Msg::alloc(1)).error(), Errc::would_block);
  EXPECT_EQ(lo.counters().value("drop_queue_full"), 1u);
  ASSERT_TRUE((*s)->close().ok());
  EXPECT_EQ(lo.poll(100), 8u);
  EXPECT_EQ(t0.counters().value("drop_no_session"), 8u) << "closed: nobody owns tag 5 now";
}

}  // namespace
}  // namespace xk

namespace xk {
namespace {

// The same round trip, with the graph built from a spec like any application's.
TEST(TemplateGraph, BuiltFromSpecRoundTrips) {
  Registry registry;
  drivers::register_loopback(registry);
  tmpl::register_template(registry);
  Graph graph = Graph::build(R"(
    loopback lo0 mtu=256 queue=16   # the bottom
    template t0  below=lo0
  )", registry);
  auto* lo = graph.find_as<drivers::Loopback>("lo0");
  auto* t0 = graph.find_as<tmpl::TemplateProtocol>("t0");
  ASSERT_NE(lo, nullptr);
  ASSERT_NE(t0, nullptr);
  EXPECT_EQ(*t0->control(ctl::GetMtu{}), 252u);
  App app;
  app.on_open = expect_tag;
  auto parts = remote_tag(42);
  auto s = t0->open(app, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("through the graph"))).ok());
  EXPECT_EQ(lo->poll(16), 1u);
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].text, "through the graph");
  ASSERT_TRUE((*s)->close().ok());
}

TEST(TemplateGraph, BadOptionsAreReportedWithTheLine) {
  Registry registry;
  drivers::register_loopback(registry);
  tmpl::register_template(registry);
  try {
    (void)Graph::build("loopback lo0 mtu=0\ntemplate t0\n", registry);
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("graph:1"), std::string::npos) << what;
    EXPECT_NE(what.find("mtu"), std::string::npos) << what;
    EXPECT_NE(what.find("graph:2"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace xk

namespace xk {
namespace {

// A graph driven by an event loop: the loop polls the driver, nobody else.
TEST(TemplateGraph, EventLoopMovesFramesThroughTheGraph) {
  ManualClock clock;
  EventLoop loop(clock);
  Registry registry;
  drivers::register_loopback(registry);
  tmpl::register_template(registry);
  Graph graph = Graph::build("loopback lo0\ntemplate t0 below=lo0\n", registry, &loop);
  auto* t0 = graph.find_as<tmpl::TemplateProtocol>("t0");
  ASSERT_NE(t0, nullptr);
  App app;
  app.on_open = expect_tag;
  auto parts = remote_tag(1);
  auto s = t0->open(app, parts);
  ASSERT_TRUE(s.ok());
  // A timer pushes the message, as a protocol's retransmission would.
  Timer send(loop.timers(), [&] { ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("tick"))).ok()); });
  send.arm_after(std::chrono::milliseconds(5));
  loop.run_once();
  EXPECT_TRUE(app.received.empty()) << "the timer is not due yet";
  clock.advance(std::chrono::milliseconds(5));
  for (int i = 0; i < 3 && app.received.empty(); ++i) loop.run_once();
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].text, "tick");
  ASSERT_TRUE((*s)->close().ok());
}

}  // namespace
}  // namespace xk

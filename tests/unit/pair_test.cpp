// The pair driver: two ends of one in-process link, frames crossing in order,
// bounded queues, counted drops, controls, graph specs and event loops.
#include "doubles.hpp"
#include "xk/drivers/pair.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace xk {
namespace {

using drivers::PairDriver;
using drivers::PairHub;
using drivers::PairLink;

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
  return v;
}

MacAddr mac(std::uint8_t last) { return MacAddr{{0x02, 0, 0, 0, 0, last}}; }

PairDriver::Config config(std::uint8_t last, std::size_t queue = 1024, std::size_t mtu = 1514) {
  PairDriver::Config c;
  c.mac = mac(last);
  c.mtu = mtu;
  c.queue_limit = queue;
  return c;
}

// Records what the driver delivers.
using test::Sink;

SessionRef open_on(Protocol& driver, Protocol& upper) {
  Participants none;
  auto s = driver.open(upper, none);
  EXPECT_TRUE(s.ok());
  return *s;
}

void enable(Protocol& driver, Protocol& upper) {
  Participants none;
  ASSERT_TRUE(driver.open_enable(upper, none).ok());
}

TEST(Pair, FramesCrossInOrderWhenTheOtherEndIsPolled) {
  PairHub hub;
  PairLink& link = hub.link("wire");
  PairDriver a("a0", link, config(1));
  PairDriver b("b0", link, config(2));
  EXPECT_EQ(a.end(), 0u);
  EXPECT_EQ(b.end(), 1u);
  EXPECT_EQ(link.attached(), 2u);
  Sink sa, sb;
  enable(a, sa);
  enable(b, sb);
  SessionRef tx = open_on(a, sa);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(tx->push(Msg::copy_of(bytes_of("f" + std::to_string(i)))).ok());
  EXPECT_EQ(b.queued(), 5u);
  EXPECT_EQ(a.queued(), 0u);
  EXPECT_EQ(a.poll(10), 0u) << "nothing comes back to the sender";
  EXPECT_EQ(b.poll(2), 2u);
  EXPECT_EQ(b.poll(10), 3u);
  ASSERT_EQ(sb.texts.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sb.texts[static_cast<std::size_t>(i)], "f" + std::to_string(i));
  EXPECT_TRUE(sa.texts.empty());
  EXPECT_EQ(a.counters().value("tx_frames"), 5u);
  EXPECT_EQ(b.counters().value("rx_frames"), 5u);
  // And back the other way.
  SessionRef back = open_on(b, sb);
  ASSERT_TRUE(back->push(Msg::copy_of(bytes_of("pong"))).ok());
  EXPECT_EQ(a.poll(10), 1u);
  ASSERT_EQ(sa.texts.size(), 1u);
  EXPECT_EQ(sa.texts[0], "pong");
}

TEST(Pair, TheMsgItselfCrossesWithoutACopy) {
  PairHub hub;
  PairDriver a("a0", hub.link("w"), config(1));
  PairDriver b("b0", hub.link("w"), config(2));
  class Keep final : public Protocol {
   public:
    Keep() : Protocol("keep", "keep") {}
    Status demux(Session&, Msg msg) override {
      data = msg.fragments()[0].data();
      return {};
    }
    const std::byte* data = nullptr;
  } keep;
  enable(b, keep);
  Sink sa;
  SessionRef tx = open_on(a, sa);
  Msg m = Msg::copy_of(bytes_of("zero copy"));
  const std::byte* sent = m.fragments()[0].data();
  std::uint64_t created = Buf::created();
  ASSERT_TRUE(tx->push(std::move(m)).ok());
  EXPECT_EQ(b.poll(1), 1u);
  EXPECT_EQ(keep.data, sent);
  EXPECT_EQ(Buf::created(), created);
}

TEST(Pair, QueueLimitOfTheReceiverBoundsTheLinkAndCountsDrops) {
  PairHub hub;
  PairDriver a("a0", hub.link("w"), config(1));
  PairDriver b("b0", hub.link("w"), config(2, /*queue=*/3));
  Sink sa, sb;
  enable(b, sb);
  SessionRef tx = open_on(a, sa);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tx->push(Msg::alloc(10)).ok());
  EXPECT_EQ(tx->push(Msg::alloc(10)).error(), Errc::would_block);
  EXPECT_EQ(tx->push(Msg::alloc(10)).error(), Errc::would_block);
  EXPECT_EQ(a.counters().value("drop_queue_full"), 2u);
  EXPECT_EQ(a.counters().value("tx_frames"), 3u);
  EXPECT_EQ(b.poll(100), 3u);
  ASSERT_TRUE(tx->push(Msg::alloc(10)).ok()) << "room again after the poll";
  EXPECT_EQ(b.poll(100), 1u);
}

TEST(Pair, MtuIsEnforcedAndCounted) {
  PairHub hub;
  PairDriver a("a0", hub.link("w"), config(1, 1024, /*mtu=*/100));
  PairDriver b("b0", hub.link("w"), config(2));
  Sink sa;
  SessionRef tx = open_on(a, sa);
  ASSERT_TRUE(tx->push(Msg::alloc(100)).ok());
  EXPECT_EQ(tx->push(Msg::alloc(101)).error(), Errc::too_large);
  EXPECT_EQ(a.counters().value("drop_too_big"), 1u);
  EXPECT_EQ(b.queued(), 1u);
  EXPECT_EQ(b.poll(10), 1u);
  EXPECT_EQ(b.counters().value("drop_no_receiver"), 1u) << "nobody enabled on b";
}

TEST(Pair, ControlsAnswerMtuMacAndHeaderRoom) {
  PairHub hub;
  PairDriver a("a0", hub.link("w"), config(7, 1024, 9014));
  EXPECT_EQ(*a.control(ctl::GetMtu{}), 9014u);
  EXPECT_EQ(*a.control(ctl::GetHeaderRoom{}), 0u);
  auto local = a.control(ctl::GetLocalAddr{});
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local->peek<MacAddr>(), mac(7));
  EXPECT_EQ(a.control(ctl::GetChecksum{}).error(), Errc::unsupported);
}

TEST(Pair, OneReceiverPerEnd) {
  PairHub hub;
  PairDriver a("a0", hub.link("w"), config(1));
  Sink s1, s2;
  enable(a, s1);
  Participants none;
  EXPECT_EQ(a.open_enable(s2, none).error(), Errc::exists);
  EXPECT_EQ(a.open_disable(s2, none).error(), Errc::not_found);
  EXPECT_TRUE(a.open_disable(s1, none).ok());
  EXPECT_TRUE(a.open_enable(s2, none).ok());
}

TEST(Pair, UnpluggedEndDropsAndAThirdEndIsRefused) {
  PairHub hub;
  PairLink& link = hub.link("w");
  Sink s;
  {
    PairDriver a("a0", link, config(1));
    SessionRef tx = open_on(a, s);
    ASSERT_TRUE(tx->push(Msg::alloc(20)).ok()) << "a cable with no peer loses the frame";
    EXPECT_EQ(a.counters().value("drop_no_peer"), 1u);
    PairDriver b("b0", link, config(2));
    EXPECT_THROW(PairDriver("c0", link, config(3)), std::invalid_argument);
    ASSERT_TRUE(tx->push(Msg::alloc(20)).ok());
    EXPECT_EQ(link.queued(1), 1u);
  }
  // Both gone: the queued frame went with its receiver.
  EXPECT_EQ(link.attached(), 0u);
  EXPECT_EQ(link.queued(1), 0u);
  PairDriver again("a1", link, config(1));
  EXPECT_EQ(again.end(), 0u) << "a freed end can be taken again";
}

TEST(Pair, LinkDestroyedFirstLeavesDriversSafe) {
  auto hub = std::make_unique<PairHub>();
  auto a = std::make_unique<PairDriver>("a0", hub->link("w"), config(1));
  auto b = std::make_unique<PairDriver>("b0", hub->link("w"), config(2));
  Sink s;
  SessionRef tx = open_on(*a, s);
  ASSERT_TRUE(tx->push(Msg::alloc(20)).ok());
  hub.reset();
  EXPECT_EQ(b->poll(10), 0u);
  ASSERT_TRUE(tx->push(Msg::alloc(20)).ok());
  EXPECT_EQ(a->counters().value("drop_no_peer"), 1u);
}

TEST(Pair, TwoGraphsFindTheSameLinkThroughTheHub) {
  PairHub hub;
  Registry reg;
  drivers::register_pair(reg, hub);
  ManualClock clock;
  EventLoop loop_a(clock), loop_b(clock);
  Graph ga = Graph::build("pair net0 link=wire0 mac=02:00:00:00:00:0a\n", reg, &loop_a);
  Graph gb = Graph::build("pair net0 link=wire0 mac=02:00:00:00:00:0b mtu=9k queue=16\n", reg, &loop_b);
  auto* a = ga.find_as<PairDriver>("net0");
  auto* b = gb.find_as<PairDriver>("net0");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(hub.size(), 1u);
  EXPECT_EQ(b->config().mtu, 9216u);
  EXPECT_EQ(b->config().queue_limit, 16u);
  Sink sa, sb;
  enable(*b, sb);
  SessionRef tx = open_on(*a, sa);
  ASSERT_TRUE(tx->push(Msg::copy_of(bytes_of("over the hub"))).ok());
  loop_a.run_once();
  EXPECT_TRUE(sb.texts.empty()) << "the receiving loop delivers, not the sender's";
  loop_b.run_once();
  ASSERT_EQ(sb.texts.size(), 1u);
  EXPECT_EQ(sb.texts[0], "over the hub");
  EXPECT_THROW((void)Graph::build("pair net0 link=wire0 mac=02:00:00:00:00:0c\n", reg), GraphError)
      << "a third end";
  EXPECT_THROW((void)Graph::build("pair net0 link=wire1\n", reg), GraphError) << "mac= is required";
  EXPECT_THROW((void)Graph::build("pair net0 mac=02:00:00:00:00:01\n", reg), GraphError) << "link= is required";
}

}  // namespace
}  // namespace xk

// The fault micro-protocol: the pass-through plumbing (active and passive
// opens, upcalls reaching the right upper, control going down), then each
// fault, statistically where it is random, with a ManualClock where it is timed.
#include "xk/protocols/fault.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <string>
#include <vector>

#include "doubles.hpp"
#include "fake_ip.hpp"
#include "xk/drivers/loopback.hpp"
#include "xk/protocols/udp.hpp"
#include "xk/protocols/udp_wire.hpp"

namespace xk {
namespace {

using fault::FaultConfig;
using fault::FaultProtocol;

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

Msg msg_of(std::string_view s) { return Msg::copy_of(bytes_of(s)); }

using test::FakeLink;

using test::App;

SessionRef open_through(Protocol& p, Protocol& upper) {
  Participants none;
  Result<SessionRef> s = p.open(upper, none);
  EXPECT_TRUE(s.ok());
  return s.ok() ? *s : SessionRef();
}

// ---- the pass-through ------------------------------------------------------

struct PassThrough : ::testing::Test {
  FakeLink link;
  FaultProtocol f0{"f0", link, FaultConfig{}};
  App app;
};

TEST_F(PassThrough, PushesGoDownAndDemuxesComeUpOnTheWrapper) {
  SessionRef s = open_through(f0, app);
  ASSERT_EQ(link.opened.size(), 1u);
  EXPECT_NE(s.get(), link.opened[0].get()) << "the upper gets our wrapper";
  EXPECT_EQ(link.opened[0]->upper()->kind(), "fault-tap");
  ASSERT_TRUE(s->push(msg_of("down")).ok());
  ASSERT_EQ(link.sent.size(), 1u);
  EXPECT_EQ(text_of(link.sent[0]), "down");
  ASSERT_TRUE(link.deliver_on(*link.opened[0], msg_of("up")).ok());
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].session, s.get());
  EXPECT_EQ(app.received[0].text, "up");
  EXPECT_EQ(f0.counters().value("tx_passed"), 1u);
  EXPECT_EQ(f0.counters().value("rx_passed"), 1u);
  ASSERT_TRUE(s->close().ok());
  EXPECT_EQ(link.closes, 1);
  EXPECT_EQ(f0.session_count(), 0u);
}

TEST_F(PassThrough, DriverStyleReceiveGetsAWrapperToo) {
  Participants none;
  ASSERT_TRUE(f0.open_enable(app, none).ok());
  ASSERT_TRUE(link.deliver(msg_of("a")).ok());
  ASSERT_TRUE(link.deliver(msg_of("b")).ok());
  ASSERT_EQ(app.received.size(), 2u);
  EXPECT_EQ(app.received[0].session, app.received[1].session);
  EXPECT_NE(app.received[0].session, link.rx_session.get());
  ASSERT_TRUE(f0.open_disable(app, none).ok());
  EXPECT_EQ(link.receiver, nullptr);
}

TEST_F(PassThrough, PassiveOpensReachTheUpperWithAWrapper) {
  Participants none;
  ASSERT_TRUE(f0.open_enable(app, none).ok());
  Result<SessionRef> lower = link.announce();
  ASSERT_TRUE(lower.ok());
  ASSERT_EQ(app.opened.size(), 1u);
  SessionRef w = app.opened[0];
  EXPECT_EQ(&w->protocol(), &f0);
  ASSERT_TRUE(link.deliver_on(**lower, msg_of("hello")).ok());
  ASSERT_EQ(app.received.size(), 1u);
  EXPECT_EQ(app.received[0].session, w.get());
  ASSERT_TRUE(w->push(msg_of("reply")).ok());
  ASSERT_EQ(link.sent.size(), 1u);
  // Session control is the lower session's.
  auto peer = w->control(ctl::GetPeerAddr{});
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(*peer->peek<IpAddr>(), IpAddr(Ipv4Addr{0x0a000002}));
}

TEST_F(PassThrough, EachUpperHasItsOwnTap) {
  App other;
  SessionRef a = open_through(f0, app);
  SessionRef b = open_through(f0, other);
  ASSERT_TRUE(link.deliver_on(*link.opened[1], msg_of("for other")).ok());
  ASSERT_TRUE(link.deliver_on(*link.opened[0], msg_of("for app")).ok());
  ASSERT_EQ(app.received.size(), 1u);
  ASSERT_EQ(other.received.size(), 1u);
  EXPECT_EQ(app.received[0].text, "for app");
  EXPECT_EQ(other.received[0].session, b.get());
  // An ICMP error handed to the tap goes to its upper.
  ASSERT_TRUE(link.opened[1]->upper()->control(ctl::DeliverError{}).ok());
  EXPECT_EQ(other.errors, 1);
  EXPECT_EQ(app.errors, 0);
}

TEST_F(PassThrough, ControlGoesDownExceptCounters) {
  EXPECT_EQ(*f0.control(ctl::GetMtu{}), 1500u);
  EXPECT_EQ((*f0.control(ctl::GetCounters{}))->owner(), "f0");
  EXPECT_EQ(f0.control(ctl::GetChecksum{}).error(), Errc::unsupported);
}

TEST(PassThroughLifetime, WrapperOutlivingTheProtocolIsClosed) {
  FakeLink link;
  App app;
  SessionRef s;
  {
    FaultProtocol f0("f0", link, FaultConfig{});
    s = open_through(f0, app);
  }
  EXPECT_EQ(s->push(msg_of("x")).error(), Errc::closed);
}

// ---- faults ------------------------------------------------------------------

struct Faulty {
  explicit Faulty(FaultConfig c, EventLoop* loop = nullptr) : f0("f0", link, c, loop) { s = open_through(f0, app); }
  void push_n(int n, std::size_t size = 10) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(s->push(Msg::alloc(size)).ok());
  }
  std::vector<std::string> sent_texts() const {
    std::vector<std::string> v;
    for (const Msg& m : link.sent) v.push_back(text_of(m));
    return v;
  }
  FakeLink link;
  App app;
  FaultProtocol f0;
  SessionRef s;
};

FaultConfig with(double FaultConfig::*field, double p, std::uint64_t seed = 1) {
  FaultConfig c;
  c.*field = p;
  c.seed = seed;
  return c;
}

TEST(Fault, LossRateIsAboutAsConfigured) {
  Faulty t(with(&FaultConfig::loss, 0.3));
  t.push_n(10000);
  // Binomial(10000, 0.7): sd 46; the band is 6.5 sd wide each way.
  EXPECT_GT(t.link.sent.size(), 6700u);
  EXPECT_LT(t.link.sent.size(), 7300u);
  EXPECT_EQ(t.f0.counters().value("tx_lost") + t.link.sent.size(), 10000u);
}

TEST(Fault, DuplicationSharesTheBuffers) {
  Faulty t(with(&FaultConfig::duplicate, 0.2));
  t.push_n(10000);
  EXPECT_GT(t.link.sent.size(), 11700u);
  EXPECT_LT(t.link.sent.size(), 12300u);
  EXPECT_EQ(t.f0.counters().value("tx_duplicated") + 10000u, t.link.sent.size());
  Faulty always(with(&FaultConfig::duplicate, 1.0));
  always.push_n(1);
  ASSERT_EQ(always.link.sent.size(), 2u);
  EXPECT_EQ(always.link.sent[0].fragments()[0].data(), always.link.sent[1].fragments()[0].data());
}

TEST(Fault, ReorderSwapsAMessageWithTheNext) {
  Faulty t(with(&FaultConfig::reorder, 1.0));
  for (const char* m : {"1", "2", "3", "4", "5"}) ASSERT_TRUE(t.s->push(msg_of(m)).ok());
  EXPECT_EQ(t.sent_texts(), (std::vector<std::string>{"2", "1", "4", "3"}));
  EXPECT_EQ(t.f0.held(), 1u) << "5 waits for a successor";
  EXPECT_EQ(t.f0.counters().value("tx_reordered"), 3u);
}

TEST(Fault, ReorderRateIsAboutAsConfigured) {
  Faulty t(with(&FaultConfig::reorder, 0.1));
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(t.s->push(msg_of(std::to_string(i))).ok());
  std::size_t swapped = 0;
  for (std::size_t i = 1; i < t.link.sent.size(); ++i) {
    if (std::stoi(text_of(t.link.sent[i])) < std::stoi(text_of(t.link.sent[i - 1]))) ++swapped;
  }
  EXPECT_EQ(swapped, t.f0.counters().value("tx_reordered") - t.f0.held());
  // A held message skips its own draw: about p / (1 + p) of all messages.
  EXPECT_GT(swapped, 750u);
  EXPECT_LT(swapped, 1050u);
}

TEST(Fault, CorruptionFlipsOneBitOfAPrivateCopy) {
  Faulty t(with(&FaultConfig::corrupt, 1.0));
  const std::string original = "shared with the retransmission queue";
  Msg mine = msg_of(original);
  Msg kept = mine.share();  // as a sender keeps its copy
  ASSERT_TRUE(t.s->push(std::move(mine)).ok());
  ASSERT_EQ(t.link.sent.size(), 1u);
  EXPECT_EQ(text_of(kept), original) << "the sender's buffer is untouched";
  std::string got = text_of(t.link.sent[0]);
  ASSERT_EQ(got.size(), original.size());
  int bits = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    bits += std::popcount(static_cast<unsigned>(static_cast<unsigned char>(got[i] ^ original[i])));
  }
  EXPECT_EQ(bits, 1);
  EXPECT_NE(t.link.sent[0].fragments()[0].buf, kept.fragments()[0].buf);
  EXPECT_EQ(t.f0.counters().value("tx_corrupted"), 1u);
}

// A corrupted message that is also duplicated is two corrupted messages on
// the wire, and counts as two: the receiver drops both for their checksum,
// and "dropped for a bad checksum <= corrupted" holds (soak.sh checks it).
TEST(Fault, ACorruptedDuplicateCountsTwice) {
  FaultConfig c = with(&FaultConfig::corrupt, 1.0);
  c.duplicate = 1.0;
  Faulty t(c);
  const std::string original = "one bit off, twice";
  ASSERT_TRUE(t.s->push(msg_of(original)).ok());
  ASSERT_EQ(t.link.sent.size(), 2u);
  EXPECT_NE(text_of(t.link.sent[0]), original);
  EXPECT_EQ(text_of(t.link.sent[0]), text_of(t.link.sent[1])) << "the twin of the corrupted copy";
  EXPECT_EQ(t.f0.counters().value("tx_corrupted"), 2u);
  EXPECT_EQ(t.f0.counters().value("tx_duplicated"), 1u);
}

TEST(Fault, SameSeedSameRunOtherSeedOtherRun) {
  auto run = [](std::uint64_t seed) {
    FaultConfig c;
    c.loss = 0.1;
    c.duplicate = 0.1;
    c.reorder = 0.1;
    c.corrupt = 0.1;
    c.seed = seed;
    Faulty t(c);
    for (int i = 0; i < 2000; ++i) EXPECT_TRUE(t.s->push(msg_of("message " + std::to_string(i))).ok());
    return t.sent_texts();
  };
  std::vector<std::string> a = run(42);
  EXPECT_EQ(a, run(42));
  EXPECT_NE(a, run(43));
}

TEST(Fault, DirectionLimitsTheFaults) {
  FaultConfig c;
  c.loss = 1.0;
  c.dir = fault::Direction::rx;
  Faulty t(c);
  t.push_n(5);
  EXPECT_EQ(t.link.sent.size(), 5u);
  ASSERT_TRUE(t.link.deliver_on(*t.link.opened[0], msg_of("lost")).ok());
  EXPECT_TRUE(t.app.received.empty());
  EXPECT_EQ(t.f0.counters().value("rx_lost"), 1u);
  EXPECT_EQ(t.f0.counters().value("tx_lost"), 0u);
}

TEST(Fault, DelayRunsOnTheLoopClock) {
  ManualClock clock;
  EventLoop loop(clock);
  FaultConfig c;
  c.delay = std::chrono::milliseconds(5);
  Faulty t(c, &loop);
  ASSERT_TRUE(t.s->push(msg_of("late")).ok());
  ASSERT_TRUE(t.link.deliver_on(*t.link.opened[0], msg_of("up late")).ok());
  EXPECT_EQ(t.f0.held(), 2u);
  clock.advance(std::chrono::milliseconds(4));
  loop.run_once();
  EXPECT_TRUE(t.link.sent.empty());
  EXPECT_TRUE(t.app.received.empty());
  clock.advance(std::chrono::milliseconds(1));
  loop.run_once();
  ASSERT_EQ(t.link.sent.size(), 1u);
  ASSERT_EQ(t.app.received.size(), 1u);
  EXPECT_EQ(t.app.received[0].text, "up late");
  EXPECT_EQ(t.f0.held(), 0u);
  EXPECT_EQ(t.f0.counters().value("tx_delayed"), 1u);
}

TEST(Fault, JitterKeepsDeliveriesInDueOrder) {
  ManualClock clock;
  EventLoop loop(clock);
  FaultConfig c;
  c.delay = std::chrono::milliseconds(1);
  c.jitter = std::chrono::milliseconds(10);
  Faulty t(c, &loop);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(t.s->push(msg_of(std::to_string(i))).ok());
  clock.advance(std::chrono::milliseconds(12));
  loop.run_once();
  EXPECT_EQ(t.link.sent.size(), 50u);
  EXPECT_NE(t.sent_texts().front(), "0") << "jitter mixes them (seed 1)";
}

TEST(Fault, HeldMessageGoesOutAfterTheHoldTime) {
  ManualClock clock;
  EventLoop loop(clock);
  FaultConfig c;
  c.reorder = 1.0;
  c.reorder_hold = std::chrono::milliseconds(10);
  Faulty t(c, &loop);
  ASSERT_TRUE(t.s->push(msg_of("alone")).ok());
  loop.run_once();
  EXPECT_TRUE(t.link.sent.empty());
  clock.advance(std::chrono::milliseconds(10));
  loop.run_once();
  ASSERT_EQ(t.link.sent.size(), 1u);
  EXPECT_EQ(t.f0.held(), 0u);
}

TEST(Fault, RateLimitDropsTheExcess) {
  ManualClock clock;
  EventLoop loop(clock);
  FaultConfig c;
  c.rate = 1000;  // bytes per second
  c.burst = 1000;
  Faulty t(c, &loop);
  t.push_n(12, 100);
  EXPECT_EQ(t.link.sent.size(), 10u) << "the burst";
  EXPECT_EQ(t.f0.counters().value("tx_rate_dropped"), 2u);
  clock.advance(std::chrono::milliseconds(250));
  t.push_n(3, 100);
  EXPECT_EQ(t.link.sent.size(), 12u) << "250 ms refill 250 bytes";
}

// queue=: a bottleneck link with a FIFO in front -- each message leaves once
// what queued before it and its own bytes have gone at the rate; a full
// queue drops (tail drop).
TEST(Fault, QueueShapesToTheRateAndDropsOnlyWhenFull) {
  ManualClock clock;
  EventLoop loop(clock);
  FaultConfig c;
  c.rate = 1000;  // bytes per second: 100 ms per 100-byte message
  c.queue = 300;
  Faulty t(c, &loop);
  t.push_n(4, 100);
  EXPECT_EQ(t.f0.counters().value("tx_rate_dropped"), 1u) << "three fit the queue";
  EXPECT_EQ(t.f0.held(), 3u);
  for (std::size_t sent = 1; sent <= 3; ++sent) {
    clock.advance(std::chrono::milliseconds(99));
    loop.run_once();
    EXPECT_EQ(t.link.sent.size(), sent - 1);
    clock.advance(std::chrono::milliseconds(1));
    loop.run_once();
    EXPECT_EQ(t.link.sent.size(), sent) << "one more every 100 ms";
  }
  t.push_n(1, 100);  // an empty queue: 100 ms of serialization only
  clock.advance(std::chrono::milliseconds(100));
  loop.run_once();
  EXPECT_EQ(t.link.sent.size(), 4u);
}

TEST(Fault, HeldMessagesAreReleasedOnDestruction) {
  ManualClock clock;
  EventLoop loop(clock);
  FaultConfig c;
  c.delay = std::chrono::seconds(1);
  auto t = std::make_unique<Faulty>(c, &loop);
  t->push_n(3);
  EXPECT_EQ(t->f0.held(), 3u);
  t.reset();  // the leak check fails the test if any buffer or session survives
}

TEST(FaultGraph, OptionsAndLoopRequirement) {
  Registry reg;
  drivers::register_loopback(reg);
  fault::register_fault(reg);
  Graph g = Graph::build("loopback lo0\nfault f0 below=lo0 loss=0.25 dir=tx seed=9 rate=1m\n", reg);
  auto* f0 = g.find_as<FaultProtocol>("f0");
  ASSERT_NE(f0, nullptr);
  EXPECT_EQ(f0->config().loss, 0.25);
  EXPECT_EQ(f0->config().dir, fault::Direction::tx);
  EXPECT_EQ(f0->config().seed, 9u);
  EXPECT_EQ(f0->config().rate, 1u << 20);
  EXPECT_THROW((void)Graph::build("loopback lo0\nfault f0 below=lo0 delay=5\n", reg), GraphError);
  EXPECT_THROW((void)Graph::build("loopback lo0\nfault f0 below=lo0 loss=2\n", reg), GraphError);
}

// ---- udp over fault ------------------------------------------------------------

using test::FakeIp;

TEST(FaultUnderUdp, DatagramsCrossTheFaultBothWays) {
  FakeIp ip0(Ipv4Addr{0x0a000001}, udp::kIpProtocol);
  FaultConfig c;
  c.duplicate = 1.0;
  FaultProtocol f0("f0", ip0, c);
  udp::UdpProtocol u0("u0", f0);
  udp::UdpSocket s = u0.socket();
  ASSERT_TRUE(s.connect(Ipv4Addr{0x0a000002}, Port{7}).ok());
  ASSERT_TRUE(s.send(bytes_of("echo")).ok());
  ASSERT_EQ(ip0.sent.size(), 2u) << "duplicated on the way down";
  // The peer echoes the datagram back: swap the ports; the checksum holds.
  std::vector<std::byte> raw = ip0.sent[0].bytes;
  std::swap_ranges(raw.begin(), raw.begin() + 2, raw.begin() + 2);
  ASSERT_TRUE(ip0.receive(Ipv4Addr{0x0a000002}, raw).ok());
  ASSERT_EQ(s.queued_datagrams(), 2u) << "duplicated on the way up";
  EXPECT_EQ(text_of(s.recvfrom()->payload), "echo");
  EXPECT_EQ(u0.counters().value("drop_bad_csum"), 0u);
  ASSERT_TRUE(s.close().ok());
}

}  // namespace
}  // namespace xk

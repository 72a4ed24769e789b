// RACK-TLP (RFC 8985) and PRR (RFC 6937) bookkeeping on its own: the
// transmission log, what an ACK delivered, when a segment is lost, the
// reordering window, the probe's outcomes and PRR's send counts.
#include "xk/protocols/tcp_rack.hpp"

#include <gtest/gtest.h>

namespace xk::tcp {
namespace {

using namespace std::chrono_literals;

const Time t0 = Time(std::chrono::seconds(100));
constexpr std::uint32_t kMss = 1000;

SeqNum S(std::uint32_t v) { return SeqNum(v); }

TEST(Rack, NewDataOfOneInstantIsOneRecordAndSacksSplitIt) {
  Rack r;
  for (std::uint32_t i = 0; i < 10; ++i) r.on_send(S(1000 * i), S(1000 * (i + 1)), t0);
  EXPECT_EQ(r.records(), 1u);
  EXPECT_EQ(r.outstanding(), 10000u);
  const SackBlock b[] = {{S(3000), S(5000)}};
  Rack::AckResult a = r.on_ack(S(1000), b, false, std::nullopt, S(10000), t0 + 10ms);
  EXPECT_EQ(a.delivered, 3000u) << "1000 acknowledged and 2000 SACKed";
  EXPECT_TRUE(a.advanced);
  ASSERT_EQ(r.records(), 3u);
  EXPECT_EQ(r.log()[0].start, S(1000));
  EXPECT_EQ(r.log()[1].flags, Rack::kSacked);
  EXPECT_EQ(r.sacked_bytes(), 2000u);
  EXPECT_EQ(r.pipe(), 7000u);
  // Blocks beyond what was sent are clipped, a repeated one counts nothing.
  const SackBlock again[] = {{S(3000), S(5000)}, {S(9000), S(20000)}};
  a = r.on_ack(S(1000), again, false, std::nullopt, S(10000), t0 + 11ms);
  EXPECT_EQ(a.delivered, 1000u);
  EXPECT_EQ(r.sacked_bytes(), 3000u);
}

TEST(Rack, ASegmentIsLostOnceALaterOneWasDeliveredAnRttPlusTheWindowAgo) {
  Rack r;
  r.on_send(S(0), S(1000), t0);
  r.on_send(S(1000), S(2000), t0 + 1ms);
  r.on_send(S(2000), S(3000), t0 + 2ms);
  // The third arrives after 10 ms: RACK.rtt = 10 ms, min RTT 10 ms.
  const SackBlock b[] = {{S(2000), S(3000)}};
  (void)r.on_ack(S(0), b, false, std::nullopt, S(3000), t0 + 12ms);
  EXPECT_EQ(r.min_rtt(), 10ms);
  EXPECT_EQ(r.reo_wnd(10ms, false, kMss), 2500us) << "min RTT / 4";
  // Segment 1 was sent at t0: lost at t0 + 10 + 2.5 ms; segment 2 at t0 + 13.5.
  Duration wait = r.detect_loss(t0 + 12ms, 10ms, false, kMss);
  EXPECT_EQ(wait, 1500us);
  EXPECT_EQ(r.lost_bytes(), 0u);
  wait = r.detect_loss(t0 + 12500us, 10ms, false, kMss);
  EXPECT_EQ(r.lost_bytes(), 1000u);
  EXPECT_EQ(wait, 1000us);
  ASSERT_TRUE(r.next_lost(kMss).has_value());
  EXPECT_EQ(r.next_lost(kMss)->start, S(0));
  (void)r.detect_loss(t0 + 13500us, 10ms, false, kMss);
  EXPECT_EQ(r.lost_bytes(), 2000u);
  EXPECT_EQ(r.pipe(), 0u);
  // Sent again: no longer lost, in flight, marked retransmitted.
  r.on_send(S(0), S(1000), t0 + 14ms);
  EXPECT_EQ(r.lost_bytes(), 1000u);
  EXPECT_EQ(r.pipe(), 1000u);
  EXPECT_EQ(r.log()[0].flags, Rack::kRetransmitted);
}

TEST(Rack, ARetransmissionsAckThatCameTooSoonIsForTheOriginalAndIsNotTaken) {
  Rack r;
  r.on_send(S(0), S(1000), t0);
  r.on_send(S(1000), S(2000), t0);
  const SackBlock b[] = {{S(1000), S(2000)}};
  (void)r.on_ack(S(0), b, false, std::nullopt, S(2000), t0 + 10ms);
  r.on_send(S(0), S(1000), t0 + 20ms);  // retransmitted
  // Acknowledged 1 ms later: faster than the path ever was, so it is the
  // original's ACK: RACK's RTT and time stay.
  (void)r.on_ack(S(2000), {}, false, std::nullopt, S(2000), t0 + 21ms);
  EXPECT_EQ(r.rtt(), 10ms);
  EXPECT_EQ(r.min_rtt(), 10ms);
  EXPECT_TRUE(r.empty());
}

TEST(Rack, AnOriginalDeliveredBelowTheHighestIsReorderingAndWidensNothingUntilSeen) {
  Rack r;
  for (std::uint32_t i = 0; i < 4; ++i) r.on_send(S(1000 * i), S(1000 * (i + 1)), t0 + std::chrono::milliseconds(i));
  const SackBlock b[] = {{S(1000), S(4000)}};
  (void)r.on_ack(S(0), b, false, std::nullopt, S(4000), t0 + 13ms);
  EXPECT_FALSE(r.reordering_seen());
  EXPECT_EQ(r.reo_wnd(10ms, false, kMss), Duration{0}) << "three segments SACKed: no patience";
  (void)r.on_ack(S(4000), {}, false, std::nullopt, S(4000), t0 + 14ms);
  EXPECT_TRUE(r.reordering_seen());
  EXPECT_GT(r.reo_wnd(10ms, true, kMss), Duration{0}) << "after reordering even in recovery";
}

TEST(Rack, DsacksWidenTheWindowOncePerRoundAndSixteenQuietRecoveriesResetIt) {
  Rack r;
  r.on_send(S(0), S(1000), t0);
  r.on_send(S(1000), S(2000), t0 + 1ms);
  const SackBlock b[] = {{S(1000), S(2000)}};
  (void)r.on_ack(S(0), b, false, std::nullopt, S(2000), t0 + 9ms);  // min RTT 8 ms
  (void)r.on_ack(S(1000), {}, false, std::nullopt, S(2000), t0 + 10ms);  // reordering
  EXPECT_EQ(r.reo_wnd(1s, false, kMss), 2ms);
  (void)r.on_ack(S(1000), {}, true, std::nullopt, S(2000), t0 + 11ms);
  EXPECT_EQ(r.reo_wnd_mult(), 2);
  (void)r.on_ack(S(1000), {}, true, std::nullopt, S(2000), t0 + 12ms);
  EXPECT_EQ(r.reo_wnd_mult(), 2) << "one step per round trip";
  EXPECT_EQ(r.reo_wnd(1s, false, kMss), 4ms);
  EXPECT_EQ(r.reo_wnd(3ms, false, kMss), 3ms) << "never above SRTT";
  for (int i = 0; i < 15; ++i) r.recovery_ended();
  EXPECT_EQ(r.reo_wnd_mult(), 2);
  r.recovery_ended();
  EXPECT_EQ(r.reo_wnd_mult(), 1);
}

TEST(Rack, AnRtoMarksEverythingLostAndForgetsSacks) {
  Rack r;
  r.on_send(S(0), S(3000), t0);
  const SackBlock b[] = {{S(1000), S(2000)}};
  (void)r.on_ack(S(0), b, false, std::nullopt, S(3000), t0 + 1ms);
  r.on_rto();
  EXPECT_EQ(r.sacked_bytes(), 0u);
  EXPECT_EQ(r.lost_bytes(), 3000u);
  EXPECT_EQ(r.pipe(), 0u);
  EXPECT_EQ(r.next_lost(kMss)->end, S(1000));
}

TEST(Tlp, ProbeTimeoutFollowsRfc8985) {
  EXPECT_EQ(Tlp::pto(10ms, false, 200ms, 2ms, 1s), 20ms);
  EXPECT_EQ(Tlp::pto(10ms, true, 200ms, 2ms, 1s), 220ms) << "one segment: the delayed ACK too";
  EXPECT_EQ(Tlp::pto(10ms, true, 200ms, 2ms, 150ms), 150ms) << "never after the RTO";
  EXPECT_EQ(Tlp::pto(std::nullopt, false, 200ms, 2ms, 5s), 1s) << "no RTT sample yet";
  EXPECT_EQ(Tlp::pto(100us, false, 200ms, 2ms, 1s), 2ms) << "the floor";
}

TEST(Tlp, OutcomesOfTheProbesAck) {
  Tlp t;
  t.sent(S(5000), true);
  EXPECT_EQ(t.on_ack(S(4000), std::nullopt, false), Tlp::Outcome::pending);
  EXPECT_EQ(t.on_ack(S(5000), std::nullopt, false), Tlp::Outcome::pending) << "either copy may be ACKed";
  EXPECT_EQ(t.on_ack(S(5000), SackBlock{S(4000), S(5000)}, false), Tlp::Outcome::no_loss);
  EXPECT_FALSE(t.in_flight());
  t.sent(S(5000), true);
  EXPECT_EQ(t.on_ack(S(6000), std::nullopt, false), Tlp::Outcome::repaired);
  t.sent(S(5000), true);
  EXPECT_EQ(t.on_ack(S(5000), std::nullopt, true), Tlp::Outcome::no_loss) << "a pure duplicate: both arrived";
  t.sent(S(5000), false);
  EXPECT_EQ(t.on_ack(S(5000), std::nullopt, false), Tlp::Outcome::no_loss) << "new data delivered";
}

// RFC 6937 section 3's arithmetic: RecoverFS 20 segments, ssthresh 10.
TEST(Prr, ProportionalThenSlowStartReductionBound) {
  Prr p;
  p.start(20 * kMss);
  // pipe above ssthresh: ceil(delivered * 10 / 20) - out, the first ACK at least one segment.
  EXPECT_EQ(p.on_ack(kMss, 19 * kMss, 10 * kMss, kMss), kMss);
  p.on_sent(kMss);
  EXPECT_EQ(p.on_ack(kMss, 19 * kMss, 10 * kMss, kMss), 0u);    // 1000 - 1000
  EXPECT_EQ(p.on_ack(kMss, 18 * kMss, 10 * kMss, kMss), 500u);  // 1500 - 1000
  EXPECT_EQ(p.on_ack(kMss, 17 * kMss, 10 * kMss, kMss), kMss);  // 2000 - 1000
  p.on_sent(kMss);
  // pipe at or below ssthresh: up to ssthresh, at most delivered - out + 1 segment.
  EXPECT_EQ(p.on_ack(5 * kMss, 6 * kMss, 10 * kMss, kMss), 4 * kMss);
  EXPECT_EQ(p.on_ack(kMss, 9 * kMss, 10 * kMss, kMss), kMss);
  EXPECT_EQ(p.prr_delivered(), 10u * kMss);
}

}  // namespace
}  // namespace xk::tcp

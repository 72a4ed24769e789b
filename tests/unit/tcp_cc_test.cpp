// The RFC 6298 retransmission-timer estimator and the congestion controllers
// (NewReno: RFC 5681, 3465, 6582, 6928; CUBIC: RFC 9438), driven with
// synthetic RTT samples and ACK streams and checked against the RFC formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "xk/protocols/tcp_cc.hpp"
#include "xk/protocols/tcp_rto.hpp"

namespace xk::tcp {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr std::uint32_t kMss = 1460;

RtoConfig cluster_rto() {
  RtoConfig c;
  c.min_rto = milliseconds(5);
  return c;
}

// ---- RtoEstimator ------------------------------------------------------------

TEST(Rto, BeforeAnySampleTheInitialRtoIsOneSecond) {
  RtoEstimator rto;
  EXPECT_FALSE(rto.has_sample());
  EXPECT_EQ(rto.rto(), seconds(1));  // RFC 6298 2.1
  EXPECT_EQ(rto.backoff_count(), 0u);
}

TEST(Rto, FirstSampleSetsSrttAndHalfOfItAsRttvar) {
  RtoEstimator rto(cluster_rto());
  rto.on_rtt_sample(milliseconds(100));
  // RFC 6298 2.2: SRTT = R, RTTVAR = R/2, RTO = SRTT + max(G, 4 RTTVAR).
  EXPECT_TRUE(rto.has_sample());
  EXPECT_EQ(rto.srtt(), milliseconds(100));
  EXPECT_EQ(rto.rttvar(), milliseconds(50));
  EXPECT_EQ(rto.rto(), milliseconds(300));
}

TEST(Rto, LaterSamplesUseAlphaOneEighthAndBetaOneQuarter) {
  RtoEstimator rto(cluster_rto());
  rto.on_rtt_sample(milliseconds(100));
  rto.on_rtt_sample(milliseconds(200));
  // RFC 6298 2.3: RTTVAR = 3/4 * 50 + 1/4 * |100 - 200| = 62.5 ms (with the
  // old SRTT); SRTT = 7/8 * 100 + 1/8 * 200 = 112.5 ms.
  EXPECT_EQ(rto.rttvar(), microseconds(62500));
  EXPECT_EQ(rto.srtt(), microseconds(112500));
  EXPECT_EQ(rto.rto(), microseconds(112500 + 4 * 62500));
}

TEST(Rto, TracksTheRfcFormulaOverARandomSeries) {
  RtoEstimator rto(cluster_rto());
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int64_t> us(200, 90000);
  double srtt = 0;
  double rttvar = 0;
  for (int i = 0; i < 2000; ++i) {
    double r = static_cast<double>(us(rng)) * 1000.0;  // ns
    rto.on_rtt_sample(Duration(static_cast<std::int64_t>(r)));
    if (i == 0) {
      srtt = r;
      rttvar = r / 2;
    } else {
      rttvar = 0.75 * rttvar + 0.25 * std::abs(srtt - r);
      srtt = 0.875 * srtt + 0.125 * r;
    }
    // Integer nanoseconds truncate at most a few ns per step; the filter
    // forgets old errors, so they never add up.
    ASSERT_NEAR(static_cast<double>(rto.srtt().count()), srtt, 20.0) << "sample " << i;
    ASSERT_NEAR(static_cast<double>(rto.rttvar().count()), rttvar, 20.0) << "sample " << i;
    double expect = std::clamp(srtt + std::max(1000.0, 4 * rttvar), 5e6, 60e9);
    ASSERT_NEAR(static_cast<double>(rto.rto().count()), expect, 100.0) << "sample " << i;
  }
}

TEST(Rto, GranularityBoundsTheVarianceTerm) {
  RtoConfig cfg;
  cfg.min_rto = Duration::zero();
  cfg.granularity = milliseconds(1);
  RtoEstimator rto(cfg);
  // Identical samples drive RTTVAR towards 0; RTO = SRTT + max(G, 4 RTTVAR).
  for (int i = 0; i < 200; ++i) rto.on_rtt_sample(microseconds(300));
  ASSERT_LT(4 * rto.rttvar(), milliseconds(1));
  EXPECT_EQ(rto.srtt(), microseconds(300));
  EXPECT_EQ(rto.rto(), microseconds(1300));
}

TEST(Rto, MinimumAndMaximumBoundTheTimeout) {
  RtoEstimator rfc;  // RFC 6298 2.4: at least 1 s
  rfc.on_rtt_sample(microseconds(50));
  EXPECT_EQ(rfc.rto(), seconds(1));

  RtoEstimator cluster(cluster_rto());
  cluster.on_rtt_sample(microseconds(50));
  EXPECT_EQ(cluster.rto(), milliseconds(5));

  RtoEstimator slow;
  slow.on_rtt_sample(seconds(30));  // 30 + 4 * 15 = 90 s
  EXPECT_EQ(slow.rto(), seconds(60));  // RFC 6298 2.5
}

TEST(Rto, BackoffDoublesUpToTheMaximumAndASampleResetsIt) {
  RtoConfig cfg = cluster_rto();
  cfg.max_rto = milliseconds(400);
  RtoEstimator rto(cfg);
  rto.on_rtt_sample(milliseconds(10));
  ASSERT_EQ(rto.rto(), milliseconds(30));
  Duration expect[] = {milliseconds(60), milliseconds(120), milliseconds(240), milliseconds(400),
                       milliseconds(400)};
  for (std::uint32_t i = 0; i < 5; ++i) {
    rto.backoff();  // RFC 6298 5.5
    EXPECT_EQ(rto.rto(), expect[i]);
    EXPECT_EQ(rto.backoff_count(), i + 1);
  }
  // Karn: only a valid sample collapses the backed-off timer.
  rto.on_rtt_sample(milliseconds(10));
  EXPECT_EQ(rto.backoff_count(), 0u);
  // RTTVAR = 3/4 * 5 + 0 = 3.75 ms; SRTT = 10 ms.
  EXPECT_EQ(rto.rto(), milliseconds(25));
}

TEST(Rto, BackoffWithoutAnySampleStartsFromTheInitialRto) {
  RtoEstimator rto;
  rto.backoff();
  rto.backoff();
  EXPECT_EQ(rto.rto(), seconds(4));
  for (int i = 0; i < 100; ++i) rto.backoff();
  EXPECT_EQ(rto.rto(), seconds(60));
  EXPECT_EQ(rto.backoff_count(), 102u);
}

TEST(Rto, ExpectedSamplesFollowsRfc7323AppendixG) {
  // ceil(FlightSize / (2 * SMSS)), at least 1.
  EXPECT_EQ(RtoEstimator::expected_samples(0, kMss), 1u);
  EXPECT_EQ(RtoEstimator::expected_samples(kMss, kMss), 1u);
  EXPECT_EQ(RtoEstimator::expected_samples(2 * kMss, kMss), 1u);
  EXPECT_EQ(RtoEstimator::expected_samples(2 * kMss + 1, kMss), 2u);
  EXPECT_EQ(RtoEstimator::expected_samples(20 * kMss, kMss), 10u);
  EXPECT_EQ(RtoEstimator::expected_samples(21 * kMss, kMss), 11u);
  EXPECT_EQ(RtoEstimator::expected_samples(1000, 0), 500u);  // SMSS 0 is taken as 1
}

TEST(Rto, ScaledSamplesDivideAlphaAndBetaByExpectedSamples) {
  RtoEstimator rto(cluster_rto());
  rto.on_rtt_sample(milliseconds(100), 20 * kMss, kMss);  // the first sample is never scaled
  EXPECT_EQ(rto.srtt(), milliseconds(100));
  EXPECT_EQ(rto.rttvar(), milliseconds(50));
  rto.on_rtt_sample(milliseconds(200), 20 * kMss, kMss);  // ExpectedSamples = 10
  // RTTVAR += (100 - 50) / 40 = 1.25 ms; SRTT += (200 - 100) / 80 = 1.25 ms.
  EXPECT_EQ(rto.rttvar(), microseconds(51250));
  EXPECT_EQ(rto.srtt(), microseconds(101250));
}

TEST(Rto, ScaledFilterWithManySamplesPerRttMatchesOneSamplePerRtt) {
  // With k samples per RTT and alpha/k, the filter moves per RTT about as
  // the unscaled one does with one sample per RTT (RFC 7323 appendix G).
  RtoEstimator per_rtt(cluster_rto());
  RtoEstimator per_ack(cluster_rto());
  per_rtt.on_rtt_sample(milliseconds(10));
  per_ack.on_rtt_sample(milliseconds(10));
  constexpr std::uint32_t kFlight = 40 * kMss;  // ExpectedSamples = 20
  for (int rtt = 0; rtt < 30; ++rtt) {
    per_rtt.on_rtt_sample(milliseconds(30));
    for (int i = 0; i < 20; ++i) per_ack.on_rtt_sample(milliseconds(30), kFlight, kMss);
  }
  double a = static_cast<double>(per_rtt.srtt().count());
  double b = static_cast<double>(per_ack.srtt().count());
  EXPECT_NEAR(b, a, 0.03 * 20e6);
  // Without scaling, 600 samples would have pinned SRTT to 30 ms long ago.
  RtoEstimator unscaled(cluster_rto());
  unscaled.on_rtt_sample(milliseconds(10));
  for (int i = 0; i < 40; ++i) unscaled.on_rtt_sample(milliseconds(30));
  EXPECT_GT(unscaled.srtt(), per_ack.srtt());
}

TEST(Rto, HandshakeAfterSynTimeoutUsesThreeSeconds) {
  RtoEstimator rto;
  rto.backoff();  // the SYN timed out
  rto.on_handshake_after_syn_timeout();
  EXPECT_EQ(rto.rto(), seconds(3));  // RFC 6298 5.7
  EXPECT_EQ(rto.backoff_count(), 0u);

  RtoEstimator measured(cluster_rto());
  measured.on_rtt_sample(milliseconds(1));  // e.g. from a timestamp echo
  Duration before = measured.rto();
  measured.on_handshake_after_syn_timeout();
  EXPECT_EQ(measured.rto(), before);
}

TEST(Rto, ResetForgetsTheSamples) {
  RtoEstimator rto(cluster_rto());
  rto.on_rtt_sample(milliseconds(100));
  rto.on_rtt_sample(milliseconds(300));
  rto.backoff();
  rto.reset();
  EXPECT_FALSE(rto.has_sample());
  EXPECT_EQ(rto.rto(), seconds(1));
  rto.on_rtt_sample(milliseconds(8));  // treated as the first again (RFC 6298 2.2)
  EXPECT_EQ(rto.srtt(), milliseconds(8));
  EXPECT_EQ(rto.rttvar(), milliseconds(4));
}

TEST(Rto, ConfigIsNormalisedNotRejected) {
  RtoConfig cfg;
  cfg.min_rto = milliseconds(200);
  cfg.max_rto = milliseconds(100);  // below the minimum
  cfg.initial_rto = seconds(5);
  cfg.granularity = -milliseconds(1);
  RtoEstimator rto(cfg);
  EXPECT_EQ(rto.config().max_rto, milliseconds(200));
  EXPECT_EQ(rto.config().initial_rto, milliseconds(200));
  EXPECT_EQ(rto.config().granularity, Duration::zero());
  EXPECT_EQ(rto.rto(), milliseconds(200));
  rto.on_rtt_sample(-milliseconds(5));  // a nonsense sample counts as 0
  EXPECT_EQ(rto.srtt(), Duration::zero());
}

// ---- congestion control: a synthetic ACK stream ---------------------------------

// A flow that always has data: each round trip the window sent at its start
// is acknowledged by ACKs of `per_ack` bytes spread evenly over the RTT.
struct Flow {
  CongestionControl& cc;
  Time now{};
  Duration rtt = milliseconds(100);

  void ack(std::uint32_t bytes, std::optional<Duration> sample = std::nullopt) {
    cc.on_ack({.acked = bytes, .smss = 0, .now = now, .rtt = sample, .in_flight = cc.cwnd()});
  }
  // The window's bytes exactly: full ACKs, then one for the remainder.
  void round(std::uint32_t per_ack = kMss) {
    std::uint32_t window = cc.cwnd();
    std::uint32_t n = (window + per_ack - 1) / per_ack;
    for (std::uint32_t i = 0; i < n; ++i) {
      now += rtt / n;
      ack(std::min(per_ack, window - i * per_ack), rtt);
    }
  }
};

CcConfig config(std::uint32_t iw_segments = 0, std::uint32_t ssthresh_segments = 0) {
  CcConfig c;
  c.smss = kMss;
  if (iw_segments != 0) c.initial_window = iw_segments * kMss;
  if (ssthresh_segments != 0) c.initial_ssthresh = ssthresh_segments * kMss;
  return c;
}

TEST(CongestionControl, InitialWindowFollowsRfc6928) {
  // min(10 * SMSS, max(2 * SMSS, 14600))
  EXPECT_EQ(CongestionControl::rfc6928_initial_window(1460), 14600u);
  EXPECT_EQ(CongestionControl::rfc6928_initial_window(536), 5360u);
  EXPECT_EQ(CongestionControl::rfc6928_initial_window(1000), 10000u);
  EXPECT_EQ(CongestionControl::rfc6928_initial_window(4000), 14600u);
  EXPECT_EQ(CongestionControl::rfc6928_initial_window(8960), 17920u);
  for (const char* name : {"newreno", "cubic"}) {
    auto cc = make_congestion_control(name, config());
    ASSERT_TRUE(cc.ok());
    EXPECT_EQ((*cc)->cwnd(), 14600u) << name;
    EXPECT_EQ((*cc)->ssthresh(), UINT32_MAX) << name;  // RFC 5681 3.1: arbitrarily high
    EXPECT_TRUE((*cc)->in_slow_start());
    // The MSS option arrives before any data: IW follows the new SMSS.
    (*cc)->set_mss(8960);
    EXPECT_EQ((*cc)->cwnd(), 17920u) << name;
  }
  CcConfig fixed = config();
  fixed.initial_window = 4 * kMss;
  NewReno nr(fixed);
  EXPECT_EQ(nr.cwnd(), 4 * kMss);
}

TEST(CongestionControl, FactoryKnowsTwoAlgorithmsAndRejectsOthers) {
  auto names = congestion_control_names();
  ASSERT_EQ(names.size(), 2u);
  for (std::string_view n : names) {
    auto cc = make_congestion_control(n);
    ASSERT_TRUE(cc.ok()) << n;
    EXPECT_EQ((*cc)->name(), n);
  }
  EXPECT_EQ(make_congestion_control("bbr").error(), Errc::not_found);
  EXPECT_EQ(make_congestion_control("").error(), Errc::not_found);
  EXPECT_EQ(make_congestion_control("NewReno").error(), Errc::not_found);
  CcConfig bad;
  bad.smss = 0;
  EXPECT_EQ(make_congestion_control("newreno", bad).error(), Errc::invalid_argument);
  CcConfig bad_beta;
  bad_beta.cubic_beta = 1.0;
  EXPECT_EQ(make_congestion_control("cubic", bad_beta).error(), Errc::invalid_argument);
  EXPECT_TRUE(make_congestion_control("newreno", bad_beta).ok());
}

TEST(CongestionControl, SlowStartDoublesPerRtt) {
  for (const char* name : {"newreno", "cubic"}) {
    auto made = make_congestion_control(name, config());
    ASSERT_TRUE(made.ok());
    CongestionControl& cc = **made;
    Flow f{cc};
    std::uint32_t w = cc.cwnd();
    for (int r = 0; r < 8; ++r) {
      f.round();  // one ACK per segment: +SMSS each (RFC 5681 3.1)
      EXPECT_EQ(cc.cwnd(), 2 * w) << name << " round " << r;
      w = cc.cwnd();
    }
    // Delayed ACKs, one per two segments: ABC with L = 2 still doubles.
    f.round(2 * kMss);
    EXPECT_EQ(cc.cwnd(), 2 * w) << name;
  }
}

TEST(CongestionControl, ByteCountingLimitsOneAckToLSegments) {
  NewReno nr(config());
  Flow f{nr};
  std::uint32_t w = nr.cwnd();
  f.ack(10 * kMss);  // a stretch ACK: RFC 3465 2.2, L = 2 SMSS
  EXPECT_EQ(nr.cwnd(), w + 2 * kMss);
  f.ack(700);  // less than SMSS counts what it acknowledged
  EXPECT_EQ(nr.cwnd(), w + 2 * kMss + 700);

  CcConfig one = config();
  one.abc_limit = 1;
  NewReno nr1(one);
  Flow f1{nr1};
  w = nr1.cwnd();
  f1.round(2 * kMss);  // delayed ACKs with L = 1: 1.5x per RTT
  EXPECT_EQ(nr1.cwnd(), w + (w / (2 * kMss)) * kMss);
}

TEST(CongestionControl, SlowStartStopsAtSsthreshThenCongestionAvoidance) {
  NewReno nr(config(10, 25));
  Flow f{nr};
  f.round();  // 10 -> 20 segments
  EXPECT_EQ(nr.cwnd(), 20 * kMss);
  f.round();  // would be 40: stops at ssthresh
  EXPECT_EQ(nr.cwnd(), 25 * kMss);
  EXPECT_FALSE(nr.in_slow_start());
  for (int r = 1; r <= 10; ++r) {
    f.round();  // RFC 5681 3.1 / RFC 3465 2.1: one SMSS per RTT
    EXPECT_EQ(nr.cwnd(), (25 + r) * kMss);
  }
  // Delayed ACKs do not slow congestion avoidance down with byte counting.
  f.round(2 * kMss);
  EXPECT_EQ(nr.cwnd(), 36 * kMss);
}

TEST(CongestionControl, NoGrowthWhenNotCwndLimited) {
  for (const char* name : {"newreno", "cubic"}) {
    auto made = make_congestion_control(name, config());
    ASSERT_TRUE(made.ok());
    CongestionControl& cc = **made;
    std::uint32_t w = cc.cwnd();
    // An application that sends 3 segments at a time (RFC 9438 5.8).
    for (int i = 0; i < 50; ++i) {
      cc.on_ack({.acked = kMss, .now = Time(milliseconds(i)), .in_flight = 3 * kMss});
    }
    EXPECT_EQ(cc.cwnd(), w) << name;
    cc.on_ack({.acked = kMss, .now = Time(milliseconds(60)), .in_flight = w});
    EXPECT_EQ(cc.cwnd(), w + kMss) << name;
  }
}

TEST(NewReno, FastRetransmitHalvesTheFlightSize) {
  NewReno nr(config(40, 30));
  nr.enter_recovery(Time{}, 40 * kMss);
  // RFC 5681 3.2 eq. 4: ssthresh = max(FlightSize / 2, 2 * SMSS).
  EXPECT_EQ(nr.ssthresh(), 20 * kMss);
  EXPECT_EQ(nr.cwnd(), 20 * kMss);
  EXPECT_TRUE(nr.in_recovery());
  // A second loss inside the same recovery does not reduce again (RFC 6582).
  nr.enter_recovery(Time{}, 20 * kMss);
  EXPECT_EQ(nr.ssthresh(), 20 * kMss);
  // No growth on ACKs during recovery.
  nr.on_ack({.acked = 5 * kMss, .now = Time{}, .in_flight = 40 * kMss});
  EXPECT_EQ(nr.cwnd(), 20 * kMss);

  NewReno small(config(4));
  small.enter_recovery(Time{}, 3 * kMss);
  EXPECT_EQ(small.ssthresh(), 2 * kMss);  // never below 2 SMSS after a loss
  EXPECT_EQ(small.cwnd(), 2 * kMss);
}

TEST(NewReno, NonSackRecoveryInflatesAndDeflates) {
  NewReno nr(config(20, 20));
  nr.inflate(3);  // outside recovery: nothing
  EXPECT_EQ(nr.cwnd(), 20 * kMss);
  nr.enter_recovery(Time{}, 20 * kMss);
  nr.inflate(3);  // RFC 5681 3.2 step 3: ssthresh + 3 * SMSS
  EXPECT_EQ(nr.cwnd(), 13 * kMss);
  nr.inflate(1);  // step 4: one per further duplicate ACK
  nr.inflate(1);
  EXPECT_EQ(nr.cwnd(), 15 * kMss);
  // RFC 6582 3.2 step 5: deflate by the amount acknowledged, add back SMSS
  // when at least SMSS was acknowledged.
  nr.on_partial_ack(4 * kMss);
  EXPECT_EQ(nr.cwnd(), 12 * kMss);
  nr.on_partial_ack(500);
  EXPECT_EQ(nr.cwnd(), 12 * kMss - 500);
  nr.on_partial_ack(40 * kMss);  // never below 2 SMSS
  EXPECT_EQ(nr.cwnd(), 2 * kMss);
}

TEST(NewReno, ExitRecoveryAvoidsABurst) {
  NewReno a(config(20, 20));
  a.enter_recovery(Time{}, 20 * kMss);
  a.inflate(8);
  a.exit_recovery(Time{}, 15 * kMss);  // RFC 6582 3.2 step 3 (1)
  EXPECT_EQ(a.cwnd(), 10 * kMss);      // min(ssthresh, 15 + 1)
  EXPECT_FALSE(a.in_recovery());

  NewReno b(config(20, 20));
  b.enter_recovery(Time{}, 20 * kMss);
  b.exit_recovery(Time{}, 3 * kMss);
  EXPECT_EQ(b.cwnd(), 4 * kMss);  // max(FlightSize, SMSS) + SMSS
  NewReno c(config(20, 20));
  c.enter_recovery(Time{}, 20 * kMss);
  c.exit_recovery(Time{}, 0);
  EXPECT_EQ(c.cwnd(), 2 * kMss);
  // Then congestion avoidance again.
  Flow f{a};
  f.round();
  EXPECT_EQ(a.cwnd(), 11 * kMss);
}

TEST(NewReno, TimeoutCollapsesToOneSegmentAndSlowStartsWithLOne) {
  NewReno nr(config(10, 40));
  nr.on_rto(Time{}, 30 * kMss);
  EXPECT_EQ(nr.cwnd(), kMss);  // RFC 5681 3.1: LW
  EXPECT_EQ(nr.ssthresh(), 15 * kMss);
  EXPECT_TRUE(nr.in_slow_start());
  // The timer fires again before anything new is acknowledged: ssthresh held.
  nr.on_rto(Time{}, 2 * kMss);
  EXPECT_EQ(nr.ssthresh(), 15 * kMss);
  EXPECT_EQ(nr.cwnd(), kMss);
  // RFC 3465 2.3: L = 1 SMSS in the slow start after a timeout.
  nr.on_ack({.acked = 3 * kMss, .now = Time{}, .in_flight = kMss});
  EXPECT_EQ(nr.cwnd(), 2 * kMss);
  Flow f{nr};
  while (nr.in_slow_start()) f.ack(kMss);
  EXPECT_EQ(nr.cwnd(), 15 * kMss);
  // That slow start is over: the next one (after an idle period) has L = 2.
  nr.on_idle_restart(Time{});
  ASSERT_EQ(nr.cwnd(), 10 * kMss);
  f.ack(4 * kMss);
  EXPECT_EQ(nr.cwnd(), 12 * kMss);
  nr.on_rto(Time{}, 10 * kMss);  // new data was acked since: ssthresh recomputed
  EXPECT_EQ(nr.ssthresh(), 5 * kMss);
  nr.on_rto(Time{}, 0);
  EXPECT_EQ(nr.ssthresh(), 5 * kMss);
  nr.on_ack({.acked = kMss, .now = Time{}, .in_flight = kMss});
  nr.on_rto(Time{}, 0);  // after new data was acknowledged: recomputed, floor 2 SMSS
  EXPECT_EQ(nr.ssthresh(), 2 * kMss);
}

TEST(NewReno, TimeoutEndsRecovery) {
  NewReno nr(config(20, 20));
  nr.enter_recovery(Time{}, 20 * kMss);
  nr.on_rto(Time{}, 20 * kMss);
  EXPECT_FALSE(nr.in_recovery());
  EXPECT_EQ(nr.cwnd(), kMss);
}

TEST(CongestionControl, IdleRestartFallsBackToTheInitialWindow) {
  for (const char* name : {"newreno", "cubic"}) {
    auto made = make_congestion_control(name, config());
    ASSERT_TRUE(made.ok());
    CongestionControl& cc = **made;
    Flow f{cc};
    f.round();
    f.round();
    ASSERT_EQ(cc.cwnd(), 40 * kMss);
    cc.on_idle_restart(f.now + seconds(5));  // RFC 5681 4.1: min(RW, cwnd)
    EXPECT_EQ(cc.cwnd(), 10 * kMss) << name;
    cc.on_rto(f.now, 10 * kMss);
    cc.on_idle_restart(f.now + seconds(10));  // RW = min(IW, cwnd): stays 1 SMSS
    EXPECT_EQ(cc.cwnd(), kMss) << name;
  }
}

// ---- CUBIC ------------------------------------------------------------------

// A CUBIC flow that just lost at cwnd = w_max_segments and has finished
// recovery at cwnd = 0.7 * w_max, with SRTT = rtt.
struct AfterLoss {
  Cubic cubic;
  Flow flow;
  explicit AfterLoss(std::uint32_t w_max_segments, Duration rtt, CcConfig cfg = config())
      : cubic([&] {
          cfg.initial_window = w_max_segments * kMss;
          cfg.initial_ssthresh = w_max_segments * kMss;
          return cfg;
        }()),
        flow{cubic, Time(seconds(1000)), rtt} {
    cubic.enter_recovery(flow.now, cubic.cwnd());
    cubic.exit_recovery(flow.now, cubic.cwnd());
  }
};

TEST(Cubic, MultiplicativeDecreaseUsesBetaSevenTenths) {
  AfterLoss s(100, milliseconds(100));
  // RFC 9438 4.6: ssthresh = cwnd = flight_size * 0.7; W_max = cwnd before.
  EXPECT_EQ(s.cubic.ssthresh(), 70 * kMss);
  EXPECT_EQ(s.cubic.cwnd(), 70 * kMss);
  EXPECT_DOUBLE_EQ(s.cubic.w_max(), 100.0 * kMss);
  EXPECT_DOUBLE_EQ(s.cubic.cwnd_prior(), 100.0 * kMss);

  Cubic small(config(2, 2));
  small.enter_recovery(Time{}, 2 * kMss);  // 1.4 SMSS: floor of 2 SMSS
  EXPECT_EQ(small.ssthresh(), 2 * kMss);
  EXPECT_EQ(small.cwnd(), 2 * kMss);
}

TEST(Cubic, KIsTheTimeToReturnToWmax) {
  AfterLoss s(100, milliseconds(100));
  s.flow.ack(kMss, milliseconds(100));  // the first ACK opens the stage
  ASSERT_TRUE(s.cubic.epoch_started());
  EXPECT_EQ(s.cubic.cwnd_epoch(), 70 * kMss);
  // RFC 9438 figure 2: K = cubic_root((W_max - cwnd_epoch) / C), in segments.
  EXPECT_NEAR(s.cubic.k(), std::cbrt(30.0 / 0.4), 1e-9);
  // Figure 1 at t = 0 is cwnd_epoch, at t = K it is W_max.
  EXPECT_NEAR(s.cubic.w_cubic(0), 70.0 * kMss, 1e-6);
  EXPECT_NEAR(s.cubic.w_cubic(s.cubic.k()), 100.0 * kMss, 1e-9);
  EXPECT_NEAR(s.cubic.w_cubic(s.cubic.k() + 2), 100.0 * kMss + 0.4 * 8 * kMss, 1e-6);
}

TEST(Cubic, FirstAckAfterLossGrowsTowardsTheTargetOneRttAhead) {
  AfterLoss s(100, milliseconds(100));
  s.flow.ack(kMss, milliseconds(100));  // sets SRTT, opens the stage at t = 0
  // At t = 0 W_cubic is cwnd_epoch, and W_est already grew by alpha / cwnd:
  // that first ACK is (just) in the Reno-friendly region (RFC 9438 4.3).
  EXPECT_EQ(s.cubic.last_region(), Cubic::Region::reno_friendly);
  EXPECT_EQ(s.cubic.cwnd(), static_cast<std::uint32_t>(s.cubic.w_est()));
  std::uint32_t cw = s.cubic.cwnd();
  // The next ACK, 10 ms later: target = W_cubic(t + RTT) within
  // [cwnd, 1.5 cwnd]; cwnd += (target - cwnd) / cwnd per segment (4.4).
  s.flow.now += milliseconds(10);
  double target = std::clamp(s.cubic.w_cubic(0.010 + 0.1), double(cw), 1.5 * cw);
  ASSERT_GT(target, cw);
  s.flow.ack(kMss);
  EXPECT_EQ(s.cubic.last_region(), Cubic::Region::concave);
  EXPECT_EQ(s.cubic.cwnd(), cw + static_cast<std::uint32_t>(std::floor((target - cw) * kMss / cw)));
}

TEST(Cubic, CwndFollowsTheCubicCurveAndReachesWmaxAtK) {
  AfterLoss s(100, milliseconds(100));
  Cubic& c = s.cubic;
  s.flow.ack(kMss, milliseconds(100));
  double k = c.k();
  bool saw_convex = false;
  std::uint32_t prev = c.cwnd();
  std::uint32_t at_k = 0;
  for (int r = 0; r < 52; ++r) {
    s.flow.round();
    double t = std::chrono::duration<double>(s.flow.now - c.epoch_start()).count();
    // The window tracks W_cubic(t) to within a couple of segments.
    ASSERT_NEAR(c.cwnd(), c.w_cubic(t), 2.0 * kMss) << "t = " << t;
    ASSERT_GE(c.cwnd(), prev);
    prev = c.cwnd();
    if (t < k - 0.2) {
      EXPECT_EQ(c.last_region(), Cubic::Region::concave) << "t = " << t;
    }
    if (t > k + 0.2) {
      EXPECT_EQ(c.last_region(), Cubic::Region::convex) << "t = " << t;
      saw_convex = true;
    }
    if (at_k == 0 && t >= k) at_k = c.cwnd();
  }
  EXPECT_TRUE(saw_convex);
  // At t = K the window is back at W_max (100 segments).
  EXPECT_NEAR(at_k, 100.0 * kMss, 2.0 * kMss);
}

TEST(Cubic, ConcaveGrowthSlowsNearWmaxAndConvexGrowthSpeedsUp) {
  AfterLoss s(200, milliseconds(100));
  Cubic& c = s.cubic;
  s.flow.ack(kMss, milliseconds(100));
  double k = c.k();  // cbrt(60 / 0.4) = 5.3 s
  std::vector<std::uint32_t> per_round;
  std::uint32_t prev = c.cwnd();
  double t = 0;
  while (t < k + 2.5) {
    s.flow.round();
    per_round.push_back(c.cwnd() - prev);
    prev = c.cwnd();
    t = std::chrono::duration<double>(s.flow.now - c.epoch_start()).count();
  }
  std::size_t at_k = static_cast<std::size_t>(k / 0.1);
  ASSERT_LT(at_k + 20, per_round.size());
  // Concave: the increments shrink on the way to W_max ...
  EXPECT_GT(per_round[2], per_round[at_k / 2]);
  EXPECT_GT(per_round[at_k / 2], per_round[at_k]);
  // ... convex: and grow again after it.
  EXPECT_LT(per_round[at_k], per_round[at_k + 20]);
}

TEST(Cubic, RenoFriendlyRegionDominatesAtSmallRttAndBandwidth) {
  AfterLoss s(10, milliseconds(1));
  Cubic& c = s.cubic;
  ASSERT_EQ(c.cwnd(), 7 * kMss);
  const double alpha = 3.0 * (1 - 0.7) / (1 + 0.7);  // RFC 9438 4.3
  EXPECT_DOUBLE_EQ(c.alpha_cubic(), alpha);
  s.flow.ack(kMss, milliseconds(1));
  EXPECT_EQ(c.last_region(), Cubic::Region::reno_friendly);
  // W_est = cwnd_epoch + alpha * segments_acked / cwnd.
  EXPECT_NEAR(c.w_est(), 7.0 * kMss + alpha * kMss / 7.0, 1e-6);
  double w_est_before = c.w_est();
  s.flow.round();
  // Over one RTT W_est grows by about alpha segments; cwnd follows W_est.
  EXPECT_NEAR(c.w_est() - w_est_before, alpha * kMss, 0.1 * alpha * kMss);
  EXPECT_EQ(c.cwnd(), static_cast<std::uint32_t>(c.w_est()));
  // Once W_est reaches cwnd_prior (10 segments) alpha becomes 1: Reno's
  // one segment per RTT.
  while (c.w_est() < c.cwnd_prior()) s.flow.round();
  for (int r = 0; r < 20; ++r) {
    double before = c.w_est();
    s.flow.round();
    EXPECT_NEAR(c.w_est() - before, 1.0 * kMss, 0.1 * kMss);
    EXPECT_EQ(c.last_region(), Cubic::Region::reno_friendly);
    EXPECT_EQ(c.cwnd(), static_cast<std::uint32_t>(c.w_est()));
  }
  double t = std::chrono::duration<double>(s.flow.now - c.epoch_start()).count();
  EXPECT_LT(c.w_cubic(t), c.w_est());
}

TEST(Cubic, FastConvergenceLowersWmaxWhenTheFlowLostGround) {
  AfterLoss s(100, milliseconds(100));
  s.flow.round();
  std::uint32_t cw = s.cubic.cwnd();
  ASSERT_LT(cw, 100 * kMss);
  s.cubic.enter_recovery(s.flow.now, cw);
  // RFC 9438 4.7: W_max = cwnd * (1 + beta) / 2 when cwnd < W_max.
  EXPECT_NEAR(s.cubic.w_max(), cw * 1.7 / 2.0, 1e-6);
  EXPECT_DOUBLE_EQ(s.cubic.cwnd_prior(), cw);

  CcConfig no_fc = config();
  no_fc.cubic_fast_convergence = false;
  AfterLoss t(100, milliseconds(100), no_fc);
  t.flow.round();
  std::uint32_t cw2 = t.cubic.cwnd();
  t.cubic.enter_recovery(t.flow.now, cw2);
  EXPECT_DOUBLE_EQ(t.cubic.w_max(), cw2);
}

TEST(Cubic, NoGrowthDuringRecovery) {
  Cubic c(config(50, 50));
  c.enter_recovery(Time{}, 50 * kMss);
  std::uint32_t w = c.cwnd();
  for (int i = 0; i < 30; ++i) c.on_ack({.acked = kMss, .now = Time(milliseconds(i)), .in_flight = 50 * kMss});
  EXPECT_EQ(c.cwnd(), w);
  EXPECT_FALSE(c.epoch_started());
}

TEST(Cubic, TimeoutRestartsWithKZeroAndWmaxAtTheStageStart) {
  Cubic c(config(100, 100));
  Flow f{c, Time(seconds(10))};
  f.round();
  c.on_rto(f.now, 100 * kMss);
  // RFC 9438 4.8: cwnd as Reno (1 SMSS), ssthresh with beta_cubic.
  EXPECT_EQ(c.cwnd(), kMss);
  EXPECT_EQ(c.ssthresh(), 70 * kMss);
  while (c.in_slow_start()) f.ack(kMss);  // L = 1 after a timeout: +1 SMSS each
  EXPECT_EQ(c.cwnd(), 70 * kMss);
  f.ack(kMss);
  ASSERT_TRUE(c.epoch_started());
  EXPECT_EQ(c.cwnd_epoch(), 70 * kMss);
  EXPECT_DOUBLE_EQ(c.k(), 0.0);
  EXPECT_DOUBLE_EQ(c.w_max(), 70.0 * kMss);
  // W_est starts at cwnd_epoch and grows with alpha = 1 (cwnd_prior = cwnd_epoch).
  EXPECT_NEAR(c.w_est(), 70.0 * kMss + kMss / 70.0, 1e-6);
  // Convex growth from there: W_cubic(t) = cwnd_epoch + C * t^3.
  EXPECT_NEAR(c.w_cubic(2.0), 70.0 * kMss + 0.4 * 8 * kMss, 1e-6);
}

TEST(Cubic, ApplicationLimitedTimeIsNotPartOfT) {
  AfterLoss s(100, milliseconds(100));
  Cubic& c = s.cubic;
  s.flow.ack(kMss, milliseconds(100));
  s.flow.round();
  Time epoch = c.epoch_start();
  std::uint32_t w = c.cwnd();
  // The application stops for 2 s: the next ACK finds little in flight.
  s.flow.now += seconds(2);
  c.on_ack({.acked = kMss, .now = s.flow.now, .in_flight = kMss});
  EXPECT_EQ(c.cwnd(), w);
  EXPECT_EQ(c.epoch_start(), epoch + seconds(2));  // RFC 9438 4.2
}

TEST(Cubic, SmoothsRttSamples) {
  Cubic c(config());
  c.on_ack({.acked = kMss, .now = Time{}, .rtt = milliseconds(80), .in_flight = c.cwnd()});
  EXPECT_EQ(c.srtt(), milliseconds(80));
  c.on_ack({.acked = kMss, .now = Time{}, .rtt = milliseconds(160), .in_flight = c.cwnd()});
  EXPECT_EQ(c.srtt(), milliseconds(90));
}

TEST(Cubic, NeverBelowTwoSegmentsAfterLossExceptTimeout) {
  for (const char* name : {"newreno", "cubic"}) {
    auto made = make_congestion_control(name, config(3, 3));
    ASSERT_TRUE(made.ok());
    CongestionControl& cc = **made;
    cc.enter_recovery(Time{}, 100);
    EXPECT_EQ(cc.cwnd(), 2 * kMss) << name;
    cc.on_partial_ack(10 * kMss);
    EXPECT_EQ(cc.cwnd(), 2 * kMss) << name;
    cc.exit_recovery(Time{}, 0);
    EXPECT_EQ(cc.cwnd(), 2 * kMss) << name;
    cc.on_rto(Time{}, 0);
    EXPECT_EQ(cc.cwnd(), kMss) << name;
    EXPECT_EQ(cc.ssthresh(), 2 * kMss) << name;
  }
}

TEST(Cubic, SetMssRestartsTheStage) {
  AfterLoss s(100, milliseconds(100));
  s.flow.ack(kMss, milliseconds(100));
  ASSERT_TRUE(s.cubic.epoch_started());
  std::uint32_t w = s.cubic.cwnd();
  s.cubic.set_mss(1200);
  EXPECT_FALSE(s.cubic.epoch_started());
  EXPECT_EQ(s.cubic.smss(), 1200u);
  EXPECT_EQ(s.cubic.cwnd(), w);  // not the initial window any more: kept
}

}  // namespace
}  // namespace xk::tcp

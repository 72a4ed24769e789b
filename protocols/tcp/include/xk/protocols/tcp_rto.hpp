#pragma once
// The retransmission timer's value (RFC 6298): a smoothed round-trip time
// (SRTT), its mean deviation (RTTVAR) and the timeout derived from them,
// with exponential backoff while the timer keeps expiring.
//
// Karn's rule (RFC 6298 section 3) is the caller's job: feed a sample only
// from a segment that was never retransmitted, or from a timestamp echo
// (RFC 7323 section 4), which is unambiguous. A sample taken from a
// retransmitted segment could belong to either transmission and would
// corrupt SRTT. The backed-off RTO stays in force until a valid sample
// arrives, which then collapses it (RFC 6298 section 5, note after 5.7).
//
// Pure arithmetic on xk::Duration: no clock, no timer. The caller arms its
// Timer with rto() and calls backoff() when it fires.

#include <chrono>
#include <cstdint>

#include "xk/clock.hpp"

namespace xk::tcp {

struct RtoConfig {
  // RFC 6298 2.4 asks for at least 1 s; a cluster with microsecond RTTs
  // sets a few milliseconds instead.
  Duration min_rto = std::chrono::seconds(1);
  // RFC 6298 2.5: an upper bound, at least 60 s.
  Duration max_rto = std::chrono::seconds(60);
  // RFC 6298 2.1: the RTO before any sample.
  Duration initial_rto = std::chrono::seconds(1);
  // G, the clock granularity of RFC 6298 2.2/2.3 (the timer wheel ticks in
  // 1 us by default).
  Duration granularity = std::chrono::microseconds(1);
};

class RtoEstimator {
 public:
  // The config is normalised, never rejected: negative values become 0,
  // max_rto is raised to min_rto, initial_rto is clamped to [min, max].
  explicit RtoEstimator(const RtoConfig& cfg = {}) noexcept;

  // One valid RTT measurement (RFC 6298 2.2 for the first, 2.3 after).
  // Resets the backoff. Samples are clamped to [0, 1 h].
  void on_rtt_sample(Duration r) noexcept;
  // The same with RFC 7323 appendix G: with timestamps every ACK carries a
  // sample, so alpha and beta are divided by ExpectedSamples =
  // ceil(flight_size / (2 * smss)) to keep the filter's memory near one RTT.
  void on_rtt_sample(Duration r, std::uint32_t flight_size, std::uint32_t smss) noexcept;
  // ExpectedSamples of RFC 7323 appendix G, at least 1.
  static std::uint32_t expected_samples(std::uint32_t flight_size, std::uint32_t smss) noexcept;

  // The timer expired (RFC 6298 5.5): RTO doubles, up to max_rto.
  void backoff() noexcept;
  // RFC 6298 5.7: the SYN (or SYN-ACK) had to be retransmitted and no
  // sample exists yet: once the handshake completes, RTO becomes 3 s
  // (when it is less) and the backoff is cleared.
  void on_handshake_after_syn_timeout() noexcept;
  // The timeout was spurious (RFC 4015 4 step 6): the path's RTT had grown
  // past the RTO. `rtt` is the proving ACK's sample (from its timestamp
  // echo): SRTT = max(SRTT, rtt), RTTVAR = max(RTTVAR, rtt / 2), the
  // backoff is cleared and RTO computed again, so the next timeout waits
  // for the longer path.
  void on_spurious_timeout(Duration rtt) noexcept;
  // Forget SRTT and RTTVAR (RFC 6298 section 5 allows it after repeated
  // backoffs): the next sample is treated as the first, RTO is initial_rto.
  void reset() noexcept;

  // The timeout to arm now: the computed RTO doubled backoff_count() times,
  // within [min_rto, max_rto].
  Duration rto() const noexcept { return rto_; }
  Duration srtt() const noexcept { return srtt_; }
  Duration rttvar() const noexcept { return rttvar_; }
  bool has_sample() const noexcept { return has_sample_; }
  // Expirations since the last valid sample.
  std::uint32_t backoff_count() const noexcept { return backoffs_; }
  const RtoConfig& config() const noexcept { return cfg_; }

 private:
  void sample(Duration r, std::int64_t expected) noexcept;
  // RTO = SRTT + max(G, 4 * RTTVAR) within [min_rto, max_rto] (RFC 6298 2.2-2.5).
  void compute() noexcept;
  Duration clamp(Duration d) const noexcept;

  RtoConfig cfg_;
  Duration srtt_{0};
  Duration rttvar_{0};
  Duration rto_{0};
  std::uint32_t backoffs_ = 0;
  bool has_sample_ = false;
};

}  // namespace xk::tcp

#include "xk/protocols/tcp_rto.hpp"

#include <algorithm>

namespace xk::tcp {

namespace {

// Far above any real RTT; keeps 4 * RTTVAR and the doublings far from
// overflowing 64-bit nanoseconds.
constexpr Duration kMaxSample = std::chrono::hours(1);

Duration non_negative(Duration d) noexcept { return d < Duration::zero() ? Duration::zero() : d; }

}  // namespace

RtoEstimator::RtoEstimator(const RtoConfig& cfg) noexcept : cfg_(cfg) {
  cfg_.min_rto = std::min(non_negative(cfg_.min_rto), kMaxSample);
  cfg_.max_rto = std::clamp(non_negative(cfg_.max_rto), cfg_.min_rto, kMaxSample);
  cfg_.initial_rto = std::clamp(cfg_.initial_rto, cfg_.min_rto, cfg_.max_rto);
  cfg_.granularity = std::min(non_negative(cfg_.granularity), kMaxSample);
  rto_ = cfg_.initial_rto;
}

std::uint32_t RtoEstimator::expected_samples(std::uint32_t flight_size, std::uint32_t smss) noexcept {
  // RFC 7323 appendix G: ceil(FlightSize / (SMSS * 2)); 2 for delayed ACKs.
  std::uint64_t per = std::uint64_t{std::max<std::uint32_t>(smss, 1)} * 2;
  std::uint64_t n = (std::uint64_t{flight_size} + per - 1) / per;
  return static_cast<std::uint32_t>(std::max<std::uint64_t>(n, 1));
}

void RtoEstimator::on_rtt_sample(Duration r) noexcept { sample(r, 1); }

void RtoEstimator::on_rtt_sample(Duration r, std::uint32_t flight_size, std::uint32_t smss) noexcept {
  sample(r, expected_samples(flight_size, smss));
}

void RtoEstimator::sample(Duration r, std::int64_t expected) noexcept {
  r = std::clamp(r, Duration::zero(), kMaxSample);
  if (!has_sample_) {
    // RFC 6298 2.2: SRTT <- R, RTTVAR <- R/2.
    srtt_ = r;
    rttvar_ = r / 2;
    has_sample_ = true;
  } else {
    // RFC 6298 2.3, with alpha = 1/8 and beta = 1/4 (divided by
    // ExpectedSamples per RFC 7323 appendix G). RTTVAR first: it uses the
    // SRTT from before this sample.
    Duration err = srtt_ > r ? srtt_ - r : r - srtt_;
    rttvar_ += (err - rttvar_) / (4 * expected);
    srtt_ += (r - srtt_) / (8 * expected);
  }
  // RFC 6298 section 5 (note after 5.7): a new sample collapses the backoff.
  backoffs_ = 0;
  compute();
}

Duration RtoEstimator::clamp(Duration d) const noexcept { return std::clamp(d, cfg_.min_rto, cfg_.max_rto); }

void RtoEstimator::compute() noexcept {
  // RFC 6298 2.2/2.3: RTO = SRTT + max(G, K * RTTVAR), K = 4; then 2.4
  // (lower bound) and 2.5 (upper bound).
  rto_ = clamp(srtt_ + std::max(cfg_.granularity, 4 * rttvar_));
}

void RtoEstimator::backoff() noexcept {
  // RFC 6298 5.5: RTO <- RTO * 2, bounded by the maximum of 2.5.
  rto_ = rto_ >= cfg_.max_rto / 2 ? cfg_.max_rto : clamp(rto_ * 2);
  if (backoffs_ != UINT32_MAX) ++backoffs_;
}

void RtoEstimator::on_handshake_after_syn_timeout() noexcept {
  // RFC 6298 5.7: only when no sample says better (Karn's rule leaves none
  // after a retransmitted SYN unless timestamps gave one).
  if (has_sample_) return;
  backoffs_ = 0;
  rto_ = clamp(std::max(cfg_.initial_rto, Duration(std::chrono::seconds(3))));
}

void RtoEstimator::on_spurious_timeout(Duration rtt) noexcept {
  rtt = std::clamp(rtt, Duration::zero(), kMaxSample);
  if (!has_sample_) {
    sample(rtt, 1);
    return;
  }
  srtt_ = std::max(srtt_, rtt);
  rttvar_ = std::max(rttvar_, rtt / 2);
  backoffs_ = 0;
  compute();
}

void RtoEstimator::reset() noexcept {
  srtt_ = Duration::zero();
  rttvar_ = Duration::zero();
  has_sample_ = false;
  backoffs_ = 0;
  rto_ = cfg_.initial_rto;
}

}  // namespace xk::tcp

#include "xk/protocols/tcp_cc.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

namespace xk::tcp {

namespace {

constexpr std::array<std::string_view, 2> kNames{"newreno", "cubic"};

std::uint32_t at_least_one(std::uint32_t v) noexcept { return v == 0 ? 1 : v; }

std::uint32_t clamp_window(std::uint64_t bytes) noexcept {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(bytes, CongestionControl::kMaxCwnd));
}

}  // namespace

// ---- CongestionControl ------------------------------------------------------

CongestionControl::CongestionControl(const CcConfig& cfg) noexcept
    : cfg_(cfg), ssthresh_(cfg.initial_ssthresh), smss_(at_least_one(cfg.smss)) {
  cfg_.abc_limit = at_least_one(cfg_.abc_limit);
  cwnd_ = initial_window();
}

std::uint32_t CongestionControl::rfc6928_initial_window(std::uint32_t smss) noexcept {
  std::uint64_t s = smss;
  return clamp_window(std::min<std::uint64_t>(10 * s, std::max<std::uint64_t>(2 * s, 14600)));
}

std::uint32_t CongestionControl::initial_window() const noexcept {
  if (cfg_.initial_window == 0) return rfc6928_initial_window(smss_);
  return std::max(clamp_window(cfg_.initial_window), smss_);
}

void CongestionControl::set_cwnd(std::uint64_t bytes) noexcept { cwnd_ = clamp_window(bytes); }

bool CongestionControl::cwnd_limited(const AckEvent& ev, std::uint32_t smss) const noexcept {
  // RFC 9438 5.8: a flow sending less than cwnd allows (application or
  // receiver limited) must not grow cwnd; "less" means by a whole segment.
  return std::uint64_t{ev.in_flight} + smss > cwnd_;
}

void CongestionControl::on_ack(const AckEvent& ev) noexcept {
  if (ev.acked == 0) return;
  std::uint32_t smss = ev.smss != 0 ? ev.smss : smss_;
  fresh_ = false;
  rto_unacked_ = false;
  // RFC 5681 3.2 / RFC 6675 section 5: no growth during loss recovery.
  if (in_recovery_) return;
  if (!cwnd_limited(ev, smss)) return;
  if (cwnd_ < ssthresh_) {
    slow_start(ev.acked, smss);
  } else {
    reno_congestion_avoidance(ev.acked, smss);
  }
}

void CongestionControl::slow_start(std::uint32_t acked, std::uint32_t smss) noexcept {
  // RFC 3465 2.3: L = 1 SMSS in the slow start after a timeout, 2 otherwise.
  std::uint64_t limit = std::uint64_t{after_rto_ ? 1u : cfg_.abc_limit} * smss;
  std::uint64_t grown = std::uint64_t{cwnd_} + std::min<std::uint64_t>(acked, limit);
  // RFC 5681 3.1: slow start is for cwnd < ssthresh; stop at ssthresh.
  if (grown >= ssthresh_) {
    grown = ssthresh_;
    after_rto_ = false;
  }
  set_cwnd(grown);
}

void CongestionControl::reno_congestion_avoidance(std::uint32_t acked, std::uint32_t smss) noexcept {
  // RFC 3465 2.1 (RFC 5681 3.1 allows it): count acknowledged bytes and add
  // one SMSS per cwnd of them, which is SMSS per RTT.
  std::uint64_t counted = std::uint64_t{bytes_acked_} + acked;
  if (counted >= cwnd_) {
    counted -= cwnd_;
    set_cwnd(std::uint64_t{cwnd_} + smss);
  }
  bytes_acked_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(counted, cwnd_));
}

void CongestionControl::inflate(std::uint32_t segments) noexcept {
  if (!in_recovery_) return;
  // RFC 5681 3.2 steps 3 and 4.
  set_cwnd(std::uint64_t{cwnd_} + std::uint64_t{segments} * smss_);
}

void CongestionControl::on_partial_ack(std::uint32_t acked) noexcept {
  if (!in_recovery_) return;
  // RFC 6582 3.2 step 5: deflate by what was acknowledged; add back SMSS
  // when at least SMSS was, so about ssthresh stays outstanding.
  std::uint64_t w = cwnd_ > acked ? cwnd_ - acked : 0;
  if (acked >= smss_) w += smss_;
  set_cwnd(std::max<std::uint64_t>(w, std::uint64_t{2} * smss_));
}

void CongestionControl::exit_recovery(Time, std::uint32_t flight_size) noexcept {
  if (!in_recovery_) return;
  in_recovery_ = false;
  bytes_acked_ = 0;
  // RFC 6582 3.2 step 3, option (1).
  std::uint64_t w = std::uint64_t{std::max(flight_size, smss_)} + smss_;
  set_cwnd(std::min<std::uint64_t>(ssthresh_, w));
}

void CongestionControl::set_recovery_window(std::uint32_t bytes) noexcept {
  if (in_recovery_) set_cwnd(std::max(bytes, smss_));
}

void CongestionControl::end_reduction(Time) noexcept {
  if (!in_recovery_) return;
  in_recovery_ = false;
  bytes_acked_ = 0;
  set_cwnd(ssthresh_);
}

void CongestionControl::on_idle_restart(Time) noexcept {
  // RFC 5681 4.1: RW = min(IW, cwnd); cwnd = min(RW, cwnd).
  cwnd_ = std::min(initial_window(), cwnd_);
  bytes_acked_ = 0;
}

void CongestionControl::set_mss(std::uint32_t smss) noexcept {
  smss_ = at_least_one(smss);
  // RFC 6928 computes IW from the SMSS in use; until something happened,
  // the window is still the initial one.
  if (fresh_) cwnd_ = initial_window();
}

void CongestionControl::undo_rto(std::uint32_t pipe_prev, std::uint32_t flight_size, std::uint32_t acked) noexcept {
  ssthresh_ = std::max(clamp_window(pipe_prev), 2 * smss_);
  set_cwnd(std::max<std::uint64_t>(std::uint64_t{flight_size} + std::min(acked, initial_window()), smss_));
  after_rto_ = false;
  rto_unacked_ = false;
  bytes_acked_ = 0;
}

void CongestionControl::loss_common() noexcept {
  in_recovery_ = false;
  bytes_acked_ = 0;
  fresh_ = false;
}

// ---- NewReno ------------------------------------------------------------------

NewReno::NewReno(const CcConfig& cfg) noexcept : CongestionControl(cfg) {}

std::uint32_t NewReno::halved_flight(std::uint32_t flight_size, std::uint32_t smss) noexcept {
  // RFC 5681 eq. 4: ssthresh = max(FlightSize / 2, 2 * SMSS).
  return clamp_window(std::max<std::uint64_t>(flight_size / 2, std::uint64_t{2} * smss));
}

void NewReno::enter_recovery(Time, std::uint32_t flight_size) noexcept {
  // RFC 6582 3.2 step 2: one reduction per recovery.
  if (in_recovery_) return;
  loss_common();
  after_rto_ = false;
  ssthresh_ = halved_flight(flight_size, smss_);
  // RFC 6675 5 (4.2): cwnd = ssthresh; RFC 5681 3.2 step 3 inflates on top.
  cwnd_ = ssthresh_;
  in_recovery_ = true;
}

void NewReno::on_rto(Time, std::uint32_t flight_size) noexcept {
  // RFC 5681 3.1: ssthresh is held when the timer expires again before any
  // new data was acknowledged (the same segment timed out twice).
  if (!rto_unacked_) ssthresh_ = halved_flight(flight_size, smss_);
  loss_common();
  cwnd_ = smss_;  // RFC 5681 3.1: LW = 1 full-sized segment
  after_rto_ = true;
  rto_unacked_ = true;
}

// ---- Cubic ------------------------------------------------------------------

Cubic::Cubic(const CcConfig& cfg) noexcept
    : CongestionControl(cfg),
      c_(cfg.cubic_c > 0 ? cfg.cubic_c : 0.4),
      beta_(cfg.cubic_beta > 0 && cfg.cubic_beta < 1 ? cfg.cubic_beta : 0.7) {}

double Cubic::alpha_cubic() const noexcept { return 3.0 * (1.0 - beta_) / (1.0 + beta_); }

double Cubic::w_cubic(double t) const noexcept {
  // RFC 9438 figure 1, in bytes: C is in segments per second cubed.
  double d = t - k_;
  return c_ * smss_ * d * d * d + w_max_;
}

double Cubic::seconds_since_epoch(Time now) const noexcept {
  double t = std::chrono::duration<double>(now - epoch_start_).count();
  return t > 0 ? t : 0;
}

void Cubic::start_epoch(Time now) noexcept {
  epoch_valid_ = true;
  epoch_start_ = now;
  cwnd_epoch_ = cwnd_;
  frac_ = 0;
  double we = cwnd_epoch_;
  if (w_max_ <= we) {
    // RFC 9438 4.8 and 4.10: W_max undefined (no loss yet, or after a
    // timeout) or already passed: K = 0 and W_max = cwnd_epoch.
    w_max_ = we;
    k_ = 0;
  } else {
    // RFC 9438 figure 2: K = cubic_root((W_max - cwnd_epoch) / C).
    k_ = std::cbrt((w_max_ - we) / (c_ * smss_));
  }
  if (cwnd_prior_ == 0) cwnd_prior_ = we;
  // RFC 9438 4.3: W_est = cwnd_epoch at the start of the stage.
  w_est_ = we;
}

void Cubic::on_ack(const AckEvent& ev) noexcept {
  if (ev.acked == 0) return;
  std::uint32_t smss = ev.smss != 0 ? ev.smss : smss_;
  if (ev.rtt) {
    // RFC 9438 4.2: the target uses the smoothed RTT (RFC 6298 weights).
    Duration r = std::max(*ev.rtt, Duration::zero());
    srtt_ = has_rtt_ ? srtt_ + (r - srtt_) / 8 : r;
    has_rtt_ = true;
  }
  fresh_ = false;
  rto_unacked_ = false;
  if (in_recovery_) return;  // RFC 9438 4.6: the reduced window holds until recovery ends
  if (!cwnd_limited(ev, smss)) {
    // RFC 9438 4.2 and 5.8: no growth, and t must not count the time the
    // flow was application limited: move the epoch forward by it.
    if (epoch_valid_ && ev.now > last_ack_) epoch_start_ += ev.now - last_ack_;
    last_ack_ = ev.now;
    return;
  }
  if (cwnd_ < ssthresh_) {
    region_ = Region::slow_start;
    slow_start(ev.acked, smss);  // RFC 9438 4.10: standard slow start
  } else {
    cubic_update(ev, smss);
  }
  last_ack_ = ev.now;
}

void Cubic::cubic_update(const AckEvent& ev, std::uint32_t smss) noexcept {
  if (!epoch_valid_) start_epoch(ev.now);
  double t = seconds_since_epoch(ev.now);
  double cw = cwnd_;
  double acked = ev.acked;

  // RFC 9438 4.3 (figure 4): W_est += alpha * segments_acked / cwnd, with
  // alpha = 1 once W_est has reached cwnd_prior.
  double alpha = w_est_ >= cwnd_prior_ ? 1.0 : alpha_cubic();
  w_est_ += alpha * acked * smss / cw;

  if (w_cubic(t) < w_est_) {
    // RFC 9438 4.3: Reno-friendly region, cwnd = W_est (never shrunk on an ACK).
    region_ = Region::reno_friendly;
    if (w_est_ > cw) set_cwnd(static_cast<std::uint64_t>(w_est_));
    return;
  }
  // RFC 9438 4.2: target = W_cubic(t + RTT) within [cwnd, 1.5 * cwnd].
  double rtt = std::chrono::duration<double>(srtt_).count();
  double target = std::clamp(w_cubic(t + rtt), cw, 1.5 * cw);
  // RFC 9438 4.4 (concave, cwnd < W_max) and 4.5 (convex): cwnd grows by
  // (target - cwnd) / cwnd per acknowledged segment.
  region_ = cw < w_max_ ? Region::concave : Region::convex;
  frac_ += (target - cw) * acked / cw;
  double whole = std::floor(frac_);
  frac_ -= whole;
  set_cwnd(std::uint64_t{cwnd_} + static_cast<std::uint64_t>(whole));
}

void Cubic::enter_recovery(Time, std::uint32_t flight_size) noexcept {
  if (in_recovery_) return;
  double cw = cwnd_;
  // RFC 9438 4.7: fast convergence lowers W_max when the flow lost ground.
  w_max_ = (cfg_.cubic_fast_convergence && cw < w_max_) ? cw * (1.0 + beta_) / 2.0 : cw;
  cwnd_prior_ = cw;  // RFC 9438 4.6
  loss_common();
  after_rto_ = false;
  // RFC 9438 4.6 (figure 5): ssthresh = flight_size * beta_cubic, at least
  // 2 SMSS; cwnd = ssthresh.
  ssthresh_ = clamp_window(std::max<std::uint64_t>(static_cast<std::uint64_t>(flight_size * beta_),
                                                   std::uint64_t{2} * smss_));
  cwnd_ = ssthresh_;
  in_recovery_ = true;
  epoch_valid_ = false;
  frac_ = 0;
}

void Cubic::on_rto(Time, std::uint32_t flight_size) noexcept {
  // RFC 9438 4.8: cwnd as Reno does (1 SMSS), ssthresh with beta_cubic;
  // held on a repeated timeout as in RFC 5681 3.1.
  if (!rto_unacked_) {
    ssthresh_ = clamp_window(std::max<std::uint64_t>(static_cast<std::uint64_t>(flight_size * beta_),
                                                     std::uint64_t{2} * smss_));
  }
  loss_common();
  cwnd_ = smss_;
  after_rto_ = true;
  rto_unacked_ = true;
  // RFC 9438 4.8: the next stage starts with K = 0, W_max = W_est = cwnd_epoch.
  w_max_ = 0;
  cwnd_prior_ = 0;
  epoch_valid_ = false;
  frac_ = 0;
}

void Cubic::exit_recovery(Time now, std::uint32_t flight_size) noexcept {
  CongestionControl::exit_recovery(now, flight_size);
  epoch_valid_ = false;  // the stage starts with the first ACK after recovery
}

void Cubic::end_reduction(Time now) noexcept {
  CongestionControl::end_reduction(now);
  epoch_valid_ = false;
}

void Cubic::on_idle_restart(Time now) noexcept {
  CongestionControl::on_idle_restart(now);
  epoch_valid_ = false;  // RFC 9438 4.2: idle time is not part of t
}

void Cubic::set_mss(std::uint32_t smss) noexcept {
  CongestionControl::set_mss(smss);
  epoch_valid_ = false;  // K is in units of SMSS
}

void CongestionControl::adopt_state(const CongestionControl& from) noexcept {
  cwnd_ = from.cwnd_;
  ssthresh_ = from.ssthresh_;
  smss_ = from.smss_;
  bytes_acked_ = from.bytes_acked_;
  in_recovery_ = from.in_recovery_;
  after_rto_ = from.after_rto_;
  rto_unacked_ = from.rto_unacked_;
  fresh_ = from.fresh_;
  cfg_.smss = from.smss_;
}

// ---- factory -------------------------------------------------------------------

std::span<const std::string_view> congestion_control_names() noexcept { return kNames; }

Result<std::unique_ptr<CongestionControl>> make_congestion_control(std::string_view name,
                                                                   const CcConfig& cfg) {
  if (name == "newreno") {
    if (cfg.smss == 0) return Errc::invalid_argument;
    return std::unique_ptr<CongestionControl>(std::make_unique<NewReno>(cfg));
  }
  if (name == "cubic") {
    if (cfg.smss == 0 || !(cfg.cubic_beta > 0 && cfg.cubic_beta < 1) || !(cfg.cubic_c > 0)) {
      return Errc::invalid_argument;
    }
    return std::unique_ptr<CongestionControl>(std::make_unique<Cubic>(cfg));
  }
  return Errc::not_found;
}

}  // namespace xk::tcp

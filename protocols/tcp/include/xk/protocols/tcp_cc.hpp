#pragma once
// Congestion control: the sender's congestion window (cwnd) and slow-start
// threshold (ssthresh), in bytes, driven by events the TCP state machine
// reports. One small virtual interface, two algorithms behind it:
//
//   "newreno"  RFC 5681 slow start / congestion avoidance with appropriate
//              byte counting (RFC 3465), fast recovery per RFC 6582 (window
//              inflation for non-SACK recovery, partial-ACK deflation)
//   "cubic"    RFC 9438 (C = 0.4, beta_cubic = 0.7, Reno-friendly region,
//              fast convergence), same slow start and recovery hooks
//
// How the state machine drives it:
//   - every ACK that advances SND.UNA: on_ack(); while in recovery it never
//     grows cwnd (RFC 5681 3.2, RFC 6675 section 5);
//   - loss detected by duplicate ACKs or SACK: enter_recovery(), which sets
//     ssthresh and cwnd = ssthresh (the RFC 6675 4.2 / RFC 9438 4.6 value);
//     with SACK the sender then sends while pipe < cwnd (RFC 6675);
//     without SACK (RFC 6582) it also calls inflate(3) at once, inflate(1)
//     per further duplicate ACK, and on_partial_ack() per partial ACK;
//   - the cumulative ACK covering the recovery point: exit_recovery();
//   - retransmission timeout: on_rto() (also ends any recovery);
//   - the timeout proved spurious (RFC 3522 detection): undo_rto();
//   - about to send after an idle period longer than RTO: on_idle_restart();
//   - SMSS known or changed (MSS option, path MTU): set_mss().
//
// Time only comes from the `now` arguments; nothing reads a clock.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "xk/clock.hpp"
#include "xk/result.hpp"

namespace xk::tcp {

// One ACK that acknowledged new data.
struct AckEvent {
  std::uint32_t acked = 0;  // bytes newly acknowledged (the advance of SND.UNA)
  std::uint32_t smss = 0;   // SMSS in effect; 0 means the one last given to set_mss
  Time now{};
  std::optional<Duration> rtt{};  // a valid RTT sample (Karn's rule applied), if any
  // Bytes that were outstanding when this ACK arrived, the acknowledged ones
  // included (FlightSize before the ACK). Growth needs a cwnd-limited flow:
  // in_flight + SMSS > cwnd (RFC 9438 5.8, RFC 7661 spirit).
  std::uint32_t in_flight = 0;
};

struct CcConfig {
  std::uint32_t smss = 1460;
  // Bytes; 0 means RFC 6928: min(10 * SMSS, max(2 * SMSS, 14600)).
  std::uint32_t initial_window = 0;
  // RFC 5681 3.1: "arbitrarily high" until the first loss.
  std::uint32_t initial_ssthresh = UINT32_MAX;
  // L of RFC 3465 2.2, in SMSS: the most one ACK may grow cwnd in slow start.
  std::uint32_t abc_limit = 2;
  // RFC 9438 4.1 constants and 4.7.
  double cubic_c = 0.4;
  double cubic_beta = 0.7;
  bool cubic_fast_convergence = true;
};

class CongestionControl {
 public:
  // cwnd never exceeds this (the largest window TCP can advertise, RFC 7323 2.3).
  static constexpr std::uint32_t kMaxCwnd = 1u << 30;

  virtual ~CongestionControl() = default;
  CongestionControl(const CongestionControl&) = delete;
  CongestionControl& operator=(const CongestionControl&) = delete;

  virtual std::string_view name() const noexcept = 0;

  std::uint32_t cwnd() const noexcept { return cwnd_; }
  std::uint32_t ssthresh() const noexcept { return ssthresh_; }
  std::uint32_t smss() const noexcept { return smss_; }
  bool in_recovery() const noexcept { return in_recovery_; }
  bool in_slow_start() const noexcept { return cwnd_ < ssthresh_; }
  // IW for the current SMSS (the config's, or RFC 6928's).
  std::uint32_t initial_window() const noexcept;
  // RFC 6928: min(10 * SMSS, max(2 * SMSS, 14600)).
  static std::uint32_t rfc6928_initial_window(std::uint32_t smss) noexcept;

  // New data acknowledged: slow start or congestion avoidance.
  virtual void on_ack(const AckEvent& ev) noexcept;
  // Fast retransmit: the algorithm's ssthresh, cwnd = ssthresh.
  virtual void enter_recovery(Time now, std::uint32_t flight_size) noexcept = 0;
  // RFC 5681 3.2 steps 3-4 (non-SACK recovery): cwnd += segments * SMSS,
  // for the segments that duplicate ACKs say have left the network.
  void inflate(std::uint32_t segments) noexcept;
  // RFC 6582 3.2 step 5 (non-SACK recovery): deflate cwnd by the bytes a
  // partial ACK acknowledged, then add back SMSS if it acknowledged at least
  // SMSS; never below 2 * SMSS.
  void on_partial_ack(std::uint32_t acked) noexcept;
  // The recovery point was acknowledged. RFC 6582 3.2 step 3 option 1:
  // cwnd = min(ssthresh, max(flight_size, SMSS) + SMSS), flight_size being
  // what is still outstanding after the ACK (avoids a burst).
  virtual void exit_recovery(Time now, std::uint32_t flight_size) noexcept;
  // PRR (RFC 6937) sets the window on each ACK of a recovery: pipe plus
  // what may be sent now. Only in recovery.
  void set_recovery_window(std::uint32_t bytes) noexcept;
  // PRR's end of recovery (RFC 6937 section 3): cwnd = ssthresh.
  virtual void end_reduction(Time now) noexcept;
  // Retransmission timeout: ssthresh from flight_size (held if the previous
  // timeout saw no new data acknowledged since, RFC 5681 3.1 note on eq. 4),
  // cwnd = 1 SMSS (the loss window). Ends any recovery.
  virtual void on_rto(Time now, std::uint32_t flight_size) noexcept = 0;
  // The timeout was spurious: the ACK of an original transmission came
  // after it (RFC 4015 4 step 4, the Eifel response). `pipe_prev` is
  // max(FlightSize, ssthresh) from just before the timeout, `flight_size`
  // what is outstanding after the proving ACK, `acked` what it
  // acknowledged: ssthresh = pipe_prev, cwnd = flight_size + min(acked, IW)
  // (the window the flight had, regained without a burst), and the slow
  // start of a timeout ends. An algorithm's own stage (Cubic's epoch)
  // starts afresh, as after the timeout.
  void undo_rto(std::uint32_t pipe_prev, std::uint32_t flight_size, std::uint32_t acked) noexcept;
  // RFC 5681 4.1: nothing was sent for longer than RTO: cwnd = min(RW, cwnd),
  // RW = min(IW, cwnd).
  virtual void on_idle_restart(Time now) noexcept;
  // A new SMSS. Before anything was acknowledged or lost the window is
  // still the initial one and is recomputed for the new SMSS (RFC 6928).
  virtual void set_mss(std::uint32_t smss) noexcept;
  // Takes over from another algorithm mid-connection (TCP_CONGESTION):
  // its window, threshold, SMSS and recovery state; this algorithm's own
  // state starts afresh from them.
  void adopt_state(const CongestionControl& from) noexcept;
  const CcConfig& config() const noexcept { return cfg_; }

 protected:
  explicit CongestionControl(const CcConfig& cfg) noexcept;

  // RFC 5681 3.1 / RFC 3465 2.2: cwnd += min(acked, L * SMSS), not past
  // ssthresh; L = 1 in the slow start that follows a timeout (RFC 3465 2.3).
  void slow_start(std::uint32_t acked, std::uint32_t smss) noexcept;
  // RFC 5681 3.1 with byte counting (RFC 3465 2.1): +SMSS each time a
  // cwnd's worth of bytes has been acknowledged.
  void reno_congestion_avoidance(std::uint32_t acked, std::uint32_t smss) noexcept;
  bool cwnd_limited(const AckEvent& ev, std::uint32_t smss) const noexcept;
  // What every loss response shares: leave recovery, reset counters.
  void loss_common() noexcept;
  void set_cwnd(std::uint64_t bytes) noexcept;

  CcConfig cfg_;
  std::uint32_t cwnd_ = 0;
  std::uint32_t ssthresh_ = 0;
  std::uint32_t smss_ = 0;
  std::uint32_t bytes_acked_ = 0;  // RFC 3465 2.1 counter for congestion avoidance
  bool in_recovery_ = false;
  bool after_rto_ = false;     // slow start after a timeout (RFC 3465 2.3)
  bool rto_unacked_ = false;   // a timeout with no new data acknowledged since
  bool fresh_ = true;          // still the initial window: nothing acked or lost yet
};

// RFC 5681 with RFC 6582.
class NewReno final : public CongestionControl {
 public:
  explicit NewReno(const CcConfig& cfg = {}) noexcept;
  std::string_view name() const noexcept override { return "newreno"; }

  // RFC 5681 3.2 eq. 4: ssthresh = max(FlightSize / 2, 2 * SMSS).
  void enter_recovery(Time now, std::uint32_t flight_size) noexcept override;
  // RFC 5681 3.1 eq. 4 for ssthresh; cwnd = 1 SMSS.
  void on_rto(Time now, std::uint32_t flight_size) noexcept override;

  static std::uint32_t halved_flight(std::uint32_t flight_size, std::uint32_t smss) noexcept;
};

// RFC 9438. Windows are kept in bytes; the RFC's segment formulas are scaled
// by SMSS (W_cubic(t) = C * SMSS * (t - K)^3 + W_max with W_max in bytes).
class Cubic final : public CongestionControl {
 public:
  enum class Region : std::uint8_t { slow_start, reno_friendly, concave, convex, none };

  explicit Cubic(const CcConfig& cfg = {}) noexcept;
  std::string_view name() const noexcept override { return "cubic"; }

  void on_ack(const AckEvent& ev) noexcept override;
  // RFC 9438 4.6 and 4.7.
  void enter_recovery(Time now, std::uint32_t flight_size) noexcept override;
  // RFC 9438 4.8.
  void on_rto(Time now, std::uint32_t flight_size) noexcept override;
  void exit_recovery(Time now, std::uint32_t flight_size) noexcept override;
  void end_reduction(Time now) noexcept override;
  void on_idle_restart(Time now) noexcept override;
  void set_mss(std::uint32_t smss) noexcept override;

  // W_cubic(t) of RFC 9438 4.2 (figure 1) in bytes, t seconds into the
  // current congestion avoidance stage.
  double w_cubic(double t_seconds) const noexcept;
  // The state of the current stage, for tests and diagnostics.
  double w_max() const noexcept { return w_max_; }     // bytes
  double k() const noexcept { return k_; }             // seconds
  double w_est() const noexcept { return w_est_; }     // bytes
  double cwnd_prior() const noexcept { return cwnd_prior_; }
  bool epoch_started() const noexcept { return epoch_valid_; }
  Time epoch_start() const noexcept { return epoch_start_; }
  std::uint32_t cwnd_epoch() const noexcept { return cwnd_epoch_; }
  // Smoothed RTT the target is computed with (RFC 9438 4.2), from AckEvent::rtt.
  Duration srtt() const noexcept { return srtt_; }
  // Which region the last ACK in congestion avoidance fell in.
  Region last_region() const noexcept { return region_; }
  // alpha_cubic of RFC 9438 4.3: 3 * (1 - beta) / (1 + beta).
  double alpha_cubic() const noexcept;

 private:
  void start_epoch(Time now) noexcept;
  void cubic_update(const AckEvent& ev, std::uint32_t smss) noexcept;
  double seconds_since_epoch(Time now) const noexcept;

  double c_ = 0.4;
  double beta_ = 0.7;
  double w_max_ = 0;       // bytes; 0: undefined (no loss yet, or after a timeout)
  double cwnd_prior_ = 0;  // bytes
  double k_ = 0;           // seconds
  double w_est_ = 0;       // bytes
  double frac_ = 0;        // growth below one byte, carried between ACKs
  std::uint32_t cwnd_epoch_ = 0;
  Time epoch_start_{};
  Time last_ack_{};
  Duration srtt_{0};
  bool has_rtt_ = false;
  bool epoch_valid_ = false;
  Region region_ = Region::none;
};

// "newreno" or "cubic"; not_found for any other name, invalid_argument for
// a config no algorithm can run with (smss 0, beta outside (0, 1), C <= 0).
Result<std::unique_ptr<CongestionControl>> make_congestion_control(std::string_view name,
                                                                   const CcConfig& cfg = {});
// The names make_congestion_control accepts.
std::span<const std::string_view> congestion_control_names() noexcept;

}  // namespace xk::tcp

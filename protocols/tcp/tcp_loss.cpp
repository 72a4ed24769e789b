// Loss recovery of a SACK connection with recovery=rack (the default):
// RACK-TLP (RFC 8985) decides what is lost and when to probe; PRR
// (RFC 6937) how much to send on each ACK of a recovery. The bookkeeping is
// in tcp_rack.cpp; this file is the connection acting on it. docs/tcp.md,
// "Loss recovery".
//
// One timer serves the RTO, RACK's reordering timer and the tail loss
// probe (rtx_kind_ says which is armed), as RFC 8985 section 8 allows.

#include <algorithm>

#include "xk/protocols/tcp.hpp"
#include "tcb.hpp"

namespace xk::tcp {

bool TcpConnection::retransmit(SeqNum start, SeqNum end) {
  // The FIN sits right after the data: its sequence number is where the
  // send buffer ends.
  const SeqNum data_end = snd_una_ + static_cast<std::uint32_t>(sndbuf_.size());
  const bool fin = fin_sent_ && end > data_end && start <= data_end;
  const SeqNum stop = seq_min(end, data_end);
  const std::uint32_t len = start < stop ? seq_span(start, stop) : 0u;
  if (len == 0 && !fin) return false;
  std::uint8_t flags = kAck;
  if (fin) flags |= kFin;
  return static_cast<bool>(send_segment(start, len, flags, true));
}

// RFC 8985 6.2 steps 4-5 and 7.4, and PRR, after an ACK was taken in.
void TcpConnection::rack_after_ack(const Rack::AckResult& ra, const Header& h, const SackScoreboard::UpdateResult& sr,
                                   bool pure_dupack, Time now) {
  // Did a probe that repeated data repair a loss? Then the window comes
  // down as for a recovery, though nothing is left to send again.
  std::optional<SackBlock> dsack;
  if (sr.dsack) dsack = sr.dsack_block;
  if (rack_->tlp.on_ack(h.ack, dsack, pure_dupack) == Tlp::Outcome::repaired) {
    ++proto_->stats().loss_probe_repairs;
    if (!in_recovery_) reduce_window(now);
  }
  if (ra.advanced) rack_detect(now);
  if (in_recovery_) prr_update(ra.delivered);
  if (snd_una_ == snd_max_) return;  // new_ack() stopped the timer
  if (rtx_kind_ == RtxTimer::reorder && rtx_timer_.armed()) return;
  // A probe armed before must not fire in recovery: the RTO again then.
  if ((ra.delivered > 0 || in_recovery_) && !schedule_probe(now) && rtx_kind_ == RtxTimer::probe) arm_rto(now);
}

void TcpConnection::reduce_window(Time now) {
  cc_->enter_recovery(now, seq_span(snd_una_, snd_max_));
  cc_->end_reduction(now);
}

// RFC 3168 6.1.2: an ECN-Echo is congestion without a loss: the window
// comes down as for one, once per window of data (not again in a recovery,
// nor while our CWR has not gone out: the peer is still echoing the same
// mark), and the next new data carries CWR.
void TcpConnection::ecn_echo(Time now) {
  if (in_recovery_ || cwr_out_ || (ecn_recover_set_ && snd_una_ < ecn_recover_)) return;
  reduce_window(now);
  ++proto_->stats().ecn_reductions;
  cwr_out_ = true;
  ecn_recover_ = snd_max_;
  ecn_recover_set_ = true;
}

void TcpConnection::rack_detect(Time now) {
  const std::uint32_t lost_before = rack_->rack.lost_bytes();
  // After a timeout, until SND.UNA passes what was outstanding then, RACK
  // runs as in recovery (no reordering window unless reordering was seen).
  const bool recovering = in_recovery_ || (recover_set_ && snd_una_ < recover_);
  const Duration wait = rack_->rack.detect_loss(now, rto_.srtt(), recovering, payload_mss());
  const std::uint32_t lost = rack_->rack.lost_bytes();
  if (lost > lost_before) proto_->stats().rack_lost_bytes.inc(lost - lost_before);
  if (lost > 0 && !recovering) enter_rack_recovery(now);
  if (wait > Duration{0}) {
    rtx_kind_ = RtxTimer::reorder;
    rtx_timer_.arm_after(wait);
  } else if (rtx_kind_ == RtxTimer::reorder) {
    arm_rto();  // nothing waits on reordering any more
  }
}

void TcpConnection::enter_rack_recovery(Time now) {
  in_recovery_ = true;
  recover_ = snd_max_;
  recover_set_ = true;
  ++stats_.fast_retransmits;
  ++proto_->stats().fast_retransmits;
  ++proto_->stats().sack_recoveries;
  const std::uint32_t flight = seq_span(snd_una_, snd_max_);
  cc_->enter_recovery(now, flight);
  rack_->prr.start(flight);
  rtt_timing_ = false;
}

// RFC 6937 section 3: cwnd = pipe + sndcnt for this ACK.
void TcpConnection::prr_update(std::uint32_t delivered) {
  const std::uint32_t pipe = rack_->rack.pipe();
  const std::uint32_t sndcnt = rack_->prr.on_ack(delivered, pipe, cc_->ssthresh(), payload_mss());
  cc_->set_recovery_window(pipe + sndcnt);
}

// What RACK marked lost goes again, lowest first, as far as cwnd allows.
bool TcpConnection::send_recovery_rack() {
  bool sent = false;
  for (int guard = 0; guard < 4096; ++guard) {
    const std::optional<Rack::Sent> next = rack_->rack.next_lost(payload_mss());
    if (!next) break;
    if (cc_->cwnd() < std::uint64_t{rack_->rack.pipe()} + next->size()) break;
    if (!retransmit(next->start, next->end)) break;
    sent = true;
  }
  return sent;
}

// RFC 8985 7.2: after new data went out, or an ACK that delivered some,
// arm the probe timer in place of the RTO.
bool TcpConnection::schedule_probe(Time now) {
  if (!proto_->config().tlp || in_recovery_ || rack_->tlp.in_flight()) return false;
  if (snd_una_ == snd_max_ || (recover_set_ && snd_una_ < recover_)) return false;  // nothing out, or an RTO's recovery
  if (rtx_kind_ == RtxTimer::reorder && rtx_timer_.armed()) return false;
  if (!rtx_timer_.armed() || rack_->rto_due < now) rack_->rto_due = now + rto_.rto();
  std::optional<Duration> srtt;
  if (rto_.has_sample()) srtt = rto_.srtt();
  const bool one_segment = seq_span(snd_una_, snd_max_) <= payload_mss();
  const TcpConfig& cfg = proto_->config();
  const Duration pto = Tlp::pto(srtt, one_segment, cfg.tlp_delack, cfg.probe_floor(), rack_->rto_due - now);
  rtx_kind_ = RtxTimer::probe;
  // A one-segment flight's probe mostly falls on the RTO's own deadline:
  // the armed timer stays, only what it does changes.
  const Time due = now + pto;
  if (!rtx_timer_.armed() || rtx_timer_.deadline() != due) rtx_timer_.arm(due);
  return true;
}

// RFC 8985 7.3: one segment of new data if the receive window allows,
// otherwise the last segment again; then the RTO.
void TcpConnection::on_probe_timeout() {
  if (snd_una_ == snd_max_ || rack_ == nullptr) return;
  if (in_recovery_) {
    arm_rto();
    return;
  }
  ++proto_->stats().loss_probes;
  const SeqNum before = snd_max_;
  if (unsent_bytes() > 0 && snd_nxt_ == snd_max_) {
    probe_one_ = true;
    (void)send_new_data();
    probe_one_ = false;
  }
  bool repeated = false;
  if (snd_max_ == before) {
    const SeqNum data_end = snd_una_ + static_cast<std::uint32_t>(sndbuf_.size());
    const std::uint32_t fin = (fin_sent_ && snd_max_ > data_end) ? 1u : 0u;
    const std::uint32_t span = std::min(seq_span(snd_una_, snd_max_), payload_mss() + fin);
    repeated = retransmit(snd_max_ - span, snd_max_);
  }
  if (snd_max_ != before || repeated) rack_->tlp.sent(snd_max_, repeated);
  arm_rto();
}

// RFC 8985 6.2: the reordering window of a segment passed: look again.
void TcpConnection::on_reorder_timeout() {
  if (rack_ == nullptr || snd_una_ == snd_max_) return;
  ++proto_->stats().reorder_timeouts;
  const bool was_recovering = in_recovery_;
  rack_detect(proto_->timers().clock().now());
  if (in_recovery_ && !was_recovering) prr_update(0);
  output();
  if (!rtx_timer_.armed()) arm_rto();
}

}  // namespace xk::tcp

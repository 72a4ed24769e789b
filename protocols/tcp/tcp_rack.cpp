// RACK-TLP (RFC 8985) and PRR (RFC 6937): see tcp_rack.hpp.

#include "xk/protocols/tcp_rack.hpp"

#include <algorithm>

namespace xk::tcp {

namespace {
// The TSval our timestamps carry for a send time: milliseconds of the clock,
// as TcpProtocol::tsval() makes them.
std::uint32_t tsval_of(Time t) noexcept {
  return static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}
}  // namespace

// ---- the transmission log --------------------------------------------------------

std::uint32_t Rack::outstanding() const noexcept {
  return empty() ? 0u : static_cast<std::uint32_t>(log_.back().end - log_[head_].start);
}

std::size_t Rack::find(SeqNum seq) const noexcept {
  auto it = std::partition_point(log_.begin() + static_cast<std::ptrdiff_t>(head_), log_.end(),
                                 [seq](const Sent& s) { return s.end <= seq; });
  return static_cast<std::size_t>(it - log_.begin());
}

std::size_t Rack::split_at(SeqNum at) {
  if (empty() || at <= log_[head_].start) return head_;
  if (at >= log_.back().end) return log_.size();
  const std::size_t i = find(at);
  if (log_[i].start == at) return i;
  Sent back = log_[i];
  back.start = at;
  log_[i].end = at;
  log_.insert(log_.begin() + static_cast<std::ptrdiff_t>(i) + 1, back);
  return i + 1;
}

void Rack::on_send(SeqNum start, SeqNum end, Time now) {
  if (!(start < end)) return;
  if (empty()) {
    log_.clear();
    head_ = 0;
    any_retx_ = false;
    log_.push_back({start, end, now, next_order_++, 0});
    return;
  }
  const SeqNum log_end = log_.back().end;
  if (start < log_end) {
    // A retransmission of logged bytes (those below SND.UNA are gone).
    const SeqNum from = seq_max(start, log_[head_].start);
    const SeqNum to = seq_min(end, log_end);
    if (from < to) {
      const std::size_t i = split_at(from);
      const std::size_t j = split_at(to);
      for (std::size_t k = i; k < j; ++k) {
        Sent& s = log_[k];
        if (s.flags & kSacked) continue;  // delivered already: its time stays
        if (s.flags & kLost) lost_ -= s.size();
        s.flags = static_cast<std::uint8_t>((s.flags & ~kLost) | kRetransmitted);
        s.xmit = now;
        s.order = next_order_;
      }
      ++next_order_;
      retx_end_ = any_retx_ ? seq_max(retx_end_, to) : to;
      any_retx_ = true;
    }
    if (end <= log_end) return;
    start = log_end;
  }
  // New data. Sent at the same instant as the last record and as plain:
  // one record (the times compare equal anyway).
  Sent& last = log_.back();
  if (start == last.end && last.flags == 0 && last.xmit == now && last.order + 1 == next_order_) {
    last.end = end;
    return;
  }
  log_.push_back({start, end, now, next_order_++, 0});
}

void Rack::compact() {
  if (empty()) {
    log_.clear();
    head_ = 0;
    any_retx_ = false;
    return;
  }
  if (head_ >= 32 && 2 * head_ >= log_.size()) {
    log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

// ---- RFC 8985 6.2, on each ACK ---------------------------------------------------

void Rack::delivered(const Sent& s, std::optional<std::uint32_t> tsecr, Time now, SeqNum fack_before,
                     Best& best) noexcept {
  const bool retx = (s.flags & kRetransmitted) != 0;
  // Step 3: an original transmission delivered below the highest sequence
  // delivered before it was reordered on the way.
  if (have_fack_ && s.end < fack_before && !retx) reordering_seen_ = true;
  if (!have_fack_ || s.end > fack_) {
    fack_ = s.end;
    have_fack_ = true;
  }
  // Step 2: an ACK of a retransmitted segment may be for the first copy:
  // taken only when the timestamp echo says it is for the last one, and
  // never when it came back faster than the path ever did.
  const Duration rtt = now - s.xmit;
  if (retx) {
    if (tsecr && static_cast<std::int32_t>(*tsecr - tsval_of(s.xmit)) < 0) return;
    if (!min_rtt_ || rtt < *min_rtt_) return;
  }
  // Step 1: the minimum RTT, over a window of time.
  if (!min_rtt_ || rtt <= *min_rtt_ || now - min_rtt_stamp_ > cfg_.min_rtt_window) {
    min_rtt_ = rtt;
    min_rtt_stamp_ = now;
  }
  if (!best.found || sent_after(s, best.seg.xmit, best.seg.order, best.seg.end)) best = {true, s};
}

Rack::AckResult Rack::on_ack(SeqNum snd_una, std::span<const SackBlock> sacks, bool dsack,
                             std::optional<std::uint32_t> tsecr, SeqNum snd_nxt, Time now) {
  AckResult r;
  // Step 4's D-SACK rounds: one widening of the reordering window per
  // round trip that sees D-SACKs.
  if (dsack_round_ && snd_una >= *dsack_round_) dsack_round_.reset();
  if (dsack && !dsack_round_) {
    dsack_round_ = snd_nxt;
    if (reo_wnd_mult_ < 255) ++reo_wnd_mult_;
    reo_wnd_persist_ = cfg_.reo_wnd_persist;
  }
  if (empty()) return r;

  const SeqNum fack_before = fack_;
  Best best;
  std::uint32_t newly_acked = 0;
  std::uint32_t newly_sacked = 0;
  // Cumulatively acknowledged records leave the log.
  while (!empty() && log_[head_].end <= snd_una) {
    const Sent& s = log_[head_];
    if (s.flags & kSacked) {
      sacked_ -= s.size();
    } else {
      newly_acked += s.size();
      delivered(s, tsecr, now, fack_before, best);
    }
    if (s.flags & kLost) lost_ -= s.size();
    ++head_;
  }
  if (!empty() && log_[head_].start < snd_una) {
    Sent& s = log_[head_];
    const auto part = static_cast<std::uint32_t>(snd_una - s.start);
    if (s.flags & kSacked) {
      sacked_ -= part;
    } else {
      newly_acked += part;
      Sent front = s;
      front.end = snd_una;
      delivered(front, tsecr, now, fack_before, best);
    }
    if (s.flags & kLost) lost_ -= part;
    s.start = snd_una;
  }
  // Selectively acknowledged ones stay, marked.
  for (const SackBlock& b : sacks) {
    if (empty()) break;
    const SeqNum left = seq_max(b.left, log_[head_].start);
    const SeqNum right = seq_min(b.right, log_.back().end);
    if (!(b.left < b.right) || !(left < right)) continue;
    const std::size_t i = split_at(left);
    const std::size_t j = split_at(right);
    for (std::size_t k = i; k < j; ++k) {
      Sent& s = log_[k];
      if (s.flags & kSacked) continue;
      s.flags |= kSacked;
      sacked_ += s.size();
      newly_sacked += s.size();
      if (s.flags & kLost) {
        lost_ -= s.size();
        s.flags = static_cast<std::uint8_t>(s.flags & ~kLost);
      }
      delivered(s, tsecr, now, fack_before, best);
    }
  }
  if (best.found) {
    rtt_ = now - best.seg.xmit;
    if (!have_rack_ || sent_after(best.seg, rack_xmit_, rack_order_, rack_end_)) {
      rack_xmit_ = best.seg.xmit;
      rack_order_ = best.seg.order;
      rack_end_ = best.seg.end;
      have_rack_ = true;
      r.advanced = true;
    }
  }
  r.delivered = newly_acked + newly_sacked;
  compact();
  return r;
}

Duration Rack::reo_wnd(Duration srtt, bool in_recovery, std::uint32_t smss) const noexcept {
  // Step 4: without reordering seen, no patience in recovery, nor once
  // DupThresh segments are SACKed (the RFC 6675 rule, kept).
  if (!reordering_seen_) {
    if (in_recovery) return Duration{0};
    if (smss > 0 && sacked_ >= std::uint64_t{cfg_.dup_thresh} * smss) return Duration{0};
  }
  if (!min_rtt_) return Duration{0};
  return std::min<Duration>(reo_wnd_mult_ * *min_rtt_ / 4, srtt);
}

void Rack::mark_lost(Sent& s) noexcept {
  s.flags |= kLost;
  lost_ += s.size();
}

Duration Rack::detect_loss(Time now, Duration srtt, bool in_recovery, std::uint32_t smss) {
  if (!have_rack_ || empty()) return Duration{0};
  const Duration reo = reo_wnd(srtt, in_recovery, smss);
  Duration timeout{0};
  for (std::size_t k = head_; k < log_.size(); ++k) {
    Sent& s = log_[k];
    if (s.flags & (kSacked | kLost)) continue;
    if (sent_after(s, rack_xmit_, rack_order_, rack_end_) || (s.xmit == rack_xmit_ && s.order == rack_order_ && s.end == rack_end_)) {
      // Original transmissions go out in sequence order: past one sent
      // after RACK.xmit_ts, with no retransmission above, so were the rest.
      if (!(s.flags & kRetransmitted) && (!any_retx_ || s.start >= retx_end_)) break;
      continue;
    }
    // Step 5: lost once a later segment's delivery is an RTT plus the
    // reordering window older than its own send time.
    const Duration remaining = s.xmit + rtt_ + reo - now;
    if (remaining <= Duration{0}) {
      mark_lost(s);
    } else {
      timeout = std::max(timeout, remaining);
    }
  }
  return timeout;
}

void Rack::rtt_sample(Duration rtt, Time now) noexcept {
  if (!min_rtt_ || rtt <= *min_rtt_) {
    min_rtt_ = rtt;
    min_rtt_stamp_ = now;
  }
}

void Rack::on_rto() noexcept {
  for (std::size_t k = head_; k < log_.size(); ++k) {
    log_[k].flags = static_cast<std::uint8_t>((log_[k].flags & kRetransmitted) | kLost);
  }
  sacked_ = 0;
  lost_ = outstanding();
}

void Rack::undo_rto() noexcept {
  for (std::size_t k = head_; k < log_.size(); ++k) log_[k].flags &= static_cast<std::uint8_t>(~kLost);
  lost_ = 0;
}

void Rack::recovery_ended() noexcept {
  if (reo_wnd_persist_ > 0) --reo_wnd_persist_;
  if (reo_wnd_persist_ == 0) reo_wnd_mult_ = 1;
}

std::optional<Rack::Sent> Rack::next_lost(std::uint32_t max) const noexcept {
  if (lost_ == 0 || max == 0) return std::nullopt;
  for (std::size_t k = head_; k < log_.size(); ++k) {
    const Sent& s = log_[k];
    if (!(s.flags & kLost)) continue;
    Sent piece = s;
    if (piece.size() > max) piece.end = piece.start + max;
    return piece;
  }
  return std::nullopt;
}

// ---- TLP (RFC 8985 section 7) -----------------------------------------------------

Duration Tlp::pto(std::optional<Duration> srtt, bool one_segment, Duration wc_delack, Duration floor,
                  Duration until_rto) noexcept {
  Duration p = srtt ? 2 * *srtt : Duration{std::chrono::seconds(1)};
  if (srtt && one_segment) p += wc_delack;
  p = std::max(p, floor);
  return std::max(Duration{0}, std::min(p, until_rto));
}

Tlp::Outcome Tlp::on_ack(SeqNum ack, std::optional<SackBlock> dsack, bool pure_dupack) noexcept {
  if (!end_ || ack < *end_) return Outcome::pending;
  if (!retrans_) {
    end_.reset();  // the probe carried new data, and it arrived
    return Outcome::no_loss;
  }
  if (dsack && dsack->right == *end_) {
    end_.reset();  // the receiver had the data twice: nothing was lost
    return Outcome::no_loss;
  }
  if (ack > *end_) {
    end_.reset();  // acknowledged beyond the probe without a D-SACK: it repaired a loss
    return Outcome::repaired;
  }
  if (pure_dupack) {
    end_.reset();  // a duplicate without SACK: both copies arrived
    return Outcome::no_loss;
  }
  return Outcome::pending;
}

// ---- PRR (RFC 6937 section 3) -----------------------------------------------------

std::uint32_t Prr::on_ack(std::uint32_t delivered, std::uint32_t pipe, std::uint32_t ssthresh,
                          std::uint32_t smss) noexcept {
  delivered_ += delivered;
  std::int64_t sndcnt;
  if (pipe > ssthresh) {
    // Proportional: send ssthresh / RecoverFS of what was delivered.
    const std::uint64_t allowed = (delivered_ * ssthresh + recover_fs_ - 1) / recover_fs_;
    sndcnt = static_cast<std::int64_t>(allowed) - static_cast<std::int64_t>(out_);
  } else {
    // Slow-start reduction bound: grow back towards ssthresh, at most one
    // segment beyond what was delivered.
    const std::int64_t limit =
        std::max<std::int64_t>(static_cast<std::int64_t>(delivered_) - static_cast<std::int64_t>(out_), delivered) +
        smss;
    sndcnt = std::min<std::int64_t>(static_cast<std::int64_t>(ssthresh) - pipe, limit);
  }
  sndcnt = std::max<std::int64_t>(sndcnt, 0);
  // The first ACK of a recovery always lets the fast retransmit out.
  if (out_ == 0 && sndcnt < smss) sndcnt = smss;
  return static_cast<std::uint32_t>(std::min<std::int64_t>(sndcnt, UINT32_MAX));
}

}  // namespace xk::tcp

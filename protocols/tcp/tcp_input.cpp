// SEGMENT ARRIVES (RFC 9293 3.10.7.3 - 3.10.7.4) for one connection, with
// PAWS (RFC 7323 5), RFC 5961's defences and the ACK processing of RFC 5681,
// RFC 6582 and RFC 6675. Each step is named after the RFC's "first" ...
// "eighth" check.

#include <algorithm>

#include "xk/protocols/tcp.hpp"
#include "tcb.hpp"

namespace xk::tcp {

// Options of a SYN we received (ours were, or will be, offered in our SYN).
void TcpConnection::take_options(const Options& opts, bool syn) {
  if (!syn || proto_ == nullptr) return;
  const TcpConfig& cfg = proto_->config();
  peer_mss_ = opts.mss.value_or(536);  // RFC 9293 3.7.1: 536 when absent
  mss_ = std::min(peer_mss_, host().path_mss(*ip_));
  if (tuning_ && tuning_->max_segment) mss_ = std::min(mss_, *tuning_->max_segment);  // TCP_MAXSEG
  // A path MTU learnt during the handshake (RFC 1191) holds too.
  if (pmtu_ != 0) mss_ = std::min<std::uint16_t>(mss_, static_cast<std::uint16_t>(pmtu_ - ip_tcp_headers()));
  if (mss_ < 64) mss_ = 64;  // RFC 9293 3.7.1 leaves the floor to us; a tiny MSS is a DoS tool
  // RFC 7323 2.2: scaling only when both SYNs carry the option.
  if (opts.wscale && cfg.wscale > 0) {
    snd_wscale_ = std::min(*opts.wscale, kMaxWscale);
    rcv_wscale_ = host().our_wscale(cfg.buf_max);
  } else {
    snd_wscale_ = rcv_wscale_ = 0;
  }
  sack_ok_ = cfg.sack && opts.sack_permitted;  // RFC 2018 section 2
  ts_ok_ = cfg.timestamps && opts.timestamps.has_value();  // RFC 7323 3.2
  if (ts_ok_) {
    ts_recent_ = opts.timestamps->tsval;
    ts_recent_age_ = proto_->timers().clock().now();
  }
  sb_.set_smss(payload_mss());
  cc_->set_mss(payload_mss());
}

void TcpConnection::segment_arrives(Header h, const Options& opts, Msg payload, bool ce) {
  Ref<TcpConnection> keep(this);
  ++stats_.segs_in;
  if (proto_ == nullptr) return;
  last_recv_ = proto_->timers().clock().now();
  keepalive_sent_ = 0;
  switch (state_) {
    case State::closed:
    case State::listen:
      return;  // the protocol answers segments for no connection
    case State::syn_sent:
      input_syn_sent(h, opts, std::move(payload));
      notify();
      return;
    default:
      break;
  }

  // First (with PAWS before it, RFC 7323 5.3): is the segment acceptable?
  if (!check_paws(h, opts)) return;
  if (state_ == State::syn_received && h.has(kSyn) && h.seq == irs_ && !h.has(kRst)) {
    if (!h.has(kAck)) {
      // The peer's SYN again: our SYN-ACK was lost, so send it again (an ACK
      // would be dropped in SYN-SENT, RFC 9293 3.10.7.3 fifth). Karn: no RTT.
      send_syn();
      rtt_timing_ = false;
      return;
    }
    // RFC 9293 3.5 figure 8 line 6: in a simultaneous open the peer's SYN-ACK
    // repeats the SYN we took; what follows it (its ACK) completes ours.
    h.flags = static_cast<std::uint8_t>(h.flags & ~kSyn);
    h.seq += 1;
  }
  std::uint32_t len = seg_len(h, payload.size());
  if (!acceptable(h, payload.size())) {
    ++proto_->stats().drop_out_of_window;
    if (!h.has(kRst)) {
      // RFC 2883: report a duplicate we already had.
      if (sack_ok_ && len > 0 && h.seq + len <= rcv_nxt_) dsack_ = SackBlock{h.seq, h.seq + static_cast<std::uint32_t>(payload.size())};
      send_ack_now();
      // RFC 9293 3.10.7.4 eighth, TIME-WAIT: the peer's FIN again (it lies
      // below RCV.NXT, so never acceptable): ACK it and restart the 2 MSL.
      if (state_ == State::time_wait && h.has(kFin) && h.seq + len == rcv_nxt_) {
        time_wait_timer_.arm_after(2 * proto_->config().msl);
      }
    }
    return;
  }
  // Second: RST (RFC 5961 3.2: only an exact match resets; the rest of the
  // window earns a challenge ACK).
  if (h.has(kRst)) {
    process_rst(h);
    return;
  }
  // Fourth: SYN in a synchronized state (RFC 5961 4.2): challenge ACK.
  if (h.has(kSyn)) {
    challenge_ack();
    return;
  }
  // Fifth: no ACK, no processing.
  if (!h.has(kAck)) return;
  // RFC 3168 6.1.3: a CE mark is echoed (ECE) in every ACK until the
  // peer's CWR says it reduced; the first one is ACKed at once.
  bool ce_news = false;
  if (ecn_ok_) {
    if (h.has(kCwr)) ece_out_ = false;
    if (ce) {
      ++proto_->stats().ecn_ce_received;
      ce_news = !ece_out_;
      ece_out_ = true;
    }
  }
  if (!process_ack(h, opts, payload.size())) {
    notify();
    return;
  }
  if (proto_ == nullptr) {  // the ACK ended the connection (LAST-ACK)
    notify();
    return;
  }

  // Sixth: the URG bit; seventh: segment text (RFC 9293 3.10.7.4), and eighth: FIN.
  switch (state_) {
    case State::established:
    case State::fin_wait_1:
    case State::fin_wait_2:
      if (h.has(kUrg)) process_urgent(h);
      {
        const bool in_order_data = !payload.empty() && h.seq == rcv_nxt_;
        process_data(h, std::move(payload));
        if (in_order_data && autotunes_rcv()) measure_rcv_rtt(opts);  // (autotunes_rcv: not released)
      }
      break;
    default:
      break;  // CLOSE-WAIT, CLOSING, LAST-ACK, TIME-WAIT: the peer already sent its FIN
  }
  if (proto_ != nullptr) output();
  if (ce_news && proto_ != nullptr && ack_pending_) send_ack_now();
  notify();
}

// RFC 9293 3.10.7.3.
void TcpConnection::input_syn_sent(const Header& h, const Options& opts, Msg payload) {
  // First: the ACK.
  if (h.has(kAck) && (h.ack <= iss_ || h.ack > snd_max_)) {
    if (!h.has(kRst)) send_reset(h.ack, SeqNum(0), kRst);
    return;
  }
  const bool ack_ok = h.has(kAck);
  // Second: RST. Acceptable only with an acceptable ACK (RFC 5961 3.2 would
  // also do here; the ACK check is what RFC 9293 asks).
  if (h.has(kRst)) {
    if (ack_ok) {
      ++proto_->stats().resets_received;
      fail(Errc::refused);
    }
    return;
  }
  // Fourth: SYN.
  if (!h.has(kSyn)) return;
  irs_ = h.seq;
  rcv_nxt_ = rcv_adv_ = h.seq + 1;
  take_options(opts, true);
  if (ack_ok) {
    snd_una_ = h.ack;
    soft_error_ = Errc::ok;
    rtx_timer_.cancel();
    // RFC 3168 6.1.1: ECN if we asked and the SYN-ACK has ECE without CWR.
    ecn_ok_ = proto_->config().ecn == TcpConfig::Ecn::on && h.has(kEce) && !h.has(kCwr);
    if (rtt_timing_ && h.ack > rtt_seq_ - 1 && retries_ == 0) {
      rto_.on_rtt_sample(proto_->timers().clock().now() - rtt_start_);
    }
    rtt_timing_ = false;
  }
  if (snd_una_ > iss_) {
    // Our SYN is acknowledged: ESTABLISHED. The window in a SYN is never scaled.
    snd_wnd_ = h.window;
    max_snd_wnd_ = snd_wnd_;
    snd_wl1_ = h.seq;
    snd_wl2_ = h.ack;
    if (retries_ > 0) rto_.on_handshake_after_syn_timeout();  // RFC 6298 5.7
    enter_state(State::established);
    (void)payload;  // data on a SYN-ACK is rare; the peer sends it again
    ack_pending_ = true;
    output();
    send_ack_now();
    return;
  }
  // Simultaneous open (RFC 9293 3.5 figure 8): SYN-RECEIVED, send SYN-ACK.
  snd_wnd_ = h.window;
  snd_wl1_ = h.seq;
  enter_state(State::syn_received);
  snd_nxt_ = iss_;
  send_syn();
}

// RFC 7323 5.3 R1-R3: a segment whose timestamp is older than TS.Recent is
// a duplicate from an earlier wrap of the sequence space.
bool TcpConnection::check_paws(const Header& h, const Options& opts) {
  if (!ts_ok_ || !opts.timestamps || h.has(kRst)) return true;
  if (static_cast<std::int32_t>(opts.timestamps->tsval - ts_recent_) >= 0) return true;
  // R3 note: TS.Recent older than 24 days is invalid, not a reason to drop.
  if (last_recv_ - ts_recent_age_ > std::chrono::hours(24 * 24)) {
    ts_recent_ = opts.timestamps->tsval;
    return true;
  }
  ++proto_->stats().drop_paws;
  send_ack_now();
  return false;
}

// RFC 9293 3.10.7.4, first check.
bool TcpConnection::acceptable(const Header& h, std::size_t payload) const noexcept {
  return segment_acceptable(h, payload, rcv_nxt_, static_cast<std::uint32_t>(rcv_adv_ - rcv_nxt_));
}

// RFC 9293 3.10.7.4 second check, with RFC 5961 3.2.
void TcpConnection::process_rst(const Header& h) {
  if (h.seq != rcv_nxt_) {
    challenge_ack();
    return;
  }
  ++proto_->stats().resets_received;
  switch (state_) {
    case State::syn_received:
      // A passive open goes back to LISTEN: the listener just forgets it.
      if (listener_ != nullptr) {
        release();
        return;
      }
      fail(Errc::refused);
      return;
    case State::closing:
    case State::last_ack:
    case State::time_wait:
      state_ = State::closed;
      release();
      notify();
      return;
    default:
      fail(Errc::reset);
      return;
  }
}

void TcpConnection::challenge_ack() {
  if (host().challenge_ack_allowed(proto_->timers().clock().now())) send_ack_now();
}

// Fifth check, the ACK field. Returns false when the segment must be dropped.
bool TcpConnection::process_ack(const Header& h, const Options& opts, std::size_t len) {
  if (state_ == State::syn_received) {
    if (!(h.ack > snd_una_ && h.ack <= snd_max_)) {
      send_reset(h.ack, SeqNum(0), kRst);
      return false;
    }
    snd_wnd_ = std::uint32_t{h.window} << snd_wscale_;
    max_snd_wnd_ = std::max(max_snd_wnd_, snd_wnd_);
    snd_wl1_ = h.seq;
    snd_wl2_ = h.ack;
    if (retries_ > 0) rto_.on_handshake_after_syn_timeout();
    enter_state(State::established);
    // close() came during a simultaneous open: the FIN goes out now.
    if (write_shut_) enter_state(State::fin_wait_1);
  }
  // RFC 5961 5.2: acceptable ACKs lie in [SND.UNA - MAX.SND.WND, SND.NXT].
  if (h.ack > snd_max_) {
    ++proto_->stats().drop_ack_unacceptable;
    send_ack_now();
    return false;
  }
  if (h.ack < snd_una_ - max_snd_wnd_) {
    ++proto_->stats().drop_ack_unacceptable;
    challenge_ack();
    return false;
  }
  // RFC 7323 4.3 (3): remember the timestamp of a segment that covers
  // Last.ACK.sent -- only now, when its ACK is acceptable too: a segment
  // dropped for acknowledging what we never sent must not move TS.Recent
  // (one forged segment with a huge TSval would make PAWS drop every
  // honest one after it). A SYN or RST never updates it.
  if (ts_ok_ && opts.timestamps && h.seq <= last_ack_sent_ && !h.has(kRst) && !h.has(kSyn) &&
      static_cast<std::int32_t>(opts.timestamps->tsval - ts_recent_) >= 0) {
    ts_recent_ = opts.timestamps->tsval;
    ts_recent_age_ = last_recv_;
  }

  std::span<const SackBlock> blocks;
  if (sack_ok_) {
    blocks = opts.sack_blocks();
    stats_.sack_blocks_in += blocks.size();
  }
  SackScoreboard::UpdateResult sr{};
  if (sack_ok_ && (!blocks.empty() || sb_.range_count() != 0 || sb_.in_recovery())) {
    sr = sb_.update(seq_max(h.ack, snd_una_), snd_max_, blocks);
  }
  // A timeout the ACKs merely outran is undone before the ACK is taken:
  // RACK must not send again what the timeout marked lost.
  const SeqNum una_before = snd_una_;
  const bool spurious = eifel_.armed && h.ack > snd_una_ && spurious_timeout(opts);
  if (spurious) undo_timeout(opts);
  // RACK (RFC 8985 6.2): what this ACK delivered, by transmission.
  Rack::AckResult ra{};
  const bool pure_dupack = h.ack == snd_una_ && len == 0 && blocks.empty() && !h.has(kFin);
  const Time now = rack_ != nullptr ? proto_->timers().clock().now() : Time{};
  if (rack_ != nullptr) {
    std::span<const SackBlock> sacks = blocks;
    if (sr.dsack) sacks = sacks.subspan(1);
    std::optional<std::uint32_t> tsecr;
    if (ts_ok_ && opts.timestamps) tsecr = opts.timestamps->tsecr;
    ra = rack_->rack.on_ack(seq_max(h.ack, snd_una_), sacks, sr.dsack, tsecr, snd_max_, now);
  }

  if (h.ack > snd_una_) {
    new_ack(h, opts, static_cast<std::uint32_t>(h.ack - snd_una_));
    if (proto_ == nullptr) return false;
    // RFC 4015 4 step 4: the window the flight had, after this ACK.
    if (spurious) {
      cc_->undo_rto(eifel_.pipe_prev, static_cast<std::uint32_t>(snd_max_ - snd_una_),
                    static_cast<std::uint32_t>(snd_una_ - una_before));
    }
  } else if (h.ack == snd_una_ && len == 0 && !h.has(kSyn) && !h.has(kFin) && snd_max_ > snd_una_ &&
             ((std::uint32_t{h.window} << snd_wscale_) == snd_wnd_ || sr.newly_sacked > 0)) {
    // RFC 5681 2 (and RFC 6675 2's SACK variant): a duplicate ACK.
    duplicate_ack(h);
  }
  update_window(h);
  if (ecn_ok_ && h.has(kEce)) ecn_echo(rack_ != nullptr ? now : proto_->timers().clock().now());
  if (rack_ != nullptr) rack_after_ack(ra, h, sr, pure_dupack, now);

  // Our FIN: it is acknowledged when SND.UNA passes it.
  const bool fin_acked = fin_sent_ && snd_una_ == snd_max_;
  switch (state_) {
    case State::fin_wait_1:
      if (fin_acked) {
        enter_state(State::fin_wait_2);
        // An orphan waits for the peer's FIN no longer than TIME-WAIT would.
        if (user_closed_) time_wait_timer_.arm_after(2 * proto_->config().msl);
      }
      break;
    case State::closing:
      if (fin_acked) enter_time_wait();
      break;
    case State::last_ack:
      if (fin_acked) {
        state_ = State::closed;
        release();
        return false;
      }
      break;
    default:
      break;
  }
  return true;
}

bool TcpConnection::spurious_timeout(const Options& opts) noexcept {
  eifel_.armed = false;
  // RFC 3522 2 (3): the echo is older than the retransmission's TSval, so
  // this ACK is for an original transmission. An ACK without timestamps
  // proves nothing.
  return opts.timestamps && static_cast<std::int32_t>(opts.timestamps->tsecr - eifel_.retransmit_ts) < 0;
}

void TcpConnection::undo_timeout(const Options& opts) noexcept {
  ++stats_.spurious_rtos;
  ++proto_->stats().spurious_rtos;
  // Step 5: resume with the next unsent segment; the originals are in the
  // network (or delivered) and need no second copy.
  snd_nxt_ = snd_max_;
  if (rack_ != nullptr) rack_->rack.undo_rto();
  recover_ = eifel_.recover;
  recover_set_ = eifel_.recover_set;
  retries_ = 0;
  // Step 6: the RTT this ACK measured (its echo was sent that long ago) is
  // the path's now; RTO follows it instead of its doubling.
  // An echo a minute old or more is no sample (as for the receive side's).
  const std::uint32_t ms = tsval_now() - opts.timestamps->tsecr;
  Duration rtt{0};
  if (ms < 60'000) rtt = ms == 0 ? Duration(std::chrono::microseconds(500)) : Duration(std::chrono::milliseconds(ms));
  rto_.on_spurious_timeout(rtt);
}

void TcpConnection::new_ack(const Header& h, const Options& opts, std::uint32_t acked) {
  (void)opts;
  const Time now = proto_->timers().clock().now();
  std::uint32_t data = acked;
  if (snd_una_ == iss_) --data;                        // our SYN
  if (fin_sent_ && h.ack == snd_max_ && data > 0) --data;  // our FIN
  data = std::min<std::uint32_t>(data, static_cast<std::uint32_t>(sndbuf_.size()));
  sndbuf_.consume(data);
  stats_.bytes_acked += data;
  const std::uint32_t flight_before = static_cast<std::uint32_t>(snd_max_ - snd_una_);

  // RTT (RFC 6298 3 with Karn's rule: never from a retransmitted segment).
  std::optional<Duration> rtt;
  if (rtt_timing_ && h.ack >= rtt_seq_) {
    rtt = now - rtt_start_;
    rto_.on_rtt_sample(*rtt, flight_before, payload_mss());
    rtt_timing_ = false;
  }
  snd_una_ = h.ack;
  if (snd_nxt_ < snd_una_) snd_nxt_ = snd_una_;
  if (retx_out_ && snd_una_ >= retx_high_) retx_out_ = false;  // every retransmission acknowledged
  retries_ = 0;
  dupacks_ = 0;
  soft_error_ = Errc::ok;  // the path works: an earlier ICMP soft error is stale
  const std::uint32_t in_flight = static_cast<std::uint32_t>(snd_max_ - snd_una_);

  if (in_recovery_) {
    if (h.ack >= recover_) {
      in_recovery_ = false;
      if (rack_ != nullptr) {
        cc_->end_reduction(now);  // PRR (RFC 6937 3): cwnd = ssthresh
        rack_->rack.recovery_ended();
      } else {
        cc_->exit_recovery(now, in_flight);
      }
      if (sack_ok_) sb_.exit_recovery();
    } else if (!sack_ok_) {
      // RFC 6582 3.2 step 5: a partial ACK; send the next hole at once.
      cc_->on_partial_ack(data);
      (void)send_segment(snd_una_, std::min<std::uint32_t>(payload_mss(), static_cast<std::uint32_t>(sndbuf_.size())),
                         kAck, true);
    }
  } else {
    AckEvent ev;
    ev.acked = data;
    ev.smss = payload_mss();
    ev.now = now;
    ev.rtt = rtt;
    ev.in_flight = flight_before;
    cc_->on_ack(ev);
    autotune_sndbuf();
  }
  // RFC 6298 5.2 / 5.3: stop the timer when all is acknowledged, else restart it.
  if (snd_una_ == snd_max_) {
    rtx_timer_.cancel();
  } else {
    arm_rto(now);
  }
}

void TcpConnection::duplicate_ack(const Header&) {
  ++dupacks_;
  ++stats_.dup_acks_in;
  if (rack_ != nullptr) return;  // RACK finds the losses (rack_after_ack)
  const Time now = proto_->timers().clock().now();
  const std::uint32_t flight = static_cast<std::uint32_t>(snd_max_ - snd_una_);
  if (in_recovery_) {
    if (!sack_ok_) cc_->inflate(1);  // RFC 6582 / 5681 3.2 step 4
    return;
  }
  // Fast retransmit: three duplicates, or (RFC 6675 5) SACK says the first
  // segment is lost. RFC 6582 4.1: not again for losses of the same window.
  bool lost = dupacks_ >= 3 || (sack_ok_ && sb_.is_lost(snd_una_));
  // RFC 6582 3.2 step 2: "recover" is the highest byte sent (SND.MAX - 1):
  // an ACK at SND.UNA == recover_ covers it.
  if (!lost || (recover_set_ && snd_una_ < recover_)) return;
  in_recovery_ = true;
  recover_ = snd_max_;
  recover_set_ = true;
  ++stats_.fast_retransmits;
  ++proto_->stats().fast_retransmits;
  cc_->enter_recovery(now, flight);
  rtt_timing_ = false;
  if (sack_ok_) {
    ++proto_->stats().sack_recoveries;
    SackScoreboard::Segment seg = sb_.enter_recovery(snd_max_);
    if (seg.kind != SackScoreboard::SegKind::none) (void)send_segment(seg.start, seg.len, kAck, true);
  } else {
    cc_->inflate(3);  // RFC 5681 3.2 step 3
    (void)send_segment(snd_una_, std::min<std::uint32_t>(payload_mss(), static_cast<std::uint32_t>(sndbuf_.size())),
                       kAck, true);
  }
  arm_rto(now);
}

// RFC 9293 3.10.7.4 fifth, the send window update.
void TcpConnection::update_window(const Header& h) {
  if (snd_wl1_ < h.seq || (snd_wl1_ == h.seq && snd_wl2_ <= h.ack)) {
    snd_wnd_ = std::uint32_t{h.window} << snd_wscale_;
    max_snd_wnd_ = std::max(max_snd_wnd_, snd_wnd_);
    snd_wl1_ = h.seq;
    snd_wl2_ = h.ack;
    if (snd_wnd_ > 0) persist_timer_.cancel();
  }
}

void TcpConnection::process_data(const Header& h, Msg payload) {
  SeqNum seq = h.seq;
  // Where the FIN sits, if there is one: after the segment's last byte.
  std::optional<SeqNum> fin_at;
  if (h.has(kFin)) fin_at = h.seq + static_cast<std::uint32_t>(payload.size());
  // Trim what we already have (the front) and what is past the window.
  if (seq < rcv_nxt_) {
    std::uint32_t dup = static_cast<std::uint32_t>(rcv_nxt_ - seq);
    if (dup >= payload.size()) {
      if (!payload.empty()) ++proto_->stats().dup_segments;
      if (!payload.empty() && sack_ok_) dsack_ = SackBlock{seq, seq + static_cast<std::uint32_t>(payload.size())};
      payload = Msg();
    } else {
      (void)payload.trim_front(dup);
    }
    seq = rcv_nxt_;
  }
  const std::uint32_t wnd = static_cast<std::uint32_t>(rcv_adv_ - rcv_nxt_);
  const std::uint32_t room = static_cast<std::uint32_t>(rcv_adv_ - seq);
  // RFC 9293 3.10.7.4: bytes past the window are not acceptable and earn an
  // ACK at once (a zero-window probe carrying data must be answered).
  const bool past_window = payload.size() > room;
  if (past_window) {
    (void)payload.truncate(room);
    fin_at.reset();  // the FIN lies past the window too
  }
  if (fin_at && *fin_at < rcv_nxt_) fin_at.reset();  // a FIN we already took
  if (payload.empty() && !fin_at) {
    if (past_window) send_ack_now();
    return;
  }

  if (seq == rcv_nxt_) {
    const std::size_t n = payload.size();
    if (n > 0) {
      rcv_nxt_ += static_cast<std::uint32_t>(n);
      deliver(std::move(payload));
    }
    bool filled = false;
    if (!reasm_.empty()) {
      Msg more = reasm_.take_in_order(rcv_nxt_);
      if (!more.empty()) {
        filled = true;
        deliver(std::move(more));
      }
    }
    const bool had_fin = fin_received_;
    if (fin_at && *fin_at == rcv_nxt_) {
      process_fin();
    } else if (fin_at) {
      fin_seq_pending_ = fin_at;
    } else if (fin_seq_pending_ && *fin_seq_pending_ == rcv_nxt_) {
      fin_seq_pending_.reset();
      process_fin();
    }
    // A FIN taken here was ACKed at once, and may have moved us to TIME-WAIT,
    // which releases the connection; an upcall may have aborted it too.
    if (fin_received_ != had_fin || proto_ == nullptr) return;
    // RFC 5681 4.2: ACK at once when a hole is filled (or one is left), in
    // quick-ACK mode, or past the window; else every second full-sized
    // segment, or after the delayed-ACK timeout.
    if (filled || !reasm_.empty() || past_window || (n > 0 && quickack(n / payload_mss()))) {
      send_ack_now();
    } else if (n > 0) {
      // A coalesced segment, or one large frame from an xk peer, counts as
      // the full segments it holds.
      schedule_ack(static_cast<std::uint32_t>(n / payload_mss()));
    }
    return;
  }
  // Out of order: keep it, and ACK at once so the sender learns of the hole
  // (RFC 5681 4.2, RFC 2018 4).
  ++stats_.ooo_segments;
  ++proto_->stats().ooo_segments;
  if (!payload.empty()) {
    Reassembly::InsertResult r = reasm_.insert(seq, std::move(payload), rcv_nxt_, wnd);
    if (r.dsack && sack_ok_) dsack_ = r.dsack;
    if (r.dsack) ++proto_->stats().dup_segments;
    if (r.no_room != 0) proto_->stats().ooo_dropped.inc(r.no_room);
  }
  if (fin_at) fin_seq_pending_ = fin_at;
  send_ack_now();
}

bool TcpConnection::quickack(std::size_t full) {
  const Time now = last_recv_;  // this segment's arrival
  // Idle longer than an RTO: the peer's congestion window may have been
  // reset (RFC 5681 4.1), so its slow start must not wait for our ACKs.
  if (last_data_in_ != Time{} && now - last_data_in_ > rto_.rto()) quickacks_ = proto_->config().quickacks;
  last_data_in_ = now;
  if (quickacks_ == 0) return false;
  const auto used = static_cast<unsigned>(std::clamp<std::size_t>(full, 1, quickacks_));
  quickacks_ -= used;
  return true;
}

// In-order data goes to the protocol above, or waits for the application;
// after the application closed, nobody reads it: acknowledged and dropped.
void TcpConnection::deliver(Msg data) {
  stats_.bytes_received += data.size();
  if (upper() != nullptr) {
    (void)upper()->demux(*this, std::move(data));
  } else if (!user_closed_) {
    rcvbuf_.append(std::move(data));
  }
}

// Eighth check: FIN (RFC 9293 3.10.7.4).
void TcpConnection::process_fin() {
  if (fin_received_) return;
  fin_received_ = true;
  rcv_nxt_ += 1;
  ack_pending_ = true;
  switch (state_) {
    case State::syn_received:
    case State::established:
      enter_state(State::close_wait);
      break;
    case State::fin_wait_1:
      if (fin_sent_ && snd_una_ == snd_max_) {
        send_ack_now();
        enter_time_wait();
        return;
      }
      enter_state(State::closing);
      break;
    case State::fin_wait_2:
      send_ack_now();
      enter_time_wait();
      return;
    default:
      break;
  }
  send_ack_now();
}

}  // namespace xk::tcp

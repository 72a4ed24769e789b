// What a connection sends and when: SYNs, data within the windows (RFC 5681,
// RFC 1122 4.2.3.4 Nagle and sender SWS avoidance, cork), loss recovery
// (RFC 6675 with SACK, RFC 6582 without), ACKs (delayed per RFC 5681 4.2,
// receiver SWS avoidance RFC 1122 4.2.3.3) and the timers: retransmission
// (RFC 6298), persist (RFC 9293 3.8.6.1), keepalive (RFC 1122 4.2.3.6).

#include <algorithm>
#include <array>
#include <cstring>

#include "xk/protocols/tcp.hpp"
#include "tcb.hpp"

namespace xk::tcp {

namespace {
// The most payload one segment for the port to cut may carry: one IPv4
// datagram (65535 bytes) less its header and the largest TCP header.
constexpr std::size_t kGsoMaxPayload = 65535 - 20 - 60;
}  // namespace

std::uint32_t TcpConnection::tsval_now() const noexcept {
  // RFC 7323 5.4: a clock of 1 ms ticks (between 1 ms and 1 s per tick).
  return proto_ != nullptr ? proto_->tsval() : 0;
}

// The payload a full segment carries: the MSS less the options every segment
// has (RFC 6691: options come out of the MSS).
std::uint32_t TcpConnection::payload_mss() const noexcept {
  std::uint32_t m = mss_;
  if (ts_ok_) m -= 12;  // NOP NOP TS
  return std::max<std::uint32_t>(m, 1);
}

std::uint32_t TcpConnection::rcv_space() const noexcept {
  std::size_t used = rcvbuf_.size() + reasm_.queued_bytes();
  return used >= rcvbuf_limit_ ? 0u : static_cast<std::uint32_t>(std::min<std::size_t>(rcvbuf_limit_ - used, 1u << 30));
}

// The window field of the next segment, moving RCV.ADV forward only by
// worthwhile steps (RFC 1122 4.2.3.3) and never backwards (RFC 9293 3.8.6.2.2).
std::uint32_t TcpConnection::advertised_window() {
  const std::uint32_t space = rcv_space();
  const SeqNum edge = rcv_nxt_ + space;
  const std::uint32_t step = std::min<std::uint32_t>(static_cast<std::uint32_t>(rcvbuf_limit_ / 2), mss_);
  if (edge > rcv_adv_ && (static_cast<std::uint32_t>(edge - rcv_adv_) >= step || rcv_adv_ <= rcv_nxt_)) {
    rcv_adv_ = edge;
  }
  if (rcv_adv_ < rcv_nxt_) rcv_adv_ = rcv_nxt_;
  std::uint32_t wnd = static_cast<std::uint32_t>(rcv_adv_ - rcv_nxt_);
  // Round up to the scale's unit, so the edge we advertise is never left of RCV.ADV.
  const std::uint32_t unit = 1u << rcv_wscale_;
  std::uint32_t field = static_cast<std::uint32_t>((std::uint64_t{wnd} + unit - 1) >> rcv_wscale_);
  field = std::min<std::uint32_t>(field, 65535);
  rcv_adv_ = rcv_nxt_ + (field << rcv_wscale_);
  return field;
}

// After the application read: if the window can open by a worthwhile step,
// tell the peer now instead of waiting for its next segment.
void TcpConnection::window_opened() {
  if (state_ != State::established && state_ != State::fin_wait_1 && state_ != State::fin_wait_2) return;
  // The field can say at most 65535 << RCV.WIND.SHIFT (RFC 7323 2.3): room
  // beyond that is no news to the peer.
  const SeqNum edge = rcv_nxt_ + std::min<std::uint32_t>(rcv_space(), 65535u << rcv_wscale_);
  if (edge <= rcv_adv_) return;
  const std::uint32_t grow = static_cast<std::uint32_t>(edge - rcv_adv_);
  // RFC 1122 4.2.3.3: at least min(half the buffer, one MSS); twice the MSS
  // keeps window updates from doubling the ACK rate.
  if (grow >= std::min<std::uint32_t>(static_cast<std::uint32_t>(rcvbuf_limit_ / 2), 2u * mss_)) {
    send_ack_now();
    return;
  }
  // A window that had shrunk to half the buffer or less and at least
  // doubles with this read is news at once too (as Linux's
  // tcp_cleanup_rbuf): the peer may be waiting on it.
  const auto now_wnd = static_cast<std::uint32_t>(std::max<std::int32_t>(0, rcv_adv_ - rcv_nxt_));
  const auto new_wnd = static_cast<std::uint32_t>(edge - rcv_nxt_);
  if (2 * std::uint64_t{now_wnd} <= rcvbuf_limit_ && new_wnd >= mss_ && new_wnd >= 2 * std::uint64_t{now_wnd}) {
    send_ack_now();
  }
}

std::size_t TcpConnection::unsent_bytes() const noexcept {
  std::uint32_t off = seq_span(snd_una_, snd_nxt_);
  if (snd_una_ == iss_ && snd_nxt_ > iss_) --off;  // the SYN is not in the buffer
  return off >= sndbuf_.size() ? 0 : sndbuf_.size() - off;
}

void TcpConnection::start_rtt_timing(SeqNum end, Time now) {
  rtt_timing_ = true;
  rtt_seq_ = end;
  rtt_start_ = now;
}

void TcpConnection::arm_rto(Time now) noexcept {
  rtx_kind_ = RtxTimer::rto;
  rtx_timer_.arm(now + rto_.rto());
  if (rack_) rack_->rto_due = rtx_timer_.deadline();
}

void TcpConnection::arm_rto() noexcept { arm_rto(proto_->timers().clock().now()); }

void TcpConnection::arm_rtx() noexcept {
  if (!rtx_timer_.armed()) arm_rto();
}

// One segment: [seq, seq + len) of the send buffer (or none), with `flags`.
Status TcpConnection::send_segment(SeqNum seq, std::uint32_t len, std::uint8_t flags, bool retransmit) {
  if (proto_ == nullptr || !ip_) return Errc::closed;
  Msg payload;
  if (len > 0) {
    std::size_t off = seq_span(snd_una_, seq);
    Result<Msg> s = sndbuf_.slice(off, len);
    if (!s) return s.status();
    payload = std::move(*s);
  }
  Options o;
  if (ts_ok_) o.timestamps = Timestamps{tsval_now(), ts_recent_};
  if (sack_ok_ && (dsack_ || !reasm_.empty())) {
    std::array<SackBlock, Options::kMaxSackBlocks> blocks{};
    std::size_t n = reasm_.sack_blocks(blocks, dsack_);
    for (std::size_t i = 0; i < n; ++i) (void)o.add_sack(blocks[i]);
    dsack_.reset();
    // RFC 6691: options come out of the MSS. Only the timestamps are set
    // aside in payload_mss(), so a full segment carries fewer blocks (or
    // none) rather than grow past the path MTU, where DF would have it
    // refused (RFC 1191).
    while (o.sack_count > 0 && std::min(len, payload_mss()) + options_size(o) > mss_) --o.sack_count;
    stats_.sack_blocks_out += o.sack_count;
  }
  // RFC 3168 6.1: new data is ECN-capable (ECT(0)); retransmissions, pure
  // ACKs and probes are not. ECE in every ACK while a CE mark waits for the
  // peer's CWR; our CWR on the first new data after a reduction.
  std::uint8_t tos = tos_;
  if (ecn_ok_) {
    if ((flags & kAck) && ece_out_) flags |= kEce;
    if (len > 0 && !retransmit) {
      tos |= kEcnEct0;
      if (cwr_out_) {
        flags |= kCwr;
        cwr_out_ = false;
      }
    }
  }
  payload.offload().tos = tos;
  payload.offload().hop_limit = hop_limit_;
  Header h;
  auto room = push_header(payload, &o, h);
  if (!room) return room.status();
  h.src_port = tuple_.local.port;
  h.dst_port = tuple_.remote.port;
  h.seq = seq;
  h.flags = flags;
  if (flags & kAck) {
    h.ack = rcv_nxt_;
    last_ack_sent_ = rcv_nxt_;
  }
  h.window = static_cast<std::uint16_t>(advertised_window());
  // RFC 9293 3.8.5: every segment before SND.UP says where the urgent data
  // ends, at most 65535 bytes on (RFC 6093 4); the mark is spent once
  // acknowledged.
  if (urg_out_) {
    if (snd_up_ <= snd_una_) {
      urg_out_ = false;
    } else if (snd_up_ > seq) {
      h.flags |= kUrg;
      h.urgent = static_cast<std::uint16_t>(std::min<std::uint32_t>(snd_up_ - seq, 65535));
    }
  }
  h.write(*room);

  // More than a segment: the port cuts it into segments of payload_mss()
  // bytes (segmentation offload), each with these options.
  std::uint64_t pieces = 1;
  if (len > payload_mss()) {
    payload.offload().flags |= Offload::tx_tcp_seg;
    payload.offload().seg_size = static_cast<std::uint16_t>(payload_mss());
    pieces = (len + payload_mss() - 1) / payload_mss();
  }

  ack_pending_ = false;
  unacked_segs_ = 0;
  delack_timer_.cancel();
  stats_.segs_out += pieces;
  stats_.bytes_sent += len;
  // One clock read for what follows; a bare ACK needs none.
  const SeqNum end = seq + len + ((flags & kSyn) ? 1u : 0u) + ((flags & kFin) ? 1u : 0u);
  const Time now = end != seq ? proto_->timers().clock().now() : Time{};
  if (retransmit) {
    stats_.retransmits += pieces;
    proto_->stats().retransmits.inc(pieces);
    // The TSval of the first retransmission still unacknowledged (Eifel's
    // RetransmitTS, should a timeout follow).
    if (o.timestamps && !retx_out_) {
      retx_out_ = true;
      retx_first_ts_ = o.timestamps->tsval;
      retx_high_ = end;
    } else if (retx_out_ && end > retx_high_) {
      retx_high_ = end;
    }
    // Karn: a retransmission inside the timed range spoils the measurement.
    if (rtt_timing_ && rtt_seq_ > seq) rtt_timing_ = false;
  } else if (len > 0 && !rtt_timing_) {
    start_rtt_timing(seq + len, now);
  }
  if (!(flags & kSyn) && end != seq) {
    // RACK logs every transmission of data (or of the FIN) with its time.
    if (rack_ == nullptr && sack_ok_ && proto_->config().recovery == TcpConfig::Recovery::rack) {
      rack_ = std::make_unique<RackTlp>();
      if (rto_.has_sample()) rack_->rack.rtt_sample(rto_.srtt(), now);
    }
    if (rack_ != nullptr) {
      rack_->rack.on_send(seq, end, now);
      if (in_recovery_) rack_->prr.on_sent(len + ((flags & kFin) ? 1u : 0u));
    }
  }
  if (end > snd_max_) snd_max_ = end;
  if (end != seq && !rtx_timer_.armed()) arm_rto(now);
  return host().transmit(*ip_, tuple_.local.addr, tuple_.remote.addr, std::move(payload), checksum_mode());
}

// Our SYN (SYN-SENT) or SYN-ACK (SYN-RECEIVED), with the options we offer.
void TcpConnection::send_syn() {
  if (proto_ == nullptr) return;
  const TcpConfig& cfg = proto_->config();
  const bool synack = state_ == State::syn_received;
  Options o;
  o.mss = host().path_mss(*ip_);
  if (tuning_ && tuning_->max_segment) o.mss = std::min(*o.mss, *tuning_->max_segment);  // TCP_MAXSEG
  // RFC 7323 2.2 / RFC 2018 2: a SYN-ACK offers only what the SYN did.
  if (cfg.wscale > 0 && (!synack || rcv_wscale_ > 0 || snd_wscale_ > 0)) {
    o.wscale = host().our_wscale(cfg.buf_max);
    if (!synack) rcv_wscale_ = *o.wscale;  // provisional until the SYN-ACK says
  }
  if (cfg.sack && (!synack || sack_ok_)) o.sack_permitted = true;
  if (cfg.timestamps && (!synack || ts_ok_)) o.timestamps = Timestamps{tsval_now(), synack ? ts_recent_ : 0u};
  Msg m = Msg::alloc(0);
  Header h;
  auto room = push_header(m, &o, h);
  if (!room) return;
  h.src_port = tuple_.local.port;
  h.dst_port = tuple_.remote.port;
  h.seq = iss_;
  h.flags = synack ? (kSyn | kAck) : kSyn;
  // RFC 3168 6.1.1: ask for ECN with ECE and CWR (not on a retransmitted
  // SYN: a middlebox may drop ECN-setup SYNs, 6.1.1.1); accept with ECE.
  if (synack && ecn_ok_) h.flags |= kEce;
  if (!synack && cfg.ecn == TcpConfig::Ecn::on && retries_ == 0) h.flags |= kEce | kCwr;
  m.offload().tos = tos_;
  m.offload().hop_limit = hop_limit_;
  if (synack) {
    h.ack = rcv_nxt_;
    last_ack_sent_ = rcv_nxt_;
  }
  // RFC 7323 2.2: the window of a SYN is never scaled.
  h.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(rcv_space(), 65535));
  rcv_adv_ = rcv_nxt_ + (synack ? std::uint32_t{h.window} : 0u);
  h.write(*room);
  ++stats_.segs_out;
  if (retries_ == 0) start_rtt_timing(iss_ + 1, proto_->timers().clock().now());
  snd_nxt_ = iss_ + 1;
  if (snd_max_ < snd_nxt_) snd_max_ = snd_nxt_;
  arm_rtx();
  (void)host().transmit(*ip_, tuple_.local.addr, tuple_.remote.addr, std::move(m), checksum_mode());
}

void TcpConnection::send_ack_now() {
  if (proto_ == nullptr || !ip_) return;
  if (state_ == State::syn_sent || state_ == State::closed || state_ == State::listen) return;
  // A bare ACK carries SND.NXT (RFC 9293 3.10.7.4) in the RFC's model, where
  // retransmissions come from a queue and SND.NXT never moves back. Here an
  // RTO moves snd_nxt_ back to SND.UNA to resend from there (go-back-N), so
  // the RFC's SND.NXT is snd_max_, the highest sequence number sent (BSD
  // numbers its bare ACKs the same way). The peer may hold data past SND.UNA
  // whose ACK was lost: to it a bare ACK numbered below its RCV.NXT is
  // unacceptable and dropped -- and if both ends are in that state, each
  // drops the other's ACKs and resends old data for ever (the soak test
  // found it, docs/soak.md).
  (void)send_segment(snd_max_, 0, kAck, false);
}

// A RST from this connection's 4-tuple, outside its sequence bookkeeping.
void TcpConnection::send_reset(SeqNum seq, SeqNum ack, std::uint8_t flags) {
  if (proto_ == nullptr || !ip_) return;
  TcpProtocol::Host::IpPeer* ip = host().ip_of(tuple_.remote.addr);
  if (ip == nullptr) return;
  ++proto_->stats().resets_sent;
  (void)host().send_raw(*ip, tuple_.local.port, tuple_.remote.port, seq, ack, flags, 0, nullptr, checksum_mode());
}

void TcpConnection::send_rst_and_close() {
  send_reset(snd_nxt_, rcv_nxt_, kRst | kAck);
  state_ = State::closed;
  release();
}

// RFC 5681 4.2 / RFC 1122 4.2.3.2: ACK every second full segment, otherwise
// within the delayed-ACK timeout. "At once" means at the end of the input
// burst being processed: the timer armed in the past fires in the pass's
// run_expired(), after every frame the drivers took in this pass (event loop:
// input before timers). One ACK then covers all the burst's segments, as a
// GRO receiver's does, instead of one ACK for every two; the delay is the
// rest of the burst, microseconds (docs/tcp.md, "ACK per burst").
void TcpConnection::schedule_ack(std::uint32_t full_segments) {
  ack_pending_ = true;
  unacked_segs_ += full_segments;
  if (unacked_segs_ >= 2) {
    const TcpConfig& cfg = proto_->config();
    // A burst's ACK covers at most ack_burst_max bytes (GRO's 64 KB): past
    // that it goes at once, so a sender of jumbo frames is not clocked by
    // one ACK per 32 frames (288 KB at MTU 9000).
    const auto unacked = static_cast<std::uint32_t>(std::max<std::int32_t>(0, rcv_nxt_ - last_ack_sent_));
    if (cfg.ack_per_burst && (cfg.ack_burst_max == 0 || unacked < cfg.ack_burst_max)) {
      if (!delack_timer_.armed() || delack_timer_.deadline() != Time{}) delack_timer_.arm(Time{});
    } else {
      send_ack_now();
    }
    return;
  }
  if (!delack_timer_.armed()) delack_timer_.arm_after(proto_->config().delack);
}

void TcpConnection::output() {
  if (proto_ == nullptr) return;
  switch (state_) {
    case State::established:
    case State::close_wait:
    case State::fin_wait_1:
    case State::last_ack:
    case State::closing:
      break;
    default:
      return;  // SYNs go out from send_syn() and the retransmission timer
  }
  if (sack_ok_ && proto_->config().recovery == TcpConfig::Recovery::rack) {
    // RACK: what it found lost goes first (in recovery and after a
    // timeout alike), then new data as the window allows. (The first data
    // sent makes rack_.)
    if (rack_ != nullptr && rack_->rack.lost_bytes() > 0) (void)send_recovery_rack();
    if (send_new_data() && !in_recovery_ && rack_ != nullptr) (void)schedule_probe(proto_->timers().clock().now());
    return;
  }
  if (in_recovery_ && sack_ok_) (void)send_recovery();
  (void)send_new_data();
}

// RFC 6675 section 5 steps (C): while pipe allows, NextSeg decides.
bool TcpConnection::send_recovery() {
  bool sent = false;
  for (int guard = 0; guard < 1024; ++guard) {
    const std::uint32_t pipe = sb_.pipe(snd_max_);
    if (cc_->cwnd() < pipe + payload_mss()) break;
    bool new_ok = unsent_bytes() > 0 && seq_span(snd_una_, snd_max_) < snd_wnd_;
    SackScoreboard::Segment seg = sb_.next_seg(snd_max_, new_ok);
    if (seg.kind == SackScoreboard::SegKind::none) break;
    if (seg.kind == SackScoreboard::SegKind::new_data) {
      // Rule 2: new data from SND.MAX.
      if (snd_nxt_ != snd_max_) snd_nxt_ = snd_max_;
      std::uint32_t len = std::min<std::uint32_t>({payload_mss(), static_cast<std::uint32_t>(unsent_bytes()),
                                                   snd_wnd_ - std::min(snd_wnd_, seq_span(snd_una_, snd_max_))});
      if (len == 0) break;
      if (!send_segment(snd_nxt_, len, kAck, false)) break;
      snd_nxt_ += len;
      SackScoreboard::Segment done{SackScoreboard::SegKind::new_data, snd_nxt_ - len, len};
      sb_.on_sent(done);
    } else {
      std::uint32_t len = std::min<std::uint32_t>(seg.len, payload_mss());
      if (!send_segment(seg.start, len, kAck, true)) break;
      seg.len = len;
      sb_.on_sent(seg);
    }
    sent = true;
  }
  return sent;
}

bool TcpConnection::send_new_data() {
  bool sent = false;
  const std::uint32_t smss = payload_mss();
  for (;;) {
    const std::size_t avail = unsent_bytes();
    const SeqNum fin_seq = snd_una_ + static_cast<std::uint32_t>(sndbuf_.size()) + (snd_una_ == iss_ ? 1u : 0u);
    if (avail == 0) {
      // Only the FIN is left (RFC 9293 3.10.4): it needs no window.
      if (write_shut_ && snd_nxt_ == fin_seq && !(fin_sent_ && snd_max_ > fin_seq && snd_nxt_ > fin_seq)) {
        if (send_segment(snd_nxt_, 0, kAck | kFin, snd_max_ > fin_seq)) {
          fin_sent_ = true;
          snd_nxt_ = fin_seq + 1;
          sent = true;
        }
      }
      break;
    }
    std::uint32_t in_flight = seq_span(snd_una_, snd_nxt_);
    std::uint32_t cwnd = cc_->cwnd();
    if (rack_ != nullptr) {
      // RACK: bytes SACKed or found lost have left the network (RFC 6675's
      // pipe); the sender may fill the window again as SACKs arrive.
      if (snd_nxt_ == snd_max_) in_flight = rack_->rack.pipe();
      // A tail loss probe sends one segment whatever cwnd says (RFC 8985 7.3).
      if (probe_one_) cwnd = std::max(cwnd, in_flight + smss);
    } else if (!in_recovery_ && dupacks_ > 0 && dupacks_ < 3) {
      // RFC 3042 limited transmit: one more segment for each of the first
      // two duplicate ACKs.
      cwnd += dupacks_ * smss;
    }
    const std::uint32_t wnd = std::min(cwnd, snd_wnd_);
    if (in_flight >= wnd) {
      // A zero window with nothing in flight: probe it (persist).
      if (snd_wnd_ == 0 && snd_una_ == snd_max_ && !persist_timer_.armed()) arm_persist();
      break;
    }
    const std::uint32_t usable = wnd - in_flight;
    std::uint32_t len = static_cast<std::uint32_t>(std::min<std::size_t>({avail, smss, usable}));
    // An urgent pointer ahead: one segment at a time, each with its own
    // pointer (the port's cut would repeat the first segment's).
    const bool urgent_ahead = urg_out_ && snd_up_ > snd_nxt_;
    if (len == smss && host().segmentation_offload(tuple_.remote.addr) && !probe_one_ && !urgent_ahead) {
      // Segmentation offload: every full segment the windows allow goes
      // down as one, up to what one IPv4 datagram holds; the port cuts it.
      const std::size_t full = std::min<std::size_t>(avail, usable) / smss;
      len = static_cast<std::uint32_t>(std::min<std::size_t>(full, kGsoMaxPayload / smss) * smss);
    }
    const bool all = len == avail;
    if (len < smss) {
      // Corked: hold the short tail -- unless the FIN follows it (shutdown or
      // close): nothing will join it any more (as Linux pushes at close) --
      // or urgent data waits.
      if (cork_ && !write_shut_ && !urgent_ahead) break;
      // RFC 1122 4.2.3.4: send a short segment only when it is all we have
      // (and Nagle allows: no short segment unacknowledged -- Minshall's
      // form of RFC 896, as Linux; or TCP_NODELAY), or when it is at least
      // half the largest window the peer offered. Urgent data goes without
      // waiting (as Linux's urgent mode).
      const bool short_in_flight = snd_sml_ > snd_una_ && snd_sml_ <= snd_max_;
      bool nagle_ok = all && (nodelay_ || snd_nxt_ == snd_una_ || snd_max_ == snd_una_ || !short_in_flight ||
                              urgent_ahead);
      bool sws_ok = (len >= max_snd_wnd_ / 2 && max_snd_wnd_ > 0) || sws_override_;
      if (!nagle_ok && !sws_ok) {
        // RFC 1122 4.2.3.4 (4): a window too small for the data, with nothing
        // in flight to bring an ACK: the persist timer is the override timeout.
        if (snd_una_ == snd_max_ && !persist_timer_.armed()) arm_persist();
        break;
      }
    }
    std::uint8_t flags = kAck;
    const bool last = all && static_cast<std::size_t>(seq_span(snd_una_, snd_nxt_)) + len >= sndbuf_.size();
    // PSH on the segment with a write's last byte, and on the one that
    // empties the buffer. Marks at or before SND.NXT are spent.
    bool pushed = last;
    const SeqNum end = snd_nxt_ + len;
    std::size_t spent = 0;
    while (spent < push_marks_.size() && push_marks_[spent] <= end) {
      if (push_marks_[spent] > snd_nxt_) pushed = true;
      ++spent;
    }
    if (spent != 0) push_marks_.erase(push_marks_.begin(), push_marks_.begin() + static_cast<std::ptrdiff_t>(spent));
    if (pushed) flags |= kPsh;
    if (last && write_shut_) flags |= kFin;
    const bool rexmit = snd_nxt_ < snd_max_;
    if (!send_segment(snd_nxt_, len, flags, rexmit)) break;
    snd_nxt_ += len;
    if (len < smss && !rexmit) snd_sml_ = snd_nxt_;
    if (flags & kFin) {
      fin_sent_ = true;
      snd_nxt_ += 1;
    }
    if (snd_max_ < snd_nxt_) snd_max_ = snd_nxt_;
    sent = true;
    if (probe_one_) break;
  }
  return sent;
}

// ---- timers --------------------------------------------------------------------

// RFC 6298 5.4 - 5.7: retransmit the earliest unacknowledged segment, back
// off, and (RFC 5681 3.1) restart from one segment.
void TcpConnection::on_rtx_timeout() {
  Ref<TcpConnection> keep(this);
  if (proto_ == nullptr) return;
  if (rtx_kind_ != RtxTimer::rto) {
    const RtxTimer kind = std::exchange(rtx_kind_, RtxTimer::rto);
    if (kind == RtxTimer::probe) {
      on_probe_timeout();
    } else {
      on_reorder_timeout();
    }
    return;
  }
  const Time now = proto_->timers().clock().now();
  ++retries_;
  if (state_ == State::syn_sent || state_ == State::syn_received) {
    if (retries_ > proto_->config().syn_retries) {
      ++proto_->stats().timeouts;
      if (state_ == State::syn_received && listener_ != nullptr) {
        release();
        return;
      }
      fail(timeout_error());
      return;
    }
    rto_.backoff();
    rtt_timing_ = false;
    ++stats_.rto_expiries;
    ++proto_->stats().rto_expiries;
    send_syn();
    return;
  }
  if (snd_una_ == snd_max_) return;  // nothing outstanding
  // About when the data now repeated was first sent: one RTO before its
  // first expiry.
  if (retries_ == 1) rtx_since_ = now - rto_.rto();
  // TCP_USER_TIMEOUT, when set, decides instead of the retry count.
  const Duration user = user_timeout();
  if (user > Duration{0} ? now - rtx_since_ >= user : retries_ > proto_->config().max_retries) {
    ++proto_->stats().timeouts;
    fail(timeout_error());
    return;
  }
  if (retries_ == 1) {
    // RFC 3522 2 (1): the first timeout arms the check, with the TSval of
    // the first retransmission of the data still out -- its own (the clock
    // reads no later than when it leaves), or an earlier one's (a probe's,
    // a recovery's): an ACK echoing a later TSval may be for that one, and
    // then what is lost is not known.
    eifel_ = EifelCheck{};
    if (ts_ok_) {
      const auto flight = static_cast<std::uint32_t>(snd_max_ - snd_una_);
      eifel_ = EifelCheck{true, retx_out_ ? retx_first_ts_ : tsval_now(), std::max(flight, cc_->ssthresh()),
                          recover_, recover_set_};
    }
  }
  ++stats_.rto_expiries;
  ++proto_->stats().rto_expiries;
  proto_->stats().rto_wait_us.inc(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(rto_.rto()).count()));
  rto_.backoff();
  cc_->on_rto(now, seq_span(snd_una_, snd_max_));
  const bool was_recovering = in_recovery_;
  in_recovery_ = false;
  dupacks_ = 0;
  recover_ = snd_max_;  // RFC 6582 4.1: no fast retransmit for what was already sent
  recover_set_ = true;
  if (sack_ok_) {
    sb_.exit_recovery();
    sb_.clear();  // RFC 6675 5.1 allows forgetting SACK information after a timeout
  }
  rtt_timing_ = false;
  if (rack_ != nullptr && !rack_->rack.empty()) {
    // RACK (RFC 8985 6.3): everything outstanding is presumed lost -- SACKed
    // data too, as the scoreboard was forgotten (the receiver may have
    // reneged) -- and goes again in order as the window (1 SMSS now) grows.
    if (was_recovering) rack_->rack.recovery_ended();
    rack_->rack.on_rto();
    rack_->tlp.reset();
    arm_rto();
    (void)send_recovery_rack();
    return;
  }
  snd_nxt_ = snd_una_;  // go back: resend from the first unacknowledged byte
  arm_rto();
  std::uint32_t len = std::min<std::uint32_t>(payload_mss(), static_cast<std::uint32_t>(unsent_bytes()));
  if (len > 0) {
    std::uint8_t flags = kAck;
    if (len == unsent_bytes() && write_shut_) {
      flags |= kFin;
    }
    if (send_segment(snd_nxt_, len, flags, true)) {
      snd_nxt_ += len + ((flags & kFin) ? 1u : 0u);
    }
  } else if (fin_sent_) {
    // Only the FIN is outstanding: send it again.
    if (send_segment(snd_nxt_, 0, kAck | kFin, true)) snd_nxt_ += 1;
  }
}

void TcpConnection::on_delack_timeout() {
  Ref<TcpConnection> keep(this);
  if (proto_ == nullptr || !ack_pending_) return;
  if (unacked_segs_ >= 2) {
    ++proto_->stats().burst_acks;
  } else {
    ++proto_->stats().delayed_acks;
  }
  send_ack_now();
}

void TcpConnection::arm_persist() {
  persist_interval_ = rto_.rto();
  persist_timer_.arm_after(persist_interval_);
}

// RFC 9293 3.8.6.1: keep asking a zero window whether it opened. The probe is
// a segment the receiver must answer (SEQ = SND.UNA - 1, no data), so it never
// enters the sequence space we track.
void TcpConnection::on_persist_timeout() {
  Ref<TcpConnection> keep(this);
  if (proto_ == nullptr) return;
  if (snd_wnd_ != 0 || unsent_bytes() == 0) {
    // The window opened, but maybe not enough for a full segment: send
    // what fits now (RFC 1122 4.2.3.4 (4), the override timeout).
    sws_override_ = true;
    output();
    sws_override_ = false;
    return;
  }
  ++proto_->stats().window_probes;
  (void)send_segment(snd_una_ - 1, 0, kAck, false);
  // RFC 1122 4.2.2.17: the interval between probes grows exponentially.
  persist_interval_ = std::min(2 * persist_interval_, proto_->config().rto_max);
  persist_timer_.arm_after(persist_interval_);
}

// RFC 1122 4.2.3.6: after an idle period, probe; drop after unanswered probes.
void TcpConnection::on_keepalive_timeout() {
  Ref<TcpConnection> keep(this);
  if (proto_ == nullptr || !keepalive_) return;
  const Time now = proto_->timers().clock().now();
  if (now - last_recv_ < keepalive_idle() && keepalive_sent_ == 0) {
    keepalive_timer_.arm(last_recv_ + keepalive_idle());
    return;
  }
  // TCP_USER_TIMEOUT also bounds how long probes go unanswered (as Linux).
  const Duration user = user_timeout();
  if (user > Duration{0} ? keepalive_sent_ > 0 && now - last_recv_ >= user : keepalive_sent_ >= keepalive_probes()) {
    ++proto_->stats().timeouts;
    fail(timeout_error());
    return;
  }
  ++keepalive_sent_;
  ++proto_->stats().keepalive_probes;
  (void)send_segment(snd_una_ - 1, 0, kAck, false);
  keepalive_timer_.arm_after(keepalive_interval());
}

}  // namespace xk::tcp

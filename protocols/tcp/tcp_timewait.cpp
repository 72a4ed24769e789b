// TIME-WAIT after the application has let go (docs/tcp.md, "TIME-WAIT").
//
// A connection that reaches TIME-WAIT with no handle left is replaced by a
// small record in its own table, and the connection -- buffers, scoreboard,
// timers -- is freed. The record holds what RFC 9293 3.10.7.4 asks of a
// TIME-WAIT: acknowledge a retransmitted FIN and restart the 2 MSL, answer
// what is out of window with an ACK, honour an exact RST, challenge a SYN or
// an in-window RST (RFC 5961), drop what PAWS calls old (RFC 7323), and let a
// newer SYN open the 4-tuple again (RFC 6191, decided in demux()). A server
// that closes first keeps one TIME-WAIT per connection for a minute: as full
// connections, thousands a second of them were most of its memory traffic.

#include "xk/protocols/tcp.hpp"
#include "tcb.hpp"

namespace xk::tcp {

bool TcpProtocol::park_time_wait(TcpConnection& c) {
  if (time_waits_.size() >= config_.time_wait_max) {
    ++c_.time_wait_overflow;
    return false;
  }
  const TimeWaitRecord tw = c.time_wait_record(timers_.clock().now() + 2 * config_.msl);
  const ConnKey key = key_of(c.tuple());
  if (!time_waits_.insert(key, tw).second) return false;  // cannot be: the connection held the 4-tuple
  time_wait_queue_.emplace_back(tw.expires, key);
  if (!time_wait_timer_.armed()) time_wait_timer_.arm(tw.expires);
  return true;
}

void TcpProtocol::end_time_wait(const ConnKey& key, bool release_flow) noexcept {
  TimeWaitRecord* tw = time_waits_.find(key);
  if (tw == nullptr) return;
  if (release_flow && (tw->claimed || tw->passive) && authority_ != nullptr) {
    defer_release(key);
  }
  time_waits_.erase(key);
}

void TcpProtocol::expire_time_waits() {
  const Time now = timers_.clock().now();
  while (!time_wait_queue_.empty() && time_wait_queue_.front().first <= now) {
    const auto [when, key] = time_wait_queue_.front();
    time_wait_queue_.pop_front();
    // Restarted (queued again, later) or already ended: not this entry's turn.
    if (const TimeWaitRecord* tw = time_waits_.find(key); tw != nullptr && tw->expires == when) end_time_wait(key);
  }
  if (!time_wait_queue_.empty()) time_wait_timer_.arm(time_wait_queue_.front().first);
}

void TcpProtocol::time_wait_ack(const ConnKey& key, const TimeWaitRecord& tw, IpPeer& ip, std::optional<SackBlock> dsack) {
  Options o;
  if (tw.ts_ok) o.timestamps = Timestamps{tsval(), tw.ts_recent};
  if (tw.sack_ok && dsack) (void)o.add_sack(*dsack);  // RFC 2883
  (void)send_raw(ip, key.local.port, key.remote.port, tw.snd_nxt, tw.rcv_nxt, kAck, tw.window, &o, tw.csum);
}

// RFC 9293 3.10.7.4 in TIME-WAIT, with what TcpConnection::segment_arrives
// does there: the same checks in the same order, on the record. demux()
// has taken a SYN that reopens the 4-tuple (syn_reopens) already.
void TcpProtocol::time_wait_input(const ConnKey& key, TimeWaitRecord& tw, IpPeer& ip, const Header& h, const Options& opts,
                                  std::size_t payload) {
  const Time now = timers_.clock().now();
  // PAWS (RFC 7323 5.3) before the acceptability test.
  if (tw.ts_ok && opts.timestamps && !h.has(kRst) &&
      static_cast<std::int32_t>(opts.timestamps->tsval - tw.ts_recent) < 0) {
    if (now - tw.ts_recent_age > std::chrono::hours(24 * 24)) {
      tw.ts_recent = opts.timestamps->tsval;  // R3: TS.Recent too old to judge by
    } else {
      ++c_.drop_paws;
      time_wait_ack(key, tw, ip, std::nullopt);
      return;
    }
  }
  const std::uint32_t len = seg_len(h, payload);
  if (!segment_acceptable(h, payload, tw.rcv_nxt, tw.rcv_wnd)) {
    ++c_.drop_out_of_window;
    if (h.has(kRst)) return;
    // The peer's FIN again (it lies below RCV.NXT, so never acceptable): our
    // ACK of it was lost. Acknowledged below; the 2 MSL start again.
    if (h.has(kFin) && h.seq + len == tw.rcv_nxt) {
      tw.expires = now + 2 * config_.msl;
      time_wait_queue_.emplace_back(tw.expires, key);
    }
    std::optional<SackBlock> dsack;
    if (len > 0 && h.seq + len <= tw.rcv_nxt) dsack = SackBlock{h.seq, h.seq + static_cast<std::uint32_t>(payload)};
    // Last use of `tw`: sending may run other connections' code, which may
    // park a TIME-WAIT of its own and move the table.
    time_wait_ack(key, tw, ip, dsack);
    return;
  }
  // RFC 7323 4.3 (3): our ACKs all carried RCV.NXT (Last.ACK.sent).
  if (tw.ts_ok && opts.timestamps && h.seq <= tw.rcv_nxt && !h.has(kRst) && !h.has(kSyn) &&
      static_cast<std::int32_t>(opts.timestamps->tsval - tw.ts_recent) >= 0) {
    tw.ts_recent = opts.timestamps->tsval;
    tw.ts_recent_age = now;
  }
  if (h.has(kRst)) {
    if (h.seq == tw.rcv_nxt) {  // RFC 5961 3.2: only an exact match
      ++c_.resets_received;
      end_time_wait(key);
    } else if (challenge_ack_allowed(now)) {
      time_wait_ack(key, tw, ip, std::nullopt);
    }
    return;
  }
  if (h.has(kSyn)) {  // RFC 5961 4.2
    if (challenge_ack_allowed(now)) time_wait_ack(key, tw, ip, std::nullopt);
    return;
  }
  if (!h.has(kAck)) return;
  // RFC 5961 5.2: acceptable ACKs lie in [SND.UNA - MAX.SND.WND, SND.NXT];
  // SND.UNA is SND.NXT here, our FIN being acknowledged.
  if (h.ack > tw.snd_nxt) {
    ++c_.drop_ack_unacceptable;
    time_wait_ack(key, tw, ip, std::nullopt);
  } else if (h.ack < tw.snd_nxt - tw.max_snd_wnd) {
    ++c_.drop_ack_unacceptable;
    if (challenge_ack_allowed(now)) time_wait_ack(key, tw, ip, std::nullopt);
  }
  // Anything else: the peer sent its FIN, so nothing more is news.
}

}  // namespace xk::tcp

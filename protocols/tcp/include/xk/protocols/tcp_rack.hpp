#pragma once
// Loss detection and the sending rate in recovery for a SACK sender:
//
//  - Rack: RACK (RFC 8985 section 6), time-based loss detection. Every
//    transmission is logged with its send time; a segment is lost when a
//    segment sent later was delivered (cumulatively or selectively
//    acknowledged) at least one RTT plus a reordering window ago. It
//    finds lost retransmissions and losses at the tail of a flight, which
//    the duplicate-ACK threshold of RFC 6675 cannot.
//  - Tlp: the tail loss probe (RFC 8985 section 7): when a flight's ACKs
//    stop, one segment is sent after about two RTTs so that its ACK (with
//    SACK) lets RACK find the loss, instead of a retransmission timeout.
//  - Prr: proportional rate reduction (RFC 6937): how much may be sent on
//    each ACK during recovery, so the window falls to ssthresh smoothly
//    rather than in one step, and a burst of losses does not stall it.
//
// The SACK scoreboard (tcp_sack.hpp, RFC 6675) still records what the
// receiver holds; RACK keeps its own per-transmission marks (delivered,
// lost, retransmitted), which is what it needs and the scoreboard does not
// have: the time each byte was last sent.
//
// Pure bookkeeping on SeqNum and Time: no clock, no timer, no sending. The
// connection (tcp_output.cpp, tcp_input.cpp) calls it and acts on what it says.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "xk/clock.hpp"
#include "xk/protocols/tcp_seq.hpp"
#include "xk/protocols/tcp_wire.hpp"

namespace xk::tcp {

struct RackConfig {
  // RFC 8985 6.2 step 4: with no reordering seen, this many SACKed segments
  // start recovery at once (DupThresh, as RFC 6675's).
  std::uint32_t dup_thresh = 3;
  // Recoveries without a D-SACK after which a reordering window widened by
  // D-SACKs goes back to its base (RFC 8985 6.2 step 4: 16).
  std::uint8_t reo_wnd_persist = 16;
  // How long a minimum RTT stays the minimum (RFC 8985 leaves the filter
  // to the implementation; Linux uses five minutes).
  Duration min_rtt_window = std::chrono::minutes(5);
};

class Rack {
 public:
  // One logged transmission: [start, end) of the sequence space (a FIN
  // counts as a byte), sent at `xmit`, the `order`-th transmission of the
  // connection. RFC 8985 breaks ties between equal send times by sequence
  // number (segments of one burst); the order does that and also puts a
  // retransmission after the segments it follows when the clock did not
  // move between them (a coarse clock, or a test's manual one).
  struct Sent {
    SeqNum start;
    SeqNum end;
    Time xmit{};
    std::uint32_t order = 0;
    std::uint8_t flags = 0;
    std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(end - start); }
  };
  enum : std::uint8_t {
    kSacked = 1,         // selectively acknowledged
    kLost = 2,           // marked lost and not sent again since
    kRetransmitted = 4,  // sent more than once (its ACK may be for either copy)
  };

  // What one ACK changed.
  struct AckResult {
    // RFC 6937's DeliveredData: bytes newly acknowledged cumulatively and
    // not SACKed before, plus bytes newly SACKed.
    std::uint32_t delivered = 0;
    // A segment delivered by this ACK was sent after every one delivered
    // before (RFC 8985's RACK.xmit_ts moved): losses may be found now.
    bool advanced = false;
  };

  explicit Rack(const RackConfig& cfg = {}) noexcept : cfg_(cfg) {}

  // [start, end) left at `now`. Beyond the log's end it is new data and is
  // appended; inside, it is a retransmission of logged bytes: they get the
  // new time, the retransmitted mark, and lose the lost mark. `start` must
  // not lie beyond the log's end (the log has no gaps).
  void on_send(SeqNum start, SeqNum end, Time now);

  // An ACK (RFC 8985 6.2 steps 1-3): SND.UNA, its SACK blocks (without a
  // D-SACK; blocks outside the log are clipped or ignored), whether it
  // carried a D-SACK, its timestamp echo if any (in the units of
  // TcpProtocol::tsval(), milliseconds of the clock), and SND.NXT for the
  // D-SACK round of step 4.
  AckResult on_ack(SeqNum snd_una, std::span<const SackBlock> sacks, bool dsack,
                   std::optional<std::uint32_t> tsecr, SeqNum snd_nxt, Time now);

  // Steps 4 and 5: marks the segments RACK finds lost; returns how long
  // until the next may be (the reordering timer, RACK_detect_loss's
  // `timeout`), zero when none is waiting. `srtt` bounds the reordering
  // window; `smss` counts SACKed segments.
  Duration detect_loss(Time now, Duration srtt, bool in_recovery, std::uint32_t smss);

  // An RTT the connection measured outside the log (the handshake's):
  // a first minimum RTT before any data was acknowledged.
  void rtt_sample(Duration rtt, Time now) noexcept;

  // A retransmission timeout: everything outstanding is presumed lost and
  // SACK marks are forgotten (the caller sends again from SND.UNA and
  // clears its scoreboard, RFC 2018 section 5's caution against reneging).
  void on_rto() noexcept;
  // The timeout was spurious (RFC 3522): the originals were not lost.
  // The marks on_rto() set on what has not been sent again since are
  // cleared; those segments count as in the network again, with their
  // original send times (SACK marks stay forgotten: the receiver's next
  // SACK blocks restore them).
  void undo_rto() noexcept;
  // A recovery ended (RFC 8985 6.2 step 4: reo_wnd_persist).
  void recovery_ended() noexcept;

  // The reordering window of step 4 (RACK_update_reo_wnd).
  Duration reo_wnd(Duration srtt, bool in_recovery, std::uint32_t smss) const noexcept;

  // The lowest bytes marked lost and not sent again since: up to `max`
  // bytes of one logged transmission. Nothing when none is lost.
  std::optional<Sent> next_lost(std::uint32_t max) const noexcept;

  // Bytes in the network by RACK's marks: outstanding, less SACKed, less
  // lost and not sent again (RFC 6675's pipe with RACK's losses).
  std::uint32_t pipe() const noexcept { return outstanding() - sacked_ - lost_; }
  std::uint32_t outstanding() const noexcept;
  std::uint32_t sacked_bytes() const noexcept { return sacked_; }
  std::uint32_t lost_bytes() const noexcept { return lost_; }
  bool empty() const noexcept { return head_ == log_.size(); }
  std::size_t records() const noexcept { return log_.size() - head_; }
  // The oldest unacknowledged transmission (the RTO counts from its send time).
  const Sent* head() const noexcept { return empty() ? nullptr : &log_[head_]; }
  const Sent* tail() const noexcept { return empty() ? nullptr : &log_.back(); }
  std::span<const Sent> log() const noexcept { return {log_.data() + head_, log_.size() - head_}; }

  // RACK's state (RFC 8985 section 5.2), for tests and TCP_INFO.
  std::optional<Duration> min_rtt() const noexcept { return min_rtt_; }
  Duration rtt() const noexcept { return rtt_; }
  bool reordering_seen() const noexcept { return reordering_seen_; }
  std::uint8_t reo_wnd_mult() const noexcept { return reo_wnd_mult_; }

 private:
  // Splits the record holding `at` strictly inside it; returns the index
  // of the record starting at `at` (or of the end).
  std::size_t split_at(SeqNum at);
  // The index of the record holding `seq`.
  std::size_t find(SeqNum seq) const noexcept;
  // One record (or its front part) delivered by the ACK being processed:
  // RFC 8985 6.2 steps 1-3 for it. `best` gathers the most recently sent
  // unambiguous one; `fack_before` is RACK.fack before this ACK.
  struct Best {
    bool found = false;
    Sent seg;
  };
  void delivered(const Sent& s, std::optional<std::uint32_t> tsecr, Time now, SeqNum fack_before, Best& best) noexcept;
  void mark_lost(Sent& s) noexcept;
  void compact();
  // RACK_sent_after (RFC 8985 6.2), ties broken by transmission order,
  // then (parts of one transmission that SACKs split) by sequence.
  static bool sent_after(const Sent& a, Time t2, std::uint32_t o2, SeqNum e2) noexcept {
    if (a.xmit != t2) return a.xmit > t2;
    if (a.order != o2) return static_cast<std::int32_t>(a.order - o2) > 0;
    return a.end > e2;
  }

  RackConfig cfg_;
  std::vector<Sent> log_;  // sorted, contiguous; [head_, size) outstanding
  std::size_t head_ = 0;
  std::uint32_t next_order_ = 0;
  std::uint32_t sacked_ = 0;
  std::uint32_t lost_ = 0;
  // Where retransmitted records may lie: below this every record is an
  // original transmission, whose send times grow with the sequence.
  SeqNum retx_end_;
  bool any_retx_ = false;

  // RFC 8985 5.2.
  bool have_rack_ = false;
  Time rack_xmit_{};
  std::uint32_t rack_order_ = 0;
  SeqNum rack_end_;
  Duration rtt_{0};
  std::optional<Duration> min_rtt_;
  Time min_rtt_stamp_{};
  SeqNum fack_;
  bool have_fack_ = false;
  bool reordering_seen_ = false;
  std::optional<SeqNum> dsack_round_;
  std::uint8_t reo_wnd_mult_ = 1;
  std::uint8_t reo_wnd_persist_ = 0;
};

// The tail loss probe's state (RFC 8985 7.4): the probe in flight, if any.
class Tlp {
 public:
  // RFC 8985 7.2: PTO = 2 SRTT, plus the worst-case delayed ACK when only
  // one segment is in flight; 1 s without an RTT sample; at least `floor`
  // (a probe sooner than the host's scheduling jitter would mostly be
  // spurious: Linux waits at least 2 ms too); never later than the
  // retransmission timer would fire (`until_rto`).
  static Duration pto(std::optional<Duration> srtt, bool one_segment, Duration wc_delack, Duration floor,
                      Duration until_rto) noexcept;

  bool in_flight() const noexcept { return end_.has_value(); }
  // A probe went out; SND.NXT after it, and whether it repeated data.
  void sent(SeqNum snd_nxt, bool retransmission) noexcept {
    end_ = snd_nxt;
    retrans_ = retransmission;
  }
  void reset() noexcept { end_.reset(); }

  enum class Outcome : std::uint8_t {
    pending,   // nothing decided yet (or no probe)
    no_loss,   // the probe's data arrived, or both copies did
    repaired,  // the probe repaired a loss: the window must come down
  };
  // RFC 8985 7.4.2 for one ACK: its number, a D-SACK block it carries, and
  // whether it is a pure duplicate (no data, no SACK, nothing acknowledged).
  Outcome on_ack(SeqNum ack, std::optional<SackBlock> dsack, bool pure_dupack) noexcept;

 private:
  std::optional<SeqNum> end_;
  bool retrans_ = false;
};

// Proportional rate reduction (RFC 6937 section 3), with the slow-start
// reduction bound (PRR-SSRB).
class Prr {
 public:
  // Recovery starts with `recover_fs` bytes outstanding (RecoverFS).
  void start(std::uint32_t recover_fs) noexcept {
    delivered_ = 0;
    out_ = 0;
    recover_fs_ = recover_fs == 0 ? 1 : recover_fs;
  }
  // One ACK in recovery: how many bytes may be sent now (sndcnt); the
  // window to use is pipe + sndcnt.
  std::uint32_t on_ack(std::uint32_t delivered, std::uint32_t pipe, std::uint32_t ssthresh,
                       std::uint32_t smss) noexcept;
  // Data (new or repeated) sent during recovery.
  void on_sent(std::uint32_t bytes) noexcept { out_ += bytes; }
  std::uint64_t prr_delivered() const noexcept { return delivered_; }
  std::uint64_t prr_out() const noexcept { return out_; }

 private:
  std::uint64_t delivered_ = 0;
  std::uint64_t out_ = 0;
  std::uint32_t recover_fs_ = 1;
};

}  // namespace xk::tcp

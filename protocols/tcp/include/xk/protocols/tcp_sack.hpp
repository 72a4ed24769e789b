#pragma once
// The sender's SACK scoreboard (RFC 2018, RFC 2883, RFC 6675): which bytes
// between SND.UNA and SND.MAX the receiver holds out of order, and the
// RFC 6675 routines built on it: IsLost, SetPipe (pipe()), NextSeg and the
// bookkeeping of loss recovery (RecoveryPoint, HighRxt, RescueRxt).
//
// Names follow RFC 6675 section 2: HighACK is SND.UNA here (the first
// unacknowledged byte, i.e. the RFC's HighACK + 1) and HighData is
// snd_max - 1. Every range is half-open, [start, end), on SeqNum, so the
// scoreboard works across the 2^32 wrap (all ranges lie inside one window,
// far less than 2^31 wide).
//
// Bytes, not segments: IsLost counts SACKed ranges ("discontiguous SACKed
// sequences") and SACKed bytes above a sequence number. Between two SACKed
// ranges IsLost has one value, so pipe() works hole by hole, not byte by byte.
//
// Bounded: at most max_ranges ranges are kept. Past it the smallest range
// is forgotten (counted in stats().ranges_dropped): the scoreboard may then
// under-report SACKed data, which only costs a needless retransmission, and
// never reports unSACKed data as SACKed.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "xk/protocols/tcp_seq.hpp"
#include "xk/protocols/tcp_wire.hpp"

namespace xk::tcp {

struct SackScoreboardConfig {
  std::size_t max_ranges = 256;  // storage for all of them is reserved up front
  std::uint32_t smss = 1460;
  std::uint32_t dup_thresh = 3;  // DupThresh, RFC 6675 section 2
};

class SackScoreboard {
 public:
  struct Range {
    SeqNum start;
    SeqNum end;  // exclusive
    std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(end - start); }
    friend bool operator==(const Range&, const Range&) = default;
  };

  // What one ACK's SACK blocks did.
  struct UpdateResult {
    std::uint32_t newly_sacked = 0;  // bytes SACKed now and not before (RFC 6675 "DupAck" test)
    std::uint32_t newly_acked = 0;   // advance of SND.UNA since the last update
    std::uint32_t ignored = 0;       // blocks dropped: empty, reversed, past snd_max, or old
    bool dsack = false;              // the first block was a D-SACK (RFC 2883 section 4)
    SackBlock dsack_block{};
    bool recovery_ended = false;     // SND.UNA reached the recovery point (RFC 6675 5 (A))
  };

  struct Stats {
    std::uint64_t dsack_blocks = 0;    // D-SACKs seen (RFC 2883)
    std::uint64_t invalid_blocks = 0;  // empty, reversed or beyond snd_max
    std::uint64_t old_blocks = 0;      // at or below SND.UNA and not a D-SACK
    std::uint64_t ranges_dropped = 0;  // forgotten to respect max_ranges
  };

  // NextSeg's answer (RFC 6675 section 4).
  enum class SegKind : std::uint8_t {
    none,      // rule 5: nothing may be sent
    lost,      // rule 1: retransmit data IsLost says is lost
    new_data,  // rule 2: send new data from snd_max (len is at most SMSS)
    rule3,     // rule 3: retransmit unSACKed data below the highest SACK
    rescue,    // rule 4: the one rescue retransmission of this recovery
  };
  struct Segment {
    SegKind kind = SegKind::none;
    SeqNum start;
    std::uint32_t len = 0;
    friend bool operator==(const Segment&, const Segment&) = default;
  };

  explicit SackScoreboard(const SackScoreboardConfig& cfg = {});

  // One incoming ACK: drops what snd_una now covers and records the SACK
  // blocks (RFC 2018 section 3) that lie in (snd_una, snd_max]. The first
  // block is a D-SACK when it ends at or below snd_una or lies inside the
  // second block (RFC 2883 section 4); D-SACKs are reported, never recorded.
  // Blocks past snd_max are bogus and ignored. Ends recovery when snd_una
  // reaches the recovery point.
  UpdateResult update(SeqNum snd_una, SeqNum snd_max, std::span<const SackBlock> blocks) noexcept;

  // IsLost (RFC 6675 section 4): DupThresh SACKed ranges above seq, or more
  // than (DupThresh - 1) * SMSS SACKed bytes above it.
  bool is_lost(SeqNum seq) const noexcept;
  bool is_sacked(SeqNum seq) const noexcept;

  // SetPipe (RFC 6675 section 4): bytes in [snd_una, snd_max) not SACKed
  // and not lost, plus those retransmitted (below HighRxt) and not SACKed.
  std::uint32_t pipe(SeqNum snd_max) const noexcept;

  // NextSeg (RFC 6675 section 4), rules 1 to 5. new_data_allowed says
  // whether rule 2 applies (unsent data exists and the receive window
  // allows it). Const: report what was sent with on_sent().
  Segment next_seg(SeqNum snd_max, bool new_data_allowed) const noexcept;
  // A segment from next_seg() (or enter_recovery()) was sent: rules 1 and 3
  // move HighRxt, rule 4 sets RescueRxt = RecoveryPoint (HighRxt untouched).
  void on_sent(const Segment& seg) noexcept;
  // Any other retransmission of [start, start + len) during recovery.
  void on_retransmit(SeqNum start, std::uint32_t len) noexcept;

  // RFC 6675 section 5 step 4: RecoveryPoint = snd_max (4.1) and the first
  // segment presumed lost, at SND.UNA, at most SMSS and not into SACKed
  // data (4.3). HighRxt and RescueRxt are set to its end as if on_sent()
  // had been called: the caller must send it. kind none if nothing is
  // outstanding.
  Segment enter_recovery(SeqNum snd_max) noexcept;
  void exit_recovery() noexcept;
  bool in_recovery() const noexcept { return in_recovery_; }
  SeqNum recovery_point() const noexcept { return recovery_point_; }
  // One past the highest byte retransmitted in this recovery (SND.UNA when none).
  SeqNum high_rxt() const noexcept { return high_rxt_; }

  SeqNum snd_una() const noexcept { return snd_una_; }
  // One past the highest SACKed byte; snd_una() when nothing is SACKed.
  SeqNum high_sacked() const noexcept;
  std::uint32_t sacked_bytes() const noexcept { return sacked_bytes_; }
  std::size_t range_count() const noexcept { return ranges_.size(); }
  std::span<const Range> ranges() const noexcept { return ranges_; }
  const Stats& stats() const noexcept { return stats_; }

  void set_smss(std::uint32_t smss) noexcept { cfg_.smss = smss == 0 ? 1 : smss; }
  std::uint32_t smss() const noexcept { return cfg_.smss; }
  // Forget every SACKed range and end recovery; SND.UNA stays. RFC 2018
  // section 5 asks for it after a timeout (the receiver may have reneged);
  // RFC 6675 5.1 would rather keep using the SACK information: the caller's
  // choice.
  void clear() noexcept;

 private:
  // Marks [start, end) SACKed, merging; returns the bytes newly SACKed.
  std::uint32_t add(SeqNum start, SeqNum end) noexcept;
  void drop_below(SeqNum seq) noexcept;
  void drop_above(SeqNum seq) noexcept;
  void evict_smallest() noexcept;
  bool lost_given(std::size_t ranges_above, std::uint64_t bytes_above) const noexcept;
  // The first unSACKed byte at or after `from`, and the end of its hole
  // (the next SACKed range's start, or `limit`).
  void hole_at(SeqNum from, SeqNum limit, SeqNum& start, SeqNum& end) const noexcept;

  SackScoreboardConfig cfg_;
  std::vector<Range> ranges_;  // sorted, disjoint, not adjacent; capacity reused
  std::uint32_t sacked_bytes_ = 0;
  SeqNum snd_una_;
  bool have_una_ = false;
  bool in_recovery_ = false;
  SeqNum recovery_point_;
  SeqNum high_rxt_;
  bool rescue_valid_ = false;  // RescueRxt defined in this recovery
  SeqNum rescue_rxt_;          // one past RescueRxt
  Stats stats_;
};

}  // namespace xk::tcp

#include "xk/protocols/tcp_sack.hpp"

#include <algorithm>
#include <new>

namespace xk::tcp {

SackScoreboard::SackScoreboard(const SackScoreboardConfig& cfg) : cfg_(cfg) {
  cfg_.max_ranges = std::max<std::size_t>(cfg_.max_ranges, 1);
  cfg_.smss = std::max<std::uint32_t>(cfg_.smss, 1);
  cfg_.dup_thresh = std::max<std::uint32_t>(cfg_.dup_thresh, 1);
  // Nothing reserved here: most connections never see a SACK block, and an
  // idle one should cost no scoreboard (update() reserves on the first).
}

SackScoreboard::UpdateResult SackScoreboard::update(SeqNum snd_una, SeqNum snd_max,
                                                    std::span<const SackBlock> blocks) noexcept {
  UpdateResult r;
  if (!have_una_) {
    snd_una_ = snd_una;
    high_rxt_ = snd_una;
    have_una_ = true;
  }
  if (snd_una > snd_una_) {
    r.newly_acked = static_cast<std::uint32_t>(snd_una - snd_una_);
    snd_una_ = snd_una;
    drop_below(snd_una_);
  }
  if (high_rxt_ < snd_una_) high_rxt_ = snd_una_;
  drop_above(snd_max);
  if (!blocks.empty() && ranges_.capacity() == 0) {
    // The connection's first SACK blocks: room for all the ranges (one
    // spare: add() may hold max_ranges + 1 before evicting), once, so no
    // later ACK allocates. Out of memory: these blocks are not recorded
    // (recovery goes on with what the cumulative ACKs say).
    try {
      ranges_.reserve(cfg_.max_ranges + 1);
    } catch (const std::bad_alloc&) {
      r.ignored += static_cast<std::uint32_t>(blocks.size());
      blocks = {};
    }
  }

  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const SackBlock& b = blocks[i];
    if (!(b.left < b.right)) {  // empty or reversed: malformed (RFC 2018 section 3)
      ++r.ignored;
      ++stats_.invalid_blocks;
      continue;
    }
    if (i == 0) {
      // RFC 2883 section 4: the first block is a D-SACK when it is at or
      // below the cumulative ACK, or inside the second block.
      bool below = b.right <= snd_una_;
      bool inside = blocks.size() > 1 && blocks[1].left < blocks[1].right && blocks[1].left <= b.left &&
                    b.right <= blocks[1].right;
      if (below || inside) {
        r.dsack = true;
        r.dsack_block = b;
        ++stats_.dsack_blocks;
        continue;
      }
    }
    if (b.right > snd_max) {  // SACKs data never sent: bogus
      ++r.ignored;
      ++stats_.invalid_blocks;
      continue;
    }
    if (b.right <= snd_una_) {  // RFC 2018 section 5: already acknowledged
      ++r.ignored;
      ++stats_.old_blocks;
      continue;
    }
    r.newly_sacked += add(seq_max(b.left, snd_una_), b.right);
  }

  // RFC 6675 section 5 (A): a cumulative ACK past RecoveryPoint ends recovery.
  if (in_recovery_ && snd_una_ >= recovery_point_) {
    exit_recovery();
    r.recovery_ended = true;
  }
  return r;
}

std::uint32_t SackScoreboard::add(SeqNum start, SeqNum end) noexcept {
  // Ranges are sorted and disjoint, so their ends are sorted too: the first
  // one that overlaps or touches [start, end) is the first ending at or
  // after start.
  auto first = std::partition_point(ranges_.begin(), ranges_.end(),
                                    [start](const Range& x) { return x.end < start; });
  auto last = first;
  Range merged{start, end};
  std::uint32_t already = 0;
  while (last != ranges_.end() && last->start <= end) {
    merged.start = seq_min(merged.start, last->start);
    merged.end = seq_max(merged.end, last->end);
    already += last->size();
    ++last;
  }
  std::uint32_t fresh = merged.size() - already;
  if (first == last) {
    ranges_.insert(first, merged);  // capacity reserved: no allocation
  } else {
    *first = merged;
    ranges_.erase(first + 1, last);
  }
  sacked_bytes_ += fresh;
  if (ranges_.size() > cfg_.max_ranges) evict_smallest();
  return fresh;
}

void SackScoreboard::evict_smallest() noexcept {
  // Forgetting a range only makes the sender think less is SACKed: safe.
  auto victim = std::min_element(ranges_.begin(), ranges_.end(),
                                 [](const Range& a, const Range& b) { return a.size() < b.size(); });
  sacked_bytes_ -= victim->size();
  ranges_.erase(victim);
  ++stats_.ranges_dropped;
}

void SackScoreboard::drop_below(SeqNum seq) noexcept {
  std::size_t gone = 0;
  while (gone < ranges_.size() && ranges_[gone].end <= seq) sacked_bytes_ -= ranges_[gone++].size();
  ranges_.erase(ranges_.begin(), ranges_.begin() + static_cast<std::ptrdiff_t>(gone));
  if (!ranges_.empty() && ranges_.front().start < seq) {
    sacked_bytes_ -= static_cast<std::uint32_t>(seq - ranges_.front().start);
    ranges_.front().start = seq;
  }
}

void SackScoreboard::drop_above(SeqNum seq) noexcept {
  while (!ranges_.empty() && ranges_.back().start >= seq) {
    sacked_bytes_ -= ranges_.back().size();
    ranges_.pop_back();
  }
  if (!ranges_.empty() && ranges_.back().end > seq) {
    sacked_bytes_ -= static_cast<std::uint32_t>(ranges_.back().end - seq);
    ranges_.back().end = seq;
  }
}

bool SackScoreboard::lost_given(std::size_t ranges_above, std::uint64_t bytes_above) const noexcept {
  // RFC 6675 section 4, IsLost: DupThresh discontiguous SACKed sequences,
  // or more than (DupThresh - 1) * SMSS SACKed bytes, above the sequence.
  return ranges_above >= cfg_.dup_thresh ||
         bytes_above > std::uint64_t{cfg_.dup_thresh - 1} * cfg_.smss;
}

bool SackScoreboard::is_lost(SeqNum seq) const noexcept {
  std::size_t count = 0;
  std::uint64_t bytes = 0;
  SeqNum above = seq + 1;  // the first sequence number greater than seq
  for (auto it = ranges_.rbegin(); it != ranges_.rend() && it->end > above; ++it) {
    bytes += static_cast<std::uint32_t>(it->end - seq_max(it->start, above));
    ++count;
  }
  return lost_given(count, bytes);
}

bool SackScoreboard::is_sacked(SeqNum seq) const noexcept {
  auto it = std::partition_point(ranges_.begin(), ranges_.end(), [seq](const Range& x) { return x.end <= seq; });
  return it != ranges_.end() && it->start <= seq;
}

SeqNum SackScoreboard::high_sacked() const noexcept { return ranges_.empty() ? snd_una_ : ranges_.back().end; }

std::uint32_t SackScoreboard::pipe(SeqNum snd_max) const noexcept {
  if (!have_una_) return 0;
  // RFC 6675 section 4, SetPipe, for every unSACKed octet S1 in
  // [HighACK, HighData]: (a) +1 unless IsLost(S1); (b) +1 if S1 <= HighRxt.
  // IsLost is constant across a hole, so walk the holes from the top,
  // counting the SACKed ranges and bytes above each.
  std::uint64_t total = 0;
  std::size_t count = 0;
  std::uint64_t bytes = 0;
  auto hole = [&](SeqNum a, SeqNum b) {
    if (!(a < b)) return;
    if (!lost_given(count, bytes)) total += static_cast<std::uint32_t>(b - a);
    if (high_rxt_ > a) total += static_cast<std::uint32_t>(seq_min(b, high_rxt_) - a);
  };
  SeqNum upper = snd_max;
  for (auto it = ranges_.rbegin(); it != ranges_.rend(); ++it) {
    hole(it->end, upper);
    ++count;
    bytes += it->size();
    upper = seq_min(upper, it->start);
  }
  hole(snd_una_, upper);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(total, UINT32_MAX));
}

void SackScoreboard::hole_at(SeqNum from, SeqNum limit, SeqNum& start, SeqNum& end) const noexcept {
  start = from;
  for (const Range& x : ranges_) {
    if (x.end <= start) continue;
    if (x.start <= start) {
      start = x.end;  // inside a SACKed range: the hole begins after it
      continue;
    }
    end = x.start;
    return;
  }
  end = limit;
}

SackScoreboard::Segment SackScoreboard::next_seg(SeqNum snd_max, bool new_data_allowed) const noexcept {
  Segment rule3;
  SeqNum high = high_sacked();
  if (have_una_ && !ranges_.empty()) {
    // Rules 1 and 3: the smallest unSACKed S2 > HighRxt (1.a) below the
    // highest SACKed octet (1.b). IsLost only falls going up, so if S2 is
    // not lost no higher octet is.
    SeqNum s2;
    SeqNum hole_end;
    hole_at(seq_max(high_rxt_, snd_una_), snd_max, s2, hole_end);
    if (s2 < high) {
      std::uint32_t len = std::min(cfg_.smss, static_cast<std::uint32_t>(hole_end - s2));
      if (is_lost(s2)) return {SegKind::lost, s2, len};  // rule 1 (1.c)
      rule3 = {SegKind::rule3, s2, len};
    }
  }
  // Rule 2: new data, when there is some and the window allows.
  if (new_data_allowed) return {SegKind::new_data, snd_max, cfg_.smss};
  if (rule3.kind != SegKind::none) return rule3;  // rule 3
  // Rule 4: one rescue retransmission per recovery, of up to SMSS that
  // includes the highest outstanding unSACKed octet, when HighACK > RescueRxt.
  if (in_recovery_ && (!rescue_valid_ || snd_una_ > rescue_rxt_) && snd_una_ < snd_max) {
    SeqNum top_end;
    SeqNum top_start;
    if (high < snd_max) {
      top_end = snd_max;
      top_start = seq_max(high, snd_una_);
    } else {
      top_end = ranges_.back().start;
      top_start = ranges_.size() > 1 ? ranges_[ranges_.size() - 2].end : snd_una_;
    }
    if (top_start < top_end) {
      std::uint32_t span = static_cast<std::uint32_t>(top_end - top_start);
      SeqNum start = span > cfg_.smss ? top_end - cfg_.smss : top_start;
      return {SegKind::rescue, start, static_cast<std::uint32_t>(top_end - start)};
    }
  }
  return {};  // rule 5
}

void SackScoreboard::on_sent(const Segment& seg) noexcept {
  switch (seg.kind) {
    case SegKind::lost:
    case SegKind::rule3:
      on_retransmit(seg.start, seg.len);
      break;
    case SegKind::rescue:
      // RFC 6675 section 4 rule 4: RescueRxt = RecoveryPoint; HighRxt stays.
      rescue_valid_ = true;
      rescue_rxt_ = recovery_point_;
      break;
    case SegKind::new_data:
    case SegKind::none:
      break;
  }
}

void SackScoreboard::on_retransmit(SeqNum start, std::uint32_t len) noexcept {
  high_rxt_ = seq_max(high_rxt_, start + len);
}

SackScoreboard::Segment SackScoreboard::enter_recovery(SeqNum snd_max) noexcept {
  high_rxt_ = snd_una_;
  rescue_valid_ = false;
  if (!have_una_ || !(snd_una_ < snd_max)) {
    in_recovery_ = false;
    return {};
  }
  // RFC 6675 section 5 (4.1): RecoveryPoint = HighData.
  in_recovery_ = true;
  recovery_point_ = snd_max;
  // (4.3): retransmit the first segment presumed dropped, at HighACK + 1,
  // and set HighRxt and RescueRxt to its highest octet.
  SeqNum s;
  SeqNum e;
  hole_at(snd_una_, snd_max, s, e);
  std::uint32_t len = std::min(cfg_.smss, static_cast<std::uint32_t>(e - s));
  high_rxt_ = s + len;
  rescue_valid_ = true;
  rescue_rxt_ = s + len;
  return {SegKind::lost, s, len};
}

void SackScoreboard::exit_recovery() noexcept {
  in_recovery_ = false;
  rescue_valid_ = false;
  high_rxt_ = snd_una_;
}

void SackScoreboard::clear() noexcept {
  ranges_.clear();
  sacked_bytes_ = 0;
  exit_recovery();
}

}  // namespace xk::tcp

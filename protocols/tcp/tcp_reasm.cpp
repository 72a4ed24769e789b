#include "xk/protocols/tcp_reasm.hpp"

#include <algorithm>

namespace xk::tcp {

namespace {

// No TCP segment comes near this; a Msg that does is refused whole rather
// than have its length wrap in sequence arithmetic.
constexpr std::size_t kMaxSegment = std::size_t{1} << 30;

}  // namespace

Reassembly::Reassembly(const ReassemblyConfig& cfg) : cfg_(cfg) {
  cfg_.max_blocks = std::max<std::size_t>(cfg_.max_blocks, 1);
  // Grown on demand (from the first out-of-order segment: an idle or
  // in-order connection holds nothing here), never shrunk: after warm-up no
  // insert allocates.
}

std::size_t Reassembly::find(SeqNum seq) const noexcept {
  auto it = std::partition_point(blocks_.begin(), blocks_.end(), [seq](const Block& b) { return b.end() <= seq; });
  if (it != blocks_.end() && it->start <= seq) return static_cast<std::size_t>(it - blocks_.begin());
  return blocks_.size();
}

void Reassembly::drop_before(SeqNum rcv_nxt) noexcept {
  std::size_t gone = 0;
  while (gone < blocks_.size() && blocks_[gone].end() <= rcv_nxt) queued_bytes_ -= blocks_[gone++].data.size();
  blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(gone));
  if (!blocks_.empty() && blocks_.front().start < rcv_nxt) {
    Block& b = blocks_.front();
    std::uint32_t cut = static_cast<std::uint32_t>(rcv_nxt - b.start);
    (void)b.data.trim_front(cut);  // cut < size: cannot fail
    b.start = rcv_nxt;
    queued_bytes_ -= cut;
  }
}

void Reassembly::remember(SeqNum seq) noexcept {
  // RFC 2018 section 4: the first SACK block reports the newest segment's
  // block, the next ones the blocks reported before it; one entry per block.
  std::size_t home = find(seq);
  std::array<SeqNum, kHistory> kept{};
  std::size_t n = 0;
  kept[n++] = seq;
  for (std::size_t i = 0; i < recent_count_ && n < kHistory; ++i) {
    std::size_t where = find(recent_[i]);
    if (where == blocks_.size() || where == home) continue;  // delivered, or the same block
    kept[n++] = recent_[i];
  }
  recent_ = kept;
  recent_count_ = n;
}

Reassembly::InsertResult Reassembly::insert(SeqNum seq, Msg data, SeqNum rcv_nxt, std::uint32_t window) {
  InsertResult r;
  drop_before(rcv_nxt);
  if (data.size() > kMaxSegment) {
    r.beyond_window = static_cast<std::uint32_t>(std::min<std::size_t>(data.size(), UINT32_MAX));
    return r;
  }
  std::uint32_t len = static_cast<std::uint32_t>(data.size());
  if (len == 0) return r;
  SeqNum cur = seq;
  SeqNum end = seq + len;

  // RFC 9293 3.10.7.4: bytes before RCV.NXT were already delivered.
  if (cur < rcv_nxt) {
    std::uint32_t dup = std::min(len, static_cast<std::uint32_t>(rcv_nxt - cur));
    r.duplicate += dup;
    r.dsack = SackBlock{cur, cur + dup};  // RFC 2883 section 4: below the cumulative ACK
    (void)data.trim_front(dup);
    cur += dup;
    if (data.empty()) return r;
  }
  // RFC 9293 3.10.7.4: only what fits in the receive window is kept.
  SeqNum limit = rcv_nxt + window;
  if (end > limit) {
    std::uint32_t over = static_cast<std::uint32_t>(end - seq_max(cur, limit));
    r.beyond_window = over;
    (void)data.truncate(data.size() - over);
    end = end - over;
    if (data.empty()) return r;
  }

  // Data may wait here long (a hole is repaired in a round trip or more, and
  // the application cannot read it meanwhile): when the port is short of
  // buffers the segment is copied, so a window of held segments cannot
  // starve the port of the one that fills the hole (docs/tcp.md, "Receive
  // buffers and the port's pool"). Out of memory: kept as it is.
  (void)data.own_if_scarce();

  // Walk the blocks that overlap or touch [cur, end): queued bytes win, the
  // gaps are cut out of `m` and chained onto their neighbours.
  Msg m = std::move(data);  // always holds [cur, end)
  std::size_t idx = static_cast<std::size_t>(
      std::partition_point(blocks_.begin(), blocks_.end(), [cur](const Block& b) { return b.end() < cur; }) -
      blocks_.begin());
  SeqNum first = cur;
  while (!m.empty()) {
    if (idx < blocks_.size() && blocks_[idx].start <= cur) {
      Block& b = blocks_[idx];
      SeqNum b_end = b.end();
      if (b_end > cur) {  // already queued: the new copy is a duplicate
        std::uint32_t dup = static_cast<std::uint32_t>(seq_min(end, b_end) - cur);
        if (!r.dsack) r.dsack = SackBlock{cur, cur + dup};  // RFC 2883 section 4: inside the queue
        r.duplicate += dup;
        (void)m.trim_front(dup);
        cur += dup;
        if (m.empty()) break;
      }
      if (idx + 1 < blocks_.size() && blocks_[idx + 1].start <= end) {
        // The gap up to the next block is filled: the two blocks become one.
        std::uint32_t gap = static_cast<std::uint32_t>(blocks_[idx + 1].start - cur);
        Result<Msg> rest = m.split(gap);
        if (!rest) {
          r.no_room += static_cast<std::uint32_t>(m.size());
          m.reset();
          break;
        }
        b.data.join(std::move(m));
        m = std::move(*rest);
        r.queued += gap;
        queued_bytes_ += gap;
        cur += gap;
        b.data.join(std::move(blocks_[idx + 1].data));
        blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(idx) + 1);
        continue;
      }
      r.queued += static_cast<std::uint32_t>(m.size());
      queued_bytes_ += m.size();
      b.data.join(std::move(m));
      break;
    }
    if (idx < blocks_.size() && blocks_[idx].start <= end) {
      // A gap in front of block idx: the new bytes become its head.
      Block& b = blocks_[idx];
      std::uint32_t gap = static_cast<std::uint32_t>(b.start - cur);
      Result<Msg> rest = m.split(gap);
      if (!rest) {
        r.no_room += static_cast<std::uint32_t>(m.size());
        m.reset();
        break;
      }
      m.join(std::move(b.data));
      b.data = std::move(m);
      b.start = cur;
      m = std::move(*rest);
      r.queued += gap;
      queued_bytes_ += gap;
      cur += gap;
      continue;
    }
    // Touches nothing: a block of its own, if the cap allows.
    if (blocks_.size() >= cfg_.max_blocks) {
      r.no_room += static_cast<std::uint32_t>(m.size());
      m.reset();
      break;
    }
    r.queued += static_cast<std::uint32_t>(m.size());
    queued_bytes_ += m.size();
    if (blocks_.capacity() == 0) blocks_.reserve(std::min<std::size_t>(cfg_.max_blocks, 16));  // the first hole
    blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(idx), Block{cur, std::move(m)});
    break;
  }
  if (find(first) != blocks_.size()) remember(first);
  return r;
}

Msg Reassembly::take_in_order(SeqNum& rcv_nxt) {
  drop_before(rcv_nxt);
  if (blocks_.empty() || blocks_.front().start != rcv_nxt) return Msg();
  Msg out = std::move(blocks_.front().data);
  blocks_.erase(blocks_.begin());
  queued_bytes_ -= out.size();
  rcv_nxt += static_cast<std::uint32_t>(out.size());
  return out;
}

std::size_t Reassembly::sack_blocks(std::span<SackBlock> out, const std::optional<SackBlock>& dsack) const noexcept {
  std::size_t n = 0;
  if (out.empty()) return 0;
  // RFC 2883 section 4: a D-SACK block goes first.
  if (dsack) out[n++] = *dsack;
  std::size_t own = n;  // out[own, n) are queue blocks
  auto already = [&](SeqNum start) {
    for (std::size_t k = own; k < n; ++k) {
      if (out[k].left == start) return true;
    }
    return false;
  };
  auto emit = [&](const Block& b) {
    if (n < out.size() && !already(b.start)) out[n++] = SackBlock{b.start, b.end()};
  };
  for (std::size_t i = 0; i < recent_count_ && n < out.size(); ++i) {
    std::size_t where = find(recent_[i]);
    if (where != blocks_.size()) emit(blocks_[where]);
  }
  for (std::size_t i = 0; i < blocks_.size() && n < out.size(); ++i) emit(blocks_[i]);
  return n;
}

void Reassembly::clear() noexcept {
  blocks_.clear();
  queued_bytes_ = 0;
  recent_count_ = 0;
}

}  // namespace xk::tcp

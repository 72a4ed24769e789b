#pragma once
// The receiver's out-of-order queue (RFC 9293 3.10.7.4, "segment text"):
// data that arrived beyond RCV.NXT waits here until the hole before it is
// filled, and the queue's blocks are what the receiver SACKs (RFC 2018
// section 4, RFC 2883).
//
// Payload is never copied: an arriving Msg is trimmed and cut with
// Msg::trim_front / truncate / split and chained onto its neighbours with
// Msg::join. Overlaps are resolved in favour of the bytes already queued;
// only the gaps are filled from the new segment.
//
// The queue holds disjoint, non-adjacent blocks, sorted by sequence number
// (adjacent data is merged into one block), so one block is one SACK block.
// Everything is on SeqNum and works across the 2^32 wrap.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "xk/msg.hpp"
#include "xk/protocols/tcp_seq.hpp"
#include "xk/protocols/tcp_wire.hpp"

namespace xk::tcp {

struct ReassemblyConfig {
  // At most this many blocks are queued: a segment that would open one more
  // is dropped (the sender retransmits it); data that extends or fills
  // between existing blocks is always taken.
  std::size_t max_blocks = 256;
};

class Reassembly {
 public:
  struct Block {
    SeqNum start;
    Msg data;
    SeqNum end() const noexcept { return start + static_cast<std::uint32_t>(data.size()); }
  };

  // What one insert did; the four byte counts add up to the segment's length.
  struct InsertResult {
    std::uint32_t queued = 0;         // new bytes now held
    std::uint32_t duplicate = 0;      // below rcv_nxt or already queued
    std::uint32_t beyond_window = 0;  // past rcv_nxt + window: dropped
    std::uint32_t no_room = 0;        // dropped: block cap reached, or out of memory
    // RFC 2883: the first contiguous duplicate range of the segment, to
    // report as a D-SACK block.
    std::optional<SackBlock> dsack;
  };

  explicit Reassembly(const ReassemblyConfig& cfg = {});

  // Queues the bytes of `data` (which start at `seq`) that lie in
  // [rcv_nxt, rcv_nxt + window) and are not queued yet. Also drops queued
  // data the caller's rcv_nxt has passed.
  InsertResult insert(SeqNum seq, Msg data, SeqNum rcv_nxt, std::uint32_t window);

  // The data now contiguous at rcv_nxt (one Msg, possibly many fragments),
  // rcv_nxt advanced past it; an empty Msg when the first block is not at
  // rcv_nxt. Queued data below rcv_nxt is dropped first.
  Msg take_in_order(SeqNum& rcv_nxt);

  // SACK blocks for the next ACK (RFC 2018 section 4), at most out.size()
  // (3 with timestamps, 4 without): `dsack` first when given (RFC 2883
  // section 4), then the block holding the most recently received segment,
  // then the blocks of earlier segments, most recent first, each block
  // once; spare room is filled with the remaining blocks in sequence order.
  // Returns how many were written.
  std::size_t sack_blocks(std::span<SackBlock> out,
                          const std::optional<SackBlock>& dsack = std::nullopt) const noexcept;

  std::size_t queued_bytes() const noexcept { return queued_bytes_; }
  std::size_t range_count() const noexcept { return blocks_.size(); }
  bool empty() const noexcept { return blocks_.empty(); }
  std::span<const Block> blocks() const noexcept { return blocks_; }
  // Drop everything (abort, reset).
  void clear() noexcept;

 private:
  // Recent segments, newest first: a sequence number inside each.
  static constexpr std::size_t kHistory = 8;

  void drop_before(SeqNum rcv_nxt) noexcept;
  void remember(SeqNum seq) noexcept;
  // The index of the block holding seq, or blocks_.size().
  std::size_t find(SeqNum seq) const noexcept;

  ReassemblyConfig cfg_;
  std::vector<Block> blocks_;  // sorted, disjoint, not adjacent; capacity reused
  std::size_t queued_bytes_ = 0;
  std::array<SeqNum, kHistory> recent_{};
  std::size_t recent_count_ = 0;
};

}  // namespace xk::tcp

// The sender's SACK scoreboard (RFC 2018, 2883, 6675) and the receiver's
// reassembly queue (RFC 9293 3.10.7.4, RFC 2018 section 4). Sequence numbers
// start just below 2^32 so that every scenario crosses the wrap; randomised
// runs are checked against a byte-by-byte model.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "xk/msg.hpp"
#include "xk/protocols/tcp_reasm.hpp"
#include "xk/protocols/tcp_sack.hpp"

namespace xk::tcp {
namespace {

constexpr std::uint32_t kBase = 0xFFFFF000u;  // 4096 bytes below the wrap
constexpr std::uint32_t kSmss = 1000;

SeqNum S(std::uint32_t off) { return SeqNum(kBase + off); }
SackBlock B(std::uint32_t from, std::uint32_t to) { return {S(from), S(to)}; }

using Kind = SackScoreboard::SegKind;
using Segment = SackScoreboard::Segment;
using Range = SackScoreboard::Range;

SackScoreboardConfig sb_config(std::size_t max_ranges = 256) {
  SackScoreboardConfig c;
  c.smss = kSmss;
  c.max_ranges = max_ranges;
  return c;
}

std::vector<Range> ranges_of(const SackScoreboard& sb) { return {sb.ranges().begin(), sb.ranges().end()}; }

// ---- scoreboard -------------------------------------------------------------

TEST(SackScoreboard, RecordsAndMergesBlocksAcrossTheWrap) {
  SackScoreboard sb(sb_config());
  std::vector<SackBlock> one{B(2000, 3000)};
  auto r = sb.update(S(0), S(10000), one);
  EXPECT_EQ(r.newly_sacked, 1000u);
  EXPECT_EQ(sb.sacked_bytes(), 1000u);
  // [2500, 4000) overlaps, [4000, 5000) touches: one range [2000, 5000),
  // which crosses 2^32 (S(4096) == 0).
  std::vector<SackBlock> two{B(4000, 5000), B(2500, 4000)};
  r = sb.update(S(0), S(10000), two);
  EXPECT_EQ(r.newly_sacked, 2000u);
  EXPECT_EQ(ranges_of(sb), (std::vector<Range>{{S(2000), S(5000)}}));
  EXPECT_EQ(S(5000).raw(), 904u);
  EXPECT_EQ(sb.sacked_bytes(), 3000u);
  EXPECT_EQ(sb.high_sacked(), S(5000));
  // A repeat of known data is not new.
  r = sb.update(S(0), S(10000), one);
  EXPECT_EQ(r.newly_sacked, 0u);
  // A block bridging two ranges merges them.
  std::vector<SackBlock> far{B(7000, 8000)};
  (void)sb.update(S(0), S(10000), far);
  EXPECT_EQ(sb.range_count(), 2u);
  std::vector<SackBlock> bridge{B(4500, 7500)};
  r = sb.update(S(0), S(10000), bridge);
  EXPECT_EQ(r.newly_sacked, 2000u);
  EXPECT_EQ(ranges_of(sb), (std::vector<Range>{{S(2000), S(8000)}}));
  EXPECT_TRUE(sb.is_sacked(S(2000)));
  EXPECT_TRUE(sb.is_sacked(S(7999)));
  EXPECT_FALSE(sb.is_sacked(S(8000)));
  EXPECT_FALSE(sb.is_sacked(S(1999)));
}

TEST(SackScoreboard, CumulativeAckDropsWhatItCovers) {
  SackScoreboard sb(sb_config());
  std::vector<SackBlock> blocks{B(1000, 2000), B(3000, 5000)};
  (void)sb.update(S(0), S(10000), blocks);
  auto r = sb.update(S(3500), S(10000), {});
  EXPECT_EQ(r.newly_acked, 3500u);
  EXPECT_EQ(sb.snd_una(), S(3500));
  EXPECT_EQ(ranges_of(sb), (std::vector<Range>{{S(3500), S(5000)}}));
  EXPECT_EQ(sb.sacked_bytes(), 1500u);
  (void)sb.update(S(6000), S(10000), {});
  EXPECT_EQ(sb.range_count(), 0u);
  EXPECT_EQ(sb.sacked_bytes(), 0u);
  EXPECT_EQ(sb.high_sacked(), S(6000));
  // An old ACK does not move SND.UNA back.
  r = sb.update(S(5000), S(10000), {});
  EXPECT_EQ(r.newly_acked, 0u);
  EXPECT_EQ(sb.snd_una(), S(6000));
}

TEST(SackScoreboard, IgnoresMalformedAndOldBlocks) {
  SackScoreboard sb(sb_config());
  (void)sb.update(S(1000), S(10000), {});
  std::vector<SackBlock> bad{
      B(3000, 4000),   // fine
      B(5000, 5000),   // empty
      B(6000, 5500),   // reversed
      B(9000, 11000),  // beyond SND.MAX: SACKs data never sent
      B(0, 1000),      // old, and not first: not a D-SACK
      B(500, 2000),    // straddles SND.UNA: clipped to [1000, 2000)
  };
  auto r = sb.update(S(1000), S(10000), bad);
  EXPECT_EQ(r.ignored, 4u);
  EXPECT_FALSE(r.dsack);
  EXPECT_EQ(r.newly_sacked, 2000u);
  EXPECT_EQ(ranges_of(sb), (std::vector<Range>{{S(1000), S(2000)}, {S(3000), S(4000)}}));
  EXPECT_EQ(sb.stats().invalid_blocks, 3u);
  EXPECT_EQ(sb.stats().old_blocks, 1u);
}

TEST(SackScoreboard, RecognisesDsackBlocks) {
  SackScoreboard sb(sb_config());
  (void)sb.update(S(2000), S(10000), {});
  // RFC 2883 section 4: a first block at or below the cumulative ACK ...
  std::vector<SackBlock> below{B(1000, 1500), B(3000, 4000)};
  auto r = sb.update(S(2000), S(10000), below);
  EXPECT_TRUE(r.dsack);
  EXPECT_EQ(r.dsack_block, B(1000, 1500));
  EXPECT_EQ(r.newly_sacked, 1000u);
  // ... or inside the second block.
  std::vector<SackBlock> inside{B(3200, 3400), B(3000, 4500)};
  r = sb.update(S(2000), S(10000), inside);
  EXPECT_TRUE(r.dsack);
  EXPECT_EQ(r.dsack_block, B(3200, 3400));
  EXPECT_EQ(r.newly_sacked, 500u);
  EXPECT_EQ(sb.stats().dsack_blocks, 2u);
  EXPECT_EQ(ranges_of(sb), (std::vector<Range>{{S(3000), S(4500)}}));
  // The same block not in first position is just old.
  std::vector<SackBlock> later{B(3000, 4500), B(1000, 1500)};
  r = sb.update(S(2000), S(10000), later);
  EXPECT_FALSE(r.dsack);
  EXPECT_EQ(r.ignored, 1u);
}

TEST(SackScoreboard, IsLostCountsRangesAndBytesAbove) {
  SackScoreboard sb(sb_config());
  // Three small discontiguous ranges above 0: lost though only 300 bytes.
  std::vector<SackBlock> three{B(1000, 1100), B(2000, 2100), B(3000, 3100)};
  (void)sb.update(S(0), S(10000), three);
  EXPECT_TRUE(sb.is_lost(S(0)));
  EXPECT_TRUE(sb.is_lost(S(999)));
  EXPECT_FALSE(sb.is_lost(S(1500)));  // two ranges, 200 bytes above
  EXPECT_FALSE(sb.is_lost(S(3100)));

  // (DupThresh - 1) * SMSS = 2000 bytes: more than that is lost.
  SackScoreboard bytes(sb_config());
  std::vector<SackBlock> b2000{B(1000, 3000)};
  (void)bytes.update(S(0), S(10000), b2000);
  EXPECT_FALSE(bytes.is_lost(S(500)));
  std::vector<SackBlock> b2001{B(3000, 3001)};
  (void)bytes.update(S(0), S(10000), b2001);
  EXPECT_TRUE(bytes.is_lost(S(500)));
  // Bytes above a sequence number inside a range count only above it.
  EXPECT_FALSE(bytes.is_lost(S(1000)));  // 2000 bytes above 1000
  EXPECT_TRUE(bytes.is_lost(S(999)));
}

TEST(SackScoreboard, PipeCountsHolesNotLostPlusRetransmissions) {
  SackScoreboard sb(sb_config());
  std::vector<SackBlock> blocks{B(3000, 6000)};
  (void)sb.update(S(0), S(10000), blocks);
  // [0, 3000) is lost (3000 SACKed bytes above), [6000, 10000) is in flight.
  EXPECT_EQ(sb.pipe(S(10000)), 4000u);
  Segment first = sb.enter_recovery(S(10000));
  EXPECT_EQ(first, (Segment{Kind::lost, S(0), kSmss}));
  EXPECT_EQ(sb.high_rxt(), S(1000));
  // RFC 6675 SetPipe (b): the retransmission is in flight again.
  EXPECT_EQ(sb.pipe(S(10000)), 5000u);
  // More new data sent: counted.
  EXPECT_EQ(sb.pipe(S(12000)), 7000u);
}

TEST(SackScoreboard, NextSegFollowsRfc6675Rules) {
  SackScoreboard sb(sb_config());
  std::vector<SackBlock> blocks{B(1000, 2000), B(3000, 4000), B(5000, 6000)};
  (void)sb.update(S(0), S(10000), blocks);
  // RFC 6675 5 (4.3): the first retransmission is at SND.UNA, up to the
  // first SACKed byte.
  Segment first = sb.enter_recovery(S(10000));
  EXPECT_EQ(first, (Segment{Kind::lost, S(0), 1000}));
  EXPECT_TRUE(sb.in_recovery());
  EXPECT_EQ(sb.recovery_point(), S(10000));
  // [2000, 3000): two ranges and 2000 bytes above: not lost. Rule 2 (new
  // data) comes before rule 3.
  EXPECT_EQ(sb.next_seg(S(10000), true), (Segment{Kind::new_data, S(10000), kSmss}));
  EXPECT_EQ(sb.next_seg(S(10000), false), (Segment{Kind::rule3, S(2000), 1000}));
  // One more SACKed range above makes it lost: rule 1 beats new data.
  std::vector<SackBlock> more{B(7000, 8000)};
  (void)sb.update(S(0), S(10000), more);
  Segment s = sb.next_seg(S(10000), true);
  EXPECT_EQ(s, (Segment{Kind::lost, S(2000), 1000}));
  sb.on_sent(s);
  EXPECT_EQ(sb.high_rxt(), S(3000));
  // Rule 1.a: nothing at or below HighRxt again. [4000, 5000) has two
  // ranges above and 2000 bytes: rule 3.
  s = sb.next_seg(S(10000), false);
  EXPECT_EQ(s, (Segment{Kind::rule3, S(4000), 1000}));
  sb.on_sent(s);
  s = sb.next_seg(S(10000), false);
  EXPECT_EQ(s, (Segment{Kind::rule3, S(6000), 1000}));
  sb.on_sent(s);
  // Above the highest SACK only new data (rule 2) or the rescue (rule 4).
  // RescueRxt is the first retransmission's end (4.3): HighACK is not above it.
  EXPECT_EQ(sb.next_seg(S(10000), false).kind, Kind::none);
  (void)sb.update(S(1000), S(10000), {});  // exactly RescueRxt: still not above
  EXPECT_EQ(sb.next_seg(S(10000), false).kind, Kind::none);
  (void)sb.update(S(1500), S(10000), {});
  // Rule 4: one segment including the highest unSACKed octet (9999).
  s = sb.next_seg(S(10000), false);
  EXPECT_EQ(s, (Segment{Kind::rescue, S(9000), kSmss}));
  Segment rxt_before{Kind::lost, sb.high_rxt(), 0};
  sb.on_sent(s);
  EXPECT_EQ(sb.high_rxt(), rxt_before.start);  // HighRxt is not moved by a rescue
  EXPECT_EQ(sb.next_seg(S(10000), false).kind, Kind::none);  // once per recovery
  // The cumulative ACK reaching the recovery point ends recovery (5 (A)).
  auto r = sb.update(S(9500), S(10000), {});
  EXPECT_FALSE(r.recovery_ended);
  r = sb.update(S(10000), S(12000), {});
  EXPECT_TRUE(r.recovery_ended);
  EXPECT_FALSE(sb.in_recovery());
  EXPECT_EQ(sb.next_seg(S(12000), false).kind, Kind::none);
}

TEST(SackScoreboard, RescueWhenTheTopIsSacked) {
  SackScoreboard sb(sb_config());
  std::vector<SackBlock> blocks{B(500, 700), B(2500, 10000)};
  (void)sb.update(S(0), S(10000), blocks);
  Segment first = sb.enter_recovery(S(10000));
  EXPECT_EQ(first, (Segment{Kind::lost, S(0), 500}));  // stops at SACKed data
  sb.on_sent({Kind::lost, S(700), 1000});              // as if rule 1 sent [700, 1700)
  Segment s = sb.next_seg(S(10000), false);
  EXPECT_EQ(s, (Segment{Kind::lost, S(1700), 800}));
  sb.on_sent(s);
  (void)sb.update(S(501), S(10000), {});
  // Highest unSACKed octet is 2499: the rescue is [1500, 2500).
  EXPECT_EQ(sb.next_seg(S(10000), false), (Segment{Kind::rescue, S(1500), kSmss}));
}

TEST(SackScoreboard, NothingOutstandingMeansNoRecovery) {
  SackScoreboard sb(sb_config());
  (void)sb.update(S(500), S(500), {});
  EXPECT_EQ(sb.enter_recovery(S(500)).kind, Kind::none);
  EXPECT_FALSE(sb.in_recovery());
  EXPECT_EQ(sb.pipe(S(500)), 0u);
  EXPECT_EQ(sb.next_seg(S(500), true), (Segment{Kind::new_data, S(500), kSmss}));
}

TEST(SackScoreboard, RangeCapDropsTheSmallestWithoutInventingSackedData) {
  SackScoreboard sb(sb_config(4));
  std::vector<SackBlock> given;
  std::uint32_t sizes[] = {300, 50, 400, 20, 500, 100};
  for (std::uint32_t i = 0; i < 6; ++i) {
    SackBlock b = B(1000 * (i + 1), 1000 * (i + 1) + sizes[i]);
    given.push_back(b);
    std::vector<SackBlock> one{b};
    (void)sb.update(S(0), S(10000), one);
    EXPECT_LE(sb.range_count(), 4u);
  }
  EXPECT_EQ(sb.stats().ranges_dropped, 2u);
  // The two smallest (20 and 50 bytes) were forgotten; every kept range is
  // exactly one that was SACKed.
  EXPECT_EQ(ranges_of(sb), (std::vector<Range>{{S(1000), S(1300)},
                                               {S(3000), S(3400)},
                                               {S(5000), S(5500)},
                                               {S(6000), S(6100)}}));
  EXPECT_EQ(sb.sacked_bytes(), 300u + 400u + 500u + 100u);
  for (const Range& x : sb.ranges()) {
    bool known = std::any_of(given.begin(), given.end(),
                             [&](const SackBlock& b) { return b.left == x.start && b.right == x.end; });
    EXPECT_TRUE(known);
  }
}

TEST(SackScoreboard, ClearForgetsEverything) {
  SackScoreboard sb(sb_config());
  std::vector<SackBlock> blocks{B(1000, 2000), B(3000, 4000)};
  (void)sb.update(S(0), S(10000), blocks);
  (void)sb.enter_recovery(S(10000));
  sb.clear();
  EXPECT_EQ(sb.range_count(), 0u);
  EXPECT_EQ(sb.sacked_bytes(), 0u);
  EXPECT_FALSE(sb.in_recovery());
  EXPECT_EQ(sb.snd_una(), S(0));
  EXPECT_EQ(sb.pipe(S(10000)), 10000u);
}

// The scoreboard against a byte-by-byte model of RFC 6675's definitions.
TEST(SackScoreboard, MatchesAByteModelInRandomRuns) {
  std::mt19937 rng(42);
  for (int run = 0; run < 20; ++run) {
    SackScoreboard sb(sb_config());
    std::uint32_t una = 0;  // offsets from kBase
    std::uint32_t max = 12000;
    std::vector<bool> sacked;  // index: offset - una
    std::uint32_t high_rxt = 0;
    auto model_sacked = [&](std::uint32_t off) { return off >= una && off < max && sacked[off - una]; };
    for (int step = 0; step < 60; ++step) {
      // Maybe advance SND.UNA and SND.MAX.
      if (rng() % 4 == 0) {
        std::uint32_t adv = rng() % 1500;
        std::vector<bool> next(sacked.begin() + std::min<std::size_t>(adv, sacked.size()), sacked.end());
        sacked.swap(next);
        una += adv;
      }
      max += rng() % 1200;
      if (max < una) max = una;
      sacked.resize(max - una, false);
      high_rxt = std::max(high_rxt, una);
      // Up to four blocks inside (una, max]; the first is never a D-SACK.
      std::vector<SackBlock> blocks;
      int n = static_cast<int>(rng() % 5);
      for (int i = 0; i < n && max > una; ++i) {
        std::uint32_t a = una + rng() % (max - una);
        std::uint32_t len = 1 + rng() % 1500;
        std::uint32_t b = std::min(a + len, max);
        blocks.push_back(B(a, b));
      }
      if (blocks.size() > 1 && blocks[1].left <= blocks[0].left && blocks[0].right <= blocks[1].right) {
        std::swap(blocks[0], blocks[1]);
      }
      if (blocks.size() > 1 && blocks[1].left <= blocks[0].left && blocks[0].right <= blocks[1].right) {
        blocks.erase(blocks.begin());  // identical blocks: keep one
      }
      std::uint32_t fresh = 0;
      for (const SackBlock& b : blocks) {
        for (std::uint32_t o = b.left.raw() - kBase; o != b.right.raw() - kBase; ++o) {
          if (!sacked[o - una]) ++fresh;
          sacked[o - una] = true;
        }
      }
      auto r = sb.update(S(una), S(max), blocks);
      ASSERT_EQ(r.newly_sacked, fresh);
      // Occasionally a retransmission moves HighRxt.
      if (rng() % 3 == 0 && max > una) {
        std::uint32_t a = una + rng() % (max - una);
        std::uint32_t len = 1 + rng() % 1000;
        sb.on_retransmit(S(a), len);
        high_rxt = std::max(high_rxt, a + len);
      }
      // Ranges = runs of the model.
      std::vector<Range> runs;
      std::uint32_t total = 0;
      for (std::uint32_t o = una; o < max; ++o) {
        if (!model_sacked(o)) continue;
        ++total;
        if (!runs.empty() && runs.back().end == S(o)) {
          runs.back().end = S(o + 1);
        } else {
          runs.push_back({S(o), S(o + 1)});
        }
      }
      ASSERT_EQ(ranges_of(sb), runs) << "run " << run << " step " << step;
      ASSERT_EQ(sb.sacked_bytes(), total);
      // IsLost per RFC 6675 section 4, byte by byte: for every offset, the
      // SACKed bytes and the SACKed runs strictly above it (one sweep down).
      std::uint32_t n_bytes = max - una;
      std::vector<std::uint32_t> bytes_above(n_bytes + 1, 0);
      std::vector<std::uint32_t> runs_above(n_bytes + 1, 0);
      for (std::uint32_t i = n_bytes; i-- > 0;) {
        bool next = i + 1 < n_bytes && sacked[i + 1];
        bool after = i + 2 < n_bytes && sacked[i + 2];
        bytes_above[i] = bytes_above[i + 1] + (next ? 1 : 0);
        runs_above[i] = runs_above[i + 1] + (next && !after ? 1 : 0);
      }
      auto model_lost = [&](std::uint32_t seq) {
        std::uint32_t i = seq - una;
        return runs_above[i] >= 3 || bytes_above[i] > 2 * kSmss;
      };
      // SetPipe, byte by byte.
      std::uint32_t pipe = 0;
      for (std::uint32_t o = una; o < max; ++o) {
        if (model_sacked(o)) continue;
        if (!model_lost(o)) ++pipe;
        if (o < high_rxt) ++pipe;
      }
      ASSERT_EQ(sb.pipe(S(max)), pipe) << "run " << run << " step " << step;
      for (int k = 0; k < 5 && max > una; ++k) {
        std::uint32_t o = una + rng() % (max - una);
        ASSERT_EQ(sb.is_lost(S(o)), model_lost(o)) << "offset " << o;
        ASSERT_EQ(sb.is_sacked(S(o)), model_sacked(o)) << "offset " << o;
      }
    }
  }
}

// ---- reassembly -------------------------------------------------------------

// The stream's byte at a sequence number: every byte is checkable.
std::byte stream_byte(SeqNum s) {
  std::uint32_t v = s.raw();
  return std::byte(static_cast<unsigned char>((v * 131u) ^ (v >> 8) ^ (v >> 19)));
}

// The stream's bytes [from, from + len) as a Msg, spread over `pieces`
// fragments.
Msg segment(SeqNum from, std::uint32_t len, std::uint32_t pieces = 1) {
  std::vector<std::byte> v(len);
  for (std::uint32_t i = 0; i < len; ++i) v[i] = stream_byte(from + i);
  Msg m;
  std::uint32_t off = 0;
  for (std::uint32_t p = 0; p < pieces; ++p) {
    std::uint32_t n = p + 1 == pieces ? len - off : len / pieces;
    m.join(Msg::copy_of(std::span(v).subspan(off, n), 0));
    off += n;
  }
  return m;
}

// True when `m` holds exactly the stream's bytes from `from` on.
::testing::AssertionResult is_stream(const Msg& m, SeqNum from) {
  std::vector<std::byte> v(m.size());
  if (!m.copy_out(0, v).ok()) return ::testing::AssertionFailure() << "copy_out failed";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != stream_byte(from + static_cast<std::uint32_t>(i))) {
      return ::testing::AssertionFailure() << "byte " << i << " of " << v.size() << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

constexpr std::uint32_t kWindow = 65535;

TEST(Reassembly, InOrderDataComesStraightBack) {
  Reassembly q;
  SeqNum rcv_nxt = S(0);
  auto r = q.insert(S(0), segment(S(0), 1000), rcv_nxt, kWindow);
  EXPECT_EQ(r.queued, 1000u);
  Msg m = q.take_in_order(rcv_nxt);
  EXPECT_EQ(m.size(), 1000u);
  EXPECT_TRUE(is_stream(m, S(0)));
  EXPECT_EQ(rcv_nxt, S(1000));
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(q.take_in_order(rcv_nxt).empty());
}

TEST(Reassembly, OutOfOrderSegmentsWaitForTheHole) {
  Reassembly q;
  SeqNum rcv_nxt = S(0);
  (void)q.insert(S(3000), segment(S(3000), 1000), rcv_nxt, kWindow);
  (void)q.insert(S(1000), segment(S(1000), 1000), rcv_nxt, kWindow);
  EXPECT_EQ(q.range_count(), 2u);
  EXPECT_EQ(q.queued_bytes(), 2000u);
  EXPECT_TRUE(q.take_in_order(rcv_nxt).empty());
  EXPECT_EQ(rcv_nxt, S(0));
  // Filling [0, 1000) makes [0, 2000) contiguous; [3000, 4000) still waits.
  (void)q.insert(S(0), segment(S(0), 1000), rcv_nxt, kWindow);
  EXPECT_EQ(q.range_count(), 2u);
  Msg m = q.take_in_order(rcv_nxt);
  EXPECT_EQ(m.size(), 2000u);
  EXPECT_TRUE(is_stream(m, S(0)));
  EXPECT_EQ(rcv_nxt, S(2000));
  EXPECT_EQ(q.range_count(), 1u);
  (void)q.insert(S(2000), segment(S(2000), 1000), rcv_nxt, kWindow);
  m = q.take_in_order(rcv_nxt);
  EXPECT_EQ(m.size(), 2000u);  // [2000, 4000), across the wrap
  EXPECT_TRUE(is_stream(m, S(2000)));
  EXPECT_EQ(rcv_nxt, S(4000));
  EXPECT_EQ(q.queued_bytes(), 0u);
}

TEST(Reassembly, QueuedBytesWinOverlaps) {
  Reassembly q;
  SeqNum rcv_nxt = S(0);
  (void)q.insert(S(1000), segment(S(1000), 1000), rcv_nxt, kWindow);
  // A segment [500, 2500) whose bytes are all 0xEE: only the gaps
  // [500, 1000) and [2000, 2500) may come from it.
  std::vector<std::byte> junk(2000, std::byte{0xEE});
  auto r = q.insert(S(500), Msg::copy_of(junk), rcv_nxt, kWindow);
  EXPECT_EQ(r.queued, 1000u);
  EXPECT_EQ(r.duplicate, 1000u);
  ASSERT_TRUE(r.dsack.has_value());
  EXPECT_EQ(*r.dsack, B(1000, 2000));
  EXPECT_EQ(q.range_count(), 1u);
  ASSERT_EQ(q.blocks()[0].start, S(500));
  const Msg& held = q.blocks()[0].data;
  ASSERT_EQ(held.size(), 2000u);
  std::vector<std::byte> v(2000);
  ASSERT_TRUE(held.copy_out(0, v).ok());
  for (std::uint32_t i = 0; i < 2000; ++i) {
    bool old = i >= 500 && i < 1500;
    ASSERT_EQ(v[i], old ? stream_byte(S(500 + i)) : std::byte{0xEE}) << i;
  }
}

TEST(Reassembly, OneSegmentFillsSeveralHoles) {
  Reassembly q;
  SeqNum rcv_nxt = S(0);
  for (std::uint32_t at : {1000u, 3000u, 5000u}) (void)q.insert(S(at), segment(S(at), 1000), rcv_nxt, kWindow);
  EXPECT_EQ(q.range_count(), 3u);
  auto r = q.insert(S(0), segment(S(0), 7000, 3), rcv_nxt, kWindow);
  EXPECT_EQ(r.queued, 4000u);
  EXPECT_EQ(r.duplicate, 3000u);
  EXPECT_EQ(q.range_count(), 1u);
  EXPECT_EQ(q.queued_bytes(), 7000u);
  Msg m = q.take_in_order(rcv_nxt);
  EXPECT_EQ(m.size(), 7000u);
  EXPECT_TRUE(is_stream(m, S(0)));
  EXPECT_EQ(rcv_nxt, S(7000));
}

TEST(Reassembly, DropsWhatIsBelowRcvNxtOrBeyondTheWindow) {
  Reassembly q;
  SeqNum rcv_nxt = S(1000);
  auto r = q.insert(S(0), segment(S(0), 1500), rcv_nxt, 3000);
  EXPECT_EQ(r.duplicate, 1000u);
  EXPECT_EQ(r.queued, 500u);
  ASSERT_TRUE(r.dsack.has_value());
  EXPECT_EQ(*r.dsack, B(0, 1000));  // RFC 2883: below the cumulative ACK
  r = q.insert(S(0), segment(S(0), 800), rcv_nxt, 3000);  // entirely old
  EXPECT_EQ(r.duplicate, 800u);
  EXPECT_EQ(r.queued, 0u);
  // The window ends at 4000.
  r = q.insert(S(3000), segment(S(3000), 2000), rcv_nxt, 3000);
  EXPECT_EQ(r.queued, 1000u);
  EXPECT_EQ(r.beyond_window, 1000u);
  r = q.insert(S(5000), segment(S(5000), 100), rcv_nxt, 3000);
  EXPECT_EQ(r.beyond_window, 100u);
  EXPECT_EQ(r.queued, 0u);
  r = q.insert(S(1500), segment(S(1500), 10), rcv_nxt, 0);  // zero window
  EXPECT_EQ(r.beyond_window, 10u);
  EXPECT_EQ(q.queued_bytes(), 1500u);
  EXPECT_TRUE(q.insert(S(2000), Msg(), rcv_nxt, 3000).queued == 0);
  Msg m = q.take_in_order(rcv_nxt);
  EXPECT_TRUE(is_stream(m, S(1000)));
  EXPECT_EQ(m.size(), 500u);
}

TEST(Reassembly, RcvNxtMovedByTheCallerTrimsTheQueue) {
  Reassembly q;
  SeqNum rcv_nxt = S(0);
  (void)q.insert(S(1000), segment(S(1000), 2000), rcv_nxt, kWindow);
  (void)q.insert(S(4000), segment(S(4000), 500), rcv_nxt, kWindow);
  // The caller took [0, 1500) straight from the wire.
  rcv_nxt = S(1500);
  Msg m = q.take_in_order(rcv_nxt);
  EXPECT_EQ(m.size(), 1500u);
  EXPECT_TRUE(is_stream(m, S(1500)));
  EXPECT_EQ(rcv_nxt, S(3000));
  rcv_nxt = S(5000);
  EXPECT_TRUE(q.take_in_order(rcv_nxt).empty());
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.queued_bytes(), 0u);
}

TEST(Reassembly, BlockCapDropsNewIslandsButKeepsExtensions) {
  ReassemblyConfig cfg;
  cfg.max_blocks = 2;
  Reassembly q(cfg);
  SeqNum rcv_nxt = S(0);
  (void)q.insert(S(1000), segment(S(1000), 100), rcv_nxt, kWindow);
  (void)q.insert(S(2000), segment(S(2000), 100), rcv_nxt, kWindow);
  auto r = q.insert(S(3000), segment(S(3000), 100), rcv_nxt, kWindow);
  EXPECT_EQ(r.no_room, 100u);
  EXPECT_EQ(r.queued, 0u);
  r = q.insert(S(1100), segment(S(1100), 100), rcv_nxt, kWindow);  // extends a block
  EXPECT_EQ(r.queued, 100u);
  r = q.insert(S(1200), segment(S(1200), 800), rcv_nxt, kWindow);  // joins both
  EXPECT_EQ(r.queued, 800u);
  EXPECT_EQ(q.range_count(), 1u);
  r = q.insert(S(3000), segment(S(3000), 100), rcv_nxt, kWindow);
  EXPECT_EQ(r.queued, 100u);
}

TEST(Reassembly, NeverCopiesPayload) {
  Reassembly q;
  SeqNum rcv_nxt = S(0);
  std::vector<Msg> segs;
  for (std::uint32_t at : {4000u, 1000u, 500u, 2500u, 0u, 3000u, 1500u}) segs.push_back(segment(S(at), 1200, 2));
  std::uint32_t starts[] = {4000u, 1000u, 500u, 2500u, 0u, 3000u, 1500u};
  std::uint64_t created = Buf::created();
  Msg out;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    (void)q.insert(S(starts[i]), std::move(segs[i]), rcv_nxt, kWindow);
    out.join(q.take_in_order(rcv_nxt));
  }
  EXPECT_EQ(Buf::created(), created) << "split, trim and join only move references";
  EXPECT_EQ(rcv_nxt, S(5200));
  EXPECT_TRUE(is_stream(out, S(0)));
}

TEST(Reassembly, SackBlocksFollowRfc2018Section4) {
  Reassembly q;
  SeqNum rcv_nxt = S(0);
  std::array<SackBlock, 3> out{};
  auto sack = [&]() {
    std::size_t n = q.sack_blocks(out);
    return std::vector<SackBlock>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
  };
  (void)q.insert(S(1000), segment(S(1000), 500), rcv_nxt, kWindow);
  EXPECT_EQ(sack(), (std::vector<SackBlock>{B(1000, 1500)}));
  (void)q.insert(S(3000), segment(S(3000), 500), rcv_nxt, kWindow);
  EXPECT_EQ(sack(), (std::vector<SackBlock>{B(3000, 3500), B(1000, 1500)}));
  (void)q.insert(S(5000), segment(S(5000), 500), rcv_nxt, kWindow);
  (void)q.insert(S(7000), segment(S(7000), 500), rcv_nxt, kWindow);
  // Only 3 fit: the newest first, then the most recent others.
  EXPECT_EQ(sack(), (std::vector<SackBlock>{B(7000, 7500), B(5000, 5500), B(3000, 3500)}));
  // A duplicate inside [1000, 1500) triggers this ACK: its block goes first.
  auto r = q.insert(S(1100), segment(S(1100), 200), rcv_nxt, kWindow);
  EXPECT_EQ(r.duplicate, 200u);
  EXPECT_EQ(sack(), (std::vector<SackBlock>{B(1000, 1500), B(7000, 7500), B(5000, 5500)}));
  // A segment extending [3000, 3500): the grown block is reported.
  (void)q.insert(S(3500), segment(S(3500), 500), rcv_nxt, kWindow);
  EXPECT_EQ(sack(), (std::vector<SackBlock>{B(3000, 4000), B(1000, 1500), B(7000, 7500)}));
  // With a D-SACK (RFC 2883) it goes first and the rest follow.
  std::array<SackBlock, 4> four{};
  std::size_t n = q.sack_blocks(four, r.dsack);
  ASSERT_EQ(n, 4u);
  EXPECT_EQ(four[0], B(1100, 1300));
  EXPECT_EQ(four[1], B(3000, 4000));
  EXPECT_EQ(four[2], B(1000, 1500));
  EXPECT_EQ(four[3], B(7000, 7500));
  // The hole before 1000 is filled and delivered: that block is gone.
  (void)q.insert(S(0), segment(S(0), 1000), rcv_nxt, kWindow);
  Msg m = q.take_in_order(rcv_nxt);
  EXPECT_EQ(rcv_nxt, S(1500));
  EXPECT_EQ(sack(), (std::vector<SackBlock>{B(3000, 4000), B(7000, 7500), B(5000, 5500)}));
  // Blocks not in the recent history fill spare room in sequence order.
  std::array<SackBlock, 4> wide{};
  EXPECT_EQ(q.sack_blocks(wide), 3u);
  std::array<SackBlock, 1> one{};
  EXPECT_EQ(q.sack_blocks(one), 1u);
  EXPECT_EQ(one[0], B(3000, 4000));
  EXPECT_EQ(q.sack_blocks(std::span<SackBlock>{}), 0u);
}

TEST(Reassembly, ClearDropsEverything) {
  Reassembly q;
  SeqNum rcv_nxt = S(0);
  std::int64_t live = Buf::live();
  (void)q.insert(S(1000), segment(S(1000), 500), rcv_nxt, kWindow);
  (void)q.insert(S(3000), segment(S(3000), 500, 3), rcv_nxt, kWindow);
  EXPECT_GT(Buf::live(), live);
  q.clear();
  EXPECT_EQ(Buf::live(), live);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.queued_bytes(), 0u);
  std::array<SackBlock, 4> out{};
  EXPECT_EQ(q.sack_blocks(out), 0u);
}

// Random segments (overlapping, duplicated, reordered, some beyond the
// window, some in several fragments) across the wrap, against a model.
TEST(Reassembly, RandomArrivalsRebuildTheStreamByteForByte) {
  std::mt19937 rng(2024);
  for (int run = 0; run < 40; ++run) {
    const std::uint32_t total = 60000;
    const std::uint32_t window = 16384;
    const SeqNum start = SeqNum(0xFFFFFFFFu - 20000 + static_cast<std::uint32_t>(run) * 997);
    Reassembly q;
    SeqNum rcv_nxt = start;
    std::vector<bool> have(total, false);  // the model: bytes held or delivered
    std::uint32_t delivered = 0;
    Msg out;
    int guard = 0;
    while (delivered < total && ++guard < 200000) {
      // Starting from up to 2500 bytes before RCV.NXT (cut at the stream's
      // start) to 4000 bytes past the window.
      std::int64_t from = std::int64_t{delivered} - 2500 + static_cast<std::int64_t>(rng() % (window + 6500));
      std::int64_t to = from + 1 + static_cast<std::int64_t>(rng() % 2500);
      from = std::max<std::int64_t>(from, 0);
      to = std::min<std::int64_t>(to, total);
      if (to <= from) continue;
      std::uint32_t off = static_cast<std::uint32_t>(from);
      std::uint32_t len = static_cast<std::uint32_t>(to - from);
      std::uint32_t pieces = 1 + rng() % 3;
      if (pieces > len) pieces = 1;
      auto r = q.insert(start + off, segment(start + off, len, pieces), rcv_nxt, window);
      // Check the accounting against the model.
      std::uint32_t queued = 0;
      std::uint32_t dup = 0;
      std::uint32_t beyond = 0;
      std::optional<SackBlock> first_dup;  // the first run of duplicates (D-SACK)
      bool run_closed = false;
      for (std::uint32_t o = off; o < off + len; ++o) {
        bool is_dup = o < delivered || have[o];
        if (is_dup && !first_dup) {
          first_dup = SackBlock{start + o, start + o + 1};
        } else if (is_dup && !run_closed) {
          first_dup->right = start + o + 1;
        } else if (!is_dup && first_dup) {
          run_closed = true;
        }
        if (is_dup) {
          ++dup;
        } else if (o >= delivered + window) {
          ++beyond;
        } else {
          ++queued;
          have[o] = true;
        }
      }
      ASSERT_EQ(r.queued, queued);
      ASSERT_EQ(r.duplicate, dup);
      ASSERT_EQ(r.beyond_window, beyond);
      ASSERT_EQ(r.no_room, 0u);
      ASSERT_EQ(r.dsack, first_dup);
      Msg m = q.take_in_order(rcv_nxt);
      std::uint32_t before = delivered;
      while (delivered < total && have[delivered]) ++delivered;
      ASSERT_EQ(m.size(), delivered - before);
      ASSERT_EQ(rcv_nxt, start + delivered);
      out.join(std::move(m));
      // Queue shape: held bytes above rcv_nxt and their runs.
      std::size_t held = 0;
      std::size_t runs = 0;
      for (std::uint32_t o = delivered; o < std::min(total, delivered + window); ++o) {
        if (!have[o]) continue;
        ++held;
        if (o == delivered || !have[o - 1]) ++runs;
      }
      ASSERT_EQ(q.queued_bytes(), held);
      ASSERT_EQ(q.range_count(), runs);
      for (const Reassembly::Block& b : q.blocks()) ASSERT_TRUE(is_stream(b.data, b.start));
      std::array<SackBlock, 4> blocks{};
      std::size_t n = q.sack_blocks(blocks);
      ASSERT_EQ(n, std::min<std::size_t>(runs, 4));
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t a = static_cast<std::uint32_t>(blocks[i].left - start);
        std::uint32_t b = static_cast<std::uint32_t>(blocks[i].right - start);
        ASSERT_TRUE(have[a] && (a == 0 || !have[a - 1]));  // a block's exact edges
        ASSERT_TRUE(have[b - 1] && (b == total || !have[b]));
      }
    }
    ASSERT_EQ(delivered, total) << "run " << run;
    ASSERT_EQ(out.size(), total);
    ASSERT_TRUE(is_stream(out, start));
    ASSERT_TRUE(q.empty());
  }
}

}  // namespace
}  // namespace xk::tcp

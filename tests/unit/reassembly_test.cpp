// The reassembler both IP layers share (xk/protocols/reassembly.hpp), keyed
// here as IPv6 keys its datagrams (RFC 8200 4.5: source, destination,
// identification); ipv4_test covers it behind IPv4 and scapy's fragments.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "xk/clock.hpp"
#include "xk/ip_addr.hpp"
#include "xk/protocols/reassembly.hpp"

namespace xk::ip {
namespace {

struct V6Key {
  IpAddr::Bytes src{};
  IpAddr::Bytes dst{};
  std::uint32_t id = 0;
  friend bool operator==(const V6Key&, const V6Key&) = default;
};

using Bytes = std::vector<std::byte>;

Bytes pattern(std::size_t n, unsigned seed) {
  Bytes v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte{static_cast<std::uint8_t>(i * 7 + seed)};
  return v;
}

Bytes contents(const Msg& m) {
  Bytes out(m.size());
  EXPECT_TRUE(m.copy_out(0, out).ok());
  return out;
}

struct ReassemblyTest : ::testing::Test {
  ManualClock clock;
  TimerWheel timers{clock};
  CounterSet counters{"reasm"};
  ReasmCounters c{counters.add("ok"),      counters.add("bad_len"), counters.add("too_big"),
                  counters.add("overlap"), counters.add("timeout"), counters.add("mem")};
  ReasmLimits limits{65535, 4u << 20, std::chrono::seconds(60)};
  Reassembler<V6Key> r{timers, limits, c};
  std::optional<Reassembler<V6Key>::Whole> whole;

  V6Key key(std::uint32_t id) {
    V6Key k;
    k.src[0] = 0x20;
    k.dst[0] = 0x20;
    k.id = id;
    return k;
  }
  ReasmOutcome add(std::uint32_t id, const Bytes& data, std::size_t begin, std::size_t len, bool more,
                   const Bytes& head = {}) {
    return r.add(key(id), begin, more, Msg::copy_of(std::span(data).subspan(begin, len)), head, whole);
  }
  std::uint64_t n(const char* name) const { return counters.value(name); }
};

TEST_F(ReassemblyTest, FragmentsInAnyOrderMakeTheDatagram) {
  const Bytes data = pattern(4000, 3);
  const Bytes head = pattern(48, 9);  // an IPv6 header and a hop-by-hop header
  std::vector<std::size_t> order{0, 1, 2, 3};
  std::mt19937 rng(7);
  for (int round = 0; round < 6; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    whole.reset();
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[k];
      const std::size_t len = i == 3 ? 4000 - 3 * 1232 : 1232;
      const ReasmOutcome o = add(1, data, i * 1232, len, i != 3, i == 0 ? head : Bytes{});
      EXPECT_EQ(o, k + 1 == order.size() ? ReasmOutcome::complete : ReasmOutcome::held) << round << " " << k;
    }
    ASSERT_TRUE(whole.has_value());
    EXPECT_EQ(contents(whole->payload), data);
    EXPECT_EQ(whole->first_head, head);
    EXPECT_EQ(r.size(), 0u);
    EXPECT_EQ(r.memory(), 0u);
  }
  EXPECT_EQ(n("ok"), 6u);
}

TEST_F(ReassemblyTest, OverlapsAndDuplicatesPoisonTheDatagram) {
  const Bytes data = pattern(3000, 1);
  EXPECT_EQ(add(1, data, 0, 1000, true), ReasmOutcome::held);
  EXPECT_EQ(add(1, data, 992, 1000, true), ReasmOutcome::overlap);  // 8 bytes over
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(add(2, data, 1000, 1000, true), ReasmOutcome::held);
  EXPECT_EQ(add(2, data, 1000, 1000, true), ReasmOutcome::overlap);  // an exact duplicate
  // The rest of a poisoned datagram starts a new one that never completes.
  EXPECT_EQ(add(2, data, 2000, 1000, false), ReasmOutcome::held);
  EXPECT_EQ(n("overlap"), 2u);
  EXPECT_EQ(n("ok"), 0u);
}

TEST_F(ReassemblyTest, LengthsMustAgree) {
  const Bytes data = pattern(3000, 2);
  EXPECT_EQ(add(1, data, 0, 1001, true), ReasmOutcome::bad_length);  // not a multiple of 8
  EXPECT_EQ(add(2, data, 0, 0, true), ReasmOutcome::bad_length);     // empty, more to come
  EXPECT_EQ(add(3, data, 1000, 1000, false), ReasmOutcome::held);
  EXPECT_EQ(add(3, data, 2000, 8, false), ReasmOutcome::bad_length);  // a second, different last
  EXPECT_EQ(add(4, data, 1000, 1000, false), ReasmOutcome::held);
  EXPECT_EQ(add(4, data, 2000, 1000, true), ReasmOutcome::bad_length);  // past the last
  EXPECT_EQ(add(5, data, 2000, 1000, true), ReasmOutcome::held);
  EXPECT_EQ(add(5, data, 0, 1000, false), ReasmOutcome::bad_length);  // a last one before data
  EXPECT_EQ(n("bad_len"), 5u);
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(r.memory(), 0u);
}

TEST_F(ReassemblyTest, NothingGrowsPastTheLargestDatagram) {
  const Bytes data = pattern(65536, 4);
  EXPECT_EQ(add(1, data, 65528, 8, false), ReasmOutcome::too_big);
  EXPECT_EQ(add(1, data, 65528, 7, false), ReasmOutcome::held);
  EXPECT_EQ(n("too_big"), 1u);
}

TEST_F(ReassemblyTest, AnIncompleteDatagramExpires) {
  const Bytes data = pattern(2000, 5);
  EXPECT_EQ(add(1, data, 0, 1000, true), ReasmOutcome::held);
  clock.advance(std::chrono::seconds(59));
  timers.advance();
  EXPECT_EQ(r.size(), 1u);
  clock.advance(std::chrono::seconds(2));
  timers.advance();
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(r.memory(), 0u);
  EXPECT_EQ(n("timeout"), 1u);
  // Its second half alone completes nothing.
  EXPECT_EQ(add(1, data, 1000, 1000, false), ReasmOutcome::held);
}

TEST(Reassembly, TheOldestGivesWayWhenMemoryRunsOut) {
  ManualClock clock;
  TimerWheel timers{clock};
  CounterSet counters{"reasm"};
  ReasmCounters c{counters.add("ok"),      counters.add("bad_len"), counters.add("too_big"),
                  counters.add("overlap"), counters.add("timeout"), counters.add("mem")};
  // Room for about three held fragments.
  const std::size_t one = truesize(Msg::copy_of(pattern(1024, 0)));
  Reassembler<std::uint32_t> r{timers, ReasmLimits{65535, 3 * one + one / 2, std::chrono::seconds(60)}, c};
  std::optional<Reassembler<std::uint32_t>::Whole> whole;
  const Bytes data = pattern(1024, 6);
  for (std::uint32_t id = 1; id <= 5; ++id) {
    EXPECT_EQ(r.add(id, 0, true, Msg::copy_of(data), {}, whole), ReasmOutcome::held);
    EXPECT_LE(r.memory(), 3 * one + one / 2);
  }
  EXPECT_EQ(r.size(), 3u);
  EXPECT_EQ(counters.value("mem"), 2u);
  // Datagrams 1 and 2 went: their last fragments start a new one each.
  EXPECT_EQ(r.add(5, 1024, false, Msg::copy_of(data), {}, whole), ReasmOutcome::complete);
  EXPECT_EQ(r.add(1, 1024, false, Msg::copy_of(data), {}, whole), ReasmOutcome::held);
  // One fragment larger than all the memory is refused.
  EXPECT_EQ(r.add(9, 0, true, Msg::copy_of(pattern(8 * one, 1)), {}, whole), ReasmOutcome::no_memory);
}

}  // namespace
}  // namespace xk::ip

#include "xk/ring.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace xk {
namespace {

// Counts live instances, so a test can see that the ring destroys what it holds.
struct Tracked {
  static inline std::atomic<int> live{0};
  explicit Tracked(int v) noexcept : value(v) { ++live; }
  Tracked(Tracked&& o) noexcept : value(o.value) { ++live; }
  Tracked(const Tracked&) = delete;
  Tracked& operator=(const Tracked&) = delete;
  ~Tracked() { --live; }
  int value;
};

template <class Ring>
class RingBasics : public ::testing::Test {};

using RingTypes = ::testing::Types<MpmcRing<int>, SpscRing<int>>;
TYPED_TEST_SUITE(RingBasics, RingTypes);

TYPED_TEST(RingBasics, CapacityIsAPowerOfTwo) {
  EXPECT_EQ(TypeParam(1).capacity(), 2u);
  EXPECT_EQ(TypeParam(2).capacity(), 2u);
  EXPECT_EQ(TypeParam(5).capacity(), 8u);
  EXPECT_EQ(TypeParam(1024).capacity(), 1024u);
  EXPECT_THROW(TypeParam(0), std::invalid_argument);
}

TYPED_TEST(RingBasics, FullAndEmpty) {
  TypeParam ring(8);
  EXPECT_TRUE(ring.empty());
  EXPECT_FALSE(ring.try_pop());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(ring.try_push(i)) << i;
  EXPECT_FALSE(ring.try_push(99));  // full
  EXPECT_FALSE(ring.empty());
  EXPECT_EQ(ring.size_approx(), 8u);
  for (int i = 0; i < 8; ++i) {
    std::optional<int> v = ring.try_pop();
    ASSERT_TRUE(v);
    EXPECT_EQ(*v, i);  // FIFO
  }
  EXPECT_FALSE(ring.try_pop());  // empty again
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.size_approx(), 0u);
  // Room for exactly one after one pop.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(ring.try_push(i));
  ASSERT_TRUE(ring.try_pop());
  EXPECT_TRUE(ring.try_push(8));
  EXPECT_FALSE(ring.try_push(9));
}

TYPED_TEST(RingBasics, WrapsAroundManyLaps) {
  TypeParam ring(4);
  int next_in = 0, next_out = 0;
  for (int lap = 0; lap < 1000; ++lap) {
    int n = 1 + lap % 4;
    for (int i = 0; i < n; ++i) ASSERT_TRUE(ring.try_push(next_in++));
    for (int i = 0; i < n; ++i) {
      std::optional<int> v = ring.try_pop();
      ASSERT_TRUE(v);
      ASSERT_EQ(*v, next_out++);
    }
    ASSERT_TRUE(ring.empty());
  }
}

TEST(Ring, MoveOnlyItemsAreNotConsumedByAFailedPush) {
  MpmcRing<std::unique_ptr<int>> mpmc(2);
  SpscRing<std::unique_ptr<int>> spsc(2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(mpmc.try_push(std::make_unique<int>(i)));
    ASSERT_TRUE(spsc.try_push(std::make_unique<int>(i)));
  }
  auto keep = std::make_unique<int>(42);
  EXPECT_FALSE(mpmc.try_push(std::move(keep)));
  ASSERT_NE(keep, nullptr);
  EXPECT_FALSE(spsc.try_push(std::move(keep)));
  ASSERT_NE(keep, nullptr);
  EXPECT_EQ(**mpmc.try_pop(), 0);
  EXPECT_EQ(**spsc.try_pop(), 0);
}

TEST(Ring, ItemsNeedNoDefaultConstructorAndAreDestroyedWithTheRing) {
  ASSERT_EQ(Tracked::live.load(), 0);
  {
    MpmcRing<Tracked> mpmc(8);
    SpscRing<Tracked> spsc(8);
    EXPECT_EQ(Tracked::live.load(), 0);  // no slot is constructed up front
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(mpmc.try_emplace(i));
      ASSERT_TRUE(spsc.try_emplace(i));
    }
    EXPECT_EQ(Tracked::live.load(), 10);
    {
      std::optional<Tracked> a = mpmc.try_pop();
      std::optional<Tracked> b = spsc.try_pop();
      EXPECT_EQ(a->value, 0);
      EXPECT_EQ(b->value, 0);
    }
    EXPECT_EQ(Tracked::live.load(), 8);
  }
  EXPECT_EQ(Tracked::live.load(), 0);
}

// --- Concurrency ---------------------------------------------------------------

std::uint64_t item(std::uint64_t producer, std::uint64_t seq) { return producer << 32 | seq; }

TEST(Ring, SpscStressDeliversEverythingInOrder) {
  // Sizes keep the test quick on a loaded machine: every full or empty ring
  // costs a yield, which there can mean a whole time slice.
  SpscRing<std::uint64_t> ring(1024);
  const std::uint64_t n = 200000;
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < n; ++i) {
      while (!ring.try_push(i)) std::this_thread::yield();
    }
  });
  std::uint64_t expect = 0;
  bool in_order = true;
  while (expect < n) {
    std::optional<std::uint64_t> v = ring.try_pop();
    if (!v) {
      std::this_thread::yield();
      continue;
    }
    if (*v != expect) in_order = false;
    ++expect;
  }
  producer.join();
  EXPECT_TRUE(in_order);
  EXPECT_TRUE(ring.empty());
}

// Several producers and consumers: every item arrives exactly once, and each
// consumer sees any one producer's items in the order they were pushed.
void mpmc_stress(std::size_t capacity, int producers, int consumers, std::uint64_t per_producer) {
  MpmcRing<std::uint64_t> ring(capacity);
  std::atomic<std::uint64_t> consumed{0};
  const std::uint64_t total = per_producer * static_cast<std::uint64_t>(producers);
  std::vector<std::vector<std::uint64_t>> got(static_cast<std::size_t>(consumers));
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&ring, p, per_producer] {
      for (std::uint64_t i = 0; i < per_producer; ++i) {
        while (!ring.try_push(item(static_cast<std::uint64_t>(p), i))) std::this_thread::yield();
      }
    });
  }
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      std::vector<std::uint64_t>& mine = got[static_cast<std::size_t>(c)];
      while (consumed.load(std::memory_order_relaxed) < total) {
        if (std::optional<std::uint64_t> v = ring.try_pop()) {
          mine.push_back(*v);
          consumed.fetch_add(1, std::memory_order_relaxed);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();

  std::vector<std::vector<std::uint8_t>> seen(static_cast<std::size_t>(producers),
                                              std::vector<std::uint8_t>(per_producer, 0));
  std::uint64_t n = 0;
  for (const auto& mine : got) {
    std::vector<std::int64_t> last(static_cast<std::size_t>(producers), -1);
    for (std::uint64_t v : mine) {
      std::uint64_t p = v >> 32, seq = v & 0xffffffffu;
      ASSERT_LT(p, static_cast<std::uint64_t>(producers));
      ASSERT_LT(seq, per_producer);
      ASSERT_EQ(seen[p][seq], 0) << "duplicate " << p << ":" << seq;
      seen[p][seq] = 1;
      ASSERT_GT(static_cast<std::int64_t>(seq), last[p]) << "producer order broken";
      last[p] = static_cast<std::int64_t>(seq);
      ++n;
    }
  }
  EXPECT_EQ(n, total);  // with no duplicates: every item exactly once
  EXPECT_TRUE(ring.empty());
}

TEST(Ring, MpmcStressManyProducersManyConsumers) { mpmc_stress(1024, 4, 3, 25000); }

// Laps wrap constantly: producers and consumers fight over the same slots.
TEST(Ring, MpmcStressTinyRingAlwaysFull) { mpmc_stress(4, 4, 2, 1500); }

TEST(Ring, MpscStress) { mpmc_stress(4096, 4, 1, 50000); }

}  // namespace
}  // namespace xk

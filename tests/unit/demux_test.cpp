#include "xk/demux.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "xk/endpoint.hpp"

namespace xk {
namespace {

struct FourTuple {
  std::uint32_t local_ip;
  std::uint32_t remote_ip;
  std::uint16_t local_port;
  std::uint16_t remote_port;
  friend bool operator==(const FourTuple&, const FourTuple&) = default;
};

// A hash that sends every key home to slot 0: long probe runs and wrap-around.
struct TerribleHash {
  std::uint64_t operator()(std::uint32_t) const noexcept { return 0; }
};

TEST(FlatMap, InsertFindErase) {
  FlatMap<std::uint32_t, int> m;
  EXPECT_EQ(m.find(1), nullptr);
  auto [v, fresh] = m.insert(1, 10);
  EXPECT_TRUE(fresh);
  EXPECT_EQ(*v, 10);
  auto [v2, fresh2] = m.insert(1, 20);
  EXPECT_FALSE(fresh2) << "a duplicate key must not replace the entry";
  EXPECT_EQ(*v2, 10);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_TRUE(m.erase(1));
  EXPECT_FALSE(m.erase(1));
  EXPECT_EQ(m.find(1), nullptr);
  EXPECT_TRUE(m.empty());
}

TEST(FlatMap, MatchesStdUnorderedMapUnderRandomChurn) {
  FlatMap<FourTuple, std::uint64_t> m;
  std::unordered_map<std::uint64_t, std::uint64_t> model;  // key packed to 64 bits
  auto pack = [](const FourTuple& k) {
    return (std::uint64_t(k.remote_ip & 0xff) << 32) | (std::uint64_t(k.local_port) << 16) | k.remote_port;
  };
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    FourTuple k{0xC0000201, 0xC6336400 | static_cast<std::uint32_t>(rng() % 4),
                static_cast<std::uint16_t>(rng() % 64), static_cast<std::uint16_t>(rng() % 64)};
    std::uint64_t value = rng();
    switch (rng() % 3) {
      case 0: {
        bool fresh = m.insert(k, value).second;
        bool model_fresh = model.emplace(pack(k), value).second;
        ASSERT_EQ(fresh, model_fresh);
        break;
      }
      case 1:
        ASSERT_EQ(m.erase(k), model.erase(pack(k)) == 1);
        break;
      case 2: {
        auto* v = m.find(k);
        auto it = model.find(pack(k));
        ASSERT_EQ(v != nullptr, it != model.end());
        if (v != nullptr) {
          ASSERT_EQ(*v, it->second);
        }
        break;
      }
    }
    ASSERT_EQ(m.size(), model.size());
  }
  std::size_t visited = 0;
  m.for_each([&](const FourTuple& k, std::uint64_t& v) {
    ++visited;
    ASSERT_EQ(model.at(pack(k)), v);
  });
  EXPECT_EQ(visited, model.size());
}

TEST(FlatMap, BackwardShiftKeepsCollidingKeysReachable) {
  FlatMap<std::uint32_t, std::uint32_t, TerribleHash> m;
  for (std::uint32_t k = 0; k < 12; ++k) m.insert(k, k * 10);
  // Erase from the middle of the single probe run, then everything must still be found.
  for (std::uint32_t k : {3u, 0u, 11u, 6u}) {
    ASSERT_TRUE(m.erase(k));
    for (std::uint32_t j = 0; j < 12; ++j) {
      bool gone = j == 3 || j == 0 || j == 11 || j == 6;
      if (j == k || gone) continue;
      auto* v = m.find(j);
      ASSERT_NE(v, nullptr) << "lost key " << j << " after erasing " << k;
      EXPECT_EQ(*v, j * 10);
    }
  }
}

TEST(FlatMap, GrowsAndKeepsLoadFactorBelowSevenEighths) {
  FlatMap<std::uint64_t, std::uint64_t> m;
  for (std::uint64_t i = 0; i < 100000; ++i) m.insert(i * 7919, i);
  EXPECT_EQ(m.size(), 100000u);
  EXPECT_LE(m.size() * 8, m.capacity() * 7);
  for (std::uint64_t i = 0; i < 100000; ++i) ASSERT_EQ(*m.find(i * 7919), i);
  EXPECT_EQ(m.find(3), nullptr);
}

TEST(FlatMap, ReserveAvoidsRehash) {
  FlatMap<std::uint32_t, int> m(1000);
  std::size_t cap = m.capacity();
  for (std::uint32_t i = 0; i < 1000; ++i) m.insert(i, 0);
  EXPECT_EQ(m.capacity(), cap);
}

TEST(FlatMap, HashedLookupWithPrefetchMatchesFind) {
  FlatMap<std::uint32_t, std::uint32_t> m;
  for (std::uint32_t i = 0; i < 1000; ++i) m.insert(i, i + 1);
  std::uint64_t hashes[16];
  for (std::uint32_t i = 0; i < 16; ++i) {
    hashes[i] = m.hash_of(i * 50);
    m.prefetch(hashes[i]);
  }
  for (std::uint32_t i = 0; i < 16; ++i) {
    auto* v = m.find_hashed(i * 50, hashes[i]);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(*v, i * 50 + 1);
  }
}

class CountingSession final : public Session {
 public:
  explicit CountingSession(Protocol& p) : Session(p, nullptr) {}
  Status push(Msg) override { return {}; }
  Status pop(Session&, Msg) override { return {}; }
};

TEST(ActiveMap, HoldsSessionReferencesUntilErased) {
  Protocol proto("p0", "test");
  std::int64_t live = Session::live();
  ActiveMap<FourTuple> active;
  FourTuple key{1, 2, 3, 4};
  {
    SessionRef s = make_ref<CountingSession>(proto);
    active.insert(key, s);
  }
  EXPECT_EQ(Session::live(), live + 1) << "the map keeps the session alive";
  ASSERT_NE(active.find(key), nullptr);
  active.erase(key);
  EXPECT_EQ(Session::live(), live);
}

// The transports' key (xk/endpoint.hpp); FourTuple above is this file's own.
using Flow = ::xk::FourTuple;

Flow v6_tuple(std::uint8_t local_last, std::uint16_t lport, std::uint8_t remote_last, std::uint16_t rport) {
  IpAddr::Bytes l{0x20, 0x01, 0x0d, 0xb8};
  IpAddr::Bytes r = l;
  l[15] = local_last;
  r[15] = remote_last;
  return Flow{{IpAddr::v6(l), lport}, {IpAddr::v6(r), rport}};
}

TEST(TupleMap, HoldsFlowsOfBothFamiliesAndGivesBackTheirTuples) {
  TupleMap<int> m;
  const Flow a{{Ipv4Addr{0xC0000201}, 80}, {Ipv4Addr{0xC6336407}, 40001}};
  const Flow b = v6_tuple(1, 80, 7, 40001);
  // The v4-mapped twin of a's addresses written as IPv6 bytes is a itself.
  IpAddr::Bytes mapped{};
  mapped[10] = mapped[11] = 0xff;
  mapped[12] = 0xc0, mapped[13] = 0x00, mapped[14] = 0x02, mapped[15] = 0x01;
  EXPECT_EQ(IpAddr::v6(mapped), a.local.addr);
  EXPECT_TRUE(m.insert(a, 1).second);
  EXPECT_TRUE(m.insert(b, 2).second);
  EXPECT_FALSE(m.insert(a, 3).second);
  EXPECT_EQ(m.size(), 2u);
  ASSERT_NE(m.find(a), nullptr);
  EXPECT_EQ(*m.find(a), 1);
  ASSERT_NE(m.find(b), nullptr);
  EXPECT_EQ(*m.find(b), 2);
  // Reversed, or another port: another flow.
  EXPECT_EQ(m.find(Flow{a.remote, a.local}), nullptr);
  EXPECT_EQ(m.find(v6_tuple(1, 80, 7, 40002)), nullptr);
  std::vector<std::pair<Flow, int>> seen;
  m.for_each([&](const Flow& t, int& v) { seen.emplace_back(t, v); });
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [t, v] : seen) EXPECT_EQ(t, v == 1 ? a : b);
  EXPECT_TRUE(m.erase(b));
  EXPECT_FALSE(m.erase(b));
  EXPECT_EQ(m.find(b), nullptr);
  EXPECT_EQ(*m.find(a), 1);
  m.clear();
  EXPECT_TRUE(m.empty());
}

TEST(TupleMap, MatchesAMapOfWholeTuplesUnderChurn) {
  std::mt19937_64 rng(7);
  TupleMap<std::uint64_t> m;
  FlatMap<Flow, std::uint64_t> ref;
  for (int i = 0; i < 20000; ++i) {
    const auto port = static_cast<std::uint16_t>(rng() % 512);
    const Flow t = rng() % 2 == 0 ? Flow{{Ipv4Addr{0xC0000201}, 80}, {Ipv4Addr{0xC6336400u + port % 8}, port}}
                                       : v6_tuple(1, 80, static_cast<std::uint8_t>(port % 8), port);
    if (rng() % 3 == 0) {
      EXPECT_EQ(m.erase(t), ref.erase(t));
    } else {
      EXPECT_EQ(m.insert(t, i).second, ref.insert(t, i).second);
    }
    ASSERT_EQ(m.size(), ref.size());
  }
  ref.for_each([&](const Flow& t, std::uint64_t& v) {
    const std::uint64_t* got = m.find(t);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(*got, v);
  });
}

TEST(EnableTable, CountsRepeatedEnablesAndRefusesASecondProtocol) {
  Protocol upper("up0", "test");
  Protocol other("up1", "test");
  EnableTable<std::uint16_t> passive;
  EXPECT_EQ(passive.upper(80), nullptr);
  ASSERT_TRUE(passive.enable(80, upper).ok());
  EXPECT_EQ(passive.upper(80), &upper);
  EXPECT_EQ(passive.count(80), 1u);
  ASSERT_TRUE(passive.enable(80, upper).ok());
  EXPECT_EQ(passive.count(80), 2u);
  Status taken = passive.enable(80, other);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.error(), Errc::exists);
  Status not_its = passive.disable(80, other);
  ASSERT_FALSE(not_its.ok());
  EXPECT_EQ(not_its.error(), Errc::not_found);
  ASSERT_TRUE(passive.disable(80, upper).ok());
  EXPECT_EQ(passive.upper(80), &upper) << "one enable is left";
  ASSERT_TRUE(passive.disable(80, upper).ok());
  EXPECT_EQ(passive.upper(80), nullptr);
  EXPECT_EQ(passive.size(), 0u);
  EXPECT_EQ(passive.disable(80, upper).error(), Errc::not_found);
  ASSERT_TRUE(passive.enable(80, other).ok()) << "a freed key can be taken by another";
}

}  // namespace
}  // namespace xk

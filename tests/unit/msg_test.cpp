#include "xk/msg.hpp"

#include "xk/copy.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace xk {
namespace {

std::vector<std::byte> pattern(std::size_t n, unsigned seed = 1) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<unsigned char>(i * 31 + seed));
  return v;
}

std::vector<std::byte> contents(const Msg& m) {
  std::vector<std::byte> out(m.size());
  EXPECT_TRUE(m.copy_out(0, out).ok());
  return out;
}

// A message whose bytes are `data` spread over fragments of the given sizes.
Msg chain(const std::vector<std::byte>& data, const std::vector<std::size_t>& sizes) {
  Msg m;
  std::size_t off = 0;
  for (std::size_t n : sizes) {
    Msg part = Msg::copy_of(std::span(data).subspan(off, n), 0);
    m.join(std::move(part));
    off += n;
  }
  EXPECT_EQ(off, data.size());
  return m;
}

TEST(Msg, AllocHasHeadroomAndSize) {
  Msg m = Msg::alloc(100, 64);
  EXPECT_EQ(m.size(), 100u);
  EXPECT_EQ(m.headroom(), 64u);
  EXPECT_EQ(m.fragment_count(), 1u);
}

TEST(Msg, PushInPlaceWritesInFrontWithoutAllocating) {
  auto payload = pattern(32);
  Msg m = Msg::copy_of(payload, 16);
  std::uint64_t before = Buf::created();
  auto h = m.push(8);
  ASSERT_TRUE(h.ok());
  std::fill(h->begin(), h->end(), std::byte{0xAA});
  EXPECT_EQ(Buf::created(), before) << "a push into headroom must not allocate";
  EXPECT_EQ(m.size(), 40u);
  EXPECT_EQ(m.headroom(), 8u);
  EXPECT_EQ(m.fragment_count(), 1u);
  auto bytes = contents(m);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(bytes[i], std::byte{0xAA});
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes.begin() + 8));
}

TEST(Msg, HeadroomExhaustionFailsCleanlyInPlace) {
  Msg m = Msg::alloc(10, 6);
  ASSERT_TRUE(m.push_in_place(4).ok());
  auto r = m.push_in_place(4);  // only 2 bytes left
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Errc::no_headroom);
  EXPECT_EQ(m.size(), 14u) << "a failed push must leave the message unchanged";
  EXPECT_EQ(m.headroom(), 2u);
  ASSERT_TRUE(m.push_in_place(2).ok());
  EXPECT_EQ(m.push_in_place(1).error(), Errc::no_headroom);
}

TEST(Msg, PushWithoutRoomPrependsAFragment) {
  auto payload = pattern(20);
  Msg m = Msg::copy_of(payload, 0);
  auto h = m.push(14);
  ASSERT_TRUE(h.ok());
  std::fill(h->begin(), h->end(), std::byte{0x11});
  EXPECT_EQ(m.fragment_count(), 2u);
  EXPECT_EQ(m.size(), 34u);
  // The new fragment keeps headroom so the next layer pushes in place.
  EXPECT_GE(m.headroom(), 64u);
  std::uint64_t before = Buf::created();
  ASSERT_TRUE(m.push(20).ok());
  EXPECT_EQ(Buf::created(), before);
  auto bytes = contents(m);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes.begin() + 34));
}

TEST(Msg, PushTooLargeFails) {
  Msg m = Msg::alloc(1, 0);
  EXPECT_EQ(m.push(Msg::kMaxContiguous + 1).error(), Errc::too_large);
  EXPECT_EQ(m.size(), 1u);
}

TEST(Msg, PopPastEndFailsAndLeavesMessage) {
  Msg m = Msg::copy_of(pattern(10));
  auto r = m.pop(11);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Errc::out_of_range);
  EXPECT_EQ(m.size(), 10u);
  EXPECT_EQ(contents(m), pattern(10));
  std::byte sink[11];
  EXPECT_EQ(m.pop_into(sink).error(), Errc::out_of_range);
  EXPECT_EQ(m.peek(11).error(), Errc::out_of_range);
  EXPECT_EQ(m.trim_front(11).error(), Errc::out_of_range);
  EXPECT_EQ(m.truncate(11).error(), Errc::out_of_range);
  EXPECT_EQ(m.split(11).error(), Errc::out_of_range);
  EXPECT_EQ(m.size(), 10u);
}

TEST(Msg, PopThenPushReusesTheSameBytes) {
  Msg m = Msg::copy_of(pattern(64), 32);
  auto a = m.pop(20);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 20u);
  EXPECT_EQ((*a)[0], pattern(64)[0]);
  EXPECT_EQ(m.size(), 44u);
  EXPECT_EQ(m.headroom(), 52u);
  std::uint64_t before = Buf::created();
  ASSERT_TRUE(m.push(20).ok());
  EXPECT_EQ(Buf::created(), before);
  EXPECT_EQ(m.size(), 64u);
}

TEST(Msg, PopAcrossFragmentsPullsUp) {
  auto data = pattern(100);
  Msg m = chain(data, {3, 0, 5, 92});
  auto h = m.pop(10);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(std::equal(h->begin(), h->end(), data.begin()));
  EXPECT_EQ(m.size(), 90u);
  auto rest = contents(m);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), data.begin() + 10));
}

TEST(Msg, ZeroLengthFragmentsAreHarmless) {
  auto data = pattern(12);
  Msg m = chain(data, {0, 0, 4, 0, 8, 0});
  EXPECT_EQ(m.size(), 12u);
  auto p = m.peek(6);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(std::equal(p->begin(), p->end(), data.begin()));
  EXPECT_EQ(contents(m), data);
  ASSERT_TRUE(m.pop(12).ok());
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.pop(1).error(), Errc::out_of_range);
  EXPECT_TRUE(m.pop(0).ok());
}

TEST(Msg, EmptyMessageOperations) {
  Msg m;
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.headroom(), 0u);
  EXPECT_TRUE(m.pop(0).ok());
  EXPECT_TRUE(m.peek(0).ok());
  EXPECT_EQ(m.pop(1).error(), Errc::out_of_range);
  EXPECT_TRUE(m.truncate(0).ok());
  auto tail = m.split(0);
  ASSERT_TRUE(tail.ok());
  EXPECT_TRUE(tail->empty());
  // A push on an empty message must still work (it allocates a header buffer).
  ASSERT_TRUE(m.push(4).ok());
  EXPECT_EQ(m.size(), 4u);
}

TEST(Msg, PeekDoesNotConsume) {
  auto data = pattern(30);
  Msg m = chain(data, {7, 23});
  auto p = m.peek(20);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(std::equal(p->begin(), p->end(), data.begin()));
  EXPECT_EQ(m.size(), 30u);
  EXPECT_EQ(contents(m), data);
}

TEST(Msg, PopIntoAndCopyOutCrossFragmentsWithoutAllocating) {
  auto data = pattern(50);
  Msg m = chain(data, {1, 2, 3, 44});
  std::vector<std::byte> mid(10);
  ASSERT_TRUE(m.copy_out(2, mid).ok());
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), data.begin() + 2));
  std::uint64_t before = Buf::created();
  std::vector<std::byte> head(7);
  ASSERT_TRUE(m.pop_into(head).ok());
  EXPECT_EQ(Buf::created(), before);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), data.begin()));
  auto rest = contents(m);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), data.begin() + 7));
}

TEST(Msg, TruncateKeepsPrefix) {
  auto data = pattern(40);
  Msg m = chain(data, {10, 10, 20});
  ASSERT_TRUE(m.truncate(15).ok());
  EXPECT_EQ(m.size(), 15u);
  EXPECT_EQ(m.fragment_count(), 2u);
  auto c = contents(m);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), data.begin()));
  ASSERT_TRUE(m.truncate(0).ok());
  EXPECT_TRUE(m.empty());
}

TEST(Msg, SplitAtEveryOffsetRoundTrips) {
  auto data = pattern(33);
  for (std::size_t cut = 0; cut <= data.size(); ++cut) {
    Msg m = chain(data, {5, 0, 11, 17});
    auto tail = m.split(cut);
    ASSERT_TRUE(tail.ok()) << cut;
    EXPECT_EQ(m.size(), cut);
    EXPECT_EQ(tail->size(), data.size() - cut);
    m.join(std::move(*tail));
    EXPECT_EQ(contents(m), data) << "cut at " << cut;
  }
}

TEST(Msg, SplitSharesBuffersInsteadOfCopying) {
  Msg m = Msg::copy_of(pattern(1000));
  std::uint64_t before = Buf::created();
  auto tail = m.split(400);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(Buf::created(), before);
  EXPECT_EQ(m.fragments()[0].buf, tail->fragments()[0].buf);
  EXPECT_EQ(m.fragments()[0].buf->refs(), 2u);
}

TEST(Msg, ShareCountsReferencesAndFreesOnLastDrop) {
  std::int64_t live = Buf::live();
  {
    Msg a = Msg::copy_of(pattern(64));
    Msg b = a.share();
    EXPECT_EQ(Buf::live(), live + 1);
    EXPECT_EQ(a.fragments()[0].buf->refs(), 2u);
    EXPECT_EQ(contents(a), contents(b));
    a.reset();
    EXPECT_EQ(Buf::live(), live + 1) << "b still holds the buffer";
    EXPECT_EQ(contents(b), pattern(64));
  }
  EXPECT_EQ(Buf::live(), live);
}

TEST(Msg, SharedHeadroomGoesToTheFirstPusherOnly) {
  auto payload = pattern(16);
  Msg a = Msg::copy_of(payload, 32);
  Msg b = a.share();
  auto ha = a.push(8);
  ASSERT_TRUE(ha.ok());
  std::fill(ha->begin(), ha->end(), std::byte{0xA});
  // b would overwrite a's header if it pushed in place now.
  EXPECT_EQ(b.headroom(), 0u);
  EXPECT_EQ(b.push_in_place(8).error(), Errc::no_headroom);
  auto hb = b.push(8);
  ASSERT_TRUE(hb.ok());
  std::fill(hb->begin(), hb->end(), std::byte{0xB});
  EXPECT_EQ(b.fragment_count(), 2u);
  auto ca = contents(a);
  auto cb = contents(b);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(ca[i], std::byte{0xA});
    EXPECT_EQ(cb[i], std::byte{0xB});
  }
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), ca.begin() + 8));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), cb.begin() + 8));
}

TEST(Msg, AppendUsesTailroomOnlyWhenOwned) {
  Msg m = Msg::alloc(0, 0, 16);
  auto data = pattern(10);
  std::uint64_t before = Buf::created();
  ASSERT_TRUE(m.append(data).ok());
  EXPECT_EQ(Buf::created(), before);
  Msg shared = m.share();
  ASSERT_TRUE(m.append(data).ok());  // at the frontier: still in place
  ASSERT_TRUE(shared.append(data).ok());  // not at the frontier: new fragment
  EXPECT_EQ(shared.fragment_count(), 2u);
  EXPECT_EQ(contents(shared).size(), 20u);
  auto cm = contents(m);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), cm.begin() + 10));
}

TEST(Msg, WrapExternalBufferRunsDeleterOnce) {
  struct Owner {
    int released = 0;
    std::byte storage[256];
  } owner;
  BufDeleter d{[](void* ctx, std::byte*) { ++static_cast<Owner*>(ctx)->released; }, &owner};
  {
    auto m = Msg::wrap(owner.storage, sizeof owner.storage, 64, 100, d);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->size(), 100u);
    EXPECT_EQ(m->headroom(), 64u);
    EXPECT_EQ(m->fragments()[0].data(), owner.storage + 64) << "wrap must not copy";
    Msg copy = m->share();
    auto tail = copy.split(50);
    ASSERT_TRUE(tail.ok());
    EXPECT_EQ(owner.released, 0);
  }
  EXPECT_EQ(owner.released, 1);
}

TEST(Msg, WrapRejectsBadBoundsAndStillReleases) {
  int released = 0;
  std::byte storage[16];
  BufDeleter d{[](void* ctx, std::byte*) { ++*static_cast<int*>(ctx); }, &released};
  auto m = Msg::wrap(storage, 16, 10, 7, d);
  EXPECT_EQ(m.error(), Errc::invalid_argument);
  EXPECT_EQ(released, 1);
}

TEST(Msg, OwnCopiesExternalFragmentsAndReleasesThem) {
  // A frame from a port: an internal header fragment, then two external
  // buffers (as a chained rte_mbuf arrives).
  auto data = pattern(700);
  int released = 0;
  std::vector<std::byte> a(data.begin() + 100, data.begin() + 400);
  std::vector<std::byte> b(data.begin() + 400, data.end());
  BufDeleter d{[](void* ctx, std::byte*) { ++*static_cast<int*>(ctx); }, &released};
  Msg m = Msg::copy_of(std::span(data).first(100), 0);
  auto wa = Msg::wrap(a.data(), a.size(), 0, a.size(), d);
  auto wb = Msg::wrap(b.data(), b.size(), 0, b.size(), d);
  ASSERT_TRUE(wa.ok() && wb.ok());
  m.join(std::move(*wa));
  m.join(std::move(*wb));
  m.offload().flags = Offload::rx_l4_good | Offload::rx_scarce;
  EXPECT_TRUE(m.holds_external());

  ASSERT_TRUE(m.own().ok());
  EXPECT_EQ(released, 2) << "own() must let the external buffers go";
  EXPECT_FALSE(m.holds_external());
  EXPECT_EQ(m.fragment_count(), 1u);
  EXPECT_EQ(contents(m), data);
  EXPECT_EQ(m.offload().flags, Offload::rx_l4_good | Offload::rx_scarce) << "what the port checked still holds";
}

TEST(Msg, OwnLeavesAnInternalMessageAsItIs) {
  auto data = pattern(300);
  Msg m = chain(data, {100, 200});
  const std::byte* first = m.fragments()[0].data();
  std::uint64_t before = Buf::created();
  ASSERT_TRUE(m.own().ok());
  EXPECT_EQ(Buf::created(), before) << "nothing to copy";
  EXPECT_EQ(m.fragment_count(), 2u);
  EXPECT_EQ(m.fragments()[0].data(), first);
}

TEST(Msg, OwnIfScarceCopiesOnlyWhenThePortIsShort) {
  std::byte storage[64]{};
  auto m = Msg::wrap(storage, sizeof storage, 0, 64, BufDeleter{});
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->own_if_scarce().ok());
  EXPECT_TRUE(m->holds_external()) << "no rx_scarce: zero-copy stays";
  m->offload().flags |= Offload::rx_scarce;
  ASSERT_TRUE(m->own_if_scarce().ok());
  EXPECT_FALSE(m->holds_external());
}

// A frame received by reference from a peer that maps it read-only (the shm
// link): a layer that pops the headers and answers with the payload (an
// echo, the central relay) must get a header fragment of its own, not the
// popped bytes -- a write there faults.
TEST(Msg, AReadOnlyBufferIsNeverPushedInto) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(p);
  std::memset(bytes, 0x5A, page);
  ASSERT_EQ(::mprotect(p, page, PROT_READ), 0);
  {
    auto m = Msg::wrap_read_only(bytes, page, 0, page, BufDeleter{});
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(m->pop(22).ok());
    EXPECT_EQ(m->headroom(), 0u) << "the popped bytes are not ours to write";
    EXPECT_FALSE(m->push_in_place(8).ok());
    auto h = m->push(8);
    ASSERT_TRUE(h.ok());
    std::memset(h->data(), 0x11, h->size());
    EXPECT_EQ(m->fragment_count(), 2u);
    EXPECT_EQ(m->size(), page - 22 + 8);
  }
  for (std::size_t i = 0; i < page; ++i) ASSERT_EQ(bytes[i], std::byte{0x5A});
  ::munmap(p, page);
}

TEST(Msg, ExternalStorageWithoutDeleterIsNeitherWrittenNorCached) {
  // 256 bytes is a header buffer's size: a wrap must never be mistaken for
  // one (appended into, or handed out again from the header cache).
  std::vector<std::byte> storage(Msg::kHeaderBufSize, std::byte{0x5A});
  {
    auto m = Msg::wrap(storage.data(), storage.size(), 0, 16, BufDeleter{});
    ASSERT_TRUE(m.ok());
    EXPECT_TRUE(m->holds_external());
    auto more = pattern(32);
    ASSERT_TRUE(m->append(more).ok());
    EXPECT_EQ(m->fragment_count(), 2u) << "the tailroom of external storage is not ours";
  }
  for (std::byte x : storage) ASSERT_EQ(x, std::byte{0x5A});
  // Header buffers allocated after the wrap died are whole 256-byte blocks
  // (ASan reports an overflow if a small wrap block came back as one).
  std::vector<Msg> headers;
  for (int i = 0; i < 8; ++i) {
    headers.push_back(Msg::alloc(Msg::kHeaderBufSize, 0));
    std::memset(const_cast<std::byte*>(headers.back().fragments()[0].data()), 0xEE, Msg::kHeaderBufSize);
  }
}

TEST(Msg, LinearizeMakesOneFragment) {
  auto data = pattern(300);
  Msg m = chain(data, {1, 99, 0, 200});
  ASSERT_TRUE(m.linearize().ok());
  EXPECT_EQ(m.fragment_count(), 1u);
  EXPECT_EQ(contents(m), data);
  EXPECT_GE(m.headroom(), Msg::kDefaultHeadroom);
}

TEST(Msg, ManyFragmentsSpillBeyondInlineStorage) {
  std::vector<std::byte> all;
  Msg m;
  for (int i = 0; i < 100; ++i) {
    auto part = pattern(static_cast<std::size_t>(i % 7), static_cast<unsigned>(i));
    all.insert(all.end(), part.begin(), part.end());
    ASSERT_TRUE(m.append(part).ok());
    Msg extra = Msg::copy_of(part, 0);
    all.insert(all.end(), part.begin(), part.end());
    m.join(std::move(extra));
  }
  EXPECT_EQ(contents(m), all);
  Msg moved = std::move(m);
  EXPECT_TRUE(m.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(contents(moved), all);
}

TEST(Msg, RandomOperationsMatchAReferenceModel) {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::vector<std::byte> model = pattern(rng() % 200, static_cast<unsigned>(round));
    std::vector<std::size_t> sizes;
    std::size_t left = model.size();
    while (left > 0) {
      std::size_t n = std::min<std::size_t>(left, rng() % 40);
      sizes.push_back(n);
      left -= n;
    }
    Msg m = chain(model, sizes);
    for (int op = 0; op < 30; ++op) {
      switch (rng() % 6) {
        case 0: {  // push a header
          std::size_t n = rng() % 40;
          auto h = m.push(n);
          ASSERT_TRUE(h.ok());
          auto fill = pattern(n, static_cast<unsigned>(op));
          std::copy(fill.begin(), fill.end(), h->begin());
          model.insert(model.begin(), fill.begin(), fill.end());
          break;
        }
        case 1: {  // pop
          std::size_t n = rng() % 50;
          auto r = m.pop(n);
          if (n > model.size()) {
            EXPECT_FALSE(r.ok());
          } else {
            ASSERT_TRUE(r.ok());
            EXPECT_TRUE(std::equal(r->begin(), r->end(), model.begin()));
            model.erase(model.begin(), model.begin() + static_cast<std::ptrdiff_t>(n));
          }
          break;
        }
        case 2: {  // truncate
          std::size_t n = model.empty() ? 0 : rng() % (model.size() + 1);
          ASSERT_TRUE(m.truncate(n).ok());
          model.resize(n);
          break;
        }
        case 3: {  // split and rejoin through a share
          std::size_t n = model.empty() ? 0 : rng() % (model.size() + 1);
          auto tail = m.split(n);
          ASSERT_TRUE(tail.ok());
          Msg shared = tail->share();
          m.join(std::move(shared));
          break;
        }
        case 4: {  // append
          auto extra = pattern(rng() % 30, static_cast<unsigned>(op + 100));
          ASSERT_TRUE(m.append(extra).ok());
          model.insert(model.end(), extra.begin(), extra.end());
          break;
        }
        case 5: {  // trim
          std::size_t n = model.empty() ? 0 : rng() % (model.size() + 1);
          ASSERT_TRUE(m.trim_front(n).ok());
          model.erase(model.begin(), model.begin() + static_cast<std::ptrdiff_t>(n));
          break;
        }
      }
      ASSERT_EQ(m.size(), model.size());
      ASSERT_EQ(contents(m), model) << "round " << round << " op " << op;
    }
  }
}

// The offload bits describe the packet, so they follow it: moves carry them
// (and leave the source clean), split and share copy them, reset clears them.
TEST(MsgOffload, TravelsWithTheMessage) {
  Msg m = Msg::alloc(100);
  EXPECT_EQ(m.offload().flags, 0);
  m.offload().flags = Offload::rx_ip_good | Offload::rx_l4_good;
  m.offload().l3_len = 20;
  Msg moved = std::move(m);
  EXPECT_EQ(moved.offload().flags, Offload::rx_ip_good | Offload::rx_l4_good);
  EXPECT_EQ(moved.offload().l3_len, 20);
  EXPECT_EQ(m.offload().flags, 0);  // NOLINT(bugprone-use-after-move): moved-from is reset
  Msg shared = moved.share();
  EXPECT_TRUE(shared.offload().has(Offload::rx_l4_good));
  auto tail = moved.split(40);
  ASSERT_TRUE(tail.ok());
  EXPECT_TRUE(tail->offload().has(Offload::rx_ip_good));
  EXPECT_TRUE(moved.offload().has(Offload::rx_ip_good));
  moved.reset();
  EXPECT_EQ(moved.offload().flags, 0);
  EXPECT_EQ(moved.offload().l3_len, 0);
}

// What IP learned of a packet follows it the same way, and survives the
// copy a layer makes of a frame whose port is short of buffers.
TEST(MsgRxInfo, TravelsWithTheMessage) {
  static std::array<std::byte, 256> storage{};
  Result<Msg> wrapped = Msg::wrap(storage.data(), storage.size(), 0, 200, BufDeleter{});
  ASSERT_TRUE(wrapped.ok());
  Msg m = std::move(*wrapped);
  EXPECT_EQ(m.rx().src, IpAddr()) << "nothing learned yet";
  m.rx() = RxInfo{Ipv4Addr{0xC0000201}, Ipv4Addr{0xC000020A}, 6, 63, 0xb9, false, true};
  Msg moved = std::move(m);
  EXPECT_EQ(moved.rx().src.v4(), Ipv4Addr{0xC0000201});
  EXPECT_EQ(moved.rx().hop_limit, 63);
  Msg shared = moved.share();
  EXPECT_EQ(shared.rx().dst.v4(), Ipv4Addr{0xC000020A});
  auto tail = moved.split(120);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->rx().traffic_class, 0xb9);
  EXPECT_TRUE(tail->rx().reassembled);
  ASSERT_TRUE(moved.own().ok());
  EXPECT_FALSE(moved.holds_external());
  EXPECT_EQ(moved.rx().protocol, 6) << "own() copies the bytes and keeps the facts";
  moved.reset();
  EXPECT_EQ(moved.rx().src, IpAddr());
  EXPECT_EQ(moved.rx().hop_limit, 0);
}

// ---- a chunk source (the shm driver's arena) ---------------------------------

class CountingSource final : public ChunkSource {
 public:
  std::byte* take() noexcept override {
    if (left == 0) return nullptr;
    --left;
    ++taken;
    return store[taken % 2].data();
  }
  void give(std::byte*) noexcept override { ++given; }
  std::array<std::array<std::byte, Msg::kChunkSize>, 2> store{};
  int left = 1, taken = 0, given = 0;
};

TEST(Msg, BulkChunksComeFromTheSourceGivenAndGoBackToIt) {
  auto source = std::make_unique<CountingSource>();
  {
    Msg a = Msg::chunk(source.get());
    const std::byte* first = a.fragments().empty() ? nullptr : a.fragments()[0].buf->data();
    EXPECT_EQ(source->taken, 1);
    EXPECT_EQ(first, source->store[1].data()) << "the chunk is the source's";
    const std::array<std::byte, 3> abc{std::byte{'a'}, std::byte{'b'}, std::byte{'c'}};
    ASSERT_TRUE(a.append(abc).ok());
    EXPECT_EQ(a.fragment_count(), 1u) << "appended in place: a source's chunk is the stack's own";
    EXPECT_FALSE(a.holds_external());
    // The source is out: the heap serves.
    Msg b = Msg::chunk(source.get());
    EXPECT_EQ(source->taken, 1);
    EXPECT_EQ(source->given, 0);
    EXPECT_EQ(b.size(), 0u);
    ASSERT_EQ(b.fragment_count(), 1u);
    EXPECT_EQ(b.fragments()[0].buf->capacity(), Msg::kChunkSize);
    // Nobody else's 64 KiB buffer comes from it: only those asked of it.
    Msg c = Msg::alloc(0, 0, Msg::kChunkSize);
    Msg d = Msg::chunk(nullptr);
    EXPECT_EQ(source->taken, 1);
  }
  EXPECT_EQ(source->given, 1) << "the chunk went back when its last reference dropped";
}

// Set up in a thread before its block caches are (so destroyed after they
// close): the buffers it makes as the thread ends must be blocks nobody
// else owns.
struct LateUser {
  std::vector<Msg>* out = nullptr;
  ~LateUser() {
    if (out == nullptr) return;
    for (int i = 0; i < 8; ++i) out->push_back(Msg::alloc(16));
  }
};
thread_local LateUser t_late_user;

Buf* buf_of(const Msg& m) { return m.fragments()[0].buf; }

TEST(Msg, BuffersMadeAfterAThreadsCachesClosedHaveOneOwner) {
  std::vector<Msg> late;  // made by the first thread's last destructor, alive after it
  std::set<Buf*> warmed;
  std::thread([&] {
    t_late_user.out = &late;
    std::vector<Msg> warm;
    for (int i = 0; i < 8; ++i) warm.push_back(Msg::alloc(16));
    for (const Msg& m : warm) warmed.insert(buf_of(m));
    warm.clear();  // eight blocks in this thread's cache
  }).join();
  ASSERT_EQ(late.size(), 8u);
  // The first thread's cached blocks went to the process's shelf as it
  // ended; a new thread, its own cache empty, takes from there.
  std::vector<Msg> fresh;
  std::thread([&] {
    for (int i = 0; i < 8; ++i) fresh.push_back(Msg::alloc(16));
  }).join();
  std::set<Buf*> owned;
  for (const Msg& m : late) EXPECT_TRUE(owned.insert(buf_of(m)).second) << "a block handed out twice";
  for (const Msg& m : fresh) EXPECT_TRUE(owned.insert(buf_of(m)).second) << "a block handed out twice";
#if !defined(__SANITIZE_ADDRESS__)  // the sanitizer builds keep no caches
  // And the caches did close: the first thread's blocks reached the shelf
  // (the new thread's came from there), not its last destructor.
  for (const Msg& m : fresh) EXPECT_EQ(warmed.count(buf_of(m)), 1u) << "a block not from the shelf";
#endif
}

TEST(Copy, LargeCopiesMatchMemcpyAtEverySizeAndAlignment) {
  // The vector loop and its memcpy tail, around the 2 KiB switch and the
  // 128-byte step, from and to every alignment in a cache line.
  std::vector<unsigned char> src(70000), dst(70000 + 64), want(70000 + 64);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + (i >> 9));
  for (std::size_t n : {0ul, 1ul, 2047ul, 2048ul, 2049ul, 2175ul, 2176ul, 4096ul, 65536ul, 65535ul, 69999ul}) {
    for (std::size_t so : {0ul, 1ul, 31ul}) {
      for (std::size_t d_off : {0ul, 5ul, 63ul}) {
        if (so + n > src.size()) continue;
        std::fill(dst.begin(), dst.end(), 0xee);
        want = dst;
        std::memcpy(want.data() + d_off, src.data() + so, n);
        copy_bytes(dst.data() + d_off, src.data() + so, n);
        ASSERT_EQ(dst, want) << "n=" << n << " src+" << so << " dst+" << d_off;
      }
    }
  }
}

}  // namespace
}  // namespace xk

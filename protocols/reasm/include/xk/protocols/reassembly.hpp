#pragma once
// Reassembly of fragmented datagrams, for the IP layer of either family
// (IPv4: RFC 791, RFC 1122 3.3.2; IPv6: RFC 8200 4.5). The IP layer parses
// its own headers and hands each fragment's payload here with where it
// starts; what comes back is the whole payload and the bytes the first
// fragment carried ahead of it, from which the layer rebuilds its header.
//
// The rules, the same for both families:
//   - all fragments but the last carry a multiple of 8 bytes;
//   - overlapping fragments, exact duplicates included, poison the whole
//     datagram (RFC 5722; applied to IPv4 too: a legitimate sender never
//     overlaps, and overlaps are how IDS evasion works);
//   - the last fragment fixes the length; a second, different last one or
//     data past it ends the datagram;
//   - no datagram grows past `max_payload`;
//   - buffers are counted by what they pin (truesize), per datagram (twice
//     the largest datagram) and in all (`mem`), the oldest other
//     reassemblies giving way to a new fragment;
//   - a datagram not complete within `timeout` is dropped.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "xk/clock.hpp"
#include "xk/counters.hpp"
#include "xk/demux.hpp"
#include "xk/msg.hpp"
#include "xk/timer.hpp"

namespace xk::ip {

struct ReasmLimits {
  std::size_t max_payload = 65535;  // largest reassembled payload
  std::size_t mem = 4u << 20;       // buffer bytes all reassemblies hold together
  Duration timeout = std::chrono::seconds(30);
};

// The drop counters the IP layer names and owns.
struct ReasmCounters {
  Counter& ok;         // datagrams completed
  Counter& bad_len;    // a non-last fragment not a multiple of 8, or lengths that disagree
  Counter& too_big;    // past max_payload
  Counter& overlap;
  Counter& timeout;
  Counter& mem;        // refused or evicted for memory
};

// Bookkeeping per held fragment beyond its buffers (the piece, the Buf header).
inline constexpr std::size_t kFragmentOverhead = 64;

enum class ReasmOutcome : std::uint8_t { held, complete, bad_length, too_big, overlap, no_memory };

// What a held message really costs: the buffers it pins, not its length.
std::size_t truesize(const Msg& m);
// Makes a fragment fit to keep: a small one in a big buffer is copied out,
// so the accounting stays close to the data, and one from a port short of
// buffers gets storage of its own. Returns its truesize.
std::size_t compact(Msg& payload);

template <class Key>
class Reassembler {
 public:
  struct Whole {
    Msg payload;                         // every fragment's payload, in order
    std::vector<std::byte> first_head;   // what the offset-0 fragment gave as `head`
  };

  Reassembler(TimerWheel& timers, ReasmLimits limits, ReasmCounters counters)
      : timers_(timers), limits_(limits), c_(counters) {}

  // The fragment of `key`'s datagram whose payload starts `begin` bytes in;
  // `more`: another follows. `head` (kept only when begin is 0): the bytes
  // the datagram's header is rebuilt from. On `complete`, `out` holds the
  // datagram and it is forgotten here.
  ReasmOutcome add(const Key& key, std::size_t begin, bool more, Msg payload, std::vector<std::byte> head,
                   std::optional<Whole>& out) {
    const std::size_t end = begin + payload.size();
    if (more && (payload.size() == 0 || payload.size() % 8 != 0)) {
      c_.bad_len.inc();
      return ReasmOutcome::bad_length;
    }
    if (end > limits_.max_payload) {
      c_.too_big.inc();
      return ReasmOutcome::too_big;
    }
    const std::size_t mem = compact(payload);
    Datagram* d = nullptr;
    if (std::unique_ptr<Datagram>* found = table_.find(key)) d = found->get();
    const std::size_t per_datagram_cap = 2 * limits_.max_payload + 64 * kFragmentOverhead;
    if (mem > limits_.mem || (d != nullptr && d->mem + mem > per_datagram_cap)) {
      if (d != nullptr) drop(key);
      c_.mem.inc();
      return ReasmOutcome::no_memory;
    }
    while (used_ + mem > limits_.mem) {
      if (!evict_oldest(key)) {
        if (d != nullptr) drop(key);
        c_.mem.inc();
        return ReasmOutcome::no_memory;
      }
    }
    if (d == nullptr) {
      auto fresh = std::make_unique<Datagram>(*this, key);
      fresh->serial = serial_++;
      fresh->timer.arm_after(limits_.timeout);
      d = fresh.get();
      table_.insert(key, std::move(fresh));
    }

    std::vector<Piece>& pieces = d->pieces;
    auto it = std::lower_bound(pieces.begin(), pieces.end(), begin,
                               [](const Piece& p, std::size_t b) { return p.begin < b; });
    const bool overlaps_prev = it != pieces.begin() && std::prev(it)->end > begin;
    const bool overlaps_next = it != pieces.end() && (it->begin < end || it->begin == begin);
    if (overlaps_prev || overlaps_next) {
      drop(key);
      c_.overlap.inc();
      return ReasmOutcome::overlap;
    }
    if (!more) {
      if ((d->total && *d->total != end) || (!pieces.empty() && pieces.back().end > end)) {
        drop(key);
        c_.bad_len.inc();
        return ReasmOutcome::bad_length;
      }
      d->total = end;
    } else if (d->total && end > *d->total) {
      drop(key);
      c_.bad_len.inc();
      return ReasmOutcome::bad_length;
    }
    if (begin == 0) d->first_head = std::move(head);
    pieces.insert(it, Piece{begin, end, std::move(payload)});
    d->mem += mem;
    used_ += mem;

    if (!d->total) return ReasmOutcome::held;
    std::size_t expect = 0;
    for (const Piece& p : pieces) {
      if (p.begin != expect) return ReasmOutcome::held;  // a hole remains
      expect = p.end;
    }
    if (expect != *d->total) return ReasmOutcome::held;
    Whole w{Msg(), std::move(d->first_head)};
    for (Piece& p : pieces) w.payload.join(std::move(p.data));
    // A port checks a transport checksum only in an unfragmented packet: no
    // flag of the first fragment may speak for the whole datagram.
    w.payload.offload().flags &= static_cast<std::uint8_t>(~Offload::rx_l4_good);
    drop(key);
    c_.ok.inc();
    out = std::move(w);
    return ReasmOutcome::complete;
  }

  std::size_t size() const noexcept { return table_.size(); }
  void clear() noexcept {
    table_.clear();
    used_ = 0;
  }
  std::size_t memory() const noexcept { return used_; }

 private:
  struct Piece {
    std::size_t begin;
    std::size_t end;
    Msg data;
  };
  struct Datagram {
    Datagram(Reassembler& r, const Key& k)
        : key(k), timer(r.timers_, [owner = &r, self = this] { owner->expire(self); }) {}
    Key key;
    std::vector<Piece> pieces;  // sorted by begin, never overlapping
    std::optional<std::size_t> total;
    std::vector<std::byte> first_head;
    std::size_t mem = 0;
    std::uint64_t serial = 0;  // creation order, for eviction
    Timer timer;
  };

  void drop(const Key& key) {
    if (std::unique_ptr<Datagram>* d = table_.find(key)) {
      used_ -= (*d)->mem;
      table_.erase(key);  // its timer goes with it
    }
  }
  void expire(Datagram* d) {
    c_.timeout.inc();
    const Key key = d->key;
    drop(key);
  }
  bool evict_oldest(const Key& spare) {
    const Key* victim = nullptr;
    std::uint64_t oldest = ~std::uint64_t{0};
    table_.for_each([&](const Key& k, std::unique_ptr<Datagram>& d) {
      if (k == spare || d->serial >= oldest) return;
      oldest = d->serial;
      victim = &d->key;
    });
    if (victim == nullptr) return false;
    const Key key = *victim;
    drop(key);
    c_.mem.inc();
    return true;
  }

  TimerWheel& timers_;
  ReasmLimits limits_;
  ReasmCounters c_;
  FlatMap<Key, std::unique_ptr<Datagram>> table_;
  std::size_t used_ = 0;
  std::uint64_t serial_ = 0;
};

}  // namespace xk::ip

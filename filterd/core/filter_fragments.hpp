#pragma once
// Fragment state of the filter engine (RFC 791 section 3.2): only the first
// fragment carries the ports, so the engine remembers, per datagram, where the
// first one went, and holds fragments that come before it. Bounded: at most
// `max` datagrams (the oldest is evicted) and a global cap on held frames and
// bytes. Every entry lives for the same timeout, so insertion order is expiry
// order and a FIFO of keys is the whole timer.

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "xk/clock.hpp"
#include "xk/demux.hpp"
#include "xk/filterd/filter.hpp"
#include "xk/ip_addr.hpp"

namespace xk::filterd {

// A datagram is (source, destination, protocol, identification): RFC 791,
// and RFC 8200 4.5 for IPv6, whose identification has 32 bits. An IPv4
// datagram's addresses are held in their mapped form.
struct FragKey {
  IpAddr::Bytes src{};
  IpAddr::Bytes dst{};
  std::uint32_t id = 0;
  std::uint8_t proto = 0;
  std::uint8_t zero[3] = {};  // keeps the key free of padding
  friend bool operator==(const FragKey&, const FragKey&) = default;

  static FragKey of(const IpAddr& src, const IpAddr& dst, std::uint32_t id, std::uint8_t proto) noexcept {
    return FragKey{src.bytes(), dst.bytes(), id, proto};
  }
};

template <class V>
class ExpiringTable {
 public:
  explicit ExpiringTable(std::size_t max_entries) : max_(max_entries == 0 ? 1 : max_entries) {}

  V* find(const FragKey& key) noexcept {
    Entry* e = map_.find(key);
    return e == nullptr ? nullptr : &e->value;
  }

  // A new entry (the key must be absent) living until `expires`. When the
  // table is full the oldest entry goes first; on_drop(key, value) sees it.
  template <class F>
  V& insert(const FragKey& key, V value, Time expires, F&& on_drop) {
    if (map_.size() >= max_) pop_oldest(on_drop);
    auto inserted = map_.insert(key, Entry{std::move(value), expires});
    fifo_.push_back(key);
    return inserted.first->value;
  }

  template <class F>
  void expire(Time now, F&& on_drop) {
    while (!fifo_.empty()) {
      const Entry* e = map_.find(fifo_.front());
      if (e != nullptr && e->expires > now) break;
      pop_oldest(on_drop);
    }
  }

  template <class F>
  void for_each(F&& f) {
    map_.for_each([&](const FragKey& k, Entry& e) { f(k, e.value); });
  }

  std::size_t size() const noexcept { return map_.size(); }

 private:
  struct Entry {
    V value;
    Time expires;
  };

  template <class F>
  void pop_oldest(F& on_drop) {
    FragKey key = fifo_.front();
    fifo_.pop_front();
    if (Entry* e = map_.find(key)) {
      on_drop(key, e->value);
      map_.erase(key);
    }
  }

  FlatMap<FragKey, Entry> map_;
  std::deque<FragKey> fifo_;  // the same keys as map_, oldest first
  std::size_t max_;
};

// An inbound datagram: where its first fragment went, or the fragments that
// came before it.
struct IngressDatagram {
  bool decided = false;
  Decision decision;
  std::vector<std::vector<std::byte>> held;
  std::size_t held_bytes = 0;
};

class FragmentTracker {
 public:
  explicit FragmentTracker(const FilterConfig& c)
      : ingress(c.fragment_max_datagrams), egress(c.fragment_max_datagrams) {}

  ExpiringTable<IngressDatagram> ingress;
  // Outbound datagrams whose first fragment passed the egress check: the node
  // that sent it.
  ExpiringTable<NodeId> egress;
  std::size_t held_frames = 0;
  std::size_t held_bytes = 0;
};

}  // namespace xk::filterd

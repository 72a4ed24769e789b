#pragma once
// Demux maps: how a protocol finds the session for an arriving message.
//
// Every protocol keeps two maps (x-kernel's design):
//   active map  — full key (e.g. a TCP 4-tuple) -> session
//   passive map — partial key (a listening port, an EtherType) -> the upper
//                 protocol that asked to be told of new sessions (open_enable)
//
// Both are FlatMap: open addressing with linear probing and backward-shift
// deletion (no tombstones, so lookups stay short after churn), a one-byte hash
// tag per slot so most probes never touch the key, power-of-two capacity and a
// load factor of at most 7/8. Lookups are O(1) and allocate nothing; only an
// insert that grows the table allocates, which happens at connection set-up.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "xk/endpoint.hpp"
#include "xk/hash.hpp"
#include "xk/protocol.hpp"
#include "xk/result.hpp"

namespace xk {

// Hash for plain keys (structs of integers without padding): mixes the key's
// bytes 8 at a time. Keys with padding would hash garbage, so they are refused.
template <class K>
struct KeyHash {
  static_assert(std::has_unique_object_representations_v<K>,
                "KeyHash needs a key without padding bytes; give the map its own hash");
  std::uint64_t operator()(const K& key) const noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(&key);
    std::uint64_t h = 0x9e3779b97f4a7c15ull ^ sizeof(K);
    std::size_t i = 0;
    for (; i + 8 <= sizeof(K); i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = mix(h ^ w);
    }
    if (i < sizeof(K)) {
      std::uint64_t w = 0;
      std::memcpy(&w, p + i, sizeof(K) - i);
      h = mix(h ^ w);
    }
    return h;
  }
  static std::uint64_t mix(std::uint64_t x) noexcept { return mix64(x); }
};

template <class K, class V, class Hash = KeyHash<K>>
class FlatMap {
 public:
  explicit FlatMap(std::size_t expected = 0) { reserve(expected); }
  FlatMap(const FlatMap&) = delete;
  FlatMap& operator=(const FlatMap&) = delete;
  FlatMap(FlatMap&& o) noexcept { swap(o); }
  FlatMap& operator=(FlatMap&& o) noexcept {
    FlatMap tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~FlatMap() { destroy_all(); }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t capacity() const noexcept { return slots_ == nullptr ? 0 : mask_ + 1; }

  std::uint64_t hash_of(const K& key) const noexcept { return Hash{}(key); }

  V* find(const K& key) noexcept { return find_hashed(key, hash_of(key)); }
  const V* find(const K& key) const noexcept {
    return const_cast<FlatMap*>(this)->find_hashed(key, hash_of(key));
  }
  bool contains(const K& key) const noexcept { return find(key) != nullptr; }

  // For bulk lookups: hash a batch, prefetch each home slot, then find_hashed.
  void prefetch(std::uint64_t hash) const noexcept {
    if (slots_ == nullptr) return;
    std::size_t i = hash & mask_;
    __builtin_prefetch(&tags_[i]);
    __builtin_prefetch(&slots_[i]);
  }

  V* find_hashed(const K& key, std::uint64_t hash) noexcept {
    if (size_ == 0) return nullptr;
    std::uint8_t tag = tag_of(hash);
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      std::uint8_t t = tags_[i];
      if (t == kEmpty) return nullptr;
      if (t == tag && slots_[i].key == key) return &slots_[i].value;
    }
  }

  // Insert key -> value. Returns the stored value and true, or the existing
  // value and false when the key is already present (value is then unused).
  std::pair<V*, bool> insert(const K& key, V value) {
    std::uint64_t hash = hash_of(key);
    if (V* v = find_hashed(key, hash)) return {v, false};
    if ((size_ + 1) * 8 > (mask_ + 1) * 7 || slots_ == nullptr) grow();
    std::size_t i = hash & mask_;
    while (tags_[i] != kEmpty) i = (i + 1) & mask_;
    new (&slots_[i]) Slot{key, std::move(value)};
    tags_[i] = tag_of(hash);
    ++size_;
    return {&slots_[i].value, true};
  }

  bool erase(const K& key) noexcept {
    if (size_ == 0) return false;
    std::uint64_t hash = hash_of(key);
    std::uint8_t tag = tag_of(hash);
    std::size_t i = hash & mask_;
    for (;; i = (i + 1) & mask_) {
      if (tags_[i] == kEmpty) return false;
      if (tags_[i] == tag && slots_[i].key == key) break;
    }
    slots_[i].~Slot();
    tags_[i] = kEmpty;
    --size_;
    // Backward-shift: pull later members of the probe run into the hole when
    // their home slot is at or before it, so no lookup ever stops too early.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask_; tags_[j] != kEmpty; j = (j + 1) & mask_) {
      std::size_t home = hash_of(slots_[j].key) & mask_;
      // Can entry j move to `hole`? Only if home is not cyclically in (hole, j].
      bool movable = ((j - home) & mask_) >= ((j - hole) & mask_);
      if (!movable) continue;
      new (&slots_[hole]) Slot{std::move(slots_[j])};
      tags_[hole] = tags_[j];
      slots_[j].~Slot();
      tags_[j] = kEmpty;
      hole = j;
    }
    return true;
  }

  void clear() noexcept {
    if (slots_ == nullptr) return;
    for (std::size_t i = 0; i <= mask_; ++i) {
      if (tags_[i] != kEmpty) {
        slots_[i].~Slot();
        tags_[i] = kEmpty;
      }
    }
    size_ = 0;
  }

  void reserve(std::size_t n) {
    std::size_t want = 16;
    while (want * 7 < n * 8) want *= 2;
    if (slots_ == nullptr || want > mask_ + 1) rehash(want);
  }

  // Visit every entry: f(const K&, V&). The map must not change meanwhile.
  template <class F>
  void for_each(F&& f) {
    if (slots_ == nullptr) return;
    for (std::size_t i = 0; i <= mask_; ++i) {
      if (tags_[i] != kEmpty) f(std::as_const(slots_[i].key), slots_[i].value);
    }
  }

 private:
  struct Slot {
    K key;
    V value;
  };
  static constexpr std::uint8_t kEmpty = 0;
  // Tag: top 7 bits of the hash with the high bit set, so never kEmpty. The
  // slot index uses the low bits, so tag and index are independent.
  static std::uint8_t tag_of(std::uint64_t h) noexcept {
    return static_cast<std::uint8_t>((h >> 57) | 0x80);
  }

  void grow() { rehash(slots_ == nullptr ? 16 : (mask_ + 1) * 2); }

  void rehash(std::size_t cap) {
    auto* fresh_slots = static_cast<Slot*>(::operator new(cap * sizeof(Slot), std::align_val_t{alignof(Slot)}));
    auto* fresh_tags = new std::uint8_t[cap]();
    Slot* old_slots = slots_;
    std::uint8_t* old_tags = tags_;
    std::size_t old_cap = slots_ == nullptr ? 0 : mask_ + 1;
    slots_ = fresh_slots;
    tags_ = fresh_tags;
    mask_ = cap - 1;
    for (std::size_t i = 0; i < old_cap; ++i) {
      if (old_tags[i] == kEmpty) continue;
      std::uint64_t hash = hash_of(old_slots[i].key);
      std::size_t j = hash & mask_;
      while (tags_[j] != kEmpty) j = (j + 1) & mask_;
      new (&slots_[j]) Slot{std::move(old_slots[i])};
      tags_[j] = old_tags[i];
      old_slots[i].~Slot();
    }
    if (old_slots != nullptr) ::operator delete(old_slots, std::align_val_t{alignof(Slot)});
    delete[] old_tags;
  }

  void destroy_all() noexcept {
    clear();
    if (slots_ != nullptr) ::operator delete(slots_, std::align_val_t{alignof(Slot)});
    delete[] tags_;
    slots_ = nullptr;
    tags_ = nullptr;
    mask_ = 0;
  }

  void swap(FlatMap& o) noexcept {
    std::swap(slots_, o.slots_);
    std::swap(tags_, o.tags_);
    std::swap(mask_, o.mask_);
    std::swap(size_, o.size_);
  }

  Slot* slots_ = nullptr;
  std::uint8_t* tags_ = nullptr;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

template <class K, class Hash = KeyHash<K>>
using ActiveMap = FlatMap<K, SessionRef, Hash>;

// A map keyed by a flow's FourTuple (xk/endpoint.hpp), either family, that
// keeps IPv4 flows in 12-byte keys: the FourTuple itself is 36 bytes, and
// among a million flows a slot three times the size costs a lookup twice the
// time (xk_bench_demux). IPv6 flows have a map of their own; callers see one.
template <class V>
class TupleMap {
 public:
  explicit TupleMap(std::size_t expected = 0) : v4_(expected) {}

  V* find(const FourTuple& t) noexcept { return v4(t) ? v4_.find(short_key(t)) : v6_.find(t); }
  const V* find(const FourTuple& t) const noexcept { return v4(t) ? v4_.find(short_key(t)) : v6_.find(t); }
  bool contains(const FourTuple& t) const noexcept { return find(t) != nullptr; }
  std::pair<V*, bool> insert(const FourTuple& t, V value) {
    return v4(t) ? v4_.insert(short_key(t), std::move(value)) : v6_.insert(t, std::move(value));
  }
  bool erase(const FourTuple& t) noexcept { return v4(t) ? v4_.erase(short_key(t)) : v6_.erase(t); }
  std::size_t size() const noexcept { return v4_.size() + v6_.size(); }
  bool empty() const noexcept { return size() == 0; }
  void clear() noexcept {
    v4_.clear();
    v6_.clear();
  }
  // Visit every entry: f(const FourTuple&, V&). The map must not change meanwhile.
  template <class F>
  void for_each(F&& f) {
    v4_.for_each([&](const V4Key& k, V& v) {
      f(FourTuple{{Ipv4Addr{k.local_addr}, k.local_port}, {Ipv4Addr{k.remote_addr}, k.remote_port}}, v);
    });
    v6_.for_each(f);
  }

 private:
  struct V4Key {
    std::uint32_t local_addr;
    std::uint32_t remote_addr;
    std::uint16_t local_port;
    std::uint16_t remote_port;
    friend bool operator==(const V4Key&, const V4Key&) = default;
  };
  // Hashed from the fields, not the key's bytes: a key just built from a
  // FourTuple is in registers, and reading it back through memory (KeyHash)
  // waits for its stores -- behind the previous lookup's cache miss, which
  // took the overlap out of a run of lookups (4x the time in
  // xk_bench_demux).
  struct V4Hash {
    std::uint64_t operator()(const V4Key& k) const noexcept {
      std::uint64_t h = 0x9e3779b97f4a7c15ull ^ sizeof(V4Key);
      h = mix64(h ^ (std::uint64_t{k.remote_addr} << 32 | k.local_addr));
      return mix64(h ^ (std::uint64_t{k.remote_port} << 16 | k.local_port));
    }
  };
  // Both ends are of one family in any flow this host has.
  static bool v4(const FourTuple& t) noexcept { return t.local.addr.is_v4() && t.remote.addr.is_v4(); }
  static V4Key short_key(const FourTuple& t) noexcept {
    return V4Key{t.local.addr.v4().value, t.remote.addr.v4().value, t.local.port, t.remote.port};
  }
  FlatMap<V4Key, V, V4Hash> v4_;
  FlatMap<FourTuple, V> v6_;
};

// The passive map: who is told of what a key's first message opens. A key is
// held by one upper protocol and counted, since open_enable may come more than
// once for it (each listener of a shared port enables it again); the last
// open_disable frees it. Every layer with passive opens keeps one of these.
template <class K, class Hash = KeyHash<K>>
class EnableTable {
 public:
  // Errc::exists when another protocol holds the key.
  Status enable(const K& key, Protocol& upper) {
    if (Entry* e = map_.find(key)) {
      if (e->upper != &upper) return Errc::exists;
      ++e->count;
      return {};
    }
    map_.insert(key, Entry{&upper, 1});
    return {};
  }
  // Errc::not_found unless `upper` holds the key.
  Status disable(const K& key, Protocol& upper) {
    Entry* e = map_.find(key);
    if (e == nullptr || e->upper != &upper) return Errc::not_found;
    if (--e->count == 0) map_.erase(key);
    return {};
  }
  // The protocol that enabled key, or nullptr.
  Protocol* upper(const K& key) const noexcept {
    const Entry* e = map_.find(key);
    return e != nullptr ? e->upper : nullptr;
  }
  std::uint32_t count(const K& key) const noexcept {
    const Entry* e = map_.find(key);
    return e != nullptr ? e->count : 0;
  }
  std::size_t size() const noexcept { return map_.size(); }

 private:
  struct Entry {
    Protocol* upper;
    std::uint32_t count;
  };
  FlatMap<K, Entry, Hash> map_;
};

}  // namespace xk

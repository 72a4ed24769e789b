#pragma once
// Bounded lock-free queues for handing work between threads: the application
// threads post to a stack's service thread, and the stack hands results back.
//
// MpmcRing<T>: any number of producers and consumers. Every slot carries a
// sequence number that says whose turn it is: a producer may fill slot i of
// lap k when seq == position, a consumer may empty it when seq == position + 1,
// and emptying hands it to lap k + 1 (seq = position + capacity). Producers
// (and consumers) race only on one counter with a CAS; the data itself is
// published by the release store of the slot's sequence. Items of one producer
// come out in the order it pushed them.
//
// SpscRing<T>: one producer, one consumer; no CAS, and each side keeps a cached
// copy of the other's index so it touches the shared line only when the cached
// view says full (or empty).
//
// Both: capacity rounded up to a power of two (at least 2), items constructed in
// place on push and destroyed on pop (T needs no default constructor), nothing
// allocated after construction, remaining items destroyed with the ring. A push
// that finds the ring full consumes nothing: its arguments are left untouched.

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace xk {

namespace detail {
// One cache line: keeps the producer and consumer indices from false sharing.
inline constexpr std::size_t kCacheLine = 64;

inline std::size_t ring_capacity(std::size_t requested) {
  if (requested == 0 || requested > (std::size_t{1} << 40)) {
    throw std::invalid_argument("ring capacity must be in [1, 2^40]");
  }
  return std::bit_ceil(requested < 2 ? std::size_t{2} : requested);
}

template <class T>
struct RingCell {
  alignas(T) unsigned char bytes[sizeof(T)];
  T* get() noexcept { return std::launder(static_cast<T*>(static_cast<void*>(bytes))); }
  void* raw() noexcept { return static_cast<void*>(bytes); }
};
}  // namespace detail

template <class T>
class MpmcRing {
 public:
  explicit MpmcRing(std::size_t capacity)
      : mask_(detail::ring_capacity(capacity) - 1), slots_(new Slot[mask_ + 1]) {
    for (std::size_t i = 0; i <= mask_; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  }
  ~MpmcRing() {
    while (try_pop()) {
    }
  }
  MpmcRing(const MpmcRing&) = delete;
  MpmcRing& operator=(const MpmcRing&) = delete;

  template <class... Args>
  bool try_emplace(Args&&... args) noexcept {
    static_assert(std::is_nothrow_constructible_v<T, Args&&...>,
                  "a claimed slot must be filled: construction may not throw");
    std::size_t pos = enqueue_.load(std::memory_order_relaxed);
    Slot* slot;
    for (;;) {
      slot = &slots_[pos & mask_];
      std::size_t seq = slot->seq.load(std::memory_order_acquire);
      auto lag = static_cast<std::intptr_t>(seq - pos);
      if (lag == 0) {
        if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (lag < 0) {
        return false;  // the slot still holds lap k-1's item: full
      } else {
        pos = enqueue_.load(std::memory_order_relaxed);  // another producer took it
      }
    }
    ::new (slot->cell.raw()) T(std::forward<Args>(args)...);
    slot->seq.store(pos + 1, std::memory_order_release);
    return true;
  }
  bool try_push(T&& v) noexcept { return try_emplace(std::move(v)); }
  bool try_push(const T& v) noexcept { return try_emplace(v); }

  std::optional<T> try_pop() noexcept {
    static_assert(std::is_nothrow_move_constructible_v<T>);
    std::size_t pos = dequeue_.load(std::memory_order_relaxed);
    Slot* slot;
    for (;;) {
      slot = &slots_[pos & mask_];
      std::size_t seq = slot->seq.load(std::memory_order_acquire);
      auto lag = static_cast<std::intptr_t>(seq - (pos + 1));
      if (lag == 0) {
        if (dequeue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (lag < 0) {
        return std::nullopt;  // not yet filled: empty
      } else {
        pos = dequeue_.load(std::memory_order_relaxed);
      }
    }
    T* item = slot->cell.get();
    std::optional<T> out(std::move(*item));
    item->~T();
    slot->seq.store(pos + mask_ + 1, std::memory_order_release);
    return out;
  }

  // Whether the next item to pop is not yet published. Exact for a single
  // consumer asking between its own pops; a snapshot otherwise.
  bool empty() const noexcept {
    std::size_t pos = dequeue_.load(std::memory_order_relaxed);
    return slots_[pos & mask_].seq.load(std::memory_order_acquire) != pos + 1;
  }
  // Claimed but possibly not yet published items count: a snapshot.
  std::size_t size_approx() const noexcept {
    std::size_t d = dequeue_.load(std::memory_order_acquire);
    std::size_t e = enqueue_.load(std::memory_order_acquire);
    return e > d ? e - d : 0;
  }
  std::size_t capacity() const noexcept { return mask_ + 1; }

 private:
  struct Slot {
    std::atomic<std::size_t> seq{0};
    detail::RingCell<T> cell;
  };

  const std::size_t mask_;
  const std::unique_ptr<Slot[]> slots_;
  alignas(detail::kCacheLine) std::atomic<std::size_t> enqueue_{0};
  alignas(detail::kCacheLine) std::atomic<std::size_t> dequeue_{0};
  char pad_[detail::kCacheLine - sizeof(std::atomic<std::size_t>)] = {};
};

template <class T>
class SpscRing {
 public:
  explicit SpscRing(std::size_t capacity)
      : mask_(detail::ring_capacity(capacity) - 1), cells_(new Cell[mask_ + 1]) {}
  ~SpscRing() {
    while (try_pop()) {
    }
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  // Producer side.
  template <class... Args>
  bool try_emplace(Args&&... args) noexcept(std::is_nothrow_constructible_v<T, Args&&...>) {
    std::size_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_cache_ > mask_) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (h - tail_cache_ > mask_) return false;
    }
    ::new (cells_[h & mask_].raw()) T(std::forward<Args>(args)...);
    head_.store(h + 1, std::memory_order_release);
    return true;
  }
  bool try_push(T&& v) noexcept(std::is_nothrow_move_constructible_v<T>) {
    return try_emplace(std::move(v));
  }
  bool try_push(const T& v) noexcept(std::is_nothrow_copy_constructible_v<T>) { return try_emplace(v); }

  // Consumer side.
  std::optional<T> try_pop() noexcept {
    static_assert(std::is_nothrow_move_constructible_v<T>);
    std::size_t t = tail_.load(std::memory_order_relaxed);
    if (t == head_cache_) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (t == head_cache_) return std::nullopt;
    }
    T* item = cells_[t & mask_].get();
    std::optional<T> out(std::move(*item));
    item->~T();
    tail_.store(t + 1, std::memory_order_release);
    return out;
  }
  // Consumer side: exact for the consumer, a snapshot for anyone else.
  bool empty() const noexcept {
    return tail_.load(std::memory_order_relaxed) == head_.load(std::memory_order_acquire);
  }
  std::size_t size_approx() const noexcept {
    return head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_acquire);
  }
  std::size_t capacity() const noexcept { return mask_ + 1; }

 private:
  using Cell = detail::RingCell<T>;

  const std::size_t mask_;
  const std::unique_ptr<Cell[]> cells_;
  // Producer's line: its index and its view of the consumer's.
  alignas(detail::kCacheLine) std::atomic<std::size_t> head_{0};
  std::size_t tail_cache_ = 0;
  // Consumer's line.
  alignas(detail::kCacheLine) std::atomic<std::size_t> tail_{0};
  std::size_t head_cache_ = 0;
  char pad_[detail::kCacheLine - 2 * sizeof(std::size_t)] = {};
};

}  // namespace xk

#include "xk/msg.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>

#include "xk/copy.hpp"

namespace xk {

std::atomic<std::int64_t> Buf::live_{0};
std::atomic<std::uint64_t> Buf::created_{0};

namespace {
constexpr std::size_t kBufAlign = 64;
// Internal buffers are one block: the Buf header, padded to a cache line, then data.
constexpr std::size_t kHeaderSpace = (sizeof(Buf) + kBufAlign - 1) / kBufAlign * kBufAlign;

std::size_t block_size(std::size_t capacity) noexcept {
  return (kHeaderSpace + capacity + kBufAlign - 1) / kBufAlign * kBufAlign;
}

// Blocks of the sizes the data path asks for over and over -- a header
// buffer (Msg::kHeaderBufSize: one per TCP segment sent), a bare Buf (one per
// frame wrapped on receive) and a bulk chunk (Msg::kChunkSize: a TCP send
// buffer's, one per 64 KiB written) -- kept per thread when freed, so the data
// path does not go through malloc for each. Chunks matter for more than the
// call: freed at the top of the heap they make glibc give the memory back
// (brk) and the next one takes page faults to get it again, some 10 % of a
// bulk sender's time before they were kept. A block freed on another thread
// than it was made on joins that thread's cache. The sanitizer builds keep no
// cache, so every use after free is still caught.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kCacheDepth = 0;
constexpr std::size_t kChunkCacheDepth = 0;
#else
constexpr std::size_t kCacheDepth = 512;
constexpr std::size_t kChunkCacheDepth = 64;  // 4 MiB a thread at most
#endif

// Where a thread's cached blocks go when the thread ends: a process-wide
// shelf (of the same depth) that a thread whose own cache runs dry takes
// from, so threads that come and go do not each pay malloc for a warm-up.
// Beyond its depth, blocks go back to malloc.
template <std::size_t kDepth>
class Shelf {
 public:
  // Takes up to `n` blocks into `out`; returns how many.
  std::size_t take(void** out, std::size_t n) noexcept {
    if (count_.load(std::memory_order_relaxed) == 0) return 0;
    std::lock_guard<std::mutex> lock(mu_);
    std::size_t k = 0;
    while (k < n && n_ != 0) out[k++] = blocks_[--n_];
    count_.store(n_, std::memory_order_relaxed);
    return k;
  }
  // Keeps the block, or false when full.
  bool give(void* block) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    if (n_ == kDepth) return false;
    blocks_[n_++] = block;
    count_.store(n_, std::memory_order_relaxed);
    return true;
  }

 private:
  std::mutex mu_;
  void* blocks_[kDepth == 0 ? 1 : kDepth];
  std::size_t n_ = 0;
  std::atomic<std::size_t> count_{0};
};

// One thread's cache of one kind of block (kKind tells the caches of one
// depth apart: each kind has its own shelf). Plain data with no destructor
// of its own: a thread's other destructors, and the rest of an exit on the
// main thread (atexit handlers, the preload's shut-down running the stack),
// still free and allocate buffers after the thread has ended as far as the
// caches are concerned, so the cache must stay readable, and say it is
// closed, after that. The closing is done from outside, by ThreadCaches's
// destructor: a destructor's stores to its own object are dead to the
// compiler (GCC's lifetime dead-store elimination drops them), and a cache
// that closed itself that way kept its count and went on handing out the
// blocks it had just shelved or freed -- a block given to two owners, which
// corrupted glibc's heap at exit under xkrun (curl, socat).
template <std::size_t kDepth, int kKind>
struct BlockCache {
  void* take() noexcept {
    if (n_ == 0 && !closed_) n_ = shelf().take(blocks_, kDepth / 2);
    return n_ != 0 ? blocks_[--n_] : nullptr;
  }
  bool give(void* block) noexcept;  // below: it arms the closer
  // The thread ends: the blocks go to the shelf (or malloc), and a buffer
  // freed after this goes straight back to malloc.
  void close() noexcept {
    for (std::size_t i = 0; i < n_; ++i) {
      if (!shelf().give(blocks_[i])) std::free(blocks_[i]);
    }
    n_ = 0;
    closed_ = true;
  }

  // Made on first use, never destroyed: threads may end (and shelve) during exit.
  static Shelf<kDepth>& shelf() {
    static auto* const s = new Shelf<kDepth>();
    return *s;
  }
  void* blocks_[kDepth == 0 ? 1 : kDepth];
  std::size_t n_ = 0;
  bool closed_ = false;
};

thread_local BlockCache<kCacheDepth, 0> t_header_blocks;      // internal storage of kHeaderBufSize
thread_local BlockCache<kCacheDepth, 1> t_wrap_blocks;        // a Buf for external storage
thread_local BlockCache<kChunkCacheDepth, 2> t_chunk_blocks;  // internal storage of kChunkSize

// Closes the thread's caches as it ends. A thread_local with a destructor
// is set up on its first use in a thread: a cache's first give() makes it.
struct ThreadCaches {
  ~ThreadCaches() {
    t_header_blocks.close();
    t_wrap_blocks.close();
    t_chunk_blocks.close();
  }
};
thread_local ThreadCaches t_caches;
thread_local bool t_caches_armed = false;

template <std::size_t kDepth, int kKind>
bool BlockCache<kDepth, kKind>::give(void* block) noexcept {
  if (closed_ || n_ == kDepth) return false;
  if (!t_caches_armed) {
    t_caches_armed = true;
    (void)&t_caches;  // its first use: the destructor is registered
  }
  blocks_[n_++] = block;
  return true;
}

// A cached block for internal storage of `capacity` bytes, or null.
void* take_block(std::size_t capacity) noexcept {
  if (capacity == Msg::kHeaderBufSize) return t_header_blocks.take();
  if (capacity == Msg::kChunkSize) return t_chunk_blocks.take();
  return nullptr;
}
// Keeps a freed block of internal storage if its size is cached (and the
// cache has room).
bool give_block(void* block, std::size_t capacity) noexcept {
  if (capacity == Msg::kHeaderBufSize) return t_header_blocks.give(block);
  if (capacity == Msg::kChunkSize) return t_chunk_blocks.give(block);
  return false;
}

constexpr std::size_t kWrapBlock = (sizeof(Buf) + kBufAlign - 1) / kBufAlign * kBufAlign;

}  // namespace

void Buf::give_chunk(void* source, std::byte* chunk) { static_cast<ChunkSource*>(source)->give(chunk); }

Buf* Buf::allocate(std::size_t capacity, ChunkSource* source) {
  if (capacity > UINT32_MAX - kHeaderSpace) return nullptr;
  // Every small buffer (a header, a bare ACK, a SYN-ACK) is a header block:
  // the cache serves them all, and the spare bytes are tailroom.
  if (capacity < Msg::kHeaderBufSize) capacity = Msg::kHeaderBufSize;
  if (capacity == Msg::kChunkSize && source != nullptr) {
    // A chunk from the source: a bare Buf over its storage.
    std::byte* chunk = source->take();
    if (chunk != nullptr) {
      // A bare Buf over it, as for external storage -- but the storage is
      // the stack's own: appended to like any other.
      Buf* b = wrap(chunk, capacity, BufDeleter{&give_chunk, source});
      if (b == nullptr) {
        source->give(chunk);
        return nullptr;
      }
      b->external_ = false;
      return b;
    }
  }
  void* block = take_block(capacity);
  if (block == nullptr) block = std::aligned_alloc(kBufAlign, block_size(capacity));
  if (block == nullptr) return nullptr;
  Buf* b = new (block) Buf();
  b->capacity_ = static_cast<std::uint32_t>(capacity);
  b->data_ = static_cast<std::byte*>(block) + kHeaderSpace;
  b->head_mark_ = b->capacity_;
  b->tail_mark_ = 0;
  live_.fetch_add(1, std::memory_order_relaxed);
  created_.fetch_add(1, std::memory_order_relaxed);
  return b;
}

Buf* Buf::wrap(std::byte* data, std::size_t capacity, BufDeleter deleter) {
  if (capacity > UINT32_MAX) return nullptr;
  void* block = t_wrap_blocks.take();
  if (block == nullptr) block = std::aligned_alloc(kBufAlign, kWrapBlock);
  if (block == nullptr) return nullptr;
  Buf* b = new (block) Buf();
  b->capacity_ = static_cast<std::uint32_t>(capacity);
  b->data_ = data;
  b->deleter_ = deleter;
  b->external_ = true;
  b->head_mark_ = b->capacity_;
  b->tail_mark_ = 0;
  live_.fetch_add(1, std::memory_order_relaxed);
  created_.fetch_add(1, std::memory_order_relaxed);
  return b;
}

void Buf::destroy() noexcept {
  live_.fetch_sub(1, std::memory_order_relaxed);
  // A bare Buf (external storage, a source's chunk) is a block of its own;
  // internal storage follows its header in one block.
  const bool bare = external_ || deleter_.fn == &give_chunk;
  const std::uint32_t capacity = capacity_;
  if (deleter_.fn != nullptr) deleter_.fn(deleter_.ctx, data_);
  this->~Buf();
  void* block = this;
  if (bare ? t_wrap_blocks.give(block) : give_block(block, capacity)) return;
  std::free(block);
}

// ---- construction ---------------------------------------------------------

Frag Msg::claim(Buf* b, std::size_t off, std::size_t len) noexcept {
  Frag f{b, static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(len)};
  b->head_mark_ = f.off;
  b->tail_mark_ = f.off + f.len;
  return f;
}

Msg Msg::single(const Frag& f) noexcept {
  Msg m;
  m.frags_[0] = f;
  m.n_ = 1;
  m.size_ = f.len;
  return m;
}

void Msg::release() noexcept {
  for (std::uint32_t i = 0; i < n_; ++i) frags_[i].buf->unref();
  if (frags_ != inline_) delete[] frags_;
  frags_ = inline_;
  cap_ = kInline;
  n_ = 0;
  size_ = 0;
}

Msg Msg::alloc(std::size_t len, std::size_t headroom, std::size_t tailroom) {
  Buf* b = Buf::allocate(headroom + len + tailroom);
  if (b == nullptr) throw std::bad_alloc();
  return single(claim(b, headroom, len));
}

Msg Msg::chunk(ChunkSource* source) {
  Buf* b = Buf::allocate(kChunkSize, source);
  if (b == nullptr) throw std::bad_alloc();
  return single(claim(b, 0, 0));
}

Msg Msg::copy_of(std::span<const std::byte> bytes, std::size_t headroom) {
  Msg m = alloc(bytes.size(), headroom);
  if (!bytes.empty()) std::memcpy(m.frags_[0].data(), bytes.data(), bytes.size());
  return m;
}

Result<Msg> Msg::wrap(std::byte* base, std::size_t capacity, std::size_t off, std::size_t len,
                      BufDeleter deleter) {
  if (off > capacity || len > capacity - off || capacity > UINT32_MAX) {
    if (deleter.fn != nullptr) deleter.fn(deleter.ctx, base);
    return Errc::invalid_argument;
  }
  Buf* b = Buf::wrap(base, capacity, deleter);
  if (b == nullptr) {
    if (deleter.fn != nullptr) deleter.fn(deleter.ctx, base);
    return Errc::no_memory;
  }
  return single(claim(b, off, len));
}

Result<Msg> Msg::wrap_read_only(const std::byte* base, std::size_t capacity, std::size_t off, std::size_t len,
                                BufDeleter deleter) {
  // The cast only lets Buf hold the pointer: read_only_ keeps every write out.
  Result<Msg> m = wrap(const_cast<std::byte*>(base), capacity, off, len, deleter);
  if (m) m->frags_[0].buf->read_only_ = true;
  return m;
}

// ---- fragment array -------------------------------------------------------

Status Msg::reserve(std::uint32_t cap) {
  if (cap <= cap_) return {};
  std::uint32_t new_cap = std::max(cap, cap_ * 2);
  Frag* fresh = new (std::nothrow) Frag[new_cap];
  if (fresh == nullptr) return Errc::no_memory;
  std::copy_n(frags_, n_, fresh);
  if (frags_ != inline_) delete[] frags_;
  frags_ = fresh;
  cap_ = new_cap;
  return {};
}

Status Msg::insert_front(const Frag& f) {
  if (Status s = reserve(n_ + 1); !s) return s;
  std::copy_backward(frags_, frags_ + n_, frags_ + n_ + 1);
  frags_[0] = f;
  ++n_;
  size_ += f.len;
  return {};
}

Status Msg::push_back_frag(const Frag& f) {
  if (Status s = reserve(n_ + 1); !s) return s;
  frags_[n_++] = f;
  size_ += f.len;
  return {};
}

void Msg::erase_front(std::uint32_t count) noexcept {
  for (std::uint32_t i = 0; i < count; ++i) {
    size_ -= frags_[i].len;
    frags_[i].buf->unref();
  }
  std::copy(frags_ + count, frags_ + n_, frags_);
  n_ -= count;
}

// ---- headers --------------------------------------------------------------

std::size_t Msg::headroom() const noexcept {
  if (n_ == 0) return 0;
  const Frag& f = frags_[0];
  if (f.buf->read_only_ || (f.off != f.buf->head_mark_ && f.buf->refs() != 1)) return 0;
  return f.off;
}

Result<std::span<std::byte>> Msg::push(std::size_t n) {
  std::span<std::byte> out;
  if (push_in_place_fast(n, out)) return out;
  if (n > kMaxContiguous) return Errc::too_large;
  // No room in place: prepend a fresh header buffer, with the rest of its space
  // left as headroom for the layers below.
  std::size_t cap = std::max(kHeaderBufSize, n);
  Buf* b = Buf::allocate(cap);
  if (b == nullptr) return Errc::no_memory;
  Frag f = claim(b, cap - n, n);
  if (Status s = insert_front(f); !s) {
    b->unref();
    return s.error();
  }
  return std::span<std::byte>{f.data(), n};
}

Status Msg::pull_up(std::size_t n) {
  if (n > size_) return Errc::out_of_range;
  // Drop leading empty fragments; they carry nothing.
  std::uint32_t empties = 0;
  while (empties < n_ && frags_[empties].len == 0) ++empties;
  if (empties == n_) return n == 0 ? Status{} : Status{Errc::out_of_range};
  if (empties > 0) erase_front(empties);
  if (frags_[0].len >= n) return {};
  if (n > kMaxContiguous) return Errc::too_large;

  // Gather the first n bytes into a new buffer that keeps the usual headroom.
  Buf* b = Buf::allocate(kDefaultHeadroom + n);
  if (b == nullptr) return Errc::no_memory;
  Frag head = claim(b, kDefaultHeadroom, n);
  std::byte* dst = head.data();
  std::size_t need = n;
  std::uint32_t consumed = 0;
  while (need > 0) {
    Frag& f = frags_[consumed];
    std::size_t take = std::min<std::size_t>(need, f.len);
    std::memcpy(dst, f.data(), take);
    dst += take;
    need -= take;
    if (take == f.len) {
      ++consumed;
    } else {
      f.off += static_cast<std::uint32_t>(take);
      f.len -= static_cast<std::uint32_t>(take);
      size_ -= take;
    }
  }
  erase_front(consumed);
  if (Status s = insert_front(head); !s) {
    b->unref();
    return s;
  }
  return {};
}

Result<std::span<const std::byte>> Msg::peek(std::size_t n) {
  if (n == 0) return std::span<const std::byte>{};
  if (n > size_) return Errc::out_of_range;
  if (n_ == 0 || frags_[0].len < n) {
    if (Status s = pull_up(n); !s) return s.error();
  }
  return std::span<const std::byte>{frags_[0].data(), n};
}

Status Msg::copy_out(std::size_t off, std::span<std::byte> dst) const {
  if (off > size_ || dst.size() > size_ - off) return Errc::out_of_range;
  std::size_t need = dst.size();
  std::byte* out = dst.data();
  for (std::uint32_t i = 0; i < n_ && need > 0; ++i) {
    const Frag& f = frags_[i];
    if (off >= f.len) {
      off -= f.len;
      continue;
    }
    std::size_t take = std::min<std::size_t>(need, f.len - off);
    copy_bytes(out, f.data() + off, take);
    out += take;
    need -= take;
    off = 0;
  }
  return {};
}

Status Msg::pop_into(std::span<std::byte> dst) {
  if (Status s = copy_out(0, dst); !s) return s;
  return trim_front(dst.size());
}

Status Msg::trim_front(std::size_t n) {
  if (n > size_) return Errc::out_of_range;
  std::uint32_t drop = 0;
  while (n > 0) {
    Frag& f = frags_[drop];
    if (n < f.len) {
      f.off += static_cast<std::uint32_t>(n);
      f.len -= static_cast<std::uint32_t>(n);
      size_ -= n;
      n = 0;
    } else {
      n -= f.len;
      ++drop;
    }
  }
  // Keep the first buffer if it is now empty and the last one: it still holds
  // headroom for headers pushed back on.
  if (drop == n_ && drop > 0) {
    Frag& last = frags_[drop - 1];
    last.off += last.len;
    size_ -= last.len;
    last.len = 0;
    --drop;
  }
  erase_front(drop);
  return {};
}

Status Msg::truncate(std::size_t n) {
  if (n > size_) return Errc::out_of_range;
  std::size_t kept = 0;
  std::uint32_t i = 0;
  for (; i < n_; ++i) {
    Frag& f = frags_[i];
    if (kept + f.len >= n) {
      f.len = static_cast<std::uint32_t>(n - kept);
      ++i;
      break;
    }
    kept += f.len;
  }
  for (std::uint32_t j = i; j < n_; ++j) frags_[j].buf->unref();
  n_ = i;
  size_ = n;
  return {};
}

Result<Msg> Msg::split(std::size_t off) {
  if (off > size_) return Errc::out_of_range;
  Msg tail;
  std::size_t pos = 0;
  std::uint32_t i = 0;
  while (i < n_ && pos + frags_[i].len <= off) pos += frags_[i++].len;
  // Fragment i straddles the cut (or i == n_ when off == size_).
  if (Status s = tail.reserve(n_ - i + 1); !s) return s.error();
  std::uint32_t first_moved = i;
  if (i < n_ && off > pos) {
    Frag& f = frags_[i];
    std::uint32_t head_len = static_cast<std::uint32_t>(off - pos);
    Frag rest{f.buf, f.off + head_len, f.len - head_len};
    f.buf->ref();
    (void)tail.push_back_frag(rest);  // capacity reserved above
    f.len = head_len;
    first_moved = i + 1;
  }
  for (std::uint32_t j = first_moved; j < n_; ++j) (void)tail.push_back_frag(frags_[j]);
  n_ = first_moved;
  size_ = off;
  tail.offload_ = offload_;
  tail.rx_ = rx_;
  return tail;
}

void Msg::join(Msg&& tail) {
  if (&tail == this) return;
  if (n_ == 0) {
    *this = std::move(tail);
    return;
  }
  if (!reserve(n_ + tail.n_)) throw std::bad_alloc();
  std::copy_n(tail.frags_, tail.n_, frags_ + n_);
  n_ += tail.n_;
  size_ += tail.size_;
  // The fragments (and their references) now belong to us.
  tail.n_ = 0;
  tail.size_ = 0;
  tail.reset();
}

Status Msg::append(std::span<const std::byte> bytes) {
  if (bytes.empty()) return {};
  if (n_ > 0) {
    Frag& f = frags_[n_ - 1];
    Buf* b = f.buf;
    std::uint32_t end = f.off + f.len;
    bool ours = b->refs() == 1 || end == b->tail_mark_;
    if (ours && !b->external_ && b->capacity() - end >= bytes.size()) {
      copy_into_shared(b->data() + end, bytes.data(), bytes.size());
      f.len += static_cast<std::uint32_t>(bytes.size());
      b->tail_mark_ = f.off + f.len;
      size_ += bytes.size();
      return {};
    }
  }
  Buf* b = Buf::allocate(bytes.size());
  if (b == nullptr) return Errc::no_memory;
  copy_into_shared(b->data(), bytes.data(), bytes.size());
  Frag f = claim(b, 0, bytes.size());
  if (Status s = push_back_frag(f); !s) {
    b->unref();
    return s;
  }
  return {};
}

Msg Msg::share() const {
  Msg m;
  if (!m.reserve(n_)) throw std::bad_alloc();
  for (std::uint32_t i = 0; i < n_; ++i) {
    frags_[i].buf->ref();
    m.frags_[i] = frags_[i];
  }
  m.n_ = n_;
  m.size_ = size_;
  m.offload_ = offload_;
  m.rx_ = rx_;
  return m;
}

Status Msg::linearize() {
  if (n_ <= 1) return {};
  return copy_to_one(kDefaultHeadroom);
}

bool Msg::holds_external() const noexcept {
  for (std::uint32_t i = 0; i < n_; ++i) {
    if (frags_[i].buf->external_) return true;
  }
  return false;
}

Status Msg::own() {
  if (!holds_external()) return {};
  return copy_to_one(0);
}

Status Msg::copy_to_one(std::size_t headroom) {
  Buf* b = Buf::allocate(headroom + size_);
  if (b == nullptr) return Errc::no_memory;
  Frag f = claim(b, headroom, size_);
  (void)copy_out(0, {f.data(), size_});
  std::size_t total = size_;
  const Offload kept = offload_;
  const RxInfo facts = rx_;
  reset();
  frags_[0] = f;
  n_ = 1;
  size_ = total;
  offload_ = kept;
  rx_ = facts;
  return {};
}

}  // namespace xk

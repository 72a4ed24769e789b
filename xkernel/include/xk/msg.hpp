#pragma once
// Msg: the unit every layer passes up and down the graph.
//
// A Msg is a move-only chain of fragments. Each fragment is a window
// (offset, length) into a reference-counted buffer (Buf). The first buffer
// normally has headroom in front of the data, so pushing a header moves the
// window back and writes in place: no allocation, no copy of the payload.
// Buffers can be internal (allocated here) or external (an rte_mbuf, a user
// buffer) released through a deleter, so received payload can travel up to the
// application without a copy.
//
// Sharing: share() gives a second Msg over the same buffers. Bytes inside a
// window are never written through a shared buffer. Headroom in front of a
// shared buffer belongs to whichever Msg claims it first: every buffer keeps a
// frontier (head_mark); a push may extend a window backwards only while the
// window starts at that frontier or the buffer has a single owner.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "xk/ip_addr.hpp"
#include "xk/result.hpp"

namespace xk {

// How an external buffer is released when the last fragment referring to it
// goes away. A plain function pointer plus context: no allocation to wrap.
struct BufDeleter {
  void (*fn)(void* ctx, std::byte* data) = nullptr;
  void* ctx = nullptr;
};

// Where bulk chunks (Msg::kChunkSize bytes: a TCP send buffer's) come
// from when not from the heap. A driver whose link can send straight out
// of such memory offers one (ctl::GetChunkSource): the shm driver's arena,
// which its peers map, so a segment's payload crosses as a reference
// (docs/shm-driver.md). TCP asks for it through the graph and hands it to
// its send buffers (Msg::chunk).
class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  // A chunk of Msg::kChunkSize bytes, or null (the heap serves instead).
  // Any thread may call both.
  virtual std::byte* take() noexcept = 0;
  virtual void give(std::byte* chunk) noexcept = 0;
};

class Buf {
 public:
  // Internal storage of `capacity` bytes, 64-byte aligned; a bulk chunk
  // (capacity Msg::kChunkSize) from `source` when it has one.
  static Buf* allocate(std::size_t capacity, ChunkSource* source = nullptr);
  // External storage; `deleter` runs when the last reference drops.
  static Buf* wrap(std::byte* data, std::size_t capacity, BufDeleter deleter);

  std::byte* data() const noexcept { return data_; }
  std::uint32_t capacity() const noexcept { return capacity_; }
  std::uint32_t refs() const noexcept { return refcnt_.load(std::memory_order_acquire); }
  bool external() const noexcept { return external_; }
  // How external storage is given back: lets a driver recognise its own
  // buffers (an rte_mbuf it received) in a message it is asked to send.
  const BufDeleter& deleter() const noexcept { return deleter_; }

  void ref() noexcept { refcnt_.fetch_add(1, std::memory_order_relaxed); }
  void unref() noexcept {
    // A sole owner needs no atomic read-modify-write: nobody else holds a
    // reference to add one from, so the count cannot change under it.
    if (refcnt_.load(std::memory_order_acquire) == 1 || refcnt_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy();
  }

  // Buffers alive in this process: the leak check compares it across a test.
  static std::int64_t live() noexcept { return live_.load(std::memory_order_relaxed); }
  // Buffers ever created in this process: benchmarks use it to show a path
  // allocates nothing.
  static std::uint64_t created() noexcept { return created_.load(std::memory_order_relaxed); }

 private:
  friend class Msg;
  Buf() = default;
  void destroy() noexcept;
  static void give_chunk(void* source, std::byte* chunk);

  std::atomic<std::uint32_t> refcnt_{1};
  std::uint32_t capacity_ = 0;
  std::uint32_t head_mark_ = 0;  // lowest offset claimed by any window
  std::uint32_t tail_mark_ = 0;  // highest end claimed by any window
  std::byte* data_ = nullptr;
  BufDeleter deleter_{};  // external storage or a source's chunk; may be empty (nothing to release)
  bool external_ = false;  // storage not ours: never cached, never appended to
  bool read_only_ = false;  // storage we may not write: no push in place either

  static std::atomic<std::int64_t> live_;
  static std::atomic<std::uint64_t> created_;
};

// One window into a buffer.
struct Frag {
  Buf* buf = nullptr;
  std::uint32_t off = 0;
  std::uint32_t len = 0;

  std::byte* data() const noexcept { return buf->data() + off; }
  std::span<const std::byte> bytes() const noexcept { return {data(), len}; }
};

// Checksum work asked of the port on transmit, or done by it on receive
// (docs/checksum.md, "Offload"). It rides with the message through the layers:
// a driver sets the rx bits, ipv4/udp/tcp read them; the layers set the tx
// requests and the driver hands them to the port. Moves, splits and shares
// carry it; reset() clears it.
struct Offload {
  enum Flag : std::uint8_t {
    tx_ip_csum = 1,   // the port fills the IPv4 header checksum
    tx_udp_csum = 2,  // ... the UDP checksum (the field holds the pseudo-header sum)
    tx_tcp_csum = 4,  // ... the TCP checksum (likewise)
    rx_ip_good = 8,   // the port verified the IPv4 header checksum
    rx_l4_good = 16,  // the port verified the UDP/TCP checksum
    // The port's receive buffers are running low: a layer that keeps this
    // frame a while (a receive or reassembly queue) copies it with
    // Msg::own() and lets the port's buffer go (docs/xkernel.md,
    // "Buffers from a port").
    rx_scarce = 32,
    // Segmentation offload: the frame is one TCP segment larger than the
    // MTU allows; the port (or its driver, in software) cuts it into
    // segments of seg_size payload bytes, each with its own IPv4 and TCP
    // header and checksums (docs/tcp.md, "Segmentation offload").
    tx_tcp_seg = 64,
    // Receive coalescing put several TCP segments of one flow into this
    // frame, each of seg_size payload bytes but the last (which may be
    // shorter): a forwarder that must cut it again cuts it there.
    rx_coalesced = 128,
  };
  static constexpr std::uint8_t kTxMask = tx_ip_csum | tx_udp_csum | tx_tcp_csum;
  static constexpr std::uint8_t kRxMask = rx_ip_good | rx_l4_good | rx_scarce | rx_coalesced;

  std::uint8_t flags = 0;
  std::uint8_t l3_len = 0;  // IPv4 header bytes, for the tx requests
  std::uint16_t seg_size = 0;  // tx_tcp_seg, rx_coalesced: payload bytes per segment
  // Sending: the IPv4 TOS byte a transport asks for this packet -- DSCP
  // (IP_TOS) and the ECN field (RFC 3168: ECT(0) on a TCP data segment).
  std::uint8_t tos = 0;
  // Sending: the TTL (IPv4) or hop limit (IPv6) a socket asks for its
  // packets (IP_TTL, IPV6_UNICAST_HOPS); 0: the IP layer's default.
  std::uint8_t hop_limit = 0;

  bool has(Flag f) const noexcept { return (flags & f) != 0; }
};

// What the network layer learned of a received packet: IP fills it as it
// hands the packet up, the transports read it (Msg::rx()). It travels with
// the message, so a layer that holds a packet back (fault's delay) keeps it
// without asking anyone again.
struct RxInfo {
  IpAddr src;
  IpAddr dst;
  std::uint8_t protocol = 0;       // IPv4 protocol; IPv6: the payload's next header
  std::uint8_t hop_limit = 0;      // IPv4 TTL, IPv6 hop limit
  std::uint8_t traffic_class = 0;  // IPv4 TOS byte, IPv6 traffic class (DSCP and ECN)
  bool broadcast = false;          // a limited or subnet-directed broadcast destination
  bool reassembled = false;        // built from fragments
};

class Msg {
 public:
  static constexpr std::size_t kDefaultHeadroom = 128;
  // A header fragment allocated when a push finds no room in place.
  static constexpr std::size_t kHeaderBufSize = 256;
  // The size of bulk data buffers (a TCP send buffer's chunks): freed ones
  // are kept per thread like header buffers (docs/xkernel.md, "Buffers").
  static constexpr std::size_t kChunkSize = 64 * 1024;
  // Largest contiguous region a single push or pull-up may ask for.
  static constexpr std::size_t kMaxContiguous = 64 * 1024;

  // Moves and destruction are inline: a frame passes through each layer by
  // value, so a packet sees several of each, and most destroyed messages are
  // the empty shells left by a move (docs/xkernel.md, "Buffers").
  Msg() noexcept = default;
  Msg(Msg&& other) noexcept { take(other); }
  Msg& operator=(Msg&& other) noexcept {
    if (this != &other) {
      if (!is_bare()) release();
      take(other);
    }
    return *this;
  }
  Msg(const Msg&) = delete;
  Msg& operator=(const Msg&) = delete;
  ~Msg() {
    if (!is_bare()) release();
  }

  // A message of `len` bytes (contents unspecified) with room for headers in
  // front and `tailroom` spare bytes behind.
  static Msg alloc(std::size_t len, std::size_t headroom = kDefaultHeadroom,
                   std::size_t tailroom = 0);
  static Msg copy_of(std::span<const std::byte> bytes, std::size_t headroom = kDefaultHeadroom);
  // An empty message over a fresh bulk chunk (kChunkSize bytes, no
  // headroom) to append to: from `source` when it has one to give (it must
  // outlive the buffer), else from the heap.
  static Msg chunk(ChunkSource* source);
  // Carry an external buffer without copying: [base, base+capacity) is the
  // storage, the data is [base+off, base+off+len); the bytes in front of it are
  // headroom. `deleter` runs when the last reference drops (also on failure).
  static Result<Msg> wrap(std::byte* base, std::size_t capacity, std::size_t off,
                          std::size_t len, BufDeleter deleter);
  // As wrap, for storage this process may only read (a peer's memory mapped
  // read-only): nothing is ever written into it, a push always takes a
  // header fragment of its own.
  static Result<Msg> wrap_read_only(const std::byte* base, std::size_t capacity, std::size_t off,
                                    std::size_t len, BufDeleter deleter);

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t fragment_count() const noexcept { return n_; }
  std::span<const Frag> fragments() const noexcept { return {frags_, n_}; }

  // Bytes a push can take in place (without allocating).
  std::size_t headroom() const noexcept;

  // Make room for an n-byte header in front and return it for writing. Uses
  // headroom when there is some; otherwise prepends a new header fragment.
  // Fails with too_large for n > kMaxContiguous, no_memory if allocation fails.
  Result<std::span<std::byte>> push(std::size_t n);
  // As push, but never allocates: fails with no_headroom when there is no room.
  Result<std::span<std::byte>> push_in_place(std::size_t n);

  // The first n bytes as one contiguous read-only span, pulling them into one
  // fragment if they straddle several. out_of_range if n > size().
  Result<std::span<const std::byte>> peek(std::size_t n);
  // As peek, then consume the bytes. The span stays valid until the next call
  // that changes this message.
  Result<std::span<const std::byte>> pop(std::size_t n);
  // Copy the first dst.size() bytes out and consume them (never allocates).
  Status pop_into(std::span<std::byte> dst);
  // Copy bytes [off, off+dst.size()) out without consuming anything.
  Status copy_out(std::size_t off, std::span<std::byte> dst) const;

  // Drop the first n bytes.
  Status trim_front(std::size_t n);
  // Keep only the first n bytes.
  Status truncate(std::size_t n);
  // Keep [0, off) here and return [off, size()) as a new message. Buffers are
  // shared, not copied.
  Result<Msg> split(std::size_t off);
  // Append another message's fragments; `tail` is left empty.
  void join(Msg&& tail);
  // Append a copy of `bytes`, in the last buffer's tailroom when it is ours.
  Status append(std::span<const std::byte> bytes);
  // A second message over the same bytes (reference counts, no copy).
  Msg share() const;

  // Copy the whole message into one new contiguous buffer.
  Status linearize();

  // Some fragment lies in external storage (an rte_mbuf, a user buffer).
  bool holds_external() const noexcept;
  // Copy the message into one internal buffer when it holds external
  // storage, releasing that storage; bytes and offload flags stay the same.
  // What a layer does before keeping a frame whose port is short of
  // buffers (Offload::rx_scarce).
  Status own();
  // own() if the frame says its port's buffers are running low.
  Status own_if_scarce() {
    return offload_.has(Offload::rx_scarce) ? own() : Status{};
  }

  // Drop everything.
  void reset() noexcept {
    if (!is_bare()) release();
    offload_ = Offload{};
    rx_ = RxInfo{};
  }

  Offload& offload() noexcept { return offload_; }
  const Offload& offload() const noexcept { return offload_; }
  // The received packet's facts (RxInfo); moves, splits and shares carry
  // them, reset() clears them.
  RxInfo& rx() noexcept { return rx_; }
  const RxInfo& rx() const noexcept { return rx_; }

 private:
  static constexpr std::uint32_t kInline = 4;

  // A window over a fresh buffer, which also becomes the buffer's frontiers.
  static Frag claim(Buf* b, std::size_t off, std::size_t len) noexcept;
  // No fragments and no heap array: nothing to release.
  bool is_bare() const noexcept { return n_ == 0 && frags_ == inline_; }
  // Unreference every fragment and free a heap array; leaves the message
  // empty (the offload flags are the caller's business).
  void release() noexcept;
  // Steal `other`'s contents into this bare message; `other` is left empty.
  void take(Msg& other) noexcept {
    if (other.frags_ == other.inline_) {
      for (std::uint32_t i = 0; i < other.n_; ++i) inline_[i] = other.inline_[i];
    } else {
      frags_ = other.frags_;
      cap_ = other.cap_;
      other.frags_ = other.inline_;
      other.cap_ = kInline;
    }
    n_ = other.n_;
    size_ = other.size_;
    offload_ = other.offload_;
    rx_ = other.rx_;
    other.n_ = 0;
    other.size_ = 0;
    other.offload_ = Offload{};
  }
  static Msg single(const Frag& f) noexcept;
  // Replace the fragments by one internal buffer holding a copy of them,
  // `headroom` bytes free in front.
  Status copy_to_one(std::size_t headroom);
  bool push_in_place_fast(std::size_t n, std::span<std::byte>& out) noexcept;
  Status reserve(std::uint32_t cap);
  Status insert_front(const Frag& f);
  Status push_back_frag(const Frag& f);
  void erase_front(std::uint32_t count) noexcept;
  Status pull_up(std::size_t n);

  Frag inline_[kInline]{};
  Frag* frags_ = inline_;
  std::uint32_t n_ = 0;
  std::uint32_t cap_ = kInline;
  std::size_t size_ = 0;
  Offload offload_;
  RxInfo rx_;
};

inline bool Msg::push_in_place_fast(std::size_t n, std::span<std::byte>& out) noexcept {
  if (n_ == 0) return false;
  Frag& f = frags_[0];
  Buf* b = f.buf;
  if (f.off < n || b->read_only_) return false;
  // The headroom is ours if nobody shares the buffer, or if we stand at the
  // frontier (nobody else has written in front of us).
  if (f.off != b->head_mark_ && b->refs() != 1) return false;
  f.off -= static_cast<std::uint32_t>(n);
  f.len += static_cast<std::uint32_t>(n);
  b->head_mark_ = f.off;
  size_ += n;
  out = {f.data(), n};
  return true;
}

inline Result<std::span<std::byte>> Msg::push_in_place(std::size_t n) {
  std::span<std::byte> out;
  if (push_in_place_fast(n, out)) return out;
  return Errc::no_headroom;
}

inline Result<std::span<const std::byte>> Msg::pop(std::size_t n) {
  if (n_ != 0 && frags_[0].len >= n) {
    Frag& f = frags_[0];
    std::span<const std::byte> out{f.data(), n};
    f.off += static_cast<std::uint32_t>(n);
    f.len -= static_cast<std::uint32_t>(n);
    size_ -= n;
    return out;
  }
  if (n == 0) return std::span<const std::byte>{};
  if (n > size_) return Errc::out_of_range;
  if (Status s = pull_up(n); !s) return s.error();
  return pop(n);
}

}  // namespace xk

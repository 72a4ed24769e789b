#pragma once
// The byte queues of a TCP connection.
//
// SendBuffer holds what the application wrote and the peer has not yet
// acknowledged, from SND.UNA on. Bytes written from a user buffer are copied
// once, into chunks that grow on demand (nothing is allocated up front, so a
// 64 MB limit costs nothing until it is used); a Msg handed over is kept as it
// is. A segment's payload is a slice that shares the chunks' buffers, so
// sending and retransmitting copy nothing.
//
// RecvBuffer holds in-order data the application has not read yet: the Msgs
// that arrived (zero-copy), read out by copying into the caller's buffer or
// handed over whole.

#include <cstddef>
#include <memory>
#include <span>
#include <utility>

#include "xk/msg.hpp"
#include "xk/result.hpp"

namespace xk::tcp {

// A FIFO of Msgs in one ring that grows by doubling: it holds no memory until
// the first push (an idle connection's two queues cost their 32 bytes, where
// two std::deque held a 512-byte node and a map each from construction on),
// and keeps what it grew to until cleared, so a busy connection does not
// allocate per message.
class MsgQueue {
 public:
  MsgQueue() noexcept = default;
  MsgQueue(MsgQueue&&) noexcept = default;
  MsgQueue& operator=(MsgQueue&&) noexcept = default;
  ~MsgQueue() { clear(); }

  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }
  Msg& front() noexcept { return slots_[head_]; }
  const Msg& front() const noexcept { return slots_[head_]; }
  Msg& back() noexcept { return slots_[(head_ + count_ - 1) & (cap_ - 1)]; }
  const Msg& operator[](std::size_t i) const noexcept { return slots_[(head_ + i) & (cap_ - 1)]; }

  void push_back(Msg m) {
    if (count_ == cap_) grow();
    slots_[(head_ + count_) & (cap_ - 1)] = std::move(m);
    ++count_;
  }
  void pop_front() noexcept {
    slots_[head_] = Msg();
    head_ = (head_ + 1) & (cap_ - 1);
    --count_;
  }
  // Empties the queue and gives its memory back.
  void clear() noexcept {
    slots_.reset();
    cap_ = head_ = count_ = 0;
  }

 private:
  void grow() {
    const std::size_t cap = cap_ == 0 ? 4 : 2 * cap_;
    auto slots = std::make_unique<Msg[]>(cap);
    for (std::size_t i = 0; i < count_; ++i) slots[i] = std::move(slots_[(head_ + i) & (cap_ - 1)]);
    slots_ = std::move(slots);
    cap_ = cap;
    head_ = 0;
  }

  std::unique_ptr<Msg[]> slots_;
  std::size_t cap_ = 0;  // a power of two
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

class SendBuffer {
 public:
  static constexpr std::size_t kChunk = Msg::kChunkSize;  // a size the Buf cache keeps

  // `chunks`: where its chunks come from (the link's arena; null: the heap).
  explicit SendBuffer(std::size_t limit, ChunkSource* chunks = nullptr) noexcept : limit_(limit), source_(chunks) {}

  std::size_t size() const noexcept { return size_; }
  std::size_t limit() const noexcept { return limit_; }
  void set_limit(std::size_t limit) noexcept { limit_ = limit; }
  std::size_t space() const noexcept { return limit_ > size_ ? limit_ - size_ : 0; }

  // Copies as much of `bytes` as there is space for; returns how much.
  std::size_t write(std::span<const std::byte> bytes);
  // Takes as much of `msg` as there is space for (no copy); what does not fit
  // stays in msg and the answer is would_block -- a partial write, as POSIX's,
  // so a writable socket always takes something.
  Status write(Msg& msg);

  // The bytes [off, off + len) counted from the front, sharing the buffers.
  // out_of_range past the end.
  Result<Msg> slice(std::size_t off, std::size_t len) const;
  // Forget the first n bytes (acknowledged).
  void consume(std::size_t n) noexcept;
  void clear() noexcept;

 private:
  MsgQueue chunks_;
  std::size_t size_ = 0;
  std::size_t limit_;
  ChunkSource* source_;
  bool tail_open_ = false;  // the last chunk is ours and may be appended to
};

class RecvBuffer {
 public:
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  void append(Msg data);
  // Copies up to dst.size() bytes out and consumes them; returns how many.
  std::size_t read(std::span<std::byte> dst);
  // Copies up to dst.size() bytes, from `skip` bytes in, and leaves them (MSG_PEEK).
  std::size_t peek(std::span<std::byte> dst, std::size_t skip = 0) const;
  // Hands over up to `max` bytes as a Msg (zero-copy).
  Msg read_msg(std::size_t max);
  void clear() noexcept;

 private:
  MsgQueue q_;
  std::size_t size_ = 0;
};

}  // namespace xk::tcp

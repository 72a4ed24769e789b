#include "xk/protocols/tcp_buffer.hpp"

#include <algorithm>

namespace xk::tcp {

std::size_t SendBuffer::write(std::span<const std::byte> bytes) {
  std::size_t n = std::min(bytes.size(), space());
  std::size_t done = 0;
  while (done < n) {
    if (!tail_open_ || chunks_.back().size() >= kChunk) {
      // A chunk with no headroom of its own: segments are slices of it, and
      // their headers go in a fragment in front.
      chunks_.push_back(Msg::chunk(source_));
      tail_open_ = true;
    }
    Msg& tail = chunks_.back();
    std::size_t take = std::min(n - done, kChunk - tail.size());
    if (!tail.append(bytes.subspan(done, take))) break;  // out of memory: report what fitted
    done += take;
  }
  size_ += done;
  return done;
}

Status SendBuffer::write(Msg& msg) {
  if (msg.empty()) return {};
  const std::size_t room = space();
  if (room == 0) return Errc::would_block;
  Msg rest;
  if (msg.size() > room) {
    Result<Msg> tail = msg.split(room);
    if (!tail) return tail.error();
    rest = std::move(*tail);
  }
  size_ += msg.size();
  chunks_.push_back(std::move(msg));
  msg = std::move(rest);
  tail_open_ = false;
  return msg.empty() ? Status{} : Status{Errc::would_block};
}

Result<Msg> SendBuffer::slice(std::size_t off, std::size_t len) const {
  if (off > size_ || len > size_ - off) return Errc::out_of_range;
  Msg out;
  for (std::size_t i = 0; i < chunks_.size(); ++i) {
    const Msg& c = chunks_[i];
    if (len == 0) break;
    if (off >= c.size()) {
      off -= c.size();
      continue;
    }
    std::size_t take = std::min(len, c.size() - off);
    Msg part = c.share();
    if (Status st = part.trim_front(off); !st) return st.error();
    if (Status st = part.truncate(take); !st) return st.error();
    out.join(std::move(part));
    len -= take;
    off = 0;
  }
  return out;
}

void SendBuffer::consume(std::size_t n) noexcept {
  n = std::min(n, size_);
  size_ -= n;
  while (n > 0 && !chunks_.empty()) {
    Msg& front = chunks_.front();
    if (n >= front.size()) {
      n -= front.size();
      chunks_.pop_front();
      if (chunks_.empty()) tail_open_ = false;
    } else {
      (void)front.trim_front(n);
      n = 0;
    }
  }
}

void SendBuffer::clear() noexcept {
  chunks_.clear();
  size_ = 0;
  tail_open_ = false;
}

void RecvBuffer::append(Msg data) {
  if (data.empty()) return;
  // Unread data is kept zero-copy while the port has buffers to spare; a
  // slow reader with a large window would otherwise hold all of them
  // (docs/tcp.md, "Receive buffers and the port's pool").
  (void)data.own_if_scarce();
  size_ += data.size();
  q_.push_back(std::move(data));
}

std::size_t RecvBuffer::read(std::span<std::byte> dst) {
  std::size_t done = 0;
  while (done < dst.size() && !q_.empty()) {
    Msg& front = q_.front();
    std::size_t take = std::min(dst.size() - done, front.size());
    (void)front.copy_out(0, dst.subspan(done, take));
    done += take;
    if (take == front.size()) {
      q_.pop_front();
    } else {
      (void)front.trim_front(take);
    }
  }
  size_ -= done;
  return done;
}

std::size_t RecvBuffer::peek(std::span<std::byte> dst, std::size_t skip) const {
  std::size_t done = 0;
  for (std::size_t i = 0; i < q_.size() && done < dst.size(); ++i) {
    const Msg& m = q_[i];
    if (skip >= m.size()) {
      skip -= m.size();
      continue;
    }
    const std::size_t take = std::min(dst.size() - done, m.size() - skip);
    (void)m.copy_out(skip, dst.subspan(done, take));
    done += take;
    skip = 0;
  }
  return done;
}

Msg RecvBuffer::read_msg(std::size_t max) {
  Msg out;
  std::size_t left = max;
  while (left > 0 && !q_.empty()) {
    Msg& front = q_.front();
    if (front.size() <= left) {
      left -= front.size();
      out.join(std::move(front));
      q_.pop_front();
    } else {
      Result<Msg> rest = front.split(left);
      if (!rest) break;
      out.join(std::move(front));
      q_.front() = std::move(*rest);
      left = 0;
    }
  }
  size_ -= out.size();
  return out;
}

void RecvBuffer::clear() noexcept {
  q_.clear();
  size_ = 0;
}

}  // namespace xk::tcp

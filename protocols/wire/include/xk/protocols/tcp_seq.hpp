#pragma once
// TCP sequence numbers: 32-bit values compared modulo 2^32 (RFC 9293
// section 3.4). Two numbers are ordered by the sign of their 32-bit
// difference, which is right while they are less than 2^31 apart -- always
// true inside one connection's windows (at most 2^30 bytes, RFC 7323 2.3).
//
// A strong type, so a sequence number is never compared with plain `<` by
// mistake, nor mixed with a length or a window.

#include <cstdint>
#include <string>

namespace xk::tcp {

class SeqNum {
 public:
  constexpr SeqNum() noexcept = default;
  constexpr explicit SeqNum(std::uint32_t raw) noexcept : v_(raw) {}

  constexpr std::uint32_t raw() const noexcept { return v_; }

  // Moving along the sequence space wraps modulo 2^32.
  constexpr SeqNum operator+(std::uint32_t n) const noexcept { return SeqNum(v_ + n); }
  constexpr SeqNum operator-(std::uint32_t n) const noexcept { return SeqNum(v_ - n); }
  constexpr SeqNum& operator+=(std::uint32_t n) noexcept {
    v_ += n;
    return *this;
  }
  constexpr SeqNum& operator-=(std::uint32_t n) noexcept {
    v_ -= n;
    return *this;
  }
  // Signed distance a - b: positive when a is after b.
  friend constexpr std::int32_t operator-(SeqNum a, SeqNum b) noexcept {
    return static_cast<std::int32_t>(a.v_ - b.v_);
  }

  friend constexpr bool operator==(SeqNum a, SeqNum b) noexcept { return a.v_ == b.v_; }
  friend constexpr bool operator<(SeqNum a, SeqNum b) noexcept { return (a - b) < 0; }
  friend constexpr bool operator>(SeqNum a, SeqNum b) noexcept { return (a - b) > 0; }
  friend constexpr bool operator<=(SeqNum a, SeqNum b) noexcept { return (a - b) <= 0; }
  friend constexpr bool operator>=(SeqNum a, SeqNum b) noexcept { return (a - b) >= 0; }

 private:
  std::uint32_t v_ = 0;
};

constexpr SeqNum seq_max(SeqNum a, SeqNum b) noexcept { return a < b ? b : a; }
constexpr SeqNum seq_min(SeqNum a, SeqNum b) noexcept { return a < b ? a : b; }

// Bytes from `from` up to (not including) `to`; 0 when `to` is not after `from`.
constexpr std::uint32_t seq_span(SeqNum from, SeqNum to) noexcept {
  return to > from ? static_cast<std::uint32_t>(to - from) : 0;
}

// lo <= s < lo + len: the acceptability tests of RFC 9293 3.10.7.4.
constexpr bool seq_in_window(SeqNum s, SeqNum lo, std::uint32_t len) noexcept {
  return s.raw() - lo.raw() < len;
}

inline std::string to_string(SeqNum s) { return std::to_string(s.raw()); }

}  // namespace xk::tcp

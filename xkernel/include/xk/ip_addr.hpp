#pragma once
// An IP address of either family.
//
// Kept as the 16 bytes of an IPv6 address in network order; an IPv4 address
// is its IPv4-mapped form ::ffff:a.b.c.d (RFC 4291 section 2.5.5.2). One type,
// one comparison and one hash serve both families, and a v4 peer of a socket
// listening on [::] already has the form it must be reported in. Ipv4Addr
// (host byte order) stays the type of IPv4-only code; it converts to IpAddr
// implicitly and back with v4().

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace xk {

// IPv4 address, value in host byte order (192.0.2.1 == 0xC0000201).
struct Ipv4Addr {
  std::uint32_t value = 0;
  friend bool operator==(const Ipv4Addr&, const Ipv4Addr&) = default;
};

class IpAddr {
 public:
  using Bytes = std::array<std::uint8_t, 16>;

  constexpr IpAddr() noexcept = default;  // ::, the unspecified address
  // The IPv4-mapped form of `a`.
  // Implicit: every IPv4 address is one.
  constexpr IpAddr(Ipv4Addr a) noexcept : b_{} {
    b_[10] = 0xff;
    b_[11] = 0xff;
    b_[12] = static_cast<std::uint8_t>(a.value >> 24);
    b_[13] = static_cast<std::uint8_t>(a.value >> 16);
    b_[14] = static_cast<std::uint8_t>(a.value >> 8);
    b_[15] = static_cast<std::uint8_t>(a.value);
  }
  // An address from its 16 bytes, as stored: IPv4 when they are the mapped
  // form (a key, a cursor), IPv6 otherwise.
  static constexpr IpAddr from_bytes(const Bytes& bytes) noexcept {
    IpAddr a;
    a.b_ = bytes;
    return a;
  }
  // An IPv6 address from the wire.
  static constexpr IpAddr v6(const Bytes& bytes) noexcept { return from_bytes(bytes); }

  // An IPv4 address (in its mapped form).
  // (On every received packet and demux lookup: two loads and compares,
  // not a loop, at run time.)
  constexpr bool is_v4() const noexcept {
    if (std::is_constant_evaluated()) {
      for (int i = 0; i < 10; ++i) {
        if (b_[i] != 0) return false;
      }
      return b_[10] == 0xff && b_[11] == 0xff;
    }
    std::uint64_t head;
    std::uint32_t mark;
    std::memcpy(&head, b_.data(), 8);
    std::memcpy(&mark, b_.data() + 8, 4);
    return head == 0 && mark == std::bit_cast<std::uint32_t>(std::array<std::uint8_t, 4>{0, 0, 0xff, 0xff});
  }
  // The IPv4 address; meaningful when is_v4().
  constexpr Ipv4Addr v4() const noexcept {
    return Ipv4Addr{static_cast<std::uint32_t>(b_[12]) << 24 | static_cast<std::uint32_t>(b_[13]) << 16 |
                    static_cast<std::uint32_t>(b_[14]) << 8 | b_[15]};
  }
  constexpr const Bytes& bytes() const noexcept { return b_; }
  // No address: :: (either family's, a dual-stack wildcard) or 0.0.0.0
  // (IPv4's).
  constexpr bool is_unspecified() const noexcept { return *this == IpAddr{} || *this == IpAddr(Ipv4Addr{}); }

  friend constexpr bool operator==(const IpAddr&, const IpAddr&) = default;

 private:
  Bytes b_{};
};

}  // namespace xk

#pragma once
// Initial sequence numbers (RFC 6528) and the keyed hash behind them and the
// SYN cookies: SipHash-2-4 (Aumasson and Bernstein, 2012), a PRF with a
// 128-bit key and a 64-bit output, fast on the short inputs a 4-tuple makes.
//
// RFC 6528 section 3: ISN = M + F(localip, localport, remoteip, remoteport,
// secretkey), M a clock ticking every 4 microseconds. The clock keeps
// successive incarnations of one connection moving forward through the
// sequence space (RFC 9293 3.4.1); the keyed hash gives every 4-tuple its own
// offset, so an off-path attacker cannot guess the ISNs of other connections
// from its own.
//
// Time is an argument, never read here, so tests and fuzzers drive it.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "xk/address.hpp"
#include "xk/clock.hpp"
#include "xk/endpoint.hpp"
#include "xk/protocols/tcp_seq.hpp"
#include "xk/hash.hpp"

namespace xk::tcp {

// A 128-bit SipHash key. Stacks that share an IP address must share the ISN
// secret, or their ISNs for the same 4-tuple would not move forward together.
using Secret = SipKey;

// 16 bytes from getrandom(). Start-up only: throws std::system_error when the
// kernel cannot supply them.
Secret random_secret();

// SipHash-2-4 (xk/hash.hpp).
using xk::siphash24;

// A connection's addresses seen from this end (xk/endpoint.hpp).
using FourTuple = xk::FourTuple;

// The tuple as hashed: local address, local port, remote address, remote
// port, each big-endian -- 12 bytes for IPv4 (the addresses' 4 bytes), 36
// for IPv6.
class TupleBytes {
 public:
  static constexpr std::size_t kMax = 36;
  explicit TupleBytes(const FourTuple& t) noexcept;
  const std::byte* data() const noexcept { return b_.data(); }
  std::size_t size() const noexcept { return n_; }
  std::span<const std::byte> span() const noexcept { return {b_.data(), n_}; }

 private:
  std::array<std::byte, kMax> b_;
  std::size_t n_ = 0;
};

class IsnGenerator {
 public:
  static constexpr Duration kTick = std::chrono::microseconds(4);  // RFC 6528 3

  // With a secret from getrandom() (throws std::system_error, see random_secret).
  IsnGenerator();
  // With a secret supplied from outside, e.g. shared by several stacks.
  explicit IsnGenerator(const Secret& secret) noexcept : secret_(secret) {}

  // The ISN for a new connection on `t` at time `now`.
  SeqNum isn(const FourTuple& t, Time now) const noexcept;

  // M: 4-microsecond ticks since the clock's epoch, modulo 2^32 (it wraps in
  // about 4.8 hours, RFC 9293 3.4.1).
  static std::uint32_t clock_ticks(Time now) noexcept;
  // F: the keyed hash of the tuple, its low 32 bits.
  std::uint32_t offset(const FourTuple& t) const noexcept;

  const Secret& secret() const noexcept { return secret_; }

 private:
  Secret secret_;
};

}  // namespace xk::tcp

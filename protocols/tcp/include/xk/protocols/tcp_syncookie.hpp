#pragma once
// SYN cookies (RFC 4987 section 3.6): under a SYN flood a listener answers a
// SYN without keeping any state, and chooses the ISN of its SYN-ACK so that the
// ACK completing the handshake proves the exchange happened and gives back
// what the SYN said.
//
// The cookie is the ISN of the SYN-ACK:
//
//    31      27 26  24 23                                            0
//   +----------+------+-----------------------------------------------+
//   | t mod 32 | MSS  |                 hash (24 bits)                 |
//   +----------+------+-----------------------------------------------+
//
//   t     = floor(now / 64 s), a counter advancing every 64 seconds
//   MSS   = index into kMssTable of the largest entry not above the peer's MSS
//   hash  = low 24 bits of SipHash-2-4 under the secret over: local address,
//           local port, remote address, remote port, client ISN, t (all 32
//           bits of it) and the MSS index (21 bytes, big-endian)
//
// The ACK is accepted when (its ack - 1) is a cookie made with t equal to the
// current counter or the one before (so a cookie lives 64 to 128 s), for the
// same tuple and client ISN (its seq - 1). The hash covers the MSS index and
// all of t, so changing any bit of the cookie is caught (but for the 2^-24
// chance of a matching hash).
//
// A cookie has no room for the window scale and SACK-permitted options. When
// the SYN carried timestamps, they ride in the low bits of the TSval of our
// SYN-ACK, which the ACK echoes in its TSecr (RFC 7323 3.2):
//
//    31                                  5     4      3       0
//   +-------------------------------------+---------+---------+
//   |  our timestamp clock, upper 27 bits | SACK-ok |  wscale |
//   +-------------------------------------+---------+---------+
//
//   wscale  = the SYN's shift count 0..14, or 15 when it had no window scale
//   SACK-ok = 1 when the SYN carried SACK-permitted
//
// Without timestamps both are lost: the connection runs unscaled without SACK.
// Time is an argument, never read here.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>

#include "xk/clock.hpp"
#include "xk/protocols/tcp_isn.hpp"
#include "xk/protocols/tcp_seq.hpp"
#include "xk/result.hpp"

namespace xk::tcp {

class SynCookies {
 public:
  static constexpr Duration kPeriod = std::chrono::seconds(64);
  // 3 bits of MSS: common path MSS values, smallest first (536 is the RFC 9293
  // 3.7.1 default when the SYN has no MSS option).
  static constexpr std::array<std::uint16_t, 8> kMssTable{536, 1220, 1360, 1400, 1440, 1460, 4312, 8960};

  // With a secret from getrandom() (throws std::system_error, see random_secret).
  SynCookies();
  explicit SynCookies(const Secret& secret) noexcept : secret_(secret) {}

  // The ISN of our SYN-ACK answering a SYN on `t` (seen from this end) with
  // sequence number `client_isn` and MSS option `peer_mss` (pass 536 when it
  // had none). A peer MSS below 536 is still encoded as 536.
  SeqNum make_isn(const FourTuple& t, SeqNum client_isn, std::uint16_t peer_mss, Time now) const noexcept;

  // Checks the ACK of a handshake we answered with a cookie, from its sequence
  // and acknowledgment numbers: the MSS to use, or malformed when it is no
  // cookie of ours for this tuple from the current or previous period.
  Result<std::uint16_t> check_ack(const FourTuple& t, SeqNum seg_seq, SeqNum seg_ack, Time now) const noexcept;

  // The counter t at `now`, modulo 2^32.
  static std::uint32_t counter(Time now) noexcept;
  // Index into kMssTable of the largest entry not above `peer_mss` (0 if none).
  static std::uint8_t mss_index(std::uint16_t peer_mss) noexcept;

 private:
  std::uint32_t hash(const FourTuple& t, SeqNum client_isn, std::uint32_t count,
                     std::uint8_t mss_idx) const noexcept;

  Secret secret_;
};

// What the SYN negotiated beyond the MSS, carried through the timestamps.
struct CookieOptions {
  std::optional<std::uint8_t> wscale;  // 0..14; none when the SYN had no window scale
  bool sack_permitted = false;
  friend bool operator==(const CookieOptions&, const CookieOptions&) = default;
};

inline constexpr std::uint32_t kCookieTsBits = 5;
inline constexpr std::uint32_t kCookieTsMask = (1u << kCookieTsBits) - 1;

// The TSval for our SYN-ACK: `ts_now` (our timestamp clock) with `opts` in its
// low 5 bits. When that would put the TSval after ts_now it is moved back by 32,
// so later TSvals never go backwards (RFC 7323 5.4). A wscale above 14 is sent
// as 14 (RFC 7323 2.3).
std::uint32_t encode_cookie_tsval(const CookieOptions& opts, std::uint32_t ts_now) noexcept;

// The options encoded in the TSecr of the ACK that completes the handshake.
CookieOptions decode_cookie_tsecr(std::uint32_t tsecr) noexcept;

}  // namespace xk::tcp

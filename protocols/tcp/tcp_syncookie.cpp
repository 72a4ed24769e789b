#include "xk/protocols/tcp_syncookie.hpp"

#include <algorithm>
#include <cstring>

#include "xk/byteorder.hpp"

namespace xk::tcp {
namespace {

constexpr std::uint32_t kHashBits = 24;
constexpr std::uint32_t kHashMask = (1u << kHashBits) - 1;
constexpr std::uint32_t kMssShift = 24;
constexpr std::uint32_t kMssMask = 0x7;
constexpr std::uint32_t kCounterShift = 27;
constexpr std::uint32_t kCounterMask = 0x1f;
constexpr std::uint32_t kMaxShift = 14;  // RFC 7323 2.3
constexpr std::uint32_t kNoWscale = 15;
constexpr std::uint32_t kSackBit = 1u << 4;

static_assert(SynCookies::kMssTable.size() == kMssMask + 1);
static_assert(std::is_sorted(SynCookies::kMssTable.begin(), SynCookies::kMssTable.end()));

std::uint32_t cookie(std::uint32_t count, std::uint8_t mss_idx, std::uint32_t hash) noexcept {
  return ((count & kCounterMask) << kCounterShift) | (std::uint32_t{mss_idx} << kMssShift) | hash;
}

}  // namespace

SynCookies::SynCookies() : secret_(random_secret()) {}

std::uint32_t SynCookies::counter(Time now) noexcept {
  return static_cast<std::uint32_t>(std::chrono::floor<std::chrono::duration<std::int64_t, std::ratio<64>>>(
                                        now.time_since_epoch())
                                        .count());
}

std::uint8_t SynCookies::mss_index(std::uint16_t peer_mss) noexcept {
  std::uint8_t idx = 0;
  for (std::uint8_t i = 0; i < kMssTable.size(); ++i) {
    if (kMssTable[i] <= peer_mss) idx = i;
  }
  return idx;
}

std::uint32_t SynCookies::hash(const FourTuple& t, SeqNum client_isn, std::uint32_t count,
                               std::uint8_t mss_idx) const noexcept {
  std::array<std::byte, TupleBytes::kMax + 4 + 4 + 1> in;
  const TupleBytes tuple(t);
  const std::size_t n = tuple.size();
  std::memcpy(in.data(), tuple.data(), n);
  store_be32(in.data() + n, client_isn.raw());
  store_be32(in.data() + n + 4, count);
  in[n + 8] = std::byte{mss_idx};
  return static_cast<std::uint32_t>(siphash24(secret_, std::span(in).first(n + 9))) & kHashMask;
}

SeqNum SynCookies::make_isn(const FourTuple& t, SeqNum client_isn, std::uint16_t peer_mss,
                            Time now) const noexcept {
  std::uint32_t count = counter(now);
  std::uint8_t idx = mss_index(peer_mss);
  return SeqNum(cookie(count, idx, hash(t, client_isn, count, idx)));
}

Result<std::uint16_t> SynCookies::check_ack(const FourTuple& t, SeqNum seg_seq, SeqNum seg_ack,
                                            Time now) const noexcept {
  // RFC 4987 3.6: the ACK acknowledges our ISN, and its seq is the client's ISN + 1.
  std::uint32_t c = (seg_ack - 1).raw();
  SeqNum client_isn = seg_seq - 1;
  auto idx = static_cast<std::uint8_t>((c >> kMssShift) & kMssMask);
  std::uint32_t now_count = counter(now);
  // Only the current and the previous period; anything older (or from a
  // future period) is rejected.
  for (std::uint32_t count : {now_count, now_count - 1}) {
    if ((count & kCounterMask) != (c >> kCounterShift)) continue;
    if (hash(t, client_isn, count, idx) == (c & kHashMask)) return kMssTable[idx];
  }
  return Errc::malformed;
}

std::uint32_t encode_cookie_tsval(const CookieOptions& opts, std::uint32_t ts_now) noexcept {
  std::uint32_t bits = opts.wscale ? std::min<std::uint32_t>(*opts.wscale, kMaxShift) : kNoWscale;
  if (opts.sack_permitted) bits |= kSackBit;
  std::uint32_t ts = (ts_now & ~kCookieTsMask) | bits;
  // RFC 7323 5.4: TSvals must not go backwards; the next one is at least ts_now.
  if (static_cast<std::int32_t>(ts - ts_now) > 0) ts -= kCookieTsMask + 1;
  return ts;
}

CookieOptions decode_cookie_tsecr(std::uint32_t tsecr) noexcept {
  CookieOptions o;
  std::uint32_t ws = tsecr & 0xf;
  if (ws != kNoWscale) o.wscale = static_cast<std::uint8_t>(ws);  // 0..14
  o.sack_permitted = (tsecr & kSackBit) != 0;
  return o;
}

}  // namespace xk::tcp

#include "xk/protocols/tcp_wire.hpp"

#include <algorithm>
#include <cstring>

#include "xk/msg.hpp"

namespace xk::tcp {
namespace {

std::uint8_t u8(std::byte b) noexcept { return std::to_integer<std::uint8_t>(b); }

// Host-order value of a sum finish() returned in memory order.
std::uint16_t field_value(std::uint32_t sum) noexcept {
  std::uint16_t c = csum::finish(sum);
  std::byte b[2];
  std::memcpy(b, &c, 2);
  return load_be16(b);
}

// Bytes of the options other than SACK blocks, in the writer's layout.
std::size_t fixed_options_size(const Options& o) noexcept {
  std::size_t n = 0;
  if (o.mss) n += 4;
  if (o.timestamps) n += 12;  // SACK-permitted rides in the two padding bytes
  if (o.wscale) n += 4;
  if (o.sack_permitted && !o.timestamps) n += 4;
  return n;
}

}  // namespace

Result<Header> parse_header(std::span<const std::byte> segment) noexcept {
  if (segment.size() < Header::kMinSize) return Errc::malformed;
  Header h = Header::read(segment.first<Header::kMinSize>());
  // RFC 9293 3.1: the data offset counts the header in words, options included.
  if (h.data_offset < Header::kMinDataOffset || h.header_length() > segment.size()) {
    return Errc::malformed;
  }
  return h;
}

bool operator==(const Options& a, const Options& b) noexcept {
  auto sa = a.sack_blocks();
  auto sb = b.sack_blocks();
  return a.mss == b.mss && a.wscale == b.wscale && a.sack_permitted == b.sack_permitted &&
         a.timestamps == b.timestamps && std::equal(sa.begin(), sa.end(), sb.begin(), sb.end());
}

Result<Options> parse_options(std::span<const std::byte> in) noexcept {
  if (in.size() > kMaxOptionsSize) return Errc::invalid_argument;
  Options o;
  std::size_t i = 0;
  while (i < in.size()) {
    std::uint8_t kind = u8(in[i]);
    // RFC 9293 3.1: EOL ends the list; what follows is padding.
    if (kind == kOptEol) break;
    if (kind == kOptNop) {
      ++i;
      continue;
    }
    // RFC 9293 3.2 / RFC 1122 4.2.2.5: every other kind has a length byte, and
    // an illegal length (0 or 1 would never advance, more than is left overruns)
    // makes the whole header suspect.
    if (in.size() - i < 2) return Errc::malformed;
    std::size_t len = u8(in[i + 1]);
    if (len < 2 || len > in.size() - i) return Errc::malformed;
    const std::byte* p = in.data() + i;
    switch (kind) {
      case kOptMss:
        if (len != kOptMssLen) return Errc::malformed;
        o.mss = load_be16(p + 2);
        break;
      case kOptWscale:
        if (len != kOptWscaleLen) return Errc::malformed;
        // RFC 7323 2.3: a shift above 14 is used as 14.
        o.wscale = std::min(u8(p[2]), kMaxWscale);
        break;
      case kOptSackPermitted:
        if (len != kOptSackPermittedLen) return Errc::malformed;
        o.sack_permitted = true;
        break;
      case kOptSack: {
        // RFC 2018 3: length 2 + 8n; 40 bytes of options hold at most 4 blocks.
        std::size_t body = len - kOptSackBaseLen;
        std::size_t n = body / kOptSackBlockLen;
        if (n == 0 || body % kOptSackBlockLen != 0 || n > Options::kMaxSackBlocks) {
          return Errc::malformed;
        }
        o.sack_count = 0;
        for (std::size_t k = 0; k < n; ++k) {
          const std::byte* blk = p + kOptSackBaseLen + k * kOptSackBlockLen;
          (void)o.add_sack(SackBlock{SeqNum(load_be32(blk)), SeqNum(load_be32(blk + 4))});
        }
        break;
      }
      case kOptTimestamps:
        if (len != kOptTimestampsLen) return Errc::malformed;
        o.timestamps = Timestamps{load_be32(p + 2), load_be32(p + 6)};
        break;
      default:
        break;  // RFC 1122 4.2.2.5: an unknown option is ignored
    }
    i += len;
  }
  return o;
}

std::size_t sack_blocks_fitting(const Options& opts) noexcept {
  std::size_t fixed = fixed_options_size(opts);
  std::size_t room = kMaxOptionsSize - fixed;
  if (opts.sack_count == 0 || room < 4 + kOptSackBlockLen) return 0;
  // Two NOPs, kind, length, then the blocks.
  return std::min<std::size_t>(opts.sack_count, (room - 4) / kOptSackBlockLen);
}

std::size_t options_size(const Options& opts) noexcept {
  std::size_t n = fixed_options_size(opts);
  std::size_t blocks = sack_blocks_fitting(opts);
  if (blocks > 0) n += 4 + blocks * kOptSackBlockLen;
  return n;
}

std::size_t write_options(const Options& opts, std::span<std::byte> out) noexcept {
  std::size_t total = options_size(opts);
  if (out.size() < total) return 0;
  std::byte* p = out.data();
  auto put = [&p](std::uint8_t v) { *p++ = std::byte{v}; };
  if (opts.mss) {
    put(kOptMss);
    put(kOptMssLen);
    store_be16(p, *opts.mss);
    p += 2;
  }
  if (opts.timestamps) {
    if (opts.sack_permitted) {
      put(kOptSackPermitted);
      put(kOptSackPermittedLen);
    } else {
      put(kOptNop);
      put(kOptNop);
    }
    put(kOptTimestamps);
    put(kOptTimestampsLen);
    store_be32(p, opts.timestamps->tsval);
    store_be32(p + 4, opts.timestamps->tsecr);
    p += 8;
  }
  // Without timestamps, SACK-permitted goes before the window scale: the
  // order every common stack writes (mss, nop, nop, sackOK, nop, wscale).
  if (opts.sack_permitted && !opts.timestamps) {
    put(kOptNop);
    put(kOptNop);
    put(kOptSackPermitted);
    put(kOptSackPermittedLen);
  }
  if (opts.wscale) {
    put(kOptNop);
    put(kOptWscale);
    put(kOptWscaleLen);
    put(*opts.wscale);
  }
  if (std::size_t blocks = sack_blocks_fitting(opts); blocks > 0) {
    put(kOptNop);
    put(kOptNop);
    put(kOptSack);
    put(static_cast<std::uint8_t>(kOptSackBaseLen + blocks * kOptSackBlockLen));
    for (std::size_t k = 0; k < blocks; ++k) {
      store_be32(p, opts.sack[k].left.raw());
      store_be32(p + 4, opts.sack[k].right.raw());
      p += kOptSackBlockLen;
    }
  }
  return total;
}

std::uint16_t compute_checksum(Ipv4Addr src, Ipv4Addr dst, std::span<const std::byte> segment) noexcept {
  std::uint32_t sum = pseudo_header_sum(src, dst, segment.size());
  // The field sits at an even offset, so the bytes on either side of it pair
  // up as they would with the field there.
  constexpr std::size_t kAfter = Header::kChecksumOffset + 2;
  sum = csum::partial(segment.data(), std::min(segment.size(), Header::kChecksumOffset), sum);
  if (segment.size() > kAfter) sum = csum::partial(segment.data() + kAfter, segment.size() - kAfter, sum);
  return field_value(sum);
}

std::uint16_t compute_checksum(Ipv4Addr src, Ipv4Addr dst, const Msg& segment) noexcept {
  std::uint32_t sum = pseudo_header_sum(src, dst, segment.size());
  constexpr std::size_t kAfter = Header::kChecksumOffset + 2;
  std::size_t head = std::min(segment.size(), Header::kChecksumOffset);
  // Both ranges lie inside the message, so neither partial() fails.
  if (Result<std::uint32_t> s = csum::partial(segment, 0, head, sum)) sum = *s;
  if (segment.size() > kAfter) {
    if (Result<std::uint32_t> s = csum::partial(segment, kAfter, segment.size() - kAfter, sum)) sum = *s;
  }
  return field_value(sum);
}

Status fill_checksum(Ipv4Addr src, Ipv4Addr dst, std::span<std::byte> segment) noexcept {
  if (segment.size() < Header::kMinSize) return Errc::out_of_range;
  store_be16(segment.data() + Header::kChecksumOffset, compute_checksum(src, dst, segment));
  return {};
}

bool checksum_ok(Ipv4Addr src, Ipv4Addr dst, std::span<const std::byte> segment) noexcept {
  std::uint32_t sum = pseudo_header_sum(src, dst, segment.size());
  return csum::fold(csum::partial(segment.data(), segment.size(), sum)) == 0xffff;
}

bool checksum_ok(Ipv4Addr src, Ipv4Addr dst, const Msg& segment) noexcept {
  std::uint32_t sum = pseudo_header_sum(src, dst, segment.size());
  return csum::fold(csum::partial(segment, sum)) == 0xffff;
}

Result<std::span<std::byte, Header::kMinSize>> push_header(Msg& m, const Options* opts, Header& h) {
  const std::size_t olen = opts != nullptr ? options_size(*opts) : 0;
  Result<std::span<std::byte>> room = m.push(Header::kMinSize + olen);
  if (!room) return room.error();
  if (olen != 0) (void)write_options(*opts, room->subspan(Header::kMinSize));
  h.data_offset = static_cast<std::uint8_t>((Header::kMinSize + olen) / 4);
  return room->first<Header::kMinSize>();
}

}  // namespace xk::tcp

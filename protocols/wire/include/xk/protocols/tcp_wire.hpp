#pragma once
// Wire format of TCP (RFC 9293 section 3.1) and its options, apart from the
// protocol's logic (docs/style.md).
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-------------------------------+-------------------------------+
//   |          Source Port          |       Destination Port        |
//   +-------------------------------+-------------------------------+
//   |                        Sequence Number                        |
//   +---------------------------------------------------------------+
//   |                    Acknowledgment Number                      |
//   +-------+-------+-+-+-+-+-+-+-+-+-------------------------------+
//   |  Data |       |C|E|U|A|P|R|S|F|                               |
//   | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//   |       |       |R|E|G|K|H|T|N|N|                               |
//   +-------+-------+-+-+-+-+-+-+-+-+-------------------------------+
//   |           Checksum            |         Urgent Pointer        |
//   +-------------------------------+-------------------------------+
//   |                    Options (Data Offset > 5)                  |
//
// The fixed 20 bytes are read and written by value; the options (Data Offset
// * 4 - 20 bytes, at most 40) are parsed into Options and written back from it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "xk/address.hpp"
#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"
#include "xk/msg.hpp"
#include "xk/protocols/tcp_seq.hpp"
#include "xk/result.hpp"

namespace xk::tcp {

inline constexpr std::uint8_t kIpProtocol = 6;

// Control bits, as they lie in byte 13 of the header.
inline constexpr std::uint8_t kFin = 0x01;
inline constexpr std::uint8_t kSyn = 0x02;
inline constexpr std::uint8_t kRst = 0x04;
inline constexpr std::uint8_t kPsh = 0x08;
inline constexpr std::uint8_t kAck = 0x10;
inline constexpr std::uint8_t kUrg = 0x20;
inline constexpr std::uint8_t kEce = 0x40;  // RFC 3168
inline constexpr std::uint8_t kCwr = 0x80;  // RFC 3168
// The ECN field of the IPv4 TOS byte (RFC 3168 section 5).
inline constexpr std::uint8_t kEcnMask = 0x03;
inline constexpr std::uint8_t kEcnEct0 = 0x02;
inline constexpr std::uint8_t kEcnCe = 0x03;

struct Header {
  static constexpr std::size_t kMinSize = 20;
  static constexpr std::size_t kMaxSize = 60;
  static constexpr std::size_t kChecksumOffset = 16;
  static constexpr std::uint8_t kMinDataOffset = 5;

  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  SeqNum seq;
  SeqNum ack;
  std::uint8_t data_offset = kMinDataOffset;  // header length in 32-bit words
  std::uint8_t reserved = 0;  // the 4 bits after the data offset: sent as zero, kept as read
  std::uint8_t flags = 0;     // kFin .. kCwr
  std::uint16_t window = 0;
  std::uint16_t checksum = 0;  // host order, as loaded
  std::uint16_t urgent = 0;

  std::size_t header_length() const noexcept { return std::size_t{data_offset} * 4; }
  // Option bytes after the fixed header (0 for a malformed offset < 5).
  std::size_t options_length() const noexcept {
    return data_offset > kMinDataOffset ? header_length() - kMinSize : 0;
  }
  // True when every bit of `f` is set.
  constexpr bool has(std::uint8_t f) const noexcept { return (flags & f) == f; }

  static Header read(std::span<const std::byte, kMinSize> b) noexcept {
    Header h;
    h.src_port = load_be16(b.data());
    h.dst_port = load_be16(b.data() + 2);
    h.seq = SeqNum(load_be32(b.data() + 4));
    h.ack = SeqNum(load_be32(b.data() + 8));
    auto off = std::to_integer<std::uint8_t>(b[12]);
    h.data_offset = static_cast<std::uint8_t>(off >> 4);
    h.reserved = static_cast<std::uint8_t>(off & 0x0f);
    h.flags = std::to_integer<std::uint8_t>(b[13]);
    h.window = load_be16(b.data() + 14);
    h.checksum = load_be16(b.data() + 16);
    h.urgent = load_be16(b.data() + 18);
    return h;
  }

  // Writes the fixed 20 bytes with the checksum field as held here.
  void write(std::span<std::byte, kMinSize> b) const noexcept {
    store_be16(b.data(), src_port);
    store_be16(b.data() + 2, dst_port);
    store_be32(b.data() + 4, seq.raw());
    store_be32(b.data() + 8, ack.raw());
    b[12] = std::byte{static_cast<std::uint8_t>((data_offset << 4) | (reserved & 0x0f))};
    b[13] = std::byte{flags};
    store_be16(b.data() + 14, window);
    store_be16(b.data() + 16, checksum);
    store_be16(b.data() + 18, urgent);
  }
};

// The sequence space a segment takes: its payload, and one each for SYN and FIN.
constexpr std::uint32_t seg_len(const Header& h, std::size_t payload) noexcept {
  return static_cast<std::uint32_t>(payload) + (h.has(kSyn) ? 1u : 0u) + (h.has(kFin) ? 1u : 0u);
}

// RFC 9293 3.10.7.4, first check: the four cases of the acceptability test,
// for a receive window of `wnd` bytes from `rcv_nxt`.
constexpr bool segment_acceptable(const Header& h, std::size_t payload, SeqNum rcv_nxt, std::uint32_t wnd) noexcept {
  const std::uint32_t len = seg_len(h, payload);
  if (len == 0) {
    if (wnd == 0) return h.seq == rcv_nxt;
    return seq_in_window(h.seq, rcv_nxt, wnd);
  }
  if (wnd == 0) {
    // RFC 9293: with a zero window, valid ACKs and RSTs must still get
    // through; the data itself is trimmed away later.
    return h.seq == rcv_nxt;
  }
  return seq_in_window(h.seq, rcv_nxt, wnd) || seq_in_window(h.seq + len - 1, rcv_nxt, wnd);
}

// The fixed header of `segment`, checked: at least 20 bytes, a data offset of
// at least 5, and a header that fits the segment (RFC 9293 3.1). malformed
// otherwise.
Result<Header> parse_header(std::span<const std::byte> segment) noexcept;

// ---- Options (RFC 9293 3.1 and 3.2, RFC 7323, RFC 2018) ----

inline constexpr std::uint8_t kOptEol = 0;
inline constexpr std::uint8_t kOptNop = 1;
inline constexpr std::uint8_t kOptMss = 2;
inline constexpr std::uint8_t kOptWscale = 3;         // RFC 7323 2.2
inline constexpr std::uint8_t kOptSackPermitted = 4;  // RFC 2018 2
inline constexpr std::uint8_t kOptSack = 5;           // RFC 2018 3
inline constexpr std::uint8_t kOptTimestamps = 8;     // RFC 7323 3.2

inline constexpr std::size_t kOptMssLen = 4;
inline constexpr std::size_t kOptWscaleLen = 3;
inline constexpr std::size_t kOptSackPermittedLen = 2;
inline constexpr std::size_t kOptTimestampsLen = 10;
inline constexpr std::size_t kOptSackBaseLen = 2;
inline constexpr std::size_t kOptSackBlockLen = 8;

// Data offset is 4 bits: at most 15 words, 20 of them the fixed header.
inline constexpr std::size_t kMaxOptionsSize = Header::kMaxSize - Header::kMinSize;
// RFC 7323 2.3: a larger shift is used as 14.
inline constexpr std::uint8_t kMaxWscale = 14;

struct Timestamps {
  std::uint32_t tsval = 0;
  std::uint32_t tsecr = 0;
  friend bool operator==(const Timestamps&, const Timestamps&) = default;
};

// One SACK block: the bytes [left, right) were received (RFC 2018 3).
struct SackBlock {
  SeqNum left;
  SeqNum right;
  friend bool operator==(const SackBlock&, const SackBlock&) = default;
};

struct Options {
  static constexpr std::size_t kMaxSackBlocks = 4;  // 2 + 4 * 8 = 34 of the 40 bytes

  std::optional<std::uint16_t> mss;
  std::optional<std::uint8_t> wscale;  // shift count, at most kMaxWscale once parsed
  bool sack_permitted = false;
  std::optional<Timestamps> timestamps;
  // The first block is the most recent one (RFC 2018 4); the writer keeps the
  // first blocks when not all fit.
  std::array<SackBlock, kMaxSackBlocks> sack{};
  std::uint8_t sack_count = 0;

  std::span<const SackBlock> sack_blocks() const noexcept { return {sack.data(), sack_count}; }
  // Appends a block; false (and nothing changes) when all four are taken.
  bool add_sack(SackBlock b) noexcept {
    if (sack_count >= kMaxSackBlocks) return false;
    sack[sack_count++] = b;
    return true;
  }

  friend bool operator==(const Options& a, const Options& b) noexcept;
};

// Parses the option bytes of a header (at most 40). Walks EOL/NOP and
// kind-length-value options; stops at EOL (the rest is padding). malformed for
// a length byte of 0 or 1, a length byte missing or running past the end, and a
// known kind with the wrong length; unknown kinds with a sane length are
// skipped (RFC 9293 3.2, RFC 1122 4.2.2.5). A repeated option: the last one
// counts. invalid_argument for more than 40 bytes.
Result<Options> parse_options(std::span<const std::byte> options) noexcept;

// How many of opts' SACK blocks the writer emits: all that fit in 40 bytes
// next to the other options (4 alone, 3 with timestamps).
std::size_t sack_blocks_fitting(const Options& opts) noexcept;

// Bytes write_options emits: a multiple of 4, at most 40.
std::size_t options_size(const Options& opts) noexcept;

// Writes the options, each aligned with NOPs so the size is a multiple of 4
// and the 32-bit fields fall on 32-bit boundaries (RFC 7323 appendix A):
//   MSS                    02 04 mss
//   timestamps             04 02 08 0a tsval tsecr   (with SACK-permitted)
//                          01 01 08 0a tsval tsecr   (without)
//   window scale           01 03 03 shift
//   SACK-permitted         01 01 04 02               (only without timestamps)
//   SACK blocks            01 01 05 len left right ... (as many as fit)
// Returns the bytes written, or 0 and writes nothing when `out` is smaller than
// options_size(opts).
std::size_t write_options(const Options& opts, std::span<std::byte> out) noexcept;

// Room for a header in front of `m`, with the options `opts` (none if null)
// already written behind it and h.data_offset set to match; the caller fills
// in the rest of `h` and writes it into the 20 bytes returned. Fails as
// Msg::push does.
Result<std::span<std::byte, Header::kMinSize>> push_header(Msg& m, const Options* opts, Header& h);

// ---- Checksum (RFC 9293 3.1): over the IPv4 pseudo-header and the segment ----

// Partial sum of the pseudo-header of a `length`-byte segment (header and data).
inline std::uint32_t pseudo_header_sum(Ipv4Addr src, Ipv4Addr dst, std::size_t length) noexcept {
  return csum::pseudo_header_v4(src, dst, kIpProtocol, static_cast<std::uint16_t>(length));
}

// The checksum field value (host order, as Header::checksum holds it) for a
// segment from `src` to `dst`. The bytes of the checksum field itself are left
// out of the sum, so they may hold anything.
std::uint16_t compute_checksum(Ipv4Addr src, Ipv4Addr dst, std::span<const std::byte> segment) noexcept;
std::uint16_t compute_checksum(Ipv4Addr src, Ipv4Addr dst, const Msg& segment) noexcept;

// Computes and stores the checksum field; out_of_range when the segment is
// shorter than the fixed header.
Status fill_checksum(Ipv4Addr src, Ipv4Addr dst, std::span<std::byte> segment) noexcept;

// A received segment is intact when the sum over pseudo-header and segment,
// checksum field included, folds to all ones.
bool checksum_ok(Ipv4Addr src, Ipv4Addr dst, std::span<const std::byte> segment) noexcept;
bool checksum_ok(Ipv4Addr src, Ipv4Addr dst, const Msg& segment) noexcept;

}  // namespace xk::tcp

// The foundation pieces of TCP that stand apart from its state machine: the
// header and options on the wire (checked against segments scapy built,
// tests/golden/tcp_vectors.txt), the checksum, sequence-number arithmetic,
// SipHash-2-4 (the paper's vectors, tests/golden/siphash_vectors.txt), RFC 6528
// ISNs and RFC 4987 SYN cookies.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "xk/msg.hpp"
#include "xk/protocols/ipv4_wire.hpp"
#include "xk/protocols/tcp_isn.hpp"
#include "xk/protocols/tcp_seq.hpp"
#include "xk/protocols/tcp_syncookie.hpp"
#include "xk/protocols/tcp_wire.hpp"

namespace xk::tcp {
namespace {

using namespace std::chrono_literals;

using Bytes = std::vector<std::byte>;

Bytes from_hex(std::string_view hex) {
  Bytes v(hex.size() / 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = std::byte{static_cast<std::uint8_t>(std::stoul(std::string(hex.substr(2 * i, 2)), nullptr, 16))};
  }
  return v;
}

std::string hex_of(std::span<const std::byte> b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    auto v = std::to_integer<unsigned>(x);
    s += digits[v >> 4];
    s += digits[v & 15];
  }
  return s;
}

Ipv4Addr ip(const char* text) { return *parse_ipv4(text); }

Time at(Duration d) { return Time(d); }

Secret secret_of(std::uint8_t first) {
  Secret s;
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::byte{static_cast<std::uint8_t>(first + i)};
  return s;
}

// ---------------------------------------------------------------- header

TEST(TcpHeader, WriteThenReadGivesEveryField) {
  Header h;
  h.src_port = 0xabcd;
  h.dst_port = 80;
  h.seq = SeqNum(0x01020304);
  h.ack = SeqNum(0xfffffffe);
  h.data_offset = 8;
  h.reserved = 0x1;
  h.flags = kSyn | kAck | kEce;
  h.window = 0x7fff;
  h.checksum = 0xbeef;
  h.urgent = 0x0102;
  std::array<std::byte, Header::kMinSize> b{};
  h.write(b);
  EXPECT_EQ(hex_of(b), "abcd005001020304fffffffe8152" "7fffbeef0102");
  Header r = Header::read(b);
  EXPECT_EQ(r.src_port, 0xabcd);
  EXPECT_EQ(r.dst_port, 80);
  EXPECT_EQ(r.seq, SeqNum(0x01020304));
  EXPECT_EQ(r.ack, SeqNum(0xfffffffe));
  EXPECT_EQ(r.data_offset, 8);
  EXPECT_EQ(r.reserved, 1);
  EXPECT_EQ(r.flags, kSyn | kAck | kEce);
  EXPECT_EQ(r.window, 0x7fff);
  EXPECT_EQ(r.checksum, 0xbeef);
  EXPECT_EQ(r.urgent, 0x0102);
  EXPECT_EQ(r.header_length(), 32u);
  EXPECT_EQ(r.options_length(), 12u);
  EXPECT_TRUE(r.has(kSyn | kAck));
  EXPECT_FALSE(r.has(kSyn | kFin));
}

TEST(TcpHeader, FlagBitsSitWhereRfc9293PutsThem) {
  // Byte 13: CWR ECE URG ACK PSH RST SYN FIN, most significant first.
  const std::uint8_t flags[] = {kFin, kSyn, kRst, kPsh, kAck, kUrg, kEce, kCwr};
  for (int bit = 0; bit < 8; ++bit) {
    Header h;
    h.flags = flags[bit];
    std::array<std::byte, Header::kMinSize> b{};
    h.write(b);
    EXPECT_EQ(std::to_integer<unsigned>(b[13]), 1u << bit);
    EXPECT_EQ(std::to_integer<unsigned>(b[12]), 0x50u);
  }
  EXPECT_EQ(kIpProtocol, 6);
}

TEST(TcpHeader, ParseHeaderChecksOffsetAndLength) {
  Header h;
  h.data_offset = 15;
  Bytes seg(60);
  h.write(std::span(seg).first<Header::kMinSize>());
  Result<Header> ok = parse_header(seg);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->options_length(), 40u);

  // Header longer than the segment.
  EXPECT_EQ(parse_header(std::span(seg).first(59)).error(), Errc::malformed);
  // Shorter than the fixed header.
  EXPECT_EQ(parse_header(std::span(seg).first(19)).error(), Errc::malformed);
  EXPECT_EQ(parse_header({}).error(), Errc::malformed);
  // A data offset below 5 would put the options inside the fixed header.
  for (std::uint8_t off : {0, 1, 4}) {
    h.data_offset = off;
    h.write(std::span(seg).first<Header::kMinSize>());
    EXPECT_EQ(parse_header(seg).error(), Errc::malformed) << int{off};
    EXPECT_EQ(Header::read(std::span(seg).first<Header::kMinSize>()).options_length(), 0u);
  }
  h.data_offset = 5;
  h.write(std::span(seg).first<Header::kMinSize>());
  EXPECT_TRUE(parse_header(std::span(seg).first(20)).ok());
}

// ---------------------------------------------------------------- option parser

Result<Options> parse_hex(std::string_view hex) {
  Bytes b = from_hex(hex);
  return parse_options(b);
}

TEST(TcpOptions, EmptyAndPaddingOnlyGiveNothing) {
  for (const char* hex : {"", "00", "01", "01010101", "00000000", "010100"}) {
    Result<Options> o = parse_hex(hex);
    ASSERT_TRUE(o.ok()) << hex;
    EXPECT_EQ(*o, Options{}) << hex;
  }
}

TEST(TcpOptions, EachKnownKindIsRead) {
  Result<Options> o = parse_hex("020405b4" "010303" "07" "0402" "080a0102030405060708" "0000");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->mss, 1460);
  EXPECT_EQ(o->wscale, 7);
  EXPECT_TRUE(o->sack_permitted);
  ASSERT_TRUE(o->timestamps.has_value());
  EXPECT_EQ(o->timestamps->tsval, 0x01020304u);
  EXPECT_EQ(o->timestamps->tsecr, 0x05060708u);
  EXPECT_EQ(o->sack_count, 0);

  for (std::size_t n = 1; n <= 4; ++n) {
    std::string hex = "0101" "05" + hex_of(std::array{std::byte{static_cast<std::uint8_t>(2 + 8 * n)}});
    for (std::size_t k = 0; k < n; ++k) {
      char blk[17];
      std::snprintf(blk, sizeof blk, "%08x%08x", static_cast<unsigned>(0xfffffff0u + 0x100 * k),
                    static_cast<unsigned>(0x10 + 0x100 * k));
      hex += blk;
    }
    Result<Options> s = parse_hex(hex);
    ASSERT_TRUE(s.ok()) << hex;
    ASSERT_EQ(s->sack_count, n);
    for (std::size_t k = 0; k < n; ++k) {
      EXPECT_EQ(s->sack[k].left, SeqNum(0xfffffff0u + 0x100 * static_cast<std::uint32_t>(k)));
      EXPECT_EQ(s->sack[k].right, SeqNum(0x10 + 0x100 * static_cast<std::uint32_t>(k)));
    }
  }
}

TEST(TcpOptions, IllegalLengthsAreMalformed) {
  const char* bad[] = {
      "0200",                      // MSS with length 0: would never advance
      "0201",                      // length 1: would land on its own length byte
      "1e00",                      // unknown kind, length 0
      "1e01",                      // unknown kind, length 1
      "02",                        // kind with no room for its length
      "010102",                    // the same after NOPs
      "020405",                    // MSS running past the end
      "1e0a01020304",              // unknown kind running past the end
      "080a01020304050607",        // timestamps one byte short
      "0203ff",                    // MSS length 3
      "0205ffffff",                // MSS length 5
      "0302",                      // window scale length 2
      "03040700",                  // window scale length 4
      "0403ff",                    // SACK-permitted length 3
      "0808010203040506",          // timestamps length 8
      "080c010203040506070801020304",  // timestamps length 12
      "0502",                      // SACK with no block
      "05090102030405060708",      // SACK length 9
      "050b0102030405060708090a0b",  // SACK length 11
      "050c" "00000001000000020000",  // SACK length 12: not 2 + 8n
  };
  for (const char* hex : bad) {
    EXPECT_EQ(parse_hex(hex).error(), Errc::malformed) << hex;
  }
}

TEST(TcpOptions, EolEndsTheListEarly) {
  // RFC 9293 3.1: after EOL comes padding; whatever it holds is not parsed,
  // not even an illegal length.
  Result<Options> o = parse_hex("020405b4" "00" "0200" "0303" "07");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->mss, 1460);
  EXPECT_FALSE(o->wscale.has_value());

  Result<Options> first = parse_hex("00" "020405b4");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, Options{});
}

TEST(TcpOptions, UnknownKindsWithSaneLengthAreSkipped) {
  // RFC 1122 4.2.2.5: an unknown option is ignored, known ones around it read.
  Result<Options> o = parse_hex("1e05010203" "020405b4" "fe02" "fd06aabbccdd" "0402" "0f03ff" "010303" "0e");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->mss, 1460);
  EXPECT_TRUE(o->sack_permitted);
  EXPECT_EQ(o->wscale, 14);
  EXPECT_FALSE(o->timestamps.has_value());
  // An unknown option filling the whole option space.
  std::string big = "fe28" + std::string(76, 'a');
  Result<Options> whole = parse_hex(big);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, Options{});
}

TEST(TcpOptions, WindowShiftAbove14IsUsedAs14) {
  // RFC 7323 2.3.
  for (int shift : {14, 15, 100, 255}) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "0303%02x01", shift);
    Result<Options> o = parse_hex(hex);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(o->wscale, 14) << shift;
  }
  EXPECT_EQ(parse_hex("03030001")->wscale, 0);
}

TEST(TcpOptions, ARepeatedOptionLeavesTheLastValue) {
  Result<Options> o = parse_hex("02040218" "020405b4" "0101" "050a0000000100000002" "0101" "050a0000000300000004");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->mss, 1460);
  ASSERT_EQ(o->sack_count, 1);
  EXPECT_EQ(o->sack[0], (SackBlock{SeqNum(3), SeqNum(4)}));
}

TEST(TcpOptions, MoreThanFortyBytesIsTheCallersMistake) {
  Bytes b(41, std::byte{1});
  EXPECT_EQ(parse_options(b).error(), Errc::invalid_argument);
  EXPECT_TRUE(parse_options(std::span(b).first(40)).ok());
}

TEST(TcpOptions, AddSackHoldsFourBlocks) {
  Options o;
  for (std::uint32_t k = 0; k < 4; ++k) EXPECT_TRUE(o.add_sack({SeqNum(k), SeqNum(k + 1)}));
  EXPECT_FALSE(o.add_sack({SeqNum(9), SeqNum(10)}));
  ASSERT_EQ(o.sack_blocks().size(), 4u);
  EXPECT_EQ(o.sack_blocks()[3], (SackBlock{SeqNum(3), SeqNum(4)}));
}

// ---------------------------------------------------------------- option writer

std::string written(const Options& o) {
  std::array<std::byte, kMaxOptionsSize> b{};
  std::size_t n = write_options(o, b);
  EXPECT_EQ(n, options_size(o));
  return hex_of(std::span(b).first(n));
}

TEST(TcpOptions, WriterLayoutsAreAligned) {
  Options syn;
  syn.mss = 1460;
  syn.sack_permitted = true;
  syn.timestamps = Timestamps{0x01020304, 0};
  syn.wscale = 7;
  EXPECT_EQ(written(syn), "020405b4" "0402080a0102030400000000" "01030307");

  Options no_ts = syn;
  no_ts.timestamps.reset();
  // Without timestamps: mss, nop, nop, sackOK, nop, wscale (as Linux, the
  // BSDs and Windows write a SYN's options).
  EXPECT_EQ(written(no_ts), "020405b4" "01010402" "01030307");

  Options ts_only;
  ts_only.timestamps = Timestamps{0xfffffffe, 0x11223344};
  EXPECT_EQ(written(ts_only), "0101080afffffffe11223344");

  Options mss_only;
  mss_only.mss = 536;
  EXPECT_EQ(written(mss_only), "02040218");

  Options sack;
  sack.add_sack({SeqNum(0xfffffff8), SeqNum(0x10)});
  EXPECT_EQ(written(sack), "0101050afffffff800000010");

  EXPECT_EQ(written(Options{}), "");
}

TEST(TcpOptions, SackBlocksAreCutToTheFortyByteLimit) {
  Options o;
  for (std::uint32_t k = 0; k < 4; ++k) (void)o.add_sack({SeqNum(100 * k), SeqNum(100 * k + 50)});
  EXPECT_EQ(sack_blocks_fitting(o), 4u);
  EXPECT_EQ(options_size(o), 36u);

  o.timestamps = Timestamps{1, 2};
  EXPECT_EQ(sack_blocks_fitting(o), 3u);
  EXPECT_EQ(options_size(o), 40u);
  // The first (most recent, RFC 2018 4) blocks are the ones kept.
  std::array<std::byte, kMaxOptionsSize> b{};
  ASSERT_EQ(write_options(o, b), 40u);
  Result<Options> back = parse_options(b);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->sack_count, 3);
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(back->sack[k], o.sack[k]);

  o.mss = 1460;
  o.wscale = 2;
  EXPECT_EQ(sack_blocks_fitting(o), 2u);  // 4 + 12 + 4 + (4 + 16) = 40
  EXPECT_EQ(options_size(o), 40u);
  o.sack_permitted = true;  // rides in the timestamps' padding: no change
  EXPECT_EQ(sack_blocks_fitting(o), 2u);
  o.timestamps.reset();  // 4 + 4 + 4 + (4 + 24) = 40
  EXPECT_EQ(sack_blocks_fitting(o), 3u);
  EXPECT_EQ(options_size(o), 40u);
}

TEST(TcpOptions, EveryCombinationFitsAndParsesBack) {
  for (int mask = 0; mask < 16; ++mask) {
    for (std::uint8_t blocks = 0; blocks <= 4; ++blocks) {
      Options o;
      if ((mask & 1) != 0) o.mss = static_cast<std::uint16_t>(1000 + mask);
      if ((mask & 2) != 0) o.wscale = static_cast<std::uint8_t>(mask % 15);
      if ((mask & 4) != 0) o.sack_permitted = true;
      if ((mask & 8) != 0) o.timestamps = Timestamps{0x80000000u + static_cast<std::uint32_t>(mask), 7};
      for (std::uint32_t k = 0; k < blocks; ++k) (void)o.add_sack({SeqNum(k * 0x40000000u), SeqNum(k * 0x40000000u + 9)});
      std::size_t size = options_size(o);
      SCOPED_TRACE("mask " + std::to_string(mask) + " blocks " + std::to_string(blocks));
      EXPECT_EQ(size % 4, 0u);
      EXPECT_LE(size, kMaxOptionsSize);
      std::size_t fit = sack_blocks_fitting(o);
      EXPECT_LE(fit, std::size_t{blocks});
      if (fit < blocks) {
        // One more block would not have fitted.
        Options fewer = o;
        fewer.sack_count = 0;
        EXPECT_GT(options_size(fewer) + 4 + 8 * (fit + 1), kMaxOptionsSize);
      }
      std::array<std::byte, kMaxOptionsSize> b{};
      ASSERT_EQ(write_options(o, b), size);
      Result<Options> back = parse_options(std::span(b).first(size));
      ASSERT_TRUE(back.ok());
      Options want = o;
      want.sack_count = static_cast<std::uint8_t>(fit);
      EXPECT_EQ(*back, want);
    }
  }
}

TEST(TcpOptions, WriterRefusesASmallBuffer) {
  Options o;
  o.mss = 1460;
  o.timestamps = Timestamps{1, 2};
  std::array<std::byte, 15> small{};
  small.fill(std::byte{0xee});
  EXPECT_EQ(write_options(o, small), 0u);
  for (std::byte x : small) EXPECT_EQ(x, std::byte{0xee});
  std::array<std::byte, 16> exact{};
  EXPECT_EQ(write_options(o, exact), 16u);
}

// ---------------------------------------------------------------- checksum

// A segment from a.b.c.d with a header, 12 bytes of options and `n` bytes.
Bytes segment_with(std::size_t n) {
  Header h;
  h.src_port = 40001;
  h.dst_port = 80;
  h.seq = SeqNum(0x11223344);
  h.ack = SeqNum(0x55667788);
  h.data_offset = 8;
  h.flags = kAck | kPsh;
  h.window = 1234;
  Options o;
  o.timestamps = Timestamps{9, 10};
  Bytes seg(32 + n);
  h.write(std::span(seg).first<Header::kMinSize>());
  EXPECT_EQ(write_options(o, std::span(seg).subspan(20)), 12u);
  for (std::size_t i = 0; i < n; ++i) seg[32 + i] = std::byte{static_cast<std::uint8_t>(i * 7 + 3)};
  return seg;
}

TEST(TcpChecksum, FillThenVerify) {
  const Ipv4Addr src = ip("192.0.2.20");
  const Ipv4Addr dst = ip("192.0.2.10");
  for (std::size_t n : {0, 1, 2, 3, 7, 100, 1459}) {
    Bytes seg = segment_with(n);
    ASSERT_TRUE(fill_checksum(src, dst, seg).ok());
    EXPECT_TRUE(checksum_ok(src, dst, seg)) << n;
    std::uint16_t stored = load_be16(seg.data() + Header::kChecksumOffset);
    // The field's own bytes are left out, so recomputing gives the same value.
    EXPECT_EQ(compute_checksum(src, dst, seg), stored);
    // The pseudo-header counts: other addresses, other sum.
    EXPECT_FALSE(checksum_ok(src, ip("192.0.2.11"), seg));
    // Any flipped bit is caught.
    for (std::size_t i = 0; i < seg.size(); i += 5) {
      seg[i] ^= std::byte{0x10};
      EXPECT_FALSE(checksum_ok(src, dst, seg)) << n << " byte " << i;
      seg[i] ^= std::byte{0x10};
    }
  }
  std::array<std::byte, 19> short_seg{};
  EXPECT_EQ(fill_checksum(src, dst, short_seg).error(), Errc::out_of_range);
}

TEST(TcpChecksum, MessageChainsGiveTheSameSum) {
  const Ipv4Addr src = ip("10.0.0.1");
  const Ipv4Addr dst = ip("10.0.0.2");
  Bytes seg = segment_with(77);
  ASSERT_TRUE(fill_checksum(src, dst, seg).ok());
  std::uint16_t want = load_be16(seg.data() + Header::kChecksumOffset);
  // Cut the segment in two at every offset, odd ones and the checksum field
  // included, and join the halves as separate fragments.
  for (std::size_t cut : {1, 15, 16, 17, 18, 19, 33, 60}) {
    Msg head = Msg::copy_of(std::span(seg).first(cut));
    head.join(Msg::copy_of(std::span(seg).subspan(cut)));
    ASSERT_EQ(head.fragment_count(), 2u);
    EXPECT_EQ(compute_checksum(src, dst, head), want) << cut;
    EXPECT_TRUE(checksum_ok(src, dst, head)) << cut;
  }
  seg[40] ^= std::byte{1};
  EXPECT_FALSE(checksum_ok(src, dst, Msg::copy_of(seg)));
}

// ---------------------------------------------------------------- sequence numbers

TEST(TcpSeq, ComparisonsWrapAround) {
  const SeqNum top(0xffffffff);
  EXPECT_EQ(top + 1, SeqNum(0));
  EXPECT_EQ(SeqNum(0) - 1, top);
  EXPECT_LT(top, SeqNum(0));
  EXPECT_GT(SeqNum(5), top);
  EXPECT_EQ(SeqNum(5) - top, 6);
  EXPECT_EQ(top - SeqNum(5), -6);
  EXPECT_EQ(SeqNum(0xfffffff0) + 0x20, SeqNum(0x10));
  EXPECT_EQ(seq_max(top, SeqNum(3)), SeqNum(3));
  EXPECT_EQ(seq_min(top, SeqNum(3)), top);
  EXPECT_EQ(seq_span(top, SeqNum(3)), 4u);
  EXPECT_EQ(seq_span(SeqNum(3), top), 0u);
  SeqNum s(0xfffffffe);
  s += 4;
  EXPECT_EQ(s, SeqNum(2));
  s -= 3;
  EXPECT_EQ(s, top);
}

TEST(TcpSeq, OrderHoldsUpToTwoToThe31MinusOneApart) {
  constexpr std::uint32_t kHalf = 0x80000000u;
  for (std::uint32_t base : {0u, 1u, 0x7fffffffu, kHalf, 0xffffffffu, 0x12345678u}) {
    const SeqNum a(base);
    const SeqNum far = a + (kHalf - 1);
    EXPECT_LT(a, far) << base;
    EXPECT_GT(far, a) << base;
    EXPECT_LE(a, far);
    EXPECT_EQ(far - a, 0x7fffffff);
    EXPECT_EQ(a - far, -0x7fffffff);
    // One more and the order flips: a number 2^31 + 1 ahead reads as behind.
    const SeqNum past = a + (kHalf + 1);
    EXPECT_GT(a, past) << base;
    EXPECT_LE(a, a);
    EXPECT_GE(a, a);
  }
}

TEST(TcpSeq, InWindowAtTheEdges) {
  constexpr std::uint32_t kHalf = 0x80000000u;
  for (std::uint32_t lo_raw : {0u, 0x7fffffffu, kHalf, 0xffffff00u, 0xffffffffu}) {
    const SeqNum lo(lo_raw);
    SCOPED_TRACE(lo_raw);
    EXPECT_TRUE(seq_in_window(lo, lo, 0x200));
    EXPECT_TRUE(seq_in_window(lo + 0x1ff, lo, 0x200));
    EXPECT_FALSE(seq_in_window(lo + 0x200, lo, 0x200));
    EXPECT_FALSE(seq_in_window(lo - 1, lo, 0x200));
    // An empty window holds nothing, not even lo.
    EXPECT_FALSE(seq_in_window(lo, lo, 0));
    // A window of 2^31: its last byte is in, the next is out.
    EXPECT_TRUE(seq_in_window(lo + (kHalf - 1), lo, kHalf));
    EXPECT_FALSE(seq_in_window(lo + kHalf, lo, kHalf));
    EXPECT_FALSE(seq_in_window(lo - 1, lo, kHalf));
    // The largest window covers everything but the byte before lo.
    EXPECT_TRUE(seq_in_window(lo + 0xfffffffeu, lo, 0xffffffffu));
    EXPECT_FALSE(seq_in_window(lo - 1, lo, 0xffffffffu));
  }
}

// ---------------------------------------------------------------- SipHash

TEST(SipHash, MatchesThePapersVectors) {
  std::ifstream in(std::string(XK_GOLDEN_DIR) + "/siphash_vectors.txt");
  ASSERT_TRUE(in.good());
  Secret key = secret_of(0);
  Bytes msg;
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::size_t len = 0;
    std::string out;
    words >> len >> out;
    msg.resize(len);
    for (std::size_t i = 0; i < len; ++i) msg[i] = std::byte{static_cast<std::uint8_t>(i)};
    EXPECT_EQ(siphash24(key, msg), std::stoull(out, nullptr, 16)) << "length " << len;
    ++n;
  }
  EXPECT_EQ(n, 64u);
}

TEST(SipHash, PapersWorkedExample) {
  // Printed in the paper (appendix A) itself, independent of the file above.
  Secret key = secret_of(0);
  Bytes msg(15);
  for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = std::byte{static_cast<std::uint8_t>(i)};
  EXPECT_EQ(siphash24(key, msg), 0xa129ca6149be45e5ull);
  EXPECT_EQ(siphash24(key, {}), 0x726fdb47dd0e0e31ull);
  // Another key, another value.
  EXPECT_NE(siphash24(secret_of(1), msg), 0xa129ca6149be45e5ull);
}

// ---------------------------------------------------------------- ISNs

const FourTuple kTuple{{ip("192.0.2.10"), 80}, {ip("198.51.100.7"), 40001}};

TEST(TcpIsn, SameSecretSameTimeSameIsn) {
  IsnGenerator a(secret_of(7));
  IsnGenerator b(secret_of(7));
  for (Duration d : std::array<Duration, 3>{0ns, 123456789ns, 3600s}) {
    EXPECT_EQ(a.isn(kTuple, at(d)), b.isn(kTuple, at(d)));
  }
  IsnGenerator c(secret_of(8));
  EXPECT_NE(a.isn(kTuple, at(1s)), c.isn(kTuple, at(1s)));
}

TEST(TcpIsn, EachTupleHasItsOwnOffset) {
  IsnGenerator g(secret_of(3));
  const Time now = at(42s);
  std::vector<FourTuple> tuples{kTuple};
  FourTuple t = kTuple;
  t.local.addr = ip("192.0.2.11");
  tuples.push_back(t);
  t = kTuple;
  t.local.port = 81;
  tuples.push_back(t);
  t = kTuple;
  t.remote.addr = ip("198.51.100.8");
  tuples.push_back(t);
  t = kTuple;
  t.remote.port = 40002;
  tuples.push_back(t);
  // The same numbers on the other side: the direction counts.
  tuples.push_back(FourTuple{kTuple.remote, kTuple.local});
  std::set<std::uint32_t> isns;
  for (const FourTuple& x : tuples) isns.insert(g.isn(x, now).raw());
  EXPECT_EQ(isns.size(), tuples.size());
}

TEST(TcpIsn, IsClockPlusKeyedHash) {
  IsnGenerator g(secret_of(5));
  const Time t0 = at(1000s);
  const SeqNum isn0 = g.isn(kTuple, t0);
  // RFC 6528 3: M + F.
  EXPECT_EQ(isn0, SeqNum(IsnGenerator::clock_ticks(t0)) + g.offset(kTuple));
  const TupleBytes tb(kTuple);
  ASSERT_EQ(tb.size(), 12u);  // an IPv4 tuple hashes as it always did
  Bytes tuple(tb.data(), tb.data() + tb.size());
  EXPECT_EQ(hex_of(tuple), "c000020a0050c63364079c41");
  EXPECT_EQ(g.offset(kTuple), static_cast<std::uint32_t>(siphash24(secret_of(5), tuple)));
  // M ticks every 4 microseconds.
  EXPECT_EQ(g.isn(kTuple, t0 + 3999ns), isn0);
  EXPECT_EQ(g.isn(kTuple, t0 + 4us), isn0 + 1);
  EXPECT_EQ(g.isn(kTuple, t0 + 1s), isn0 + 250000);
  EXPECT_GT(g.isn(kTuple, t0 + 1ms), isn0);
  // M wraps after 2^32 ticks (about 4.77 hours).
  EXPECT_EQ(g.isn(kTuple, t0 + 4us * 0x100000000ll), isn0);
}

TEST(TcpIsn, AnIpv6TupleHashesItsSixteenByteAddresses) {
  IpAddr::Bytes l{0x20, 0x01, 0x0d, 0xb8};
  l[15] = 0x0a;
  IpAddr::Bytes r{0x20, 0x01, 0x0d, 0xb8};
  r[15] = 0x07;
  const FourTuple t{{IpAddr::v6(l), 80}, {IpAddr::v6(r), 40001}};
  const TupleBytes tb(t);
  ASSERT_EQ(tb.size(), 36u);
  EXPECT_EQ(hex_of(Bytes(tb.data(), tb.data() + tb.size())),
            "20010db800000000000000000000000a0050"
            "20010db8000000000000000000000007"
            "9c41");
  IsnGenerator g(secret_of(5));
  EXPECT_EQ(g.offset(t), static_cast<std::uint32_t>(siphash24(secret_of(5), tb.span())));
  // A v6 tuple is not its v4-mapped twin's.
  EXPECT_NE(g.offset(t), g.offset(kTuple));
}

TEST(TcpIsn, ClockTicksAroundTheEpoch) {
  EXPECT_EQ(IsnGenerator::clock_ticks(at(0ns)), 0u);
  EXPECT_EQ(IsnGenerator::clock_ticks(at(3999ns)), 0u);
  EXPECT_EQ(IsnGenerator::clock_ticks(at(4us)), 1u);
  // Before the epoch ticks keep their length: -1 ns is in tick -1.
  EXPECT_EQ(IsnGenerator::clock_ticks(at(-1ns)), 0xffffffffu);
  EXPECT_EQ(IsnGenerator::clock_ticks(at(-4us)), 0xffffffffu);
  EXPECT_EQ(IsnGenerator::clock_ticks(at(-4001ns)), 0xfffffffeu);
  EXPECT_EQ(IsnGenerator::clock_ticks(Time::max()),
            static_cast<std::uint32_t>(Time::max().time_since_epoch().count() / 4000));
}

TEST(TcpIsn, RandomSecretsDiffer) {
  Secret a = random_secret();
  Secret b = random_secret();
  EXPECT_NE(a, b);
  IsnGenerator g1;
  IsnGenerator g2;
  EXPECT_NE(g1.secret(), g2.secret());
  EXPECT_NE(g1.isn(kTuple, at(1s)), g2.isn(kTuple, at(1s)));
}

// ---------------------------------------------------------------- SYN cookies

constexpr Duration kPeriod = SynCookies::kPeriod;

TEST(TcpSynCookie, RoundTripForEveryMss) {
  SynCookies c(secret_of(0x40));
  const SeqNum client_isn(0xfffffffe);  // its +1 wraps
  const Time now = at(kPeriod * 1000 + 5s);
  for (std::size_t i = 0; i < SynCookies::kMssTable.size(); ++i) {
    std::uint16_t mss = SynCookies::kMssTable[i];
    SeqNum isn = c.make_isn(kTuple, client_isn, mss, now);
    // The layout: t mod 32, the MSS index, 24 bits of hash.
    EXPECT_EQ(isn.raw() >> 27, SynCookies::counter(now) % 32);
    EXPECT_EQ((isn.raw() >> 24) & 7, i);
    Result<std::uint16_t> back = c.check_ack(kTuple, client_isn + 1, isn + 1, now);
    ASSERT_TRUE(back.ok()) << mss;
    EXPECT_EQ(*back, mss);
    // A peer MSS between two entries gets the lower one.
    if (i + 1 < SynCookies::kMssTable.size()) {
      SeqNum between = c.make_isn(kTuple, client_isn, static_cast<std::uint16_t>(SynCookies::kMssTable[i + 1] - 1), now);
      EXPECT_EQ(*c.check_ack(kTuple, client_isn + 1, between + 1, now), mss);
    }
  }
  EXPECT_EQ(SynCookies::mss_index(0), 0);
  EXPECT_EQ(SynCookies::mss_index(535), 0);
  EXPECT_EQ(SynCookies::mss_index(1459), 4);
  EXPECT_EQ(SynCookies::mss_index(65535), 7);
}

TEST(TcpSynCookie, DifferentInputsDifferentCookies) {
  SynCookies c(secret_of(0x40));
  const Time now = at(77s);
  std::set<std::uint32_t> seen;
  seen.insert(c.make_isn(kTuple, SeqNum(1), 1460, now).raw());
  seen.insert(c.make_isn(kTuple, SeqNum(2), 1460, now).raw());
  FourTuple other = kTuple;
  other.remote.port = 40002;
  seen.insert(c.make_isn(other, SeqNum(1), 1460, now).raw());
  seen.insert(c.make_isn(kTuple, SeqNum(1), 1460, now + kPeriod).raw());
  EXPECT_EQ(seen.size(), 4u);
}

TEST(TcpSynCookie, RejectsWhatItDidNotMake) {
  SynCookies c(secret_of(0x40));
  const Time now = at(kPeriod * 77);
  const SeqNum client_isn(0x12345678);
  const SeqNum isn = c.make_isn(kTuple, client_isn, 1460, now);
  ASSERT_TRUE(c.check_ack(kTuple, client_isn + 1, isn + 1, now).ok());

  // Another tuple: each field in turn, and the reverse direction.
  FourTuple t = kTuple;
  t.local.addr = ip("192.0.2.99");
  EXPECT_EQ(c.check_ack(t, client_isn + 1, isn + 1, now).error(), Errc::malformed);
  t = kTuple;
  t.local.port = 8080;
  EXPECT_FALSE(c.check_ack(t, client_isn + 1, isn + 1, now).ok());
  t = kTuple;
  t.remote.addr = ip("198.51.100.77");
  EXPECT_FALSE(c.check_ack(t, client_isn + 1, isn + 1, now).ok());
  t = kTuple;
  t.remote.port = 1;
  EXPECT_FALSE(c.check_ack(t, client_isn + 1, isn + 1, now).ok());
  EXPECT_FALSE(c.check_ack(FourTuple{kTuple.remote, kTuple.local},
                           client_isn + 1, isn + 1, now)
                   .ok());
  // Another client ISN, or an ACK that is off by one.
  EXPECT_FALSE(c.check_ack(kTuple, client_isn + 2, isn + 1, now).ok());
  EXPECT_FALSE(c.check_ack(kTuple, client_isn, isn + 1, now).ok());
  EXPECT_FALSE(c.check_ack(kTuple, client_isn + 1, isn, now).ok());
  EXPECT_FALSE(c.check_ack(kTuple, client_isn + 1, isn + 2, now).ok());
  // Any single bit changed: counter, MSS index or hash.
  for (int bit = 0; bit < 32; ++bit) {
    SeqNum tampered(isn.raw() ^ (1u << bit));
    EXPECT_FALSE(c.check_ack(kTuple, client_isn + 1, tampered + 1, now).ok()) << bit;
  }
  // Another secret.
  SynCookies other(secret_of(0x41));
  EXPECT_FALSE(other.check_ack(kTuple, client_isn + 1, isn + 1, now).ok());
}

TEST(TcpSynCookie, AcceptsTheCurrentAndPreviousPeriodOnly) {
  SynCookies c(secret_of(0x55));
  const SeqNum client_isn(99);
  // Up to 10^8 periods: near the end of Time's 292 years.
  for (Duration start : std::array<Duration, 4>{kPeriod * 10, kPeriod * 31, kPeriod * 100000000, -kPeriod * 3}) {
    SCOPED_TRACE(start.count());
    auto ok_at = [&](SeqNum isn, Duration d) {
      return c.check_ack(kTuple, client_isn + 1, isn + 1, at(d)).ok();
    };
    // Made at the first instant of a period: valid to the end of the next.
    SeqNum early = c.make_isn(kTuple, client_isn, 1440, at(start));
    EXPECT_TRUE(ok_at(early, start));
    EXPECT_TRUE(ok_at(early, start + kPeriod - 1ns));
    EXPECT_TRUE(ok_at(early, start + kPeriod));
    EXPECT_TRUE(ok_at(early, start + 2 * kPeriod - 1ns));
    EXPECT_FALSE(ok_at(early, start + 2 * kPeriod));
    // Not before it was made (a counter from the future).
    EXPECT_FALSE(ok_at(early, start - 1ns));
    // Made at the last instant: still valid for one more period.
    SeqNum late = c.make_isn(kTuple, client_isn, 1440, at(start + kPeriod - 1ns));
    EXPECT_TRUE(ok_at(late, start + kPeriod));
    EXPECT_TRUE(ok_at(late, start + 2 * kPeriod - 1ns));
    EXPECT_FALSE(ok_at(late, start + 2 * kPeriod));
    // 32 and 33 periods on, the 5-bit counter matches again; the hash over
    // the whole counter still rejects it.
    EXPECT_FALSE(ok_at(early, start + 32 * kPeriod));
    EXPECT_FALSE(ok_at(early, start + 33 * kPeriod));
  }
}

TEST(TcpSynCookie, CounterAdvancesEvery64Seconds) {
  EXPECT_EQ(SynCookies::counter(at(0s)), 0u);
  EXPECT_EQ(SynCookies::counter(at(64s - 1ns)), 0u);
  EXPECT_EQ(SynCookies::counter(at(64s)), 1u);
  EXPECT_EQ(SynCookies::counter(at(-1ns)), 0xffffffffu);
  EXPECT_EQ(SynCookies::counter(at(-64s)), 0xffffffffu);
  EXPECT_EQ(SynCookies::counter(at(-64s - 1ns)), 0xfffffffeu);
}

TEST(TcpSynCookie, TimestampCarriesWscaleAndSack) {
  std::vector<CookieOptions> all;
  for (bool sack : {false, true}) {
    all.push_back(CookieOptions{std::nullopt, sack});
    for (std::uint8_t ws = 0; ws <= 14; ++ws) all.push_back(CookieOptions{ws, sack});
  }
  for (std::uint32_t ts_now : {0u, 1u, 15u, 31u, 32u, 0x12345678u, 0x7fffffe0u, 0xffffffe0u, 0xffffffffu}) {
    for (const CookieOptions& o : all) {
      std::uint32_t tsval = encode_cookie_tsval(o, ts_now);
      SCOPED_TRACE(std::to_string(ts_now) + " -> " + std::to_string(tsval));
      EXPECT_EQ(decode_cookie_tsecr(tsval), o);
      // Never after our clock, and less than 32 ticks behind it.
      auto behind = static_cast<std::int32_t>(ts_now - tsval);
      EXPECT_GE(behind, 0);
      EXPECT_LT(behind, 32);
    }
  }
  // The layout: shift in bits 0-3 (15 = none), SACK-permitted in bit 4.
  EXPECT_EQ(encode_cookie_tsval(CookieOptions{7, true}, 0x1000), 0x0ff7u);
  EXPECT_EQ(encode_cookie_tsval(CookieOptions{7, true}, 0x101f), 0x1017u);
  EXPECT_EQ(encode_cookie_tsval(CookieOptions{std::nullopt, false}, 0x102f), 0x102fu);
  EXPECT_EQ(decode_cookie_tsecr(0xabcdef0f), (CookieOptions{std::nullopt, false}));
  EXPECT_EQ(decode_cookie_tsecr(0xabcdef13), (CookieOptions{3, true}));
  // A shift above 14 goes out as 14 (RFC 7323 2.3).
  EXPECT_EQ(decode_cookie_tsecr(encode_cookie_tsval(CookieOptions{200, false}, 0x500)),
            (CookieOptions{14, false}));
}

// ---------------------------------------------------------------- golden vectors from scapy

struct Vector {
  Bytes packet;
  std::map<std::string, std::string> f;
  std::string line;
};

std::vector<Vector> load_tcp_vectors() {
  std::vector<Vector> out;
  std::ifstream in(std::string(XK_GOLDEN_DIR) + "/tcp_vectors.txt");
  EXPECT_TRUE(in.good());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("tcp ", 0) != 0) continue;
    std::istringstream words(line);
    std::string kind, hex;
    words >> kind >> hex;
    Vector v{from_hex(hex), {}, line.substr(0, 120)};
    for (std::string kv; words >> kv;) {
      auto eq = kv.find('=');
      v.f[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::uint32_t num(const Vector& v, const char* key) {
  auto it = v.f.find(key);
  EXPECT_NE(it, v.f.end()) << key;
  return it == v.f.end() ? 0 : static_cast<std::uint32_t>(std::stoul(it->second));
}

// The options scapy saw, as xk's Options.
Options scapy_options(const Vector& v) {
  Options o;
  if (v.f.at("mss") != "-") o.mss = static_cast<std::uint16_t>(num(v, "mss"));
  if (v.f.at("ws") != "-") o.wscale = static_cast<std::uint8_t>(num(v, "ws"));
  o.sack_permitted = num(v, "sackok") == 1;
  if (const std::string& ts = v.f.at("ts"); ts != "-") {
    auto colon = ts.find(':');
    o.timestamps = Timestamps{static_cast<std::uint32_t>(std::stoul(ts.substr(0, colon))),
                              static_cast<std::uint32_t>(std::stoul(ts.substr(colon + 1)))};
  }
  if (const std::string& sack = v.f.at("sack"); sack != "-") {
    std::istringstream blocks(sack);
    for (std::string b; std::getline(blocks, b, ',');) {
      auto colon = b.find(':');
      EXPECT_TRUE(o.add_sack({SeqNum(static_cast<std::uint32_t>(std::stoul(b.substr(0, colon)))),
                              SeqNum(static_cast<std::uint32_t>(std::stoul(b.substr(colon + 1))))}));
    }
  }
  return o;
}

TEST(TcpGolden, FileHasEveryKind) {
  auto vs = load_tcp_vectors();
  EXPECT_GE(vs.size(), 12u);
  std::size_t syn = 0, sack = 0, odd = 0, other = 0, unknown = 0;
  for (const auto& v : vs) {
    syn += (num(v, "flags") & kSyn) != 0;
    sack += v.f.at("sack") != "-";
    odd += num(v, "payload") % 2;
    other += v.f.at("layout") == "other";
    unknown += v.f.at("unknown") != "-";
  }
  EXPECT_GE(syn, 4u);
  EXPECT_GE(sack, 3u);
  EXPECT_GE(odd, 3u);
  EXPECT_GE(other, 2u);
  EXPECT_GE(unknown, 1u);
}

TEST(TcpGolden, ScapySegmentsParse) {
  for (const Vector& v : load_tcp_vectors()) {
    SCOPED_TRACE(v.line);
    ASSERT_GE(v.packet.size(), ipv4::Header::kMinSize);
    ipv4::Header iph = ipv4::Header::read(std::span(v.packet).first<ipv4::Header::kMinSize>());
    ASSERT_EQ(iph.protocol, kIpProtocol);
    EXPECT_EQ(to_string(iph.src), v.f.at("src"));
    EXPECT_EQ(to_string(iph.dst), v.f.at("dst"));
    std::span<const std::byte> seg = std::span(v.packet).subspan(iph.header_length());

    Result<Header> h = parse_header(seg);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->src_port, num(v, "sport"));
    EXPECT_EQ(h->dst_port, num(v, "dport"));
    EXPECT_EQ(h->seq, SeqNum(num(v, "seq")));
    EXPECT_EQ(h->ack, SeqNum(num(v, "ack")));
    EXPECT_EQ(h->data_offset, num(v, "dataofs"));
    // scapy splits bytes 12-13 as 4 + 3 + 9 bits; xk as 4 + 4 + 8.
    EXPECT_EQ(h->reserved, (num(v, "reserved") << 1) | (num(v, "flags") >> 8));
    EXPECT_EQ(h->flags, num(v, "flags") & 0xff);
    EXPECT_EQ(h->window, num(v, "window"));
    EXPECT_EQ(h->checksum, num(v, "chksum"));
    EXPECT_EQ(h->urgent, num(v, "urgptr"));
    EXPECT_EQ(seg.size() - h->header_length(), num(v, "payload"));

    Result<Options> o = parse_options(seg.subspan(Header::kMinSize, h->options_length()));
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(*o, scapy_options(v));

    // The checksum scapy computed is the one xk computes, and it verifies.
    EXPECT_TRUE(checksum_ok(iph.src, iph.dst, seg));
    EXPECT_EQ(compute_checksum(iph.src, iph.dst, seg), num(v, "chksum"));
    EXPECT_TRUE(checksum_ok(iph.src, iph.dst, Msg::copy_of(seg)));
    EXPECT_EQ(compute_checksum(iph.src, iph.dst, Msg::copy_of(seg)), num(v, "chksum"));
  }
}

TEST(TcpGolden, WriterReproducesScapyHeaders) {
  std::size_t n = 0;
  for (const Vector& v : load_tcp_vectors()) {
    if (v.f.at("layout") != "xk") continue;
    SCOPED_TRACE(v.line);
    ipv4::Header iph = ipv4::Header::read(std::span(v.packet).first<ipv4::Header::kMinSize>());
    std::span<const std::byte> seg = std::span(v.packet).subspan(iph.header_length());

    // Build the segment from scapy's fields alone.
    Options o = scapy_options(v);
    Header h;
    h.src_port = static_cast<std::uint16_t>(num(v, "sport"));
    h.dst_port = static_cast<std::uint16_t>(num(v, "dport"));
    h.seq = SeqNum(num(v, "seq"));
    h.ack = SeqNum(num(v, "ack"));
    h.data_offset = static_cast<std::uint8_t>(Header::kMinDataOffset + options_size(o) / 4);
    h.reserved = static_cast<std::uint8_t>((num(v, "reserved") << 1) | (num(v, "flags") >> 8));
    h.flags = static_cast<std::uint8_t>(num(v, "flags") & 0xff);
    h.window = static_cast<std::uint16_t>(num(v, "window"));
    h.urgent = static_cast<std::uint16_t>(num(v, "urgptr"));
    EXPECT_EQ(h.data_offset, num(v, "dataofs"));

    Bytes out(seg.size());
    h.write(std::span(out).first<Header::kMinSize>());
    ASSERT_EQ(write_options(o, std::span(out).subspan(Header::kMinSize)), options_size(o));
    std::size_t hlen = h.header_length();
    ASSERT_LE(hlen, seg.size());
    std::memcpy(out.data() + hlen, seg.data() + hlen, seg.size() - hlen);
    ASSERT_TRUE(fill_checksum(iph.src, iph.dst, out).ok());
    EXPECT_EQ(hex_of(std::span(out).first(hlen)), hex_of(seg.first(hlen)));
    EXPECT_EQ(out, Bytes(seg.begin(), seg.end()));
    ++n;
  }
  EXPECT_GE(n, 12u);
}

}  // namespace
}  // namespace xk::tcp

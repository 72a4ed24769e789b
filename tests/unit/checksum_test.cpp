#include "xk/checksum.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "xk/byteorder.hpp"
#include "xk/msg.hpp"

namespace xk::csum {
namespace {

using Bytes = std::vector<std::byte>;

// ---------------------------------------------------------------------------
// Helpers

// The kernels under test: every one this CPU can run, and the dispatched one.
struct Kernel {
  std::string name;
  PartialFn fn;
};

std::vector<Kernel> kernels() {
  std::vector<Kernel> out;
  for (Impl i : {Impl::scalar, Impl::sse2, Impl::avx2}) {
    if (PartialFn f = implementation(i)) out.push_back({to_string(i), f});
  }
  out.push_back({"auto", [](const void* d, std::size_t n, std::uint32_t s) noexcept {
                   return partial(d, n, s);
                 }});
  return out;
}

// A checksum field value (memory order) as the big-endian number on the wire,
// which is how scapy reports it.
std::uint16_t wire_value(std::uint16_t field) {
  std::byte b[2];
  std::memcpy(b, &field, 2);
  return load_be16(b);
}

std::uint16_t load_field(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The obvious definition (RFC 1071 section 4.1), big-endian words: the
// reference the fast kernels are compared with where scapy cannot go.
std::uint16_t reference_checksum(std::span<const std::byte> d) {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < d.size(); i += 2) {
    unsigned hi = std::to_integer<unsigned>(d[i]);
    unsigned lo = i + 1 < d.size() ? std::to_integer<unsigned>(d[i + 1]) : 0;
    s += (hi << 8) | lo;
  }
  while ((s >> 16) != 0) s = (s & 0xffff) + (s >> 16);
  return static_cast<std::uint16_t>(~s);
}

Bytes random_bytes(std::mt19937_64& rng, std::size_t n) {
  Bytes v(n);
  for (auto& b : v) b = std::byte(static_cast<unsigned char>(rng()));
  return v;
}

// Random fragment sizes adding up to n, with many zero, one- and odd-length
// fragments.
std::vector<std::size_t> random_split(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::size_t> sizes;
  std::size_t left = n;
  while (left > 0 || sizes.size() < 2) {
    std::size_t pick;
    switch (rng() % 6) {
      case 0: pick = 0; break;
      case 1: pick = 1; break;
      case 2: pick = 1 + 2 * (rng() % 8); break;  // small odd
      case 3: pick = rng() % 100; break;
      default: pick = rng() % (n / 4 + 2); break;
    }
    pick = std::min(pick, left);
    sizes.push_back(pick);
    left -= pick;
  }
  return sizes;
}

// A message holding `data` split as `sizes`; each fragment gets a random amount
// of headroom so fragments start at every alignment.
Msg chain(std::mt19937_64& rng, std::span<const std::byte> data,
          const std::vector<std::size_t>& sizes) {
  Msg m;
  std::size_t off = 0;
  for (std::size_t n : sizes) {
    m.join(Msg::copy_of(data.subspan(off, n), rng() % 8));
    off += n;
  }
  return m;
}

// ---------------------------------------------------------------------------
// Golden vectors (tests/golden/checksum_vectors.txt, made by scapy)

struct BufVector {
  std::string desc;
  Bytes data;
  std::uint16_t expected = 0;  // scapy's value, big-endian number
};

struct PktVector {
  std::string desc;
  Bytes packet;  // a whole IPv4 packet
  std::uint16_t ip = 0;
  std::uint16_t l4 = 0;
};

struct Golden {
  std::vector<BufVector> bufs;
  std::vector<PktVector> pkts;
};

Bytes from_hex(const std::string& hex) {
  Bytes out;
  if (hex == "-") return out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(std::byte(static_cast<unsigned char>(std::stoul(hex.substr(i, 2), nullptr, 16))));
  return out;
}

// The generator rules, as gen_checksum_vectors.py documents them.
Bytes expand(const std::string& rule, const std::string& arg, std::size_t len) {
  if (rule == "hex") return from_hex(arg);
  Bytes out(len);
  if (rule == "fill") {
    auto fill = static_cast<unsigned char>(std::stoul(arg, nullptr, 16));
    std::fill(out.begin(), out.end(), std::byte(fill));
  } else if (rule == "pattern") {
    unsigned long seed = std::stoul(arg);
    for (std::size_t i = 0; i < len; ++i)
      out[i] = std::byte(static_cast<unsigned char>(i * 31 + seed));
  } else if (rule == "lcg") {
    std::uint32_t x = static_cast<std::uint32_t>(std::stoul(arg));
    for (std::size_t i = 0; i < len; ++i) {
      x = x * 1103515245u + 12345u;
      out[i] = std::byte(static_cast<unsigned char>(x >> 24));
    }
  } else {
    ADD_FAILURE() << "unknown rule " << rule;
  }
  return out;
}

const Golden& golden() {
  static const Golden g = [] {
    Golden out;
    std::ifstream in(std::string(XK_GOLDEN_DIR) + "/checksum_vectors.txt");
    EXPECT_TRUE(in.good()) << "cannot open checksum_vectors.txt in " << XK_GOLDEN_DIR;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string kind;
      ls >> kind;
      if (kind == "buf") {
        std::size_t len;
        std::string rule, arg, sum;
        ls >> len >> rule >> arg >> sum;
        BufVector v{"buf " + std::to_string(len) + " " + rule, expand(rule, arg, len),
                    static_cast<std::uint16_t>(std::stoul(sum, nullptr, 16))};
        EXPECT_EQ(v.data.size(), len) << line.substr(0, 80);
        out.bufs.push_back(std::move(v));
      } else if (kind == "pkt") {
        std::string proto, hex, ip, l4;
        ls >> proto >> hex >> ip >> l4;
        EXPECT_EQ(ip.substr(0, 3), "ip=");
        EXPECT_EQ(l4.substr(0, 3), "l4=");
        out.pkts.push_back({"pkt " + proto + " " + hex.substr(0, 40), from_hex(hex),
                            static_cast<std::uint16_t>(std::stoul(ip.substr(3), nullptr, 16)),
                            static_cast<std::uint16_t>(std::stoul(l4.substr(3), nullptr, 16))});
      } else {
        ADD_FAILURE() << "bad line: " << line.substr(0, 80);
      }
    }
    return out;
  }();
  return g;
}

TEST(ChecksumGolden, FileHasEveryKind) {
  const Golden& g = golden();
  EXPECT_GE(g.bufs.size(), 100u);
  EXPECT_GE(g.pkts.size(), 20u);
  std::size_t large = 0, odd = 0, empty = 0;
  for (const auto& v : g.bufs) {
    large += v.data.size() > 65536;
    odd += v.data.size() % 2;
    empty += v.data.empty();
  }
  EXPECT_GE(large, 3u);
  EXPECT_GE(odd, 30u);
  EXPECT_EQ(empty, 1u);
}

TEST(ChecksumGolden, EveryKernelMatchesScapy) {
  std::printf("kernels: ");
  for (const Kernel& k : kernels()) std::printf("%s ", k.name.c_str());
  std::printf("(selected: %s)\n", to_string(selected()));
  for (const BufVector& v : golden().bufs) {
    EXPECT_EQ(reference_checksum(v.data), v.expected) << v.desc;
    for (const Kernel& k : kernels())
      EXPECT_EQ(wire_value(finish(k.fn(v.data.data(), v.data.size(), 0))), v.expected)
          << k.name << " " << v.desc;
  }
}

TEST(ChecksumGolden, MessageChainsMatchScapy) {
  std::mt19937_64 rng(1071);
  for (const BufVector& v : golden().bufs) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<std::size_t> sizes = random_split(rng, v.data.size());
      Msg m = chain(rng, v.data, sizes);
      ASSERT_EQ(m.size(), v.data.size());
      EXPECT_EQ(wire_value(finish(partial(m))), v.expected)
          << v.desc << " in " << sizes.size() << " fragments";

      // The same bytes as a range inside a longer message.
      std::size_t pre = rng() % 7, post = rng() % 5;
      Bytes framed = random_bytes(rng, pre);
      framed.insert(framed.end(), v.data.begin(), v.data.end());
      Bytes tail = random_bytes(rng, post);
      framed.insert(framed.end(), tail.begin(), tail.end());
      Msg f = chain(rng, framed, random_split(rng, framed.size()));
      Result<std::uint32_t> r = partial(f, pre, v.data.size());
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(wire_value(finish(*r)), v.expected) << v.desc << " at offset " << pre;
    }
  }
}

// IPv4 header checksum, and the UDP/TCP (with pseudo-header) or ICMP checksum,
// recomputed from the packets scapy built.
TEST(ChecksumGolden, PacketChecksumsMatchScapy) {
  std::mt19937_64 rng(791);
  for (const PktVector& v : golden().pkts) {
    const std::byte* p = v.packet.data();
    std::size_t ihl = (std::to_integer<std::size_t>(p[0]) & 0xf) * 4;
    std::size_t total = load_be16(p + 2);
    ASSERT_EQ(total, v.packet.size()) << v.desc;
    std::uint8_t proto = std::to_integer<std::uint8_t>(p[9]);

    // A received header with its checksum in place sums to -0 (RFC 1071 section 1).
    EXPECT_EQ(finish(partial(p, ihl)), 0) << v.desc;
    Bytes hdr(p, p + ihl);
    hdr[10] = hdr[11] = std::byte{0};
    EXPECT_EQ(wire_value(finish(partial(hdr.data(), hdr.size()))), v.ip) << v.desc;

    std::size_t l4_len = total - ihl;
    std::size_t field = proto == 17 ? 6 : proto == 6 ? 16 : 2;
    Bytes seg(p + ihl, p + total);
    seg[field] = seg[field + 1] = std::byte{0};
    std::uint32_t start = 0;
    if (proto != 1) {  // ICMP has no pseudo-header
      start = pseudo_header_v4(Ipv4Addr{load_be32(p + 12)}, Ipv4Addr{load_be32(p + 16)}, proto,
                               static_cast<std::uint16_t>(l4_len));
    }
    std::uint16_t got = finish(partial(seg.data(), seg.size(), start));
    // RFC 768: a computed UDP checksum of zero is sent as all ones.
    if (proto == 17 && got == 0) got = 0xffff;
    EXPECT_EQ(wire_value(got), v.l4) << v.desc;

    // As a transport layer sees it: the segment is a range of a fragmented message.
    Msg m = chain(rng, v.packet, random_split(rng, v.packet.size()));
    Result<std::uint32_t> r = partial(m, ihl, l4_len, start);
    ASSERT_TRUE(r.ok());
    // With the checksum in place the total is -0, whatever the fragments.
    EXPECT_EQ(finish(*r), 0) << v.desc;
  }
}

// ---------------------------------------------------------------------------
// Fold, finish, combine

TEST(Checksum, FoldKeepsPlusAndMinusZeroApart) {
  static_assert(fold(0) == 0);
  static_assert(fold(0xffff) == 0xffff);
  static_assert(fold(0x10000) == 1);
  static_assert(fold(0xffffffff) == 0xffff);
  static_assert(fold(0xfffe0001) == 0xffff);
  static_assert(finish(0) == 0xffff);
  static_assert(finish(0xffff) == 0);
  static_assert(add(0xffffffff, 1) == 1);
  static_assert(add(0xffffffff, 0xffffffff) == 0xffffffff);
  EXPECT_EQ(partial(nullptr, 0), 0u);
  EXPECT_EQ(partial(nullptr, 0, 1234), 1234u);
}

TEST(Checksum, StartingSumCarriesOver) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    Bytes d = random_bytes(rng, rng() % 3000);
    std::size_t cut = (rng() % (d.size() + 1)) & ~std::size_t{1};  // even cut
    for (const Kernel& k : kernels()) {
      std::uint32_t head = k.fn(d.data(), cut, 0);
      std::uint32_t whole = k.fn(d.data() + cut, d.size() - cut, head);
      EXPECT_EQ(wire_value(finish(whole)), reference_checksum(d)) << k.name;
      // Any starting value, up to the largest, goes in with end-around carry.
      std::uint32_t big = 0xffffffffu - static_cast<std::uint32_t>(rng() % 3);
      EXPECT_EQ(fold(k.fn(d.data(), d.size(), big)), fold(add(big, k.fn(d.data(), d.size(), 0))))
          << k.name;
    }
  }
}

TEST(Checksum, OddOffsetBlocksCombineBySwapping) {
  const Bytes d = {std::byte{0x12}, std::byte{0x34}, std::byte{0x56}, std::byte{0x78},
                   std::byte{0x9a}};
  for (std::size_t cut = 0; cut <= d.size(); ++cut) {
    std::uint32_t a = partial(d.data(), cut);
    std::uint32_t b = partial(d.data() + cut, d.size() - cut);
    EXPECT_EQ(wire_value(finish(combine(a, b, cut))), reference_checksum(d)) << cut;
  }
  // RFC 1071 section 2(B) by hand: 0x1234 + 0x5678 + 0x9a00 = 0x1 02AC -> 0x02AD.
  EXPECT_EQ(wire_value(static_cast<std::uint16_t>(~finish(partial(d.data(), d.size())))), 0x02AD);
}

TEST(Checksum, OddByteJoinsAcrossFragments) {
  std::mt19937_64 rng(2);
  Bytes d = random_bytes(rng, 64);
  std::uint16_t want = reference_checksum(d);
  // Hand-picked splits: odd runs, empty fragments first, last and in between.
  const std::vector<std::vector<std::size_t>> splits = {
      {1, 63},        {63, 1},      {1, 1, 1, 61},      {0, 64},    {64, 0},
      {3, 0, 0, 61},  {0, 1, 0, 63}, {7, 9, 11, 13, 24}, {33, 31},   {1, 2, 3, 4, 5, 6, 7, 36},
  };
  for (const auto& sizes : splits) {
    Msg m = chain(rng, d, sizes);
    ASSERT_EQ(m.fragment_count(), sizes.size());
    EXPECT_EQ(wire_value(finish(partial(m))), want);
    for (std::size_t off = 0; off <= d.size(); off += 5) {
      std::size_t len = std::min<std::size_t>(d.size() - off, 1 + rng() % 40);
      Result<std::uint32_t> r = partial(m, off, len);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(wire_value(finish(*r)), reference_checksum(std::span(d).subspan(off, len)))
          << off << "+" << len;
    }
  }
  // Many random splits of an odd-length buffer.
  Bytes odd = random_bytes(rng, 1001);
  for (int trial = 0; trial < 300; ++trial) {
    Msg m = chain(rng, odd, random_split(rng, odd.size()));
    EXPECT_EQ(wire_value(finish(partial(m))), reference_checksum(odd));
  }
}

TEST(Checksum, MessageRangePastTheEndIsOutOfRange) {
  Bytes d(10, std::byte{1});
  std::mt19937_64 rng(5);
  Msg m = chain(rng, d, {3, 7});
  EXPECT_EQ(partial(m, 0, 11).error(), Errc::out_of_range);
  EXPECT_EQ(partial(m, 11, 0).error(), Errc::out_of_range);
  EXPECT_EQ(partial(m, 4, 7).error(), Errc::out_of_range);
  Result<std::uint32_t> empty = partial(m, 10, 0, 77);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, 77u);
  Msg none;
  EXPECT_EQ(partial(none), 0u);
}

// ---------------------------------------------------------------------------
// Alignment and size

TEST(Checksum, EveryAlignmentAndShortLength) {
  std::mt19937_64 rng(64);
  Bytes store = random_bytes(rng, 9000 + 2 * 64);
  const auto base_addr = reinterpret_cast<std::uintptr_t>(store.data());
  std::byte* aligned = store.data() + (64 - base_addr % 64) % 64;
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (std::size_t n : {511u, 1500u, 1501u, 4097u, 9000u}) lengths.push_back(n);
  for (std::size_t off = 0; off < 64; ++off) {
    for (std::size_t n : lengths) {
      std::span<const std::byte> d(aligned + off, n);
      std::uint16_t want = reference_checksum(d);
      for (const Kernel& k : kernels())
        ASSERT_EQ(wire_value(finish(k.fn(d.data(), n, 0))), want)
            << k.name << " offset " << off << " length " << n;
    }
  }
}

TEST(Checksum, LargeBuffers) {
  std::mt19937_64 rng(16);
  constexpr std::size_t kMB = 1024 * 1024;
  // Sizes around the SIMD kernels' blocks (4095 turns of 128 and 256 bytes,
  // plus up to 127 or 255 bytes of tail) and up to 16 MB.
  constexpr std::size_t kSse2Block = 4095 * 128, kAvx2Block = 4095 * 256;
  const std::size_t sizes[] = {kSse2Block - 1,   kSse2Block,       kSse2Block + 127,
                               kSse2Block + 128, kAvx2Block - 1,   kAvx2Block,
                               kAvx2Block + 1,   kAvx2Block + 255, kAvx2Block + 256,
                               2 * kAvx2Block + 77, 3 * kMB + 5,   16 * kMB,
                               16 * kMB + 3};
  for (std::size_t n : sizes) {
    Bytes d = random_bytes(rng, n);
    std::uint16_t want = reference_checksum(d);
    for (const Kernel& k : kernels())
      EXPECT_EQ(wire_value(finish(k.fn(d.data(), n, 0))), want) << k.name << " " << n;
  }
  // Extremes for the accumulators: every word 0xffff (-0) or 0 (+0).
  for (std::byte fill : {std::byte{0xff}, std::byte{0x00}}) {
    for (std::size_t n : {kSse2Block + 127, kAvx2Block + 255, 16 * kMB, 16 * kMB + 1,
                          16 * kMB + 2}) {
      Bytes d(n, fill);
      std::uint16_t want = reference_checksum(d);
      for (const Kernel& k : kernels())
        EXPECT_EQ(wire_value(finish(k.fn(d.data(), n, 0))), want)
            << k.name << " " << n << " x " << std::to_integer<int>(fill);
    }
  }
  // As a chain of fragments.
  Bytes d = random_bytes(rng, 4 * kMB + 1);
  std::vector<std::size_t> sizes_frag;
  for (std::size_t left = d.size(); left > 0;) {
    std::size_t n = std::min<std::size_t>(left, 1 + rng() % 70000);
    sizes_frag.push_back(n);
    left -= n;
  }
  Msg m = chain(rng, d, sizes_frag);
  EXPECT_EQ(wire_value(finish(partial(m))), reference_checksum(d));
}

// ---------------------------------------------------------------------------
// Incremental update (RFC 1624)

TEST(ChecksumIncremental, Rfc1624Section3Example) {
  // The other header words sum to 0xCD7A; m = 0x5555 becomes m' = 0x3285.
  // Recomputing gives ~(0xCD7A + 0x3285) = ~0xFFFF = 0x0000, and eqn. 3 must
  // too (RFC 1141's eqn. 2 gave 0xFFFF, the wrong -0 form).
  static_assert(update16(0xDD2F, 0x5555, 0x3285) == 0x0000);
  EXPECT_EQ(update16(0xDD2F, 0x5555, 0x3285), 0x0000);

  // The same on bytes: words [0xCD7A, m, checksum] in network order.
  Bytes h = {std::byte{0xCD}, std::byte{0x7A}, std::byte{0x55}, std::byte{0x55},
             std::byte{0},    std::byte{0}};
  std::uint16_t hc = finish(partial(h.data(), h.size()));
  EXPECT_EQ(wire_value(hc), 0xDD2F);
  std::memcpy(h.data() + 4, &hc, 2);
  Bytes old_m(h.begin() + 2, h.begin() + 4);
  store_be16(h.data() + 2, 0x3285);
  Bytes new_m(h.begin() + 2, h.begin() + 4);
  std::uint16_t inc = update16(hc, load_field(old_m.data()), load_field(new_m.data()));
  EXPECT_EQ(inc, 0x0000);
  EXPECT_EQ(update(hc, old_m, new_m), 0x0000);
  h[4] = h[5] = std::byte{0};
  EXPECT_EQ(finish(partial(h.data(), h.size())), inc);
}

// A 40-byte header (checksum at offset 16, as in TCP) with random contents.
constexpr std::size_t kHdr = 40;
constexpr std::size_t kCk = 16;

std::uint16_t recompute(Bytes h) {
  h[kCk] = h[kCk + 1] = std::byte{0};
  return finish(partial(h.data(), h.size()));
}

// An even offset for a field of `len` bytes that does not overlap the checksum.
std::size_t field_offset(std::mt19937_64& rng, std::size_t len) {
  for (;;) {
    std::size_t off = 2 * (rng() % ((kHdr - len) / 2 + 1));
    if (off + len <= kCk || off >= kCk + 2) return off;
  }
}

// Rewrite the field at [off, off+len) with random bytes; with `force_minus_zero`
// pick them so the new data sums to 0xffff (the recomputed checksum is 0x0000).
void rewrite(std::mt19937_64& rng, Bytes& h, std::size_t off, std::size_t len,
             bool force_minus_zero) {
  for (std::size_t i = 0; i < len; ++i) h[off + i] = std::byte(static_cast<unsigned char>(rng()));
  if (!force_minus_zero || len < 2) return;
  // Choose the field's first word so the whole sum is 0xffff: w = ~(rest).
  store_be16(h.data() + off, 0);
  Bytes z = h;
  z[kCk] = z[kCk + 1] = std::byte{0};
  std::uint16_t rest = fold(partial(z.data(), z.size()));
  std::uint16_t w = static_cast<std::uint16_t>(~rest);
  std::memcpy(h.data() + off, &w, 2);
}

TEST(ChecksumIncremental, EqualsFullRecompute) {
  std::mt19937_64 rng(1624);
  int minus_zero_cases = 0;
  for (int trial = 0; trial < 30000; ++trial) {
    Bytes h = random_bytes(rng, kHdr);
    std::uint16_t hc = recompute(h);
    std::memcpy(h.data() + kCk, &hc, 2);

    int kind = trial % 3;  // 16-bit, 32-bit, any-length field
    std::size_t len = kind == 0 ? 2 : kind == 1 ? 4 : 1 + rng() % 12;
    std::size_t off = field_offset(rng, len);
    Bytes old_f(h.begin() + off, h.begin() + off + len);
    rewrite(rng, h, off, len, trial % 7 == 0);
    Bytes new_f(h.begin() + off, h.begin() + off + len);
    std::uint16_t full = recompute(h);
    minus_zero_cases += full == 0;

    std::uint16_t inc;
    if (kind == 0) {
      inc = update16(hc, load_field(old_f.data()), load_field(new_f.data()));
      // Host-order values in, host-order value out.
      std::byte hc_bytes[2];
      std::memcpy(hc_bytes, &hc, 2);
      EXPECT_EQ(update16(load_be16(hc_bytes), load_be16(old_f.data()), load_be16(new_f.data())),
                wire_value(full));
    } else if (kind == 1) {
      std::uint32_t o, n;
      std::memcpy(&o, old_f.data(), 4);
      std::memcpy(&n, new_f.data(), 4);
      inc = update32(hc, o, n);
      std::byte hc_bytes[2];
      std::memcpy(hc_bytes, &hc, 2);
      EXPECT_EQ(update32(load_be16(hc_bytes), load_be32(old_f.data()), load_be32(new_f.data())),
                wire_value(full));
    } else {
      inc = update(hc, old_f, new_f);
    }
    ASSERT_EQ(inc, full) << "trial " << trial << " kind " << kind << " off " << off
                         << " len " << len;
    // A chain of updates stays exact.
    std::memcpy(h.data() + kCk, &inc, 2);
    EXPECT_EQ(finish(partial(h.data(), h.size())), 0);
  }
  EXPECT_GT(minus_zero_cases, 1000);
}

TEST(ChecksumIncremental, TtlDecrementAsARouterDoesIt) {
  // RFC 1624 section 4: decrementing TTL changes the TTL/protocol word.
  std::mt19937_64 rng(4);
  for (const PktVector& v : golden().pkts) {
    std::size_t ihl = (std::to_integer<std::size_t>(v.packet[0]) & 0xf) * 4;
    Bytes h(v.packet.begin(), v.packet.begin() + static_cast<std::ptrdiff_t>(ihl));
    std::uint16_t ck = load_be16(h.data() + 10);
    for (int hop = 0; hop < 5 && std::to_integer<int>(h[8]) > 0; ++hop) {
      std::uint16_t old_word = load_be16(h.data() + 8);
      h[8] = std::byte(static_cast<unsigned char>(std::to_integer<int>(h[8]) - 1));
      ck = update16(ck, old_word, load_be16(h.data() + 8));
      store_be16(h.data() + 10, ck);
      EXPECT_EQ(finish(partial(h.data(), ihl)), 0) << v.desc;
    }
  }
}

// ---------------------------------------------------------------------------
// Pseudo-header

TEST(Checksum, PseudoHeaderEqualsSumOfItsBytes) {
  std::mt19937_64 rng(768);
  for (int trial = 0; trial < 5000; ++trial) {
    Ipv4Addr src{static_cast<std::uint32_t>(rng())}, dst{static_cast<std::uint32_t>(rng())};
    auto proto = static_cast<std::uint8_t>(rng());
    auto len = static_cast<std::uint16_t>(rng());
    std::byte ph[12];
    store_be32(ph, src.value);
    store_be32(ph + 4, dst.value);
    ph[8] = std::byte{0};
    ph[9] = std::byte{proto};
    store_be16(ph + 10, len);
    EXPECT_EQ(fold(pseudo_header_v4(src, dst, proto, len)), fold(partial(ph, 12)));
  }
  // 192.0.2.1 -> 198.51.100.2, UDP, length 8: all constexpr.
  constexpr std::uint32_t s = pseudo_header_v4(Ipv4Addr{0xC0000201}, Ipv4Addr{0xC6336402}, 17, 8);
  static_assert(fold(s) != 0);
  std::byte ph[12] = {std::byte{192}, std::byte{0},  std::byte{2},   std::byte{1},
                      std::byte{198}, std::byte{51}, std::byte{100}, std::byte{2},
                      std::byte{0},   std::byte{17}, std::byte{0},   std::byte{8}};
  EXPECT_EQ(fold(s), fold(partial(ph, 12)));
}

// RFC 8200 8.1: the IPv6 pseudo-header, against a segment scapy made
// (IPv6(src='2001:db8::a', dst='2001:db8::7')/TCP(sport=80, dport=40001,
// seq=1, flags='S', window=65535)/b'hello': checksum 0x73f6).
TEST(Checksum, Ipv6PseudoHeaderGivesScapysTcpChecksum) {
  IpAddr::Bytes s{0x20, 0x01, 0x0d, 0xb8};
  IpAddr::Bytes d = s;
  s[15] = 0x0a;
  d[15] = 0x07;
  Bytes seg = from_hex("00509c4100000001000000005002ffff73f6000068656c6c6f");
  const auto len = static_cast<std::uint32_t>(seg.size());
  const std::uint32_t ph = pseudo_header(IpAddr::v6(s), IpAddr::v6(d), 6, len);
  // Verifies as it came...
  EXPECT_EQ(fold(partial(seg.data(), seg.size(), ph)), 0xffff);
  // ...and computed afresh gives scapy's value.
  seg[16] = seg[17] = std::byte{0};
  EXPECT_EQ(wire_value(finish(partial(seg.data(), seg.size(), ph))), 0x73f6);
  // Either family through the one call: IPv4 addresses take IPv4's.
  EXPECT_EQ(pseudo_header(IpAddr(Ipv4Addr{0xC0000201}), IpAddr(Ipv4Addr{0xC6336402}), 17, 8),
            pseudo_header_v4(Ipv4Addr{0xC0000201}, Ipv4Addr{0xC6336402}, 17, 8));
}

TEST(Checksum, DispatchPicksAnAvailableKernel) {
  EXPECT_NE(implementation(Impl::scalar), nullptr);
  EXPECT_NE(implementation(selected()), nullptr);
#if defined(__x86_64__)
  EXPECT_NE(implementation(Impl::sse2), nullptr);
  EXPECT_EQ(selected() == Impl::avx2, __builtin_cpu_supports("avx2") != 0);
#endif
  EXPECT_STREQ(to_string(Impl::avx2), "avx2");
}

}  // namespace
}  // namespace xk::csum

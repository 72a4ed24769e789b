// The IPv6 header and the walk of its extension headers
// (xk/protocols/ipv6_wire.hpp) against packets scapy built
// (tests/golden/ipv6_vectors.txt), and against hostile input.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "xk/protocols/ipv6_wire.hpp"

namespace xk::ipv6 {
namespace {

using Bytes = std::vector<std::byte>;

Bytes from_hex(std::string_view hex) {
  Bytes v(hex.size() / 2);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = std::byte{static_cast<std::uint8_t>(std::stoul(std::string(hex.substr(2 * i, 2)), nullptr, 16))};
  return v;
}

Bytes bytes_of(const IpAddr& a) {
  Bytes v(16);
  std::memcpy(v.data(), a.bytes().data(), 16);
  return v;
}

std::vector<std::vector<std::string>> vectors(const std::string& kind) {
  std::ifstream in(std::string(XK_GOLDEN_DIR) + "/ipv6_vectors.txt");
  EXPECT_TRUE(in.good());
  std::vector<std::vector<std::string>> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(kind + " ", 0) != 0) continue;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    out.push_back(w);
  }
  return out;
}

TEST(Ipv6Header, ReadsWhatScapyWroteAndWritesItBack) {
  const auto v = vectors("header");
  ASSERT_EQ(v.size(), 3u);
  for (const auto& w : v) {
    const Bytes p = from_hex(w[1]);
    const Header h = Header::read(std::span(p).first<Header::kSize>());
    EXPECT_EQ(h.version, 6);
    EXPECT_EQ(h.traffic_class, std::stoul(w[2]));
    EXPECT_EQ(h.flow_label, std::stoul(w[3]));
    EXPECT_EQ(h.payload_length, std::stoul(w[4]));
    EXPECT_EQ(h.next_header, std::stoul(w[5]));
    EXPECT_EQ(h.hop_limit, std::stoul(w[6]));
    EXPECT_EQ(bytes_of(h.src), from_hex(w[7]));
    EXPECT_EQ(bytes_of(h.dst), from_hex(w[8]));
    EXPECT_FALSE(h.src.is_v4());
    Bytes again(Header::kSize);
    h.write(std::span(again).first<Header::kSize>());
    EXPECT_EQ(again, Bytes(p.begin(), p.begin() + Header::kSize));
  }
}

TEST(Ipv6Chain, FindsTheUpperLayerWhereScapyPutIt) {
  const auto v = vectors("chain");
  ASSERT_GE(v.size(), 14u);
  for (const auto& w : v) {
    SCOPED_TRACE(w[1]);
    const Bytes p = from_hex(w[1]);
    const ChainResult r = walk_chain(p);
    ASSERT_TRUE(r.chain.has_value()) << to_string(r.problem.error);
    EXPECT_EQ(r.chain->upper, std::stoul(w[2]));
    EXPECT_EQ(r.chain->upper_offset, std::stoul(w[3]));
    EXPECT_EQ(r.chain->headers, std::stoul(w[4]));
    EXPECT_EQ(r.chain->router_alert, w[5] == "1");
    if (w[6] == "-") {
      EXPECT_FALSE(r.chain->fragment.has_value());
      continue;
    }
    ASSERT_TRUE(r.chain->fragment.has_value());
    unsigned long offset = 0, more = 0, id = 0, where = 0;
    ASSERT_EQ(std::sscanf(w[6].c_str(), "%lu:%lu:%lu:%lu", &offset, &more, &id, &where), 4);
    EXPECT_EQ(r.chain->fragment->offset(), offset);
    EXPECT_EQ(r.chain->fragment->more, more == 1);
    EXPECT_EQ(r.chain->fragment->id, id);
    EXPECT_EQ(r.chain->fragment_offset, where);
    // The fragment header writes back as it was read.
    Bytes again(FragmentHeader::kSize);
    r.chain->fragment->write(std::span(again).first<FragmentHeader::kSize>());
    EXPECT_EQ(again[0], p[where]);
    EXPECT_TRUE(std::equal(again.begin() + 2, again.end(), p.begin() + static_cast<std::ptrdiff_t>(where) + 2));
  }
}

TEST(Ipv6Chain, RefusesWhatRfc8200Refuses) {
  const auto v = vectors("problem");
  ASSERT_GE(v.size(), 12u);
  for (const auto& w : v) {
    SCOPED_TRACE(w[1]);
    const ChainResult r = walk_chain(from_hex(w[1]));
    ASSERT_FALSE(r.chain.has_value());
    EXPECT_STREQ(to_string(r.problem.error), w[2].c_str());
    EXPECT_EQ(r.problem.icmp, w[3] == "1");
    if (!r.problem.icmp) continue;
    EXPECT_EQ(r.problem.code, std::stoul(w[4]));
    EXPECT_EQ(r.problem.pointer, std::stoul(w[5]));
    EXPECT_EQ(r.problem.unless_multicast, w[6] == "1");
  }
}

TEST(Ipv6Chain, LimitsAreTheCallers) {
  // Nine destination options headers pass with a limit of nine.
  const auto v = vectors("problem");
  for (const auto& w : v) {
    if (w[2] != "too_many_headers") continue;
    const Bytes p = from_hex(w[1]);
    EXPECT_FALSE(walk_chain(p).chain.has_value());
    ChainLimits more;
    more.max_headers = 9;
    const ChainResult r = walk_chain(p, more);
    ASSERT_TRUE(r.chain.has_value());
    EXPECT_EQ(r.chain->headers, 9u);
    EXPECT_EQ(r.chain->upper, kUdp);
  }
}

// Every packet cut short, and random bytes behind a valid fixed header, is
// refused or walked without reading past its end (ASan runs this too).
TEST(Ipv6Chain, HostileInputIsWalkedWithinItsBytes) {
  std::size_t walked = 0;
  for (const char* kind : {"chain", "problem"}) {
    for (const auto& w : vectors(kind)) {
      const Bytes p = from_hex(w[1]);
      for (std::size_t n = 0; n <= p.size(); ++n) {
        const Bytes cut(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
        const ChainResult r = walk_chain(cut);
        if (r.chain) {
          EXPECT_LE(r.chain->upper_offset, n);
        } else if (n < Header::kSize) {
          EXPECT_EQ(r.problem.error, ChainError::truncated);
        }
        ++walked;
      }
    }
  }
  std::mt19937 rng(6);
  for (int i = 0; i < 20000; ++i) {
    Bytes p(Header::kSize + rng() % 200);
    for (std::byte& b : p) b = std::byte{static_cast<std::uint8_t>(rng())};
    const std::uint8_t exts[] = {kHopByHop, kDestOptions, kRouting, kFragment, kAuth};
    p[Header::kNextHeaderOffset] = std::byte{exts[rng() % 5]};
    for (std::size_t at = Header::kSize; at + 8 <= p.size(); at += 8)
      if (rng() % 2 == 0) p[at] = std::byte{exts[rng() % 5]};
    const ChainResult r = walk_chain(p);
    if (r.chain) {
      EXPECT_LE(r.chain->upper_offset, p.size());
      EXPECT_LE(r.chain->headers, ChainLimits{}.max_headers);
    }
    ++walked;
  }
  EXPECT_GT(walked, 20000u);
}

}  // namespace
}  // namespace xk::ipv6

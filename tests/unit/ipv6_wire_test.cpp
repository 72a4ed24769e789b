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

#include "xk/checksum.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
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

IpAddr addr_of(const std::string& hex) {
  const Bytes b = from_hex(hex);
  return Header::address_at(b.data());
}

TEST(Ipv6Addresses, LinkLocalSolicitedNodeAndMulticastMacAsScapyDerivesThem) {
  const auto ll = vectors("link_local");
  ASSERT_EQ(ll.size(), 3u);
  for (const auto& w : ll) {
    const IpAddr a = icmpv6::link_local_from_mac(*parse_mac(w[1]));
    EXPECT_EQ(a, addr_of(w[2])) << w[1];
    EXPECT_TRUE(icmpv6::is_link_local(a));
  }
  const auto sn = vectors("solicited");
  ASSERT_EQ(sn.size(), 3u);
  for (const auto& w : sn) {
    const IpAddr group = icmpv6::solicited_node(addr_of(w[1]));
    EXPECT_EQ(group, addr_of(w[2]));
    EXPECT_TRUE(is_multicast(group));
    EXPECT_EQ(icmpv6::multicast_mac(group), *parse_mac(w[3]));
  }
  EXPECT_FALSE(icmpv6::is_link_local(addr_of(sn[0][1])));
  EXPECT_TRUE(is_multicast(icmpv6::all_nodes()));
  EXPECT_EQ(icmpv6::all_routers().bytes()[15], 2);
}

// The ICMPv6 checksum: the IPv6 pseudo-header with next header 58 and the
// whole message sum to zero in every message scapy checksummed.
TEST(Icmpv6, ChecksumsAndHeadersMatchScapy) {
  const auto v = vectors("icmpv6");
  ASSERT_EQ(v.size(), 5u);
  for (const auto& w : v) {
    SCOPED_TRACE(w[1]);
    Bytes p = from_hex(w[1]);
    const Header ip = Header::read(std::span(p).first<Header::kSize>());
    const std::span<std::byte> msg = std::span(p).subspan(Header::kSize);
    const std::uint32_t pseudo = csum::pseudo_header(ip.src, ip.dst, kIcmpv6, static_cast<std::uint32_t>(msg.size()));
    EXPECT_EQ(csum::finish(csum::partial(msg.data(), msg.size(), pseudo)), 0);
    const icmpv6::Header h = icmpv6::Header::read(msg.first<icmpv6::Header::kSize>());
    EXPECT_EQ(h.type, std::stoul(w[2]));
    EXPECT_EQ(h.code, std::stoul(w[3]));
    EXPECT_EQ(h.rest, std::stoul(w[4], nullptr, 16));
    EXPECT_EQ(icmpv6::is_error(h.type), h.type < 128);
    // Zeroing the field and summing again gives scapy's checksum back.
    msg[2] = msg[3] = std::byte{0};
    const std::uint16_t c = csum::finish(csum::partial(msg.data(), msg.size(), pseudo));
    EXPECT_EQ(load_be16(reinterpret_cast<const std::byte*>(&c)), h.checksum);
  }
}

TEST(NeighborDiscovery, MessagesAndOptionsReadAsScapyWroteThem) {
  const auto v = vectors("nd");
  ASSERT_EQ(v.size(), 5u);
  for (const auto& w : v) {
    SCOPED_TRACE(w[1]);
    const Bytes p = from_hex(w[1]);
    const Header ip = Header::read(std::span(p).first<Header::kSize>());
    EXPECT_EQ(ip.hop_limit, icmpv6::kNdHopLimit);
    const std::span<const std::byte> msg = std::span(p).subspan(Header::kSize);
    const icmpv6::Header h = icmpv6::Header::read(msg.first<icmpv6::Header::kSize>());
    ASSERT_EQ(h.type, std::stoul(w[2]));
    std::size_t fixed = icmpv6::kRouterSolicitSize;
    if (h.type == icmpv6::kNeighborSolicit || h.type == icmpv6::kNeighborAdvert) fixed = icmpv6::kNeighborMessageSize;
    if (h.type == icmpv6::kRouterAdvert) fixed = icmpv6::kRouterAdvertSize;
    if (w[3] != "-") {
      EXPECT_EQ(Header::address_at(msg.data() + icmpv6::Header::kSize), addr_of(w[3]));
    }
    if (h.type == icmpv6::kNeighborAdvert) {
      EXPECT_EQ(h.rest & (icmpv6::kNaRouter | icmpv6::kNaSolicited | icmpv6::kNaOverride),
                icmpv6::kNaSolicited | icmpv6::kNaOverride);
    }
    const Result<icmpv6::NdOptions> o = icmpv6::read_nd_options(msg.subspan(fixed));
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(o->source_link.has_value(), w[4] != "-");
    if (o->source_link) {
      EXPECT_EQ(*o->source_link, *parse_mac(w[4]));
    }
    EXPECT_EQ(o->target_link.has_value(), w[5] != "-");
    if (o->target_link) {
      EXPECT_EQ(*o->target_link, *parse_mac(w[5]));
    }
    EXPECT_EQ(o->mtu.has_value(), w[6] != "-");
    if (o->mtu) {
      EXPECT_EQ(*o->mtu, std::stoul(w[6]));
    }
    std::vector<icmpv6::PrefixInfo> want;
    if (w[7] != "-") {
      std::istringstream list(w[7]);
      for (std::string item; std::getline(list, item, ',');) {
        icmpv6::PrefixInfo pi;
        unsigned len = 0, l = 0, a = 0;
        unsigned long valid = 0, preferred = 0;
        char prefix[33] = {};
        ASSERT_EQ(std::sscanf(item.c_str(), "%u:%u:%u:%lu:%lu:%32s", &len, &l, &a, &valid, &preferred, prefix), 6);
        pi.length = static_cast<std::uint8_t>(len);
        pi.on_link = l == 1;
        pi.autonomous = a == 1;
        pi.valid_lifetime = static_cast<std::uint32_t>(valid);
        pi.preferred_lifetime = static_cast<std::uint32_t>(preferred);
        pi.prefix = addr_of(prefix);
        want.push_back(pi);
      }
    }
    EXPECT_EQ(o->prefixes, want);
  }
  // The link-layer option we write is the one scapy wrote.
  Bytes opt(icmpv6::kLinkAddrOptionSize);
  icmpv6::write_link_addr_option(std::span(opt).first<icmpv6::kLinkAddrOptionSize>(), icmpv6::kOptSourceLinkAddr,
                                 *parse_mac("02:00:00:00:00:14"));
  const Bytes ns = from_hex(v[0][1]);
  EXPECT_TRUE(std::equal(opt.begin(), opt.end(), ns.end() - 8));
}

TEST(NeighborDiscovery, BadOptionsRefuseTheMessage) {
  const auto v = vectors("nd_bad");
  ASSERT_EQ(v.size(), 3u);
  for (const auto& w : v) EXPECT_EQ(icmpv6::read_nd_options(from_hex(w[1])).error(), Errc::invalid_argument) << w[1];
  // Every truncation of a good message's options is read or refused within
  // its bytes.
  const Bytes ra = from_hex(vectors("nd").back()[1]);
  const std::size_t opts = Header::kSize + icmpv6::kRouterAdvertSize;
  for (std::size_t n = opts; n <= ra.size(); ++n) {
    const Bytes cut(ra.begin() + static_cast<std::ptrdiff_t>(opts), ra.begin() + static_cast<std::ptrdiff_t>(n));
    const Result<icmpv6::NdOptions> o = icmpv6::read_nd_options(cut);
    EXPECT_EQ(o.ok(), n == ra.size() || n == opts || n == opts + 8 || n == opts + 16 || n == opts + 48) << n;
  }
}

}  // namespace
}  // namespace xk::ipv6

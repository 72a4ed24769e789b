// Receive coalescing: see gro.hpp for what merges and what never does.
#include "gro.hpp"

#include <rte_mbuf.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"
#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/ipv4_wire.hpp"
#include "xk/protocols/ipv6_wire.hpp"
#include "xk/protocols/tcp_wire.hpp"

namespace xk::drivers::gro {
namespace {

constexpr std::size_t kEth = eth::Header::kSize;
constexpr std::size_t kIp4 = ipv4::Header::kMinSize;  // coalesced IPv4 segments carry no options
constexpr std::size_t kIp6 = ipv6::Header::kSize;     // coalesced IPv6 segments no extension headers
using tcp::kAck;
using tcp::kPsh;
// Flows whose groups stay open at once; a burst with more flows closes the
// oldest first (its frame is ready where it stands).
constexpr std::size_t kOpenGroups = 8;

// A flow of either family: its addresses as they are on the wire (IPv4's 8
// bytes in addr[0], the rest zero; IPv6's 32), a flag for the family, and
// the ports. Compared whole on every segment: kept to plain words.
struct Key {
  std::uint64_t addr[4] = {};
  std::uint32_t ports = 0;
  std::uint32_t v6 = 0;
  bool operator==(const Key&) const = default;
};

// One received segment, as far as coalescing looks at it.
struct Seg {
  rte_mbuf* m = nullptr;
  std::byte* ip = nullptr;
  std::byte* tcp = nullptr;
  Key key;
  std::uint32_t seq = 0, ack = 0;
  std::uint32_t data_sum = 0;  // partial sum of the payload, from its first byte
  std::uint32_t tsval = 0, tsecr = 0;
  std::uint32_t len = 0;       // payload bytes
  std::uint16_t win = 0;
  std::uint16_t thl = 0;       // TCP header bytes
  std::uint16_t iphl = 0;      // IP header bytes: kIp4 or kIp6
  std::uint32_t flow = 0;      // IPv6's flow label
  std::uint32_t addr_sum = 0;  // the pseudo-header's addresses: their 16-bit words summed (host order)
  // tos: IPv4's TOS or IPv6's traffic class; ttl: TTL or hop limit;
  // frag: IPv4's DF bit's byte (0 for IPv6).
  std::uint8_t flags = 0, tos = 0, ttl = 0, frag = 0;
  bool ts = false;             // options are exactly NOP NOP TS
  bool checked = false;        // its TCP checksum is known good
};

enum class Parse : std::uint8_t { other, flow_only, segment };

std::byte* data(rte_mbuf* m) noexcept { return rte_pktmbuf_mtod(m, std::byte*); }

// The partial sum of `len` bytes from `off` of the chain at `m`, as if they
// began at an even offset.
std::uint32_t chain_sum(const rte_mbuf* m, std::size_t off, std::size_t len) noexcept {
  std::uint32_t sum = 0;
  std::size_t at = 0;
  for (; m != nullptr && len > 0; m = m->next) {
    if (off >= m->data_len) {
      off -= m->data_len;
      continue;
    }
    const std::size_t take = std::min<std::size_t>(len, m->data_len - off);
    sum = csum::combine(sum, csum::partial(rte_pktmbuf_mtod_offset(m, const std::byte*, off), take), at);
    at += take;
    len -= take;
    off = 0;
  }
  return sum;
}

// The TCP pseudo-header and header (checksum field as it is) of `s`, summed.
// (RFC 9293 3.1, RFC 8200 8.1: the addresses, the protocol and the length;
// the last two summed in host order and turned to memory order.)
std::uint32_t header_sum(const Seg& s, std::size_t tcp_len) noexcept {
  std::uint32_t pseudo = s.addr_sum + tcp::kIpProtocol + static_cast<std::uint32_t>(tcp_len >> 16) +
                         static_cast<std::uint32_t>(tcp_len & 0xffff);
  if constexpr (std::endian::native == std::endian::little) pseudo = std::rotl(pseudo, 8);
  return csum::partial(s.tcp, s.thl, pseudo);
}

// The 16-bit big-endian words of `n` 32-bit words at `p`, summed.
std::uint32_t word_sum(const std::byte* p, std::size_t n) noexcept {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t w = load_be32(p + 4 * i);
    sum += (w >> 16) + (w & 0xffff);
  }
  return sum;
}

// The timestamps option alone, as senders lay it out: NOP NOP TS 10.
constexpr std::uint32_t kTimestampsWord = 0x01u << 24 | 0x01u << 16 | std::uint32_t{tcp::kOptTimestamps} << 8 |
                                          tcp::kOptTimestampsLen;

// IPv4 without options carrying TCP: its header checked (by the port or
// here); `tot` the datagram's length.
Parse parse_v4(rte_mbuf* m, std::byte* ip, Seg& s, std::size_t& tot) noexcept {
  const ipv4::Header iph = ipv4::Header::read(std::span<const std::byte, kIp4>(ip, kIp4));
  if (iph.version != 4 || iph.ihl != kIp4 / 4 || iph.protocol != tcp::kIpProtocol) return Parse::other;
  s.iphl = kIp4;
  std::memcpy(&s.key.addr[0], ip + 12, 8);
  s.addr_sum = word_sum(ip + 12, 2);
  s.tos = iph.tos;
  s.ttl = iph.ttl;
  s.frag = static_cast<std::uint8_t>(iph.flags_offset >> 8);
  tot = iph.total_length;
  if (iph.is_fragment()) return Parse::flow_only;
  const std::uint64_t ipck = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
  if (ipck == RTE_MBUF_F_RX_IP_CKSUM_BAD) return Parse::flow_only;
  if (ipck != RTE_MBUF_F_RX_IP_CKSUM_GOOD && csum::fold(csum::partial(ip, kIp4)) != 0xffff) return Parse::flow_only;
  return Parse::segment;
}

// IPv6 with TCP straight behind its header (a segment behind extension
// headers goes up alone, in its flow's order).
Parse parse_v6(rte_mbuf* m, std::byte* ip, Seg& s, std::size_t& tot) noexcept {
  if (m->data_len < kEth + kIp6 + tcp::Header::kMinSize) return Parse::other;
  const ipv6::Header h = ipv6::Header::read(std::span<const std::byte, kIp6>(ip, kIp6));
  if (h.version != 6 || h.next_header != tcp::kIpProtocol) return Parse::other;
  s.iphl = kIp6;
  std::memcpy(s.key.addr, ip + 8, 32);
  s.key.v6 = 1;
  s.addr_sum = word_sum(ip + 8, 8);
  s.tos = h.traffic_class;
  s.ttl = h.hop_limit;
  s.flow = h.flow_label;
  tot = kIp6 + h.payload_length;
  return Parse::segment;
}

Parse parse(rte_mbuf* m, Csum mode, Seg& s, Stats& stats) noexcept {
  if (m->data_len < kEth + kIp4 + tcp::Header::kMinSize) return Parse::other;
  std::byte* eth = data(m);
  const std::uint16_t type = eth::Header::read(std::span<const std::byte, kEth>(eth, kEth)).type;
  std::byte* ip = eth + kEth;
  std::size_t tot = 0;
  Parse ip_ok = Parse::other;
  if (type == eth::kTypeIpv4) {
    ip_ok = parse_v4(m, ip, s, tot);
  } else if (type == eth::kTypeIpv6) {
    ip_ok = parse_v6(m, ip, s, tot);
  }
  if (ip_ok == Parse::other) return Parse::other;
  s.m = m;
  s.ip = ip;
  s.tcp = ip + s.iphl;
  const std::size_t iphl = s.iphl;
  const tcp::Header th = tcp::Header::read(std::span<const std::byte, tcp::Header::kMinSize>(s.tcp, tcp::Header::kMinSize));
  s.key.ports = std::uint32_t{th.src_port} << 16 | th.dst_port;
  if (ip_ok != Parse::segment || tot < iphl + tcp::Header::kMinSize || kEth + tot > m->pkt_len) return Parse::flow_only;
  // The Ethernet padding after the datagram must be in the last mbuf, to
  // be trimmed off before anything is chained behind it.
  const std::size_t pad = m->pkt_len - kEth - tot;
  if (pad > rte_pktmbuf_lastseg(m)->data_len) return Parse::flow_only;
  s.thl = static_cast<std::uint16_t>(th.header_length());
  s.flags = th.flags;
  // Only ACK, or ACK and PSH; the reserved and AE bits clear.
  if ((s.flags & ~(kAck | kPsh)) != 0 || (s.flags & kAck) == 0 || th.reserved != 0) return Parse::flow_only;
  if (s.thl < tcp::Header::kMinSize || tot < iphl + s.thl || kEth + iphl + s.thl > m->data_len) return Parse::flow_only;
  s.len = tot - iphl - s.thl;
  if (s.len == 0) return Parse::flow_only;
  const std::uint64_t l4 = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
  if (l4 == RTE_MBUF_F_RX_L4_CKSUM_BAD) return Parse::flow_only;
  const std::uint32_t head = header_sum(s, s.thl + s.len);
  if (l4 == RTE_MBUF_F_RX_L4_CKSUM_GOOD || mode == Csum::carry) {
    // The payload's sum follows from the checksum field: the whole sums to
    // 0xffff, so the payload is the complement of the rest.
    s.data_sum = static_cast<std::uint16_t>(~csum::fold(head));
    s.checked = l4 == RTE_MBUF_F_RX_L4_CKSUM_GOOD;
  } else {
    s.data_sum = chain_sum(m, kEth + iphl + s.thl, s.len);
    if (csum::fold(csum::add(head, s.data_sum)) != 0xffff) {
      ++stats.bad_csum;
      return Parse::flow_only;  // up alone: TCP counts it and drops it
    }
    s.checked = true;
    m->ol_flags = (m->ol_flags & ~RTE_MBUF_F_RX_L4_CKSUM_MASK) | RTE_MBUF_F_RX_L4_CKSUM_GOOD;
  }
  if (iphl == kIp4) m->ol_flags = (m->ol_flags & ~RTE_MBUF_F_RX_IP_CKSUM_MASK) | RTE_MBUF_F_RX_IP_CKSUM_GOOD;
  s.seq = th.seq.raw();
  s.ack = th.ack.raw();
  s.win = th.window;
  const std::byte* opts = s.tcp + tcp::Header::kMinSize;
  s.ts = s.thl == tcp::Header::kMinSize + 12 && load_be32(opts) == kTimestampsWord;
  if (s.ts) {
    s.tsval = load_be32(opts + 4);
    s.tsecr = load_be32(opts + 8);
  }
  if (pad > 0) rte_pktmbuf_trim(m, static_cast<std::uint16_t>(pad));
  return Parse::segment;
}

struct Group {
  Seg first;
  rte_mbuf* tail = nullptr;    // the chain's last mbuf
  std::uint32_t next_seq = 0;
  std::uint32_t total = 0;     // payload bytes
  std::uint32_t data_sum = 0;
  std::uint32_t last_tsval = 0;
  std::uint32_t merged = 0;
  bool psh = false;
  bool closed = false;         // takes no more segments
  bool checked = true;         // every part's checksum known good
};

bool can_join(const Group& g, const Seg& s, std::size_t max_ip) noexcept {
  const Seg& f = g.first;
  // The same Ethernet addresses too (as Linux's GRO compares the MAC
  // header): a frame for another MAC must not ride in on a group's.
  if (std::memcmp(f.ip - kEth, s.ip - kEth, 2 * sizeof(MacAddr)) != 0) return false;
  // (The key holds the family: f and s have the same IP header length.)
  if (g.closed || s.seq != g.next_seq || s.ack != f.ack || s.win != f.win || s.thl != f.thl || s.tos != f.tos ||
      s.ttl != f.ttl || s.flow != f.flow || ((s.frag ^ f.frag) & (ipv4::Header::kFlagDf >> 8)) != 0 ||
      s.len > f.len || f.iphl + f.thl + g.total + s.len > max_ip ||
      f.thl + g.total + s.len > ipv6::Header::kMaxPayload) {
    return false;
  }
  constexpr std::size_t kFixed = tcp::Header::kMinSize;
  if (f.thl == kFixed) return true;
  if (f.ts && s.ts) return s.tsecr == f.tsecr && static_cast<std::int32_t>(s.tsval - g.last_tsval) >= 0;
  return std::memcmp(f.tcp + kFixed, s.tcp + kFixed, f.thl - kFixed) == 0;
}

void join(Group& g, Seg& s, Stats& stats) noexcept {
  rte_pktmbuf_adj(s.m, static_cast<std::uint16_t>(kEth + s.iphl + s.thl));
  rte_mbuf* head = g.first.m;
  g.tail->next = s.m;
  head->nb_segs = static_cast<std::uint16_t>(head->nb_segs + s.m->nb_segs);
  head->pkt_len += s.m->pkt_len;
  g.tail = rte_pktmbuf_lastseg(s.m);
  g.data_sum = csum::combine(g.data_sum, s.data_sum, g.total);
  g.total += s.len;
  g.next_seq += s.len;
  g.last_tsval = s.tsval;
  g.checked = g.checked && s.checked;
  ++g.merged;
  ++stats.merged;
  if ((s.flags & kPsh) != 0) g.psh = g.closed = true;  // PSH ends a group after joining it
  if (s.len < g.first.len) g.closed = true;             // a short segment is the last
}

// The group's frame gets the headers of what it now holds.
void finish(Group& g, Stats& stats) noexcept {
  if (g.merged == 0) return;
  ++stats.groups;
  Seg& f = g.first;
  if (f.iphl == kIp4) {
    const std::span<std::byte, kIp4> ip(f.ip, kIp4);
    ipv4::Header iph = ipv4::Header::read(ip);
    iph.total_length = static_cast<std::uint16_t>(kIp4 + f.thl + g.total);
    iph.checksum = 0;
    iph.write(ip);
    const std::uint16_t ipck = csum::finish(csum::partial(f.ip, kIp4));
    std::memcpy(f.ip + ipv4::Header::kChecksumOffset, &ipck, 2);
  } else {
    store_be16(f.ip + 4, static_cast<std::uint16_t>(f.thl + g.total));  // the payload length
  }
  const std::span<std::byte, tcp::Header::kMinSize> tcp_fixed(f.tcp, tcp::Header::kMinSize);
  tcp::Header th = tcp::Header::read(tcp_fixed);
  if (g.psh) th.flags |= kPsh;
  th.checksum = 0;
  th.write(tcp_fixed);
  const std::uint16_t ck = csum::finish(csum::add(header_sum(f, f.thl + g.total), g.data_sum));
  std::memcpy(f.tcp + tcp::Header::kChecksumOffset, &ck, 2);
  f.m->tso_segsz = f.len;
  f.m->ol_flags &= ~RTE_MBUF_F_RX_L4_CKSUM_MASK;
  f.m->ol_flags |= g.checked ? RTE_MBUF_F_RX_L4_CKSUM_GOOD : RTE_MBUF_F_RX_L4_CKSUM_UNKNOWN;
}

}  // namespace

std::size_t coalesce(rte_mbuf** frames, std::size_t n, Csum csum, Stats& stats, std::size_t max_frame) noexcept {
  const std::size_t max_ip = std::max(std::min(max_frame, kMaxFrame), kEth) - kEth;
  Group open[kOpenGroups];
  std::size_t nopen = 0;
  auto close = [&](std::size_t i) {
    finish(open[i], stats);
    for (std::size_t j = i + 1; j < nopen; ++j) open[j - 1] = open[j];
    --nopen;
  };
  auto find = [&](const Key& k) -> std::size_t {
    for (std::size_t i = 0; i < nopen; ++i) {
      if (open[i].first.key == k) return i;
    }
    return nopen;
  };
  std::size_t out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    rte_mbuf* m = frames[i];
    Seg s;
    const Parse p = parse(m, csum, s, stats);
    const std::size_t gi = p == Parse::other ? nopen : find(s.key);
    if (p == Parse::segment && gi < nopen && can_join(open[gi], s, max_ip)) {
      join(open[gi], s, stats);
      continue;
    }
    // Whatever of this flow comes next goes after what its group holds.
    if (gi < nopen) close(gi);
    frames[out++] = m;
    if (p != Parse::segment) continue;
    if (nopen == kOpenGroups) close(0);
    Group& g = open[nopen++];
    g = Group{};
    g.first = s;
    g.tail = rte_pktmbuf_lastseg(m);
    g.next_seq = s.seq + s.len;
    g.total = s.len;
    g.data_sum = s.data_sum;
    g.last_tsval = s.tsval;
    g.psh = (s.flags & kPsh) != 0;
    g.closed = g.psh;
    g.checked = s.checked;
  }
  while (nopen > 0) close(nopen - 1);
  return out;
}

}  // namespace xk::drivers::gro

// steer's IPv6 side (docs/filterd.md, "IPv6"): the nodes' Neighbor
// Discovery, answered here as their ARP is, the next hop of their packets,
// and the headers of a large IPv6 frame.

#include <cstring>

#include "steer_channel.hpp"
#include "xk/checksum.hpp"
#include "xk/filterd/steer.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/ipv6_wire.hpp"

namespace xk::filterd {
namespace {

constexpr std::size_t kEth = eth::Header::kSize;
constexpr std::size_t kIp6 = ipv6::Header::kSize;
constexpr std::size_t kSolicitation = icmpv6::kNeighborMessageSize;  // header and target

}  // namespace

// ICMPv6 right behind the fixed header with hop limit 255, of a Neighbor
// or Router Discovery or MLD type: what a node's nd sends (RFC 4861 and
// 3810 put no extension headers there but MLD's hop-by-hop Router Alert,
// which nodes' reports carry: those are let go too).
bool Steer::is_node_discovery(std::span<const std::byte> frame) const noexcept {
  if (frame.size() < kEth + kIp6 + icmpv6::Header::kSize) return false;
  const std::byte* ip = frame.data() + kEth;
  const auto next = std::to_integer<std::uint8_t>(ip[ipv6::Header::kNextHeaderOffset]);
  if (next == ipv6::kHopByHop) return ipv6::is_multicast(ipv6::Header::address_at(ip + 24));  // MLD reports
  if (next != ipv6::kIcmpv6) return false;
  const auto type = std::to_integer<std::uint8_t>(ip[kIp6]);
  return (type >= 130 && type <= 137) || type == icmpv6::kMldv2Report;
}

// A node asks for a neighbour's address: filterd answers with its channel
// MAC for every address but the shared one (RFC 4861 7.2.8, a proxy: Solicited set,
// Override clear), so the node sends everything through us. Its duplicate
// address checks (from ::) go unanswered -- the nodes share the address,
// and filterd's own nd checks it on the external link -- as do its reports,
// advertisements and router solicitations.
Status Steer::node_discovery(Channel& ch, std::span<const std::byte> frame) {
  const std::byte* ip = frame.data() + kEth;
  const ipv6::Header h = ipv6::Header::read(std::span<const std::byte, kIp6>(ip, kIp6));
  const bool solicitation = h.next_header == ipv6::kIcmpv6 &&
                            std::to_integer<std::uint8_t>(ip[kIp6]) == icmpv6::kNeighborSolicit &&
                            h.hop_limit == icmpv6::kNdHopLimit && h.payload_length >= kSolicitation &&
                            frame.size() >= kEth + kIp6 + kSolicitation;
  if (!solicitation || h.src.is_unspecified()) {
    ++node_nd_ignored_;
    return {};
  }
  const IpAddr target = ipv6::Header::address_at(ip + kIp6 + icmpv6::Header::kSize);
  if (ipv6::is_multicast(target) || target == config_.shared6->addr) {
    ++node_nd_ignored_;
    return {};
  }
  constexpr std::size_t kAdvert = kSolicitation + icmpv6::kLinkAddrOptionSize;
  Msg out = Msg::alloc(0, Msg::kDefaultHeadroom);
  Result<std::span<std::byte>> na = out.push(kAdvert);
  if (!na) return na.error();
  std::memset(na->data(), 0, kAdvert);
  icmpv6::Header{icmpv6::kNeighborAdvert, 0, 0, icmpv6::kNaSolicited}.write(na->first<icmpv6::Header::kSize>());
  std::memcpy(na->data() + icmpv6::Header::kSize, target.bytes().data(), 16);
  icmpv6::write_link_addr_option(na->subspan(kSolicitation).first<icmpv6::kLinkAddrOptionSize>(),
                                 icmpv6::kOptTargetLinkAddr, ch.our_mac());
  icmpv6::fill_checksum(*na, target, h.src);
  Result<std::span<std::byte>> hdr = out.push(kIp6);
  if (!hdr) return hdr.error();
  ipv6::Header reply;
  reply.payload_length = static_cast<std::uint16_t>(kAdvert);
  reply.next_header = ipv6::kIcmpv6;
  reply.hop_limit = icmpv6::kNdHopLimit;
  reply.src = target;
  reply.dst = h.src;
  reply.write(hdr->first<kIp6>());
  Result<std::span<std::byte>> e = out.push(kEth);
  if (!e) return e.error();
  eth::Header{ch.node_mac(), ch.our_mac(), eth::kTypeIpv6}.write(e->first<kEth>());
  ++proxy_nd_;
  return ch.send(std::move(out));
}

// On the shared prefix or link-local: the destination itself; beyond: the
// default router.
std::optional<IpAddr> Steer::next_hop6(const IpAddr& dst) const noexcept {
  if (icmpv6::is_link_local(dst) || ipv6::is_multicast(dst) || config_.shared6->contains(dst)) return dst;
  return config_.gateway6;
}

// A large frame's headers over IPv6: TCP right behind the fixed header (as
// xk's nodes send it), the payload length cut to the TCP header. IPv6 has
// no header checksum to fix.
std::optional<Steer::TcpHeaders> Steer::tcp_headers_v6(const Msg& frame) noexcept {
  const std::span<const std::byte> first = frame.fragments().front().bytes();
  if (first.size() < kEth + kIp6 + 20) return std::nullopt;
  const std::byte* ip = first.data() + kEth;
  const ipv6::Header h = ipv6::Header::read(std::span<const std::byte, kIp6>(ip, kIp6));
  if (h.version != 6 || h.next_header != ipv6::kTcp || kEth + kIp6 + h.payload_length != frame.size()) {
    return std::nullopt;
  }
  const std::size_t thl = (std::to_integer<std::size_t>(ip[kIp6 + 12]) >> 4) * 4;
  const std::size_t headers = kEth + kIp6 + thl;
  if (thl < 20 || first.size() < headers) return std::nullopt;
  TcpHeaders t;
  std::memcpy(t.bytes.data(), first.data(), headers);
  t.len = headers;
  t.ip_len = kIp6;
  t.v6 = true;
  store_be16(t.bytes.data() + kEth + 4, static_cast<std::uint16_t>(thl));
  std::uint16_t ck = 0;
  std::memcpy(&ck, ip + kIp6 + 16, 2);
  t.csum = ck != 0;  // 0: sent without a checksum (a computed zero goes as 0xffff)
  return t;
}

}  // namespace xk::filterd

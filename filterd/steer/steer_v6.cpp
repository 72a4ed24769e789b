// steer's IPv6 side (docs/filterd.md, "IPv6"): the nodes' Neighbor
// Discovery, answered here as their ARP is, and the next hop of their
// packets.

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
  return icmpv6::is_discovery(std::to_integer<std::uint8_t>(ip[kIp6]));
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

}  // namespace xk::filterd

// The filter engine's IPv6 half (docs/filterd.md, "IPv6"): the same order
// as IPv4's -- exact flows, listeners, rules, the default answer -- on
// frames whose flows are named by a 16-byte remote address. Neighbor and
// Router Discovery, MLD and echo requests are filterd's own (its nd and
// icmpv6 answer for the shared address); ICMPv6 errors, Packet Too Big
// among them, go to the owner of the flow they quote.
#include <cstring>

#include "filter_decisions.hpp"
#include "filter_fragments.hpp"
#include "filter_wire.hpp"
#include "xk/filterd/filter.hpp"

namespace xk::filterd {
namespace {

// RFC 4291 2.5.3 / 2.5.5.2, RFC 8200 3: no host sends from a multicast,
// loopback or IPv4-mapped address.
bool is_impossible_source(const IpAddr& a) noexcept {
  if (ipv6::is_multicast(a) || a.is_v4()) return true;
  const IpAddr::Bytes& b = a.bytes();
  for (std::size_t i = 0; i < 15; ++i) {
    if (b[i] != 0) return false;
  }
  return b[15] == 1;  // ::1
}

// Where a quoted packet's transport header starts: behind its fixed header
// and at most a fragment header of offset 0 (what xk's nodes send). 0: not
// a packet whose ports can be read.
std::size_t quoted_transport(Frame q, std::uint8_t& next_header) noexcept {
  std::size_t at = ipv6::Header::kSize;
  next_header = std::to_integer<std::uint8_t>(q[ipv6::Header::kNextHeaderOffset]);
  if (next_header == ipv6::kFragment) {
    if (q.size() < at + ipv6::FragmentHeader::kSize) return 0;
    const auto fh = ipv6::FragmentHeader::read(q.subspan(at).first<ipv6::FragmentHeader::kSize>());
    if (fh.offset() != 0) return 0;
    next_header = fh.next_header;
    at += ipv6::FragmentHeader::kSize;
  }
  return q.size() >= at + 8 ? at : 0;
}

}  // namespace

void FilterEngine::parse_v6(Frame f, Parsed& p, bool hairpin) const noexcept {
  auto decided = [&p](Decision d) { p.decision = d; };
  if (!serves_ipv6()) return decided(drop(Reason::other_type));
  p.v6 = true;
  // RFC 8200 3; a frame may be longer than its packet (Ethernet padding).
  const Frame ip = f.subspan(kEthHeader);
  if (ip.size() < ipv6::Header::kSize) return decided(drop(Reason::malformed));
  const ipv6::Header h = ipv6::Header::read(ip.first<ipv6::Header::kSize>());
  const std::size_t total = ipv6::Header::kSize + h.payload_length;
  if (h.version != 6 || total > ip.size()) return decided(drop(Reason::malformed));

  // Ours: the shared address, a multicast group (for the rules, and
  // Neighbor Discovery), or filterd's own link-local address.
  bool to_link_local = false;
  if (h.dst != config_.shared_ip6) {
    if (ipv6::is_multicast(h.dst)) {
      p.broadcast = true;
    } else if (!config_.link_local6.is_unspecified() && h.dst == config_.link_local6) {
      to_link_local = true;
    } else {
      return decided(drop(Reason::not_ours));
    }
  }
  if (is_impossible_source(h.src) ||
      (!hairpin && (h.src == config_.shared_ip6 || h.src == config_.link_local6))) {
    return decided(drop(Reason::bad_source));
  }

  // The extension headers, within the limits ipv6 itself keeps (RFC 8504
  // 5.3): a chain it would refuse is dropped here.
  const ipv6::ChainResult walked = ipv6::walk_chain(ip.first(total));
  if (!walked.chain) return decided(drop(Reason::malformed));
  const ipv6::Chain& c = *walked.chain;
  p.proto = c.upper;
  p.icmp = c.upper == ipv6::kIcmpv6;
  p.l4_offset = static_cast<std::uint32_t>(kEthHeader + c.upper_offset);
  p.l4_length = static_cast<std::uint32_t>(total - c.upper_offset);
  if (c.fragment && !c.fragment->atomic()) {  // RFC 6946: an atomic fragment is a whole packet
    if (p.l4_length == 0) return decided(drop(Reason::malformed));
    p.fragment = true;
    p.frag = FragKey::of(h.src, h.dst, c.fragment->id, c.upper);
    if (c.fragment->offset() != 0) {
      p.later_fragment = true;
      p.kind = Parsed::Kind::other;
      return;
    }
  }
  // The unspecified source is a host checking its address (RFC 4862 5.4)
  // or reporting its groups before it has one (RFC 3810 5.2.13).
  if (h.src.is_unspecified() && !(p.icmp && p.l4_length > 0 && icmpv6::is_discovery(std::to_integer<std::uint8_t>(f[p.l4_offset])))) {
    return decided(drop(Reason::bad_source));
  }

  const std::byte* l4 = f.data() + p.l4_offset;
  const std::size_t payload = p.l4_length;
  switch (c.upper) {
    case ipv6::kTcp: {
      // RFC 7112: a first fragment holds the whole header chain, the TCP
      // header included.
      if (payload < wire::kTcpMinHeader) return decided(drop(Reason::malformed));
      const std::size_t thl = wire::tcp_header_length(l4);
      if (thl < wire::kTcpMinHeader || thl > payload) return decided(drop(Reason::malformed));
      p.tcp_flags = wire::tcp_flags(l4);
      p.key6 = Packed6Key{h.src.bytes(), wire::tcp_src_port(l4), wire::tcp_dst_port(l4), ipv6::kTcp};
      p.has_key = true;
      break;
    }
    case ipv6::kUdp: {
      if (payload < udp::Header::kSize) return decided(drop(Reason::malformed));
      const udp::Header uh = udp::Header::read(f.subspan(p.l4_offset).first<udp::Header::kSize>());
      if (uh.length < udp::Header::kSize || (!p.fragment && uh.length > payload)) {
        return decided(drop(Reason::malformed));
      }
      p.key6 = Packed6Key{h.src.bytes(), uh.src_port, uh.dst_port, ipv6::kUdp};
      p.has_key = true;
      break;
    }
    case ipv6::kIcmpv6: {
      if (payload < icmpv6::Header::kSize) return decided(drop(Reason::malformed));
      p.icmp_type = std::to_integer<std::uint8_t>(l4[0]);
      if (icmpv6::is_discovery(p.icmp_type)) return decided(local(Reason::local_nd));
      if (p.icmp_type == icmpv6::kEchoRequest) return decided(local(Reason::local_icmp_echo));
      // An echo reply answers a node's echo request: its identifier is the
      // local "port" of an ICMP flow, as over IPv4 (Proto::icmp).
      if (p.icmp_type == icmpv6::kEchoReply) {
        p.key6 = Packed6Key{h.src.bytes(), 0, load_be16(l4 + 4), static_cast<std::uint32_t>(Proto::icmp)};
        p.has_key = true;
      }
      break;
    }
    default:
      break;
  }
  // filterd's link-local address carries only its own Neighbor Discovery
  // and echo, decided above.
  if (to_link_local) return decided(drop(Reason::not_ours));
  p.kind = p.has_key && !p.broadcast ? Parsed::Kind::flow : Parsed::Kind::other;
}

// RFC 4443 2.4 (c): an error quotes as much of the offending packet as
// fits; that packet went out from the shared address to the remote end.
Decision FilterEngine::icmp6_error_owner(Frame f, const Parsed& p) const noexcept {
  if (p.l4_length < icmpv6::Header::kSize + ipv6::Header::kSize) return drop(Reason::malformed);
  const Frame q = f.subspan(p.l4_offset + icmpv6::Header::kSize, p.l4_length - icmpv6::Header::kSize);
  const ipv6::Header qh = ipv6::Header::read(q.first<ipv6::Header::kSize>());
  if (qh.version != 6) return drop(Reason::malformed);
  if (qh.src != config_.shared_ip6) return drop(Reason::icmp_error_unknown);
  std::uint8_t nh = 0;
  const std::size_t at = quoted_transport(q, nh);
  if (at == 0) return drop(Reason::icmp_error_unknown);
  const std::byte* l4 = q.data() + at;
  Packed6Key key;
  switch (nh) {
    case ipv6::kTcp:
    case ipv6::kUdp:
      key = Packed6Key{qh.dst.bytes(), load_be16(l4 + 2), load_be16(l4), nh};
      break;
    case ipv6::kIcmpv6:
      if (std::to_integer<std::uint8_t>(l4[0]) != icmpv6::kEchoRequest) return drop(Reason::icmp_error_unknown);
      key = Packed6Key{qh.dst.bytes(), 0, load_be16(l4 + 4), static_cast<std::uint32_t>(Proto::icmp)};
      break;
    default:
      return drop(Reason::icmp_error_unknown);
  }
  if (auto d = owner_of(key)) return deliver(Reason::icmp_error, d->target);
  return drop(Reason::icmp_error_unknown);
}

EgressVerdict FilterEngine::egress_v6(Frame f, NodeId node, std::uint16_t queue) {
  const Frame ip = f.subspan(kEthHeader);
  if (ip.size() < ipv6::Header::kSize) return deny(EgressReason::malformed);
  const ipv6::Header h = ipv6::Header::read(ip.first<ipv6::Header::kSize>());
  const std::size_t total = ipv6::Header::kSize + h.payload_length;
  if (h.version != 6 || total > ip.size()) return deny(EgressReason::malformed);
  // A node's link-local traffic (its Neighbor Discovery) is steer's to
  // answer, never to forward.
  if (h.src != config_.shared_ip6) return deny(EgressReason::bad_source);
  const ipv6::ChainResult walked = ipv6::walk_chain(ip.first(total));
  if (!walked.chain) return deny(EgressReason::malformed);
  const ipv6::Chain& c = *walked.chain;
  const std::size_t payload = total - c.upper_offset;
  const bool fragment = c.fragment && !c.fragment->atomic();
  const FragKey fkey = fragment ? FragKey::of(h.src, h.dst, c.fragment->id, c.upper) : FragKey{};
  Time now{};
  if (fragment) {
    if (payload == 0) return deny(EgressReason::malformed);
    now = clock_.now();
    expire_at(now);
    if (c.fragment->offset() != 0) {
      const NodeId* sender = frags_->egress.find(fkey);
      return sender != nullptr && *sender == node ? allow(EgressReason::fragment) : deny(EgressReason::not_owner);
    }
  }

  const std::byte* l4 = ip.data() + c.upper_offset;
  EgressVerdict v = deny(EgressReason::protocol);
  switch (c.upper) {
    case ipv6::kTcp: {
      if (payload < wire::kTcpMinHeader) return deny(EgressReason::malformed);
      const std::size_t thl = wire::tcp_header_length(l4);
      if (thl < wire::kTcpMinHeader || thl > payload) return deny(EgressReason::malformed);
      v = owns(Packed6Key{h.dst.bytes(), wire::tcp_dst_port(l4), wire::tcp_src_port(l4), ipv6::kTcp}, node, queue);
      break;
    }
    case ipv6::kUdp: {
      if (payload < udp::Header::kSize) return deny(EgressReason::malformed);
      v = owns(Packed6Key{h.dst.bytes(), load_be16(l4 + 2), load_be16(l4), ipv6::kUdp}, node, queue);
      break;
    }
    case ipv6::kIcmpv6: {
      if (payload < icmpv6::Header::kSize) return deny(EgressReason::malformed);
      const auto type = std::to_integer<std::uint8_t>(l4[0]);
      if (type == icmpv6::kEchoRequest) {
        const Target* t =
            flows6_.find(Packed6Key{h.dst.bytes(), 0, load_be16(l4 + 4), static_cast<std::uint32_t>(Proto::icmp)});
        v = t != nullptr && t->node == node ? allow(EgressReason::flow) : deny(EgressReason::not_owner);
        v.other_queue = v.allowed && queue != kAnyQueue && t->queue != queue;
      } else if (icmpv6::is_error(type)) {
        // An error about a packet the node received: quoted source remote,
        // quoted destination the shared address.
        const Frame q = ip.subspan(c.upper_offset + icmpv6::Header::kSize, payload - icmpv6::Header::kSize);
        if (q.size() < ipv6::Header::kSize) return deny(EgressReason::malformed);
        const ipv6::Header qh = ipv6::Header::read(q.first<ipv6::Header::kSize>());
        std::uint8_t nh = 0;
        const std::size_t at = quoted_transport(q, nh);
        if (qh.version != 6 || at == 0) return deny(EgressReason::malformed);
        if (qh.dst != config_.shared_ip6 || (nh != ipv6::kTcp && nh != ipv6::kUdp)) {
          return deny(EgressReason::not_owner);
        }
        const std::byte* ql4 = q.data() + at;
        v = owns(Packed6Key{qh.src.bytes(), load_be16(ql4), load_be16(ql4 + 2), nh}, node, queue);
        if (v.allowed) v.reason = EgressReason::icmp_error;
      } else {
        // Echo replies and Neighbor Discovery are filterd's.
        v = deny(EgressReason::protocol);
      }
      break;
    }
    default:
      break;
  }
  if (v.allowed && fragment) remember_egress_fragment(fkey, node, now);
  return v;
}

}  // namespace xk::filterd

#include "xk/protocols/ipv4.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "xk/event_loop.hpp"
#include "xk/ip_layers.hpp"

namespace xk::ipv4 {

namespace {

// ICMP destination unreachable codes ipv4 asks for (RFC 792).
constexpr std::uint8_t kIcmpProtoUnreachable = 2;
constexpr std::uint8_t kIcmpPortUnreachable = 3;

constexpr std::uint32_t kEtherTypeIpv4 = 0x0800;
// RFC 791: every host must accept 68-byte packets unfragmented; a smaller
// link MTU is a configuration error we clamp rather than divide by.
constexpr std::size_t kMinMtu = 68;
// RFC 1122 3.3.3 suggests 576 when the link says nothing.
constexpr std::size_t kDefaultMtu = 576;

}  // namespace

// ---- session ------------------------------------------------------------

Ipv4Session::Ipv4Session(Ipv4Protocol& proto, Protocol* upper, Ipv4Addr peer, std::uint8_t protocol)
    : Session(proto, upper), proto_(proto), peer_(peer), protocol_(protocol) {}

Status Ipv4Session::push(Msg msg) {
  return proto_.send(peer_, protocol_, std::move(msg), Ipv4Protocol::SendOptions{df_});
}

Status Ipv4Session::pop(Session&, Msg msg) {
  if (upper() == nullptr) return Errc::closed;
  return upper()->demux(*this, std::move(msg));
}

Status Ipv4Session::close() {
  Ipv4Protocol::Key key{peer_.value, protocol_};
  // Only forget the map entry if it is us: a newer session may hold the key.
  if (SessionRef* s = proto_.active_.find(key); s != nullptr && s->get() == this) proto_.active_.erase(key);
  return {};
}

Result<ControlReply> Ipv4Session::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetPeerAddr>(query)) return ControlReply{Participant{peer_}};
  if (const auto* df = std::get_if<ctl::SetDontFragment>(&query)) {
    df_ = df->df;
    return ControlReply{std::monostate{}};
  }
  return proto_.control_any(query);
}

// ---- protocol -----------------------------------------------------------

Ipv4Protocol::Ipv4Protocol(std::string name, Protocol& link, NextHopResolver* resolver, TimerWheel& timers,
                           Config config)
    : Protocol(std::move(name), "ipv4", link_and_resolver(link, resolver)),
      link_(link),
      resolver_(resolver),
      timers_(timers),
      config_(config),
      // Start identifications somewhere that depends on the address, so two
      // hosts booted together do not walk the same sequence (RFC 6864 only
      // asks for uniqueness per (src, dst, proto) within the MSL).
      next_id_(static_cast<std::uint16_t>(config.addr.addr.value ^ (config.addr.addr.value >> 16))),
      loopback_timer_(timers, [p = this] { p->drain_loopback(); }),
      rx_packets_(counters().add("rx_packets")),
      rx_delivered_(counters().add("rx_delivered", "packets handed to an upper protocol")),
      drop_truncated_(counters().add("drop_truncated", "shorter than 20 bytes or than total length")),
      drop_bad_version_(counters().add("drop_bad_version", "version field not 4")),
      drop_bad_ihl_(counters().add("drop_bad_ihl", "IHL below 5")),
      drop_bad_len_(counters().add("drop_bad_len", "total length below the header length")),
      drop_bad_csum_(counters().add("drop_bad_csum", "header checksum")),
      drop_bad_src_(counters().add("drop_bad_src", "broadcast or multicast source (RFC 1122 3.2.1.3)")),
      drop_not_for_us_(counters().add("drop_not_for_us", "destination neither ours nor broadcast")),
      rx_options_(counters().add("rx_options", "packets with IP options (skipped)")),
      rx_fragments_(counters().add("rx_fragments")),
      reasm_ok_(counters().add("reasm_ok", "datagrams reassembled")),
      drop_frag_bad_len_(counters().add("drop_frag_bad_len", "MF fragment not a multiple of 8, or conflicting end")),
      drop_frag_too_big_(counters().add("drop_frag_too_big", "fragment ends past 65535 or reasm_max_datagram")),
      drop_reasm_overlap_(counters().add("drop_reasm_overlap", "datagrams dropped for overlapping fragments")),
      drop_reasm_timeout_(counters().add("drop_reasm_timeout", "datagrams not completed in reasm_timeout")),
      drop_reasm_mem_(counters().add("drop_reasm_mem", "datagrams dropped for the memory caps")),
      tx_packets_(counters().add("tx_packets", "packets handed to the link or resolver")),
      tx_fragments_(counters().add("tx_fragments")),
      drop_tx_too_large_(counters().add("drop_tx_too_large", "DF set and too big, or over 65535")),
      drop_no_route_(counters().add("drop_no_route", "off-link destination without gw")),
      drop_tx_link_(counters().add("drop_tx_link", "link or resolver refused the packet")),
      tx_loopback_(counters().add("tx_loopback", "packets to our own address")),
      tx_hairpin_(counters().add("tx_hairpin", "packets to our shared address another stack owns, out through the link")),
      drop_loopback_full_(counters().add("drop_loopback_full")),
      icmp_port_unreach_(counters().add("icmp_port_unreach", "port unreachables asked of icmp")),
      icmp_proto_unreach_(counters().add("icmp_proto_unreach", "protocol unreachables asked of icmp")),
      errors_delivered_(counters().add("errors_delivered", "ICMP errors handed to a transport")),
      drop_error_no_owner_(counters().add("drop_error_no_owner", "ICMP errors nobody owns")),
      rx_csum_by_port_(counters().add("rx_csum_by_port", "header checksums the port verified for us")),
      tx_csum_by_port_(counters().add("tx_csum_by_port", "header checksums left to the port")),
      tx_l4_csum_resolved_(counters().add("tx_l4_csum_resolved",
                                          "transport checksums finished here: fragmented or looped back")),
      reasm_(timers,
             ip::ReasmLimits{std::min(config_.reasm_max_datagram, Header::kMaxTotal) - Header::kMinSize,
                             config_.reasm_mem, config_.reasm_timeout},
             ip::ReasmCounters{reasm_ok_, drop_frag_bad_len_, drop_frag_too_big_, drop_reasm_overlap_,
                               drop_reasm_timeout_, drop_reasm_mem_}) {
  if (config_.gw && !config_.addr.contains(*config_.gw)) {
    throw std::invalid_argument("gw=" + to_string(*config_.gw) + " is not on the subnet of addr=" +
                                to_string(config_.addr));
  }
  if (config_.ttl == 0) throw std::invalid_argument("ttl must be 1..255");
  Participants enable;
  enable.local.push(ProtoNum{kEtherTypeIpv4});
  if (Status st = link_.open_enable(*this, enable); !st) {
    throw std::runtime_error("cannot receive from '" + link_.name() + "': open_enable failed: " + to_string(st.error()));
  }
  link_enabled_ = true;
  // The port's checksum offloads (docs/checksum.md, "Offload"); a link that
  // does not answer has none.
  if (Result<LinkOffloads> o = link_.control(ctl::GetOffloads{})) offloads_ = *o;
  if (resolver_ == nullptr) {
    // No resolver: one session on the link carries every packet.
    Participants none;
    Result<SessionRef> s = link_.open(*this, none);
    if (!s) {
      (void)link_.open_disable(*this, enable);
      throw std::runtime_error("cannot open a session on '" + link_.name() + "': " + to_string(s.error()) +
                               " (a link that needs addresses wants a resolver: below=<link>,arp0)");
    }
    link_session_ = *s;
  } else {
    resolver_->add_local_address(config_.addr.addr);
  }
}

Ipv4Protocol::~Ipv4Protocol() {
  loopback_timer_.cancel();
  loopback_.clear();
  reasm_.clear();
  active_.clear();
  if (link_enabled_) {
    Participants enable;
    enable.local.push(ProtoNum{kEtherTypeIpv4});
    (void)link_.open_disable(*this, enable);
  }
  if (link_session_) (void)link_session_->close();
}

bool Ipv4Protocol::is_broadcast(Ipv4Addr a) const noexcept {
  if (a == kLimitedBroadcast) return true;
  // /31 and /32 have no directed broadcast (RFC 3021).
  if (config_.addr.prefix_len > 30) return false;
  return a.value == (config_.addr.network().value | ~config_.addr.netmask().value);
}

std::size_t Ipv4Protocol::link_mtu() {
  std::size_t mtu = config_.mtu;
  if (mtu == 0) {
    Result<std::size_t> m = link_.control(ctl::GetMtu{});
    mtu = m ? *m : kDefaultMtu;
  }
  return std::clamp(mtu, kMinMtu, Header::kMaxTotal);
}

Result<SessionRef> Ipv4Protocol::open(Protocol& upper, Participants& parts) {
  Result<ProtoNum> proto = parts.remote.pop<ProtoNum>();
  if (!proto) return proto.error();
  if (proto->value > 0xff) return Errc::invalid_argument;
  Result<IpAddr> peer_part = parts.remote.peek<IpAddr>();
  if (!peer_part) return peer_part.error();
  if (!peer_part->is_v4()) return Errc::unsupported;  // another family's layer takes it
  const Ipv4Addr peer = peer_part->v4();
  (void)parts.remote.pop<IpAddr>();
  if (Result<IpAddr> local = parts.local.peek<IpAddr>(); local) {
    // We have one address; 0.0.0.0 (or ::) means "any", which is that one.
    if (!local->is_unspecified() && *local != IpAddr(address())) return Errc::invalid_argument;
    (void)parts.local.pop<IpAddr>();
  }
  Key key{peer.value, proto->value};
  if (active_.contains(key)) return Errc::exists;
  SessionRef s = make_ref<Ipv4Session>(*this, &upper, peer, static_cast<std::uint8_t>(proto->value));
  active_.insert(key, s);
  return s;
}

Status Ipv4Protocol::open_enable(Protocol& upper, Participants& parts) {
  Result<ProtoNum> proto = parts.local.pop<ProtoNum>();
  if (!proto) return proto.error();
  if (proto->value > 0xff) return Errc::invalid_argument;
  return passive_.enable(ProtoKey{proto->value}, upper);
}

Status Ipv4Protocol::open_disable(Protocol& upper, Participants& parts) {
  Result<ProtoNum> proto = parts.local.pop<ProtoNum>();
  if (!proto) return proto.error();
  return passive_.disable(ProtoKey{proto->value}, upper);
}

Status Ipv4Protocol::demux(Session& lower, Msg msg) { return receive(&lower, std::move(msg), verify_rx()); }

Status Ipv4Protocol::receive(Session* lower, Msg msg, bool verify) {
  ++rx_packets_;
  Result<std::span<const std::byte>> fixed = msg.peek(Header::kMinSize);
  if (!fixed) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  const Header h = Header::read(fixed->first<Header::kMinSize>());
  if (h.version != 4) {
    ++drop_bad_version_;
    return Errc::malformed;
  }
  if (h.ihl < 5) {
    ++drop_bad_ihl_;
    return Errc::malformed;
  }
  if (h.total_length < h.header_length()) {
    ++drop_bad_len_;
    return Errc::malformed;
  }
  if (h.total_length > msg.size()) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  // Links pad short frames (Ethernet's 60-byte minimum): keep what was sent.
  if (msg.size() > h.total_length) (void)msg.truncate(h.total_length);
  // Options ride along inside IHL; we check the checksum over them and skip
  // them as a block, so no option is ever parsed past the header's end.
  Result<std::span<const std::byte>> whole = msg.peek(h.header_length());
  if (!whole) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  if (verify) {
    if (msg.offload().has(Offload::rx_ip_good)) {
      ++rx_csum_by_port_;
    } else if (!header_checksum_ok(*whole)) {
      ++drop_bad_csum_;
      return Errc::malformed;
    }
  }
  if (h.options_length() != 0) ++rx_options_;
  // RFC 1122 3.2.1.3: a datagram from a broadcast or multicast source is
  // silently discarded.
  if (is_broadcast(h.src) || is_multicast(h.src)) {
    ++drop_bad_src_;
    return Errc::malformed;
  }
  // We are a host (RFC 1122 3.3.4.2 / 3.3.6): ours or a broadcast, else drop.
  // No multicast groups are joined, so multicast destinations are not ours.
  // TTL is not checked: only forwarding decrements it (RFC 1122 3.2.1.7), and
  // a host accepts a datagram that arrives with TTL 0 or 1.
  const bool broadcast = is_broadcast(h.dst);
  if (h.dst != address() && !broadcast) {
    ++drop_not_for_us_;
    return Errc::not_found;
  }
  if (h.is_fragment()) return reassemble(lower, h, std::move(msg), broadcast);
  return deliver(lower, h, std::move(msg), broadcast, false);
}

Status Ipv4Protocol::deliver(Session* lower, const Header& h, Msg packet, bool broadcast, bool reassembled) {
  // RFC 1122 3.2.2: no ICMP error about a broadcast or multicast datagram, nor
  // about one from a source that does not name a single host. Non-first
  // fragments never get here; a reassembled datagram is a whole one.
  const bool may_answer = icmp_ != nullptr && !broadcast && h.src.value != 0;
  Msg original;
  if (may_answer) original = packet.share();  // the upcall consumes `packet`
  (void)packet.trim_front(h.header_length());

  Key key{h.src.value, h.protocol};
  SessionRef s;
  if (SessionRef* found = active_.find(key)) {
    s = *found;  // the upcall may close it
  } else if (Protocol* upper = passive_.upper(ProtoKey{h.protocol})) {
    s = make_ref<Ipv4Session>(*this, upper, h.src, h.protocol);
    active_.insert(key, s);
    Participants parts;
    parts.remote.push(h.src);
    parts.remote.push(ProtoNum{h.protocol});
    parts.local.push(h.dst);
    if (Status st = upper->open_done(*this, *s, parts); !st) {
      (void)s->close();
      ++drops_no_session();
      return st;
    }
  } else {
    ++drops_no_session();
    if (may_answer) {
      ++icmp_proto_unreach_;
      (void)icmp_->send_dest_unreachable(kIcmpProtoUnreachable, original, 0);
    }
    return Errc::proto_unreachable;
  }

  packet.rx() = RxInfo{h.src, h.dst, h.protocol, h.ttl, h.tos, broadcast, reassembled};
  ++rx_delivered_;
  Status st = s->pop(lower != nullptr ? *lower : *s, std::move(packet));
  // RFC 1122 3.2.2.1 / 4.1.3.1: the transport has no receiver for the port.
  if (st.error() == Errc::port_unreachable && may_answer) {
    ++icmp_port_unreach_;
    (void)icmp_->send_dest_unreachable(kIcmpPortUnreachable, original, 0);
  }
  return st;
}

// ---- reassembly (RFC 791 section 3.2, RFC 815) ---------------------------

Status Ipv4Protocol::reassemble(Session* lower, const Header& h, Msg packet, bool broadcast) {
  ++rx_fragments_;
  const std::size_t hl = h.header_length();
  std::vector<std::byte> first_header;
  if (h.frag_offset() == 0) {
    first_header.resize(hl);
    (void)packet.copy_out(0, first_header);
  }
  (void)packet.trim_front(hl);
  std::optional<ip::Reassembler<ReasmKey>::Whole> whole;
  const ReasmKey key{h.src.value, h.dst.value, h.id, h.protocol, 0};
  switch (reasm_.add(key, h.frag_offset(), h.mf(), std::move(packet), std::move(first_header), whole)) {
    case ip::ReasmOutcome::held: return {};
    case ip::ReasmOutcome::complete: break;
    case ip::ReasmOutcome::too_big: return Errc::too_large;
    case ip::ReasmOutcome::no_memory: return Errc::no_memory;
    case ip::ReasmOutcome::bad_length:
    case ip::ReasmOutcome::overlap: return Errc::malformed;
  }
  // Complete: the first fragment's header (options included, RFC 791)
  // becomes the datagram's, with the fragment fields cleared.
  std::vector<std::byte> hdr = std::move(whole->first_head);
  Msg payload = std::move(whole->payload);
  if (hdr.size() + payload.size() > Header::kMaxTotal) {
    ++drop_frag_too_big_;
    return Errc::too_large;
  }
  Header rh = Header::read(std::span<const std::byte>(hdr).first<Header::kMinSize>());
  rh.total_length = static_cast<std::uint16_t>(hdr.size() + payload.size());
  rh.flags_offset = 0;
  rh.checksum = 0;
  rh.write(std::span<std::byte>(hdr).first<Header::kMinSize>());
  fill_header_checksum(hdr);
  Result<std::span<std::byte>> room = payload.push(hdr.size());
  if (!room) return room.status();
  std::copy(hdr.begin(), hdr.end(), room->begin());
  return deliver(lower, rh, std::move(payload), broadcast, true);
}

// ---- send ---------------------------------------------------------------

Status Ipv4Protocol::send(Ipv4Addr dst, std::uint8_t protocol, Msg payload, SendOptions opts) {
  if (payload.size() > Header::kMaxTotal - Header::kMinSize) {
    ++drop_tx_too_large_;
    return Errc::too_large;
  }
  // What a port verified about a received message (echoed back, say) says
  // nothing about it on the way down.
  payload.offload().flags &= Offload::kTxMask | Offload::tx_tcp_seg;
  Header h;
  h.ttl = payload.offload().hop_limit != 0 ? payload.offload().hop_limit : config_.ttl;
  h.tos = payload.offload().tos;
  h.protocol = protocol;
  h.src = address();
  h.dst = dst;
  h.id = next_id_++;

  // `via_port`: the packet goes out through the link, whose port may fill
  // the header checksum (never true for our own loopback).
  auto finish_header = [&](Msg& m, std::uint16_t flags_offset, bool via_port) -> Status {
    h.total_length = static_cast<std::uint16_t>(m.size() + Header::kMinSize);
    h.flags_offset = flags_offset;
    Result<std::span<std::byte>> room = m.push(Header::kMinSize);
    if (!room) return room.status();
    h.write(room->first<Header::kMinSize>());
    if (fill_tx()) {
      if (via_port && offloads_.tx_ip_csum) {
        m.offload().flags |= Offload::tx_ip_csum;  // the field stays 0 for the port to fill
        ++tx_csum_by_port_;
      } else {
        fill_header_checksum(*room);
      }
    }
    if ((m.offload().flags & Offload::kTxMask) != 0) m.offload().l3_len = Header::kMinSize;
    return {};
  };

  // A datagram to ourselves never touches the link. It is delivered from a
  // due-now timer, so the sender's push returns before any upcall runs.
  if (dst == address() && delivered_here(protocol, payload)) {
    if (loopback_.size() >= config_.loopback_queue) {
      ++drop_loopback_full_;
      return Errc::would_block;
    }
    // No port on this path: finish what the transport left to one. A
    // segment meant to be cut is delivered whole (TCP takes any length).
    if ((payload.offload().flags & (Offload::tx_udp_csum | Offload::tx_tcp_csum)) != 0) {
      if (Status st = resolve_l4_checksum(payload); !st) return st;
    }
    payload.offload().flags &= static_cast<std::uint8_t>(~Offload::tx_tcp_seg);
    payload.offload().seg_size = 0;
    if (Status st = finish_header(payload, opts.dont_fragment ? Header::kFlagDf : 0, false); !st) return st;
    loopback_.push_back(std::move(payload));
    ++tx_loopback_;
    if (!loopback_timer_.armed()) loopback_timer_.arm(timers_.clock().now());
    return {};
  }

  // Routing for a host (RFC 1122 3.3.1): on-link, else the default gateway.
  Ipv4Addr next_hop;
  if (is_broadcast(dst)) {
    next_hop = kLimitedBroadcast;  // the resolver maps this to the link broadcast
  } else if (is_multicast(dst) || config_.addr.contains(dst)) {
    next_hop = dst;
  } else if (config_.gw) {
    next_hop = *config_.gw;
  } else {
    ++drop_no_route_;
    return Errc::no_route;
  }

  const std::size_t mtu = link_mtu();
  const std::size_t max_payload = mtu - Header::kMinSize;
  if (payload.size() <= max_payload) {
    if (Status st = finish_header(payload, opts.dont_fragment ? Header::kFlagDf : 0, true); !st) return st;
    return emit(next_hop, std::move(payload));
  }
  if (payload.offload().has(Offload::tx_tcp_seg)) {
    // Segmentation offload: one datagram whose TCP segment the port cuts
    // into MTU-sized ones, each with this header (DF, as TCP asked) but its
    // own length, ID and checksum (its length field holds it: checked above).
    if (!offloads_.tx_tcp_seg) {
      ++drop_tx_too_large_;
      return Errc::too_large;
    }
    if (Status st = finish_header(payload, Header::kFlagDf, true); !st) return st;
    return emit(next_hop, std::move(payload));
  }
  if (opts.dont_fragment) {
    ++drop_tx_too_large_;
    return Errc::too_large;
  }
  // A transport checksum asked of the port covers the whole datagram, which
  // no fragment carries whole: finish it here before cutting.
  if ((payload.offload().flags & (Offload::tx_udp_csum | Offload::tx_tcp_csum)) != 0) {
    if (Status st = resolve_l4_checksum(payload); !st) return st;
  }
  // RFC 791 fragmentation: every piece but the last carries a multiple of 8.
  const std::size_t chunk = max_payload / 8 * 8;
  std::size_t offset = 0;
  while (!payload.empty()) {
    Msg piece;
    bool more = payload.size() > chunk;
    if (more) {
      Result<Msg> rest = payload.split(chunk);
      if (!rest) return rest.status();
      piece = std::move(payload);
      payload = std::move(*rest);
    } else {
      piece = std::move(payload);
      payload = Msg();
    }
    auto fo = static_cast<std::uint16_t>((offset / 8) | (more ? Header::kFlagMf : 0));
    offset += piece.size();
    if (Status st = finish_header(piece, fo, true); !st) return st;
    ++tx_fragments_;
    if (Status st = emit(next_hop, std::move(piece)); !st) return st;
  }
  return {};
}

Status Ipv4Protocol::emit(Ipv4Addr next_hop, Msg packet) {
  Status st = resolver_ != nullptr ? resolver_->send_to(next_hop, std::move(packet))
                                   : link_session_->push(std::move(packet));
  if (st) {
    ++tx_packets_;
  } else {
    ++drop_tx_link_;
  }
  return st;
}

Status Ipv4Protocol::resolve_l4_checksum(Msg& payload) {
  if (Status st = csum::finish_requested(payload); !st) return st;
  ++tx_l4_csum_resolved_;
  return {};
}

bool Ipv4Protocol::delivered_here(std::uint8_t protocol, Msg& payload) {
  if (!config_.hairpin || (protocol != kProtoTcp && protocol != kProtoUdp)) return true;
  if (transport_claims(passive_.upper(ProtoKey{protocol}), address(), protocol == kProtoTcp, payload)) return true;
  ++tx_hairpin_;
  return false;
}

void Ipv4Protocol::drain_loopback() {
  // Take the batch: what the upcalls send to ourselves waits for the next run.
  std::deque<Msg> batch;
  batch.swap(loopback_);
  for (Msg& m : batch) (void)receive(nullptr, std::move(m), false);
}

// ---- errors and control -------------------------------------------------

Status Ipv4Protocol::deliver_error(const ctl::NetError& err) {
  Protocol* owner = passive_.upper(ProtoKey{err.protocol});
  if (owner == nullptr) {
    if (SessionRef* s = active_.find(Key{err.remote.v4().value, err.protocol})) owner = (*s)->upper();
  }
  if (owner == nullptr) {
    ++drop_error_no_owner_;
    return Errc::not_found;
  }
  ++errors_delivered_;
  return owner->control(ctl::DeliverError{err}).status();
}

Result<ControlReply> Ipv4Protocol::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{link_mtu() - Header::kMinSize};
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) {
    Result<std::size_t> room = link_.control(ctl::GetHeaderRoom{});
    return ControlReply{(room ? *room : std::size_t{0}) + Header::kMinSize};
  }
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) return ControlReply{Participant{address()}};
  if (std::holds_alternative<ctl::GetOffloads>(query)) return ControlReply{offloads_};
  if (std::holds_alternative<ctl::GetChunkSource>(query)) return link_.control_any(query);
  if (std::holds_alternative<ctl::GetChecksum>(query)) return ControlReply{config_.csum};
  if (const auto* set = std::get_if<ctl::SetChecksum>(&query)) {
    config_.csum = set->mode;
    return ControlReply{std::monostate{}};
  }
  return Protocol::control_any(query);
}

// ---- graph kind ---------------------------------------------------------

void register_ipv4(Registry& registry) {
  registry.add(
      KindSpec("ipv4", "IPv4 host: header checks, reassembly, fragmentation, on-link/gateway routing")
          .with_below(1, 2)
          .with_option(OptionSpec::cidr("addr", "our address and subnet").mandatory())
          .with_option(OptionSpec::ipv4("gw", "default gateway (on the subnet)"))
          .with_option(OptionSpec::integer("ttl", 1, 255, "TTL of sent datagrams").defaults_to("64"))
          .with_option(OptionSpec::boolean("csum", "compute and verify the header checksum").defaults_to("on"))
          .with_option(OptionSpec::integer("mtu", 68, 65535, "link MTU override (IP header included)"))
          .with_option(OptionSpec::integer("reasm_timeout", 1, 3600, "seconds to complete a datagram").defaults_to("30"))
          .with_option(OptionSpec::size("reasm_max_datagram", 576, 65535, "largest datagram reassembled")
                           .defaults_to("65535"))
          .with_option(OptionSpec::size("reasm_mem", 0, std::uint64_t{1} << 32, "bytes all reassemblies may hold")
                           .defaults_to("4m"))
          .with_option(OptionSpec::boolean("hairpin", "our address is shared (filterd's nodes): what another stack "
                                                      "owns goes out through the link")
                           .defaults_to("off"))
          .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
            if (args.loop == nullptr) {
              throw std::invalid_argument("ipv4 needs an event loop for its timers: pass one to Graph::build");
            }
            NextHopResolver* resolver = resolver_below(args.below, "arp");
            const Options& o = args.options;
            Config c;
            c.addr = o.get_cidr("addr");
            if (o.has("gw")) c.gw = o.get_ipv4("gw");
            c.ttl = static_cast<std::uint8_t>(o.get_int("ttl"));
            c.csum = o.get_bool("csum") ? ChecksumMode::on : ChecksumMode::off;
            if (o.has("mtu")) c.mtu = static_cast<std::size_t>(o.get_int("mtu"));
            c.reasm_timeout = std::chrono::seconds(o.get_int("reasm_timeout"));
            c.reasm_max_datagram = static_cast<std::size_t>(o.get_size("reasm_max_datagram"));
            c.reasm_mem = static_cast<std::size_t>(o.get_size("reasm_mem"));
            c.hairpin = o.get_bool("hairpin");
            return std::make_unique<Ipv4Protocol>(args.name, *args.below[0], resolver, args.loop->timers(), c);
          }));
}

}  // namespace xk::ipv4

#include "xk/filterd/filter.hpp"

#include <algorithm>
#include <string>

#include "filter_decisions.hpp"
#include "filter_fragments.hpp"
#include "filter_rules.hpp"
#include "filter_wire.hpp"

namespace xk::filterd {
namespace {

constexpr std::size_t kBurst = 32;

struct Names {
  const char* name;
  const char* help;
};

constexpr Names kReasonNames[kReasonCount] = {
    {"exact_hit", "to a node: exact flow table"},
    {"listen_hit", "to a node: single listener"},
    {"group_hit", "to a node: group listener (rendezvous choice)"},
    {"lease_hit", "to a node: a port it leased (its own connections)"},
    {"rule_hit", "to a node: user rule"},
    {"icmp_error_delivered", "to a node: ICMP error, to the owner of the quoted flow"},
    {"frag_follow", "later fragment sent where its first went"},
    {"local_arp", "ARP for the shared address, or a neighbour's announcement: filterd's own"},
    {"local_icmp_echo", "ICMP or ICMPv6 echo request to the shared address: filterd's own"},
    {"local_nd", "Neighbor or Router Discovery, MLD: filterd's own"},
    {"default_rst", "TCP for nobody: filterd sends an RST"},
    {"default_unreachable", "UDP for nobody: filterd sends ICMP port unreachable"},
    {"frag_held", "fragment before its first: held"},
    {"malformed", "dropped: lengths or fields do not add up"},
    {"bad_ip_checksum", "dropped: IPv4 header checksum"},
    {"vlan", "dropped: VLAN-tagged frame"},
    {"other_ethertype", "dropped: another EtherType (or IPv6 without an IPv6 address)"},
    {"not_ours", "dropped: another MAC or IP destination"},
    {"bad_source", "dropped: impossible source address"},
    {"no_owner", "dropped: nobody owns it and nothing to answer"},
    {"icmp_error_unknown", "dropped: ICMP error quoting an unknown flow"},
    {"frag_unowned", "dropped: later fragment whose first was not delivered"},
    {"frag_limit", "dropped: fragment holding limits reached"},
};

constexpr Names kEgressNames[kEgressReasonCount] = {
    {"flow", "allowed: the node's exact flow"},
    {"listener", "allowed: a port the node listens on"},
    {"fragment", "allowed: later fragment of an allowed datagram"},
    {"icmp_error", "allowed: ICMP error about the node's flow"},
    {"malformed", "denied: malformed"},
    {"not_ip", "denied: not IP (ARP and ND are filterd's)"},
    {"bad_source", "denied: source is not the shared address"},
    {"not_owner", "denied: flow or port of somebody else"},
    {"protocol", "denied: protocol or ICMP type nodes may not send"},
};

constexpr bool is_icmp_error(std::uint8_t type) noexcept {
  return type == icmp::kDestUnreachable || type == icmp::kTimeExceeded || type == icmp::kParamProblem;
}

// RFC 1122 3.2.1.3: a source can be neither "this network" (0/8), loopback
// (127/8), multicast or reserved (224/3, which holds the limited broadcast),
// nor, from outside, our own address.
bool is_bad_source(Ipv4Addr a, Ipv4Addr shared) noexcept {
  const std::uint32_t top = a.value >> 24;
  return top == 0 || top == 127 || top >= 224 || a == shared;
}

bool is_broadcast_destination(Ipv4Addr a) noexcept {
  return ipv4::is_multicast(a) || a == ipv4::kLimitedBroadcast;
}

void drop_held(FragmentTracker& t, Counter& dropped, IngressDatagram& d) noexcept {
  dropped.inc(d.held.size());
  t.held_frames -= d.held.size();
  t.held_bytes -= d.held_bytes;
  d.held.clear();
  d.held_bytes = 0;
}

}  // namespace

const char* to_string(Reason r) noexcept {
  auto i = static_cast<std::size_t>(r);
  return i < kReasonCount ? kReasonNames[i].name : "unknown";
}

const char* to_string(EgressReason r) noexcept {
  auto i = static_cast<std::size_t>(r);
  return i < kEgressReasonCount ? kEgressNames[i].name : "unknown";
}

const char* to_string(Action a) noexcept {
  switch (a) {
    case Action::to_node: return "to_node";
    case Action::local: return "local";
    case Action::reset: return "reset";
    case Action::port_unreachable: return "port_unreachable";
    case Action::drop: return "drop";
    case Action::held: return "held";
  }
  return "unknown";
}

FilterEngine::FilterEngine(FilterConfig config, const Clock& clock)
    : config_(std::move(config)),
      clock_(clock),
      group_key_(config_.group_key ? *config_.group_key : random_hash_key()),
      shared_mac_bits_(wire::mac_bits(config_.shared_mac)),
      flows_(config_.expected_flows),
      rules_(std::make_unique<RuleTable>()),
      frags_(std::make_unique<FragmentTracker>(config_)),
      counters_(config_.counter_owner),
      frag_tracked_(counters_.add("frag_tracked", "datagrams whose first fragment's decision is kept")),
      frag_released_(counters_.add("frag_released", "held fragments released by their first")),
      frag_dropped_(counters_.add("frag_dropped", "held fragments dropped: timeout, eviction, first not delivered")),
      egress_allowed_(counters_.add("egress_allowed")),
      egress_denied_(counters_.add("egress_denied")) {
  for (std::size_t i = 0; i < kReasonCount; ++i) {
    reason_counters_[i] = &counters_.add(kReasonNames[i].name, kReasonNames[i].help);
  }
  for (std::size_t i = 0; i < kEgressReasonCount; ++i) {
    egress_counters_[i] = &counters_.add(std::string("egress_") + kEgressNames[i].name, kEgressNames[i].help);
  }
}

FilterEngine::~FilterEngine() = default;

// ---- Tables ----

FilterEngine::PackedKey FilterEngine::packed(const FlowKey& key) noexcept {
  return PackedKey{key.remote.v4().value, key.remote_port, key.local_port, static_cast<std::uint32_t>(key.proto)};
}

FilterEngine::Packed6Key FilterEngine::packed6(const FlowKey& key) noexcept {
  return Packed6Key{key.remote.bytes(), key.remote_port, key.local_port, static_cast<std::uint32_t>(key.proto)};
}

Status FilterEngine::add_flow(const FlowKey& key, Target target) {
  if (key.proto != Proto::tcp && key.proto != Proto::udp && key.proto != Proto::icmp) return Errc::invalid_argument;
  if (key.proto == Proto::icmp && key.remote_port != 0) return Errc::invalid_argument;
  const bool added = key.remote.is_v4() ? flows_.insert(packed(key), target).second
                                        : flows6_.insert(packed6(key), target).second;
  return added ? Status() : Status(Errc::exists);
}

Status FilterEngine::remove_flow(const FlowKey& key) noexcept {
  const bool removed = key.remote.is_v4() ? flows_.erase(packed(key)) : flows6_.erase(packed6(key));
  return removed ? Status() : Status(Errc::not_found);
}

std::optional<Target> FilterEngine::find_flow(const FlowKey& key) const noexcept {
  const Target* t = key.remote.is_v4() ? flows_.find(packed(key)) : flows6_.find(packed6(key));
  if (t != nullptr) return *t;
  return std::nullopt;
}

std::uint64_t FilterEngine::seed_of(Target t) const noexcept {
  return siphash24(group_key_, std::as_bytes(std::span(&t, 1)));
}

Status FilterEngine::listen(Proto proto, std::uint16_t port, Target target) {
  return add_single(proto, port, target, false);
}

Status FilterEngine::lease(Proto proto, std::uint16_t port, Target target) {
  return add_single(proto, port, target, true);
}

Status FilterEngine::add_single(Proto proto, std::uint16_t port, Target target, bool lease) {
  if (proto != Proto::tcp && proto != Proto::udp) return Errc::invalid_argument;
  Listener l{false, {Member{target, seed_of(target)}}, lease};
  return listeners_.insert(ListenKey{static_cast<std::uint16_t>(proto), port}, std::move(l)).second
             ? Status()
             : Status(Errc::exists);
}

Status FilterEngine::join_group(Proto proto, std::uint16_t port, Target member) {
  if (proto != Proto::tcp && proto != Proto::udp) return Errc::invalid_argument;
  const ListenKey k{static_cast<std::uint16_t>(proto), port};
  Listener* l = listeners_.find(k);
  if (l == nullptr) {
    listeners_.insert(k, Listener{true, {Member{member, seed_of(member)}}});
    return {};
  }
  if (!l->group) return Errc::exists;
  for (const Member& m : l->members) {
    if (m.target == member) return Errc::exists;
  }
  l->members.push_back(Member{member, seed_of(member)});
  return {};
}

Status FilterEngine::leave_group(Proto proto, std::uint16_t port, Target member) {
  const ListenKey k{static_cast<std::uint16_t>(proto), port};
  Listener* l = listeners_.find(k);
  if (l == nullptr || !l->group) return Errc::not_found;
  if (std::erase_if(l->members, [&](const Member& m) { return m.target == member; }) == 0) return Errc::not_found;
  if (l->members.empty()) listeners_.erase(k);
  return {};
}

Status FilterEngine::unlisten(Proto proto, std::uint16_t port) noexcept {
  return listeners_.erase(ListenKey{static_cast<std::uint16_t>(proto), port}) ? Status() : Status(Errc::not_found);
}

std::optional<Target> FilterEngine::listener_for(const FlowKey& key) const noexcept {
  std::optional<Decision> d;
  if (key.remote.is_v4()) {
    d = listen_lookup(packed(key));
  } else {
    const Packed6Key k = packed6(key);
    d = listen_lookup(k.proto, k.local_port, std::as_bytes(std::span(&k, 1)));
  }
  if (d) return d->target;
  return std::nullopt;
}

RuleResult FilterEngine::add_rule(std::string_view expression, Target target, int priority) {
  return rules_->add(expression, target, priority);
}

Status FilterEngine::remove_rule(RuleId id) noexcept { return rules_->remove(id); }

std::size_t FilterEngine::rule_count() const noexcept { return rules_->size(); }

std::vector<RuleInfo> FilterEngine::rules() const { return rules_->list(); }

void FilterEngine::for_each_flow(const std::function<void(const FlowKey&, Target)>& f) {
  flows_.for_each([&](const PackedKey& k, Target& t) {
    f(FlowKey{static_cast<Proto>(k.proto), Ipv4Addr{k.remote}, k.remote_port, k.local_port}, t);
  });
  flows6_.for_each([&](const Packed6Key& k, Target& t) {
    f(FlowKey{static_cast<Proto>(k.proto), IpAddr::v6(k.remote), k.remote_port, k.local_port}, t);
  });
}

std::optional<ListenerInfo> FilterEngine::listener(Proto proto, std::uint16_t port) const {
  const Listener* l = listeners_.find(ListenKey{static_cast<std::uint16_t>(proto), port});
  if (l == nullptr) return std::nullopt;
  ListenerInfo info;
  info.group = l->group;
  for (const Member& m : l->members) info.members.push_back(m.target);
  return info;
}

NodeEgress FilterEngine::egress_counts(NodeId node) const noexcept {
  return node < node_egress_.size() ? node_egress_[node] : NodeEgress{};
}

void FilterEngine::remove_node(NodeId node) {
  std::vector<PackedKey> flows;
  flows_.for_each([&](const PackedKey& k, Target& t) {
    if (t.node == node) flows.push_back(k);
  });
  for (const PackedKey& k : flows) flows_.erase(k);
  std::vector<Packed6Key> flows6;
  flows6_.for_each([&](const Packed6Key& k, Target& t) {
    if (t.node == node) flows6.push_back(k);
  });
  for (const Packed6Key& k : flows6) flows6_.erase(k);

  std::vector<ListenKey> ports;
  listeners_.for_each([&](const ListenKey& k, Listener& l) {
    std::erase_if(l.members, [&](const Member& m) { return m.target.node == node; });
    if (l.members.empty()) ports.push_back(k);
  });
  for (const ListenKey& k : ports) listeners_.erase(k);

  rules_->remove_node(node);
  if (node < node_egress_.size()) node_egress_[node] = NodeEgress{};

  frags_->ingress.for_each([&](const FragKey&, IngressDatagram& d) {
    if (d.decided && d.decision.action == Action::to_node && d.decision.target.node == node) {
      d.decision = drop(Reason::frag_unowned);
    }
  });
}

// Rendezvous (highest random weight) hashing: each member scores the flow
// with a keyed hash of (flow, member); the highest score wins. A member that
// joins takes only the flows it now wins; one that leaves gives up only its
// own (Thaler and Ravishankar, 1998).
std::optional<Decision> FilterEngine::listen_lookup(const PackedKey& key) const noexcept {
  return listen_lookup(key.proto, key.local_port, std::as_bytes(std::span(&key, 1)));
}

std::optional<Decision> FilterEngine::listen_lookup(const Packed6Key& key) const noexcept {
  return listen_lookup(key.proto, key.local_port, std::as_bytes(std::span(&key, 1)));
}

std::optional<Decision> FilterEngine::listen_lookup(std::uint32_t proto, std::uint16_t local_port,
                                                    std::span<const std::byte> flow_id) const noexcept {
  const Listener* l = listeners_.find(ListenKey{static_cast<std::uint16_t>(proto), local_port});
  if (l == nullptr || l->members.empty()) return std::nullopt;
  if (!l->group) return deliver(l->lease ? Reason::lease_hit : Reason::listen_hit, l->members.front().target);
  const std::uint64_t flow = siphash24(group_key_, flow_id);
  const Member* best = nullptr;
  std::uint64_t best_score = 0;
  for (const Member& m : l->members) {
    const std::uint64_t score = mix64(flow ^ m.seed);
    if (best == nullptr || score > best_score) {
      best = &m;
      best_score = score;
    }
  }
  return deliver(Reason::group_hit, best->target);
}

std::optional<Decision> FilterEngine::owner_of(const PackedKey& key) const noexcept {
  if (const Target* t = flows_.find(key)) return deliver(Reason::exact_hit, *t);
  return listen_lookup(key);
}

std::optional<Decision> FilterEngine::owner_of(const Packed6Key& key) const noexcept {
  if (const Target* t = flows6_.find(key)) return deliver(Reason::exact_hit, *t);
  return listen_lookup(key);
}

// ---- Ingress ----

void FilterEngine::parse(Frame f, Parsed& p, bool hairpin) const noexcept {
  p.kind = Parsed::Kind::decided;
  p.v6 = false;
  p.icmp = false;
  p.has_key = false;
  p.fragment = false;
  p.later_fragment = false;
  p.broadcast = false;
  p.tcp_flags = 0;
  p.icmp_type = 0;
  auto decided = [&p](Decision d) { p.decision = d; };

  if (f.size() < kEthHeader) return decided(drop(Reason::malformed));
  // The Ethernet header's two fields that matter, read in place (the MACs
  // compared as numbers). A unicast frame must be ours when our MAC is set;
  // the I/G bit marks broadcast and multicast.
  const std::uint16_t type = load_be16(f.data() + 12);
  if (!hairpin && shared_mac_bits_ != 0 && (std::to_integer<std::uint8_t>(f[0]) & 0x01) == 0 &&
      wire::mac_bits(f.data()) != shared_mac_bits_) {
    return decided(drop(Reason::not_ours));
  }
  if (type == eth::kTypeVlan || type == eth::kTypeQinQ) return decided(drop(Reason::vlan));
  if (type == eth::kTypeArp) {
    if (f.size() < kEthHeader + wire::kArpSize) return decided(drop(Reason::malformed));
    const std::byte* arp = f.data() + kEthHeader;
    if (!wire::arp_is_ethernet_ipv4(arp)) return decided(drop(Reason::malformed));
    // Requests and replies for the shared address, and anybody claiming it
    // (an address conflict, RFC 5227), are filterd's ARP's business. So is a
    // neighbour's announcement (sender = target, RFC 5227 2.3): a host that
    // came back with another MAC says so that way, and ARP refreshes an entry
    // it holds (RFC 826 merge) -- else filterd would go on sending to the old
    // MAC until the entry expired.
    const Ipv4Addr target = wire::arp_target_ip(arp), sender = wire::arp_sender_ip(arp);
    if (target == config_.shared_ip || sender == config_.shared_ip || (sender == target && sender.value != 0)) {
      return decided(Decision{Action::local, Reason::local_arp, {}});
    }
    return decided(drop(Reason::not_ours));
  }
  if (type == eth::kTypeIpv6) return parse_v6(f, p, hairpin);
  if (type != eth::kTypeIpv4) return decided(drop(Reason::other_type));
  parse_v4(f, p, hairpin);
}

void FilterEngine::parse_v4(Frame f, Parsed& p, bool hairpin) const noexcept {
  auto decided = [&p](Decision d) { p.decision = d; };
  // RFC 791 3.1; a frame may be longer than its datagram (Ethernet padding).
  const Frame ip = f.subspan(kEthHeader);
  if (ip.size() < ipv4::Header::kMinSize) return decided(drop(Reason::malformed));
  const ipv4::Header h = ipv4::Header::read(ip.first<ipv4::Header::kMinSize>());
  const std::size_t hl = h.header_length();
  if (h.version != 4 || h.ihl < 5 || h.total_length < hl || h.total_length > ip.size()) {
    return decided(drop(Reason::malformed));
  }
  if (h.dst != config_.shared_ip) {
    if (!is_broadcast_destination(h.dst)) return decided(drop(Reason::not_ours));
    p.broadcast = true;
  }
  if (config_.verify_ip_checksum && !wire::ipv4_header_checksum_ok(ip.data(), hl)) {
    return decided(drop(Reason::bad_ip_checksum));
  }
  if (!(hairpin && h.src == config_.shared_ip) && is_bad_source(h.src, config_.shared_ip)) {
    return decided(drop(Reason::bad_source));
  }

  const std::size_t payload = h.total_length - hl;
  p.proto = h.protocol;
  p.icmp = h.protocol == ipv4::kProtoIcmp;
  p.l4_offset = static_cast<std::uint32_t>(kEthHeader + hl);
  p.l4_length = static_cast<std::uint32_t>(payload);

  if (h.is_fragment()) {
    // RFC 791: every fragment but the last carries a multiple of 8 bytes, and
    // the datagram ends within 65535 bytes.
    if (payload == 0 || (h.mf() && payload % 8 != 0) ||
        hl + h.frag_offset() + payload > ipv4::Header::kMaxTotal) {
      return decided(drop(Reason::malformed));
    }
    p.fragment = true;
    p.frag = FragKey::of(IpAddr(h.src), IpAddr(h.dst), h.id, h.protocol);
    if (h.frag_offset() != 0) {
      // RFC 1858 3.2: a TCP fragment at offset 8 could only rewrite the
      // first fragment's ports and flags.
      if (h.protocol == ipv4::kProtoTcp && h.frag_offset() == 8) return decided(drop(Reason::malformed));
      p.later_fragment = true;
      p.kind = Parsed::Kind::other;
      return;
    }
  }

  const std::byte* l4 = f.data() + p.l4_offset;
  PackedKey key;  // a local, so it is hashed from registers (see FlowHash)
  switch (h.protocol) {
    case ipv4::kProtoTcp: {
      // The whole TCP header must be there, in a first fragment too (RFC 1858
      // 3.1, tiny fragments).
      if (payload < wire::kTcpMinHeader) return decided(drop(Reason::malformed));
      const std::size_t thl = wire::tcp_header_length(l4);
      if (thl < wire::kTcpMinHeader || thl > payload) return decided(drop(Reason::malformed));
      p.tcp_flags = wire::tcp_flags(l4);
      key = PackedKey{h.src.value, wire::tcp_src_port(l4), wire::tcp_dst_port(l4), ipv4::kProtoTcp};
      p.has_key = true;
      break;
    }
    case ipv4::kProtoUdp: {
      if (payload < udp::Header::kSize) return decided(drop(Reason::malformed));
      const udp::Header uh = udp::Header::read(f.subspan(p.l4_offset).first<udp::Header::kSize>());
      // RFC 768: the length covers header and data; a first fragment holds
      // only part of them.
      if (uh.length < udp::Header::kSize || (!p.fragment && uh.length > payload)) {
        return decided(drop(Reason::malformed));
      }
      key = PackedKey{h.src.value, uh.src_port, uh.dst_port, ipv4::kProtoUdp};
      p.has_key = true;
      break;
    }
    case ipv4::kProtoIcmp: {
      if (payload < icmp::Header::kSize) return decided(drop(Reason::malformed));
      const icmp::Header ih = icmp::Header::read(f.subspan(p.l4_offset).first<icmp::Header::kSize>());
      p.icmp_type = ih.type;
      // An echo reply answers a node's echo request: its identifier is the
      // local "port" of an ICMP flow.
      if (ih.type == icmp::kEchoReply) {
        key = PackedKey{h.src.value, 0, ih.identifier(), ipv4::kProtoIcmp};
        p.has_key = true;
      }
      break;
    }
    default:
      break;
  }
  p.key = key;
  if (p.has_key && !p.broadcast) {
    p.kind = Parsed::Kind::flow;
    p.hash = FlowHash{}(key);
  } else {
    p.kind = Parsed::Kind::other;
  }
}

Decision FilterEngine::finish(Frame f, const Parsed& p) {
  switch (p.kind) {
    case Parsed::Kind::decided:
      return counted(p.decision);
    case Parsed::Kind::flow: {
      const Target* t = p.v6 ? flows6_.find(p.key6) : flows_.find_hashed(p.key, p.hash);
      if (t != nullptr && !p.fragment) return counted(deliver(Reason::exact_hit, *t));
      return decide(f, p, t);
    }
    case Parsed::Kind::other:
      break;
  }
  return decide(f, p, nullptr);
}

Decision FilterEngine::classify(Frame frame) {
  Parsed p;
  parse(frame, p);
  return finish(frame, p);
}

Decision FilterEngine::classify_hairpin(Frame frame) {
  Parsed p;
  parse(frame, p, true);
  return finish(frame, p);
}

void FilterEngine::classify(std::span<const Frame> frames, std::span<Decision> out) {
  const std::size_t n = std::min(frames.size(), out.size());
  Parsed parsed[kBurst];
  for (std::size_t base = 0; base < n; base += kBurst) {
    const std::size_t m = std::min(kBurst, n - base);
    // Three passes, so the memory each frame waits for is fetched while the
    // others are worked on: the headers, then the flow table's slots.
    for (std::size_t i = 0; i < m; ++i) __builtin_prefetch(frames[base + i].data());
    for (std::size_t i = 0; i < m; ++i) {
      parse(frames[base + i], parsed[i]);
      if (parsed[i].kind == Parsed::Kind::flow) flows_.prefetch(parsed[i].hash);
    }
    for (std::size_t i = 0; i < m; ++i) out[base + i] = finish(frames[base + i], parsed[i]);
  }
}

Decision FilterEngine::decide(Frame f, const Parsed& p, const Target* exact) {
  // Broadcast and multicast datagrams have no flows; fragmented ones are not
  // worth tracking.
  if (p.fragment && p.broadcast) return counted(drop(Reason::no_owner));
  if (p.later_fragment) return counted(decide_later_fragment(f, p));
  const Decision d = decide_packet(f, p, exact);
  if (p.fragment) remember_first_fragment(p, d);
  return counted(d);
}

// A whole datagram or a first fragment: exact, listen, rules, default.
Decision FilterEngine::decide_packet(Frame f, const Parsed& p, const Target* exact) const noexcept {
  if (p.broadcast) {
    if (const Target* t = rules_->match(f)) return deliver(Reason::rule_hit, *t);
    return drop(Reason::no_owner);  // RFC 1122 3.2.2: no ICMP error for these
  }
  if (p.icmp) return decide_icmp(f, p, exact);
  if (exact != nullptr) return deliver(Reason::exact_hit, *exact);
  if (p.has_key) {
    // A TCP segment other than a SYN with no exact flow but a listener still
    // goes to the listener's (chosen) node: its TCP answers with an RST, or
    // completes a SYN-cookie handshake, as a standalone stack would.
    if (auto d = p.v6 ? listen_lookup(p.key6) : listen_lookup(p.key)) return *d;
  }
  if (const Target* t = rules_->match(f)) return deliver(Reason::rule_hit, *t);
  if (p.proto == ipv4::kProtoTcp) {
    // RFC 9293 3.10.7.1 (CLOSED): a segment for no connection is answered
    // with a reset, unless it is one itself.
    if ((p.tcp_flags & wire::kTcpRst) != 0) return drop(Reason::no_owner);
    return Decision{Action::reset, Reason::default_rst, {}};
  }
  if (p.proto == ipv4::kProtoUdp) {
    // RFC 1122 4.1.3.1: no listener on the port, ICMP port unreachable.
    return Decision{Action::port_unreachable, Reason::default_unreachable, {}};
  }
  return drop(Reason::no_owner);
}

// An echo reply, an error or another type (IPv6's echo requests and
// Neighbor Discovery were decided by parse_v6).
Decision FilterEngine::decide_icmp(Frame f, const Parsed& p, const Target* exact) const noexcept {
  if (p.v6) {
    if (icmpv6::is_error(p.icmp_type)) return icmp6_error_owner(f, p);
  } else {
    if (p.icmp_type == icmp::kEchoRequest) return Decision{Action::local, Reason::local_icmp_echo, {}};
    if (is_icmp_error(p.icmp_type)) return icmp_error_owner(f, p);
  }
  if (exact != nullptr) return deliver(Reason::exact_hit, *exact);
  if (const Target* t = rules_->match(f)) return deliver(Reason::rule_hit, *t);
  return drop(Reason::no_owner);
}

// RFC 792: an error quotes the offending datagram's IP header and at least the
// first 8 bytes of its data (the ports, or an echo's identifier). That datagram
// went out from the shared address, so its source is local and its
// destination the remote end.
Decision FilterEngine::icmp_error_owner(Frame f, const Parsed& p) const noexcept {
  const std::size_t quoted = p.l4_length - icmp::Header::kSize;
  const Frame q = f.subspan(p.l4_offset + icmp::Header::kSize, quoted);
  if (q.size() < ipv4::Header::kMinSize) return drop(Reason::malformed);
  const ipv4::Header ih = ipv4::Header::read(q.first<ipv4::Header::kMinSize>());
  const std::size_t ihl = ih.header_length();
  if (ih.version != 4 || ih.ihl < 5 || q.size() < ihl + 8) return drop(Reason::malformed);
  // A quoted later fragment carries no ports.
  if (ih.src != config_.shared_ip || (ih.flags_offset & ipv4::Header::kOffsetMask) != 0) {
    return drop(Reason::icmp_error_unknown);
  }
  const std::byte* l4 = q.data() + ihl;
  PackedKey key;
  switch (ih.protocol) {
    case ipv4::kProtoTcp:
    case ipv4::kProtoUdp:
      key = PackedKey{ih.dst.value, load_be16(l4 + 2), load_be16(l4), ih.protocol};
      break;
    case ipv4::kProtoIcmp:
      if (std::to_integer<std::uint8_t>(l4[0]) != icmp::kEchoRequest) return drop(Reason::icmp_error_unknown);
      key = PackedKey{ih.dst.value, 0, load_be16(l4 + 4), ipv4::kProtoIcmp};
      break;
    default:
      return drop(Reason::icmp_error_unknown);
  }
  if (auto d = owner_of(key)) return deliver(Reason::icmp_error, d->target);
  return drop(Reason::icmp_error_unknown);
}

// ---- Fragments ----

void FilterEngine::expire_at(Time now) {
  frags_->ingress.expire(now, [this](const FragKey&, IngressDatagram& d) { drop_held(*frags_, frag_dropped_, d); });
  frags_->egress.expire(now, [](const FragKey&, NodeId&) {});
}

void FilterEngine::expire() { expire_at(clock_.now()); }

std::size_t FilterEngine::held_fragments() const noexcept { return frags_->held_frames; }
std::size_t FilterEngine::held_fragment_bytes() const noexcept { return frags_->held_bytes; }
std::size_t FilterEngine::tracked_datagrams() const noexcept { return frags_->ingress.size(); }

std::vector<ReleasedFrame> FilterEngine::take_released() {
  std::vector<ReleasedFrame> out;
  out.swap(released_);
  return out;
}

void FilterEngine::remember_first_fragment(const Parsed& p, const Decision& d) {
  const Time now = clock_.now();
  expire_at(now);
  const FragKey& key = p.frag;
  IngressDatagram* dg = frags_->ingress.find(key);
  if (dg == nullptr) {
    frags_->ingress.insert(key, IngressDatagram{true, d, {}, 0}, saturating_add(now, config_.fragment_timeout),
                           [this](const FragKey&, IngressDatagram& old) { drop_held(*frags_, frag_dropped_, old); });
    ++frag_tracked_;
    return;
  }
  const bool first_time = !dg->decided;
  dg->decided = true;
  dg->decision = d;  // a repeated first fragment: the latest decision counts
  if (!first_time) return;
  ++frag_tracked_;
  if (delivers(d.action)) {
    for (std::vector<std::byte>& frame : dg->held) {
      released_.push_back(ReleasedFrame{std::move(frame), Decision{d.action, Reason::frag_follow, d.target}});
      ++frag_released_;
    }
    frags_->held_frames -= dg->held.size();
    frags_->held_bytes -= dg->held_bytes;
    dg->held.clear();
    dg->held_bytes = 0;
  } else {
    drop_held(*frags_, frag_dropped_, *dg);
  }
  dg->held.shrink_to_fit();
}

Decision FilterEngine::decide_later_fragment(Frame f, const Parsed& p) {
  const Time now = clock_.now();
  expire_at(now);
  const FragKey& key = p.frag;
  IngressDatagram* dg = frags_->ingress.find(key);
  if (dg != nullptr && dg->decided) {
    if (delivers(dg->decision.action)) return Decision{dg->decision.action, Reason::frag_follow, dg->decision.target};
    return drop(Reason::frag_unowned);
  }
  // Before its first: hold a copy, within the limits.
  if (frags_->held_frames + 1 > config_.fragment_max_held_frames ||
      frags_->held_bytes + f.size() > config_.fragment_max_held_bytes) {
    return drop(Reason::frag_limit);
  }
  if (dg == nullptr) {
    dg = &frags_->ingress.insert(key, IngressDatagram{}, saturating_add(now, config_.fragment_timeout),
                                 [this](const FragKey&, IngressDatagram& old) { drop_held(*frags_, frag_dropped_, old); });
  }
  dg->held.emplace_back(f.begin(), f.end());
  dg->held_bytes += f.size();
  ++frags_->held_frames;
  frags_->held_bytes += f.size();
  return Decision{Action::held, Reason::frag_held, {}};
}

// ---- Egress ----

EgressVerdict FilterEngine::egress_check(Frame frame, NodeId node, std::uint16_t queue) {
  const EgressVerdict v = egress(frame, node, queue);
  egress_counters_[static_cast<std::size_t>(v.reason)]->inc();
  (v.allowed ? egress_allowed_ : egress_denied_).inc();
  // Node ids are small and not reused at once: a vector by id, grown the
  // first time a node sends (ids above the last one seen only).
  if (node >= node_egress_.size()) node_egress_.resize(std::size_t{node} + 1);
  ++(v.allowed ? node_egress_[node].allowed : node_egress_[node].denied);
  return v;
}

// An exact flow names its owner; without one, a port the node listens on
// (alone or in a group) is its own.
// `queue` (kAnyQueue: any) only tells other_queue: the node is what counts.
EgressVerdict FilterEngine::owns(const PackedKey& key, NodeId node, std::uint16_t queue) const noexcept {
  return owns(flows_.find(key), key.proto, key.local_port, node, queue);
}

EgressVerdict FilterEngine::owns(const Packed6Key& key, NodeId node, std::uint16_t queue) const noexcept {
  return owns(flows6_.find(key), key.proto, key.local_port, node, queue);
}

EgressVerdict FilterEngine::owns(const Target* t, std::uint32_t proto, std::uint16_t local_port, NodeId node,
                                 std::uint16_t queue) const noexcept {
  if (t != nullptr) {
    if (t->node != node) return deny(EgressReason::not_owner);
    EgressVerdict v = allow(EgressReason::flow);
    v.other_queue = queue != kAnyQueue && t->queue != queue;
    return v;
  }
  if (const Listener* l = listeners_.find(ListenKey{static_cast<std::uint16_t>(proto), local_port})) {
    bool node_member = false;
    for (const Member& m : l->members) {
      if (m.target.node != node) continue;
      if (queue == kAnyQueue || m.target.queue == queue) return allow(EgressReason::listener);
      node_member = true;
    }
    if (node_member) {
      EgressVerdict v = allow(EgressReason::listener);
      v.other_queue = true;
      return v;
    }
  }
  return deny(EgressReason::not_owner);
}

EgressVerdict FilterEngine::egress(Frame f, NodeId node, std::uint16_t queue) {
  if (f.size() < kEthHeader) return deny(EgressReason::malformed);
  // ARP and Neighbor Discovery are filterd's: it answers the nodes'
  // requests itself, as a reply from outside would come to filterd anyway.
  const std::uint16_t type = load_be16(f.data() + 12);
  if (type == eth::kTypeIpv6 && serves_ipv6()) return egress_v6(f, node, queue);
  if (type != eth::kTypeIpv4) return deny(EgressReason::not_ip);
  return egress_v4(f, node, queue);
}

void FilterEngine::remember_egress_fragment(const FragKey& key, NodeId node, Time now) {
  if (NodeId* sender = frags_->egress.find(key)) {
    *sender = node;  // nodes sharing an address may reuse an IP id: the latest first fragment wins
  } else {
    frags_->egress.insert(key, node, saturating_add(now, config_.fragment_timeout), [](const FragKey&, NodeId&) {});
  }
}

EgressVerdict FilterEngine::egress_v4(Frame f, NodeId node, std::uint16_t queue) {
  const Frame ip = f.subspan(kEthHeader);
  if (ip.size() < ipv4::Header::kMinSize) return deny(EgressReason::malformed);
  const ipv4::Header h = ipv4::Header::read(ip.first<ipv4::Header::kMinSize>());
  const std::size_t hl = h.header_length();
  if (h.version != 4 || h.ihl < 5 || h.total_length < hl || h.total_length > ip.size()) {
    return deny(EgressReason::malformed);
  }
  if (h.src != config_.shared_ip) return deny(EgressReason::bad_source);
  const std::size_t payload = h.total_length - hl;
  const FragKey fkey = FragKey::of(IpAddr(h.src), IpAddr(h.dst), h.id, h.protocol);
  Time now{};
  if (h.is_fragment()) {
    if (payload == 0) return deny(EgressReason::malformed);
    now = clock_.now();
    expire_at(now);
    if (h.frag_offset() != 0) {
      // Only the first fragment shows the ports: the rest belong to whoever
      // sent an allowed first (xk's IPv4 sends fragments in order).
      const NodeId* sender = frags_->egress.find(fkey);
      return sender != nullptr && *sender == node ? allow(EgressReason::fragment) : deny(EgressReason::not_owner);
    }
  }

  const std::byte* l4 = ip.data() + hl;
  EgressVerdict v = deny(EgressReason::protocol);
  switch (h.protocol) {
    case ipv4::kProtoTcp: {
      if (payload < wire::kTcpMinHeader) return deny(EgressReason::malformed);
      const std::size_t thl = wire::tcp_header_length(l4);
      if (thl < wire::kTcpMinHeader || thl > payload) return deny(EgressReason::malformed);
      v = owns(PackedKey{h.dst.value, wire::tcp_dst_port(l4), wire::tcp_src_port(l4), ipv4::kProtoTcp}, node, queue);
      break;
    }
    case ipv4::kProtoUdp: {
      if (payload < udp::Header::kSize) return deny(EgressReason::malformed);
      v = owns(PackedKey{h.dst.value, load_be16(l4 + 2), load_be16(l4), ipv4::kProtoUdp}, node, queue);
      break;
    }
    case ipv4::kProtoIcmp: {
      if (payload < icmp::Header::kSize) return deny(EgressReason::malformed);
      const icmp::Header ih = icmp::Header::read(ip.subspan(hl).first<icmp::Header::kSize>());
      if (ih.type == icmp::kEchoRequest) {
        // A node's ping: the identifier is its ICMP flow's local port.
        const Target* t = flows_.find(PackedKey{h.dst.value, 0, ih.identifier(), ipv4::kProtoIcmp});
        v = t != nullptr && t->node == node ? allow(EgressReason::flow) : deny(EgressReason::not_owner);
        v.other_queue = v.allowed && queue != kAnyQueue && t->queue != queue;
      } else if (is_icmp_error(ih.type)) {
        // An error about a datagram the node received: quoted source remote,
        // quoted destination the shared address.
        const Frame q = ip.subspan(hl + icmp::Header::kSize, payload - icmp::Header::kSize);
        if (q.size() < ipv4::Header::kMinSize) return deny(EgressReason::malformed);
        const ipv4::Header qh = ipv4::Header::read(q.first<ipv4::Header::kMinSize>());
        const std::size_t qhl = qh.header_length();
        if (qh.version != 4 || qh.ihl < 5 || q.size() < qhl + 8) return deny(EgressReason::malformed);
        if (qh.dst != config_.shared_ip || (qh.flags_offset & ipv4::Header::kOffsetMask) != 0 ||
            (qh.protocol != ipv4::kProtoTcp && qh.protocol != ipv4::kProtoUdp)) {
          return deny(EgressReason::not_owner);
        }
        const std::byte* ql4 = q.data() + qhl;
        v = owns(PackedKey{qh.src.value, load_be16(ql4), load_be16(ql4 + 2), qh.protocol}, node, queue);
        if (v.allowed) v.reason = EgressReason::icmp_error;
      } else {
        // Echo replies are filterd's; other types are not the nodes' to send.
        v = deny(EgressReason::protocol);
      }
      break;
    }
    default:
      break;
  }
  if (v.allowed && h.is_fragment()) remember_egress_fragment(fkey, node, now);
  return v;
}

}  // namespace xk::filterd

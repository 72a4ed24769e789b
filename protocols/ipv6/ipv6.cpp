#include "xk/protocols/ipv6.hpp"

#include <algorithm>
#include <bit>
#include <array>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "xk/checksum.hpp"
#include "xk/event_loop.hpp"
#include "xk/ip_layers.hpp"
#include "xk/protocols/icmpv6_wire.hpp"

namespace xk::ipv6 {

namespace {

constexpr std::uint32_t kEtherTypeIpv6 = 0x86dd;

// Multicast scope (RFC 4291 2.7): 1 interface-local, 2 link-local.
constexpr unsigned scope_of_multicast(const IpAddr& a) noexcept { return a.bytes()[1] & 0x0f; }

// The protocols whose header follows the IPv6 header directly on the
// common path: no chain to walk.
constexpr bool plain_upper(std::uint8_t nh) noexcept {
  return nh == kTcp || nh == kUdp || nh == kIcmpv6;
}

}  // namespace

// ---- session ------------------------------------------------------------

Ipv6Session::Ipv6Session(Ipv6Protocol& proto, Protocol* upper, IpAddr peer, std::uint8_t next_header)
    : Session(proto, upper), proto_(proto), peer_(peer), next_header_(next_header) {}

Status Ipv6Session::push(Msg msg) {
  Ipv6Protocol::SendOptions opts;
  opts.dont_fragment = dont_fragment_;
  opts.memo = &memo_;
  return proto_.send(peer_, next_header_, std::move(msg), opts);
}

Status Ipv6Session::pop(Session&, Msg msg) {
  if (upper() == nullptr) return Errc::closed;
  return upper()->demux(*this, std::move(msg));
}

Status Ipv6Session::close() {
  const Ipv6Protocol::Key key{peer_.bytes(), next_header_};
  if (SessionRef* s = proto_.active_.find(key); s != nullptr && s->get() == this) proto_.active_.erase(key);
  return {};
}

Result<ControlReply> Ipv6Session::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetPeerAddr>(query)) return ControlReply{Participant{peer_}};
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) {
    std::optional<IpAddr> src = proto_.is_ours(peer_) ? std::optional<IpAddr>(peer_) : proto_.source_for(peer_);
    if (!src) return Errc::bad_state;  // no address usable yet (duplicate check)
    return ControlReply{Participant{*src}};
  }
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{proto_.path_mtu(peer_) - Header::kSize};
  if (const auto* df = std::get_if<ctl::SetDontFragment>(&query)) {
    dont_fragment_ = df->df;
    return ControlReply{std::monostate{}};
  }
  return proto_.control_any(query);
}

// ---- protocol -----------------------------------------------------------

Ipv6Protocol::Ipv6Protocol(std::string name, Protocol& link, NextHopResolver* resolver, TimerWheel& timers,
                           Config config)
    : Protocol(std::move(name), "ipv6", link_and_resolver(link, resolver)),
      link_(link),
      resolver_(resolver),
      timers_(timers),
      config_(std::move(config)),
      next_id_(0),
      loopback_timer_(timers, [p = this] { p->drain_loopback(); }),
      ra_timer_(timers, [p = this] { p->expire_learned(); }),
      rx_packets_(counters().add("rx_packets")),
      rx_delivered_(counters().add("rx_delivered", "packets handed to an upper protocol")),
      drop_truncated_(counters().add("drop_truncated", "shorter than 40 bytes or than the payload length")),
      drop_bad_version_(counters().add("drop_bad_version", "version field not 6")),
      drop_bad_src_(counters().add("drop_bad_src", "multicast or IPv4-mapped source (RFC 4291 2.7, 2.5.5.2)")),
      drop_not_for_us_(counters().add("drop_not_for_us", "destination neither ours nor a group we joined")),
      drop_tentative_(counters().add("drop_tentative", "to an address still under its duplicate check")),
      drop_chain_(counters().add("drop_chain", "extension headers refused (limits, bad options, routing)")),
      drop_unknown_next_header_(counters().add("drop_unknown_next_header", "no upper protocol for it")),
      rx_ext_headers_(counters().add("rx_ext_headers", "packets with extension headers walked")),
      rx_fragments_(counters().add("rx_fragments")),
      rx_atomic_fragments_(counters().add("rx_atomic_fragments", "whole packets behind a fragment header (RFC 6946)")),
      reasm_ok_(counters().add("reasm_ok", "datagrams reassembled")),
      drop_frag_bad_len_(counters().add("drop_frag_bad_len", "M fragment not a multiple of 8, or conflicting end")),
      drop_frag_too_big_(counters().add("drop_frag_too_big", "fragments end past 65535 or reasm_max_datagram")),
      drop_reasm_overlap_(counters().add("drop_reasm_overlap", "datagrams dropped for overlapping fragments")),
      drop_reasm_timeout_(counters().add("drop_reasm_timeout", "datagrams not completed in reasm_timeout")),
      drop_reasm_mem_(counters().add("drop_reasm_mem", "datagrams dropped for the memory caps")),
      tx_packets_(counters().add("tx_packets", "packets handed to the link or resolver")),
      tx_fragments_(counters().add("tx_fragments")),
      drop_tx_too_large_(counters().add("drop_tx_too_large", "no fragments asked and too big, or over 65535")),
      drop_no_route_(counters().add("drop_no_route", "off-link destination without gw")),
      drop_no_source_(counters().add("drop_no_source", "no usable source address yet")),
      drop_tx_link_(counters().add("drop_tx_link", "link or resolver refused the packet")),
      tx_loopback_(counters().add("tx_loopback", "packets to our own address")),
      tx_hairpin_(counters().add("tx_hairpin", "packets to our shared address another stack owns, out through the link")),
      drop_loopback_full_(counters().add("drop_loopback_full")),
      pmtu_lowered_(counters().add("pmtu_lowered", "Packet Too Big that lowered a path MTU")),
      icmp_errors_asked_(counters().add("icmp_errors_asked", "errors asked of icmpv6")),
      errors_delivered_(counters().add("errors_delivered", "ICMPv6 errors handed to a transport")),
      drop_error_no_owner_(counters().add("drop_error_no_owner", "ICMPv6 errors nobody owns")),
      tx_l4_csum_resolved_(counters().add("tx_l4_csum_resolved",
                                          "checksums asked of the port but computed here (to self, fragments)")),
      ra_taken_(counters().add("ra_taken", "router advertisements that configured something")),
      ra_addresses_(counters().add("ra_addresses", "addresses formed from advertised prefixes (SLAAC)")),
      reasm_(timers,
             ip::ReasmLimits{std::min(config_.reasm_max_datagram, Header::kSize + Header::kMaxPayload) - Header::kSize,
                             config_.reasm_mem, config_.reasm_timeout},
             ip::ReasmCounters{reasm_ok_, drop_frag_bad_len_, drop_frag_too_big_, drop_reasm_overlap_,
                               drop_reasm_timeout_, drop_reasm_mem_}) {
  if (config_.hop_limit == 0) throw std::invalid_argument("hop_limit must be 1..255");
  std::random_device rd;
  for (std::size_t i = 0; i < flow_key_.size(); i += 4) {
    const std::uint32_t r = rd();
    std::memcpy(flow_key_.data() + i, &r, 4);
  }
  // RFC 7739: identifications a remote host cannot predict from others.
  next_id_ = rd();

  if (config_.link_local) {
    Result<Participant> local = link_.control(ctl::GetLocalAddr{});
    if (Result<MacAddr> mac = local ? local->peek<MacAddr>() : Result<MacAddr>(local.error())) {
      addrs_.push_back(IpCidr{icmpv6::link_local_from_mac(*mac), 64});
    }
  }
  for (const IpCidr& a : config_.addrs) {
    if (a.addr.is_v4() || is_multicast(a.addr) || a.addr.is_unspecified()) {
      throw std::invalid_argument("addr=" + to_string(a) + " is not an IPv6 unicast address");
    }
    if (is_ours(a.addr)) continue;
    addrs_.push_back(a);
  }
  if (config_.gw) {
    const IpAddr& gw = *config_.gw;
    if (gw.is_v4() || is_multicast(gw) || (!icmpv6::is_link_local(gw) && !on_link(gw))) {
      throw std::invalid_argument("gw=" + to_string(gw) + " is neither link-local nor on a prefix of addr");
    }
  }
  groups_.push_back(icmpv6::all_nodes());
  for (const IpCidr& a : addrs_) {
    const IpAddr g = icmpv6::solicited_node(a.addr);
    if (std::find(groups_.begin(), groups_.end(), g) == groups_.end()) groups_.push_back(g);
  }

  Participants enable;
  enable.local.push(ProtoNum{kEtherTypeIpv6});
  if (Status st = link_.open_enable(*this, enable); !st) {
    throw std::runtime_error("cannot receive from '" + link_.name() + "': open_enable failed: " + to_string(st.error()));
  }
  link_enabled_ = true;
  // The port's offloads that serve IPv6 (docs/checksum.md, "Offload"): a
  // link that does not answer has none.
  if (Result<LinkOffloads> o = link_.control(ctl::GetOffloads{})) {
    offloads_ = LinkOffloads{.tx_udp_csum = o->tx_udp_csum, .tx_tcp_csum = o->tx_tcp_csum,
                             .rx_l4_csum = o->rx_l4_csum, .tx_tcp_seg = o->tx_tcp_seg};
  }
  if (resolver_ == nullptr) {
    Participants none;
    Result<SessionRef> s = link_.open(*this, none);
    if (!s) {
      (void)link_.open_disable(*this, enable);
      throw std::runtime_error("cannot open a session on '" + link_.name() + "': " + to_string(s.error()) +
                               " (a link that needs addresses wants a resolver: below=<link>,nd0)");
    }
    link_session_ = *s;
  } else {
    for (const IpCidr& a : addrs_) resolver_->add_local_address(a.addr);
    if (config_.accept_ra) resolver_->set_router_sink(this);
  }
}

Ipv6Protocol::~Ipv6Protocol() {
  if (resolver_ != nullptr && config_.accept_ra) resolver_->set_router_sink(nullptr);
  ra_timer_.cancel();
  loopback_timer_.cancel();
  loopback_.clear();
  reasm_.clear();
  active_.clear();
  if (link_enabled_) {
    Participants enable;
    enable.local.push(ProtoNum{kEtherTypeIpv6});
    (void)link_.open_disable(*this, enable);
  }
  if (link_session_) (void)link_session_->close();
}

// ---- addresses ----------------------------------------------------------

std::optional<IpAddr> Ipv6Protocol::link_local() const noexcept {
  if (!addrs_.empty() && icmpv6::is_link_local(addrs_.front().addr)) return addrs_.front().addr;
  return std::nullopt;
}

bool Ipv6Protocol::is_ours(const IpAddr& a) const noexcept {
  return std::any_of(addrs_.begin(), addrs_.end(), [&](const IpCidr& c) { return c.addr == a; });
}

bool Ipv6Protocol::is_joined(const IpAddr& group) const noexcept {
  return std::find(groups_.begin(), groups_.end(), group) != groups_.end();
}

bool Ipv6Protocol::on_link(const IpAddr& dst) const noexcept {
  if (std::any_of(addrs_.begin(), addrs_.end(), [&](const IpCidr& c) { return c.contains(dst); })) return true;
  if (prefixes_.empty()) return false;
  const Time now = timers_.clock().now();
  return std::any_of(prefixes_.begin(), prefixes_.end(),
                     [&](const LearnedPrefix& p) { return p.expires > now && p.prefix.contains(dst); });
}

bool Ipv6Protocol::usable(const IpAddr& a) const {
  if (all_usable_ || resolver_ == nullptr) return true;
  if (!resolver_->address_usable(a)) return false;
  all_usable_ = std::all_of(addrs_.begin(), addrs_.end(),
                            [&](const IpCidr& c) { return resolver_->address_usable(c.addr); });
  return true;
}

namespace {
// Leading bits `a` and `b` share.
unsigned common_prefix(const IpAddr& a, const IpAddr& b) noexcept {
  for (unsigned i = 0; i < 16; ++i) {
    const auto x = static_cast<std::uint8_t>(a.bytes()[i] ^ b.bytes()[i]);
    if (x != 0) return 8 * i + static_cast<unsigned>(std::countl_zero(x));
  }
  return 128;
}
}  // namespace

std::optional<IpAddr> Ipv6Protocol::source_for(const IpAddr& dst) const {
  const bool link_scope = icmpv6::is_link_local(dst) || (is_multicast(dst) && scope_of_multicast(dst) <= 2);
  if (link_scope) {
    std::optional<IpAddr> ll = link_local();
    if (ll && usable(*ll)) return ll;
  }
  // RFC 6724 in short: a preferred address before a deprecated one (its
  // preferred lifetime over, RFC 4862 5.5.4), then the longest prefix in
  // common with the destination (rule 8), then the first configured.
  const IpCidr* best = nullptr;
  bool best_deprecated = true;
  unsigned best_common = 0;
  for (const IpCidr& c : addrs_) {
    if (icmpv6::is_link_local(c.addr) || !usable(c.addr)) continue;
    const bool dep = deprecated(c.addr);
    const unsigned common = common_prefix(c.addr, dst);
    if (best == nullptr || (best_deprecated && !dep) || (dep == best_deprecated && common > best_common)) {
      best = &c;
      best_deprecated = dep;
      best_common = common;
    }
  }
  if (best != nullptr) return best->addr;
  return std::nullopt;
}

std::optional<IpAddr> Ipv6Protocol::next_hop_for(const IpAddr& dst) const {
  // A host's conceptual sending (RFC 4861 5.2): on-link goes straight to
  // the neighbour, everything else to the default router.
  if (is_multicast(dst) || icmpv6::is_link_local(dst) || on_link(dst)) return dst;
  if (config_.gw) return config_.gw;
  const Time now = timers_.clock().now();
  for (const LearnedRouter& r : routers_) {
    if (r.expires > now) return r.addr;
  }
  return std::nullopt;
}

// ---- Router Advertisements (RFC 4861 6.3.4, RFC 4862 5.5.3) ----------------

namespace {
constexpr std::uint32_t kForever = 0xffffffff;
Time after(Time now, std::uint32_t seconds) {
  return seconds == kForever ? Time::max() : now + std::chrono::seconds(seconds);
}
constexpr auto kTwoHours = std::chrono::hours(2);
// `a` with the bits past the first `len` cleared: one key per prefix.
IpAddr masked(const IpAddr& a, unsigned len) {
  IpAddr::Bytes b = a.bytes();
  for (unsigned i = 0; i < 16; ++i) {
    const unsigned keep = len >= 8 * (i + 1) ? 8 : len > 8 * i ? len - 8 * i : 0;
    b[i] = static_cast<std::uint8_t>(b[i] & (keep == 0 ? 0 : 0xff << (8 - keep)));
  }
  return IpAddr::v6(b);
}
}  // namespace

std::vector<IpAddr> Ipv6Protocol::default_routers() const {
  std::vector<IpAddr> out;
  const Time now = timers_.clock().now();
  for (const LearnedRouter& r : routers_) {
    if (r.expires > now) out.push_back(r.addr);
  }
  return out;
}

bool Ipv6Protocol::deprecated(const IpAddr& a) const noexcept {
  if (auto_addrs_.empty()) return false;
  const Time now = timers_.clock().now();
  return std::any_of(auto_addrs_.begin(), auto_addrs_.end(),
                     [&](const AutoAddress& x) { return x.addr == a && x.preferred_until <= now; });
}

void Ipv6Protocol::router_advert(const RouterAdvert& ra) {
  const Time now = timers_.clock().now();
  ++ra_taken_;
  // The default router list: added, refreshed, or (lifetime 0) removed.
  auto r = std::find_if(routers_.begin(), routers_.end(), [&](const LearnedRouter& x) { return x.addr == ra.router; });
  if (ra.lifetime_s == 0) {
    if (r != routers_.end()) routers_.erase(r);
  } else if (r != routers_.end()) {
    r->expires = now + std::chrono::seconds(ra.lifetime_s);
  } else if (routers_.size() < 16) {
    routers_.push_back({ra.router, now + std::chrono::seconds(ra.lifetime_s)});
  }
  if (ra.hop_limit != 0) config_.hop_limit = ra.hop_limit;
  // An MTU the link can carry (RFC 4861 6.3.4: never above the link's own).
  if (ra.mtu && *ra.mtu >= kMinMtu) {
    Result<std::size_t> m = link_.control(ctl::GetMtu{});
    const std::size_t link = m ? *m : kMinMtu;
    if (*ra.mtu <= link) ra_mtu_ = *ra.mtu;
  }
  for (const RouterAdvert::Prefix& p : ra.prefixes) {
    if (p.prefix.is_v4() || icmpv6::is_link_local(p.prefix) || is_multicast(p.prefix)) continue;
    if (p.preferred_s > p.valid_s) continue;  // RFC 4862 5.5.3 c
    if (p.on_link) learn_prefix(p, now);
    if (p.autonomous) autoconfigure(p, now);
  }
  expire_learned();
}

void Ipv6Protocol::learn_prefix(const RouterAdvert::Prefix& p, Time now) {
  const IpCidr c{masked(p.prefix, p.length), p.length};
  auto it = std::find_if(prefixes_.begin(), prefixes_.end(), [&](const LearnedPrefix& x) { return x.prefix == c; });
  if (p.valid_s == 0) {
    if (it != prefixes_.end()) prefixes_.erase(it);
    return;
  }
  if (it != prefixes_.end()) {
    it->expires = after(now, p.valid_s);
  } else if (prefixes_.size() < 16) {
    prefixes_.push_back({c, after(now, p.valid_s)});
  }
}

// SLAAC (RFC 4862 5.5.3): a /64 and our link-local interface identifier.
void Ipv6Protocol::autoconfigure(const RouterAdvert::Prefix& p, Time now) {
  const std::optional<IpAddr> ll = link_local();
  if (p.length != 64 || !ll || resolver_ == nullptr) return;
  IpAddr::Bytes b = p.prefix.bytes();
  std::copy(ll->bytes().begin() + 8, ll->bytes().end(), b.begin() + 8);
  const IpAddr addr = IpAddr::v6(b);
  auto it = std::find_if(auto_addrs_.begin(), auto_addrs_.end(), [&](const AutoAddress& x) { return x.addr == addr; });
  if (it != auto_addrs_.end()) {
    // 5.5.3 e: a short valid lifetime cannot cut an address below two
    // hours (an unauthenticated advertisement must not end it at once).
    const Time advertised = after(now, p.valid_s);
    if (p.valid_s == kForever || advertised > now + kTwoHours || advertised > it->valid_until) {
      it->valid_until = advertised;
    } else if (it->valid_until > now + kTwoHours) {
      it->valid_until = now + kTwoHours;
    }
    it->preferred_until = after(now, p.preferred_s);
    return;
  }
  if (p.valid_s == 0 || is_ours(addr) || auto_addrs_.size() >= 16) return;
  auto_addrs_.push_back({addr, after(now, p.valid_s), after(now, p.preferred_s)});
  addrs_.push_back(IpCidr{addr, 128});  // its prefix is on-link only if advertised so
  const IpAddr g = icmpv6::solicited_node(addr);
  if (std::find(groups_.begin(), groups_.end(), g) == groups_.end()) groups_.push_back(g);
  all_usable_ = false;
  resolver_->add_local_address(addr);  // its duplicate check first
  ++ra_addresses_;
}

void Ipv6Protocol::expire_learned() {
  const Time now = timers_.clock().now();
  std::erase_if(routers_, [&](const LearnedRouter& r) { return r.expires <= now; });
  std::erase_if(prefixes_, [&](const LearnedPrefix& p) { return p.expires <= now; });
  for (auto it = auto_addrs_.begin(); it != auto_addrs_.end();) {
    if (it->valid_until > now) {
      ++it;
      continue;
    }
    // Invalid: no longer ours (RFC 4862 5.5.4).
    std::erase_if(addrs_, [&](const IpCidr& c) { return c.addr == it->addr; });
    it = auto_addrs_.erase(it);
  }
  Time next = Time::max();
  for (const LearnedRouter& r : routers_) next = std::min(next, r.expires);
  for (const LearnedPrefix& p : prefixes_) next = std::min(next, p.expires);
  for (const AutoAddress& a : auto_addrs_) next = std::min(next, a.valid_until);
  ra_timer_.cancel();
  if (next != Time::max()) ra_timer_.arm(next);
}

std::size_t Ipv6Protocol::link_mtu() {
  std::size_t mtu = config_.mtu != 0 ? config_.mtu : ra_mtu_;
  if (mtu == 0) {
    Result<std::size_t> m = link_.control(ctl::GetMtu{});
    mtu = m ? *m : kMinMtu;
  }
  return std::clamp(mtu, kMinMtu, Header::kSize + Header::kMaxPayload);
}

std::size_t Ipv6Protocol::path_mtu(const IpAddr& dst) {
  const std::size_t link = link_mtu();
  if (path_mtus_.size() == 0) return link;
  const DestKey key{dst.bytes()};
  PathMtu* p = path_mtus_.find(key);
  if (p == nullptr) return link;
  if (timers_.clock().now() >= p->expires) {
    path_mtus_.erase(key);  // RFC 8201 4: time to try the larger MTU again
    return link;
  }
  return std::min(link, p->mtu);
}

std::size_t Ipv6Protocol::update_path_mtu(const IpAddr& dst, std::uint32_t mtu) {
  // RFC 8201 4: below the IPv6 minimum counts as the minimum; an increase
  // is ignored (only the timeout raises it).
  const std::size_t want = std::max<std::size_t>(mtu, kMinMtu);
  const std::size_t now = path_mtu(dst);
  if (want >= now) return now;
  if (path_mtus_.size() >= config_.max_path_mtus) {
    // Full: forget the lot, as an expiry would; each path learns again.
    path_mtus_.clear();
  }
  const Time expires = timers_.clock().now() + config_.pmtu_timeout;
  const DestKey key{dst.bytes()};
  if (PathMtu* p = path_mtus_.find(key)) {
    *p = PathMtu{want, expires};
  } else {
    path_mtus_.insert(key, PathMtu{want, expires});
  }
  ++pmtu_lowered_;
  return want;
}

// ---- sessions and enables -----------------------------------------------

Result<SessionRef> Ipv6Protocol::open(Protocol& upper, Participants& parts) {
  Result<ProtoNum> proto = parts.remote.pop<ProtoNum>();
  if (!proto) return proto.error();
  if (proto->value > 0xff) return Errc::invalid_argument;
  Result<IpAddr> peer = parts.remote.peek<IpAddr>();
  if (!peer) return peer.error();
  if (peer->is_v4()) return Errc::unsupported;  // ipv4's
  if (peer->is_unspecified()) return Errc::invalid_argument;
  (void)parts.remote.pop<IpAddr>();
  if (Result<IpAddr> local = parts.local.peek<IpAddr>(); local) {
    if (!local->is_unspecified() && !is_ours(*local)) return Errc::invalid_argument;
    (void)parts.local.pop<IpAddr>();
  }
  const Key key{peer->bytes(), static_cast<std::uint8_t>(proto->value)};
  if (active_.contains(key)) return Errc::exists;
  SessionRef s = make_ref<Ipv6Session>(*this, &upper, *peer, static_cast<std::uint8_t>(proto->value));
  active_.insert(key, s);
  return s;
}

Status Ipv6Protocol::open_enable(Protocol& upper, Participants& parts) {
  Result<ProtoNum> proto = parts.local.pop<ProtoNum>();
  if (!proto) return proto.error();
  if (proto->value > 0xff) return Errc::invalid_argument;
  return passive_.enable(ProtoKey{proto->value}, upper);
}

Status Ipv6Protocol::open_disable(Protocol& upper, Participants& parts) {
  Result<ProtoNum> proto = parts.local.pop<ProtoNum>();
  if (!proto) return proto.error();
  return passive_.disable(ProtoKey{proto->value}, upper);
}

// ---- receive ------------------------------------------------------------

Status Ipv6Protocol::demux(Session& lower, Msg msg) { return receive(&lower, std::move(msg)); }

Status Ipv6Protocol::receive(Session* lower, Msg msg) {
  ++rx_packets_;
  Result<std::span<const std::byte>> fixed = msg.peek(Header::kSize);
  if (!fixed) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  const Header h = Header::read(fixed->first<Header::kSize>());
  if (h.version != 6) {
    ++drop_bad_version_;
    return Errc::malformed;
  }
  if (h.payload_length > msg.size() - Header::kSize) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  // Links pad short frames: keep what was sent.
  if (msg.size() > Header::kSize + h.payload_length) (void)msg.truncate(Header::kSize + h.payload_length);
  // A group never sends (RFC 4291 2.7); a mapped IPv4 address never appears
  // on an IPv6 wire (2.5.5.2: a spoofing vector when a stack trusts it).
  if (is_multicast(h.src) || h.src.is_v4()) {
    ++drop_bad_src_;
    return Errc::malformed;
  }
  const bool multicast = is_multicast(h.dst);
  if (multicast ? !is_joined(h.dst) : !is_ours(h.dst)) {
    ++drop_not_for_us_;
    return Errc::not_found;
  }
  // RFC 4862 5.4: a tentative address receives nothing but its own
  // duplicate check, which comes to the solicited-node group.
  if (!multicast && !usable(h.dst)) {
    ++drop_tentative_;
    return Errc::not_found;
  }
  return process(lower, h, std::move(msg), multicast, false);
}

Status Ipv6Protocol::process(Session* lower, const Header& h, Msg packet, bool multicast, bool reassembled) {
  if (plain_upper(h.next_header)) {
    return deliver(lower, h, h.next_header, Header::kSize, Header::kNextHeaderOffset, std::move(packet), multicast,
                   reassembled);
  }
  ++rx_ext_headers_;
  Result<std::span<const std::byte>> whole = packet.peek(std::min(packet.size(), Msg::kMaxContiguous));
  if (!whole) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  const ChainResult r = walk_chain(*whole, config_.chain);
  if (!r.chain) {
    ++drop_chain_;
    answer_problem(r.problem, packet, multicast);
    return Errc::malformed;
  }
  const Chain& chain = *r.chain;
  if (chain.fragment && !chain.fragment->atomic()) {
    // A fragment header inside a reassembled packet is a second layer of
    // fragmentation, which no sender makes.
    if (reassembled) {
      ++drop_chain_;
      return Errc::malformed;
    }
    return reassemble(lower, h, chain, std::move(packet), multicast);
  }
  if (chain.fragment) ++rx_atomic_fragments_;
  return deliver(lower, h, chain.upper, chain.upper_offset, chain.next_header_offset, std::move(packet), multicast,
                 reassembled || chain.fragment.has_value());
}

void Ipv6Protocol::answer_problem(const ChainProblem& p, const Msg& packet, bool multicast) {
  if (!p.icmp || icmp_ == nullptr) return;
  if (p.unless_multicast && multicast) return;
  ++icmp_errors_asked_;
  (void)icmp_->send_error(icmpv6::kParamProblem, p.code, p.pointer, packet);
}

Status Ipv6Protocol::deliver(Session* lower, const Header& h, std::uint8_t upper, std::size_t upper_offset,
                             std::size_t named_at, Msg packet, bool multicast, bool fragmented) {
  if (upper == kNoNext) return {};  // RFC 8200 4.7: nothing follows
  const bool may_answer = icmp_ != nullptr && !multicast && !h.src.is_unspecified();
  Msg original;
  if (may_answer) original = packet.share();  // the upcall consumes `packet`
  (void)packet.trim_front(upper_offset);

  const Key key{h.src.bytes(), upper};
  SessionRef s;
  if (SessionRef* found = active_.find(key)) {
    s = *found;
  } else if (Protocol* up = passive_.upper(ProtoKey{upper})) {
    s = make_ref<Ipv6Session>(*this, up, h.src, upper);
    active_.insert(key, s);
    Participants parts;
    parts.remote.push(h.src);
    parts.remote.push(ProtoNum{upper});
    parts.local.push(h.dst);
    if (Status st = up->open_done(*this, *s, parts); !st) {
      (void)s->close();
      ++drops_no_session();
      return st;
    }
  } else {
    ++drop_unknown_next_header_;
    // RFC 8200 4: an unrecognized Next Header is a Parameter Problem
    // (code 1) pointing at the byte that named it.
    if (may_answer) {
      ++icmp_errors_asked_;
      (void)icmp_->send_error(icmpv6::kParamProblem, kUnrecognizedNextHeader, static_cast<std::uint32_t>(named_at),
                              original);
    }
    return Errc::proto_unreachable;
  }

  packet.rx() = RxInfo{h.src, h.dst, upper, h.hop_limit, h.traffic_class, multicast, fragmented};
  ++rx_delivered_;
  Status st = s->pop(lower != nullptr ? *lower : *s, std::move(packet));
  if (st.error() == Errc::port_unreachable && may_answer) {
    ++icmp_errors_asked_;
    (void)icmp_->send_error(icmpv6::kDestUnreachable, icmpv6::kPortUnreachable, 0, original);
  }
  return st;
}

// ---- reassembly (RFC 8200 4.5) --------------------------------------------

Status Ipv6Protocol::reassemble(Session* lower, const Header& h, const Chain& chain, Msg packet, bool multicast) {
  ++rx_fragments_;
  const FragmentHeader& f = *chain.fragment;
  // The first fragment brings the unfragmentable part (the IPv6 header and
  // the extension headers before the fragment header): kept with the byte
  // that named the fragment header naming what the fragments carry.
  std::vector<std::byte> head;
  if (f.offset() == 0) {
    head.resize(chain.fragment_offset);
    (void)packet.copy_out(0, head);
    head[chain.fragment_named_at] = std::byte{f.next_header};
  }
  (void)packet.trim_front(chain.upper_offset);
  std::optional<ip::Reassembler<ReasmKey>::Whole> whole;
  const ReasmKey key{h.src.bytes(), h.dst.bytes(), f.id};
  switch (reasm_.add(key, f.offset(), f.more, std::move(packet), std::move(head), whole)) {
    case ip::ReasmOutcome::held: return {};
    case ip::ReasmOutcome::complete: break;
    case ip::ReasmOutcome::too_big: return Errc::too_large;
    case ip::ReasmOutcome::no_memory: return Errc::no_memory;
    case ip::ReasmOutcome::bad_length:
    case ip::ReasmOutcome::overlap: return Errc::malformed;
  }
  std::vector<std::byte> hdr = std::move(whole->first_head);
  Msg payload = std::move(whole->payload);
  if (hdr.size() + payload.size() > Header::kSize + Header::kMaxPayload) {
    ++drop_frag_too_big_;
    return Errc::too_large;
  }
  Header rh = Header::read(std::span<const std::byte>(hdr).first<Header::kSize>());
  rh.payload_length = static_cast<std::uint16_t>(hdr.size() - Header::kSize + payload.size());
  rh.write(std::span<std::byte>(hdr).first<Header::kSize>());
  Result<std::span<std::byte>> room = payload.push(hdr.size());
  if (!room) return room.status();
  std::copy(hdr.begin(), hdr.end(), room->begin());
  return process(lower, rh, std::move(payload), multicast, true);
}

// ---- send ---------------------------------------------------------------

std::uint32_t Ipv6Protocol::flow_label(const IpAddr& src, const IpAddr& dst, std::uint8_t next_header,
                                       const Msg& payload, FlowMemo* memo) const {
  // RFC 6437 3: one label per transport flow, uniformly spread and hard to
  // guess from outside: the addresses, protocol and (TCP, UDP) ports mixed
  // under a key drawn at start-up.
  std::array<std::byte, 40> in{};
  if (next_header == kTcp || next_header == kUdp) (void)payload.copy_out(0, std::span(in).subspan(33, 4));
  std::uint32_t ports;
  std::memcpy(&ports, in.data() + 33, 4);
  // A session's destination and next header never change: the same source
  // and ports are the same flow.
  if (memo != nullptr && memo->label != 0 && memo->ports == ports && memo->src == src) return memo->label;
  std::memcpy(in.data(), src.bytes().data(), 16);
  std::memcpy(in.data() + 16, dst.bytes().data(), 16);
  in[32] = std::byte{next_header};
  std::uint32_t label = static_cast<std::uint32_t>(siphash24(flow_key_, in)) & 0xfffff;
  if (label == 0) label = 1;  // 0 says "no label"
  if (memo != nullptr) *memo = FlowMemo{src, ports, label};
  return label;
}

Status Ipv6Protocol::send(const IpAddr& dst, std::uint8_t next_header, Msg payload, const SendOptions& opts) {
  if (payload.size() > Header::kMaxPayload) {
    ++drop_tx_too_large_;
    return Errc::too_large;
  }
  // What a port said of a received message is void on the way down; what a
  // transport asks of the port (offloads_ offered it) rides on.
  payload.offload().flags &= Offload::tx_udp_csum | Offload::tx_tcp_csum | Offload::tx_tcp_seg;
  const bool ours = is_ours(dst);
  const bool to_self = ours && delivered_here(dst, next_header, payload);
  std::optional<IpAddr> src = opts.src;
  if (!src) src = ours ? std::optional<IpAddr>(dst) : source_for(dst);
  if (!src) {
    ++drop_no_source_;
    return Errc::bad_state;
  }
  Header h;
  h.traffic_class = payload.offload().tos;
  h.flow_label = flow_label(*src, dst, next_header, payload, opts.memo);
  h.next_header = next_header;
  // RFC 3542 6.3 / RFC 4861: multicast goes one hop unless asked otherwise.
  if (opts.hop_limit) {
    h.hop_limit = *opts.hop_limit;
  } else if (payload.offload().hop_limit != 0) {
    h.hop_limit = payload.offload().hop_limit;  // the socket's (IPV6_UNICAST_HOPS)
  } else {
    h.hop_limit = is_multicast(dst) ? 1 : config_.hop_limit;
  }
  h.src = *src;
  h.dst = dst;

  if (to_self) {
    if (loopback_.size() >= config_.loopback_queue) {
      ++drop_loopback_full_;
      return Errc::would_block;
    }
    // No port on this path: finish what the transport left to one. A
    // segment meant to be cut is delivered whole (TCP takes any length).
    if (Status st = finish_requested_checksum(payload); !st) return st;
    payload.offload().flags &= static_cast<std::uint8_t>(~Offload::tx_tcp_seg);
    payload.offload().seg_size = 0;
    h.payload_length = static_cast<std::uint16_t>(payload.size());
    Result<std::span<std::byte>> room = payload.push(Header::kSize);
    if (!room) return room.status();
    h.write(room->first<Header::kSize>());
    loopback_.push_back(std::move(payload));
    ++tx_loopback_;
    if (!loopback_timer_.armed()) loopback_timer_.arm(timers_.clock().now());
    return {};
  }

  const std::optional<IpAddr> next_hop = next_hop_for(dst);
  if (!next_hop) {
    ++drop_no_route_;
    return Errc::no_route;
  }
  const std::size_t mtu = path_mtu(dst);
  // Segmentation offload: one packet whose TCP segment the port cuts into
  // path-MTU-sized ones, each behind a copy of this header with its own
  // payload length (TCP sized the segments by the path MTU).
  const bool cut_below = payload.offload().has(Offload::tx_tcp_seg);
  if (payload.size() + Header::kSize <= mtu || cut_below) {
    if (cut_below && !offloads_.tx_tcp_seg) {
      ++drop_tx_too_large_;
      return Errc::too_large;
    }
    h.payload_length = static_cast<std::uint16_t>(payload.size());
    Result<std::span<std::byte>> room = payload.push(Header::kSize);
    if (!room) return room.status();
    h.write(room->first<Header::kSize>());
    if ((payload.offload().flags & Offload::kTxMask) != 0) payload.offload().l3_len = Header::kSize;
    return emit(*next_hop, std::move(payload));
  }
  if (opts.dont_fragment) {
    ++drop_tx_too_large_;
    return Errc::too_large;
  }
  // A transport checksum asked of the port covers the whole packet, which
  // no fragment carries whole: finish it here before cutting.
  if (Status st = finish_requested_checksum(payload); !st) return st;
  // RFC 8200 4.5: the source cuts the packet, each piece behind the IPv6
  // header and a fragment header, all but the last a multiple of 8.
  const std::size_t chunk = (mtu - Header::kSize - FragmentHeader::kSize) / 8 * 8;
  FragmentHeader f;
  f.next_header = next_header;
  f.id = next_id_++;
  h.next_header = kFragment;
  std::size_t offset = 0;
  while (!payload.empty()) {
    Msg piece;
    const bool more = payload.size() > chunk;
    if (more) {
      Result<Msg> rest = payload.split(chunk);
      if (!rest) return rest.status();
      piece = std::move(payload);
      payload = std::move(*rest);
    } else {
      piece = std::move(payload);
      payload = Msg();
    }
    f.offset_units = static_cast<std::uint16_t>(offset / 8);
    f.more = more;
    offset += piece.size();
    h.payload_length = static_cast<std::uint16_t>(piece.size() + FragmentHeader::kSize);
    Result<std::span<std::byte>> room = piece.push(Header::kSize + FragmentHeader::kSize);
    if (!room) return room.status();
    h.write(room->first<Header::kSize>());
    f.write(room->subspan(Header::kSize).first<FragmentHeader::kSize>());
    ++tx_fragments_;
    if (Status st = emit(*next_hop, std::move(piece)); !st) return st;
  }
  return {};
}

Status Ipv6Protocol::emit(const IpAddr& next_hop, Msg packet) {
  Status st = resolver_ != nullptr ? resolver_->send_to(next_hop, std::move(packet))
                                   : link_session_->push(std::move(packet));
  if (st) {
    ++tx_packets_;
  } else {
    ++drop_tx_link_;
  }
  return st;
}

Status Ipv6Protocol::finish_requested_checksum(Msg& payload) {
  if ((payload.offload().flags & (Offload::tx_udp_csum | Offload::tx_tcp_csum)) == 0) return {};
  if (Status st = csum::finish_requested(payload); !st) return st;
  ++tx_l4_csum_resolved_;
  return {};
}

bool Ipv6Protocol::delivered_here(const IpAddr& dst, std::uint8_t next_header, Msg& payload) {
  if (!config_.hairpin || (next_header != kTcp && next_header != kUdp) || icmpv6::is_link_local(dst)) return true;
  if (transport_claims(passive_.upper(ProtoKey{next_header}), dst, next_header == kTcp, payload)) return true;
  ++tx_hairpin_;
  return false;
}

void Ipv6Protocol::drain_loopback() {
  std::deque<Msg> batch;
  batch.swap(loopback_);
  for (Msg& m : batch) (void)receive(nullptr, std::move(m));
}

// ---- errors and control -------------------------------------------------

Status Ipv6Protocol::deliver_error(const ctl::NetError& err) {
  Protocol* owner = passive_.upper(ProtoKey{err.protocol});
  if (owner == nullptr) {
    if (SessionRef* s = active_.find(Key{err.remote.bytes(), err.protocol})) owner = (*s)->upper();
  }
  if (owner == nullptr) {
    ++drop_error_no_owner_;
    return Errc::not_found;
  }
  ++errors_delivered_;
  return owner->control(ctl::DeliverError{err}).status();
}

Result<ControlReply> Ipv6Protocol::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{link_mtu() - Header::kSize};
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) {
    Result<std::size_t> room = link_.control(ctl::GetHeaderRoom{});
    return ControlReply{(room ? *room : std::size_t{0}) + Header::kSize};
  }
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) {
    // The address a wildcard stands for: the first global one, else the
    // link-local one.
    for (const IpCidr& c : addrs_) {
      if (!icmpv6::is_link_local(c.addr)) return ControlReply{Participant{c.addr}};
    }
    if (!addrs_.empty()) return ControlReply{Participant{addrs_.front().addr}};
    return Errc::not_found;
  }
  if (std::holds_alternative<ctl::GetOffloads>(query)) return ControlReply{offloads_};
  if (std::holds_alternative<ctl::GetChunkSource>(query)) return link_.control_any(query);
  return Protocol::control_any(query);
}

// ---- graph kind ---------------------------------------------------------

void register_ipv6(Registry& registry) {
  registry.add(
      KindSpec("ipv6", "IPv6 host: extension headers, reassembly, fragmentation, path MTU, on-link/router routing")
          .with_below(1, 2)
          .with_option(OptionSpec::ip_cidrs("addr", "our IPv6 addresses with their on-link prefixes"))
          .with_option(OptionSpec::ip("gw", "default router (link-local or on a prefix of addr)"))
          .with_option(OptionSpec::boolean("hairpin", "addr is shared (filterd's nodes): what another stack owns "
                                                      "goes out through the link")
                           .defaults_to("off"))
          .with_option(OptionSpec::boolean("ra", "take routers, prefixes, addresses (SLAAC), MTU and hop limit from "
                                                 "Router Advertisements")
                           .defaults_to("on"))
          .with_option(OptionSpec::boolean("link_local", "a link-local address from the link's MAC").defaults_to("on"))
          .with_option(OptionSpec::integer("hop_limit", 1, 255, "hop limit of sent unicast packets").defaults_to("64"))
          .with_option(OptionSpec::integer("mtu", 1280, 65575, "link MTU override (IPv6 header included)"))
          .with_option(OptionSpec::integer("pmtu_timeout", 1, 86400, "seconds a lowered path MTU is kept")
                           .defaults_to("600"))
          .with_option(OptionSpec::integer("reasm_timeout", 1, 3600, "seconds to complete a packet").defaults_to("60"))
          .with_option(OptionSpec::size("reasm_max_datagram", 1280, 65575, "largest packet reassembled")
                           .defaults_to("65575"))
          .with_option(OptionSpec::size("reasm_mem", 0, std::uint64_t{1} << 32, "bytes all reassemblies may hold")
                           .defaults_to("4m"))
          .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
            if (args.loop == nullptr) {
              throw std::invalid_argument("ipv6 needs an event loop for its timers: pass one to Graph::build");
            }
            NextHopResolver* resolver = resolver_below(args.below, "nd");
            const Options& o = args.options;
            Config c;
            if (o.has("addr")) c.addrs = o.get_ip_cidrs("addr");
            if (o.has("gw")) c.gw = o.get_ip("gw");
            c.link_local = o.get_bool("link_local");
            c.hop_limit = static_cast<std::uint8_t>(o.get_int("hop_limit"));
            if (o.has("mtu")) c.mtu = static_cast<std::size_t>(o.get_int("mtu"));
            c.pmtu_timeout = std::chrono::seconds(o.get_int("pmtu_timeout"));
            c.reasm_timeout = std::chrono::seconds(o.get_int("reasm_timeout"));
            c.reasm_max_datagram = static_cast<std::size_t>(o.get_size("reasm_max_datagram"));
            c.reasm_mem = static_cast<std::size_t>(o.get_size("reasm_mem"));
            c.hairpin = o.get_bool("hairpin");
            c.accept_ra = o.get_bool("ra");
            return std::make_unique<Ipv6Protocol>(args.name, *args.below[0], resolver, args.loop->timers(), c);
          }));
}

}  // namespace xk::ipv6

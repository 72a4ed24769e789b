#include "xk/protocols/nd.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/ipv6_wire.hpp"

namespace xk::nd {

namespace {

constexpr std::uint32_t kEtherTypeIpv6 = 0x86dd;
// RFC 3810 5.2.12 record types: a group joined with no source filter is
// EXCLUDE {} -- reported as a change when joining, as a state in answer to
// a query.
constexpr std::uint8_t kModeIsExclude = 2;
constexpr std::uint8_t kChangeToExclude = 4;

IpAddr mldv2_routers() noexcept {  // ff02::16
  IpAddr::Bytes b{};
  b[0] = 0xff;
  b[1] = 0x02;
  b[15] = 0x16;
  return IpAddr::from_bytes(b);
}

IpAddr target_of(std::span<const std::byte> m) {
  IpAddr::Bytes b;
  std::memcpy(b.data(), m.data() + icmpv6::Header::kSize, 16);
  return IpAddr::from_bytes(b);
}

}  // namespace

struct NdProtocol::Entry {
  Entry(NdProtocol& nd, const IpAddr& addr, State s)
      : ip(addr), state(s), timer(nd.loop_.timers(), [n = &nd, e = this] { n->on_timer(*e); }) {}

  IpAddr ip;
  MacAddr mac;
  State state;
  bool router = false;
  unsigned probes = 0;
  std::optional<IpAddr> source_hint;  // the source of the first packet queued
  std::deque<Msg> pending;
  SessionRef data;  // eth (mac, 0x86dd)
  Timer timer;
};

Result<StaticEntry> parse_static_entry(std::string_view text) {
  const std::size_t at = text.find('@');
  if (at == std::string_view::npos) return Errc::invalid_argument;
  Result<IpAddr> ip = parse_ip(text.substr(0, at));
  Result<MacAddr> mac = parse_mac(text.substr(at + 1));
  if (!ip || !mac || ip->is_v4() || ipv6::is_multicast(*ip) || ip->is_unspecified()) return Errc::invalid_argument;
  if (eth::is_multicast(*mac) || eth::is_zero(*mac)) return Errc::invalid_argument;
  return StaticEntry{*ip, *mac};
}

NdProtocol::NdProtocol(std::string name, Protocol& below, EventLoop& loop, Config config)
    : Protocol(std::move(name), "nd", {&below}),
      below_(below),
      loop_(loop),
      config_(std::move(config)),
      rx_solicits_(counters().add("rx_solicits")),
      rx_adverts_(counters().add("rx_adverts")),
      rx_router_adverts_(counters().add("rx_router_adverts", "router advertisements taken")),
      tx_router_solicits_(counters().add("tx_router_solicits", "router solicitations (RFC 4861 6.3.7)")),
      rx_other_(counters().add("rx_other", "router solicitations, redirects, MLD queries")),
      tx_solicits_(counters().add("tx_solicits")),
      tx_adverts_(counters().add("tx_adverts")),
      tx_reports_(counters().add("tx_reports", "MLDv2 reports")),
      tx_data_(counters().add("tx_data", "IPv6 packets handed to eth")),
      drop_hop_limit_(counters().add("drop_hop_limit", "hop limit not 255: from off-link (RFC 4861 7.1)")),
      drop_fragmented_(counters().add("drop_fragmented", "ND in fragments (RFC 6980)")),
      drop_malformed_(counters().add("drop_malformed", "short, bad code, options or addresses")),
      drop_not_for_us_(counters().add("drop_not_for_us", "solicitations for addresses not ours")),
      dad_ok_(counters().add("dad_ok", "addresses that passed their duplicate check")),
      dad_duplicate_(counters().add("dad_duplicate", "addresses another node has: never used")),
      dup_addr_claimed_(counters().add("dup_addr_claimed", "advertisements for an address of ours")),
      cache_adds_(counters().add("cache_adds")),
      cache_updates_(counters().add("cache_updates", "link address learned or changed")),
      cache_expired_(counters().add("cache_expired", "unused STALE entries forgotten")),
      cache_evictions_(counters().add("cache_evictions", "entries removed at max_entries")),
      static_conflicts_(counters().add("static_conflicts", "advertisement disagreeing with a static entry")),
      resolve_failed_(counters().add("resolve_failed", "INCOMPLETE entries with no answer")),
      probe_failed_(counters().add("probe_failed", "neighbours that stopped answering (PROBE)")),
      drop_pending_full_(counters().add("drop_pending_full", "packet refused: queue full")),
      drop_unresolved_(counters().add("drop_unresolved", "queued packets dropped when resolution failed")),
      drop_no_source_(counters().add("drop_no_source", "no usable address to solicit from")),
      drop_tx_error_(counters().add("drop_tx_error", "eth refused a packet")),
      drop_not_ipv6_(counters().add("drop_not_ipv6", "packets for a next hop of another family")),
      drop_data_no_listener_(counters().add("drop_data_no_listener", "IPv6 frame with nobody enabled")),
      sink_(this->name() + ".data", drop_data_no_listener_),
      rs_timer_(loop.timers(), [this] { solicit_routers(); }) {
  Result<Participant> local = below.control(ctl::GetLocalAddr{});
  Result<MacAddr> mac = local ? local->peek<MacAddr>() : Result<MacAddr>(local.error());
  if (!mac) throw std::invalid_argument("'" + below.name() + "' has no MAC address (nd needs eth below)");
  mac_ = *mac;
  // RFC 4861 6.3.2: the reachable time is drawn from 0.5-1.5x the base.
  std::random_device rd;
  std::uniform_real_distribution<double> factor(0.5, 1.5);
  std::mt19937 gen(rd());
  reachable_ = std::chrono::duration_cast<Duration>(config_.reachable * factor(gen));
  if (Status st = join(icmpv6::all_nodes()); !st) {
    throw std::invalid_argument("'" + below.name() + "' cannot join the all-nodes group: " + to_string(st.error()));
  }
  for (const StaticEntry& se : config_.statics) {
    Entry& e = create(se.ip, State::permanent);
    e.mac = se.mac;
  }
}

NdProtocol::~NdProtocol() {
  std::vector<Entry*> all;
  entries_.for_each([&](const IpKey&, std::unique_ptr<Entry>& e) { all.push_back(e.get()); });
  for (Entry* e : all) {
    e->pending.clear();
    if (e->data) (void)e->data->close();
  }
  entries_.clear();
  for (auto& [m, s] : group_sessions_) (void)s->close();
  group_sessions_.clear();
  locals_.clear();
}

// ---- our addresses ----------------------------------------------------------

NdProtocol::Local* NdProtocol::local(const IpAddr& a) noexcept {
  auto it = std::find_if(locals_.begin(), locals_.end(), [&](const Local& l) { return l.addr == a; });
  return it == locals_.end() ? nullptr : &*it;
}

const NdProtocol::Local* NdProtocol::local(const IpAddr& a) const noexcept {
  auto it = std::find_if(locals_.begin(), locals_.end(), [&](const Local& l) { return l.addr == a; });
  return it == locals_.end() ? nullptr : &*it;
}

bool NdProtocol::address_usable(const IpAddr& addr) const {
  const Local* l = local(addr);
  return l != nullptr && l->state == AddrState::preferred;
}

std::optional<NdProtocol::AddrState> NdProtocol::address_state(const IpAddr& addr) const {
  const Local* l = local(addr);
  if (l == nullptr) return std::nullopt;
  return l->state;
}

void NdProtocol::add_local_address(const IpAddr& addr) {
  if (addr.is_v4() || ipv6::is_multicast(addr) || addr.is_unspecified() || local(addr) != nullptr) return;
  // Our own address is not a neighbour's.
  if (Entry* e = find(addr); e != nullptr && e->state != State::permanent) remove(*e);
  const bool check = config_.dad_transmits > 0;
  Local& l = locals_.emplace_back(*this, addr, check ? AddrState::tentative : AddrState::preferred);
  const IpAddr group = icmpv6::solicited_node(addr);
  // RFC 4862 5.4.2: join the solicited-node group before the first probe,
  // so a node checking the same address at the same time is heard.
  if (std::find(groups_.begin(), groups_.end(), group) == groups_.end()) {
    (void)join(group);
    groups_.push_back(group);
    if (config_.mld) (void)send_report(true, {group});
  }
  if (check) {
    dad_step(l);
  } else {
    ++dad_ok_;
  }
}

void NdProtocol::link_up() {
  if (config_.mld && !groups_.empty()) (void)send_report(true, groups_);
  if (router_sink_ != nullptr && !router_heard_) {
    router_solicits_ = 0;
    rs_timer_.cancel();
    solicit_routers();
  }
  for (Local& l : locals_) {
    if (l.state != AddrState::tentative) continue;
    l.dad_sent = 0;
    l.dad_timer.cancel();
    dad_step(l);
  }
}

bool NdProtocol::checks_pending() const noexcept {
  return std::any_of(locals_.begin(), locals_.end(), [](const Local& l) { return l.state == AddrState::tentative; });
}

void NdProtocol::dad_step(Local& l) {
  if (l.state != AddrState::tentative) return;
  if (l.dad_sent == config_.dad_transmits) {
    // RetransTimer after the last probe passed without an answer.
    l.state = AddrState::preferred;
    ++dad_ok_;
    return;
  }
  ++l.dad_sent;
  (void)send_solicit(l.addr, IpAddr{}, false, nullptr);
  l.dad_timer.arm_after(config_.retrans);
}

void NdProtocol::duplicate_found(Local& l) {
  if (l.state == AddrState::duplicate) return;
  // RFC 4862 5.4.5: a tentative address someone else has is never used.
  if (l.state == AddrState::tentative) {
    l.state = AddrState::duplicate;
    ++dad_duplicate_;
  } else {
    ++dup_addr_claimed_;  // in use already: keep it, as RFC 4862 5.4.5 allows
  }
}

Status NdProtocol::join(const IpAddr& group) {
  return below_.control(ctl::JoinLinkGroup{icmpv6::multicast_mac(group)}).status();
}

// ---- cache -------------------------------------------------------------------

NdProtocol::Entry* NdProtocol::find(const IpAddr& ip) const noexcept {
  const std::unique_ptr<Entry>* e = entries_.find(IpKey{ip.bytes()});
  return e == nullptr ? nullptr : e->get();
}

NdProtocol::Entry& NdProtocol::create(const IpAddr& ip, State state) {
  if (state != State::permanent && entries_.size() >= config_.max_entries) {
    // Make room: the first non-permanent entry that is not resolving.
    Entry* victim = nullptr;
    entries_.for_each([&](const IpKey&, std::unique_ptr<Entry>& e) {
      if (victim == nullptr && e->state != State::permanent && e->state != State::incomplete) victim = e.get();
    });
    if (victim != nullptr) {
      ++cache_evictions_;
      remove(*victim);
    }
  }
  auto e = std::make_unique<Entry>(*this, ip, state);
  Entry* raw = e.get();
  entries_.insert(IpKey{ip.bytes()}, std::move(e));
  ++cache_adds_;
  return *raw;
}

void NdProtocol::remove(Entry& e) {
  e.timer.cancel();
  if (!e.pending.empty()) {
    drop_unresolved_.inc(e.pending.size());
    pending_total_ -= e.pending.size();
    e.pending.clear();
  }
  if (e.data) (void)e.data->close();
  entries_.erase(IpKey{e.ip.bytes()});  // destroys e
}

void NdProtocol::set_state(Entry& e, State s) {
  e.state = s;
  e.probes = 0;
  switch (s) {
    case State::reachable: e.timer.arm_after(reachable_); break;
    case State::stale: e.timer.arm_after(config_.stale_timeout); break;
    case State::delay: e.timer.arm_after(config_.delay_first_probe); break;
    case State::incomplete:
    case State::probe: break;  // the caller sends the first solicitation and arms
    case State::permanent: e.timer.cancel(); break;
  }
}

void NdProtocol::learn(Entry& e, const MacAddr& mac) {
  if (e.mac != mac) {
    ++cache_updates_;
    e.mac = mac;
    if (e.data) {
      (void)e.data->close();
      e.data = SessionRef();
    }
  }
}

void NdProtocol::flush(Entry& e) {
  std::deque<Msg> queue;
  queue.swap(e.pending);
  pending_total_ -= queue.size();
  for (Msg& m : queue) (void)transmit(e, std::move(m));
}

void NdProtocol::on_timer(Entry& e) {
  switch (e.state) {
    case State::incomplete:
      if (e.probes >= config_.multicast_solicits) {
        ++resolve_failed_;
        remove(e);
        return;
      }
      ++e.probes;
      (void)send_solicit(e.ip, e.source_hint, false, nullptr);
      e.timer.arm_after(config_.retrans);
      return;
    case State::reachable:
      set_state(e, State::stale);
      return;
    case State::stale:
      ++cache_expired_;
      remove(e);
      return;
    case State::delay:
      set_state(e, State::probe);
      [[fallthrough]];
    case State::probe:
      if (e.probes >= config_.unicast_solicits) {
        ++probe_failed_;
        remove(e);
        return;
      }
      ++e.probes;
      (void)send_solicit(e.ip, std::nullopt, true, &e);
      e.timer.arm_after(config_.retrans);
      return;
    case State::permanent: return;
  }
}

Status NdProtocol::transmit(Entry& e, Msg packet) {
  if (!e.data) {
    Participants parts;
    parts.remote.push(e.mac);
    parts.remote.push(ProtoNum{kEtherTypeIpv6});
    Result<SessionRef> s = below_.open(sink_, parts);
    if (!s) {
      ++drop_tx_error_;
      return s.error();
    }
    e.data = *s;
  }
  SessionRef via = e.data;
  Status st = via->push(std::move(packet));
  if (st) {
    ++tx_data_;
  } else {
    ++drop_tx_error_;
  }
  return st;
}

std::optional<NdProtocol::EntryView> NdProtocol::lookup(const IpAddr& ip) const {
  const Entry* e = find(ip);
  if (e == nullptr) return std::nullopt;
  return EntryView{e->ip, e->mac, e->state, e->pending.size(), e->router};
}

// ---- sending -----------------------------------------------------------------

Status NdProtocol::send_to(const IpAddr& next_hop, Msg packet) {
  if (next_hop.is_v4()) {
    ++drop_not_ipv6_;
    return Errc::unsupported;
  }
  if (ipv6::is_multicast(next_hop)) {
    Status st = send_multicast(next_hop, std::move(packet));
    if (st) ++tx_data_;
    return st;
  }
  Entry* e = find(next_hop);
  if (e == nullptr) {
    e = &create(next_hop, State::incomplete);
    // Solicit from the address the packet comes from (RFC 4861 7.2.2).
    if (packet.size() >= ipv6::Header::kSize) {
      std::array<std::byte, 16> src{};
      (void)packet.copy_out(8, src);
      IpAddr::Bytes b;
      std::memcpy(b.data(), src.data(), 16);
      e->source_hint = IpAddr::from_bytes(b);
    }
    on_timer(*e);  // the first solicitation now, the retries from the timer
  }
  switch (e->state) {
    case State::incomplete: break;
    case State::stale:
      set_state(*e, State::delay);
      return transmit(*e, std::move(packet));
    case State::reachable:
    case State::delay:
    case State::probe:
    case State::permanent: return transmit(*e, std::move(packet));
  }
  if (e->pending.size() >= config_.pending_per_entry || pending_total_ >= config_.pending_total) {
    ++drop_pending_full_;
    return Errc::would_block;
  }
  e->pending.push_back(std::move(packet));
  ++pending_total_;
  return {};
}

std::optional<IpAddr> NdProtocol::solicit_source(const std::optional<IpAddr>& hint) const {
  if (hint && address_usable(*hint)) return hint;
  for (const Local& l : locals_) {
    if (l.state == AddrState::preferred && icmpv6::is_link_local(l.addr)) return l.addr;
  }
  for (const Local& l : locals_) {
    if (l.state == AddrState::preferred) return l.addr;
  }
  return std::nullopt;
}

Msg NdProtocol::packet_of(const IpAddr& src, const IpAddr& dst, std::uint8_t hop_limit, std::vector<std::byte> icmp,
                          bool router_alert) const {
  icmpv6::fill_checksum(icmp, src, dst);
  // RFC 2711 Router Alert in a hop-by-hop header: next header, length 0,
  // the option (type 5, length 2, value 0: MLD), PadN of two bytes.
  constexpr std::array<std::uint8_t, 8> kRouterAlert{ipv6::kIcmpv6, 0, 5, 2, 0, 0, 1, 0};
  const std::size_t ext = router_alert ? kRouterAlert.size() : 0;
  Msg m = Msg::copy_of(icmp);
  Result<std::span<std::byte>> room = m.push(ipv6::Header::kSize + ext);
  if (!room) return Msg();
  ipv6::Header h;
  h.payload_length = static_cast<std::uint16_t>(ext + icmp.size());
  h.next_header = router_alert ? ipv6::kHopByHop : ipv6::kIcmpv6;
  h.hop_limit = hop_limit;
  h.src = src;
  h.dst = dst;
  h.write(room->first<ipv6::Header::kSize>());
  if (router_alert) std::memcpy(room->data() + ipv6::Header::kSize, kRouterAlert.data(), ext);
  return m;
}

Status NdProtocol::send_multicast(const IpAddr& group, Msg packet) {
  const MacAddr mac = icmpv6::multicast_mac(group);
  SessionRef* via = nullptr;
  for (auto& [m, s] : group_sessions_) {
    if (m == mac) via = &s;
  }
  if (via == nullptr) {
    Participants parts;
    parts.remote.push(mac);
    parts.remote.push(ProtoNum{kEtherTypeIpv6});
    Result<SessionRef> s = below_.open(sink_, parts);
    if (!s) {
      ++drop_tx_error_;
      return s.error();
    }
    group_sessions_.emplace_back(mac, *s);
    via = &group_sessions_.back().second;
  }
  SessionRef keep = *via;
  Status st = keep->push(std::move(packet));
  if (!st) ++drop_tx_error_;
  return st;
}

Status NdProtocol::send_solicit(const IpAddr& target, const std::optional<IpAddr>& src_hint, bool unicast,
                                Entry* via) {
  // A duplicate check solicits from :: without our link address (RFC 4862
  // 5.4.2); a resolution from one of ours, with it.
  const bool dad = src_hint && src_hint->is_unspecified();
  std::optional<IpAddr> src = dad ? std::optional<IpAddr>(IpAddr{}) : solicit_source(src_hint);
  if (!src) {
    ++drop_no_source_;
    return Errc::bad_state;
  }
  std::vector<std::byte> m(icmpv6::kNeighborMessageSize + (dad ? 0 : icmpv6::kLinkAddrOptionSize));
  icmpv6::Header h;
  h.type = icmpv6::kNeighborSolicit;
  h.write(std::span(m).first<icmpv6::Header::kSize>());
  std::memcpy(m.data() + icmpv6::Header::kSize, target.bytes().data(), 16);
  if (!dad) {
    icmpv6::write_link_addr_option(std::span(m).subspan(icmpv6::kNeighborMessageSize).first<icmpv6::kLinkAddrOptionSize>(),
                                   icmpv6::kOptSourceLinkAddr, mac_);
  }
  const IpAddr dst = unicast ? target : icmpv6::solicited_node(target);
  Msg packet = packet_of(*src, dst, icmpv6::kNdHopLimit, std::move(m), false);
  Status st = unicast && via != nullptr ? transmit(*via, std::move(packet)) : send_multicast(dst, std::move(packet));
  if (st) ++tx_solicits_;
  return st;
}

Status NdProtocol::send_advert(const IpAddr& target, const IpAddr& dst, bool solicited) {
  std::vector<std::byte> m(icmpv6::kNeighborMessageSize + icmpv6::kLinkAddrOptionSize);
  icmpv6::Header h;
  h.type = icmpv6::kNeighborAdvert;
  h.rest = icmpv6::kNaOverride | (solicited ? icmpv6::kNaSolicited : 0u);
  h.write(std::span(m).first<icmpv6::Header::kSize>());
  std::memcpy(m.data() + icmpv6::Header::kSize, target.bytes().data(), 16);
  icmpv6::write_link_addr_option(std::span(m).subspan(icmpv6::kNeighborMessageSize).first<icmpv6::kLinkAddrOptionSize>(),
                                 icmpv6::kOptTargetLinkAddr, mac_);
  Msg packet = packet_of(target, dst, icmpv6::kNdHopLimit, std::move(m), false);
  Status st = ipv6::is_multicast(dst) ? send_multicast(dst, std::move(packet)) : send_to(dst, std::move(packet));
  if (st) ++tx_adverts_;
  return st;
}

Status NdProtocol::send_report(bool state_change, const std::vector<IpAddr>& groups) {
  // RFC 3810 5.2: from the link-local address, or :: before it has one
  // (its duplicate check still running), hop limit 1, Router Alert.
  IpAddr src;
  for (const Local& l : locals_) {
    if (l.state == AddrState::preferred && icmpv6::is_link_local(l.addr)) src = l.addr;
  }
  std::vector<std::byte> m(8 + groups.size() * 20);
  m[0] = std::byte{icmpv6::kMldv2Report};
  store_be16(m.data() + 6, static_cast<std::uint16_t>(groups.size()));
  std::size_t at = 8;
  for (const IpAddr& g : groups) {
    m[at] = std::byte{state_change ? kChangeToExclude : kModeIsExclude};
    std::memcpy(m.data() + at + 4, g.bytes().data(), 16);
    at += 20;
  }
  const IpAddr dst = mldv2_routers();
  Status st = send_multicast(dst, packet_of(src, dst, 1, std::move(m), true));
  if (st) ++tx_reports_;
  return st;
}

// ---- receiving ---------------------------------------------------------------

Status NdProtocol::receive(const NdPacket& info, std::span<const std::byte> m) {
  if (m.size() < icmpv6::Header::kSize) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  const icmpv6::Header h = icmpv6::Header::read(m.first<icmpv6::Header::kSize>());
  if (h.type == icmpv6::kMldQuery) {
    // RFC 3810 6.2, without the random delay: our groups, now.
    ++rx_other_;
    if (config_.mld && !groups_.empty()) (void)send_report(false, groups_);
    return {};
  }
  // RFC 6980: no ND message in fragments; RFC 4861 6.1 / 7.1: hop limit
  // 255 (nobody forwarded it) and code 0.
  if (info.fragmented) {
    ++drop_fragmented_;
    return Errc::malformed;
  }
  if (info.hop_limit != icmpv6::kNdHopLimit) {
    ++drop_hop_limit_;
    return Errc::malformed;
  }
  if (h.code != 0) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  switch (h.type) {
    case icmpv6::kNeighborSolicit: return handle_solicit(info, m);
    case icmpv6::kNeighborAdvert: return handle_advert(info, m);
    case icmpv6::kRouterAdvert: return handle_router_advert(info, m);
    default: ++rx_other_; return {};
  }
}

Status NdProtocol::handle_solicit(const NdPacket& info, std::span<const std::byte> m) {
  if (m.size() < icmpv6::kNeighborMessageSize) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  const IpAddr target = target_of(m);
  Result<icmpv6::NdOptions> opts = icmpv6::read_nd_options(m.subspan(icmpv6::kNeighborMessageSize));
  const bool from_dad = info.src.is_unspecified();
  // RFC 4861 7.1.1: a target is never multicast; a solicitation from ::
  // goes to a solicited-node group and carries no link address.
  if (!opts || ipv6::is_multicast(target) || target.is_v4() ||
      (from_dad && (info.dst != icmpv6::solicited_node(target) || opts->source_link))) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  ++rx_solicits_;
  Local* l = local(target);
  if (l == nullptr) {
    ++drop_not_for_us_;
    return {};
  }
  if (l->state == AddrState::tentative) {
    // RFC 4862 5.4.3: another node checks the same address: both lose it.
    // A resolution for a tentative address is not answered.
    if (from_dad) duplicate_found(*l);
    return {};
  }
  if (l->state == AddrState::duplicate) return {};
  if (!from_dad && opts->source_link) {
    // RFC 4861 7.2.3: the sender's link address makes or refreshes its
    // entry, as STALE when new or changed.
    Entry* e = find(info.src);
    if (e == nullptr) {
      e = &create(info.src, State::stale);
      e->mac = *opts->source_link;
      set_state(*e, State::stale);
    } else if (e->state == State::permanent) {
      if (e->mac != *opts->source_link) ++static_conflicts_;
    } else if (e->state == State::incomplete) {
      learn(*e, *opts->source_link);
      set_state(*e, State::stale);
      flush(*e);
    } else if (e->mac != *opts->source_link) {
      learn(*e, *opts->source_link);
      set_state(*e, State::stale);
    }
  }
  // A solicitation from :: is answered to all nodes, unsolicited.
  return send_advert(target, from_dad ? icmpv6::all_nodes() : info.src, !from_dad);
}

Status NdProtocol::handle_advert(const NdPacket& info, std::span<const std::byte> m) {
  if (m.size() < icmpv6::kNeighborMessageSize) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  const icmpv6::Header h = icmpv6::Header::read(m.first<icmpv6::Header::kSize>());
  const IpAddr target = target_of(m);
  const bool solicited = (h.rest & icmpv6::kNaSolicited) != 0;
  const bool override_flag = (h.rest & icmpv6::kNaOverride) != 0;
  Result<icmpv6::NdOptions> opts = icmpv6::read_nd_options(m.subspan(icmpv6::kNeighborMessageSize));
  // RFC 4861 7.1.2.
  if (!opts || ipv6::is_multicast(target) || target.is_v4() || (ipv6::is_multicast(info.dst) && solicited)) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  ++rx_adverts_;
  if (Local* l = local(target)) {
    duplicate_found(*l);
    return {};
  }
  Entry* e = find(target);
  if (e == nullptr) return {};  // 7.2.5: no entry, nothing to do
  if (e->state == State::permanent) {
    if (opts->target_link && *opts->target_link != e->mac) ++static_conflicts_;
    return {};
  }
  e->router = (h.rest & icmpv6::kNaRouter) != 0;
  if (e->state == State::incomplete) {
    if (!opts->target_link) return {};
    learn(*e, *opts->target_link);
    set_state(*e, solicited ? State::reachable : State::stale);
    flush(*e);
    return {};
  }
  const bool differs = opts->target_link && *opts->target_link != e->mac;
  if (!override_flag && differs) {
    // 7.2.5: keep what we have, but doubt it.
    if (e->state == State::reachable) set_state(*e, State::stale);
    return {};
  }
  if (differs) learn(*e, *opts->target_link);
  if (solicited) {
    set_state(*e, State::reachable);
  } else if (differs) {
    set_state(*e, State::stale);
  }
  return {};
}

Status NdProtocol::handle_router_advert(const NdPacket& info, std::span<const std::byte> m) {
  // RFC 4861 6.1.2: from a link-local source, at least 16 bytes.
  if (m.size() < icmpv6::kRouterAdvertSize || !icmpv6::is_link_local(info.src)) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  Result<icmpv6::NdOptions> opts = icmpv6::read_nd_options(m.subspan(icmpv6::kRouterAdvertSize));
  if (!opts) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  ++rx_router_adverts_;
  if (opts->source_link) {
    Entry* e = find(info.src);
    if (e == nullptr) {
      e = &create(info.src, State::stale);
      e->mac = *opts->source_link;
      set_state(*e, State::stale);
    } else if (e->state != State::permanent && e->mac != *opts->source_link) {
      learn(*e, *opts->source_link);
      if (e->state == State::incomplete) {
        set_state(*e, State::stale);
        flush(*e);
      } else {
        set_state(*e, State::stale);
      }
    }
    e->router = true;
  }
  if (router_sink_ == nullptr) return {};
  router_heard_ = true;
  rs_timer_.cancel();
  // 6.3.4: cur hop limit, router lifetime; nonzero reachable and retrans
  // times replace ours.
  RouterAdvert ra;
  ra.router = info.src;
  ra.hop_limit = std::to_integer<std::uint8_t>(m[4]);
  ra.lifetime_s = load_be16(m.data() + 6);
  const std::uint32_t reachable_ms = load_be32(m.data() + 8);
  const std::uint32_t retrans_ms = load_be32(m.data() + 12);
  if (reachable_ms != 0 && reachable_ms <= 3'600'000) {
    std::random_device rd;
    std::mt19937 gen(rd());
    std::uniform_real_distribution<double> factor(0.5, 1.5);
    reachable_ = std::chrono::duration_cast<Duration>(std::chrono::milliseconds(reachable_ms) * factor(gen));
  }
  if (retrans_ms != 0) config_.retrans = std::chrono::milliseconds(std::max<std::uint32_t>(retrans_ms, 10));
  ra.mtu = opts->mtu;
  for (const icmpv6::PrefixInfo& p : opts->prefixes) {
    ra.prefixes.push_back({p.prefix, p.length, p.on_link, p.autonomous, p.valid_lifetime, p.preferred_lifetime});
  }
  router_sink_->router_advert(ra);
  return {};
}

void NdProtocol::set_router_sink(RouterSink* sink) {
  router_sink_ = sink;
  router_solicits_ = 0;
  rs_timer_.cancel();
  if (sink == nullptr || router_heard_) return;
  // MAX_RTR_SOLICITATION_DELAY: hosts starting together do not all ask at once.
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<int> ms(0, 1000);
  rs_timer_.arm_after(std::chrono::milliseconds(ms(gen)));
}

// RFC 4861 6.3.7: to all-routers, from our link-local address with our link
// address, or from :: without it while no address is usable yet.
void NdProtocol::solicit_routers() {
  if (router_sink_ == nullptr || router_heard_ || router_solicits_ >= 3) return;
  std::optional<IpAddr> src = solicit_source(std::nullopt);
  if (src && !icmpv6::is_link_local(*src)) src.reset();
  std::vector<std::byte> m(icmpv6::kRouterSolicitSize + (src ? icmpv6::kLinkAddrOptionSize : 0));
  icmpv6::Header h;
  h.type = icmpv6::kRouterSolicit;
  h.write(std::span(m).first<icmpv6::Header::kSize>());
  if (src) {
    icmpv6::write_link_addr_option(std::span(m).subspan(icmpv6::kRouterSolicitSize).first<icmpv6::kLinkAddrOptionSize>(),
                                   icmpv6::kOptSourceLinkAddr, mac_);
  }
  const IpAddr all_routers = *parse_ip("ff02::2");
  if (send_multicast(all_routers, packet_of(src.value_or(IpAddr{}), all_routers, icmpv6::kNdHopLimit, std::move(m), false))) {
    ++tx_router_solicits_;
  }
  ++router_solicits_;
  if (router_solicits_ < 3) rs_timer_.arm_after(std::chrono::seconds(4));  // RTR_SOLICITATION_INTERVAL
}

// ---- graph kind ----------------------------------------------------------------

void register_nd(Registry& registry) {
  registry.add(
      KindSpec("nd", "IPv6 Neighbor Discovery (RFC 4861) with NUD, DAD and MLDv2 reports: ipv6's resolver on eth")
          .with_below(1, 1)
          .with_option(OptionSpec::integer("dad", 0, 10, "duplicate-address probes per address (0: none)")
                           .defaults_to("1"))
          .with_option(OptionSpec::integer("retrans_ms", 10, 60000, "between solicitations").defaults_to("1000"))
          .with_option(OptionSpec::integer("reachable_ms", 100, 3600000, "base reachable time").defaults_to("30000"))
          .with_option(OptionSpec::integer("stale_timeout", 1, 86400, "seconds an unused STALE entry is kept")
                           .defaults_to("600"))
          .with_option(OptionSpec::integer("pending", 0, 100000, "packets queued per unresolved neighbour")
                           .defaults_to("64"))
          .with_option(OptionSpec::integer("pending_total", 0, 1000000, "packets queued in all").defaults_to("256"))
          .with_option(OptionSpec::integer("max_entries", 1, 1000000, "neighbour entries").defaults_to("1024"))
          .with_option(OptionSpec::list("static", "permanent entries ip@mac"))
          .with_option(OptionSpec::boolean("mld", "MLDv2 reports for our groups").defaults_to("on"))
          .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
            if (args.loop == nullptr) {
              throw std::invalid_argument("nd needs an event loop for its timers: pass one to Graph::build");
            }
            const Options& o = args.options;
            NdConfig c;
            c.dad_transmits = static_cast<unsigned>(o.get_int("dad"));
            c.retrans = std::chrono::milliseconds(o.get_int("retrans_ms"));
            c.reachable = std::chrono::milliseconds(o.get_int("reachable_ms"));
            c.stale_timeout = std::chrono::seconds(o.get_int("stale_timeout"));
            c.pending_per_entry = static_cast<std::size_t>(o.get_int("pending"));
            c.pending_total = static_cast<std::size_t>(o.get_int("pending_total"));
            c.max_entries = static_cast<std::size_t>(o.get_int("max_entries"));
            c.mld = o.get_bool("mld");
            if (o.has("static")) {
              for (const std::string& s : o.get_list("static")) {
                Result<StaticEntry> se = parse_static_entry(s);
                if (!se) throw std::invalid_argument("static: '" + s + "' is not ipv6@mac");
                c.statics.push_back(*se);
              }
            }
            return std::make_unique<NdProtocol>(args.name, *args.below[0], *args.loop, c);
          }));
}

}  // namespace xk::nd

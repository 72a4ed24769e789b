#include "xk/protocols/eth.hpp"

#include <algorithm>
#include <stdexcept>

namespace xk::eth {

namespace {

Participant mac_part(const MacAddr& m) {
  Participant p;
  p.push(m);
  return p;
}

}  // namespace

// ---- session ------------------------------------------------------------

EthSession::EthSession(EthProtocol& proto, Protocol* upper, MacAddr remote, std::uint16_t type, SessionRef lower)
    : Session(proto, upper), proto_(proto), remote_(remote), type_(type), lower_(std::move(lower)) {}

Status EthSession::push(Msg msg) { return proto_.transmit(*this, std::move(msg)); }

Status EthSession::pop(Session&, Msg msg) {
  if (upper() == nullptr) return Errc::closed;
  return upper()->demux(*this, std::move(msg));
}

Status EthSession::close() {
  if (users_ == 0) return Errc::closed;
  // Shared by every open of the same key: the last close makes the protocol
  // forget it; the callers' references keep it alive until they let go.
  if (--users_ == 0) proto_.active_.erase(EthProtocol::Key{remote_, type_});
  return {};
}

Result<ControlReply> EthSession::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetPeerAddr>(query)) return ControlReply{mac_part(remote_)};
  return proto_.control_any(query);
}

// ---- protocol -----------------------------------------------------------

EthProtocol::EthProtocol(std::string name, Protocol& below, Config config)
    : Protocol(std::move(name), "eth", {&below}),
      below_(below),
      config_(config),
      rx_frames_(counters().add("rx_frames", "delivered to an upper protocol")),
      tx_frames_(counters().add("tx_frames")),
      tx_padded_(counters().add("tx_padded", "sent frames padded to 60 bytes")),
      rx_vlan_(counters().add("rx_vlan", "received with an 802.1Q/802.1ad tag (skipped)")),
      rx_multicast_(counters().add("rx_multicast", "accepted for a broadcast or joined group")),
      drop_truncated_(counters().add("drop_truncated", "shorter than the header (and tags)")),
      drop_not_for_us_(counters().add("drop_not_for_us", "destination neither ours, broadcast nor joined")),
      drop_bad_src_(counters().add("drop_bad_src", "group address as source")),
      drop_llc_(counters().add("drop_llc", "802.3 length field instead of an EtherType")),
      drop_too_many_tags_(counters().add("drop_too_many_tags", "more than two VLAN tags")),
      drop_too_big_(counters().add("drop_too_big", "send longer than the driver's MTU")),
      drop_session_limit_(counters().add("drop_session_limit", "passive open refused: max_sessions reached")) {
  if (config_.mac) {
    mac_ = *config_.mac;
  } else {
    Result<Participant> local = below.control(ctl::GetLocalAddr{});
    Result<MacAddr> m = local ? local->peek<MacAddr>() : Result<MacAddr>(local.error());
    if (!m) throw std::invalid_argument("no mac= given and driver '" + below.name() + "' has no MAC address");
    mac_ = *m;
  }
  if (is_multicast(mac_)) throw std::invalid_argument("mac " + to_string(mac_) + " is a group address");
  Result<std::size_t> mtu = below.control(ctl::GetMtu{});
  driver_mtu_ = mtu ? *mtu : 1514;
  Participants none;
  Result<SessionRef> s = below.open(*this, none);
  if (!s) throw std::invalid_argument("cannot open a session on '" + below.name() + "': " + to_string(s.error()));
  lower_ = *s;
  Participants none2;
  if (Status st = below.open_enable(*this, none2); !st) {
    throw std::invalid_argument("driver '" + below.name() + "' refused us as receiver: " + to_string(st.error()));
  }
  enabled_ = true;
}

EthProtocol::~EthProtocol() {
  if (enabled_) {
    Participants none;
    (void)below_.open_disable(*this, none);
  }
  // Sessions still held by others stay valid objects; we just forget them.
  active_.clear();
}

Result<SessionRef> EthProtocol::open(Protocol& upper, Participants& parts) {
  Result<ProtoNum> type = parts.remote.peek<ProtoNum>();
  if (!type) return type.error();
  if (type->value < kMinEtherType || type->value > 0xffff || type->value == kTypeVlan ||
      type->value == kTypeQinQ) {
    return Errc::invalid_argument;
  }
  (void)parts.remote.pop<ProtoNum>();
  Result<MacAddr> dst = parts.remote.pop<MacAddr>();
  if (!dst) {
    parts.remote.push(*type);  // leave the stack as we found it
    return dst.error();
  }
  Key key{*dst, static_cast<std::uint16_t>(type->value)};
  if (SessionRef* existing = active_.find(key)) {
    auto* s = static_cast<EthSession*>(existing->get());
    ++s->users_;
    return *existing;
  }
  SessionRef s = make_ref<EthSession>(*this, &upper, key.remote, key.type, lower_);
  active_.insert(key, s);
  return s;
}

Status EthProtocol::open_enable(Protocol& upper, Participants& parts) {
  Result<ProtoNum> type = parts.local.pop<ProtoNum>();
  if (!type) return type.error();
  if (type->value < kMinEtherType || type->value > 0xffff) return Errc::invalid_argument;
  return passive_.enable(TypeKey{static_cast<std::uint16_t>(type->value)}, upper);
}

Status EthProtocol::open_disable(Protocol& upper, Participants& parts) {
  Result<ProtoNum> type = parts.local.pop<ProtoNum>();
  if (!type) return type.error();
  if (type->value > 0xffff) return Errc::invalid_argument;
  return passive_.disable(TypeKey{static_cast<std::uint16_t>(type->value)}, upper);
}

Status EthProtocol::join_multicast(MacAddr group) {
  if (!is_multicast(group) || is_broadcast(group)) return Errc::invalid_argument;
  for (Group& g : groups_) {
    if (g.mac == group) {
      ++g.joins;
      return {};
    }
  }
  groups_.push_back(Group{group, 1});
  return {};
}

Status EthProtocol::leave_multicast(MacAddr group) {
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.mac == group; });
  if (it == groups_.end()) return Errc::not_found;
  if (--it->joins == 0) groups_.erase(it);
  return {};
}

bool EthProtocol::accepts(const MacAddr& dst) const noexcept {
  if (dst == mac_ || is_broadcast(dst)) return true;
  if (!is_multicast(dst)) return false;
  return std::any_of(groups_.begin(), groups_.end(), [&](const Group& g) { return g.mac == dst; });
}

Status EthProtocol::demux(Session& lower, Msg msg) {
  Result<std::span<const std::byte>> raw = msg.pop(Header::kSize);
  if (!raw) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  Header h = Header::read(raw->first<Header::kSize>());
  if (!accepts(h.dst)) {
    ++drop_not_for_us_;
    return Errc::not_found;
  }
  // IEEE 802.3 clause 3.2.3: a source address is always an individual one.
  if (is_multicast(h.src)) {
    ++drop_bad_src_;
    return Errc::malformed;
  }
  // 802.1Q / 802.1ad: we are not VLAN-aware, so a tag (or a service tag and
  // a customer tag) is skipped and the inner type used.
  std::uint16_t type = h.type;
  unsigned tags = 0;
  while (type == kTypeVlan || type == kTypeQinQ) {
    if (++tags > 2) {
      ++drop_too_many_tags_;
      return Errc::malformed;
    }
    Result<std::span<const std::byte>> tag = msg.pop(VlanTag::kSize);
    if (!tag) {
      ++drop_truncated_;
      return Errc::malformed;
    }
    type = VlanTag::read(tag->first<VlanTag::kSize>()).type;
  }
  if (tags > 0) ++rx_vlan_;
  if (type < kMinEtherType) {
    ++drop_llc_;
    return Errc::malformed;
  }
  if (is_multicast(h.dst)) ++rx_multicast_;

  // Padding (to 60 bytes) is left on: only the upper layer knows its length.
  Key key{h.src, type};
  Protocol* listener = passive_.upper(TypeKey{type});
  if (SessionRef* found = active_.find(key)) {
    SessionRef keep = *found;  // the upcall may close the session
    auto& s = static_cast<EthSession&>(*keep);
    if (listener != nullptr && listener != s.upper()) {
      // Opened by a protocol that only sends this type (arp for ipv4): the
      // one that enabled the type receives it from now on.
      Protocol* previous = s.upper();
      Protocol* upper = listener;
      s.set_upper(upper);
      Participants parts;
      parts.remote.push(h.src);
      parts.remote.push(ProtoNum{type});
      parts.local.push(mac_);
      parts.local.push(ProtoNum{type});
      if (Status st = upper->open_done(*this, s, parts); !st) {
        s.set_upper(previous);
        ++drops_no_session();
        return st;
      }
      ++s.users_;
    }
    return deliver(s, lower, std::move(msg));
  }
  if (listener != nullptr) {
    if (active_.size() >= config_.max_sessions) {
      ++drop_session_limit_;
      return Errc::no_memory;
    }
    SessionRef s = make_ref<EthSession>(*this, listener, h.src, type, lower_);
    active_.insert(key, s);
    Participants parts;
    parts.remote.push(h.src);
    parts.remote.push(ProtoNum{type});
    parts.local.push(mac_);
    parts.local.push(ProtoNum{type});
    if (Status st = listener->open_done(*this, *s, parts); !st) {
      active_.erase(key);
      ++drops_no_session();
      return st;
    }
    return deliver(static_cast<EthSession&>(*s), lower, std::move(msg));
  }
  ++drops_no_session();
  return Errc::not_found;
}

Status EthProtocol::deliver(EthSession& s, Session& lower, Msg msg) {
  ++rx_frames_;
  return s.pop(lower, std::move(msg));
}

Status EthProtocol::transmit(EthSession& s, Msg msg) {
  // A segment for the port to cut is larger by design (Offload::tx_tcp_seg).
  if (msg.size() + Header::kSize > driver_mtu_ && !msg.offload().has(Offload::tx_tcp_seg)) {
    ++drop_too_big_;
    return Errc::too_large;
  }
  Result<std::span<std::byte>> room = msg.push(Header::kSize);
  if (!room) return room.status();
  Header{s.remote_, mac_, s.type_}.write(room->first<Header::kSize>());
  // The wire's minimum (IEEE 802.3: 64 bytes with the FCS the NIC adds).
  if (config_.pad && msg.size() < kMinFrame) {
    static constexpr std::byte kZeros[kMinFrame] = {};
    if (Status st = msg.append(std::span<const std::byte>(kZeros, kMinFrame - msg.size())); !st) return st;
    ++tx_padded_;
  }
  ++tx_frames_;
  return s.lower_->push(std::move(msg));
}

Result<ControlReply> EthProtocol::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) {
    return ControlReply{driver_mtu_ > Header::kSize ? driver_mtu_ - Header::kSize : std::size_t{0}};
  }
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) {
    Result<std::size_t> room = below_.control(ctl::GetHeaderRoom{});
    return ControlReply{(room ? *room : std::size_t{0}) + Header::kSize};
  }
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) return ControlReply{mac_part(mac_)};
  if (const auto* join = std::get_if<ctl::JoinLinkGroup>(&query)) {
    if (Status st = join_multicast(join->group); !st) return st.error();
    return ControlReply{std::monostate{}};
  }
  if (std::holds_alternative<ctl::GetOffloads>(query) || std::holds_alternative<ctl::GetChunkSource>(query)) {
    return below_.control_any(query);
  }
  return Protocol::control_any(query);
}

// ---- graph kind ---------------------------------------------------------

void register_eth(Registry& registry) {
  registry.add(KindSpec("eth", "Ethernet II over one driver: MAC filter, 802.1Q skip, EtherType demux")
                   .with_below(1, 1)
                   .with_option(OptionSpec::mac("mac", "our MAC address (default: the driver's)"))
                   .with_option(OptionSpec::boolean("pad", "pad frames shorter than 60 bytes").defaults_to("on"))
                   .with_option(OptionSpec::integer("max_sessions", 1, 1 << 24,
                                                    "sessions a passive open may create (storm bound)")
                                    .defaults_to("4096"))
                   .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     EthProtocol::Config config;
                     if (args.options.has("mac")) config.mac = args.options.get_mac("mac");
                     config.pad = args.options.get_bool("pad");
                     config.max_sessions = static_cast<std::size_t>(args.options.get_int("max_sessions"));
                     return std::make_unique<EthProtocol>(args.name, *args.below[0], config);
                   }));
}

}  // namespace xk::eth

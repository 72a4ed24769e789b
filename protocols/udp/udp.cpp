#include "xk/protocols/udp.hpp"

#include "xk/ip_layers.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "xk/checksum.hpp"
#include "xk/protocols/udp_wire.hpp"

namespace xk::udp {

namespace {

bool computes(ChecksumMode m) noexcept { return m == ChecksumMode::on || m == ChecksumMode::tx_only; }
bool verifies(ChecksumMode m) noexcept { return m == ChecksumMode::on || m == ChecksumMode::rx_only; }

std::uintptr_t key_of(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

// ICMP destination unreachable codes (RFC 792).
constexpr std::uint8_t kCodeProtoUnreachable = 2;
constexpr std::uint8_t kCodePortUnreachable = 3;

}  // namespace

// ---- session ------------------------------------------------------------

UdpSession::UdpSession(UdpProtocol& proto, Protocol* upper, SocketOptions options)
    : Session(proto, upper), proto_(&proto), options_(options) {
  proto.sessions_.insert(UdpProtocol::PtrKey{key_of(this)}, this);
}

UdpSession::~UdpSession() {
  if (proto_ != nullptr) proto_->forget(*this);
}

Status UdpSession::push(Msg msg) {
  if (proto_ == nullptr) return Errc::closed;
  if (!connected_) return Errc::bad_state;
  return proto_->send(*this, std::move(msg), remote_.addr, Port{remote_.port}, nullptr);
}

Status UdpSession::pop(Session& lower, Msg msg) { return receive(lower, std::move(msg), remote_); }

Status UdpSession::close() {
  if (proto_ == nullptr) return Errc::closed;
  SessionRef keep(this);  // the maps may hold the last reference
  proto_->forget(*this);
  proto_ = nullptr;
  rxq_.clear();
  rxq_bytes_ = 0;
  ip_ = nullptr;
  on_readable_ = nullptr;
  return {};
}

Result<ControlReply> UdpSession::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) {
    return ControlReply{Participant{connected_ ? conn_local_ : local_.addr, Port{local_.port}}};
  }
  if (std::holds_alternative<ctl::GetPeerAddr>(query)) {
    if (!connected_) return Errc::bad_state;
    return ControlReply{Participant{remote_.addr, Port{remote_.port}}};
  }
  if (std::holds_alternative<ctl::GetMtu>(query) && ip_) {
    Result<std::size_t> mtu = ip_->control(ctl::GetMtu{});
    if (!mtu) return mtu.error();
    return ControlReply{*mtu > Header::kSize ? *mtu - Header::kSize : std::size_t{0}};
  }
  if (proto_ == nullptr) return Errc::closed;
  return proto_->control_any(query);
}

Status UdpSession::bind(IpAddr addr, Port port) {
  if (proto_ == nullptr) return Errc::closed;
  return proto_->bind_session(*this, addr, port);
}

Status UdpSession::connect(IpAddr addr, Port port) {
  if (proto_ == nullptr) return Errc::closed;
  return proto_->connect_session(*this, addr, port);
}

Status UdpSession::sendto(Msg msg, IpAddr addr, Port port) {
  if (proto_ == nullptr) return Errc::closed;
  return proto_->send(*this, std::move(msg), addr, port, nullptr);
}

Result<Datagram> UdpSession::recvfrom() {
  // A reported error comes before queued data, as with SO_ERROR on Linux.
  if (Errc e = take_error(); e != Errc::ok) return e;
  if (rxq_.empty()) return proto_ == nullptr ? Errc::closed : Errc::would_block;
  Datagram d = std::move(rxq_.front());
  rxq_.pop_front();
  rxq_bytes_ -= d.payload.size();
  return d;
}

Status UdpSession::receive(Session&, Msg payload, Endpoint from) {
  if (proto_ == nullptr) return Errc::closed;
  if (upper() != nullptr) return upper()->demux(*this, std::move(payload));
  if (rxq_.size() >= options_.rcvbuf_datagrams || rxq_bytes_ + payload.size() > options_.rcvbuf_bytes) {
    ++rx_dropped_;
    ++proto_->drop_rcvbuf_full_;
    return Errc::would_block;
  }
  (void)payload.own_if_scarce();  // may wait long: let a scarce port buffer go
  rxq_bytes_ += payload.size();
  rxq_.push_back(Datagram{std::move(payload), from.addr, Port{from.port}});
  if (on_readable_) on_readable_();
  return {};
}

// ---- socket -------------------------------------------------------------

UdpSocket::UdpSocket(UdpProtocol& udp, SocketOptions options)
    : s_(make_ref<UdpSession>(udp, nullptr, options)) {}

UdpSocket& UdpSocket::operator=(UdpSocket&& other) noexcept {
  if (this != &other) {
    (void)close();
    s_ = std::move(other.s_);
  }
  return *this;
}

UdpSocket::~UdpSocket() { (void)close(); }

Status UdpSocket::bind(IpAddr addr, Port port) { return s_ ? s_->bind(addr, port) : Errc::closed; }
Status UdpSocket::connect(IpAddr addr, Port port) { return s_ ? s_->connect(addr, port) : Errc::closed; }
Status UdpSocket::send(Msg msg) { return s_ ? s_->push(std::move(msg)) : Errc::closed; }
Status UdpSocket::send(std::span<const std::byte> bytes) { return send(Msg::copy_of(bytes)); }
Status UdpSocket::sendto(Msg msg, IpAddr addr, Port port) {
  return s_ ? s_->sendto(std::move(msg), addr, port) : Errc::closed;
}
Status UdpSocket::sendto(std::span<const std::byte> bytes, IpAddr addr, Port port) {
  return sendto(Msg::copy_of(bytes), addr, port);
}
Result<Datagram> UdpSocket::recvfrom() { return s_ ? s_->recvfrom() : Result<Datagram>(Errc::closed); }

void UdpSocket::set_on_readable(std::function<void()> fn) {
  if (s_) s_->set_on_readable(std::move(fn));
}

Status UdpSession::set_options(const SocketOptions& options) {
  if (proto_ == nullptr) return Errc::closed;
  if (bound_ && (options.reuse_addr != options_.reuse_addr || options.v6only != options_.v6only)) return Errc::bad_state;
  options_ = options;
  return {};
}

Result<Endpoint> UdpSocket::local_endpoint() const {
  if (!is_open()) return Errc::closed;
  if (!s_->bound()) return Errc::bad_state;
  return s_->local();
}

Result<Endpoint> UdpSocket::remote_endpoint() const {
  if (!is_open()) return Errc::closed;
  if (!s_->connected()) return Errc::bad_state;
  return s_->remote();
}

Status UdpSocket::close() {
  if (!s_) return Errc::closed;
  Status st = s_->is_closed() ? Status() : s_->close();
  s_ = nullptr;
  return st;
}

// ---- protocol -----------------------------------------------------------

UdpProtocol::UdpProtocol(std::string name, std::vector<Protocol*> below, UdpConfig config)
    : Protocol(std::move(name), "udp", std::move(below)),
      config_(config),
      next_ephemeral_(config.ephemeral_min),
      rx_datagrams_(counters().add("rx_datagrams")),
      tx_datagrams_(counters().add("tx_datagrams")),
      rx_no_csum_(counters().add("rx_no_csum", "accepted with checksum 0 (not computed by the sender)")),
      rx_trimmed_(counters().add("rx_trimmed", "IP payload longer than the UDP length: trimmed")),
      drop_truncated_(counters().add("drop_truncated", "shorter than a UDP header")),
      drop_bad_length_(counters().add("drop_bad_length", "length field < 8 or past the IP payload")),
      drop_bad_csum_(counters().add("drop_bad_csum")),
      drop_rcvbuf_full_(counters().add("drop_rcvbuf_full", "a socket's receive queue was full")),
      icmp_errors_(counters().add("icmp_errors", "ICMP errors reported to a socket")),
      icmp_errors_ignored_(counters().add("icmp_errors_ignored", "ICMP errors for no connected socket")),
      rx_csum_by_port_(counters().add("rx_csum_by_port", "checksums the port verified for us")),
      tx_csum_by_port_(counters().add("tx_csum_by_port", "checksums left to the port")),
      drop_v6_no_csum_(counters().add("drop_v6_no_csum", "over IPv6 with checksum 0 (RFC 8200 8.1)")) {
  if (this->below().empty() || this->below().size() > 2) throw std::invalid_argument("udp: one or two IP layers below");
  // The port's checksum offloads, per family as the IP layers report them.
  offloads_ = offloads_of(this->below());
  if (config_.ephemeral_min == 0 || config_.ephemeral_min > config_.ephemeral_max) {
    throw std::invalid_argument("udp: bad ephemeral port range");
  }
  // Take protocol 17 at once, not at the first bind: a host with UDP answers
  // a closed port with port unreachable, not protocol unreachable
  // (RFC 1122 3.2.2.1, 4.1.3.1).
  if (Status st = ensure_enabled(); !st) {
    throw std::invalid_argument(std::string("udp: an IP layer below refused to pass up protocol 17: ") + to_string(st.error()));
  }
}

UdpProtocol::~UdpProtocol() {
  // Sockets may outlive us: they become closed handles.
  std::vector<UdpSession*> live;
  sessions_.for_each([&](const PtrKey&, UdpSession*& s) { live.push_back(s); });
  for (UdpSession* s : live) (void)s->close();
  std::vector<SessionRef> ours;
  ip_by_session_.for_each([&](const PtrKey&, IpPeer& p) {
    if (p.opened_by_us) ours.push_back(p.session);
  });
  ip_by_peer_.clear();
  ip_by_session_.clear();
  for (SessionRef& s : ours) (void)s->close();
  if (enabled_) disable_on_each(*this, below(), kIpProtocol);
}

Status UdpProtocol::ensure_enabled() {
  if (enabled_) return {};
  if (Status st = enable_on_each(*this, below(), kIpProtocol); !st) return st;
  enabled_ = true;
  return {};
}

Result<UdpProtocol::IpPeer*> UdpProtocol::learn(Session& ip, bool opened_by_us) {
  PtrKey key{key_of(&ip)};
  if (IpPeer* p = ip_by_session_.find(key)) return p;
  Result<Participant> local = ip.control(ctl::GetLocalAddr{});
  Result<Participant> peer = ip.control(ctl::GetPeerAddr{});
  if (!local || !peer) return Errc::bad_state;
  Result<IpAddr> local_addr = local->peek<IpAddr>();
  Result<IpAddr> peer_addr = peer->peek<IpAddr>();
  if (!local_addr || !peer_addr) return Errc::bad_state;
  auto [p, inserted] = ip_by_session_.insert(key, IpPeer{SessionRef(&ip), *local_addr, *peer_addr, opened_by_us});
  (void)inserted;
  ip_by_peer_.insert(PeerKey{*peer_addr}, &ip);
  return p;
}

Result<UdpProtocol::IpPeer*> UdpProtocol::route_to(IpAddr peer, IpAddr local_hint) {
  if (Session** s = ip_by_peer_.find(PeerKey{peer})) return learn(**s, false);
  Result<SessionRef> ip = open_for_peer(*this, below(), peer, kIpProtocol, local_hint);
  if (!ip) return ip.error();
  return learn(**ip, true);
}

Status UdpProtocol::open_done(Protocol&, Session& session, Participants&) {
  // ipv4 made a session for a new peer: remember it, so replies use it.
  Result<IpPeer*> p = learn(session, false);
  return p.status();
}

bool UdpProtocol::port_conflicts(const UdpSession& s, IpAddr addr, std::uint16_t port) {
  std::vector<UdpSession*>* users = port_users_.find(PortKey{port});
  if (users == nullptr) return false;
  for (UdpSession* u : *users) {
    if (u == &s) continue;
    const bool both = overlap(BindScope{u->local_.addr, u->options_.v6only}, BindScope{addr, s.options_.v6only});
    if (both && !(s.options_.reuse_addr && u->options_.reuse_addr)) return true;
  }
  return false;
}

Result<std::uint16_t> UdpProtocol::pick_ephemeral() {
  std::uint32_t span = std::uint32_t{config_.ephemeral_max} - config_.ephemeral_min + 1;
  for (std::uint32_t i = 0; i < span; ++i) {
    std::uint32_t p = next_ephemeral_;
    next_ephemeral_ = p >= config_.ephemeral_max ? config_.ephemeral_min : p + 1;
    std::vector<UdpSession*>* users = port_users_.find(PortKey{static_cast<std::uint16_t>(p)});
    if (users == nullptr || users->empty()) return static_cast<std::uint16_t>(p);
  }
  return Errc::exists;
}

std::vector<std::uint16_t> UdpProtocol::bound_ports() const {
  std::vector<std::uint16_t> out;
  const_cast<FlatMap<PortKey, std::vector<UdpSession*>>&>(port_users_).for_each(
      [&](const PortKey& k, std::vector<UdpSession*>&) { out.push_back(k.port); });
  return out;
}

Status UdpProtocol::bind_session(UdpSession& s, IpAddr addr, Port port) {
  if (s.bound_) return Errc::bad_state;
  std::uint16_t p = port.value;
  if (p != 0 && (port_conflicts(s, addr, p) || bound_.contains(BindKey{addr, p, s.options_.v6only}))) {
    return Errc::exists;
  }
  bool claimed = false;
  if (authority_ != nullptr && (p == 0 || port_users_.find(PortKey{p}) == nullptr)) {
    // A port new to this stack is host-wide: filterd grants (or picks) it and
    // steers its datagrams here.
    Result<std::uint16_t> granted = authority_->claim_listen(kIpProtocol, p, false);
    if (!granted) return granted.error();
    p = *granted;
    claimed = true;
  } else if (p == 0) {
    Result<std::uint16_t> e = pick_ephemeral();
    if (!e) return e.error();
    p = *e;
  }
  if (Status st = ensure_enabled(); !st) {
    if (claimed) authority_->release_listen(kIpProtocol, p);
    return st;
  }
  s.local_ = Endpoint{addr, p};
  s.bound_ = true;
  bound_.insert(BindKey{addr, p, s.options_.v6only}, SessionRef(&s));
  port_users_.insert(PortKey{p}, {}).first->push_back(&s);
  return {};
}

Status UdpProtocol::connect_session(UdpSession& s, IpAddr addr, Port port) {
  if (addr.is_unspecified() || port.value == 0) return Errc::invalid_argument;
  if (!s.bound_) {
    if (Status st = bind_session(s, s.options_.implicit_bind, Port{}); !st) return st;
  }
  Result<IpPeer*> ip = route_to(addr, s.local_.addr);
  if (!ip) return ip.error();
  const IpAddr local = !s.local_.addr.is_unspecified() ? s.local_.addr : (*ip)->local;
  const FourTuple key{{local, s.local_.port}, {addr, port.value}};
  if (connected_.contains(key)) return Errc::exists;
  SessionRef keep(&s);
  if (s.connected_) {
    connected_.erase(FourTuple{{s.conn_local_, s.local_.port}, s.remote_});
  } else {
    bound_.erase(BindKey{s.local_.addr, s.local_.port, s.options_.v6only});
  }
  connected_.insert(key, keep);
  s.conn_local_ = local;
  s.remote_ = Endpoint{addr, port.value};
  s.connected_ = true;
  s.ip_ = (*ip)->session;
  return {};
}

void UdpProtocol::unbind(UdpSession& s) noexcept {
  if (!s.bound_) return;
  if (std::vector<UdpSession*>* users = port_users_.find(PortKey{s.local_.port})) {
    std::erase(*users, &s);
    if (users->empty()) {
      port_users_.erase(PortKey{s.local_.port});
      if (authority_ != nullptr) authority_->release_listen(kIpProtocol, s.local_.port);
    }
  }
  s.bound_ = false;
  if (s.connected_) {
    s.connected_ = false;
    connected_.erase(FourTuple{{s.conn_local_, s.local_.port}, s.remote_});
  } else {
    bound_.erase(BindKey{s.local_.addr, s.local_.port, s.options_.v6only});
  }
}

void UdpProtocol::forget(UdpSession& s) noexcept {
  sessions_.erase(PtrKey{key_of(&s)});
  unbind(s);
}

Status UdpProtocol::send(UdpSession& s, Msg msg, IpAddr addr, Port port, IpPeer* ip) {
  if (Errc e = s.take_error(); e != Errc::ok) return e;
  if (addr.is_unspecified() || port.value == 0) return Errc::invalid_argument;
  if (msg.size() > kMaxPayload) return Errc::too_large;
  if (!s.bound_) {
    if (Status st = bind_session(s, s.options_.implicit_bind, Port{}); !st) return st;
  }
  if (ip == nullptr) {
    if (s.connected_ && s.remote_ == Endpoint{addr, port.value}) {
      Result<IpPeer*> known = learn(*s.ip_, false);
      if (!known) return known.error();
      ip = *known;
    } else {
      Result<IpPeer*> r = route_to(addr, s.local_.addr);
      if (!r) return r.error();
      ip = *r;
    }
  }
  auto length = static_cast<std::uint16_t>(msg.size() + Header::kSize);
  Result<std::span<std::byte>> room = msg.push(Header::kSize);
  if (!room) return room.status();
  Header{s.local_.port, port.value, length, 0}.write(room->first<Header::kSize>());
  if (computes(config_.csum)) {
    std::uint32_t sum = csum::pseudo_header(ip->local, addr, kIpProtocol, length);
    std::uint16_t ck;
    if (offloads_.of(addr).tx_udp_csum) {
      // The port sums the rest: the field holds the pseudo-header sum, not
      // complemented (docs/checksum.md, "Offload"); ipv4 finishes it in
      // software if it has to fragment.
      ck = csum::fold(sum);
      msg.offload().flags |= Offload::tx_udp_csum;
      ++tx_csum_by_port_;
    } else {
      ck = csum::finish(csum::partial(msg, sum));
      // RFC 768: a computed 0 is sent as all ones; 0 on the wire means "none".
      if (ck == 0) ck = 0xffff;
    }
    std::memcpy(room->data() + Header::kChecksumOffset, &ck, 2);
  }
  msg.offload().tos = s.options_.tos;
  msg.offload().hop_limit = s.options_.hop_limit;
  ++tx_datagrams_;
  SessionRef lower = ip->session;  // the push may re-enter us
  return lower->push(std::move(msg));
}

Result<SessionRef> UdpProtocol::open(Protocol& upper, Participants& parts) {
  Result<Port> rport = parts.remote.pop<Port>();
  if (!rport) return rport.error();
  Result<IpAddr> raddr = parts.remote.pop<IpAddr>();
  if (!raddr) return raddr.error();
  Port lport{};
  IpAddr laddr{};
  if (Result<Port> p = parts.local.pop<Port>()) lport = *p;
  if (Result<IpAddr> a = parts.local.pop<IpAddr>()) laddr = *a;
  Ref<UdpSession> s = make_ref<UdpSession>(*this, &upper, SocketOptions{});
  if (Status st = s->bind(laddr, lport); !st) {
    (void)s->close();
    return st.error();
  }
  if (Status st = s->connect(*raddr, *rport); !st) {
    (void)s->close();
    return st.error();
  }
  return SessionRef(s);
}

Status UdpProtocol::demux(Session& lower, Msg msg) {
  // Whom it came from and where it went: ipv4's facts about this packet (the
  // destination may be a broadcast address, not the session's local one).
  const IpAddr src = msg.rx().src;
  const IpAddr dst = msg.rx().dst;
  Result<std::span<const std::byte>> raw = msg.peek(Header::kSize);
  if (!raw) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  Header h = Header::read(raw->first<Header::kSize>());
  // RFC 768: the length counts header and data; more than IP carried is damage.
  if (h.length < Header::kSize || h.length > msg.size()) {
    ++drop_bad_length_;
    return Errc::malformed;
  }
  if (h.length < msg.size()) {
    (void)msg.truncate(h.length);
    ++rx_trimmed_;
  }
  if (h.checksum == 0 && !src.is_v4()) {
    ++drop_v6_no_csum_;  // RFC 8200 8.1: over IPv6 the checksum is not optional
    return Errc::malformed;
  }
  if (h.checksum == 0) {
    ++rx_no_csum_;  // RFC 768: the sender computed none
  } else if (verifies(config_.csum) && msg.offload().has(Offload::rx_l4_good)) {
    ++rx_csum_by_port_;
  } else if (verifies(config_.csum)) {
    std::uint32_t sum = csum::pseudo_header(src, dst, kIpProtocol, h.length);
    if (csum::fold(csum::partial(msg, sum)) != 0xffff) {
      ++drop_bad_csum_;
      return Errc::malformed;
    }
  }
  (void)msg.trim_front(Header::kSize);
  Endpoint from{src, h.src_port};
  SessionRef found;
  if (SessionRef* r = receiver(dst, h.dst_port, from.addr, h.src_port)) found = *r;
  if (!found) {
    ++drops_no_session();
    return Errc::port_unreachable;
  }
  ++rx_datagrams_;
  auto* s = static_cast<UdpSession*>(found.get());
  return s->receive(lower, std::move(msg), from);
}

Status UdpProtocol::deliver_error(const ctl::NetError& e) {
  Errc err = Errc::ok;
  if (e.kind == ctl::NetError::Kind::unreachable) {
    if (e.icmp_code == kCodePortUnreachable) {
      err = Errc::port_unreachable;
    } else if (e.icmp_code == kCodeProtoUnreachable) {
      err = Errc::proto_unreachable;
    } else {
      err = Errc::no_route;
    }
  }
  // Only connected sockets hear of ICMP errors, as on Linux without
  // IP_RECVERR: an unconnected socket cannot tell which send failed. Time
  // exceeded, parameter problems and frag-needed are soft errors for UDP.
  SessionRef* s = connected_.find(
      FourTuple{{e.local, e.local_port.value}, {e.remote, e.remote_port.value}});
  if (err == Errc::ok || s == nullptr) {
    ++icmp_errors_ignored_;
    return {};
  }
  ++icmp_errors_;
  auto* us = static_cast<UdpSession*>(s->get());
  us->error_ = err;
  SessionRef keep = *s;
  if (us->on_readable_) us->on_readable_();
  return {};
}

SessionRef* UdpProtocol::receiver(IpAddr dst, std::uint16_t dport, IpAddr src, std::uint16_t sport) {
  if (SessionRef* s = connected_.find(FourTuple{{dst, dport}, {src, sport}})) return s;
  // The most specific bind that takes `dst` (BindScope::covers).
  if (SessionRef* b = bound_.find(BindKey{dst, dport})) return b;
  if (dst.is_v4()) {
    if (SessionRef* w = bound_.find(BindKey{kAnyIpv4, dport})) return w;
    return bound_.find(BindKey{IpAddr{}, dport});
  }
  if (SessionRef* w = bound_.find(BindKey{IpAddr{}, dport})) return w;
  return bound_.find(BindKey{IpAddr{}, dport, true});
}

Result<ControlReply> UdpProtocol::control_any(const ControlQuery& query) {
  if (const auto* d = std::get_if<ctl::DeliverError>(&query)) {
    if (Status st = deliver_error(d->error); !st) return st.error();
    return ControlReply{std::monostate{}};
  }
  if (std::holds_alternative<ctl::GetMtu>(query)) {
    // What fits over every family below.
    std::optional<std::size_t> least;
    for (Protocol* ip : below()) {
      Result<std::size_t> mtu = ip->control(ctl::GetMtu{});
      if (!mtu) return mtu.error();
      least = std::min(least.value_or(*mtu), *mtu);
    }
    return ControlReply{*least > Header::kSize ? *least - Header::kSize : std::size_t{0}};
  }
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) {
    std::size_t most = 0;
    for (Protocol* ip : below()) {
      Result<std::size_t> room = ip->control(ctl::GetHeaderRoom{});
      if (!room) return room.error();
      most = std::max(most, *room);
    }
    return ControlReply{most + Header::kSize};
  }
  if (std::holds_alternative<ctl::GetChecksum>(query)) return ControlReply{config_.csum};
  if (const auto* set = std::get_if<ctl::SetChecksum>(&query)) {
    config_.csum = set->mode;
    return ControlReply{std::monostate{}};
  }
  if (const auto* c = std::get_if<ctl::ClaimsOwn>(&query)) {
    if (receiver(c->addr, c->to.value, c->addr, c->from.value) == nullptr) return Errc::not_found;
    return ControlReply{std::monostate{}};
  }
  return Protocol::control_any(query);
}

// ---- graph kind ---------------------------------------------------------

void register_udp(Registry& registry) {
  registry.add(KindSpec("udp", "UDP (RFC 768) over IPv4, IPv6 or both, with datagram sockets")
                   .with_below(1, 2)
                   .with_option(OptionSpec::boolean("csum", "compute on send and verify on receive").defaults_to("on"))
                   .with_option(OptionSpec::integer("ephemeral_min", 1, 65535, "first ephemeral port").defaults_to("49152"))
                   .with_option(OptionSpec::integer("ephemeral_max", 1, 65535, "last ephemeral port").defaults_to("65535"))
                   .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     UdpConfig c;
                     c.csum = args.options.get_bool("csum") ? ChecksumMode::on : ChecksumMode::off;
                     c.ephemeral_min = static_cast<std::uint16_t>(args.options.get_int("ephemeral_min"));
                     c.ephemeral_max = static_cast<std::uint16_t>(args.options.get_int("ephemeral_max"));
                     return std::make_unique<UdpProtocol>(args.name, args.below, c);
                   }));
}

}  // namespace xk::udp

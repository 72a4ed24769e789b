// The TCP protocol object: demultiplexing (connections, then listeners, then
// a RST), passive opens (RFC 9293 3.10.7.2, SYN cookies RFC 4987), ports, the
// IP sessions of peers, and the socket handles.

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>

#include <unistd.h>

#include "xk/checksum.hpp"
#include "xk/event_loop.hpp"
#include "xk/options.hpp"
#include "xk/protocols/tcp.hpp"

#include "xk/ip_layers.hpp"
#include "tcb.hpp"

namespace xk::tcp {

const char* to_string(State s) noexcept {
  switch (s) {
    case State::closed: return "CLOSED";
    case State::listen: return "LISTEN";
    case State::syn_sent: return "SYN-SENT";
    case State::syn_received: return "SYN-RECEIVED";
    case State::established: return "ESTABLISHED";
    case State::fin_wait_1: return "FIN-WAIT-1";
    case State::fin_wait_2: return "FIN-WAIT-2";
    case State::close_wait: return "CLOSE-WAIT";
    case State::closing: return "CLOSING";
    case State::last_ack: return "LAST-ACK";
    case State::time_wait: return "TIME-WAIT";
  }
  return "?";
}

// ---- listener ---------------------------------------------------------------

ListenSession::ListenSession(TcpProtocol& proto, IpAddr addr, Port port, std::size_t backlog, bool group,
                             bool v6only)
    : ListenEndpoint(proto, nullptr),
      proto_(&proto),
      addr_(addr),
      port_(port),
      backlog_(backlog),
      group_(group),
      v6only_(v6only) {}

ListenSession::~ListenSession() = default;

Status ListenSession::close() {
  if (proto_ == nullptr) return Errc::closed;
  TcpProtocol* p = std::exchange(proto_, nullptr);
  TcpProtocol::Host host{*p};
  Ref<ListenSession> keep(this);
  host.remove_listener(addr_, port_, v6only_);
  if (PortAuthority* a = p->port_authority()) a->release_listen(kIpProtocol, port_.value);
  // Connections nobody will accept are reset (RFC 9293 3.10.4: like ABORT).
  std::deque<Ref<TcpConnection>> q;
  q.swap(accept_q_);
  for (Ref<TcpConnection>& c : q) c->listener_closed();
  // Half-open ones still point at us: they die with a RST too.
  std::vector<Ref<TcpConnection>> half;
  host.for_each_connection([&](TcpConnection& c) {
    if (c.opened_by(*this)) half.emplace_back(&c);
  });
  for (Ref<TcpConnection>& c : half) c->listener_closed();
  half_open_ = 0;
  return {};
}

Result<Ref<TcpConnection>> ListenSession::accept() {
  if (proto_ == nullptr) return Errc::closed;
  if (accept_q_.empty()) return Errc::would_block;
  Ref<TcpConnection> c = std::move(accept_q_.front());
  accept_q_.pop_front();
  c->accepted();
  return c;
}

Result<Ref<StreamEndpoint>> ListenSession::accept_stream() {
  Result<Ref<TcpConnection>> c = accept();
  if (!c) return c.error();
  return Ref<StreamEndpoint>(*c);
}

void ListenSession::established(TcpConnection& c) {
  if (half_open_ > 0) --half_open_;
  accept_q_.emplace_back(&c);
  if (on_event_) on_event_();
}

void ListenSession::forget(TcpConnection& c) noexcept {
  auto it = std::find_if(accept_q_.begin(), accept_q_.end(), [&](const Ref<TcpConnection>& r) { return r.get() == &c; });
  if (it != accept_q_.end()) {
    accept_q_.erase(it);
  } else if (half_open_ > 0) {
    --half_open_;
  }
}

void ListenSession::detach() noexcept {
  accept_q_.clear();
  proto_ = nullptr;
}

// ---- protocol ---------------------------------------------------------------

std::size_t cache_fit_buffer() noexcept {
  static const std::size_t bytes = [] {
    constexpr std::size_t kLeast = std::size_t{256} << 10;  // 46 Gbit/s at a 45 us RTT
    constexpr std::size_t kMost = std::size_t{1} << 20;
    const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? std::clamp(static_cast<std::size_t>(l2) / 4, kLeast, kMost) : kLeast;
  }();
  return bytes;
}

namespace {

std::uint32_t first_ephemeral(const TcpConfig& c) {
  if (!c.ephemeral_random || c.ephemeral_min >= c.ephemeral_max) return c.ephemeral_min;
  const std::uint32_t span = std::uint32_t{c.ephemeral_max} - c.ephemeral_min + 1;
  return c.ephemeral_min + std::random_device{}() % span;
}

}  // namespace

TcpProtocol::TcpProtocol(std::string name, std::vector<Protocol*> below, TimerWheel& timers, TcpConfig config)
    : Protocol(std::move(name), "tcp", std::move(below)),
      timers_(timers),
      config_(std::move(config)),
      isn_(config_.secret ? IsnGenerator(*config_.secret) : IsnGenerator()),
      cookies_(SynCookies(isn_.secret())),
      next_ephemeral_(first_ephemeral(config_)),
      release_timer_(timers, [p = this] { p->flush_releases(); }),
      time_wait_timer_(timers, [p = this] { p->expire_time_waits(); }),
      c_{counters().add("rx_segments"),
         counters().add("tx_segments"),
         counters().add("retransmits", "segments sent again"),
         counters().add("active_opens"),
         counters().add("passive_opens", "SYNs that made a connection (or a cookie)"),
         counters().add("established", "connections that reached ESTABLISHED"),
         counters().add("resets_sent"),
         counters().add("resets_received", "RSTs that ended a connection"),
         counters().add("drop_bad_csum"),
         counters().add("drop_malformed", "bad data offset or options"),
         counters().add("drop_no_listener", "segments for no connection and no listener (RST sent unless RST)"),
         counters().add("drop_paws", "RFC 7323 5: old timestamps"),
         counters().add("drop_out_of_window", "RFC 9293 3.10.7.4: unacceptable sequence numbers"),
         counters().add("drop_syn_queue", "SYNs dropped: half-open queue full without cookies"),
         counters().add("drop_accept_queue", "SYNs dropped: accept queue full"),
         counters().add("drop_ack_unacceptable", "ACKs of data never sent"),
         counters().add("challenge_acks", "RFC 5961"),
         counters().add("challenge_acks_limited", "RFC 5961 7: over the rate"),
         counters().add("syncookies_sent"),
         counters().add("syncookies_ok"),
         counters().add("syncookies_bad"),
         counters().add("rto_expiries"),
         counters().add("spurious_rtos", "timeouts the timestamps proved spurious, undone (RFC 3522, RFC 4015)"),
         counters().add("fast_retransmits"),
         counters().add("sack_recoveries"),
         counters().add("loss_probes", "tail loss probes sent (RFC 8985 7)"),
         counters().add("loss_probe_repairs", "probes that repaired a loss (window reduced, RFC 8985 7.4)"),
         counters().add("reorder_timeouts", "RACK reordering timers that expired (RFC 8985 6.2)"),
         counters().add("rack_lost_bytes", "bytes RACK marked lost"),
         counters().add("rto_wait_us", "time spent waiting for retransmission timeouts that expired"),
         counters().add("ecn_ce_received", "segments that arrived marked Congestion Experienced (RFC 3168)"),
         counters().add("ecn_reductions", "window reductions for an ECN-Echo (at most one per window)"),
         counters().add("urgent_in", "urgent pointers received that moved RCV.UP (RFC 9293 3.8.5)"),
         counters().add("urgent_out", "urgent marks made by sends with MSG_OOB"),
         counters().add("rcvbuf_grown", "receive buffers autotuning grew"),
         counters().add("sndbuf_grown", "send buffers autotuning grew"),
         counters().add("dup_segments", "data segments that brought nothing new (all received before)"),
         counters().add("ooo_dropped", "out-of-order bytes dropped: the reassembly's block cap (or memory) reached"),
         counters().add("ooo_segments", "segments that arrived out of order"),
         counters().add("delayed_acks", "ACKs sent by the delayed-ACK timer"),
         counters().add("burst_acks", "ACKs for two or more full segments, sent at the end of an input burst"),
         counters().add("window_probes", "zero-window probes (persist timer)"),
         counters().add("keepalive_probes"),
         counters().add("timeouts", "connections dropped after unanswered retransmissions or keepalives"),
         counters().add("time_wait_reused", "TIME-WAIT connections ended by a new SYN"),
         counters().add("time_wait_overflow", "connections closed without TIME-WAIT: time_wait_max were kept"),
         counters().add("rx_csum_by_port", "checksums the port verified for us"),
         counters().add("tx_csum_by_port", "checksums left to the port"),
         counters().add("tx_gso", "segments handed down whole for the port to cut (segmentation offload)"),
         counters().add("icmp_errors", "ICMP errors about TCP handed up by IP"),
         counters().add("icmp_no_connection", "ICMP errors about no connection of ours"),
         counters().add("icmp_out_of_window", "RFC 5927 4.1: quoted sequence number not in flight"),
         counters().add("icmp_hard_errors", "protocol/port unreachable that ended a connection attempt"),
         counters().add("icmp_soft_errors", "ICMP errors remembered, reported only on a timeout"),
         counters().add("pmtu_updates", "RFC 1191: frag-needed that lowered a path MTU"),
         counters().add("pmtu_ignored", "frag-needed with an MTU not below the current one"),
         counters().add("rx_csum_unchecked", "segments taken without a checksum check (csum off)")} {
  if (config_.ephemeral_min == 0 || config_.ephemeral_min > config_.ephemeral_max) {
    throw std::invalid_argument("tcp: bad ephemeral port range");
  }
  if (this->below().empty() || this->below().size() > 2) throw std::invalid_argument("tcp: one or two IP layers below");
  offloads_ = offloads_of(this->below());
  for (Protocol* ip : this->below()) {
    if (chunks_ == nullptr) {
      if (Result<ChunkSource*> c = ip->control(ctl::GetChunkSource{})) chunks_ = *c;
    }
  }
  if (Status st = ensure_enabled(); !st) {
    throw std::invalid_argument(std::string("tcp: an IP layer below refused to pass up protocol 6: ") + to_string(st.error()));
  }
}

TcpProtocol::~TcpProtocol() {
  // Handles may outlive us: their connections become closed, and nothing is sent.
  std::vector<Ref<ListenSession>> ls;
  listeners_.for_each([&](const ListenKey&, ListenSession*& l) { ls.emplace_back(l); });
  for (auto& l : ls) l->detach();
  listeners_.clear();
  std::vector<Ref<TcpConnection>> cs;
  conns_.for_each([&](const ConnKey&, SessionRef& s) { cs.emplace_back(static_cast<TcpConnection*>(s.get())); });
  for (auto& c : cs) c->release();
  conns_.clear();
  time_waits_.clear();
  // Not given back one by one: frames of these flows may still sit in the
  // driver's transmit queue, which empties only as the driver goes, after
  // us; the authority frees the ports when the node leaves (filterd: BYE).
  releases_.clear();
  authority_ = nullptr;
  peers_.for_each([](const PeerKey&, IpPeer& p) { (void)p.session->close(); });
  peers_.clear();
  if (enabled_) disable_on_each(*this, below(), kIpProtocol);
}

Status TcpProtocol::ensure_enabled() {
  if (enabled_) return {};
  if (Status st = enable_on_each(*this, below(), kIpProtocol); !st) return st;
  enabled_ = true;
  return {};
}

Result<TcpProtocol::IpPeer*> TcpProtocol::ip_for(IpAddr peer, Session* known) {
  if (IpPeer* p = peers_.find(PeerKey{peer})) return p;
  SessionRef s;
  if (known != nullptr) {
    s = SessionRef(known);
  } else {
    Result<SessionRef> r = open_for_peer(*this, below(), peer, kIpProtocol);
    if (!r) return r.error();
    s = *r;
  }
  Result<Participant> local = s->control(ctl::GetLocalAddr{});
  Result<IpAddr> local_addr = local ? local->peek<IpAddr>() : Result<IpAddr>(local.error());
  if (!local_addr) return Errc::bad_state;
  // RFC 1191 3: our segments may not be fragmented; routers tell us the MTU.
  (void)s->control(ctl::SetDontFragment{true});
  auto [p, inserted] = peers_.insert(PeerKey{peer}, IpPeer{std::move(s), *local_addr, peer, 0});
  (void)inserted;
  return p;
}

void TcpProtocol::drop_ip_user(IpAddr peer) noexcept {
  IpPeer* p = peers_.find(PeerKey{peer});
  if (p == nullptr) return;
  if (p->users > 0) --p->users;
  if (p->users == 0) {
    // ipv4 keeps a session until its upper closes it: close the idle ones.
    SessionRef s = std::move(p->session);
    peers_.erase(PeerKey{peer});
    (void)s->close();
  }
}

Status TcpProtocol::open_done(Protocol&, Session& session, Participants& parts) {
  // ipv4 made a session for a new peer; its first segment follows at once.
  Result<IpAddr> peer = parts.remote.peek<IpAddr>();
  if (!peer) {
    Result<Participant> pa = session.control(ctl::GetPeerAddr{});
    peer = pa ? pa->peek<IpAddr>() : Result<IpAddr>(pa.error());
  }
  if (!peer) return peer.error();
  return ip_for(*peer, &session).status();
}

Result<std::uint16_t> TcpProtocol::pick_ephemeral(IpAddr local, IpAddr remote, std::uint16_t rport) {
  std::uint32_t span = std::uint32_t{config_.ephemeral_max} - config_.ephemeral_min + 1;
  for (std::uint32_t i = 0; i < span; ++i) {
    std::uint32_t p = next_ephemeral_;
    next_ephemeral_ = p >= config_.ephemeral_max ? config_.ephemeral_min : p + 1;
    auto port = static_cast<std::uint16_t>(p);
    if (port_claimed(local, port)) continue;
    const ConnKey k{{local, port}, {remote, rport}};
    if (conns_.find(k) == nullptr && !in_time_wait(k)) return port;
  }
  return Errc::exists;
}

bool TcpProtocol::port_claimed(IpAddr addr, std::uint16_t port, bool v6only) {
  const BindScope want{addr, v6only};
  auto overlaps = [&](auto& map) {
    if (addr != IpAddr{} && addr != kAnyIpv4) {
      // One address: the binds that could take it, looked up.
      return map.find(ListenKey{addr, port}) != nullptr ||
             (addr.is_v4() && map.find(ListenKey{kAnyIpv4, port}) != nullptr) ||
             map.find(ListenKey{IpAddr{}, port}) != nullptr ||
             (!addr.is_v4() && map.find(ListenKey{IpAddr{}, port, true}) != nullptr);
    }
    bool any = false;  // a wildcard: every bind of the port it overlaps
    map.for_each([&](const ListenKey& k, const auto&) {
      any = any || (k.port == port && overlap(want, BindScope{k.addr, k.v6only != 0}));
    });
    return any;
  };
  return overlaps(listeners_) || overlaps(reserved_);
}

ListenSession* TcpProtocol::listener_at(IpAddr local, std::uint16_t port) {
  // The most specific bind that takes `local` (BindScope::covers).
  if (ListenSession** f = listeners_.find(ListenKey{local, port})) return *f;
  if (local.is_v4()) {
    if (ListenSession** w = listeners_.find(ListenKey{kAnyIpv4, port})) return *w;
    if (ListenSession** w = listeners_.find(ListenKey{IpAddr{}, port})) return *w;
    return nullptr;
  }
  if (ListenSession** w = listeners_.find(ListenKey{IpAddr{}, port})) return *w;
  if (ListenSession** w = listeners_.find(ListenKey{IpAddr{}, port, true})) return *w;
  return nullptr;
}

Result<Port> TcpProtocol::reserve_port(IpAddr addr, Port port, bool reuse_addr, bool group, bool v6only) {
  std::uint16_t p = port.value;
  if (p == 0) {
    // An ephemeral port no connection uses at all, so any later connect works.
    std::uint32_t span = std::uint32_t{config_.ephemeral_max} - config_.ephemeral_min + 1;
    for (std::uint32_t i = 0; i < span && p == 0; ++i) {
      std::uint32_t c = next_ephemeral_;
      next_ephemeral_ = c >= config_.ephemeral_max ? config_.ephemeral_min : c + 1;
      auto cand = static_cast<std::uint16_t>(c);
      bool used = port_claimed(addr, cand, v6only);
      if (!used) used = local_port_used(IpAddr{}, cand);
      if (!used) p = cand;
    }
    if (p == 0) return Errc::exists;
  } else {
    if (port_claimed(addr, p, v6only)) return Errc::exists;
    if (!reuse_addr && local_port_used(addr, p)) return Errc::exists;
    if (authority_ != nullptr) {
      // Behind filterd the port is host-wide: a bind to one another node
      // holds fails here, as on a host of its own, and not at the listen()
      // after it (Open MPI tries the next port only when bind fails). Held
      // as a listener's, the use a bind to a named port almost always has.
      Result<std::uint16_t> granted = authority_->claim_listen(kIpProtocol, p, group);
      if (!granted) return granted.error();
      reserved_.insert(ListenKey{addr, p, v6only}, kClaimedReservation);
      return Port{p};
    }
  }
  reserved_.insert(ListenKey{addr, p, v6only}, 1u);
  return Port{p};
}

bool TcpProtocol::local_port_used(IpAddr addr, std::uint16_t port) {
  bool used = false;
  auto check = [&](const ConnKey& k, auto&) {
    used = used || (k.local.port == port && (addr.is_unspecified() || k.local.addr == addr));
  };
  conns_.for_each(check);
  if (!used) time_waits_.for_each(check);
  return used;
}

void TcpProtocol::release_port(IpAddr addr, Port port, bool v6only) noexcept {
  const ListenKey k{addr, port.value, v6only};
  const std::uint32_t* v = reserved_.find(k);
  if (v == nullptr) return;
  if (*v == kClaimedReservation && authority_ != nullptr) authority_->release_listen(kIpProtocol, port.value);
  reserved_.erase(k);
}

Status TcpProtocol::insert(TcpConnection& c) {
  auto [slot, inserted] = conns_.insert(key_of(c.tuple()), SessionRef(&c));
  (void)slot;
  return inserted ? Status{} : Status{Errc::exists};
}

void TcpProtocol::remove(TcpConnection& c) noexcept {
  ConnKey k = key_of(c.tuple());
  if (SessionRef* s = conns_.find(k); s != nullptr && s->get() == &c) conns_.erase(k);
}

std::uint16_t TcpProtocol::path_mss(Session& ip) const {
  Result<std::size_t> mtu = ip.control(ctl::GetMtu{});
  std::size_t m = mtu ? *mtu : 576 - 20;  // GetMtu is IP's payload: minus the TCP header
  m = m > Header::kMinSize ? m - Header::kMinSize : 536;
  if (config_.mss != 0) m = std::min<std::size_t>(m, config_.mss);
  return static_cast<std::uint16_t>(std::min<std::size_t>(m, 65535 - 40));
}

std::uint8_t TcpProtocol::our_wscale(std::size_t rcvbuf_max) const noexcept {
  // The smallest shift that lets the window cover the largest buffer (RFC 7323 2.3).
  std::uint8_t s = 0;
  while (s < config_.wscale && (std::size_t{65535} << s) < rcvbuf_max) ++s;
  return s;
}

bool TcpProtocol::challenge_ack_allowed(Time now) noexcept {
  if (now - challenge_window_start_ >= std::chrono::seconds(1)) {
    challenge_window_start_ = now;
    challenge_acks_in_window_ = 0;
  }
  if (challenge_acks_in_window_ >= config_.challenge_acks_per_s) {
    ++c_.challenge_acks_limited;
    return false;
  }
  ++challenge_acks_in_window_;
  ++c_.challenge_acks;
  return true;
}

// A finished segment (header, options and payload) goes out with its
// checksum, or with 0 in the field when `csum` computes none.
Status TcpProtocol::transmit(Session& ip, IpAddr src, IpAddr dst, Msg segment, ChecksumMode csum) {
  if (segment.offload().has(Offload::tx_tcp_seg)) {
    // Cut below: every piece gets its own checksum there, or none (csum off).
    if (csum == ChecksumMode::on || csum == ChecksumMode::tx_only) segment.offload().flags |= Offload::tx_tcp_csum;
    ++c_.tx_gso;
    ++c_.tx_segments;
    return ip.push(std::move(segment));
  }
  const auto len = static_cast<std::uint16_t>(segment.size());
  if (csum == ChecksumMode::on || csum == ChecksumMode::tx_only) {
    std::uint32_t pseudo = csum::pseudo_header(src, dst, kIpProtocol, len);
    std::uint16_t ck;
    if (offloads_.of(src).tx_tcp_csum) {
      ck = csum::fold(pseudo);  // the port sums the rest (docs/checksum.md, "Offload")
      segment.offload().flags |= Offload::tx_tcp_csum;
      ++c_.tx_csum_by_port;
    } else {
      ck = csum::finish(csum::partial(segment, pseudo));
    }
    // The header is in the first fragment: it was pushed last.
    std::memcpy(segment.fragments()[0].data() + Header::kChecksumOffset, &ck, 2);
  }
  ++c_.tx_segments;
  return ip.push(std::move(segment));
}

Status TcpProtocol::send_raw(IpPeer& ip, std::uint16_t sport, std::uint16_t dport, SeqNum seq, SeqNum ack,
                             std::uint8_t flags, std::uint16_t window, const Options* opts, ChecksumMode csum) {
  Msg m = Msg::alloc(0, Msg::kDefaultHeadroom);
  Header h;
  auto room = push_header(m, opts, h);
  if (!room) return room.status();
  h.src_port = sport;
  h.dst_port = dport;
  h.seq = seq;
  h.ack = ack;
  h.flags = flags;
  h.window = window;
  h.write(*room);
  return transmit(*ip.session, ip.local, ip.peer, std::move(m), csum);
}

// RFC 6191 2 / RFC 9293 3.6.1: a new SYN may end a TIME-WAIT early when its
// timestamp (if both incarnations use them), else its sequence number, is
// past what the old connection saw.
bool TcpProtocol::syn_reopens(const Header& h, const Options& opts, const TimeWaitRecord& tw) const noexcept {
  if (!h.has(kSyn) || h.has(kAck)) return false;
  if (tw.ts_ok && opts.timestamps && config_.timestamps) {
    const auto d = static_cast<std::int32_t>(opts.timestamps->tsval - tw.ts_recent);
    return d > 0 || (d == 0 && h.seq > tw.rcv_nxt);
  }
  return h.seq > tw.rcv_nxt;
}

// RFC 9293 3.10.7.1: a segment for no connection gets a RST, unless it is one.
void TcpProtocol::send_reset_for(IpPeer& ip, const Header& h, std::size_t seg_len) {
  if (h.has(kRst)) return;
  ++c_.resets_sent;
  if (h.has(kAck)) {
    (void)send_raw(ip, h.dst_port, h.src_port, h.ack, SeqNum(0), kRst, 0, nullptr, config_.csum);
  } else {
    std::uint32_t len = static_cast<std::uint32_t>(seg_len) + (h.has(kSyn) ? 1u : 0u) + (h.has(kFin) ? 1u : 0u);
    (void)send_raw(ip, h.dst_port, h.src_port, SeqNum(0), h.seq + len, kRst | kAck, 0, nullptr, config_.csum);
  }
}

Status TcpProtocol::demux(Session& lower, Msg msg) {
  ++c_.rx_segments;
  // Who sent it, as the IP layer below learned it (a copy: the Msg moves on
  // below, its facts with it).
  const IpAddr src = msg.rx().src;
  const bool ce = (msg.rx().traffic_class & kEcnMask) == kEcnCe;
  Result<IpPeer*> ipr = ip_for(src, &lower);
  if (!ipr) return ipr.error();
  IpPeer* ip = *ipr;

  Result<std::span<const std::byte>> fixed = msg.peek(Header::kMinSize);
  if (!fixed) {
    ++c_.drop_malformed;
    return Errc::malformed;
  }
  Header h = Header::read(fixed->first<Header::kMinSize>());
  if (h.data_offset < Header::kMinDataOffset || h.header_length() > msg.size()) {
    ++c_.drop_malformed;
    return Errc::malformed;
  }
  // Who the segment is for decides whether its checksum is verified (the
  // per-socket switch); a segment for nobody follows the stack's mode.
  const ConnKey key{{ip->local, h.dst_port}, {ip->peer, h.src_port}};
  SessionRef* s = conns_.find(key);
  TimeWaitRecord* tw = s == nullptr ? time_waits_.find(key) : nullptr;
  ChecksumMode csum_mode = config_.csum;
  if (s != nullptr) {
    csum_mode = static_cast<TcpConnection*>(s->get())->checksum_mode();
  } else if (tw != nullptr) {
    csum_mode = tw->csum;
  } else if (ListenSession* to = listener_at(ip->local, h.dst_port)) {
    csum_mode = to->checksum_override().value_or(config_.csum);
  }
  if (csum_mode == ChecksumMode::on || csum_mode == ChecksumMode::rx_only) {
    if (msg.offload().has(Offload::rx_l4_good)) {
      ++c_.rx_csum_by_port;
    } else {
      std::uint32_t pseudo = csum::pseudo_header(ip->peer, ip->local, kIpProtocol, static_cast<std::uint32_t>(msg.size()));
      if (csum::fold(csum::partial(msg, pseudo)) != 0xffff) {
        ++c_.drop_bad_csum;
        return Errc::malformed;
      }
    }
  } else {
    ++c_.rx_csum_unchecked;
  }
  Result<std::span<const std::byte>> whole = msg.peek(h.header_length());
  if (!whole) {
    ++c_.drop_malformed;
    return Errc::malformed;
  }
  Result<Options> opts = parse_options(whole->subspan(Header::kMinSize));
  if (!opts) {
    ++c_.drop_malformed;
    return Errc::malformed;
  }
  (void)msg.trim_front(h.header_length());
  Msg& payload = msg;

  std::optional<SeqNum> iss_floor;
  if (s != nullptr) {
    Ref<TcpConnection> c(static_cast<TcpConnection*>(s->get()));
    const std::optional<TimeWaitRecord> old =
        c->state() == State::time_wait ? std::optional(c->time_wait_record({})) : std::nullopt;
    if (!old || !syn_reopens(h, *opts, *old)) {
      c->segment_arrives(h, *opts, std::move(payload), ce);
      return {};
    }
    ++c_.time_wait_reused;
    // RFC 9293 3.6.1 (1): the new ISS lies above all the old one used.
    iss_floor = old->snd_nxt;
    // The old incarnation's IP session goes on serving the new one: keep the
    // peer (and `ip`) alive across the release; so does the authority's flow
    // of the 4-tuple (a RELEASE now would reach filterd after the new
    // SYN-ACK and take the new connection's flow).
    ++ip->users;
    c->yield_to_new_incarnation();
    --ip->users;
  }
  if (tw != nullptr && !syn_reopens(h, *opts, *tw)) {
    time_wait_input(key, *tw, *ip, h, *opts, payload.size());
  } else {
    if (tw != nullptr) {
      ++c_.time_wait_reused;
      iss_floor = tw->snd_nxt;  // RFC 9293 3.6.1 (1), as above
      end_time_wait(key, false);  // the flow lives on in the new incarnation, as above
    }
    if (ListenSession* l = listener_at(ip->local, h.dst_port); l != nullptr) {
      Ref<ListenSession> keep(l);
      listen_input(*l, *ip, h, *opts, std::move(payload), iss_floor);
    } else {
      ++c_.drop_no_listener;
      send_reset_for(*ip, h, payload.size());
    }
  }
  // A peer nobody talks to any more keeps no IP session.
  if (IpPeer* p = peers_.find(PeerKey{src}); p != nullptr && p->users == 0) {
    ++p->users;
    drop_ip_user(src);
  }
  return {};
}

// RFC 9293 3.10.7.2, LISTEN.
void TcpProtocol::listen_input(ListenSession& l, IpPeer& ip, const Header& h, const Options& opts, Msg payload,
                               std::optional<SeqNum> iss_floor) {
  if (h.has(kRst)) return;  // first: an incoming RST is ignored
  const Time now = timers_.clock().now();
  FourTuple t{{ip.local, h.dst_port}, {ip.peer, h.src_port}};
  if (h.has(kAck) && !h.has(kSyn)) {
    // Second: an ACK. Only a SYN cookie's third segment is acceptable here.
    if (config_.syncookies && !h.has(kFin)) {
      if (Result<std::uint16_t> mss = cookies_.check_ack(t, h.seq, h.ack, now)) {
        if (l.accept_queue_full()) {
          ++c_.drop_accept_queue;
          return;
        }
        ++c_.syncookies_ok;
        Ref<TcpConnection> c = TcpConnection::from_cookie(*this, l, ip, t, h, opts, *mss, now);
        if (!insert(*c)) {
          c->abandon_passive_open();
          return;
        }
        c->take_cookie_ack(h, opts, std::move(payload));  // passive_opens counted the SYN
        return;
      }
      ++c_.syncookies_bad;
    }
    send_reset_for(ip, h, payload.size());
    return;
  }
  if (!h.has(kSyn)) return;  // fourth: anything else is dropped
  // Third: a SYN.
  if (l.accept_queue_full()) {
    ++c_.drop_accept_queue;
    return;
  }
  if (l.half_open() >= config_.syn_backlog) {
    if (!config_.syncookies) {
      ++c_.drop_syn_queue;
      return;
    }
    // RFC 4987 3.6: answer without keeping state; the cookie is the ISN.
    ++c_.syncookies_sent;
    std::uint16_t my_mss = path_mss(*ip.session);
    if (l.max_segment()) my_mss = std::min(my_mss, *l.max_segment());  // TCP_MAXSEG
    std::uint16_t their_mss = opts.mss.value_or(536);
    Options o;
    o.mss = my_mss;
    if (opts.timestamps && config_.timestamps) {
      CookieOptions co;
      co.sack_permitted = config_.sack && opts.sack_permitted;
      if (opts.wscale && config_.wscale > 0) co.wscale = *opts.wscale;
      std::uint32_t ts = static_cast<std::uint32_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count());
      o.timestamps = Timestamps{encode_cookie_tsval(co, ts), opts.timestamps->tsval};
      o.sack_permitted = co.sack_permitted;
      if (co.wscale) o.wscale = our_wscale(config_.buf_max);
    }
    SeqNum cookie = cookies_.make_isn(t, h.seq, std::min(their_mss, my_mss), now);
    (void)send_raw(ip, h.dst_port, h.src_port, cookie, h.seq + 1, kSyn | kAck, 65535, &o, l.checksum_override().value_or(config_.csum));
    ++c_.passive_opens;
    return;
  }
  SeqNum iss = isn_.isn(t, now);
  if (iss_floor && iss < *iss_floor) iss = *iss_floor;
  Ref<TcpConnection> c = TcpConnection::from_syn(*this, l, ip, t, h, opts, iss);
  if (!insert(*c)) {
    c->abandon_passive_open();
    return;
  }
  ++c_.passive_opens;
  c->answer_syn();
}

Result<SessionRef> TcpProtocol::open(Protocol& upper, Participants& parts) {
  Result<Port> rport = parts.remote.pop<Port>();
  if (!rport) return rport.error();
  Result<IpAddr> raddr = parts.remote.pop<IpAddr>();
  if (!raddr) return raddr.error();
  Ref<TcpConnection> c = TcpConnection::active(*this, &upper);
  if (Status st = c->connect(*raddr, *rport); !st) return st.error();
  return SessionRef(c);
}

Result<ControlReply> TcpProtocol::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetChecksum>(query)) return ControlReply{config_.csum};
  if (const auto* set = std::get_if<ctl::SetChecksum>(&query)) {
    config_.csum = set->mode;
    return ControlReply{std::monostate{}};
  }
  if (const auto* d = std::get_if<ctl::DeliverError>(&query)) {
    icmp_error(d->error);
    return ControlReply{std::monostate{}};
  }
  if (const auto* c = std::get_if<ctl::ClaimsOwn>(&query)) {
    const ConnKey k{{c->addr, c->to.value}, {c->addr, c->from.value}};
    const bool ours = conns_.find(k) != nullptr || in_time_wait(k) || (c->opens && listener_at(c->addr, c->to.value));
    if (!ours) return Errc::not_found;
    return ControlReply{std::monostate{}};
  }
  return Protocol::control_any(query);
}

void TcpProtocol::defer_release(const FourTuple& t) {
  releases_.push_back(t);
  if (!release_timer_.armed()) release_timer_.arm(timers_.clock().now());
}

void TcpProtocol::flush_releases() noexcept {
  std::vector<FourTuple> due;
  due.swap(releases_);
  if (authority_ == nullptr) return;
  for (const FourTuple& t : due) authority_->release_connect(kIpProtocol, t.local.port, t.remote.addr, t.remote.port);
}

std::uint32_t TcpProtocol::tsval() const noexcept {
  return static_cast<std::uint32_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(timers_.clock().now().time_since_epoch()).count());
}

std::size_t TcpProtocol::time_wait_count() const noexcept {
  std::size_t n = time_waits_.size();
  const_cast<TupleMap<SessionRef>&>(conns_).for_each([&](const ConnKey&, SessionRef& s) {
    if (static_cast<TcpConnection*>(s.get())->state() == State::time_wait) ++n;
  });
  return n;
}

std::vector<TcpProtocol::ListenerInfo> TcpProtocol::listeners() const {
  std::vector<ListenerInfo> out;
  const_cast<FlatMap<ListenKey, ListenSession*>&>(listeners_).for_each([&](const ListenKey&, ListenSession*& l) {
    out.push_back(ListenerInfo{l->addr(), l->port(), l->group()});
  });
  return out;
}

std::vector<TcpProtocol::ConnectionInfo> TcpProtocol::connections() const {
  std::vector<ConnectionInfo> out;
  // Only inserted connections are in the map: each has its 4-tuple.
  const_cast<TupleMap<SessionRef>&>(conns_).for_each([&](const ConnKey&, SessionRef& s) {
    out.push_back(static_cast<const TcpConnection*>(s.get())->info());
  });
  const_cast<TupleMap<TimeWaitRecord>&>(time_waits_).for_each([&](const ConnKey& k, TimeWaitRecord& tw) {
    out.push_back(ConnectionInfo{k, State::time_wait, tw.passive, tw.claimed});
  });
  return out;
}

TcpSocket TcpProtocol::socket() {
  if (backend_ != nullptr) return TcpSocket(backend_->make_stream());
  return TcpSocket(TcpConnection::active(*this, nullptr));
}

Result<TcpListener> TcpProtocol::listen(IpAddr addr, Port port, std::size_t backlog, bool group, bool v6only) {
  std::uint16_t p = port.value;
  if (p != 0 && port_claimed(addr, p, v6only)) return Errc::exists;
  if (authority_ != nullptr) {
    // The port is host-wide: filterd picks or grants it, and steers its SYNs here.
    Result<std::uint16_t> granted = authority_->claim_listen(kIpProtocol, p, group);
    if (!granted) return granted.error();
    p = *granted;
    if (port_claimed(addr, p, v6only)) {
      authority_->release_listen(kIpProtocol, p);
      return Errc::exists;
    }
  } else if (p == 0) {
    Result<std::uint16_t> e = pick_ephemeral(addr, IpAddr{}, 0);
    if (!e) return e.error();
    p = *e;
  }
  Result<TcpListener> l = open_listener(addr, p, backlog, group, v6only);
  if (!l && authority_ != nullptr) authority_->release_listen(kIpProtocol, p);
  return l;
}

Result<TcpListener> TcpProtocol::listen_reserved(IpAddr addr, Port port, std::size_t backlog, bool group,
                                                 bool v6only) {
  const ListenKey k{addr, port.value, v6only};
  const std::uint32_t* held = reserved_.find(k);
  if (held == nullptr) return Errc::not_found;
  const std::uint32_t kind = *held;
  reserved_.erase(k);
  // The reservation kept every other listener and reservation off the port;
  // a claim it made is the listener's now. One it did not make (an
  // ephemeral bind, or no authority) is asked for as listen() would.
  Result<TcpListener> l = kind == kClaimedReservation && authority_ != nullptr
                              ? open_listener(addr, port.value, backlog, group, v6only)
                              : listen(addr, port, backlog, group, v6only);
  if (!l) reserved_.insert(k, kind);
  return l;
}

Result<TcpListener> TcpProtocol::open_listener(IpAddr addr, std::uint16_t port, std::size_t backlog, bool group,
                                               bool v6only) {
  backlog = std::max<std::size_t>(backlog, 1);
  if (backend_ != nullptr) {
    Result<Ref<ListenEndpoint>> b = backend_->make_listener(addr, Port{port}, backlog, authority_);
    if (!b) return b.error();
    return TcpListener(std::move(*b));
  }
  Ref<ListenSession> l = make_ref<ListenSession>(*this, addr, Port{port}, backlog, group, v6only);
  listeners_.insert(ListenKey{addr, port, v6only}, l.get());
  return TcpListener(std::move(l));
}

// ---- handles ----------------------------------------------------------------

TcpSocket& TcpSocket::operator=(TcpSocket&& other) noexcept {
  if (this != &other) {
    (void)close();
    c_ = std::move(other.c_);
  }
  return *this;
}

TcpSocket::~TcpSocket() { (void)close(); }

Status TcpSocket::connect(IpAddr addr, Port port, IpAddr local_addr, Port local_port) {
  if (!c_) return Errc::closed;
  return c_->connect(addr, port, local_addr, local_port);
}
Result<std::size_t> TcpSocket::write(std::span<const std::byte> bytes, bool more) {
  if (!c_) return Errc::closed;
  return c_->write(bytes, more);
}
Status TcpSocket::write(Msg& msg) {
  if (!c_) return Errc::closed;
  return c_->write_msg(msg);
}
Result<std::size_t> TcpSocket::read(std::span<std::byte> dst) {
  if (!c_) return Errc::closed;
  return c_->read(dst);
}
Result<Msg> TcpSocket::read_msg(std::size_t max) {
  if (!c_) return Errc::closed;
  return c_->read_msg(max);
}
Status TcpSocket::shutdown_write() {
  if (!c_) return Errc::closed;
  return c_->shutdown_write();
}
Status TcpSocket::close() {
  if (!c_) return Errc::closed;
  Ref<StreamEndpoint> c = std::move(c_);
  c->set_on_event({});
  return c->close_gracefully();
}
void TcpSocket::abort() {
  if (!c_) return;
  Ref<StreamEndpoint> c = std::move(c_);
  c->set_on_event({});
  c->abort();
}
void TcpSocket::set_nodelay(bool on) noexcept {
  if (c_) c_->set_nodelay(on);
}
void TcpSocket::set_cork(bool on) noexcept {
  if (c_) c_->set_cork(on);
}
void TcpSocket::set_keepalive(bool on) noexcept {
  if (c_) c_->set_keepalive(on);
}
void TcpSocket::set_sndbuf(std::size_t bytes) noexcept {
  if (c_) c_->set_sndbuf(bytes);
}
void TcpSocket::set_rcvbuf(std::size_t bytes) noexcept {
  if (c_) c_->set_rcvbuf(bytes);
}
void TcpSocket::set_checksum(ChecksumMode mode) noexcept {
  if (c_) c_->set_checksum(mode);
}
void TcpSocket::set_on_event(std::function<void()> fn) {
  if (c_) c_->set_on_event(std::move(fn));
}
std::uint32_t TcpSocket::events() const noexcept { return c_ ? c_->events() : std::uint32_t{ev_hangup}; }

TcpListener& TcpListener::operator=(TcpListener&& other) noexcept {
  if (this != &other) {
    (void)close();
    l_ = std::move(other.l_);
  }
  return *this;
}

TcpListener::~TcpListener() { (void)close(); }

Result<TcpSocket> TcpListener::accept() {
  if (!l_) return Errc::closed;
  Result<Ref<StreamEndpoint>> c = l_->accept_stream();
  if (!c) return c.error();
  return TcpSocket(std::move(*c));
}

void TcpListener::set_on_event(std::function<void()> fn) {
  if (l_) l_->set_on_event(std::move(fn));
}

void TcpListener::set_checksum(ChecksumMode mode) noexcept {
  if (l_) l_->set_checksum(mode);
}

Status TcpListener::close() {
  if (!l_) return Errc::closed;
  Ref<ListenEndpoint> l = std::move(l_);
  l->set_on_event({});
  return l->close();
}

// ---- graph kind ---------------------------------------------------------------

namespace {
Secret parse_secret(const std::string& hex) {
  if (hex.size() != 32) throw std::invalid_argument("secret= needs 32 hex digits (16 bytes)");
  Secret s{};
  for (std::size_t i = 0; i < 16; ++i) {
    auto nib = [&](char ch) -> unsigned {
      if (ch >= '0' && ch <= '9') return static_cast<unsigned>(ch - '0');
      if (ch >= 'a' && ch <= 'f') return static_cast<unsigned>(ch - 'a' + 10);
      if (ch >= 'A' && ch <= 'F') return static_cast<unsigned>(ch - 'A' + 10);
      throw std::invalid_argument("secret= has a character that is not a hex digit");
    };
    s[i] = std::byte(static_cast<unsigned char>(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1])));
  }
  return s;
}
}  // namespace

void register_tcp(Registry& registry) {
  registry.add(
      KindSpec("tcp", "TCP over IPv4, IPv6 or both (RFC 9293, 7323, 2018, 8985, 6937, 5681, 9438)")
          .with_below(1, 2)
          .with_option(OptionSpec::boolean("csum", "compute on send and verify on receive").defaults_to("on"))
          .with_option(OptionSpec::integer("mss", 0, 65495, "largest segment payload we announce (0: from the MTU)")
                           .defaults_to("0"))
          .with_option(OptionSpec::integer("wscale", 0, 14, "largest window shift we offer").defaults_to("14"))
          .with_option(OptionSpec::boolean("sack", "selective acknowledgments (RFC 2018)").defaults_to("on"))
          .with_option(OptionSpec::boolean("ts", "timestamps (RFC 7323)").defaults_to("on"))
          .with_option(OptionSpec::choice("cc", {"cubic", "newreno"}, "congestion control").defaults_to("cubic"))
          .with_option(OptionSpec::real("rto_min_ms", 0.01, 3.6e6, "smallest retransmission timeout").defaults_to("200"))
          .with_option(OptionSpec::real("rto_max_ms", 0.01, 3.6e6, "largest retransmission timeout").defaults_to("60000"))
          .with_option(OptionSpec::real("rto_initial_ms", 0.01, 3.6e6, "before any RTT sample").defaults_to("1000"))
          .with_option(OptionSpec::real("delack_ms", 0.01, 500, "delayed-ACK timeout (RFC 1122: < 500)").defaults_to("40"))
          .with_option(OptionSpec::choice("recovery", {"rack", "rfc6675"},
                                          "SACK loss recovery: RACK-TLP with PRR, or RFC 6675's dupthresh")
                           .defaults_to("rack"))
          .with_option(OptionSpec::boolean("tlp", "tail loss probes (RFC 8985 7), with recovery=rack").defaults_to("on"))
          .with_option(OptionSpec::real("tlp_delack_ms", 0, 500, "a one-segment probe also waits this (WCDelAckT)")
                           .defaults_to("200"))
          .with_option(OptionSpec::real("tlp_min_ms", 0, 3.6e6, "no tail loss probe sooner than this (default: rto_min / 4)"))
          .with_option(OptionSpec::choice("ecn", {"passive", "on", "off"},
                                          "ECN (RFC 3168): accept when asked, also ask, or never")
                           .defaults_to("passive"))
          .with_option(OptionSpec::integer("quickacks", 0, 1024,
                                           "segments ACKed at once while young or after idling (0: off)")
                           .defaults_to("16"))
          .with_option(OptionSpec::boolean("ack_per_burst", "ACK every second full segment at the end of the input burst")
                           .defaults_to("on"))
          .with_option(OptionSpec::size("ack_burst_max", 0, std::size_t{1} << 30,
                                        "most bytes one end-of-burst ACK covers (0: no limit)")
                           .defaults_to("64k"))
          .with_option(OptionSpec::boolean("gso", "hand new data down in ~64 KB segments when the port can cut them")
                           .defaults_to("on"))
          .with_option(OptionSpec::real("msl_ms", 0.01, 3.6e6, "maximum segment lifetime (TIME-WAIT is 2 MSL)")
                           .defaults_to("30000"))
          .with_option(OptionSpec::integer("time_wait_max", 0, 1 << 24,
                                           "TIME-WAITs kept after their application let go; beyond, none")
                           .defaults_to("262144"))
          .with_option(OptionSpec::size("sndbuf", 1024, std::size_t{1} << 30, "default send buffer (a quarter of the L2 cache)")
                           .defaults_to(std::to_string(cache_fit_buffer())))
          .with_option(OptionSpec::size("rcvbuf", 1024, std::size_t{1} << 30, "default receive buffer (a quarter of the L2 cache)")
                           .defaults_to(std::to_string(cache_fit_buffer())))
          .with_option(OptionSpec::size("buf_max", 4096, std::size_t{1} << 30, "largest SO_SNDBUF/SO_RCVBUF (sets the window scale)")
                           .defaults_to("64m"))
          .with_option(OptionSpec::boolean("autotune", "grow buffers with the measured bandwidth-delay product").defaults_to("on"))
          .with_option(OptionSpec::size("autotune_max", 4096, std::size_t{1} << 30, "largest buffer autotuning makes")
                           .defaults_to("16m"))
          .with_option(OptionSpec::boolean("syncookies", "SYN cookies when the SYN queue is full").defaults_to("on"))
          .with_option(OptionSpec::integer("syn_backlog", 1, 1 << 20, "half-open connections per listener before SYN cookies")
                           .defaults_to("1024"))
          .with_option(OptionSpec::integer("ephemeral_min", 1, 65535,
                                           "first port of the ephemeral range (as Linux's ip_local_port_range)")
                           .defaults_to("49152"))
          .with_option(OptionSpec::integer("ephemeral_max", 1, 65535, "last port of the ephemeral range")
                           .defaults_to("65535"))
          .with_option(OptionSpec::boolean("ephemeral_random", "start the ephemeral port search at a random port (RFC 6056)")
                           .defaults_to("on"))
          .with_option(OptionSpec::string("secret", "ISN/cookie key, 32 hex digits (default: random)"))
          .with_option(OptionSpec::choice("backend", {"own", "relay"},
                                          "who carries the streams: this TCP, or the layer below (a relay)")
                           .defaults_to("own"))
          .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
            if (args.loop == nullptr) throw std::invalid_argument("tcp needs an event loop for its timers");
            const xk::Options& o = args.options;
            TcpConfig c;
            c.csum = o.get_bool("csum") ? ChecksumMode::on : ChecksumMode::off;
            c.mss = static_cast<std::uint16_t>(o.get_int("mss"));
            c.wscale = static_cast<std::uint8_t>(o.get_int("wscale"));
            c.sack = o.get_bool("sack");
            c.timestamps = o.get_bool("ts");
            c.cc = o.get_string("cc");
            auto ms = [&](std::string_view n) {
              return std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(o.get_real(n)));
            };
            c.rto_min = ms("rto_min_ms");
            c.rto_max = ms("rto_max_ms");
            c.rto_initial = ms("rto_initial_ms");
            c.delack = ms("delack_ms");
            c.quickacks = static_cast<unsigned>(o.get_int("quickacks"));
            c.recovery = o.get_string("recovery") == "rack" ? TcpConfig::Recovery::rack : TcpConfig::Recovery::rfc6675;
            c.tlp = o.get_bool("tlp");
            const std::string ecn = o.get_string("ecn");
            c.ecn = ecn == "on" ? TcpConfig::Ecn::on : ecn == "off" ? TcpConfig::Ecn::off : TcpConfig::Ecn::passive;
            c.tlp_delack = ms("tlp_delack_ms");
            if (o.has("tlp_min_ms")) c.tlp_min = ms("tlp_min_ms");
            c.ack_per_burst = o.get_bool("ack_per_burst");
            c.ack_burst_max = static_cast<std::uint32_t>(o.get_size("ack_burst_max"));
            c.gso = o.get_bool("gso");
            c.msl = ms("msl_ms");
            c.time_wait_max = static_cast<std::size_t>(o.get_int("time_wait_max"));
            c.sndbuf = o.get_size("sndbuf");
            c.rcvbuf = o.get_size("rcvbuf");
            c.buf_max = o.get_size("buf_max");
            c.autotune = o.get_bool("autotune");
            c.autotune_max = std::min<std::size_t>(o.get_size("autotune_max"), c.buf_max);
            if (c.sndbuf > c.buf_max || c.rcvbuf > c.buf_max) {
              throw std::invalid_argument("sndbuf and rcvbuf may not be above buf_max=" + std::to_string(c.buf_max));
            }
            c.syncookies = o.get_bool("syncookies");
            c.syn_backlog = static_cast<std::size_t>(o.get_int("syn_backlog"));
            c.ephemeral_min = static_cast<std::uint16_t>(o.get_int("ephemeral_min"));
            c.ephemeral_max = static_cast<std::uint16_t>(o.get_int("ephemeral_max"));
            c.ephemeral_random = o.get_bool("ephemeral_random");
            if (c.ephemeral_min > c.ephemeral_max) {
              throw std::invalid_argument("ephemeral_min=" + std::to_string(c.ephemeral_min) + " is above ephemeral_max=" +
                                          std::to_string(c.ephemeral_max));
            }
            if (o.has("secret")) c.secret = parse_secret(o.get_string("secret"));
            if (c.rto_min > c.rto_max) throw std::invalid_argument("rto_min is above rto_max");
            auto t = std::make_unique<TcpProtocol>(args.name, args.below, args.loop->timers(), c);
            if (o.get_string("backend") == "relay") {
              auto* backend = dynamic_cast<StreamBackend*>(args.below[0]);
              if (backend == nullptr) {
                throw std::invalid_argument("backend=relay: '" + args.below[0]->name() + "' carries no streams");
              }
              t->set_backend(backend);
            }
            return t;
          }));
}

}  // namespace xk::tcp

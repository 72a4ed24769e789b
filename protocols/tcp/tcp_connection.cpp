// One TCP connection: construction, the user calls (RFC 9293 3.10.1-3.10.6),
// state changes and the end of a connection. Input is in tcp_input.cpp,
// output and timers in tcp_output.cpp.

#include <algorithm>

#include "xk/protocols/tcp.hpp"
#include "tcb.hpp"

namespace xk::tcp {

namespace {
std::unique_ptr<CongestionControl> make_cc(const TcpConfig& c) {
  Result<std::unique_ptr<CongestionControl>> cc = make_congestion_control(c.cc);
  if (cc) return std::move(*cc);
  return std::make_unique<Cubic>();
}
RtoConfig rto_config(const TcpConfig& c) {
  RtoConfig r;
  r.min_rto = c.rto_min;
  r.max_rto = c.rto_max;
  r.initial_rto = c.rto_initial;
  return r;
}
}  // namespace

TcpConnection::TcpConnection(TcpProtocol& proto, Protocol* upper)
    : StreamEndpoint(proto, upper),
      proto_(&proto),
      sndbuf_(proto.config().sndbuf, proto.chunk_source()),
      rcvbuf_limit_(proto.config().rcvbuf),
      rto_(rto_config(proto.config())),
      cc_(make_cc(proto.config())),
      rtx_timer_(proto.timers(), [c = this] { c->on_rtx_timeout(); }),
      delack_timer_(proto.timers(), [c = this] { c->on_delack_timeout(); }),
      persist_timer_(proto.timers(), [c = this] { c->on_persist_timeout(); }),
      keepalive_timer_(proto.timers(), [c = this] { c->on_keepalive_timeout(); }),
      time_wait_timer_(proto.timers(), [c = this] { c->on_time_wait_timeout(); }) {}

TcpConnection::~TcpConnection() = default;

Ref<TcpConnection> TcpConnection::active(TcpProtocol& proto, Protocol* upper) {
  return Ref<TcpConnection>(new TcpConnection(proto, upper));
}

Ref<TcpConnection> TcpConnection::from_syn(TcpProtocol& proto, ListenSession& l, TcpProtocol::Host::IpPeer& ip,
                                           const FourTuple& t, const Header& h, const Options& opts, SeqNum iss) {
  Ref<TcpConnection> c(new TcpConnection(proto, nullptr));
  c->passive_ = true;
  c->tuple_ = t;
  c->csum_ = l.checksum_override();
  c->ip_ = ip.session;
  ++ip.users;
  c->listener_ = &l;
  l.opening(*c);
  c->irs_ = h.seq;
  c->rcv_nxt_ = c->rcv_adv_ = h.seq + 1;
  c->iss_ = iss;
  c->snd_una_ = c->snd_nxt_ = c->snd_max_ = c->snd_sml_ = c->iss_;
  c->snd_wl1_ = h.seq;
  c->inherit_max_segment(l);
  c->take_options(opts, true);
  c->snd_wnd_ = h.window;  // never scaled in a SYN (RFC 7323 2.2)
  c->max_snd_wnd_ = c->snd_wnd_;
  // RFC 3168 6.1.1: an ECN-setup SYN has ECE and CWR; our SYN-ACK says yes
  // with ECE alone.
  c->ecn_ok_ = proto.config().ecn != TcpConfig::Ecn::off && h.has(kEce) && h.has(kCwr);
  return c;
}

// TCP_MAXSEG set on the listener holds for its connections from the SYN on.
void TcpConnection::inherit_max_segment(const ListenSession& l) {
  if (!l.max_segment()) return;
  if (!tuning_) tuning_ = std::make_unique<Tuning>();
  tuning_->max_segment = l.max_segment();
}

Ref<TcpConnection> TcpConnection::from_cookie(TcpProtocol& proto, ListenSession& l, TcpProtocol::Host::IpPeer& ip,
                                              const FourTuple& t, const Header& h, const Options& opts,
                                              std::uint16_t mss, Time now) {
  const TcpConfig& cfg = proto.config();
  Ref<TcpConnection> c(new TcpConnection(proto, nullptr));
  c->passive_ = true;
  c->tuple_ = t;
  c->csum_ = l.checksum_override();
  c->ip_ = ip.session;
  ++ip.users;
  c->iss_ = h.ack - 1;
  c->irs_ = h.seq - 1;
  c->snd_una_ = c->snd_nxt_ = c->snd_max_ = c->snd_sml_ = h.ack;
  c->rcv_nxt_ = h.seq;
  // Our SYN-ACK offered 65535 bytes, unscaled, and acknowledged h.seq.
  c->rcv_adv_ = h.seq + 65535;
  c->last_ack_sent_ = h.seq;
  c->snd_wl1_ = h.seq;
  c->snd_wl2_ = h.ack;
  c->peer_mss_ = mss;
  c->mss_ = std::min(mss, TcpProtocol::Host{proto}.path_mss(*ip.session));
  c->inherit_max_segment(l);
  if (c->tuning_ && c->tuning_->max_segment) c->mss_ = std::min(c->mss_, *c->tuning_->max_segment);
  if (opts.timestamps) {
    // Our SYN-ACK's TSval carried its options (tcp_syncookie.hpp).
    CookieOptions co = decode_cookie_tsecr(opts.timestamps->tsecr);
    c->ts_ok_ = cfg.timestamps;
    c->ts_recent_ = opts.timestamps->tsval;
    c->ts_recent_age_ = now;
    c->sack_ok_ = cfg.sack && co.sack_permitted;
    if (co.wscale && cfg.wscale > 0) {
      c->snd_wscale_ = *co.wscale;
      c->rcv_wscale_ = TcpProtocol::Host{proto}.our_wscale(cfg.buf_max);
    }
  }
  c->snd_wnd_ = std::uint32_t{h.window} << c->snd_wscale_;
  c->max_snd_wnd_ = c->snd_wnd_;
  c->sb_.set_smss(c->payload_mss());
  c->cc_->set_mss(c->payload_mss());
  c->listener_ = &l;
  l.opening(*c);
  return c;
}

Status TcpConnection::push(Msg msg) {
  // A session's push is whole or nothing: a part of msg would be lost here.
  if (msg.size() > sndbuf_.space()) return Errc::would_block;
  return write_msg(msg);
}

Status TcpConnection::pop(Session&, Msg) { return Errc::unsupported; }  // input arrives through segment_arrives

Status TcpConnection::close() { return close_gracefully(); }

Result<ControlReply> TcpConnection::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) {
    Participant p;
    p.push(tuple_.local.addr);
    p.push(Port{tuple_.local.port});
    return ControlReply{p};
  }
  if (std::holds_alternative<ctl::GetPeerAddr>(query)) {
    Participant p;
    p.push(tuple_.remote.addr);
    p.push(Port{tuple_.remote.port});
    return ControlReply{p};
  }
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{std::size_t{payload_mss()}};
  // On a connection, the checksum switches are this connection's.
  if (std::holds_alternative<ctl::GetChecksum>(query)) return ControlReply{checksum_mode()};
  if (const auto* set = std::get_if<ctl::SetChecksum>(&query)) {
    set_checksum(set->mode);
    return ControlReply{std::monostate{}};
  }
  if (proto_ == nullptr) return Errc::closed;
  return proto_->control_any(query);
}

// ---- user calls -----------------------------------------------------------------

// RFC 9293 3.10.1, active OPEN.
Status TcpConnection::connect(IpAddr addr, Port port, IpAddr local_addr, Port local_port) {
  if (proto_ == nullptr) return Errc::closed;
  if (state_ != State::closed || accepted_ || iss_ != SeqNum{} || snd_max_ != SeqNum{}) return Errc::bad_state;
  if (addr.is_unspecified() || port.value == 0) return Errc::invalid_argument;
  Result<TcpProtocol::Host::IpPeer*> ip = host().ip_for(addr);
  if (!ip) return ip.error();
  if (!local_addr.is_unspecified() && local_addr != (*ip)->local) return Errc::invalid_argument;
  Result<std::uint16_t> lport = Errc::exists;
  if (PortAuthority* a = proto_->port_authority()) {
    // filterd picks (or grants) the host-wide port and installs the flow's
    // rule before our SYN leaves.
    lport = a->claim_connect(kIpProtocol, local_port.value, addr, port.value);
  } else {
    lport = local_port.value != 0 ? Result<std::uint16_t>(local_port.value)
                                  : host().pick_ephemeral((*ip)->local, addr, port.value);
  }
  if (!lport) return lport.error();
  claimed_ = proto_->port_authority() != nullptr;
  tuple_ = FourTuple{{(*ip)->local, *lport}, {addr, port.value}};
  ip_ = (*ip)->session;
  ++(*ip)->users;
  if (Status st = host().insert(*this); !st) {
    ip_ = nullptr;
    host().drop_ip_user(addr);
    if (claimed_) proto_->port_authority()->release_connect(kIpProtocol, *lport, addr, port.value);
    claimed_ = false;
    return st;
  }
  const Time now = proto_->timers().clock().now();
  iss_ = host().isn(tuple_, now);
  snd_una_ = snd_nxt_ = snd_max_ = snd_sml_ = iss_;
  ++proto_->stats().active_opens;
  enter_state(State::syn_sent);
  send_syn();
  return {};
}

Result<std::size_t> TcpConnection::write(std::span<const std::byte> bytes, bool more_follows) {
  if (error_ != Errc::ok) return take_error();
  if (write_shut_) return Errc::closed;
  switch (state_) {
    case State::syn_sent:
    case State::syn_received:
    case State::established:
    case State::close_wait:
      break;
    case State::closed:
      return proto_ == nullptr ? Errc::closed : Errc::not_connected;
    default:
      return Errc::closed;
  }
  if (bytes.empty()) return std::size_t{0};
  // A large write is copied in pieces, each sent as soon as it is in: the
  // peer starts on the first while the rest is copied (as Linux pushes
  // while it copies). Between pieces the tail short of a full segment
  // waits for the next piece (corked), so the pieces make no short
  // segments in the middle of the stream. So does the last piece when the
  // caller's write goes on (`more_follows`), which then has the PSH.
  const bool corked = cork_;
  std::size_t total = 0;
  while (total < bytes.size()) {
    const std::size_t piece = std::min(bytes.size() - total, kWritePiece);
    const std::size_t n = sndbuf_.write(bytes.subspan(total, piece));
    total += n;
    const bool more = n == piece && total < bytes.size();
    cork_ = corked || more || more_follows;
    if (!more && !more_follows && total > 0) mark_push();  // the write's last byte
    if (n > 0) output();
    if (!more) break;
  }
  cork_ = corked;
  if (total == 0) return Errc::would_block;
  return total;
}

Status TcpConnection::write_msg(Msg& msg) {
  if (error_ != Errc::ok) return take_error();
  if (write_shut_) return Errc::closed;
  if (state_ != State::syn_sent && state_ != State::syn_received && state_ != State::established &&
      state_ != State::close_wait) {
    return state_ == State::closed && proto_ != nullptr ? Errc::not_connected : Errc::closed;
  }
  const std::size_t before = msg.size();
  const Status st = sndbuf_.write(msg);
  if (msg.size() == before) return st;  // nothing taken
  mark_push();
  output();
  return st;
}

void TcpConnection::mark_push() {
  // The sequence number after the last byte queued (a SYN not yet
  // acknowledged takes one before the data).
  const SeqNum end = snd_una_ + static_cast<std::uint32_t>(sndbuf_.size()) + (snd_una_ == iss_ ? 1u : 0u);
  if (!push_marks_.empty() && push_marks_.back() == end) return;
  if (push_marks_.size() == kPushMarks) push_marks_.erase(push_marks_.begin());
  push_marks_.push_back(end);
}

Result<std::size_t> TcpConnection::read(std::span<std::byte> dst) {
  if (!rcvbuf_.empty()) {
    std::size_t n = rcvbuf_.read(dst.first(urgent_limit(dst.size())));
    if (urg_in_ && read_seq() >= rcv_up_) urg_in_ = false;  // the urgent byte was read
    if (proto_ != nullptr) {
      autotune_rcvbuf();
      window_opened();
    }
    return n;
  }
  if (error_ != Errc::ok) return take_error();
  if (fin_received_ || (proto_ == nullptr && state_ == State::closed)) return std::size_t{0};
  if (state_ == State::closed) return Errc::not_connected;
  return Errc::would_block;
}

Result<std::size_t> TcpConnection::peek(std::span<std::byte> dst, std::size_t skip) {
  if (!rcvbuf_.empty()) return rcvbuf_.peek(dst, skip);
  if (error_ != Errc::ok) return error_;  // left pending, as Linux's MSG_PEEK leaves it
  if (fin_received_ || (proto_ == nullptr && state_ == State::closed)) return std::size_t{0};
  if (state_ == State::closed) return Errc::not_connected;
  return Errc::would_block;
}

Result<Msg> TcpConnection::read_msg(std::size_t max) {
  if (!rcvbuf_.empty()) {
    Msg m = rcvbuf_.read_msg(urgent_limit(max));
    if (urg_in_ && read_seq() >= rcv_up_) urg_in_ = false;
    if (proto_ != nullptr) {
      autotune_rcvbuf();
      window_opened();
    }
    return m;
  }
  if (error_ != Errc::ok) return take_error();
  if (fin_received_ || (proto_ == nullptr && state_ == State::closed)) return Msg();
  if (state_ == State::closed) return Errc::not_connected;
  return Errc::would_block;
}

// ---- urgent data (RFC 9293 3.8.5, in line as RFC 6093 asks) ------------------

SeqNum TcpConnection::read_seq() const noexcept {
  return rcv_nxt_ - static_cast<std::uint32_t>(rcvbuf_.size()) - (fin_received_ ? 1u : 0u);
}

// A read stops before the urgent byte when bytes come before it (as BSD and
// Linux do), so the application can tell the mark (SIOCATMARK); at the mark
// it reads on.
std::size_t TcpConnection::urgent_limit(std::size_t want) const noexcept {
  if (!urg_in_) return want;
  const SeqNum mark = rcv_up_ - 1u;
  const SeqNum at = read_seq();
  if (mark <= at) return want;
  return std::min<std::size_t>(want, seq_span(at, mark));
}

bool TcpConnection::at_urgent_mark() const noexcept { return urg_in_ && read_seq() == rcv_up_ - 1u; }

// The byte `ahead` bytes past the end of the queue is urgent (MSG_OOB: the
// last byte of the send, set before its data is queued so every segment of
// it carries the pointer). SND.UP only moves forward.
Status TcpConnection::mark_urgent(std::size_t ahead) {
  if (write_shut_ || (state_ != State::syn_sent && state_ != State::syn_received && state_ != State::established &&
                      state_ != State::close_wait)) {
    return Errc::not_connected;
  }
  const SeqNum end = snd_una_ + static_cast<std::uint32_t>(sndbuf_.size() + ahead) + (snd_una_ == iss_ ? 1u : 0u);
  if (end == snd_una_ + (snd_una_ == iss_ ? 1u : 0u)) return Errc::invalid_argument;  // no byte to mark
  if (urg_out_ && end <= snd_up_) return {};
  if (!urg_out_ || end != snd_up_) ++proto_->stats().urgent_out;
  snd_up_ = end;
  urg_out_ = true;
  return {};
}

// RFC 9293 3.10.7.4 sixth, the URG bit: RCV.UP moves forward, and the
// application learns of it (ev_urgent, POLLPRI) until it reads the urgent
// byte. A pointer that does not advance, or names a byte already read, is
// no news (a retransmission, or the pointer the sender repeats).
void TcpConnection::process_urgent(const Header& h) {
  if (h.urgent == 0 || upper() != nullptr || user_closed_) return;
  const SeqNum up = h.seq + h.urgent;
  if (urg_in_ && up <= rcv_up_) return;
  if (up - 1u < read_seq()) return;
  rcv_up_ = up;
  urg_in_ = true;
  ++proto_->stats().urgent_in;
}

// RFC 9293 3.10.4 for one direction: FIN after the queued data.
Status TcpConnection::shutdown_write() {
  if (proto_ == nullptr) return Errc::closed;
  if (write_shut_) return {};
  switch (state_) {
    case State::syn_received:
    case State::established:
      write_shut_ = true;
      enter_state(State::fin_wait_1);
      break;
    case State::close_wait:
      write_shut_ = true;
      enter_state(State::last_ack);
      break;
    case State::syn_sent:
    case State::closed:
      return Errc::not_connected;
    default:
      return {};
  }
  output();
  return {};
}

Status TcpConnection::close_gracefully() {
  user_closed_ = true;
  on_event_ = {};
  if (proto_ == nullptr) return {};
  // RFC 1122 4.2.2.13 / RFC 2525 2.17: data the application will never read
  // is lost; say so with a RST instead of a FIN.
  if (!rcvbuf_.empty() && state_ != State::syn_sent) {
    abort();
    return {};
  }
  switch (state_) {
    case State::closed:
    case State::syn_sent:
      release();
      return {};
    case State::syn_received:
    case State::established:
    case State::close_wait:
      return shutdown_write();
    case State::time_wait:
      leave_for_time_wait();
      return {};
    default:
      return {};  // closing already; the stack finishes the handshake
  }
}

// RFC 9293 3.10.5.
void TcpConnection::abort() {
  user_closed_ = true;
  on_event_ = {};
  if (proto_ == nullptr) return;
  Ref<TcpConnection> keep(this);
  switch (state_) {
    case State::syn_received:
    case State::established:
    case State::fin_wait_1:
    case State::fin_wait_2:
    case State::close_wait:
      send_rst_and_close();
      return;
    default:
      release();
  }
}

void TcpConnection::set_nodelay(bool on) noexcept {
  nodelay_ = on;
  if (on) output();
}

void TcpConnection::set_cork(bool on) noexcept {
  cork_ = on;
  if (!on) output();
}

void TcpConnection::set_keepalive(bool on) noexcept {
  keepalive_ = on;
  if (proto_ == nullptr) return;
  if (on && state_ == State::established) {
    keepalive_timer_.arm_after(keepalive_idle());
  } else if (!on) {
    keepalive_timer_.cancel();
  }
}

// A size the program sets is kept: no autotuning of that buffer (as Linux).
void TcpConnection::set_sndbuf(std::size_t bytes) noexcept {
  std::size_t max = proto_ != nullptr ? proto_->config().buf_max : bytes;
  sndbuf_.set_limit(std::clamp<std::size_t>(bytes, 2048, max));
  sndbuf_locked_ = true;
}

void TcpConnection::set_rcvbuf(std::size_t bytes) noexcept {
  std::size_t max = proto_ != nullptr ? proto_->config().buf_max : bytes;
  rcvbuf_limit_ = std::clamp<std::size_t>(bytes, 2048, max);
  rcvbuf_locked_ = true;
  rcv_tune_.reset();
}

// ---- buffer autotuning ------------------------------------------------------------

bool TcpConnection::autotunes_rcv() const noexcept {
  return !rcvbuf_locked_ && proto_ != nullptr && proto_->config().autotune && upper() == nullptr && !user_closed_;
}

// Per in-order data segment: the receiver's RTT, from the timestamp the
// peer echoes (1 ms ticks), and from how long one window takes to arrive
// (an upper bound, and all there is without timestamps or under a tick).
void TcpConnection::measure_rcv_rtt(const Options& opts) {
  const Time now = last_recv_;
  if (!rcv_tune_) {
    rcv_tune_ = std::make_unique<RcvTune>();
    rcv_tune_->space_time = now;
    rcv_tune_->space_seq = read_seq();
    rcv_tune_->space = 10u * mss_;  // what an initial window brings (RFC 6928)
    rcv_tune_->win_seq = rcv_adv_;
    rcv_tune_->win_time = now;
  }
  RcvTune& t = *rcv_tune_;
  if (ts_ok_ && opts.timestamps && opts.timestamps->tsecr != 0) {
    const auto now_ms = static_cast<std::uint32_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count());
    const std::uint32_t d = now_ms - opts.timestamps->tsecr;
    // Under one tick: less than 1 ms, taken as half of it.
    if (d < 60'000) rcv_rtt_sample(d == 0 ? Duration(std::chrono::microseconds(500)) : Duration(std::chrono::milliseconds(d)));
  }
  if (rcv_nxt_ >= t.win_seq) {
    rcv_rtt_sample(now - t.win_time);
    t.win_seq = rcv_nxt_ + std::max<std::uint32_t>(static_cast<std::uint32_t>(rcv_adv_ - rcv_nxt_), mss_);
    t.win_time = now;
  }
}

// The least sample: both kinds only ever overstate the path's RTT (by the
// queues, by a window's serialization), so the minimum is the closest.
void TcpConnection::rcv_rtt_sample(Duration d) noexcept {
  if (d <= Duration::zero()) return;
  Duration& rtt = rcv_tune_->rtt;
  if (rtt == Duration::zero() || d < rtt) rtt = d;
}

// After a read: once per receiver RTT, if the application read more than
// in any RTT before, the buffer grows to hold two RTTs of it, and, while
// that is growing (the peer's slow start), as much again as it grew -- at
// most twice as much: a sender in slow start doubles per RTT. A path under
// a millisecond (a LAN, memif) is left at the configured size, which
// already holds its bandwidth-delay product (1 MiB is 8 Gbit/s at 1 ms);
// growing it there only lets the sender overrun the link's queues.
void TcpConnection::autotune_rcvbuf() {
  if (!rcv_tune_ || rcvbuf_locked_) return;
  RcvTune& t = *rcv_tune_;
  Duration rtt = t.rtt;
  if (rto_.has_sample() && rto_.srtt() > Duration::zero() && (rtt == Duration::zero() || rto_.srtt() < rtt)) {
    rtt = rto_.srtt();
  }
  if (rtt <= Duration::zero() || last_recv_ - t.space_time < rtt) return;
  const SeqNum at = read_seq();
  const std::uint32_t copied = seq_span(t.space_seq, at);
  if (copied > t.space && rtt >= std::chrono::milliseconds(1)) {
    std::uint64_t want = 2 * std::uint64_t{copied} + 16 * std::uint64_t{mss_};
    want += std::min<std::uint64_t>(want, want * (copied - t.space) / t.space);
    want = std::min<std::uint64_t>(want, proto_->config().autotune_max);
    if (want > rcvbuf_limit_) {
      rcvbuf_limit_ = static_cast<std::size_t>(want);
      ++proto_->stats().rcvbuf_grown;
    }
    t.space = copied;
  }
  t.space_seq = at;
  t.space_time = last_recv_;
}

// After an ACK: room for twice what may be in flight (the congestion
// window, or the peer's window if smaller), so the window is never short of
// data to send.
void TcpConnection::autotune_sndbuf() {
  if (sndbuf_locked_ || !proto_->config().autotune) return;
  const std::uint32_t flight = std::min(cc_->cwnd(), std::max(max_snd_wnd_, snd_wnd_));
  const std::uint64_t want = std::min<std::uint64_t>(2 * std::uint64_t{flight}, proto_->config().autotune_max);
  if (want > sndbuf_.limit()) {
    sndbuf_.set_limit(static_cast<std::size_t>(want));
    ++proto_->stats().sndbuf_grown;
  }
}

ChecksumMode TcpConnection::checksum_mode() const noexcept {
  if (csum_) return *csum_;
  return proto_ != nullptr ? proto_->checksum_mode() : ChecksumMode::on;
}

std::uint32_t TcpConnection::events() const noexcept {
  std::uint32_t e = 0;
  bool gone = proto_ == nullptr && state_ == State::closed;
  if (!rcvbuf_.empty() || fin_received_ || error_ != Errc::ok || gone) e |= ev_readable;
  if ((state_ == State::established || state_ == State::close_wait) && !write_shut_ && sndbuf_.space() > 0) {
    e |= ev_writable;
  }
  if (error_ != Errc::ok) e |= ev_error;
  if (fin_received_ || gone) e |= ev_hangup;
  if (urg_in_) e |= ev_urgent;
  return e;
}

ConnStats TcpConnection::stats() const noexcept {
  ConnStats s;
  static_cast<ConnCounters&>(s) = stats_;
  s.state = state_;
  s.unacked = static_cast<std::uint32_t>(seq_span(snd_una_, snd_max_));
  s.notsent = static_cast<std::uint32_t>(unsent_bytes());
  s.sndbuf = static_cast<std::uint32_t>(sndbuf_.limit());
  s.rcvbuf = static_cast<std::uint32_t>(rcvbuf_limit_);
  if (rcv_tune_) {
    s.rcv_rtt_us = static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(rcv_tune_->rtt).count());
    s.rcv_space = rcv_tune_->space;
  }
  s.srtt = rto_.srtt();
  s.rttvar = rto_.rttvar();
  s.rto = rto_.rto();
  s.cwnd = cc_->cwnd();
  s.ssthresh = cc_->ssthresh();
  s.snd_wnd = snd_wnd_;
  s.rcv_wnd = static_cast<std::uint32_t>(rcv_adv_ - rcv_nxt_);
  s.mss = mss_;
  s.pmtu = path_mtu();
  s.snd_wscale = snd_wscale_;
  s.rcv_wscale = rcv_wscale_;
  s.sack = sack_ok_;
  s.timestamps = ts_ok_;
  s.ecn = ecn_ok_;
  return s;
}

// ---- state ------------------------------------------------------------------------

void TcpConnection::enter_state(State s) {
  State old = state_;
  state_ = s;
  if (proto_ == nullptr) return;
  if (s == State::established && old != State::established) {
    ++proto_->stats().established;
    retries_ = 0;
    quickacks_ = proto_->config().quickacks;
    if (keepalive_) keepalive_timer_.arm_after(keepalive_idle());
    if (listener_ != nullptr) listener_->established(*this);
  }
}

void TcpConnection::enter_time_wait() {
  enter_state(State::time_wait);
  rtx_timer_.cancel();
  persist_timer_.cancel();
  keepalive_timer_.cancel();
  delack_timer_.cancel();
  if (user_closed_) {
    leave_for_time_wait();
    return;
  }
  // RFC 9293 3.6.1: 2 MSL, so old duplicates die before the 4-tuple is reused.
  if (proto_ != nullptr) time_wait_timer_.arm_after(2 * proto_->config().msl);
  notify();
}

// Nobody holds this connection any more: the protocol keeps a TIME-WAIT
// record for its 4-tuple (tcp_timewait.cpp) and the connection goes. With
// the record table full, it just closes, as Linux does past
// tcp_max_tw_buckets.
void TcpConnection::leave_for_time_wait() {
  if (proto_ == nullptr) return;
  Ref<TcpConnection> keep(this);
  if (host().park_time_wait(*this)) claimed_ = passive_ = false;  // the record gives the flow back
  state_ = State::closed;
  release();
}

void TcpConnection::on_time_wait_timeout() {
  Ref<TcpConnection> keep(this);
  state_ = State::closed;
  release();
  notify();
}

// The connection ends with an error the user sees once (ECONNREFUSED, ...).
void TcpConnection::fail(Errc e) {
  Ref<TcpConnection> keep(this);
  error_ = e;
  state_ = State::closed;
  release();
  notify();
}

// Leave the stack: forget the 4-tuple, stop the timers, give back the IP
// session. What was received stays readable through a handle.
void TcpConnection::release() {
  if (proto_ == nullptr) return;
  Ref<TcpConnection> keep(this);
  TcpProtocol::Host p = host();
  proto_ = nullptr;
  // The authority's flow goes with us: the one it made at connect(), or the
  // one it learnt from a passive open's SYN-ACK (filterd steer).
  if (claimed_ || passive_) p.release_flow_later(tuple_);
  claimed_ = false;
  rtx_timer_.cancel();
  delack_timer_.cancel();
  persist_timer_.cancel();
  keepalive_timer_.cancel();
  time_wait_timer_.cancel();
  if (listener_ != nullptr) {
    listener_->forget(*this);
    listener_ = nullptr;
  }
  p.remove(*this);
  if (ip_) {
    ip_ = nullptr;
    p.drop_ip_user(tuple_.remote.addr);
  }
  sndbuf_.clear();
  push_marks_ = {};
  reasm_.clear();
  if (state_ != State::time_wait) state_ = State::closed;
}

// ---- per-connection settings (setsockopt) -----------------------------------------

Status TcpConnection::tune(const Tuning& t) {
  const auto positive = [](const std::optional<Duration>& d) { return !d || *d > Duration{0}; };
  if (!positive(t.keepalive_idle) || !positive(t.keepalive_interval)) return Errc::invalid_argument;
  if (t.keepalive_probes && *t.keepalive_probes == 0) return Errc::invalid_argument;
  if (t.user_timeout && *t.user_timeout < Duration{0}) return Errc::invalid_argument;
  if (t.max_segment && (*t.max_segment < 88 || *t.max_segment > 65495)) return Errc::invalid_argument;
  if (!tuning_) tuning_ = std::make_unique<Tuning>();
  if (t.congestion) {
    Result<std::unique_ptr<CongestionControl>> cc = make_congestion_control(*t.congestion, cc_->config());
    if (!cc) return cc.error();  // not_found: no such algorithm
    (*cc)->adopt_state(*cc_);
    cc_ = std::move(*cc);
  }
  // max_segment is used by the handshake (our SYN's offer, the MSS we send with).
  tuning_->update(t);
  if (t.tos) tos_ = static_cast<std::uint8_t>(*t.tos & ~kEcnMask);
  if (t.hop_limit) hop_limit_ = *t.hop_limit;
  if (proto_ == nullptr) return {};
  // A new idle time counts from the last segment received, as Linux's does.
  if (t.keepalive_idle && keepalive_ && state_ == State::established && keepalive_sent_ == 0) {
    keepalive_timer_.arm(std::max(proto_->timers().clock().now(), last_recv_ + keepalive_idle()));
  }
  if (t.quickack) {
    quickacks_ = *t.quickack ? std::max(proto_->config().quickacks, 16u) : 0;
    if (*t.quickack && ack_pending_) send_ack_now();
  }
  return {};
}

Duration TcpConnection::keepalive_idle() const noexcept {
  return tuning_ && tuning_->keepalive_idle ? *tuning_->keepalive_idle : proto_->config().keepalive_idle;
}
Duration TcpConnection::keepalive_interval() const noexcept {
  return tuning_ && tuning_->keepalive_interval ? *tuning_->keepalive_interval : proto_->config().keepalive_interval;
}
unsigned TcpConnection::keepalive_probes() const noexcept {
  return tuning_ && tuning_->keepalive_probes ? *tuning_->keepalive_probes : proto_->config().keepalive_probes;
}
Duration TcpConnection::user_timeout() const noexcept {
  return tuning_ && tuning_->user_timeout ? *tuning_->user_timeout : Duration{0};
}

// ---- what TcpProtocol asks ----------------------------------------------------

void TcpConnection::answer_syn() {
  enter_state(State::syn_received);
  send_syn();
}

void TcpConnection::take_cookie_ack(const Header& h, const Options& opts, Msg payload) {
  enter_state(State::established);
  if (!payload.empty() || h.has(kFin)) segment_arrives(h, opts, std::move(payload));
}

void TcpConnection::abandon_passive_open() noexcept {
  if (listener_ == nullptr) return;
  listener_->forget(*this);
  listener_ = nullptr;
}

TimeWaitRecord TcpConnection::time_wait_record(Time expires) noexcept {
  TimeWaitRecord tw;
  tw.window = static_cast<std::uint16_t>(advertised_window());
  tw.snd_nxt = snd_max_;
  tw.rcv_nxt = rcv_nxt_;
  tw.rcv_wnd = static_cast<std::uint32_t>(rcv_adv_ - rcv_nxt_);
  tw.max_snd_wnd = max_snd_wnd_;
  tw.ts_recent = ts_recent_;
  tw.ts_recent_age = ts_recent_age_;
  tw.expires = expires;
  tw.csum = checksum_mode();
  tw.ts_ok = ts_ok_;
  tw.sack_ok = sack_ok_;
  tw.passive = passive_;
  tw.claimed = claimed_;
  return tw;
}

void TcpConnection::yield_to_new_incarnation() {
  claimed_ = passive_ = false;
  state_ = State::closed;
  release();
}

TcpProtocol::ConnectionInfo TcpConnection::info() const noexcept {
  return TcpProtocol::ConnectionInfo{tuple_, state_, passive_, claimed_};
}

void TcpConnection::notify() {
  if (on_event_) {
    auto fn = on_event_;  // the callback may replace or clear it
    fn();
  }
}

}  // namespace xk::tcp

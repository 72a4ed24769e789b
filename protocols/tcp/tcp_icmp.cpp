// ICMP errors about our connections (RFC 1122 4.2.3.9), believed only when
// they quote a segment in flight (RFC 5927 4.1): path MTU discovery from
// frag-needed (RFC 1191), hard errors that end a connection attempt, soft
// errors kept for the report of a timeout. And the DF bit of the IP sessions
// TCP sends through.

#include <algorithm>
#include <array>

#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/tcp.hpp"
#include "tcb.hpp"

namespace xk::tcp {

namespace {

// RFC 1191 section 7, table 7-1: the plateaus, largest first.
constexpr std::array<std::uint16_t, 11> kPlateaus{65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68};

// The largest plateau below `size` (RFC 1191 section 5).
std::uint32_t plateau_below(std::uint32_t size) noexcept {
  for (std::uint16_t p : kPlateaus) {
    if (p < size) return p;
  }
  return kPlateaus.back();
}

// Destination unreachable codes (RFC 792) that RFC 1122 4.2.3.9 calls hard.
constexpr std::uint8_t kProtoUnreachable = 2;
constexpr std::uint8_t kPortUnreachable = 3;

bool is_hard(const ctl::NetError& e) noexcept {
  return e.kind == ctl::NetError::Kind::unreachable &&
         (e.icmp_code == kProtoUnreachable || e.icmp_code == kPortUnreachable);
}

// What an error reads as when it is the one reported (ECONNREFUSED,
// EHOSTUNREACH, EPROTO in POSIX terms).
Errc errc_of(const ctl::NetError& e) noexcept {
  if (is_hard(e)) return Errc::refused;
  if (e.kind == ctl::NetError::Kind::param_problem) return Errc::malformed;
  return Errc::no_route;  // net/host unreachable, time exceeded, and the rest
}

}  // namespace

// ---- the protocol ---------------------------------------------------------------

void TcpProtocol::allow_fragments(IpAddr peer) noexcept {
  if (IpPeer* p = peers_.find(PeerKey{peer})) (void)p->session->control(ctl::SetDontFragment{false});
}

void TcpProtocol::icmp_error(const ctl::NetError& err) {
  ++c_.icmp_errors;
  const ConnKey key{{err.local, err.local_port.value}, {err.remote, err.remote_port.value}};
  SessionRef* s = err.protocol == kIpProtocol ? conns_.find(key) : nullptr;
  if (s == nullptr) {
    // A TIME-WAIT has nothing in flight (RFC 5927 4.1), as in the connection.
    if (err.protocol == kIpProtocol && in_time_wait(key)) {
      ++c_.icmp_out_of_window;
    } else {
      ++c_.icmp_no_connection;
    }
    return;
  }
  Ref<TcpConnection> c(static_cast<TcpConnection*>(s->get()));
  c->icmp_error(err);
}

// ---- one connection ---------------------------------------------------------------

std::uint16_t TcpConnection::path_mtu() const noexcept {
  if (pmtu_ != 0) return pmtu_;
  if (!ip_) return 0;
  // Until a router says otherwise, the path is as wide as our link.
  Result<std::size_t> mtu = ip_->control(ctl::GetMtu{});
  if (!mtu) return min_path_mtu();
  return static_cast<std::uint16_t>(std::min<std::size_t>(*mtu + (ip_tcp_headers() - Header::kMinSize), 65535));
}

void TcpConnection::icmp_error(const ctl::NetError& err) {
  if (proto_ == nullptr) return;
  Ref<TcpConnection> keep(this);
  TcpProtocol::Counters& c = proto_->stats();
  // RFC 5927 4.1: believe only an error about a segment in flight,
  // SND.UNA <= SEG.SEQ < SND.NXT, so a blind attacker has to guess it. After
  // a go-back our SND.NXT lies below what was sent: SND.MAX is RFC 9293's
  // SND.NXT here.
  const SeqNum seq(err.inner_seq);
  if (!(snd_una_ <= seq && seq < snd_max_)) {
    ++c.icmp_out_of_window;
    return;
  }
  ++stats_.icmp_errors;
  if (err.kind == ctl::NetError::Kind::frag_needed) {
    frag_needed(err.next_hop_mtu);
    return;
  }
  // RFC 1122 4.2.3.9: protocol and port unreachable are hard errors and end
  // the connection. RFC 5927 5.2: only while it is not yet synchronized; in
  // SYN-SENT the peer never answered, so nothing contradicts the router.
  if (is_hard(err) && state_ == State::syn_sent) {
    ++c.icmp_hard_errors;
    fail(errc_of(err));
    return;
  }
  // Soft errors (and hard ones once synchronized) do not end anything: the
  // last one is what a timeout reports (RFC 1122 4.2.3.9).
  ++c.icmp_soft_errors;
  soft_error_ = errc_of(err);
}

// RFC 1191: a router on the path could not forward a segment of ours with DF
// set. Lower the path MTU, and with it the MSS, and send again what is lost.
void TcpConnection::frag_needed(std::uint16_t next_hop_mtu) {
  TcpProtocol::Counters& c = proto_->stats();
  const std::uint32_t current = path_mtu();
  // RFC 1191 section 5: an old router does not say. Take the plateau below the
  // packet it refused; IP quotes us only the first 8 bytes of TCP, so that is
  // the largest packet we send.
  std::uint32_t mtu = next_hop_mtu;
  if (mtu == 0) mtu = plateau_below(std::min<std::uint32_t>(current, std::uint32_t{mss_} + ip_tcp_headers()));
  // RFC 1191 section 3: an ICMP never raises the estimate; a report at or
  // above what we believe is stale, forged, or from another path.
  if (mtu >= current) {
    ++c.pmtu_ignored;
    return;
  }
  // RFC 1191 section 3 lets no host go below 68; we stop at 576 (RFC 5927
  // section 7: a forged small MTU costs the connection its throughput) and
  // let routers fragment what is bigger than a narrower path takes, as hosts
  // without PMTU discovery do.
  bool fragment = false;
  if (mtu < min_path_mtu()) {
    mtu = min_path_mtu();
    fragment = true;
    host().allow_fragments(tuple_.remote.addr);
  }
  if (mtu < current) {
    pmtu_ = static_cast<std::uint16_t>(mtu);
    ++c.pmtu_updates;
    ++stats_.pmtu_updates;
  }
  // The peer's MSS still bounds us: never larger than before.
  const auto mss = static_cast<std::uint16_t>(std::min<std::uint32_t>(mss_, mtu - ip_tcp_headers()));
  if (mss == mss_ && !fragment) return;  // what we send fits already
  mss_ = mss;
  sb_.set_smss(payload_mss());
  // Not a congestion signal: cwnd stays in bytes (only an initial window is
  // recomputed for the smaller segment).
  cc_->set_mss(payload_mss());
  resend_outstanding();
}

// RFC 1191 section 6.4: what is in flight was too big and is lost. Send it
// again at once in segments of the new size rather than wait for the
// retransmission timer, and do not take it for congestion: cwnd and ssthresh
// stay, the RTO is not backed off.
void TcpConnection::resend_outstanding() {
  switch (state_) {
    case State::established:
    case State::close_wait:
    case State::fin_wait_1:
    case State::closing:
    case State::last_ack:
      break;
    default:
      return;  // a SYN is never too big; the handshake takes the new MSS
  }
  if (snd_una_ == snd_max_) return;
  const Time now = proto_->timers().clock().now();
  if (in_recovery_) {
    in_recovery_ = false;
    cc_->exit_recovery(now, seq_span(snd_una_, snd_max_));
  }
  if (sack_ok_) {
    sb_.exit_recovery();
    sb_.clear();  // its segments are of the old size
  }
  dupacks_ = 0;
  // RFC 6582 4.1's rule: the duplicate ACKs this resending may bring (the
  // receiver had some of it) are no new loss.
  recover_ = snd_max_;
  recover_set_ = true;
  rtt_timing_ = false;  // Karn
  rtx_timer_.cancel();  // restarted, not backed off, by the first resent segment
  if (rack_ != nullptr && !rack_->rack.empty()) {
    // RACK: all of it is lost; output() sends it again in order, in
    // segments of the new size, as far as cwnd allows.
    rack_->rack.on_rto();
    rack_->tlp.reset();
    output();
    arm_rtx();
    return;
  }
  snd_nxt_ = snd_una_;

  // Go back to SND.UNA. Unlike new data, resent data is not held by Nagle.
  const SeqNum data_end = snd_una_ + static_cast<std::uint32_t>(sndbuf_.size());
  const SeqNum sent_end = seq_min(data_end, snd_max_);
  const std::uint32_t smss = payload_mss();
  std::uint32_t budget = std::max(cc_->cwnd(), smss);
  while (snd_nxt_ < sent_end && budget > 0) {
    const std::uint32_t len = std::min({smss, seq_span(snd_nxt_, sent_end), budget});
    std::uint8_t flags = kAck;
    const bool last = snd_nxt_ + len == data_end;
    if (last) flags |= kPsh;
    if (last && fin_sent_) flags |= kFin;
    if (!send_segment(snd_nxt_, len, flags, true)) break;
    snd_nxt_ += len + ((flags & kFin) ? 1u : 0u);
    budget -= len;
  }
  // Only our FIN was outstanding.
  if (fin_sent_ && snd_nxt_ == data_end && snd_max_ > data_end && budget > 0) {
    if (send_segment(snd_nxt_, 0, kAck | kFin, true)) snd_nxt_ += 1;
  }
  output();
}

}  // namespace xk::tcp

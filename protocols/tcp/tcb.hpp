#pragma once
// The TCB of a TCP connection (RFC 9293 3.3.1) and a listener's state: the
// protocol's internals, apart from the public face in xk/protocols/tcp.hpp
// (TcpSocket, TcpListener, StreamEndpoint, TcpProtocol). Included by
// protocols/tcp/*.cpp and by the white-box tests (tcp_script, tcp); not
// installed.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "xk/protocols/tcp.hpp"
#include "xk/protocols/tcp_rack.hpp"

namespace xk::tcp {

class TcpConnection;
class ListenSession;

class TcpProtocol::Host {
 public:
  using IpPeer = TcpProtocol::IpPeer;  // an IP session to one peer, shared by its connections

  explicit Host(TcpProtocol& p) noexcept : p_(p) {}

  // ---- for a connection ----
  // The IP session to `peer`, opened if need be; the caller becomes a user.
  Result<IpPeer*> ip_for(IpAddr peer) { return p_.ip_for(peer, nullptr); }
  // The IP session to `peer` if there is one.
  IpPeer* ip_of(IpAddr peer) noexcept { return p_.peers_.find(PeerKey{peer}); }
  void drop_ip_user(IpAddr peer) noexcept { p_.drop_ip_user(peer); }
  Result<std::uint16_t> pick_ephemeral(IpAddr local, IpAddr remote, std::uint16_t rport) {
    return p_.pick_ephemeral(local, remote, rport);
  }
  Status insert(TcpConnection& c) { return p_.insert(c); }
  void remove(TcpConnection& c) noexcept { p_.remove(c); }
  // Give the authority's flow for `t` back, if there is an authority, once
  // what this pass queued has left.
  void release_flow_later(const FourTuple& t) {
    if (p_.authority_ != nullptr) p_.defer_release(t);
  }
  SeqNum isn(const FourTuple& t, Time now) const noexcept { return p_.isn_.isn(t, now); }
  bool park_time_wait(TcpConnection& c) { return p_.park_time_wait(c); }
  void allow_fragments(IpAddr peer) noexcept { p_.allow_fragments(peer); }
  std::uint16_t path_mss(Session& ip) const { return p_.path_mss(ip); }
  std::uint8_t our_wscale(std::size_t rcvbuf_max) const noexcept { return p_.our_wscale(rcvbuf_max); }
  bool challenge_ack_allowed(Time now) noexcept { return p_.challenge_ack_allowed(now); }
  bool segmentation_offload(const IpAddr& peer) const noexcept { return p_.segmentation_offload(peer); }
  Status transmit(Session& ip, IpAddr src, IpAddr dst, Msg segment, ChecksumMode csum) {
    return p_.transmit(ip, src, dst, std::move(segment), csum);
  }
  Status send_raw(IpPeer& ip, std::uint16_t sport, std::uint16_t dport, SeqNum seq, SeqNum ack, std::uint8_t flags,
                  std::uint16_t window, const Options* opts, ChecksumMode csum) {
    return p_.send_raw(ip, sport, dport, seq, ack, flags, window, opts, csum);
  }

  // ---- for a listener ----
  void remove_listener(IpAddr addr, Port port, bool v6only) noexcept {
    p_.listeners_.erase(ListenKey{addr, port.value, v6only});
  }
  // Every connection with a 4-tuple (not the TIME-WAIT records).
  template <class F>
  void for_each_connection(F&& f);

 private:
  TcpProtocol& p_;
};

// The TCB: one connection (RFC 9293 3.3.1). A Session, so another protocol can
// sit on it; applications use it through TcpSocket.
class TcpConnection final : public StreamEndpoint {
 public:
  // The three ways a connection comes to be.
  // An active open's TCB: CLOSED until connect(); data goes to `upper`, or
  // to the socket when null.
  static Ref<TcpConnection> active(TcpProtocol& proto, Protocol* upper);
  // A passive open from a SYN that listener `l` takes (RFC 9293 3.10.7.2),
  // on IP session `ip` (whose user count it takes): the state SYN-RECEIVED
  // starts from, before the SYN-ACK. `iss`: our initial sequence number.
  static Ref<TcpConnection> from_syn(TcpProtocol& proto, ListenSession& l, TcpProtocol::Host::IpPeer& ip,
                                     const FourTuple& t, const Header& h, const Options& opts, SeqNum iss);
  // The third segment of a SYN-cookie handshake (RFC 4987): what our SYN-ACK
  // offered, rebuilt from the cookie -- `mss` -- and from the options its
  // timestamp carried; the state ESTABLISHED starts from.
  static Ref<TcpConnection> from_cookie(TcpProtocol& proto, ListenSession& l, TcpProtocol::Host::IpPeer& ip,
                                        const FourTuple& t, const Header& h, const Options& opts,
                                        std::uint16_t mss, Time now);
  ~TcpConnection() override;

  // Session interface: push() sends `msg` as stream bytes (all or would_block).
  Status push(Msg msg) override;
  Status pop(Session& lower, Msg msg) override;
  Status close() override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  // ---- the user calls (RFC 9293 3.10.1 - 3.10.6) --------------------------
  // From an ephemeral port, or from `local_port` (and `local_addr`, which must
  // be the address the stack reaches `addr` from) when the socket was bound.
  Status connect(IpAddr addr, Port port, IpAddr local_addr = {}, Port local_port = {}) override;
  // Copies what fits in the send buffer; would_block when nothing does.
  Result<std::size_t> write(std::span<const std::byte> bytes, bool more) override;
  Status write_msg(Msg& msg) override;
  // Copies out what has arrived; 0 at end of stream; would_block when empty.
  Result<std::size_t> read(std::span<std::byte> dst) override;
  Result<std::size_t> peek(std::span<std::byte> dst, std::size_t skip) override;
  Result<Msg> read_msg(std::size_t max) override;
  Status mark_urgent(std::size_t ahead) override;
  bool at_urgent_mark() const noexcept override;
  // No more writes: a FIN follows the queued data.
  Status shutdown_write() override;
  // Graceful close: FIN after the data (RFC 9293 3.10.4); the connection lives
  // on in the stack until the handshake ends.
  Status close_gracefully() override;
  // RST and forget (RFC 9293 3.10.5).
  void abort() override;

  void set_nodelay(bool on) noexcept override;
  void set_cork(bool on) noexcept override;
  void set_keepalive(bool on) noexcept override;
  void set_sndbuf(std::size_t bytes) noexcept override;
  void set_rcvbuf(std::size_t bytes) noexcept override;
  // Whether this connection computes checksums on send and verifies them on
  // receive; the stack's mode (csum=) until set. Off means off at both ends.
  void set_checksum(ChecksumMode mode) noexcept override { csum_ = mode; }
  Status tune(const Tuning& t) override;
  ChecksumMode checksum_mode() const noexcept override;

  State state() const noexcept override { return state_; }
  std::uint32_t events() const noexcept override;
  // Called on the stack's thread whenever events() may have changed.
  void set_on_event(std::function<void()> fn) override { on_event_ = std::move(fn); }
  Errc pending_error() const noexcept override { return error_; }
  Errc take_error() noexcept override { return std::exchange(error_, Errc::ok); }
  // The last ICMP soft error (RFC 1122 4.2.3.9): reported only if the
  // connection times out, forgotten when the peer acknowledges something.
  Errc soft_error() const noexcept override { return soft_error_; }
  ConnStats stats() const noexcept override;
  FourTuple tuple() const noexcept override { return tuple_; }
  std::size_t rcv_queued() const noexcept override { return rcvbuf_.size(); }
  std::size_t snd_queued() const noexcept override { return sndbuf_.size(); }
  bool detached() const noexcept override { return proto_ == nullptr; }
  TcpConnection* tcb() noexcept override { return this; }

  // ---- what TcpProtocol asks of a connection ----------------------------------
  // A segment of this connection's 4-tuple (RFC 9293 3.10.7).
  // `ce`: its IP header was marked Congestion Experienced (RFC 3168).
  void segment_arrives(Header h, const Options& opts, Msg payload, bool ce = false);
  // An ICMP error about this connection that passed TcpProtocol's checks.
  void icmp_error(const ctl::NetError& err);
  // After from_syn() and insertion: SYN-RECEIVED, and the SYN-ACK goes out.
  void answer_syn();
  // After from_cookie() and insertion: ESTABLISHED, and the third segment's
  // data or FIN is taken.
  void take_cookie_ack(const Header& h, const Options& opts, Msg payload);
  // After from_syn() or from_cookie() when the 4-tuple could not be
  // inserted: the listener forgets the connection.
  void abandon_passive_open() noexcept;
  // What a TIME-WAIT record keeps of this connection, ending at `expires`
  // (RCV.ADV moves as for the ACK it would send).
  TimeWaitRecord time_wait_record(Time expires) noexcept;
  // A SYN reopens this TIME-WAIT connection's 4-tuple (RFC 6191): the new
  // incarnation takes the flow over, so this one goes without giving it back.
  void yield_to_new_incarnation();
  TcpProtocol::ConnectionInfo info() const noexcept;
  // A passive open of listener `l`, not accepted yet.
  bool opened_by(const ListenSession& l) const noexcept { return listener_ == &l; }
  // Its listener closed before accept(): RST (RFC 9293 3.10.4, like ABORT).
  void listener_closed() {
    listener_ = nullptr;
    abort();
  }
  // accept() took it: the application owns it now.
  void accepted() noexcept {
    listener_ = nullptr;
    accepted_ = true;
  }
  // The stack lets go of the connection (the stack is going away).
  void release();

 private:
  TcpConnection(TcpProtocol& proto, Protocol* upper);

  // ---- input (tcp_input.cpp) -------------------------------------------------
  void input_syn_sent(const Header& h, const Options& opts, Msg payload);
  bool check_paws(const Header& h, const Options& opts);
  bool acceptable(const Header& h, std::size_t len) const noexcept;
  void process_rst(const Header& h);
  bool process_ack(const Header& h, const Options& opts, std::size_t len);
  void new_ack(const Header& h, const Options& opts, std::uint32_t acked);
  void duplicate_ack(const Header& h);
  void update_window(const Header& h);
  void process_data(const Header& h, Msg payload);
  void process_fin();
  void deliver(Msg data);
  // ---- ICMP errors (tcp_icmp.cpp) ---------------------------------------------
  // The IP and TCP fixed headers: a segment of MSS bytes is a packet of
  // MSS + 40 over IPv4, MSS + 60 over IPv6.
  std::uint16_t ip_tcp_headers() const noexcept { return tuple_.remote.addr.is_v4() ? 40 : 60; }
  // The smallest path MTU we believe: over IPv4 576, so the MSS never drops
  // below 536 (RFC 9293 3.7.1's default) however small a forged
  // frag-needed says; over IPv6 the minimum link MTU, 1280 (RFC 8200 5).
  std::uint16_t min_path_mtu() const noexcept { return tuple_.remote.addr.is_v4() ? 576 : 1280; }
  void frag_needed(std::uint16_t next_hop_mtu);
  void resend_outstanding();
  std::uint16_t path_mtu() const noexcept;
  Errc timeout_error() const noexcept { return soft_error_ != Errc::ok ? soft_error_ : Errc::timed_out; }
  void window_opened();
  void take_options(const Options& opts, bool syn);
  void challenge_ack();
  // RFC 3168 6.1.2: the peer echoed a congestion mark.
  void ecn_echo(Time now);
  // A loss-free reduction (an ECN echo, a loss a probe repaired): the
  // congestion control's decrease at once, no recovery.
  void reduce_window(Time now);

  // ---- output (tcp_output.cpp) -------------------------------------------------
  void output();
  bool send_new_data();
  bool send_recovery();
  Status send_segment(SeqNum seq, std::uint32_t len, std::uint8_t flags, bool retransmit);
  void send_syn();
  void send_ack_now();
  // Sends [start, end) of what was sent before again (the FIN too, when
  // the range holds it); false when nothing went.
  bool retransmit(SeqNum start, SeqNum end);
  void send_rst_and_close();
  void send_reset(SeqNum seq, SeqNum ack, std::uint8_t flags);
  void schedule_ack(std::uint32_t full_segments);
  std::uint32_t advertised_window();
  std::uint32_t rcv_space() const noexcept;
  std::uint32_t payload_mss() const noexcept;
  std::size_t unsent_bytes() const noexcept;
  // The retransmission timer, which also serves RACK's reordering timer
  // and the tail loss probe (RFC 8985 allows one timer for the three; only
  // one is pending at a time): arm_rtx() arms the RTO unless one of them is
  // already armed, arm_rto() (re)starts the RTO.
  void arm_rtx() noexcept;
  void arm_rto() noexcept;
  void arm_rto(Time now) noexcept;
  void on_rtx_timeout();
  void on_delack_timeout();
  // ---- RACK-TLP and PRR (RFC 8985, RFC 6937; recovery=rack) ----------------------
  // Loss recovery by RACK: made when a SACK connection first sends data.
  bool rack_on() const noexcept { return rack_ != nullptr; }
  void rack_after_ack(const Rack::AckResult& ra, const Header& h, const SackScoreboard::UpdateResult& sr,
                      bool pure_dupack, Time now);
  void rack_detect(Time now);
  void enter_rack_recovery(Time now);
  void prr_update(std::uint32_t delivered);
  bool send_recovery_rack();
  bool schedule_probe(Time now);  // false: no probe now
  void on_probe_timeout();
  void on_reorder_timeout();
  void on_persist_timeout();
  void arm_persist();
  void on_keepalive_timeout();
  void on_time_wait_timeout();
  void enter_time_wait();
  void leave_for_time_wait();
  void enter_state(State s);
  void fail(Errc e);
  void notify();
  std::uint32_t tsval_now() const noexcept;
  void start_rtt_timing(SeqNum seq, Time now);

  TcpProtocol::Host host() const noexcept { return TcpProtocol::Host{*proto_}; }

  TcpProtocol* proto_;  // null once released
  State state_ = State::closed;
  FourTuple tuple_{};
  SessionRef ip_;
  ListenSession* listener_ = nullptr;  // a passive open not yet accepted
  bool accepted_ = false;
  bool passive_ = false;  // made by a listener from a SYN (or a cookie's ACK)
  bool claimed_ = false;  // the local port came from the PortAuthority: give it back on release
  bool user_closed_ = false;  // no handle any more: free at CLOSED
  Errc error_ = Errc::ok;
  std::function<void()> on_event_;

  // Send sequence space (RFC 9293 3.3.1).
  SeqNum iss_, snd_una_, snd_nxt_, snd_max_;
  SeqNum snd_wl1_, snd_wl2_;
  std::uint32_t snd_wnd_ = 0;
  std::uint32_t max_snd_wnd_ = 0;
  // The end of the last short segment of new data sent: Nagle holds a
  // short segment only while such a one is unacknowledged (Minshall's
  // refinement, as Linux), so a write's short tail is not held behind its
  // own full segments.
  SeqNum snd_sml_;
  // Receive sequence space.
  SeqNum irs_, rcv_nxt_, rcv_adv_;  // rcv_adv_: the right edge we advertised
  SeqNum last_ack_sent_;            // RFC 7323 4.3
  std::uint8_t snd_wscale_ = 0;     // the peer's shift (applied to its windows)
  std::uint8_t rcv_wscale_ = 0;     // ours
  bool sack_ok_ = false;
  bool ts_ok_ = false;
  std::uint32_t ts_recent_ = 0;
  Time ts_recent_age_{};
  std::uint16_t peer_mss_ = 536;  // RFC 9293 3.7.1 default
  std::uint16_t mss_ = 536;       // our sending MSS (before options)
  std::uint16_t pmtu_ = 0;        // learnt from ICMP (RFC 1191); 0: the link's
  Errc soft_error_ = Errc::ok;    // RFC 1122 4.2.3.9
  std::optional<ChecksumMode> csum_;  // unset: the stack's

  SendBuffer sndbuf_;
  RecvBuffer rcvbuf_;
  std::size_t rcvbuf_limit_;
  // Buffer autotuning (docs/tcp.md, "Buffer autotuning"), made with the
  // first data that arrives for the application: an idle connection holds
  // none of it. Dynamic right-sizing: once per receiver RTT, the bytes the
  // application read in that RTT; the buffer grows to hold two such RTTs.
  struct RcvTune {
    Time space_time{};        // when this measurement began
    SeqNum space_seq;         // read_seq() then
    std::uint32_t space = 0;  // the most bytes read in one RTT so far
    Duration rtt{0};          // the receiver's RTT estimate (0: none yet)
    SeqNum win_seq;           // RCV.NXT passing this ends a window-long sample...
    Time win_time{};          // ...begun then
  };
  std::unique_ptr<RcvTune> rcv_tune_;
  bool rcvbuf_locked_ = false;  // SO_RCVBUF set: not autotuned (as Linux)
  bool sndbuf_locked_ = false;  // SO_SNDBUF set
  bool autotunes_rcv() const noexcept;
  void measure_rcv_rtt(const Options& opts);
  void rcv_rtt_sample(Duration d) noexcept;
  void autotune_rcvbuf();
  void autotune_sndbuf();
  Reassembly reasm_;
  std::optional<SackBlock> dsack_;  // to report in the next ACK (RFC 2883)
  // Where each write not yet sent in full ends: the segment that carries a
  // write's last byte gets PSH (as Linux marks the tail of every write),
  // also when later writes keep the buffer from emptying. Empty (no
  // allocation) while nothing waits; at most kPushMarks, the oldest dropped.
  std::vector<SeqNum> push_marks_;
  static constexpr std::size_t kPushMarks = 64;
  void mark_push();
  bool write_shut_ = false;  // FIN queued after the data
  bool fin_sent_ = false;
  bool fin_received_ = false;
  std::optional<SeqNum> fin_seq_pending_;  // a FIN beyond a hole

  // ECN (RFC 3168): negotiated; CE seen and echoed in every ACK until the
  // peer's CWR; our CWR owed on the next new data; one reduction per window.
  bool ecn_ok_ = false;
  bool ece_out_ = false;
  bool cwr_out_ = false;
  bool ecn_recover_set_ = false;
  SeqNum ecn_recover_;
  std::uint8_t tos_ = 0;  // IP_TOS: the DSCP bits of every packet (ECN's are ours)
  std::uint8_t hop_limit_ = 0;  // IP_TTL, IPV6_UNICAST_HOPS; 0: IP's default
  // Urgent data (RFC 9293 3.8.5), delivered in line (RFC 6093): the pointer
  // names the byte after the urgent one. SND.UP while ours is ahead of
  // SND.UNA; RCV.UP while the peer's urgent byte has not been read.
  bool urg_out_ = false;
  bool urg_in_ = false;
  SeqNum snd_up_;
  SeqNum rcv_up_;
  SeqNum read_seq() const noexcept;  // the next byte the application reads
  std::size_t urgent_limit(std::size_t want) const noexcept;  // a read stops at the mark
  void process_urgent(const Header& h);
  bool nodelay_ = false;
  bool cork_ = false;
  // write() copies and sends a large write in pieces of this many bytes.
  static constexpr std::size_t kWritePiece = 64 * 1024;
  bool sws_override_ = false;  // the persist timer lets a short segment go (RFC 1122 4.2.3.4 (4))
  bool keepalive_ = false;
  bool ack_pending_ = false;
  unsigned unacked_segs_ = 0;  // full segments received since our last ACK
  unsigned quickacks_ = 0;     // segments still ACKed at once (quick-ACK mode)
  // What tune() changed (allocated only then: most connections keep the
  // stack's settings), and what it reads through.
  std::unique_ptr<Tuning> tuning_;
  void inherit_max_segment(const ListenSession& l);
  Duration keepalive_idle() const noexcept;
  Duration keepalive_interval() const noexcept;
  unsigned keepalive_probes() const noexcept;
  Duration user_timeout() const noexcept;  // zero: none
  Time rtx_since_{};  // about when the data the RTO repeats was first sent (user timeout)
  Time last_data_in_{};        // when in-order data last arrived
  // Whether in-order data of `full` segments is ACKed at once: quick-ACK
  // mode, entered when the connection is established and after an idle
  // period longer than the RTO (as Linux does).
  bool quickack(std::size_t full);

  RtoEstimator rto_;
  std::unique_ptr<CongestionControl> cc_;
  SackScoreboard sb_;
  struct RackTlp {
    Rack rack;
    Tlp tlp;
    Prr prr;
    Time rto_due{};  // when the RTO, last armed, would fire (a probe comes no later)
  };
  std::unique_ptr<RackTlp> rack_;
  enum class RtxTimer : std::uint8_t { rto, reorder, probe };
  RtxTimer rtx_kind_ = RtxTimer::rto;
  bool probe_one_ = false;  // the probe sends one new segment whatever cwnd says
  unsigned dupacks_ = 0;
  bool in_recovery_ = false;
  SeqNum recover_;  // RFC 6582 / 6675: the recovery point
  bool recover_set_ = false;
  bool rtt_timing_ = false;
  SeqNum rtt_seq_;
  Time rtt_start_{};
  unsigned retries_ = 0;  // consecutive RTO expiries
  // Eifel (RFC 3522 detection, RFC 4015 response), with timestamps: the
  // first RTO of a run remembers the TSval its retransmission carries; the
  // next ACK of new data echoing an older one acknowledges an original
  // transmission, so the timeout was spurious (the ACKs were late, nothing
  // was lost) and is undone: nothing more is sent again, the window and the
  // RTO come back. Without timestamps nothing is detected.
  struct EifelCheck {
    bool armed = false;
    std::uint32_t retransmit_ts = 0;
    std::uint32_t pipe_prev = 0;  // max(FlightSize, ssthresh) before the timeout
    SeqNum recover;               // the recovery point before the timeout
    bool recover_set = false;
  };
  EifelCheck eifel_;
  // Retransmitted data is outstanding: the TSval of the first of it to go
  // again, and the end of the highest.
  bool retx_out_ = false;
  std::uint32_t retx_first_ts_ = 0;
  SeqNum retx_high_;
  // An ACK of new data (`h.ack` > SND.UNA) ends the check: true when its
  // timestamp echo proves the armed timeout spurious.
  bool spurious_timeout(const Options& opts) noexcept;
  // RFC 4015 4 steps 5 and 6 (the window, step 4, after the ACK is taken):
  // resume with new data, RTO from the proving ACK's RTT.
  void undo_timeout(const Options& opts) noexcept;
  unsigned keepalive_sent_ = 0;
  Duration persist_interval_{0};  // doubles with each zero-window probe
  Time last_recv_{};

  Timer rtx_timer_;
  Timer delack_timer_;
  Timer persist_timer_;
  Timer keepalive_timer_;
  Timer time_wait_timer_;
  ConnCounters stats_;
};

// A passive open: a port (and address) that accepts connections.
class ListenSession final : public ListenEndpoint {
 public:
  ListenSession(TcpProtocol& proto, IpAddr addr, Port port, std::size_t backlog, bool group = false,
                bool v6only = false);
  ~ListenSession() override;
  Status push(Msg) override { return Errc::unsupported; }
  Status pop(Session&, Msg) override { return Errc::unsupported; }
  Status close() override;

  // The oldest established connection, or would_block.
  Result<Ref<TcpConnection>> accept();
  Result<Ref<StreamEndpoint>> accept_stream() override;
  std::size_t pending() const noexcept override { return accept_q_.size(); }
  std::uint32_t events() const noexcept override { return accept_q_.empty() ? 0u : std::uint32_t{ev_acceptable}; }
  void set_on_event(std::function<void()> fn) override { on_event_ = std::move(fn); }
  // The checksum mode of the SYNs it takes and of the connections it makes
  // (TcpConnection::set_checksum); the stack's until set.
  void set_checksum(ChecksumMode mode) noexcept override { csum_ = mode; }
  Status set_max_segment(std::optional<std::uint16_t> mss) override {
    if (mss && (*mss < 88 || *mss > 65495)) return Errc::invalid_argument;
    max_segment_ = mss;
    return {};
  }
  std::optional<std::uint16_t> max_segment() const noexcept { return max_segment_; }
  IpAddr addr() const noexcept override { return addr_; }
  Port port() const noexcept override { return port_; }
  bool group() const noexcept { return group_; }
  bool detached() const noexcept override { return proto_ == nullptr; }

  // ---- what TcpProtocol and its connections ask of a listener --------------
  bool accept_queue_full() const noexcept { return accept_q_.size() >= backlog_; }
  std::size_t half_open() const noexcept { return half_open_; }
  // The mode set_checksum() chose, if it did.
  std::optional<ChecksumMode> checksum_override() const noexcept { return csum_; }
  // A connection of ours in the handshake (from_syn, from_cookie)...
  void opening(TcpConnection&) noexcept { ++half_open_; }
  // ...that reached ESTABLISHED: it waits for accept().
  void established(TcpConnection& c);
  // ...or that went away before accept().
  void forget(TcpConnection& c) noexcept;
  // The stack goes away: what waits for accept() goes with it.
  void detach() noexcept;

 private:

  TcpProtocol* proto_;
  IpAddr addr_;
  Port port_;
  std::size_t backlog_;
  bool group_;
  bool v6only_;  // on ::, IPv6 peers alone (IPV6_V6ONLY)
  std::size_t half_open_ = 0;
  std::deque<Ref<TcpConnection>> accept_q_;
  std::function<void()> on_event_;
  std::optional<ChecksumMode> csum_;
  std::optional<std::uint16_t> max_segment_;  // TCP_MAXSEG
};

template <class F>
void TcpProtocol::Host::for_each_connection(F&& f) {
  p_.conns_.for_each([&](const ConnKey&, SessionRef& s) { f(*static_cast<TcpConnection*>(s.get())); });
}

}  // namespace xk::tcp

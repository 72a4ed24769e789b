#pragma once
// TCP (RFC 9293) over one IPv4 instance, with large windows (RFC 7323), SACK
// (RFC 2018, RFC 6675 recovery), congestion control behind tcp_cc.hpp, and
// the socket API applications use (TcpSocket, TcpListener).
//
//   tcp tcp0 below=ip0 csum=on wscale=14 sack=on ts=on cc=cubic rto_min_ms=5
//
// Layout of the protocol (one job per file):
//   tcp_wire      header and options on the wire, checksums
//   tcp_seq       sequence-number arithmetic
//   tcp_isn       RFC 6528 initial sequence numbers
//   tcp_syncookie RFC 4987 SYN cookies
//   tcp_rto       RFC 6298 retransmission timer
//   tcp_cc        NewReno (RFC 5681/6582) and CUBIC (RFC 9438)
//   tcp_sack      the sender's SACK scoreboard (RFC 6675)
//   tcp_reasm     the receiver's out-of-order queue and SACK blocks
//   tcp_buffer    send and receive byte queues
//   tcp_input     "SEGMENT ARRIVES" (RFC 9293 3.10.7) for one connection
//   tcp_output    what to send, when (windows, Nagle, SWS, recovery), timers
//   tcp_icmp      ICMP errors: RFC 5927 checks, path MTU (RFC 1191), DF
//   tcp_protocol  the protocol: demux, listeners, ports, RSTs, the socket API
//   tcb.hpp       (private) the connection's and the listener's state
//
// Threading: one stack, one thread (docs/framework.md). The socket API is
// called on the stack's thread; blocking and cross-thread use are built on top.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "xk/clock.hpp"
#include "xk/demux.hpp"
#include "xk/graph.hpp"
#include "xk/port_authority.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/tcp_buffer.hpp"
#include "xk/protocols/tcp_cc.hpp"
#include "xk/protocols/tcp_isn.hpp"
#include "xk/protocols/tcp_reasm.hpp"
#include "xk/protocols/tcp_rto.hpp"
#include "xk/protocols/tcp_sack.hpp"
#include "xk/protocols/tcp_seq.hpp"
#include "xk/protocols/tcp_syncookie.hpp"
#include "xk/protocols/tcp_wire.hpp"
#include "xk/timer.hpp"

namespace xk::tcp {

class TcpProtocol;
class TcpConnection;
class ListenSession;

// RFC 9293 3.3.2.
enum class State : std::uint8_t {
  closed,
  listen,
  syn_sent,
  syn_received,
  established,
  fin_wait_1,
  fin_wait_2,
  close_wait,
  closing,
  last_ack,
  time_wait,
};
const char* to_string(State s) noexcept;

struct TcpConfig {
  ChecksumMode csum = ChecksumMode::on;  // off means off end to end: both sides must agree
  std::uint16_t mss = 0;                 // 0: from the path (IP MTU - 40)
  std::uint8_t wscale = 14;              // the largest shift we offer (RFC 7323 2.3)
  bool sack = true;                      // RFC 2018
  bool timestamps = true;                // RFC 7323
  std::string cc = "cubic";              // "cubic" or "newreno"
  Duration rto_min = std::chrono::milliseconds(200);
  Duration rto_max = std::chrono::seconds(60);
  Duration rto_initial = std::chrono::seconds(1);  // RFC 6298 2.1
  Duration delack = std::chrono::milliseconds(40);  // RFC 1122 4.2.3.2: under 500 ms
  // The ACK owed for every second full segment goes out at the end of the
  // input burst (one ACK for the burst) rather than at once (docs/tcp.md).
  bool ack_per_burst = true;
  std::uint32_t ack_burst_max = 64 * 1024;  // bytes one burst ACK may cover (0: the whole burst)
  // New data goes down as one segment of up to ~64 KB for the port to cut,
  // when the port offers segmentation offload (docs/tcp.md).
  bool gso = true;
  Duration msl = std::chrono::seconds(30);          // TIME-WAIT lasts 2 MSL
  // TIME-WAITs kept once their application let go (a small record each,
  // docs/tcp.md "TIME-WAIT"); past this, a closing connection skips it.
  std::size_t time_wait_max = 262144;
  unsigned syn_retries = 6;
  unsigned max_retries = 15;  // RFC 1122 4.2.3.5 R2, in retransmissions
  Duration keepalive_idle = std::chrono::hours(2);  // RFC 1122 4.2.3.6
  Duration keepalive_interval = std::chrono::seconds(75);
  unsigned keepalive_probes = 9;
  std::size_t sndbuf = 1 << 20;         // default buffer sizes; sockets may change them
  std::size_t rcvbuf = 1 << 20;
  std::size_t buf_max = 64u << 20;      // the largest SO_SNDBUF/SO_RCVBUF
  std::size_t syn_backlog = 1024;       // half-open connections per listener before SYN cookies
  bool syncookies = true;               // RFC 4987
  std::uint32_t challenge_acks_per_s = 1000;  // RFC 5961 7
  std::uint16_t ephemeral_min = 49152;  // RFC 6335 6
  std::uint16_t ephemeral_max = 65535;
  std::optional<Secret> secret;         // ISN and cookie key; shared by stacks behind one address
};

// What one connection did (TCP_INFO-like).
struct ConnStats {
  State state = State::closed;
  Duration srtt{0};
  Duration rttvar{0};
  Duration rto{0};
  std::uint32_t cwnd = 0;
  std::uint32_t ssthresh = 0;
  std::uint32_t snd_wnd = 0;
  std::uint32_t rcv_wnd = 0;
  std::uint16_t mss = 0;             // our sending MSS (RFC 6691: options come out of it)
  std::uint16_t pmtu = 0;            // the path MTU we believe in, IP header included (RFC 1191)
  std::uint8_t snd_wscale = 0;
  std::uint8_t rcv_wscale = 0;
  bool sack = false;
  bool timestamps = false;
  std::uint64_t bytes_sent = 0;      // payload bytes handed to IP, retransmissions included
  std::uint64_t bytes_acked = 0;
  std::uint64_t bytes_received = 0;  // in-order payload bytes accepted
  std::uint64_t segs_out = 0;
  std::uint64_t segs_in = 0;
  std::uint64_t retransmits = 0;     // segments sent again
  std::uint64_t rto_expiries = 0;
  std::uint64_t fast_retransmits = 0;
  std::uint64_t sack_blocks_in = 0;
  std::uint64_t sack_blocks_out = 0;
  std::uint64_t dup_acks_in = 0;
  std::uint64_t ooo_segments = 0;    // arrived out of order
  std::uint64_t icmp_errors = 0;     // ICMP errors about this connection that passed RFC 5927's check
  std::uint64_t pmtu_updates = 0;    // frag-needed messages that lowered the path MTU
};

// Readiness, as poll() would report it.
enum Event : std::uint32_t {
  ev_readable = 1,   // data, a FIN, or a pending error
  ev_writable = 2,   // room in the send buffer (connected)
  ev_error = 4,      // an error is pending (refused, reset, timed out)
  ev_hangup = 8,     // the peer closed its side (FIN) or the connection is gone
  ev_acceptable = 16,  // a listener has a connection to accept
};

// What a TcpSocket drives: the TCB of a connection this stack runs
// (TcpConnection), or a byte stream some other backend carries -- e.g. the
// central-mode relay, where filterd runs TCP and the node only sees the
// stream (protocols/relay). The calls mean what TcpConnection's say.
class StreamEndpoint : public Session {
 public:
  using Session::Session;

  virtual Status connect(Ipv4Addr addr, Port port, Ipv4Addr local_addr = {}, Port local_port = {}) = 0;
  virtual Result<std::size_t> write(std::span<const std::byte> bytes) = 0;
  virtual Status write_msg(Msg& msg) = 0;
  virtual Result<std::size_t> read(std::span<std::byte> dst) = 0;
  virtual Result<Msg> read_msg(std::size_t max) = 0;
  virtual Status shutdown_write() = 0;
  virtual Status close_gracefully() = 0;
  virtual void abort() = 0;

  virtual void set_nodelay(bool on) noexcept = 0;
  virtual void set_cork(bool on) noexcept = 0;
  virtual void set_keepalive(bool on) noexcept = 0;
  virtual void set_sndbuf(std::size_t bytes) noexcept = 0;
  virtual void set_rcvbuf(std::size_t bytes) noexcept = 0;
  virtual void set_checksum(ChecksumMode mode) noexcept = 0;
  virtual ChecksumMode checksum_mode() const noexcept = 0;

  virtual State state() const noexcept = 0;
  virtual std::uint32_t events() const noexcept = 0;
  virtual void set_on_event(std::function<void()> fn) = 0;
  virtual Errc pending_error() const noexcept = 0;
  virtual Errc take_error() noexcept = 0;
  virtual Errc soft_error() const noexcept = 0;
  virtual ConnStats stats() const noexcept = 0;
  virtual FourTuple tuple() const noexcept = 0;
  virtual std::size_t rcv_queued() const noexcept = 0;
  virtual std::size_t snd_queued() const noexcept = 0;
  virtual bool detached() const noexcept = 0;
  // The TCB, when this stack runs TCP for the stream (null for a relay).
  virtual TcpConnection* tcb() noexcept { return nullptr; }
};

// What a TcpListener drives: a ListenSession, or a backend's listener.
class ListenEndpoint : public Session {
 public:
  using Session::Session;
  virtual Result<Ref<StreamEndpoint>> accept_stream() = 0;
  virtual std::size_t pending() const noexcept = 0;
  virtual std::uint32_t events() const noexcept = 0;
  virtual void set_on_event(std::function<void()> fn) = 0;
  virtual void set_checksum(ChecksumMode mode) noexcept = 0;
  virtual Ipv4Addr addr() const noexcept = 0;
  virtual Port port() const noexcept = 0;
  virtual bool detached() const noexcept = 0;
};

// A TcpProtocol configured with `backend=...` hands its sockets and
// listeners to this (the port was already agreed with the PortAuthority).
class StreamBackend {
 public:
  virtual ~StreamBackend() = default;
  virtual Ref<StreamEndpoint> make_stream() = 0;
  // `authority`: to give the port back to when the listener closes (or null).
  virtual Result<Ref<ListenEndpoint>> make_listener(Ipv4Addr addr, Port port, std::size_t backlog,
                                                    PortAuthority* authority) = 0;
  virtual std::size_t stream_count() const noexcept = 0;
};

// The TCB (TcpConnection) and a listener's state (ListenSession) are the
// protocol's own: protocols/tcp/tcb.hpp, not installed. Applications reach a
// connection through TcpSocket and StreamEndpoint.

// ---- the socket API ---------------------------------------------------------
// Move-only RAII handles, used on the stack's thread. Errors are Errc values:
// would_block (nothing now), closed (handle closed), not_connected, refused,
// reset, timed_out, exists (address in use), invalid_argument.

class TcpSocket {
 public:
  TcpSocket() noexcept = default;
  explicit TcpSocket(Ref<StreamEndpoint> c) noexcept : c_(std::move(c)) {}
  TcpSocket(TcpSocket&&) noexcept = default;
  TcpSocket& operator=(TcpSocket&& other) noexcept;
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;
  ~TcpSocket();

  bool is_open() const noexcept { return c_ && !c_->detached(); }
  // Starts the handshake; the socket becomes writable when it is done. A
  // local port (from TcpProtocol::reserve_port) may be given.
  Status connect(Ipv4Addr addr, Port port, Ipv4Addr local_addr = {}, Port local_port = {});
  Result<std::size_t> write(std::span<const std::byte> bytes);
  Status write(Msg& msg);
  Result<std::size_t> read(std::span<std::byte> dst);
  Result<Msg> read_msg(std::size_t max = SIZE_MAX);
  Status shutdown_write();
  // Graceful close; the stack finishes the handshake on its own.
  Status close();
  // RST now (SO_LINGER with a zero timeout).
  void abort();

  void set_nodelay(bool on) noexcept;
  void set_cork(bool on) noexcept;
  void set_keepalive(bool on) noexcept;
  void set_sndbuf(std::size_t bytes) noexcept;
  void set_rcvbuf(std::size_t bytes) noexcept;
  void set_checksum(ChecksumMode mode) noexcept;
  void set_on_event(std::function<void()> fn);

  std::uint32_t events() const noexcept;
  State state() const noexcept { return c_ ? c_->state() : State::closed; }
  ConnStats stats() const noexcept { return c_ ? c_->stats() : ConnStats{}; }
  FourTuple tuple() const noexcept { return c_ ? c_->tuple() : FourTuple{}; }
  // The TCB (null when no socket, or when a backend such as the relay
  // carries the stream); endpoint() is whatever carries it.
  TcpConnection* connection() const noexcept { return c_ ? c_->tcb() : nullptr; }
  StreamEndpoint* endpoint() const noexcept { return c_.get(); }

 private:
  Ref<StreamEndpoint> c_;
};

class TcpListener {
 public:
  TcpListener() noexcept = default;
  explicit TcpListener(Ref<ListenEndpoint> l) noexcept : l_(std::move(l)) {}
  TcpListener(TcpListener&&) noexcept = default;
  TcpListener& operator=(TcpListener&& other) noexcept;
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  ~TcpListener();

  bool is_open() const noexcept { return l_ && !l_->detached(); }
  Result<TcpSocket> accept();
  std::uint32_t events() const noexcept { return l_ ? l_->events() : 0u; }
  void set_on_event(std::function<void()> fn);
  // For the SYNs it takes and the connections it accepts.
  void set_checksum(ChecksumMode mode) noexcept;
  Port port() const noexcept { return l_ ? l_->port() : Port{}; }
  Status close();

 private:
  Ref<ListenEndpoint> l_;
};

class TcpProtocol final : public Protocol {
 public:
  TcpProtocol(std::string name, Protocol& below, TimerWheel& timers, TcpConfig config = {});
  ~TcpProtocol() override;

  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  Status open_done(Protocol& lower, Session& session, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  TcpSocket socket();
  // Listen on `port` (0: an ephemeral one) of `addr` (0: every address).
  // `group`: with a PortAuthority, share the port with other nodes
  // (SO_REUSEPORT); new connections are spread among them.
  Result<TcpListener> listen(Ipv4Addr addr, Port port, std::size_t backlog = 128, bool group = false);

  // Ports and connections are agreed with `authority` (filterd) from now on;
  // null: the stack owns its address alone. Must outlive the protocol's use
  // of it (set before the first listen/connect, cleared after the last).
  void set_port_authority(PortAuthority* authority) noexcept { authority_ = authority; }
  // Sockets and listeners from `backend` instead of this stack's TCP (the
  // central-mode relay); null: our own. Set before the first socket.
  void set_backend(StreamBackend* backend) noexcept { backend_ = backend; }
  StreamBackend* backend() const noexcept { return backend_; }
  PortAuthority* port_authority() const noexcept { return authority_; }

  // bind() before listen() or connect(): hold (addr, port) (port 0: an
  // ephemeral one) so nobody else takes it meanwhile. Refused (exists) when a
  // listener or another reservation overlaps it -- address 0 overlaps every
  // address -- or, unless `reuse_addr` (SO_REUSEADDR), when a connection still
  // uses it as its local end (TIME-WAIT ones included). Release the
  // reservation before the listen() or connect() that uses it.
  Result<Port> reserve_port(Ipv4Addr addr, Port port, bool reuse_addr);
  void release_port(Ipv4Addr addr, Port port) noexcept;

  // What this stack holds, for a PortAuthority that has to learn it again
  // (filterd restarted: docs/filterd.md): every listener, and every
  // connection that has its 4-tuple (SYN-SENT to TIME-WAIT), with whether a
  // listener made it and whether the authority gave its local port.
  struct ListenerInfo {
    Ipv4Addr addr;
    Port port;
    bool group = false;
  };
  struct ConnectionInfo {
    FourTuple tuple;
    State state = State::closed;
    bool passive = false;  // made by a listener (accepted, or still in the handshake)
    bool claimed = false;  // the local port came from the PortAuthority
  };
  std::vector<ListenerInfo> listeners() const;
  std::vector<ConnectionInfo> connections() const;

  const TcpConfig& config() const noexcept { return config_; }
  TimerWheel& timers() noexcept { return timers_; }
  // Every connection with a 4-tuple, the TIME-WAIT records included.
  std::size_t connection_count() const noexcept {
    return backend_ != nullptr ? backend_->stream_count() : conns_.size() + time_waits_.size();
  }
  // Of those, the ones in TIME-WAIT.
  std::size_t time_wait_count() const noexcept;
  // RFC 7323 5.4: TSval is a clock of 1 ms ticks.
  std::uint32_t tsval() const noexcept;
  ChecksumMode checksum_mode() const noexcept { return config_.csum; }

 private:
  friend class TcpConnection;
  friend class ListenSession;

  struct ConnKey {
    std::uint32_t local_addr;
    std::uint32_t remote_addr;
    std::uint16_t local_port;
    std::uint16_t remote_port;
    friend bool operator==(const ConnKey&, const ConnKey&) = default;
  };
  struct ListenKey {
    std::uint32_t addr;
    std::uint16_t port;
    std::uint16_t zero = 0;
    friend bool operator==(const ListenKey&, const ListenKey&) = default;
  };
  struct PeerKey {
    std::uint32_t addr;
    friend bool operator==(const PeerKey&, const PeerKey&) = default;
  };
  struct IpPeer {
    SessionRef session;
    Ipv4Addr local;
    Ipv4Addr peer;
    std::size_t users = 0;
  };
  static ConnKey key_of(const FourTuple& t) noexcept {
    return ConnKey{t.local_addr.value, t.remote_addr.value, t.local_port, t.remote_port};
  }

  Status ensure_enabled();
  Result<IpPeer*> ip_for(Ipv4Addr peer, Session* known);
  void drop_ip_user(Ipv4Addr peer) noexcept;
  Result<std::uint16_t> pick_ephemeral(Ipv4Addr local, Ipv4Addr remote, std::uint16_t rport);
  // A listener or a reservation on (addr, port), address 0 overlapping all.
  bool port_claimed(Ipv4Addr addr, std::uint16_t port);
  // A connection (TIME-WAIT ones included) has (addr, port) as its local
  // end; address 0: any address.
  bool local_port_used(Ipv4Addr addr, std::uint16_t port);
  Status insert(TcpConnection& c);
  void remove(TcpConnection& c) noexcept;
  void listen_input(ListenSession& l, IpPeer& ip, const Header& h, const Options& opts, Msg payload,
                    std::optional<SeqNum> iss_floor = std::nullopt);
  void send_reset_for(IpPeer& ip, const Header& h, std::size_t seg_len);
  Status send_raw(IpPeer& ip, std::uint16_t sport, std::uint16_t dport, SeqNum seq, SeqNum ack,
                  std::uint8_t flags, std::uint16_t window, const Options* opts, ChecksumMode csum);
  bool challenge_ack_allowed(Time now) noexcept;
  // `csum`: the connection's (or listener's, or the stack's) mode.
  Status transmit(Session& ip, Ipv4Addr src, Ipv4Addr dst, Msg segment, ChecksumMode csum);
  std::uint16_t path_mss(Session& ip) const;
  // Connections may hand the port segments to cut (Offload::tx_tcp_seg).
  bool segmentation_offload() const noexcept { return offloads_.tx_tcp_seg && config_.gso; }
  // ---- ICMP and the IP sessions' DF bit (tcp_icmp.cpp) ----
  void icmp_error(const ctl::NetError& err);
  void allow_fragments(Ipv4Addr peer) noexcept;
  std::uint8_t our_wscale(std::size_t rcvbuf_max) const noexcept;

  Protocol& below_;
  TimerWheel& timers_;
  TcpConfig config_;
  LinkOffloads offloads_;
  IsnGenerator isn_;
  SynCookies cookies_;
  bool enabled_ = false;
  std::uint32_t next_ephemeral_;
  ActiveMap<ConnKey> conns_;
  FlatMap<ListenKey, ListenSession*> listeners_;
  FlatMap<ListenKey, std::uint32_t> reserved_;  // bound, not yet listening or connected
  PortAuthority* authority_ = nullptr;
  StreamBackend* backend_ = nullptr;
  // 4-tuples to give back to the authority on the next pass: a segment this
  // pass queued (a RST, the last ACK) must leave before filterd forgets the
  // flow, or it is refused as not ours.
  std::vector<FourTuple> releases_;
  Timer release_timer_;
  void defer_release(const FourTuple& t);
  void flush_releases() noexcept;
  FlatMap<PeerKey, IpPeer> peers_;

  // ---- TIME-WAIT after the application let go (tcp_timewait.cpp) ----
  // What RFC 9293 3.10.7.4 needs to answer a segment in TIME-WAIT, kept in
  // place of the connection, which is freed: a few dozen bytes, not a TCB.
  struct TimeWait {
    SeqNum snd_nxt;                  // past our FIN: what every ACK carries
    SeqNum rcv_nxt;                  // past the peer's FIN
    std::uint32_t rcv_wnd = 0;       // RCV.ADV - RCV.NXT as the connection left it
    std::uint32_t max_snd_wnd = 0;   // RFC 5961 5.2's bound on acceptable ACKs
    std::uint32_t ts_recent = 0;     // RFC 7323
    Time ts_recent_age{};
    Time expires{};
    std::uint16_t window = 0;        // our ACKs' window field
    ChecksumMode csum = ChecksumMode::on;
    bool ts_ok = false;
    bool sack_ok = false;
    bool passive = false;
    bool claimed = false;            // the local port came from the PortAuthority
    // claimed or passive: the authority holds a flow for the 4-tuple, given
    // back when the record ends.
  };
  // The connection (its application gone) enters TIME-WAIT: keep the record
  // instead. False when the table is full (the caller just closes).
  bool park_time_wait(TcpConnection& c);
  // Whether SYN `h` may end a TIME-WAIT (full or parked) and open a new
  // incarnation of its 4-tuple (RFC 6191).
  bool syn_reopens(const Header& h, const Options& opts, bool ts_ok, std::uint32_t ts_recent,
                   SeqNum rcv_nxt) const noexcept;
  // A segment for a parked TIME-WAIT that does not reopen it.
  void time_wait_input(const ConnKey& key, TimeWait& tw, IpPeer& ip, const Header& h, const Options& opts,
                       std::size_t payload);
  void time_wait_ack(const ConnKey& key, const TimeWait& tw, IpPeer& ip, std::optional<SackBlock> dsack);
  // `release_flow`: give the authority's flow back (not when a new
  // incarnation of the 4-tuple takes it over).
  void end_time_wait(const ConnKey& key, bool release_flow = true) noexcept;
  void expire_time_waits();
  bool in_time_wait(const ConnKey& key) const noexcept { return time_waits_.find(key) != nullptr; }
  FlatMap<ConnKey, TimeWait> time_waits_;
  // Parked records by expiry (all last 2 MSL, so the order is the parking
  // order): a record restarted by a retransmitted FIN is queued again, and
  // its older entry skipped.
  std::deque<std::pair<Time, ConnKey>> time_wait_queue_;
  Timer time_wait_timer_;
  Time challenge_window_start_{};
  std::uint32_t challenge_acks_in_window_ = 0;

 public:
  // Counters (netstat -s), bumped by connections too.
  struct Counters {
    Counter& rx_segments;
    Counter& tx_segments;
    Counter& retransmits;
    Counter& active_opens;
    Counter& passive_opens;
    Counter& established;
    Counter& resets_sent;
    Counter& resets_received;
    Counter& drop_bad_csum;
    Counter& drop_malformed;
    Counter& drop_no_listener;
    Counter& drop_paws;
    Counter& drop_out_of_window;
    Counter& drop_syn_queue;
    Counter& drop_accept_queue;
    Counter& drop_ack_unacceptable;
    Counter& challenge_acks;
    Counter& challenge_acks_limited;
    Counter& syncookies_sent;
    Counter& syncookies_ok;
    Counter& syncookies_bad;
    Counter& rto_expiries;
    Counter& fast_retransmits;
    Counter& sack_recoveries;
    Counter& ooo_segments;
    Counter& delayed_acks;
    Counter& burst_acks;
    Counter& window_probes;
    Counter& keepalive_probes;
    Counter& timeouts;
    Counter& time_wait_reused;
    Counter& time_wait_overflow;
    Counter& rx_csum_by_port;
    Counter& tx_csum_by_port;
    Counter& tx_gso;
    Counter& icmp_errors;
    Counter& icmp_no_connection;
    Counter& icmp_out_of_window;
    Counter& icmp_hard_errors;
    Counter& icmp_soft_errors;
    Counter& pmtu_updates;
    Counter& pmtu_ignored;
    Counter& rx_csum_unchecked;
  };
  Counters& stats() noexcept { return c_; }

 private:
  Counters c_;
};

// Make the kind `tcp` available to graph specs:
//   tcp t0 below=ip0 [csum=on|off] [mss=0] [wscale=14] [sack=on] [ts=on] [cc=cubic|newreno]
//       [rto_min_ms=200] [rto_max_ms=60000] [rto_initial_ms=1000] [delack_ms=40] [msl_ms=30000]
//       [time_wait_max=262144] [sndbuf=1m] [rcvbuf=1m] [syncookies=on] [secret=<32 hex digits>]
void register_tcp(Registry& registry);

}  // namespace xk::tcp

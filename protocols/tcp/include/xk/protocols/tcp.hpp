#pragma once
// TCP (RFC 9293) over IPv4, IPv6 or both, with large windows (RFC 7323), SACK
// (RFC 2018, RFC 6675 recovery), congestion control behind tcp_cc.hpp, and
// the socket API applications use (TcpSocket, TcpListener: tcp_socket.hpp,
// which is all an application needs).
//
//   tcp tcp0 below=ip0[,ip6] csum=on wscale=14 sack=on ts=on cc=cubic rto_min_ms=5
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
//   tcp_socket.hpp the socket face: TcpSocket, TcpListener, StreamEndpoint
//   tcb.hpp       (private) the connection's and the listener's state; the
//                 protocol reaches them through their public calls only
//
// Threading: one stack, one thread (docs/xkernel.md). The socket API is
// called on the stack's thread; blocking and cross-thread use are built on top.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "xk/clock.hpp"
#include "xk/demux.hpp"
#include "xk/graph.hpp"
#include "xk/ip_layers.hpp"
#include "xk/port_authority.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/tcp_buffer.hpp"
#include "xk/protocols/tcp_cc.hpp"
#include "xk/protocols/tcp_isn.hpp"
#include "xk/protocols/tcp_reasm.hpp"
#include "xk/protocols/tcp_rto.hpp"
#include "xk/protocols/tcp_sack.hpp"
#include "xk/protocols/tcp_socket.hpp"
#include "xk/protocols/tcp_seq.hpp"
#include "xk/protocols/tcp_syncookie.hpp"
#include "xk/protocols/tcp_wire.hpp"
#include "xk/timer.hpp"

namespace xk::tcp {

class TcpProtocol;
class TcpConnection;
class ListenSession;

// The send and receive buffer a connection starts with when neither the
// options nor the program name one: a quarter of the core's L2 cache, at
// least 256 KiB, at most 1 MiB (docs/tcp.md, "Buffer autotuning"). The window
// bounds what both ends hold in flight -- the sender's unacknowledged bytes,
// the receiver's queue, ~1.4 times the payload in 2 KiB mbufs -- and a window
// past the cache makes every byte miss on the way out of the stack.
std::size_t cache_fit_buffer() noexcept;

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
  // Loss recovery of SACK connections (docs/tcp.md, "Loss recovery"):
  // "rack" -- RACK-TLP (RFC 8985) finds losses, PRR (RFC 6937) paces the
  // recovery; "rfc6675" -- the duplicate-ACK threshold and NextSeg of
  // RFC 6675, no probes. Connections without SACK use RFC 6582 either way.
  // ECN (RFC 3168): "on" asks for it on active opens and accepts it on
  // passive ones; "passive" (Linux's default) only accepts; "off" neither.
  enum class Ecn : std::uint8_t { off, passive, on };
  Ecn ecn = Ecn::passive;
  enum class Recovery : std::uint8_t { rack, rfc6675 };
  Recovery recovery = Recovery::rack;
  bool tlp = true;  // tail loss probes (RFC 8985 7), with recovery=rack
  // The probe of a one-segment flight waits for the peer's delayed ACK too
  // (RFC 8985 7.2's WCDelAckT), and no probe comes sooner than tlp_min:
  // unset, a quarter of rto_min (docs/tcp.md, "Loss recovery": a host
  // that shares its cores with filterd and its peers delivers ACKs
  // milliseconds late, and a probe sooner than that is spurious; whoever
  // sets rto_min has said how much slack the hosts need).
  Duration tlp_delack = std::chrono::milliseconds(200);
  std::optional<Duration> tlp_min;
  Duration probe_floor() const noexcept { return tlp_min ? *tlp_min : rto_min / 4; }
  // Quick-ACK mode (docs/tcp.md, "When we ACK"): while a connection is young,
  // and again after it was idle longer than an RTO, this many received
  // segments are ACKed at once rather than delayed, so the peer's slow start
  // is not held back by our delayed ACKs. 0: off.
  unsigned quickacks = 16;
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
  std::size_t sndbuf = cache_fit_buffer();  // default buffer sizes; sockets may change them
  std::size_t rcvbuf = cache_fit_buffer();
  std::size_t buf_max = 64u << 20;      // the largest SO_SNDBUF/SO_RCVBUF
  // Buffer autotuning (docs/tcp.md, "Buffer autotuning"): a connection
  // whose program did not set SO_RCVBUF / SO_SNDBUF grows its receive
  // buffer to two receiver RTTs of what the application reads, and its send
  // buffer to twice the congestion window, up to autotune_max (at most
  // buf_max).
  bool autotune = true;
  std::size_t autotune_max = 16u << 20;
  std::size_t syn_backlog = 1024;       // half-open connections per listener before SYN cookies
  bool syncookies = true;               // RFC 4987
  std::uint32_t challenge_acks_per_s = 1000;  // RFC 5961 7
  std::uint16_t ephemeral_min = 49152;  // RFC 6335 6
  std::uint16_t ephemeral_max = 65535;
  // Where the search for a free ephemeral port starts: at a random port of
  // the range (RFC 6056 3.3.5's random increments, simplified to a random
  // start and steps of one), so that a program run again soon does not
  // reuse the 4-tuple its last run left in the peer's TIME-WAIT or
  // SYN-RECEIVED; or at ephemeral_min (reproducible, for tests).
  bool ephemeral_random = true;
  std::optional<Secret> secret;         // ISN and cookie key; shared by stacks behind one address
};

// What RFC 9293 3.10.7.4 needs to answer a segment in TIME-WAIT, kept in
// place of the connection, which is freed: a few dozen bytes, not a TCB.
// TcpProtocol's bookkeeping (tcp_timewait.cpp), not for applications.
struct TimeWaitRecord {
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

class TcpProtocol final : public Protocol {
 public:
  // `below`: the IP layers, at most one per family -- ipv4, ipv6, or both
  // for a dual-stack TCP; a peer's address picks the layer that takes it.
  TcpProtocol(std::string name, std::vector<Protocol*> below, TimerWheel& timers, TcpConfig config = {});
  TcpProtocol(std::string name, Protocol& below, TimerWheel& timers, TcpConfig config = {})
      : TcpProtocol(std::move(name), std::vector<Protocol*>{&below}, timers, std::move(config)) {}
  ~TcpProtocol() override;

  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  Status open_done(Protocol& lower, Session& session, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  TcpSocket socket();
  // Listen on `port` (0: an ephemeral one) of `addr`: :: every address of
  // both families (of IPv6 alone with `v6only`), 0.0.0.0 every IPv4 one
  // (xk/endpoint.hpp's BindScope).
  // `group`: with a PortAuthority, share the port with other nodes
  // (SO_REUSEPORT); new connections are spread among them.
  Result<TcpListener> listen(IpAddr addr, Port port, std::size_t backlog = 128, bool group = false,
                             bool v6only = false);
  // listen() on what reserve_port(addr, port) holds: the reservation becomes
  // the listener without a moment when the port is free, and a claim the
  // bind made of a PortAuthority carries over (one control round trip for
  // bind + listen, not three). Refused: the reservation is held again.
  Result<TcpListener> listen_reserved(IpAddr addr, Port port, std::size_t backlog = 128, bool group = false,
                                      bool v6only = false);

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
  // listener or another reservation overlaps it -- an unspecified address
  // overlaps every address -- or, unless `reuse_addr` (SO_REUSEADDR), when a connection still
  // uses it as its local end (TIME-WAIT ones included). A listen takes it
  // over (listen_reserved); release it before the connect() that uses it. With a
  // PortAuthority (filterd), a named port is claimed from it as a listener's
  // (`group`: SO_REUSEPORT) and given back by release_port.
  Result<Port> reserve_port(IpAddr addr, Port port, bool reuse_addr, bool group = false, bool v6only = false);
  void release_port(IpAddr addr, Port port, bool v6only = false) noexcept;

  // What this stack holds, for a PortAuthority that has to learn it again
  // (filterd restarted: docs/filterd.md): every listener, and every
  // connection that has its 4-tuple (SYN-SENT to TIME-WAIT), with whether a
  // listener made it and whether the authority gave its local port.
  struct ListenerInfo {
    IpAddr addr;
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
  // Where the connections' send buffers take their chunks: the link's
  // (ctl::GetChunkSource, the shm driver's arena), or null for the heap.
  ChunkSource* chunk_source() const noexcept { return chunks_; }

  // What the protocol's own parts -- its connections and listeners
  // (tcb.hpp, not installed) -- may ask of it beyond the calls above: the
  // IP sessions, tables and senders they share. Defined in tcb.hpp, the one
  // list of them; the protocol reaches its parts through their public calls.
  class Host;

 private:

  // Connections are keyed by their FourTuple itself (xk/endpoint.hpp): a
  // plain key of either family.
  using ConnKey = FourTuple;
  // A listener's or a reservation's (address, port): every unspecified
  // address (0.0.0.0, ::) is the one wildcard, ::.
  // A listener's or reservation's bind (xk/endpoint.hpp's BindScope): :: of
  // both families and :: of IPv6 alone are two keys.
  struct ListenKey {
    ListenKey(const IpAddr& a, std::uint16_t p, bool only6 = false) noexcept
        : addr(a), port(p), v6only(only6 && a == IpAddr{} ? 1 : 0) {}
    IpAddr addr;
    std::uint16_t port;
    std::uint8_t v6only;
    std::uint8_t zero = 0;  // no padding to hash
    friend bool operator==(const ListenKey&, const ListenKey&) = default;
  };
  struct PeerKey {
    IpAddr addr;
    friend bool operator==(const PeerKey&, const PeerKey&) = default;
  };
  struct IpPeer {
    SessionRef session;
    IpAddr local;
    IpAddr peer;
    std::size_t users = 0;
  };
  static const ConnKey& key_of(const FourTuple& t) noexcept { return t; }

  Status ensure_enabled();
  Result<IpPeer*> ip_for(IpAddr peer, Session* known);
  void drop_ip_user(IpAddr peer) noexcept;
  Result<std::uint16_t> pick_ephemeral(IpAddr local, IpAddr remote, std::uint16_t rport);
  // A listener or a reservation on (addr, port), address 0 overlapping all.
  bool port_claimed(IpAddr addr, std::uint16_t port, bool v6only = false);
  // The listener on `port`, whose claim (if any) the caller holds.
  Result<TcpListener> open_listener(IpAddr addr, std::uint16_t port, std::size_t backlog, bool group, bool v6only);
  // The listener a SYN to (local, port) goes to: one on that address, else
  // one on every address; null if none.
  ListenSession* listener_at(IpAddr local, std::uint16_t port);
  // A connection (TIME-WAIT ones included) has (addr, port) as its local
  // end; address 0: any address.
  bool local_port_used(IpAddr addr, std::uint16_t port);
  Status insert(TcpConnection& c);
  void remove(TcpConnection& c) noexcept;
  void listen_input(ListenSession& l, IpPeer& ip, const Header& h, const Options& opts, Msg payload,
                    std::optional<SeqNum> iss_floor = std::nullopt);
  void send_reset_for(IpPeer& ip, const Header& h, std::size_t seg_len);
  Status send_raw(IpPeer& ip, std::uint16_t sport, std::uint16_t dport, SeqNum seq, SeqNum ack,
                  std::uint8_t flags, std::uint16_t window, const Options* opts, ChecksumMode csum);
  bool challenge_ack_allowed(Time now) noexcept;
  // `csum`: the connection's (or listener's, or the stack's) mode.
  Status transmit(Session& ip, IpAddr src, IpAddr dst, Msg segment, ChecksumMode csum);
  std::uint16_t path_mss(Session& ip) const;
  // Connections to `peer` may hand the port segments to cut (Offload::tx_tcp_seg).
  bool segmentation_offload(const IpAddr& peer) const noexcept { return offloads_.of(peer).tx_tcp_seg && config_.gso; }
  // ---- ICMP and the IP sessions' DF bit (tcp_icmp.cpp) ----
  void icmp_error(const ctl::NetError& err);
  void allow_fragments(IpAddr peer) noexcept;
  std::uint8_t our_wscale(std::size_t rcvbuf_max) const noexcept;

  TimerWheel& timers_;
  TcpConfig config_;
  FamilyOffloads offloads_;
  ChunkSource* chunks_ = nullptr;  // where send buffers come from (the link's; null: the heap)
  IsnGenerator isn_;
  SynCookies cookies_;
  bool enabled_ = false;
  std::uint32_t next_ephemeral_;
  TupleMap<SessionRef> conns_;
  FlatMap<ListenKey, ListenSession*> listeners_;
  FlatMap<ListenKey, std::uint32_t> reserved_;  // bound, not yet listening or connected: 1, or
  static constexpr std::uint32_t kClaimedReservation = 2;  // claimed from the authority too
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
  // The connection (its application gone) enters TIME-WAIT: keep the record
  // instead. False when the table is full (the caller just closes).
  bool park_time_wait(TcpConnection& c);
  // Whether SYN `h` may end a TIME-WAIT (full or parked) and open a new
  // incarnation of its 4-tuple (RFC 6191).
  bool syn_reopens(const Header& h, const Options& opts, const TimeWaitRecord& tw) const noexcept;
  // A segment for a parked TIME-WAIT that does not reopen it.
  void time_wait_input(const ConnKey& key, TimeWaitRecord& tw, IpPeer& ip, const Header& h, const Options& opts,
                       std::size_t payload);
  void time_wait_ack(const ConnKey& key, const TimeWaitRecord& tw, IpPeer& ip, std::optional<SackBlock> dsack);
  // `release_flow`: give the authority's flow back (not when a new
  // incarnation of the 4-tuple takes it over).
  void end_time_wait(const ConnKey& key, bool release_flow = true) noexcept;
  void expire_time_waits();
  bool in_time_wait(const ConnKey& key) const noexcept { return time_waits_.find(key) != nullptr; }
  TupleMap<TimeWaitRecord> time_waits_;
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
    Counter& spurious_rtos;
    Counter& fast_retransmits;
    Counter& sack_recoveries;
    Counter& loss_probes;
    Counter& loss_probe_repairs;
    Counter& reorder_timeouts;
    Counter& rack_lost_bytes;
    Counter& rto_wait_us;
    Counter& ecn_ce_received;
    Counter& ecn_reductions;
    Counter& urgent_in;
    Counter& urgent_out;
    Counter& rcvbuf_grown;
    Counter& sndbuf_grown;
    Counter& dup_segments;
    Counter& ooo_dropped;
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
//       [rto_min_ms=200] [rto_max_ms=60000] [rto_initial_ms=1000] [delack_ms=40] [quickacks=16]
//       [recovery=rack|rfc6675] [tlp=on] [tlp_delack_ms=200] [tlp_min_ms=rto_min/4] [ecn=passive|on|off] [msl_ms=30000]
//       [time_wait_max=262144] [sndbuf=1m] [rcvbuf=1m] [syncookies=on] [secret=<32 hex digits>]
//       [ephemeral_min=49152] [ephemeral_max=65535] [ephemeral_random=on] [autotune=on] [autotune_max=16m] [buf_max=64m]
void register_tcp(Registry& registry);

}  // namespace xk::tcp

#pragma once
// The socket face of TCP: what applications, the central-mode relay and
// libxk use to drive a byte stream, apart from the protocol that runs it
// (xk/protocols/tcp.hpp) and the connection's internals (protocols/tcp/tcb.hpp,
// private).
//
//   TcpSocket, TcpListener   move-only handles used on the stack's thread
//   StreamEndpoint           what a TcpSocket drives: this stack's TCB, or a
//   ListenEndpoint           backend's stream (the relay); and the listeners
//   StreamBackend            a provider of both (TcpProtocol's backend=)

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "xk/clock.hpp"
#include "xk/port_authority.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/tcp_isn.hpp"  // FourTuple

namespace xk::tcp {

class TcpConnection;

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

// What a connection counts as it runs (kept in the TCB: only counters, so
// an idle connection holds no more than these).
struct ConnCounters {
  std::uint64_t bytes_sent = 0;      // payload bytes handed to IP, retransmissions included
  std::uint64_t bytes_acked = 0;
  std::uint64_t bytes_received = 0;  // in-order payload bytes accepted
  std::uint64_t segs_out = 0;
  std::uint64_t segs_in = 0;
  std::uint64_t retransmits = 0;     // segments sent again
  std::uint64_t rto_expiries = 0;
  std::uint64_t spurious_rtos = 0;   // timeouts undone: the timestamps proved the ACKs only late (RFC 3522)
  std::uint64_t fast_retransmits = 0;
  std::uint64_t sack_blocks_in = 0;
  std::uint64_t sack_blocks_out = 0;
  std::uint64_t dup_acks_in = 0;
  std::uint64_t ooo_segments = 0;    // arrived out of order
  std::uint64_t icmp_errors = 0;     // ICMP errors about this connection that passed RFC 5927's check
  std::uint64_t pmtu_updates = 0;    // frag-needed messages that lowered the path MTU
};

// A connection's state and counters, as TCP_INFO reports them.
struct ConnStats : ConnCounters {
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
  bool ecn = false;                  // RFC 3168, negotiated
  std::uint32_t unacked = 0;         // bytes sent and not acknowledged
  std::uint32_t notsent = 0;         // bytes queued and not sent yet (SIOCOUTQNSD)
  std::uint32_t sndbuf = 0;          // the send buffer's size now (autotuning grows it)
  std::uint32_t rcvbuf = 0;          // the receive buffer's size now
  std::uint32_t rcv_rtt_us = 0;      // the receiver's RTT estimate (autotuning; 0: none)
  std::uint32_t rcv_space = 0;       // the most bytes the application read in one such RTT
};

// Per-connection settings a program may change (setsockopt's TCP options):
// each field that is set is applied; unset ones keep what was there (the
// stack's TcpConfig until changed).
struct Tuning {
  std::optional<Duration> keepalive_idle;      // TCP_KEEPIDLE
  std::optional<Duration> keepalive_interval;  // TCP_KEEPINTVL
  std::optional<unsigned> keepalive_probes;    // TCP_KEEPCNT
  // TCP_USER_TIMEOUT: how long sent data may stay unacknowledged (and
  // keepalive probes unanswered) before the connection fails with
  // timed_out; zero: the retry counts decide, as without it.
  std::optional<Duration> user_timeout;
  // TCP_MAXSEG: the largest segment we offer and send (before the handshake;
  // 88..65495, and never above what the path allows).
  std::optional<std::uint16_t> max_segment;
  // TCP_QUICKACK: true enters quick-ACK mode now (a pending ACK leaves at
  // once); false leaves it.
  std::optional<bool> quickack;
  // TCP_CONGESTION: "cubic" or "newreno" from now on; the window and
  // threshold carry over (as Linux's switch keeps them).
  std::optional<std::string> congestion;
  // IP_TOS: the TOS byte of the connection's packets. Its ECN bits are the
  // stack's (RFC 3168), as on Linux: only the DSCP bits (0xfc) are taken.
  std::optional<std::uint8_t> tos;
  // IP_TTL / IPV6_UNICAST_HOPS: the hop limit of the connection's packets
  // (0: the IP layer's default).
  std::optional<std::uint8_t> hop_limit;

  // Takes the settings `t` makes (quickack, a moment's request, excepted).
  void update(const Tuning& t) {
    if (t.hop_limit) hop_limit = t.hop_limit;
    if (t.keepalive_idle) keepalive_idle = t.keepalive_idle;
    if (t.keepalive_interval) keepalive_interval = t.keepalive_interval;
    if (t.keepalive_probes) keepalive_probes = t.keepalive_probes;
    if (t.user_timeout) user_timeout = t.user_timeout;
    if (t.max_segment) max_segment = t.max_segment;
    if (t.congestion) congestion = t.congestion;
    if (t.tos) tos = t.tos;
  }
};

// Readiness, as poll() would report it.
enum Event : std::uint32_t {
  ev_readable = 1,   // data, a FIN, or a pending error
  ev_writable = 2,   // room in the send buffer (connected)
  ev_error = 4,      // an error is pending (refused, reset, timed out)
  ev_hangup = 8,     // the peer closed its side (FIN) or the connection is gone
  ev_acceptable = 16,  // a listener has a connection to accept
  ev_urgent = 32,      // the peer's urgent byte waits to be read (POLLPRI)
};

// What a TcpSocket drives: the TCB of a connection this stack runs
// (TcpConnection), or a byte stream some other backend carries -- e.g. the
// central-mode relay, where filterd runs TCP and the node only sees the
// stream (protocols/relay). The calls mean what TcpConnection's say.
class StreamEndpoint : public Session {
 public:
  using Session::Session;

  virtual Status connect(IpAddr addr, Port port, IpAddr local_addr = {}, Port local_port = {}) = 0;
  // `more`: the caller's write goes on in its next call (the next buffer of
  // a writev): a short tail waits for it and the PSH is left to that call.
  virtual Result<std::size_t> write(std::span<const std::byte> bytes, bool more) = 0;
  // Takes as much of msg as there is room for, without a copy; what does not
  // fit stays in msg and the answer is would_block (a partial write: an
  // endpoint that reads writable takes something).
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
  // Per-connection settings (Tuning); a backend that runs no TCP of its
  // own here (the relay) takes none: unsupported.
  virtual Status tune(const Tuning&) { return Errc::unsupported; }
  // What read() would return after the first `skip` bytes, left in place
  // (MSG_PEEK); unsupported for a backend without it.
  virtual Result<std::size_t> peek(std::span<std::byte>, std::size_t /*skip*/) { return Errc::unsupported; }
  // Urgent data (MSG_OOB), always in line (RFC 6093): mark_urgent(n) makes
  // the byte n bytes past the end of the send queue the urgent one (0: the
  // last byte queued; a send marks before it queues, so its segments carry
  // the pointer); at_urgent_mark() says whether the next byte read is the
  // peer's urgent byte (SIOCATMARK). Unsupported / false for a backend
  // without it.
  virtual Status mark_urgent(std::size_t /*ahead*/) { return Errc::unsupported; }
  virtual bool at_urgent_mark() const noexcept { return false; }
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
  virtual IpAddr addr() const noexcept = 0;
  virtual Port port() const noexcept = 0;
  virtual bool detached() const noexcept = 0;
  // TCP_MAXSEG on a listener: the MSS its SYN-ACKs offer and its
  // connections send with is at most this (none: the path's). Unsupported
  // for a backend without it.
  virtual Status set_max_segment(std::optional<std::uint16_t>) { return Errc::unsupported; }
};

// A TcpProtocol configured with `backend=...` hands its sockets and
// listeners to this (the port was already agreed with the PortAuthority).
class StreamBackend {
 public:
  virtual ~StreamBackend() = default;
  virtual Ref<StreamEndpoint> make_stream() = 0;
  // `authority`: to give the port back to when the listener closes (or null).
  virtual Result<Ref<ListenEndpoint>> make_listener(IpAddr addr, Port port, std::size_t backlog,
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
  Status connect(IpAddr addr, Port port, IpAddr local_addr = {}, Port local_port = {});
  // `more`: see StreamEndpoint::write.
  Result<std::size_t> write(std::span<const std::byte> bytes, bool more = false);
  // See StreamEndpoint::write_msg: what does not fit stays in msg.
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
  Status tune(const Tuning& t) { return c_ ? c_->tune(t) : Status{Errc::closed}; }
  Result<std::size_t> peek(std::span<std::byte> dst, std::size_t skip = 0) {
    return c_ ? c_->peek(dst, skip) : Result<std::size_t>{Errc::closed};
  }
  Status mark_urgent(std::size_t ahead) { return c_ ? c_->mark_urgent(ahead) : Status{Errc::closed}; }
  bool at_urgent_mark() const noexcept { return c_ && c_->at_urgent_mark(); }

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
  Status set_max_segment(std::optional<std::uint16_t> mss) { return l_ ? l_->set_max_segment(mss) : Status{Errc::closed}; }
  Port port() const noexcept { return l_ ? l_->port() : Port{}; }
  Status close();

 private:
  Ref<ListenEndpoint> l_;
};

}  // namespace xk::tcp

#pragma once
// UDP (RFC 768) over one IPv4 instance, and its datagram socket API.
//
//   udp u0 below=ip0 csum=on
//
// Below it, udp keeps the ipv4 contract of docs/architecture.md: one IP session per
// peer (opened with remote {Ipv4Addr peer, ProtoNum 17}, or handed up by a
// passive open on ProtoNum 17), whose GetLocalAddr/GetPeerAddr give the
// addresses of the pseudo-header.
//
// Above it, two ways in:
//   - UdpSocket: bind/connect/sendto/recvfrom on the stack's thread, received
//     datagrams queued (bounded) with their source; the payload is the Msg
//     that came from below with the UDP header popped (no copy).
//   - open(upper, parts): a connected session for another protocol, remote
//     {Ipv4Addr, Port} (Port on top), optional local {[Ipv4Addr,] Port};
//     payloads go to upper->demux(session, payload). (Passive opens by an
//     upper protocol, open_enable, are not offered yet: use a socket.)
//
// Demultiplexing: the connected 4-tuple first, then the bound (address, port),
// then the wildcard-bound port; no match returns Errc::port_unreachable, which
// ipv4 answers with ICMP (RFC 1122 3.2.2.1).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "xk/demux.hpp"
#include "xk/endpoint.hpp"
#include "xk/graph.hpp"
#include "xk/ip_layers.hpp"
#include "xk/port_authority.hpp"
#include "xk/protocol.hpp"

namespace xk::udp {

class UdpProtocol;

// A socket's ends: xk::Endpoint (xk/endpoint.hpp), either family.
using Endpoint = xk::Endpoint;

// One received datagram: the payload (zero-copy) and who sent it.
struct Datagram {
  Msg payload;
  IpAddr from;
  Port from_port;
};

struct SocketOptions {
  // Like SO_REUSEADDR: may share a port with other reuse_addr sockets bound to
  // other addresses or connected to other peers. Two unconnected sockets on
  // the very same (address, port) are still refused: connect one first.
  bool reuse_addr = false;
  // Receive queue bounds; a datagram past either is dropped and counted.
  std::size_t rcvbuf_bytes = 256 * 1024;
  std::size_t rcvbuf_datagrams = 1024;
  // IP_TOS: the TOS byte of every datagram sent (DSCP and ECN bits as
  // given, as Linux takes them on a datagram socket).
  std::uint8_t tos = 0;
  // IP_TTL / IPV6_UNICAST_HOPS: the hop limit of every datagram sent (0:
  // the IP layer's default).
  std::uint8_t hop_limit = 0;
  // IPV6_V6ONLY: a socket bound to :: takes IPv6 datagrams alone (else both
  // families: xk/endpoint.hpp's BindScope). Before bind() only.
  bool v6only = false;
  // Where a send or connect before any bind() binds the socket: :: (both
  // families), or 0.0.0.0 for a socket of IPv4 alone (an AF_INET one).
  IpAddr implicit_bind;
};

struct UdpConfig {
  ChecksumMode csum = ChecksumMode::on;
  std::uint16_t ephemeral_min = 49152;  // RFC 6335 section 6: the dynamic range
  std::uint16_t ephemeral_max = 65535;
};

// A UDP endpoint: what a socket owns, or what open() hands an upper protocol.
class UdpSession final : public Session {
 public:
  UdpSession(UdpProtocol& proto, Protocol* upper, SocketOptions options);
  ~UdpSession() override;

  // Send to the connected peer.
  Status push(Msg msg) override;
  // Deliver from the connected peer (demux normally calls receive()).
  Status pop(Session& lower, Msg msg) override;
  Status close() override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  Status bind(IpAddr addr, Port port);
  Status connect(IpAddr addr, Port port);
  Status sendto(Msg msg, IpAddr addr, Port port);
  Result<Datagram> recvfrom();

  bool is_closed() const noexcept { return proto_ == nullptr; }
  bool bound() const noexcept { return bound_; }
  bool connected() const noexcept { return connected_; }
  Endpoint local() const noexcept { return local_; }
  Endpoint remote() const noexcept { return remote_; }
  bool readable() const noexcept { return !rxq_.empty() || error_ != Errc::ok; }
  std::size_t queued_datagrams() const noexcept { return rxq_.size(); }
  std::size_t queued_bytes() const noexcept { return rxq_bytes_; }
  // The next datagram, left queued (MSG_PEEK): null when none.
  const Datagram* front() const noexcept { return rxq_.empty() ? nullptr : &rxq_.front(); }
  // The payload bytes of the next datagram (FIONREAD), 0 if none.
  std::size_t next_datagram_size() const noexcept { return rxq_.empty() ? 0 : rxq_.front().payload.size(); }
  std::uint64_t rx_dropped() const noexcept { return rx_dropped_; }
  // The error an ICMP message reported, returned once by the next send or receive.
  Errc pending_error() const noexcept { return error_; }
  void set_on_readable(std::function<void()> fn) { on_readable_ = std::move(fn); }
  Errc take_error() noexcept { return std::exchange(error_, Errc::ok); }
  const SocketOptions& options() const noexcept { return options_; }
  // reuse_addr counts at bind(): changing it afterwards is bad_state.
  Status set_options(const SocketOptions& options);

 private:
  friend class UdpProtocol;
  Status receive(Session& lower, Msg payload, Endpoint from);

  UdpProtocol* proto_;  // null once closed (or the protocol is gone)
  SocketOptions options_;
  Endpoint local_;        // as bound: addr 0 is the wildcard
  IpAddr conn_local_;   // the local address of the connected 4-tuple
  Endpoint remote_;
  bool bound_ = false;
  bool connected_ = false;
  SessionRef ip_;  // the IP session to the connected peer
  std::deque<Datagram> rxq_;
  std::size_t rxq_bytes_ = 0;
  std::uint64_t rx_dropped_ = 0;
  Errc error_ = Errc::ok;
  std::function<void()> on_readable_;
};

// The socket API: a move-only RAII handle on a UdpSession, used on the stack's
// thread. Errors are Errc values: closed (closed socket), invalid_argument (port
// or address 0 where one is needed), exists (address in use, or no free
// ephemeral port), would_block (nothing queued), too_large (over 65507 bytes),
// port_unreachable / proto_unreachable / no_route (an ICMP error reported for a
// connected socket, returned once).
class UdpSocket {
 public:
  UdpSocket() noexcept = default;
  explicit UdpSocket(UdpProtocol& udp, SocketOptions options = {});
  UdpSocket(UdpSocket&&) noexcept = default;
  UdpSocket& operator=(UdpSocket&& other) noexcept;
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;
  ~UdpSocket();

  bool is_open() const noexcept { return s_ && !s_->is_closed(); }

  // Port 0 picks a free ephemeral port; address 0 is every local address.
  Status bind(IpAddr addr, Port port);
  // Fix the peer: send() goes there, and only its datagrams are received.
  // Binds an ephemeral port first if needed. May be called again.
  Status connect(IpAddr addr, Port port);
  Status send(Msg msg);
  Status send(std::span<const std::byte> bytes);
  // Binds an ephemeral port first if needed.
  Status sendto(Msg msg, IpAddr addr, Port port);
  Status sendto(std::span<const std::byte> bytes, IpAddr addr, Port port);
  // The oldest queued datagram; would_block if there is none.
  Result<Datagram> recvfrom();

  // Readiness for a poll-like API: readable when a datagram or an error waits;
  // writable while open (sends never block: a full link drops and counts).
  bool readable() const noexcept { return s_ && s_->readable(); }
  bool writable() const noexcept { return is_open(); }
  // Called on the stack's thread each time a datagram is queued.
  void set_on_readable(std::function<void()> fn);

  Result<Endpoint> local_endpoint() const;
  Result<Endpoint> remote_endpoint() const;
  std::size_t queued_datagrams() const noexcept { return s_ ? s_->queued_datagrams() : 0; }
  std::size_t queued_bytes() const noexcept { return s_ ? s_->queued_bytes() : 0; }
  std::size_t next_datagram_size() const noexcept { return s_ ? s_->next_datagram_size() : 0; }
  const Datagram* front() const noexcept { return s_ ? s_->front() : nullptr; }
  std::uint64_t rx_dropped() const noexcept { return s_ ? s_->rx_dropped() : 0; }
  UdpSession* session() const noexcept { return s_.get(); }
  // The pending ICMP-reported error, taken (SO_ERROR); ok if none.
  Errc take_error() noexcept { return s_ ? s_->take_error() : Errc::ok; }
  // Receive queue bounds at any time; reuse_addr before bind() only.
  Status set_options(const SocketOptions& options) { return s_ ? s_->set_options(options) : Status{Errc::closed}; }

  Status close();

 private:
  Ref<UdpSession> s_;
};

class UdpProtocol final : public Protocol {
 public:
  static constexpr std::size_t kMaxPayload = 65535 - 20 - 8;  // one IPv4 datagram

  // `below`: the IP layers, at most one per family (ipv4, ipv6 or both); a
  // peer's address picks the layer that takes it.
  UdpProtocol(std::string name, std::vector<Protocol*> below, UdpConfig config = {});
  UdpProtocol(std::string name, Protocol& below, UdpConfig config = {})
      : UdpProtocol(std::move(name), std::vector<Protocol*>{&below}, config) {}
  ~UdpProtocol() override;

  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  Status open_done(Protocol& lower, Session& session, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  UdpSocket socket(SocketOptions options = {}) { return UdpSocket(*this, options); }
  // Ports are agreed with `authority` (filterd) from now on: the first socket
  // bound to a port claims it, the last one to leave gives it back. Null:
  // the stack owns its address alone. Must outlive its use.
  void set_port_authority(PortAuthority* authority) noexcept { authority_ = authority; }
  // The local ports sockets are bound to (each once), for an authority that
  // has to learn them again (filterd restarted).
  std::vector<std::uint16_t> bound_ports() const;
  std::size_t session_count() const noexcept { return sessions_.size(); }
  ChecksumMode checksum_mode() const noexcept { return config_.csum; }

 private:
  friend class UdpSession;

  // A bound socket's (address, port): every unspecified address (0.0.0.0,
  // ::) is the one wildcard, ::.
  // A bound socket's BindScope: :: of both families and :: of IPv6 alone
  // are two keys.
  struct BindKey {
    BindKey(const IpAddr& a, std::uint16_t p, bool only6 = false) noexcept
        : addr(a), port(p), v6only(only6 && a == IpAddr{} ? 1 : 0) {}
    IpAddr addr;
    std::uint16_t port;
    std::uint8_t v6only;
    std::uint8_t zero = 0;
    friend bool operator==(const BindKey&, const BindKey&) = default;
  };
  struct PortKey {
    std::uint16_t port;
    friend bool operator==(const PortKey&, const PortKey&) = default;
  };
  struct PeerKey {
    IpAddr addr;
    friend bool operator==(const PeerKey&, const PeerKey&) = default;
  };
  struct PtrKey {
    std::uintptr_t p;
    friend bool operator==(const PtrKey&, const PtrKey&) = default;
  };
  // An IP session we send and receive through, with its addresses.
  struct IpPeer {
    SessionRef session;
    IpAddr local;
    IpAddr peer;
    bool opened_by_us = false;
  };

  Status ensure_enabled();
  Result<IpPeer*> learn(Session& ip, bool opened_by_us);
  Result<IpPeer*> route_to(IpAddr peer, IpAddr local_hint);
  Status bind_session(UdpSession& s, IpAddr addr, Port port);
  Status connect_session(UdpSession& s, IpAddr addr, Port port);
  Status send(UdpSession& s, Msg msg, IpAddr addr, Port port, IpPeer* ip);
  void unbind(UdpSession& s) noexcept;
  void forget(UdpSession& s) noexcept;
  Result<std::uint16_t> pick_ephemeral();
  bool port_conflicts(const UdpSession& s, IpAddr addr, std::uint16_t port);
  // The socket a datagram to (dst, dport) from (src, sport) goes to: a
  // connected one, else one bound to dst, else one bound to every address.
  SessionRef* receiver(IpAddr dst, std::uint16_t dport, IpAddr src, std::uint16_t sport);
  Status deliver_error(const ctl::NetError& e);

  UdpConfig config_;
  FamilyOffloads offloads_;
  bool enabled_ = false;
  std::uint32_t next_ephemeral_;
  TupleMap<SessionRef> connected_;  // by (local, remote)
  ActiveMap<BindKey> bound_;
  FlatMap<PortKey, std::vector<UdpSession*>> port_users_;
  PortAuthority* authority_ = nullptr;
  FlatMap<PtrKey, UdpSession*> sessions_;
  FlatMap<PtrKey, IpPeer> ip_by_session_;
  FlatMap<PeerKey, Session*> ip_by_peer_;

  Counter& rx_datagrams_;
  Counter& tx_datagrams_;
  Counter& rx_no_csum_;
  Counter& rx_trimmed_;
  Counter& drop_truncated_;
  Counter& drop_bad_length_;
  Counter& drop_bad_csum_;
  Counter& drop_rcvbuf_full_;
  Counter& icmp_errors_;
  Counter& icmp_errors_ignored_;
  Counter& rx_csum_by_port_;
  Counter& tx_csum_by_port_;
  Counter& drop_v6_no_csum_;
};

// Make the kind `udp` available to graph specs:
//   udp u0 below=ip0 [csum=on|off] [ephemeral_min=49152] [ephemeral_max=65535]
void register_udp(Registry& registry);

}  // namespace xk::udp

#pragma once
// relay: a node's side of central mode (docs/relay-protocol.md). filterd runs
// TCP for the node and relays each connection's byte stream over the node's
// channel; this layer turns those streams back into the socket API, so the
// application is the same as with its own TCP:
//
//   eth   eth0   below=net0
//   relay relay0 below=eth0 peer=<filterd's channel MAC> window=256k
//   tcp   tcp0   below=relay0 backend=relay      # TcpSocket, TcpListener as usual
//
// Ports are still agreed with filterd over the control socket (the tcp
// protocol's PortAuthority): a listen() asks filterd, whose TCP then accepts
// on the shared address and relays each accepted connection here (OPEN). A
// connect() asks filterd's TCP to connect (CONNECT).
//
// Flow control is by credit, per connection and direction: a side sends DATA
// only within the bytes the other granted, so no frame is ever dropped for
// lack of room. Here, a connection grants `window` bytes and grants again as
// the application reads; filterd grants what its TCP send buffer can take.
// Frames the channel cannot take now wait in order and go on a later pass.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/relay_wire.hpp"
#include "xk/protocols/tcp_socket.hpp"

namespace xk::relay {

struct RelayConfig {
  MacAddr peer;                          // filterd's MAC on the channel
  std::size_t window = 256 * 1024;       // receive credit per connection
  std::size_t tx_queue_frames = 1024;    // waiting frames beyond which writes block
};

class RelayProtocol;

// One relayed stream: what a TcpSocket drives in central mode.
class RelayConnection final : public tcp::StreamEndpoint {
 public:
  RelayConnection(RelayProtocol& proto);
  ~RelayConnection() override;

  // Whole or nothing (write_msg may take a part).
  Status push(Msg msg) override;
  Status pop(Session&, Msg) override { return Errc::unsupported; }
  Status close() override { return close_gracefully(); }

  Status connect(IpAddr addr, Port port, IpAddr local_addr = {}, Port local_port = {}) override;
  // `more` means nothing here: the relay carries bytes, filterd makes the segments.
  Result<std::size_t> write(std::span<const std::byte> bytes, bool more) override;
  Status write_msg(Msg& msg) override;
  Result<std::size_t> read(std::span<std::byte> dst) override;
  Result<Msg> read_msg(std::size_t max) override;
  Status shutdown_write() override;
  Status close_gracefully() override;
  void abort() override;

  // TCP's knobs are filterd's business here; only the receive buffer means
  // something (the credit this end grants).
  void set_nodelay(bool) noexcept override {}
  void set_cork(bool) noexcept override {}
  void set_keepalive(bool) noexcept override {}
  void set_sndbuf(std::size_t) noexcept override {}
  void set_rcvbuf(std::size_t bytes) noexcept override;
  void set_checksum(ChecksumMode mode) noexcept override { csum_ = mode; }
  ChecksumMode checksum_mode() const noexcept override { return csum_; }

  tcp::State state() const noexcept override;
  std::uint32_t events() const noexcept override;
  void set_on_event(std::function<void()> fn) override { on_event_ = std::move(fn); }
  Errc pending_error() const noexcept override { return error_; }
  Errc take_error() noexcept override { return std::exchange(error_, Errc::ok); }
  Errc soft_error() const noexcept override { return Errc::ok; }
  tcp::ConnStats stats() const noexcept override;
  tcp::FourTuple tuple() const noexcept override { return tuple_; }
  std::size_t rcv_queued() const noexcept override { return rcv_bytes_; }
  std::size_t snd_queued() const noexcept override { return 0; }
  bool detached() const noexcept override { return proto_ == nullptr; }

  std::uint32_t id() const noexcept { return id_; }
  std::uint64_t credit() const noexcept { return credit_; }

 private:
  friend class RelayProtocol;
  friend class RelayListener;
  enum class Phase : std::uint8_t { idle, connecting, open, done };

  void on_frame(const Parsed& p, Msg payload);
  void grant(std::size_t read);
  void maybe_finished();
  void end(Errc e);  // RST in or out: the stream is over
  void notify();
  Status send_data(Msg chunk);

  RelayProtocol* proto_;
  std::uint32_t id_ = 0;
  Phase phase_ = Phase::idle;
  tcp::FourTuple tuple_{};
  std::uint64_t credit_ = 0;      // bytes we may still send
  std::uint64_t rcv_allowed_ = 0; // bytes filterd may still send us
  std::size_t window_;
  std::size_t ungranted_ = 0;     // read by the application, not yet granted again
  std::deque<Msg> rcvq_;
  std::size_t rcv_bytes_ = 0;
  bool fin_sent_ = false;
  bool fin_rcvd_ = false;
  bool user_closed_ = false;
  Errc error_ = Errc::ok;
  ChecksumMode csum_ = ChecksumMode::on;
  std::function<void()> on_event_;
  std::uint64_t bytes_sent_ = 0, bytes_received_ = 0;
};

class RelayListener final : public tcp::ListenEndpoint {
 public:
  RelayListener(RelayProtocol& proto, IpAddr addr, Port port, std::size_t backlog, PortAuthority* authority);
  ~RelayListener() override;
  Status push(Msg) override { return Errc::unsupported; }
  Status pop(Session&, Msg) override { return Errc::unsupported; }
  Status close() override;

  Result<Ref<tcp::StreamEndpoint>> accept_stream() override;
  std::size_t pending() const noexcept override { return accept_q_.size(); }
  std::uint32_t events() const noexcept override { return accept_q_.empty() ? 0u : std::uint32_t{tcp::ev_acceptable}; }
  void set_on_event(std::function<void()> fn) override { on_event_ = std::move(fn); }
  void set_checksum(ChecksumMode) noexcept override {}
  IpAddr addr() const noexcept override { return addr_; }
  Port port() const noexcept override { return port_; }
  bool detached() const noexcept override { return proto_ == nullptr; }

 private:
  friend class RelayProtocol;
  RelayProtocol* proto_;
  IpAddr addr_;
  Port port_;
  std::size_t backlog_;
  PortAuthority* authority_;
  std::deque<Ref<RelayConnection>> accept_q_;
  std::function<void()> on_event_;
};

class RelayProtocol final : public Protocol, public Pollable, public tcp::StreamBackend {
 public:
  // `eth`: an eth layer over the channel to filterd. `loop`: where the
  // queue of frames waiting for the channel is flushed (may be null in a
  // test that calls poll() itself).
  RelayProtocol(std::string name, Protocol& eth, EventLoop* loop, RelayConfig config);
  ~RelayProtocol() override;

  Status open_done(Protocol&, Session&, Participants&) override { return {}; }
  // tcp enables itself on what it sits on; the streams reach it through the
  // StreamBackend calls instead, so there is nothing to record.
  Status open_enable(Protocol&, Participants&) override { return {}; }
  Status open_disable(Protocol&, Participants&) override { return {}; }
  Status demux(Session& lower, Msg msg) override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  Ref<tcp::StreamEndpoint> make_stream() override;
  Result<Ref<tcp::ListenEndpoint>> make_listener(IpAddr addr, Port port, std::size_t backlog,
                                                 PortAuthority* authority) override;
  std::size_t stream_count() const noexcept override { return conns_.size(); }

  std::size_t poll(std::size_t budget) override;
  bool before_sleep() noexcept override;

  const RelayConfig& config() const noexcept { return config_; }
  // The most stream bytes one DATA frame carries.
  std::size_t max_payload() const noexcept { return max_payload_; }
  std::size_t tx_queued() const noexcept { return txq_.size(); }
  bool tx_full() const noexcept { return txq_.size() >= config_.tx_queue_frames; }
  std::size_t tx_room() const noexcept { return tx_full() ? 0 : config_.tx_queue_frames - txq_.size(); }

 private:
  friend class RelayConnection;
  friend class RelayListener;

  Status send_control(Op op, std::uint32_t id, std::uint32_t arg, std::span<const std::byte> body = {});
  Status send_frame(Msg frame);
  bool flush();
  void forget(RelayConnection& c) noexcept;
  void on_open(const Parsed& p);

  Protocol& eth_;
  EventLoop* loop_;
  RelayConfig config_;
  SessionRef tx_;
  bool enabled_ = false;
  std::size_t max_payload_ = 0;
  std::uint32_t next_id_ = 1;
  std::map<std::uint32_t, Ref<RelayConnection>> conns_;
  std::map<std::uint16_t, RelayListener*> listeners_;
  std::deque<Msg> txq_;

  Counter& rx_frames_;
  Counter& tx_frames_;
  Counter& tx_queued_;
  Counter& drop_malformed_;
  Counter& drop_unknown_id_;
  Counter& drop_over_credit_;
  Counter& opens_refused_;
  Counter& tx_errors_;
};

// relay r0 below=eth0 peer=<MAC> [window=256k] [tx_queue=1024]
void register_relay(Registry& registry);

}  // namespace xk::relay

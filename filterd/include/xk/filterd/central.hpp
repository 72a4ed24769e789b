#pragma once
// Central mode's bridge (docs/filterd.md, docs/relay-protocol.md): filterd's
// own TCP terminates every connection of the shared address, and each
// connection's byte stream is relayed to the node that owns it over the
// node's channel -- the central-server baseline of Guedes & Peterson (1997)
// that steer mode is measured against.
//
// - A node's LISTEN (the control socket) makes filterd's TCP listen on the
//   port; each accepted connection goes to the node the filter's listen
//   table names (the same rendezvous choice as steer for a group): OPEN.
// - A node's CONNECT (a relay frame) makes filterd's TCP connect out;
//   CONNECTED or RST answers it.
// - Both directions are flow-controlled end to end: filterd reads from a
//   TCP connection only within the credit the node granted (so TCP's
//   receive window closes when the node does not read), and grants the node
//   only what the connection's send buffer can take.
// - A node that goes: its connections are aborted (RST to the peers).
//
// One thread: the loop's. Socket events only mark a connection; poll() does
// the work, so TCP is never re-entered from its own callbacks.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "xk/counters.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/steer.hpp"
#include "xk/protocols/relay_wire.hpp"
#include "xk/protocols/tcp.hpp"

namespace xk::filterd {

struct CentralConfig {
  std::size_t sndbuf = 512 * 1024;  // per connection: filterd's TCP send buffer (what a node may have in flight)
  std::size_t rcvbuf = 512 * 1024;  // per connection: filterd's TCP receive buffer
  std::size_t backlog = 1024;       // per listened port
  std::size_t channel_mtu = 1500;   // a relay frame's largest Ethernet payload
  std::size_t node_queue = 256;     // frames waiting for a node's channel before reading from TCP pauses
};

class Central final : public Pollable {
 public:
  // `tcp`: filterd's own TCP (over ip0); `steer`: the data path, whose relay
  // sink this becomes. `loop` (may be null in tests that poll themselves).
  Central(tcp::TcpProtocol& tcp, Steer& steer, EventLoop* loop, CentralConfig config = {});
  ~Central() override;
  Central(const Central&) = delete;
  Central& operator=(const Central&) = delete;

  // The registry's hooks.
  void listened(NodeId node, std::uint16_t port);
  void unlistened(NodeId node, std::uint16_t port);
  void node_gone(NodeId node);

  // A relay frame from a node (steer's sink).
  void from_node(NodeId node, Msg frame);

  std::size_t poll(std::size_t budget) override;
  bool before_sleep() noexcept override;

  const CounterSet& counters() const noexcept { return counters_; }
  std::size_t bridge_count() const noexcept { return bridges_.size(); }
  std::size_t listen_count() const noexcept { return ports_.size(); }

 private:
  struct Bridge;
  struct NodeState {
    std::deque<Msg> txq;          // frames the channel could not take yet
    std::set<std::uint32_t> ids;  // its connections
    std::vector<std::uint64_t> starved;  // waiting for room in txq
  };
  struct PortListen {
    tcp::TcpListener listener;
    std::set<NodeId> members;
  };
  static std::uint64_t key(NodeId node, std::uint32_t id) noexcept { return (std::uint64_t{node} << 32) | id; }

  Bridge& add_bridge(NodeId node, std::uint32_t id, tcp::TcpSocket sock);
  void erase(std::uint64_t k);
  void mark(std::uint64_t k);
  void pump(Bridge& b);
  void accept_all(std::uint16_t port);
  void data_from_node(Bridge& b, Msg payload);
  void reset_node_side(Bridge& b, relay::RstCode code);
  bool send(NodeId node, Msg frame);
  bool send_control(NodeId node, relay::Op op, std::uint32_t id, std::uint32_t arg,
                    std::span<const std::byte> body = {});
  void flush(NodeId node, NodeState& ns);
  std::size_t max_payload() const noexcept { return config_.channel_mtu - relay::Header::kSize; }

  tcp::TcpProtocol& tcp_;
  Steer& steer_;
  EventLoop* loop_;
  CentralConfig config_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Bridge>> bridges_;
  std::map<NodeId, NodeState> nodes_;
  std::map<std::uint16_t, PortListen> ports_;
  std::vector<std::uint64_t> dirty_;
  std::vector<std::uint16_t> accept_dirty_;
  std::uint32_t next_id_ = 1;

  CounterSet counters_{"central"};
  Counter& accepted_;
  Counter& connects_;
  Counter& connected_;
  Counter& connect_failed_;
  Counter& closed_;
  Counter& rst_to_nodes_;
  Counter& rst_from_nodes_;
  Counter& bytes_to_nodes_;
  Counter& bytes_from_nodes_;
  Counter& frames_to_nodes_;
  Counter& frames_queued_;
  Counter& malformed_;
  Counter& unknown_id_;
  Counter& over_credit_;
  Counter& no_node_;
  Counter& listen_failed_;
  Counter& aborted_node_gone_;
};

}  // namespace xk::filterd

#pragma once
// The nodes' channels, made and unmade as nodes come and go (the registry's
// attach and detach hooks, docs/filterd.md):
//   - a node on this host gets a server end per queue -- a hot-plugged memif
//     interface, or an shm link listening on SOCKET.<channel id> -- attached
//     to steer with the queue's MAC;
//   - a node on another host gets its place on the node port (steer's
//     attach_ethernet), and goes when that port's link goes down: its
//     control connection is closed (ControlServer::drop_node), so it notices.
// One object per filterd, on the loop's thread.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "xk/event_loop.hpp"
#include "xk/filterd/registry.hpp"
#include "xk/filterd/steer.hpp"
#include "xk/result.hpp"
#include "xk/timer.hpp"

namespace xk::drivers {
class DpdkDriver;
}

namespace xk::filterd {

class ControlServer;

class ChannelManager {
 public:
  enum class Kind : std::uint8_t { memif, shm };
  struct Config {
    Kind kind = Kind::memif;
    std::string socket;    // memif: the control socket; shm: the path the links' names extend
    bool central = false;  // relay frames are never dropped (a full memif ring waits)
  };

  // `ext`: the external port, whose MTU the channels take and whose ability
  // to cut large frames decides whether the nodes may send them.
  // `node_port`: filterd's port for nodes on other hosts, or null.
  ChannelManager(EventLoop& loop, Steer& steer, drivers::DpdkDriver& ext, drivers::DpdkDriver* node_port,
                 Config config);
  ~ChannelManager();
  ChannelManager(const ChannelManager&) = delete;
  ChannelManager& operator=(const ChannelManager&) = delete;

  // The registry's hooks. attach makes every queue's channel or none.
  Status attach(const NodeInfo& n);
  void detach(NodeId id);
  // Drops the node port's nodes through `control` when its link goes down
  // (looked at every 200 ms).
  void watch_node_port(ControlServer& control);
  // Every channel detached and closed (at shutdown, before steer goes).
  void clear();

 private:
  Status attach_remote(const NodeInfo& n);
  // One queue's channel; throws (DPDK's or the socket's reason) if it cannot be made.
  std::unique_ptr<Protocol> make_channel(const NodeInfo& n, std::size_t queue, const ctl::Channel& ch) const;
  void look_at_node_port();

  EventLoop& loop_;
  Steer& steer_;
  drivers::DpdkDriver& ext_;
  drivers::DpdkDriver* node_port_;
  Config config_;
  std::map<NodeId, std::vector<std::unique_ptr<Protocol>>> channels_;
  std::set<NodeId> remote_nodes_;  // on the node port
  ControlServer* control_ = nullptr;
  bool node_port_up_ = true;
  std::optional<Timer> link_timer_;
};

}  // namespace xk::filterd

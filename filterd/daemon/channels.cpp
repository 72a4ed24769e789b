// The nodes' channels (xk/filterd/channels.hpp).
#include "xk/filterd/channels.hpp"

#include <chrono>
#include <cstdio>
#include <exception>

#include "xk/drivers/dpdk.hpp"
#include "xk/drivers/shm.hpp"
#include "xk/filterd/control_server.hpp"

namespace xk::filterd {

namespace {
constexpr std::chrono::milliseconds kLinkLook{200};
}  // namespace

ChannelManager::ChannelManager(EventLoop& loop, Steer& steer, drivers::DpdkDriver& ext, drivers::DpdkDriver* node_port,
                               Config config)
    : loop_(loop), steer_(steer), ext_(ext), node_port_(node_port), config_(std::move(config)) {
  // The memif socket outlives node churn: an interface that never gets a
  // client holds it (DPDK's memif would otherwise leave it listening, but
  // unusable, once the last node is gone -- dpdk::probe_vdev). Its id is past
  // any node's (node id * 64 + queue < 2^22).
  if (config_.kind == Kind::memif) {
    drivers::dpdk::probe_vdev("net_memif_anchor,role=server,id=2147483647,socket=" + config_.socket);
  }
}

ChannelManager::~ChannelManager() { clear(); }

void ChannelManager::clear() {
  link_timer_.reset();
  for (auto& [id, made] : channels_) steer_.detach(id);
  channels_.clear();
}

Status ChannelManager::attach_remote(const NodeInfo& n) {
  // One queue, on the shared node port (the registry refuses more).
  const ctl::Channel& ch = n.channels.front();
  if (node_port_ == nullptr) return Errc::not_found;
  if (!node_port_->link().up) return Errc::no_route;  // it would hear nothing
  if (Status st = steer_.attach_ethernet(n.id, ch.node_mac); !st) return st;
  remote_nodes_.insert(n.id);
  std::printf("filterd: node %u (%s, pid %u) attached on the node port, MAC %s\n", n.id, n.name.c_str(), n.pid,
              to_string(ch.node_mac).c_str());
  std::fflush(stdout);
  return {};
}

std::unique_ptr<Protocol> ChannelManager::make_channel(const NodeInfo& n, std::size_t queue,
                                                       const ctl::Channel& ch) const {
  const std::string name = "node" + std::to_string(n.id) + (queue == 0 ? "" : "q" + std::to_string(queue));
  // Large frames from the nodes only if the external port can cut them.
  const Result<LinkOffloads> ext_offloads = ext_.control(xk::ctl::GetOffloads{});
  const bool ext_cuts = ext_offloads && ext_offloads->tx_tcp_seg;
  if (config_.kind == Kind::shm) {
    drivers::ShmDriver::Config sc;
    sc.path = config_.socket + "." + std::to_string(ch.memif_id);
    sc.server = true;
    sc.mtu = ext_.mtu();
    if (!ext_cuts) sc.frame_max = 0;
    return std::make_unique<drivers::ShmDriver>(name, sc, &loop_);
  }
  drivers::DpdkDriver::Config dc;
  dc.devargs = "net_memif" + std::to_string(ch.memif_id) + ",role=server,id=" + std::to_string(ch.memif_id) +
               ",socket=" + config_.socket;
  dc.mtu = ext_.mtu();
  dc.mbufs = 4095;              // per channel: enough for its rings and bursts
  dc.tx_keep = config_.central;  // relay frames are never dropped: a full ring waits
  // Large frames both ways (docs/filterd.md): from the nodes, whole
  // MTU-sized segments steer has the external port cut -- if it can (gso=off:
  // MTU-sized ones only); to them, what the external port coalesced. The
  // channel itself never coalesces.
  if (!ext_cuts) dc.frame_max = 0;
  dc.gro = false;
  return std::make_unique<drivers::DpdkDriver>(name, dc, &loop_);
}

Status ChannelManager::attach(const NodeInfo& n) {
  if (n.ethernet) return attach_remote(n);
  if (config_.central && n.channels.size() > 1) return Errc::unsupported;  // the bridge relays to one queue
  std::vector<std::unique_ptr<Protocol>> made;
  for (std::size_t q = 0; q < n.channels.size(); ++q) {
    const ctl::Channel& ch = n.channels[q];
    Status st;
    try {
      std::unique_ptr<Protocol> d = make_channel(n, q, ch);
      st = steer_.attach(n.id, static_cast<std::uint16_t>(q), *d, ch.node_mac);
      if (st) made.push_back(std::move(d));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "filterd: node %u (%s) queue %zu: %s\n", n.id, n.name.c_str(), q, e.what());
      st = Errc::no_memory;
    }
    if (!st) {
      steer_.detach(n.id);  // the queues attached so far
      return st;
    }
  }
  channels_[n.id] = std::move(made);
  const char* kind = config_.kind == Kind::shm ? "shm" : "memif";
  if (n.channels.size() == 1) {
    std::printf("filterd: node %u (%s, pid %u) attached on %s id %u\n", n.id, n.name.c_str(), n.pid, kind,
                n.channels.front().memif_id);
  } else {
    std::printf("filterd: node %u (%s, pid %u) attached with %zu queues on %s ids %u..%u\n", n.id, n.name.c_str(),
                n.pid, n.channels.size(), kind, n.channels.front().memif_id, n.channels.back().memif_id);
  }
  std::fflush(stdout);
  return {};
}

void ChannelManager::detach(NodeId id) {
  steer_.detach(id);
  channels_.erase(id);
  remote_nodes_.erase(id);
}

void ChannelManager::watch_node_port(ControlServer& control) {
  if (node_port_ == nullptr) return;
  control_ = &control;
  node_port_up_ = node_port_->link().up;
  link_timer_.emplace(loop_.timers(), [m = this] { m->look_at_node_port(); });
  link_timer_->arm_after(kLinkLook);
}

void ChannelManager::look_at_node_port() {
  const bool up = node_port_->link().up;
  if (node_port_up_ && !up) {
    std::printf("filterd: the node port's link is down: %zu remote nodes go\n", remote_nodes_.size());
    std::fflush(stdout);
    const std::set<NodeId> gone = remote_nodes_;  // drop_node detaches: remote_nodes_ changes
    for (NodeId id : gone) control_->drop_node(id);
  }
  node_port_up_ = up;
  link_timer_->arm_after(kLinkLook);
}

}  // namespace xk::filterd

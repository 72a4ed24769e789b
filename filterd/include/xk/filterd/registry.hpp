#pragma once
// filterd's control plane without its transport: the nodes, the host-wide
// ports they hold, and what every control request does to them and to the
// filter (docs/control-protocol.md gives the messages, docs/filterd.md the
// rules). The control socket server feeds it decoded requests and sends back
// what it answers; a test can do the same without a socket.
//
// Ports are host-wide: a port one node listens on is nobody else's (unless
// they all join it as a group), and each connection a node opens gets a
// local port of its own from the ephemeral range, with its exact flow in the
// filter before the reply -- so before the node's SYN leaves.
//
// Administration (version 2): a connection that never says HELLO is an admin
// connection (xkctl). It may list nodes, ports, flows and rules, read the
// counters, add a rule for any node and delete any rule. Who may connect at
// all is the transport's business (SO_PEERCRED: root or filterd's user).
// A filterd that restarts starts empty. Nodes that outlived the old one say
// HELLO with `resume` (their old id and channels, granted when nobody holds
// them) and RESYNC what they own; entries that conflict with what another
// node holds are refused one by one, the rest installed.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "xk/filterd/control.hpp"
#include "xk/filterd/filter.hpp"
#include "xk/options.hpp"
#include "xk/options.hpp"

namespace xk::filterd {

struct RegistryConfig {
  std::string memif_socket = "/run/xk/filterd.memif";  // where nodes find their channels
  MacAddr filterd_mac{{0x02, 0x78, 0x6b, 0x00, 0x00, 0x01}};  // on the channels
  std::uint16_t mtu = 1500;
  Ipv4Cidr shared;
  Ipv4Addr gateway;  // 0: none
  std::optional<IpCidr> shared6;     // the shared IPv6 address; none: nodes get no IPv6
  std::optional<IpAddr> gateway6;
  ctl::Secret secret{};  // every node's ISN and SYN-cookie key (RFC 6528: one address, one key)
  std::uint16_t ephemeral_min = 49152;  // RFC 6335 6
  std::uint16_t ephemeral_max = 65535;
  std::size_t max_nodes = 1024;
  // Ports one node may hold by LEASE (its queues together): a quarter of
  // the default ephemeral range.
  std::size_t max_leased_ports = 4096;
  std::uint32_t heartbeat_ms = 0;
  bool central = false;  // central mode (HELLO_REPLY says so to the nodes)
  // filterd's MAC on its node port (--node-port), where nodes on other hosts
  // are reached over plain Ethernet; absent: no node port, memif nodes only.
  std::optional<MacAddr> node_port_mac;
  // Where the user rules are kept across a restart of filterd (empty: in
  // memory only). Rewritten whole (a new file renamed over the old) after
  // every change; read when the registry is made. A rule comes back when its
  // node resumes with the same id and name; one whose node registers afresh
  // instead (its id given to a new node) is dropped.
  std::string rules_file;
};

struct NodeInfo {
  NodeId id = 0;
  std::string name;
  std::uint32_t pid = 0;
  std::uint16_t queues = 1;
  std::vector<ctl::Channel> channels;
  // On the node port (its channel's MAC is its NIC's; memif id 0), not memif.
  bool ethernet = false;
  // (proto, port) -> the queues listening on it: one for a plain listener;
  // a group may have several of the node's queues as members (one per stack).
  std::map<std::pair<std::uint8_t, std::uint16_t>, std::set<std::uint16_t>> listens;
  std::set<std::uint32_t> rules;
  std::size_t flows = 0;
  std::size_t leased = 0;  // ports held by LEASE
};

class NodeRegistry {
 public:
  // What the daemon does when a node comes and goes: make its channels
  // (memif server interfaces, attached to steer), and take them down.
  struct Hooks {
    std::function<Status(const NodeInfo&)> attach;
    std::function<void(NodeId)> detach;
    // Optional, for STATS and NODES: the daemon's other counter sets (steer,
    // the drivers, the control socket), and the frames steered to a node.
    std::function<std::vector<const CounterSet*>()> counter_sets;
    std::function<std::uint64_t(NodeId)> node_rx_frames;
  };
  // A node listens on a port now (alone or in its group), or no longer
  // (UNLISTEN; a node that goes gets detach only). Central mode's bridge
  // listens on filterd's own TCP for these.
  struct ListenHooks {
    std::function<void(NodeId, std::uint8_t proto, std::uint16_t port)> listened;
    std::function<void(NodeId, std::uint8_t proto, std::uint16_t port)> unlistened;
  };
  void set_listen_hooks(ListenHooks hooks) { listen_hooks_ = std::move(hooks); }

  // Throws std::runtime_error if the rules file exists but cannot be read or
  // has a line that is not a rule (file:line and why).
  NodeRegistry(RegistryConfig config, FilterEngine& filter, Hooks hooks);

  // One request on a control connection. `node` is the connection's node
  // (0 until its HELLO, which sets it); `peer_pid` what SO_PEERCRED said (0:
  // unknown, e.g. over TCP). Always returns the reply to send.
  ctl::Message handle(const ctl::Message& request, NodeId& node, std::uint32_t peer_pid);
  // The node's connection closed (or it said BYE): its ports, flows, rules
  // and channels go.
  void node_gone(NodeId node);

  // filterd is stopping: the nodes about to go will resume with the next
  // filterd, so their rules stay in the rules file.
  void stopping() noexcept { stopping_ = true; }

  const NodeInfo* node(NodeId id) const;
  std::size_t node_count() const noexcept { return nodes_.size(); }
  std::size_t ports_in_use() const noexcept { return ports_.size(); }
  const CounterSet& counters() const noexcept { return counters_; }

 private:
  struct PortUse {
    NodeId node = 0;       // the owner (a listener or a connection)
    bool group = false;    // a listen group: several nodes
    std::size_t users = 0; // group members (node and queue), or 1
    bool listen = false;
    bool lease = false;       // leased to `node`'s queue `queue` (LEASE)
    std::uint16_t queue = 0;
  };
  using PortKey = std::pair<std::uint8_t, std::uint16_t>;

  ctl::Message hello(std::uint32_t id, const ctl::Hello& h, NodeId& node, std::uint32_t peer_pid);
  ctl::Message listen(std::uint32_t id, NodeInfo& n, const ctl::Listen& l);
  ctl::Message unlisten(std::uint32_t id, NodeInfo& n, const ctl::Unlisten& u);
  ctl::Message connect(std::uint32_t id, NodeInfo& n, const ctl::Connect& c);
  ctl::Message release(std::uint32_t id, NodeInfo& n, const ctl::Release& r);
  ctl::Message lease(std::uint32_t id, NodeInfo& n, const ctl::Lease& l);
  // Whether (proto, port) is leased to node n.
  bool leased_to(const NodeInfo& n, std::uint8_t proto, std::uint16_t port) const;
  ctl::Message resync(std::uint32_t id, NodeInfo& n, const ctl::Resync& r);
  ctl::Message rule_add(std::uint32_t id, NodeInfo& n, const ctl::RuleAdd& r);
  ctl::Message rule_del(std::uint32_t id, NodeInfo& n, const ctl::RuleDel& r);
  ctl::Message stats(std::uint32_t id) const;
  ctl::Message admin_rule_add(std::uint32_t id, const ctl::RuleAdd& r);
  ctl::Message admin_rule_del(std::uint32_t id, const ctl::RuleDel& r);
  ctl::Message add_rule_for(std::uint32_t id, NodeInfo& n, const ctl::RuleAdd& r);
  ctl::Message list_nodes(std::uint32_t id, const ctl::Nodes& r);
  ctl::Message list_ports(std::uint32_t id, const ctl::Ports& r);
  ctl::Message list_flows(std::uint32_t id, const ctl::Flows& r);
  ctl::Message list_rules(std::uint32_t id, const ctl::Rules& r);
  std::optional<std::uint16_t> free_port(std::uint8_t proto);
  Status take_listen(NodeInfo& n, std::uint8_t proto, std::uint16_t port, bool group, std::uint16_t queue);
  Status take_flow(NodeInfo& n, std::uint8_t proto, std::uint16_t lport, const IpAddr& remote, std::uint16_t rport,
                   std::uint16_t queue);
  Status take_accepted_flow(NodeInfo& n, std::uint8_t proto, std::uint16_t lport, const IpAddr& remote,
                            std::uint16_t rport, std::uint16_t queue);
  // A registered node has this MAC already, or this memif id (memif
  // channels only: every Ethernet channel has id 0).
  bool channel_taken(const ctl::Channel& ch, bool ethernet) const;

  // The rules file (RegistryConfig::rules_file).
  struct SavedRule {
    NodeId node = 0;
    std::uint16_t queue = 0;
    std::int16_t priority = 0;
    std::string name;        // the node's, checked when it resumes
    std::string expression;
  };
  void load_rules();
  void save_rules();
  // A node registered with `id`: its saved rules come back if it resumed
  // under the same name, else they are dropped.
  void restore_rules(NodeInfo& n, bool resumed);
  std::vector<SavedRule> saved_;  // read from the file, node not back yet
  bool stopping_ = false;

  RegistryConfig config_;
  FilterEngine& filter_;
  Hooks hooks_;
  ListenHooks listen_hooks_;
  std::map<NodeId, NodeInfo> nodes_;
  std::map<PortKey, PortUse> ports_;
  // A node's flows (for RELEASE checks and cleanup): (proto, lport, remote, rport) -> node.
  // (proto, local port, remote address's 16 bytes, remote port)
  std::map<std::tuple<std::uint8_t, std::uint16_t, IpAddr::Bytes, std::uint16_t>, NodeId> flows_;
  std::uint16_t next_port_;
  NodeId next_id_ = 1;
  CounterSet counters_{"registry"};
  Counter& hellos_;
  Counter& requests_;
  Counter& refused_;
  Counter& nodes_gone_;
  Counter& resumes_;
  Counter& resumes_refused_;
  Counter& resynced_;
  Counter& refused_entries_;
  Counter& leased_;
  Counter& rules_restored_;
  Counter& rules_dropped_;
  Counter& rules_file_errors_;
};

}  // namespace xk::filterd

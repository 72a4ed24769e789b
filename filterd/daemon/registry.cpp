// filterd's control plane (xk/filterd/registry.hpp).

#include "xk/filterd/registry.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>

namespace xk::filterd {

namespace {
using ctl::ErrorCode;
using ctl::Message;

Message reply(std::uint32_t id, ctl::Body body) { return Message{id, std::move(body)}; }
Message error(std::uint32_t id, ErrorCode code, std::string text) { return ctl::make_error(id, code, text); }

Proto proto_of(ctl::Proto p) noexcept { return p == ctl::Proto::udp ? Proto::udp : Proto::tcp; }
std::uint8_t num(ctl::Proto p) noexcept { return static_cast<std::uint8_t>(p); }

// Cursors of the admin lists: the last entry's key, big-endian, so that the
// page after it starts at the next key even if entries came and went.
struct CursorWriter {
  ctl::Cursor bytes;
  CursorWriter& u8(std::uint8_t v) {
    bytes.push_back(std::byte{v});
    return *this;
  }
  CursorWriter& u16(std::uint16_t v) { return u8(static_cast<std::uint8_t>(v >> 8)).u8(static_cast<std::uint8_t>(v)); }
  CursorWriter& u32(std::uint32_t v) { return u16(static_cast<std::uint16_t>(v >> 16)).u16(static_cast<std::uint16_t>(v)); }
  CursorWriter& addr(const IpAddr& a) {
    for (std::uint8_t b : a.bytes()) u8(b);
    return *this;
  }
};

struct CursorReader {
  const ctl::Cursor& bytes;
  std::size_t at = 0;
  std::uint8_t u8() { return static_cast<std::uint8_t>(bytes[at++]); }
  std::uint16_t u16() {
    const std::uint16_t hi = u8();
    return static_cast<std::uint16_t>((hi << 8) | u8());
  }
  IpAddr::Bytes addr() {
    IpAddr::Bytes a;
    for (std::uint8_t& b : a) b = u8();
    return a;
  }
  std::uint32_t u32() {
    const std::uint32_t hi = u16();
    return (hi << 16) | u16();
  }
};

std::uint32_t page_limit(std::uint32_t asked, std::size_t cap) {
  return asked == 0 || asked > cap ? static_cast<std::uint32_t>(cap) : asked;
}

Message bad_cursor(std::uint32_t id, std::size_t want) {
  return error(id, ErrorCode::bad_message, "cursor: " + std::to_string(want) + " bytes expected (send back the reply's)");
}

// The order flows are listed in: by node, then the flow's own key.
// (node, proto, local port, remote address's 16 bytes, remote port)
using FlowOrder = std::tuple<NodeId, std::uint8_t, std::uint16_t, IpAddr::Bytes, std::uint16_t>;
constexpr std::size_t kFlowCursor = 2 + 1 + 2 + 16 + 2;
}  // namespace

NodeRegistry::NodeRegistry(RegistryConfig config, FilterEngine& filter, Hooks hooks)
    : config_(std::move(config)),
      filter_(filter),
      hooks_(std::move(hooks)),
      next_port_(config_.ephemeral_min),
      hellos_(counters_.add("hellos", "nodes registered")),
      requests_(counters_.add("requests")),
      refused_(counters_.add("refused", "requests answered with ERROR")),
      nodes_gone_(counters_.add("nodes_gone", "nodes whose connection closed or said BYE")),
      resumes_(counters_.add("resumes", "nodes registered again with their earlier id and channels")),
      resumes_refused_(counters_.add("resumes_refused", "resuming HELLOs whose id or channel was taken")),
      resynced_(counters_.add("resynced", "RESYNC entries installed")),
      refused_entries_(counters_.add("resync_refused", "RESYNC entries that were other nodes'")),
      leased_(counters_.add("leased", "ports given out by LEASE")),
      rules_restored_(counters_.add("rules_restored", "rules from the rules file installed again")),
      rules_dropped_(counters_.add("rules_dropped", "rules from the rules file whose node did not resume")),
      rules_file_errors_(counters_.add("rules_file_errors", "failures to write the rules file")) {
  load_rules();
}

// ---- the rules file ----------------------------------------------------------
// One rule a line, tab-separated: node id, queue, priority, the node's name,
// the pcap expression. Names and expressions with a tab or a line break are
// refused when the rule is added (rule_add), so every rule fits a line.

namespace {
bool fits_a_line(std::string_view s) { return s.find_first_of("\t\n\r") == std::string_view::npos; }
// A node's name is the node's to choose: one that does not fit is saved
// changed (and so does not match when the node resumes: its rules drop).
std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\t' || c == '\n' || c == '\r') c = '?';
  }
  return s;
}
}  // namespace

void NodeRegistry::load_rules() {
  if (config_.rules_file.empty()) return;
  std::error_code ec;
  if (!std::filesystem::exists(config_.rules_file, ec)) return;  // nothing saved yet
  std::ifstream in(config_.rules_file);
  if (!in) throw std::runtime_error("rules file " + config_.rules_file + ": " + std::strerror(errno));
  std::string line;
  for (std::size_t no = 1; std::getline(in, line); ++no) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    for (std::size_t at = 0;;) {
      const std::size_t tab = f.size() < 4 ? line.find('\t', at) : std::string::npos;
      f.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
      if (tab == std::string::npos) break;
      at = tab + 1;
    }
    auto bad = [&](const std::string& why) {
      return std::runtime_error("rules file " + config_.rules_file + ":" + std::to_string(no) + ": " + why);
    };
    if (f.size() != 5) throw bad("expected 5 tab-separated fields: node, queue, priority, name, expression");
    auto number = [&](const std::string& t, long lo, long hi, const char* what) {
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(t.c_str(), &end, 10);
      if (t.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) throw bad(std::string("bad ") + what + " '" + t + "'");
      return v;
    };
    SavedRule r;
    r.node = static_cast<NodeId>(number(f[0], 1, 0xFFFF, "node id"));
    r.queue = static_cast<std::uint16_t>(number(f[1], 0, 63, "queue"));
    r.priority = static_cast<std::int16_t>(number(f[2], INT16_MIN, INT16_MAX, "priority"));
    r.name = f[3];
    r.expression = f[4];
    if (r.expression.empty()) throw bad("empty expression");
    saved_.push_back(std::move(r));
  }
}

void NodeRegistry::save_rules() {
  if (config_.rules_file.empty()) return;
  const std::string tmp = config_.rules_file + ".new";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# filterd user rules: node\tqueue\tpriority\tname\texpression (rewritten by filterd)\n";
    for (const RuleInfo& ri : filter_.rules()) {
      auto it = nodes_.find(ri.target.node);
      if (it == nodes_.end()) continue;
      out << ri.target.node << '\t' << ri.target.queue << '\t' << ri.priority << '\t' << one_line(it->second.name) << '\t'
          << ri.expression << '\n';
    }
    // Rules whose node has not come back yet stay saved for it.
    for (const SavedRule& r : saved_) {
      out << r.node << '\t' << r.queue << '\t' << r.priority << '\t' << r.name << '\t' << r.expression << '\n';
    }
    out.flush();
    if (!out) {
      ++rules_file_errors_;
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), config_.rules_file.c_str()) != 0) {
    ++rules_file_errors_;
    std::remove(tmp.c_str());
  }
}

void NodeRegistry::restore_rules(NodeInfo& n, bool resumed) {
  bool changed = false;
  for (auto it = saved_.begin(); it != saved_.end();) {
    if (it->node != n.id) {
      ++it;
      continue;
    }
    changed = true;
    if (resumed && it->name == n.name && it->queue < n.queues) {
      RuleResult rr = filter_.add_rule(it->expression, Target{n.id, it->queue}, it->priority);
      if (rr) {
        n.rules.insert(rr.id);
        ++rules_restored_;
      } else {
        ++rules_dropped_;  // libpcap no longer takes it (cannot happen unless the file was edited)
      }
    } else {
      ++rules_dropped_;  // the id went to a new node, or another program resumed it
    }
    it = saved_.erase(it);
  }
  if (changed) save_rules();
}

const NodeInfo* NodeRegistry::node(NodeId id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

Message NodeRegistry::handle(const Message& request, NodeId& node, std::uint32_t peer_pid) {
  ++requests_;
  const std::uint32_t id = request.request_id;
  Message out = [&]() -> Message {
    if (const auto* h = std::get_if<ctl::Hello>(&request.body)) return hello(id, *h, node, peer_pid);
    if (std::holds_alternative<ctl::Ping>(request.body)) return reply(id, ctl::Ok{});
    // Administration: any connection (the transport checked who it is).
    if (const auto* r = std::get_if<ctl::Nodes>(&request.body)) return list_nodes(id, *r);
    if (const auto* r = std::get_if<ctl::Ports>(&request.body)) return list_ports(id, *r);
    if (const auto* r = std::get_if<ctl::Flows>(&request.body)) return list_flows(id, *r);
    if (const auto* r = std::get_if<ctl::Rules>(&request.body)) return list_rules(id, *r);
    if (std::holds_alternative<ctl::Stats>(request.body)) return stats(id);
    if (node == 0) {
      // An admin connection: rules for any node.
      if (const auto* r = std::get_if<ctl::RuleAdd>(&request.body)) return admin_rule_add(id, *r);
      if (const auto* r = std::get_if<ctl::RuleDel>(&request.body)) return admin_rule_del(id, *r);
    }
    auto it = nodes_.find(node);
    if (node == 0 || it == nodes_.end()) return error(id, ErrorCode::not_registered, "HELLO first");
    NodeInfo& n = it->second;
    if (const auto* l = std::get_if<ctl::Listen>(&request.body)) return listen(id, n, *l);
    if (const auto* u = std::get_if<ctl::Unlisten>(&request.body)) return unlisten(id, n, *u);
    if (const auto* c = std::get_if<ctl::Connect>(&request.body)) return connect(id, n, *c);
    if (const auto* r = std::get_if<ctl::Release>(&request.body)) return release(id, n, *r);
    if (const auto* l = std::get_if<ctl::Lease>(&request.body)) return lease(id, n, *l);
    if (const auto* r = std::get_if<ctl::Resync>(&request.body)) return resync(id, n, *r);
    if (const auto* r = std::get_if<ctl::RuleAdd>(&request.body)) return rule_add(id, n, *r);
    if (const auto* r = std::get_if<ctl::RuleDel>(&request.body)) return rule_del(id, n, *r);
    if (std::holds_alternative<ctl::Bye>(request.body)) {
      node_gone(node);
      node = 0;
      return reply(id, ctl::Ok{});
    }
    return error(id, ErrorCode::bad_message, std::string("not a request: ") + ctl::to_string(ctl::type_of(request.body)));
  }();
  if (std::holds_alternative<ctl::Error>(out.body)) ++refused_;
  return out;
}

Message NodeRegistry::hello(std::uint32_t id, const ctl::Hello& h, NodeId& node, std::uint32_t peer_pid) {
  if (node != 0) return error(id, ErrorCode::bad_message, "this connection has registered already");
  if (h.version_min > ctl::kProtocolVersion || h.version_max < ctl::kProtocolVersionMin) {
    return error(id, ErrorCode::unsupported_version,
                 "filterd speaks versions " + std::to_string(ctl::kProtocolVersionMin) + ".." +
                     std::to_string(ctl::kProtocolVersion));
  }
  // The kernel's word for who is at the other end beats the message's.
  if (peer_pid != 0 && h.pid != peer_pid) {
    return error(id, ErrorCode::permission_denied,
                 "pid " + std::to_string(h.pid) + " is not the peer's (" + std::to_string(peer_pid) + ")");
  }
  if (nodes_.size() >= config_.max_nodes) return error(id, ErrorCode::too_many, "node limit reached");
  const bool ethernet = h.ethernet.has_value();
  if (ethernet) {
    // A node on another host: its channel is its own NIC on our node port.
    if (!config_.node_port_mac) return error(id, ErrorCode::bad_message, "filterd has no node port (--node-port)");
    if (h.queues != 1) return error(id, ErrorCode::bad_message, "a node on the node port runs one queue");
    const MacAddr& m = *h.ethernet;
    if ((m.bytes[0] & 0x01) != 0) {
      return error(id, ErrorCode::bad_message, "ethernet: " + to_string(m) + " is not a unicast MAC");
    }
    if (m == *config_.node_port_mac) return error(id, ErrorCode::port_in_use, "ethernet: that is filterd's own MAC");
    if (h.resume && h.resume->channels.front().node_mac != m) {
      return error(id, ErrorCode::bad_message, "resume: the channel's MAC is not the node's ethernet MAC");
    }
  }
  NodeInfo n;
  n.name = h.name;
  n.pid = h.pid;
  n.queues = h.queues;
  n.ethernet = ethernet;
  if (h.resume) {
    // A node that outlived the filterd it registered with: its graph runs
    // on those channels, so it gets them back -- unless someone has them.
    const NodeId want = h.resume->node_id;
    if (nodes_.count(want) != 0) {
      ++resumes_refused_;
      return error(id, ErrorCode::port_in_use, "resume: node id " + std::to_string(want) + " is another node's");
    }
    for (std::size_t i = 0; i < h.resume->channels.size(); ++i) {
      const ctl::Channel& ch = h.resume->channels[i];
      for (std::size_t k = 0; k < i; ++k) {
        if ((!ethernet && h.resume->channels[k].memif_id == ch.memif_id) || h.resume->channels[k].node_mac == ch.node_mac) {
          return error(id, ErrorCode::bad_message, "resume: channels " + std::to_string(k) + " and " +
                                                       std::to_string(i) + " share a memif id or a MAC");
        }
      }
      if (channel_taken(ch, ethernet)) {
        ++resumes_refused_;
        return error(id, ErrorCode::port_in_use, "resume: memif id " + std::to_string(ch.memif_id) + " or MAC " +
                                                     to_string(ch.node_mac) + " is another node's");
      }
    }
    n.id = want;
    n.channels = h.resume->channels;
    // Fresh ids go on after the resumed ones.
    if (want >= next_id_) next_id_ = static_cast<NodeId>(want + 1);
  } else {
    // Ids are not reused at once: a late frame or request meant for a node
    // that went must not reach the next one. Nor may a fresh id's channels
    // be a resumed node's.
    NodeId nid = next_id_;
    for (std::size_t tries = 0;; ++tries, ++nid) {
      if (tries > 0xFFFF) return error(id, ErrorCode::too_many, "no node id left");
      if (nid == 0 || nodes_.count(nid) != 0) continue;
      n.channels.clear();
      for (std::uint16_t q = 0; q < h.queues; ++q) {
        ctl::Channel ch;
        ch.memif_id = std::uint32_t{nid} * 64 + q;  // at most 64 queues a node (the codec's cap)
        ch.node_mac = MacAddr{{0x02, 0x78, 0x6e, static_cast<std::uint8_t>(nid >> 8), static_cast<std::uint8_t>(nid),
                               static_cast<std::uint8_t>(q)}};
        n.channels.push_back(ch);
      }
      if (ethernet) {
        // The node's NIC: no memif id, and its own MAC unless it lets us pick.
        n.channels.front().memif_id = 0;
        if (*h.ethernet != MacAddr{}) {
          n.channels.front().node_mac = *h.ethernet;
          if (channel_taken(n.channels.front(), true)) {
            return error(id, ErrorCode::port_in_use, "ethernet: MAC " + to_string(*h.ethernet) + " is another node's");
          }
          break;
        }
      }
      if (std::none_of(n.channels.begin(), n.channels.end(),
                       [&](const ctl::Channel& c) { return channel_taken(c, ethernet); }))
        break;
    }
    n.id = nid;
    next_id_ = static_cast<NodeId>(nid + 1);
  }
  const NodeId nid = n.id;
  if (hooks_.attach) {
    if (Status st = hooks_.attach(n); !st) {
      return error(id, ErrorCode::internal, std::string("cannot make the node's channel: ") + to_string(st.error()));
    }
  }
  ctl::HelloReply r;
  r.node_id = nid;
  r.memif_socket = config_.memif_socket;
  r.channels = n.channels;
  // A node on the node port sends to filterd's MAC there (the port's own).
  r.filterd_mac = ethernet ? *config_.node_port_mac : config_.filterd_mac;
  r.mtu = config_.mtu;
  r.address = config_.shared.addr;
  r.prefix_len = config_.shared.prefix_len;
  r.gateway = config_.gateway;
  r.secret = config_.secret;
  r.heartbeat_ms = config_.heartbeat_ms;
  r.version = std::min(h.version_max, ctl::kProtocolVersion);
  r.central = config_.central;
  if (config_.shared6) {
    r.address6 = config_.shared6->addr;
    r.prefix6_len = static_cast<std::uint8_t>(config_.shared6->prefix_len);
    r.gateway6 = config_.gateway6;
  }
  auto placed = nodes_.emplace(nid, std::move(n)).first;
  node = nid;
  ++hellos_;
  if (h.resume) ++resumes_;
  if (!saved_.empty()) restore_rules(placed->second, h.resume.has_value());
  return reply(id, r);
}

bool NodeRegistry::channel_taken(const ctl::Channel& ch, bool ethernet) const {
  for (const auto& [nid, info] : nodes_) {
    for (const ctl::Channel& c : info.channels) {
      if ((!ethernet && !info.ethernet && c.memif_id == ch.memif_id) || c.node_mac == ch.node_mac) return true;
    }
  }
  return false;
}

std::optional<std::uint16_t> NodeRegistry::free_port(std::uint8_t proto) {
  const std::uint32_t span = std::uint32_t{config_.ephemeral_max} - config_.ephemeral_min + 1;
  for (std::uint32_t i = 0; i < span; ++i) {
    std::uint16_t p = next_port_;
    next_port_ = p >= config_.ephemeral_max ? config_.ephemeral_min : static_cast<std::uint16_t>(p + 1);
    if (ports_.count({proto, p}) == 0) return p;
  }
  return std::nullopt;
}

Status NodeRegistry::take_listen(NodeInfo& n, std::uint8_t proto, std::uint16_t port, bool group,
                                 std::uint16_t queue) {
  auto mine = n.listens.find({proto, port});
  if (mine != n.listens.end() && mine->second.count(queue) != 0) return Errc::exists;
  auto it = ports_.find({proto, port});
  const Target t{n.id, queue};
  if (it != ports_.end()) {
    // A group takes more members -- other nodes, or more queues of this
    // one (a node that runs a stack per core); anything else is someone's.
    if (!group || !it->second.group || !it->second.listen) return Errc::exists;
    if (Status st = filter_.join_group(static_cast<Proto>(proto), port, t); !st) return st;
    ++it->second.users;
  } else {
    Status st = group ? filter_.join_group(static_cast<Proto>(proto), port, t)
                      : filter_.listen(static_cast<Proto>(proto), port, t);
    if (!st) return st;
    ports_[{proto, port}] = PortUse{n.id, group, 1, true};
  }
  const bool first = mine == n.listens.end();
  n.listens[{proto, port}].insert(queue);
  if (first && listen_hooks_.listened) listen_hooks_.listened(n.id, proto, port);
  return {};
}

Message NodeRegistry::listen(std::uint32_t id, NodeInfo& n, const ctl::Listen& l) {
  if (l.queue >= n.queues) return error(id, ErrorCode::bad_message, "no such queue");
  std::uint16_t port = l.port;
  if (port == 0) {
    std::optional<std::uint16_t> p = free_port(num(l.proto));
    if (!p) return error(id, ErrorCode::no_ports, "no free port");
    port = *p;
  }
  auto mine = n.listens.find({num(l.proto), port});
  if (mine != n.listens.end() && mine->second.count(l.queue) != 0) {
    return error(id, ErrorCode::port_in_use, "this queue of the node listens on that port already");
  }
  if (Status st = take_listen(n, num(l.proto), port, l.group, l.queue); !st) {
    return error(id, ErrorCode::port_in_use, std::string(ctl::to_string(l.proto)) + " port " + std::to_string(port) +
                                                 (mine != n.listens.end() ? " is held by another queue of this node alone"
                                                                          : " belongs to another node"));
  }
  return reply(id, ctl::ListenReply{port});
}

Message NodeRegistry::unlisten(std::uint32_t id, NodeInfo& n, const ctl::Unlisten& u) {
  const std::uint8_t proto = num(u.proto);
  auto mine = n.listens.find({proto, u.port});
  if (mine == n.listens.end()) return error(id, ErrorCode::not_found, "not listening on that port");
  // One queue's listener (a node's stack closed it), or every queue's.
  std::vector<std::uint16_t> queues;
  if (u.queue) {
    if (mine->second.count(*u.queue) == 0) return error(id, ErrorCode::not_found, "that queue does not listen on that port");
    queues.push_back(*u.queue);
  } else {
    queues.assign(mine->second.begin(), mine->second.end());
  }
  for (std::uint16_t q : queues) {
    auto it = ports_.find({proto, u.port});
    if (it != ports_.end()) {
      if (it->second.group) {
        (void)filter_.leave_group(proto_of(u.proto), u.port, Target{n.id, q});
      } else {
        (void)filter_.unlisten(proto_of(u.proto), u.port);
      }
      if (--it->second.users == 0) ports_.erase(it);
    }
    mine->second.erase(q);
  }
  if (mine->second.empty()) {
    n.listens.erase(mine);
    if (listen_hooks_.unlistened) listen_hooks_.unlistened(n.id, proto, u.port);
  }
  return reply(id, ctl::Ok{});
}

bool NodeRegistry::leased_to(const NodeInfo& n, std::uint8_t proto, std::uint16_t port) const {
  auto it = ports_.find({proto, port});
  return it != ports_.end() && it->second.lease && it->second.node == n.id;
}

Status NodeRegistry::take_flow(NodeInfo& n, std::uint8_t proto, std::uint16_t lport, const IpAddr& remote,
                               std::uint16_t rport, std::uint16_t queue) {
  // A connection from a port of the node's lease (RESYNC, or CONNECT naming
  // it): the lease steers it already, but through the listen table, which
  // steer holds back for the resync grace after a restart (the frame might
  // be a connection some node has yet to declare). An exact flow passes at
  // once. It is never released (the node says nothing when a leased port's
  // connection ends) and is harmless when stale: it sends the node's own
  // port to the node. It goes with the node.
  if (leased_to(n, proto, lport)) {
    const FlowKey key{static_cast<Proto>(proto), remote, rport, lport};
    if (filter_.find_flow(key)) return {};
    return filter_.add_flow(key, Target{n.id, queue});
  }
  // A local port is one connection's (and no listener's), host-wide.
  if (ports_.count({proto, lport}) != 0) return Errc::exists;
  if (Status st = filter_.add_flow(FlowKey{static_cast<Proto>(proto), remote, rport, lport}, Target{n.id, queue}); !st) {
    return st;
  }
  ports_[{proto, lport}] = PortUse{n.id, false, 1, false};
  flows_[{proto, lport, remote.bytes(), rport}] = n.id;
  ++n.flows;
  return {};
}

Message NodeRegistry::connect(std::uint32_t id, NodeInfo& n, const ctl::Connect& c) {
  if (c.queue >= n.queues) return error(id, ErrorCode::bad_message, "no such queue");
  std::uint16_t lport = c.local_port;
  if (lport == 0) {
    std::optional<std::uint16_t> p = free_port(num(c.proto));
    if (!p) return error(id, ErrorCode::no_ports, "no free ephemeral port");
    lport = *p;
  }
  if (Status st = take_flow(n, num(c.proto), lport, c.remote_addr, c.remote_port, c.queue); !st) {
    return error(id, ErrorCode::port_in_use, "local port " + std::to_string(lport) + " is taken");
  }
  return reply(id, ctl::ConnectReply{lport});
}

Message NodeRegistry::lease(std::uint32_t id, NodeInfo& n, const ctl::Lease& l) {
  if (config_.central) {
    return error(id, ErrorCode::bad_message, "central mode: filterd's own TCP opens the connections, nothing to lease");
  }
  if (l.queue >= n.queues) return error(id, ErrorCode::bad_message, "no such queue");
  const std::uint8_t proto = num(l.proto);
  ctl::LeaseReply out;
  // A leased port is steered by the listen table (any remote), and the
  // egress check lets the node send from it; no exact flow per connection.
  auto take = [&](std::uint16_t port) {
    if (ports_.count({proto, port}) != 0) return;
    if (!filter_.lease(static_cast<Proto>(proto), port, Target{n.id, l.queue})) return;
    PortUse use;
    use.node = n.id;
    use.users = 1;
    use.lease = true;
    use.queue = l.queue;
    ports_[{proto, port}] = use;
    ++n.leased;
    ++leased_;
    out.ports.push_back(port);
  };
  if (l.count != 0) {
    if (n.leased + l.count > config_.max_leased_ports) {
      return error(id, ErrorCode::too_many,
                   "the node holds " + std::to_string(n.leased) + " leased ports; at most " +
                       std::to_string(config_.max_leased_ports));
    }
    for (std::uint16_t i = 0; i < l.count; ++i) {
      std::optional<std::uint16_t> p = free_port(proto);
      if (!p) break;
      take(*p);
    }
    if (out.ports.empty()) return error(id, ErrorCode::no_ports, "no free ephemeral port");
    return reply(id, std::move(out));
  }
  // Back after a restart of filterd: exactly these, those still free.
  for (std::uint16_t port : l.ports) {
    auto it = ports_.find({proto, port});
    if (it != ports_.end()) {
      if (it->second.lease && it->second.node == n.id && it->second.queue == l.queue) out.ports.push_back(port);
      continue;
    }
    if (n.leased >= config_.max_leased_ports) break;
    take(port);
  }
  return reply(id, std::move(out));
}

Message NodeRegistry::release(std::uint32_t id, NodeInfo& n, const ctl::Release& r) {
  const std::uint8_t proto = num(r.proto);
  auto it = flows_.find({proto, r.local_port, r.remote_addr.bytes(), r.remote_port});
  if (it == flows_.end()) {
    // An accepted connection: steer made its flow at the SYN-ACK, on a port
    // the node listens on (or a group's), and the node says when it ended.
    const FlowKey key{proto_of(r.proto), r.remote_addr, r.remote_port, r.local_port};
    std::optional<Target> t = filter_.find_flow(key);
    if (!t) return error(id, ErrorCode::not_found, "no such flow");
    if (t->node != n.id) return error(id, ErrorCode::permission_denied, "another node's flow");
    (void)filter_.remove_flow(key);
    return reply(id, ctl::Ok{});
  }
  if (it->second != n.id) return error(id, ErrorCode::permission_denied, "another node's flow");
  flows_.erase(it);
  (void)filter_.remove_flow(FlowKey{proto_of(r.proto), r.remote_addr, r.remote_port, r.local_port});
  ports_.erase({proto, r.local_port});
  --n.flows;
  return reply(id, ctl::Ok{});
}

Status NodeRegistry::take_accepted_flow(NodeInfo& n, std::uint8_t proto, std::uint16_t lport, const IpAddr& remote,
                                        std::uint16_t rport, std::uint16_t queue) {
  // An accepted connection's local port is its listener's, and stays the
  // listener's (or the group's): only the exact flow is the node's, as steer
  // makes it at the SYN-ACK. A port that is now one other node's alone --
  // a plain listener, or a connection -- is not this node's to use.
  auto it = ports_.find({proto, lport});
  if (it != ports_.end() && !it->second.group && it->second.node != n.id) return Errc::exists;
  const FlowKey key{static_cast<Proto>(proto), remote, rport, lport};
  if (std::optional<Target> t = filter_.find_flow(key)) return t->node == n.id ? Status() : Status(Errc::exists);
  return filter_.add_flow(key, Target{n.id, queue});
}

Message NodeRegistry::resync(std::uint32_t id, NodeInfo& n, const ctl::Resync& r) {
  // After a restart of filterd the node says again what it had, entry by
  // entry; what conflicts with what others re-declared (or took) first is
  // refused, the rest installed. Listeners go first: a node's accepted
  // connections sit on its listeners' ports.
  std::size_t refused = 0;
  std::string first;
  auto refuse = [&](const char* what, std::size_t i, const std::string& why) {
    if (refused++ == 0) first = std::string(what) + " " + std::to_string(i) + ": " + why;
  };
  for (std::size_t i = 0; i < r.listeners.size(); ++i) {
    const ctl::ListenerEntry& l = r.listeners[i];
    if (auto mine = n.listens.find({num(l.proto), l.port}); mine != n.listens.end() && mine->second.count(l.queue) != 0) {
      continue;
    }
    if (l.queue >= n.queues) {
      refuse("listener", i, "no such queue");
    } else if (!take_listen(n, num(l.proto), l.port, l.group, l.queue)) {
      refuse("listener", i, std::string(ctl::to_string(l.proto)) + " port " + std::to_string(l.port) +
                                " belongs to another node");
    }
  }
  for (std::size_t i = 0; i < r.flows.size(); ++i) {
    const ctl::FlowEntry& f = r.flows[i];
    const std::string what = std::string(ctl::to_string(f.proto)) + " " + std::to_string(f.local_port) + " <-> " +
                             to_string(f.remote_addr) + ":" + std::to_string(f.remote_port);
    if (f.queue >= n.queues) {
      refuse("flow", i, "no such queue");
      continue;
    }
    if (f.accepted) {
      if (!take_accepted_flow(n, num(f.proto), f.local_port, f.remote_addr, f.remote_port, f.queue)) {
        refuse("flow", i, what + " belongs to another node");
      }
      continue;
    }
    auto owner = flows_.find({num(f.proto), f.local_port, f.remote_addr.bytes(), f.remote_port});
    if (owner != flows_.end()) {
      if (owner->second != n.id) refuse("flow", i, what + " belongs to another node");
      continue;
    }
    if (!take_flow(n, num(f.proto), f.local_port, f.remote_addr, f.remote_port, f.queue)) {
      refuse("flow", i, what + ": the port belongs to another node");
    }
  }
  resynced_.inc(r.listeners.size() + r.flows.size() - refused);
  if (refused != 0) {
    refused_entries_.inc(refused);
    return error(id, ErrorCode::port_in_use,
                 first + (refused > 1 ? " (and " + std::to_string(refused - 1) + " more refused)" : ""));
  }
  return reply(id, ctl::Ok{});
}

Message NodeRegistry::rule_add(std::uint32_t id, NodeInfo& n, const ctl::RuleAdd& r) {
  if (r.node != 0 && r.node != n.id) {
    return error(id, ErrorCode::permission_denied, "a node adds rules for itself only");
  }
  return add_rule_for(id, n, r);
}

Message NodeRegistry::admin_rule_add(std::uint32_t id, const ctl::RuleAdd& r) {
  if (r.node == 0) return error(id, ErrorCode::bad_message, "RULE_ADD from an admin connection must name the node");
  auto it = nodes_.find(r.node);
  if (it == nodes_.end()) return error(id, ErrorCode::not_found, "no node " + std::to_string(r.node));
  return add_rule_for(id, it->second, r);
}

Message NodeRegistry::admin_rule_del(std::uint32_t id, const ctl::RuleDel& r) {
  for (auto& [nid, n] : nodes_) {
    if (n.rules.count(r.rule_id) != 0) return rule_del(id, n, r);
  }
  return error(id, ErrorCode::not_found, "no rule " + std::to_string(r.rule_id));
}

// The rule belongs to the node it steers to: it goes when the node goes.
Message NodeRegistry::add_rule_for(std::uint32_t id, NodeInfo& n, const ctl::RuleAdd& r) {
  if (r.queue >= n.queues) return error(id, ErrorCode::bad_message, "no such queue");
  if (!config_.rules_file.empty() && !fits_a_line(r.expression)) {
    return error(id, ErrorCode::bad_rule, "a rule kept in the rules file fits one line: no tab or line break");
  }
  RuleResult rr = filter_.add_rule(r.expression, Target{n.id, r.queue}, r.priority);
  if (!rr) return error(id, ErrorCode::bad_rule, rr.error);
  n.rules.insert(rr.id);
  save_rules();
  return reply(id, ctl::RuleAddReply{rr.id});
}

Message NodeRegistry::rule_del(std::uint32_t id, NodeInfo& n, const ctl::RuleDel& r) {
  if (n.rules.erase(r.rule_id) == 0) return error(id, ErrorCode::not_found, "not a rule of this node");
  (void)filter_.remove_rule(r.rule_id);
  save_rules();
  return reply(id, ctl::Ok{});
}

Message NodeRegistry::stats(std::uint32_t id) const {
  ctl::StatsReply s;
  auto add = [&](const CounterSet& set) {
    for (const CounterSet::Entry& e : set.entries()) {
      std::string name = set.owner() + "." + e.name;
      if (name.size() > ctl::kMaxCounterName) name.resize(ctl::kMaxCounterName);
      s.counters.push_back(ctl::Counter{name, e.counter.value()});
    }
  };
  add(counters_);
  add(filter_.counters());
  if (hooks_.counter_sets) {
    for (const CounterSet* set : hooks_.counter_sets()) add(*set);
  }
  s.counters.push_back(ctl::Counter{"registry.nodes", nodes_.size()});
  s.counters.push_back(ctl::Counter{"registry.ports", ports_.size()});
  if (s.counters.size() > ctl::kMaxCounters) s.counters.resize(ctl::kMaxCounters);
  return reply(id, s);
}

Message NodeRegistry::list_nodes(std::uint32_t id, const ctl::Nodes& r) {
  if (!r.cursor.empty() && r.cursor.size() != 2) return bad_cursor(id, 2);
  const NodeId after = r.cursor.empty() ? 0 : CursorReader{r.cursor}.u16();
  const std::uint32_t limit = page_limit(r.limit, ctl::kMaxNodeRecords);
  // The flows are counted in the filter's table, which also holds the
  // accepted connections steer learned: one pass for every node.
  std::unordered_map<NodeId, std::uint32_t> flows;
  filter_.for_each_flow([&](const FlowKey&, Target t) { ++flows[t.node]; });
  ctl::NodesReply out;
  for (auto it = nodes_.upper_bound(after); it != nodes_.end(); ++it) {
    if (out.nodes.size() == limit) {
      out.cursor = CursorWriter{}.u16(out.nodes.back().id).bytes;
      break;
    }
    const NodeInfo& n = it->second;
    ctl::NodeRecord rec;
    rec.id = n.id;
    rec.name = n.name;
    rec.pid = n.pid;
    rec.queues = n.queues;
    rec.memif_id = n.channels.empty() ? 0 : n.channels.front().memif_id;
    if (n.ethernet && !n.channels.empty()) {
      rec.ethernet = true;
      rec.mac = n.channels.front().node_mac;
    }
    // A listener per queue: a node whose K stacks joined a group has K.
    std::uint32_t listeners = 0;
    for (const auto& [port, queues] : n.listens) listeners += static_cast<std::uint32_t>(queues.size());
    rec.listeners = listeners;
    rec.flows = flows[n.id];
    rec.rules = static_cast<std::uint32_t>(n.rules.size());
    rec.rx_frames = hooks_.node_rx_frames ? hooks_.node_rx_frames(n.id) : 0;
    const NodeEgress e = filter_.egress_counts(n.id);
    rec.egress_allowed = e.allowed;
    rec.egress_denied = e.denied;
    out.nodes.push_back(std::move(rec));
  }
  return reply(id, std::move(out));
}

Message NodeRegistry::list_ports(std::uint32_t id, const ctl::Ports& r) {
  // Cursor: the port to go on at and the index of its next owner.
  if (!r.cursor.empty() && r.cursor.size() != 7) return bad_cursor(id, 7);
  PortKey from{0, 0};
  std::uint32_t skip = 0;
  if (!r.cursor.empty()) {
    CursorReader c{r.cursor};
    from.first = c.u8();
    from.second = c.u16();
    skip = c.u32();
  }
  const std::uint32_t limit = page_limit(r.limit, ctl::kMaxPortRecords);
  ctl::PortsReply out;
  for (auto it = ports_.lower_bound(from); it != ports_.end(); ++it) {
    const auto [proto, port] = it->first;
    const PortUse& use = it->second;
    std::vector<ctl::PortRecord> owners;
    const ctl::Proto cp = static_cast<ctl::Proto>(proto);
    if (use.lease) {
      owners.push_back({cp, port, false, false, use.node, use.queue, true});
    } else if (use.listen) {
      if (std::optional<ListenerInfo> l = filter_.listener(static_cast<Proto>(proto), port)) {
        for (const Target& t : l->members) owners.push_back({cp, port, l->group, true, t.node, t.queue});
      }
    } else {
      // A connection's local port: its flow says the queue.
      auto f = flows_.lower_bound({proto, port, IpAddr::Bytes{}, 0});
      std::uint16_t queue = 0;
      if (f != flows_.end() && std::get<0>(f->first) == proto && std::get<1>(f->first) == port) {
        const auto& [fp, lport, remote, rport] = f->first;
        if (auto t = filter_.find_flow(FlowKey{static_cast<Proto>(fp), IpAddr::from_bytes(remote), rport, lport})) queue = t->queue;
      }
      owners.push_back({cp, port, false, false, use.node, queue});
    }
    const std::uint32_t first = it->first == from ? skip : 0;
    for (std::uint32_t i = first; i < owners.size(); ++i) {
      if (out.ports.size() == limit) {
        out.cursor = CursorWriter{}.u8(proto).u16(port).u32(i).bytes;
        return reply(id, std::move(out));
      }
      out.ports.push_back(owners[i]);
    }
  }
  return reply(id, std::move(out));
}

Message NodeRegistry::list_flows(std::uint32_t id, const ctl::Flows& r) {
  if (!r.cursor.empty() && r.cursor.size() != kFlowCursor) return bad_cursor(id, kFlowCursor);
  std::optional<FlowOrder> after;
  if (!r.cursor.empty()) {
    CursorReader c{r.cursor};
    const NodeId n = c.u16();
    const std::uint8_t p = c.u8();
    const std::uint16_t lport = c.u16();
    const IpAddr::Bytes remote = c.addr();
    after = FlowOrder{n, p, lport, remote, c.u16()};
  }
  if (r.node != 0 && nodes_.count(r.node) == 0) return error(id, ErrorCode::not_found, "no node " + std::to_string(r.node));
  const std::uint32_t limit = page_limit(r.limit, ctl::kMaxFlowRecords);
  // Up to a million flows in a hash table: keep the `limit` smallest after
  // the cursor in a max-heap, one pass, O(n log limit) and no sorted copy.
  std::priority_queue<std::pair<FlowOrder, std::uint16_t>> best;  // (key, queue)
  std::uint32_t total = 0;
  std::size_t beyond = 0;  // flows after the cursor
  filter_.for_each_flow([&](const FlowKey& k, Target t) {
    if (r.node != 0 && t.node != r.node) return;
    ++total;
    const FlowOrder o{t.node, static_cast<std::uint8_t>(k.proto), k.local_port, k.remote.bytes(), k.remote_port};
    if (after && !(*after < o)) return;
    ++beyond;
    if (best.size() < limit) {
      best.emplace(o, t.queue);
    } else if (o < best.top().first) {
      best.pop();
      best.emplace(o, t.queue);
    }
  });
  ctl::FlowsReply out;
  out.total = total;
  out.flows.resize(best.size());
  for (std::size_t i = best.size(); i-- > 0;) {
    const auto& [o, queue] = best.top();
    const auto& [node, proto, lport, remote, rport] = o;
    out.flows[i] =
        ctl::NodeFlow{node, ctl::FlowEntry{static_cast<ctl::Proto>(proto), lport, IpAddr::from_bytes(remote), rport, queue}};
    best.pop();
  }
  // An IPv6 flow counts twice against the page's cap; the rest is the next page's.
  std::size_t weight = 0;
  const auto fits = std::find_if(out.flows.begin(), out.flows.end(), [&](const ctl::NodeFlow& f) {
    weight += ctl::flow_weight(f.flow);
    return weight > ctl::kMaxFlowRecords;
  });
  out.flows.erase(fits, out.flows.end());
  if (beyond > out.flows.size() && !out.flows.empty()) {
    const ctl::NodeFlow& last = out.flows.back();
    out.cursor = CursorWriter{}
                     .u16(last.node)
                     .u8(static_cast<std::uint8_t>(last.flow.proto))
                     .u16(last.flow.local_port)
                     .addr(last.flow.remote_addr)
                     .u16(last.flow.remote_port)
                     .bytes;
  }
  return reply(id, std::move(out));
}

Message NodeRegistry::list_rules(std::uint32_t id, const ctl::Rules& r) {
  // Rules are listed in the order they are tried; the cursor is the position
  // to go on from (rules change rarely, and only by administration).
  if (!r.cursor.empty() && r.cursor.size() != 4) return bad_cursor(id, 4);
  const std::uint32_t from = r.cursor.empty() ? 0 : CursorReader{r.cursor}.u32();
  const std::uint32_t limit = page_limit(r.limit, ctl::kMaxRuleRecords);
  const std::vector<RuleInfo> rules = filter_.rules();
  ctl::RulesReply out;
  std::size_t body = ctl::kTlvHeaderSize + 4;  // room for the cursor
  for (std::size_t i = from; i < rules.size(); ++i) {
    const RuleInfo& ri = rules[i];
    const std::size_t size = ctl::kTlvHeaderSize + ctl::kRuleRecordMin + ri.expression.size();
    if (out.rules.size() == limit || body + size > ctl::kMaxBody) {
      out.cursor = CursorWriter{}.u32(static_cast<std::uint32_t>(i)).bytes;
      break;
    }
    body += size;
    out.rules.push_back(ctl::RuleRecord{ri.id, ri.target.node, ri.target.queue, static_cast<std::int16_t>(ri.priority),
                                        ri.hits, ri.expression});
  }
  return reply(id, std::move(out));
}

void NodeRegistry::node_gone(NodeId node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  ++nodes_gone_;
  // Group memberships are shared ports: only this node's share (one member
  // per queue that joined) goes.
  for (auto p = ports_.begin(); p != ports_.end();) {
    auto l = it->second.listens.find(p->first);
    const std::size_t share = l != it->second.listens.end() ? l->second.size() : 0;
    const bool mine = share != 0 || (p->second.node == node && !p->second.group);
    if (mine && p->second.group && p->second.users > share) {
      p->second.users -= share;
      if (p->second.node == node) p->second.node = 0;
      ++p;
    } else if (mine) {
      p = ports_.erase(p);
    } else {
      ++p;
    }
  }
  std::erase_if(flows_, [&](const auto& f) { return f.second == node; });
  const bool had_rules = !it->second.rules.empty();
  filter_.remove_node(node);  // flows, listeners, group memberships, rules
  nodes_.erase(it);
  if (had_rules && !stopping_) save_rules();
  if (hooks_.detach) hooks_.detach(node);
}

}  // namespace xk::filterd

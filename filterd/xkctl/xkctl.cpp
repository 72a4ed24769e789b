// xkctl: arguments, client and output (xkctl.hpp, docs/xkctl.md).

#include "xkctl.hpp"

#include <nlohmann/json.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>

#include "xk/endpoint.hpp"

namespace xk::filterd::xkctl {

const char* const kUsage =
    R"(usage: xkctl [--control PATH] [--json] [--timeout SEC] COMMAND

Administration of filterd (docs/xkctl.md).

commands:
  nodes                         registered nodes: id, name, pid, queues, channel, counts
  ports                         ports in use: proto, port, owner node(s) and queue, group
  flows [--node N] [--limit N]  exact flows (all nodes', or node N's); at most N shown
  rules                         user rules in the order they are tried, with their hits
  counters                      every counter of filterd, by owner, and each node's
  stats                         the same counters as one flat list (what STATS returns)
  rule add 'EXPR' --node N [--queue Q] [--priority P]
                                steer frames matching the pcap filter EXPR to node N
  rule del ID                   delete rule ID

options:
  --control PATH   filterd's control socket (default /run/xk/filterd.sock)
  --json           machine-readable output
  --timeout SEC    how long to wait for each reply (default 5)
  --help

exit status: 0 done; 1 filterd refused the request; 2 bad arguments;
3 filterd cannot be reached (or broke the protocol).
)";

namespace {

template <class T>
T parse_int(std::string_view flag, std::string_view v, long long min, long long max) {
  long long x = 0;
  const char* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, x);
  if (v.empty() || ec != std::errc() || p != end || x < min || x > max) {
    throw UsageError(std::string(flag) + ": '" + std::string(v) + "' is not a number in " + std::to_string(min) +
                     ".." + std::to_string(max));
  }
  return static_cast<T>(x);
}

}  // namespace

Options parse_args(std::span<const std::string_view> args) {
  Options o;
  std::vector<std::string_view> words;
  std::optional<std::uint16_t> node, queue;
  std::optional<std::int16_t> priority;
  std::optional<std::uint32_t> limit;
  bool help = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    std::optional<std::string_view> inline_value;
    if (a.starts_with("--")) {
      if (auto eq = a.find('='); eq != std::string_view::npos) {
        inline_value = a.substr(eq + 1);
        a = a.substr(0, eq);
      }
    }
    auto value = [&]() -> std::string_view {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) throw UsageError(std::string(a) + " needs a value");
      return args[++i];
    };
    auto no_value = [&] {
      if (inline_value) throw UsageError(std::string(a) + " takes no value");
    };
    if (a == "--help" || a == "-h") {
      no_value();
      help = true;
    } else if (a == "--json") {
      no_value();
      o.json = true;
    } else if (a == "--control") {
      std::string_view v = value();
      if (v.empty()) throw UsageError("--control: empty path");
      o.control = std::string(v);
    } else if (a == "--timeout") {
      o.timeout = std::chrono::milliseconds(parse_int<std::int64_t>(a, value(), 1, 3600) * 1000);
    } else if (a == "--node") {
      node = parse_int<std::uint16_t>(a, value(), 1, 65535);
    } else if (a == "--queue") {
      queue = parse_int<std::uint16_t>(a, value(), 0, static_cast<long long>(ctl::kMaxQueues) - 1);
    } else if (a == "--priority") {
      priority = parse_int<std::int16_t>(a, value(), -32768, 32767);
    } else if (a == "--limit") {
      limit = parse_int<std::uint32_t>(a, value(), 1, 0xFFFFFFFFll);
    } else if (a.size() > 1 && a[0] == '-' && words.size() < 2) {
      // A rule expression may start with '-' only after "rule add".
      throw UsageError("unknown option '" + std::string(a) + "'");
    } else {
      words.push_back(args[i]);
    }
  }
  if (help) {
    o.command = Command::help;
    return o;
  }
  if (words.empty()) throw UsageError("no command (nodes, ports, flows, rules, counters, stats, rule add, rule del)");
  const std::string_view cmd = words[0];
  auto allow = [&](bool node_ok, bool queue_ok, bool limit_ok) {
    if (node && !node_ok) throw UsageError("--node does not go with '" + std::string(cmd) + "'");
    if ((queue || priority) && !queue_ok) throw UsageError("--queue and --priority go with 'rule add' only");
    if (limit && !limit_ok) throw UsageError("--limit goes with 'flows' only");
  };
  auto words_exactly = [&](std::size_t n) {
    if (words.size() > n) throw UsageError("unexpected argument '" + std::string(words[n]) + "'");
  };
  if (cmd == "nodes" || cmd == "ports" || cmd == "rules" || cmd == "counters" || cmd == "stats") {
    allow(false, false, false);
    words_exactly(1);
    o.command = cmd == "nodes"      ? Command::nodes
                : cmd == "ports"    ? Command::ports
                : cmd == "rules"    ? Command::rules
                : cmd == "counters" ? Command::counters
                                    : Command::stats;
  } else if (cmd == "flows") {
    allow(true, false, true);
    words_exactly(1);
    o.command = Command::flows;
    o.node = node.value_or(0);
    o.limit = limit.value_or(0);
  } else if (cmd == "rule") {
    if (words.size() < 2) throw UsageError("'rule' needs 'add' or 'del'");
    if (words[1] == "add") {
      allow(true, true, false);
      if (words.size() < 3) throw UsageError("rule add: the filter expression is missing");
      words_exactly(3);
      if (words[2].empty() || words[2].size() > ctl::kMaxExpression) {
        throw UsageError("rule add: the expression must be 1.." + std::to_string(ctl::kMaxExpression) + " bytes");
      }
      if (!node) throw UsageError("rule add: --node N is required");
      o.command = Command::rule_add;
      o.expression = std::string(words[2]);
      o.node = *node;
      o.queue = queue.value_or(0);
      o.priority = priority.value_or(0);
    } else if (words[1] == "del") {
      allow(false, false, false);
      if (words.size() < 3) throw UsageError("rule del: the rule id is missing");
      words_exactly(3);
      o.command = Command::rule_del;
      o.rule_id = parse_int<std::uint32_t>("rule del", words[2], 1, 0xFFFFFFFFll);
    } else {
      throw UsageError("'rule " + std::string(words[1]) + "': add or del");
    }
  } else {
    throw UsageError("unknown command '" + std::string(cmd) + "'");
  }
  return o;
}

// ---- the client ----------------------------------------------------------------------

Client::Client(const std::string& path, std::chrono::milliseconds timeout) : timeout_(timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) throw Unreachable("bad socket path '" + path + "'");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw Unreachable(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    throw Unreachable("cannot connect to " + path + ": " + std::strerror(e) + " (is filterd running?)");
  }
}

Client::~Client() {
  if (fd_ >= 0) ::close(fd_);
}

ctl::Body Client::request(ctl::Body body) {
  const ctl::MsgType want = ctl::reply_type(ctl::type_of(body));
  const std::uint32_t id = next_id_++;
  Result<std::vector<std::byte>> bytes = ctl::encode(ctl::Message{id, std::move(body)});
  if (!bytes) throw UsageError(std::string("cannot encode the request: ") + to_string(bytes.error()));
  std::size_t done = 0;
  while (done < bytes->size()) {
    ssize_t n = ::send(fd_, bytes->data() + done, bytes->size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Unreachable(std::string("filterd closed the connection: ") + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    ctl::ReadResult r = reader_.next();
    if (r.has_error()) throw Unreachable("filterd's reply breaks the protocol: " + r.error().text);
    if (r.has_message()) {
      ctl::Message m = std::move(r).message();
      if (m.request_id != id) continue;
      if (auto* e = std::get_if<ctl::Error>(&m.body)) throw Refused(e->code, e->text);
      if (ctl::type_of(m.body) != want) {
        throw Unreachable(std::string("filterd answered ") + ctl::to_string(ctl::type_of(m.body)) + ", not " +
                          ctl::to_string(want));
      }
      return std::move(m.body);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) throw Unreachable("no reply from filterd within the timeout");
    pollfd p{fd_, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Unreachable(std::string("poll: ") + std::strerror(errno));
    if (n == 0) continue;
    std::byte buf[16384];
    const ssize_t got = ::read(fd_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw Unreachable("filterd closed the connection");
    reader_.feed(std::span<const std::byte>(buf, static_cast<std::size_t>(got)));
  }
}

std::vector<ctl::NodeRecord> Client::nodes() {
  std::vector<ctl::NodeRecord> all;
  ctl::Cursor cursor;
  do {
    auto r = std::get<ctl::NodesReply>(request(ctl::Nodes{cursor, 0}));
    all.insert(all.end(), r.nodes.begin(), r.nodes.end());
    cursor = std::move(r.cursor);
  } while (!cursor.empty());
  return all;
}

std::vector<ctl::PortRecord> Client::ports() {
  std::vector<ctl::PortRecord> all;
  ctl::Cursor cursor;
  do {
    auto r = std::get<ctl::PortsReply>(request(ctl::Ports{cursor, 0}));
    all.insert(all.end(), r.ports.begin(), r.ports.end());
    cursor = std::move(r.cursor);
  } while (!cursor.empty());
  return all;
}

std::vector<ctl::NodeFlow> Client::flows(std::uint16_t node, std::uint32_t limit, std::uint32_t& total) {
  std::vector<ctl::NodeFlow> all;
  ctl::Cursor cursor;
  do {
    const std::uint32_t want = limit == 0 ? 0 : limit - static_cast<std::uint32_t>(all.size());
    auto r = std::get<ctl::FlowsReply>(request(ctl::Flows{node, cursor, want}));
    all.insert(all.end(), r.flows.begin(), r.flows.end());
    total = r.total;
    cursor = std::move(r.cursor);
  } while (!cursor.empty() && (limit == 0 || all.size() < limit));
  return all;
}

std::vector<ctl::RuleRecord> Client::rules() {
  std::vector<ctl::RuleRecord> all;
  ctl::Cursor cursor;
  do {
    auto r = std::get<ctl::RulesReply>(request(ctl::Rules{cursor, 0}));
    all.insert(all.end(), r.rules.begin(), r.rules.end());
    cursor = std::move(r.cursor);
  } while (!cursor.empty());
  return all;
}

std::vector<ctl::Counter> Client::stats() { return std::get<ctl::StatsReply>(request(ctl::Stats{})).counters; }

// ---- output ------------------------------------------------------------------------

namespace {

bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == '-'; }) &&
         s != "-";
}

// Display width: UTF-8 continuation bytes take no column.
std::size_t width(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// Node names come from the nodes: no control characters reach a terminal.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) ? '?' : c;
  return out;
}

std::string u(std::uint64_t v) { return std::to_string(v); }

std::string proto_name(ctl::Proto p) { return ctl::to_string(p); }

std::string flow_remote(const ctl::FlowEntry& f) { return to_string(Endpoint{f.remote_addr, f.remote_port}); }

// JSON documents keep their keys in the order written (nlohmann's
// ordered_json). Every string came through the codec's UTF-8 check; a bad
// byte would still be replaced rather than thrown over.
using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"; }

void node_counts(Json& j, const ctl::NodeRecord& n) {
  j["rx_frames"] = n.rx_frames;
  j["egress_allowed"] = n.egress_allowed;
  j["egress_denied"] = n.egress_denied;
}

}  // namespace

std::string Table::render() const {
  std::vector<std::size_t> w(header_.size(), 0);
  std::vector<bool> right(header_.size(), true);
  for (std::size_t c = 0; c < header_.size(); ++c) w[c] = width(header_[c]);
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size() && c < w.size(); ++c) {
      w[c] = std::max(w[c], width(row[c]));
      if (!is_number(row[c])) right[c] = false;
    }
  }
  if (rows_.empty()) std::fill(right.begin(), right.end(), false);
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (std::size_t c = 0; c < w.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(w[c] - width(cell), ' ');
      if (c != 0) l += "  ";
      l += right[c] ? pad + cell : cell + pad;
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header_);
  for (const auto& row : rows_) line(row);
  return out;
}

std::string json_string(std::string_view s) { return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string format_nodes(const std::vector<ctl::NodeRecord>& nodes, bool json) {
  if (json) {
    Json list = Json::array();
    for (const auto& n : nodes) {
      Json& j = list.emplace_back(Json{{"id", n.id}, {"name", n.name}, {"pid", n.pid}, {"queues", n.queues}});
      // A node on another host is on the node port, known by its MAC.
      j["channel"] = n.ethernet ? "ethernet" : "memif";
      if (n.ethernet) j["mac"] = to_string(n.mac);
      j["memif_id"] = n.memif_id;
      j["listeners"] = n.listeners;
      j["flows"] = n.flows;
      j["rules"] = n.rules;
      node_counts(j, n);
    }
    return dump(Json{{"nodes", std::move(list)}});
  }
  Table t({"ID", "NAME", "PID", "QUEUES", "CHANNEL", "LISTENERS", "FLOWS", "RULES", "RX", "TX", "DENIED"});
  for (const auto& n : nodes) {
    const std::string channel = n.ethernet ? "ether:" + to_string(n.mac) : "memif:" + u(n.memif_id);
    t.add({u(n.id), printable(n.name), u(n.pid), u(n.queues), channel, u(n.listeners), u(n.flows), u(n.rules),
           u(n.rx_frames), u(n.egress_allowed), u(n.egress_denied)});
  }
  return t.render();
}

std::string format_ports(const std::vector<ctl::PortRecord>& ports, bool json) {
  if (json) {
    Json list = Json::array();
    for (const auto& p : ports) {
      list.push_back({{"proto", proto_name(p.proto)},
                      {"port", p.port},
                      {"use", p.listen ? "listen" : p.lease ? "lease" : "connection"},
                      {"group", p.group},
                      {"node", p.node},
                      {"queue", p.queue}});
    }
    return dump(Json{{"ports", std::move(list)}});
  }
  Table t({"PROTO", "PORT", "USE", "GROUP", "NODE", "QUEUE"});
  for (const auto& p : ports) {
    t.add({proto_name(p.proto), u(p.port), p.listen ? "listen" : p.lease ? "lease" : "connection", p.group ? "yes" : "no", u(p.node),
           u(p.queue)});
  }
  return t.render();
}

std::string format_flows(const std::vector<ctl::NodeFlow>& flows, std::uint32_t total, bool json) {
  if (json) {
    Json list = Json::array();
    for (const auto& f : flows) {
      list.push_back({{"node", f.node},
                      {"queue", f.flow.queue},
                      {"proto", proto_name(f.flow.proto)},
                      {"local_port", f.flow.local_port},
                      {"remote_addr", to_string(f.flow.remote_addr)},
                      {"remote_port", f.flow.remote_port}});
    }
    return dump(Json{{"total", total}, {"flows", std::move(list)}});
  }
  Table t({"NODE", "QUEUE", "PROTO", "LOCAL", "REMOTE"});
  for (const auto& f : flows) {
    t.add({u(f.node), u(f.flow.queue), proto_name(f.flow.proto), u(f.flow.local_port), flow_remote(f.flow)});
  }
  std::string out = t.render();
  if (flows.size() < total) out += "(" + u(flows.size()) + " of " + u(total) + " flows shown)\n";
  return out;
}

std::string format_rules(const std::vector<ctl::RuleRecord>& rules, bool json) {
  if (json) {
    Json list = Json::array();
    for (const auto& r : rules) {
      list.push_back({{"id", r.id},
                      {"node", r.node},
                      {"queue", r.queue},
                      {"priority", r.priority},
                      {"hits", r.hits},
                      {"expression", r.expression}});
    }
    return dump(Json{{"rules", std::move(list)}});
  }
  Table t({"ID", "NODE", "QUEUE", "PRIORITY", "HITS", "EXPRESSION"});
  for (const auto& r : rules) {
    t.add({u(r.id), u(r.node), u(r.queue), std::to_string(r.priority), u(r.hits), printable(r.expression)});
  }
  return t.render();
}

std::string format_stats(const std::vector<ctl::Counter>& counters, bool json) {
  if (json) {
    Json values = Json::object();
    for (const auto& c : counters) values[c.name] = c.value;
    return dump(Json{{"counters", std::move(values)}});
  }
  Table t({"COUNTER", "VALUE"});
  for (const auto& c : counters) t.add({printable(c.name), u(c.value)});
  return t.render();
}

std::string format_counters(const std::vector<ctl::Counter>& counters, const std::vector<ctl::NodeRecord>& nodes,
                            bool json) {
  // "owner.name": grouped by owner, in the order owners first appear.
  std::vector<std::string> owners;
  std::map<std::string, std::vector<std::pair<std::string, std::uint64_t>>> by_owner;
  for (const auto& c : counters) {
    const auto dot = c.name.find('.');
    std::string owner = dot == std::string::npos ? "" : c.name.substr(0, dot);
    std::string name = dot == std::string::npos ? c.name : c.name.substr(dot + 1);
    if (!by_owner.count(owner)) owners.push_back(owner);
    by_owner[owner].emplace_back(std::move(name), c.value);
  }
  if (json) {
    Json groups = Json::object();
    for (const auto& o : owners) {
      Json& group = groups[o] = Json::object();
      for (const auto& [name, value] : by_owner[o]) group[name] = value;
    }
    Json list = Json::array();
    for (const auto& n : nodes) node_counts(list.emplace_back(Json{{"id", n.id}, {"name", n.name}}), n);
    return dump(Json{{"counters", std::move(groups)}, {"nodes", std::move(list)}});
  }
  Table t({"OWNER", "COUNTER", "VALUE"});
  for (const auto& o : owners) {
    for (const auto& [name, value] : by_owner[o]) t.add({printable(o), printable(name), u(value)});
  }
  Table nt({"NODE", "NAME", "RX", "EGRESS_ALLOWED", "EGRESS_DENIED"});
  for (const auto& n : nodes) {
    nt.add({u(n.id), printable(n.name), u(n.rx_frames), u(n.egress_allowed), u(n.egress_denied)});
  }
  return t.render() + "\n" + nt.render();
}

std::string format_rule_added(std::uint32_t id, bool json) {
  if (json) return dump(Json{{"rule_id", id}});
  return "rule " + u(id) + " added\n";
}

std::string format_rule_deleted(std::uint32_t id, bool json) {
  if (json) return dump(Json{{"deleted", id}});
  return "rule " + u(id) + " deleted\n";
}

int run(const Options& o, std::string& out, std::string& err) {
  if (o.command == Command::help) {
    out = kUsage;
    return kExitOk;
  }
  try {
    Client c(o.control, o.timeout);
    switch (o.command) {
      case Command::nodes: out = format_nodes(c.nodes(), o.json); break;
      case Command::ports: out = format_ports(c.ports(), o.json); break;
      case Command::flows: {
        std::uint32_t total = 0;
        auto flows = c.flows(o.node, o.limit, total);
        out = format_flows(flows, total, o.json);
        break;
      }
      case Command::rules: out = format_rules(c.rules(), o.json); break;
      case Command::stats: out = format_stats(c.stats(), o.json); break;
      case Command::counters: {
        auto counters = c.stats();
        out = format_counters(counters, c.nodes(), o.json);
        break;
      }
      case Command::rule_add: {
        ctl::RuleAdd r;
        r.expression = o.expression;
        r.queue = o.queue;
        r.priority = o.priority;
        r.node = o.node;
        out = format_rule_added(std::get<ctl::RuleAddReply>(c.request(r)).rule_id, o.json);
        break;
      }
      case Command::rule_del:
        (void)c.request(ctl::RuleDel{o.rule_id});
        out = format_rule_deleted(o.rule_id, o.json);
        break;
      case Command::help: break;
    }
  } catch (const Refused& e) {
    err = std::string("xkctl: filterd refused: ") + e.what() + "\n";
    if (e.code == ctl::ErrorCode::bad_message && std::string(e.what()).find("unknown message type") != std::string::npos) {
      err += "xkctl: (this filterd predates the administration requests of protocol version 2)\n";
    }
    return kExitRefused;
  } catch (const Unreachable& e) {
    err = std::string("xkctl: ") + e.what() + "\n";
    return kExitUnreachable;
  } catch (const UsageError& e) {
    err = std::string("xkctl: ") + e.what() + "\n";
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace xk::filterd::xkctl

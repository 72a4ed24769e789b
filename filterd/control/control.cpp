// The filterd control protocol codec (docs/control-protocol.md).
//
// Decoding walks a body once, checking every TLV length against what is left,
// then converts the fields it found and runs the same validate() the encoder
// runs. Nothing is allocated before its size was checked against a cap, so a
// hostile peer can make us hold at most one frame.
#include "xk/filterd/control.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

namespace xk::filterd::ctl {
namespace {

std::string hex(std::uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*X", digits, static_cast<unsigned>(v));
  return buf;
}

std::string num(std::uint64_t v) { return std::to_string(v); }

const char* tag_name(std::uint16_t tag) noexcept {
  switch (static_cast<Tag>(tag)) {
    case Tag::pad: return "pad";
    case Tag::name: return "name";
    case Tag::pid: return "pid";
    case Tag::queues: return "queues";
    case Tag::versions: return "versions";
    case Tag::version: return "version";
    case Tag::resume: return "resume";
    case Tag::token: return "token";
    case Tag::ethernet: return "ethernet";
    case Tag::nonce: return "nonce";
    case Tag::proof: return "proof";
    case Tag::proto: return "proto";
    case Tag::local_port: return "local_port";
    case Tag::group: return "group";
    case Tag::queue: return "queue";
    case Tag::remote_addr: return "remote_addr";
    case Tag::remote_port: return "remote_port";
    case Tag::listener: return "listener";
    case Tag::flow: return "flow";
    case Tag::more: return "more";
    case Tag::count: return "count";
    case Tag::ports: return "ports";
    case Tag::expression: return "expression";
    case Tag::priority: return "priority";
    case Tag::rule_id: return "rule_id";
    case Tag::node_id: return "node_id";
    case Tag::memif_socket: return "memif_socket";
    case Tag::channel: return "channel";
    case Tag::filterd_mac: return "filterd_mac";
    case Tag::mtu: return "mtu";
    case Tag::address: return "address";
    case Tag::prefix_len: return "prefix_len";
    case Tag::gateway: return "gateway";
    case Tag::secret: return "secret";
    case Tag::heartbeat_ms: return "heartbeat_ms";
    case Tag::central: return "central";
    case Tag::counter: return "counter";
    case Tag::error_code: return "error_code";
    case Tag::error_text: return "error_text";
    case Tag::cursor: return "cursor";
    case Tag::limit: return "limit";
    case Tag::total: return "total";
    case Tag::node: return "node";
    case Tag::port: return "port";
    case Tag::rule: return "rule";
    case Tag::node_flow: return "node_flow";
  }
  return "unknown";
}

std::string describe(std::uint16_t tag) { return "tag " + hex(tag, 4) + " (" + tag_name(tag) + ")"; }
std::string describe(Tag tag) { return describe(static_cast<std::uint16_t>(tag)); }

// UTF-8 as RFC 3629 defines it (no overlong forms, no surrogates, nothing
// above U+10FFFF), and no NUL, so a string can be handed to C APIs.
bool valid_text(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    std::uint32_t min;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1Fu, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0Fu, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07u, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i < len) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// Length in bytes of the valid UTF-8 character at s[i], 0 if there is none.
std::size_t char_length(std::string_view s, std::size_t i) noexcept {
  for (std::size_t len = 1; len <= 4 && i + len <= s.size(); ++len)
    if (valid_text(s.substr(i, len))) return len;
  return 0;
}

// ---- validation --------------------------------------------------------------

struct Violation {
  Errc errc;  // for encode(): invalid_argument or too_large
  std::string text;
};
using Check = std::optional<Violation>;

Check bad(std::string text) { return Violation{Errc::invalid_argument, std::move(text)}; }
Check over(std::string text) { return Violation{Errc::too_large, std::move(text)}; }

// Listeners are TCP or UDP; flows may also be ICMP echo "connections" (a
// node's ping), keyed by the echo identifier in place of the local port.
Check check_proto(Proto p) {
  if (p == Proto::tcp || p == Proto::udp) return std::nullopt;
  return bad("proto " + num(static_cast<std::uint8_t>(p)) + " is neither tcp (6) nor udp (17)");
}

Check check_flow_proto(Proto p) {
  if (p == Proto::tcp || p == Proto::udp || p == Proto::icmp) return std::nullopt;
  return bad("proto " + num(static_cast<std::uint8_t>(p)) + " is not icmp (1), tcp (6) or udp (17)");
}

// An ICMP echo flow has no remote port; a TCP or UDP flow must have one.
Check check_remote_port(Proto p, std::uint16_t port) {
  if (p == Proto::icmp) {
    if (port != 0) return bad("remote port " + num(port) + " for an icmp flow (must be 0)");
    return std::nullopt;
  }
  if (port == 0) return bad("remote port is 0");
  return std::nullopt;
}

Check check_queue(std::uint16_t q) {
  if (q < kMaxQueues) return std::nullopt;
  return bad("queue " + num(q) + " is not below " + num(kMaxQueues));
}

Check check_nonzero_port(std::uint16_t port, const char* what) {
  if (port != 0) return std::nullopt;
  return bad(std::string(what) + " is 0");
}

Check check_text(std::string_view s, const char* what, std::size_t min, std::size_t max) {
  if (s.size() > max) return over(std::string(what) + " is " + num(s.size()) + " bytes, over the limit of " + num(max));
  if (s.size() < min) return bad(std::string(what) + " is empty");
  if (!valid_text(s)) return bad(std::string(what) + " is not UTF-8 text without NUL");
  return std::nullopt;
}

// Runs each check in turn and stops at the first violation.
template <class... Checks>
Check first_of(Checks&&... checks) {
  Check found;
  ((found ? void() : void(found = std::forward<Checks>(checks))), ...);
  return found;
}

Check check(const Hello& m) {
  if (auto v = check_text(m.name, "name", 1, kMaxNodeName)) return v;
  if (m.queues == 0 || m.queues > kMaxQueues) return bad("queues " + num(m.queues) + " is not in 1.." + num(kMaxQueues));
  if (m.version_min == 0 || m.version_min > m.version_max)
    return bad("version range " + num(m.version_min) + ".." + num(m.version_max) + " is empty or starts at 0");
  if (m.resume) {
    if (m.resume->node_id == 0) return bad("resume: node id 0 is never given out");
    if (m.resume->channels.size() > kMaxQueues)
      return over("resume: " + num(m.resume->channels.size()) + " channels, over the limit of " + num(kMaxQueues));
    if (m.resume->channels.size() != m.queues)
      return bad("resume: " + num(m.resume->channels.size()) + " channels for " + num(m.queues) + " queues");
  }
  if (m.token.size() > kMaxToken) return over("token is " + num(m.token.size()) + " bytes, over the limit of " + num(kMaxToken));
  return std::nullopt;
}

Check check(const Listen& m) {
  if (auto v = first_of(check_proto(m.proto), check_queue(m.queue))) return v;
  if (m.group && m.port == 0) return bad("a listen group needs a port");
  return std::nullopt;
}

Check check(const Unlisten& m) {
  return first_of(check_proto(m.proto), check_nonzero_port(m.port, "local port"),
                  m.queue ? check_queue(*m.queue) : Check{});
}

Check check(const Connect& m) {
  if (auto v = first_of(check_flow_proto(m.proto), check_queue(m.queue), check_remote_port(m.proto, m.remote_port)))
    return v;
  if (m.remote_addr.value == 0) return bad("remote address is 0.0.0.0");
  return std::nullopt;
}

Check check_lease_ports(const std::vector<std::uint16_t>& ports) {
  if (ports.size() > kMaxLeasePorts)
    return over(num(ports.size()) + " ports, over the limit of " + num(kMaxLeasePorts));
  if (std::find(ports.begin(), ports.end(), std::uint16_t{0}) != ports.end()) return bad("port 0 in the list");
  return std::nullopt;
}

Check check(const Lease& m) {
  if (m.proto != Proto::tcp) return bad("proto " + num(static_cast<std::uint8_t>(m.proto)) + ": leases are tcp (6)");
  if (auto v = first_of(check_queue(m.queue), check_lease_ports(m.ports))) return v;
  if ((m.count == 0) == m.ports.empty()) return bad("a count of new ports or a list of ports, one of them");
  if (m.count > kMaxLeasePorts) return bad("count " + num(m.count) + " is over " + num(kMaxLeasePorts));
  return std::nullopt;
}

Check check(const Release& m) {
  return first_of(check_flow_proto(m.proto), check_nonzero_port(m.local_port, "local port"),
                  check_remote_port(m.proto, m.remote_port));
}

Check check_flow(const FlowEntry& f);

Check check(const Resync& m) {
  if (m.listeners.size() > kMaxResyncListeners)
    return over(num(m.listeners.size()) + " listeners, over the limit of " + num(kMaxResyncListeners));
  if (m.flows.size() > kMaxResyncFlows)
    return over(num(m.flows.size()) + " flows, over the limit of " + num(kMaxResyncFlows));
  for (std::size_t i = 0; i < m.listeners.size(); ++i) {
    const ListenerEntry& l = m.listeners[i];
    if (auto v = first_of(check_proto(l.proto), check_queue(l.queue), check_nonzero_port(l.port, "local port"))) {
      v->text = "listener " + num(i) + ": " + v->text;
      return v;
    }
  }
  for (std::size_t i = 0; i < m.flows.size(); ++i) {
    const FlowEntry& f = m.flows[i];
    if (auto v = first_of(check_flow_proto(f.proto), check_queue(f.queue),
                          check_nonzero_port(f.local_port, "local port"), check_remote_port(f.proto, f.remote_port))) {
      v->text = "flow " + num(i) + ": " + v->text;
      return v;
    }
  }
  return std::nullopt;
}

Check check(const RuleAdd& m) {
  return first_of(check_text(m.expression, "expression", 1, kMaxExpression), check_queue(m.queue));
}

Check check_cursor(const Cursor& c) {
  if (c.size() > kMaxCursor) return over("cursor is " + num(c.size()) + " bytes, over the limit of " + num(kMaxCursor));
  return std::nullopt;
}

Check check(const Nodes& m) { return check_cursor(m.cursor); }
Check check(const Ports& m) { return check_cursor(m.cursor); }
Check check(const Flows& m) { return check_cursor(m.cursor); }
Check check(const Rules& m) { return check_cursor(m.cursor); }

template <class T>
Check check_count(const std::vector<T>& v, std::size_t cap, const char* what) {
  if (v.size() > cap) return over(num(v.size()) + " " + what + ", over the limit of " + num(cap));
  return std::nullopt;
}

Check check_flow(const FlowEntry& f) {
  return first_of(check_flow_proto(f.proto), check_queue(f.queue), check_nonzero_port(f.local_port, "local port"),
                  check_remote_port(f.proto, f.remote_port));
}

Check check(const NodesReply& m) {
  if (auto v = first_of(check_count(m.nodes, kMaxNodeRecords, "nodes"), check_cursor(m.cursor))) return v;
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    const NodeRecord& n = m.nodes[i];
    Check v = check_text(n.name, "name", 1, kMaxNodeName);
    if (!v && (n.queues == 0 || n.queues > kMaxQueues))
      v = bad("queues " + num(n.queues) + " is not in 1.." + num(kMaxQueues));
    if (!v && n.id == 0) v = bad("node id 0");
    if (!v && !n.ethernet && n.mac != MacAddr{}) v = bad("a MAC for a node that is not on the node port");
    if (v) {
      v->text = "node " + num(i) + ": " + v->text;
      return v;
    }
  }
  return std::nullopt;
}

Check check(const PortsReply& m) {
  if (auto v = first_of(check_count(m.ports, kMaxPortRecords, "ports"), check_cursor(m.cursor))) return v;
  for (std::size_t i = 0; i < m.ports.size(); ++i) {
    const PortRecord& p = m.ports[i];
    if (auto v = first_of(check_proto(p.proto), check_queue(p.queue), check_nonzero_port(p.port, "port"))) {
      v->text = "port " + num(i) + ": " + v->text;
      return v;
    }
  }
  return std::nullopt;
}

Check check(const FlowsReply& m) {
  if (auto v = first_of(check_count(m.flows, kMaxFlowRecords, "flows"), check_cursor(m.cursor))) return v;
  for (std::size_t i = 0; i < m.flows.size(); ++i) {
    if (auto v = check_flow(m.flows[i].flow)) {
      v->text = "flow " + num(i) + ": " + v->text;
      return v;
    }
  }
  return std::nullopt;
}

Check check(const RulesReply& m) {
  if (auto v = first_of(check_count(m.rules, kMaxRuleRecords, "rules"), check_cursor(m.cursor))) return v;
  // Expressions may be long: the records must also fit in one frame.
  std::size_t body = m.cursor.empty() ? 0 : kTlvHeaderSize + m.cursor.size();
  for (std::size_t i = 0; i < m.rules.size(); ++i) {
    const RuleRecord& r = m.rules[i];
    Check v = check_text(r.expression, "expression", 1, kMaxExpression);
    if (!v && r.id == 0) v = bad("rule id 0");
    if (!v) v = check_queue(r.queue);
    if (v) {
      v->text = "rule " + num(i) + ": " + v->text;
      return v;
    }
    body += kTlvHeaderSize + kRuleRecordMin + r.expression.size();
  }
  if (body > kMaxBody) return over("rules take " + num(body) + " bytes, over the body limit of " + num(kMaxBody));
  return std::nullopt;
}

Check check(const RuleDel& m) {
  if (m.rule_id == 0) return bad("rule id 0 is never given out");
  return std::nullopt;
}

Check check(const Stats&) { return std::nullopt; }
Check check(const Bye&) { return std::nullopt; }
Check check(const Ping&) { return std::nullopt; }
Check check(const Auth&) { return std::nullopt; }
Check check(const AuthReply&) { return std::nullopt; }
Check check(const Ok&) { return std::nullopt; }

Check check(const HelloReply& m) {
  if (m.version == 0) return bad("version 0");
  if (auto v = check_text(m.memif_socket, "memif socket path", 1, kMaxMemifSocket)) return v;
  if (m.channels.size() > kMaxQueues)
    return over(num(m.channels.size()) + " channels, over the limit of " + num(kMaxQueues));
  if (m.channels.empty()) return bad("no channel");
  if (m.mtu < kMinMtu) return bad("MTU " + num(m.mtu) + " is below " + num(kMinMtu));
  if (m.prefix_len > 32) return bad("prefix length " + num(m.prefix_len) + " is over 32");
  return std::nullopt;
}

Check check(const ListenReply& m) { return check_nonzero_port(m.port, "port"); }
Check check(const ConnectReply& m) { return check_nonzero_port(m.local_port, "local port"); }
Check check(const LeaseReply& m) { return check_lease_ports(m.ports); }

Check check(const RuleAddReply& m) {
  if (m.rule_id == 0) return bad("rule id 0 is never given out");
  return std::nullopt;
}

Check check(const StatsReply& m) {
  if (m.counters.size() > kMaxCounters)
    return over(num(m.counters.size()) + " counters, over the limit of " + num(kMaxCounters));
  for (std::size_t i = 0; i < m.counters.size(); ++i) {
    if (auto v = check_text(m.counters[i].name, "counter name", 1, kMaxCounterName)) {
      v->text = "counter " + num(i) + ": " + v->text;
      return v;
    }
  }
  return std::nullopt;
}

Check check(const Error& m) {
  if (m.code == ErrorCode{0}) return bad("error code 0");
  return check_text(m.text, "error text", 0, kMaxErrorText);
}

Check check_body(const Body& body) {
  Check v = std::visit([](const auto& m) { return check(m); }, body);
  if (v) v->text = std::string(to_string(type_of(body))) + ": " + v->text;
  return v;
}

// ---- encoding ------------------------------------------------------------------

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}

  void u8(Tag t, std::uint8_t v) { value(t, 1)[0] = std::byte{v}; }
  void u16(Tag t, std::uint16_t v) { store_be16(value(t, 2).data(), v); }
  void u32(Tag t, std::uint32_t v) { store_be32(value(t, 4).data(), v); }
  void boolean(Tag t, bool v) { u8(t, v ? 1 : 0); }
  void bytes(Tag t, std::span<const std::byte> b) {
    std::span<std::byte> dst = value(t, b.size());
    if (!b.empty()) std::memcpy(dst.data(), b.data(), b.size());
  }
  void text(Tag t, std::string_view s) { bytes(t, std::as_bytes(std::span(s.data(), s.size()))); }
  void mac(Tag t, const MacAddr& m) { bytes(t, std::as_bytes(std::span(m.bytes))); }

  // A TLV of n value bytes, to be filled at once (a later write may move it).
  std::span<std::byte> value(Tag t, std::size_t n) {
    const std::size_t at = out_.size();
    out_.resize(at + kTlvHeaderSize + n);
    store_be16(out_.data() + at, static_cast<std::uint16_t>(t));
    store_be16(out_.data() + at + 2, static_cast<std::uint16_t>(n));
    return {out_.data() + at + kTlvHeaderSize, n};
  }

 private:
  std::vector<std::byte>& out_;
};

void store_be64(std::byte* p, std::uint64_t v) noexcept {
  store_be32(p, static_cast<std::uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<std::uint32_t>(v));
}

std::uint64_t load_be64(const std::byte* p) noexcept {
  return (std::uint64_t{load_be32(p)} << 32) | load_be32(p + 4);
}

std::uint8_t raw(Proto p) noexcept { return static_cast<std::uint8_t>(p); }

// Fields go out in ascending tag order; an optional field equal to its
// default is left out.
void put_channels(Writer& w, const std::vector<Channel>& channels) {
  for (const Channel& c : channels) {
    std::span<std::byte> v = w.value(Tag::channel, kChannelRecord);
    store_be32(v.data(), c.memif_id);
    std::memcpy(v.data() + 4, c.node_mac.bytes.data(), 6);
  }
}

void put(Writer& w, const Hello& m) {
  w.text(Tag::name, m.name);
  w.u32(Tag::pid, m.pid);
  w.u16(Tag::queues, m.queues);
  std::span<std::byte> v = w.value(Tag::versions, 2);
  v[0] = std::byte{m.version_min};
  v[1] = std::byte{m.version_max};
  if (m.resume) {
    std::span<std::byte> r = w.value(Tag::resume, kResumeRecord);
    r[0] = std::byte{kResumeFormat};
    r[1] = std::byte{0};
    store_be16(r.data() + 2, m.resume->node_id);
  }
  if (!m.token.empty()) w.bytes(Tag::token, m.token);
  if (m.proof) w.bytes(Tag::proof, *m.proof);
  if (m.resume) put_channels(w, m.resume->channels);
  if (m.ethernet) w.mac(Tag::ethernet, *m.ethernet);
}

void put(Writer& w, const Listen& m) {
  w.u8(Tag::proto, raw(m.proto));
  w.u16(Tag::local_port, m.port);
  if (m.group) w.boolean(Tag::group, true);
  w.u16(Tag::queue, m.queue);
}

void put(Writer& w, const Unlisten& m) {
  w.u8(Tag::proto, raw(m.proto));
  w.u16(Tag::local_port, m.port);
  if (m.queue) w.u16(Tag::queue, *m.queue);
}

void put(Writer& w, const Connect& m) {
  w.u8(Tag::proto, raw(m.proto));
  if (m.local_port != 0) w.u16(Tag::local_port, m.local_port);
  w.u16(Tag::queue, m.queue);
  w.u32(Tag::remote_addr, m.remote_addr.value);
  w.u16(Tag::remote_port, m.remote_port);
}

void put_ports(Writer& w, const std::vector<std::uint16_t>& ports) {
  if (ports.empty()) return;
  std::span<std::byte> v = w.value(Tag::ports, ports.size() * 2);
  for (std::size_t i = 0; i < ports.size(); ++i) store_be16(v.data() + 2 * i, ports[i]);
}

void put(Writer& w, const Lease& m) {
  w.u8(Tag::proto, raw(m.proto));
  w.u16(Tag::queue, m.queue);
  if (m.count != 0) w.u16(Tag::count, m.count);
  put_ports(w, m.ports);
}

void put(Writer& w, const LeaseReply& m) { put_ports(w, m.ports); }

void put(Writer& w, const Release& m) {
  w.u8(Tag::proto, raw(m.proto));
  w.u16(Tag::local_port, m.local_port);
  w.u32(Tag::remote_addr, m.remote_addr.value);
  w.u16(Tag::remote_port, m.remote_port);
}

void write_flow(std::byte* v, const FlowEntry& f);
FlowEntry read_flow(const std::byte* v);

void put(Writer& w, const Resync& m) {
  for (const ListenerEntry& l : m.listeners) {
    std::span<std::byte> v = w.value(Tag::listener, kListenerRecord);
    v[0] = std::byte{raw(l.proto)};
    v[1] = std::byte{l.group ? kListenerFlagGroup : std::uint8_t{0}};
    store_be16(v.data() + 2, l.port);
    store_be16(v.data() + 4, l.queue);
  }
  for (const FlowEntry& f : m.flows) write_flow(w.value(Tag::flow, kFlowRecord).data(), f);
  if (m.more) w.boolean(Tag::more, true);
}

void put(Writer& w, const RuleAdd& m) {
  w.u16(Tag::queue, m.queue);
  w.text(Tag::expression, m.expression);
  if (m.priority != 0) w.u16(Tag::priority, static_cast<std::uint16_t>(m.priority));
  if (m.node != 0) w.u16(Tag::node_id, m.node);
}

void put_page(Writer& w, const Cursor& cursor, std::uint32_t limit) {
  if (!cursor.empty()) w.bytes(Tag::cursor, cursor);
  if (limit != 0) w.u32(Tag::limit, limit);
}

void put(Writer& w, const Nodes& m) { put_page(w, m.cursor, m.limit); }
void put(Writer& w, const Ports& m) { put_page(w, m.cursor, m.limit); }
void put(Writer& w, const Flows& m) {
  if (m.node != 0) w.u16(Tag::node_id, m.node);
  put_page(w, m.cursor, m.limit);
}
void put(Writer& w, const Rules& m) { put_page(w, m.cursor, m.limit); }

void write_flow(std::byte* v, const FlowEntry& f) {
  v[0] = std::byte{static_cast<std::uint8_t>(f.proto)};
  v[1] = std::byte{f.accepted ? kFlowFlagAccepted : std::uint8_t{0}};
  store_be16(v + 2, f.local_port);
  store_be32(v + 4, f.remote_addr.value);
  store_be16(v + 8, f.remote_port);
  store_be16(v + 10, f.queue);
}

void put(Writer& w, const RuleDel& m) { w.u32(Tag::rule_id, m.rule_id); }
void put(Writer&, const Stats&) {}
void put(Writer&, const Bye&) {}
void put(Writer&, const Ping&) {}
void put(Writer& w, const Auth& m) { w.bytes(Tag::nonce, m.nonce); }
void put(Writer& w, const AuthReply& m) {
  w.bytes(Tag::nonce, m.nonce);
  w.bytes(Tag::proof, m.proof);
}
void put(Writer&, const Ok&) {}

void put(Writer& w, const HelloReply& m) {
  w.u8(Tag::version, m.version);
  w.u16(Tag::node_id, m.node_id);
  w.text(Tag::memif_socket, m.memif_socket);
  put_channels(w, m.channels);
  w.mac(Tag::filterd_mac, m.filterd_mac);
  w.u16(Tag::mtu, m.mtu);
  w.u32(Tag::address, m.address.value);
  w.u8(Tag::prefix_len, m.prefix_len);
  if (m.gateway.value != 0) w.u32(Tag::gateway, m.gateway.value);
  w.bytes(Tag::secret, m.secret);
  w.u32(Tag::heartbeat_ms, m.heartbeat_ms);
  if (m.central) w.boolean(Tag::central, true);
}

void put(Writer& w, const ListenReply& m) { w.u16(Tag::local_port, m.port); }
void put(Writer& w, const ConnectReply& m) { w.u16(Tag::local_port, m.local_port); }
void put(Writer& w, const RuleAddReply& m) { w.u32(Tag::rule_id, m.rule_id); }

void put(Writer& w, const StatsReply& m) {
  for (const Counter& c : m.counters) {
    std::span<std::byte> v = w.value(Tag::counter, kCounterRecordMin + c.name.size());
    store_be64(v.data(), c.value);
    v[8] = std::byte{static_cast<std::uint8_t>(c.name.size())};
    std::memcpy(v.data() + kCounterRecordMin, c.name.data(), c.name.size());
  }
}

void put(Writer& w, const NodesReply& m) {
  if (!m.cursor.empty()) w.bytes(Tag::cursor, m.cursor);
  for (const NodeRecord& n : m.nodes) {
    const std::size_t ext = n.ethernet ? kNodeRecordEthernet : 0;
    std::byte* v = w.value(Tag::node, kNodeRecordMin + n.name.size() + ext).data();
    store_be16(v, n.id);
    store_be16(v + 2, n.queues);
    store_be32(v + 4, n.pid);
    store_be32(v + 8, n.memif_id);
    store_be32(v + 12, n.listeners);
    store_be32(v + 16, n.flows);
    store_be32(v + 20, n.rules);
    store_be64(v + 24, n.rx_frames);
    store_be64(v + 32, n.egress_allowed);
    store_be64(v + 40, n.egress_denied);
    v[48] = std::byte{static_cast<std::uint8_t>(n.name.size())};
    std::memcpy(v + kNodeRecordMin, n.name.data(), n.name.size());
    if (n.ethernet) {
      v[kNodeRecordMin + n.name.size()] = std::byte{kNodeKindEthernet};
      std::memcpy(v + kNodeRecordMin + n.name.size() + 1, n.mac.bytes.data(), 6);
    }
  }
}

void put(Writer& w, const PortsReply& m) {
  if (!m.cursor.empty()) w.bytes(Tag::cursor, m.cursor);
  for (const PortRecord& p : m.ports) {
    std::byte* v = w.value(Tag::port, kPortRecord).data();
    v[0] = std::byte{raw(p.proto)};
    v[1] = std::byte{static_cast<std::uint8_t>((p.group ? kPortFlagGroup : 0) | (p.listen ? kPortFlagListen : 0) |
                                               (p.lease ? kPortFlagLease : 0))};
    store_be16(v + 2, p.port);
    store_be16(v + 4, p.node);
    store_be16(v + 6, p.queue);
  }
}

void put(Writer& w, const FlowsReply& m) {
  if (!m.cursor.empty()) w.bytes(Tag::cursor, m.cursor);
  w.u32(Tag::total, m.total);
  for (const NodeFlow& f : m.flows) {
    std::byte* v = w.value(Tag::node_flow, kNodeFlowRecord).data();
    store_be16(v, f.node);
    write_flow(v + 2, f.flow);
  }
}

void put(Writer& w, const RulesReply& m) {
  if (!m.cursor.empty()) w.bytes(Tag::cursor, m.cursor);
  for (const RuleRecord& r : m.rules) {
    std::byte* v = w.value(Tag::rule, kRuleRecordMin + r.expression.size()).data();
    store_be32(v, r.id);
    store_be16(v + 4, r.node);
    store_be16(v + 6, r.queue);
    store_be16(v + 8, static_cast<std::uint16_t>(r.priority));
    store_be64(v + 10, r.hits);
    store_be16(v + 18, static_cast<std::uint16_t>(r.expression.size()));
    std::memcpy(v + kRuleRecordMin, r.expression.data(), r.expression.size());
  }
}

void put(Writer& w, const Error& m) {
  w.u16(Tag::error_code, static_cast<std::uint16_t>(m.code));
  if (!m.text.empty()) w.text(Tag::error_text, m.text);
}

// ---- decoding ------------------------------------------------------------------

enum class Presence : std::uint8_t { required, optional, repeated };

struct FieldSpec {
  Tag tag;
  Presence presence;
  std::size_t max_count = 1;  // for repeated fields
};

constexpr std::size_t kMaxFields = 12;

// The fields of one body, found in one pass. Every accessor checks the value
// length; the first problem sticks and later accessors return defaults.
class Decoder {
 public:
  explicit Decoder(std::span<const FieldSpec> spec) : spec_(spec) {}

  bool scan(std::span<const std::byte> body) {
    std::size_t off = 0;
    while (off < body.size()) {
      if (body.size() - off < kTlvHeaderSize)
        return fail("a TLV header is cut off at offset " + num(off) + " (" + num(body.size() - off) + " bytes left)");
      const std::uint16_t tag = load_be16(body.data() + off);
      const std::uint16_t len = load_be16(body.data() + off + 2);
      off += kTlvHeaderSize;
      if (len > body.size() - off)
        return fail(describe(tag) + ": a value of " + num(len) + " bytes runs past the end of the body (" +
                    num(body.size() - off) + " bytes left)");
      const std::span<const std::byte> value = body.subspan(off, len);
      off += len;
      const int i = index(static_cast<Tag>(tag));
      if (i < 0) {
        // Forward compatibility: skip what we do not know, unless its sender
        // said we must understand it.
        if (tag & kCriticalTag) return fail("unknown critical " + describe(tag));
        continue;
      }
      const FieldSpec& f = spec_[static_cast<std::size_t>(i)];
      if (f.presence == Presence::repeated) {
        auto& list = many_[static_cast<std::size_t>(i)];
        if (list.size() >= f.max_count)
          return fail(describe(tag) + ": more than " + num(f.max_count) + " entries");
        list.push_back(value);
      } else {
        auto& slot = one_[static_cast<std::size_t>(i)];
        if (slot) return fail(describe(tag) + " appears twice");
        slot = value;
      }
    }
    for (std::size_t i = 0; i < spec_.size(); ++i)
      if (spec_[i].presence == Presence::required && !one_[i]) return fail("required " + describe(spec_[i].tag) + " is missing");
    return true;
  }

  bool ok() const noexcept { return !problem_; }
  const std::string& problem() const { return *problem_; }

  bool fail(std::string text) {
    if (!problem_) problem_ = std::move(text);
    return false;
  }

  // The value of a single field, if present with exactly n bytes.
  std::optional<std::span<const std::byte>> fixed(Tag t, std::size_t n) {
    const int i = index(t);
    if (i < 0 || !one_[static_cast<std::size_t>(i)]) return std::nullopt;
    std::span<const std::byte> v = *one_[static_cast<std::size_t>(i)];
    if (v.size() != n) {
      fail(describe(t) + ": length " + num(v.size()) + ", expected " + num(n));
      return std::nullopt;
    }
    return v;
  }

  // The value of a single record field, if present with at least n bytes
  // (a later version may append to it).
  std::optional<std::span<const std::byte>> record(Tag t, std::size_t n) {
    const int i = index(t);
    if (i < 0 || !one_[static_cast<std::size_t>(i)]) return std::nullopt;
    std::span<const std::byte> v = *one_[static_cast<std::size_t>(i)];
    if (v.size() < n) {
      fail(describe(t) + ": length " + num(v.size()) + ", at least " + num(n) + " expected");
      return std::nullopt;
    }
    return v;
  }

  std::uint8_t u8(Tag t) {
    auto v = fixed(t, 1);
    return v ? static_cast<std::uint8_t>((*v)[0]) : 0;
  }
  std::uint16_t u16(Tag t) {
    auto v = fixed(t, 2);
    return v ? load_be16(v->data()) : 0;
  }
  std::uint32_t u32(Tag t) {
    auto v = fixed(t, 4);
    return v ? load_be32(v->data()) : 0;
  }
  bool boolean(Tag t) {
    const std::uint8_t b = u8(t);
    if (b > 1) fail(describe(t) + ": " + num(b) + " is neither 0 nor 1");
    return b == 1;
  }
  MacAddr mac(Tag t) {
    MacAddr m;
    if (auto v = fixed(t, 6)) std::memcpy(m.bytes.data(), v->data(), 6);
    return m;
  }
  std::string text(Tag t, std::size_t max) {
    const int i = index(t);
    if (i < 0 || !one_[static_cast<std::size_t>(i)]) return {};
    std::span<const std::byte> v = *one_[static_cast<std::size_t>(i)];
    if (v.size() > max) {
      fail(describe(t) + ": " + num(v.size()) + " bytes, over the limit of " + num(max));
      return {};
    }
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
  }
  // A variable-length field of 1..max bytes, if present.
  std::optional<std::span<const std::byte>> bytes(Tag t, std::size_t max) {
    const int i = index(t);
    if (i < 0 || !one_[static_cast<std::size_t>(i)]) return std::nullopt;
    std::span<const std::byte> v = *one_[static_cast<std::size_t>(i)];
    if (v.empty() || v.size() > max) {
      fail(describe(t) + ": length " + num(v.size()) + ", expected 1.." + num(max));
      return std::nullopt;
    }
    return v;
  }
  bool present(Tag t) const noexcept {
    const int i = index(t);
    return i >= 0 && one_[static_cast<std::size_t>(i)].has_value();
  }
  const std::vector<std::span<const std::byte>>& list(Tag t) const {
    static const std::vector<std::span<const std::byte>> kNone;
    const int i = index(t);
    return i < 0 ? kNone : many_[static_cast<std::size_t>(i)];
  }

 private:
  int index(Tag t) const noexcept {
    for (std::size_t i = 0; i < spec_.size(); ++i)
      if (spec_[i].tag == t) return static_cast<int>(i);
    return -1;
  }

  std::span<const FieldSpec> spec_;
  std::array<std::optional<std::span<const std::byte>>, kMaxFields> one_{};
  std::array<std::vector<std::span<const std::byte>>, kMaxFields> many_{};
  std::optional<std::string> problem_;
};

using P = Presence;

constexpr FieldSpec kHelloFields[] = {{Tag::name, P::required},     {Tag::pid, P::required},
                                      {Tag::queues, P::required},   {Tag::versions, P::required},
                                      {Tag::resume, P::optional},   {Tag::channel, P::repeated, kMaxQueues},
                                      {Tag::token, P::optional},    {Tag::ethernet, P::optional},
                                      {Tag::proof, P::optional}};
constexpr FieldSpec kAuthFields[] = {{Tag::nonce, P::required}};
constexpr FieldSpec kAuthReplyFields[] = {{Tag::nonce, P::required}, {Tag::proof, P::required}};
constexpr FieldSpec kListenFields[] = {
    {Tag::proto, P::required}, {Tag::local_port, P::required}, {Tag::group, P::optional}, {Tag::queue, P::required}};
constexpr FieldSpec kUnlistenFields[] = {
    {Tag::proto, P::required}, {Tag::local_port, P::required}, {Tag::queue, P::optional}};
constexpr FieldSpec kConnectFields[] = {{Tag::proto, P::required},
                                        {Tag::local_port, P::optional},
                                        {Tag::queue, P::required},
                                        {Tag::remote_addr, P::required},
                                        {Tag::remote_port, P::required}};
constexpr FieldSpec kReleaseFields[] = {{Tag::proto, P::required},
                                        {Tag::local_port, P::required},
                                        {Tag::remote_addr, P::required},
                                        {Tag::remote_port, P::required}};
constexpr FieldSpec kResyncFields[] = {{Tag::listener, P::repeated, kMaxResyncListeners},
                                       {Tag::flow, P::repeated, kMaxResyncFlows},
                                       {Tag::more, P::optional}};
constexpr FieldSpec kRuleAddFields[] = {{Tag::queue, P::required},
                                        {Tag::expression, P::required},
                                        {Tag::priority, P::optional},
                                        {Tag::node_id, P::optional}};
constexpr FieldSpec kPageFields[] = {{Tag::cursor, P::optional}, {Tag::limit, P::optional}};
constexpr FieldSpec kFlowsFields[] = {{Tag::node_id, P::optional}, {Tag::cursor, P::optional}, {Tag::limit, P::optional}};
constexpr FieldSpec kNodesReplyFields[] = {{Tag::node, P::repeated, kMaxNodeRecords}, {Tag::cursor, P::optional}};
constexpr FieldSpec kPortsReplyFields[] = {{Tag::port, P::repeated, kMaxPortRecords}, {Tag::cursor, P::optional}};
constexpr FieldSpec kFlowsReplyFields[] = {
    {Tag::node_flow, P::repeated, kMaxFlowRecords}, {Tag::cursor, P::optional}, {Tag::total, P::required}};
constexpr FieldSpec kRulesReplyFields[] = {{Tag::rule, P::repeated, kMaxRuleRecords}, {Tag::cursor, P::optional}};
constexpr FieldSpec kRuleIdFields[] = {{Tag::rule_id, P::required}};
constexpr FieldSpec kHelloReplyFields[] = {{Tag::version, P::required},
                                           {Tag::node_id, P::required},
                                           {Tag::memif_socket, P::required},
                                           {Tag::channel, P::repeated, kMaxQueues},
                                           {Tag::filterd_mac, P::required},
                                           {Tag::mtu, P::required},
                                           {Tag::address, P::required},
                                           {Tag::prefix_len, P::required},
                                           {Tag::gateway, P::optional},
                                           {Tag::secret, P::required},
                                           {Tag::heartbeat_ms, P::required},
                                           {Tag::central, P::optional}};
constexpr FieldSpec kPortFields[] = {{Tag::local_port, P::required}};
constexpr FieldSpec kLeaseFields[] = {
    {Tag::proto, P::required}, {Tag::queue, P::required}, {Tag::count, P::optional}, {Tag::ports, P::optional}};
constexpr FieldSpec kLeaseReplyFields[] = {{Tag::ports, P::optional}};
constexpr FieldSpec kStatsReplyFields[] = {{Tag::counter, P::repeated, kMaxCounters}};
constexpr FieldSpec kErrorFields[] = {{Tag::error_code, P::required}, {Tag::error_text, P::optional}};

static_assert(std::size(kHelloReplyFields) <= kMaxFields);

// Channel records (HELLO_REPLY, and a resuming HELLO); false after a bad one.
bool take_channels(Decoder& d, const std::vector<std::span<const std::byte>>& records, std::vector<Channel>& out) {
  out.reserve(records.size());  // capped by the scan
  for (std::span<const std::byte> v : records) {
    if (v.size() < kChannelRecord) {
      d.fail(describe(Tag::channel) + ": length " + num(v.size()) + ", at least " + num(kChannelRecord) + " expected");
      return false;
    }
    Channel& c = out.emplace_back();
    c.memif_id = load_be32(v.data());
    std::memcpy(c.node_mac.bytes.data(), v.data() + 4, 6);
  }
  return true;
}

Body take(Decoder& d, Hello) {
  Hello m;
  m.name = d.text(Tag::name, kMaxNodeName);
  m.pid = d.u32(Tag::pid);
  m.queues = d.u16(Tag::queues);
  if (auto v = d.fixed(Tag::versions, 2)) {
    m.version_min = static_cast<std::uint8_t>((*v)[0]);
    m.version_max = static_cast<std::uint8_t>((*v)[1]);
  }
  if (auto t = d.bytes(Tag::token, kMaxToken)) m.token.assign(t->begin(), t->end());
  if (auto p = d.fixed(Tag::proof, kProofSize)) std::memcpy(m.proof.emplace().data(), p->data(), kProofSize);
  if (d.present(Tag::ethernet)) m.ethernet = d.mac(Tag::ethernet);
  const auto& channels = d.list(Tag::channel);
  std::optional<std::span<const std::byte>> r = d.record(Tag::resume, kResumeRecord);
  if (!r) {
    if (!channels.empty()) d.fail(describe(Tag::channel) + " without " + describe(Tag::resume));
    return m;
  }
  if (static_cast<std::uint8_t>((*r)[0]) != kResumeFormat) {
    d.fail(describe(Tag::resume) + ": format " + num(static_cast<std::uint8_t>((*r)[0])) + ", this receiver knows " +
           num(kResumeFormat));
    return m;
  }
  if ((*r)[1] != std::byte{0}) {
    d.fail(describe(Tag::resume) + ": unknown flags " + hex(static_cast<std::uint8_t>((*r)[1]), 2));
    return m;
  }
  Resume& res = m.resume.emplace();
  res.node_id = load_be16(r->data() + 2);
  if (!take_channels(d, channels, res.channels)) m.resume.reset();
  return m;
}

Body take(Decoder& d, Listen) {
  Listen m;
  m.proto = static_cast<Proto>(d.u8(Tag::proto));
  m.port = d.u16(Tag::local_port);
  m.group = d.boolean(Tag::group);
  m.queue = d.u16(Tag::queue);
  return m;
}

Body take(Decoder& d, Unlisten) {
  Unlisten m;
  m.proto = static_cast<Proto>(d.u8(Tag::proto));
  m.port = d.u16(Tag::local_port);
  if (d.present(Tag::queue)) m.queue = d.u16(Tag::queue);
  return m;
}

Body take(Decoder& d, Connect) {
  Connect m;
  m.proto = static_cast<Proto>(d.u8(Tag::proto));
  m.local_port = d.u16(Tag::local_port);
  m.queue = d.u16(Tag::queue);
  m.remote_addr.value = d.u32(Tag::remote_addr);
  m.remote_port = d.u16(Tag::remote_port);
  return m;
}

Body take(Decoder& d, Release) {
  Release m;
  m.proto = static_cast<Proto>(d.u8(Tag::proto));
  m.local_port = d.u16(Tag::local_port);
  m.remote_addr.value = d.u32(Tag::remote_addr);
  m.remote_port = d.u16(Tag::remote_port);
  return m;
}

Body take(Decoder& d, Resync) {
  Resync m;
  const auto& listeners = d.list(Tag::listener);
  m.listeners.reserve(listeners.size());  // capped by the scan
  for (std::span<const std::byte> v : listeners) {
    if (v.size() < kListenerRecord) {
      d.fail(describe(Tag::listener) + ": length " + num(v.size()) + ", at least " + num(kListenerRecord) + " expected");
      return m;
    }
    const auto flags = static_cast<std::uint8_t>(v[1]);
    if (flags & ~kListenerFlagGroup) {
      d.fail(describe(Tag::listener) + ": unknown flags " + hex(flags, 2));
      return m;
    }
    ListenerEntry& l = m.listeners.emplace_back();
    l.proto = static_cast<Proto>(v[0]);
    l.group = (flags & kListenerFlagGroup) != 0;
    l.port = load_be16(v.data() + 2);
    l.queue = load_be16(v.data() + 4);
  }
  const auto& flows = d.list(Tag::flow);
  m.flows.reserve(flows.size());
  for (std::span<const std::byte> v : flows) {
    if (v.size() < kFlowRecord) {
      d.fail(describe(Tag::flow) + ": length " + num(v.size()) + ", at least " + num(kFlowRecord) + " expected");
      return m;
    }
    const auto flags = static_cast<std::uint8_t>(v[1]);
    if (flags & ~kFlowFlagAccepted) {
      d.fail(describe(Tag::flow) + ": unknown flags " + hex(flags, 2));
      return m;
    }
    m.flows.push_back(read_flow(v.data()));
  }
  m.more = d.boolean(Tag::more);
  return m;
}

Body take(Decoder& d, RuleAdd) {
  RuleAdd m;
  m.queue = d.u16(Tag::queue);
  m.expression = d.text(Tag::expression, kMaxExpression);
  m.priority = static_cast<std::int16_t>(d.u16(Tag::priority));
  m.node = d.u16(Tag::node_id);
  if (d.present(Tag::node_id) && m.node == 0) d.fail(describe(Tag::node_id) + ": 0 (leave the field out instead)");
  return m;
}

Cursor take_cursor(Decoder& d) {
  Cursor c;
  if (auto v = d.bytes(Tag::cursor, kMaxCursor)) c.assign(v->begin(), v->end());
  return c;
}

// An explicit limit of 0 would mean the same as none: only one encoding.
std::uint32_t take_limit(Decoder& d) {
  const std::uint32_t limit = d.u32(Tag::limit);
  if (d.present(Tag::limit) && limit == 0) d.fail(describe(Tag::limit) + ": 0 (leave the field out instead)");
  return limit;
}

Body take(Decoder& d, Nodes) {
  Nodes m;
  m.cursor = take_cursor(d);
  m.limit = take_limit(d);
  return m;
}

Body take(Decoder& d, Ports) {
  Ports m;
  m.cursor = take_cursor(d);
  m.limit = take_limit(d);
  return m;
}

Body take(Decoder& d, Flows) {
  Flows m;
  m.node = d.u16(Tag::node_id);
  if (d.present(Tag::node_id) && m.node == 0) d.fail(describe(Tag::node_id) + ": 0 (leave the field out instead)");
  m.cursor = take_cursor(d);
  m.limit = take_limit(d);
  return m;
}

Body take(Decoder& d, Rules) {
  Rules m;
  m.cursor = take_cursor(d);
  m.limit = take_limit(d);
  return m;
}

FlowEntry read_flow(const std::byte* v) {
  FlowEntry f;
  f.proto = static_cast<Proto>(v[0]);
  f.accepted = (static_cast<std::uint8_t>(v[1]) & kFlowFlagAccepted) != 0;
  f.local_port = load_be16(v + 2);
  f.remote_addr.value = load_be32(v + 4);
  f.remote_port = load_be16(v + 8);
  f.queue = load_be16(v + 10);
  return f;
}

Body take(Decoder& d, NodesReply) {
  NodesReply m;
  const auto& nodes = d.list(Tag::node);
  m.nodes.reserve(nodes.size());
  for (std::span<const std::byte> v : nodes) {
    const std::size_t name_len = v.size() >= kNodeRecordMin ? static_cast<std::uint8_t>(v[48]) : 0;
    if (v.size() < kNodeRecordMin + name_len) {
      d.fail(describe(Tag::node) + ": length " + num(v.size()) + ", too short for its name");
      return m;
    }
    if (name_len > kMaxNodeName) {
      d.fail(describe(Tag::node) + ": a name of " + num(name_len) + " bytes, over the limit of " + num(kMaxNodeName));
      return m;
    }
    NodeRecord& n = m.nodes.emplace_back();
    const std::byte* p = v.data();
    n.id = load_be16(p);
    n.queues = load_be16(p + 2);
    n.pid = load_be32(p + 4);
    n.memif_id = load_be32(p + 8);
    n.listeners = load_be32(p + 12);
    n.flows = load_be32(p + 16);
    n.rules = load_be32(p + 20);
    n.rx_frames = load_be64(p + 24);
    n.egress_allowed = load_be64(p + 32);
    n.egress_denied = load_be64(p + 40);
    n.name.assign(reinterpret_cast<const char*>(p + kNodeRecordMin), name_len);
    const std::size_t ext = kNodeRecordMin + name_len;
    if (v.size() >= ext + kNodeRecordEthernet && static_cast<std::uint8_t>(p[ext]) == kNodeKindEthernet) {
      n.ethernet = true;
      std::memcpy(n.mac.bytes.data(), p + ext + 1, 6);
    }
  }
  m.cursor = take_cursor(d);
  return m;
}

Body take(Decoder& d, PortsReply) {
  PortsReply m;
  const auto& ports = d.list(Tag::port);
  m.ports.reserve(ports.size());
  for (std::span<const std::byte> v : ports) {
    if (v.size() < kPortRecord) {
      d.fail(describe(Tag::port) + ": length " + num(v.size()) + ", at least " + num(kPortRecord) + " expected");
      return m;
    }
    const auto flags = static_cast<std::uint8_t>(v[1]);
    if (flags & ~(kPortFlagGroup | kPortFlagListen | kPortFlagLease)) {
      d.fail(describe(Tag::port) + ": unknown flags " + hex(flags, 2));
      return m;
    }
    PortRecord& p = m.ports.emplace_back();
    p.proto = static_cast<Proto>(v[0]);
    p.group = (flags & kPortFlagGroup) != 0;
    p.listen = (flags & kPortFlagListen) != 0;
    p.lease = (flags & kPortFlagLease) != 0;
    p.port = load_be16(v.data() + 2);
    p.node = load_be16(v.data() + 4);
    p.queue = load_be16(v.data() + 6);
  }
  m.cursor = take_cursor(d);
  return m;
}

Body take(Decoder& d, FlowsReply) {
  FlowsReply m;
  const auto& flows = d.list(Tag::node_flow);
  m.flows.reserve(flows.size());
  for (std::span<const std::byte> v : flows) {
    if (v.size() < kNodeFlowRecord) {
      d.fail(describe(Tag::node_flow) + ": length " + num(v.size()) + ", at least " + num(kNodeFlowRecord) +
             " expected");
      return m;
    }
    if (v[3] != std::byte{0}) {
      d.fail(describe(Tag::node_flow) + ": unknown flags " + hex(static_cast<std::uint8_t>(v[3]), 2));
      return m;
    }
    m.flows.push_back(NodeFlow{load_be16(v.data()), read_flow(v.data() + 2)});
  }
  m.cursor = take_cursor(d);
  m.total = d.u32(Tag::total);
  return m;
}

Body take(Decoder& d, RulesReply) {
  RulesReply m;
  const auto& rules = d.list(Tag::rule);
  m.rules.reserve(rules.size());
  for (std::span<const std::byte> v : rules) {
    const std::size_t len = v.size() >= kRuleRecordMin ? load_be16(v.data() + 18) : 0;
    if (v.size() < kRuleRecordMin + len) {
      d.fail(describe(Tag::rule) + ": length " + num(v.size()) + ", too short for its expression");
      return m;
    }
    if (len > kMaxExpression) {
      d.fail(describe(Tag::rule) + ": an expression of " + num(len) + " bytes, over the limit of " +
             num(kMaxExpression));
      return m;
    }
    RuleRecord& r = m.rules.emplace_back();
    r.id = load_be32(v.data());
    r.node = load_be16(v.data() + 4);
    r.queue = load_be16(v.data() + 6);
    r.priority = static_cast<std::int16_t>(load_be16(v.data() + 8));
    r.hits = load_be64(v.data() + 10);
    r.expression.assign(reinterpret_cast<const char*>(v.data() + kRuleRecordMin), len);
  }
  m.cursor = take_cursor(d);
  return m;
}

Body take(Decoder& d, RuleDel) { return RuleDel{d.u32(Tag::rule_id)}; }
Body take(Decoder&, Stats) { return Stats{}; }
Body take(Decoder&, Bye) { return Bye{}; }
Body take(Decoder&, Ping) { return Ping{}; }
Body take(Decoder&, Ok) { return Ok{}; }

Body take(Decoder& d, HelloReply) {
  HelloReply m;
  m.version = d.u8(Tag::version);
  m.node_id = d.u16(Tag::node_id);
  m.memif_socket = d.text(Tag::memif_socket, kMaxMemifSocket);
  if (!take_channels(d, d.list(Tag::channel), m.channels)) return m;
  m.filterd_mac = d.mac(Tag::filterd_mac);
  m.mtu = d.u16(Tag::mtu);
  m.address.value = d.u32(Tag::address);
  m.prefix_len = d.u8(Tag::prefix_len);
  m.gateway.value = d.u32(Tag::gateway);
  if (auto v = d.fixed(Tag::secret, m.secret.size())) std::memcpy(m.secret.data(), v->data(), m.secret.size());
  m.heartbeat_ms = d.u32(Tag::heartbeat_ms);
  m.central = d.boolean(Tag::central);
  return m;
}

Body take(Decoder& d, ListenReply) { return ListenReply{d.u16(Tag::local_port)}; }
Body take(Decoder& d, ConnectReply) { return ConnectReply{d.u16(Tag::local_port)}; }

// A list of u16 ports: 1..kMaxLeasePorts of them, so an even 2..2048 bytes.
std::vector<std::uint16_t> take_ports(Decoder& d) {
  std::vector<std::uint16_t> out;
  std::optional<std::span<const std::byte>> v = d.bytes(Tag::ports, 2 * kMaxLeasePorts);
  if (!v) return out;
  if (v->size() % 2 != 0) {
    d.fail(describe(Tag::ports) + ": length " + num(v->size()) + " is odd");
    return out;
  }
  out.reserve(v->size() / 2);
  for (std::size_t i = 0; i < v->size(); i += 2) out.push_back(load_be16(v->data() + i));
  return out;
}

Body take(Decoder& d, Lease) {
  Lease m;
  m.proto = static_cast<Proto>(d.u8(Tag::proto));
  m.queue = d.u16(Tag::queue);
  m.count = d.u16(Tag::count);
  m.ports = take_ports(d);
  return m;
}

Body take(Decoder& d, LeaseReply) { return LeaseReply{take_ports(d)}; }
Body take(Decoder& d, Auth) {
  Auth m;
  if (auto n = d.fixed(Tag::nonce, kNonceSize)) std::memcpy(m.nonce.data(), n->data(), kNonceSize);
  return m;
}
Body take(Decoder& d, AuthReply) {
  AuthReply m;
  if (auto n = d.fixed(Tag::nonce, kNonceSize)) std::memcpy(m.nonce.data(), n->data(), kNonceSize);
  if (auto p = d.fixed(Tag::proof, kProofSize)) std::memcpy(m.proof.data(), p->data(), kProofSize);
  return m;
}
Body take(Decoder& d, RuleAddReply) { return RuleAddReply{d.u32(Tag::rule_id)}; }

Body take(Decoder& d, StatsReply) {
  StatsReply m;
  const auto& counters = d.list(Tag::counter);
  m.counters.reserve(counters.size());
  for (std::span<const std::byte> v : counters) {
    const std::size_t name_len = v.size() >= kCounterRecordMin ? static_cast<std::uint8_t>(v[8]) : 0;
    if (v.size() < kCounterRecordMin + name_len) {
      d.fail(describe(Tag::counter) + ": length " + num(v.size()) + ", too short for its name");
      return m;
    }
    if (name_len > kMaxCounterName) {
      d.fail(describe(Tag::counter) + ": a name of " + num(name_len) + " bytes, over the limit of " +
             num(kMaxCounterName));
      return m;
    }
    Counter& c = m.counters.emplace_back();
    c.value = load_be64(v.data());
    c.name.assign(reinterpret_cast<const char*>(v.data() + kCounterRecordMin), name_len);
  }
  return m;
}

Body take(Decoder& d, Error) {
  Error m;
  m.code = static_cast<ErrorCode>(d.u16(Tag::error_code));
  m.text = d.text(Tag::error_text, kMaxErrorText);
  return m;
}

template <class M>
std::variant<Body, Problem> decode_as(std::span<const FieldSpec> spec, std::span<const std::byte> body) {
  Decoder d(spec);
  if (d.scan(body)) {
    Body b = take(d, M{});
    if (d.ok()) {
      if (Check v = check_body(b)) return Problem{ErrorCode::bad_message, std::move(v->text)};
      return b;
    }
  }
  return Problem{ErrorCode::bad_message, std::string(to_string(M::kType)) + ": " + d.problem()};
}

}  // namespace

// ---- names ---------------------------------------------------------------------

MsgType type_of(const Body& body) noexcept {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kType; }, body);
}

const char* to_string(MsgType type) noexcept {
  switch (type) {
    case MsgType::hello: return "HELLO";
    case MsgType::listen: return "LISTEN";
    case MsgType::unlisten: return "UNLISTEN";
    case MsgType::connect: return "CONNECT";
    case MsgType::release: return "RELEASE";
    case MsgType::resync: return "RESYNC";
    case MsgType::rule_add: return "RULE_ADD";
    case MsgType::rule_del: return "RULE_DEL";
    case MsgType::stats: return "STATS";
    case MsgType::bye: return "BYE";
    case MsgType::ping: return "PING";
    case MsgType::nodes: return "NODES";
    case MsgType::ports: return "PORTS";
    case MsgType::flows: return "FLOWS";
    case MsgType::rules: return "RULES";
    case MsgType::lease: return "LEASE";
    case MsgType::auth: return "AUTH";
    case MsgType::ok: return "OK";
    case MsgType::hello_reply: return "HELLO_REPLY";
    case MsgType::listen_reply: return "LISTEN_REPLY";
    case MsgType::connect_reply: return "CONNECT_REPLY";
    case MsgType::rule_add_reply: return "RULE_ADD_REPLY";
    case MsgType::stats_reply: return "STATS_REPLY";
    case MsgType::nodes_reply: return "NODES_REPLY";
    case MsgType::ports_reply: return "PORTS_REPLY";
    case MsgType::flows_reply: return "FLOWS_REPLY";
    case MsgType::rules_reply: return "RULES_REPLY";
    case MsgType::lease_reply: return "LEASE_REPLY";
    case MsgType::auth_reply: return "AUTH_REPLY";
    case MsgType::error: return "ERROR";
  }
  return "?";
}

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::bad_message: return "bad_message";
    case ErrorCode::unsupported_version: return "unsupported_version";
    case ErrorCode::not_registered: return "not_registered";
    case ErrorCode::port_in_use: return "port_in_use";
    case ErrorCode::no_ports: return "no_ports";
    case ErrorCode::permission_denied: return "permission_denied";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::too_many: return "too_many";
    case ErrorCode::bad_rule: return "bad_rule";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

const char* to_string(Proto proto) noexcept {
  switch (proto) {
    case Proto::icmp: return "icmp";
    case Proto::tcp: return "tcp";
    case Proto::udp: return "udp";
  }
  return "?";
}

MsgType reply_type(MsgType request) noexcept {
  switch (request) {
    case MsgType::hello: return MsgType::hello_reply;
    case MsgType::listen: return MsgType::listen_reply;
    case MsgType::connect: return MsgType::connect_reply;
    case MsgType::rule_add: return MsgType::rule_add_reply;
    case MsgType::stats: return MsgType::stats_reply;
    case MsgType::nodes: return MsgType::nodes_reply;
    case MsgType::ports: return MsgType::ports_reply;
    case MsgType::flows: return MsgType::flows_reply;
    case MsgType::rules: return MsgType::rules_reply;
    case MsgType::lease: return MsgType::lease_reply;
    case MsgType::auth: return MsgType::auth_reply;
    case MsgType::unlisten:
    case MsgType::release:
    case MsgType::resync:
    case MsgType::rule_del:
    case MsgType::bye:
    case MsgType::ping: return MsgType::ok;
    default: return MsgType::error;  // not a request
  }
}

// ---- validation and encoding -----------------------------------------------------

std::optional<Problem> validate(const Message& m) {
  if (Check v = check_body(m.body)) return Problem{ErrorCode::bad_message, std::move(v->text)};
  return std::nullopt;
}

Status encode_into(const Message& m, std::vector<std::byte>& out) {
  if (Check v = check_body(m.body)) return v->errc;
  const std::size_t start = out.size();
  out.resize(start + kHeaderSize);
  Writer w(out);
  std::visit([&w](const auto& body) { put(w, body); }, m.body);
  const std::size_t body_length = out.size() - start - kHeaderSize;
  if (body_length > kMaxBody) {  // the field limits keep every message under it
    out.resize(start);
    return Errc::too_large;
  }
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(type_of(m.body));
  h.body_length = static_cast<std::uint32_t>(body_length);
  h.request_id = m.request_id;
  h.write(std::span<std::byte, kHeaderSize>(out.data() + start, kHeaderSize));
  return {};
}

Result<std::vector<std::byte>> encode(const Message& m) {
  std::vector<std::byte> out;
  if (Status s = encode_into(m, out); !s) return s.error();
  return out;
}

Message make_error(std::uint32_t request_id, ErrorCode code, std::string_view text) {
  if (code == ErrorCode{0}) code = ErrorCode::internal;
  Error e;
  e.code = code;
  e.text.reserve(std::min(text.size(), kMaxErrorText));
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t len = text[i] == '\0' ? 0 : char_length(text, i);
    std::string_view piece = len ? text.substr(i, len) : std::string_view("?");
    if (e.text.size() + piece.size() > kMaxErrorText) break;
    e.text += piece;
    i += len ? len : 1;
  }
  return Message{request_id, std::move(e)};
}

std::vector<Resync> split_resync(std::span<const ListenerEntry> listeners, std::span<const FlowEntry> flows) {
  std::vector<Resync> out;
  std::size_t li = 0;
  std::size_t fi = 0;
  do {
    Resync& r = out.emplace_back();
    const std::size_t ln = std::min(kMaxResyncListeners, listeners.size() - li);
    const std::size_t fn = std::min(kMaxResyncFlows, flows.size() - fi);
    r.listeners.assign(listeners.begin() + static_cast<std::ptrdiff_t>(li),
                       listeners.begin() + static_cast<std::ptrdiff_t>(li + ln));
    r.flows.assign(flows.begin() + static_cast<std::ptrdiff_t>(fi), flows.begin() + static_cast<std::ptrdiff_t>(fi + fn));
    li += ln;
    fi += fn;
    r.more = li < listeners.size() || fi < flows.size();
  } while (out.back().more);
  return out;
}

// ---- decoding --------------------------------------------------------------------

std::variant<Body, Problem> decode_body(std::uint8_t type, std::span<const std::byte> body) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::hello: return decode_as<Hello>(kHelloFields, body);
    case MsgType::listen: return decode_as<Listen>(kListenFields, body);
    case MsgType::unlisten: return decode_as<Unlisten>(kUnlistenFields, body);
    case MsgType::connect: return decode_as<Connect>(kConnectFields, body);
    case MsgType::release: return decode_as<Release>(kReleaseFields, body);
    case MsgType::resync: return decode_as<Resync>(kResyncFields, body);
    case MsgType::rule_add: return decode_as<RuleAdd>(kRuleAddFields, body);
    case MsgType::rule_del: return decode_as<RuleDel>(kRuleIdFields, body);
    case MsgType::stats: return decode_as<Stats>({}, body);
    case MsgType::bye: return decode_as<Bye>({}, body);
    case MsgType::ping: return decode_as<Ping>({}, body);
    case MsgType::nodes: return decode_as<Nodes>(kPageFields, body);
    case MsgType::ports: return decode_as<Ports>(kPageFields, body);
    case MsgType::flows: return decode_as<Flows>(kFlowsFields, body);
    case MsgType::rules: return decode_as<Rules>(kPageFields, body);
    case MsgType::lease: return decode_as<Lease>(kLeaseFields, body);
    case MsgType::auth: return decode_as<Auth>(kAuthFields, body);
    case MsgType::nodes_reply: return decode_as<NodesReply>(kNodesReplyFields, body);
    case MsgType::ports_reply: return decode_as<PortsReply>(kPortsReplyFields, body);
    case MsgType::flows_reply: return decode_as<FlowsReply>(kFlowsReplyFields, body);
    case MsgType::rules_reply: return decode_as<RulesReply>(kRulesReplyFields, body);
    case MsgType::lease_reply: return decode_as<LeaseReply>(kLeaseReplyFields, body);
    case MsgType::auth_reply: return decode_as<AuthReply>(kAuthReplyFields, body);
    case MsgType::ok: return decode_as<Ok>({}, body);
    case MsgType::hello_reply: return decode_as<HelloReply>(kHelloReplyFields, body);
    case MsgType::listen_reply: return decode_as<ListenReply>(kPortFields, body);
    case MsgType::connect_reply: return decode_as<ConnectReply>(kPortFields, body);
    case MsgType::rule_add_reply: return decode_as<RuleAddReply>(kRuleIdFields, body);
    case MsgType::stats_reply: return decode_as<StatsReply>(kStatsReplyFields, body);
    case MsgType::error: return decode_as<Error>(kErrorFields, body);
  }
  return Problem{ErrorCode::bad_message, "unknown message type " + hex(type, 2)};
}

bool should_answer(const ProtocolError& e) noexcept { return !e.must_drop() && is_request_type(e.type); }

Message make_error(const ProtocolError& e) { return make_error(e.request_id, e.code, e.text); }

void FrameReader::feed(std::span<const std::byte> bytes) {
  if (broken_ || bytes.empty()) return;
  // Drop the frames already returned once they are half the buffer, so the
  // copying stays linear in the bytes fed.
  if (pos_ != 0 && pos_ * 2 >= buf_.size()) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
    pos_ = 0;
  }
  buf_.insert(buf_.end(), bytes.begin(), bytes.end());
}

ReadResult FrameReader::next() {
  if (broken_) return *broken_;
  const std::size_t avail = buf_.size() - pos_;
  const std::byte* p = buf_.data() + pos_;

  auto drop = [this](ErrorCode code, std::string text, std::uint8_t type, std::uint32_t id) {
    broken_ = ProtocolError{Severity::drop, code, id, type, std::move(text)};
    buf_.clear();
    buf_.shrink_to_fit();
    pos_ = 0;
    return ReadResult(*broken_);
  };

  // Check what has arrived of the header at once, so a stream of garbage is
  // refused at its first wrong byte rather than after 16.
  std::array<std::byte, 4> magic;
  store_be32(magic.data(), kMagic);
  const std::size_t seen = std::min<std::size_t>(avail, 4);
  if (seen != 0 && std::memcmp(p, magic.data(), seen) != 0) {
    std::uint32_t got = 0;
    for (std::size_t i = 0; i < seen; ++i) got = (got << 8) | static_cast<std::uint8_t>(p[i]);
    return drop(ErrorCode::bad_message,
                "bad magic " + hex(got, static_cast<int>(seen * 2)) + " (expected " + hex(kMagic, 8) + " \"XKC1\")", 0,
                0);
  }
  if (avail > 4 && static_cast<std::uint8_t>(p[4]) != kVersion)
    return drop(ErrorCode::unsupported_version,
                "framing version " + num(static_cast<std::uint8_t>(p[4])) + " (this side speaks " + num(kVersion) + ")",
                0, 0);
  if (avail < kHeaderSize) return ReadResult::NeedMore{kHeaderSize - avail};

  const FrameHeader h = FrameHeader::read(std::span<const std::byte, kHeaderSize>(p, kHeaderSize));
  if (h.body_length > kMaxBody)
    return drop(ErrorCode::bad_message,
                "body length " + num(h.body_length) + " is over the limit of " + num(kMaxBody), h.type,
                h.request_id);
  if (avail - kHeaderSize < h.body_length) return ReadResult::NeedMore{kHeaderSize + h.body_length - avail};

  const std::span<const std::byte> body(p + kHeaderSize, h.body_length);
  auto reject = [&h](std::string text) {
    return ReadResult(ProtocolError{Severity::reject, ErrorCode::bad_message, h.request_id, h.type, std::move(text)});
  };
  ReadResult out = [&]() -> ReadResult {
    if (h.flags != 0) return reject("flags " + hex(h.flags, 4) + " are not zero");
    std::variant<Body, Problem> decoded = decode_body(h.type, body);
    if (Problem* pr = std::get_if<Problem>(&decoded)) return reject(std::move(pr->text));
    return Message{h.request_id, std::move(std::get<Body>(decoded))};
  }();

  pos_ += kHeaderSize + h.body_length;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
    if (buf_.capacity() > 4 * (kHeaderSize + kMaxBody)) buf_.shrink_to_fit();
  }
  return out;
}

}  // namespace xk::filterd::ctl

// The filterd control protocol codec (docs/control-protocol.md).
//
// Every message and record is described once below, in the words of
// tlv_codec.hpp; that description encodes, decodes and checks it. Decoding
// walks a body once, checking every TLV length against what is left, then
// reads the fields it found and runs the same checks the encoder runs.
// Nothing is allocated before its size was checked against a cap, so a
// hostile peer can make us hold at most one frame.
#include "xk/filterd/control.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "tlv_codec.hpp"

namespace xk::filterd::ctl {
namespace tlv {

std::string hex(std::uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*X", digits, static_cast<unsigned>(v));
  return buf;
}

const char* tag_name(Tag tag) noexcept {
  switch (tag) {
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
    case Tag::flow6: return "flow6";
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
    case Tag::address6: return "address6";
    case Tag::prefix6_len: return "prefix6_len";
    case Tag::gateway6: return "gateway6";
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
    case Tag::node_flow6: return "node_flow6";
  }
  return "unknown";
}

std::string describe(std::uint16_t tag) {
  return "tag " + hex(tag, 4) + " (" + tag_name(static_cast<Tag>(tag)) + ")";
}
std::string describe(Tag tag) { return describe(static_cast<std::uint16_t>(tag)); }

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

bool Decoder::scan(std::span<const std::byte> body) {
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
      if (list.size() >= f.max_count) return fail(describe(tag) + ": more than " + num(f.max_count) + " entries");
      list.push_back(value);
    } else {
      auto& slot = one_[static_cast<std::size_t>(i)];
      if (slot) return fail(describe(tag) + " appears twice");
      slot = value;
    }
  }
  for (std::size_t i = 0; i < spec_.size(); ++i)
    if (spec_[i].presence == Presence::required && !one_[i])
      return fail("required " + describe(spec_[i].tag) + " is missing");
  return true;
}

}  // namespace tlv

namespace {

using namespace tlv;

// Length in bytes of the valid UTF-8 character at s[i], 0 if there is none.
std::size_t char_length(std::string_view s, std::size_t i) noexcept {
  for (std::size_t len = 1; len <= 4 && i + len <= s.size(); ++len)
    if (valid_text(s.substr(i, len))) return len;
  return 0;
}

// ---- rules for one value -------------------------------------------------------------

std::string named(std::string_view what, std::uint64_t v) { return std::string(what) + " " + num(v); }

template <class T>
Check nonzero(const T& v, std::string_view what) {
  if (v == T{}) return bad(std::string(what) + " is 0");
  return std::nullopt;
}

// Listeners are TCP or UDP; flows may also be ICMP echo "connections" (a
// node's ping), keyed by the echo identifier in place of the local port.
Check listener_proto(const Proto& p, std::string_view what) {
  if (p == Proto::tcp || p == Proto::udp) return std::nullopt;
  return bad(named(what, static_cast<std::uint8_t>(p)) + " is neither tcp (6) nor udp (17)");
}

Check flow_proto(const Proto& p, std::string_view what) {
  if (p == Proto::tcp || p == Proto::udp || p == Proto::icmp) return std::nullopt;
  return bad(named(what, static_cast<std::uint8_t>(p)) + " is not icmp (1), tcp (6) or udp (17)");
}

Check lease_proto(const Proto& p, std::string_view what) {
  if (p == Proto::tcp) return std::nullopt;
  return bad(named(what, static_cast<std::uint8_t>(p)) + ": leases are tcp (6)");
}

Check queue_index(const std::uint16_t& q, std::string_view what) {
  if (q < kMaxQueues) return std::nullopt;
  return bad(named(what, q) + " is not below " + num(kMaxQueues));
}

Check queue_count(const std::uint16_t& n, std::string_view what) {
  if (n != 0 && n <= kMaxQueues) return std::nullopt;
  return bad(named(what, n) + " is not in 1.." + num(kMaxQueues));
}

Check specified_addr(const IpAddr& a, std::string_view what) {
  if (!a.is_unspecified()) return std::nullopt;
  return bad(std::string(what) + " is " + (a.is_v4() ? "0.0.0.0" : "::"));
}

Check lease_count(const std::uint16_t& n, std::string_view what) {
  if (n <= kMaxLeasePorts) return std::nullopt;
  return bad(named(what, n) + " is over " + num(kMaxLeasePorts));
}

Check usable_mtu(const std::uint16_t& mtu, std::string_view what) {
  if (mtu >= kMinMtu) return std::nullopt;
  return bad(named(what, mtu) + " is below " + num(kMinMtu));
}

Check prefix_length(const std::uint8_t& n, std::string_view what) {
  if (n <= 32) return std::nullopt;
  return bad(named(what, n) + " is over 32");
}

Check prefix6_length(const std::uint8_t& n, std::string_view what) {
  if (n <= 128) return std::nullopt;
  return bad(named(what, n) + " is over 128");
}

// ---- rules across fields -------------------------------------------------------------

// An ICMP echo flow has no remote port; a TCP or UDP flow must have one.
template <class M>
Check remote_port_fits_proto(const M& m) {
  if (m.proto == Proto::icmp) {
    if (m.remote_port != 0) return bad("remote port " + num(m.remote_port) + " for an icmp flow (must be 0)");
    return std::nullopt;
  }
  if (m.remote_port == 0) return bad("remote port is 0");
  return std::nullopt;
}

Check version_range(const Hello& m) {
  if (m.version_min == 0 || m.version_min > m.version_max)
    return bad("range " + num(m.version_min) + ".." + num(m.version_max) + " is empty or starts at 0");
  return std::nullopt;
}

Check channel_per_queue(const Hello& m) {
  if (m.resume && m.resume->channels.size() != m.queues)
    return bad("resume: " + num(m.resume->channels.size()) + " channels for " + num(m.queues) + " queues");
  return std::nullopt;
}

Check group_has_port(const Listen& m) {
  if (m.group && m.port == 0) return bad("a listen group needs a port");
  return std::nullopt;
}

Check count_or_ports(const Lease& m) {
  if ((m.count == 0) == m.ports.empty()) return bad("a count of new ports or a list of ports, one of them");
  return std::nullopt;
}

Check some_channel(const HelloReply& m) {
  if (m.channels.empty()) return bad("no channel");
  return std::nullopt;
}

Check mac_only_on_node_port(const NodeRecord& n) {
  if (!n.ethernet && n.mac != MacAddr{}) return bad("a MAC for a node that is not on the node port");
  return std::nullopt;
}

// ---- records -------------------------------------------------------------------------

constexpr auto kChannel = record<Channel>(kChannelRecord,                                //
                                          at(0, be<4>, &Channel::memif_id, "memif id"),  //
                                          at(4, mac, &Channel::node_mac, "node MAC"));

constexpr auto kResume = record<Resume>(kResumeRecord,                                  //
                                        constant<Resume>(0, kResumeFormat, "format"),  //
                                        flags<Resume>(1),                              //
                                        at(2, be<2>, &Resume::node_id, "node id", nonzero));

// HELLO's versions: two bytes of the message itself.
constexpr auto kVersions = with_rule(exact_record<Hello>(2,                                                //
                                                         at(0, be<1>, &Hello::version_min, "lowest"),     //
                                                         at(1, be<1>, &Hello::version_max, "highest")),  //
                                     version_range);

constexpr auto kListener = record<ListenerEntry>(
    kListenerRecord,                                                           //
    at(0, be<1>, &ListenerEntry::proto, "proto", listener_proto),              //
    flags<ListenerEntry>(1, std::pair{kListenerFlagGroup, &ListenerEntry::group}),  //
    at(2, be<2>, &ListenerEntry::port, "local port", nonzero),                 //
    at(4, be<2>, &ListenerEntry::queue, "queue", queue_index));

// A flow of either family: the IPv4 record, or the IPv6 one (version 4)
// whose remote address takes 16 bytes and moves what follows it.
template <bool V6>
constexpr auto flow_record() {
  constexpr std::size_t a = V6 ? 12 : 0;  // what the longer address adds
  return with_rule(record<FlowEntry>(V6 ? kFlow6Record : kFlowRecord,                               //
                                     at(0, be<1>, &FlowEntry::proto, "proto", flow_proto),          //
                                     flags<FlowEntry>(1, std::pair{kFlowFlagAccepted, &FlowEntry::accepted}),
                                     at(2, be<2>, &FlowEntry::local_port, "local port", nonzero),  //
                                     at(4, IpOf<V6>{}, &FlowEntry::remote_addr, "remote address"),  //
                                     at(8 + a, be<2>, &FlowEntry::remote_port, "remote port"),      //
                                     at(10 + a, be<2>, &FlowEntry::queue, "queue", queue_index)),
                   remote_port_fits_proto<FlowEntry>);
}
constexpr auto kFlow = flow_record<false>();
constexpr auto kFlow6 = flow_record<true>();

bool is_v4_flow(const FlowEntry& f) { return f.remote_addr.is_v4(); }
bool is_v6_flow(const FlowEntry& f) { return !f.remote_addr.is_v4(); }
bool is_v4_node_flow(const NodeFlow& f) { return is_v4_flow(f.flow); }
bool is_v6_node_flow(const NodeFlow& f) { return is_v6_flow(f.flow); }

template <class List, class Flow>
Check flows_within(const List& list, Flow flow, std::size_t cap) {
  std::size_t weight = 0;
  for (const auto& e : list) weight += flow_weight(flow(e));
  if (weight <= cap) return std::nullopt;
  return over("flows weigh " + num(weight) + " (an IPv6 one twice), over the limit of " + num(cap));
}

Check resync_flows_within_cap(const Resync& m) {
  return flows_within(m.flows, [](const FlowEntry& f) -> const FlowEntry& { return f; }, kMaxResyncFlows);
}

Check flows_reply_within_cap(const FlowsReply& m) {
  return flows_within(m.flows, [](const NodeFlow& f) -> const FlowEntry& { return f.flow; }, kMaxFlowRecords);
}

constexpr auto kCounter = record<Counter>(kCounterRecordMin,                               //
                                          at(0, be<8>, &Counter::value, "value"),          //
                                          counted(8, be<1>, text<1, kMaxCounterName>, &Counter::name, "name"));

constexpr auto kNode = with_rule(record<NodeRecord>(kNodeRecordMin,                                                   //
                                                    at(0, be<2>, &NodeRecord::id, "node id", nonzero),               //
                                                    at(2, be<2>, &NodeRecord::queues, "queues", queue_count),        //
                                                    at(4, be<4>, &NodeRecord::pid, "pid"),                           //
                                                    at(8, be<4>, &NodeRecord::memif_id, "memif id"),                 //
                                                    at(12, be<4>, &NodeRecord::listeners, "listeners"),              //
                                                    at(16, be<4>, &NodeRecord::flows, "flows"),                      //
                                                    at(20, be<4>, &NodeRecord::rules, "rules"),                      //
                                                    at(24, be<8>, &NodeRecord::rx_frames, "rx frames"),              //
                                                    at(32, be<8>, &NodeRecord::egress_allowed, "egress allowed"),    //
                                                    at(40, be<8>, &NodeRecord::egress_denied, "egress denied"),      //
                                                    counted(48, be<1>, text<1, kMaxNodeName>, &NodeRecord::name, "name"),
                                                    mac_extension(kNodeKindEthernet, &NodeRecord::ethernet, &NodeRecord::mac)),
                                 mac_only_on_node_port);

constexpr auto kPort = record<PortRecord>(kPortRecord,                                             //
                                          at(0, be<1>, &PortRecord::proto, "proto", listener_proto),  //
                                          flags<PortRecord>(1, std::pair{kPortFlagGroup, &PortRecord::group},
                                                            std::pair{kPortFlagListen, &PortRecord::listen},
                                                            std::pair{kPortFlagLease, &PortRecord::lease}),
                                          at(2, be<2>, &PortRecord::port, "port", nonzero),  //
                                          at(4, be<2>, &PortRecord::node, "node"),           //
                                          at(6, be<2>, &PortRecord::queue, "queue", queue_index));

constexpr auto kNodeFlow = record<NodeFlow>(kNodeFlowRecord,                          //
                                            at(0, be<2>, &NodeFlow::node, "node"),   //
                                            nested(2, &NodeFlow::flow, kFlow));
constexpr auto kNodeFlow6 = record<NodeFlow>(kNodeFlow6Record,                         //
                                             at(0, be<2>, &NodeFlow::node, "node"),  //
                                             nested(2, &NodeFlow::flow, kFlow6));

constexpr auto kRule = record<RuleRecord>(kRuleRecordMin,                                   //
                                          at(0, be<4>, &RuleRecord::id, "rule id", nonzero),  //
                                          at(4, be<2>, &RuleRecord::node, "node"),            //
                                          at(6, be<2>, &RuleRecord::queue, "queue", queue_index),
                                          at(8, be<2>, &RuleRecord::priority, "priority"),  //
                                          at(10, be<8>, &RuleRecord::hits, "hits"),         //
                                          counted(18, be<2>, text<1, kMaxExpression>, &RuleRecord::expression,
                                                  "expression"));

// A resuming HELLO's channels: only with a resume record.
struct ResumeChannels {
  std::vector<Channel>* get(Hello& m) const noexcept { return m.resume ? &m.resume->channels : nullptr; }
  const std::vector<Channel>* get(const Hello& m) const noexcept { return m.resume ? &m.resume->channels : nullptr; }
  std::string needs() const { return describe(Tag::resume); }
};

// A frame of rules must fit the body limit: their expressions may be long.
Check rules_fit_a_frame(const RulesReply& m) {
  std::size_t body = m.cursor.empty() ? 0 : kTlvHeaderSize + m.cursor.size();
  for (const RuleRecord& r : m.rules) body += kTlvHeaderSize + kRuleRecordMin + r.expression.size();
  if (body > kMaxBody) return over("rules take " + num(body) + " bytes, over the body limit of " + num(kMaxBody));
  return std::nullopt;
}

// ---- messages: one description each, fields in ascending tag order -------------------------

template <class M>
using Of = std::type_identity<M>;

constexpr auto fields_of(Of<Hello>) {
  return layout<Hello>(channel_per_queue,                                         //
                       one(Tag::name, text<1, kMaxNodeName>, &Hello::name),       //
                       one(Tag::pid, be<4>, &Hello::pid),                         //
                       one(Tag::queues, be<2>, &Hello::queues, queue_count),      //
                       whole<Hello>(Tag::versions, kVersions),                    //
                       maybe(Tag::resume, kResume, &Hello::resume),               //
                       optional(Tag::token, blob<kMaxToken>, &Hello::token),      //
                       maybe(Tag::proof, raw<kProofSize>, &Hello::proof),         //
                       many_via<Hello, Channel>(Tag::channel, kChannel, ResumeChannels{}, kMaxQueues),
                       maybe(Tag::ethernet, mac, &Hello::ethernet));
}
constexpr auto fields_of(Of<Auth>) { return layout<Auth>(one(Tag::nonce, raw<kNonceSize>, &Auth::nonce)); }
constexpr auto fields_of(Of<Listen>) {
  return layout<Listen>(group_has_port,                                              //
                        one(Tag::proto, be<1>, &Listen::proto, listener_proto),    //
                        one(Tag::local_port, be<2>, &Listen::port),                //
                        optional(Tag::group, boolean, &Listen::group),             //
                        one(Tag::queue, be<2>, &Listen::queue, queue_index));
}
constexpr auto fields_of(Of<Unlisten>) {
  return layout<Unlisten>(one(Tag::proto, be<1>, &Unlisten::proto, listener_proto),  //
                          one(Tag::local_port, be<2>, &Unlisten::port, nonzero),      //
                          maybe(Tag::queue, be<2>, &Unlisten::queue, queue_index));
}
constexpr auto fields_of(Of<Connect>) {
  return layout<Connect>(remote_port_fits_proto<Connect>,                                    //
                         one(Tag::proto, be<1>, &Connect::proto, flow_proto),                //
                         optional(Tag::local_port, be<2>, &Connect::local_port),             //
                         one(Tag::queue, be<2>, &Connect::queue, queue_index),               //
                         one(Tag::remote_addr, ip, &Connect::remote_addr, specified_addr),  //
                         one(Tag::remote_port, be<2>, &Connect::remote_port));
}
constexpr auto fields_of(Of<Release>) {
  return layout<Release>(remote_port_fits_proto<Release>,                           //
                         one(Tag::proto, be<1>, &Release::proto, flow_proto),       //
                         one(Tag::local_port, be<2>, &Release::local_port, nonzero),  //
                         one(Tag::remote_addr, ip, &Release::remote_addr),        //
                         one(Tag::remote_port, be<2>, &Release::remote_port));
}
constexpr auto fields_of(Of<Resync>) {
  return layout<Resync>(resync_flows_within_cap,                                              //
                        many(Tag::listener, kListener, &Resync::listeners, kMaxResyncListeners),  //
                        many_where(Tag::flow, kFlow, &Resync::flows, kMaxResyncFlows, is_v4_flow),  //
                        optional(Tag::more, boolean, &Resync::more),                              //
                        many_where(Tag::flow6, kFlow6, &Resync::flows, kMaxResyncFlows / 2, is_v6_flow));
}
constexpr auto fields_of(Of<Lease>) {
  return layout<Lease>(count_or_ports,                                                //
                       one(Tag::proto, be<1>, &Lease::proto, lease_proto),           //
                       one(Tag::queue, be<2>, &Lease::queue, queue_index),           //
                       optional(Tag::count, be<2>, &Lease::count, lease_count),      //
                       optional(Tag::ports, u16_list<kMaxLeasePorts>, &Lease::ports));
}
constexpr auto fields_of(Of<RuleAdd>) {
  return layout<RuleAdd>(one(Tag::queue, be<2>, &RuleAdd::queue, queue_index),                  //
                         one(Tag::expression, text<1, kMaxExpression>, &RuleAdd::expression),  //
                         optional(Tag::priority, be<2>, &RuleAdd::priority),                    //
                         strict_optional(Tag::node_id, be<2>, &RuleAdd::node));
}
constexpr auto fields_of(Of<RuleDel>) { return layout<RuleDel>(one(Tag::rule_id, be<4>, &RuleDel::rule_id, nonzero)); }
constexpr auto fields_of(Of<Stats>) { return layout<Stats>(); }
constexpr auto fields_of(Of<Bye>) { return layout<Bye>(); }
constexpr auto fields_of(Of<Ping>) { return layout<Ping>(); }
constexpr auto fields_of(Of<Ok>) { return layout<Ok>(); }

// The paged lists: an explicit limit of 0 would mean the same as none, so it
// is refused (one encoding only).
template <class M>
constexpr auto page_of() {
  return layout<M>(optional(Tag::cursor, blob<kMaxCursor>, &M::cursor),  //
                   strict_optional(Tag::limit, be<4>, &M::limit));
}
constexpr auto fields_of(Of<Nodes>) { return page_of<Nodes>(); }
constexpr auto fields_of(Of<Ports>) { return page_of<Ports>(); }
constexpr auto fields_of(Of<Rules>) { return page_of<Rules>(); }
constexpr auto fields_of(Of<Flows>) {
  return layout<Flows>(strict_optional(Tag::node_id, be<2>, &Flows::node),       //
                       optional(Tag::cursor, blob<kMaxCursor>, &Flows::cursor),  //
                       strict_optional(Tag::limit, be<4>, &Flows::limit));
}

constexpr auto fields_of(Of<HelloReply>) {
  return layout<HelloReply>(some_channel,                                                           //
                            one(Tag::version, be<1>, &HelloReply::version, nonzero),               //
                            one(Tag::node_id, be<2>, &HelloReply::node_id),                        //
                            one(Tag::memif_socket, text<1, kMaxMemifSocket>, &HelloReply::memif_socket),
                            many(Tag::channel, kChannel, &HelloReply::channels, kMaxQueues),       //
                            one(Tag::filterd_mac, mac, &HelloReply::filterd_mac),                  //
                            one(Tag::mtu, be<2>, &HelloReply::mtu, usable_mtu),                    //
                            one(Tag::address, ipv4, &HelloReply::address),                         //
                            one(Tag::prefix_len, be<1>, &HelloReply::prefix_len, prefix_length),   //
                            optional(Tag::gateway, ipv4, &HelloReply::gateway),                    //
                            one(Tag::secret, raw<sizeof(Secret)>, &HelloReply::secret),            //
                            one(Tag::heartbeat_ms, be<4>, &HelloReply::heartbeat_ms),              //
                            optional(Tag::central, boolean, &HelloReply::central),                 //
                            maybe(Tag::address6, ip6, &HelloReply::address6),                     //
                            optional(Tag::prefix6_len, be<1>, &HelloReply::prefix6_len, prefix6_length),
                            maybe(Tag::gateway6, ip6, &HelloReply::gateway6));
}
constexpr auto fields_of(Of<AuthReply>) {
  return layout<AuthReply>(one(Tag::nonce, raw<kNonceSize>, &AuthReply::nonce),  //
                           one(Tag::proof, raw<kProofSize>, &AuthReply::proof));
}
constexpr auto fields_of(Of<ListenReply>) {
  return layout<ListenReply>(one(Tag::local_port, be<2>, &ListenReply::port, nonzero));
}
constexpr auto fields_of(Of<ConnectReply>) {
  return layout<ConnectReply>(one(Tag::local_port, be<2>, &ConnectReply::local_port, nonzero));
}
constexpr auto fields_of(Of<LeaseReply>) {
  return layout<LeaseReply>(optional(Tag::ports, u16_list<kMaxLeasePorts>, &LeaseReply::ports));
}
constexpr auto fields_of(Of<RuleAddReply>) {
  return layout<RuleAddReply>(one(Tag::rule_id, be<4>, &RuleAddReply::rule_id, nonzero));
}
constexpr auto fields_of(Of<StatsReply>) {
  return layout<StatsReply>(many(Tag::counter, kCounter, &StatsReply::counters, kMaxCounters));
}
constexpr auto fields_of(Of<NodesReply>) {
  return layout<NodesReply>(optional(Tag::cursor, blob<kMaxCursor>, &NodesReply::cursor),  //
                            many(Tag::node, kNode, &NodesReply::nodes, kMaxNodeRecords));
}
constexpr auto fields_of(Of<PortsReply>) {
  return layout<PortsReply>(optional(Tag::cursor, blob<kMaxCursor>, &PortsReply::cursor),  //
                            many(Tag::port, kPort, &PortsReply::ports, kMaxPortRecords));
}
constexpr auto fields_of(Of<FlowsReply>) {
  return layout<FlowsReply>(flows_reply_within_cap,                                         //
                            optional(Tag::cursor, blob<kMaxCursor>, &FlowsReply::cursor),  //
                            one(Tag::total, be<4>, &FlowsReply::total),                    //
                            many_where(Tag::node_flow, kNodeFlow, &FlowsReply::flows, kMaxFlowRecords, is_v4_node_flow),
                            many_where(Tag::node_flow6, kNodeFlow6, &FlowsReply::flows, kMaxFlowRecords / 2,
                                       is_v6_node_flow));
}
constexpr auto fields_of(Of<RulesReply>) {
  return layout<RulesReply>(rules_fit_a_frame,                                              //
                            optional(Tag::cursor, blob<kMaxCursor>, &RulesReply::cursor),  //
                            many(Tag::rule, kRule, &RulesReply::rules, kMaxRuleRecords));
}
constexpr auto fields_of(Of<Error>) {
  return layout<Error>(one(Tag::error_code, be<2>, &Error::code, nonzero),  //
                       optional(Tag::error_text, text<0, kMaxErrorText>, &Error::text));
}

// The description of each message, checked once at compile time.
template <class M>
inline constexpr auto kLayout = fields_of(Of<M>{});

template <class M>
inline constexpr auto kSpecs = kLayout<M>.specs();

template <class... Ms>
constexpr bool all_ascending(std::type_identity<std::variant<Ms...>>) {
  return (kLayout<Ms>.ascending() && ...);
}
static_assert(all_ascending(std::type_identity<Body>{}), "a message's fields must be listed in ascending tag order");

Check check_body(const Body& body) {
  Check v = std::visit([](const auto& m) { return kLayout<std::decay_t<decltype(m)>>.check(m); }, body);
  if (v) v->text = std::string(to_string(type_of(body))) + ": " + v->text;
  return v;
}

template <class M>
std::variant<Body, Problem> decode_as(std::span<const std::byte> body) {
  Decoder d(kSpecs<M>);
  if (d.scan(body)) {
    M m;
    kLayout<M>.take(d, m);
    if (d.ok()) {
      if (Check v = kLayout<M>.check(m))
        return Problem{ErrorCode::bad_message, std::string(to_string(M::kType)) + ": " + v->text};
      return Body{std::move(m)};
    }
  }
  return Problem{ErrorCode::bad_message, std::string(to_string(M::kType)) + ": " + d.problem()};
}

// Finds the message of that type among the Body's alternatives.
template <class... Ms>
std::optional<std::variant<Body, Problem>> decode_one_of(std::type_identity<std::variant<Ms...>>, std::uint8_t type,
                                                         std::span<const std::byte> body) {
  std::optional<std::variant<Body, Problem>> out;
  const auto try_one = [&](auto m) {
    using M = decltype(m);
    if (static_cast<std::uint8_t>(M::kType) != type) return false;
    out = decode_as<M>(body);
    return true;
  };
  (void)(try_one(Ms{}) || ...);
  return out;
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
  std::visit([&w](const auto& body) { kLayout<std::decay_t<decltype(body)>>.put(w, body); }, m.body);
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

std::size_t flow_weight(const FlowEntry& f) noexcept { return f.remote_addr.is_v4() ? 1 : 2; }

std::vector<Resync> split_resync(std::span<const ListenerEntry> listeners, std::span<const FlowEntry> flows) {
  std::vector<Resync> out;
  std::size_t li = 0;
  std::size_t fi = 0;
  do {
    Resync& r = out.emplace_back();
    const std::size_t ln = std::min(kMaxResyncListeners, listeners.size() - li);
    r.listeners.assign(listeners.begin() + static_cast<std::ptrdiff_t>(li),
                       listeners.begin() + static_cast<std::ptrdiff_t>(li + ln));
    li += ln;
    for (std::size_t weight = 0; fi < flows.size() && weight + flow_weight(flows[fi]) <= kMaxResyncFlows; ++fi) {
      weight += flow_weight(flows[fi]);
      r.flows.push_back(flows[fi]);
    }
    r.more = li < listeners.size() || fi < flows.size();
  } while (out.back().more);
  return out;
}

// ---- decoding --------------------------------------------------------------------

std::variant<Body, Problem> decode_body(std::uint8_t type, std::span<const std::byte> body) {
  if (auto decoded = decode_one_of(std::type_identity<Body>{}, type, body)) return std::move(*decoded);
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

std::optional<std::string> shm_channel_path(const HelloReply& h, std::uint32_t memif_id) {
  constexpr std::string_view kShm = "shm:";
  if (!h.memif_socket.starts_with(kShm)) return std::nullopt;
  return h.memif_socket.substr(kShm.size()) + "." + std::to_string(memif_id);
}

}  // namespace xk::filterd::ctl

// The filterd control protocol codec (docs/control-protocol.md): round trips of
// every message, golden bytes written out by hand, delivery in pieces, and
// hostile input -- truncation, corruption, garbage, broken limits -- which must
// always end in a message or a clean error, never a crash or a hang.
#include "xk/filterd/control.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace xk::filterd::ctl {

// Failures show a message as its type, id and frame bytes.
void PrintTo(const Message& m, std::ostream* os) {
  *os << to_string(type_of(m.body)) << " id " << m.request_id;
  Result<std::vector<std::byte>> b = encode(m);
  if (!b.ok()) {
    *os << " (invalid)";
    return;
  }
  static const char* const kHex = "0123456789abcdef";
  *os << " [";
  for (std::byte x : *b) *os << kHex[std::to_integer<int>(x) >> 4] << kHex[std::to_integer<int>(x) & 15];
  *os << "]";
}

namespace {

using Bytes = std::vector<std::byte>;

// 2001:db8::7, from the documentation prefix (RFC 3849).
const IpAddr kDocV6 = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7});

Bytes bytes(std::initializer_list<int> v) {
  Bytes out;
  for (int x : v) out.push_back(static_cast<std::byte>(x));
  return out;
}

Bytes text_bytes(std::string_view s) {
  Bytes out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// In loops, so building a big body stays linear.
Bytes& operator+=(Bytes& a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Bytes be16(std::uint16_t v) { return bytes({v >> 8, v & 0xFF}); }
Bytes be32(std::uint32_t v) {
  return bytes({static_cast<int>(v >> 24), static_cast<int>((v >> 16) & 0xFF), static_cast<int>((v >> 8) & 0xFF),
                static_cast<int>(v & 0xFF)});
}

Bytes tlv(std::uint16_t tag, const Bytes& value) {
  return be16(tag) + be16(static_cast<std::uint16_t>(value.size())) + value;
}
Bytes tlv(Tag tag, const Bytes& value) { return tlv(static_cast<std::uint16_t>(tag), value); }

Bytes frame(std::uint8_t type, std::uint32_t id, const Bytes& body, std::uint16_t flags = 0,
            std::uint8_t version = kVersion) {
  return be32(kMagic) + bytes({version, type}) + be16(flags) + be32(static_cast<std::uint32_t>(body.size())) +
         be32(id) + body;
}
Bytes frame(MsgType type, std::uint32_t id, const Bytes& body) {
  return frame(static_cast<std::uint8_t>(type), id, body);
}

Bytes encoded(const Message& m) {
  Result<Bytes> r = encode(m);
  EXPECT_TRUE(r.ok()) << to_string(type_of(m.body)) << ": " << (validate(m) ? validate(m)->text : "");
  return r.ok() ? *r : Bytes{};
}

Bytes ping_frame(std::uint32_t id) { return encoded(Message{id, Ping{}}); }

// Everything the reader makes of a stream, in order.
struct Drained {
  std::vector<Message> messages;
  std::vector<ProtocolError> errors;  // rejects, then at most one drop
  bool dropped = false;
  std::size_t calls = 0;
};

Drained drain(FrameReader& r) {
  Drained d;
  for (;;) {
    ++d.calls;
    ReadResult res = r.next();
    if (res.need_more()) break;
    if (res.has_message()) {
      d.messages.push_back(std::move(res).message());
      continue;
    }
    d.errors.push_back(res.error());
    if (res.error().must_drop()) {
      d.dropped = true;
      break;
    }
  }
  return d;
}

Drained read_all(const Bytes& stream) {
  FrameReader r;
  r.feed(stream);
  return drain(r);
}

ProtocolError only_error(const Bytes& stream) {
  Drained d = read_all(stream);
  EXPECT_TRUE(d.messages.empty());
  EXPECT_EQ(d.errors.size(), 1u);
  return d.errors.empty() ? ProtocolError{} : d.errors.front();
}

Message only_message(const Bytes& stream) {
  Drained d = read_all(stream);
  EXPECT_TRUE(d.errors.empty()) << (d.errors.empty() ? "" : d.errors.front().text);
  EXPECT_EQ(d.messages.size(), 1u);
  return d.messages.empty() ? Message{} : d.messages.front();
}

Secret test_secret() {
  Secret s;
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<std::byte>(0xA0 + i);
  return s;
}

HelloReply sample_hello_reply(std::size_t channels) {
  HelloReply h;
  h.version = 1;
  h.node_id = 7;
  h.memif_socket = "/run/xk/filterd.memif";
  for (std::size_t i = 0; i < channels; ++i)
    h.channels.push_back(Channel{static_cast<std::uint32_t>(100 + i),
                                 MacAddr{{0x02, 0x00, 0x00, 0x07, 0x00, static_cast<std::uint8_t>(i)}}});
  h.filterd_mac = MacAddr{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
  h.mtu = 9000;
  h.address = Ipv4Addr{0xC0000205};
  h.prefix_len = 24;
  h.gateway = Ipv4Addr{0xC0000201};
  h.secret = test_secret();
  h.heartbeat_ms = 1000;
  h.address6 = *parse_ip("2001:db8::10");
  h.prefix6_len = 56;
  h.gateway6 = *parse_ip("fe80::1");
  return h;
}

// At least one message of every type, with fields away from their defaults.
std::vector<Message> samples() {
  std::vector<Message> v;
  v.push_back({1, Hello{.name = "web-0", .pid = 4242, .queues = 4, .version_min = 1, .version_max = 2}});
  // A node that outlived its filterd asks for its id and channels back.
  v.push_back({19, Hello{.name = "web-1",
                         .pid = 4243,
                         .queues = 2,
                         .version_min = 1,
                         .version_max = 1,
                         .resume = Resume{.node_id = 7,
                                          .channels = {Channel{448, MacAddr{{0x02, 0x78, 0x6e, 0, 7, 0}}},
                                                       Channel{449, MacAddr{{0x02, 0x78, 0x6e, 0, 7, 1}}}}}}});
  v.push_back({2, Listen{.proto = Proto::tcp, .port = 80, .group = true, .queue = 3}});
  v.push_back({3, Listen{.proto = Proto::udp, .port = 0, .group = false, .queue = 0}});
  v.push_back({4, Unlisten{.proto = Proto::udp, .port = 5353}});
  v.push_back({5, Connect{.proto = Proto::tcp, .remote_addr = Ipv4Addr{0xC6336401}, .remote_port = 443, .queue = 1}});
  v.push_back({6, Connect{.proto = Proto::udp,
                          .remote_addr = Ipv4Addr{0x0A000001},
                          .remote_port = 53,
                          .queue = 63,
                          .local_port = 40000}});
  v.push_back({7, Release{.proto = Proto::tcp, .local_port = 49152, .remote_addr = Ipv4Addr{0xC6336401}, .remote_port = 443}});
  // A ping's echo "connection": the identifier is the local port.
  v.push_back({17, Connect{.proto = Proto::icmp, .remote_addr = Ipv4Addr{0xC0000263}, .remote_port = 0, .queue = 5}});
  v.push_back({18, Release{.proto = Proto::icmp, .local_port = 0x1234, .remote_addr = Ipv4Addr{0xC0000263}, .remote_port = 0}});
  // Version 4: a peer of the other family.
  v.push_back({19, Connect{.proto = Proto::tcp, .remote_addr = kDocV6, .remote_port = 443, .queue = 2}});
  v.push_back({20, Release{.proto = Proto::udp, .local_port = 49153, .remote_addr = kDocV6, .remote_port = 53}});
  Resync rs;
  rs.listeners = {{Proto::tcp, 80, true, 0}, {Proto::udp, 5353, false, 2}};
  rs.flows = {{Proto::tcp, 49152, Ipv4Addr{0xC6336401}, 443, 1},
              {Proto::tcp, 80, Ipv4Addr{0x0A0000FE}, 51000, 3},
              {Proto::udp, 40000, Ipv4Addr{0x0A000001}, 53, 0},
              {Proto::icmp, 0x1234, Ipv4Addr{0xC0000263}, 0, 5},
              {Proto::tcp, 8080, Ipv4Addr{0xC6336402}, 40001, 2, /*accepted=*/true},
              // (a decoded RESYNC lists the IPv4 flows first)
              {Proto::tcp, 8081, kDocV6, 40002, 4, /*accepted=*/true},
              {Proto::icmp, 0x4321, kDocV6, 0, 1}};
  rs.more = true;
  v.push_back({8, rs});
  v.push_back({9, Resync{}});
  v.push_back({10, RuleAdd{.expression = "tcp dst port 9000 and src net 10.0.0.0/8", .queue = 2, .priority = -5}});
  v.push_back({11, RuleAdd{.expression = "udp", .queue = 0, .priority = 0}});
  v.push_back({12, RuleDel{.rule_id = 17}});
  v.push_back({13, Stats{}});
  v.push_back({14, Bye{}});
  {
    Nonce n{};
    for (std::size_t k = 0; k < n.size(); ++k) n[k] = std::byte(static_cast<unsigned char>(k * 7 + 1));
    v.push_back({40, Auth{n}});
    AuthReply ar{n, server_proof(std::as_bytes(std::span("token")), n, n)};
    v.push_back({40, ar});
    Hello hp{.name = "remote", .pid = 1, .queues = 1, .version_min = 1, .version_max = 3};
    hp.proof = node_proof(std::as_bytes(std::span("token")), n, n);
    v.push_back({41, hp});
  }
  v.push_back({15, Ping{}});
  v.push_back({1, HelloReply(sample_hello_reply(4))});
  v.push_back({2, ListenReply{.port = 8080}});
  v.push_back({5, ConnectReply{.local_port = 49153}});
  v.push_back({7, Ok{}});
  v.push_back({10, RuleAddReply{.rule_id = 17}});
  v.push_back({13, StatsReply{{{"rx_frames", 123456789012ULL},
                               {"drop_no_rule", 0},
                               {"r\xC3\xA9sync_\xE2\x9C\x93", ~std::uint64_t{0}}}}});
  // Version 2: administration.
  v.push_back({19, RuleAdd{.expression = "udp dst port 9999", .queue = 1, .priority = 10, .node = 2}});
  v.push_back({20, Nodes{}});
  v.push_back({21, Nodes{.cursor = bytes({0, 5}), .limit = 10}});
  v.push_back({22, Ports{.cursor = bytes({6, 0, 80, 0, 0, 0, 1}), .limit = 1}});
  v.push_back({23, Flows{.node = 3, .cursor = Cursor(11, std::byte{0xAB}), .limit = 100}});
  v.push_back({24, Flows{}});
  v.push_back({25, Rules{.cursor = bytes({0, 0, 0, 4}), .limit = 0}});
  v.push_back({20, NodesReply{{{.id = 1, .queues = 2, .pid = 4242, .memif_id = 64, .listeners = 1, .flows = 3,
                                .rules = 1, .rx_frames = 1000, .egress_allowed = 999, .egress_denied = 7,
                                .name = "web-0"},
                               {.id = 9, .queues = 1, .pid = 1, .memif_id = 576, .name = "n\xC3\xA9"},
                               // A node on another host: its MAC after the name.
                               {.id = 12, .queues = 1, .pid = 77, .name = "far",
                                .ethernet = true, .mac = MacAddr{{0x02, 0, 0, 0, 0x0c, 0x01}}}},
                              bytes({0, 9})}});
  // A node on another host: over TCP with the token, on the node port.
  v.push_back({26, Hello{.name = "far-0", .pid = 77, .queues = 1, .version_min = 1, .version_max = 2,
                         .token = Bytes(32, std::byte{0x5A}), .ethernet = MacAddr{{0x02, 0, 0, 0, 0x0c, 0x01}}}});
  v.push_back({22, PortsReply{{{Proto::tcp, 80, true, true, 1, 0}, {Proto::tcp, 80, true, true, 2, 3},
                               {Proto::udp, 49152, false, false, 9, 0}},
                              {}}});
  v.push_back({23, FlowsReply{{{3, {Proto::tcp, 80, Ipv4Addr{0xC6336401}, 51000, 1}}, {3, {Proto::icmp, 7, Ipv4Addr{0x0A000001}, 0, 0}}},
                              1000000,
                              Cursor(11, std::byte{1})}});
  v.push_back({24, FlowsReply{}});
  // A node_flow holds a flow record as RESYNC has it, accepted flag and all.
  v.push_back({24, FlowsReply{{{2, {Proto::tcp, 5001, Ipv4Addr{0xC0000201}, 40000, 0, /*accepted=*/true}},
                               {5, {Proto::udp, 53, kDocV6, 40000, 3}}},
                              2,
                              {}}});
  v.push_back({25, RulesReply{{{.id = 4, .node = 2, .queue = 0, .priority = -3, .hits = 12, .expression = "udp"},
                               {.id = 1, .node = 1, .queue = 5, .priority = 0, .hits = 0,
                                .expression = "tcp dst port 9000 and src net 10.0.0.0/8"}},
                              bytes({0, 0, 0, 2})}});
  // Version 3: leases.
  v.push_back({27, Lease{.proto = Proto::tcp, .queue = 2, .count = 64}});
  v.push_back({28, Lease{.proto = Proto::tcp, .queue = 0, .count = 0, .ports = {49152, 49153, 65535}}});
  v.push_back({27, LeaseReply{{49200, 49201, 50000}}});
  v.push_back({28, LeaseReply{}});
  v.push_back({29, PortsReply{{{Proto::tcp, 49200, false, false, 4, 2, /*lease=*/true}}, {}}});
  v.push_back({0xFFFFFFFF, Error{.code = ErrorCode::port_in_use, .text = "port 80 belongs to node 3"}});
  v.push_back({16, Error{.code = ErrorCode::internal, .text = ""}});
  return v;
}

// ---- round trips ---------------------------------------------------------------

TEST(ControlRoundTrip, EveryMessageType) {
  std::set<std::size_t> kinds;
  for (const Message& m : samples()) {
    SCOPED_TRACE(to_string(type_of(m.body)));
    kinds.insert(m.body.index());
    EXPECT_FALSE(validate(m).has_value());
    Bytes b = encoded(m);
    EXPECT_EQ(b.size(), kHeaderSize + static_cast<std::size_t>(std::to_integer<int>(b[10]) << 8 |
                                                                 std::to_integer<int>(b[11])));
    EXPECT_EQ(static_cast<std::uint8_t>(b[5]), static_cast<std::uint8_t>(type_of(m.body)));
    EXPECT_EQ(only_message(b), m);
  }
  EXPECT_EQ(kinds.size(), std::variant_size_v<Body>);
}

TEST(ControlRoundTrip, EveryFieldAtItsLimit) {
  std::vector<Message> big;
  Hello h{.name = std::string(kMaxNodeName, 'n'), .pid = ~0u, .queues = kMaxQueues, .version_min = 1,
          .version_max = 255};
  big.push_back({1, h});
  big.push_back({2, RuleAdd{.expression = std::string(kMaxExpression, 'e'), .queue = kMaxQueues - 1,
                            .priority = -32768}});
  Resync r;
  for (std::size_t i = 0; i < kMaxResyncListeners; ++i)
    r.listeners.push_back({Proto::tcp, static_cast<std::uint16_t>(i + 1), (i & 1) != 0,
                           static_cast<std::uint16_t>(i % kMaxQueues)});
  for (std::size_t i = 0; i < kMaxResyncFlows; ++i)
    r.flows.push_back({Proto::udp, static_cast<std::uint16_t>(1024 + i), Ipv4Addr{static_cast<std::uint32_t>(0x0A000000 + i)},
                       65535, static_cast<std::uint16_t>(i % kMaxQueues)});
  big.push_back({3, r});
  // IPv6 flows count twice: half as many fill the message.
  Resync r6;
  for (std::size_t i = 0; i < kMaxResyncFlows / 2; ++i)
    r6.flows.push_back({Proto::tcp, static_cast<std::uint16_t>(1024 + i), kDocV6, 65535,
                        static_cast<std::uint16_t>(i % kMaxQueues), true});
  r6.listeners = r.listeners;
  big.push_back({3, r6});
  HelloReply hr = sample_hello_reply(kMaxQueues);
  hr.memif_socket = std::string(kMaxMemifSocket, 's');
  hr.prefix_len = 32;
  big.push_back({4, hr});
  StatsReply s;
  for (std::size_t i = 0; i < kMaxCounters; ++i) {
    std::string name = "c" + std::to_string(i);
    name.resize(kMaxCounterName, '_');
    s.counters.push_back({name, i * 0x0123456789ULL});
  }
  big.push_back({5, s});
  big.push_back({6, Error{.code = ErrorCode{999}, .text = std::string(kMaxErrorText, 'x')}});
  NodesReply nodes;
  for (std::size_t i = 0; i < kMaxNodeRecords; ++i) {
    nodes.nodes.push_back({.id = static_cast<std::uint16_t>(i + 1), .queues = kMaxQueues, .pid = ~0u,
                           .memif_id = ~0u, .listeners = ~0u, .flows = ~0u, .rules = ~0u, .rx_frames = ~0ull,
                           .egress_allowed = ~0ull, .egress_denied = ~0ull, .name = std::string(kMaxNodeName, 'n')});
  }
  nodes.cursor = Cursor(kMaxCursor, std::byte{0xFF});
  big.push_back({7, nodes});
  PortsReply ports;
  for (std::size_t i = 0; i < kMaxPortRecords; ++i)
    ports.ports.push_back({Proto::udp, static_cast<std::uint16_t>(i + 1), true, true, 65535, kMaxQueues - 1});
  ports.cursor = Cursor(kMaxCursor, std::byte{1});
  big.push_back({8, ports});
  FlowsReply flows;
  for (std::size_t i = 0; i < kMaxFlowRecords; ++i)
    flows.flows.push_back({65535, {Proto::tcp, 65535, Ipv4Addr{~0u}, static_cast<std::uint16_t>(i + 1), kMaxQueues - 1}});
  flows.total = ~0u;
  flows.cursor = Cursor(kMaxCursor, std::byte{2});
  big.push_back({9, flows});
  FlowsReply flows6;
  for (std::size_t i = 0; i < kMaxFlowRecords / 2; ++i)
    flows6.flows.push_back({65535, {Proto::tcp, 65535, kDocV6, static_cast<std::uint16_t>(i + 1), kMaxQueues - 1}});
  flows6.total = ~0u;
  flows6.cursor = Cursor(kMaxCursor, std::byte{2});
  big.push_back({9, flows6});
  // Rules are bounded by the frame: as many longest expressions as fit.
  RulesReply rules;
  rules.cursor = Cursor(kMaxCursor, std::byte{3});
  const std::size_t per_rule = kTlvHeaderSize + kRuleRecordMin + kMaxExpression;
  while ((rules.rules.size() + 1) * per_rule + kTlvHeaderSize + kMaxCursor <= kMaxBody)
    rules.rules.push_back({.id = ~0u, .node = 65535, .queue = kMaxQueues - 1, .priority = 32767, .hits = ~0ull,
                           .expression = std::string(kMaxExpression, 'r')});
  big.push_back({10, rules});
  rules.rules.push_back(rules.rules.back());
  EXPECT_TRUE(validate(Message{10, rules}).has_value()) << "one more rule does not fit in a frame";
  EXPECT_EQ(encode(Message{10, rules}).error(), Errc::too_large);
  big.push_back({11, Flows{.node = 65535, .cursor = Cursor(kMaxCursor, std::byte{4}), .limit = ~0u}});
  Lease lease{.proto = Proto::tcp, .queue = kMaxQueues - 1};
  for (std::size_t i = 0; i < kMaxLeasePorts; ++i) lease.ports.push_back(static_cast<std::uint16_t>(65535 - i));
  big.push_back({12, lease});
  big.push_back({13, LeaseReply{lease.ports}});
  big.push_back({14, Lease{.proto = Proto::tcp, .queue = 0, .count = kMaxLeasePorts}});
  lease.ports.push_back(1);
  EXPECT_EQ(encode(Message{12, lease}).error(), Errc::too_large);
  EXPECT_EQ(encode(Message{13, LeaseReply{lease.ports}}).error(), Errc::too_large);
  for (const Message& m : big) {
    SCOPED_TRACE(to_string(type_of(m.body)));
    Bytes b = encoded(m);
    EXPECT_LE(b.size(), kHeaderSize + kMaxBody);
    EXPECT_EQ(only_message(b), m);
  }
}

// ---- golden bytes ----------------------------------------------------------------

// Version 2, as docs/control-protocol.md shows them: an admin's rule for node 2
// and a page of node 2's flows.
TEST(ControlGolden, AdminRuleAddAndFlows) {
  const Bytes rule_add =
      bytes({0x58, 0x4b, 0x43, 0x31, 0x01, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x00, 0x00, 0x05}) +
      bytes({0x00, 0x13, 0x00, 0x02, 0x00, 0x00}) + bytes({0x00, 0x30, 0x00, 0x11}) + text_bytes("udp dst port 9999") +
      bytes({0x00, 0x40, 0x00, 0x02, 0x00, 0x02});
  const Message m{5, RuleAdd{.expression = "udp dst port 9999", .queue = 0, .priority = 0, .node = 2}};
  EXPECT_EQ(encoded(m), rule_add);
  EXPECT_EQ(only_message(rule_add), m);

  const Bytes flows =
      bytes({0x58, 0x4b, 0x43, 0x31, 0x01, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x06}) +
      bytes({0x00, 0x40, 0x00, 0x02, 0x00, 0x02, 0x00, 0x71, 0x00, 0x04, 0x00, 0x00, 0x00, 0x64});
  const Message f{6, Flows{.node = 2, .cursor = {}, .limit = 100}};
  EXPECT_EQ(encoded(f), flows);
  EXPECT_EQ(only_message(flows), f);
}

TEST(ControlGolden, Listen) {
  const Message m{7, Listen{.proto = Proto::tcp, .port = 8080, .group = true, .queue = 3}};
  const Bytes golden = bytes({
      0x58, 0x4B, 0x43, 0x31,  // magic "XKC1"
      0x01,                    // version
      0x02,                    // type LISTEN
      0x00, 0x00,              // flags
      0x00, 0x00, 0x00, 0x16,  // body length 22
      0x00, 0x00, 0x00, 0x07,  // request id 7
      0x00, 0x10, 0x00, 0x01, 0x06,        // proto tcp
      0x00, 0x11, 0x00, 0x02, 0x1F, 0x90,  // local_port 8080
      0x00, 0x12, 0x00, 0x01, 0x01,        // group
      0x00, 0x13, 0x00, 0x02, 0x00, 0x03,  // queue 3
  });
  EXPECT_EQ(encoded(m), golden);
  EXPECT_EQ(only_message(golden), m);
}

// filterd names shm channels "shm:PATH" where it names memif's socket; a
// node finds channel <id> listening on PATH.<id>.
TEST(ControlHelloReply, ShmChannelsAreFoundAtPathDotId) {
  HelloReply h;
  h.memif_socket = "shm:/run/xk/filterd.memif";
  EXPECT_EQ(shm_channel_path(h, 64), std::optional<std::string>("/run/xk/filterd.memif.64"));
  h.memif_socket = "/run/xk/filterd.memif";
  EXPECT_EQ(shm_channel_path(h, 64), std::nullopt) << "a memif socket";
}

// IPv6 rides in three optional fields: a filterd without an address of
// that family sends none, and a node sees none.
TEST(ControlHelloReply, TheIpv6FieldsAreOptionalAndChecked) {
  HelloReply v4_only = sample_hello_reply(1);
  v4_only.address6.reset();
  v4_only.gateway6.reset();
  v4_only.prefix6_len = 0;
  const Message m{3, v4_only};
  const Message back = only_message(encoded(m));
  EXPECT_EQ(back, m);
  EXPECT_FALSE(std::get<HelloReply>(back.body).address6.has_value());
  HelloReply wide = sample_hello_reply(1);
  wide.prefix6_len = 129;
  ASSERT_TRUE(validate(Message{1, wide}).has_value());
  EXPECT_NE(validate(Message{1, wide})->text.find("over 128"), std::string::npos) << validate(Message{1, wide})->text;
  HelloReply mapped = sample_hello_reply(1);
  mapped.address6 = IpAddr(Ipv4Addr{0xC0000205});
  EXPECT_TRUE(validate(Message{1, mapped}).has_value()) << "an IPv4 address is not an IPv6 one";
}

TEST(ControlGolden, Hello) {
  const Message m{1, Hello{.name = "web", .pid = 4242, .queues = 2, .version_min = 1, .version_max = 1}};
  const Bytes golden = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0x01, 0x00, 0x00,  // "XKC1" v1 HELLO, no flags
      0x00, 0x00, 0x00, 0x1B, 0x00, 0x00, 0x00, 0x01,  // body 27 bytes, id 1
      0x00, 0x01, 0x00, 0x03, 'w', 'e', 'b',           // name
      0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x10, 0x92,  // pid 4242
      0x00, 0x03, 0x00, 0x02, 0x00, 0x02,              // queues 2
      0x00, 0x04, 0x00, 0x02, 0x01, 0x01,              // versions 1..1
  });
  EXPECT_EQ(encoded(m), golden);
  EXPECT_EQ(only_message(golden), m);
}

TEST(ControlGolden, ResumingHello) {
  const Message m{1, Hello{.name = "web",
                           .pid = 4242,
                           .queues = 1,
                           .version_min = 1,
                           .version_max = 1,
                           .resume = Resume{3, {Channel{192, MacAddr{{0x02, 0x78, 0x6e, 0x00, 0x03, 0x00}}}}}}};
  const Bytes golden = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0x01, 0x00, 0x00,  // "XKC1" v1 HELLO, no flags
      0x00, 0x00, 0x00, 0x31, 0x00, 0x00, 0x00, 0x01,  // body 49 bytes, id 1
      0x00, 0x01, 0x00, 0x03, 0x77, 0x65, 0x62,        // name "web"
      0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x10, 0x92,  // pid 4242
      0x00, 0x03, 0x00, 0x02, 0x00, 0x01,              // queues 1
      0x00, 0x04, 0x00, 0x02, 0x01, 0x01,              // versions 1..1
      0x00, 0x06, 0x00, 0x04, 0x01, 0x00, 0x00, 0x03,  // resume: format 1, no flags, node 3
      0x00, 0x42, 0x00, 0x0A, 0x00, 0x00, 0x00, 0xC0,  // channel 0: memif id 192,
      0x02, 0x78, 0x6E, 0x00, 0x03, 0x00,              //   02:78:6e:00:03:00
  });
  EXPECT_EQ(encoded(m), golden);
  EXPECT_EQ(only_message(golden), m);
}

// Tags of a remote node's HELLO, in order: token (0x0007) before the
// channels, the critical ethernet (0x8008) last.
TEST(ControlGolden, RemoteHello) {
  const Message m{1, Hello{.name = "far",
                           .pid = 7,
                           .queues = 1,
                           .version_min = 1,
                           .version_max = 1,
                           .token = bytes({'s', 'e', 'c', 'r', 'e', 't'}),
                           .ethernet = MacAddr{{0x02, 0x00, 0x00, 0x00, 0x0C, 0x01}}}};
  const Bytes golden = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0x01, 0x00, 0x00,  // "XKC1" v1 HELLO, no flags
      0x00, 0x00, 0x00, 0x2F, 0x00, 0x00, 0x00, 0x01,  // body 47 bytes, id 1
      0x00, 0x01, 0x00, 0x03, 'f', 'a', 'r',           // name
      0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x07,  // pid 7
      0x00, 0x03, 0x00, 0x02, 0x00, 0x01,              // queues 1
      0x00, 0x04, 0x00, 0x02, 0x01, 0x01,              // versions 1..1
      0x00, 0x07, 0x00, 0x06, 's', 'e', 'c', 'r', 'e', 't',  // token
      0x80, 0x08, 0x00, 0x06, 0x02, 0x00, 0x00, 0x00, 0x0C, 0x01,  // ethernet 02:00:00:00:0c:01
  });
  EXPECT_EQ(encoded(m), golden);
  EXPECT_EQ(only_message(golden), m);
  // ethernet is critical: a message that does not know it rejects it.
  const ProtocolError e = only_error(frame(MsgType::ping, 2, tlv(0x8008, bytes({2, 0, 0, 0, 0x0C, 1}))));
  EXPECT_EQ(e.severity, Severity::reject);
  // A token over 256 bytes is refused, by the encoder and the reader.
  Message big = m;
  std::get<Hello>(big.body).token = Bytes(257, std::byte{1});
  EXPECT_FALSE(encode(big).ok());
}

TEST(ControlGolden, AcceptedFlow) {
  Resync r;
  r.flows = {{Proto::tcp, 5001, Ipv4Addr{0xC0000201}, 40000, 0, /*accepted=*/true}};
  const Bytes golden = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0x06, 0x00, 0x00,  // "XKC1" v1 RESYNC, no flags
      0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x05,  // body 16 bytes, id 5
      0x00, 0x21, 0x00, 0x0C,                          // flow:
      0x06, 0x01, 0x13, 0x89,                          //   tcp, accepted, local port 5001
      0xC0, 0x00, 0x02, 0x01, 0x9C, 0x40, 0x00, 0x00,  //   192.0.2.1 port 40000, queue 0
  });
  EXPECT_EQ(encoded(Message{5, r}), golden);
  EXPECT_EQ(only_message(golden), (Message{5, r}));
}

// Version 4: an IPv6 peer takes 16 bytes, in a TLV of its own and in the
// flow6 record (the flow record's fields, the address widened).
TEST(ControlGolden, Ipv6Peers) {
  const Message c{6, Connect{.proto = Proto::tcp, .remote_addr = kDocV6, .remote_port = 443, .queue = 1}};
  const Bytes connect = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0x04, 0x00, 0x00,  // "XKC1" v1 CONNECT, no flags
      0x00, 0x00, 0x00, 0x25, 0x00, 0x00, 0x00, 0x06,  // body 37 bytes, id 6
      0x00, 0x10, 0x00, 0x01, 0x06,                    // proto tcp
      0x00, 0x13, 0x00, 0x02, 0x00, 0x01,              // queue 1
      0x00, 0x14, 0x00, 0x10,                          // remote_addr, 16 bytes:
      0x20, 0x01, 0x0D, 0xB8, 0x00, 0x00, 0x00, 0x00,  //   2001:db8::
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07,  //   ...7
      0x00, 0x15, 0x00, 0x02, 0x01, 0xBB,              // remote_port 443
  });
  EXPECT_EQ(encoded(c), connect);
  EXPECT_EQ(only_message(connect), c);

  Resync r;
  r.flows = {{Proto::tcp, 5001, kDocV6, 40000, 3, /*accepted=*/true}};
  const Bytes resync = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0x06, 0x00, 0x00,  // "XKC1" v1 RESYNC, no flags
      0x00, 0x00, 0x00, 0x1C, 0x00, 0x00, 0x00, 0x05,  // body 28 bytes, id 5
      0x80, 0x25, 0x00, 0x18,                          // flow6 (critical), 24 bytes:
      0x06, 0x01, 0x13, 0x89,                          //   tcp, accepted, local port 5001
      0x20, 0x01, 0x0D, 0xB8, 0x00, 0x00, 0x00, 0x00,  //   2001:db8::7
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07,  //
      0x9C, 0x40, 0x00, 0x03,                          //   port 40000, queue 3
  });
  EXPECT_EQ(encoded(Message{5, r}), resync);
  EXPECT_EQ(only_message(resync), (Message{5, r}));

  const FlowsReply f{{{9, {Proto::udp, 53, kDocV6, 40000, 0}}}, 1, {}};
  const Bytes reply = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0x8E, 0x00, 0x00,  // "XKC1" v1 FLOWS_REPLY, no flags
      0x00, 0x00, 0x00, 0x26, 0x00, 0x00, 0x00, 0x02,  // body 38 bytes, id 2
      0x00, 0x72, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01,  // total 1
      0x80, 0x77, 0x00, 0x1A, 0x00, 0x09,              // node_flow6 (critical), 26 bytes: node 9
      0x11, 0x00, 0x00, 0x35,                          //   udp, no flags, local port 53
      0x20, 0x01, 0x0D, 0xB8, 0x00, 0x00, 0x00, 0x00,  //   2001:db8::7
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07,  //
      0x9C, 0x40, 0x00, 0x00,                          //   port 40000, queue 0
  });
  EXPECT_EQ(encoded(Message{2, f}), reply);
  EXPECT_EQ(only_message(reply), (Message{2, f}));
}

// An address has one encoding: IPv4 in 4 bytes, never mapped into 16; and
// a record holds the family its tag says.
TEST(ControlTlv, AddressesHaveOneEncoding) {
  const Bytes head = tlv(Tag::proto, bytes({6})) + tlv(Tag::queue, be16(0)) + tlv(Tag::remote_port, be16(80));
  const Bytes mapped = bytes({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 192, 0, 2, 1});
  ProtocolError e = only_error(frame(MsgType::connect, 1, head + tlv(Tag::remote_addr, mapped)));
  EXPECT_EQ(e.severity, Severity::reject);
  EXPECT_NE(e.text.find("IPv4-mapped"), std::string::npos) << e.text;
  e = only_error(frame(MsgType::connect, 1, head + tlv(Tag::remote_addr, Bytes(8, std::byte{1}))));
  EXPECT_NE(e.text.find("expected 4 (IPv4) or 16 (IPv6)"), std::string::npos) << e.text;
  e = only_error(frame(MsgType::connect, 1, head + tlv(Tag::remote_addr, Bytes(16))));
  EXPECT_NE(e.text.find("is ::"), std::string::npos) << e.text;

  // flow6 with a mapped address; flow6 of the flow record's size.
  Bytes flow6 = bytes({6, 0, 0, 80}) + mapped + bytes({0, 80, 0, 0});
  EXPECT_EQ(only_error(frame(MsgType::resync, 1, tlv(Tag::flow6, flow6))).severity, Severity::reject);
  EXPECT_EQ(only_error(frame(MsgType::resync, 1, tlv(Tag::flow6, bytes({6, 0, 0, 80, 10, 0, 0, 1, 0, 80, 0, 0}))))
                .severity,
            Severity::reject);
  // The encoder refuses the same: an IPv6 connect to ::, and nothing else.
  EXPECT_FALSE(encode(Message{1, Connect{.proto = Proto::tcp, .remote_addr = IpAddr{}, .remote_port = 80}}).ok());
}

TEST(ControlGolden, Error) {
  const Message m{0x01020304, Error{.code = ErrorCode::port_in_use, .text = "port 80 taken"}};
  const Bytes golden = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0xFF, 0x00, 0x00,  // "XKC1" v1 ERROR, no flags
      0x00, 0x00, 0x00, 0x17, 0x01, 0x02, 0x03, 0x04,  // body 23 bytes, id echoed
      0x00, 0x60, 0x00, 0x02, 0x00, 0x04,              // error_code port_in_use
      0x00, 0x61, 0x00, 0x0D, 'p', 'o', 'r', 't', ' ', '8', '0', ' ', 't', 'a', 'k', 'e', 'n',
  });
  EXPECT_EQ(encoded(m), golden);
  EXPECT_EQ(only_message(golden), m);
}

TEST(ControlGolden, ResyncRecords) {
  Resync r;
  r.listeners = {{Proto::udp, 53, true, 1}};
  r.flows = {{Proto::tcp, 49152, Ipv4Addr{0xC0000201}, 80, 2}};
  r.more = true;
  const Message m{9, r};
  const Bytes golden = bytes({
      0x58, 0x4B, 0x43, 0x31, 0x01, 0x06, 0x00, 0x00,  // "XKC1" v1 RESYNC, no flags
      0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x09,  // body 31 bytes, id 9
      0x00, 0x20, 0x00, 0x06,                          // listener:
      0x11, 0x01, 0x00, 0x35, 0x00, 0x01,              //   udp, group, port 53, queue 1
      0x00, 0x21, 0x00, 0x0C,                          // flow:
      0x06, 0x00, 0xC0, 0x00,                          //   tcp, no flags, local port 49152
      0xC0, 0x00, 0x02, 0x01, 0x00, 0x50, 0x00, 0x02,  //   192.0.2.1 port 80, queue 2
      0x00, 0x22, 0x00, 0x01, 0x01,                    // more
  });
  EXPECT_EQ(encoded(m), golden);
  EXPECT_EQ(only_message(golden), m);
}

// ---- delivery in pieces --------------------------------------------------------------

Bytes all_samples_stream() {
  Bytes stream;
  for (const Message& m : samples()) stream += encoded(m);
  return stream;
}

TEST(ControlReader, ManyMessagesInOneFeed) {
  Drained d = read_all(all_samples_stream());
  EXPECT_TRUE(d.errors.empty());
  EXPECT_EQ(d.messages, samples());
}

TEST(ControlReader, OneByteAtATime) {
  const Bytes stream = all_samples_stream();
  FrameReader r;
  std::vector<Message> got;
  for (std::byte b : stream) {
    r.feed(std::span(&b, 1));
    Drained d = drain(r);
    ASSERT_TRUE(d.errors.empty());
    for (Message& m : d.messages) got.push_back(std::move(m));
  }
  EXPECT_EQ(got, samples());
  EXPECT_EQ(r.buffered(), 0u);
}

TEST(ControlReader, RandomPieces) {
  const Bytes stream = all_samples_stream();
  std::mt19937 rng(12345);
  for (int round = 0; round < 200; ++round) {
    FrameReader r;
    std::vector<Message> got;
    std::size_t off = 0;
    while (off < stream.size()) {
      std::size_t n = std::min<std::size_t>(stream.size() - off, 1 + rng() % 64);
      r.feed(std::span(stream).subspan(off, n));
      off += n;
      Drained d = drain(r);
      ASSERT_TRUE(d.errors.empty());
      for (Message& m : d.messages) got.push_back(std::move(m));
    }
    ASSERT_EQ(got, samples());
  }
}

TEST(ControlReader, NeedMoreSaysHowMuch) {
  const Bytes f = encoded(samples()[0]);
  FrameReader r;
  EXPECT_EQ(r.next().missing(), kHeaderSize);
  r.feed(std::span(f).first(5));
  EXPECT_EQ(r.next().missing(), kHeaderSize - 5);
  r.feed(std::span(f).subspan(5, kHeaderSize - 5));
  EXPECT_EQ(r.next().missing(), f.size() - kHeaderSize);
  r.feed(std::span(f).subspan(kHeaderSize, f.size() - kHeaderSize - 1));
  EXPECT_EQ(r.next().missing(), 1u);
  r.feed(std::span(f).last(1));
  EXPECT_TRUE(r.next().has_message());
  EXPECT_TRUE(r.next().need_more());
}

// ---- truncation ------------------------------------------------------------------------

TEST(ControlHostile, EveryTruncationWaitsForMore) {
  for (const Message& m : samples()) {
    const Bytes f = encoded(m);
    for (std::size_t len = 0; len < f.size(); ++len) {
      FrameReader r;
      r.feed(std::span(f).first(len));
      ReadResult res = r.next();
      ASSERT_TRUE(res.need_more()) << to_string(type_of(m.body)) << " cut at " << len;
      EXPECT_EQ(r.buffered(), len);
    }
  }
}

// A body cut short with the header's length made to agree: the frame is
// whole, so it must decode (when only optional fields went) or be rejected,
// and the stream goes on.
TEST(ControlHostile, EveryTruncatedBodyIsDecodedOrRejected) {
  std::size_t rejected = 0;
  for (const Message& m : samples()) {
    const Bytes f = encoded(m);
    for (std::size_t len = kHeaderSize; len < f.size(); ++len) {
      Bytes cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
      const Bytes length = be32(static_cast<std::uint32_t>(len - kHeaderSize));
      std::copy(length.begin(), length.end(), cut.begin() + 8);
      Drained d = read_all(cut + ping_frame(99));
      ASSERT_FALSE(d.dropped);
      ASSERT_EQ(d.messages.size() + d.errors.size(), 2u);
      ASSERT_EQ(d.messages.back(), (Message{99, Ping{}}));
      if (!d.errors.empty()) {
        ++rejected;
        EXPECT_EQ(d.errors[0].request_id, m.request_id);
        EXPECT_EQ(d.errors[0].type, static_cast<std::uint8_t>(type_of(m.body)));
      } else {
        EXPECT_FALSE(validate(d.messages[0]).has_value());
      }
    }
  }
  EXPECT_GT(rejected, 100u);
}

// ---- corruption ------------------------------------------------------------------------

// Whatever decodes from hostile bytes is a valid message that re-encodes to
// itself.
void expect_sane(const Message& m) {
  ASSERT_FALSE(validate(m).has_value()) << validate(m)->text;
  Result<Bytes> again = encode(m);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(only_message(*again), m);
}

TEST(ControlHostile, EverySingleByteCorruption) {
  std::size_t decoded = 0;
  std::size_t rejected = 0;
  std::size_t dropped = 0;
  std::size_t waiting = 0;
  for (const Message& m : samples()) {
    const Bytes f = encoded(m);
    for (std::size_t at = 0; at < f.size(); ++at) {
      for (int x = 1; x < 256; ++x) {
        Bytes bad = f;
        bad[at] ^= static_cast<std::byte>(x);
        Drained d = read_all(bad + ping_frame(99));
        ASSERT_LE(d.calls, 4u);
        for (const Message& got : d.messages) expect_sane(got);
        for (const ProtocolError& e : d.errors) ASSERT_FALSE(e.text.empty());
        if (d.dropped) {
          ++dropped;
          ASSERT_LT(at, 12u) << "only the magic, version and length can break the stream";
          continue;
        }
        if (at >= 8 && at < 12) {  // a wrong body length may swallow the next frame
          if (d.messages.size() + d.errors.size() < 2) ++waiting;
          continue;
        }
        // Anything else leaves the stream in step: the PING comes out.
        ASSERT_EQ(d.messages.size() + d.errors.size(), 2u) << "byte " << at << " ^ " << x;
        ASSERT_EQ(d.messages.back(), (Message{99, Ping{}}));
        if (d.errors.empty()) {
          ++decoded;
        } else {
          ++rejected;
          EXPECT_EQ(d.errors[0].severity, Severity::reject);
        }
      }
    }
  }
  EXPECT_GT(decoded, 0u);
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(dropped, 0u);
  EXPECT_GT(waiting, 0u);
}

// ---- garbage -----------------------------------------------------------------------------

// Feeds a stream in random pieces and checks the reader never loops: every
// call returns need-more, consumes a frame, or drops.
Drained feed_in_pieces(const Bytes& stream, std::mt19937_64& rng) {
  FrameReader r;
  Drained all;
  std::size_t off = 0;
  while (off < stream.size()) {
    const std::size_t n = std::min<std::size_t>(stream.size() - off, 1 + rng() % 97);
    r.feed(std::span(stream).subspan(off, n));
    off += n;
    Drained d = drain(r);
    EXPECT_LE(d.calls, n / kHeaderSize + 2);
    for (Message& m : d.messages) all.messages.push_back(std::move(m));
    for (ProtocolError& e : d.errors) all.errors.push_back(std::move(e));
    all.calls += d.calls;
    if (d.dropped) {
      all.dropped = true;
      EXPECT_TRUE(r.broken());
      r.feed(std::span(stream).subspan(off));
      EXPECT_EQ(r.buffered(), 0u);
      break;
    }
  }
  for (const Message& m : all.messages) expect_sane(m);
  return all;
}

TEST(ControlFuzz, RandomBytes) {
  std::mt19937_64 rng(1);
  std::size_t dropped = 0;
  for (int i = 0; i < 20000; ++i) {
    Bytes stream(rng() % 300);
    for (std::byte& b : stream) b = static_cast<std::byte>(rng());
    if (i % 4 == 0 && stream.size() >= 16) {  // sometimes a good header prefix, so the length check runs too
      const Bytes head = be32(kMagic) + bytes({1});
      std::copy(head.begin(), head.end(), stream.begin());
    }
    Drained d = feed_in_pieces(stream, rng);
    dropped += d.dropped;
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(dropped, 10000u);
}

// The size of a well-formed value for a tag, or 0 for a string or record.
std::size_t fixed_size(Tag t) {
  switch (t) {
    case Tag::proto: case Tag::group: case Tag::more: case Tag::version: case Tag::prefix_len: return 1;
    case Tag::queues: case Tag::local_port: case Tag::queue: case Tag::remote_port: case Tag::priority:
    case Tag::node_id: case Tag::mtu: case Tag::error_code: case Tag::versions: return 2;
    case Tag::pid: case Tag::remote_addr: case Tag::rule_id: case Tag::address: case Tag::gateway:
    case Tag::heartbeat_ms: return 4;
    case Tag::filterd_mac: case Tag::ethernet: return 6;
    case Tag::listener: return kListenerRecord;
    case Tag::flow: return kFlowRecord;
    case Tag::channel: return kChannelRecord;
    case Tag::secret: return 16;
    default: return 0;
  }
}

constexpr Tag kAllTags[] = {Tag::pad, Tag::name, Tag::pid, Tag::queues, Tag::versions, Tag::version,
                            Tag::proto, Tag::local_port, Tag::group, Tag::queue, Tag::remote_addr,
                            Tag::remote_port, Tag::listener, Tag::flow, Tag::more, Tag::expression,
                            Tag::priority, Tag::rule_id, Tag::node_id, Tag::memif_socket, Tag::channel,
                            Tag::filterd_mac, Tag::mtu, Tag::address, Tag::prefix_len, Tag::gateway,
                            Tag::secret, Tag::heartbeat_ms, Tag::counter, Tag::error_code, Tag::error_text,
                            Tag::token, Tag::ethernet};

// Small values most of the time, so ranges (queue < 64, proto 6 or 17) are
// sometimes met and whole messages decode.
std::byte small_byte(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: return static_cast<std::byte>(rng());
    case 1: return std::byte{6};
    case 2: return std::byte{1};
    default: return static_cast<std::byte>('a' + rng() % 26);
  }
}

Bytes random_body(std::mt19937_64& rng) {
  Bytes body;
  const std::size_t fields = rng() % 14;
  for (std::size_t i = 0; i < fields; ++i) {
    std::uint16_t tag = static_cast<std::uint16_t>(kAllTags[rng() % std::size(kAllTags)]);
    if (rng() % 16 == 0) tag = static_cast<std::uint16_t>(rng());
    std::size_t len = fixed_size(static_cast<Tag>(tag));
    if (len == 0 || rng() % 8 == 0) len = rng() % 24;
    if (static_cast<Tag>(tag) == Tag::counter && rng() % 2) len = kCounterRecordMin + rng() % 8;
    Bytes value(len);
    for (std::byte& b : value) b = small_byte(rng);
    if (static_cast<Tag>(tag) == Tag::counter && len >= kCounterRecordMin)
      value[8] = static_cast<std::byte>(len - kCounterRecordMin);
    body += tlv(tag, value);
  }
  if (rng() % 8 == 0 && !body.empty()) body.resize(rng() % body.size());  // a cut TLV
  return body;
}

constexpr std::uint8_t kAllTypes[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A,
                                      0x0B, 0x80, 0x81, 0x82, 0x84, 0x87, 0x89, 0xFF};

TEST(ControlFuzz, RandomTlvBodies) {
  std::mt19937_64 rng(2);
  std::size_t messages = 0;
  std::size_t rejects = 0;
  for (int i = 0; i < 30000; ++i) {
    Bytes stream;
    const int frames = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < frames; ++k) {
      std::uint8_t type = kAllTypes[rng() % std::size(kAllTypes)];
      if (rng() % 32 == 0) type = static_cast<std::uint8_t>(rng());
      const std::uint16_t flags = rng() % 64 == 0 ? static_cast<std::uint16_t>(rng()) : 0;
      stream += frame(type, static_cast<std::uint32_t>(rng()), random_body(rng), flags);
    }
    Drained d = feed_in_pieces(stream, rng);
    EXPECT_FALSE(d.dropped);
    EXPECT_EQ(d.messages.size() + d.errors.size(), static_cast<std::size_t>(frames));
    messages += d.messages.size();
    rejects += d.errors.size();
    if (HasFailure()) return;
  }
  EXPECT_GT(messages, 1000u);
  EXPECT_GT(rejects, 1000u);
}

TEST(ControlFuzz, MutatedStreams) {
  std::mt19937_64 rng(3);
  std::vector<Bytes> frames;
  for (const Message& m : samples()) frames.push_back(encoded(m));
  std::size_t messages = 0;
  for (int i = 0; i < 20000; ++i) {
    Bytes stream;
    for (int k = 0; k < 3; ++k) stream += frames[rng() % frames.size()];
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < mutations && !stream.empty(); ++k) {
      const std::size_t at = rng() % stream.size();
      switch (rng() % 4) {
        case 0: stream[at] = static_cast<std::byte>(rng()); break;
        case 1: stream.erase(stream.begin() + static_cast<std::ptrdiff_t>(at)); break;
        case 2: stream.insert(stream.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::byte>(rng())); break;
        default: stream[at] ^= static_cast<std::byte>(1u << (rng() % 8)); break;
      }
    }
    messages += feed_in_pieces(stream, rng).messages.size();
    if (HasFailure()) return;
  }
  EXPECT_GT(messages, 10000u);
}

// ---- framing errors ---------------------------------------------------------------------

TEST(ControlFraming, WrongMagicDropsAtTheFirstByte) {
  FrameReader r;
  r.feed(bytes({'Y'}));
  ReadResult res = r.next();
  ASSERT_TRUE(res.has_error());
  EXPECT_TRUE(res.error().must_drop());
  EXPECT_FALSE(should_answer(res.error()));
  EXPECT_NE(res.error().text.find("magic"), std::string::npos);
  // The reader stays broken and ignores anything fed later.
  r.feed(ping_frame(1));
  EXPECT_EQ(r.buffered(), 0u);
  EXPECT_TRUE(r.broken());
  EXPECT_TRUE(r.next().error().must_drop());

  Bytes f = ping_frame(1);
  f[3] = std::byte{0x32};  // "XKC2"
  EXPECT_TRUE(only_error(f).must_drop());
}

TEST(ControlFraming, WrongVersionDrops) {
  for (int version : {0, 2, 255}) {
    const ProtocolError e = only_error(frame(0x0B, 5, {}, 0, static_cast<std::uint8_t>(version)));
    EXPECT_TRUE(e.must_drop());
    EXPECT_EQ(e.code, ErrorCode::unsupported_version);
  }
  // Known from the fifth byte on: no need to wait for the whole header.
  FrameReader r;
  r.feed(be32(kMagic) + bytes({2}));
  EXPECT_TRUE(r.next().has_error());
}

TEST(ControlFraming, OversizedBodyDropsBeforeItArrives) {
  Bytes head = be32(kMagic) + bytes({1, 0x0B, 0, 0}) + be32(kMaxBody + 1) + be32(3);
  const ProtocolError e = only_error(head);
  EXPECT_TRUE(e.must_drop());
  EXPECT_EQ(e.request_id, 3u);
  EXPECT_NE(e.text.find("65537"), std::string::npos);
  EXPECT_TRUE(only_error(be32(kMagic) + bytes({1, 0x0B, 0, 0}) + be32(0xFFFFFFFF) + be32(3)).must_drop());
}

TEST(ControlFraming, LargestBodyIsAccepted) {
  // A PING padded to exactly 65536 bytes with 16384 empty pad TLVs.
  Bytes body;
  for (std::size_t i = 0; i < kMaxBody / kTlvHeaderSize; ++i) body += tlv(Tag::pad, {});
  ASSERT_EQ(body.size(), kMaxBody);
  EXPECT_EQ(only_message(frame(MsgType::ping, 4, body)), (Message{4, Ping{}}));
}

TEST(ControlFraming, NonzeroFlagsRejectOnlyThatFrame) {
  Drained d = read_all(frame(0x0B, 8, {}, 0x0001) + ping_frame(9));
  ASSERT_EQ(d.errors.size(), 1u);
  EXPECT_EQ(d.errors[0].severity, Severity::reject);
  EXPECT_EQ(d.errors[0].request_id, 8u);
  EXPECT_NE(d.errors[0].text.find("flags"), std::string::npos);
  EXPECT_EQ(d.messages, std::vector<Message>{(Message{9, Ping{}})});
}

TEST(ControlFraming, UnknownTypeIsRejectedAndAnsweredOnlyIfARequest) {
  ProtocolError e = only_error(frame(0x33, 21, tlv(Tag::queue, be16(1))));
  EXPECT_EQ(e.severity, Severity::reject);
  EXPECT_TRUE(should_answer(e));
  const Message reply = make_error(e);
  EXPECT_EQ(reply.request_id, 21u);
  EXPECT_EQ(std::get<Error>(reply.body).code, ErrorCode::bad_message);
  EXPECT_TRUE(encode(reply).ok());

  e = only_error(frame(0x91, 22, {}));
  EXPECT_FALSE(should_answer(e));  // never answer a reply, not even a broken one
}

// ---- TLV rules ---------------------------------------------------------------------------

const Bytes kListenBody = tlv(Tag::proto, bytes({6})) + tlv(Tag::local_port, be16(80)) + tlv(Tag::queue, be16(1));
const Message kListen{30, Listen{.proto = Proto::tcp, .port = 80, .group = false, .queue = 1}};

TEST(ControlTlv, UnknownTagsWithoutTheCriticalBitAreSkipped) {
  EXPECT_EQ(only_message(frame(MsgType::listen, 30, kListenBody)), kListen);
  EXPECT_EQ(only_message(frame(MsgType::listen, 30, tlv(0x7ABC, bytes({1, 2, 3})) + kListenBody)), kListen);
  EXPECT_EQ(only_message(frame(MsgType::listen, 30, kListenBody + tlv(Tag::pad, Bytes(9)))), kListen);
  // A tag known elsewhere (HELLO's name) means nothing in LISTEN.
  EXPECT_EQ(only_message(frame(MsgType::listen, 30, kListenBody + tlv(Tag::name, text_bytes("x")))), kListen);
  // Even a huge unknown value is just skipped.
  EXPECT_EQ(only_message(frame(MsgType::listen, 30, kListenBody + tlv(0x1234, Bytes(65535 - 20)))), kListen);
}

TEST(ControlTlv, UnknownCriticalTagRejects) {
  const ProtocolError e = only_error(frame(MsgType::listen, 30, kListenBody + tlv(0x8ABC, bytes({0}))));
  EXPECT_EQ(e.severity, Severity::reject);
  EXPECT_EQ(e.request_id, 30u);
  EXPECT_NE(e.text.find("critical"), std::string::npos);
  EXPECT_NE(e.text.find("0x8ABC"), std::string::npos);
  EXPECT_TRUE(only_error(frame(MsgType::ping, 1, tlv(0x8000, {}))).severity == Severity::reject);
}

TEST(ControlTlv, DuplicateTagRejects) {
  const ProtocolError e = only_error(frame(MsgType::listen, 30, kListenBody + tlv(Tag::local_port, be16(81))));
  EXPECT_EQ(e.severity, Severity::reject);
  EXPECT_NE(e.text.find("local_port"), std::string::npos);
  EXPECT_NE(e.text.find("twice"), std::string::npos);
  // Repeated fields may repeat, single ones in the same message may not.
  Bytes more = tlv(Tag::more, bytes({1}));
  EXPECT_EQ(only_error(frame(MsgType::resync, 2, more + more)).severity, Severity::reject);
}

TEST(ControlTlv, MissingRequiredTagRejects) {
  const ProtocolError e =
      only_error(frame(MsgType::listen, 30, tlv(Tag::proto, bytes({6})) + tlv(Tag::queue, be16(1))));
  EXPECT_EQ(e.severity, Severity::reject);
  EXPECT_NE(e.text.find("missing"), std::string::npos);
  EXPECT_NE(e.text.find("local_port"), std::string::npos);
  EXPECT_TRUE(only_error(frame(MsgType::error, 1, {})).severity == Severity::reject);
}

// Splits a frame's body into its TLVs (for well-formed frames only).
std::vector<Bytes> tlvs_of(const Bytes& f) {
  std::vector<Bytes> out;
  std::size_t off = kHeaderSize;
  while (off < f.size()) {
    const std::size_t len = (std::to_integer<std::size_t>(f[off + 2]) << 8) | std::to_integer<std::size_t>(f[off + 3]);
    out.emplace_back(f.begin() + static_cast<std::ptrdiff_t>(off),
                     f.begin() + static_cast<std::ptrdiff_t>(off + kTlvHeaderSize + len));
    off += kTlvHeaderSize + len;
  }
  return out;
}

Bytes body_of(const std::vector<Bytes>& tlvs) {
  Bytes b;
  for (const Bytes& t : tlvs) b += t;
  return b;
}

// Dropping any one TLV of any sample leaves a message that is either still
// valid (the TLV was optional or one of a list) or rejected as incomplete;
// shuffling the TLVs changes nothing.
TEST(ControlTlv, EveryFieldRemovedOrReordered) {
  std::mt19937 rng(7);
  for (const Message& m : samples()) {
    const Bytes f = encoded(m);
    const auto type = static_cast<std::uint8_t>(type_of(m.body));
    std::vector<Bytes> fields = tlvs_of(f);
    for (std::size_t i = 0; i < fields.size(); ++i) {
      std::vector<Bytes> less = fields;
      less.erase(less.begin() + static_cast<std::ptrdiff_t>(i));
      Drained d = read_all(frame(type, m.request_id, body_of(less)));
      ASSERT_EQ(d.messages.size() + d.errors.size(), 1u);
      if (!d.errors.empty()) {
        EXPECT_EQ(d.errors[0].severity, Severity::reject);
      }
      for (const Message& got : d.messages) expect_sane(got);
    }
    // Different tags in any order; a repeated tag keeps its order (it is the
    // order of the list).
    std::vector<std::pair<std::uint32_t, Bytes>> keyed;
    std::map<std::uint16_t, std::uint32_t> key_of_tag;
    for (const Bytes& t : fields) {
      const auto tag = static_cast<std::uint16_t>(std::to_integer<int>(t[0]) << 8 | std::to_integer<int>(t[1]));
      if (!key_of_tag.count(tag)) key_of_tag[tag] = rng();
      keyed.emplace_back(key_of_tag[tag], t);
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    fields.clear();
    for (auto& [key, t] : keyed) fields.push_back(std::move(t));
    EXPECT_EQ(only_message(frame(type, m.request_id, body_of(fields))), m);
  }
}

TEST(ControlTlv, RecordsMayGrowInLaterVersions) {
  // A listener record with two bytes a later version added: they are skipped.
  Bytes body = tlv(Tag::listener, bytes({17, 1, 0, 53, 0, 2, 0xEE, 0xEE}));
  Resync want;
  want.listeners = {{Proto::udp, 53, true, 2}};
  EXPECT_EQ(only_message(frame(MsgType::resync, 3, body)), (Message{3, want}));
  // Unknown flag bits are not skipped.
  EXPECT_EQ(only_error(frame(MsgType::resync, 3, tlv(Tag::listener, bytes({17, 3, 0, 53, 0, 2})))).severity,
            Severity::reject);
  // A short record is rejected.
  EXPECT_EQ(only_error(frame(MsgType::resync, 3, tlv(Tag::flow, Bytes(11)))).severity, Severity::reject);
  // The resume record may grow too.
  const Bytes hello = tlv(Tag::name, text_bytes("n")) + tlv(Tag::pid, be32(1)) + tlv(Tag::queues, be16(1)) +
                      tlv(Tag::versions, bytes({1, 1})) + tlv(Tag::resume, bytes({1, 0, 0, 9, 0xEE, 0xEE})) +
                      tlv(Tag::channel, bytes({0, 0, 2, 0x40, 2, 0x78, 0x6e, 0, 9, 0, 0xEE}));
  Hello h{.name = "n", .pid = 1, .queues = 1, .version_min = 1, .version_max = 1,
          .resume = Resume{9, {Channel{576, MacAddr{{0x02, 0x78, 0x6e, 0, 9, 0}}}}}};
  EXPECT_EQ(only_message(frame(MsgType::hello, 4, hello)), (Message{4, h}));
}

TEST(ControlTlv, BadValuesReject) {
  struct Case {
    const char* what;
    MsgType type;
    Bytes body;
  };
  const Bytes port = tlv(Tag::local_port, be16(80));
  const Bytes queue = tlv(Tag::queue, be16(1));
  const Bytes tcp = tlv(Tag::proto, bytes({6}));
  const Bytes hello_rest = tlv(Tag::pid, be32(1)) + tlv(Tag::queues, be16(1)) + tlv(Tag::versions, bytes({1, 1}));
  const Bytes channel = tlv(Tag::channel, bytes({0, 0, 0, 1, 2, 0, 0, 0, 0, 1}));
  const std::vector<Case> cases = {
      {"proto 3", MsgType::listen, tlv(Tag::proto, bytes({3})) + port + queue},
      {"proto too long", MsgType::listen, tlv(Tag::proto, bytes({0, 6})) + port + queue},
      {"port too short", MsgType::listen, tcp + tlv(Tag::local_port, bytes({80})) + queue},
      {"group 2", MsgType::listen, tcp + port + queue + tlv(Tag::group, bytes({2}))},
      {"group without port", MsgType::listen, tcp + tlv(Tag::local_port, be16(0)) + queue + tlv(Tag::group, bytes({1}))},
      {"queue 64", MsgType::listen, tcp + port + tlv(Tag::queue, be16(64))},
      {"unlisten port 0", MsgType::unlisten, tcp + tlv(Tag::local_port, be16(0))},
      {"connect to port 0", MsgType::connect,
       tcp + queue + tlv(Tag::remote_addr, be32(0x0A000001)) + tlv(Tag::remote_port, be16(0))},
      {"icmp connect with a remote port", MsgType::connect,
       tlv(Tag::proto, bytes({1})) + queue + tlv(Tag::remote_addr, be32(0x0A000001)) + tlv(Tag::remote_port, be16(7))},
      {"icmp listen", MsgType::listen, tlv(Tag::proto, bytes({1})) + port + queue},
      {"icmp listener", MsgType::resync, tlv(Tag::listener, bytes({1, 0, 0, 80, 0, 0}))},
      {"tcp flow without a remote port", MsgType::resync,
       tlv(Tag::flow, bytes({6, 0, 0, 80, 10, 0, 0, 1, 0, 0, 0, 0}))},
      {"flow with proto 2", MsgType::resync, tlv(Tag::flow, bytes({2, 0, 0, 80, 10, 0, 0, 1, 0, 0, 0, 0}))},
      {"connect to 0.0.0.0", MsgType::connect,
       tcp + queue + tlv(Tag::remote_addr, be32(0)) + tlv(Tag::remote_port, be16(80))},
      {"empty name", MsgType::hello, tlv(Tag::name, {}) + hello_rest},
      {"name too long", MsgType::hello, tlv(Tag::name, text_bytes(std::string(65, 'n'))) + hello_rest},
      {"NUL in name", MsgType::hello, tlv(Tag::name, bytes({'a', 0, 'b'})) + hello_rest},
      {"bad UTF-8", MsgType::hello, tlv(Tag::name, bytes({'a', 0xC0, 0x80})) + hello_rest},
      {"surrogate", MsgType::hello, tlv(Tag::name, bytes({0xED, 0xA0, 0x80})) + hello_rest},
      {"cut UTF-8", MsgType::hello, tlv(Tag::name, bytes({'a', 0xE2, 0x9C})) + hello_rest},
      {"queues 0", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + tlv(Tag::pid, be32(1)) + tlv(Tag::queues, be16(0)) +
           tlv(Tag::versions, bytes({1, 1}))},
      {"versions 2..1", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + tlv(Tag::pid, be32(1)) + tlv(Tag::queues, be16(1)) +
           tlv(Tag::versions, bytes({2, 1}))},
      {"resume of node 0", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + hello_rest + tlv(Tag::resume, bytes({1, 0, 0, 0})) + channel},
      {"resume format 2", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + hello_rest + tlv(Tag::resume, bytes({2, 0, 0, 3})) + channel},
      {"resume with flags", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + hello_rest + tlv(Tag::resume, bytes({1, 0x80, 0, 3})) + channel},
      {"resume record too short", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + hello_rest + tlv(Tag::resume, bytes({1, 0, 0})) + channel},
      {"resume without channels", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + hello_rest + tlv(Tag::resume, bytes({1, 0, 0, 3}))},
      {"resume with more channels than queues", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + hello_rest + tlv(Tag::resume, bytes({1, 0, 0, 3})) + channel + channel},
      {"channel without resume", MsgType::hello, tlv(Tag::name, text_bytes("n")) + hello_rest + channel},
      {"channel record too short", MsgType::hello,
       tlv(Tag::name, text_bytes("n")) + hello_rest + tlv(Tag::resume, bytes({1, 0, 0, 3})) +
           tlv(Tag::channel, bytes({0, 0, 0, 1, 2, 0, 0, 0, 0}))},
      {"flow with unknown flags", MsgType::resync, tlv(Tag::flow, bytes({6, 2, 0, 80, 10, 0, 0, 1, 0, 9, 0, 0}))},
      {"expression too long", MsgType::rule_add, queue + tlv(Tag::expression, text_bytes(std::string(1025, 'e')))},
      {"rule id 0", MsgType::rule_del, tlv(Tag::rule_id, be32(0))},
      {"error code 0", MsgType::error, tlv(Tag::error_code, be16(0))},
      {"counter name longer than its record", MsgType::stats_reply,
       tlv(Tag::counter, Bytes(8) + bytes({5, 'a', 'b'}))},
      {"counter name too long", MsgType::stats_reply,
       tlv(Tag::counter, Bytes(8) + bytes({49}) + text_bytes(std::string(49, 'c')))},
      {"empty counter name", MsgType::stats_reply, tlv(Tag::counter, Bytes(9))},
      {"TLV header cut", MsgType::ping, bytes({0, 0, 0})},
      {"cursor of 33 bytes", MsgType::nodes, tlv(Tag::cursor, Bytes(33))},
      {"empty cursor", MsgType::rules, tlv(Tag::cursor, {})},
      {"limit 0", MsgType::ports, tlv(Tag::limit, be32(0))},
      {"limit too short", MsgType::ports, tlv(Tag::limit, be16(1))},
      {"flows of node 0", MsgType::flows, tlv(Tag::node_id, be16(0))},
      {"node record too short", MsgType::nodes_reply, tlv(Tag::node, Bytes(48))},
      {"node name longer than its record", MsgType::nodes_reply,
       tlv(Tag::node, bytes({0, 1, 0, 1}) + Bytes(44) + bytes({3, 'a'}))},
      {"node name empty", MsgType::nodes_reply, tlv(Tag::node, bytes({0, 1, 0, 1}) + Bytes(45))},
      {"node id 0", MsgType::nodes_reply, tlv(Tag::node, bytes({0, 0, 0, 1}) + Bytes(44) + bytes({1, 'a'}))},
      {"node queues 0", MsgType::nodes_reply, tlv(Tag::node, bytes({0, 1, 0, 0}) + Bytes(44) + bytes({1, 'a'}))},
      {"port record flags", MsgType::ports_reply, tlv(Tag::port, bytes({6, 8, 0, 80, 0, 1, 0, 0}))},
      {"lease of udp ports", MsgType::lease, tlv(Tag::proto, bytes({17})) + queue + tlv(Tag::count, be16(8))},
      {"lease of neither a count nor ports", MsgType::lease, tcp + queue},
      {"lease of a count and ports", MsgType::lease, tcp + queue + tlv(Tag::count, be16(8)) + tlv(Tag::ports, be16(5000))},
      {"lease count over the cap", MsgType::lease, tcp + queue + tlv(Tag::count, be16(1025))},
      {"lease of port 0", MsgType::lease, tcp + queue + tlv(Tag::ports, be16(5000) + be16(0))},
      {"lease ports of odd length", MsgType::lease, tcp + queue + tlv(Tag::ports, bytes({0x13, 0x88, 0x13}))},
      {"lease ports empty", MsgType::lease, tcp + queue + tlv(Tag::ports, {})},
      {"lease ports over the cap", MsgType::lease, tcp + queue + tlv(Tag::ports, Bytes(2050, std::byte{1}))},
      {"lease queue 64", MsgType::lease, tcp + tlv(Tag::queue, be16(64)) + tlv(Tag::count, be16(8))},
      {"lease reply of port 0", MsgType::lease_reply, tlv(Tag::ports, be16(0))},
      {"port record proto", MsgType::ports_reply, tlv(Tag::port, bytes({1, 2, 0, 80, 0, 1, 0, 0}))},
      {"port record port 0", MsgType::ports_reply, tlv(Tag::port, bytes({6, 2, 0, 0, 0, 1, 0, 0}))},
      {"port record short", MsgType::ports_reply, tlv(Tag::port, bytes({6, 2, 0, 80, 0, 1, 0}))},
      {"flows reply without total", MsgType::flows_reply, {}},
      {"node flow short", MsgType::flows_reply,
       tlv(Tag::total, be32(1)) + tlv(Tag::node_flow, bytes({0, 1, 6, 0, 0, 80, 10, 0, 0, 1, 0, 80, 0}))},
      {"node flow flags", MsgType::flows_reply,
       tlv(Tag::total, be32(1)) + tlv(Tag::node_flow, bytes({0, 1, 6, 2, 0, 80, 10, 0, 0, 1, 0, 80, 0, 0}))},
      {"node flow queue 64", MsgType::flows_reply,
       tlv(Tag::total, be32(1)) + tlv(Tag::node_flow, bytes({0, 1, 6, 0, 0, 80, 10, 0, 0, 1, 0, 80, 0, 64}))},
      {"rule expression longer than its record", MsgType::rules_reply,
       tlv(Tag::rule, bytes({0, 0, 0, 1}) + Bytes(14) + be16(5) + text_bytes("udp"))},
      {"rule expression empty", MsgType::rules_reply, tlv(Tag::rule, bytes({0, 0, 0, 1}) + Bytes(16))},
      {"rule id 0 in a record", MsgType::rules_reply, tlv(Tag::rule, Bytes(18) + be16(3) + text_bytes("udp"))},
      {"rule expression over 1024", MsgType::rules_reply,
       tlv(Tag::rule, bytes({0, 0, 0, 1}) + Bytes(14) + be16(1025) + text_bytes(std::string(1025, 'e')))},
      {"rule add for node 0 given", MsgType::rule_add,
       queue + tlv(Tag::expression, text_bytes("udp")) + tlv(Tag::node_id, be16(0))},
      {"rule add node id too short", MsgType::rule_add,
       queue + tlv(Tag::expression, text_bytes("udp")) + tlv(Tag::node_id, bytes({2}))},
      {"TLV value runs past the body", MsgType::ping, bytes({0x12, 0x34, 0, 5, 1, 2, 3, 4})},
  };
  for (const Case& c : cases) {
    const ProtocolError e = only_error(frame(c.type, 77, c.body) );
    EXPECT_EQ(e.severity, Severity::reject) << c.what;
    EXPECT_EQ(e.request_id, 77u) << c.what;
    EXPECT_FALSE(e.text.empty()) << c.what;
  }
}

TEST(ControlTlv, ListCapsAreEnforced) {
  Bytes listeners;
  for (std::size_t i = 0; i <= kMaxResyncListeners; ++i)
    listeners += tlv(Tag::listener, bytes({6, 0, 0, 80, 0, 0}));
  ProtocolError e = only_error(frame(MsgType::resync, 1, listeners));
  EXPECT_EQ(e.severity, Severity::reject);
  EXPECT_NE(e.text.find("more than 1024"), std::string::npos);

  Bytes flows;
  for (std::size_t i = 0; i <= kMaxResyncFlows; ++i)
    flows += tlv(Tag::flow, bytes({6, 0, 0, 80, 10, 0, 0, 1, 0, 80, 0, 0}));
  EXPECT_EQ(only_error(frame(MsgType::resync, 1, flows)).severity, Severity::reject);
  // An IPv6 flow counts twice: 1536 of them fill a RESYNC, and one IPv4
  // flow more is over.
  const Bytes one_flow6 = tlv(Tag::flow6, bytes({6, 0, 0, 80, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                                 0, 80, 0, 0}));
  Bytes flows6;
  for (std::size_t i = 0; i < kMaxResyncFlows / 2; ++i) flows6 += one_flow6;
  Drained full = read_all(frame(MsgType::resync, 1, flows6));
  ASSERT_TRUE(full.errors.empty());
  EXPECT_EQ(std::get<Resync>(full.messages.at(0).body).flows.size(), kMaxResyncFlows / 2);
  e = only_error(frame(MsgType::resync, 1, flows6 + tlv(Tag::flow, bytes({6, 0, 0, 80, 10, 0, 0, 1, 0, 80, 0, 0}))));
  EXPECT_EQ(e.severity, Severity::reject);
  EXPECT_NE(e.text.find("an IPv6 one twice"), std::string::npos) << e.text;

  Bytes counters;
  for (std::size_t i = 0; i <= kMaxCounters; ++i) counters += tlv(Tag::counter, Bytes(8) + bytes({1, 'c'}));
  EXPECT_EQ(only_error(frame(MsgType::stats_reply, 1, counters)).severity, Severity::reject);

  Bytes ports;
  for (std::size_t i = 0; i <= kMaxPortRecords; ++i) ports += tlv(Tag::port, bytes({6, 2, 0, 80, 0, 1, 0, 0}));
  e = only_error(frame(MsgType::ports_reply, 1, ports));
  EXPECT_NE(e.text.find("more than 4096"), std::string::npos);
  Bytes node_flows = tlv(Tag::total, be32(1));
  for (std::size_t i = 0; i <= kMaxFlowRecords; ++i)
    node_flows += tlv(Tag::node_flow, bytes({0, 1, 6, 0, 0, 80, 10, 0, 0, 1, 0, 80, 0, 0}));
  EXPECT_EQ(only_error(frame(MsgType::flows_reply, 1, node_flows)).severity, Severity::reject);

  HelloReply h = sample_hello_reply(kMaxQueues);
  Bytes f = encoded(Message{1, h});
  f = frame(MsgType::hello_reply, 1, Bytes(f.begin() + kHeaderSize, f.end()) + tlv(Tag::channel, Bytes(10)));
  EXPECT_EQ(only_error(f).severity, Severity::reject);
  EXPECT_EQ(only_error(frame(MsgType::hello_reply, 1, {})).severity, Severity::reject);
}

// ---- the encoder refuses what the decoder would refuse ---------------------------------

TEST(ControlEncode, InvalidMessagesAppendNothing) {
  Resync r;
  r.listeners.resize(kMaxResyncListeners + 1, ListenerEntry{Proto::tcp, 80, false, 0});
  std::vector<Message> bad = {
      {1, Hello{.name = "", .pid = 1, .queues = 1}},
      {1, Hello{.name = "n", .pid = 1, .queues = 65}},
      {1, Listen{.proto = Proto{1}, .port = 80}},
      {1, Listen{.proto = Proto::tcp, .port = 80, .queue = 64}},
      {1, r},
      {1, RuleAdd{.expression = std::string(kMaxExpression + 1, 'e')}},
      {1, HelloReply{}},
      {1, StatsReply{{{"", 1}}}},
      {1, Error{.code = ErrorCode{0}, .text = ""}},
      {1, Error{.code = ErrorCode::internal, .text = std::string("a\0b", 3)}},
  };
  for (const Message& m : bad) {
    SCOPED_TRACE(to_string(type_of(m.body)));
    ASSERT_TRUE(validate(m).has_value());
    EXPECT_EQ(validate(m)->code, ErrorCode::bad_message);
    Bytes out = bytes({1, 2, 3});
    Status s = encode_into(m, out);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(out, bytes({1, 2, 3}));
    EXPECT_FALSE(encode(m).ok());
  }
  EXPECT_EQ(encode(Message{1, r}).error(), Errc::too_large);
  EXPECT_EQ(encode(Message{1, Listen{.proto = Proto{1}}}).error(), Errc::invalid_argument);
}

TEST(ControlEncode, AppendsAfterWhatIsThere) {
  Bytes out = ping_frame(1);
  ASSERT_TRUE(encode_into(samples()[1], out).ok());
  Drained d = read_all(out);
  ASSERT_EQ(d.messages.size(), 2u);
  EXPECT_EQ(d.messages[1], samples()[1]);
}

// ---- helpers ---------------------------------------------------------------------------

TEST(ControlHelpers, MakeErrorAlwaysEncodes) {
  Message m = make_error(5, ErrorCode::not_found, "no rule 9");
  EXPECT_EQ(m, (Message{5, Error{.code = ErrorCode::not_found, .text = "no rule 9"}}));

  // Cut at a character boundary: 300 two-byte characters become 128 (256 bytes).
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "\xC3\xA9";
  m = make_error(5, ErrorCode::internal, long_text);
  EXPECT_EQ(std::get<Error>(m.body).text.size(), 256u);
  EXPECT_TRUE(encode(m).ok());
  long_text = "x" + long_text;  // now a cut in the middle would split a character
  m = make_error(5, ErrorCode::internal, long_text);
  EXPECT_EQ(std::get<Error>(m.body).text.size(), 255u);
  EXPECT_TRUE(encode(m).ok());

  m = make_error(5, ErrorCode::internal, std::string("a\0b\xFF", 4));
  EXPECT_EQ(std::get<Error>(m.body).text, "a?b?");
  EXPECT_TRUE(encode(m).ok());

  EXPECT_TRUE(encode(make_error(5, ErrorCode{0}, "")).ok());
}

TEST(ControlHelpers, SplitResync) {
  std::vector<ListenerEntry> listeners;
  std::vector<FlowEntry> flows;
  for (std::uint16_t i = 1; i <= 2500; ++i) listeners.push_back({Proto::tcp, i, false, 0});
  for (std::uint32_t i = 1; i <= 7000; ++i)
    flows.push_back({Proto::udp, static_cast<std::uint16_t>(i), Ipv4Addr{0x0A000000 + i}, 53, 1});
  const std::vector<Resync> parts = split_resync(listeners, flows);
  ASSERT_EQ(parts.size(), 3u);
  std::vector<ListenerEntry> all_listeners;
  std::vector<FlowEntry> all_flows;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].more, i + 1 < parts.size());
    Bytes b = encoded(Message{static_cast<std::uint32_t>(i), parts[i]});
    EXPECT_LE(b.size(), kHeaderSize + kMaxBody);
    all_listeners.insert(all_listeners.end(), parts[i].listeners.begin(), parts[i].listeners.end());
    all_flows.insert(all_flows.end(), parts[i].flows.begin(), parts[i].flows.end());
  }
  EXPECT_EQ(all_listeners, listeners);
  EXPECT_EQ(all_flows, flows);

  // IPv6 flows weigh twice: 3000 of them and 1000 IPv4 flows take three
  // messages, each within the body.
  std::vector<FlowEntry> mixed;
  for (std::uint32_t i = 1; i <= 4000; ++i)
    mixed.push_back({Proto::tcp, static_cast<std::uint16_t>(i), i % 4 == 0 ? IpAddr(Ipv4Addr{0x0A000000 + i}) : kDocV6,
                     80, 0});
  const std::vector<Resync> split = split_resync({}, mixed);
  ASSERT_EQ(split.size(), 3u);
  std::vector<FlowEntry> back;
  for (const Resync& r : split) {
    EXPECT_LE(encoded(Message{1, r}).size(), kHeaderSize + kMaxBody);
    back.insert(back.end(), r.flows.begin(), r.flows.end());
  }
  EXPECT_EQ(back, mixed);

  const std::vector<Resync> none = split_resync({}, {});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0], Resync{});
}

std::string hex_of(const Proof& p) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::byte b : p) {
    out += digits[std::to_integer<unsigned>(b) >> 4];
    out += digits[std::to_integer<unsigned>(b) & 15];
  }
  return out;
}

// RFC 4231's HMAC-SHA-256 test cases 1, 2 and 6 (a key longer than a block).
TEST(ControlAuth, HmacSha256MatchesRfc4231) {
  const Bytes key1(20, std::byte{0x0b});
  const std::string_view data1 = "Hi There";
  EXPECT_EQ(hex_of(hmac_sha256(key1, {std::as_bytes(std::span(data1.data(), data1.size()))})),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  const std::string_view key2 = "Jefe";
  const std::string_view data2a = "what do ya want ";
  const std::string_view data2b = "for nothing?";
  EXPECT_EQ(hex_of(hmac_sha256(std::as_bytes(std::span(key2.data(), key2.size())),
                               {std::as_bytes(std::span(data2a.data(), data2a.size())),
                                std::as_bytes(std::span(data2b.data(), data2b.size()))})),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
      << "parts hash as their concatenation";
  const Bytes key6(131, std::byte{0xaa});
  const std::string_view data6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  EXPECT_EQ(hex_of(hmac_sha256(key6, {std::as_bytes(std::span(data6.data(), data6.size()))})),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

// Each side's proof is bound to both nonces and to who makes it.
TEST(ControlAuth, ProofsDependOnTokenNoncesAndSide) {
  const Bytes token(32, std::byte{0x42});
  const Nonce a = fresh_nonce();
  const Nonce b = fresh_nonce();
  EXPECT_NE(a, b) << "fresh nonces differ";
  const Proof node = node_proof(token, a, b);
  EXPECT_TRUE(proofs_equal(node, node_proof(token, a, b)));
  EXPECT_FALSE(proofs_equal(node, server_proof(token, a, b))) << "a node's proof is not filterd's";
  EXPECT_FALSE(proofs_equal(node, node_proof(token, a, fresh_nonce())));
  EXPECT_FALSE(proofs_equal(node, node_proof(token, b, a)));
  Bytes other = token;
  other[0] ^= std::byte{1};
  EXPECT_FALSE(proofs_equal(node, node_proof(other, a, b)));
}

TEST(ControlHelpers, ReplyTypes) {
  EXPECT_EQ(reply_type(MsgType::hello), MsgType::hello_reply);
  EXPECT_EQ(reply_type(MsgType::listen), MsgType::listen_reply);
  EXPECT_EQ(reply_type(MsgType::connect), MsgType::connect_reply);
  EXPECT_EQ(reply_type(MsgType::rule_add), MsgType::rule_add_reply);
  EXPECT_EQ(reply_type(MsgType::stats), MsgType::stats_reply);
  EXPECT_EQ(reply_type(MsgType::nodes), MsgType::nodes_reply);
  EXPECT_EQ(reply_type(MsgType::ports), MsgType::ports_reply);
  EXPECT_EQ(reply_type(MsgType::flows), MsgType::flows_reply);
  EXPECT_EQ(reply_type(MsgType::rules), MsgType::rules_reply);
  EXPECT_EQ(reply_type(MsgType::lease), MsgType::lease_reply);
  EXPECT_STREQ(to_string(MsgType::lease), "LEASE");
  EXPECT_STREQ(to_string(MsgType::lease_reply), "LEASE_REPLY");
  EXPECT_EQ(reply_type(MsgType::auth), MsgType::auth_reply);
  EXPECT_STREQ(to_string(MsgType::auth), "AUTH");
  EXPECT_STREQ(to_string(MsgType::auth_reply), "AUTH_REPLY");
  for (MsgType t : {MsgType::unlisten, MsgType::release, MsgType::resync, MsgType::rule_del, MsgType::bye,
                    MsgType::ping})
    EXPECT_EQ(reply_type(t), MsgType::ok);
  EXPECT_EQ(reply_type(MsgType::ok), MsgType::error);
  for (const Message& m : samples()) {
    const MsgType t = type_of(m.body);
    EXPECT_STRNE(to_string(t), "?");
    if (is_request_type(static_cast<std::uint8_t>(t)) && reply_type(t) != MsgType::ok) {
      EXPECT_EQ(static_cast<std::uint8_t>(reply_type(t)), static_cast<std::uint8_t>(t) | 0x80);
    }
  }
  EXPECT_STREQ(to_string(ErrorCode::no_ports), "no_ports");
  EXPECT_STREQ(to_string(ErrorCode{999}), "unknown");
  EXPECT_STREQ(to_string(Proto::udp), "udp");
  EXPECT_STREQ(to_string(Proto::icmp), "icmp");
  EXPECT_STREQ(to_string(Proto{2}), "?");
}

}  // namespace
}  // namespace xk::filterd::ctl

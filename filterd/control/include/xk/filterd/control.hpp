#pragma once
// The filterd control protocol (docs/control-protocol.md): one struct per
// message, a Message variant carrying the request id, an encoder and a
// streaming FrameReader that decodes hostile input safely.
//
// The codec checks syntax and the fixed limits of every field (lengths, list
// caps, value ranges); whether a request is allowed (who owns a port, whether a
// queue exists on the node) is the daemon's business.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "xk/address.hpp"
#include "xk/ip_addr.hpp"
#include "xk/filterd/auth.hpp"
#include "xk/filterd/control_wire.hpp"
#include "xk/result.hpp"

namespace xk::filterd::ctl {

// IP protocol numbers, the same values as xk::filterd::Proto of the filter
// engine. icmp is for flows only: a node's echo "connection", whose local port
// is the echo identifier and whose remote port is 0.
enum class Proto : std::uint8_t { icmp = 1, tcp = 6, udp = 17 };

using Secret = std::array<std::byte, 16>;  // the same layout as xk::tcp::Secret

// One per queue of the node, in queue order.
struct Channel {
  std::uint32_t memif_id = 0;  // the net_memif interface id on memif_socket
  MacAddr node_mac;            // the MAC the node's stack on this queue uses
  friend bool operator==(const Channel&, const Channel&) = default;
};

// ---- requests (node -> filterd) --------------------------------------------

// A node whose filterd went away (it restarted) asks for its earlier id and
// channels back: its graph -- a memif client on those interface ids, those
// MACs -- keeps running, and so do its connections.
struct Resume {
  std::uint16_t node_id = 0;      // nonzero: what the earlier HELLO_REPLY said
  std::vector<Channel> channels;  // the earlier HELLO_REPLY's, one per queue
  friend bool operator==(const Resume&, const Resume&) = default;
};

struct Hello {
  static constexpr MsgType kType = MsgType::hello;
  std::string name;           // 1..64 bytes, for logs and xkctl
  std::uint32_t pid = 0;      // checked against SO_PEERCRED by the daemon
  std::uint16_t queues = 1;   // stacks the node runs, 1..64
  std::uint8_t version_min = kVersion;  // protocol versions the node speaks
  std::uint8_t version_max = kVersion;
  std::optional<Resume> resume = std::nullopt;  // absent: a new registration
  // Over TCP: the shared secret filterd was configured with (1..256 bytes;
  // empty: absent). The Unix socket needs none.
  std::vector<std::byte> token = {};
  // Over TCP: node_proof() over the nonces of this connection's AUTH exchange.
  std::optional<Proof> proof = std::nullopt;
  // A node on another host, on filterd's node port (plain Ethernet) instead
  // of a memif channel: its MAC there, or 00:00:00:00:00:00 for "pick one".
  std::optional<MacAddr> ethernet = std::nullopt;
  friend bool operator==(const Hello&, const Hello&) = default;
};

struct Listen {
  static constexpr MsgType kType = MsgType::listen;
  Proto proto = Proto::tcp;  // tcp or udp
  std::uint16_t port = 0;  // 0: filterd picks one
  bool group = false;      // join the listen group of this port
  std::uint16_t queue = 0;
  friend bool operator==(const Listen&, const Listen&) = default;
};

struct Unlisten {
  static constexpr MsgType kType = MsgType::unlisten;
  Proto proto = Proto::tcp;
  std::uint16_t port = 0;
  // The queue whose listener (or group membership) goes; absent: every
  // queue of the node that listens on the port. A node that runs several
  // stacks names the one whose listener closed.
  std::optional<std::uint16_t> queue = std::nullopt;
  friend bool operator==(const Unlisten&, const Unlisten&) = default;
};

struct Connect {
  static constexpr MsgType kType = MsgType::connect;
  Proto proto = Proto::tcp;
  IpAddr remote_addr;             // specified; IPv6 from version 4
  std::uint16_t remote_port = 0;  // nonzero; 0 for icmp
  std::uint16_t queue = 0;
  std::uint16_t local_port = 0;   // 0 (the usual case): filterd picks an ephemeral port (icmp: an echo id)
  friend bool operator==(const Connect&, const Connect&) = default;
};

struct Release {
  static constexpr MsgType kType = MsgType::release;
  Proto proto = Proto::tcp;
  std::uint16_t local_port = 0;   // nonzero
  IpAddr remote_addr;             // IPv6 from version 4
  std::uint16_t remote_port = 0;  // nonzero; 0 for icmp
  friend bool operator==(const Release&, const Release&) = default;
};

// Version 3: a lease of local ports for the node's TCP connections. They are
// the node's alone, host-wide, and the listen table steers every frame to
// one of them to queue `queue`, so the node opens connections from them with
// no CONNECT (and no RELEASE) each. filterd picks `count` new ports; a node
// resuming after filterd restarted asks for exactly `ports` back instead.
// The ports stay the node's until it goes.
struct Lease {
  static constexpr MsgType kType = MsgType::lease;
  Proto proto = Proto::tcp;          // tcp only
  std::uint16_t queue = 0;
  std::uint16_t count = 0;           // 1..kMaxLeasePorts; 0 with `ports`
  std::vector<std::uint16_t> ports = {};  // empty with `count`
  friend bool operator==(const Lease&, const Lease&) = default;
};

struct ListenerEntry {
  Proto proto = Proto::tcp;  // tcp or udp
  std::uint16_t port = 0;  // nonzero: the port filterd gave out
  bool group = false;
  std::uint16_t queue = 0;
  friend bool operator==(const ListenerEntry&, const ListenerEntry&) = default;
};

// On the wire a flow record (IPv4) or, from version 4, a flow6 record.
struct FlowEntry {
  Proto proto = Proto::tcp;
  std::uint16_t local_port = 0;   // nonzero
  IpAddr remote_addr;
  std::uint16_t remote_port = 0;  // nonzero; 0 for icmp
  std::uint16_t queue = 0;
  bool accepted = false;          // accepted on a listener (tcp), not given by CONNECT
  friend bool operator==(const FlowEntry&, const FlowEntry&) = default;
};

// After filterd restarts, a node re-declares what it owns, in as many RESYNC
// messages as it takes (split_resync); all but the last have more = true.
struct Resync {
  static constexpr MsgType kType = MsgType::resync;
  std::vector<ListenerEntry> listeners;  // at most kMaxResyncListeners
  std::vector<FlowEntry> flows;          // at most kMaxResyncFlows, an IPv6 one counting twice
  bool more = false;
  friend bool operator==(const Resync&, const Resync&) = default;
};

struct RuleAdd {
  static constexpr MsgType kType = MsgType::rule_add;
  std::string expression;     // pcap filter syntax, 1..1024 bytes
  std::uint16_t queue = 0;
  std::int16_t priority = 0;  // higher is tried first; ties in the order added
  // Version 2: the node whose queue gets the frames. 0 (absent): the
  // connection's own node; an admin connection must name one.
  std::uint16_t node = 0;
  friend bool operator==(const RuleAdd&, const RuleAdd&) = default;
};

struct RuleDel {
  static constexpr MsgType kType = MsgType::rule_del;
  std::uint32_t rule_id = 0;
  friend bool operator==(const RuleDel&, const RuleDel&) = default;
};

struct Stats {
  static constexpr MsgType kType = MsgType::stats;
  friend bool operator==(const Stats&, const Stats&) = default;
};

struct Bye {
  static constexpr MsgType kType = MsgType::bye;
  friend bool operator==(const Bye&, const Bye&) = default;
};

struct Ping {
  static constexpr MsgType kType = MsgType::ping;
  friend bool operator==(const Ping&, const Ping&) = default;
};

// Over TCP, the first request: the node's fresh nonce (xk/filterd/auth.hpp).
struct Auth {
  static constexpr MsgType kType = MsgType::auth;
  Nonce nonce{};
  friend bool operator==(const Auth&, const Auth&) = default;
};

// ---- administration (version 2; any connection, no HELLO needed) -----------
//
// Each asks for one page of a list. `cursor` is empty for the first page;
// a reply whose list goes on carries a cursor to send back for the next page
// (its bytes mean something to filterd only). `limit` 0 (absent): as many as
// fit in one reply.

using Cursor = std::vector<std::byte>;  // 0..32 bytes; empty: from the start / no more

struct Nodes {
  static constexpr MsgType kType = MsgType::nodes;
  Cursor cursor;
  std::uint32_t limit = 0;
  friend bool operator==(const Nodes&, const Nodes&) = default;
};

struct Ports {
  static constexpr MsgType kType = MsgType::ports;
  Cursor cursor;
  std::uint32_t limit = 0;
  friend bool operator==(const Ports&, const Ports&) = default;
};

struct Flows {
  static constexpr MsgType kType = MsgType::flows;
  std::uint16_t node = 0;  // 0 (absent): every node's
  Cursor cursor;
  std::uint32_t limit = 0;
  friend bool operator==(const Flows&, const Flows&) = default;
};

struct Rules {
  static constexpr MsgType kType = MsgType::rules;
  Cursor cursor;
  std::uint32_t limit = 0;
  friend bool operator==(const Rules&, const Rules&) = default;
};

// ---- replies (filterd -> node) ---------------------------------------------

struct Ok {
  static constexpr MsgType kType = MsgType::ok;
  friend bool operator==(const Ok&, const Ok&) = default;
};

struct HelloReply {
  static constexpr MsgType kType = MsgType::hello_reply;
  std::uint8_t version = kVersion;  // the version chosen from the HELLO's range
  std::uint16_t node_id = 0;
  std::string memif_socket;         // 1..107 bytes
  std::vector<Channel> channels;    // 1..64
  MacAddr filterd_mac;
  std::uint16_t mtu = 1500;         // >= 68
  Ipv4Addr address;                 // the shared address
  std::uint8_t prefix_len = 24;     // 0..32
  Ipv4Addr gateway;                 // 0.0.0.0: none
  Secret secret{};                  // ISN and SYN-cookie key, shared by every stack
  std::uint32_t heartbeat_ms = 0;   // send PING when idle this long; 0: no heartbeat
  bool central = false;             // central mode: filterd runs TCP, streams come over the relay
  // IPv6 (docs/filterd.md, "IPv6"): the shared address, its prefix and the
  // default router; absent when filterd has no IPv6 address.
  std::optional<IpAddr> address6;
  std::uint8_t prefix6_len = 0;     // 0..128 (the nodes send every packet to filterd whatever it is)
  std::optional<IpAddr> gateway6;
  friend bool operator==(const HelloReply&, const HelloReply&) = default;
};

// Where the node's shm channel `memif_id` listens: filterd names shm
// channels "shm:PATH" in memif_socket, and each listens on PATH.<id>
// (docs/shm-driver.md). nullopt: the channels are memif.
std::optional<std::string> shm_channel_path(const HelloReply& h, std::uint32_t memif_id);

struct ListenReply {
  static constexpr MsgType kType = MsgType::listen_reply;
  std::uint16_t port = 0;
  friend bool operator==(const ListenReply&, const ListenReply&) = default;
};

struct ConnectReply {
  static constexpr MsgType kType = MsgType::connect_reply;
  std::uint16_t local_port = 0;
  friend bool operator==(const ConnectReply&, const ConnectReply&) = default;
};

// The ports leased: up to `count` of them (fewer when the ephemeral range
// runs short; none is an ERROR no_ports), or those of `ports` that were
// free (others may have taken some while filterd was away).
// filterd's fresh nonce, and server_proof() over both nonces.
struct AuthReply {
  static constexpr MsgType kType = MsgType::auth_reply;
  Nonce nonce{};
  Proof proof{};
  friend bool operator==(const AuthReply&, const AuthReply&) = default;
};

struct LeaseReply {
  static constexpr MsgType kType = MsgType::lease_reply;
  std::vector<std::uint16_t> ports = {};  // at most kMaxLeasePorts
  friend bool operator==(const LeaseReply&, const LeaseReply&) = default;
};

struct RuleAddReply {
  static constexpr MsgType kType = MsgType::rule_add_reply;
  std::uint32_t rule_id = 0;
  friend bool operator==(const RuleAddReply&, const RuleAddReply&) = default;
};

struct Counter {
  std::string name;  // 1..48 bytes
  std::uint64_t value = 0;
  friend bool operator==(const Counter&, const Counter&) = default;
};

struct StatsReply {
  static constexpr MsgType kType = MsgType::stats_reply;
  std::vector<Counter> counters;  // at most kMaxCounters
  friend bool operator==(const StatsReply&, const StatsReply&) = default;
};

// A registered node as filterd holds it, with its counts.
struct NodeRecord {
  std::uint16_t id = 0;
  std::uint16_t queues = 1;
  std::uint32_t pid = 0;
  std::uint32_t memif_id = 0;   // of queue 0; queue q has memif_id + q
  std::uint32_t listeners = 0;  // ports it listens on, alone or in a group
  std::uint32_t flows = 0;      // exact flows (connected, accepted, declared)
  std::uint32_t rules = 0;
  std::uint64_t rx_frames = 0;       // steered to it
  std::uint64_t egress_allowed = 0;  // its frames the egress check let out
  std::uint64_t egress_denied = 0;   // ... and refused (spoofing, not its port)
  std::string name;                  // 1..64 bytes
  bool ethernet = false;             // on the node port (its MAC below), not a memif channel
  MacAddr mac = {};                  // an Ethernet node's MAC (zero for memif nodes)
  friend bool operator==(const NodeRecord&, const NodeRecord&) = default;
};

struct NodesReply {
  static constexpr MsgType kType = MsgType::nodes_reply;
  std::vector<NodeRecord> nodes;  // by id; at most kMaxNodeRecords
  Cursor cursor;                  // nonempty: more follow
  friend bool operator==(const NodesReply&, const NodesReply&) = default;
};

// One owner of a port: a group has one record per member (node, queue).
struct PortRecord {
  Proto proto = Proto::tcp;  // tcp or udp
  std::uint16_t port = 0;    // nonzero
  bool group = false;
  bool listen = false;       // a listener; else a connection's local port
  std::uint16_t node = 0;
  std::uint16_t queue = 0;
  bool lease = false;        // version 3: a leased port (neither of those)
  friend bool operator==(const PortRecord&, const PortRecord&) = default;
};

struct PortsReply {
  static constexpr MsgType kType = MsgType::ports_reply;
  std::vector<PortRecord> ports;  // by (proto, port); at most kMaxPortRecords
  Cursor cursor;
  friend bool operator==(const PortsReply&, const PortsReply&) = default;
};

struct NodeFlow {
  std::uint16_t node = 0;
  FlowEntry flow;
  friend bool operator==(const NodeFlow&, const NodeFlow&) = default;
};

struct FlowsReply {
  static constexpr MsgType kType = MsgType::flows_reply;
  std::vector<NodeFlow> flows;  // by (node, proto, local port, remote); at most kMaxFlowRecords, an IPv6 one counting twice
  std::uint32_t total = 0;      // flows of the node (or all) in the table
  Cursor cursor;
  friend bool operator==(const FlowsReply&, const FlowsReply&) = default;
};

struct RuleRecord {
  std::uint32_t id = 0;  // nonzero
  std::uint16_t node = 0;
  std::uint16_t queue = 0;
  std::int16_t priority = 0;
  std::uint64_t hits = 0;  // frames it steered
  std::string expression;  // 1..1024 bytes
  friend bool operator==(const RuleRecord&, const RuleRecord&) = default;
};

struct RulesReply {
  static constexpr MsgType kType = MsgType::rules_reply;
  std::vector<RuleRecord> rules;  // in the order they are tried; at most kMaxRuleRecords, within one frame
  Cursor cursor;
  friend bool operator==(const RulesReply&, const RulesReply&) = default;
};

struct Error {
  static constexpr MsgType kType = MsgType::error;
  ErrorCode code = ErrorCode::internal;  // nonzero; unknown codes are kept
  std::string text;                      // 0..256 bytes, for humans
  friend bool operator==(const Error&, const Error&) = default;
};

using Body = std::variant<Hello, Listen, Unlisten, Connect, Release, Resync, RuleAdd, RuleDel, Stats, Bye,
                          Ping, Nodes, Ports, Flows, Rules, Lease, Auth, Ok, HelloReply, ListenReply, ConnectReply,
                          RuleAddReply, StatsReply, NodesReply, PortsReply, FlowsReply, RulesReply, LeaseReply,
                          AuthReply, Error>;

struct Message {
  std::uint32_t request_id = 0;  // a reply echoes its request's id
  Body body;
  friend bool operator==(const Message&, const Message&) = default;
};

MsgType type_of(const Body& body) noexcept;
const char* to_string(MsgType type) noexcept;    // "HELLO", "LISTEN_REPLY", ...; "?" if unknown
const char* to_string(ErrorCode code) noexcept;  // "port_in_use", ...; "unknown" if unknown
const char* to_string(Proto proto) noexcept;     // "icmp", "tcp", "udp", "?"

// The reply type a request expects on success (OK for those without data).
// Any request may instead be answered by ERROR.
MsgType reply_type(MsgType request) noexcept;

// ---- validation and encoding -------------------------------------------------

// Why a message breaks the protocol: the code an ERROR reply would carry and
// a sentence naming the field.
struct Problem {
  ErrorCode code = ErrorCode::bad_message;
  std::string text;
};

// Checks every field against the limits of docs/control-protocol.md. The
// decoder runs the same check, so a message encodes exactly when it is valid,
// and whatever decodes re-encodes.
std::optional<Problem> validate(const Message& m);

// Appends one frame to out. An invalid message appends nothing and fails with
// Errc::invalid_argument (a field out of range) or Errc::too_large (a list or
// string over its cap).
Status encode_into(const Message& m, std::vector<std::byte>& out);
Result<std::vector<std::byte>> encode(const Message& m);

// An ERROR reply; text longer than kMaxErrorText is cut at a UTF-8 character
// boundary, invalid bytes and NUL become '?', and code 0 becomes internal, so
// the result always encodes.
Message make_error(std::uint32_t request_id, ErrorCode code, std::string_view text);

// What a flow counts against a list's cap (kMaxResyncFlows, kMaxFlowRecords):
// 1, or 2 for an IPv6 one, whose record is at most twice the size, so a full
// list of either family fits one body.
std::size_t flow_weight(const FlowEntry& f) noexcept;

// Split a node's listeners and flows into RESYNC messages within the caps (at
// least one, even for nothing to declare); every one but the last has more set.
std::vector<Resync> split_resync(std::span<const ListenerEntry> listeners, std::span<const FlowEntry> flows);

// ---- decoding ----------------------------------------------------------------

// How bad a protocol error is. reject: the frame was read whole and skipped,
// the stream is still in step; answer with make_error(error) when
// should_answer(error) and go on reading. drop: the byte stream cannot be
// trusted any more (bad magic, unknown framing version, oversized body);
// close the connection.
enum class Severity : std::uint8_t { reject, drop };

struct ProtocolError {
  Severity severity = Severity::drop;
  ErrorCode code = ErrorCode::bad_message;
  std::uint32_t request_id = 0;  // of the rejected frame (as read, for a drop)
  std::uint8_t type = 0;         // of the rejected frame (as read, for a drop)
  std::string text;

  bool must_drop() const noexcept { return severity == Severity::drop; }
};

// Whether the peer should get an ERROR for this: only rejected requests are
// answered, never a reply (so two peers cannot bounce errors forever).
bool should_answer(const ProtocolError& e) noexcept;
Message make_error(const ProtocolError& e);

// What FrameReader::next() found.
class ReadResult {
 public:
  struct NeedMore {
    std::size_t bytes = 0;  // at least this many more bytes before the next frame is whole
  };

  ReadResult(NeedMore n) : v_(n) {}                      // NOLINT: implicit on purpose
  ReadResult(Message m) : v_(std::move(m)) {}            // NOLINT
  ReadResult(ProtocolError e) : v_(std::move(e)) {}      // NOLINT

  bool need_more() const noexcept { return std::holds_alternative<NeedMore>(v_); }
  bool has_message() const noexcept { return std::holds_alternative<Message>(v_); }
  bool has_error() const noexcept { return std::holds_alternative<ProtocolError>(v_); }
  std::size_t missing() const noexcept { return need_more() ? std::get<NeedMore>(v_).bytes : 0; }

  Message& message() & { return std::get<Message>(v_); }
  const Message& message() const& { return std::get<Message>(v_); }
  Message&& message() && { return std::get<Message>(std::move(v_)); }
  const ProtocolError& error() const& { return std::get<ProtocolError>(v_); }

 private:
  std::variant<NeedMore, Message, ProtocolError> v_;
};

// Decodes frames from a byte stream delivered in pieces of any size.
//
//   reader.feed(bytes_read);
//   for (;;) {
//     ReadResult r = reader.next();
//     if (r.need_more()) break;
//     if (r.has_message()) handle(r.message());
//     else if (r.error().must_drop()) { close(); break; }
//     else if (should_answer(r.error())) send(make_error(r.error()));
//   }
//
// Memory: the bytes fed and not yet taken by next(). A caller that feeds what
// one read() returned and then calls next() until need_more holds at most one
// frame (16 + 65536 bytes) plus one read. After a drop, next() keeps returning
// the same error and feed() ignores its input.
class FrameReader {
 public:
  void feed(std::span<const std::byte> bytes);
  ReadResult next();

  std::size_t buffered() const noexcept { return buf_.size() - pos_; }
  bool broken() const noexcept { return broken_.has_value(); }

 private:
  std::vector<std::byte> buf_;
  std::size_t pos_ = 0;  // start of the first frame not yet returned
  std::optional<ProtocolError> broken_;
};

// Decodes the body of one frame whose header was already checked.
std::variant<Body, Problem> decode_body(std::uint8_t type, std::span<const std::byte> body);

}  // namespace xk::filterd::ctl

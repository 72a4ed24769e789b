#pragma once
// Wire format of the filterd control protocol, version 1: numbers and limits
// only, apart from the codec (docs/style.md). docs/control-protocol.md is the
// specification; every constant here is listed there.
//
// A frame is a 16-byte header and a body of TLVs, all integers big-endian:
//
//   0               1               2               3
//   +---------------------------------------------------------------+
//   |                     magic 0x584B4331 "XKC1"                   |
//   +---------------+---------------+-------------------------------+
//   |    version    |     type      |             flags             |
//   +---------------+---------------+-------------------------------+
//   |                          body length                          |
//   +---------------------------------------------------------------+
//   |                          request id                           |
//   +---------------------------------------------------------------+
//   |  body: TLVs   tag (16) | length (16) | value (length bytes) ...
//   +---------------------------------------------------------------+

#include <cstddef>
#include <cstdint>
#include <span>

#include "xk/byteorder.hpp"

namespace xk::filterd::ctl {

inline constexpr std::uint32_t kMagic = 0x584B4331;  // "XKC1"
inline constexpr std::uint8_t kVersion = 1;  // of the framing (the header's version field)
// The message set, negotiated in HELLO. Version 2 adds the administration
// requests (NODES, PORTS, FLOWS, RULES; RULE_ADD naming a node; RULE_DEL of
// any rule from an admin connection). Nothing a node sends or receives
// changed, so filterd accepts nodes speaking 1 or 2. Version 3 adds LEASE (a
// block of local ports a node opens connections from without a CONNECT
// each); a node uses it only when HELLO_REPLY says 3. Version 4 lets a
// flow's remote address be IPv6 (16 bytes in CONNECT and RELEASE, the
// flow6 and node_flow6 records); a node sends one only when HELLO_REPLY
// says 4.
inline constexpr std::uint8_t kProtocolVersionMin = 1;
inline constexpr std::uint8_t kProtocolVersion = 4;
inline constexpr std::uint8_t kProtocolVersionIpv6 = 4;
inline constexpr std::size_t kHeaderSize = 16;
inline constexpr std::size_t kMaxBody = 64 * 1024;
inline constexpr std::size_t kTlvHeaderSize = 4;

// Field limits (bytes for strings, entries for lists). Every message within
// them fits in one frame, so a valid message always encodes.
inline constexpr std::size_t kMaxNodeName = 64;
inline constexpr std::size_t kMaxExpression = 1024;
inline constexpr std::size_t kMaxErrorText = 256;
inline constexpr std::size_t kMaxMemifSocket = 107;  // sun_path holds 108 with the NUL
inline constexpr std::size_t kMaxCounterName = 48;
inline constexpr std::size_t kMaxToken = 256;
inline constexpr std::size_t kMaxQueues = 64;  // stacks per node; queue indexes are 0..63
inline constexpr std::size_t kMaxResyncListeners = 1024;  // per RESYNC message
inline constexpr std::size_t kMaxResyncFlows = 3072;      // per RESYNC message
inline constexpr std::size_t kMaxCounters = 1024;
inline constexpr std::size_t kMaxLeasePorts = 1024;  // per LEASE and LEASE_REPLY
inline constexpr std::uint16_t kMinMtu = 68;
// Administration lists (version 2), per reply: a longer list is paged with
// a cursor. Each cap keeps a full reply within kMaxBody.
inline constexpr std::size_t kMaxCursor = 32;       // bytes; opaque to the client
inline constexpr std::size_t kMaxNodeRecords = 512;  // 4 + 49 + 64 bytes each at most
inline constexpr std::size_t kMaxPortRecords = 4096; // 4 + 8 bytes each
inline constexpr std::size_t kMaxFlowRecords = 3072; // 4 + 14 bytes each
inline constexpr std::size_t kMaxRuleRecords = 1024; // 4 + 20 + expression; also bounded by kMaxBody  // RFC 791: every host must take 68 bytes

// Frame types. A request is below 0x80; its reply is request | 0x80 when it
// carries data, else the generic OK; any request may be answered by ERROR.
enum class MsgType : std::uint8_t {
  hello = 0x01,
  listen = 0x02,
  unlisten = 0x03,
  connect = 0x04,
  release = 0x05,
  resync = 0x06,
  rule_add = 0x07,
  rule_del = 0x08,
  stats = 0x09,
  bye = 0x0A,
  ping = 0x0B,
  nodes = 0x0C,  // version 2: administration
  ports = 0x0D,
  flows = 0x0E,
  rules = 0x0F,
  lease = 0x10,  // version 3
  auth = 0x11,   // over TCP, before HELLO (xk/filterd/auth.hpp)
  ok = 0x80,
  hello_reply = 0x81,
  listen_reply = 0x82,
  connect_reply = 0x84,
  rule_add_reply = 0x87,
  stats_reply = 0x89,
  nodes_reply = 0x8C,
  ports_reply = 0x8D,
  flows_reply = 0x8E,
  rules_reply = 0x8F,
  lease_reply = 0x90,
  auth_reply = 0x91,
  error = 0xFF,
};

inline constexpr bool is_request_type(std::uint8_t type) noexcept { return type < 0x80; }

// The code of an ERROR reply. A receiver keeps a code it does not know (a
// later filterd may add some) and treats it as a failure of the request.
enum class ErrorCode : std::uint16_t {
  bad_message = 1,          // the request was malformed (the codec rejected it)
  unsupported_version = 2,  // no common protocol version
  not_registered = 3,       // a request other than HELLO before HELLO
  port_in_use = 4,          // the port or flow belongs to someone else
  no_ports = 5,             // no ephemeral port left
  permission_denied = 6,    // the peer may not do this (credentials, ownership)
  not_found = 7,            // no such listener, flow or rule
  too_many = 8,             // a per-node or global limit was reached
  bad_rule = 9,             // the filter expression did not compile
  internal = 10,            // filterd failed; the request may be retried
};

// TLV tags; one number means one thing (and one value layout) in every
// message that uses it. A tag with kCriticalTag set that a receiver does not
// know for the message at hand rejects the message; any other unknown tag is
// skipped. Tag 0 is padding and always skipped.
inline constexpr std::uint16_t kCriticalTag = 0x8000;

enum class Tag : std::uint16_t {
  pad = 0x0000,
  name = 0x0001,          // string 1..64
  pid = 0x0002,           // u32
  queues = 0x0003,        // u16 1..64
  versions = 0x0004,      // u8 min, u8 max
  version = 0x0005,       // u8
  resume = 0x0006,        // record: format u8, flags u8, node id u16 (HELLO after a filterd restart)
  token = 0x0007,         // bytes 1..256: the token itself; refused over TCP since AUTH (never sent by xk)
  // critical: a filterd that cannot give the node an Ethernet channel must
  // not register it on a memif one it cannot reach
  ethernet = 0x8008,      // 6 bytes: the node's MAC on filterd's node port (0: filterd picks one)
  nonce = 0x0009,         // 32 bytes: a fresh random nonce (AUTH, AUTH_REPLY)
  proof = 0x000A,         // 32 bytes: HMAC-SHA256 keyed with the token (AUTH_REPLY, HELLO)
  proto = 0x0010,         // u8: 6 tcp, 17 udp; 1 icmp in flows
  local_port = 0x0011,    // u16
  group = 0x0012,         // u8 bool
  queue = 0x0013,         // u16 0..63
  remote_addr = 0x0014,   // 4 bytes (IPv4) or, from version 4, 16 (IPv6)
  remote_port = 0x0015,   // u16, nonzero (0 for icmp)
  listener = 0x0020,      // record: proto u8, flags u8, local port u16, queue u16
  flow = 0x0021,          // record: proto u8, flags u8, local port u16, remote addr u32, remote port u16, queue u16
  more = 0x0022,          // u8 bool
  count = 0x0023,         // u16 1..kMaxLeasePorts
  ports = 0x0024,         // u16 list, 1..kMaxLeasePorts of them, none 0
  // critical (version 4): a receiver that cannot keep an IPv6 flow must not
  // drop it unnoticed
  flow6 = 0x8025,         // record: a flow record with a 16-byte remote address
  expression = 0x0030,    // string 1..1024
  priority = 0x0031,      // i16
  rule_id = 0x0032,       // u32
  node_id = 0x0040,       // u16
  memif_socket = 0x0041,  // string 1..107
  channel = 0x0042,       // record: memif id u32, node MAC 6 bytes
  filterd_mac = 0x0043,   // 6 bytes
  mtu = 0x0044,           // u16 >= 68
  address = 0x0045,       // u32
  prefix_len = 0x0046,    // u8 0..32
  gateway = 0x0047,       // u32
  secret = 0x0048,        // 16 bytes
  heartbeat_ms = 0x0049,  // u32
  central = 0x004A,       // u8 bool
  address6 = 0x004B,      // 16 bytes: the shared IPv6 address (HELLO_REPLY; absent: no IPv6)
  prefix6_len = 0x004C,   // u8 0..128
  gateway6 = 0x004D,      // 16 bytes: the IPv6 default router
  counter = 0x0050,       // record: value u64, name length u8, name
  error_code = 0x0060,    // u16, nonzero
  error_text = 0x0061,    // string 0..256
  cursor = 0x0070,        // bytes 1..32: where a paged list goes on (version 2)
  limit = 0x0071,         // u32, nonzero: at most this many records
  total = 0x0072,         // u32: records the whole list holds
  node = 0x0073,          // record, see kNodeRecord
  port = 0x0074,          // record, see kPortRecord
  rule = 0x0075,          // record, see kRuleRecordMin
  node_flow = 0x0076,     // record, see kNodeFlowRecord
  node_flow6 = 0x8077,    // (version 4, critical) record, see kNodeFlow6Record
};

// Base sizes of the record values; a longer record carries fields from a
// later version after these, which a v1 receiver skips.
inline constexpr std::size_t kListenerRecord = 6;
inline constexpr std::size_t kFlowRecord = 12;
inline constexpr std::size_t kChannelRecord = 10;
inline constexpr std::size_t kCounterRecordMin = 9;  // plus the name
inline constexpr std::size_t kResumeRecord = 4;
inline constexpr std::uint8_t kListenerFlagGroup = 0x01;
// Version 2 records.
//   node:      node id u16, queues u16, pid u32, memif id u32 (queue 0's),
//              listeners u32, flows u32, rules u32, rx frames u64,
//              egress allowed u64, egress denied u64, name length u8, name
//   port:      proto u8, flags u8 (bit 0 group, bit 1 listen, bit 2 lease), port u16,
//              node u16, queue u16
//   rule:      rule id u32, node u16, queue u16, priority i16, hits u64,
//              expression length u16, expression
//   node_flow: node u16, then a flow record (12 bytes)
// Version 4 records: flow6 and node_flow6, the same with a 16-byte remote
// address. Each counts twice against its list's cap (kMaxResyncFlows,
// kMaxFlowRecords), so a full message of either family fits kMaxBody.
inline constexpr std::size_t kNodeRecordMin = 49;  // plus the name
// After the name, for a node on the node port only: kind u8 (1: Ethernet)
// and the node's MAC (6 bytes). A receiver that predates it skips it.
inline constexpr std::size_t kNodeRecordEthernet = 7;
inline constexpr std::uint8_t kNodeKindEthernet = 1;
inline constexpr std::size_t kPortRecord = 8;
inline constexpr std::size_t kRuleRecordMin = 20;  // plus the expression
inline constexpr std::size_t kNodeFlowRecord = 14;
inline constexpr std::size_t kFlow6Record = 24;
inline constexpr std::size_t kNodeFlow6Record = 26;
inline constexpr std::uint8_t kPortFlagGroup = 0x01;
inline constexpr std::uint8_t kPortFlagListen = 0x02;
inline constexpr std::uint8_t kPortFlagLease = 0x04;  // version 3: a leased port
// A flow the node accepted on one of its listeners (its local port is the
// listener's), not one filterd gave it with CONNECT.
inline constexpr std::uint8_t kFlowFlagAccepted = 0x01;
// The layout of the resume record; a receiver that does not know the format
// rejects the HELLO (the node may then try a format it knows the peer has).
inline constexpr std::uint8_t kResumeFormat = 1;

struct FrameHeader {
  std::uint32_t magic = kMagic;
  std::uint8_t version = kVersion;
  std::uint8_t type = 0;
  std::uint16_t flags = 0;
  std::uint32_t body_length = 0;
  std::uint32_t request_id = 0;

  static FrameHeader read(std::span<const std::byte, kHeaderSize> b) noexcept {
    FrameHeader h;
    h.magic = load_be32(b.data());
    h.version = static_cast<std::uint8_t>(b[4]);
    h.type = static_cast<std::uint8_t>(b[5]);
    h.flags = load_be16(b.data() + 6);
    h.body_length = load_be32(b.data() + 8);
    h.request_id = load_be32(b.data() + 12);
    return h;
  }
  void write(std::span<std::byte, kHeaderSize> b) const noexcept {
    store_be32(b.data(), magic);
    b[4] = std::byte{version};
    b[5] = std::byte{type};
    store_be16(b.data() + 6, flags);
    store_be32(b.data() + 8, body_length);
    store_be32(b.data() + 12, request_id);
  }
};

}  // namespace xk::filterd::ctl

#pragma once
// filterd's filter engine: steers every frame that arrives on the I/O node's
// external port to the compute node (and the queue within it) that owns its
// flow, and checks that what a node sends is its own (docs/filterd.md).
//
// All nodes share one IPv4 address (and one IPv6 address, when filterd has
// one), so a flow is named by what differs:
// (IP protocol, remote address, remote port, local port). Ingress order:
//   1. exact flow table       (proto, remote, remote port, local port) -> target
//   2. listen table           (proto, local port) -> a target or a group
//   3. user rules             pcap filter expressions, by priority
//   4. default                TCP: RST (RFC 9293 3.10.7.1); UDP: ICMP port
//                             unreachable (RFC 1122 4.1.3.1)
// Ahead of these: ARP, Neighbor Discovery and ICMP echo for the shared
// addresses are filterd's own (local); ICMP and ICMPv6 errors go to the
// owner of the flow they quote; fragments after the first follow the first's
// decision. The IPv6 half of the engine is filter_v6.cpp.
//
// One engine belongs to one thread. Nothing on the data path throws or
// allocates, except holding a fragment that came before its first.
// Ports and addresses are in host order here, network order on the wire.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "xk/address.hpp"
#include "xk/clock.hpp"
#include "xk/counters.hpp"
#include "xk/demux.hpp"
#include "xk/ip_addr.hpp"
#include "xk/filterd/filter_hash.hpp"
#include "xk/result.hpp"

namespace xk::filterd {

using NodeId = std::uint16_t;
// An Ethernet frame as received (no FCS).
using Frame = std::span<const std::byte>;
using RuleId = std::uint32_t;

// The IP protocols the tables know. ICMP flows are echo "connections":
// remote port 0 and the echo identifier as the local port.
enum class Proto : std::uint8_t { icmp = 1, tcp = 6, udp = 17 };

// Where a frame goes: a node and one of its receive queues (one per core).
struct Target {
  NodeId node = 0;
  std::uint16_t queue = 0;
  friend bool operator==(const Target&, const Target&) = default;
};

enum class Action : std::uint8_t {
  to_node,           // deliver to decision.target
  local,             // filterd's own: ARP, ICMP echo for the shared address
  reset,             // TCP segment for nobody: filterd answers with an RST
  port_unreachable,  // UDP datagram for nobody: filterd answers ICMP type 3 code 3
  drop,              // not for us, malformed, or nobody to tell
  held,              // a fragment before its first: the engine kept a copy (take_released)
};

// Why: one counter per value, named by to_string(Reason).
enum class Reason : std::uint8_t {
  exact_hit,             // to_node: the exact flow table
  listen_hit,            // to_node: a single listener
  group_hit,             // to_node: a group listener's rendezvous choice
  lease_hit,             // to_node: a port leased to a node (its own connections)
  rule_hit,              // to_node: a user rule
  icmp_error,            // to_node: an ICMP error, to the owner of the flow it quotes
  frag_follow,           // to_node or local: a fragment after the first, as the first went
  local_arp,             // local: ARP for (or from) the shared address
  local_icmp_echo,       // local: ICMP (or ICMPv6) echo request to the shared address
  local_nd,              // local: Neighbor/Router Discovery or MLD (RFC 4861, 3810): filterd's
  default_rst,           // reset
  default_unreachable,   // port_unreachable
  frag_held,             // held
  malformed,             // drop: a length, version or field that does not add up
  bad_ip_checksum,       // drop
  vlan,                  // drop: 802.1Q / 802.1ad tagged
  other_type,            // drop: another EtherType (IPv6 too when filterd has no IPv6 address)
  not_ours,              // drop: another MAC or IPv4 destination
  bad_source,            // drop: a source that cannot be a host (RFC 1122 3.2.1.3)
  no_owner,              // drop: nobody and no answer (RST, broadcast, other protocol)
  icmp_error_unknown,    // drop: an ICMP error quoting a flow nobody owns
  frag_unowned,          // drop: a later fragment whose first was not delivered
  frag_limit,            // drop: fragment holding limits reached
  count_,
};
inline constexpr std::size_t kReasonCount = static_cast<std::size_t>(Reason::count_);

const char* to_string(Reason r) noexcept;
const char* to_string(Action a) noexcept;

// Eight bytes (aligned so), so a burst's decisions are written as whole words.
struct alignas(8) Decision {
  Action action = Action::drop;
  Reason reason = Reason::malformed;
  Target target{};  // meaningful for to_node only
  friend bool operator==(const Decision&, const Decision&) = default;
};

// A flow as seen from the shared address (the local address is always it).
// The remote address is of either family.
struct FlowKey {
  Proto proto = Proto::tcp;
  IpAddr remote;
  std::uint16_t remote_port = 0;
  std::uint16_t local_port = 0;
  friend bool operator==(const FlowKey&, const FlowKey&) = default;
};

// What the egress check found.
enum class EgressReason : std::uint8_t {
  flow,          // allowed: an exact flow of the node
  listener,      // allowed: a port the node listens on, alone or in a group
  fragment,      // allowed: a later fragment of a datagram whose first was allowed
  icmp_error,    // allowed: an ICMP error quoting a flow of the node
  malformed,     // denied
  not_ip,        // denied: ARP and ND (filterd answers for the nodes), VLAN, other types
  bad_source,    // denied: not the shared address
  not_owner,     // denied: a flow or port the node does not own
  protocol,      // denied: an IP protocol, ICMP type or IPv6 header nodes may not send
  count_,
};
inline constexpr std::size_t kEgressReasonCount = static_cast<std::size_t>(EgressReason::count_);
const char* to_string(EgressReason r) noexcept;

struct EgressVerdict {
  bool allowed = false;
  EgressReason reason = EgressReason::malformed;
  // Allowed, but the flow (or listener) is another queue's of the same
  // node: the check guards nodes from each other, not a node's stacks.
  bool other_queue = false;
};

// egress_check without a queue: any queue of the node.
inline constexpr std::uint16_t kAnyQueue = 0xFFFF;

// add_rule's answer: an id, or libpcap's error text.
struct RuleResult {
  RuleId id = 0;
  std::string error;
  bool ok() const noexcept { return error.empty(); }
  explicit operator bool() const noexcept { return ok(); }
};

// A user rule as the engine holds it (for administration).
struct RuleInfo {
  RuleId id = 0;
  std::string expression;
  Target target;
  int priority = 0;
  std::uint64_t hits = 0;  // frames it steered
};

// A listener as the engine holds it: one target, or a group's members.
struct ListenerInfo {
  bool group = false;
  std::vector<Target> members;
};

// What the egress check did with one node's frames.
struct NodeEgress {
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
};

struct ReleasedFrame {
  std::vector<std::byte> frame;
  Decision decision;
};

struct FilterConfig {
  Ipv4Addr shared_ip;
  // IPv6 (docs/filterd.md, "IPv6"): the global address the nodes share, and
  // filterd's own link-local address on the external link (Neighbor
  // Discovery and echo to it are filterd's). Unspecified: IPv6 frames are
  // dropped as another EtherType.
  IpAddr shared_ip6;
  IpAddr link_local6;
  // Zero: frames are not checked against a MAC. Otherwise unicast frames must
  // be addressed to it (broadcast and multicast pass).
  MacAddr shared_mac{};
  bool verify_ip_checksum = true;
  // RFC 791 suggests a reassembly timer of 15 s upwards; Linux uses 30 s.
  Duration fragment_timeout = std::chrono::seconds(30);
  std::size_t fragment_max_datagrams = 4096;  // tracked (src, dst, proto, id), oldest evicted
  std::size_t fragment_max_held_frames = 1024;
  std::size_t fragment_max_held_bytes = std::size_t{2} << 20;
  std::size_t expected_flows = 0;  // reserve the exact table up front
  // Group listeners' rendezvous key. Unset: random. A daemon that wants the
  // same choices after a restart keeps the key in its configuration.
  std::optional<HashKey> group_key;
  std::string counter_owner = "filter";
};

struct FragKey;
class FragmentTracker;
class RuleTable;

class FilterEngine {
 public:
  // The clock is read only on the fragment path and in expire().
  FilterEngine(FilterConfig config, const Clock& clock);
  ~FilterEngine();
  FilterEngine(const FilterEngine&) = delete;
  FilterEngine& operator=(const FilterEngine&) = delete;

  const FilterConfig& config() const noexcept { return config_; }

  // ---- Exact flows ----
  // exists when the key is present (change an owner with remove + add);
  // invalid_argument for an ICMP key with a remote port.
  Status add_flow(const FlowKey& key, Target target);
  Status remove_flow(const FlowKey& key) noexcept;  // not_found
  std::optional<Target> find_flow(const FlowKey& key) const noexcept;
  std::size_t flow_count() const noexcept { return flows_.size() + flows6_.size(); }
  void reserve_flows(std::size_t n) { flows_.reserve(n); }  // IPv4 flows

  // ---- Listeners (TCP and UDP) ----
  // A single target for a port; exists when the port has a listener or group.
  Status listen(Proto proto, std::uint16_t port, Target target);
  // A port leased to `target` (LEASE): steered like a single listener's, but
  // only ever the local port of connections that target opened itself
  // (Reason::lease_hit). exists when the port is in the table already;
  // unlisten() removes it.
  Status lease(Proto proto, std::uint16_t port, Target target);
  // Adds a member to the port's group, creating it; exists when the port has a
  // single listener or the member is in already.
  Status join_group(Proto proto, std::uint16_t port, Target member);
  // not_found when not a member; the last member leaving removes the group.
  Status leave_group(Proto proto, std::uint16_t port, Target member);
  Status unlisten(Proto proto, std::uint16_t port) noexcept;  // not_found
  // Who the listen table gives a flow without an exact entry (the rendezvous
  // choice for a group); nullopt when no listener.
  std::optional<Target> listener_for(const FlowKey& key) const noexcept;
  std::size_t listener_count() const noexcept { return listeners_.size(); }

  // ---- User rules ----
  // `expression` in pcap filter syntax, compiled for Ethernet frames. Rules
  // are tried after the exact and listen tables: higher priority first, equal
  // priorities in the order they were added.
  RuleResult add_rule(std::string_view expression, Target target, int priority = 0);
  Status remove_rule(RuleId id) noexcept;  // not_found
  std::size_t rule_count() const noexcept;
  // Every rule, in the order they are tried.
  std::vector<RuleInfo> rules() const;

  // ---- Administration (not the data path) ----
  // Calls f for every exact flow, in no particular order; f must not change
  // the table.
  void for_each_flow(const std::function<void(const FlowKey&, Target)>& f);
  std::optional<ListenerInfo> listener(Proto proto, std::uint16_t port) const;
  // The egress check's verdicts on `node`'s frames since it appeared (zero
  // after remove_node).
  NodeEgress egress_counts(NodeId node) const noexcept;

  // A node died: forget its flows, listeners, group memberships and rules;
  // later fragments of datagrams it was given are dropped.
  void remove_node(NodeId node);

  // ---- Data path ----
  Decision classify(Frame frame);
  bool serves_ipv6() const noexcept { return !config_.shared_ip6.is_unspecified(); }
  // A node's packet for the shared address itself (node-to-node traffic,
  // the hairpin: docs/filterd.md): which node owns its destination, as for
  // a frame from outside. Call it only with a frame the egress check let
  // through. Its source is the shared address and its Ethernet destination
  // filterd's channel MAC, which classify() refuses (no host outside may
  // claim either).
  Decision classify_hairpin(Frame frame);
  // A burst: parses every frame and prefetches its flow's slot before any
  // lookup. Fills min(frames.size(), out.size()) decisions.
  void classify(std::span<const Frame> frames, std::span<Decision> out);
  // Frames held before their first fragment and released by it, each with
  // the first's decision (to_node or local). Moves them out.
  std::vector<ReleasedFrame> take_released();
  bool has_released() const noexcept { return !released_.empty(); }
  // Forgets fragment state older than the timeout; held frames are dropped
  // (and counted). classify does this as fragments arrive; a daemon also
  // calls it from a timer.
  void expire();
  std::size_t held_fragments() const noexcept;
  std::size_t held_fragment_bytes() const noexcept;
  std::size_t tracked_datagrams() const noexcept;

  // May `node` send this frame out? Counted as egress_allowed or
  // egress_denied (with the reason's own counter).
  // `queue`: the queue (channel) it came from, to tell other_queue.
  EgressVerdict egress_check(Frame frame, NodeId node, std::uint16_t queue = kAnyQueue);
  bool egress_allowed(Frame frame, NodeId node) { return egress_check(frame, node).allowed; }

  const CounterSet& counters() const noexcept { return counters_; }
  std::uint64_t count(Reason r) const noexcept { return reason_counters_[static_cast<std::size_t>(r)]->value(); }

 private:
  // The flow table's key: no padding, so it hashes with KeyHash. Compared
  // field by field: a defaulted == becomes a call to memcmp.
  struct PackedKey {
    std::uint32_t remote = 0;
    std::uint16_t remote_port = 0;
    std::uint16_t local_port = 0;
    std::uint32_t proto = 0;
    friend bool operator==(const PackedKey& a, const PackedKey& b) noexcept {
      return a.remote == b.remote && a.remote_port == b.remote_port && a.local_port == b.local_port &&
             a.proto == b.proto;
    }
  };
  // KeyHash's mixing, fed from the fields: reading the key's bytes as words
  // right after parse() stored it field by field would stall on store
  // forwarding.
  struct FlowHash {
    std::uint64_t operator()(const PackedKey& k) const noexcept {
      const std::uint64_t w0 = std::uint64_t{k.remote} | (std::uint64_t{k.remote_port} << 32) |
                               (std::uint64_t{k.local_port} << 48);
      return KeyHash<PackedKey>::mix(KeyHash<PackedKey>::mix(0x9e3779b97f4a7c15ull ^ w0) ^ k.proto);
    }
  };
  // An IPv6 flow's key: the remote address in 16 bytes, no padding.
  struct Packed6Key {
    IpAddr::Bytes remote{};
    std::uint16_t remote_port = 0;
    std::uint16_t local_port = 0;
    std::uint32_t proto = 0;
    friend bool operator==(const Packed6Key&, const Packed6Key&) = default;
  };
  static PackedKey packed(const FlowKey& key) noexcept;  // an IPv4 key
  static Packed6Key packed6(const FlowKey& key) noexcept;
  struct Parsed;  // one frame's headers, filter.cpp
  struct ListenKey {
    std::uint16_t proto = 0;
    std::uint16_t port = 0;
    friend bool operator==(const ListenKey&, const ListenKey&) = default;
  };
  struct Member {
    Target target;
    std::uint64_t seed = 0;  // siphash of the target: the member's rendezvous weight key
  };
  struct Listener {
    bool group = false;
    std::vector<Member> members;  // exactly one when not a group
    bool lease = false;           // a leased port (never a group)
  };

  // listen() and lease(): one target for the port.
  Status add_single(Proto proto, std::uint16_t port, Target target, bool lease);
  void parse(Frame frame, Parsed& p, bool hairpin = false) const noexcept;
  void parse_v4(Frame frame, Parsed& p, bool hairpin) const noexcept;
  void parse_v6(Frame frame, Parsed& p, bool hairpin) const noexcept;  // filter_v6.cpp
  Decision finish(Frame frame, const Parsed& p);
  Decision decide(Frame frame, const Parsed& p, const Target* exact);
  Decision decide_packet(Frame frame, const Parsed& p, const Target* exact) const noexcept;
  Decision decide_icmp(Frame frame, const Parsed& p, const Target* exact) const noexcept;
  Decision icmp_error_owner(Frame frame, const Parsed& p) const noexcept;
  Decision icmp6_error_owner(Frame frame, const Parsed& p) const noexcept;
  Decision decide_later_fragment(Frame frame, const Parsed& p);
  void remember_first_fragment(const Parsed& p, const Decision& d);
  void expire_at(Time now);
  std::optional<Decision> owner_of(const PackedKey& key) const noexcept;
  std::optional<Decision> owner_of(const Packed6Key& key) const noexcept;
  std::optional<Decision> listen_lookup(const PackedKey& key) const noexcept;
  std::optional<Decision> listen_lookup(const Packed6Key& key) const noexcept;
  // `flow` identifies the flow among a group's members (its packed key's bytes).
  std::optional<Decision> listen_lookup(std::uint32_t proto, std::uint16_t local_port,
                                        std::span<const std::byte> flow) const noexcept;
  EgressVerdict owns(const PackedKey& key, NodeId node, std::uint16_t queue) const noexcept;
  EgressVerdict owns(const Packed6Key& key, NodeId node, std::uint16_t queue) const noexcept;
  // `exact`: the flow's entry in its family's table, if any.
  EgressVerdict owns(const Target* exact, std::uint32_t proto, std::uint16_t local_port, NodeId node,
                     std::uint16_t queue) const noexcept;
  EgressVerdict egress(Frame frame, NodeId node, std::uint16_t queue);
  EgressVerdict egress_v4(Frame frame, NodeId node, std::uint16_t queue);
  EgressVerdict egress_v6(Frame frame, NodeId node, std::uint16_t queue);  // filter_v6.cpp
  // A datagram's first fragment that passed the egress check: later ones
  // from the same node follow it.
  void remember_egress_fragment(const FragKey& key, NodeId node, Time now);
  std::uint64_t seed_of(Target t) const noexcept;
  Decision counted(Decision d) noexcept {
    reason_counters_[static_cast<std::size_t>(d.reason)]->inc();
    return d;
  }

  FilterConfig config_;
  const Clock& clock_;
  HashKey group_key_;
  std::uint64_t shared_mac_bits_;  // 0: no MAC check
  FlatMap<PackedKey, Target, FlowHash> flows_;  // IPv4 flows, the hot path's
  FlatMap<Packed6Key, Target> flows6_;
  FlatMap<ListenKey, Listener> listeners_;
  std::unique_ptr<RuleTable> rules_;
  std::unique_ptr<FragmentTracker> frags_;
  std::vector<ReleasedFrame> released_;

  CounterSet counters_;
  Counter* reason_counters_[kReasonCount] = {};
  Counter* egress_counters_[kEgressReasonCount] = {};
  Counter& frag_tracked_;
  Counter& frag_released_;
  Counter& frag_dropped_;
  Counter& egress_allowed_;
  Counter& egress_denied_;
  std::vector<NodeEgress> node_egress_;  // by node id, grown when a node first sends
};

}  // namespace xk::filterd

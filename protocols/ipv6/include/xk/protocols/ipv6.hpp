#pragma once
// IPv6 for a host (RFC 8200, RFC 8504). See docs/ipv6.md.
//
//   ipv6 ip6 below=<link>[,<resolver>] [addr=2001:db8::10/64,...] [gw=fe80::1]
//            [hop_limit=64] [mtu=N] [link_local=on] [pmtu_timeout=600]
//            [reasm_timeout=60] [reasm_max_datagram=65535] [reasm_mem=4M]
//
//   open(upper, {remote: IpAddr peer (v6), ProtoNum next_header (top)}) -> session
//   open_enable(upper, {local: ProtoNum next_header})                  -> passive opens
//   demux(link_session, packet)        -> validate, walk the chain, reassemble, upcall
//
// The sibling of ipv4: the same sessions, the same upcalls, the same RxInfo
// on every delivered packet, so TCP and UDP sit on either. below[0] is the
// link (eth, or a driver carrying bare IP packets); below[1], when present,
// is the NextHopResolver (nd) every outgoing packet goes through with its
// next hop, and the one that says when an address has passed its duplicate
// check.
//
// Addresses: a link-local one made from the link's MAC (when it has one and
// link_local=on) and those of `addr`, each with the prefix that is on-link.
// Sources follow RFC 6724 in short: link-local (and link-scope multicast)
// destinations get the link-local address, others the first usable address
// whose prefix holds the destination, else the first usable global one.
//
// Sending: one packet up to the path MTU (RFC 8201: per destination, never
// below 1280, raised again after pmtu_timeout), else fragments of it with a
// fragment header (RFC 8200 4.5) -- unless the session asked for none
// (SetDontFragment: TCP), which gets too_large. Every packet of a transport
// flow carries the same flow label (RFC 6437), a keyed hash of its addresses,
// protocol and ports.
//
// Receiving: the chain is walked within ChainLimits (ipv6_wire.hpp);
// fragments are reassembled (ip::Reassembler, overlaps drop the datagram:
// RFC 5722; atomic fragments are whole packets: RFC 6946); multicast is
// taken for the groups of our addresses (all-nodes, solicited-node). ICMPv6
// attaches itself (attach_icmp) to send the errors a host owes and to hand
// back the errors it receives (deliver_error) and Packet Too Big
// (update_path_mtu).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "xk/demux.hpp"
#include "xk/graph.hpp"
#include "xk/hash.hpp"
#include "xk/link.hpp"
#include "xk/options.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/ipv6_wire.hpp"
#include "xk/protocols/reassembly.hpp"
#include "xk/timer.hpp"

namespace xk::ipv6 {

class Ipv6Protocol;

// The ICMPv6 errors a host sends (RFC 4443 3). `original` is the offending
// packet from its IPv6 header on; the sender quotes what fits and keeps no
// reference. `param`: Packet Too Big's MTU, Parameter Problem's pointer.
// The sink applies RFC 4443 2.4 (e) and (f) itself: nothing about an error,
// about a packet to a group (but Packet Too Big and an unrecognized option
// -- ipv6 asks only when the option's type says so), or from no one host.
class IcmpErrorSink {
 public:
  virtual ~IcmpErrorSink() = default;
  virtual Status send_error(std::uint8_t type, std::uint8_t code, std::uint32_t param, const Msg& original) = 0;
};

struct Config {
  std::vector<IpCidr> addrs;        // IPv6 addresses and their on-link prefixes
  std::optional<IpAddr> gw;         // default router: link-local, or on a prefix of `addrs`
  bool link_local = true;           // fe80::/64 from the link's MAC
  std::uint8_t hop_limit = 64;      // RFC 8200 default for unicast
  std::size_t mtu = 0;              // 0: ask the link (GetMtu)
  Duration pmtu_timeout = std::chrono::minutes(10);    // RFC 8201 4: try a larger MTU again
  Duration reasm_timeout = std::chrono::seconds(60);   // RFC 8200 4.5
  std::size_t reasm_max_datagram = Header::kSize + Header::kMaxPayload;
  std::size_t reasm_mem = 4u << 20;
  std::size_t loopback_queue = 64;
  std::size_t max_path_mtus = 1024;  // destinations with a learned path MTU
  ChainLimits chain;
  // `addrs` are shared with other stacks (filterd's nodes), as ipv4's
  // hairpin: a TCP or UDP packet to one of them is delivered here only when
  // our transport has its flow (ctl::ClaimsOwn), else it goes out through
  // the link to filterd, which steers it to the stack that owns it. The
  // resolver must know where the shared address leads (nd static=ADDR@MAC).
  // The link-local address is ours alone and never takes this path.
  bool hairpin = false;
  // Router Advertisements (from nd) configure what was not given: default
  // routers (beside `gw`, which comes first), on-link prefixes, an address
  // per advertised /64 (RFC 4862 SLAAC, its interface identifier the
  // link-local address's), the link MTU and hop limit.
  bool accept_ra = true;
};

// The flow label last computed for a session's packets (one transport flow
// at a time is the common case): reused while source and ports stay.
struct FlowMemo {
  IpAddr src;
  std::uint32_t ports = 0;
  std::uint32_t label = 0;  // 0: nothing remembered
};

class Ipv6Session final : public Session {
 public:
  Ipv6Session(Ipv6Protocol& proto, Protocol* upper, IpAddr peer, std::uint8_t next_header);

  Status push(Msg msg) override;
  Status pop(Session& lower, Msg msg) override;
  Status close() override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  const IpAddr& peer() const noexcept { return peer_; }

 private:
  Ipv6Protocol& proto_;
  IpAddr peer_;
  std::uint8_t next_header_;
  bool dont_fragment_ = false;
  FlowMemo memo_;
};

class Ipv6Protocol final : public Protocol, public RouterSink {
 public:
  // `resolver` may be null (bare IP link). `timers` runs reassembly and
  // path-MTU timeouts and loopback delivery; it must outlive this protocol.
  Ipv6Protocol(std::string name, Protocol& link, NextHopResolver* resolver, TimerWheel& timers, Config config);
  ~Ipv6Protocol() override;

  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  Status open_enable(Protocol& upper, Participants& parts) override;
  Status open_disable(Protocol& upper, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  struct SendOptions {
    bool dont_fragment = false;          // too_large instead of fragments
    FlowMemo* memo = nullptr;            // a session's
    std::optional<IpAddr> src;           // else chosen (RFC 6724 in short)
    std::optional<std::uint8_t> hop_limit;
  };
  // Send `payload` to `dst` as `next_header` without a session: sessions use
  // it, and ICMPv6 for replies and errors. no_route off-link without gw;
  // bad_state when no source address is usable yet (duplicate check).
  Status send(const IpAddr& dst, std::uint8_t next_header, Msg payload, const SendOptions& opts);
  Status send(const IpAddr& dst, std::uint8_t next_header, Msg payload) {
    return send(dst, next_header, std::move(payload), SendOptions{});
  }

  // An ICMPv6 error about one of our packets: to the upper protocol that
  // enabled err.protocol, else to the active session's upper.
  Status deliver_error(const ctl::NetError& err);
  // Packet Too Big for `dst` (RFC 8201 4): a smaller MTU is kept for
  // pmtu_timeout; below 1280 counts as 1280. Returns the MTU now in use.
  std::size_t update_path_mtu(const IpAddr& dst, std::uint32_t mtu);
  // The largest packet (header included) sent to `dst` unfragmented.
  std::size_t path_mtu(const IpAddr& dst);

  void attach_icmp(IcmpErrorSink* icmp) noexcept { icmp_ = icmp; }

  const Config& config() const noexcept { return config_; }
  // Our addresses: the link-local one first (when there is one).
  const std::vector<IpCidr>& addresses() const noexcept { return addrs_; }
  std::optional<IpAddr> link_local() const noexcept;
  bool is_ours(const IpAddr& a) const noexcept;
  // The source for a packet to `dst`, or none usable yet.
  std::optional<IpAddr> source_for(const IpAddr& dst) const;
  // Whether `group` is one we listen to (all-nodes, our solicited-node groups).
  bool is_joined(const IpAddr& group) const noexcept;
  std::size_t link_mtu();
  std::size_t session_count() const noexcept { return active_.size(); }
  // RouterSink: what nd read from a Router Advertisement.
  void router_advert(const RouterAdvert& ra) override;
  // Default routers learned from advertisements, still valid.
  std::vector<IpAddr> default_routers() const;
  std::size_t reassemblies() const noexcept { return reasm_.size(); }

 private:
  friend class Ipv6Session;

  struct Key {
    IpAddr::Bytes peer;
    std::uint8_t next_header;
    std::uint8_t zero[3] = {};
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct ProtoKey {
    std::uint32_t next_header;
    friend bool operator==(const ProtoKey&, const ProtoKey&) = default;
  };
  // RFC 8200 4.5: fragments belong together by source, destination and
  // identification.
  struct ReasmKey {
    IpAddr::Bytes src;
    IpAddr::Bytes dst;
    std::uint32_t id;
    friend bool operator==(const ReasmKey&, const ReasmKey&) = default;
  };
  struct PathMtu {
    std::size_t mtu;
    Time expires;
  };
  struct DestKey {
    IpAddr::Bytes dst;
    friend bool operator==(const DestKey&, const DestKey&) = default;
  };

  Status receive(Session* lower, Msg packet);
  Status process(Session* lower, const Header& h, Msg packet, bool multicast, bool reassembled);
  Status reassemble(Session* lower, const Header& h, const Chain& chain, Msg packet, bool multicast);
  // `named_at`: the Next Header byte that named `upper` (a Parameter
  // Problem's pointer when nobody takes it).
  Status deliver(Session* lower, const Header& h, std::uint8_t upper, std::size_t upper_offset,
                 std::size_t named_at, Msg packet, bool multicast, bool fragmented);
  void answer_problem(const ChainProblem& p, const Msg& packet, bool multicast);
  Status emit(const IpAddr& next_hop, Msg packet);
  std::optional<IpAddr> next_hop_for(const IpAddr& dst) const;
  bool on_link(const IpAddr& dst) const noexcept;
  std::uint32_t flow_label(const IpAddr& src, const IpAddr& dst, std::uint8_t next_header, const Msg& payload,
                           FlowMemo* memo) const;
  bool usable(const IpAddr& a) const;
  void drain_loopback();
  bool delivered_here(const IpAddr& dst, std::uint8_t next_header, Msg& payload);
  Status finish_requested_checksum(Msg& payload);

  Protocol& link_;
  NextHopResolver* resolver_;
  TimerWheel& timers_;
  Config config_;
  std::vector<IpCidr> addrs_;      // link-local first, then config_.addrs
  std::vector<IpAddr> groups_;     // multicast groups we receive
  mutable bool all_usable_ = false;  // every address passed its duplicate check
  SipKey flow_key_{};
  std::uint32_t next_id_;
  SessionRef link_session_;
  bool link_enabled_ = false;
  // What the port does for IPv6 packets: transport checksums and TCP
  // segmentation (an IPv4 header checksum is nothing to IPv6).
  LinkOffloads offloads_;
  IcmpErrorSink* icmp_ = nullptr;
  ActiveMap<Key> active_;
  EnableTable<ProtoKey> passive_;
  FlatMap<DestKey, PathMtu> path_mtus_;
  std::deque<Msg> loopback_;
  Timer loopback_timer_;
  // Learned from Router Advertisements; each until its `expires`.
  struct LearnedRouter {
    IpAddr addr;
    Time expires;
  };
  struct LearnedPrefix {
    IpCidr prefix;
    Time expires;
  };
  struct AutoAddress {
    IpAddr addr;
    Time valid_until;
    Time preferred_until;  // after it: deprecated, a source only when nothing else is
  };
  std::vector<LearnedRouter> routers_;
  std::vector<LearnedPrefix> prefixes_;
  std::vector<AutoAddress> auto_addrs_;
  std::size_t ra_mtu_ = 0;  // 0: none advertised
  Timer ra_timer_;          // the next expiry among them
  void learn_prefix(const RouterAdvert::Prefix& p, Time now);
  void autoconfigure(const RouterAdvert::Prefix& p, Time now);
  void expire_learned();
  bool deprecated(const IpAddr& a) const noexcept;

  Counter& rx_packets_;
  Counter& rx_delivered_;
  Counter& drop_truncated_;
  Counter& drop_bad_version_;
  Counter& drop_bad_src_;
  Counter& drop_not_for_us_;
  Counter& drop_tentative_;
  Counter& drop_chain_;
  Counter& drop_unknown_next_header_;
  Counter& rx_ext_headers_;
  Counter& rx_fragments_;
  Counter& rx_atomic_fragments_;
  Counter& reasm_ok_;
  Counter& drop_frag_bad_len_;
  Counter& drop_frag_too_big_;
  Counter& drop_reasm_overlap_;
  Counter& drop_reasm_timeout_;
  Counter& drop_reasm_mem_;
  Counter& tx_packets_;
  Counter& tx_fragments_;
  Counter& drop_tx_too_large_;
  Counter& drop_no_route_;
  Counter& drop_no_source_;
  Counter& drop_tx_link_;
  Counter& tx_loopback_;
  Counter& tx_hairpin_;
  Counter& drop_loopback_full_;
  Counter& pmtu_lowered_;
  Counter& icmp_errors_asked_;
  Counter& errors_delivered_;
  Counter& drop_error_no_owner_;
  Counter& tx_l4_csum_resolved_;
  Counter& ra_taken_;
  Counter& ra_addresses_;

  ip::Reassembler<ReasmKey> reasm_;  // after the counters it counts in
};

// Make the kind `ipv6` available to graph specs (needs an event loop).
void register_ipv6(Registry& registry);

}  // namespace xk::ipv6

#pragma once
// nd: IPv6 Neighbor Discovery for a host on Ethernet (RFC 4861), duplicate
// address detection (RFC 4862 5.4) and the MLDv2 reports that put the host
// in its solicited-node groups (RFC 3810), as the NextHopResolver of ipv6
// (xk/link.hpp, docs/ipv6.md).
//
//   nd nd0 below=eth0 [dad=1] [retrans_ms=1000] [reachable_ms=30000]
//          [stale_timeout=600] [pending=64] [pending_total=256]
//          [max_entries=1024] [static=2001:db8::1@02:00:00:00:00:01,...] [mld=on]
//
// It sends its own packets (solicitations, advertisements, reports: each one
// IPv6 header, link-scoped, hop limit 255 or 1) straight through eth, and is
// handed the ND messages that arrive by icmpv6 (receive()), which has checked
// their checksum.
//
// The neighbour cache follows RFC 4861 7.3.2: a packet for an unknown
// neighbour makes an INCOMPLETE entry, queues (bounded per entry and overall)
// and solicits the solicited-node group every retrans interval, three times;
// an answer flushes the queue, else it is dropped (counted). A solicited
// advertisement makes an entry REACHABLE for the reachable time (randomised
// once, 0.5-1.5x), after which it is STALE; the first packet sent to a STALE
// entry makes it DELAY, and five seconds later PROBE: three unicast
// solicitations, then the entry goes. Nothing tells nd yet that a transport
// made progress (7.3.1's upper-layer hints), so busy neighbours are probed
// after each reachable time too.
//
// Every address ipv6 gives it (add_local_address) joins its solicited-node
// group (on eth and with an MLDv2 report) and, with dad > 0, stays tentative
// -- unusable -- while `dad` solicitations from :: go out retrans_ms apart;
// a solicitation or advertisement for it from elsewhere meanwhile marks it
// duplicate for good (counted, never used). Messages with a hop limit below
// 255, sent in fragments (RFC 6980) or otherwise invalid are dropped and
// counted.

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "xk/demux.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/link.hpp"
#include "xk/protocol.hpp"
#include "xk/timer.hpp"

namespace xk::nd {

struct StaticEntry {
  IpAddr ip;
  MacAddr mac;
  friend bool operator==(const StaticEntry&, const StaticEntry&) = default;
};

// "2001:db8::1@02:00:00:00:00:01" -> {ip, mac}; invalid_argument otherwise.
Result<StaticEntry> parse_static_entry(std::string_view text);

struct NdConfig {
  unsigned dad_transmits = 1;                          // RFC 4862 DupAddrDetectTransmits; 0: no check
  Duration retrans = std::chrono::seconds(1);          // RFC 4861 RETRANS_TIMER
  Duration reachable = std::chrono::seconds(30);       // REACHABLE_TIME (randomised per RFC 4861 6.3.2)
  Duration delay_first_probe = std::chrono::seconds(5);
  Duration stale_timeout = std::chrono::minutes(10);   // an unused STALE entry is forgotten
  unsigned multicast_solicits = 3;                     // MAX_MULTICAST_SOLICIT
  unsigned unicast_solicits = 3;                       // MAX_UNICAST_SOLICIT
  std::size_t pending_per_entry = 64;
  std::size_t pending_total = 256;
  std::size_t max_entries = 1024;
  bool mld = true;                                     // send MLDv2 reports for our groups
  std::vector<StaticEntry> statics;
};

// What a received ND message came with (from ipv6's RxInfo).
struct NdPacket {
  IpAddr src;
  IpAddr dst;
  std::uint8_t hop_limit = 0;
  bool fragmented = false;
};

class NdProtocol final : public Protocol, public NextHopResolver {
 public:
  using Config = NdConfig;

  enum class State : std::uint8_t { incomplete, reachable, stale, delay, probe, permanent };
  enum class AddrState : std::uint8_t { tentative, preferred, duplicate };
  struct EntryView {
    IpAddr ip;
    MacAddr mac;
    State state;
    std::size_t pending;
    bool router;
  };

  // `below` is eth (answers GetLocalAddr with a MacAddr, takes {MacAddr,
  // ProtoNum} opens and JoinLinkGroup). Throws std::invalid_argument
  // otherwise or for an invalid static entry.
  NdProtocol(std::string name, Protocol& below, EventLoop& loop, Config config = {});
  ~NdProtocol() override;

  // NextHopResolver. IPv6 only: another family is unsupported (counted).
  Status send_to(const IpAddr& next_hop, Msg packet) override;
  void add_local_address(const IpAddr& addr) override;
  bool address_usable(const IpAddr& addr) const override;
  // Router Advertisements, checked, go to `sink`; while it is set and none
  // has come, up to three Router Solicitations go to all-routers, the first
  // after a random delay of up to a second, then every 4 s (RFC 4861
  // 6.3.7). Null: routers' messages only teach their link addresses.
  void set_router_sink(RouterSink* sink) override;

  // An ICMPv6 message of an ND or MLD type (133-137, 130), whole from its
  // type byte on, its checksum checked. Malformed ones are dropped
  // (counted; malformed).
  Status receive(const NdPacket& info, std::span<const std::byte> message);

  // The link came up: what went out before reached nobody. Duplicate
  // checks still running start again, and our groups are reported again.
  void link_up();
  // Some address of ours is still tentative.
  bool checks_pending() const noexcept;

  std::optional<EntryView> lookup(const IpAddr& ip) const;
  std::optional<AddrState> address_state(const IpAddr& addr) const;
  std::size_t entries() const noexcept { return entries_.size(); }
  const MacAddr& mac() const noexcept { return mac_; }

 private:
  struct Entry;
  struct Local {
    Local(NdProtocol& nd, const IpAddr& a, AddrState s)
        : addr(a), state(s), dad_timer(nd.loop_.timers(), [n = &nd, l = this] { n->dad_step(*l); }) {}
    IpAddr addr;
    AddrState state;
    unsigned dad_sent = 0;
    Timer dad_timer;  // the next duplicate-check probe, or its end
  };
  struct IpKey {
    IpAddr::Bytes ip;
    friend bool operator==(const IpKey&, const IpKey&) = default;
  };
  Entry* find(const IpAddr& ip) const noexcept;
  Entry& create(const IpAddr& ip, State state);
  void remove(Entry& e);
  void set_state(Entry& e, State s);
  void learn(Entry& e, const MacAddr& mac);
  void flush(Entry& e);
  void on_timer(Entry& e);
  Status transmit(Entry& e, Msg packet);
  Local* local(const IpAddr& a) noexcept;
  const Local* local(const IpAddr& a) const noexcept;
  void dad_step(Local& l);
  void duplicate_found(Local& l);

  Status handle_solicit(const NdPacket& info, std::span<const std::byte> m);
  Status handle_advert(const NdPacket& info, std::span<const std::byte> m);
  Status handle_router_advert(const NdPacket& info, std::span<const std::byte> m);
  void solicit_routers();

  // Our source for a solicitation about `target`: `hint` when it is ours and
  // usable, else the usable link-local address, else any usable one.
  std::optional<IpAddr> solicit_source(const std::optional<IpAddr>& hint) const;
  Status send_solicit(const IpAddr& target, const std::optional<IpAddr>& src, bool unicast, Entry* via);
  Status send_advert(const IpAddr& target, const IpAddr& dst, bool solicited);
  Status send_report(bool state_change, const std::vector<IpAddr>& groups);
  // One ICMPv6 message (its checksum field zero) in an IPv6 packet from
  // `src` to `dst` with `hop_limit`; `router_alert` adds the hop-by-hop
  // header MLD wants.
  Msg packet_of(const IpAddr& src, const IpAddr& dst, std::uint8_t hop_limit, std::vector<std::byte> icmp,
                bool router_alert) const;
  Status send_multicast(const IpAddr& group, Msg packet);
  Status join(const IpAddr& group);

  Protocol& below_;
  EventLoop& loop_;
  Config config_;
  MacAddr mac_;
  Duration reachable_;  // config_.reachable, randomised once
  bool enabled_ = false;
  std::deque<Local> locals_;  // stable: each one's timer points at it
  std::vector<IpAddr> groups_;
  std::vector<std::pair<MacAddr, SessionRef>> group_sessions_;
  FlatMap<IpKey, std::unique_ptr<Entry>> entries_;
  std::size_t pending_total_ = 0;
  RouterSink* router_sink_ = nullptr;
  unsigned router_solicits_ = 0;  // sent since the sink was set or the link came up
  bool router_heard_ = false;     // an advertisement came: no more solicitations

  Counter& rx_solicits_;
  Counter& rx_adverts_;
  Counter& rx_router_adverts_;
  Counter& tx_router_solicits_;
  Counter& rx_other_;
  Counter& tx_solicits_;
  Counter& tx_adverts_;
  Counter& tx_reports_;
  Counter& tx_data_;
  Counter& drop_hop_limit_;
  Counter& drop_fragmented_;
  Counter& drop_malformed_;
  Counter& drop_not_for_us_;
  Counter& dad_ok_;
  Counter& dad_duplicate_;
  Counter& dup_addr_claimed_;
  Counter& cache_adds_;
  Counter& cache_updates_;
  Counter& cache_expired_;
  Counter& cache_evictions_;
  Counter& static_conflicts_;
  Counter& resolve_failed_;
  Counter& probe_failed_;
  Counter& drop_pending_full_;
  Counter& drop_unresolved_;
  Counter& drop_no_source_;
  Counter& drop_tx_error_;
  Counter& drop_not_ipv6_;
  Counter& drop_data_no_listener_;
  ResolverDataSink sink_;
  Timer rs_timer_;  // the next router solicitation
};

// Make the kind `nd` available to graph specs (needs the graph's EventLoop).
void register_nd(Registry& registry);

}  // namespace xk::nd

#pragma once
// arp: the Address Resolution Protocol (RFC 826) for IPv4 over Ethernet, as
// the NextHopResolver of ipv4 (xk/link.hpp, docs/architecture.md, docs/eth-arp.md).
//
//   arp arp0 below=eth0 timeout=60 retries=3 pending=64 static=192.0.2.1@02:00:00:00:00:01
//
// It enables EtherType 0x0806 on eth, broadcasts requests through one eth
// session, answers requests for the addresses add_local_address() gave it,
// and learns neighbours with RFC 826's merge rule: any ARP packet refreshes
// an existing entry for its sender; only a packet aimed at us adds one.
//
// send_to(next_hop, packet): a known neighbour gets the packet at once through
// an eth session (its MAC, 0x0800) kept in the cache entry; an unknown one
// gets an entry in state `incomplete`, the packet is queued (bounded per entry
// and overall) and a request is broadcast, then retried every retry interval.
// A reply flushes the queue in order. When the retries run out the queue is
// dropped (counted) and the entry stays `failed` for the hold-down, during
// which send_to answers no_route at once.
//
// Time comes from the EventLoop's timer wheel, so a ManualClock drives it.

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

namespace xk::arp {

struct StaticEntry {
  Ipv4Addr ip;
  MacAddr mac;
  friend bool operator==(const StaticEntry&, const StaticEntry&) = default;
};

// "192.0.2.1@02:00:00:00:00:01" -> {ip, mac}; invalid_argument otherwise.
Result<StaticEntry> parse_static_entry(std::string_view text);

struct ArpConfig {
  Duration timeout = std::chrono::seconds(60);        // life of a learned entry
  unsigned retries = 3;                               // requests re-sent after the first
  Duration retry_interval = std::chrono::seconds(1);  // RFC 1122 2.3.2.1: at most 1/s per neighbour
  Duration hold_down = std::chrono::seconds(20);      // no_route after a failed resolution
  // Packets queued per unresolved neighbour: at least a window of
  // handshakes (a client with 16 connects in flight behind filterd sends 16
  // SYN-ACKs to a peer it has not resolved yet; one dropped costs that
  // connection a 1 s SYN retransmission). Linux queues about 100 full frames.
  std::size_t pending_per_entry = 64;
  std::size_t pending_total = 256;                    // packets queued over all neighbours
  std::size_t max_entries = 1024;                     // learned entries (static ones not counted)
  bool gratuitous = true;                             // announce add_local_address()
  std::vector<StaticEntry> statics;                   // never expire, never overwritten
};

class ArpProtocol final : public Protocol, public NextHopResolver {
 public:
  using Config = ArpConfig;

  enum class State : std::uint8_t { incomplete, reachable, failed, permanent };
  struct EntryView {
    Ipv4Addr ip;
    MacAddr mac;  // zero while incomplete or failed
    State state;
    std::size_t pending;
  };

  // `below` is eth (anything answering GetLocalAddr with a MacAddr and taking
  // {MacAddr, ProtoNum} opens). Throws std::invalid_argument when it has no
  // MAC address or refuses the opens, or when a static entry is invalid.
  ArpProtocol(std::string name, Protocol& below, EventLoop& loop, Config config = {});
  ~ArpProtocol() override;

  // ARP packets from eth (EtherType 0x0806).
  Status demux(Session& lower, Msg msg) override;

  // NextHopResolver.
  // IPv4 only: another family's address is unsupported (counted).
  Status send_to(const IpAddr& next_hop, Msg packet) override;
  void add_local_address(const IpAddr& addr) override;
  // Announce every local address again (RFC 5227 2.3), e.g. once the link
  // came up: an announcement sent while it was down reached nobody, and a
  // neighbour may still hold the MAC of whoever had the address before.
  void announce();

  // A permanent entry (replaces a learned one for the same address).
  void add_static(Ipv4Addr ip, MacAddr mac);
  bool is_local(Ipv4Addr addr) const noexcept;

  std::optional<EntryView> lookup(Ipv4Addr ip) const;
  // Entries learned or being resolved (what max_entries bounds).
  std::size_t dynamic_entries() const noexcept { return dynamic_count_; }
  std::size_t total_entries() const noexcept { return entries_.size(); }
  std::size_t pending_packets() const noexcept { return pending_total_; }
  const Config& config() const noexcept { return config_; }

 private:
  void announce(Ipv4Addr addr);
  struct Entry;
  struct IpKey {
    std::uint32_t ip;
    friend bool operator==(const IpKey&, const IpKey&) = default;
  };
  Entry* find(Ipv4Addr ip) const noexcept;
  Entry& create(Ipv4Addr ip, State state);
  void remove(Entry& e);
  void drop_pending(Entry& e, Counter& why);
  void make_newest(Entry& e) noexcept;
  void unlink(Entry& e) noexcept;
  void learn(Entry& e, const MacAddr& mac);
  void flush(Entry& e);
  void on_timer(Entry& e);
  Status transmit(Entry& e, Msg packet);
  Status send_arp(std::uint16_t op, const MacAddr& eth_dst, Ipv4Addr spa, const MacAddr& tha, Ipv4Addr tpa,
                  Session* via);

  Protocol& below_;
  EventLoop& loop_;
  Config config_;
  MacAddr mac_;
  std::vector<Ipv4Addr> locals_;
  SessionRef broadcast_;  // eth session (ff:ff:ff:ff:ff:ff, 0x0806)
  bool enabled_ = false;
  FlatMap<IpKey, std::unique_ptr<Entry>> entries_;
  Entry* oldest_ = nullptr;  // age list of learned entries, oldest first
  Entry* newest_ = nullptr;
  std::size_t dynamic_count_ = 0;
  std::size_t pending_total_ = 0;

  Counter& rx_requests_;
  Counter& rx_replies_;
  Counter& rx_gratuitous_;
  Counter& tx_requests_;
  Counter& tx_replies_;
  Counter& tx_gratuitous_;
  Counter& tx_data_;
  Counter& drop_truncated_;
  Counter& drop_bad_htype_;
  Counter& drop_bad_ptype_;
  Counter& drop_bad_hlen_;
  Counter& drop_bad_plen_;
  Counter& drop_bad_op_;
  Counter& drop_bad_sender_;
  Counter& dup_addr_detected_;
  Counter& rx_request_not_for_us_;
  Counter& rx_reply_not_for_us_;
  Counter& cache_adds_;
  Counter& cache_updates_;
  Counter& cache_expired_;
  Counter& cache_evictions_;
  Counter& static_conflicts_;
  Counter& resolve_failed_;
  Counter& drop_pending_full_;
  Counter& drop_unresolved_;
  Counter& drop_evicted_;
  Counter& drop_hold_down_;
  Counter& drop_tx_error_;
  Counter& drop_not_ipv4_;
  Counter& drop_data_no_listener_;
  ResolverDataSink sink_;
};

// Make the kind `arp` available to graph specs. The factory needs the graph's
// EventLoop (Graph::build(..., &loop)) and throws without one.
//   arp arp0 below=eth0 [timeout=60] [retries=3] [retry_ms=1000] [hold_down=20]
//            [pending=64] [pending_total=256] [max_entries=1024]
//            [static=ip@mac,...] [gratuitous=on]
void register_arp(Registry& registry);

}  // namespace xk::arp

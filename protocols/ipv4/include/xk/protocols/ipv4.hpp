#pragma once
// IPv4 for a host (RFC 791, RFC 1122 section 3). See docs/ipv4-icmp.md.
//
//   ipv4 ip0 below=<link>[,<resolver>] addr=A/len [gw=G] [ttl=64] [csum=on]
//            [mtu=N] [reasm_timeout=30] [reasm_max_datagram=65535] [reasm_mem=4M]
//
//   open(upper, {remote: Ipv4Addr peer, ProtoNum proto (top)})  -> session (peer, proto)
//   open_enable(upper, {local: ProtoNum proto})                 -> passive opens
//   demux(link_session, packet)                                 -> validate, reassemble, upcall
//
// below[0] is the link (eth, or a driver carrying bare IP packets). below[1],
// when present, must be an xk::NextHopResolver (arp): every outgoing packet is
// handed to it with its next hop. Without one, packets go straight to the
// link session.
//
// ICMP attaches itself (attach_icmp) so that ipv4 can ask it for destination
// unreachables, and calls deliver_error() with the errors it receives.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "xk/demux.hpp"
#include "xk/graph.hpp"
#include "xk/link.hpp"
#include "xk/options.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/ipv4_wire.hpp"
#include "xk/protocols/reassembly.hpp"
#include "xk/timer.hpp"

namespace xk::ipv4 {

class Ipv4Protocol;

// What ipv4 needs from ICMP: the error messages a host sends (RFC 1122
// 3.2.2.1). `original` is the offending datagram from its IP header on; the
// sender quotes what it needs and never keeps a reference.
class IcmpErrorSink {
 public:
  virtual ~IcmpErrorSink() = default;
  virtual Status send_dest_unreachable(std::uint8_t code, const Msg& original, std::uint16_t next_hop_mtu) = 0;
};

struct Config {
  Ipv4Cidr addr;                  // our address and subnet (required)
  std::optional<Ipv4Addr> gw;     // default gateway; none: off-link is no_route
  std::uint8_t ttl = 64;          // RFC 1700 / RFC 1122 3.2.1.7 default
  ChecksumMode csum = ChecksumMode::on;
  std::size_t mtu = 0;            // 0: ask the link (GetMtu)
  Duration reasm_timeout = std::chrono::seconds(30);
  std::size_t reasm_max_datagram = Header::kMaxTotal;  // largest reassembled datagram (header included)
  std::size_t reasm_mem = 4u << 20;                    // bytes held by all reassemblies together
  std::size_t loopback_queue = 64;                     // packets to ourselves waiting for delivery
  // Our address is shared with other stacks (filterd's nodes): a TCP or UDP
  // datagram to it is delivered here only when our transport has its flow
  // (ctl::ClaimsOwn), and otherwise goes out through the link, whose other
  // end (filterd) steers it to the stack that owns it. The resolver must
  // know where our own address leads (arp static=ADDR@MAC).
  bool hairpin = false;
};


class Ipv4Session final : public Session {
 public:
  Ipv4Session(Ipv4Protocol& proto, Protocol* upper, Ipv4Addr peer, std::uint8_t protocol);

  Status push(Msg msg) override;
  Status pop(Session& lower, Msg msg) override;
  Status close() override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  Ipv4Addr peer() const noexcept { return peer_; }
  std::uint8_t protocol_number() const noexcept { return protocol_; }
  // Set DF on what this session sends: a payload that does not fit the MTU is
  // then refused with too_large instead of fragmented (RFC 1191 hosts).
  bool dont_fragment() const noexcept { return df_; }

 private:
  Ipv4Protocol& proto_;
  Ipv4Addr peer_;
  std::uint8_t protocol_;
  bool df_ = false;
};

class Ipv4Protocol final : public Protocol {
 public:
  // `resolver` may be null (bare IP link). `timers` runs reassembly timeouts
  // and loopback delivery; it must outlive this protocol.
  Ipv4Protocol(std::string name, Protocol& link, NextHopResolver* resolver, TimerWheel& timers, Config config);
  ~Ipv4Protocol() override;

  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  Status open_enable(Protocol& upper, Participants& parts) override;
  Status open_disable(Protocol& upper, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  struct SendOptions {
    bool dont_fragment = false;
  };
  // Send `payload` to `dst` with protocol number `protocol` from our address,
  // without a session: sessions use it, and ICMP uses it for replies and
  // errors. Fragments when needed; routes on-link, via gw, or fails no_route.
  Status send(Ipv4Addr dst, std::uint8_t protocol, Msg payload, SendOptions opts);
  Status send(Ipv4Addr dst, std::uint8_t protocol, Msg payload) { return send(dst, protocol, std::move(payload), SendOptions{}); }

  // An ICMP error about one of our datagrams: hand it to the upper protocol
  // that enabled err.protocol, else to the upper of the active session
  // (err.remote, err.protocol). not_found if nobody owns it.
  Status deliver_error(const ctl::NetError& err);

  void attach_icmp(IcmpErrorSink* icmp) noexcept { icmp_ = icmp; }

  const Config& config() const noexcept { return config_; }
  Ipv4Addr address() const noexcept { return config_.addr.addr; }
  // Largest packet (header included) handed to the link.
  std::size_t link_mtu();
  bool is_broadcast(Ipv4Addr a) const noexcept;
  std::size_t session_count() const noexcept { return active_.size(); }
  std::size_t reassemblies() const noexcept { return reasm_.size(); }
  std::size_t reassembly_memory() const noexcept { return reasm_.memory(); }

 private:
  friend class Ipv4Session;

  struct Key {
    std::uint32_t peer;
    std::uint32_t protocol;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct ProtoKey {
    std::uint32_t protocol;
    friend bool operator==(const ProtoKey&, const ProtoKey&) = default;
  };
  // RFC 791: fragments belong together when source, destination, protocol
  // and identification match.
  struct ReasmKey {
    std::uint32_t src;
    std::uint32_t dst;
    std::uint16_t id;
    std::uint8_t protocol;
    std::uint8_t zero = 0;  // explicit, so the key has no padding to hash
    friend bool operator==(const ReasmKey&, const ReasmKey&) = default;
  };
  Status receive(Session* lower, Msg packet, bool verify);
  Status reassemble(Session* lower, const Header& h, Msg packet, bool broadcast);
  Status deliver(Session* lower, const Header& h, Msg packet, bool broadcast, bool reassembled);
  void drain_loopback();
  Status resolve_l4_checksum(Msg& payload);
  Status emit(Ipv4Addr next_hop, Msg packet);
  bool delivered_here(std::uint8_t protocol, Msg& payload);
  bool verify_rx() const noexcept { return config_.csum == ChecksumMode::on || config_.csum == ChecksumMode::rx_only; }
  bool fill_tx() const noexcept { return config_.csum == ChecksumMode::on || config_.csum == ChecksumMode::tx_only; }

  Protocol& link_;
  NextHopResolver* resolver_;
  TimerWheel& timers_;
  Config config_;
  LinkOffloads offloads_;  // the port's, asked once at start-up
  SessionRef link_session_;
  bool link_enabled_ = false;
  IcmpErrorSink* icmp_ = nullptr;
  std::uint16_t next_id_;
  ActiveMap<Key> active_;
  EnableTable<ProtoKey> passive_;
  std::deque<Msg> loopback_;
  Timer loopback_timer_;

  Counter& rx_packets_;
  Counter& rx_delivered_;
  Counter& drop_truncated_;
  Counter& drop_bad_version_;
  Counter& drop_bad_ihl_;
  Counter& drop_bad_len_;
  Counter& drop_bad_csum_;
  Counter& drop_bad_src_;
  Counter& drop_not_for_us_;
  Counter& rx_options_;
  Counter& rx_fragments_;
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
  Counter& drop_tx_link_;
  Counter& tx_loopback_;
  Counter& tx_hairpin_;
  Counter& drop_loopback_full_;
  Counter& icmp_port_unreach_;
  Counter& icmp_proto_unreach_;
  Counter& errors_delivered_;
  Counter& drop_error_no_owner_;
  Counter& rx_csum_by_port_;
  Counter& tx_csum_by_port_;
  Counter& tx_l4_csum_resolved_;

  ip::Reassembler<ReasmKey> reasm_;  // after the counters it counts in
};

// Make the kind `ipv4` available to graph specs. The factory needs an event
// loop (Graph::build(..., &loop)) for its timers.
void register_ipv4(Registry& registry);

}  // namespace xk::ipv4

#pragma once
// steer: filterd's data path, as a layer of its graph (docs/filterd.md).
//
//   dpdk  net0   devargs=<the external port>
//   steer st0    below=net0 addr=192.0.2.10/24 gw=192.0.2.1
//   eth   eth0   below=st0          -- filterd's own stack for the shared
//   arp   arp0   below=eth0         -- address: ARP, ping, and the RST /
//   ipv4  ip0    below=eth0,arp0    -- port unreachable nobody else sends
//   icmp, tcp, udp on ip0
//
// Every frame from the external port goes through the filter engine:
// frames of a node's flow go straight to that node's channel (its Ethernet
// header rewritten: filterd's channel MAC to the node's MAC); ARP, ICMP echo,
// and segments or datagrams for nobody go up to filterd's own stack, whose
// tcp (no listeners) answers RST and whose udp (no sockets) makes ipv4 answer
// port unreachable -- the RFC behaviour, from code that is already tested.
//
// A node's frames arrive on its channel: ARP requests and IPv6 neighbor
// solicitations are answered with filterd's channel MAC (so the node sends
// everything to filterd), IP packets pass the egress check (the shared
// address, a flow or port the node owns) and go out through filterd's ARP
// or ND, which resolves the next hop on the external link and writes the
// Ethernet header. Everything else is dropped and counted.

#include <cstdint>
#include <functional>
#include <memory>
#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "xk/clock.hpp"
#include "xk/counters.hpp"
#include "xk/demux.hpp"
#include "xk/filterd/filter.hpp"
#include "xk/graph.hpp"
#include "xk/link.hpp"
#include "xk/options.hpp"
#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/ipv4_wire.hpp"
#include "xk/protocols/tcp_wire.hpp"
#include "xk/protocols/passthrough.hpp"

namespace xk::filterd {

struct SteerConfig {
  Ipv4Cidr shared;                  // the shared address and its subnet
  std::optional<Ipv4Addr> gateway;  // next hop off the subnet
  // IPv6 (docs/filterd.md, "IPv6"): the shared address and its on-link
  // prefix, the default router (link-local or on the prefix). Unset:
  // IPv6 frames are dropped both ways.
  std::optional<IpCidr> shared6;
  std::optional<IpAddr> gateway6;
  // filterd's address on the node channels (locally administered).
  MacAddr channel_mac{{0x02, 0x78, 0x6b, 0x00, 0x00, 0x01}};
  FilterConfig filter;              // shared_ip is taken from `shared`
};

class Steer final : public fault::PassThrough {
 public:
  Steer(std::string name, Protocol& external, const Clock& clock, SteerConfig config);
  ~Steer() override;

  FilterEngine& filter() noexcept { return *filter_; }
  const SteerConfig& config() const noexcept { return config_; }

  // filterd's own ARP (the graph's arp0, above us): node packets leave
  // through it. Until set, node packets are dropped (no_resolver).
  void set_resolver(NextHopResolver* arp) noexcept { resolver_ = arp; }
  // filterd's own nd (above us, nd0): the nodes' IPv6 packets leave through it.
  void set_resolver6(NextHopResolver* nd) noexcept { resolver6_ = nd; }

  // A node's channel for one of its queues (one per stack the node runs): a
  // driver whose receive side is that stack's frames and whose sessions
  // reach it. Frames whose Target is (node, queue) go out on it. The driver
  // must outlive the attachment (detach() first, or destroy the channel
  // after steer).
  // exists: the node has a channel for that queue already.
  Status attach(NodeId node, std::uint16_t queue, Protocol& channel, MacAddr node_mac);
  Status attach(NodeId node, Protocol& channel, MacAddr node_mac) { return attach(node, 0, channel, node_mac); }
  // The node port (filterd --node-port): one Ethernet port shared by the
  // nodes on other hosts, `mac` filterd's address on it. Frames that arrive
  // there belong to the node whose MAC is their source (unknown: dropped and
  // counted in node_port_unknown_mac) and pass the same egress check as a
  // memif node's. The driver must outlive steer or detach_node_port().
  // exists: there is one already.
  Status attach_node_port(Protocol& port, MacAddr mac);
  void detach_node_port() noexcept;
  bool has_node_port() const noexcept { return node_port_ != nullptr; }
  // A node on the node port, known by its MAC: its one queue (0); frames of
  // its flows go out of the node port to that MAC. not_found: no node port;
  // exists: the node or the MAC has a channel already.
  Status attach_ethernet(NodeId node, MacAddr node_mac);
  // Forget every channel of the node and everything it owned in the filter.
  void detach(NodeId node) noexcept;
  bool attached(NodeId node, std::uint16_t queue = 0) const noexcept;
  // Frames steered to the node's channels since they were attached (0:
  // none, or no such node): all its queues', or one queue's.
  std::uint64_t rx_frames(NodeId node) const noexcept;
  std::uint64_t rx_frames(NodeId node, std::uint16_t queue) const noexcept;
  // Each channel's own counters (rx_frames, tx_frames, tx_other_queue),
  // named <steer>/node<N>q<Q>: for STATS.
  std::vector<const CounterSet*> channel_counters() const;

  // Central mode (docs/filterd.md): every TCP segment for the shared address
  // goes up to filterd's own TCP, which terminates the connections; the
  // nodes' relay frames (EtherType 0x88B5) go to `sink`. UDP, ARP and ICMP
  // are steered as ever.
  using RelaySink = std::function<void(NodeId node, Msg frame)>;
  void set_central(RelaySink sink) { relay_sink_ = std::move(sink); }
  bool central() const noexcept { return static_cast<bool>(relay_sink_); }
  // A relay frame (no Ethernet header yet) to a node's channel. would_block:
  // the channel is full now and the frame was not taken (it is still the
  // caller's if it pushed a share()); not_found: no such channel.
  Status send_relay(NodeId node, Msg frame);

  // A filterd that starts knows none of the connections its nodes kept
  // through its restart; until they have said HELLO and RESYNC again, an
  // RST or port unreachable for a flow "nobody" owns -- or a stray TCP
  // segment handed to a listener, whose node would answer it with RST --
  // would kill a connection that is about to be re-declared. Until `until`,
  // such frames are dropped (counted in rx_quiet): the peers retransmit,
  // and the flows are in place by then. SYNs and exact flows pass.
  void keep_quiet_until(Time until) noexcept { quiet_until_ = until; }

 protected:
  Status on_rx(fault::PassSession& s, Msg msg) override;

 private:
  // The headers of one TCP segment carried in a frame of several (a node's
  // large frame, or one the external port coalesced), copied.
  struct TcpHeaders {
    std::array<std::byte, eth::Header::kSize + ipv4::Header::kMaxSize + tcp::Header::kMaxSize> bytes{};  // total length cut to the headers
    std::size_t len = 0;
    std::size_t ip_len = 0;          // IP header bytes (IPv6: the fixed header, TCP right behind it)
    bool v6 = false;
    std::uint16_t seg_size = 0;      // payload bytes of each segment it holds
    bool csum = false;               // it carries a TCP checksum (the field is not 0)
    std::span<const std::byte> span() const noexcept { return {bytes.data(), len}; }
  };
  static std::optional<TcpHeaders> tcp_headers(const Msg& frame) noexcept;
  std::optional<TcpHeaders> large_frame(const Msg& frame) const noexcept;
  Status dispatch(fault::PassSession& s, const Decision& d, Msg msg);
  Status on_rx_coalesced(fault::PassSession& s, const TcpHeaders& h, Msg msg);

 protected:

 private:
  class Channel;
  class NodePort;
  struct NodeKey {
    std::uint32_t node;  // node << 16 | queue
    friend bool operator==(const NodeKey&, const NodeKey&) = default;
  };
  static NodeKey key_of(NodeId node, std::uint16_t queue) noexcept {
    return NodeKey{std::uint32_t{node} << 16 | queue};
  }
  // The channel of a target (null, counted, if it has none), and a frame
  // handed to a channel (a refusal counted).
  Channel* channel_of(const Target& t) noexcept;
  Status to_channel(Channel& ch, Msg frame);
  Status forward(const Decision& d, Msg frame);
  Status fit_for_channel(Channel& ch, Msg& frame);
  Status egress(Channel& ch, Msg frame);
  Status answer_arp(Channel& ch, Msg frame);
  // steer_v6.cpp: a node's Neighbor Discovery, answered for every address
  // but the shared one (proxy, RFC 4861 7.2.8) or let go.
  Status node_discovery(Channel& ch, std::span<const std::byte> frame);
  bool is_node_discovery(std::span<const std::byte> frame) const noexcept;
  // The next hop on the external link for an IPv6 destination.
  std::optional<IpAddr> next_hop6(const IpAddr& dst) const noexcept;
  Status hairpin(Channel& from, std::span<const std::byte> headers, const std::optional<TcpHeaders>& large, Msg frame);
  // `tcp`: where the TCP header starts in `frame` (an IPv6 packet's right
  // behind the fixed header; 0: not a TCP packet with one).
  void learn_passive_flow(Channel& ch, const IpAddr& remote, std::span<const std::byte> frame, std::size_t tcp);
  bool quiet(const Decision& d, std::span<const std::byte> frame) noexcept;

  SteerConfig config_;
  const Clock& clock_;
  Time quiet_until_{};
  std::unique_ptr<FilterEngine> filter_;
  NextHopResolver* resolver_ = nullptr;
  NextHopResolver* resolver6_ = nullptr;
  FlatMap<NodeKey, std::unique_ptr<Channel>> channels_;
  std::unique_ptr<NodePort> node_port_;
  std::unordered_map<std::uint64_t, NodeId> by_mac_;  // the node port's nodes, by MAC
  RelaySink relay_sink_;

  Counter& rx_to_node_;
  Counter& rx_local_;
  Counter& rx_dropped_;
  Counter& rx_no_channel_;
  Counter& rx_channel_full_;
  Counter& tx_from_nodes_;
  Counter& tx_denied_;
  Counter& tx_other_queue_;
  Counter& tx_no_resolver_;
  Counter& tx_not_sent_;
  Counter& proxy_arp_;
  Counter& proxy_nd_;
  Counter& node_nd_ignored_;
  Counter& channel_dropped_;
  Counter& learned_flows_;
  Counter& rx_central_tcp_;
  Counter& relay_from_nodes_;
  Counter& rx_quiet_;
  Counter& node_port_unknown_mac_;
  Counter& tx_large_from_nodes_;
  Counter& rx_coalesced_whole_;
  Counter& rx_coalesced_cut_;
  Counter& rx_coalesced_bad_;
  Counter& hairpin_;
  Counter& hairpin_answered_;
  Counter& hairpin_dropped_;
  std::size_t ext_frame_max_ = 0;  // the external port's largest frame (MTU + 14)
};

void register_steer(Registry& registry);

}  // namespace xk::filterd

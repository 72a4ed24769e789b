// filterd's data path (xk/filterd/steer.hpp).

#include "xk/filterd/steer.hpp"

#include <cstring>
#include <stdexcept>

#include "xk/checksum.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/arp_wire.hpp"
#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/ipv4_wire.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/ipv6_wire.hpp"
#include "xk/protocols/relay_wire.hpp"
#include "steer_channel.hpp"

namespace xk::filterd {

// The upper of the node port's driver: a frame belongs to the node whose MAC
// sent it. On plain Ethernet nothing else says who sent a frame, so the node
// port must be a link where a host cannot forge another's source MAC (a
// switch with port security, or a point-to-point link): docs/filterd.md.
class Steer::NodePort final : public Protocol {
 public:
  NodePort(Steer& steer, Protocol& driver, MacAddr mac)
      : Protocol(steer.name() + "/node-port", "steer-node-port"), steer_(steer), driver_(driver), mac_(mac) {
    Participants none;
    Result<SessionRef> s = driver.open(*this, none);
    if (!s) throw std::invalid_argument("cannot open a session on '" + driver.name() + "': " + to_string(s.error()));
    tx_ = *s;
    Participants none2;
    if (Status st = driver.open_enable(*this, none2); !st) {
      throw std::invalid_argument("node port '" + driver.name() + "' refused us as receiver: " + to_string(st.error()));
    }
  }
  ~NodePort() override {
    Participants none;
    (void)driver_.open_disable(*this, none);
    if (tx_) (void)tx_->close();
  }

  Status demux(Session&, Msg msg) override {
    Result<std::span<const std::byte>> h = msg.peek(eth::Header::kSize);
    if (!h) {
      ++steer_.channel_dropped_;
      return Errc::malformed;
    }
    MacAddr src;
    std::memcpy(src.bytes.data(), h->data() + 6, 6);
    auto it = steer_.by_mac_.find(mac_key(src));
    std::unique_ptr<Channel>* ch = it == steer_.by_mac_.end() ? nullptr : steer_.channels_.find(key_of(it->second, 0));
    if (ch == nullptr) {
      ++steer_.node_port_unknown_mac_;
      return Errc::not_found;
    }
    return steer_.egress(**ch, std::move(msg));
  }

  const SessionRef& tx() const noexcept { return tx_; }
  MacAddr mac() const noexcept { return mac_; }

  static std::uint64_t mac_key(const MacAddr& m) noexcept {
    std::uint64_t k = 0;
    for (std::uint8_t b : m.bytes) k = (k << 8) | b;
    return k;
  }

 private:
  Steer& steer_;
  Protocol& driver_;
  MacAddr mac_;
  SessionRef tx_;
};

namespace {
// The engine's addresses from steer's: the shared ones, and filterd's
// link-local address on the external link (from its MAC, as ipv6 makes it).
FilterConfig with_shared(FilterConfig f, const SteerConfig& c, Protocol& external) {
  f.shared_ip = c.shared.addr;
  if (c.shared6) {
    f.shared_ip6 = c.shared6->addr;
    Result<Participant> local = external.control(ctl::GetLocalAddr{});
    if (Result<MacAddr> mac = local ? local->peek<MacAddr>() : Result<MacAddr>(local.error())) {
      f.link_local6 = icmpv6::link_local_from_mac(*mac);
    }
  }
  return f;
}

// The frame as one contiguous span: a chain (a jumbo frame over memif) is
// copied into one buffer, the only case that copies.
Result<std::span<const std::byte>> contiguous(Msg& frame) {
  if (frame.fragments().size() > 1) {
    if (Status st = frame.linearize(); !st) return st.error();
  }
  if (frame.size() == 0) return std::span<const std::byte>{};
  return frame.peek(frame.size());
}
}  // namespace

Steer::Steer(std::string name, Protocol& external, const Clock& clock, SteerConfig config)
    : PassThrough(std::move(name), "steer", external),
      config_(std::move(config)),
      clock_(clock),
      filter_(std::make_unique<FilterEngine>(with_shared(config_.filter, config_, external), clock)),
      rx_to_node_(counters().add("rx_to_node", "frames steered to a node")),
      rx_local_(counters().add("rx_local", "frames for filterd's own stack (ARP, ping, RST, unreachable)")),
      rx_dropped_(counters().add("rx_dropped", "frames the filter dropped (see the filter's reasons)")),
      rx_no_channel_(counters().add("rx_no_channel", "steered to a node with no channel")),
      rx_channel_full_(counters().add("rx_channel_full", "a node's channel refused the frame")),
      tx_from_nodes_(counters().add("tx_from_nodes", "node packets sent out")),
      tx_denied_(counters().add("tx_denied", "node frames the egress check refused")),
      tx_other_queue_(counters().add("tx_other_queue", "node frames for a flow of another queue of the same node")),
      tx_no_resolver_(counters().add("tx_no_resolver", "node packets with no ARP to send them")),
      tx_not_sent_(counters().add("tx_not_sent", "node packets ARP could not send or queue")),
      proxy_arp_(counters().add("proxy_arp", "node ARP requests answered with filterd's channel MAC")),
      proxy_nd_(counters().add("proxy_nd", "node neighbor solicitations answered with filterd's channel MAC")),
      node_nd_ignored_(counters().add("node_nd_ignored", "node ND and MLD let go: address checks, reports, adverts")),
      channel_dropped_(counters().add("channel_dropped", "node frames neither IP nor an ARP request")),
      learned_flows_(counters().add("learned_flows", "accepted connections made exact flows at their SYN-ACK")),
      rx_central_tcp_(counters().add("rx_central_tcp", "central mode: TCP segments for filterd's own TCP")),
      relay_from_nodes_(counters().add("relay_from_nodes", "central mode: relay frames from the nodes")),
      rx_quiet_(counters().add("rx_quiet", "frames dropped unanswered while the nodes re-declare their flows")),
      node_port_unknown_mac_(counters().add("node_port_unknown_mac", "node-port frames from a MAC no node has")),
      tx_large_from_nodes_(counters().add("tx_large_from_nodes", "large frames from nodes, cut at the external MTU")),
      rx_coalesced_whole_(counters().add("rx_coalesced_whole", "coalesced frames from outside, to a node whole")),
      rx_coalesced_cut_(counters().add("rx_coalesced_cut", "coalesced frames cut again for a node's channel")),
      rx_coalesced_bad_(counters().add("rx_coalesced_bad", "coalesced frames a node could not take whole, checksum bad")),
      hairpin_(counters().add("hairpin", "node packets for the shared address, steered to the node that owns them")),
      hairpin_answered_(counters().add("hairpin_answered", "node packets for the shared address nobody owns, back to the sender")),
      hairpin_dropped_(counters().add("hairpin_dropped", "node packets for the shared address the filter dropped")) {
  if (Result<std::size_t> m = external.control(ctl::GetMtu{}); m) ext_frame_max_ = *m;
}

Steer::~Steer() {
  channels_.clear();
  node_port_.reset();
}

Status Steer::attach_node_port(Protocol& port, MacAddr mac) {
  if (node_port_) return Errc::exists;
  node_port_ = std::make_unique<NodePort>(*this, port, mac);
  return {};
}

void Steer::detach_node_port() noexcept {
  // Its nodes' channels send through its session: they go first.
  std::vector<NodeId> gone;
  for (const auto& [mac, node] : by_mac_) gone.push_back(node);
  for (NodeId n : gone) detach(n);
  node_port_.reset();
}

Status Steer::attach_ethernet(NodeId node, MacAddr node_mac) {
  if (!node_port_) return Errc::not_found;
  if (channels_.find(key_of(node, 0)) != nullptr || by_mac_.count(NodePort::mac_key(node_mac)) != 0) {
    return Errc::exists;
  }
  channels_.insert(key_of(node, 0),
                   std::make_unique<Channel>(*this, node, node_port_->tx(), node_mac, node_port_->mac()));
  by_mac_.emplace(NodePort::mac_key(node_mac), node);
  return {};
}

namespace {
constexpr std::uint16_t kMaxQueues = 64;  // the control protocol's cap
}  // namespace

Status Steer::attach(NodeId node, std::uint16_t queue, Protocol& channel, MacAddr node_mac) {
  if (queue >= kMaxQueues) return Errc::invalid_argument;
  const NodeKey key = key_of(node, queue);
  if (channels_.find(key) != nullptr) return Errc::exists;
  channels_.insert(key, std::make_unique<Channel>(*this, node, queue, channel, node_mac));
  return {};
}

void Steer::detach(NodeId node) noexcept {
  if (std::unique_ptr<Channel>* ch = channels_.find(key_of(node, 0)); ch != nullptr && (*ch)->ethernet()) {
    by_mac_.erase(NodePort::mac_key((*ch)->node_mac()));
  }
  for (std::uint16_t q = 0; q < kMaxQueues; ++q) channels_.erase(key_of(node, q));
  filter_->remove_node(node);
}

// Relay frames (central mode) go on the node's first channel: central mode
// runs one queue a node.
Status Steer::send_relay(NodeId node, Msg frame) {
  std::unique_ptr<Channel>* ch = channels_.find(key_of(node, 0));
  if (ch == nullptr) return Errc::not_found;
  return (*ch)->send_typed(std::move(frame), relay::kEtherType);
}

bool Steer::attached(NodeId node, std::uint16_t queue) const noexcept {
  return channels_.find(key_of(node, queue)) != nullptr;
}

std::uint64_t Steer::rx_frames(NodeId node, std::uint16_t queue) const noexcept {
  const std::unique_ptr<Channel>* ch = channels_.find(key_of(node, queue));
  return ch == nullptr ? 0 : (*ch)->rx_.value();
}

std::uint64_t Steer::rx_frames(NodeId node) const noexcept {
  std::uint64_t n = 0;
  for (std::uint16_t q = 0; q < kMaxQueues; ++q) n += rx_frames(node, q);
  return n;
}

std::vector<const CounterSet*> Steer::channel_counters() const {
  std::vector<const CounterSet*> out;
  auto& self = const_cast<FlatMap<NodeKey, std::unique_ptr<Channel>>&>(channels_);
  self.for_each([&](const NodeKey&, std::unique_ptr<Channel>& ch) { out.push_back(&ch->counters()); });
  return out;
}

// ---- ingress: the external port ----------------------------------------------

namespace {
// TCP straight behind the IP header (IPv4's protocol, IPv6's first next
// header). TCP behind IPv6 extension headers (which Linux and the usual
// peers never send on a connection) goes through the filter like any
// other frame and is not relayed: a node in central mode has no TCP of its
// own and drops it.
bool carries_tcp(std::span<const std::byte> f) noexcept {
  if (f.size() < 14 + 20) return false;
  const std::uint16_t type = load_be16(f.data() + 12);
  if (type == eth::kTypeIpv4) return static_cast<std::uint8_t>(f[14 + 9]) == 6;
  if (type == eth::kTypeIpv6) return static_cast<std::uint8_t>(f[14 + 6]) == 6;
  return false;
}
}  // namespace

Status Steer::on_rx(fault::PassSession& s, Msg msg) {
  // A coalesced frame (the external port's GRO) is classified on its
  // headers; with user rules, which may read any byte, on the whole of it.
  if (msg.offload().has(Offload::rx_coalesced) && !relay_sink_ && filter_->rule_count() == 0) {
    if (std::optional<TcpHeaders> h = tcp_headers(msg)) return on_rx_coalesced(s, *h, std::move(msg));
  }
  Result<std::span<const std::byte>> frame = contiguous(msg);
  if (!frame) {
    ++rx_dropped_;
    return frame.error();
  }
  if (relay_sink_ && carries_tcp(*frame)) {
    // Central mode: filterd's TCP is every TCP connection's end (its ipv4
    // or ipv6 checks the packet as for any stack).
    ++rx_central_tcp_;
    return s.deliver_up(std::move(msg));
  }
  const Decision d = filter_->classify(*frame);
  if (quiet(d, *frame)) {
    ++rx_quiet_;
    return {};
  }
  Status st = dispatch(s, d, std::move(msg));
  // Fragments a first fragment released go where it went.
  if (filter_->has_released()) {
    for (ReleasedFrame& r : filter_->take_released()) {
      if (quiet(r.decision, r.frame)) {
        ++rx_quiet_;
        continue;
      }
      Msg m = Msg::copy_of(r.frame, Msg::kDefaultHeadroom);
      if (r.decision.action == Action::to_node) {
        (void)forward(r.decision, std::move(m));
      } else {
        ++rx_local_;
        (void)s.deliver_up(std::move(m));
      }
    }
  }
  return st;
}

Status Steer::dispatch(fault::PassSession& s, const Decision& d, Msg msg) {
  switch (d.action) {
    case Action::to_node:
      return forward(d, std::move(msg));
    case Action::local:
    case Action::reset:
    case Action::port_unreachable:
      // filterd's own stack: ARP and echo for the shared address, and the
      // RST / ICMP port unreachable its empty tcp and udp give (RFC 9293
      // 3.10.7.1, RFC 1122 4.1.3.1).
      ++rx_local_;
      return s.deliver_up(std::move(msg));
    case Action::held:
      return {};  // a copy waits for its first fragment
    case Action::drop:
      ++rx_dropped_;
      return {};
  }
  return {};
}

// A frame the external port coalesced (docs/filterd.md, "Large frames to
// the nodes"): segments of one flow, in order, flags ACK/PSH only -- never a
// fragment, a SYN or a FIN. Every step of the filter but user rules reads
// headers alone, so its headers stand for it and the payload stays where
// the port put it.
Status Steer::on_rx_coalesced(fault::PassSession& s, const TcpHeaders& h, Msg msg) {
  const Decision d = filter_->classify(h.span());
  if (quiet(d, h.span())) {
    ++rx_quiet_;
    return {};
  }
  return dispatch(s, d, std::move(msg));
}

// A coalesced frame goes to the node whole if its channel takes it (the
// node's TCP checks the checksum the port carried over from the parts);
// else it is cut back into frames the channel takes, at the size of the
// segments it was made of -- after its checksum is checked here, since the
// cut gives every piece a checksum of its own and a corrupt part would
// otherwise arrive with a good one.
Status Steer::fit_for_channel(Channel& ch, Msg& frame) {
  if (!frame.offload().has(Offload::rx_coalesced)) return {};
  if (frame.size() <= ch.frame_max()) {
    ++rx_coalesced_whole_;
    return {};
  }
  const std::optional<TcpHeaders> h = tcp_headers(frame);
  if (!h || frame.offload().seg_size == 0) {
    ++rx_coalesced_bad_;
    return Errc::malformed;
  }
  const std::byte* ip = h->bytes.data() + eth::Header::kSize;
  const std::size_t tcp_len = frame.size() - eth::Header::kSize - h->ip_len;
  Msg tcp = frame.share();
  (void)tcp.pop(eth::Header::kSize + h->ip_len);
  const std::uint32_t pseudo =
      h->v6 ? csum::pseudo_header(ipv6::Header::address_at(ip + 8), ipv6::Header::address_at(ip + 24), ipv6::kTcp,
                                  static_cast<std::uint32_t>(tcp_len))
            : csum::pseudo_header_v4(Ipv4Addr{load_be32(ip + 12)}, Ipv4Addr{load_be32(ip + 16)}, ipv4::kProtoTcp,
                                     static_cast<std::uint16_t>(tcp_len));
  if (csum::fold(csum::partial(tcp, pseudo)) != 0xffff) {
    ++rx_coalesced_bad_;
    return Errc::malformed;
  }
  Offload& o = frame.offload();
  o.flags = static_cast<std::uint8_t>(Offload::tx_tcp_seg | Offload::tx_tcp_csum);
  o.l3_len = static_cast<std::uint8_t>(h->ip_len);
  ++rx_coalesced_cut_;
  return {};
}

Steer::Channel* Steer::channel_of(const Target& t) noexcept {
  std::unique_ptr<Channel>* ch = channels_.find(key_of(t.node, t.queue));
  if (ch == nullptr) {
    ++rx_no_channel_;
    return nullptr;
  }
  return ch->get();
}

Status Steer::to_channel(Channel& ch, Msg frame) {
  if (Status st = ch.send(std::move(frame)); !st) {
    ++rx_channel_full_;
    return st;
  }
  ++ch.rx_;
  return {};
}

Status Steer::forward(const Decision& d, Msg frame) {
  Channel* ch = channel_of(d.target);
  if (ch == nullptr) return Errc::not_found;
  if (Status st = fit_for_channel(*ch, frame); !st) return st;
  if (Status st = to_channel(*ch, std::move(frame)); !st) return st;
  ++rx_to_node_;
  return {};
}

bool Steer::quiet(const Decision& d, std::span<const std::byte> frame) noexcept {
  if (quiet_until_ == Time{}) return false;
  const bool answer = d.action == Action::reset || d.action == Action::port_unreachable;
  // A leased port (lease_hit) is not a listener's: only the node that leased
  // it opens connections from it, so its segments go to their owner.
  const bool listener = d.reason == Reason::listen_hit || d.reason == Reason::group_hit;
  if (!answer && !listener) return false;
  if (clock_.now() >= quiet_until_) {
    quiet_until_ = Time{};  // over: no more clock reads
    return false;
  }
  // A SYN opens a new connection: refusing it (RST) or handing it to a
  // listener loses nothing established, and a first start answers at once.
  // Any other TCP segment of no known flow may be a connection about to be
  // declared: its RST -- filterd's, or the listener's node's, which knows
  // no such connection (RFC 9293 3.10.7.2) -- would kill it.
  constexpr std::uint8_t kSyn = 0x02, kAck = 0x10;
  if (frame.size() < eth::Header::kSize + ipv4::Header::kMinSize) return answer;
  const ipv4::Header ip = ipv4::Header::read(frame.subspan(eth::Header::kSize).first<ipv4::Header::kMinSize>());
  const std::size_t tcp = eth::Header::kSize + ip.header_length();
  if (ip.protocol != 6 || ip.is_fragment() || frame.size() < tcp + 14) return answer;
  const auto flags = static_cast<std::uint8_t>(frame[tcp + 13]);
  return (flags & (kSyn | kAck)) != kSyn;
}

// ---- egress: a node's channel ---------------------------------------------------

// The headers of a TCP frame of several segments, copied with the IPv4
// total length cut to them (and the header checksum redone): what the
// filter looks at (it decides on addresses, ports and flags) without the
// payload being linearized. Empty: not an IPv4 TCP frame whose headers are
// all in its first fragment.
std::optional<Steer::TcpHeaders> Steer::tcp_headers(const Msg& frame) noexcept {
  constexpr std::size_t kEth = eth::Header::kSize;
  if (frame.fragments().empty()) return std::nullopt;
  const std::span<const std::byte> first = frame.fragments().front().bytes();
  if (first.size() < kEth + ipv4::Header::kMinSize + 20) return std::nullopt;
  const std::byte* ip = first.data() + kEth;
  // The IP header's length, when the frame is one whole TCP segment: over
  // IPv6, TCP right behind the fixed header (as xk's nodes send it).
  std::size_t hl = 0;
  const bool v6 = load_be16(first.data() + 12) == eth::kTypeIpv6;
  if (v6) {
    if (first.size() < kEth + ipv6::Header::kSize + 20) return std::nullopt;
    const ipv6::Header h = ipv6::Header::read(std::span<const std::byte, ipv6::Header::kSize>(ip, ipv6::Header::kSize));
    if (h.version != 6 || h.next_header != ipv6::kTcp || kEth + ipv6::Header::kSize + h.payload_length != frame.size()) {
      return std::nullopt;
    }
    hl = ipv6::Header::kSize;
  } else if (load_be16(first.data() + 12) == eth::kTypeIpv4) {
    const ipv4::Header h = ipv4::Header::read(std::span<const std::byte, ipv4::Header::kMinSize>(ip, ipv4::Header::kMinSize));
    if (h.version != 4 || h.ihl < 5 || h.protocol != ipv4::kProtoTcp || h.is_fragment() ||
        kEth + h.total_length != frame.size()) {
      return std::nullopt;
    }
    hl = h.header_length();
  } else {
    return std::nullopt;
  }
  if (first.size() < kEth + hl + 20) return std::nullopt;
  const std::size_t thl = (std::to_integer<std::size_t>(ip[hl + 12]) >> 4) * 4;
  const std::size_t headers = kEth + hl + thl;
  if (thl < 20 || first.size() < headers) return std::nullopt;
  TcpHeaders t;
  std::memcpy(t.bytes.data(), first.data(), headers);
  t.len = headers;
  t.ip_len = hl;
  t.v6 = v6;
  // The copy's IP length cut to the headers (IPv4's header checksum made
  // again; IPv6 has none).
  std::byte* cip = t.bytes.data() + kEth;
  if (v6) {
    store_be16(cip + 4, static_cast<std::uint16_t>(thl));
  } else {
    store_be16(cip + 2, static_cast<std::uint16_t>(hl + thl));
    store_be16(cip + 10, 0);
    const std::uint16_t ipck = csum::finish(csum::partial(cip, hl));
    std::memcpy(cip + 10, &ipck, 2);
  }
  // 0: sent without a checksum (a computed zero is sent as 0xffff).
  std::uint16_t ck = 0;
  std::memcpy(&ck, ip + hl + 16, 2);
  t.csum = ck != 0;
  return t;
}

// A large frame from a node's large-frame channel (docs/dpdk-driver.md,
// "Large frames"): one IPv4 TCP segment of whole segments that each fill
// the external MTU. Empty: not such a frame.
std::optional<Steer::TcpHeaders> Steer::large_frame(const Msg& frame) const noexcept {
  if (ext_frame_max_ == 0 || frame.size() <= ext_frame_max_) return std::nullopt;
  std::optional<TcpHeaders> t = tcp_headers(frame);
  const std::size_t mtu = ext_frame_max_ - eth::Header::kSize;
  if (!t || t->len - eth::Header::kSize >= mtu) return std::nullopt;
  t->seg_size = static_cast<std::uint16_t>(mtu - (t->len - eth::Header::kSize));
  return t;
}

Status Steer::egress(Channel& ch, Msg frame) {
  std::optional<TcpHeaders> large = large_frame(frame);
  Result<std::span<const std::byte>> bytes =
      large ? Result<std::span<const std::byte>>(large->span())
            : contiguous(frame);
  if (!bytes || bytes->size() < eth::Header::kSize) {
    ++channel_dropped_;
    return Errc::malformed;
  }
  const std::uint16_t type = load_be16(bytes->data() + 12);
  if (type == eth::kTypeArp) return answer_arp(ch, std::move(frame));
  if (type == relay::kEtherType && relay_sink_) {
    ++relay_from_nodes_;
    (void)frame.pop(eth::Header::kSize);
    relay_sink_(ch.node(), std::move(frame));
    return {};
  }
  const bool v6 = type == eth::kTypeIpv6 && config_.shared6;
  if (v6 && is_node_discovery(*bytes)) return node_discovery(ch, *bytes);
  if (type != eth::kTypeIpv4 && !v6) {
    ++channel_dropped_;
    return Errc::unsupported;
  }
  // The node is the unit the check guards: its stacks share one process,
  // so one queue cannot be kept from another's flows. A stack that sends for
  // a flow another queue of its node owns is counted (a bug, or a stack
  // answering for a connection it does not have), and the frame goes.
  const EgressVerdict v = filter_->egress_check(*bytes, ch.node(), ch.queue());
  if (!v.allowed) {
    ++tx_denied_;
    return Errc::bad_state;
  }
  if (v.other_queue) {
    ++tx_other_queue_;
    ++ch.other_queue_;
  }
  NextHopResolver* resolver = v6 ? resolver6_ : resolver_;
  if (resolver == nullptr) {
    ++tx_no_resolver_;
    return Errc::no_route;
  }
  // The destination, and where a TCP header starts (the egress check has
  // seen the headers whole).
  IpAddr dst;
  std::size_t ip_len = 0, tcp = 0;
  if (v6) {
    const ipv6::Header ip = ipv6::Header::read(bytes->subspan(eth::Header::kSize).first<ipv6::Header::kSize>());
    dst = ip.dst;
    ip_len = ipv6::Header::kSize;
    if (ip.next_header == ipv6::kTcp) tcp = eth::Header::kSize + ip_len;
  } else {
    const ipv4::Header ip = ipv4::Header::read(bytes->subspan(eth::Header::kSize).first<ipv4::Header::kMinSize>());
    dst = IpAddr(ip.dst);
    ip_len = ip.header_length();
    if (ip.protocol == ipv4::kProtoTcp && (ip.flags_offset & ipv4::Header::kOffsetMask) == 0) {
      tcp = eth::Header::kSize + ip_len;
    }
  }
  learn_passive_flow(ch, dst, *bytes, tcp);
  if (v6 ? dst == config_.shared6->addr : dst == IpAddr(config_.shared.addr)) {
    return hairpin(ch, *bytes, large, std::move(frame));
  }
  (void)frame.pop(eth::Header::kSize);
  if (large) {
    // The external port's driver cuts it into the segments it holds (their
    // size is the MTU's, so no size had to cross the channel), with a
    // checksum each unless the node sent it without one (csum off).
    Offload& o = frame.offload();
    o.flags = static_cast<std::uint8_t>(Offload::tx_tcp_seg | (large->csum ? Offload::tx_tcp_csum : 0));
    o.l3_len = static_cast<std::uint8_t>(ip_len);
    o.seg_size = large->seg_size;
    ++tx_large_from_nodes_;
  }
  // The next hop on the external link: the destination itself on our
  // subnet, the gateway beyond it.
  std::optional<IpAddr> next_hop = dst;
  if (v6) {
    next_hop = next_hop6(dst);
  } else if (!config_.shared.contains(dst.v4())) {
    next_hop = config_.gateway ? std::optional<IpAddr>(IpAddr(*config_.gateway)) : std::nullopt;
  }
  if (!next_hop) {
    ++tx_not_sent_;
    return Errc::no_route;
  }
  if (Status st = resolver->send_to(*next_hop, std::move(frame)); !st) {
    ++tx_not_sent_;
    return st;
  }
  ++tx_from_nodes_;
  ++ch.tx_;
  return {};
}

// A node's packet for the shared address (a connection between two nodes:
// docs/filterd.md, "Node to node"), which passed the egress check as the
// sender's own: it goes to the node that owns its destination, as a frame
// from outside would. One nobody owns goes back to its sender, whose own
// stack answers it as filterd's would -- RST for TCP (RFC 9293 3.10.7.1),
// port unreachable for UDP (RFC 1122 4.1.3.1) -- and keeps the answer,
// since the flow it is for is the sender's: no segment is made here, and a
// node's connect to a port nobody listens on is refused at once.
Status Steer::hairpin(Channel& from, std::span<const std::byte> headers, const std::optional<TcpHeaders>& large,
                      Msg frame) {
  const Decision d = filter_->classify_hairpin(headers);
  Channel* to = nullptr;
  if (d.action == Action::to_node) {
    to = channel_of(d.target);
    if (to == nullptr) return Errc::not_found;
    ++hairpin_;
  } else if (d.action == Action::reset || d.action == Action::port_unreachable) {
    to = &from;
    ++hairpin_answered_;
  } else {
    ++hairpin_dropped_;
    return {};
  }
  if (large && frame.size() > to->frame_max()) {
    // The receiving channel takes MTU-sized frames only: its driver cuts
    // the frame back into the segments it was made of.
    Offload& o = frame.offload();
    o.flags = static_cast<std::uint8_t>(Offload::tx_tcp_seg | (large->csum ? Offload::tx_tcp_csum : 0));
    o.l3_len = static_cast<std::uint8_t>(large->ip_len);
    o.seg_size = large->seg_size;
  }
  if (Status st = to_channel(*to, std::move(frame)); !st) return st;
  ++from.tx_;
  return {};
}

// A node's SYN-ACK (it accepted a connection on a port it listens on, alone
// or in a group): from now on the connection is an exact flow of that node.
// It then survives the listener closing before it (the rest of a close
// handshake still passes the egress check) and a group changing members
// (the rendezvous choice may move; the exact entry does not).
void Steer::learn_passive_flow(Channel& ch, const IpAddr& remote, std::span<const std::byte> frame, std::size_t tcp) {
  constexpr std::uint8_t kSyn = 0x02, kAck = 0x10;
  if (tcp == 0 || frame.size() < tcp + 14) return;
  const auto flags = static_cast<std::uint8_t>(frame[tcp + 13]);
  if ((flags & (kSyn | kAck)) != (kSyn | kAck)) return;
  const FlowKey key{Proto::tcp, remote, load_be16(frame.data() + tcp + 2), load_be16(frame.data() + tcp)};
  if (filter_->find_flow(key)) return;
  if (filter_->add_flow(key, Target{ch.node(), ch.queue()})) ++learned_flows_;
}

// A node asks who has an address: filterd does, for every address but the
// node's own (RFC 1027 proxy ARP), so the node sends everything through us.
Status Steer::answer_arp(Channel& ch, Msg frame) {
  Result<std::span<const std::byte>> b = frame.peek(eth::Header::kSize + arp::Packet::kSize);
  if (!b) {
    ++channel_dropped_;
    return Errc::malformed;
  }
  const arp::Packet req = arp::Packet::read(b->subspan(eth::Header::kSize).first<arp::Packet::kSize>());
  if (req.op != arp::kOpRequest || req.htype != arp::kHtypeEthernet || req.ptype != arp::kPtypeIpv4 ||
      req.tpa == config_.shared.addr) {
    ++channel_dropped_;
    return {};
  }
  arp::Packet reply = req;
  reply.op = arp::kOpReply;
  reply.sha = ch.our_mac();
  reply.spa = req.tpa;
  reply.tha = req.sha;
  reply.tpa = req.spa;
  Msg out = Msg::alloc(0, Msg::kDefaultHeadroom);
  Result<std::span<std::byte>> a = out.push(arp::Packet::kSize);
  if (!a) return a.error();
  reply.write(a->first<arp::Packet::kSize>());
  Result<std::span<std::byte>> e = out.push(eth::Header::kSize);
  if (!e) return e.error();
  eth::Header{ch.node_mac(), ch.our_mac(), eth::kTypeArp}.write(e->first<eth::Header::kSize>());
  ++proxy_arp_;
  return ch.send(std::move(out));
}

// ---- graph kind ------------------------------------------------------------------

void register_steer(Registry& registry) {
  registry.add(KindSpec("steer", "filterd's data path: steers the external port's frames to the nodes that own them")
                   .with_below(1, 1)
                   .with_option(OptionSpec::cidr("addr", "the shared address/prefix").mandatory())
                   .with_option(OptionSpec::ipv4("gw", "next hop off the subnet"))
                   .with_option(OptionSpec::mac("channel_mac", "filterd's MAC on the node channels"))
                   .with_option(OptionSpec::ip_cidrs("addr6", "the shared IPv6 address/prefix (one)"))
                   .with_option(OptionSpec::ip("gw6", "IPv6 default router (link-local or on addr6's prefix)"))
                   .with_factory([](const BuildArgs& a) -> std::unique_ptr<Protocol> {
                     if (a.loop == nullptr) throw std::invalid_argument("steer needs an event loop (its clock)");
                     SteerConfig c;
                     c.shared = a.options.get_cidr("addr");
                     if (a.options.has("gw")) c.gateway = a.options.get_ipv4("gw");
                     if (a.options.has("channel_mac")) c.channel_mac = a.options.get_mac("channel_mac");
                     if (a.options.has("addr6")) {
                       const std::vector<IpCidr>& v6 = a.options.get_ip_cidrs("addr6");
                       if (v6.size() != 1 || v6[0].addr.is_v4()) {
                         throw std::invalid_argument("steer: addr6 takes one IPv6 address/prefix");
                       }
                       c.shared6 = v6[0];
                     }
                     if (a.options.has("gw6")) c.gateway6 = a.options.get_ip("gw6");
                     return std::make_unique<Steer>(a.name, *a.below[0], a.loop->clock(), c);
                   }));
}

}  // namespace xk::filterd

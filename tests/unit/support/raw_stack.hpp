#pragma once
// A whole xk stack (pair -> eth -> arp -> ipv4 -> icmp, udp, tcp) on a
// ManualClock, and the raw other end of its wire: frames built byte by byte
// here (not with the stack's own wire code) are injected, and what the stack
// sends is followed flow by flow. Shared by the malformed-frame unit test
// (tests/unit/malformed_test.cpp) and the stack fuzzer (tests/fuzz/stack_fuzz.cpp);
// no GoogleTest in here, so the fuzzer can use it. Setup failures abort().

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "xk/clock.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/msg.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk::test::raw {


using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

inline constexpr std::uint32_t kStackIp = 0xC000020A;  // 192.0.2.10
inline constexpr std::uint32_t kPeerIp = 0xC0000214;   // 192.0.2.20 (in the stack's ARP table)
inline constexpr std::array<std::uint8_t, 6> kStackMac{0x02, 0, 0, 0, 0, 0x0a};
inline constexpr std::array<std::uint8_t, 6> kPeerMac{0x02, 0, 0, 0, 0, 0x14};

// Above the pair driver (whose line Stack adds: with or without checksum offload).
inline constexpr const char* kSpec =
    "eth  eth0 below=net0\n"
    "arp  arp0 below=eth0 gratuitous=off static=192.0.2.20@02:00:00:00:00:14\n"
    "ipv4 ip0  below=eth0,arp0 addr=192.0.2.10/24 gw=192.0.2.1\n"
    "icmp icmp0 below=ip0\n"
    "udp  udp0 below=ip0\n"
    // Small buffers keep inputs fast; a fixed secret keeps runs reproducible;
    // a SYN queue of 4 sends the fifth new client of port 80 (of eight) to
    // SYN cookies, so the fuzzer reaches the cookie code too.
    "tcp  tcp0 below=ip0 sndbuf=64k rcvbuf=64k rto_min_ms=10 syn_backlog=4 "
    "secret=00112233445566778899aabbccddeeff\n";

// ---- building frames (written here, not with the stack's own wire code) -------

inline void put16(Bytes& b, std::size_t at, std::uint16_t v) {
  b[at] = std::byte(v >> 8);
  b[at + 1] = std::byte(v & 0xff);
}
inline void put32(Bytes& b, std::size_t at, std::uint32_t v) {
  put16(b, at, static_cast<std::uint16_t>(v >> 16));
  put16(b, at + 2, static_cast<std::uint16_t>(v));
}
inline std::uint16_t get16(std::span<const std::byte> b, std::size_t at) {
  return static_cast<std::uint16_t>((std::to_integer<unsigned>(b[at]) << 8) | std::to_integer<unsigned>(b[at + 1]));
}
inline std::uint32_t get32(std::span<const std::byte> b, std::size_t at) {
  return (std::uint32_t{get16(b, at)} << 16) | get16(b, at + 2);
}

inline std::uint32_t sum16(std::span<const std::byte> b, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i < b.size(); i += 2) {
    std::uint32_t hi = std::to_integer<std::uint32_t>(b[i]) << 8;
    std::uint32_t lo = i + 1 < b.size() ? std::to_integer<std::uint32_t>(b[i + 1]) : 0;
    sum += hi | lo;
  }
  return sum;
}
inline std::uint16_t fold(std::uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum & 0xffff);
}

// An Ethernet frame from the peer to the stack around `payload`.
inline Bytes eth_frame(std::uint16_t type, std::span<const std::byte> payload) {
  Bytes f(14 + payload.size());
  for (int i = 0; i < 6; ++i) {
    f[i] = std::byte{kStackMac[i]};
    f[6 + i] = std::byte{kPeerMac[i]};
  }
  put16(f, 12, type);
  if (!payload.empty()) std::memcpy(f.data() + 14, payload.data(), payload.size());
  return f;
}

// Fixes an IPv4 packet as the flags ask: 1 header checksum, 2 total length,
// 4 the transport checksum (whole, unfragmented TCP, UDP or ICMP only).
inline void fix_ip(Bytes& p, std::uint8_t how) {
  if (p.size() < 20) return;
  std::size_t ihl = (std::to_integer<std::size_t>(p[0]) & 0x0f) * 4;
  if (ihl < 20 || ihl > p.size()) return;
  if ((how & 2) && p.size() <= 65535) put16(p, 2, static_cast<std::uint16_t>(p.size()));
  std::size_t total = std::min<std::size_t>(get16(p, 2), p.size());
  if ((how & 4) && total >= ihl && (get16(p, 6) & 0x3fff) == 0) {
    std::span<std::byte> seg(p.data() + ihl, total - ihl);
    std::uint8_t proto = std::to_integer<std::uint8_t>(p[9]);
    std::size_t at = proto == 6 ? 16 : proto == 17 ? 6 : proto == 1 ? 2 : SIZE_MAX;
    if (at != SIZE_MAX && seg.size() >= at + 2) {
      seg[at] = seg[at + 1] = std::byte{0};
      std::uint32_t sum = 0;
      if (proto != 1) {  // TCP and UDP cover the pseudo-header
        sum = sum16(std::span<const std::byte>(p.data() + 12, 8));
        sum += proto + static_cast<std::uint32_t>(seg.size());
      }
      std::uint16_t c = fold(sum16(seg, sum));
      if (proto == 17 && c == 0) c = 0xffff;
      seg[at] = std::byte(c >> 8);
      seg[at + 1] = std::byte(c & 0xff);
    }
  }
  if (how & 1) {
    p[10] = p[11] = std::byte{0};
    std::uint16_t c = fold(sum16(std::span<const std::byte>(p.data(), ihl)));
    put16(p, 10, c);
  }
}

// A 20-byte IPv4 header in front of `body`, from the peer to the stack.
inline Bytes ip_packet(std::uint8_t proto, std::span<const std::byte> body, std::uint16_t id = 1,
                std::uint16_t flags_offset = 0x4000) {
  Bytes p(20 + body.size());
  p[0] = std::byte{0x45};
  put16(p, 2, static_cast<std::uint16_t>(std::min<std::size_t>(p.size(), 65535)));
  put16(p, 4, id);
  put16(p, 6, flags_offset);
  p[8] = std::byte{64};
  p[9] = std::byte{proto};
  put32(p, 12, kPeerIp);
  put32(p, 16, kStackIp);
  if (!body.empty()) std::memcpy(p.data() + 20, body.data(), body.size());
  return p;
}

// ---- the harness's end of the wire ------------------------------------------

// One flow the records can aim at. The peer's side of the sequence space is
// the harness's own (peer_nxt); the stack's is learnt from what it sends.
struct Flow {
  std::uint16_t stack_port = 0;
  std::uint16_t peer_port = 0;
  std::uint32_t peer_nxt = 0;
  std::uint32_t stack_nxt = 0;
  Bytes last_sent;  // the last TCP segment the stack sent on it (quoted by ICMP records)
};

class Peer final : public xk::Protocol {
 public:
  Peer(xk::drivers::PairLink& link) : Protocol("peer", "fuzz-peer"), driver_("peer0", link, config()) {
    xk::Participants none;
    if (!driver_.open_enable(*this, none).ok()) std::abort();
    auto s = driver_.open(*this, none);
    if (!s.ok()) std::abort();
    tx_ = *s;
  }
  ~Peer() override {
    tx_ = {};
    xk::Participants none;
    (void)driver_.open_disable(*this, none);
  }

  void send(std::span<const std::byte> frame) {
    if (tap) tap(frame, /*to_stack=*/true);
    (void)tx_->push(xk::Msg::copy_of(frame));
  }
  std::size_t poll() { return driver_.poll(64); }

  xk::Status demux(xk::Session&, xk::Msg msg) override {
    Bytes f(msg.size());
    if (!msg.copy_out(0, f).ok()) std::abort();
    if (tap) tap(f, /*to_stack=*/false);
    learn(f);
    return {};
  }

  // 0: the connection the listener accepted; 1: the one the stack opened;
  // 2..9: eight new clients of the listener (port 80); 10: a closed port.
  std::array<Flow, 11> flows;
  // Sees every frame on the wire, both ways (the fuzzer's pcap dump).
  std::function<void(std::span<const std::byte>, bool to_stack)> tap;

 private:
  static xk::drivers::PairDriver::Config config() {
    xk::drivers::PairDriver::Config c;
    c.mac = xk::MacAddr{kPeerMac};
    c.mtu = 9014;  // the peer may send more than the stack's MTU
    c.queue_limit = 4096;
    return c;
  }

  // Follows the stack's sequence numbers: seq + length (+ SYN, FIN) of every
  // TCP segment it sends on a flow, the furthest wins.
  void learn(std::span<const std::byte> f) {
    if (f.size() < 14 + 20 + 20 || get16(f, 12) != 0x0800) return;
    std::span<const std::byte> ip = f.subspan(14);
    std::size_t ihl = (std::to_integer<std::size_t>(ip[0]) & 0x0f) * 4;
    std::size_t total = std::min<std::size_t>(get16(ip, 2), ip.size());
    if (std::to_integer<int>(ip[9]) != 6 || ihl < 20 || total < ihl + 20) return;
    std::span<const std::byte> tcp = ip.subspan(ihl, total - ihl);
    std::size_t off = (std::to_integer<std::size_t>(tcp[12]) >> 4) * 4;
    if (off < 20 || off > tcp.size()) return;
    for (Flow& fl : flows) {
      if (get16(tcp, 0) != fl.stack_port || get16(tcp, 2) != fl.peer_port) continue;
      std::uint8_t flags = std::to_integer<std::uint8_t>(tcp[13]);
      std::uint32_t end = get32(tcp, 4) + static_cast<std::uint32_t>(tcp.size() - off) + ((flags & 0x02) ? 1 : 0) +
                          ((flags & 0x01) ? 1 : 0);
      if ((flags & 0x02) || static_cast<std::int32_t>(end - fl.stack_nxt) > 0) fl.stack_nxt = end;
      fl.last_sent.assign(ip.begin(), ip.begin() + static_cast<std::ptrdiff_t>(total));
    }
  }

  xk::drivers::PairDriver driver_;
  xk::SessionRef tx_;
};

struct Stack {
  xk::ManualClock clock{xk::Time(std::chrono::seconds(1000))};
  xk::EventLoop loop{clock};
  xk::drivers::PairHub hub;
  xk::Registry registry;
  std::unique_ptr<xk::Graph> graph;
  std::unique_ptr<Peer> peer;
  xk::tcp::TcpListener listener;
  std::array<xk::tcp::TcpSocket, 4> socks;  // by flow
  xk::udp::UdpSocket udp;

  // csum_offload: the stack's end of the pair acts as a port with checksum
  // offload (fills what the stack leaves on send, flags what it verified on
  // receive), so the layers' offload paths are what the frames go through.
  explicit Stack(bool csum_offload = false) {
    xk::drivers::register_pair(registry, hub);
    xk::eth::register_eth(registry);
    xk::arp::register_arp(registry);
    xk::ipv4::register_ipv4(registry);
    xk::icmp::register_icmp(registry);
    xk::udp::register_udp(registry);
    xk::tcp::register_tcp(registry);
    const std::string spec = std::string("pair net0 link=wire mac=02:00:00:00:00:0a") +
                             (csum_offload ? " csum_offload=on\n" : "\n") + kSpec;
    graph = std::make_unique<xk::Graph>(xk::Graph::build(spec, registry, &loop, "fuzz"));
    peer = std::make_unique<Peer>(hub.link("wire"));
  }
  ~Stack() {
    // Sockets first (they hold sessions of the graph), then the graph, then
    // the peer (its driver holds the other end of the link).
    udp = {};
    for (auto& s : socks) s = {};
    listener = {};
    graph.reset();
    peer.reset();
  }
  xk::tcp::TcpProtocol& tcp() { return *graph->find_as<xk::tcp::TcpProtocol>("tcp0"); }

  // Runs the stack and the peer until both are idle (bounded: a livelock
  // between them is a finding too, but not an endless input).
  void settle() {
    for (int i = 0; i < 256; ++i) {
      std::size_t work = loop.run_once() + peer->poll();
      if (work == 0) return;
    }
  }
  void advance(xk::Duration d) {
    clock.advance(d);
    settle();
  }
  void next_timer() {
    std::optional<xk::Time> next = loop.timers().next_deadline();
    if (next && *next > clock.now()) clock.set(*next);
    settle();
  }
  void inject_ip(std::span<const std::byte> ip) {
    peer->send(eth_frame(0x0800, ip));
    settle();
  }

  // A TCP segment on flow `f` (seq/ack as given, absolute).
  Bytes segment(const Flow& f, std::uint32_t seq, std::uint32_t ack, std::uint8_t flags, std::uint16_t window,
                std::span<const std::byte> options, std::size_t payload_len, std::optional<std::uint8_t> data_offset) {
    std::size_t opt_len = (options.size() + 3) / 4 * 4;
    Bytes seg(20 + opt_len + payload_len);
    put16(seg, 0, f.peer_port);
    put16(seg, 2, f.stack_port);
    put32(seg, 4, seq);
    put32(seg, 8, ack);
    std::uint8_t off = data_offset.value_or(static_cast<std::uint8_t>((20 + opt_len) / 4));
    seg[12] = std::byte(static_cast<std::uint8_t>(off << 4));
    seg[13] = std::byte{flags};
    put16(seg, 14, window);
    if (!options.empty()) std::memcpy(seg.data() + 20, options.data(), options.size());
    for (std::size_t i = 0; i < payload_len; ++i)
      seg[20 + opt_len + i] = std::byte(static_cast<unsigned char>((seq + i) * 131 + 7));
    return seg;
  }
  void send_tcp(Flow& f, std::uint32_t seq, std::uint32_t ack, std::uint8_t flags, std::uint16_t window,
                std::span<const std::byte> options, std::size_t payload_len, bool good_csum = true,
                std::optional<std::uint8_t> data_offset = std::nullopt) {
    Bytes p = ip_packet(6, segment(f, seq, ack, flags, window, options, payload_len, data_offset));
    fix_ip(p, good_csum ? 7 : 3);
    if (!good_csum) p[20 + 16] ^= std::byte{0x5a};
    inject_ip(p);
  }

  // The handshakes every input starts from.
  void open_flows() {
    static constexpr std::uint8_t kSynOpts[] = {2, 4, 0x05, 0xb4,  // MSS 1460
                                                4, 2,              // SACK permitted
                                                8, 10, 0, 0, 0, 1, 0, 0, 0, 0,  // timestamps
                                                1, 3, 3, 7};       // NOP, window scale 7
    std::span<const std::byte> syn_opts(reinterpret_cast<const std::byte*>(kSynOpts), sizeof kSynOpts);
    auto& fl = peer->flows;
    fl[0] = Flow{80, 40000, 0x10000000, 0, {}};
    fl[1] = Flow{0, 5000, 0x20000000, 0, {}};
    for (std::uint16_t k = 0; k < 8; ++k)
      fl[2 + k] = Flow{80, static_cast<std::uint16_t>(40001 + k), 0x30000000u + (std::uint32_t{k} << 24), 0, {}};
    fl[10] = Flow{81, 40200, 0x40000000, 0, {}};

    auto l = tcp().listen(xk::Ipv4Addr{}, xk::Port{80}, 4);
    if (!l) std::abort();
    listener = std::move(*l);
    auto u = udp0().socket();
    if (!u.bind(xk::Ipv4Addr{}, xk::Port{7}).ok()) std::abort();
    udp = std::move(u);

    // Flow 0: the peer connects to the listener.
    send_tcp(fl[0], fl[0].peer_nxt, 0, 0x02, 65535, syn_opts, 0);
    fl[0].peer_nxt += 1;
    send_tcp(fl[0], fl[0].peer_nxt, fl[0].stack_nxt, 0x10, 1024, ts_opt(), 0);
    auto a = listener.accept();
    if (!a) std::abort();  // the setup itself must work, or the fuzzing means little
    socks[0] = std::move(*a);

    // Flow 1: the stack connects to the peer.
    xk::tcp::TcpSocket c = tcp().socket();
    if (!c.connect(xk::Ipv4Addr{kPeerIp}, xk::Port{5000}).ok()) std::abort();
    fl[1].stack_port = c.tuple().local.port;
    socks[1] = std::move(c);
    settle();
    std::uint32_t iss = fl[1].stack_nxt;  // one past our SYN
    send_tcp(fl[1], fl[1].peer_nxt, iss, 0x12, 65535, syn_opts, 0);
    fl[1].peer_nxt += 1;
    if (socks[0].state() != xk::tcp::State::established || socks[1].state() != xk::tcp::State::established)
      std::abort();
  }
  // A timestamps option (NOP NOP TS) with the peer's clock in ms.
  std::span<const std::byte> ts_opt() {
    std::uint32_t now = static_cast<std::uint32_t>(clock.now().time_since_epoch() / 1ms);
    ts_buf_ = {std::byte{1}, std::byte{1}, std::byte{8}, std::byte{10}, std::byte(now >> 24), std::byte(now >> 16),
               std::byte(now >> 8), std::byte(now), std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0}};
    return ts_buf_;
  }
  xk::udp::UdpProtocol& udp0() { return *graph->find_as<xk::udp::UdpProtocol>("udp0"); }

  std::array<std::byte, 12> ts_buf_{};
};

}  // namespace xk::test::raw

// libFuzzer harness: raw frames into a whole stack (pair -> eth -> arp ->
// ipv4 -> icmp, udp, tcp) on virtual time. Each input is a fresh stack with
// a TCP listener on port 80, one connection it accepted (the peer's port
// 40000), one it opened (to the peer's port 5000) and a UDP socket on port 7;
// then a sequence of records, each read from the input:
//
//   advance      move the ManualClock by 0..65535 ms (timers fire)
//   next_timer   jump to the next timer's deadline
//   raw          an Ethernet frame, as is
//   ip           an IPv4 packet behind our Ethernet header; optionally with
//                its header checksum, total length and TCP/UDP/ICMP checksum
//                made right, so the bytes behind them get looked at
//   tcp          a segment on one of four flows (the accepted and the opened
//                connection, a new client of port 80, a closed port) with
//                seq/ack relative to what each side has sent so far, any
//                flags, window and options, a payload, right or wrong checksum
//   icmp         an ICMP error quoting a segment of one of those flows
//   fragments    a UDP or TCP datagram cut into fragments at offsets the
//                input picks (overlaps, gaps, duplicates and all)
//   app          write, read, shutdown, close, abort, accept, connect, UDP
//                read and send, on the sockets above
//
// Whatever the stack sends goes to the harness's end of the pair, which
// follows each flow's sequence numbers from it. After the last record the
// stack is torn down: every Msg buffer and Session must be gone (the unit
// tests' leak check, per input), and ASan/UBSan watch the rest.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

constexpr std::uint32_t kStackIp = 0xC000020A;  // 192.0.2.10
constexpr std::uint32_t kPeerIp = 0xC0000214;   // 192.0.2.20 (in the stack's ARP table)
constexpr std::array<std::uint8_t, 6> kStackMac{0x02, 0, 0, 0, 0, 0x0a};
constexpr std::array<std::uint8_t, 6> kPeerMac{0x02, 0, 0, 0, 0, 0x14};

const char* const kSpec =
    "pair net0 link=wire mac=02:00:00:00:00:0a\n"
    "eth  eth0 below=net0\n"
    "arp  arp0 below=eth0 gratuitous=off static=192.0.2.20@02:00:00:00:00:14\n"
    "ipv4 ip0  below=eth0,arp0 addr=192.0.2.10/24 gw=192.0.2.1\n"
    "icmp icmp0 below=ip0\n"
    "udp  udp0 below=ip0\n"
    // Small buffers keep inputs fast; a fixed secret keeps runs reproducible.
    "tcp  tcp0 below=ip0 sndbuf=64k rcvbuf=64k rto_min_ms=10 secret=00112233445566778899aabbccddeeff\n";

// ---- reading the input --------------------------------------------------------

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const noexcept { return pos_ >= size_; }
  std::uint8_t u8() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() noexcept {
    std::uint16_t lo = u8();
    return static_cast<std::uint16_t>(lo | (u8() << 8));
  }
  std::int16_t i16() noexcept { return static_cast<std::int16_t>(u16()); }
  Bytes bytes(std::size_t n) {
    n = std::min(n, size_ - std::min(pos_, size_));
    Bytes b(n);
    if (n != 0) std::memcpy(b.data(), data_ + pos_, n);
    pos_ += n;
    return b;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// ---- building frames (written here, not with the stack's own wire code) -------

void put16(Bytes& b, std::size_t at, std::uint16_t v) {
  b[at] = std::byte(v >> 8);
  b[at + 1] = std::byte(v & 0xff);
}
void put32(Bytes& b, std::size_t at, std::uint32_t v) {
  put16(b, at, static_cast<std::uint16_t>(v >> 16));
  put16(b, at + 2, static_cast<std::uint16_t>(v));
}
std::uint16_t get16(std::span<const std::byte> b, std::size_t at) {
  return static_cast<std::uint16_t>((std::to_integer<unsigned>(b[at]) << 8) | std::to_integer<unsigned>(b[at + 1]));
}
std::uint32_t get32(std::span<const std::byte> b, std::size_t at) {
  return (std::uint32_t{get16(b, at)} << 16) | get16(b, at + 2);
}

std::uint32_t sum16(std::span<const std::byte> b, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i < b.size(); i += 2) {
    std::uint32_t hi = std::to_integer<std::uint32_t>(b[i]) << 8;
    std::uint32_t lo = i + 1 < b.size() ? std::to_integer<std::uint32_t>(b[i + 1]) : 0;
    sum += hi | lo;
  }
  return sum;
}
std::uint16_t fold(std::uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum & 0xffff);
}

// An Ethernet frame from the peer to the stack around `payload`.
Bytes eth_frame(std::uint16_t type, std::span<const std::byte> payload) {
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
void fix_ip(Bytes& p, std::uint8_t how) {
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
Bytes ip_packet(std::uint8_t proto, std::span<const std::byte> body, std::uint16_t id = 1,
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

  void send(std::span<const std::byte> frame) { (void)tx_->push(xk::Msg::copy_of(frame)); }
  std::size_t poll() { return driver_.poll(64); }

  xk::Status demux(xk::Session&, xk::Msg msg) override {
    Bytes f(msg.size());
    if (!msg.copy_out(0, f).ok()) std::abort();
    learn(f);
    return {};
  }

  std::array<Flow, 4> flows;

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

  Stack() {
    xk::drivers::register_pair(registry, hub);
    xk::eth::register_eth(registry);
    xk::arp::register_arp(registry);
    xk::ipv4::register_ipv4(registry);
    xk::icmp::register_icmp(registry);
    xk::udp::register_udp(registry);
    xk::tcp::register_tcp(registry);
    graph = std::make_unique<xk::Graph>(xk::Graph::build(kSpec, registry, &loop, "fuzz"));
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
    fl[2] = Flow{80, 40001, 0x30000000, 0, {}};
    fl[3] = Flow{81, 40002, 0x40000000, 0, {}};

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
    fl[1].stack_port = c.tuple().local_port;
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

// ---- the records ----------------------------------------------------------------

void record_tcp(Stack& s, Input& in) {
  Flow& f = s.peer->flows[in.u8() % 4];
  std::uint8_t flags = in.u8();
  std::int16_t seq_off = in.i16();
  std::int16_t ack_off = in.i16();
  std::uint16_t window = in.u16();
  std::uint8_t opt_len = in.u8() % 41;
  Bytes opts = in.bytes(opt_len);
  std::size_t payload = in.u16() % 3000;
  std::uint8_t misc = in.u8();
  if (misc & 4) {  // the usual timestamps in front of what the input gave
    std::span<const std::byte> ts = s.ts_opt();
    Bytes both(ts.begin(), ts.end());
    both.insert(both.end(), opts.begin(), opts.end());
    if (both.size() <= 40) opts = std::move(both);
  }
  std::optional<std::uint8_t> data_offset;
  if (misc & 2) data_offset = static_cast<std::uint8_t>(misc >> 4);  // any value, lying or not
  std::uint32_t seq = f.peer_nxt + static_cast<std::uint32_t>(static_cast<std::int32_t>(seq_off));
  std::uint32_t ack = f.stack_nxt + static_cast<std::uint32_t>(static_cast<std::int32_t>(ack_off));
  s.send_tcp(f, seq, ack, flags, window, opts, payload, (misc & 1) == 0, data_offset);
  if (seq_off == 0 && (misc & 1) == 0)
    f.peer_nxt += static_cast<std::uint32_t>(payload) + ((flags & 0x02) ? 1 : 0) + ((flags & 0x01) ? 1 : 0);
}

void record_icmp(Stack& s, Input& in) {
  Flow& f = s.peer->flows[in.u8() % 4];
  std::uint8_t type = in.u8();
  std::uint8_t code = in.u8();
  std::uint16_t aux = in.u16();  // next-hop MTU for frag-needed
  std::uint8_t quote = in.u8();  // how much of the segment to quote
  std::int16_t seq_off = in.i16();
  Bytes q = f.last_sent;
  if (q.empty()) {  // nothing sent on it yet: quote what it would look like
    q = ip_packet(6, s.segment(f, f.stack_nxt, f.peer_nxt, 0x10, 1000, {}, 0, std::nullopt));
    std::swap(q[12], q[16]);  // a packet from the stack: swap the addresses and ports
    std::swap(q[13], q[17]);
    std::swap(q[14], q[18]);
    std::swap(q[15], q[19]);
    std::swap(q[20], q[22]);
    std::swap(q[21], q[23]);
  }
  if (q.size() >= 28) {
    std::uint32_t seq = get32(q, 24) + static_cast<std::uint32_t>(static_cast<std::int32_t>(seq_off));
    put32(q, 24, seq);
  }
  q.resize(std::min<std::size_t>(q.size(), quote));
  Bytes body(8 + q.size());
  body[0] = std::byte{type};
  body[1] = std::byte{code};
  put16(body, 6, aux);
  if (!q.empty()) std::memcpy(body.data() + 8, q.data(), q.size());
  Bytes p = ip_packet(1, body);
  fix_ip(p, 7);
  s.inject_ip(p);
}

void record_fragments(Stack& s, Input& in) {
  // A whole datagram first: UDP to port 7, or a TCP segment on flow 0.
  bool tcp = in.u8() & 1;
  std::size_t len = in.u16() % 4000;
  std::uint16_t id = in.u16();
  Bytes body;
  if (tcp) {
    Flow& f = s.peer->flows[0];
    body = s.segment(f, f.peer_nxt, f.stack_nxt, 0x18, 1024, {}, len, std::nullopt);
  } else {
    body.assign(8 + len, std::byte{0x61});
    put16(body, 0, 40100);
    put16(body, 2, 7);
    put16(body, 4, static_cast<std::uint16_t>(body.size()));
  }
  Bytes whole = ip_packet(tcp ? 6 : 17, body, id, 0);
  fix_ip(whole, 7);
  std::span<const std::byte> payload(whole.data() + 20, whole.size() - 20);
  // Then the pieces: (offset in 8-byte units, length, more-fragments), as
  // the input says; nothing stops them from overlapping or leaving holes.
  std::size_t n = 1 + in.u8() % 8;
  for (std::size_t i = 0; i < n && !in.empty(); ++i) {
    std::size_t off = (in.u16() % 600) * 8;
    std::size_t flen = in.u16() % 1600;
    bool mf = in.u8() & 1;
    std::size_t from = std::min(off, payload.size());
    std::size_t to = std::min(off + flen, payload.size());
    Bytes p = ip_packet(tcp ? 6 : 17, payload.subspan(from, to - from), id,
                        static_cast<std::uint16_t>((mf ? 0x2000 : 0) | ((off / 8) & 0x1fff)));
    fix_ip(p, 1);
    s.inject_ip(p);
  }
}

void record_app(Stack& s, Input& in) {
  std::size_t which = in.u8() % 4;
  xk::tcp::TcpSocket& sock = s.socks[which];
  switch (in.u8() % 10) {
    case 0: {
      Bytes data(in.u16() % 20000, std::byte{0x5a});
      (void)sock.write(data);
      break;
    }
    case 1: {
      Bytes buf(in.u16() % 20000 + 1);
      (void)sock.read(buf);
      break;
    }
    case 2:
      (void)sock.shutdown_write();
      break;
    case 3:
      (void)sock.close();
      break;
    case 4:
      sock.abort();
      break;
    case 5: {  // a queued connection: keep it in slot 2 (flow 2's port)
      auto a = s.listener.accept();
      if (a) s.socks[2] = std::move(*a);
      break;
    }
    case 6:
      (void)s.udp.recvfrom();
      break;
    case 7: {
      Bytes data(in.u16() % 9000, std::byte{0x33});
      (void)s.udp.sendto(xk::Msg::copy_of(data), xk::Ipv4Addr{kPeerIp}, xk::Port{in.u16()});
      break;
    }
    case 8:
      sock.set_nodelay(in.u8() & 1);
      break;
    case 9:
      (void)s.listener.close();
      break;
  }
  s.settle();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 16384) return -1;
  const std::int64_t bufs = xk::Buf::live();
  const std::int64_t sessions = xk::Session::live();
  {
    Stack s;
    s.open_flows();
    Input in(data, size);
    for (int records = 0; !in.empty() && records < 256; ++records) {
      switch (in.u8() % 9) {
        case 0:
          s.advance(std::chrono::milliseconds(in.u16()));
          break;
        case 1:
          s.next_timer();
          break;
        case 2:
          s.peer->send(in.bytes(in.u16() % 2048));
          s.settle();
          break;
        case 3: {
          std::uint8_t how = in.u8();
          Bytes p = in.bytes(in.u16() % 2048);
          fix_ip(p, how);
          s.inject_ip(p);
          break;
        }
        case 4:
          record_tcp(s, in);
          break;
        case 5:
          record_icmp(s, in);
          break;
        case 6:
          record_fragments(s, in);
          break;
        case 7:
        case 8:
          record_app(s, in);
          break;
      }
    }
  }
  // The unit tests' leak check, per input: what the stack allocated is gone.
  if (xk::Buf::live() != bufs || xk::Session::live() != sessions) std::abort();
  return 0;
}

#pragma once
// A scripted-packet harness for one TCP (in the spirit of packetdrill, as C++
// helpers): one TcpProtocol "tcp0" over a fake IPv4 layer that captures every
// segment TCP sends and lets the test inject segments as if a peer sent them,
// with time on a ManualClock that only moves when the script says so.
//
//   start();                                   // TcpProtocol with a TcpConfig
//   listen();
//   irs = SeqNum(0x10000000);                  // the peer's ISN
//   inject(syn().seq(0).mss(1000));
//   expect(syn_ack().ack(1).mss(1460));        // learns our ISS
//   inject(ack().seq(1).ack(1));
//   sock = std::move(*listener.accept());
//   inject(ack().seq(1).ack(1).len(100));
//   expect_nothing();
//   advance(40ms);                             // fires the timers due on the way
//   expect(ack().seq(1).ack(101));             // the delayed ACK
//   expect_read(100);
//
// passive_open() and active_open() do the handshake for a given Offer.
// inject() requires tcp.demux to take the segment; try_inject() returns what
// it said (malformed segments). TcpProtocol::stats() has the counters.
//
// Sequence numbers are relative: what the peer sends counts from its ISN
// (irs, chosen by the test), what we send from our ISS (learnt from our SYN or
// SYN-ACK). So in inject() .seq() is relative to irs and .ack() to iss; in
// expect() .seq() is relative to iss and .ack() to irs. SACK blocks follow
// the acknowledgment's space. abs_seq()/abs_ack() take raw numbers.
//
// expect() checks the flags, the IP addresses, the ports and the checksum
// always; seq, ack and window when given; the MSS, window scale and
// SACK-permitted options exactly (absent unless given); timestamps exactly
// when given, else present exactly when the connection uses them (never
// required on a RST); the SACK blocks exactly (none unless given); the payload
// length exactly, and its bytes against the stream pattern write() used.
//
// Payload bytes are a pattern of the stream offset (sequence number - ISN -
// 1), so retransmissions carry the same bytes and reads can be checked.
//
// ICMP errors reach TCP as ipv4 hands them up, through control(DeliverError):
//   deliver_icmp(icmp(3, 4, 1461, 1280));      // frag-needed quoting our seq 1461
// Checksums: .no_csum() injects 0 in the field, and makes expect() require 0.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "fake_ip.hpp"
#include "tcb.hpp"
#include "xk/byteorder.hpp"
#include "xk/clock.hpp"
#include "xk/event_loop.hpp"
#include "xk/msg.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/tcp_wire.hpp"

namespace xk::tcp::script {

using namespace std::chrono_literals;

inline constexpr Ipv4Addr kLocal{0xC0000201};  // 192.0.2.1: the stack under test
inline constexpr Ipv4Addr kPeer{0xC0000202};   // 192.0.2.2: the scripted peer
inline constexpr std::size_t kIpMtu = 1480;    // what ipv4 says GetMtu is (1500 - 20)

// A byte of a stream at `offset` (stream 0: what the peer sends, 1: ours).
inline std::byte pattern_byte(std::uint64_t offset, unsigned stream) {
  return std::byte(static_cast<unsigned char>((offset * 131 + (offset >> 8) * 7 + stream * 101 + 29) & 0xff));
}

// The Internet checksum over the IPv4 pseudo-header and a segment, written
// here independently of xk::csum.
inline std::uint16_t reference_checksum(Ipv4Addr src, Ipv4Addr dst, std::span<const std::byte> seg) {
  std::uint64_t sum = 0;
  sum += (src.value >> 16) + (src.value & 0xffff) + (dst.value >> 16) + (dst.value & 0xffff);
  sum += kIpProtocol;
  sum += seg.size();
  for (std::size_t i = 0; i < seg.size(); i += 2) {
    std::uint32_t hi = std::to_integer<std::uint32_t>(seg[i]) << 8;
    std::uint32_t lo = i + 1 < seg.size() ? std::to_integer<std::uint32_t>(seg[i + 1]) : 0;
    sum += hi | lo;
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum & 0xffff);  // host order, as Header::checksum holds it
}

// ---- the fake IPv4 layer ----------------------------------------------------

// Stands where ipv4 stands (tests/unit/support/fake_ip.hpp); what TCP pushes
// is kept in ip.sent.
using test::FakeIp;
using Sent = FakeIp::Sent;

// ---- a segment, to inject or to expect --------------------------------------

using Block = std::pair<std::uint32_t, std::uint32_t>;  // [left, right), relative

class Seg {
 public:
  explicit Seg(std::uint8_t flags) : flags_(flags) {}

  Seg& seq(std::uint32_t v) { seq_ = v; return *this; }
  Seg& ack(std::uint32_t v) { ack_ = v; return *this; }
  Seg& abs_seq(std::uint32_t v) { seq_ = v; seq_abs_ = true; return *this; }
  Seg& abs_ack(std::uint32_t v) { ack_ = v; ack_abs_ = true; return *this; }
  Seg& win(std::uint16_t v) { win_ = v; return *this; }
  Seg& mss(std::uint16_t v) { mss_ = v; return *this; }
  Seg& ws(std::uint8_t v) { ws_ = v; return *this; }
  Seg& sackok() { sackok_ = true; return *this; }
  Seg& ts(std::uint32_t val, std::uint32_t ecr) { ts_ = Timestamps{val, ecr}; return *this; }
  Seg& ecr(std::uint32_t v) { ecr_ = v; return *this; }
  Seg& no_ts() { no_ts_ = true; return *this; }
  Seg& sack(std::vector<Block> b) { sack_ = std::move(b); return *this; }
  Seg& len(std::size_t n) { len_ = n; return *this; }
  // The payload's bytes as given, instead of the stream pattern.
  Seg& data(std::vector<std::byte> d) { len_ = d.size(); data_ = std::move(d); has_data_ = true; return *this; }
  Seg& from(std::uint16_t peer_port) { sport_ = peer_port; return *this; }
  Seg& to(std::uint16_t port) { dport_ = port; return *this; }
  // Malformed segments (inject only): raw option bytes, a data offset, a
  // wrong checksum, or the segment cut to `n` bytes.
  Seg& raw_options(std::vector<std::byte> o) { raw_opts_ = std::move(o); has_raw_opts_ = true; return *this; }
  Seg& doff(std::uint8_t words) { doff_ = words; return *this; }
  Seg& bad_csum() { bad_csum_ = true; return *this; }
  // Inject: 0 in the checksum field (a sender computing none). Expect: the
  // field must be 0.
  Seg& no_csum() { no_csum_ = true; return *this; }
  Seg& cut(std::size_t n) { cut_ = n; return *this; }
  // Inject: the IP header was marked Congestion Experienced (RFC 3168).
  Seg& ce() { ce_ = true; return *this; }
  // URG with this urgent pointer (inject: written; expect: must match).
  Seg& urg(std::uint16_t ptr) { flags_ |= kUrg; urgent_ = ptr; return *this; }

 private:
  friend class Script;
  std::uint8_t flags_;
  std::optional<std::uint32_t> seq_, ack_;
  bool seq_abs_ = false, ack_abs_ = false;
  std::optional<std::uint16_t> win_;
  std::optional<std::uint16_t> mss_;
  std::optional<std::uint8_t> ws_;
  bool sackok_ = false;
  std::optional<Timestamps> ts_;
  std::optional<std::uint32_t> ecr_;
  bool no_ts_ = false;
  std::vector<Block> sack_;
  std::size_t len_ = 0;
  std::vector<std::byte> data_;
  bool has_data_ = false;
  std::optional<std::uint16_t> sport_, dport_;
  std::vector<std::byte> raw_opts_;
  bool has_raw_opts_ = false;
  std::optional<std::uint8_t> doff_;
  bool bad_csum_ = false;
  bool no_csum_ = false;
  std::optional<std::size_t> cut_;
  bool ce_ = false;
  std::uint16_t urgent_ = 0;
};

inline Seg syn() { return Seg(kSyn); }
inline Seg syn_ack() { return Seg(kSyn | kAck); }
inline Seg ack() { return Seg(kAck); }
inline Seg psh_ack() { return Seg(kPsh | kAck); }
inline Seg fin_ack() { return Seg(kFin | kAck); }
inline Seg rst() { return Seg(kRst); }
inline Seg rst_ack() { return Seg(kRst | kAck); }
inline Seg seg(std::uint8_t flags) { return Seg(flags); }

// What the peer's SYN (or SYN-ACK) offers: MSS 1000 and nothing else unless
// told, e.g. Offer().ws(7).sack().ts().
struct Offer {
  std::optional<std::uint16_t> mss_ = 1000;
  std::optional<std::uint8_t> ws_;
  bool sack_ = false;
  bool ts_ = false;
  bool ecn_ = false;  // an ECN-setup SYN (ECE and CWR, RFC 3168 6.1.1)
  Duration rtt_{0};  // between our SYN-ACK and the peer's ACK (the first RTT sample)

  Offer& mss(std::uint16_t v) { mss_ = v; return *this; }
  Offer& no_mss() { mss_.reset(); return *this; }
  Offer& ws(std::uint8_t v) { ws_ = v; return *this; }
  Offer& sack() { sack_ = true; return *this; }
  Offer& ts() { ts_ = true; return *this; }
  Offer& ecn() { ecn_ = true; return *this; }
  Offer& rtt(Duration d) { rtt_ = d; return *this; }
};

// A segment the stack sent, parsed.
struct Got {
  Header h;
  Options opts;
  std::vector<std::byte> raw_options;  // as they were on the wire, in their order
  std::vector<std::byte> payload;
  std::uint8_t tos = 0;  // the IPv4 TOS byte TCP asked for (DSCP, ECN)
};

inline std::string flags_text(std::uint8_t f) {
  std::string s;
  if (f & kSyn) s += 'S';
  if (f & kFin) s += 'F';
  if (f & kRst) s += 'R';
  if (f & kPsh) s += 'P';
  if (f & kAck) s += '.';
  if (f & kUrg) s += 'U';
  return s.empty() ? "none" : s;
}

// ---- the fixture ---------------------------------------------------------------

class Script : public ::testing::Test {
 protected:
  using Loc = std::source_location;

  static constexpr std::uint16_t kListenPort = 8080;
  static constexpr std::uint16_t kPeerPort = 40000;

  // inject_from_port's frames not given back yet; first, so that it outlives
  // the stack that may still hold some.
  std::vector<std::unique_ptr<std::vector<std::byte>>> port_storage_;
  int port_held_ = 0;
  ManualClock clock{Time(std::chrono::seconds(1000))};
  EventLoop loop{clock};
  FakeIp ip{kLocal, kIpProtocol, kIpMtu};
  std::unique_ptr<TcpProtocol> tcp;
  TcpListener listener;
  TcpSocket sock;

  SeqNum iss{0};  // ours
  SeqNum irs{0};  // the peer's
  std::uint16_t lport = kListenPort;  // our port
  std::uint16_t pport = kPeerPort;    // the peer's port
  bool conn_ts = false;               // segments carry timestamps (expect's default)
  std::uint32_t peer_tsval = 5000;    // what inject() puts in TSval when the test gives none
  std::uint16_t peer_win = 65535;     // what inject() puts in the window field when the test gives none
  std::uint64_t read_off = 0;         // how much of the peer's stream the test has read
  std::uint64_t write_off = 0;        // how much of our stream the test has written
  std::uint32_t last_tsval_ = 0;      // the TSval of the last segment we sent (inject echoes it)

  static Secret test_secret() {
    Secret s{};
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::byte(static_cast<unsigned char>(0x40 + i));
    return s;
  }

  void TearDown() override {
    sock = TcpSocket();
    listener = TcpListener();
    tcp.reset();
    ip.sent.clear();
    ip.sessions.clear();
  }

  // A TCP on the fake IP, with a fixed ISN/cookie secret.
  void start(TcpConfig cfg = {}) {
    if (!cfg.secret) cfg.secret = test_secret();
    cfg.ephemeral_random = false;  // ports from 49152, as the scripts expect
    tcp = std::make_unique<TcpProtocol>("tcp0", ip, loop.timers(), std::move(cfg));
  }
  TcpProtocol::Counters& stats() { return tcp->stats(); }

  // Our tsval now: the stack's timestamp clock counts milliseconds of the
  // clock's epoch (RFC 7323 5.4).
  std::uint32_t now_ms() const {
    return static_cast<std::uint32_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(clock.now().time_since_epoch()).count());
  }

  // The clock time at which the ISN for `t` is `want` (RFC 6528: 4 us ticks
  // plus a keyed hash of the tuple), after the current time.
  Time time_for_isn(const FourTuple& t, std::uint32_t want) const {
    IsnGenerator g(test_secret());
    std::uint32_t ticks = want - g.offset(t);
    const std::int64_t period = (std::int64_t{1} << 32) * 4000;  // ns of one ISN clock cycle
    std::int64_t ns = std::int64_t{ticks} * 4000;
    while (ns <= clock.now().time_since_epoch().count()) ns += period;
    return Time(Duration(ns));
  }

  // ---- time ----

  // Moves the clock forward by `d`, firing every timer at its own deadline on
  // the way (so a timer armed by a callback fires when it is due, not late).
  void advance(Duration d) {
    const Time end = clock.now() + d;
    for (int guard = 0; guard < 100000; ++guard) {
      (void)loop.run_once();
      std::optional<Time> next = loop.timers().next_deadline();
      if (!next || *next > end) break;
      if (*next > clock.now()) clock.set(*next);
      else if (loop.run_once() == 0) break;
    }
    clock.set(end);
    (void)loop.run_once();
  }

  // ---- the peer's side ----

  std::vector<std::byte> build(const Seg& s) const {
    std::vector<std::byte> opt;
    if (s.has_raw_opts_) {
      opt = s.raw_opts_;
    } else {
      auto put16 = [&](std::uint16_t v) {
        opt.push_back(std::byte(static_cast<unsigned char>(v >> 8)));
        opt.push_back(std::byte(static_cast<unsigned char>(v)));
      };
      auto put32 = [&](std::uint32_t v) {
        put16(static_cast<std::uint16_t>(v >> 16));
        put16(static_cast<std::uint16_t>(v));
      };
      auto put8 = [&](unsigned v) { opt.push_back(std::byte(static_cast<unsigned char>(v))); };
      if (s.mss_) {
        put8(kOptMss);
        put8(4);
        put16(*s.mss_);
      }
      if (s.ws_) {
        put8(kOptNop);
        put8(kOptWscale);
        put8(3);
        put8(*s.ws_);
      }
      if (s.sackok_) {
        put8(kOptNop);
        put8(kOptNop);
        put8(kOptSackPermitted);
        put8(2);
      }
      std::optional<Timestamps> ts = s.ts_;
      if (!ts && conn_ts && !s.no_ts_ && !(s.flags_ & kSyn)) ts = Timestamps{peer_tsval, last_tsval_};
      if (ts) {
        put8(kOptNop);
        put8(kOptNop);
        put8(kOptTimestamps);
        put8(10);
        put32(ts->tsval);
        put32(ts->tsecr);
      }
      if (!s.sack_.empty()) {
        put8(kOptNop);
        put8(kOptNop);
        put8(kOptSack);
        put8(static_cast<unsigned>(2 + 8 * s.sack_.size()));
        for (const Block& b : s.sack_) {
          put32((s.ack_abs_ ? SeqNum(b.first) : iss + b.first).raw());
          put32((s.ack_abs_ ? SeqNum(b.second) : iss + b.second).raw());
        }
      }
      while (opt.size() % 4 != 0) put8(kOptEol);
    }
    std::vector<std::byte> payload;
    if (s.has_data_) {
      payload = s.data_;
    } else {
      const SeqNum first = s.seq_abs_ ? SeqNum(*s.seq_) : irs + s.seq_.value_or(0);
      const std::uint32_t base = static_cast<std::uint32_t>(first - irs) - 1 + ((s.flags_ & kSyn) ? 1u : 0u);
      for (std::size_t i = 0; i < s.len_; ++i) payload.push_back(pattern_byte(base + i, 0));
    }
    std::vector<std::byte> b(Header::kMinSize + opt.size() + payload.size());
    Header h;
    h.src_port = s.sport_.value_or(pport);
    h.dst_port = s.dport_.value_or(lport);
    h.seq = s.seq_abs_ ? SeqNum(*s.seq_) : irs + s.seq_.value_or(0);
    h.ack = s.ack_abs_ ? SeqNum(*s.ack_) : (s.ack_ ? iss + *s.ack_ : SeqNum(0));
    h.data_offset = s.doff_.value_or(static_cast<std::uint8_t>((Header::kMinSize + opt.size()) / 4));
    h.flags = s.flags_;
    h.window = s.win_.value_or(peer_win);
    h.urgent = s.urgent_;
    h.checksum = 0;
    h.write(std::span(b).first<Header::kMinSize>());
    if (!opt.empty()) std::memcpy(b.data() + Header::kMinSize, opt.data(), opt.size());
    if (!payload.empty()) std::memcpy(b.data() + Header::kMinSize + opt.size(), payload.data(), payload.size());
    std::uint16_t ck = reference_checksum(kPeer, kLocal, b);
    if (s.bad_csum_) ck = static_cast<std::uint16_t>(ck ^ 0x0101);
    if (s.no_csum_) ck = 0;
    store_be16(b.data() + Header::kChecksumOffset, ck);
    if (s.cut_ && *s.cut_ < b.size()) b.resize(*s.cut_);
    return b;
  }

  // The peer sends `s`; returns what tcp.demux said.
  Status try_inject(const Seg& s) {
    std::vector<std::byte> b = build(s);
    ip.rx_tos = s.ce_ ? std::uint8_t{0x03} : std::uint8_t{0};
    Status st = ip.receive(kPeer, Msg::copy_of(b));
    ip.rx_tos = 0;
    // The end of the event loop's pass (input before timers): what TCP left
    // for the end of the burst -- the ACK for two full segments -- goes now.
    (void)loop.timers().run_expired(clock.now());
    return st;
  }
  // The peer sends `s`, which TCP must take (even if only to drop it).
  void inject(const Seg& s, Loc loc = Loc::current()) {
    if (Status st = try_inject(s); !st) {
      ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "demux: " << xk::to_string(st.error());
    }
  }
  // The segments arrive in one driver burst: all of them go up before the
  // pass's timers run.
  void inject_burst(std::initializer_list<Seg> segs, Loc loc = Loc::current()) {
    for (const Seg& s : segs) {
      if (Status st = ip.receive(kPeer, Msg::copy_of(build(s))); !st) {
        ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "demux: " << xk::to_string(st.error());
      }
    }
    (void)loop.timers().run_expired(clock.now());
  }

  // The peer sends `s` and it arrives as a port hands a frame up: in storage
  // of the port's, given back through a deleter (port_held() counts what
  // has not been given back), marked rx_scarce when the port is short of
  // buffers (Offload::rx_scarce).
  void inject_from_port(const Seg& s, bool scarce, Loc loc = Loc::current()) {
    auto storage = std::make_unique<std::vector<std::byte>>(build(s));
    BufDeleter d{[](void* ctx, std::byte* data) {
                   auto* self = static_cast<Script*>(ctx);
                   auto& all = self->port_storage_;
                   auto it = std::find_if(all.begin(), all.end(), [data](const auto& v) { return v->data() == data; });
                   if (it == all.end()) return;
                   --self->port_held_;
                   all.erase(it);
                 },
                 this};
    std::byte* data = storage->data();
    const std::size_t size = storage->size();
    port_storage_.push_back(std::move(storage));
    ++port_held_;
    Result<Msg> m = Msg::wrap(data, size, 0, size, d);
    if (!m) {
      ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "wrap: " << xk::to_string(m.error());
      return;
    }
    if (scarce) m->offload().flags |= Offload::rx_scarce;
    if (Status st = ip.receive(kPeer, std::move(*m)); !st) {
      ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "demux: " << xk::to_string(st.error());
    }
    (void)loop.timers().run_expired(clock.now());
  }
  int port_held() const noexcept { return port_held_; }

  // An ICMP error of `type` and `code` about our segment at relative
  // sequence number `seq` on the current 4-tuple, as icmp parses it (the
  // quoted TCP header gives the ports and the sequence number).
  ctl::NetError icmp(std::uint8_t type, std::uint8_t code, std::uint32_t seq, std::uint16_t mtu = 0) const {
    ctl::NetError e;
    e.icmp_type = type;
    e.icmp_code = code;
    if (type == 11) {
      e.kind = ctl::NetError::Kind::time_exceeded;
    } else if (type == 12) {
      e.kind = ctl::NetError::Kind::param_problem;
    } else if (code == 4) {
      e.kind = ctl::NetError::Kind::frag_needed;
      e.next_hop_mtu = mtu;
    } else {
      e.kind = ctl::NetError::Kind::unreachable;
    }
    e.local = kLocal;
    e.remote = kPeer;
    e.protocol = kIpProtocol;
    e.local_port = Port{lport};
    e.remote_port = Port{pport};
    e.inner_seq = (iss + seq).raw();
    return e;
  }
  // ipv4 hands `e` to TCP.
  void deliver_icmp(const ctl::NetError& e, Loc loc = Loc::current()) {
    if (Status st = tcp->control(ctl::DeliverError{e}).status(); !st) {
      ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "DeliverError: " << xk::to_string(st.error());
    }
  }

  // ---- our side ----

  std::string describe(const Got& g, bool relative = true) const {
    std::string out = flags_text(g.h.flags);
    auto rel = [&](SeqNum v, SeqNum base) { return std::to_string(relative ? (v - base) : std::int64_t{v.raw()}); };
    out += " seq " + rel(g.h.seq, iss);
    if (g.h.flags & kAck) out += " ack " + rel(g.h.ack, irs);
    out += " win " + std::to_string(g.h.window);
    std::string o;
    auto add = [&](const std::string& x) { o += (o.empty() ? "" : ",") + x; };
    if (g.opts.mss) add("mss " + std::to_string(*g.opts.mss));
    if (g.opts.sack_permitted) add("sackOK");
    if (g.opts.timestamps) {
      add("TS val " + std::to_string(g.opts.timestamps->tsval) + " ecr " + std::to_string(g.opts.timestamps->tsecr));
    }
    if (g.opts.wscale) add("wscale " + std::to_string(*g.opts.wscale));
    for (const SackBlock& b : g.opts.sack_blocks()) add("sack " + rel(b.left, irs) + ":" + rel(b.right, irs));
    if (!o.empty()) out += " <" + o + ">";
    out += " len " + std::to_string(g.payload.size());
    return out;
  }

  // Takes the next segment the stack sent and checks it against `s`.
  Got expect(const Seg& s, Loc loc = Loc::current()) {
    auto fail = [&](const std::string& what) { ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << what; };
    if (ip.sent.empty()) {
      fail("expected a " + flags_text(s.flags_) + " segment, the stack sent nothing");
      return Got{};
    }
    Sent out = std::move(ip.sent.front());
    ip.sent.pop_front();
    Got g;
    g.tos = out.offload.tos;
    if (out.peer != kPeer) fail("sent to " + to_string(out.peer));
    Result<Header> h = parse_header(out.bytes);
    if (!h) {
      fail("the stack sent a malformed segment");
      return g;
    }
    g.h = *h;
    Result<Options> o = parse_options(std::span(out.bytes).subspan(Header::kMinSize, h->options_length()));
    if (!o) fail("the stack sent malformed options");
    else g.opts = *o;
    g.raw_options.assign(out.bytes.begin() + static_cast<std::ptrdiff_t>(Header::kMinSize),
                         out.bytes.begin() + static_cast<std::ptrdiff_t>(h->header_length()));
    g.payload.assign(out.bytes.begin() + static_cast<std::ptrdiff_t>(h->header_length()), out.bytes.end());
    std::vector<std::byte> zeroed = out.bytes;
    zeroed[Header::kChecksumOffset] = zeroed[Header::kChecksumOffset + 1] = std::byte{0};
    if (s.no_csum_) {
      if (h->checksum != 0) fail("a checksum where 0 was expected on " + describe(g));
    } else if (reference_checksum(kLocal, kPeer, zeroed) != h->checksum) {
      fail("bad checksum on " + describe(g));
    }

    // A SYN tells us our ISS (and, on an active open, our port).
    if ((g.h.flags & kSyn) && !s.seq_) {
      iss = g.h.seq;
      lport = g.h.src_port;
    }
    if (g.opts.timestamps) last_tsval_ = g.opts.timestamps->tsval;

    std::string want;
    std::vector<std::string> bad;
    if (g.h.flags != s.flags_) bad.push_back("flags " + flags_text(s.flags_));
    if (g.h.src_port != s.dport_.value_or(lport)) bad.push_back("source port " + std::to_string(s.dport_.value_or(lport)));
    if (g.h.dst_port != s.sport_.value_or(pport)) bad.push_back("destination port " + std::to_string(s.sport_.value_or(pport)));
    if (s.seq_) {
      SeqNum w = s.seq_abs_ ? SeqNum(*s.seq_) : iss + *s.seq_;
      if (g.h.seq != w) bad.push_back("seq " + std::to_string(s.seq_abs_ ? w.raw() : *s.seq_));
    }
    if (s.ack_) {
      SeqNum w = s.ack_abs_ ? SeqNum(*s.ack_) : irs + *s.ack_;
      if (g.h.ack != w) bad.push_back("ack " + std::to_string(s.ack_abs_ ? w.raw() : *s.ack_));
    }
    if (s.win_ && g.h.window != *s.win_) bad.push_back("win " + std::to_string(*s.win_));
    if ((s.flags_ & kUrg) && g.h.urgent != s.urgent_) bad.push_back("urg " + std::to_string(s.urgent_));
    if (g.opts.mss != s.mss_) bad.push_back(s.mss_ ? "mss " + std::to_string(*s.mss_) : "no mss");
    if (g.opts.wscale != s.ws_) bad.push_back(s.ws_ ? "wscale " + std::to_string(*s.ws_) : "no wscale");
    if (g.opts.sack_permitted != s.sackok_) bad.push_back(s.sackok_ ? "sackOK" : "no sackOK");
    if (s.ts_) {
      if (g.opts.timestamps != s.ts_) {
        bad.push_back("TS val " + std::to_string(s.ts_->tsval) + " ecr " + std::to_string(s.ts_->tsecr));
      }
    } else if (s.ecr_) {
      if (!g.opts.timestamps || g.opts.timestamps->tsecr != *s.ecr_) bad.push_back("TS ecr " + std::to_string(*s.ecr_));
    } else {
      bool want_ts = conn_ts && !s.no_ts_ && !(s.flags_ & kRst);
      bool may_ts = want_ts || (s.flags_ & kRst);
      if (want_ts && !g.opts.timestamps) bad.push_back("timestamps");
      if (!may_ts && g.opts.timestamps) bad.push_back("no timestamps");
    }
    std::vector<Block> got_sack;
    for (const SackBlock& b : g.opts.sack_blocks()) {
      got_sack.emplace_back(static_cast<std::uint32_t>(b.left - irs), static_cast<std::uint32_t>(b.right - irs));
    }
    if (got_sack != s.sack_) {
      std::string w = "sack";
      for (const Block& b : s.sack_) w += " " + std::to_string(b.first) + ":" + std::to_string(b.second);
      if (s.sack_.empty()) w = "no sack";
      bad.push_back(w);
    }
    if (g.payload.size() != s.len_) bad.push_back("len " + std::to_string(s.len_));
    if (!g.payload.empty()) {
      if (s.has_data_) {
        if (g.payload != s.data_) bad.push_back("the given payload bytes");
      } else {
        const std::uint32_t base = static_cast<std::uint32_t>(g.h.seq - iss) - 1;
        for (std::size_t i = 0; i < g.payload.size(); ++i) {
          if (g.payload[i] != pattern_byte(base + i, 1)) {
            bad.push_back("payload bytes of our stream at offset " + std::to_string(base + i));
            break;
          }
        }
      }
    }
    if (!bad.empty()) {
      std::string m = "sent:     " + describe(g) + "\nexpected:";
      for (const std::string& b : bad) m += " " + b + ";";
      fail(m);
    }
    return g;
  }

  // Nothing more was sent.
  void expect_nothing(Loc loc = Loc::current()) {
    if (ip.sent.empty()) return;
    std::string m = "expected nothing, the stack sent " + std::to_string(ip.sent.size()) + " segment(s):";
    while (!ip.sent.empty()) {
      Sent out = std::move(ip.sent.front());
      ip.sent.pop_front();
      Result<Header> h = parse_header(out.bytes);
      if (!h) {
        m += "\n  (malformed)";
        continue;
      }
      Got g;
      g.h = *h;
      if (Result<Options> o = parse_options(std::span(out.bytes).subspan(Header::kMinSize, h->options_length()))) {
        g.opts = *o;
      }
      g.raw_options.assign(out.bytes.begin() + static_cast<std::ptrdiff_t>(Header::kMinSize),
                         out.bytes.begin() + static_cast<std::ptrdiff_t>(h->header_length()));
    g.payload.assign(out.bytes.begin() + static_cast<std::ptrdiff_t>(h->header_length()), out.bytes.end());
      m += "\n  " + describe(g);
    }
    ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << m;
  }

  // Writes `n` more bytes of our stream through `s` (all must fit).
  void write(TcpSocket& s, std::size_t n, Loc loc = Loc::current()) {
    std::vector<std::byte> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = pattern_byte(write_off + i, 1);
    Result<std::size_t> r = s.write(b);
    if (!r || *r != n) {
      ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line()))
          << "write of " << n << " bytes: " << (r ? std::to_string(*r) : std::string(xk::to_string(r.error())));
    }
    if (r) write_off += *r;
  }
  void write(std::size_t n, Loc loc = Loc::current()) { write(sock, n, loc); }

  // Reads `n` bytes, which must be there and be the next bytes of the peer's
  // stream.
  void expect_read(TcpSocket& s, std::size_t n, Loc loc = Loc::current()) {
    std::vector<std::byte> b(n);
    Result<std::size_t> r = s.read(b);
    std::size_t got = r ? *r : 0;
    if (got != n) {
      ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line()))
          << "read " << (r ? std::to_string(*r) + " bytes" : std::string(xk::to_string(r.error()))) << ", expected " << n;
    }
    for (std::size_t i = 0; i < std::min(got, n); ++i) {
      if (b[i] != pattern_byte(read_off + i, 0)) {
        ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "byte " << read_off + i << " of the stream differs";
        break;
      }
    }
    read_off += got;
  }
  void expect_read(std::size_t n, Loc loc = Loc::current()) { expect_read(sock, n, loc); }

  // Nothing is waiting to be read.
  void expect_read_all(Loc loc = Loc::current()) {
    if (sock.connection() != nullptr && sock.connection()->rcv_queued() != 0) {
      ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line()))
          << sock.connection()->rcv_queued() << " bytes are still waiting to be read";
    }
  }

  // ---- openings ----

  Seg offer_syn(const Offer& o, std::uint32_t tsval) const {
    Seg s = syn().seq(0);
    if (o.mss_) s.mss(*o.mss_);
    if (o.ws_) s.ws(*o.ws_);
    if (o.sack_) s.sackok();
    if (o.ts_) s.ts(tsval, 0);
    if (o.ecn_) s.flags_ |= kEce | kCwr;
    return s;
  }

  void listen(std::uint16_t port = kListenPort, std::size_t backlog = 16) {
    Result<TcpListener> l = tcp->listen(Ipv4Addr{}, Port{port}, backlog);
    ASSERT_TRUE(l.ok());
    listener = std::move(*l);
    lport = port;
  }

  // The peer connects to our listener (irs = `peer_isn`); `sock` is the
  // accepted connection, in ESTABLISHED, and nothing is left to expect.
  void passive_open(const Offer& o = Offer(), std::uint32_t peer_isn = 0x10000000, Loc loc = Loc::current()) {
    if (!listener.is_open()) listen();
    irs = SeqNum(peer_isn);
    inject(offer_syn(o, peer_tsval));
    const TcpConfig& cfg = tcp->config();
    Seg sa = syn_ack().ack(1);
    sa.mss(static_cast<std::uint16_t>(cfg.mss != 0 ? std::min<std::size_t>(cfg.mss, kIpMtu - 20) : kIpMtu - 20));
    if (o.ws_ && cfg.wscale > 0) sa.ws(our_wscale());
    if (o.sack_ && cfg.sack) sa.sackok();
    conn_ts = o.ts_ && cfg.timestamps;
    if (conn_ts) sa.ts(now_ms(), peer_tsval);
    if (o.ecn_ && cfg.ecn != TcpConfig::Ecn::off) sa.flags_ |= kEce;
    expect(sa, loc);
    if (o.rtt_ > Duration::zero()) advance(o.rtt_);
    inject(ack().seq(1).ack(1));
    Result<TcpSocket> a = listener.accept();
    if (!a) {
      ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "accept: " << xk::to_string(a.error());
      return;
    }
    sock = std::move(*a);
    if (sock.state() != State::established) ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "not established";
    expect_nothing(loc);
  }

  // We connect to the peer's port 80; the peer (irs = `peer_isn`) answers
  // with a SYN-ACK offering `o`; `sock` is ESTABLISHED.
  void active_open(const Offer& o = Offer(), std::uint32_t peer_isn = 0x20000000, Loc loc = Loc::current()) {
    pport = 80;
    sock = tcp->socket();
    if (!sock.connect(kPeer, Port{80}).ok()) ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "connect";
    const TcpConfig& cfg = tcp->config();
    Seg s = syn().win(65535).mss(kIpMtu - 20);
    if (cfg.wscale > 0) s.ws(our_wscale());
    if (cfg.sack) s.sackok();
    if (cfg.timestamps) s.ts(now_ms(), 0);
    expect(s, loc);
    irs = SeqNum(peer_isn);
    Seg sa = syn_ack().seq(0).ack(1);
    if (o.mss_) sa.mss(*o.mss_);
    if (o.ws_) sa.ws(*o.ws_);
    if (o.sack_) sa.sackok();
    if (o.ts_) sa.ts(peer_tsval, now_ms());
    inject(sa);
    conn_ts = o.ts_ && cfg.timestamps;
    expect(ack().seq(1).ack(1), loc);
    if (sock.state() != State::established) ADD_FAILURE_AT(loc.file_name(), static_cast<int>(loc.line())) << "not established";
  }

  // The shift we offer (RFC 7323 2.3): the smallest that covers buf_max.
  std::uint8_t our_wscale() const {
    const TcpConfig& cfg = tcp->config();
    std::uint8_t s = 0;
    while (s < cfg.wscale && (std::size_t{65535} << s) < cfg.buf_max) ++s;
    return s;
  }

};

}  // namespace xk::tcp::script

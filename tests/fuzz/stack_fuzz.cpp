// libFuzzer harness: raw frames into a whole stack (pair -> eth -> arp ->
// ipv4 -> icmp, udp, tcp) on virtual time. Each input is a fresh stack with
// a TCP listener on port 80, one connection it accepted (the peer's port
// 40000), one it opened (to the peer's port 5000) and a UDP socket on port 7.
// The input's first byte says whether the stack's port offers checksum
// offload (bit 0); then comes a sequence of records:
//
//   advance      move the ManualClock by 0..65535 ms (timers fire)
//   next_timer   jump to the next timer's deadline
//   raw          an Ethernet frame, as is
//   ip           an IPv4 packet behind our Ethernet header; optionally with
//                its header checksum, total length and TCP/UDP/ICMP checksum
//                made right, so the bytes behind them get looked at
//   tcp          a segment on a flow (the accepted and the opened
//                connection, eight new clients of port 80, a closed port) with
//                seq/ack relative to what each side has sent so far, any
//                flags, window and options, a payload, right or wrong checksum
//   icmp         an ICMP error quoting a segment of one of those flows
//   fragments    a UDP or TCP datagram cut into fragments at offsets the
//                input picks (overlaps, gaps, duplicates and all)
//   app          write, read, shutdown, close, abort, accept, socket options,
//                UDP receive and send, close the listener
//
// Whatever the stack sends goes to the harness's end of the pair, which
// follows each flow's sequence numbers from it. With XK_FUZZ_PCAP=FILE set,
// every frame of the run (setup included, both ways, virtual time stamps) is
// written to FILE as a pcap, to look at a crash's input with tcpdump or
// Wireshark; each input run overwrites it. After the last record the
// stack is torn down: every Msg buffer and Session must be gone (the unit
// tests' leak check, per input), and ASan/UBSan watch the rest. Every frame
// the stack sends is checked too (check_sent: lengths and checksums).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>

#include "raw_stack.hpp"

namespace {

using namespace xk::test::raw;
using namespace std::chrono_literals;

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

// ---- the records ----------------------------------------------------------------

// A classic pcap file (Ethernet, microsecond stamps), written by hand.
class PcapDump {
 public:
  explicit PcapDump(const char* path) : f_(std::fopen(path, "wb")) {
    if (f_ == nullptr) return;
    const std::uint32_t header[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};
    std::fwrite(header, sizeof header, 1, f_);
  }
  ~PcapDump() {
    if (f_ != nullptr) std::fclose(f_);
  }
  PcapDump(const PcapDump&) = delete;
  PcapDump& operator=(const PcapDump&) = delete;
  void write(xk::Time t, std::span<const std::byte> frame) {
    if (f_ == nullptr) return;
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
    const std::uint32_t rec[4] = {static_cast<std::uint32_t>(us / 1000000), static_cast<std::uint32_t>(us % 1000000),
                                  static_cast<std::uint32_t>(frame.size()), static_cast<std::uint32_t>(frame.size())};
    std::fwrite(rec, sizeof rec, 1, f_);
    std::fwrite(frame.data(), 1, frame.size(), f_);
  }

 private:
  std::FILE* f_;
};

// Whatever the input did, what the stack sends must be well-formed: an IPv4
// header with a right checksum and a total length that fits the frame, and a
// right TCP, UDP or ICMP checksum when the packet is not a fragment. Aborts
// (a finding) otherwise.
void check_sent(std::span<const std::byte> f) {
  if (f.size() < 14) std::abort();
  const std::uint16_t type = get16(f, 12);
  if (type == 0x0806) {
    if (f.size() < 14 + 28) std::abort();
    return;
  }
  if (type != 0x0800) std::abort();  // the stack speaks IPv4 and ARP only
  std::span<const std::byte> ip = f.subspan(14);
  if (ip.size() < 20 || (std::to_integer<unsigned>(ip[0]) >> 4) != 4) std::abort();
  const std::size_t ihl = (std::to_integer<std::size_t>(ip[0]) & 0x0f) * 4;
  const std::size_t total = get16(ip, 2);
  if (ihl < 20 || total < ihl || total > ip.size()) std::abort();
  if (fold(sum16(ip.first(ihl))) != 0) std::abort();  // header checksum
  if ((get16(ip, 6) & 0x3fff) != 0) return;          // a fragment: no transport checksum to check alone
  std::span<const std::byte> seg = ip.subspan(ihl, total - ihl);
  const std::uint8_t proto = std::to_integer<std::uint8_t>(ip[9]);
  std::uint32_t pseudo = sum16(ip.subspan(12, 8)) + proto + static_cast<std::uint32_t>(seg.size());
  if (proto == 6) {
    if (seg.size() < 20 || fold(sum16(seg, pseudo)) != 0) std::abort();
    const std::size_t off = (std::to_integer<std::size_t>(seg[12]) >> 4) * 4;
    if (off < 20 || off > seg.size()) std::abort();
  } else if (proto == 17) {
    if (seg.size() < 8 || get16(seg, 4) != seg.size()) std::abort();
    if (get16(seg, 6) != 0 && fold(sum16(seg, pseudo)) != 0) std::abort();
  } else if (proto == 1) {
    if (seg.size() < 8 || fold(sum16(seg)) != 0) std::abort();
  } else {
    std::abort();  // nothing else is ever sent
  }
}

// The flow a record aims at: bits 0..1 say accepted, opened, a new client
// of port 80 or the closed port; for a new client, bits 2..4 pick one of
// eight (each followed on its own), so a few records can fill the
// listener's accept queue.
Flow& pick_flow(Stack& s, std::uint8_t b) {
  switch (b % 4) {
    case 0: return s.peer->flows[0];
    case 1: return s.peer->flows[1];
    case 2: return s.peer->flows[2 + ((b >> 2) & 7)];
    default: return s.peer->flows[10];
  }
}

void record_tcp(Stack& s, Input& in) {
  Flow& f = pick_flow(s, in.u8());
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
  Flow& f = pick_flow(s, in.u8());
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
    case 8: {
      std::uint8_t b = in.u8();
      switch (b % 5) {
        case 0: sock.set_nodelay(b & 8); break;
        case 1: sock.set_cork(b & 8); break;
        case 2: sock.set_keepalive(b & 8); break;
        case 3: sock.set_sndbuf(std::size_t{1024} << (b >> 4)); break;
        case 4: sock.set_rcvbuf(std::size_t{1024} << (b >> 4)); break;
      }
      break;
    }
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
    Input in(data, size);
    std::unique_ptr<PcapDump> dump;  // outlives the stack: its teardown may still send
    Stack s(/*csum_offload=*/in.u8() & 1);
    if (const char* path = std::getenv("XK_FUZZ_PCAP")) dump = std::make_unique<PcapDump>(path);
    s.peer->tap = [&](std::span<const std::byte> f, bool to_stack) {
      if (dump) dump->write(s.clock.now(), f);
      if (!to_stack) check_sent(f);
    };
    s.open_flows();
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

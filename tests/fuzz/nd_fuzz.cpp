// libFuzzer harness: an IPv6 host (pair -> eth -> nd -> ipv6 -> icmpv6, udp)
// on virtual time, fed Neighbor Discovery, MLD, ICMPv6 errors, fragments and
// raw frames by a peer on the link. Each input is a fresh host (addresses
// 2001:db8::10/64 and its link-local one, a duplicate check running, a UDP
// socket on port 7) and a sequence of records:
//
//   advance     move the clock by 0..65535 ms (duplicate checks, the
//               neighbour cache's timers, reassembly timeouts fire)
//   raw         an Ethernet payload behind an IPv6 Ethernet header, as is
//   icmp        an ICMPv6 message of a type the host acts on (ND, MLD,
//               echo, errors) from one of a few sources to one of our
//               addresses or groups, with any code, hop limit and body
//               (a target address of ours when the input says so), the
//               checksum right or not
//   fragment    a piece of a UDP datagram to port 7 (any id, offset, M)
//   send        the host sends a UDP datagram to a neighbour (resolution)
//
// Beyond "no crash, no leak, no UB": every frame the host sends is an
// Ethernet frame of IPv6 whose payload length matches its size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "xk/checksum.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/icmpv6.hpp"
#include "xk/protocols/ipv6.hpp"
#include "xk/protocols/nd.hpp"
#include "xk/protocols/udp.hpp"

namespace {

using namespace xk;
using namespace std::chrono_literals;

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const noexcept { return pos_ >= size_; }
  std::uint8_t u8() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() noexcept {
    const std::uint16_t lo = u8();
    return static_cast<std::uint16_t>(lo | (u8() << 8));
  }
  std::vector<std::byte> bytes(std::size_t n) {
    n = std::min(n, size_ - std::min(pos_, size_));
    std::vector<std::byte> b(n);
    if (n != 0) std::memcpy(b.data(), data_ + pos_, n);
    pos_ += n;
    return b;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

IpAddr addr_of(const char* text) { return *parse_ip(text); }

const MacAddr kHostMac{{0x02, 0, 0, 0, 0, 0x10}};
const MacAddr kPeerMac{{0x02, 0, 0, 0, 0, 0x20}};

// The peer's end: checks what the host sends, and owns a session to push
// frames through.
class Peer final : public Protocol {
 public:
  Peer() : Protocol("peer", "fuzz-peer") {}
  Status demux(Session&, Msg m) override {
    std::vector<std::byte> f(m.size());
    (void)m.copy_out(0, f);
    if (f.size() < 14 + ipv6::Header::kSize) std::abort();
    if (load_be16(f.data() + 12) != 0x86dd) std::abort();  // nd and ipv6 send IPv6 only
    const std::size_t payload = load_be16(f.data() + 14 + 4);
    if (14 + ipv6::Header::kSize + payload != f.size()) std::abort();
    return {};
  }
};

struct Host {
  explicit Host(drivers::PairHub& hub, EventLoop& loop)
      : drv("net0", hub.link("wire"), config(kHostMac), &loop),
        eth("eth0", drv),
        nd("nd0", eth, loop, nd::NdConfig{}),
        ip6("ip6", eth, &nd, loop.timers(), ip_config()),
        icmp("icmp6", ip6, &nd, &loop.clock(), icmpv6::Config{}),
        udp("udp0", ip6) {}
  static drivers::PairDriver::Config config(MacAddr mac) {
    drivers::PairDriver::Config c;
    c.mac = mac;
    return c;
  }
  static ipv6::Config ip_config() {
    ipv6::Config c;
    c.addrs = {IpCidr{addr_of("2001:db8::10"), 64}};
    c.gw = addr_of("fe80::1");
    c.reasm_mem = 256 * 1024;
    return c;
  }
  drivers::PairDriver drv;
  eth::EthProtocol eth;
  nd::NdProtocol nd;
  ipv6::Ipv6Protocol ip6;
  icmpv6::Icmpv6Protocol icmp;
  udp::UdpProtocol udp;
};

std::vector<std::byte> ipv6_packet(const IpAddr& src, const IpAddr& dst, std::uint8_t next, std::uint8_t hops,
                                   const std::vector<std::byte>& payload) {
  std::vector<std::byte> p(ipv6::Header::kSize + payload.size());
  ipv6::Header h;
  h.payload_length = static_cast<std::uint16_t>(payload.size());
  h.next_header = next;
  h.hop_limit = hops;
  h.src = src;
  h.dst = dst;
  h.write(std::span(p).first<ipv6::Header::kSize>());
  std::copy(payload.begin(), payload.end(), p.begin() + ipv6::Header::kSize);
  return p;
}

void fix_checksum(std::vector<std::byte>& m, const IpAddr& src, const IpAddr& dst, std::size_t at) {
  if (m.size() < at + 2) return;
  m[at] = m[at + 1] = std::byte{0};
  const std::uint32_t pseudo = csum::pseudo_header(src, dst, at == 2 ? ipv6::kIcmpv6 : ipv6::kUdp,
                                                   static_cast<std::uint32_t>(m.size()));
  const std::uint16_t c = csum::finish(csum::partial(m.data(), m.size(), pseudo));
  std::memcpy(m.data() + at, &c, 2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  ManualClock clock;
  EventLoop loop(clock);
  drivers::PairHub hub;
  auto host = std::make_unique<Host>(hub, loop);
  Peer peer;
  drivers::PairDriver peer_drv("peer0", hub.link("wire"), Host::config(kPeerMac), &loop);
  Participants none;
  (void)peer_drv.open_enable(peer, none);
  SessionRef to_host = *peer_drv.open(peer, none);
  udp::UdpSocket echo = host->udp.socket();
  (void)echo.bind(IpAddr{}, Port{7});

  const IpAddr us = addr_of("2001:db8::10");
  const IpAddr our_ll = *host->ip6.link_local();
  const IpAddr sources[] = {addr_of("fe80::20"), addr_of("2001:db8::20"), IpAddr{},
                            addr_of("fe80::1"),  us,                     addr_of("ff02::1")};
  const IpAddr dests[] = {us, our_ll, addr_of("ff02::1"), icmpv6::solicited_node(us), addr_of("ff02::2"),
                          addr_of("2001:db8::99")};
  const std::uint8_t types[] = {135, 136, 134, 133, 137, 130, 143, 128, 129, 1, 2, 3, 4};

  auto push = [&](std::vector<std::byte> packet, bool multicast) {
    std::vector<std::byte> f(14 + packet.size());
    const MacAddr dst = multicast ? icmpv6::multicast_mac(addr_of("ff02::1")) : kHostMac;
    std::memcpy(f.data(), dst.bytes.data(), 6);
    std::memcpy(f.data() + 6, kPeerMac.bytes.data(), 6);
    store_be16(f.data() + 12, 0x86dd);
    std::copy(packet.begin(), packet.end(), f.begin() + 14);
    (void)to_host->push(Msg::copy_of(f));
    for (int i = 0; i < 64 && loop.run_once() != 0; ++i) {
    }
  };

  for (int records = 0; records < 64 && !in.empty(); ++records) {
    const std::uint8_t op = in.u8();
    switch (op % 5) {
      case 0:
        clock.advance(std::chrono::milliseconds(in.u16()));
        for (int i = 0; i < 64 && loop.run_once() != 0; ++i) {
        }
        break;
      case 1: {
        const std::size_t n = in.u16() % 2048;
        push(in.bytes(n), (op & 0x80) != 0);
        break;
      }
      case 2: {
        const std::uint8_t pick = in.u8();
        const IpAddr& src = sources[pick % std::size(sources)];
        const IpAddr& dst = dests[(pick >> 4) % std::size(dests)];
        const std::uint8_t type = types[in.u8() % std::size(types)];
        const std::uint8_t code = (op & 0x10) != 0 ? in.u8() : 0;
        const std::uint8_t hops = (op & 0x20) != 0 ? in.u8() : 255;
        std::vector<std::byte> m(icmpv6::Header::kSize);
        icmpv6::Header h;
        h.type = type;
        h.code = code;
        h.rest = static_cast<std::uint32_t>(in.u16()) << 16 | in.u16();
        h.write(std::span(m).first<icmpv6::Header::kSize>());
        if ((op & 0x40) != 0) {  // a target address of ours (or the peer's)
          const IpAddr& t = (op & 0x08) != 0 ? us : sources[pick % std::size(sources)];
          const auto* b = reinterpret_cast<const std::byte*>(t.bytes().data());
          m.insert(m.end(), b, b + 16);
        }
        const std::vector<std::byte> rest = in.bytes(in.u8());
        m.insert(m.end(), rest.begin(), rest.end());
        if ((op & 0x80) == 0) fix_checksum(m, src, dst, 2);
        push(ipv6_packet(src, dst, ipv6::kIcmpv6, hops, m), ipv6::is_multicast(dst));
        break;
      }
      case 3: {
        // A piece of a UDP datagram to port 7: fragment header, then bytes.
        std::vector<std::byte> frag(ipv6::FragmentHeader::kSize);
        ipv6::FragmentHeader f{ipv6::kUdp, static_cast<std::uint16_t>(in.u16() & 0x1fff), (op & 0x40) != 0,
                               in.u8()};
        f.write(std::span(frag).first<ipv6::FragmentHeader::kSize>());
        std::vector<std::byte> body = in.bytes(in.u16() % 1500);
        if (f.offset_units == 0 && body.size() >= 8) {
          store_be16(body.data(), 5000);
          store_be16(body.data() + 2, 7);
        }
        frag.insert(frag.end(), body.begin(), body.end());
        push(ipv6_packet(addr_of("2001:db8::20"), us, ipv6::kFragment, 64, frag), false);
        break;
      }
      case 4: {
        udp::UdpSocket s = host->udp.socket();
        const IpAddr to = (op & 0x10) != 0 ? addr_of("2001:db8::20") : addr_of("2001:db8:1::5");  // on-link, or via fe80::1
        (void)s.connect(to, Port{9});
        (void)s.send(Msg::copy_of(in.bytes(in.u16() % 3000)));
        for (int i = 0; i < 64 && loop.run_once() != 0; ++i) {
        }
        break;
      }
    }
  }
  echo = udp::UdpSocket();
  to_host = nullptr;
  host.reset();
  return 0;
}

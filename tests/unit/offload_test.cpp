// Checksum offload through the whole stack (docs/checksum.md, "Offload"): the
// pair driver acts as a port that fills requested checksums on transmit and
// flags good ones on receive, as a NIC (or net_tap) does. Each test says what
// must be left to the port, what the port must be trusted for, and that what
// crosses the wire is right whoever computed it.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "xk/checksum.hpp"
#include "xk/clock.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/kinds.hpp"
#include "xk/msg.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/udp.hpp"

namespace xk {
namespace {

constexpr Ipv4Addr kIpA{0xC000020A};  // 192.0.2.10
constexpr Ipv4Addr kIpB{0xC0000214};  // 192.0.2.20

std::string spec(const char* mac, const char* addr, bool offload, const char* link = "wire") {
  return std::string("pair net0 link=") + link + " mac=" + mac + " csum_offload=" + (offload ? "on" : "off") +
         "\n"
         "eth  eth0 below=net0\n"
         "arp  arp0 below=eth0\n"
         "ipv4 ip0  below=eth0,arp0 addr=" +
         addr +
         "\n"
         "icmp icmp0 below=ip0\n"
         "udp  udp0 below=ip0\n";
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<unsigned char>(i * 13 + seed));
  return v;
}

struct Offload2 : ::testing::TestWithParam<std::pair<bool, bool>> {
  ManualClock clock;
  EventLoop loop_a{clock};
  EventLoop loop_b{clock};
  drivers::PairHub hub;
  Registry registry;
  std::unique_ptr<Graph> a;
  std::unique_ptr<Graph> b;

  void build(bool offload_a, bool offload_b) {
    register_all_kinds(registry);
    drivers::register_pair(registry, hub);
    a = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:0a", "192.0.2.10/24", offload_a), registry, &loop_a, "A"));
    b = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:14", "192.0.2.20/24", offload_b), registry, &loop_b, "B"));
  }
  void TearDown() override {
    b.reset();
    a.reset();
  }
  void pump() {
    for (int i = 0; i < 10000; ++i) {
      if (loop_a.run_once() + loop_b.run_once() == 0) return;
    }
    ADD_FAILURE() << "the loops never went idle";
  }
  std::uint64_t counter(Graph& g, const char* proto, const char* name) { return g.find(proto)->counters().value(name); }
  udp::UdpProtocol& udp_of(Graph& g) { return *g.find_as<udp::UdpProtocol>("udp0"); }
};

// Every size from 1 byte to a 9-fragment datagram, echoed through stacks with
// and without offload in every combination: what one side leaves to its port
// the other side's software check must accept, and the reverse.
TEST_P(Offload2, UdpEchoIsIntactWhoeverComputesTheChecksums) {
  auto [offload_a, offload_b] = GetParam();
  build(offload_a, offload_b);
  udp::UdpSocket server = udp_of(*b).socket();
  ASSERT_TRUE(server.bind(Ipv4Addr{}, Port{7}).ok());
  udp::UdpSocket client = udp_of(*a).socket();
  ASSERT_TRUE(client.connect(kIpB, Port{7}).ok());
  std::uint64_t n = 0;
  for (std::size_t size : {1u, 2u, 17u, 1471u, 1472u, 1473u, 3000u, 12000u}) {
    auto sent = pattern(size, static_cast<unsigned>(size));
    ASSERT_TRUE(client.send(std::span<const std::byte>(sent)).ok()) << size;
    pump();
    auto got = server.recvfrom();
    ASSERT_TRUE(got.ok()) << size;
    ASSERT_TRUE(server.sendto(std::move(got->payload), got->from, got->from_port).ok());
    pump();
    auto echo = client.recvfrom();
    ASSERT_TRUE(echo.ok()) << size;
    std::vector<std::byte> back(echo->payload.size());
    ASSERT_TRUE(echo->payload.copy_out(0, back).ok());
    EXPECT_EQ(back, sent) << size;
    ++n;
  }
  for (Graph* g : {a.get(), b.get()}) {
    EXPECT_EQ(counter(*g, "udp0", "drop_bad_csum"), 0u);
    EXPECT_EQ(counter(*g, "ip0", "drop_bad_csum"), 0u);
    EXPECT_EQ(counter(*g, "net0", "drop_bad_offload"), 0u);
  }
  // Who did the work: a side with offload left its checksums to the port
  // (only whole packets: the fragmented ones were finished by ipv4) and
  // trusted the port's verdict on receive; a side without did it all itself.
  auto check_side = [&](Graph& g, bool offload, const char* side) {
    if (offload) {
      EXPECT_EQ(counter(g, "udp0", "tx_csum_by_port"), n) << side;
      EXPECT_EQ(counter(g, "ip0", "tx_l4_csum_resolved"), 3u) << side << ": 1473, 3000 and 12000 are fragmented";
      EXPECT_GT(counter(g, "ip0", "tx_csum_by_port"), n) << side;
      EXPECT_GT(counter(g, "net0", "tx_csum_filled"), 0u) << side;
      EXPECT_EQ(counter(g, "udp0", "rx_csum_by_port"), 5u) << side << ": the unfragmented ones";
      EXPECT_GT(counter(g, "ip0", "rx_csum_by_port"), n) << side;
    } else {
      EXPECT_EQ(counter(g, "udp0", "tx_csum_by_port"), 0u) << side;
      EXPECT_EQ(counter(g, "udp0", "rx_csum_by_port"), 0u) << side;
      EXPECT_EQ(counter(g, "ip0", "tx_csum_by_port"), 0u) << side;
      EXPECT_EQ(counter(g, "ip0", "rx_csum_by_port"), 0u) << side;
    }
  };
  check_side(*a, offload_a, "A");
  check_side(*b, offload_b, "B");
}

INSTANTIATE_TEST_SUITE_P(Combinations, Offload2,
                         ::testing::Values(std::pair{true, true}, std::pair{true, false}, std::pair{false, true},
                                           std::pair{false, false}),
                         [](const auto& p) {
                           return std::string(p.param.first ? "A_on" : "A_off") + "_" +
                                  (p.param.second ? "B_on" : "B_off");
                         });

// A port's "good" is trusted (that is the point of offload), but only where a
// port can have checked: a bad frame it did not flag is still caught, and a
// datagram to ourselves, which no port sees, is finished in software.
TEST_F(Offload2, BadChecksumsThePortDidNotVouchForAreStillDropped) {
  build(true, true);
  udp::UdpSocket server = udp_of(*b).socket();
  ASSERT_TRUE(server.bind(Ipv4Addr{}, Port{9}).ok());
  // Hand B's eth a frame whose UDP checksum is wrong, with no flags: the
  // driver's verification (flag_verified_checksums) is what sets them, and a
  // frame injected above the driver has none.
  auto payload = pattern(100, 1);
  Msg m = Msg::copy_of(payload);
  auto uh = m.push(8);
  ASSERT_TRUE(uh.ok());
  std::byte u[8] = {std::byte{0x30}, std::byte{0x39}, std::byte{0x00}, std::byte{0x09},
                    std::byte{0x00}, std::byte{108},  std::byte{0x12}, std::byte{0x34}};
  std::memcpy(uh->data(), u, 8);
  auto* ip_b = b->find_as<ipv4::Ipv4Protocol>("ip0");
  ASSERT_NE(ip_b, nullptr);
  // Deliver through ipv4's loopback: the datagram to ourselves never meets a
  // port, so nothing vouches for it and udp checks it itself.
  ASSERT_TRUE(ip_b->send(kIpB, 17, std::move(m)).ok());
  pump();
  EXPECT_EQ(counter(*b, "udp0", "drop_bad_csum"), 1u);
  EXPECT_FALSE(server.recvfrom().ok());
}

TEST_F(Offload2, DatagramsToOurselvesAreFinishedInSoftware) {
  build(true, true);
  udp::UdpSocket server = udp_of(*a).socket();
  ASSERT_TRUE(server.bind(Ipv4Addr{}, Port{9}).ok());
  udp::UdpSocket client = udp_of(*a).socket();
  auto sent = pattern(500, 3);
  ASSERT_TRUE(client.sendto(std::span<const std::byte>(sent), kIpA, Port{9}).ok());
  pump();
  auto got = server.recvfrom();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->payload.size(), sent.size());
  EXPECT_EQ(counter(*a, "udp0", "tx_csum_by_port"), 1u) << "udp asked, as for any datagram";
  EXPECT_EQ(counter(*a, "ip0", "tx_l4_csum_resolved"), 1u) << "ipv4 finished it: no port on loopback";
  EXPECT_EQ(counter(*a, "udp0", "drop_bad_csum"), 0u);
  EXPECT_EQ(counter(*a, "udp0", "rx_csum_by_port"), 0u);
}

// The wire carries correct checksums even though the stack wrote none: read
// a frame at the far driver before any flag is set and check it by hand.
TEST(OffloadWire, FramesOnTheWireCarryCorrectChecksums) {
  ManualClock clock;
  EventLoop loop{clock};
  drivers::PairHub hub;
  Registry registry;
  register_all_kinds(registry);
  drivers::register_pair(registry, hub);
  auto g = Graph::build(
      "pair net0 link=w mac=02:00:00:00:00:0a csum_offload=on\n"
      "eth  eth0 below=net0\n"
      "arp  arp0 below=eth0 static=192.0.2.20@02:00:00:00:00:14\n"
      "ipv4 ip0  below=eth0,arp0 addr=192.0.2.10/24\n"
      "udp  udp0 below=ip0\n",
      registry, &loop, "A");
  // The far end: a bare driver whose inbox we read directly.
  drivers::PairDriver far("far", hub.link("w"), {MacAddr{{2, 0, 0, 0, 0, 0x14}}, 1514, 16, false});
  udp::UdpSocket s = g.find_as<udp::UdpProtocol>("udp0")->socket();
  auto data = pattern(333, 5);
  ASSERT_TRUE(s.sendto(std::span<const std::byte>(data), kIpB, Port{4000}).ok());
  ASSERT_EQ(hub.link("w").queued(far.end()), 1u);
  // Take the frame as the far end would receive it, then check by hand.
  struct Grab final : Protocol {
    Grab() : Protocol("grab", "test") {}
    Result<SessionRef> open(Protocol&, Participants&) override { return Errc::unsupported; }
    Status demux(Session&, Msg msg) override {
      frames.push_back(std::move(msg));
      return {};
    }
    std::vector<Msg> frames;
  } grab;
  Participants none;
  ASSERT_TRUE(far.open_enable(grab, none).ok());
  far.poll(8);
  ASSERT_EQ(grab.frames.size(), 1u);
  Msg& f = grab.frames[0];
  EXPECT_EQ(f.offload().flags, 0) << "nothing the sender knew crosses the cable";
  auto bytes = f.peek(14 + 20 + 8);
  ASSERT_TRUE(bytes.ok());
  const std::byte* ip = bytes->data() + 14;
  EXPECT_EQ(csum::fold(csum::partial(ip, 20)), 0xffff) << "IPv4 header checksum filled by the port";
  std::uint32_t pseudo = csum::pseudo_header_v4(kIpA, kIpB, 17, static_cast<std::uint16_t>(8 + data.size()));
  auto sum = csum::partial(f, 14 + 20, 8 + data.size(), pseudo);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(csum::fold(*sum), 0xffff) << "UDP checksum filled by the port";
  EXPECT_EQ(g.find("net0")->counters().value("tx_csum_filled"), 1u);
  EXPECT_TRUE(far.open_disable(grab, none).ok());
}

}  // namespace
}  // namespace xk

// Two complete stacks (pair -> eth -> arp -> ipv4 -> icmp, udp) built from
// graph specs, talking to each other in one process: the layers written
// against fakes must compose for real.
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
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/icmp_wire.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/udp.hpp"

namespace xk {
namespace {

using namespace std::chrono_literals;

constexpr Ipv4Addr kIpA{0xC000020A};  // 192.0.2.10
constexpr Ipv4Addr kIpB{0xC0000214};  // 192.0.2.20

std::string spec(const char* mac, const char* addr) {
  return std::string("pair net0 link=wire mac=") + mac +
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
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<unsigned char>(i * 7 + seed));
  return v;
}

std::vector<std::byte> contents(const Msg& m) {
  std::vector<std::byte> out(m.size());
  EXPECT_TRUE(m.copy_out(0, out).ok());
  return out;
}

struct TwoStacks : ::testing::Test {
  ManualClock clock;
  EventLoop loop_a{clock};
  EventLoop loop_b{clock};
  drivers::PairHub hub;
  Registry registry;
  std::unique_ptr<Graph> a;
  std::unique_ptr<Graph> b;

  void SetUp() override {
    register_all_kinds(registry);
    drivers::register_pair(registry, hub);
    a = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:0a", "192.0.2.10/24"), registry, &loop_a, "A"));
    b = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:14", "192.0.2.20/24"), registry, &loop_b, "B"));
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
  std::uint64_t counter(Graph& g, const char* proto, const char* name) {
    return g.find(proto)->counters().value(name);
  }
  udp::UdpProtocol& udp_of(Graph& g) { return *g.find_as<udp::UdpProtocol>("udp0"); }

  // An ICMP echo request of `n` payload bytes, checksummed.
  static Msg echo_request(std::size_t n, std::uint16_t seq) {
    auto payload = pattern(n, seq);
    Msg m = Msg::copy_of(payload);
    auto h = m.push(icmp::Header::kSize);
    EXPECT_TRUE(h.ok());
    icmp::Header{icmp::kEchoRequest, 0, 0, (0x1234u << 16) | seq}.write(h->first<icmp::Header::kSize>());
    std::uint16_t sum = csum::finish(csum::partial(m));
    std::memcpy(m.fragments()[0].data() + 2, &sum, 2);
    return m;
  }
};

TEST_F(TwoStacks, PingResolvesAndIsAnsweredIncludingFragmentedSizes) {
  auto* ip_a = a->find_as<ipv4::Ipv4Protocol>("ip0");
  ASSERT_NE(ip_a, nullptr);
  std::uint64_t sent = 0;
  for (std::size_t size : {56u, 1472u, 1473u, 4000u, 8000u}) {
    ASSERT_TRUE(ip_a->send(kIpB, 1, echo_request(size, static_cast<std::uint16_t>(sent))).ok()) << size;
    ++sent;
    pump();
    EXPECT_EQ(counter(*b, "icmp0", "rx_echo_request"), sent) << size;
    EXPECT_EQ(counter(*b, "icmp0", "tx_echo_reply"), sent) << size;
    EXPECT_EQ(counter(*a, "icmp0", "rx_echo_reply"), sent) << size;
  }
  EXPECT_EQ(counter(*a, "arp0", "tx_requests"), 1u) << "one resolution, then the cache";
  EXPECT_EQ(counter(*b, "icmp0", "drop_bad_csum"), 0u);
  EXPECT_EQ(counter(*a, "icmp0", "drop_bad_csum"), 0u);
}

TEST_F(TwoStacks, UdpEchoOfEverySizeUpTo60000Bytes) {
  udp::UdpSocket server = udp_of(*b).socket();
  ASSERT_TRUE(server.bind(kIpB, Port{7}).ok());
  udp::UdpSocket client = udp_of(*a).socket();
  ASSERT_TRUE(client.connect(kIpB, Port{7}).ok());
  for (std::size_t size : {1u, 2u, 1471u, 1472u, 1473u, 2960u, 8000u, 30000u, 60000u}) {
    auto data = pattern(size, static_cast<unsigned>(size));
    ASSERT_TRUE(client.send(Msg::copy_of(data)).ok()) << size;
    pump();
    auto got = server.recvfrom();
    ASSERT_TRUE(got.ok()) << "server got nothing for " << size << ": " << to_string(got.error());
    EXPECT_EQ(got->from, kIpA);
    EXPECT_EQ(contents(got->payload), data) << size;
    // Echo the very buffers we received (zero-copy back down the stack).
    ASSERT_TRUE(server.sendto(std::move(got->payload), got->from, got->from_port).ok()) << size;
    pump();
    auto back = client.recvfrom();
    ASSERT_TRUE(back.ok()) << "no echo for " << size << ": " << to_string(back.error());
    EXPECT_EQ(contents(back->payload), data) << size;
  }
  EXPECT_EQ(counter(*a, "udp0", "drop_bad_csum"), 0u);
  EXPECT_EQ(counter(*b, "udp0", "drop_bad_csum"), 0u);
}

TEST_F(TwoStacks, ClosedPortAnswersIcmpAndTheSenderSeesIt) {
  udp::UdpSocket client = udp_of(*a).socket();
  ASSERT_TRUE(client.connect(kIpB, Port{9999}).ok());
  ASSERT_TRUE(client.send(Msg::copy_of(pattern(10, 1))).ok());
  pump();
  EXPECT_EQ(counter(*b, "icmp0", "tx_dest_unreach"), 1u);
  auto r = client.recvfrom();
  EXPECT_EQ(r.error(), Errc::port_unreachable) << "RFC 1122 4.1.3.3: report ICMP to the application";
}

TEST_F(TwoStacks, ChecksumOffOnBothEndsStillDelivers) {
  ASSERT_TRUE(udp_of(*a).control(ctl::SetChecksum{ChecksumMode::off}).ok());
  ASSERT_TRUE(udp_of(*b).control(ctl::SetChecksum{ChecksumMode::off}).ok());
  udp::UdpSocket server = udp_of(*b).socket();
  ASSERT_TRUE(server.bind(kIpB, Port{7}).ok());
  udp::UdpSocket client = udp_of(*a).socket();
  ASSERT_TRUE(client.connect(kIpB, Port{7}).ok());
  auto data = pattern(3000, 3);
  ASSERT_TRUE(client.send(Msg::copy_of(data)).ok());
  pump();
  auto got = server.recvfrom();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(contents(got->payload), data);
}

}  // namespace
}  // namespace xk

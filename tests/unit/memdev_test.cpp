// The memdev driver: frames injected by the program reach the upper that
// enabled the driver when the loop polls it, what the stack sends is kept
// with its time on the loop's clock, both queues are bounded with counted
// drops -- and ipv4 sits on it directly (bare IP: no eth, no arp), which is
// how the packetdrill adapter composes its graph.
#include "doubles.hpp"
#include "xk/drivers/memdev.hpp"
#include "xk/kinds.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "xk/clock.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/ipv4.hpp"

namespace xk {
namespace {

using drivers::MemDev;

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
  return v;
}

std::vector<std::uint8_t> bytes_out(const Msg& m) {
  std::vector<std::uint8_t> v(m.size());
  EXPECT_TRUE(m.copy_out(0, std::as_writable_bytes(std::span(v))).ok());
  return v;
}

using test::Sink;

TEST(MemDev, InjectedFramesGoUpWhenPolledInOrder) {
  ManualClock clock(Time(std::chrono::seconds(5)));
  EventLoop loop(clock);
  MemDev dev("net0", MemDev::Config{}, &loop);
  Sink sink;
  Participants none;
  ASSERT_TRUE(dev.open_enable(sink, none).ok());
  ASSERT_TRUE(dev.inject(bytes_of("one")).ok());
  ASSERT_TRUE(dev.inject(Msg::copy_of(bytes_of("two"))).ok());
  EXPECT_TRUE(sink.texts.empty()) << "nothing moves until the loop runs";
  EXPECT_EQ(dev.inbox_queued(), 2u);
  loop.run_once();
  EXPECT_EQ(sink.texts, (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(dev.counters().value("rx_frames"), 2u);
  ASSERT_TRUE(dev.open_disable(sink, none).ok());
}

TEST(MemDev, SentFramesAreStampedWithTheLoopsClock) {
  ManualClock clock(Time(std::chrono::seconds(5)));
  EventLoop loop(clock);
  MemDev dev("net0", MemDev::Config{}, &loop);
  Sink sink;
  Participants none;
  auto s = dev.open(sink, none);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("a"))).ok());
  clock.advance(std::chrono::milliseconds(40));
  ASSERT_TRUE((*s)->push(Msg::copy_of(bytes_of("b"))).ok());
  auto a = dev.take_sent();
  auto b = dev.take_sent();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(bytes_out(a->frame), std::vector<std::uint8_t>{'a'});
  EXPECT_EQ(a->at, Time(std::chrono::seconds(5)));
  EXPECT_EQ(b->at - a->at, std::chrono::milliseconds(40));
  EXPECT_FALSE(dev.take_sent().has_value());
  EXPECT_EQ(dev.counters().value("tx_frames"), 2u);
}

TEST(MemDev, QueuesAndMtuAreBoundedAndCounted) {
  MemDev::Config c;
  c.mtu = 4;
  c.queue_limit = 2;
  MemDev dev("net0", c);
  Sink sink;
  Participants none;
  EXPECT_EQ(dev.inject(bytes_of("12345")).error(), Errc::too_large);
  EXPECT_TRUE(dev.inject(bytes_of("1")).ok());
  EXPECT_TRUE(dev.inject(bytes_of("2")).ok());
  EXPECT_EQ(dev.inject(bytes_of("3")).error(), Errc::would_block);
  EXPECT_EQ(dev.counters().value("drop_rx_too_big"), 1u);
  EXPECT_EQ(dev.counters().value("drop_rx_full"), 1u);
  // No upper enabled: polled frames are dropped and counted.
  EXPECT_EQ(dev.poll(8), 2u);
  EXPECT_EQ(dev.counters().value("drop_no_receiver"), 2u);
  auto s = dev.open(sink, none);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->push(Msg::copy_of(bytes_of("12345"))).error(), Errc::too_large);
  EXPECT_TRUE((*s)->push(Msg::copy_of(bytes_of("a"))).ok());
  EXPECT_TRUE((*s)->push(Msg::copy_of(bytes_of("b"))).ok());
  EXPECT_EQ((*s)->push(Msg::copy_of(bytes_of("c"))).error(), Errc::would_block);
  EXPECT_EQ(dev.counters().value("drop_tx_too_big"), 1u);
  EXPECT_EQ(dev.counters().value("drop_tx_full"), 1u);
  EXPECT_EQ(dev.control(ctl::GetMtu{}).value(), 4u);
}

// RFC 1071 over big-endian 16-bit words.
std::uint16_t csum(const std::uint8_t* p, std::size_t n) {
  std::uint32_t acc = 0;
  for (std::size_t i = 0; i + 1 < n; i += 2) acc += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
  if (n % 2 != 0) acc += static_cast<std::uint32_t>(p[n - 1] << 8);
  while (acc >> 16 != 0) acc = (acc & 0xFFFF) + (acc >> 16);
  return static_cast<std::uint16_t>(~acc);
}

TEST(MemDev, Ipv4SitsOnItWithoutEthernet) {
  // The packetdrill adapter's graph, with icmp: an echo request injected as a
  // bare IP packet comes back as a bare IP echo reply, through the gateway
  // route (the sender is off-link) with no resolver in the graph.
  Registry reg;
  register_all_kinds(reg);
  ManualClock clock(Time(std::chrono::seconds(1)));
  EventLoop loop(clock);
  Graph g = Graph::build("memdev net0 mtu=1500\n"
                         "ipv4 ip0 below=net0 addr=192.168.0.1/16 gw=192.168.0.2\n"
                         "icmp icmp0 below=ip0\n",
                         reg, &loop);
  auto* dev = g.find_as<MemDev>("net0");
  ASSERT_NE(dev, nullptr);
  std::vector<std::uint8_t> p(28, 0);
  p[0] = 0x45;
  p[3] = 28;
  p[8] = 64;
  p[9] = 1;
  const std::uint8_t src[4] = {192, 0, 2, 1}, dst[4] = {192, 168, 0, 1};
  std::memcpy(&p[12], src, 4);
  std::memcpy(&p[16], dst, 4);
  std::uint16_t c = csum(p.data(), 20);
  p[10] = static_cast<std::uint8_t>(c >> 8);
  p[11] = static_cast<std::uint8_t>(c);
  p[20] = 8;  // echo request, id 0x0102, seq 3
  p[24] = 1;
  p[25] = 2;
  p[27] = 3;
  c = csum(&p[20], 8);
  p[22] = static_cast<std::uint8_t>(c >> 8);
  p[23] = static_cast<std::uint8_t>(c);
  ASSERT_TRUE(dev->inject(std::as_bytes(std::span(p))).ok());
  loop.run_once();
  loop.run_once();
  auto sent = dev->take_sent();
  ASSERT_TRUE(sent.has_value());
  std::vector<std::uint8_t> r = bytes_out(sent->frame);
  ASSERT_EQ(r.size(), 28u) << "an IP packet, no link header";
  EXPECT_EQ(r[0], 0x45);
  EXPECT_EQ(csum(r.data(), 20), 0) << "IP header checksum";
  EXPECT_EQ(r[9], 1);
  EXPECT_EQ(std::memcmp(&r[12], dst, 4), 0);
  EXPECT_EQ(std::memcmp(&r[16], src, 4), 0);
  EXPECT_EQ(r[20], 0) << "echo reply";
  EXPECT_EQ(csum(&r[20], 8), 0) << "ICMP checksum";
  EXPECT_EQ(r[25], 2);
  EXPECT_EQ(r[27], 3);
  EXPECT_EQ(sent->at, Time(std::chrono::seconds(1)));
}

TEST(MemDev, GraphOptionsAreChecked) {
  Registry reg;
  drivers::register_memdev(reg);
  EXPECT_THROW((void)Graph::build("memdev net0 mtu=0\n", reg), GraphError);
  EXPECT_THROW((void)Graph::build("memdev net0 queue=x\n", reg), GraphError);
  Graph g = Graph::build("memdev net0 mtu=9000 queue=8\n", reg);
  auto* dev = g.find_as<MemDev>("net0");
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->config().mtu, 9000u);
  EXPECT_EQ(dev->config().queue_limit, 8u);
}

}  // namespace
}  // namespace xk

#include "xk/counters.hpp"

#include <gtest/gtest.h>

#include "xk/address.hpp"
#include "xk/endpoint.hpp"

namespace xk {
namespace {

TEST(Counters, AddReturnsStableCountersAndDedupes) {
  CounterSet set("tcp0");
  Counter& a = set.add("rx_segments");
  for (int i = 0; i < 100; ++i) set.add("c" + std::to_string(i));  // grow the set
  Counter& again = set.add("rx_segments");
  EXPECT_EQ(&a, &again);
  ++a;
  a.inc(4);
  EXPECT_EQ(set.value("rx_segments"), 5u);
  EXPECT_EQ(set.value("nope"), 0u);
  EXPECT_EQ(set.find("nope"), nullptr);
}

TEST(Counters, TableIsAligned) {
  CounterSet a("eth0"), b("tcp0");
  a.add("rx_frames").inc(12);
  b.add("retransmits").inc(3);
  const CounterSet* sets[] = {&a, &b};
  EXPECT_EQ(counters_table(sets),
            "owner  counter      value\n"
            "eth0   rx_frames    12\n"
            "tcp0   retransmits  3\n");
}

TEST(Counters, JsonEscapesNames) {
  CounterSet a("we\"ird\\");
  a.add("tab\there").inc(1);
  a.add("ctl\x01").inc(2);
  CounterSet empty("none");
  const CounterSet* sets[] = {&a, &empty};
  EXPECT_EQ(counters_json(sets),
            R"({"we\"ird\\":{"tab\there":1,"ctl\u0001":2},"none":{}})");
}

TEST(Address, ParseAndPrintIpv4) {
  auto ip = parse_ipv4("192.0.2.10");
  ASSERT_TRUE(ip.ok());
  EXPECT_EQ(ip->value, 0xC000020Au);
  EXPECT_EQ(to_string(*ip), "192.0.2.10");
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "256.0.0.1", "1.2.3.-4", "1..2.3", "a.b.c.d",
                          "1.2.3.4 ", "01234.1.1.1"}) {
    EXPECT_FALSE(parse_ipv4(bad).ok()) << bad;
  }
}

// One type for both families: an IPv4 address is kept IPv4-mapped
// (::ffff:a.b.c.d, RFC 4291 2.5.5.2) and comes back unchanged.
TEST(Address, IpAddrHoldsEitherFamily) {
  const Ipv4Addr v4{0xC000020A};  // 192.0.2.10
  const IpAddr a(v4);
  EXPECT_TRUE(a.is_v4());
  EXPECT_EQ(a.v4(), v4);
  const IpAddr::Bytes mapped{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 10};
  EXPECT_EQ(a.bytes(), mapped);
  EXPECT_EQ(IpAddr::v6(mapped), a) << "the mapped bytes are the same address";
  EXPECT_EQ(IpAddr(Ipv4Addr{0}).v4(), Ipv4Addr{0});
  EXPECT_TRUE(IpAddr(Ipv4Addr{0}).is_v4()) << "0.0.0.0 is still IPv4";
  EXPECT_FALSE(IpAddr().is_v4()) << ":: is not";
  const IpAddr doc = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10});  // 2001:db8::10
  EXPECT_FALSE(doc.is_v4());
  EXPECT_NE(doc, a);
  const IpAddr::Bytes compat{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 10};  // deprecated ::a.b.c.d
  EXPECT_FALSE(IpAddr::v6(compat).is_v4());
  // Both wildcards are unspecified; nothing else is.
  EXPECT_TRUE(IpAddr().is_unspecified());
  EXPECT_TRUE(IpAddr(Ipv4Addr{0}).is_unspecified());
  EXPECT_FALSE(a.is_unspecified());
  EXPECT_FALSE(doc.is_unspecified());
  // The same answers at compile time.
  static_assert(IpAddr(Ipv4Addr{0xC000020A}).is_v4() && !IpAddr().is_v4());
}

TEST(Address, EndpointsPrintInTheirFamilysForm) {
  EXPECT_EQ(to_string(IpAddr(Ipv4Addr{0xC000020A})), "192.0.2.10");
  const IpAddr doc = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10});
  EXPECT_EQ(to_string(doc), "2001:db8::10");  // RFC 5952: zeros compressed, lower case
  EXPECT_EQ(to_string(Endpoint{Ipv4Addr{0xC000020A}, 80}), "192.0.2.10:80");
  EXPECT_EQ(to_string(Endpoint{doc, 443}), "[2001:db8::10]:443");
  EXPECT_EQ((Endpoint{doc, 443}.family()), Family::v6);
  EXPECT_EQ((Endpoint{Ipv4Addr{1}, 1}).family(), Family::v4);
}

TEST(Address, ParseAndPrintMac) {
  auto mac = parse_mac("02:00:5e:10:00:ff");
  ASSERT_TRUE(mac.ok());
  EXPECT_EQ(to_string(*mac), "02:00:5e:10:00:ff");
  for (const char* bad : {"", "02:00:5e:10:00", "02-00-5e-10-00-ff", "02:00:5e:10:00:fg", "02:00:5e:10:00:ff:"}) {
    EXPECT_FALSE(parse_mac(bad).ok()) << bad;
  }
}

TEST(Participant, PopsTopPartAndChecksType) {
  Participant p{Ipv4Addr{0xC0000201}, Port{80}};
  EXPECT_EQ(p.pop<IpAddr>().error(), Errc::invalid_argument) << "top is the port";
  EXPECT_EQ(p.size(), 2u) << "a wrong-type pop leaves the stack untouched";
  EXPECT_EQ(p.pop<Port>()->value, 80);
  EXPECT_EQ(p.pop<IpAddr>()->v4().value, 0xC0000201u);
  EXPECT_EQ(p.pop<Port>().error(), Errc::not_found);
  EXPECT_EQ(to_string(AddressPart{Port{7}}), "port 7");
}

}  // namespace
}  // namespace xk

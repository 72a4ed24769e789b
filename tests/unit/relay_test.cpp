// The relay micro-protocol's codec (docs/relay-protocol.md): what parse()
// takes and what it refuses. The streams themselves are tested with whole
// stacks in central_test.cpp.

#include <algorithm>
#include <array>
#include <vector>

#include <gtest/gtest.h>

#include "xk/protocols/relay_wire.hpp"

namespace xk::relay {
namespace {

std::vector<std::byte> frame(Header h, std::vector<std::byte> body, std::size_t pad = 0) {
  h.length = static_cast<std::uint16_t>(body.size());
  std::vector<std::byte> f(Header::kSize + body.size() + pad, std::byte{0xee});
  h.write(std::span<std::byte, Header::kSize>(f.data(), Header::kSize));
  for (std::size_t i = 0; i < body.size(); ++i) f[Header::kSize + i] = body[i];
  return f;
}

template <class Body>
std::vector<std::byte> encode(const Body& body) {
  std::array<std::byte, Body::kMaxSize> raw{};
  std::span<const std::byte> b = body.write(raw);
  return {b.begin(), b.end()};
}

std::vector<std::byte> tuple_body() { return encode(TupleBody{Ipv4Addr{0xC000020A}, Ipv4Addr{0xC0000201}, 80, 40000}); }

IpAddr v6(std::uint8_t last) {
  IpAddr::Bytes b{0x20, 0x01, 0x0d, 0xb8};
  b[15] = last;
  return IpAddr::v6(b);
}

TEST(RelayWire, HeaderIsBigEndianAsDocumented) {
  std::array<std::byte, Header::kSize> b{};
  Header{kVersion, Op::credit, 0x0102, 0x80000003, 0x00010000}.write(b);
  const std::array<std::byte, Header::kSize> want{std::byte{1}, std::byte{5}, std::byte{1}, std::byte{2},
                                                  std::byte{0x80}, std::byte{0}, std::byte{0}, std::byte{3},
                                                  std::byte{0}, std::byte{1}, std::byte{0}, std::byte{0}};
  EXPECT_EQ(b, want);
  Header h = Header::read(b);
  EXPECT_EQ(h.op, Op::credit);
  EXPECT_EQ(h.length, 0x0102);
  EXPECT_EQ(h.id, 0x80000003u);
  EXPECT_EQ(h.arg, 0x10000u);
}

TEST(RelayWire, OpenCarriesTheTupleAndPaddingIsIgnored) {
  auto f = frame(Header{kVersion, Op::open, 0, 7, 65536}, tuple_body(), 20);
  Result<Parsed> p = parse(f);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->header.op, Op::open);
  EXPECT_EQ(p->header.arg, 65536u);
  ASSERT_TRUE(p->tuple.has_value());
  EXPECT_EQ(p->tuple->local_addr, (Ipv4Addr{0xC000020A}));
  EXPECT_EQ(p->tuple->remote_addr, (Ipv4Addr{0xC0000201}));
  EXPECT_EQ(p->tuple->local_port, 80);
  EXPECT_EQ(p->tuple->remote_port, 40000);
}

TEST(RelayWire, ConnectCarriesWhereToAndNeedsANodeId) {
  std::vector<std::byte> body = encode(ConnectBody{Ipv4Addr{0xC0000201}, 7, 0});
  ASSERT_EQ(body.size(), ConnectBody::kSize4);
  Result<Parsed> p = parse(frame(Header{kVersion, Op::connect, 0, kNodeIdBit | 1, 4096}, body));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->connect->remote_port, 7);
  EXPECT_EQ(p->connect->remote_addr, (Ipv4Addr{0xC0000201}));
  // filterd's id space: not a node's to use.
  EXPECT_FALSE(parse(frame(Header{kVersion, Op::connect, 0, 1, 4096}, body)).ok());
}

// The body's size says the family; an IPv4 body is as it was before IPv6.
TEST(RelayWire, IPv6BodiesCarryWholeAddressesAndIPv4OnesStayShort) {
  EXPECT_EQ(tuple_body().size(), TupleBody::kSize4);
  const std::vector<std::byte> t6 = encode(TupleBody{v6(0x10), v6(1), 80, 40000});
  ASSERT_EQ(t6.size(), TupleBody::kSize6);
  EXPECT_EQ(t6[0], std::byte{0x20});   // local address first, in network order
  EXPECT_EQ(t6[31], std::byte{1});     // remote address's last byte
  EXPECT_EQ(t6[32], std::byte{0});     // local port 80
  EXPECT_EQ(t6[33], std::byte{80});
  Result<Parsed> p = parse(frame(Header{kVersion, Op::connected, 0, 3, 100}, t6));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->tuple->local_addr, v6(0x10));
  EXPECT_EQ(p->tuple->remote_addr, v6(1));
  EXPECT_FALSE(p->tuple->remote_addr.is_v4());
  EXPECT_EQ(p->tuple->remote_port, 40000);

  const std::vector<std::byte> c6 = encode(ConnectBody{v6(1), 5001, 0});
  ASSERT_EQ(c6.size(), ConnectBody::kSize6);
  p = parse(frame(Header{kVersion, Op::connect, 0, kNodeIdBit | 2, 4096}, c6));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->connect->remote_addr, v6(1));
  EXPECT_EQ(p->connect->remote_port, 5001);
  // The whole largest head fits what the layers peek.
  const auto f = frame(Header{kVersion, Op::open, 0, 4, 100}, t6, 9);
  EXPECT_TRUE(parse(std::span<const std::byte>(f).first(kMaxHead), f.size()).ok());
}

// One encoding per connection: a mapped address in an IPv6 body, the
// unspecified address, or a size of neither family is refused.
TEST(RelayWire, IPv6BodiesRefuseMappedAndUnspecifiedAddresses) {
  std::vector<std::byte> mapped = encode(TupleBody{v6(0x10), v6(1), 80, 40000});
  const IpAddr m{Ipv4Addr{0xC0000201}};
  std::copy(m.bytes().begin(), m.bytes().end(), reinterpret_cast<std::uint8_t*>(mapped.data()) + 16);
  EXPECT_FALSE(parse(frame(Header{kVersion, Op::open, 0, 4, 100}, mapped)).ok());

  std::vector<std::byte> nowhere = encode(ConnectBody{v6(1), 7, 0});
  std::fill(nowhere.begin(), nowhere.begin() + 16, std::byte{0});
  EXPECT_FALSE(parse(frame(Header{kVersion, Op::connect, 0, kNodeIdBit | 2, 4096}, nowhere)).ok());
  EXPECT_FALSE(parse(frame(Header{kVersion, Op::connect, 0, kNodeIdBit | 2, 4096},
                           encode(ConnectBody{Ipv4Addr{}, 7, 0})))
                   .ok());

  std::vector<std::byte> odd = encode(ConnectBody{v6(1), 7, 0});
  odd.pop_back();
  EXPECT_FALSE(parse(frame(Header{kVersion, Op::connect, 0, kNodeIdBit | 2, 4096}, odd)).ok());
}

TEST(RelayWire, DataIsCheckedByLengthOnly) {
  std::vector<std::byte> bytes(100, std::byte{0x42});
  auto f = frame(Header{kVersion, Op::data, 0, 9, 0}, bytes, 3);
  Result<Parsed> p = parse(f);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->header.length, 100);
  // From the first bytes only, as the layers see a chained frame.
  EXPECT_TRUE(parse(std::span<const std::byte>(f).first(kMaxHead), f.size()).ok());
}

TEST(RelayWire, MalformedFramesAreRefused) {
  std::vector<std::vector<std::byte>> bad;
  bad.push_back({});                                                      // empty
  bad.push_back(std::vector<std::byte>(Header::kSize - 1));               // short
  bad.push_back(frame(Header{2, Op::fin, 0, 1, 0}, {}));                  // another version
  bad.push_back(frame(Header{kVersion, static_cast<Op>(99), 0, 1, 0}, {}));  // unknown op
  bad.push_back(frame(Header{kVersion, static_cast<Op>(0), 0, 1, 0}, {}));   // op 0
  bad.push_back(frame(Header{kVersion, Op::fin, 0, 0, 0}, {}));           // id 0
  bad.push_back(frame(Header{kVersion, Op::fin, 0, 1, 5}, {}));           // arg where none is defined
  bad.push_back(frame(Header{kVersion, Op::credit, 0, 1, 0}, {}));        // zero credit
  bad.push_back(frame(Header{kVersion, Op::data, 0, 1, 0}, {}));          // DATA with no bytes
  bad.push_back(frame(Header{kVersion, Op::data, 0, 1, 7}, {std::byte{1}}));  // DATA with an arg
  bad.push_back(frame(Header{kVersion, Op::rst, 0, 1, 0}, {}));           // RST without a code
  bad.push_back(frame(Header{kVersion, Op::rst, 0, 1, 99}, {}));          // unknown code
  bad.push_back(frame(Header{kVersion, Op::open, 0, 1, 10}, {std::byte{1}, std::byte{2}}));  // short tuple
  bad.push_back(frame(Header{kVersion, Op::fin, 0, 1, 0}, {std::byte{1}}));  // FIN with a body
  {
    auto t = tuple_body();
    t[8] = t[9] = std::byte{0};  // local port 0
    bad.push_back(frame(Header{kVersion, Op::connected, 0, 1, 10}, t));
  }
  {
    auto f = frame(Header{kVersion, Op::data, 0, 1, 0}, std::vector<std::byte>(50));
    f.resize(f.size() - 1);  // length past the end
    bad.push_back(f);
  }
  for (std::size_t i = 0; i < bad.size(); ++i) {
    EXPECT_FALSE(parse(bad[i]).ok()) << "case " << i;
  }
}

TEST(RelayWire, FramesAreBuiltWithTheirLength) {
  std::byte body[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
  Result<Msg> m = make_frame(Header{kVersion, Op::credit, 99, 5, 1000}, {});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(), Header::kSize);
  Msg d = Msg::copy_of(body);
  ASSERT_TRUE(prepend_header(d, Header{kVersion, Op::data, 0, 5, 0}).ok());
  ASSERT_EQ(d.size(), Header::kSize + 3);
  std::vector<std::byte> flat(d.size());
  ASSERT_TRUE(d.copy_out(0, flat).ok());
  Result<Parsed> p = parse(flat);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->header.length, 3);
  EXPECT_EQ(to_string(Op::connected), std::string("CONNECTED"));
  EXPECT_EQ(errc_of(rst_code_of(Errc::refused)), Errc::refused);
  EXPECT_EQ(errc_of(RstCode::no_listener), Errc::refused);
  EXPECT_EQ(errc_of(rst_code_of(Errc::timed_out)), Errc::timed_out);
}

}  // namespace
}  // namespace xk::relay

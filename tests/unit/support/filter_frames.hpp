#pragma once
// Ethernet frames and transport headers for filterd's tests (filter_test,
// filter_v6_test), built with the protocols' wire headers.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/icmp_wire.hpp"
#include "xk/protocols/tcp_wire.hpp"
#include "xk/protocols/udp_wire.hpp"

namespace xk::filterd::frames {

using Bytes = std::vector<std::byte>;

inline constexpr MacAddr kSharedMac{{0x02, 0, 0, 0, 0, 0x0a}};
inline constexpr MacAddr kPeerMac{{0x02, 0, 0, 0, 0, 0x01}};
inline constexpr MacAddr kOtherMac{{0x02, 0, 0, 0, 0, 0x63}};

// Out of line: inlined into callers whose payload sizes GCC cannot bound,
// it warns of a copy of 2^64 - 13 bytes (-Wstringop-overflow).
[[gnu::noinline]] inline Bytes eth_frame(MacAddr dst, std::uint16_t type, std::span<const std::byte> payload, bool pad = true) {
  Bytes f(eth::Header::kSize + payload.size());
  eth::Header{dst, kPeerMac, type}.write(std::span<std::byte, eth::Header::kSize>(f.data(), eth::Header::kSize));
  std::copy(payload.begin(), payload.end(), f.begin() + eth::Header::kSize);
  if (pad && f.size() < eth::kMinFrame) f.resize(eth::kMinFrame);
  return f;
}

inline Bytes tcp_segment(std::uint16_t sport, std::uint16_t dport, std::uint8_t flags, std::size_t payload = 0) {
  Bytes s(tcp::Header::kMinSize + payload);
  tcp::Header h;
  h.src_port = sport;
  h.dst_port = dport;
  h.seq = tcp::SeqNum(1000);
  h.ack = tcp::SeqNum((flags & tcp::kAck) != 0 ? 2000 : 0);
  h.flags = flags;
  h.window = 65535;
  h.write(std::span<std::byte, tcp::Header::kMinSize>(s.data(), tcp::Header::kMinSize));
  for (std::size_t i = 0; i < payload; ++i) s[tcp::Header::kMinSize + i] = static_cast<std::byte>(i);
  return s;
}

inline Bytes udp_datagram(std::uint16_t sport, std::uint16_t dport, std::size_t payload = 8) {
  Bytes d(udp::Header::kSize + payload);
  udp::Header{sport, dport, static_cast<std::uint16_t>(d.size()), 0}.write(
      std::span<std::byte, udp::Header::kSize>(d.data(), udp::Header::kSize));
  for (std::size_t i = 0; i < payload; ++i) d[udp::Header::kSize + i] = static_cast<std::byte>(i * 7);
  return d;
}

inline Bytes icmp_message(std::uint8_t type, std::uint8_t code, std::uint32_t rest, std::span<const std::byte> body = {}) {
  Bytes m(icmp::Header::kSize + body.size());
  icmp::Header{type, code, 0, rest}.write(std::span<std::byte, icmp::Header::kSize>(m.data(), icmp::Header::kSize));
  if (!body.empty()) std::memcpy(m.data() + icmp::Header::kSize, body.data(), body.size());
  return m;
}

}  // namespace xk::filterd::frames

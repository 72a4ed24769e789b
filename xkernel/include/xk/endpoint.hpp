#pragma once
// The ends of a transport flow, in either address family.
//
// Endpoint is one end -- an address and a port -- and FourTuple a flow's two
// ends as this host sees them. Both are plain keys (no padding bytes): the
// transports' demux maps key connections by the FourTuple itself, so an IPv6
// connection is one more entry in the same map, not a map of its own.
// Addresses are IpAddr (xk/ip_addr.hpp): an IPv4 end is kept in its mapped
// form, and one type, one comparison and one hash serve both families.

#include <cstdint>
#include <string>

#include "xk/ip_addr.hpp"

namespace xk {

enum class Family : std::uint8_t { v4, v6 };

constexpr Family family_of(const IpAddr& a) noexcept { return a.is_v4() ? Family::v4 : Family::v6; }

struct Endpoint {
  IpAddr addr;
  std::uint16_t port = 0;

  constexpr Family family() const noexcept { return family_of(addr); }
  friend constexpr bool operator==(const Endpoint&, const Endpoint&) = default;
};

struct FourTuple {
  Endpoint local;
  Endpoint remote;

  constexpr Family family() const noexcept { return local.family(); }
  friend constexpr bool operator==(const FourTuple&, const FourTuple&) = default;
};

// "192.0.2.1:80", "[2001:db8::1]:80".
std::string to_string(const Endpoint& e);

// What a listener or a bound socket takes (one rule for TCP and UDP, as
// Linux has it with net.ipv6.bindv6only=0):
//   ::           every address of both families -- or, `v6only`
//                (IPV6_V6ONLY), every IPv6 address alone;
//   0.0.0.0      every IPv4 address;
//   an address   that address.
struct BindScope {
  IpAddr addr;
  bool v6only = false;  // meaningful for :: only

  // Whether a packet to `dst` is this bind's.
  bool covers(const IpAddr& dst) const noexcept;
  // Two binds of one port that would both take some packet (each the
  // other's dst, wildcards included) may not coexist.
  friend bool overlap(const BindScope& a, const BindScope& b) noexcept;
};

// The unspecified address of IPv4, 0.0.0.0 (its mapped form).
inline constexpr IpAddr kAnyIpv4 = IpAddr(Ipv4Addr{});

}  // namespace xk

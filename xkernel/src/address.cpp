#include "xk/address.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstdio>

#include "xk/endpoint.hpp"

namespace xk {

std::string to_string(const MacAddr& a) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", a.bytes[0], a.bytes[1], a.bytes[2],
                a.bytes[3], a.bytes[4], a.bytes[5]);
  return buf;
}

std::string to_string(const Ipv4Addr& a) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", (a.value >> 24) & 0xff, (a.value >> 16) & 0xff,
                (a.value >> 8) & 0xff, a.value & 0xff);
  return buf;
}

std::string to_string(const IpAddr& a) {
  if (a.is_v4()) return to_string(a.v4());
  char buf[INET6_ADDRSTRLEN];
  return inet_ntop(AF_INET6, a.bytes().data(), buf, sizeof buf) != nullptr ? buf : "?";
}

std::string to_string(const Endpoint& e) {
  const std::string port = ":" + std::to_string(e.port);
  return e.addr.is_v4() ? to_string(e.addr) + port : "[" + to_string(e.addr) + "]" + port;
}

bool BindScope::covers(const IpAddr& dst) const noexcept {
  if (addr == IpAddr{}) return !(v6only && dst.is_v4());
  if (addr == kAnyIpv4) return dst.is_v4();
  return addr == dst;
}

bool overlap(const BindScope& a, const BindScope& b) noexcept {
  // A wildcard, as a destination, stands for its whole scope: covers()
  // sees 0.0.0.0 as an IPv4 address and :: as an IPv6 one.
  return a.covers(b.addr) || b.covers(a.addr);
}

std::string to_string(const AddressPart& a) {
  struct Visitor {
    std::string operator()(const MacAddr& m) const { return "mac " + to_string(m); }
    std::string operator()(const IpAddr& ip) const { return "ip " + to_string(ip); }
    std::string operator()(const Port& p) const { return "port " + std::to_string(p.value); }
    std::string operator()(const ProtoNum& p) const { return "proto " + std::to_string(p.value); }
  };
  return std::visit(Visitor{}, a);
}

Result<Ipv4Addr> parse_ipv4(std::string_view text) {
  std::uint32_t value = 0;
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 4; ++i) {
    if (i > 0) {
      if (p == end || *p != '.') return Errc::invalid_argument;
      ++p;
    }
    // Reject leading '+'/'-' and empty groups; from_chars accepts neither anyway.
    if (p == end || *p < '0' || *p > '9') return Errc::invalid_argument;
    unsigned octet = 0;
    auto [next, ec] = std::from_chars(p, end, octet);
    if (ec != std::errc() || octet > 255 || next - p > 3) return Errc::invalid_argument;
    value = (value << 8) | octet;
    p = next;
  }
  if (p != end) return Errc::invalid_argument;
  return Ipv4Addr{value};
}

Result<IpAddr> parse_ip(std::string_view text) {
  if (text.find(':') == std::string_view::npos) {
    Result<Ipv4Addr> v4 = parse_ipv4(text);
    if (!v4) return v4.error();
    return IpAddr(*v4);
  }
  // inet_pton wants a terminated string; no IPv6 text is longer than this.
  char buf[INET6_ADDRSTRLEN];
  if (text.size() >= sizeof buf) return Errc::invalid_argument;
  text.copy(buf, text.size());
  buf[text.size()] = '\0';
  IpAddr::Bytes b;
  if (inet_pton(AF_INET6, buf, b.data()) != 1) return Errc::invalid_argument;
  return IpAddr::from_bytes(b);
}

Result<MacAddr> parse_mac(std::string_view text) {
  if (text.size() != 17) return Errc::invalid_argument;
  MacAddr mac;
  for (int i = 0; i < 6; ++i) {
    const char* p = text.data() + i * 3;
    if (i < 5 && p[2] != ':') return Errc::invalid_argument;
    unsigned byte = 0;
    auto [next, ec] = std::from_chars(p, p + 2, byte, 16);
    if (ec != std::errc() || next != p + 2) return Errc::invalid_argument;
    mac.bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(byte);
  }
  return mac;
}

}  // namespace xk

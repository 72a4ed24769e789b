#pragma once
// Addresses and participants (x-kernel's "participant list").
//
// A participant is a stack of address parts, one per layer. The caller of
// open() pushes the lowest layer's part first and its own layer's part last;
// each protocol pops the part it understands and hands the rest to the
// protocol below. Participants come in pairs: local and remote.

#include <array>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "xk/ip_addr.hpp"
#include "xk/result.hpp"

namespace xk {

struct MacAddr {
  std::array<std::uint8_t, 6> bytes{};
  friend bool operator==(const MacAddr&, const MacAddr&) = default;
};


// A transport port (TCP, UDP).
struct Port {
  std::uint16_t value = 0;
  friend bool operator==(const Port&, const Port&) = default;
};

// A protocol number: an EtherType, an IP protocol number, a demux tag.
struct ProtoNum {
  std::uint32_t value = 0;
  friend bool operator==(const ProtoNum&, const ProtoNum&) = default;
};

// One layer's part of a participant. An IP address is of either family
// (an IPv4 one pushed as Ipv4Addr becomes its mapped IpAddr); the IP layer
// of that family takes it.
using AddressPart = std::variant<MacAddr, IpAddr, Port, ProtoNum>;

std::string to_string(const MacAddr& a);
std::string to_string(const Ipv4Addr& a);
// Dotted quad for an IPv4 address, RFC 5952 text for an IPv6 one.
std::string to_string(const IpAddr& a);
std::string to_string(const AddressPart& a);
// Parse dotted quad ("192.0.2.1") and colon MAC ("02:00:00:00:00:01").
Result<Ipv4Addr> parse_ipv4(std::string_view text);
// An address of either family: a dotted quad, or IPv6 text (RFC 4291 2.2,
// "2001:db8::10", "::ffff:192.0.2.1" being the IPv4 address).
Result<IpAddr> parse_ip(std::string_view text);
Result<MacAddr> parse_mac(std::string_view text);

class Participant {
 public:
  Participant() = default;
  Participant(std::initializer_list<AddressPart> bottom_first) : parts_(bottom_first) {}

  void push(AddressPart part) { parts_.push_back(part); }

  // Pop the top part if it holds a T. A wrong type is invalid_argument and the
  // stack is left untouched; an empty stack is not_found.
  template <class T>
  Result<T> pop() {
    Result<T> r = peek<T>();
    if (r) parts_.pop_back();
    return r;
  }
  template <class T>
  Result<T> peek() const {
    if (parts_.empty()) return Errc::not_found;
    if (const T* v = std::get_if<T>(&parts_.back())) return *v;
    return Errc::invalid_argument;
  }

  bool empty() const noexcept { return parts_.empty(); }
  std::size_t size() const noexcept { return parts_.size(); }
  const std::vector<AddressPart>& parts() const noexcept { return parts_; }
  friend bool operator==(const Participant&, const Participant&) = default;

 private:
  std::vector<AddressPart> parts_;  // back() is the top
};

struct Participants {
  Participant local;
  Participant remote;
};

}  // namespace xk

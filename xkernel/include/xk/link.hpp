#pragma once
// The seam between a network layer and address resolution.
//
// ipv4 sits on a link (below[0]: eth, or a driver carrying bare IP packets)
// and, on broadcast links, on a resolver (below[1]: arp). It hands every
// outgoing packet with its next hop to the resolver, which finds the link
// address, queues the packet (bounded) while a resolution is pending, and
// sends it through the link. Keeping this an interface lets ipv4 run over
// links without ARP (point-to-point, packetdrill's bare IP) and lets ipv6 sit
// on Neighbor Discovery (nd) the same way. A resolver serves one family and
// refuses the other's addresses (unsupported).

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "xk/address.hpp"
#include "xk/counters.hpp"
#include "xk/msg.hpp"
#include "xk/protocol.hpp"
#include "xk/result.hpp"

namespace xk {

// What a router advertised (IPv6, RFC 4861 6.3.4), read and checked by the
// resolver (nd), for the network layer to configure itself from: a
// default router, on-link prefixes, addresses of its own (RFC 4862 5.5.3),
// the link's MTU and hop limit.
struct RouterAdvert {
  struct Prefix {
    IpAddr prefix;
    std::uint8_t length = 0;
    bool on_link = false;     // L: addresses on it are neighbours
    bool autonomous = false;  // A: form an address on it
    std::uint32_t valid_s = 0, preferred_s = 0;  // 0xffffffff: for ever
  };
  IpAddr router;               // its link-local address
  std::uint16_t lifetime_s = 0;  // as a default router; 0: not one (any more)
  std::uint8_t hop_limit = 0;    // 0: unspecified
  std::optional<std::uint32_t> mtu;
  std::vector<Prefix> prefixes;
};

// The network layer's side of Router Advertisements.
class RouterSink {
 public:
  virtual ~RouterSink() = default;
  virtual void router_advert(const RouterAdvert& ra) = 0;
};

class NextHopResolver {
 public:
  virtual ~NextHopResolver() = default;

  // Send an IP packet (header included) to the neighbour `next_hop`.
  // Ok when sent or queued for resolution; would_block when the pending queue
  // is full (the packet is dropped and counted); no_route when resolution has
  // failed recently for that neighbour (RFC 1122 2.3.2.2: report, do not retry
  // at once).
  virtual Status send_to(const IpAddr& next_hop, Msg packet) = 0;

  // The network layer tells the resolver which addresses are ours, so it
  // answers requests for them (and may announce them: gratuitous ARP), or
  // checks first that nobody else has them (IPv6 DAD).
  virtual void add_local_address(const IpAddr& addr) = 0;
  // Whether `addr`, one of ours, may be used: false while a duplicate check
  // runs (RFC 4862 "tentative") and after it found a duplicate.
  virtual bool address_usable(const IpAddr& addr) const { return !addr.is_unspecified(); }
  // Router Advertisements go to `sink` (null: nobody takes them), and the
  // resolver solicits them (RFC 4861 6.3.7). A resolver without routers
  // (ARP) ignores it.
  virtual void set_router_sink(RouterSink* /*sink*/) {}
};

// A network layer's protocols below: the link, and the resolver when it has
// one (a resolver is a Protocol too).
inline std::vector<Protocol*> link_and_resolver(Protocol& link, NextHopResolver* resolver) {
  std::vector<Protocol*> v{&link};
  if (auto* p = dynamic_cast<Protocol*>(resolver)) v.push_back(p);
  return v;
}

// A network layer's below[1] in a graph spec, as its resolver: null when
// there is none; std::invalid_argument when it is no resolver (`example`
// names the kind that would be).
inline NextHopResolver* resolver_below(const std::vector<Protocol*>& below, const std::string& example) {
  if (below.size() < 2) return nullptr;
  if (auto* r = dynamic_cast<NextHopResolver*>(below[1])) return r;
  throw std::invalid_argument("below[1] '" + below[1]->name() + "' (kind " + below[1]->kind() +
                              ") is not a next-hop resolver; name one like " + example + ", or only the link");
}

// The upper of the link sessions a resolver opens for the network layer's
// packets: frames that arrive on one while no network layer has enabled
// their EtherType (eth hands them to the one that does, once there is one)
// are counted and dropped here.
class ResolverDataSink final : public Protocol {
 public:
  ResolverDataSink(std::string name, Counter& drops) : Protocol(std::move(name), "resolver-data"), drops_(drops) {}
  Status demux(Session&, Msg) override {
    ++drops_;
    return Errc::not_found;
  }

 private:
  Counter& drops_;
};

}  // namespace xk

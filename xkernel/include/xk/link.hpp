#pragma once
// The seam between a network layer and address resolution.
//
// ipv4 sits on a link (below[0]: eth, or a driver carrying bare IP packets)
// and, on broadcast links, on a resolver (below[1]: arp). It hands every
// outgoing packet with its next hop to the resolver, which finds the link
// address, queues the packet (bounded) while a resolution is pending, and
// sends it through the link. Keeping this an interface lets ipv4 run over
// links without ARP (point-to-point, packetdrill's bare IP) and lets another
// resolver (static tables, IPv6 ND later) take ARP's place.

#include "xk/address.hpp"
#include "xk/msg.hpp"
#include "xk/result.hpp"

namespace xk {

class NextHopResolver {
 public:
  virtual ~NextHopResolver() = default;

  // Send an IPv4 packet (header included) to the neighbour `next_hop`.
  // Ok when sent or queued for resolution; would_block when the pending queue
  // is full (the packet is dropped and counted); no_route when resolution has
  // failed recently for that neighbour (RFC 1122 2.3.2.2: report, do not retry
  // at once).
  virtual Status send_to(Ipv4Addr next_hop, Msg packet) = 0;

  // The network layer tells the resolver which addresses are ours, so it
  // answers requests for them (and may announce them: gratuitous ARP).
  virtual void add_local_address(Ipv4Addr addr) = 0;
};

}  // namespace xk

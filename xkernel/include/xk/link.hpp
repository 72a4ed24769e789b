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

#include "xk/address.hpp"
#include "xk/msg.hpp"
#include "xk/result.hpp"

namespace xk {

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
};

}  // namespace xk

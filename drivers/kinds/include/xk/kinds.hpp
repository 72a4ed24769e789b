#pragma once
// The one list of kinds: every protocol and driver this build has, by the
// name a graph spec gives it (docs/graph-spec.md). A program that builds
// graphs starts from it and adds its own (filterd its steer layer, a test
// its in-process pair link).

#include "xk/graph.hpp"

namespace xk {

// eth, arp, ipv4, icmp, udp, tcp, relay, fault, and capture when libpcap
// was found; the drivers shm, loopback, memdev, and dpdk when DPDK was.
void register_all_kinds(Registry& registry);

}  // namespace xk

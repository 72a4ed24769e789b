#include "xk/kinds.hpp"

#ifdef XK_HAVE_DPDK
#include "xk/drivers/dpdk.hpp"
#endif
#ifdef XK_HAVE_CAPTURE
#include "xk/protocols/capture.hpp"
#endif
#include "xk/drivers/loopback.hpp"
#include "xk/drivers/memdev.hpp"
#include "xk/drivers/shm.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/fault.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/icmpv6.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/ipv6.hpp"
#include "xk/protocols/nd.hpp"
#include "xk/protocols/relay.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk {

void register_all_kinds(Registry& registry) {
#ifdef XK_HAVE_DPDK
  drivers::register_dpdk(registry);
#endif
#ifdef XK_HAVE_CAPTURE
  capture::register_capture(registry);
#endif
  drivers::register_loopback(registry);
  drivers::register_memdev(registry);
  drivers::register_shm(registry);
  fault::register_fault(registry);
  eth::register_eth(registry);
  arp::register_arp(registry);
  ipv4::register_ipv4(registry);
  icmp::register_icmp(registry);
  nd::register_nd(registry);
  ipv6::register_ipv6(registry);
  icmpv6::register_icmpv6(registry);
  udp::register_udp(registry);
  tcp::register_tcp(registry);
  relay::register_relay(registry);
}

}  // namespace xk

// libFuzzer harness: the graph spec parser and builder (xk/graph.hpp). The
// input is a spec's text, checked against a registry of every in-process kind
// (no dpdk, no capture: those reach outside the process). A spec that parses
// must print back to a spec that parses to the same text (the canonical form
// is a fixed point), and must then build or fail with a GraphError -- never
// crash, throw anything else, or leak.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "xk/clock.hpp"
#include "xk/drivers/loopback.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/fault.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/template.hpp"
#include "xk/protocols/udp.hpp"

namespace {

// Only kinds that stay inside the process: not the one list of
// xk/kinds.hpp, whose dpdk, shm and capture would open ports, sockets and
// files named by the fuzzer's input.
struct Kinds {
  xk::drivers::PairHub hub;
  xk::Registry registry;
  Kinds() {
    xk::drivers::register_pair(registry, hub);
    xk::drivers::register_loopback(registry);
    xk::eth::register_eth(registry);
    xk::arp::register_arp(registry);
    xk::ipv4::register_ipv4(registry);
    xk::icmp::register_icmp(registry);
    xk::udp::register_udp(registry);
    xk::tcp::register_tcp(registry);
    xk::fault::register_fault(registry);
    xk::tmpl::register_template(registry);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Specs are a few lines; larger inputs only slow the search down.
  if (size > 4096) return -1;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // A fresh hub per input: pair links hold the ends a graph took.
  Kinds kinds;
  std::optional<xk::GraphSpec> spec;
  try {
    spec = xk::GraphSpec::parse(text, kinds.registry, "fuzz");
  } catch (const xk::GraphError&) {
    return 0;
  }
  const std::string canonical = spec->to_string(false);
  try {
    xk::GraphSpec again = xk::GraphSpec::parse(canonical, kinds.registry, "canonical");
    if (again.to_string(false) != canonical) std::abort();  // not a fixed point
  } catch (const xk::GraphError&) {
    std::abort();  // the canonical form of a good spec must parse
  }
  xk::ManualClock clock;
  xk::EventLoop loop{clock};
  try {
    xk::Graph g = xk::Graph::build(std::move(*spec), &loop);
    for (int i = 0; i < 4; ++i) loop.run_once();
  } catch (const xk::GraphError&) {
  }
  return 0;
}

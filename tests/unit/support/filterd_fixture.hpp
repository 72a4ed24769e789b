#pragma once
// filterd's data path with two nodes behind it, all over pair links on one
// event loop (steer_test, central_test): a peer on the external link,
// filterd's graph (steer under its own stack, a channel per node -- and a
// node port if asked), and the two nodes' stacks, with their channels
// attached to steer. What the nodes run and how ports are agreed is the
// suite's own.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "run_until.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/steer.hpp"
#include "xk/graph.hpp"
#include "xk/kinds.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/nd.hpp"
#include "xk/protocols/relay.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk::test {

namespace fd = xk::filterd;

inline const MacAddr kNode1{{0x02, 0, 0, 0, 1, 1}};
inline const MacAddr kNode2{{0x02, 0, 0, 0, 1, 2}};

// Every kind a filterd-and-nodes world over pair links uses: the product's
// list, the test links and filterd's steer.
inline void register_filterd_kinds(Registry& registry, drivers::PairHub& hub) {
  register_all_kinds(registry);
  drivers::register_pair(registry, hub);
  xk::filterd::register_steer(registry);
}

// What the control socket will do: the node asks, filterd installs the rule
// (steer_test, steer_v6_test).
class DirectAuthority final : public PortAuthority {
 public:
  DirectAuthority(fd::FilterEngine& f, fd::NodeId node) : f_(f), node_(node) {}
  Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool) override {
    if (Status st = f_.listen(static_cast<fd::Proto>(proto), port, fd::Target{node_, 0}); !st) return st.error();
    return port;
  }
  void release_listen(std::uint8_t proto, std::uint16_t port) noexcept override {
    (void)f_.unlisten(static_cast<fd::Proto>(proto), port);
  }
  Result<std::uint16_t> claim_connect(std::uint8_t proto, std::uint16_t port, const IpAddr& remote,
                                      std::uint16_t remote_port) override {
    std::uint16_t p = port != 0 ? port : next_++;
    if (Status st = f_.add_flow(fd::FlowKey{static_cast<fd::Proto>(proto), remote, remote_port, p}, fd::Target{node_, 0}); !st) {
      return st.error();
    }
    return p;
  }
  void release_connect(std::uint8_t proto, std::uint16_t port, const IpAddr& remote, std::uint16_t remote_port) noexcept override {
    (void)f_.remove_flow(fd::FlowKey{static_cast<fd::Proto>(proto), remote, remote_port, port});
  }

 private:
  fd::FilterEngine& f_;
  fd::NodeId node_;
  std::uint16_t next_ = 50000;
};

class FilterdWithNodes : public ::testing::Test {
 public:
  struct Setup {
    std::string peer_stack;      // the graph on the external link ("link=ext")
    std::size_t channel_queue = 4096;
    bool node_port = false;      // np0: nodes on other hosts, known by their MACs
    std::string filterd_tcp;     // options of filterd's tcp0
    // The shared IPv6 address/prefix: filterd's graph gains nd/ipv6/icmpv6
    // for it (no duplicate check: the tests' links hold nobody else).
    std::string shared6;
    // A node's graph, on pair link `link` with MAC `mac`.
    std::function<std::string(const std::string& link, const std::string& mac)> node_stack;
  };

  void build(const Setup& s) {
    register_filterd_kinds(registry, hub);
    peer.emplace(Graph::build(s.peer_stack, registry, &loop, "peer"));
    const std::string q = " queue=" + std::to_string(s.channel_queue) + "\n";
    const bool v6 = !s.shared6.empty();
    const std::string ips = v6 ? "ip0,ip6" : "ip0";
    filterd.emplace(Graph::build(
        "pair  net0 link=ext mac=02:00:00:00:00:10 queue=4096\n"
        // The channels before steer: built first, destroyed after it.
        "pair  ch1  link=node1 mac=02:78:6b:00:00:01" + q +
        "pair  ch2  link=node2 mac=02:78:6b:00:00:01" + q +
        (s.node_port ? "pair  np0  link=nodeport mac=02:78:6b:00:00:99 queue=4096\n" : "") +
        "steer st0  below=net0 addr=192.0.2.10/24" + (v6 ? " addr6=" + s.shared6 : "") + "\n"
        "eth   eth0 below=st0\n"
        "arp   arp0 below=eth0\n"
        "ipv4  ip0  below=eth0,arp0 addr=192.0.2.10/24\n"
        "icmp  icmp0 below=ip0\n" +
        (v6 ? "nd    nd0  below=eth0 dad=0 mld=off\n"
              "ipv6  ip6  below=eth0,nd0 addr=" + s.shared6 + "\n"
              "icmpv6 icmp6 below=ip6,nd0\n" : "") +
        "udp   udp0 below=" + ips + "\n"
        "tcp   tcp0 below=" + ips + (s.filterd_tcp.empty() ? "" : " " + s.filterd_tcp) + "\n",
        registry, &loop, "filterd"));
    node1.emplace(Graph::build(s.node_stack("node1", "02:00:00:00:01:01"), registry, &loop, "node1"));
    node2.emplace(Graph::build(s.node_stack("node2", "02:00:00:00:01:02"), registry, &loop, "node2"));
    steer = filterd->find_as<xk::filterd::Steer>("st0");
    steer->set_resolver(filterd->find_as<arp::ArpProtocol>("arp0"));
    if (v6) steer->set_resolver6(filterd->find_as<nd::NdProtocol>("nd0"));
    ASSERT_TRUE(steer->attach(1, *filterd->find("ch1"), kNode1).ok());
    ASSERT_TRUE(steer->attach(2, *filterd->find("ch2"), kNode2).ok());
  }
  // The nodes first, then filterd, then the peer.
  void tear_down() {
    node2.reset();
    node1.reset();
    filterd.reset();
    peer.reset();
  }

  static tcp::TcpProtocol& tcp_of(Graph& g) { return *g.find_as<tcp::TcpProtocol>("tcp0"); }
  static udp::UdpProtocol& udp_of(Graph& g) { return *g.find_as<udp::UdpProtocol>("udp0"); }
  std::uint64_t steer_counter(const char* name) { return steer->counters().value(name); }
  template <class F>
  bool run_until(F&& done, std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    return test::run_until(loop, std::forward<F>(done), limit);
  }

  EventLoop loop;
  drivers::PairHub hub;
  Registry registry;
  std::optional<Graph> peer, filterd, node1, node2;
  xk::filterd::Steer* steer = nullptr;
};

}  // namespace xk::test

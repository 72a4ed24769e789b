// filterd: the I/O-node daemon (docs/filterd.md).
//
//   filterd --port DEVARGS --ip A.B.C.D/N [--gw A.B.C.D] [--control PATH]
//           [--memif-socket PATH] [--channels shm|memif] [--port-opts 'K=V ..'] [--secret HEX32]
//           [--mode steer|central] [--csum on|off] [--tcp-opts 'K=V ..']
//           [--control-tcp A.B.C.D:PORT --control-token FILE]
//           [--node-port DEVARGS [--node-port-opts 'K=V ..']] [--heartbeat-ms MS]
//
// Owns the external port and the shared address; nodes register on the
// control socket and get a channel each -- net_memif, or our own shm link
// (filterd is the server, one interface per node queue, made when the node
// says HELLO); every frame
// of a node's flow goes straight to its channel. Nodes on other hosts
// register over TCP and are reached through the node port, by their MAC.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "xk/counters.hpp"
#include "xk/drivers/dpdk.hpp"
#include "xk/drivers/shm.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/central.hpp"
#include "xk/filterd/channels.hpp"
#include "xk/filterd/control_server.hpp"
#include "xk/filterd/registry.hpp"
#include "xk/filterd/steer.hpp"
#include "xk/filterd/token.hpp"
#include "xk/graph.hpp"
#include "xk/kinds.hpp"
#include "xk/options.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/nd.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/timer.hpp"

namespace {

using namespace xk;
using namespace xk::filterd;

constexpr const char* kUsage =
    R"(usage: filterd --port DEVARGS --ip A.B.C.D/N [options]

The I/O-node daemon: owns the external port and the shared address, and steers
every frame to the compute node that owns its flow (docs/filterd.md).

  --port DEVARGS        the external DPDK port, e.g. net_af_packet0,iface=veth1
  --port-opts 'K=V ..'  more options of the dpdk kind (mtu=9000, ...)
  --ip A.B.C.D/N        the shared address and its subnet; again with an IPv6
                        address/prefix (2001:db8::10/64) for IPv6 too
  --gw ADDR             next hop off the subnet (IPv4), default router (IPv6); one per family
  --control PATH        the control socket (default /run/xk/filterd.sock)
  --memif-socket PATH   where the nodes' channels meet (default /run/xk/filterd.memif; shm
                        channels: one socket each, PATH.<id>)
  --channels shm|memif  the nodes' channels: xk's own shared-memory link (default), whose
                        payload crosses by reference (docs/shm-driver.md), or net_memif
  --secret HEX32        the nodes' ISN and SYN-cookie key (default: random at start); give the
                        same one to a filterd that restarts, so resumed nodes and new ones agree
  --rules-file PATH     keep the user rules (xkctl rule add) in this file, so a filterd that
                        restarts gives them back to their nodes when they resume
  --resync-grace MS     after start, drop (not answer) frames of flows nobody has declared yet
                        for this long, so nodes that outlived a filterd restart can re-declare
                        their connections before RSTs kill them (default 3000; 0: off)
  --mode steer|central  steer (default): each node runs TCP, filterd steers its frames;
                        central: filterd runs TCP for every node and relays the byte
                        streams over the channels (the baseline; docs/filterd.md)
  --csum on|off         TCP and UDP checksums of filterd's own stack (default on); off makes
                        central mode's TCP skip them, as nodes do with --csum off
  --tcp-opts 'K=V ..'   more options of filterd's tcp (central mode's TCP: wscale=, sack=, ...)
  --control-tcp A.B.C.D:PORT
                        also serve the control protocol over TCP, for nodes on other hosts
                        (needs --control-token)
  --control-token FILE  the shared secret a TCP node's HELLO must carry (16..256 bytes; the
                        file must be readable by its owner only)
  --heartbeat-ms MS     TCP nodes send PING this often; one silent for 3 intervals is gone
                        (default 0: none; TCP keepalive notices a vanished host within 5 s.
                        Only for nodes whose stack runs all the time: an inline libxk stack
                        sends PING only while its program is in an xk call)
  --node-port DEVARGS   a second DPDK port for nodes on other hosts (plain Ethernet), e.g.
                        net_af_packet1,iface=veth3; they register over --control-tcp
  --node-port-opts 'K=V ..'
                        more dpdk options of the node port
  --idle spin|busy|yield
                        spin (default): poll for --spin-us after the last frame, then sleep
                        until a doorbell or timer; busy: never sleep (a core of its own);
                        yield: as spin, giving the core to others between polls (more
                        busy processes than cores)
  --spin-us US          how long to poll before sleeping (default 50)
  --help
)";

std::atomic<EventLoop*> g_loop{nullptr};
void on_signal(int) {
  if (EventLoop* l = g_loop.load()) l->stop();  // an atomic store and an eventfd write: signal-safe
}

struct Flags {
  std::string port, port_opts, control = "/run/xk/filterd.sock", memif = "/run/xk/filterd.memif", secret;
  std::string tcp_opts;
  bool csum = true;
  std::optional<Ipv4Cidr> ip;
  std::optional<Ipv4Addr> gw;
  std::optional<IpCidr> ip6;  // the shared IPv6 address (docs/filterd.md, "IPv6")
  std::optional<IpAddr> gw6;
  bool central = false;
  bool shm = true;  // --channels shm (the default) or memif
  long long resync_grace_ms = 3000;
  std::string control_tcp, control_token, node_port, node_port_opts, rules_file;
  long long heartbeat_ms = 0;
  IdleMode idle = IdleMode::spin_then_sleep;
  long long spin_us = 50;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(a) + " needs a value");
      return argv[++i];
    };
    // A whole number 0..max of `unit` (the error names the flag).
    auto number = [&](long long max, const char* unit) -> long long {
      std::string v = value();
      char* end = nullptr;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > max) {
        throw std::invalid_argument(std::string(a) + ": " + unit + ", 0.." + std::to_string(max));
      }
      return n;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--port") {
      f.port = value();
    } else if (a == "--port-opts") {
      f.port_opts = value();
    } else if (a == "--ip") {
      // Once per family: A.B.C.D/N, and an IPv6 prefix beside it.
      std::string v = value();
      auto c = parse_ip_cidr(v);
      if (!c) throw std::invalid_argument("--ip: '" + v + "' is neither A.B.C.D/N nor an IPv6 address/prefix");
      if (c->addr.is_v4() ? f.ip.has_value() : f.ip6.has_value()) {
        throw std::invalid_argument("--ip: one address per family ('" + v + "' is a second)");
      }
      if (c->addr.is_v4()) {
        f.ip = Ipv4Cidr{c->addr.v4(), c->prefix_len};
      } else {
        f.ip6 = *c;
      }
    } else if (a == "--gw") {
      std::string v = value();
      auto g = parse_ip(v);
      if (!g) throw std::invalid_argument("--gw: '" + v + "' is not an IP address");
      if (g->is_v4()) {
        f.gw = g->v4();
      } else {
        f.gw6 = *g;
      }
    } else if (a == "--control") {
      f.control = value();
    } else if (a == "--mode") {
      std::string v = value();
      if (v != "steer" && v != "central") throw std::invalid_argument("--mode: steer or central");
      f.central = v == "central";
    } else if (a == "--csum") {
      std::string v = value();
      if (v != "on" && v != "off") throw std::invalid_argument("--csum: on or off, not '" + v + "'");
      f.csum = v == "on";
    } else if (a == "--tcp-opts") {
      f.tcp_opts = value();
    } else if (a == "--memif-socket") {
      f.memif = value();
    } else if (a == "--channels") {
      std::string v = value();
      if (v != "memif" && v != "shm") throw std::invalid_argument("--channels: memif or shm, not '" + v + "'");
      f.shm = v == "shm";
    } else if (a == "--rules-file") {
      f.rules_file = value();
      if (f.rules_file.empty()) throw std::invalid_argument("--rules-file: empty path");
    } else if (a == "--resync-grace") {
      f.resync_grace_ms = number(600000, "milliseconds");
    } else if (a == "--control-tcp") {
      f.control_tcp = value();
    } else if (a == "--control-token") {
      f.control_token = value();
    } else if (a == "--node-port") {
      f.node_port = value();
      if (f.node_port.empty()) throw std::invalid_argument("--node-port: empty devargs");
    } else if (a == "--node-port-opts") {
      f.node_port_opts = value();
    } else if (a == "--heartbeat-ms") {
      f.heartbeat_ms = number(600000, "milliseconds");
    } else if (a == "--idle") {
      std::string v = value();
      std::optional<IdleMode> m = parse_idle_mode(v);
      if (!m) throw std::invalid_argument("--idle: spin, busy or yield, not '" + v + "'");
      f.idle = *m;
    } else if (a == "--spin-us") {
      f.spin_us = number(1000000, "microseconds");
    } else if (a == "--secret") {
      f.secret = value();
      if (f.secret.size() != 32 || f.secret.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        throw std::invalid_argument("--secret: 32 hex digits");
      }
    } else {
      throw std::invalid_argument("unknown argument '" + std::string(a) + "'");
    }
  }
  if (f.port.empty()) throw std::invalid_argument("--port DEVARGS is required");
  if (!f.ip) throw std::invalid_argument("--ip A.B.C.D/N is required");
  if (f.gw && !f.ip->contains(*f.gw)) throw std::invalid_argument("--gw is not on the --ip subnet");
  if (f.gw6 && !f.ip6) throw std::invalid_argument("--gw " + to_string(*f.gw6) + ": no IPv6 --ip");
  if (f.gw6 && !f.ip6->contains(*f.gw6) && !icmpv6::is_link_local(*f.gw6)) {
    throw std::invalid_argument("--gw " + to_string(*f.gw6) + " is neither link-local nor on the IPv6 --ip prefix");
  }
  if (!f.control_tcp.empty() && f.control_token.empty()) {
    throw std::invalid_argument("--control-tcp needs --control-token FILE (TCP has no peer credentials)");
  }
  if (f.control_tcp.empty() && !f.control_token.empty()) throw std::invalid_argument("--control-token goes with --control-tcp");
  if (!f.node_port_opts.empty() && f.node_port.empty()) throw std::invalid_argument("--node-port-opts goes with --node-port");
  return f;
}

// The shared IPv6 address is every node's too, and they use it without a
// check of their own as soon as they attach: filterd takes nodes only once
// its duplicate check (RFC 4862 5.4) has passed -- about a second -- and
// refuses to start when another host on the link holds the address.
void wait_for_duplicate_checks(Graph& graph, EventLoop& loop, const Flags& f) {
  auto* nd = graph.find_as<nd::NdProtocol>("nd0");
  if (nd == nullptr || !f.ip6) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (nd->checks_pending()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "filterd: the duplicate check of %s has not ended after 30 s (is the link up?); going on\n",
                   to_string(f.ip6->addr).c_str());
      break;
    }
    if (loop.run_once() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (nd->address_state(f.ip6->addr) == nd::NdProtocol::AddrState::duplicate) {
    throw std::runtime_error("--ip " + to_string(*f.ip6) +
                             ": another host on the link holds this address (duplicate address detection)");
  }
}

int run(const Flags& f) {
  // Before any port starts: a token file that is unsafe is said at once.
  std::vector<std::byte> token;
  if (!f.control_token.empty()) token = read_token_file(f.control_token);
  Registry kinds;
  register_all_kinds(kinds);
  register_steer(kinds);

  // filterd's own stack answers ARP and ping for the shared address, and --
  // with no listeners and no sockets -- RST and port unreachable for flows
  // nobody owns. --csum off reaches its udp and tcp: in central mode filterd's
  // tcp carries every byte, and "checksum off" must be off end to end.
  // EAL memory for the external port and a channel per node: 2 GiB of
  // address space, used as mempools are made (--no-huge: ordinary pages).
  const std::string csum = f.csum ? "" : " csum=off";
  // What leaves a port is cut to its MTU (frame_max=0), unless asked. In
  // steer mode the external port coalesces what arrives (GRO) into frames
  // no larger than a node's channel takes, and steer forwards them whole
  // (docs/filterd.md, "Large frames to the nodes"): checksums are carried,
  // not checked -- each node checks its own. An shm channel takes a whole
  // 64 KiB datagram, a memif one a 16 KiB slot. Central mode's TCP and the
  // node port take frames as they came.
  const std::size_t gro_max = f.shm ? drivers::shm::kFrameMax : drivers::DpdkDriver::kDefaultFrameMax;
  auto port_opts = [gro_max](const std::string& opts, bool gro) {
    std::string out = " ";
    if (opts.find("gro=") == std::string::npos) {
      out += gro ? "gro=on gro_csum=carry gro_max=" + std::to_string(gro_max) + " " : "gro=off ";
    }
    if (opts.find("frame_max=") == std::string::npos) out += "frame_max=0 ";
    return out + opts;
  };
  // With an IPv6 address: steer carries IPv6 too, and filterd's own nd
  // checks the address and answers for it on the external link (its
  // neighbours' addresses are what the nodes' packets leave through).
  const std::string v6 = f.ip6 ? " addr6=" + to_string(*f.ip6) + (f.gw6 ? " gw6=" + to_string(*f.gw6) : "") : "";
  const std::string ips = f.ip6 ? "ip0,ip6" : "ip0";
  std::string spec = "dpdk  net0 devargs=" + spec_value(f.port) + " eal_mem=2g" + port_opts(f.port_opts, !f.central) +
                     "\n" +
                     "steer st0  below=net0 addr=" + to_string(*f.ip) + (f.gw ? " gw=" + to_string(*f.gw) : "") + v6 +
                     "\neth   eth0 below=st0\narp   arp0 below=eth0\n" +
                     "ipv4  ip0  below=eth0,arp0 addr=" + to_string(*f.ip) + (f.gw ? " gw=" + to_string(*f.gw) : "") +
                     "\nicmp  icmp0 below=ip0\n";
  if (f.ip6) {
    spec += "nd    nd0  below=eth0\nipv6  ip6  below=eth0,nd0 addr=" + to_string(*f.ip6) +
            (f.gw6 ? " gw=" + to_string(*f.gw6) : "") + "\nicmpv6 icmp6 below=ip6,nd0\n";
  }
  spec += "udp   udp0 below=" + ips + csum + "\ntcp   tcp0 below=" + ips + csum + " " + f.tcp_opts + "\n";
  // The node port: a driver of filterd's graph that steer takes frames from
  // (and sends to) by the nodes' MACs.
  if (!f.node_port.empty()) spec += "dpdk  np0  devargs=" + spec_value(f.node_port) + port_opts(f.node_port_opts, false) + "\n";
  EventLoopConfig lc;
  lc.name = "filterd";
  lc.idle = f.idle;
  lc.spin = std::chrono::microseconds(f.spin_us);
  EventLoop loop(lc);
  Graph graph = Graph::build(spec, kinds, &loop, "filterd");
  auto* steer = graph.find_as<Steer>("st0");
  steer->set_resolver(graph.find_as<arp::ArpProtocol>("arp0"));
  if (auto* nd = graph.find_as<nd::NdProtocol>("nd0")) steer->set_resolver6(nd);
  auto* ext = graph.find_as<drivers::DpdkDriver>("net0");
  auto* node_port = graph.find_as<drivers::DpdkDriver>("np0");
  if (node_port != nullptr) {
    if (Status st = steer->attach_node_port(*node_port, node_port->mac()); !st) {
      throw std::runtime_error(std::string("node port: ") + to_string(st.error()));
    }
  }

  RegistryConfig rc;
  // Nodes learn the kind of their channels from where they meet: "shm:"
  // in front of the path says shm links (docs/shm-driver.md).
  rc.memif_socket = f.shm ? "shm:" + f.memif : f.memif;
  rc.filterd_mac = steer->config().channel_mac;
  rc.mtu = static_cast<std::uint16_t>(ext->mtu());
  rc.shared = *f.ip;
  rc.central = f.central;
  rc.rules_file = f.rules_file;
  if (node_port != nullptr) rc.node_port_mac = node_port->mac();
  // Nodes ping this often; only TCP connections are held to it (a Unix
  // socket closes when its process dies, whatever happened).
  if (!f.control_tcp.empty()) rc.heartbeat_ms = static_cast<std::uint32_t>(f.heartbeat_ms);
  if (f.gw) rc.gateway = *f.gw;
  rc.shared6 = f.ip6;
  rc.gateway6 = f.gw6;
  if (!f.secret.empty()) {
    for (std::size_t i = 0; i < 16; ++i) rc.secret[i] = std::byte(std::stoi(f.secret.substr(2 * i, 2), nullptr, 16));
  } else {
    std::random_device rd;
    for (auto& b : rc.secret) b = std::byte(static_cast<unsigned char>(rd()));
  }

  // Central mode: filterd's tcp0 ends every connection; the bridge relays
  // the streams (before the channels: destroyed after them... it holds no
  // channel, only steer's sink, which it clears).
  std::unique_ptr<Central> central;
  if (f.central) {
    CentralConfig cc;
    cc.channel_mtu = ext->mtu();
    central = std::make_unique<Central>(*graph.find_as<tcp::TcpProtocol>("tcp0"), *steer, &loop, cc);
  }

  // Each node's channels: a server end per queue (one per stack the node
  // runs), or its place on the node port (docs/filterd.md).
  ChannelManager::Config chc;
  chc.kind = f.shm ? ChannelManager::Kind::shm : ChannelManager::Kind::memif;
  chc.socket = f.memif;
  chc.central = f.central;
  ChannelManager channels(loop, *steer, *ext, node_port, chc);
  NodeRegistry::Hooks hooks;
  hooks.attach = [&](const NodeInfo& n) { return channels.attach(n); };
  hooks.detach = [&](NodeId id) {
    if (central) central->node_gone(id);
    channels.detach(id);
    std::printf("filterd: node %u gone\n", id);
    std::fflush(stdout);
  };
  // For STATS and NODES (xkctl): every counter set filterd has, and the
  // frames steered to each node.
  const ControlServer* control_ptr = nullptr;
  hooks.counter_sets = [&]() {
    std::vector<const CounterSet*> sets = graph.counters();
    if (control_ptr != nullptr) sets.push_back(&control_ptr->counters());
    for (const CounterSet* c : steer->channel_counters()) sets.push_back(c);  // per node and queue
    return sets;
  };
  hooks.node_rx_frames = [&](NodeId id) { return steer->rx_frames(id); };
  NodeRegistry registry(rc, steer->filter(), hooks);
  if (central) {
    NodeRegistry::ListenHooks lh;
    lh.listened = [&](NodeId n, std::uint8_t proto, std::uint16_t port) {
      if (proto == 6) central->listened(n, port);
    };
    lh.unlistened = [&](NodeId n, std::uint8_t proto, std::uint16_t port) {
      if (proto == 6) central->unlistened(n, port);
    };
    registry.set_listen_hooks(std::move(lh));
  }
  wait_for_duplicate_checks(graph, loop, f);
  ControlServer::Config cc;
  cc.path = f.control;
  cc.tcp = f.control_tcp;
  cc.token = token;
  cc.heartbeat = std::chrono::milliseconds(f.heartbeat_ms);
  ControlServer control(loop, registry, cc);
  control_ptr = &control;

  // The node port's link: when it goes down, its nodes are gone as if they
  // had died (their control connections are closed, so they notice).
  channels.watch_node_port(control);

  // RFC 9293 3.4.3 ("knowing when to keep quiet") for a restarted host, in
  // filterd's terms: answer nothing for flows it may simply not know yet.
  if (f.resync_grace_ms > 0) steer->keep_quiet_until(loop.clock().now() + std::chrono::milliseconds(f.resync_grace_ms));
  g_loop.store(&loop);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::printf("filterd: %s on %s, control %s, channels on %s, %s mode: ready\n", to_string(*f.ip).c_str(),
              f.port.c_str(), f.control.c_str(), f.memif.c_str(), f.central ? "central" : "steer");
  if (control.tcp_port() != 0) std::printf("filterd: control over TCP on %s\n", f.control_tcp.c_str());
  if (node_port != nullptr) {
    std::printf("filterd: node port %s, MAC %s\n", f.node_port.c_str(), to_string(node_port->mac()).c_str());
  }
  std::fflush(stdout);
  loop.run();
  g_loop.store(nullptr);
  registry.stopping();

  std::printf("filterd: stopping (%s mode)\n", f.central ? "central" : "steer");
  std::vector<const CounterSet*> sets = graph.counters();
  sets.push_back(&steer->filter().counters());
  sets.push_back(&registry.counters());
  sets.push_back(&control.counters());
  if (central) sets.push_back(&central->counters());
  for (const CounterSet* c : steer->channel_counters()) sets.push_back(c);
  for (const CounterSet* s : sets) {
    for (const auto& e : s->entries()) {
      if (e.counter.value() != 0) std::printf("  %-10s %-28s %llu\n", s->owner().c_str(), e.name.c_str(),
                                              static_cast<unsigned long long>(e.counter.value()));
    }
  }
  // Relayed connections go first (RST to their peers), then the channels
  // (detached from steer first).
  central.reset();
  channels.clear();
  steer->detach_node_port();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  try {
    f = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "filterd: %s\ntry 'filterd --help'\n", e.what());
    return 2;
  }
  try {
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "filterd: %s\n", e.what());
    return 1;
  }
}

// Shared pieces of the standalone apps (include/xk/apps/stack.hpp).

#include "xk/apps/stack.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <atomic>
#include <thread>
#include <pthread.h>

#include "xk/counters.hpp"
#include "xk/driver.hpp"
#include "xk/drivers/dpdk.hpp"
#include "xk/drivers/shm.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/fault.hpp"
#include "xk/protocols/icmp.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/ipv6.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"
#include "xk/stack.hpp"
#include "xk/filterd/token.hpp"
#include "xk/filterd_client.hpp"
#ifdef XK_HAVE_CAPTURE
#include "xk/protocols/capture.hpp"
#endif

namespace xk::apps {

std::string_view Flag::value() {
  if (inline_) return *inline_;
  if (*next_ >= words_.size()) throw UsageError{std::string(name_) + " needs a value"};
  return words_[(*next_)++];
}

void Flag::no_value() const {
  if (inline_) throw UsageError{std::string(name_) + " takes no value"};
}

void for_each_flag(std::span<const std::string_view> words, const std::function<void(Flag&)>& fn) {
  std::size_t i = 0;
  while (i < words.size()) {
    Flag f;
    std::string_view w = words[i++];
    f.name_ = w;
    if (auto eq = w.find('='); w.starts_with("--") && eq != std::string_view::npos) {
      f.name_ = w.substr(0, eq);
      f.inline_ = w.substr(eq + 1);
    }
    f.words_ = words;
    f.next_ = &i;
    fn(f);
  }
}

double parse_seconds(std::string_view flag, std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(v > 0) || v > 3600) {
    throw UsageError{std::string(flag) + ": '" + s + "' is not a number of seconds in (0, 3600]"};
  }
  return v;
}

std::uint64_t parse_bytes(std::string_view flag, std::string_view text) {
  std::uint64_t mult = 1;
  std::string_view digits = text;
  if (!digits.empty()) {
    char last = digits.back();
    if (last == 'k' || last == 'K') mult = std::uint64_t{1} << 10;
    if (last == 'm' || last == 'M') mult = std::uint64_t{1} << 20;
    if (last == 'g' || last == 'G') mult = std::uint64_t{1} << 30;
    if (mult != 1) digits.remove_suffix(1);
  }
  try {
    return parse_number<std::uint64_t>(flag, digits, 0, (std::uint64_t{1} << 44) / mult) * mult;
  } catch (const UsageError&) {
    // Say what was typed ("1gx", not the "1g" left after taking a suffix off).
    throw UsageError{std::string(flag) + ": '" + std::string(text) +
                     "' is not a number of bytes (N, Nk, Nm or Ng, at most 16384g)"};
  }
}

std::pair<IpAddr, std::uint16_t> parse_endpoint(std::string_view flag, std::string_view v) {
  auto colon = v.rfind(':');
  if (colon == std::string_view::npos) {
    throw UsageError{std::string(flag) + ": expected A.B.C.D:PORT or [X:X::X]:PORT, got '" + std::string(v) + "'"};
  }
  std::string_view host = v.substr(0, colon);
  Result<IpAddr> addr = Errc::invalid_argument;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    addr = parse_ip(host.substr(1, host.size() - 2));
    if (addr && addr->is_v4()) addr = Errc::invalid_argument;  // [a.b.c.d] is not a form
  } else if (host.find(':') == std::string_view::npos) {
    addr = parse_ip(host);
  }
  if (!addr) {
    throw UsageError{std::string(flag) + ": '" + std::string(host) +
                     "' is not an address (A.B.C.D, or [X:X::X] for IPv6)"};
  }
  return {*addr, parse_number<std::uint16_t>(std::string(flag) + " port", v.substr(colon + 1), 1, 65535)};
}

const char* const kStackFlagsHelp =
    R"(  --port DEVARGS      DPDK device, e.g. net_af_packet0,iface=veth1 or
                      net_memif0,role=client,socket=/run/xk.sock (required without --graph);
                      or shm:PATH[,role=server|auto]: xk's own link to another xk process of
                      this host, payload by reference (docs/shm-driver.md)
  --port-opts 'K=V ..' more options of the port's kind, e.g. 'mbuf_data=64k mbufs=1023'
  --ip PREFIX         our address and prefix, A.B.C.D/N or X:X::X/N (required without
                      --graph); repeat it for a dual-stack node (one IPv4, any IPv6)
  --gw ADDR           default gateway of a family (on a prefix; IPv6: or link-local)
  --mac MAC           Ethernet address to use (default: the port's)
  --csum on|off       UDP and TCP checksums on send and receive (default on)
  --tcp-opts 'K=V ..' more options of the tcp kind, e.g. 'rto_min_ms=5 cc=newreno sack=off'
  --capture FILE      write every frame to FILE (pcap, linktype ether)
  --graph FILE        use this graph spec instead of composing one; it must name the
                      instances udp0/tcp0 the program uses (the flags above are then refused)
  --filterd PATH      attach to filterd's control socket: the port, address and secret come
                      from filterd, and every port is agreed with it (--tcp-opts still apply;
                      --port-opts apply to the channel, e.g. frame_max=0)
  --filterd tcp:HOST:PORT
                      a node on another host: filterd's control socket over TCP; the node's
                      channel is its own --port (with --port-opts, --mac) on filterd's node port
  --filterd-token FILE
                      over TCP: the file holding filterd's token (or XK_FILTERD_TOKEN=FILE)
  --stacks K          with --filterd: run K stacks (1..64), each on a channel (queue) of its
                      own, with its own event loop and thread (default 1: this thread)
                      (a node over tcp: runs one)
  --cpus LIST         with --stacks: pin stack q's thread to the q-th CPU of LIST (e.g. 0,1)
)";

namespace {
// "a, b or c"; with the aliases: "a (-a), b (-b) or c (-c)".
std::string list_roles(const CommandLineSpec& spec, bool aliases) {
  std::string out;
  for (std::size_t i = 0; i < spec.roles.size(); ++i) {
    if (i > 0) out += i + 1 == spec.roles.size() ? " or " : ", ";
    out += spec.roles[i].word;
    if (aliases && !spec.roles[i].alias.empty()) out += " (" + std::string(spec.roles[i].alias) + ")";
  }
  return out;
}
}  // namespace

std::size_t parse_command_line(int argc, char** argv, const CommandLineSpec& spec, CommonArgs& common,
                               const std::function<void(Flag&)>& fn) {
  std::vector<std::string_view> words(argv + 1, argv + argc);
  for (auto w : words) {
    if (w == "--help" || w == "-h") {
      std::fputs(spec.usage_head, stdout);
      std::fputs(kStackFlagsHelp, stdout);
      std::fputs(spec.usage_tail, stdout);
      std::exit(0);
    }
  }
  std::size_t role = 0;
  std::span<const std::string_view> flags(words);
  if (!spec.roles.empty()) {
    const std::string noun(spec.role_noun);
    if (words.empty()) throw UsageError{"missing " + noun + ": " + list_roles(spec, false)};
    auto it = std::find_if(spec.roles.begin(), spec.roles.end(), [&](const CommandLineSpec::Role& r) {
      return words[0] == r.word || (!r.alias.empty() && words[0] == r.alias);
    });
    if (it == spec.roles.end()) {
      throw UsageError{"unknown " + noun + " '" + std::string(words[0]) + "': expected " + list_roles(spec, true)};
    }
    role = static_cast<std::size_t>(it - spec.roles.begin());
    flags = flags.subspan(1);
  }
  for_each_flag(flags, [&](Flag& f) {
    if (common.stack.take(f.name(), [&] { return f.value(); })) return;
    if (f.name() == "--link-wait") {
      common.link_wait_s = parse_seconds(f.name(), f.value());
    } else if (spec.idle_flag && f.name() == "--idle") {
      auto v = f.value();
      // "sleep" is the apps' older name of "spin" (spin, then sleep).
      std::optional<IdleMode> m = v == "sleep" ? IdleMode::spin_then_sleep : parse_idle_mode(v);
      if (!m) throw UsageError{"--idle: expected busy, sleep or yield"};
      common.idle_mode = *m;
    } else {
      fn(f);
    }
  });
  return role;
}

bool StackFlags::is_composed_flag(std::string_view flag) {
  return flag == "--port" || flag == "--port-opts" || flag == "--ip" || flag == "--gw" || flag == "--mac" ||
         flag == "--csum" || flag == "--capture" || flag == "--tcp-opts";
}

void StackFlags::set(std::string_view flag, std::string_view v) {
  if (flag == "--port") {
    if (v.empty()) throw UsageError{"--port: empty device"};
    port = std::string(v);
  } else if (flag == "--port-opts") {
    port_opts = std::string(v);
  } else if (flag == "--tcp-opts") {
    tcp_opts = std::string(v);
  } else if (flag == "--ip") {
    // Repeats: one IPv4 address and any number of IPv6 ones.
    Result<IpCidr> c = parse_ip_cidr(v);
    if (!c) throw UsageError{"--ip: '" + std::string(v) + "' is not an address/prefix (a.b.c.d/n or x:x::x/n)"};
    if (c->addr.is_v4() && std::any_of(ips.begin(), ips.end(), [](const IpCidr& i) { return i.addr.is_v4(); })) {
      throw UsageError{"--ip: one IPv4 address per stack (" + std::string(v) + " is a second)"};
    }
    ips.push_back(*c);
  } else if (flag == "--gw") {
    // Repeats: a gateway per family.
    Result<IpAddr> g = parse_ip(v);
    if (!g) throw UsageError{"--gw: '" + std::string(v) + "' is not an IPv4 or IPv6 address"};
    if (std::any_of(gws.begin(), gws.end(), [&](const IpAddr& o) { return o.is_v4() == g->is_v4(); })) {
      throw UsageError{"--gw: one gateway per family (" + std::string(v) + " is a second)"};
    }
    gws.push_back(*g);
  } else if (flag == "--mac") {
    auto m = parse_mac(v);
    if (!m) throw UsageError{"--mac: '" + std::string(v) + "' is not a MAC address (aa:bb:cc:dd:ee:ff)"};
    mac = *m;
  } else if (flag == "--csum") {
    if (v == "on") {
      csum = true;
    } else if (v == "off") {
      csum = false;
    } else {
      throw UsageError{"--csum: expected on or off, got '" + std::string(v) + "'"};
    }
  } else if (flag == "--capture") {
    if (v.empty()) throw UsageError{"--capture: empty file name"};
#ifndef XK_HAVE_CAPTURE
    throw UsageError{"--capture: this build has no capture layer (libpcap was not found)"};
#endif
    capture = std::string(v);
  }
}

namespace {
// filterd over TCP (a node on another host), as FilterdClient::is_tcp says.
bool filterd_remote(const std::string& where) {
  return FilterdClient::is_tcp(where);
}
}  // namespace

std::vector<int> StackFlags::parse_cpus(std::string_view flag, std::string_view text) {
  std::vector<int> out;
  if (text.empty()) throw UsageError{std::string(flag) + ": empty CPU list"};
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = text.find(',', at);
    const std::string_view one = text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    out.push_back(parse_number<int>(flag, one, 0, 4095));
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  if (out.size() > 64) throw UsageError{std::string(flag) + ": at most 64 CPUs"};
  return out;
}

void StackFlags::validate() const {
  if (stacks > 1 && filterd.empty()) {
    throw UsageError{"--stacks: several stacks are a node's behind filterd (--filterd); standalone runs one"};
  }
  if (!cpus.empty() && stacks <= 1) throw UsageError{"--cpus goes with --stacks K (K > 1)"};
  if (!filterd.empty() && filterd_remote(filterd)) {
    // filterd's node port gives a node on another host one channel.
    if (stacks > 1) throw UsageError{"--stacks: a node on another host (--filterd tcp:...) runs one stack"};
    // Its own port (filterd's node port is at the other end), the address
    // from filterd.
    if (!graph_file.empty() || !ips.empty() || !gws.empty() || !capture.empty()) {
      throw UsageError{"--filterd tcp:... gives the address: --graph, --ip, --gw and --capture do not go with it"};
    }
    if (port.empty()) throw UsageError{"--filterd tcp:... needs --port DEVARGS: the node's own port on filterd's node port"};
    return;
  }
  if (!filterd.empty()) {
    // --port-opts still apply: to the node's channel.
    if (!graph_file.empty() || !port.empty() || !ips.empty() || !gws.empty() || mac || !capture.empty()) {
      throw UsageError{"--filterd gives the port and the address: --graph, --port, --ip, --gw, --mac "
                       "and --capture do not go with it"};
    }
    return;
  }
  if (!filterd_token.empty()) throw UsageError{"--filterd-token goes with --filterd tcp:HOST:PORT"};
  if (!graph_file.empty()) {
    if (composed_flag_seen) {
      throw UsageError{"--graph replaces the composed graph: --port, --port-opts, --ip, --gw, --mac, --csum and "
                       "--capture go into the file instead"};
    }
    return;
  }
  if (port.empty()) throw UsageError{"--port DEVARGS is required (or --graph FILE)"};
  if (ips.empty()) throw UsageError{"--ip A.B.C.D/N or X:X::X/N is required (or --graph FILE)"};
  for (const IpAddr& gw : gws) {
    // An IPv6 router is link-local or on a prefix; an IPv4 one on the subnet.
    const bool link_local = !gw.is_v4() && gw.bytes()[0] == 0xfe && (gw.bytes()[1] & 0xc0) == 0x80;
    if (!link_local && std::none_of(ips.begin(), ips.end(), [&](const IpCidr& i) { return i.contains(gw); })) {
      throw UsageError{"--gw " + to_string(gw) + " is not on a prefix of --ip" +
                       (gw.is_v4() ? "" : " (nor link-local)")};
    }
  }
}

StackSpec stack_spec(const StackFlags& a) {
  if (!a.graph_file.empty()) {
    std::ifstream in(a.graph_file);
    if (!in) throw std::runtime_error("cannot read " + a.graph_file + ": " + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    return {ss.str(), a.graph_file};
  }
  SimpleGraph g;
  g.port = a.port;
  g.port_opts = a.port_opts;
  for (const IpCidr& c : a.ips) g.ip += (g.ip.empty() ? "" : ",") + to_string(c);
  for (const IpAddr& gw : a.gws) g.gw += (g.gw.empty() ? "" : ",") + to_string(gw);
  if (a.mac) g.mac = to_string(*a.mac);
  g.tcp_opts = a.tcp_opts;
  g.capture = a.capture;
  g.csum = a.csum;
  return {compose_graph(g), "flags"};
}

namespace {
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

SignalSource::SignalSource(EventLoop& loop) : loop_(loop) {
  sigset_t set = stop_signals();
  fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
}

SignalSource::~SignalSource() {
  if (fd_ >= 0) ::close(fd_);
}

void SignalSource::block() {
  sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

std::size_t SignalSource::poll(std::size_t) {
  if (++passes_ < kCheckEvery) return 0;
  passes_ = 0;
  signalfd_siginfo info{};
  std::size_t n = 0;
  while (::read(fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    signal_ = static_cast<int>(info.ssi_signo);
    ++n;
  }
  if (n > 0) loop_.stop();
  return n;
}

const char* SignalSource::signal_name() const noexcept {
  switch (signal_) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "no signal";
  }
}

std::string describe_stack(Graph& graph) {
  std::string where;
  if (auto* ip = graph.find_as<ipv4::Ipv4Protocol>("ip0")) where = to_string(ip->config().addr);
  if (auto* ip6 = graph.find_as<ipv6::Ipv6Protocol>("ip6")) {
    for (const IpCidr& c : ip6->config().addrs) where += (where.empty() ? "" : ",") + to_string(c);
  }
  if (where.empty()) where = "?";
  if (auto* net = graph.find_as<drivers::DpdkDriver>("net0")) {
    where += " on port " + std::to_string(net->port_id()) + " (" + to_string(net->mac()) + ", mtu " +
             std::to_string(net->mtu()) + ")";
  } else if (auto* shm = graph.find_as<drivers::ShmDriver>("net0")) {
    where += " on shm (" + to_string(shm->mac()) + ")";
  }
  return where;
}

void print_counters(const Graph& graph, EventLoop& loop) {
  std::vector<const CounterSet*> sets = graph.counters();
  sets.push_back(&loop.counters());
  std::fputs(counters_table(sets).c_str(), stdout);
}

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

}  // namespace xk::apps

namespace xk::apps {

StackConfig stack_config(const char* prog, const StackFlags& flags, IdleMode idle) {
  StackConfig c;
  c.mode = StackMode::inline_calls;  // the app runs the loop
  c.loop.idle = idle;
  c.wait_link = false;
  c.node_name = prog;
  if (flags.filterd.empty()) {
    StackSpec spec = stack_spec(flags);
    c.graph = std::move(spec.text);
    c.source = std::move(spec.source);
    return c;
  }
  c.filterd = flags.filterd;
  c.filterd_token = flags.filterd_token;
  c.node_port = flags.port;  // a node on another host: its own port
  c.node_port_opts = flags.port_opts;
  if (flags.mac) c.node_mac = to_string(*flags.mac);
  c.tcp_opts = flags.tcp_opts + (flags.csum ? "" : " csum=off");
  return c;
}

namespace {
// Builds the stacks, saying which part of the graph was wrong.
template <class Build>
auto building(Build&& build) {
  // Before the EAL starts its threads (in the graph's dpdk driver), so they
  // inherit the mask and the signals reach our signalfd.
  SignalSource::block();
  try {
    return build();
  } catch (const GraphError& e) {
    throw std::runtime_error(std::string("cannot build the stack:\n") + e.what());
  }
}
}  // namespace

AppStack::AppStack(const char* prog, const StackFlags& flags, IdleMode idle)
    : AppStack(prog, building([&] { return Stack::create(stack_config(prog, flags, idle)); })) {
  loop().add(signals_);
  signals_added_ = true;
}

AppStack::AppStack(const char* prog, std::unique_ptr<Stack> stack)
    : prog_(prog), stack_(std::move(stack)), signals_(stack_->loop()) {}

AppStack::~AppStack() {
  if (signals_added_) loop().remove(signals_);
}

void AppStack::wait_for_link(double seconds, bool announce) {
  if (announce) {
    std::printf("%s: stack %s built, waiting for the link\n", prog_, describe_stack(graph()).c_str());
    std::fflush(stdout);
  }
  if (!stack_->wait_for_link(std::chrono::milliseconds(static_cast<long long>(seconds * 1000)))) {
    char msg[96];
    std::snprintf(msg, sizeof msg, "the link of net0 is still down after %.1f s", seconds);
    throw std::runtime_error(msg);
  }
}

void AppStack::report_signal(bool always_counters) {
  if (signals_.signal() != 0) std::printf("%s: stopped by %s\n", prog_, signals_.signal_name());
  if (always_counters || signals_.signal() != 0) print_counters(graph(), loop());
  std::fflush(stdout);
}

int app_main(const char* prog, const std::function<void()>& parse, const std::function<int()>& run) {
  try {
    parse();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\ntry '%s --help'\n", prog, e.what.c_str(), prog);
    return 2;
  }
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 1;
  }
}

// ---- AppNode ------------------------------------------------------------------

AppNode::AppNode(const char* prog, const StackFlags& flags, IdleMode idle) : prog_(prog), flags_(flags) {
  // The signals are read by run(), on this thread.
  for (std::unique_ptr<Stack>& s :
       building([&] { return Stack::create_node(stack_config(prog, flags, idle), flags.stacks); })) {
    stacks_.push_back(std::unique_ptr<AppStack>(new AppStack(prog, std::move(s))));
  }
}

AppNode::~AppNode() = default;

int AppNode::cpu(std::size_t q) const noexcept {
  return flags_.cpus.empty() ? -1 : flags_.cpus[q % flags_.cpus.size()];
}

void AppNode::run(const std::function<void(std::size_t)>& body, const std::function<bool()>& done) {
  sigset_t set = stop_signals();
  int sfd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
  std::atomic<std::size_t> finished{0};
  std::vector<std::thread> threads;
  for (std::size_t q = 0; q < stacks_.size(); ++q) {
    threads.emplace_back([this, q, &body, &finished] {
      if (const int c = cpu(q); c >= 0) {
        cpu_set_t cs;
        CPU_ZERO(&cs);
        CPU_SET(c, &cs);
        if (pthread_setaffinity_np(pthread_self(), sizeof cs, &cs) != 0) {
          std::fprintf(stderr, "%s: stack %zu: cannot pin to cpu %d\n", prog_, q, c);
        }
      }
      const std::string name = "stack" + std::to_string(q);
      pthread_setname_np(pthread_self(), name.c_str());
      body(q);
      finished.fetch_add(1);
    });
  }
  for (;;) {
    signalfd_siginfo info{};
    if (::read(sfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      signal_ = static_cast<int>(info.ssi_signo);
      break;
    }
    if (finished.load() != 0 || (done && done())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& s : stacks_) s->loop().stop();
  for (auto& t : threads) t.join();
  ::close(sfd);
  if (signal_ != 0) std::printf("%s: stopped by %s\n", prog_, signal_ == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
}

}  // namespace xk::apps

// xk-scale: the scaling experiment of Guedes & Peterson (1997) on xk
// (docs/apps-scale.md).
//
//   xk-scale [run] [--n 1,2,4,8] [--modes steer,central] [--csum on,off]
//                  [--bytes N | --seconds S] [--repeat R] [--results DIR]
//                  [--launcher local|mpirun] [--remote xk|linux] ...
//   xk-scale rank -- PROGRAM ARGS...      (one mpirun rank: a node; %r in ARGS
//                                          becomes the rank)
//
// One run = (filterd mode, checksum on/off, N): filterd, the remote side
// (a receiver for N connections), and N nodes attached to filterd that each
// send one stream to the remote side at once. The runner records what the
// receiver got in all, what each node sent, and the CPU that filterd, the
// nodes and the receiver spent per GB; it writes scale.csv, a table, and the
// plots of figures 5, 7 and 8 of the paper.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proc.hpp"
#include "analysis.hpp"
#include "html.hpp"
#include "report.hpp"
#include "xk/apps/stack.hpp"
#include "xk/address.hpp"
#include "xk/options.hpp"

namespace {

namespace fs = std::filesystem;
using namespace xk::scale;
using xk::apps::parse_bytes;
using xk::apps::parse_number;
using xk::apps::UsageError;
using xk::IpAddr;
using xk::IpCidr;
using xk::parse_ip;
using xk::parse_ip_cidr;
using xk::Result;

constexpr const char* kProg = "xk-scale";

constexpr const char* kUsage = R"(usage: xk-scale [run] [options]
       xk-scale rank -- PROGRAM ARGS...

The scaling experiment: filterd, N nodes attached to it and a remote receiver;
N concurrent connections (one per node) for each N, in steer and central mode,
with the TCP checksum on and off. Writes scale.csv, a table and PNG plots into
the results folder (docs/apps-scale.md).

the matrix:
  --n LIST              numbers of nodes/connections (default 1,2,4,8; each 1..256)
  --modes LIST          filterd modes: steer, central (default steer,central); and
                        standalone: no filterd, one node on the external link itself
                        (N=1 only: the baseline for steer's N=1 row)
  --csum LIST           checksum: on, off (default on,off)
  --conns-per-node LIST connections each node opens at once (default 1; each 1..4096, the
                        ports filterd leases a node; N x K at most 16384, its ephemeral range)
  --conns LIST          also a sweep of concurrent connections in all, e.g. 1,4,16,64,256,1024:
                        T connections run as min(T, largest --n) nodes with T / nodes
                        each (T a multiple of the nodes), at the first --csum value
  --repeat R            run each point R times; table and plots show the median (default 1)

each run:
  --bytes N             bytes per connection (default 256m; suffixes k, m, g)
  --seconds S           or: each node sends for S seconds
  --buflen N            the nodes' write size (xk-ttcp --buflen)
  --family 4|6          the family the streams use (default 4): with 6, filterd, the
                        nodes and the receiver speak IPv6 (filterd keeps its IPv4
                        address too; the receiver and a standalone node have only IPv6)
  --shared ADDR/LEN     filterd's (and every node's) address and prefix, of --family
                        (default 192.0.2.10/24; 2001:db8::10/64 with --family 6)
  --peer-ip ADDR        the receiver's address, on --shared's prefix (default 192.0.2.20,
                        192.0.2.1 with --remote linux; 2001:db8::20 / 2001:db8::1)
  --mtu N               MTU of the external link (default 1500; up to 9000)
  --frame-max N         the largest frame the external memif link carries (default 0:
                        MTU-sized, as on a wire; 65535: the large frames two xk processes
                        may pass each other, which only steer mode's forwarded segments use)
  --tcp-opts 'K=V ..'   more tcp options for every stack (filterd's too)
  --verify on|off       SHA-256 of every stream at both ends (default off: it costs CPU)
  --idle busy|sleep|yield
                        how the nodes idle (default sleep: N busy nodes starve each
                        other on a small machine; yield: spin giving the core away)
  --peer-idle busy|sleep|yield  how an xk receiver idles (default sleep)
  --filterd-idle spin|busy|yield  filterd's --idle (default spin)
  --channels shm|memif  the nodes' channels to filterd (its --channels; default shm, xk's
                        own link, payload by reference: docs/shm-driver.md)
  --timeout SEC         the longest one run may take (default 600)
  --progress SEC        print the receiver's throughput every SEC seconds

where the processes run:
  --launcher local|mpirun  nodes as N processes (default), or one `mpirun -np N` job
                        whose ranks are the nodes (Open MPI; xk-scale rank wraps each)
  --mpirun PATH         the mpirun to use (default mpirun)
  --mpirun-args 'A ..'  more mpirun arguments (a hostfile, --mca ...)

nodes on other hosts (the nodes attach over TCP and Ethernet, not a Unix socket
and memif, so mpirun may place them anywhere):
  --node-port DEVARGS   filterd's Ethernet port to the nodes' hosts (its --node-port)
  --node-port-opts 'K=V ..'  more dpdk options of that port
  --node-control A:PORT where filterd takes the nodes' control connections: an address
                        of filterd's host the nodes can reach (default 127.0.0.1:7577)
  --control-token FILE  the secret the nodes show filterd (default: one written into
                        the results folder, which the nodes' hosts must then see)
  --rank-port DEVARGS   each node's DPDK port on its own host; %r becomes the node's
                        number (its rank), e.g. net_af_packet0,iface=eth%r
  --rank-port-opts 'K=V ..'  more dpdk options of the nodes' ports
  --remote xk|xk-filterd|linux
                        xk (default, no root): the remote is a standalone xk receiver
                        joined to filterd's external port by net_memif; xk-filterd (no
                        root): another xk machine -- its own filterd on that link and a
                        receiver node attached to it; linux (root): a Linux receiver in
                        a network namespace, filterd on a veth through net_af_packet
                        (checksum on only)

programs and output:
  --program PATH        the node/receiver program (default: xk-ttcp of this build)
  --filterd-bin PATH    filterd (default: filterd of this build)
  --results DIR         the results folder (default ./xk-scale-results/<date-time>)
  --help

exit status: 0 success, 1 a run failed (its logs are in the results folder),
2 bad command line, 130 interrupted
)";

// The addresses by default, per family (--shared, --peer-ip).
constexpr const char* kSharedIp = "192.0.2.10/24";  // filterd's, every node's
constexpr const char* kLinuxIp = "192.0.2.1";       // the Linux receiver's
constexpr const char* kXkPeerIp = "192.0.2.20";     // the xk receiver's
constexpr const char* kSharedIp6 = "2001:db8::10/64";
constexpr const char* kLinuxIp6 = "2001:db8::1";
constexpr const char* kXkPeerIp6 = "2001:db8::20";

// What filterd can lease: a node at most 4096 ports (RegistryConfig::
// max_leased_ports), all nodes together its ephemeral range 49152..65535.
constexpr unsigned kMaxLeasedPorts = 4096;
constexpr unsigned kEphemeralPorts = 65535 - 49152 + 1;

enum class Launcher { local, mpirun };
enum class Remote { xk, xk_filterd, linux };

struct Args {
  std::vector<unsigned> ns{1, 2, 4, 8};
  std::vector<std::string> modes{"steer", "central"};
  std::vector<bool> csums{true, false};
  std::vector<unsigned> conns_per_node{1};
  std::vector<unsigned> conns_totals;  // --conns: the sweep of connections in all
  unsigned repeat = 1;
  std::uint64_t bytes = 256ull << 20;
  std::optional<double> seconds;
  std::optional<std::uint64_t> buflen;
  unsigned family = 4;
  std::optional<IpCidr> shared;   // --shared; parse_args sets the family's default
  std::optional<IpAddr> peer_ip;  // --peer-ip; likewise, by --remote
  unsigned mtu = 1500;
  unsigned frame_max = 0;  // the external memif link's largest frame (0: MTU-sized only)
  std::string tcp_opts;
  bool verify = false;
  std::string idle = "sleep", peer_idle = "sleep", filterd_idle = "spin";
  std::string channels = "shm";  // the nodes' channels to filterd
  double timeout_s = 600;
  std::optional<double> progress_s;
  Launcher launcher = Launcher::local;
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;
  Remote remote = Remote::xk;
  std::string program, filterd, results;
  // Nodes on other hosts: filterd's node port and TCP control, each node's port.
  std::string node_port, node_port_opts, node_control = "127.0.0.1:7577", control_token;
  std::string rank_port, rank_port_opts;
  bool node_control_given = false;
  std::string command;  // as given, for the report
  bool remote_nodes() const { return !node_port.empty(); }
};

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    std::size_t at = text.find(sep, start);
    out.emplace_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  for (auto& w : split(text, ' ')) {
    if (!w.empty()) out.push_back(w);
  }
  return out;
}

// A comma list whose items `one` parses; empty items and repeats are errors.
template <class T, class Fn>
std::vector<T> parse_list(std::string_view flag, std::string_view text, Fn&& one) {
  std::vector<T> out;
  std::vector<std::string> seen;
  for (const auto& item : split(text, ',')) {
    if (item.empty()) throw UsageError{std::string(flag) + ": empty item in '" + std::string(text) + "'"};
    if (std::find(seen.begin(), seen.end(), item) != seen.end()) {
      throw UsageError{std::string(flag) + ": '" + item + "' is listed twice"};
    }
    seen.push_back(item);
    out.push_back(one(item));
  }
  return out;
}

std::string choice(std::string_view flag, std::string_view v, std::initializer_list<const char*> allowed) {
  std::string list;
  std::size_t i = 0;
  for (const char* a : allowed) {
    if (v == a) return std::string(v);
    if (i++ != 0) list += i == allowed.size() ? " or " : ", ";
    list += a;
  }
  throw UsageError{std::string(flag) + ": expected " + list + ", got '" + std::string(v) + "'"};
}

bool is_executable_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

Args parse_args(int argc, char** argv) {
  Args a;
  std::vector<std::string_view> w(argv + 1, argv + argc);
  for (auto x : w) {
    if (x == "--help" || x == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
  }
  std::span<const std::string_view> rest(w);
  if (!rest.empty() && rest[0] == "run") rest = rest.subspan(1);
  if (!rest.empty() && !rest[0].starts_with("-")) {
    throw UsageError{"unknown command '" + std::string(rest[0]) + "': expected run or rank"};
  }
  bool bytes_given = false;
  xk::apps::for_each_flag(rest, [&](xk::apps::Flag& f) {
    const auto n = f.name();
    if (n == "--n") {
      a.ns = parse_list<unsigned>(n, f.value(), [&](const std::string& s) { return parse_number<unsigned>(n, s, 1, 256); });
    } else if (n == "--modes") {
      a.modes = parse_list<std::string>(n, f.value(), [&](const std::string& s) { return choice(n, s, {"steer", "central", "standalone"}); });
    } else if (n == "--csum") {
      a.csums = parse_list<bool>(n, f.value(), [&](const std::string& s) { return choice(n, s, {"on", "off"}) == "on"; });
    } else if (n == "--conns-per-node") {
      a.conns_per_node = parse_list<unsigned>(n, f.value(), [&](const std::string& s) {
        return parse_number<unsigned>(n, s, 1, kMaxLeasedPorts);
      });
    } else if (n == "--conns") {
      a.conns_totals = parse_list<unsigned>(n, f.value(), [&](const std::string& s) {
        return parse_number<unsigned>(n, s, 1, kEphemeralPorts);
      });
    } else if (n == "--repeat") {
      a.repeat = parse_number<unsigned>(n, f.value(), 1, 100);
    } else if (n == "--bytes") {
      a.bytes = parse_bytes(n, f.value());
      if (a.bytes == 0) throw UsageError{"--bytes: at least 1 byte per connection"};
      bytes_given = true;
    } else if (n == "--seconds") {
      a.seconds = xk::apps::parse_seconds(n, f.value());
    } else if (n == "--buflen") {
      a.buflen = parse_bytes(n, f.value());
      if (*a.buflen == 0 || *a.buflen > (64u << 20)) throw UsageError{"--buflen: 1 byte to 64m"};
    } else if (n == "--family") {
      a.family = choice(n, f.value(), {"4", "6"}) == "4" ? 4 : 6;
    } else if (n == "--shared") {
      const std::string v(f.value());
      Result<IpCidr> c = parse_ip_cidr(v);
      if (!c) throw UsageError{"--shared: '" + v + "' is not ADDR/LEN (a.b.c.d/n or x:x::x/n)"};
      a.shared = *c;
    } else if (n == "--peer-ip") {
      const std::string v(f.value());
      Result<IpAddr> ip = parse_ip(v);
      if (!ip) throw UsageError{"--peer-ip: '" + v + "' is not an address"};
      a.peer_ip = *ip;
    } else if (n == "--mtu") {
      a.mtu = parse_number<unsigned>(n, f.value(), 576, 9000);
    } else if (n == "--frame-max") {
      a.frame_max = parse_number<unsigned>(n, f.value(), 0, 65535);
    } else if (n == "--tcp-opts") {
      a.tcp_opts = std::string(f.value());
    } else if (n == "--verify") {
      a.verify = choice(n, f.value(), {"on", "off"}) == "on";
    } else if (n == "--idle") {
      a.idle = choice(n, f.value(), {"busy", "sleep", "yield"});
    } else if (n == "--peer-idle") {
      a.peer_idle = choice(n, f.value(), {"busy", "sleep", "yield"});
    } else if (n == "--filterd-idle") {
      a.filterd_idle = choice(n, f.value(), {"spin", "busy", "yield"});
    } else if (n == "--channels") {
      a.channels = choice(n, f.value(), {"memif", "shm"});
    } else if (n == "--timeout") {
      a.timeout_s = xk::apps::parse_seconds(n, f.value());
    } else if (n == "--progress") {
      a.progress_s = xk::apps::parse_seconds(n, f.value());
    } else if (n == "--launcher") {
      a.launcher = choice(n, f.value(), {"local", "mpirun"}) == "local" ? Launcher::local : Launcher::mpirun;
    } else if (n == "--mpirun") {
      a.mpirun = std::string(f.value());
      if (a.mpirun.empty()) throw UsageError{"--mpirun: empty path"};
    } else if (n == "--mpirun-args") {
      a.mpirun_args = words(f.value());
    } else if (n == "--remote") {
      const std::string r = choice(n, f.value(), {"xk", "xk-filterd", "linux"});
      a.remote = r == "xk" ? Remote::xk : r == "linux" ? Remote::linux : Remote::xk_filterd;
    } else if (n == "--program" || n == "--filterd-bin") {
      std::string p(f.value());
      if (!is_executable_file(p)) throw UsageError{std::string(n) + ": '" + p + "' is not an executable file"};
      (n == "--program" ? a.program : a.filterd) = p;
    } else if (n == "--node-port" || n == "--rank-port") {
      std::string v(f.value());
      if (v.empty()) throw UsageError{std::string(n) + ": empty devargs"};
      (n == "--node-port" ? a.node_port : a.rank_port) = v;
    } else if (n == "--node-port-opts") {
      a.node_port_opts = std::string(f.value());
    } else if (n == "--rank-port-opts") {
      a.rank_port_opts = std::string(f.value());
    } else if (n == "--node-control") {
      a.node_control = std::string(f.value());
      (void)xk::apps::parse_endpoint(n, a.node_control);  // A.B.C.D:PORT, or a usage error
      a.node_control_given = true;
    } else if (n == "--control-token") {
      a.control_token = std::string(f.value());
      if (a.control_token.empty()) throw UsageError{"--control-token: empty file name"};
    } else if (n == "--results") {
      a.results = std::string(f.value());
      if (a.results.empty()) throw UsageError{"--results: empty folder name"};
    } else {
      throw UsageError{"unknown option '" + std::string(n) + "'"};
    }
  });
  if (a.seconds && bytes_given) throw UsageError{"--bytes and --seconds: give one of them"};
  const unsigned most = *std::max_element(a.ns.begin(), a.ns.end());
  for (unsigned t : a.conns_totals) {
    if (t > most && t % most != 0) {
      throw UsageError{"--conns " + std::to_string(t) + ": beyond N=" + std::to_string(most) +
                       " nodes, a multiple of it (each node opens the same number)"};
    }
    if (t > most && t / most > kMaxLeasedPorts) {
      throw UsageError{"--conns " + std::to_string(t) + ": " + std::to_string(t / most) +
                       " connections a node, beyond the " + std::to_string(kMaxLeasedPorts) +
                       " ports filterd leases a node; add nodes (--n)"};
    }
  }
  for (unsigned nodes : a.ns) {
    for (unsigned k : a.conns_per_node) {
      if (nodes * k > kEphemeralPorts) {
        throw UsageError{"N=" + std::to_string(nodes) + " x --conns-per-node " + std::to_string(k) + " = " +
                         std::to_string(nodes * k) + " connections: beyond the " + std::to_string(kEphemeralPorts) +
                         " ephemeral ports filterd leases (49152..65535)"};
      }
    }
  }
  if (std::find(a.modes.begin(), a.modes.end(), "standalone") != a.modes.end() &&
      std::find(a.ns.begin(), a.ns.end(), 1u) == a.ns.end()) {
    throw UsageError{"--modes standalone runs at N=1 only (one stack owns the external link): add 1 to --n"};
  }
  if (a.remote == Remote::linux && std::find(a.csums.begin(), a.csums.end(), false) != a.csums.end()) {
    throw UsageError{"--remote linux: Linux checks the checksum of every segment it receives (a veth's rx "
                     "offload does not skip that for frames from af_packet), so checksum off needs --remote xk; "
                     "give --csum on"};
  }
  if (a.remote == Remote::linux && a.frame_max != 0) {
    throw UsageError{"--frame-max is for the memif external link (--remote xk or xk-filterd): a veth to Linux "
                     "carries MTU-sized frames"};
  }
  const auto family_of = [](const IpAddr& ip) { return ip.is_v4() ? 4u : 6u; };
  const bool six = a.family == 6;
  if (a.shared && family_of(a.shared->addr) != a.family) {
    throw UsageError{"--shared " + to_string(*a.shared) + " is IPv" + std::to_string(family_of(a.shared->addr)) +
                     ", --family " + std::to_string(a.family) + ": give --family " +
                     std::to_string(family_of(a.shared->addr))};
  }
  if (a.peer_ip && family_of(*a.peer_ip) != a.family) {
    throw UsageError{"--peer-ip " + to_string(*a.peer_ip) + " is not of --family " + std::to_string(a.family)};
  }
  if (!a.shared) a.shared = *parse_ip_cidr(six ? kSharedIp6 : kSharedIp);
  if (!a.peer_ip) {
    a.peer_ip = *parse_ip(a.remote == Remote::linux ? (six ? kLinuxIp6 : kLinuxIp) : (six ? kXkPeerIp6 : kXkPeerIp));
  }
  if (!a.shared->contains(*a.peer_ip) || a.shared->addr == *a.peer_ip) {
    throw UsageError{"--peer-ip " + to_string(*a.peer_ip) + ": the receiver is on the link, so on --shared " +
                     to_string(*a.shared) + "'s prefix, and another address"};
  }
  if (a.mpirun_args.size() && a.launcher != Launcher::mpirun) {
    throw UsageError{"--mpirun-args is for --launcher mpirun"};
  }
  if (a.node_port.empty() != a.rank_port.empty()) {
    throw UsageError{"--node-port and --rank-port go together: filterd's port to the nodes' hosts, and the nodes' own"};
  }
  if (!a.remote_nodes() && (a.node_control_given || !a.control_token.empty() || !a.node_port_opts.empty() ||
                            !a.rank_port_opts.empty())) {
    throw UsageError{"--node-control, --control-token and --node-port-opts/--rank-port-opts are for nodes on other "
                     "hosts: give --node-port and --rank-port"};
  }
  if (a.remote_nodes() && std::find(a.modes.begin(), a.modes.end(), "central") != a.modes.end()) {
    throw UsageError{"--node-port: central mode relays to memif nodes only; give --modes steer (and standalone)"};
  }
  return a;
}

// `text` with every %r replaced by the rank (a node's own port, eth%r).
std::string with_rank(std::string text, unsigned rank) {
  const std::string r = std::to_string(rank);
  for (std::size_t at = 0; (at = text.find("%r", at)) != std::string::npos; at += r.size()) text.replace(at, 2, r);
  return text;
}

// `xk-scale rank -- PROGRAM ARGS`: started by mpirun as rank R of N, it
// becomes PROGRAM ARGS --seed R+1 --label rankR (its stream and its name in
// the output), with %r in ARGS replaced by R.
int rank_main(int argc, char** argv) {
  std::vector<std::string> cmd;
  int i = 2;
  if (i < argc && std::string_view(argv[i]) == "--") ++i;
  for (; i < argc; ++i) cmd.emplace_back(argv[i]);
  if (cmd.empty()) {
    std::fprintf(stderr, "%s: rank: missing the program to run (xk-scale rank -- PROGRAM ARGS...)\ntry '%s --help'\n",
                 kProg, kProg);
    return 2;
  }
  const char* rank = nullptr;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if ((rank = std::getenv(var)) != nullptr) break;
  }
  if (rank == nullptr) {
    std::fprintf(stderr, "%s: rank: no OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK: not started by mpirun\ntry '%s --help'\n",
                 kProg, kProg);
    return 2;
  }
  unsigned r = 0;
  try {
    r = parse_number<unsigned>("rank", rank, 0, 1u << 20);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: rank %s\ntry '%s --help'\n", kProg, e.what.c_str(), kProg);
    return 2;
  }
  for (auto& c : cmd) c = with_rank(c, r);
  cmd.insert(cmd.end(), {"--seed", std::to_string(r + 1), "--label", "rank" + std::to_string(r)});
  std::vector<char*> args;
  for (auto& c : cmd) args.push_back(c.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "%s: rank %u: cannot run %s: %s\n", kProg, r, args[0], std::strerror(errno));
  return 127;
}

std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// The program next to xk-scale in the build tree (apps/scale/xk-scale ->
// apps/ttcp/xk-ttcp, filterd/filterd) or in the same folder (installed).
std::string locate(const std::string& given, const std::vector<std::string>& relative, const char* what,
                   const char* flag) {
  if (!given.empty()) return fs::absolute(given).string();
  fs::path dir = fs::path(self_exe()).parent_path();
  std::string looked;
  for (const auto& rel : relative) {
    fs::path p = (dir / rel).lexically_normal();
    if (is_executable_file(p.string())) return p.string();
    looked += "\n  " + p.string();
  }
  throw std::runtime_error(std::string(what) + " not found; looked at:" + looked + "\ngive its path with " + flag);
}

// A word as a shell would need it written (quoted when it has anything but
// the safe characters), for the command line in the report.
std::string shell_word(std::string_view w) {
  const bool safe = !w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                      "0123456789-_./=:,@%+") == std::string_view::npos;
  if (safe) return std::string(w);
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The local time now, through strftime's `format`.
std::string timestamp(const char* format = "%Y%m%d-%H%M%S") {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char b[64];
  std::strftime(b, sizeof b, format, &tm);
  return b;
}

std::string human_bytes(std::uint64_t b) {
  if (b % (1ull << 30) == 0) return std::to_string(b >> 30) + "g";
  if (b % (1ull << 20) == 0) return std::to_string(b >> 20) + "m";
  if (b % (1ull << 10) == 0) return std::to_string(b >> 10) + "k";
  return std::to_string(b);
}

// The Linux receiver of --remote linux: N connections read to their end at
// once (one thread, selectors), the contract's RESULT lines of a receiver.
constexpr const char* kLinuxReceiver = R"PY(
import resource, selectors, socket, sys, time
host, port, n, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ls = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(max(n, 16))
sel = selectors.DefaultSelector()
sel.register(ls, selectors.EVENT_READ)
print("xk-scale linux receiver on %s:%d for %d connections: ready" % (host, port, n), flush=True)
buf = bytearray(1 << 20)
conns, accepted, done, total, first, last = {}, 0, 0, 0, None, None
while done < n:
    events = sel.select(timeout=timeout)
    if not events:
        print("linux receiver: no progress for %.0f s (%d of %d done)" % (timeout, done, n), flush=True)
        sys.exit(1)
    for key, _ in events:
        if key.fileobj is ls:
            c, peer = ls.accept()
            accepted += 1
            t = time.monotonic()
            if first is None:
                first = t
            conns[c] = [accepted, peer, 0, t]
            sel.register(c, selectors.EVENT_READ)
            if accepted == n:
                sel.unregister(ls)
            continue
        c = key.fileobj
        st = conns[c]
        try:
            k = c.recv_into(buf)
        except ConnectionError as e:
            print("linux receiver: connection %d: %s" % (st[0], e), flush=True)
            sys.exit(1)
        if k:
            st[2] += k
            continue
        t = time.monotonic()
        sel.unregister(c)
        c.close()
        done += 1
        total += st[2]
        last = t
        s = max(t - st[3], 1e-9)
        print("RESULT role=receiver conn=%d peer=%s:%d bytes=%d seconds=%.6f gbps=%.3f"
              % (st[0], st[1][0], st[1][1], st[2], s, st[2] * 8 / s / 1e9), flush=True)
ru = resource.getrusage(resource.RUSAGE_SELF)
cpu = ru.ru_utime + ru.ru_stime
s = max(last - first, 1e-9)
print("RESULT role=receiver total=1 connections=%d bytes=%d seconds=%.6f gbps=%.3f cpu_s=%.3f cpu_s_per_gb=%.3f"
      % (n, total, s, total * 8 / s / 1e9, cpu, cpu / max(total / 1e9, 1e-9)), flush=True)
)PY";

class Experiment {
 public:
  explicit Experiment(Args a) : a_(std::move(a)) {}
  ~Experiment() { teardown(); }
  Experiment(const Experiment&) = delete;
  Experiment& operator=(const Experiment&) = delete;

  int run();

 private:
  struct Point {
    std::string mode;
    bool csum;
    unsigned n;
    unsigned k;  // connections per node
    unsigned repeat;
    unsigned conns() const { return n * k; }
  };
  // One run's names, places and processes (destroyed -- killed, reaped --
  // on every way out).
  struct Run {
    Point p;
    std::size_t index = 0;
    std::string dir, id, ctl, ext_memif, node_memif, csum, timeout, peer_ip;
    bool standalone = false;
    double t_start = 0, deadline = 0;
    std::unique_ptr<Child> peer;       // the receiver
    std::unique_ptr<Child> remote_fd;  // --remote xk-filterd: the remote machine's filterd
    std::unique_ptr<Child> filterd;
    std::vector<std::unique_ptr<Child>> nodes;
  };
  Row run_one(const Point& p, std::size_t index);
  Run plan(const Point& p, std::size_t index) const;
  void start_receiver(Run& run);
  std::vector<std::string> external_port(const Run& run, const std::string& more_opts = "") const;
  std::string external_opts() const;
  void start_filterd(Run& run, const std::vector<std::string>& port);
  std::vector<std::string> node_argv(const Run& run) const;
  void start_nodes(Run& run, const std::vector<std::string>& tx);
  void show_progress(Run& run) const;
  void wait_for_nodes(Run& run);
  void wait_for_receiver(Run& run);
  double stop_filterds(Run& run);
  Row row_of(const Run& run, double filterd_cpu_s, double remote_fd_cpu) const;
  void setup_linux();
  void set_linux_csum(bool csum);
  void teardown();
  std::vector<std::string> in_xk_ns(std::vector<std::string> argv) const;
  IpCidr shared() const;
  IpAddr peer_addr() const;
  std::string peer_cidr() const;
  std::vector<std::string> filterd_ips(const IpCidr& own) const;
  std::string control_token() const;

  Args a_;
  std::string results_, runs_, tmp_, self_;
  std::string token_;  // nodes on other hosts: the control token's file
  // --remote linux: the namespaces and veth ends (made by setup_linux).
  std::string nsa_, nsb_, lnx_, xkif_;
  bool linux_up_ = false;
  std::optional<bool> linux_csum_;
};

std::vector<std::string> Experiment::in_xk_ns(std::vector<std::string> argv) const {
  if (a_.remote != Remote::linux) return argv;
  argv.insert(argv.begin(), {"ip", "netns", "exec", nsb_});
  return argv;
}

constexpr const char* kPeerPort = "5001";

IpCidr Experiment::shared() const { return *a_.shared; }
IpAddr Experiment::peer_addr() const { return *a_.peer_ip; }

// The receiver's address with the shared prefix's length (the link's).
std::string Experiment::peer_cidr() const { return to_string(IpCidr{peer_addr(), shared().prefix_len}); }

// filterd's --ip: the shared address, and with --family 6 the IPv4 one
// filterd needs beside it (its ARP, ICMP and the nodes' IPv4 side).
std::vector<std::string> Experiment::filterd_ips(const IpCidr& own) const {
  if (own.addr.is_v4()) return {"--ip", to_string(own)};
  return {"--ip", kSharedIp, "--ip", to_string(own)};
}

// The nodes' control token: the given file, or a fresh secret in the results
// folder, readable by its owner only (filterd refuses anything looser).
std::string Experiment::control_token() const {
  if (!a_.control_token.empty()) return fs::absolute(a_.control_token).string();
  const std::string path = results_ + "/control-token";
  std::ifstream rnd("/dev/urandom", std::ios::binary);
  unsigned char key[32];
  if (!rnd.read(reinterpret_cast<char*>(key), sizeof key)) throw std::runtime_error("cannot read /dev/urandom");
  std::string hex;
  for (unsigned char b : key) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  fs::remove(path);
  const mode_t old = umask(077);
  std::ofstream out(path);
  umask(old);
  out << hex << "\n";
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
  return path;
}

void Experiment::setup_linux() {
  const std::string id = std::to_string(getpid());
  nsa_ = "xk-scale-" + id + "-a";
  nsb_ = "xk-scale-" + id + "-b";
  lnx_ = "xksl" + id;
  xkif_ = "xksx" + id;
  const std::string log = results_ + "/setup.log";
  linux_up_ = true;  // from here on teardown deletes what exists
  run_command({"ip", "netns", "add", nsa_}, log);
  run_command({"ip", "netns", "add", nsb_}, log);
  run_command({"ip", "link", "add", lnx_, "type", "veth", "peer", "name", xkif_}, log);
  run_command({"ip", "link", "set", lnx_, "netns", nsa_}, log);
  run_command({"ip", "link", "set", xkif_, "netns", nsb_}, log);
  // IPv6 off where xk takes the veth (af_packet: the kernel would claim
  // filterd's link-local address) and, for IPv4 runs, on Linux's side too.
  for (const auto& [ns, dev] : {std::pair{nsa_, lnx_}, std::pair{nsb_, xkif_}}) {
    const bool v6 = ns == nsa_ && a_.family == 6;
    run_command({"ip", "netns", "exec", ns, "sysctl", "-qw",
                 std::string("net.ipv6.conf.all.disable_ipv6=") + (v6 ? "0" : "1")}, log);
    run_command({"ip", "-n", ns, "link", "set", "lo", "up"}, log);
    run_command({"ip", "-n", ns, "link", "set", dev, "mtu", std::to_string(a_.mtu)}, log);
    // No segmentation offloads: xk sees wire-sized frames, as on a NIC.
    run_command({"ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"}, log);
  }
  std::vector<std::string> add{"ip", "-n", nsa_, "addr", "add", peer_cidr(), "dev", lnx_};
  if (a_.family == 6) add.push_back("nodad");  // usable at once: the namespace's link holds only xk
  run_command(add, log);
  run_command({"ip", "-n", nsa_, "link", "set", lnx_, "up"}, log);
  run_command({"ip", "-n", nsb_, "link", "set", xkif_, "up"}, log);
}

// Linux computes and checks every checksum itself: no veth checksum offload
// (with tx offload af_packet would hand xk frames carrying only the
// pseudo-header sum). Checksum off cannot be had with Linux (parse_args).
void Experiment::set_linux_csum(bool csum) {
  if (linux_csum_ == csum) return;
  const std::string log = results_ + "/setup.log";
  run_command({"ip", "netns", "exec", nsa_, "ethtool", "-K", lnx_, "rx", "off", "tx", "off"}, log);
  run_command({"ip", "netns", "exec", nsb_, "ethtool", "-K", xkif_, "rx", "off", "tx", "off"}, log);
  linux_csum_ = csum;
}

void Experiment::teardown() {
  if (linux_up_) {
    const std::string log = results_ + "/setup.log";
    for (const auto& ns : {nsa_, nsb_}) {
      try {
        run_command({"ip", "netns", "del", ns}, log);
      } catch (const RunFailure&) {
      }
    }
    linux_up_ = false;
  }
  if (!tmp_.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
    tmp_.clear();
  }
}

// One run, in the order its processes start: the receiver's side, filterd,
// the nodes; then waiting for them, and the row from what they printed.
Row Experiment::run_one(const Point& p, std::size_t index) {
  Run run = plan(p, index);
  start_receiver(run);
  const std::vector<std::string> port = external_port(run);
  start_filterd(run, port);
  const auto fd_cpu0 = run.standalone ? std::optional<double>(0) : process_cpu_seconds(run.filterd->pid());
  if (!fd_cpu0) throw RunFailure{"filterd is gone before the nodes started; " + run.filterd->log()};
  start_nodes(run, node_argv(run));
  wait_for_nodes(run);
  const auto fd_cpu1 = run.standalone ? std::optional<double>(0) : process_cpu_seconds(run.filterd->pid());
  if (!fd_cpu1) throw RunFailure{"filterd is gone at the end of the run; " + run.filterd->log()};
  wait_for_receiver(run);
  const double remote_fd_cpu = stop_filterds(run);
  return row_of(run, *fd_cpu1 - *fd_cpu0, remote_fd_cpu);
}

Experiment::Run Experiment::plan(const Point& p, std::size_t index) const {
  Run run;
  run.p = p;
  const std::string label = p.mode + "-csum" + (p.csum ? "on" : "off") + "-n" + std::to_string(p.n) +
                            (p.k > 1 ? "-k" + std::to_string(p.k) : "") +
                            (a_.repeat > 1 ? "-r" + std::to_string(p.repeat) : "");
  run.dir = runs_ + "/" + label;
  fs::create_directories(run.dir);
  run.index = index;
  run.id = std::to_string(getpid()) + "-" + std::to_string(index);
  run.ctl = tmp_ + "/ctl-" + std::to_string(index) + ".sock";
  // memif sockets in the abstract namespace (DPDK's default): no file to leave.
  run.ext_memif = "/run/xk-scale-" + run.id + ".ext";
  run.node_memif = "/run/xk-scale-" + run.id + ".nodes";
  run.csum = p.csum ? "on" : "off";
  run.timeout = fmt("%.0f", std::min(a_.timeout_s, 120.0));
  run.standalone = p.mode == "standalone";
  run.t_start = now_seconds();
  run.deadline = run.t_start + a_.timeout_s;
  return run;
}

// The remote side first: its receiver (a memif server) waits for its link,
// which comes up when filterd's external port connects.
void Experiment::start_receiver(Run& run) {
  const Point& p = run.p;
  if (a_.remote == Remote::xk_filterd) {
    // Another xk machine: its filterd owns the external link (the memif
    // server this time) and the receiver is a node attached to it.
    run.peer_ip = to_string(peer_addr());
    const std::string rctl = tmp_ + "/remote-ctl-" + std::to_string(run.index) + ".sock";
    const IpCidr remote_ip{peer_addr(), shared().prefix_len};
    std::vector<std::string> rfd{a_.filterd, "--mode", "steer", "--control", rctl, "--memif-socket", "/run/xk-scale-" + run.id + ".remote-nodes", "--csum", run.csum,
                                 "--idle", a_.filterd_idle,
                                 "--port", "net_memif0,role=server,id=0,socket=" + run.ext_memif};
    const std::vector<std::string> rips =
        remote_ip.addr.is_v4() ? std::vector<std::string>{"--ip", to_string(remote_ip)}
                               : std::vector<std::string>{"--ip", "192.0.2.20/24", "--ip", to_string(remote_ip)};
    rfd.insert(rfd.end(), rips.begin(), rips.end());
    rfd.insert(rfd.end(), {"--port-opts", external_opts()});
    if (!a_.tcp_opts.empty()) rfd.insert(rfd.end(), {"--tcp-opts", a_.tcp_opts});
    run.remote_fd = std::make_unique<Child>("the remote filterd", rfd, run.dir + "/remote-filterd.log");
    wait_for_text(*run.remote_fd, "ready", 60);
    std::vector<std::string> argv{a_.program, "receive", "--filterd", rctl, "--tcp-port", kPeerPort,
                                  "--connections", std::to_string(p.conns()), "--csum", run.csum,
                                  "--verify", a_.verify ? "on" : "off", "--idle", a_.peer_idle, "--timeout",
                                  run.timeout};
    if (!a_.tcp_opts.empty()) argv.insert(argv.end(), {"--tcp-opts", a_.tcp_opts});
    if (a_.progress_s) argv.insert(argv.end(), {"--progress", fmt("%g", *a_.progress_s)});
    run.peer = std::make_unique<Child>("the receiver", argv, run.dir + "/peer.log");
    wait_for_text(*run.peer, "ready", 60);
  } else if (a_.remote == Remote::xk) {
    run.peer_ip = to_string(peer_addr());
    std::vector<std::string> argv{a_.program, "receive", "--port",
                                  "net_memif0,role=server,id=0,socket=" + run.ext_memif, "--ip", peer_cidr(),
                                  "--tcp-port", kPeerPort, "--connections", std::to_string(p.conns()), "--csum", run.csum,
                                  "--verify", a_.verify ? "on" : "off", "--idle", a_.peer_idle, "--timeout",
                                  run.timeout};
    argv.insert(argv.end(), {"--port-opts", external_opts()});
    if (!a_.tcp_opts.empty()) argv.insert(argv.end(), {"--tcp-opts", a_.tcp_opts});
    if (a_.progress_s) argv.insert(argv.end(), {"--progress", fmt("%g", *a_.progress_s)});
    run.peer = std::make_unique<Child>("the receiver", argv, run.dir + "/peer.log");
    wait_for_text(*run.peer, "waiting for the link", 60);
  } else {
    run.peer_ip = to_string(peer_addr());
    set_linux_csum(p.csum);
    run.peer = std::make_unique<Child>("the Linux receiver",
                                       std::vector<std::string>{"ip", "netns", "exec", nsa_, "python3", "-c",
                                                                kLinuxReceiver, run.peer_ip, kPeerPort,
                                                                std::to_string(p.conns()), run.timeout},
                                       run.dir + "/peer.log");
  }
}

// The external memif link's options, the same at both ends: its MTU, and
// the largest frame it carries (--frame-max; 0, the default: MTU-sized
// frames, as a wire carries).
std::string Experiment::external_opts() const {
  return "mtu=" + std::to_string(a_.mtu) + " frame_max=" + std::to_string(a_.frame_max);
}

// The external link, as filterd (or a standalone node) takes it.
// (`more_opts`: options of the taker's own, added to the link's.)
std::vector<std::string> Experiment::external_port(const Run& run, const std::string& more_opts) const {
  std::string opts = a_.remote != Remote::linux
                         ? external_opts()
                         : "mbufs=16383" + (a_.mtu != 1500 ? " mtu=" + std::to_string(a_.mtu) : std::string());
  if (!more_opts.empty()) opts += " " + more_opts;
  const std::string devargs = a_.remote != Remote::linux ? "net_memif1,role=client,id=0,socket=" + run.ext_memif
                                                         : "net_af_packet0,iface=" + xkif_ + ",framecnt=4096";
  return {"--port", devargs, "--port-opts", opts};
}

void Experiment::start_filterd(Run& run, const std::vector<std::string>& port) {
  if (run.standalone) return;
  std::vector<std::string> fd{a_.filterd, "--mode", run.p.mode, "--control", run.ctl, "--memif-socket",
                              run.node_memif, "--channels", a_.channels, "--csum", run.csum, "--idle", a_.filterd_idle};
  const std::vector<std::string> ips = filterd_ips(shared());
  fd.insert(fd.end(), ips.begin(), ips.end());
  fd.insert(fd.end(), port.begin(), port.end());
  if (!a_.tcp_opts.empty()) fd.insert(fd.end(), {"--tcp-opts", a_.tcp_opts});
  if (a_.remote_nodes()) {
    fd.insert(fd.end(), {"--node-port", a_.node_port, "--control-tcp", a_.node_control, "--control-token", token_});
    if (!a_.node_port_opts.empty()) fd.insert(fd.end(), {"--node-port-opts", a_.node_port_opts});
  }
  run.filterd = std::make_unique<Child>("filterd", in_xk_ns(fd), run.dir + "/filterd.log");
  wait_for_text(*run.filterd, "ready", 60);
  if (a_.remote != Remote::xk_filterd) wait_for_text(*run.peer, "ready", 60);
}

// What every node runs: K streams to the receiver; a standalone node owns
// the external link and the address filterd would have.
//
// A node's DPDK port keeps the frames a full ring refuses (a memif channel
// to filterd, the standalone node's link, a node's own Ethernet port): a
// node with many connections fills the ring at once, and dropping there
// costs each one a retransmission timeout. (xk's shm driver has no such
// queue, and needs none: TCP keeps what a full shm ring refuses, and sends
// it again.)
std::vector<std::string> Experiment::node_argv(const Run& run) const {
  constexpr const char* kKeep = "tx_keep=on";
  const std::string host = a_.family == 6 ? "[" + run.peer_ip + "]" : run.peer_ip;
  std::vector<std::string> tx{a_.program, "transmit", "--peer", host + ":" + kPeerPort,
                              "--csum", run.csum, "--verify", a_.verify ? "on" : "off", "--idle", a_.idle,
                              "--timeout", run.timeout};
  if (run.standalone) {
    const auto port = external_port(run, kKeep);
    tx.insert(tx.end(), port.begin(), port.end());
    tx.insert(tx.end(), {"--ip", to_string(shared())});
  } else if (a_.remote_nodes()) {
    // A node on another host: control over TCP, frames on its own port
    // (%r: its number, replaced below or by `xk-scale rank`).
    tx.insert(tx.end(), {"--filterd", "tcp:" + a_.node_control, "--filterd-token", token_, "--port", a_.rank_port,
                         "--port-opts", a_.rank_port_opts.empty() ? kKeep : a_.rank_port_opts + " " + kKeep});
  } else {
    tx.insert(tx.end(), {"--filterd", run.ctl});
    if (a_.channels != "shm") tx.insert(tx.end(), {"--port-opts", kKeep});
  }
  if (a_.seconds) {
    tx.insert(tx.end(), {"--seconds", fmt("%g", *a_.seconds)});
  } else {
    tx.insert(tx.end(), {"--bytes", std::to_string(a_.bytes)});
  }
  if (a_.buflen) tx.insert(tx.end(), {"--buflen", std::to_string(*a_.buflen)});
  if (!a_.tcp_opts.empty()) tx.insert(tx.end(), {"--tcp-opts", a_.tcp_opts});
  if (run.p.k > 1) tx.insert(tx.end(), {"--connections", std::to_string(run.p.k)});
  return tx;
}

void Experiment::start_nodes(Run& run, const std::vector<std::string>& tx) {
  if (a_.launcher == Launcher::local) {
    for (unsigned i = 0; i < run.p.n; ++i) {
      auto argv = tx;
      for (auto& w : argv) w = with_rank(w, i);
      argv.insert(argv.end(), {"--seed", std::to_string(i + 1), "--label", "node" + std::to_string(i)});
      run.nodes.push_back(std::make_unique<Child>("node " + std::to_string(i), in_xk_ns(argv),
                                                  run.dir + "/node" + std::to_string(i) + ".log"));
    }
    return;
  }
  std::vector<std::string> argv{a_.mpirun, "-np", std::to_string(run.p.n), "--oversubscribe", "--bind-to", "none",
                                "--tag-output"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), a_.mpirun_args.begin(), a_.mpirun_args.end());
  argv.insert(argv.end(), {self_, "rank", "--"});
  argv.insert(argv.end(), tx.begin(), tx.end());
  run.nodes.push_back(std::make_unique<Child>("mpirun", in_xk_ns(argv), run.dir + "/mpirun.log"));
}

// The receiver's PROGRESS lines, shown as they come.
void Experiment::show_progress(Run& run) const {
  if (!a_.progress_s) return;
  for (const auto& l : run.peer->new_lines()) {
    if (auto at = l.find("PROGRESS "); at != std::string::npos) std::printf("      %s\n", l.c_str() + at);
  }
  std::fflush(stdout);
}

// Until every node is done; a node that fails, a filterd that dies, a signal
// or the deadline ends the run.
void Experiment::wait_for_nodes(Run& run) {
  for (;;) {
    if (g_stop_signal.load() != 0) throw RunFailure{"stopped by signal"};
    bool any = false;
    for (auto& n : run.nodes) {
      if (n->running()) {
        any = true;
      } else if (n->status() != 0) {
        throw RunFailure{n->name() + " " + n->describe_status() + "; " + n->log() + " ends:\n" + n->log_tail()};
      }
    }
    if (!any) return;
    for (Child* f : {run.filterd.get(), run.remote_fd.get()}) {
      if (f != nullptr && !f->running()) {
        throw RunFailure{f->name() + " " + f->describe_status() + " during the run; " + f->log() + " ends:\n" +
                         f->log_tail()};
      }
    }
    if (now_seconds() > run.deadline) {
      throw RunFailure{"the run took longer than --timeout " + fmt("%.0f", a_.timeout_s) + " s; logs in " + run.dir};
    }
    show_progress(run);
    sleep_ms(20);
  }
}

void Experiment::wait_for_receiver(Run& run) {
  while (run.peer->running()) {
    if (g_stop_signal.load() != 0) throw RunFailure{"stopped by signal"};
    if (now_seconds() > run.deadline) {
      throw RunFailure{"the receiver did not finish after every node had; " + run.peer->log() + " ends:\n" +
                       run.peer->log_tail()};
    }
    show_progress(run);
    sleep_ms(20);
  }
  show_progress(run);
  if (run.peer->status() != 0) {
    throw RunFailure{run.peer->name() + " " + run.peer->describe_status() + "; " + run.peer->log() + " ends:\n" +
                     run.peer->log_tail()};
  }
}

// Stops filterd and the remote filterd; returns the remote filterd's CPU
// seconds (the remote machine's CPU is its receiver's and its filterd's).
double Experiment::stop_filterds(Run& run) {
  double remote_fd_cpu = 0;
  if (run.remote_fd) {
    const auto c = process_cpu_seconds(run.remote_fd->pid());
    if (!c) throw RunFailure{"the remote filterd is gone at the end of the run; " + run.remote_fd->log()};
    remote_fd_cpu = *c;
  }
  for (Child* f : {run.filterd.get(), run.remote_fd.get()}) {
    if (f != nullptr && !f->stop()) {
      throw RunFailure{f->name() + " " + f->describe_status() + " when stopped; " + f->log() + " ends:\n" +
                       f->log_tail()};
    }
  }
  return remote_fd_cpu;
}

// The row, from the receiver's and the nodes' RESULT lines, checked against
// each other and against what was asked.
Row Experiment::row_of(const Run& run, double filterd_cpu_s, double remote_fd_cpu) const {
  const Point& p = run.p;
  const std::string& dir = run.dir;
  Row r;
  r.mode = p.mode;
  r.csum = p.csum;
  r.n = p.n;
  r.k = p.k;
  r.conns = p.conns();
  r.repeat = p.repeat;
  r.launcher = a_.launcher == Launcher::local ? "local" : "mpirun";
  // A standalone node sits on the external link itself (memif to the peer).
  r.node_link = run.standalone ? "memif" : a_.remote_nodes() ? "ethernet" : a_.channels;
  r.remote = a_.remote == Remote::xk ? "xk" : a_.remote == Remote::linux ? "linux" : "xk-filterd";
  r.mtu = a_.mtu;
  r.family = a_.family;
  r.wall_seconds = now_seconds() - run.t_start;
  Fields total;
  for (auto& f : result_lines(run.peer->log_text(), "receiver")) {
    if (f.count("total") != 0) total = f;
  }
  if (total.empty()) throw RunFailure{"the receiver printed no 'RESULT role=receiver total=1' line; " + run.peer->log()};
  const std::string who = "the receiver (" + run.peer->log() + ")";
  if (number(total, "connections", who) != p.conns()) {
    throw RunFailure{who + " counted " + total.at("connections") + " connections, not " + std::to_string(p.conns())};
  }
  // Each connection's own rate, as the receiver saw it: the spread and
  // Jain's fairness index, (sum x)^2 / (n sum x^2).
  std::vector<double> per_conn;
  for (auto& f : result_lines(run.peer->log_text(), "receiver")) {
    if (f.count("conn") != 0) per_conn.push_back(number(f, "gbps", who));
  }
  if (per_conn.size() != p.conns()) {
    throw RunFailure{who + " printed " + std::to_string(per_conn.size()) + " per-connection lines, not " +
                     std::to_string(p.conns())};
  }
  r.conn_min = *std::min_element(per_conn.begin(), per_conn.end());
  r.conn_max = *std::max_element(per_conn.begin(), per_conn.end());
  r.jain = jain_index(per_conn);
  r.bytes = static_cast<std::uint64_t>(number(total, "bytes", who));
  r.seconds = number(total, "seconds", who);
  // The transfer's CPU where the program reports it (xk-ttcp's xfer_cpu_s:
  // from the first connection to the last end), else its whole life.
  r.peer_cpu_s = number(total, total.count("xfer_cpu_s") ? "xfer_cpu_s" : "cpu_s", who) + remote_fd_cpu;
  if (r.bytes == 0 || !(r.seconds > 0)) throw RunFailure{who + ": no bytes or no time"};
  r.aggregate_gbps = static_cast<double>(r.bytes) * 8 / r.seconds / 1e9;
  r.aggregate_mbps = static_cast<double>(r.bytes) / r.seconds / 1e6;
  const double gb = static_cast<double>(r.bytes) / 1e9;

  std::vector<Fields> sent;
  for (const auto& n : run.nodes) {
    for (auto& f : result_lines(n->log_text(), "transmitter")) {
      if (f.count("conn") == 0) sent.push_back(f);  // a node's whole line, not its connections'
    }
  }
  if (sent.size() != p.n) {
    throw RunFailure{std::to_string(sent.size()) + " 'RESULT role=transmitter' lines from " + std::to_string(p.n) +
                     " nodes; logs in " + dir};
  }
  double sent_bytes = 0;
  r.per_node_min = 1e300;
  r.per_node_max = 0;
  for (const auto& f : sent) {
    const std::string node = "node " + (f.count("label") ? f.at("label") : std::string("?")) + " (" + dir + ")";
    double g = number(f, "gbps", node);
    sent_bytes += number(f, "bytes", node);
    r.nodes_cpu_s += number(f, f.count("xfer_cpu_s") ? "xfer_cpu_s" : "cpu_s", node);
    r.per_node_mean += g / p.n;
    r.per_node_min = std::min(r.per_node_min, g);
    r.per_node_max = std::max(r.per_node_max, g);
  }
  if (sent_bytes != static_cast<double>(r.bytes)) {
    throw RunFailure{"the nodes sent " + fmt("%.0f", sent_bytes) + " bytes, the receiver got " +
                     std::to_string(r.bytes) + "; logs in " + dir};
  }
  if (!a_.seconds && r.bytes != a_.bytes * p.conns()) {
    throw RunFailure{"the receiver got " + std::to_string(r.bytes) + " bytes, not " + std::to_string(p.conns()) + " x " +
                     std::to_string(a_.bytes) + "; logs in " + dir};
  }
  r.filterd_cpu_s = filterd_cpu_s;
  r.filterd_s_per_gb = r.filterd_cpu_s / gb;
  r.nodes_s_per_gb = r.nodes_cpu_s / gb;
  r.peer_s_per_gb = r.peer_cpu_s / gb;
  r.system_s_per_gb = r.filterd_s_per_gb + r.nodes_s_per_gb + r.peer_s_per_gb;
  return r;
}

int Experiment::run() {
  self_ = self_exe();
  a_.program = locate(a_.program, {"../ttcp/xk-ttcp", "xk-ttcp"}, "xk-ttcp", "--program");
  a_.filterd = locate(a_.filterd, {"../../filterd/filterd", "filterd"}, "filterd", "--filterd-bin");
  if (a_.remote == Remote::linux && geteuid() != 0) {
    throw std::runtime_error("--remote linux needs root (network namespaces); --remote xk does not");
  }
  results_ = a_.results.empty() ? "xk-scale-results/" + timestamp() : a_.results;
  fs::create_directories(results_);
  results_ = fs::canonical(results_).string();
  runs_ = results_ + "/runs";
  fs::create_directories(runs_);
  if (a_.remote_nodes()) token_ = control_token();
  char tmpl[] = "/tmp/xk-scale.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  tmp_ = tmpl;

  const std::string started = timestamp("%Y-%m-%d %H:%M:%S %Z");
  // The points of the matrix, then the connection sweep's; with --repeat
  // the whole list runs R times over, round by round, so that a drift of
  // the machine's speed (another guest, a slow minute) falls on every point
  // alike, not on the one whose runs came then.
  std::vector<Point> round;
  for (const auto& mode : a_.modes) {
    for (bool csum : a_.csums) {
      for (unsigned n : a_.ns) {
        if (mode == "standalone" && n != 1) continue;  // one link, one stack on it
        for (unsigned k : a_.conns_per_node) round.push_back({mode, csum, n, k, 1});
      }
    }
    // The sweep of connections in all: as many nodes as the largest N
    // allows, the rest as connections per node.
    const unsigned most = *std::max_element(a_.ns.begin(), a_.ns.end());
    for (unsigned t : a_.conns_totals) {
      if (mode == "standalone") break;  // one node: its connections are --conns-per-node's
      const unsigned n = std::min(t, most), k = t / n;
      const bool have = std::any_of(round.begin(), round.end(), [&](const Point& q) {
        return q.mode == mode && q.csum == a_.csums.front() && q.n == n && q.k == k;
      });
      if (!have) round.push_back({mode, a_.csums.front(), n, k, 1});
    }
  }
  std::vector<Point> points;
  for (unsigned r = 1; r <= a_.repeat; ++r) {
    for (Point p : round) {
      p.repeat = r;
      points.push_back(p);
    }
  }
  const std::string per = a_.seconds ? fmt("%g s", *a_.seconds) + " per connection"
                                     : human_bytes(a_.bytes) + " per connection";
  const std::string setup = std::string("remote ") +
                            (a_.remote == Remote::xk           ? "xk (memif)"
                             : a_.remote == Remote::xk_filterd ? "xk behind its own filterd (memif)"
                                                               : "linux (af_packet)") +
                            ", IPv" + std::to_string(a_.family) + " (" + to_string(shared()) + " to " +
                            to_string(peer_addr()) + "), " + (a_.launcher == Launcher::local ? "local" : "mpirun") +
                            " launcher, " +
                            (a_.remote_nodes() ? "nodes over Ethernet + TCP control, " : "") + per +
                            ", MTU " + std::to_string(a_.mtu) +
                            (a_.remote == Remote::linux ? std::string()
                             : a_.frame_max == 0
                                 ? std::string(", MTU-sized frames on the external link")
                                 : ", frames up to " + std::to_string(a_.frame_max) + " B on the external link");
  std::printf("xk-scale: %zu runs (%s); results in %s\n", points.size(), setup.c_str(), results_.c_str());
  std::printf("  node program %s\n  filterd      %s\n", a_.program.c_str(), a_.filterd.c_str());
  std::fflush(stdout);

  std::vector<Row> rows;
  const std::string csv = results_ + "/scale.csv";
  try {
    if (a_.remote == Remote::linux) setup_linux();
    for (std::size_t i = 0; i < points.size(); ++i) {
      const Point& p = points[i];
      std::string tag = "[" + std::to_string(i + 1) + "/" + std::to_string(points.size()) + "] " + p.mode +
                        " csum=" + (p.csum ? "on" : "off") + " N=" + std::to_string(p.n) +
                        (p.k > 1 ? " K=" + std::to_string(p.k) : "") +
                        (a_.repeat > 1 ? " #" + std::to_string(p.repeat) : "");
      std::printf("%s ...\n", tag.c_str());
      std::fflush(stdout);
      Row r = run_one(p, i);
      rows.push_back(r);
      write_csv(csv, rows);
      std::printf("%s: %.3f Gbit/s (%.1f MB/s), per node %.3f..%.3f, per connection %.3f..%.3f (Jain %.3f), "
                  "filterd %.3f s/GB, nodes %.3f s/GB, peer %.3f s/GB (%.1f s)\n",
                  tag.c_str(), r.aggregate_gbps, r.aggregate_mbps, r.per_node_min, r.per_node_max, r.conn_min,
                  r.conn_max, r.jain, r.filterd_s_per_gb, r.nodes_s_per_gb, r.peer_s_per_gb, r.wall_seconds);
      std::fflush(stdout);
    }
  } catch (const RunFailure& f) {
    if (!rows.empty()) write_csv(csv, rows);
    teardown();
    if (int sig = g_stop_signal.load(); sig != 0) {
      std::fprintf(stderr, "%s: stopped by %s after %zu of %zu runs; every process is stopped%s\n", kProg,
                   strsignal(sig), rows.size(), points.size(), rows.empty() ? "" : ("; " + csv).c_str());
      return 130;
    }
    std::fprintf(stderr, "%s: run %zu of %zu failed: %s\n", kProg, rows.size() + 1, points.size(), f.what.c_str());
    if (f.what.empty() || f.what.back() != '\n') std::fputc('\n', stderr);
    std::fprintf(stderr, "%s: logs of every run: %s\n", kProg, runs_.c_str());
    return 1;
  }
  teardown();

  std::vector<Row> shown = medians(rows);
  const Machine machine = Machine::here();
  std::printf("\nmachine: %s, %u cores, kernel %s, DPDK %s\n%s%s", machine.cpu.c_str(), machine.cores,
              machine.kernel.c_str(), machine.dpdk.c_str(),
              a_.repeat > 1 ? ("median of " + std::to_string(a_.repeat) + " runs each\n").c_str() : "",
              analysis_text(shown, rows, machine).c_str());
  ReportInput report{a_.command, setup, started, machine, rows, shown, {}, ""};
  report.plot_note = write_plots(results_, shown, setup, machine.cores, report.plots);
  write_report_html(results_, report);
  std::printf("\nresults: %s\n  report.html      the whole experiment on one page (open it in a browser)\n"
              "  scale.csv        one row per run\n",
              results_.c_str());
  if (report.plot_note.empty()) {
    for (const std::string& png : report.plots) std::printf("  %s\n", png.c_str());
  } else {
    std::printf("  (no plots: %s)\n", report.plot_note.c_str());
  }
  std::printf("  runs/            every process's log\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "rank") return rank_main(argc, argv);
  Args args;
  install_signal_handlers();
  return xk::apps::app_main(
      kProg,
      [&] {
        args = parse_args(argc, argv);
        for (int i = 0; i < argc; ++i) args.command += (i ? " " : "") + shell_word(argv[i]);
      },
      [&] {
        Experiment e(std::move(args));
        return e.run();
      });
}

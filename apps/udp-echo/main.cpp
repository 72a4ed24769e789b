// xk-udp-echo: one whole xk stack in a program of its own, talking to real
// hosts through DPDK (docs/apps-udp-echo.md).
//
//   xk-udp-echo server --port net_af_packet0,iface=veth1 --ip 192.0.2.10/24
//   xk-udp-echo client --port net_af_packet0,iface=veth1 --ip 192.0.2.10/24
//                      --peer 192.0.2.1:7 --count 2000 --sizes 1..60000
//
// The graph is composed from the flags (or read with --graph):
//
//   dpdk    net0  devargs=...
//   capture cap0  below=net0 file=... linktype=ether     (with --capture)
//   eth     eth0  below=cap0|net0
//   arp     arp0  below=eth0 pending=64
//   ipv4    ip0   below=eth0,arp0 addr=... [gw=...]
//   icmp    icmp0 below=ip0
//   udp     udp0  below=ip0 csum=on|off
//
// The server echoes every datagram to its sender, sending back the very Msg it
// received (no copy), and icmp0 answers pings. The client sends --count
// datagrams, one at a time, waits for each echo (timeout, bounded retries),
// compares every byte and exits non-zero on any mismatch or loss.
//
// One EventLoop (MonotonicClock, spin_then_sleep) runs on the main thread.
// SIGINT and SIGTERM are blocked in every thread and read from a signalfd
// that the loop polls: the loop stops, the graph is torn down normally (pcap
// files flushed and closed) and the counters are printed.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "xk/address.hpp"
#include "xk/apps/servers.hpp"
#include "xk/apps/stack.hpp"
#include "xk/counters.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/kinds.hpp"
#include "xk/protocols/udp.hpp"
#include "xk/timer.hpp"

namespace {

constexpr const char* kProg = "xk-udp-echo";
constexpr int kExitOk = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;

using xk::apps::parse_number;
using xk::apps::UsageError;

// ---- command line --------------------------------------------------------

constexpr const char* kUsageHead = R"(usage: xk-udp-echo server|client [options]

A standalone xk stack (dpdk -> eth -> arp -> ipv4 -> icmp, udp) on one DPDK port.
server: echo every UDP datagram back to its sender (and answer pings).
client: send --count datagrams to --peer, check every echoed byte, print a summary;
        exit 1 on any mismatch or loss.

stack:
)";
constexpr const char* kUsageTail = R"(  --print-graph       print the graph spec and exit
  --link-wait SEC     wait this long for the port's link (a memif peer) before
                      starting (default 10)

UDP:
  --udp-port N        server: port to echo on (default 7); client: local port (default ephemeral)
  --peer A.B.C.D:P    client: the echo server (required for client)
  --count N           client: datagrams to send (default 1000); server: exit after
                      echoing N datagrams (default 0: run until SIGINT/SIGTERM)
  --sizes A..B        client: payload sizes, A..B within 1..65507 (default 1..1472);
                      the first datagram has size A, the second B, the rest cycle
                      through the range in a well-spread order; "N" means N..N
  --timeout SEC       client: wait for each echo (default 1.0)
  --retries N         client: re-sends of a datagram before it counts as lost (default 3)

output:
  --quiet             only errors and the client's summary
  --verbose           print the counters table at exit (also printed on SIGINT/SIGTERM)
  --help              this text

exit status: 0 success, 1 failure (mismatch, loss, stack error), 2 bad command line
)";

struct Args : xk::apps::CommonArgs {
  enum class Mode { server, client } mode = Mode::server;  // as in kCommandLine.roles
  bool print_graph = false;
  std::optional<std::uint16_t> udp_port;
  std::optional<xk::IpAddr> peer;
  std::uint16_t peer_port = 0;
  std::optional<std::uint64_t> count;
  std::size_t size_min = 1;
  std::size_t size_max = 1472;
  double timeout_s = 1.0;
  unsigned retries = 3;
  bool quiet = false;
  bool verbose = false;
};

const xk::apps::CommandLineSpec kCommandLine{
    .usage_head = kUsageHead,
    .usage_tail = kUsageTail,
    .role_noun = "mode",
    .roles = {{"server"}, {"client"}},
    .idle_flag = false,  // it waits for datagrams: spin, then sleep
};

Args parse_args(int argc, char** argv) {
  Args a;
  std::size_t mode = xk::apps::parse_command_line(argc, argv, kCommandLine, a, [&](xk::apps::Flag& f) {
    if (f.name() == "--print-graph") {
      f.no_value();
      a.print_graph = true;
    } else if (f.name() == "--udp-port") {
      a.udp_port = parse_number<std::uint16_t>(f.name(), f.value(), 0, 65535);
    } else if (f.name() == "--peer") {
      std::tie(a.peer, a.peer_port) = xk::apps::parse_endpoint(f.name(), f.value());
    } else if (f.name() == "--count") {
      a.count = parse_number<std::uint64_t>(f.name(), f.value(), 0, std::uint64_t{1} << 40);
    } else if (f.name() == "--sizes") {
      auto v = f.value();
      auto dots = v.find("..");
      std::size_t max_payload = xk::udp::UdpProtocol::kMaxPayload;
      if (dots == std::string_view::npos) {
        a.size_min = a.size_max = parse_number<std::size_t>(f.name(), v, 1, max_payload);
      } else {
        a.size_min = parse_number<std::size_t>(f.name(), v.substr(0, dots), 1, max_payload);
        a.size_max = parse_number<std::size_t>(f.name(), v.substr(dots + 2), 1, max_payload);
      }
      if (a.size_min > a.size_max) throw UsageError{"--sizes: A..B needs A <= B"};
    } else if (f.name() == "--timeout") {
      a.timeout_s = xk::apps::parse_seconds(f.name(), f.value());
    } else if (f.name() == "--retries") {
      a.retries = parse_number<unsigned>(f.name(), f.value(), 0, 1000);
    } else if (f.name() == "--quiet" || f.name() == "-q") {
      f.no_value();
      a.quiet = true;
    } else if (f.name() == "--verbose" || f.name() == "-v") {
      f.no_value();
      a.verbose = true;
    } else {
      throw UsageError{"unknown option '" + std::string(f.name()) + "'"};
    }
  });
  a.mode = static_cast<Args::Mode>(mode);
  a.stack.validate();
  if (a.mode == Args::Mode::client) {
    if (!a.peer) throw UsageError{"client: --peer A.B.C.D:PORT or [X:X::X]:PORT is required"};
  } else {
    if (a.peer) throw UsageError{"--peer is for the client"};
  }
  if (a.quiet && a.verbose) throw UsageError{"--quiet and --verbose exclude each other"};
  return a;
}

// ---- payloads --------------------------------------------------------------

// Datagram `seq` of `size` bytes: different for every seq, also at size 1.
void fill_pattern(std::vector<std::byte>& out, std::uint64_t seq, std::size_t size) {
  out.resize(size);
  auto s = static_cast<std::uint32_t>(seq * 2654435761u);
  for (std::size_t j = 0; j < size; ++j) {
    out[j] = std::byte(static_cast<unsigned char>((j * 131u) ^ (j >> 8) ^ (s >> ((j & 3) * 8)) ^ seq));
  }
}

// Size of datagram i: A first, then B, then a walk through A..B with a step
// near the golden ratio of the range and coprime to it, so any count spreads
// evenly over the range and count >= range visits every size.
class SizeCycle {
 public:
  SizeCycle(std::size_t lo, std::size_t hi) : lo_(lo), n_(hi - lo + 1) {
    step_ = std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(n_) * 0.6180339887498949));
    while (std::gcd(step_, n_) != 1) ++step_;
  }
  std::size_t operator()(std::uint64_t i) const {
    if (i == 0) return lo_;
    if (i == 1) return lo_ + n_ - 1;
    return lo_ + static_cast<std::size_t>(((i - 2) * step_) % n_);
  }

 private:
  std::size_t lo_;
  std::size_t n_;
  std::size_t step_;
};

// ---- client ----------------------------------------------------------------

class EchoClient final : public xk::Pollable {
 public:
  struct Summary {
    std::uint64_t sent = 0;       // datagrams (first transmissions)
    std::uint64_t resent = 0;     // retransmissions after a timeout
    std::uint64_t received = 0;   // echoes that matched
    std::uint64_t mismatches = 0; // echoes that did not match (wrong size or bytes)
    std::uint64_t lost = 0;       // no matching echo after every retry
    std::uint64_t late = 0;       // duplicate echoes of earlier datagrams (after a retry)
    std::uint64_t icmp_errors = 0;
    std::uint64_t send_errors = 0;
    std::uint64_t bytes = 0;
  };

  EchoClient(xk::udp::UdpSocket& sock, xk::EventLoop& loop, const Args& a)
      : sock_(sock),
        loop_(loop),
        count_(a.count.value_or(1000)),
        sizes_(a.size_min, a.size_max),
        timeout_(std::chrono::duration_cast<xk::Duration>(std::chrono::duration<double>(a.timeout_s))),
        retries_(a.retries),
        quiet_(a.quiet),
        timer_(loop.timers(), [this] { on_timeout(); }) {}

  void start() {
    if (count_ == 0) {
      loop_.stop();
      return;
    }
    transmit();
  }
  bool done() const noexcept { return next_ >= count_; }
  const Summary& summary() const noexcept { return sum_; }
  std::uint64_t count() const noexcept { return count_; }

  std::size_t poll(std::size_t budget) override {
    std::size_t n = 0;
    while (n < budget) {
      auto d = sock_.recvfrom();
      if (!d) {
        if (d.error() == xk::Errc::would_block) break;
        ++n;
        ++sum_.icmp_errors;
        if (!quiet_ && sum_.icmp_errors <= 5) {
          std::fprintf(stderr, "%s: the peer reports: %s\n", kProg, xk::to_string(d.error()));
        }
        continue;
      }
      ++n;
      check(d->payload);
    }
    return n;
  }
  bool before_sleep() noexcept override { return !sock_.readable(); }

 private:
  void transmit() {
    std::size_t size = sizes_(next_);
    fill_pattern(expect_, next_, size);
    if (attempts_ == 0) {
      ++sum_.sent;
    } else {
      ++sum_.resent;
    }
    ++attempts_;
    if (xk::Status s = sock_.send(std::span<const std::byte>(expect_)); !s) {
      ++sum_.send_errors;  // the timer re-sends it
      if (!quiet_ && sum_.send_errors <= 5) {
        std::fprintf(stderr, "%s: send of datagram %llu (%zu bytes) failed: %s\n", kProg,
                     static_cast<unsigned long long>(next_), size, xk::to_string(s.error()));
      }
    }
    timer_.arm_after(timeout_);
  }

  void advance() {
    timer_.cancel();
    ++next_;
    attempts_ = 0;
    if (done()) {
      loop_.stop();
      return;
    }
    transmit();
  }

  void on_timeout() {
    if (done()) return;
    if (attempts_ <= retries_) {
      if (!quiet_) {
        std::fprintf(stderr, "%s: no echo for datagram %llu (%zu bytes) after %.3f s, re-sending\n", kProg,
                     static_cast<unsigned long long>(next_), expect_.size(),
                     std::chrono::duration<double>(timeout_).count());
      }
      transmit();
      return;
    }
    ++sum_.lost;
    if (!quiet_) {
      std::fprintf(stderr, "%s: datagram %llu (%zu bytes) lost after %u attempts\n", kProg,
                   static_cast<unsigned long long>(next_), expect_.size(), attempts_);
    }
    advance();
  }

  bool same(const xk::Msg& m, const std::vector<std::byte>& want) {
    if (m.size() != want.size()) return false;
    got_.resize(m.size());
    if (!m.copy_out(0, got_).ok()) return false;
    return std::memcmp(got_.data(), want.data(), want.size()) == 0;
  }

  void check(const xk::Msg& m) {
    if (done()) {
      ++sum_.late;
      return;
    }
    if (same(m, expect_)) {
      ++sum_.received;
      sum_.bytes += m.size();
      advance();
      return;
    }
    // A second echo of an earlier datagram that we re-sent is not an error.
    for (std::uint64_t back = 1; back <= 8 && back <= next_; ++back) {
      std::uint64_t seq = next_ - back;
      if (m.size() != sizes_(seq)) continue;
      fill_pattern(scratch_, seq, sizes_(seq));
      if (same(m, scratch_)) {
        ++sum_.late;
        return;
      }
    }
    ++sum_.mismatches;
    if (!quiet_ && sum_.mismatches <= 10) {
      std::size_t first = 0;
      if (m.size() == expect_.size()) {
        while (first < expect_.size() && got_[first] == expect_[first]) ++first;
      }
      std::fprintf(stderr, "%s: MISMATCH for datagram %llu: sent %zu bytes, got %zu%s", kProg,
                   static_cast<unsigned long long>(next_), expect_.size(), m.size(),
                   m.size() == expect_.size() ? "" : "\n");
      if (m.size() == expect_.size()) std::fprintf(stderr, ", first difference at byte %zu\n", first);
    }
    if (m.size() == expect_.size()) advance();  // a corrupted echo of this datagram: counted, move on
  }

  xk::udp::UdpSocket& sock_;
  xk::EventLoop& loop_;
  std::uint64_t count_;
  SizeCycle sizes_;
  xk::Duration timeout_;
  unsigned retries_;
  bool quiet_;
  xk::Timer timer_;
  std::uint64_t next_ = 0;
  unsigned attempts_ = 0;
  std::vector<std::byte> expect_;
  std::vector<std::byte> scratch_;
  std::vector<std::byte> got_;
  Summary sum_;
};

// ---- main ------------------------------------------------------------------

int run(const Args& a) {
  xk::apps::StackSpec spec = xk::apps::stack_spec(a.stack);
  xk::Registry registry;
  xk::register_all_kinds(registry);

  if (a.print_graph) {
    try {
      std::fputs(xk::GraphSpec::parse(spec.text, registry, spec.source).to_string().c_str(), stdout);
    } catch (const xk::GraphError& e) {
      std::fprintf(stderr, "%s: %s\n", kProg, e.what());
      return kExitFail;
    }
    return kExitOk;
  }

  xk::apps::AppStack stack(kProg, a.stack, xk::IdleMode::spin_then_sleep);
  xk::EventLoop& loop = stack.loop();
  xk::udp::UdpProtocol* udp = &stack.require<xk::udp::UdpProtocol>("udp0");
  std::string where = xk::apps::describe_stack(stack.graph());
  stack.wait_for_link(a.link_wait_s, !a.quiet);

  xk::udp::SocketOptions so;
  so.rcvbuf_bytes = 16u << 20;
  so.rcvbuf_datagrams = 4096;
  xk::udp::UdpSocket sock = udp->socket(so);

  int rc = kExitOk;
  if (a.mode == Args::Mode::server) {
    std::uint16_t port = a.udp_port.value_or(7);
    if (xk::Status s = sock.bind(xk::IpAddr{}, xk::Port{port}); !s) {
      std::fprintf(stderr, "%s: cannot bind udp port %u: %s\n", kProg, port, xk::to_string(s.error()));
      return kExitFail;
    }
    xk::apps::UdpEchoServer server(kProg, sock, loop, a.count.value_or(0), a.quiet);
    loop.add(server);
    if (!a.quiet) std::printf("%s: server %s, udp port %u: ready\n", kProg, where.c_str(), port);
    std::fflush(stdout);
    loop.run();
    loop.remove(server);
    if (!a.quiet) {
      std::printf("%s: server: %llu datagrams (%llu bytes) received, %llu echoed, %llu echo errors\n", kProg,
                  static_cast<unsigned long long>(server.received()), static_cast<unsigned long long>(server.bytes()),
                  static_cast<unsigned long long>(server.echoed()),
                  static_cast<unsigned long long>(server.send_errors()));
    }
  } else {
    if (a.udp_port.value_or(0) != 0) {
      if (xk::Status s = sock.bind(xk::IpAddr{}, xk::Port{*a.udp_port}); !s) {
        std::fprintf(stderr, "%s: cannot bind udp port %u: %s\n", kProg, *a.udp_port, xk::to_string(s.error()));
        return kExitFail;
      }
    }
    if (xk::Status s = sock.connect(*a.peer, xk::Port{a.peer_port}); !s) {
      std::fprintf(stderr, "%s: cannot connect to %s:%u: %s\n", kProg, xk::to_string(*a.peer).c_str(), a.peer_port,
                   xk::to_string(s.error()));
      return kExitFail;
    }
    EchoClient client(sock, loop, a);
    loop.add(client);
    if (!a.quiet) {
      std::printf("%s: client %s -> %s:%u, %llu datagrams of %zu..%zu bytes\n", kProg, where.c_str(),
                  xk::to_string(*a.peer).c_str(), a.peer_port, static_cast<unsigned long long>(client.count()),
                  a.size_min, a.size_max);
      std::fflush(stdout);
    }
    auto t0 = std::chrono::steady_clock::now();
    client.start();
    loop.run();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loop.remove(client);
    const auto& s = client.summary();
    std::uint64_t unfinished = client.count() - std::min<std::uint64_t>(client.count(), s.received + s.mismatches + s.lost);
    std::printf(
        "%s: client summary: sent %llu, received %llu, mismatches %llu, lost %llu, unfinished %llu "
        "(re-sent %llu, late duplicates %llu, icmp errors %llu, send errors %llu); %.3f MB echoed in %.2f s\n",
        kProg, static_cast<unsigned long long>(s.sent), static_cast<unsigned long long>(s.received),
        static_cast<unsigned long long>(s.mismatches), static_cast<unsigned long long>(s.lost),
        static_cast<unsigned long long>(unfinished), static_cast<unsigned long long>(s.resent),
        static_cast<unsigned long long>(s.late), static_cast<unsigned long long>(s.icmp_errors),
        static_cast<unsigned long long>(s.send_errors), static_cast<double>(s.bytes) / 1e6, secs);
    if (s.mismatches != 0 || s.lost != 0 || unfinished != 0) rc = kExitFail;
  }

  stack.report_signal(a.verbose);
  sock.close().ok();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  return xk::apps::app_main(kProg, [&] { args = parse_args(argc, argv); }, [&] { return run(args); });
}

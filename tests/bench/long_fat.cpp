// Bulk throughput over an emulated long fat path: the fault layer adds a
// one-way delay each way and makes the data direction a bottleneck link of
// the rate with a queue of one bandwidth-delay product in front (a router's
// buffer: tail drop when full), and one connection sends for a while. Run with buffer autotuning off (the reference: the default 1 MiB
// buffers) and on, in the same run. Two xk stacks in one process over the
// pair driver, on a manual clock that jumps to the next timer: the figures
// are protocol time, deterministic for a seed and independent of the
// machine's speed.
//
//   build/release/tests/bench/xk-long-fat [--rate-mbit R] [--rtt-ms T]
//       [--seconds S] [--seed N]
//
// docs/BENCHMARKS.md, "A long fat path".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "xk/clock.hpp"
#include "xk/counters.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/fault.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/tcp.hpp"

namespace {

using namespace std::chrono_literals;
using namespace xk;

struct Params {
  double rate_mbit = 1000;
  double rtt_ms = 50;
  double seconds = 20;
  long seed = 1;
  double bytes_per_s() const { return rate_mbit * 1e6 / 8; }
  double bdp() const { return bytes_per_s() * rtt_ms / 1000; }
};

struct Outcome {
  double goodput_mbit = 0;       // the whole run
  double steady_mbit = 0;        // its second half
  std::uint32_t rcvbuf = 0;      // the receiver's buffer at the end
  std::uint32_t sndbuf = 0;      // the sender's
  std::uint64_t retransmits = 0;
  std::uint64_t rtos = 0;
  std::uint64_t policed = 0;     // dropped by the full queue
};

class Run {
 public:
  Run(const Params& p, const std::string& tcp_opts) : p_(p) {
    drivers::register_pair(registry_, hub_);
    eth::register_eth(registry_);
    arp::register_arp(registry_);
    ipv4::register_ipv4(registry_);
    fault::register_fault(registry_);
    tcp::register_tcp(registry_);
    auto spec = [&](const char* mac, const char* addr, const std::string& fault) {
      return std::string("pair net0 link=wire queue=1048576 mac=") + mac + "\neth eth0 below=net0\narp arp0 below=eth0\n" +
             "ipv4 ip0 below=eth0,arp0 addr=" + addr + "\nfault f0 below=ip0 " + fault + "\ntcp tcp0 below=f0 " + tcp_opts +
             "\n";
    };
    char sender[200], receiver[200];
    // The data direction: half the RTT, through a bottleneck of the rate
    // with one BDP of queue; the ACKs: the other half.
    std::snprintf(sender, sizeof sender, "dir=tx delay=%g rate=%.0f queue=%.0f seed=%ld", p.rtt_ms / 2, p.bytes_per_s(),
                  p.bdp(), 2 * p.seed);
    std::snprintf(receiver, sizeof receiver, "dir=tx delay=%g seed=%ld", p.rtt_ms / 2, 2 * p.seed + 1);
    a_ = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:0a", "192.0.2.10/24", sender), registry_, &loop_a_, "sender"));
    b_ = std::make_unique<Graph>(
        Graph::build(spec("02:00:00:00:00:14", "192.0.2.20/24", receiver), registry_, &loop_b_, "receiver"));
  }

  Outcome go() {
    tcp::TcpProtocol& ta = *a_->find_as<tcp::TcpProtocol>("tcp0");
    tcp::TcpProtocol& tb = *b_->find_as<tcp::TcpProtocol>("tcp0");
    Result<tcp::TcpListener> l = tb.listen(Ipv4Addr{}, Port{5001}, 8);
    if (!l) fail("listen");
    tcp::TcpSocket c = ta.socket();
    if (!c.connect(Ipv4Addr{0xC0000214}, Port{5001}).ok()) fail("connect");
    tcp::TcpSocket s;
    run_until(clock_.now() + 10s, [&] {
      if (!s.is_open()) {
        if (auto r = l->accept()) s = std::move(*r);
      }
      return s.is_open() && c.state() == tcp::State::established;
    });
    if (!s.is_open()) fail("handshake");

    std::vector<std::byte> out(256 * 1024, std::byte{7});
    std::vector<std::byte> in(1 << 20);
    const Time t0 = clock_.now();
    const Time half = t0 + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(p_.seconds / 2));
    const Time end = t0 + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(p_.seconds));
    std::uint64_t got = 0, got_at_half = 0;
    bool halfway = false;
    run_until(end, [&] {
      for (;;) {
        auto n = c.write(out);
        if (!n || *n == 0) break;
      }
      for (;;) {
        auto n = s.read(in);
        if (!n || *n == 0) break;
        got += *n;
      }
      if (!halfway && clock_.now() >= half) {
        halfway = true;
        got_at_half = got;
      }
      return false;
    });
    Outcome o;
    const double secs = std::chrono::duration<double>(clock_.now() - t0).count();
    const double second_half = std::chrono::duration<double>(clock_.now() - half).count();
    o.goodput_mbit = static_cast<double>(got) * 8 / secs / 1e6;
    o.steady_mbit = static_cast<double>(got - got_at_half) * 8 / second_half / 1e6;
    o.rcvbuf = s.stats().rcvbuf;
    o.sndbuf = c.stats().sndbuf;
    o.retransmits = c.stats().retransmits;
    o.rtos = c.stats().rto_expiries;
    o.policed = a_->find("f0")->counters().value("tx_rate_dropped");
    if (std::getenv("XK_LONG_FAT_COUNTERS") != nullptr) {
      const CounterSet* sets[] = {&a_->find("tcp0")->counters(), &b_->find("tcp0")->counters()};
      std::fputs(counters_table(sets).c_str(), stderr);
    }
    return o;
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::fprintf(stderr, "xk-long-fat: %s\n", what);
    std::exit(1);
  }
  // Runs both loops until `done` or `end`, moving the clock to the next
  // timer whenever neither has work.
  template <class F>
  void run_until(Time end, F&& done) {
    while (clock_.now() < end) {
      if (done()) return;
      if (loop_a_.run_once() + loop_b_.run_once() != 0) continue;
      if (done()) return;
      std::optional<Time> na = loop_a_.timers().next_deadline();
      std::optional<Time> nb = loop_b_.timers().next_deadline();
      std::optional<Time> next = na;
      if (nb && (!next || *nb < *next)) next = nb;
      if (!next || *next > end) {
        clock_.set(end);
        return;
      }
      if (*next > clock_.now()) clock_.set(*next);
    }
  }

  Params p_;
  ManualClock clock_{Time(std::chrono::seconds(1000))};
  EventLoop loop_a_{clock_};
  EventLoop loop_b_{clock_};
  drivers::PairHub hub_;
  Registry registry_;
  std::unique_ptr<Graph> a_;
  std::unique_ptr<Graph> b_;
};

}  // namespace

int main(int argc, char** argv) {
  Params p;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "xk-long-fat: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--rate-mbit")) {
      p.rate_mbit = std::atof(next("--rate-mbit"));
    } else if (!std::strcmp(argv[i], "--rtt-ms")) {
      p.rtt_ms = std::atof(next("--rtt-ms"));
    } else if (!std::strcmp(argv[i], "--seconds")) {
      p.seconds = std::atof(next("--seconds"));
    } else if (!std::strcmp(argv[i], "--seed")) {
      p.seed = std::atol(next("--seed"));
    } else {
      std::fprintf(stderr, "usage: xk-long-fat [--rate-mbit R] [--rtt-ms T] [--seconds S] [--seed N]\n");
      return 2;
    }
  }
  if (p.rate_mbit <= 0 || p.rate_mbit > 100000 || p.rtt_ms <= 0 || p.rtt_ms > 10000 || p.seconds <= 0) {
    std::fprintf(stderr, "xk-long-fat: 0 < --rate-mbit <= 100000, 0 < --rtt-ms <= 10000, --seconds > 0\n");
    return 2;
  }
  std::printf("# one connection, a %g Mbit/s bottleneck with a queue of one BDP (%.2f MB), RTT %g ms, %g s of protocol "
              "time (manual clock); default buffers 1 MiB\n",
              p.rate_mbit, p.bdp() / 1e6, p.rtt_ms, p.seconds);
  std::printf("%-10s %12s %12s %8s %12s %12s %8s %6s %8s\n", "autotune", "goodput_Mb", "steady_Mb", "of_path",
              "rcvbuf_B", "sndbuf_B", "rexmits", "rtos", "dropped");
  double steady[2] = {0, 0};
  const char* modes[2] = {"autotune=off", "autotune=on"};
  for (int m = 0; m < 2; ++m) {
    Run run(p, modes[m]);
    Outcome o = run.go();
    steady[m] = o.steady_mbit;
    std::printf("%-10s %12.1f %12.1f %8.3f %12u %12u %8llu %6llu %8llu\n", m == 0 ? "off" : "on", o.goodput_mbit,
                o.steady_mbit, o.steady_mbit / p.rate_mbit, o.rcvbuf, o.sndbuf,
                static_cast<unsigned long long>(o.retransmits), static_cast<unsigned long long>(o.rtos),
                static_cast<unsigned long long>(o.policed));
  }
  std::printf("RESULT steady_of_path_off=%.3f steady_of_path_on=%.3f\n", steady[0] / p.rate_mbit, steady[1] / p.rate_mbit);
  return 0;
}

// Bulk throughput over an emulated long fat path: the fault layer adds a
// one-way delay each way and makes the data direction a bottleneck link of
// the rate with a queue of one bandwidth-delay product in front (a router's
// buffer: tail drop when full), and one connection sends for a while. Run
// with buffer autotuning off (the reference: the default 1 MiB buffers) and
// on, in the same run. Two xk stacks in one process on protocol time
// (support/protocol_time.hpp): deterministic for a seed and independent of
// the machine's speed.
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

#include "protocol_time.hpp"
#include "xk/counters.hpp"

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
  // The data direction (A's tx): half the RTT, through a bottleneck of the
  // rate with one BDP of queue; the ACKs (B's tx): the other half.
  Run(const Params& p, const std::string& tcp_opts) : p_(p), stacks_(sender(p), receiver(p), tcp_opts) {}

  Outcome go() {
    tcp::TcpSocket c, s;
    stacks_.connect(c, s, "xk-long-fat");
    std::vector<std::byte> out(256 * 1024, std::byte{7});
    std::vector<std::byte> in(1 << 20);
    const Time t0 = stacks_.now();
    const Time half = t0 + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(p_.seconds / 2));
    const Time end = t0 + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(p_.seconds));
    std::uint64_t got = 0, got_at_half = 0;
    bool halfway = false;
    (void)stacks_.run_until(end, [&] {
      for (;;) {
        auto n = c.write(out);
        if (!n || *n == 0) break;
      }
      for (;;) {
        auto n = s.read(in);
        if (!n || *n == 0) break;
        got += *n;
      }
      if (!halfway && stacks_.now() >= half) {
        halfway = true;
        got_at_half = got;
      }
      return false;
    });
    Outcome o;
    const double secs = std::chrono::duration<double>(stacks_.now() - t0).count();
    const double second_half = std::chrono::duration<double>(stacks_.now() - half).count();
    o.goodput_mbit = static_cast<double>(got) * 8 / secs / 1e6;
    o.steady_mbit = static_cast<double>(got - got_at_half) * 8 / second_half / 1e6;
    o.rcvbuf = s.stats().rcvbuf;
    o.sndbuf = c.stats().sndbuf;
    o.retransmits = c.stats().retransmits;
    o.rtos = c.stats().rto_expiries;
    o.policed = stacks_.a().find("f0")->counters().value("tx_rate_dropped");
    if (std::getenv("XK_LONG_FAT_COUNTERS") != nullptr) {
      const CounterSet* sets[] = {&stacks_.a().find("tcp0")->counters(), &stacks_.b().find("tcp0")->counters()};
      std::fputs(counters_table(sets).c_str(), stderr);
    }
    return o;
  }

 private:
  static std::string sender(const Params& p) {
    char f[200];
    std::snprintf(f, sizeof f, "dir=tx delay=%g rate=%.0f queue=%.0f seed=%ld", p.rtt_ms / 2, p.bytes_per_s(), p.bdp(),
                  2 * p.seed);
    return f;
  }
  static std::string receiver(const Params& p) {
    char f[200];
    std::snprintf(f, sizeof f, "dir=tx delay=%g seed=%ld", p.rtt_ms / 2, 2 * p.seed + 1);
    return f;
  }

  Params p_;
  bench::TwoStacks stacks_;
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
              "time (manual clock); the stack's default buffers (a quarter of the L2 cache, 256 KiB to 1 MiB)\n",
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

// Request/response under loss: completion times of many short exchanges on
// one connection through the fault layer (loss both ways, a fixed one-way
// delay), for each loss-recovery mode in the same run -- recovery=rfc6675
// (the reference: duplicate-ACK threshold, RTO for what it cannot see) and
// recovery=rack (RACK-TLP with PRR). Two xk stacks in one process on
// protocol time (support/protocol_time.hpp): round trips, probes and
// timeouts, deterministic for a seed and independent of the machine's speed.
//
//   build/release/tests/bench/xk-rr-loss [--requests N] [--response BYTES]
//       [--loss P] [--delay-ms D] [--seed S]
//
// docs/BENCHMARKS.md, "Request/response under loss".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "protocol_time.hpp"

namespace {

using namespace std::chrono_literals;
using namespace xk;

struct Params {
  long requests = 10000;
  std::size_t request = 100;
  std::size_t response = 16 * 1024;
  double loss = 0.01;
  double delay_ms = 5;
  long seed = 1;
};

struct Outcome {
  std::vector<double> ms;  // completion time of each exchange
  std::uint64_t rtos = 0;
  double rto_ms = 0;
  std::uint64_t probes = 0;
  std::uint64_t retransmits = 0;
};

class Run {
 public:
  Run(const Params& p, const std::string& tcp_opts)
      : p_(p), stacks_(fault(p, 2 * p.seed), fault(p, 2 * p.seed + 1), tcp_opts) {}

  Outcome go() {
    tcp::TcpSocket c, s;
    stacks_.connect(c, s, "xk-rr-loss");
    c.set_nodelay(true);
    s.set_nodelay(true);

    std::vector<std::byte> req(p_.request, std::byte{1});
    std::vector<std::byte> resp(p_.response, std::byte{2});
    std::vector<std::byte> buf(1 << 16);
    Outcome out;
    out.ms.reserve(static_cast<std::size_t>(p_.requests));
    for (long i = 0; i < p_.requests; ++i) {
      const Time t0 = stacks_.now();
      std::size_t sent = 0, got_req = 0, sent_resp = 0, got = 0;
      bool ok = stacks_.run_until(t0 + 3600s, [&] {
        while (sent < req.size()) {
          auto n = c.write(std::span<const std::byte>(req).subspan(sent));
          if (!n) break;
          sent += *n;
        }
        while (got_req < req.size()) {
          auto n = s.read(std::span<std::byte>(buf).first(req.size() - got_req));
          if (!n || *n == 0) break;
          got_req += *n;
        }
        while (got_req == req.size() && sent_resp < resp.size()) {
          auto n = s.write(std::span<const std::byte>(resp).subspan(sent_resp));
          if (!n) break;
          sent_resp += *n;
        }
        for (;;) {
          auto n = c.read(buf);
          if (!n || *n == 0) break;
          got += *n;
        }
        return got >= resp.size();
      });
      if (!ok) bench::TwoStacks::fail("xk-rr-loss", "an exchange stalled");
      out.ms.push_back(std::chrono::duration<double, std::milli>(stacks_.now() - t0).count());
    }
    for (Graph* g : {&stacks_.a(), &stacks_.b()}) {
      const CounterSet& k = g->find("tcp0")->counters();
      out.rtos += k.value("rto_expiries");
      out.rto_ms += static_cast<double>(k.value("rto_wait_us")) / 1000.0;
      out.probes += k.value("loss_probes");
      out.retransmits += k.value("retransmits");
    }
    return out;
  }

 private:
  static std::string fault(const Params& p, long seed) {
    char f[160];
    std::snprintf(f, sizeof f, "dir=tx loss=%g delay=%g seed=%ld", p.loss, p.delay_ms, seed);
    return f;
  }

  Params p_;
  bench::TwoStacks stacks_;
};

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  Params p;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "xk-rr-loss: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--requests")) {
      p.requests = std::atol(next("--requests"));
    } else if (!std::strcmp(argv[i], "--response")) {
      p.response = static_cast<std::size_t>(std::atol(next("--response")));
    } else if (!std::strcmp(argv[i], "--loss")) {
      p.loss = std::atof(next("--loss"));
    } else if (!std::strcmp(argv[i], "--delay-ms")) {
      p.delay_ms = std::atof(next("--delay-ms"));
    } else if (!std::strcmp(argv[i], "--seed")) {
      p.seed = std::atol(next("--seed"));
    } else {
      std::fprintf(stderr, "usage: xk-rr-loss [--requests N] [--response BYTES] [--loss P] [--delay-ms D] [--seed S]\n");
      return 2;
    }
  }
  if (p.requests <= 0 || p.response == 0 || p.loss < 0 || p.loss >= 1 || p.delay_ms < 0) {
    std::fprintf(stderr, "xk-rr-loss: --requests > 0, --response > 0, 0 <= --loss < 1, --delay-ms >= 0\n");
    return 2;
  }
  std::printf("# %ld exchanges of %zu B -> %zu B on one connection, loss %.3g each way, one-way delay %.3g ms, "
              "rto_min 200 ms; times are protocol time (manual clock)\n",
              p.requests, p.request, p.response, p.loss, p.delay_ms);
  std::printf("%-13s %9s %9s %9s %9s %9s %6s %10s %7s %8s\n", "recovery", "p50_ms", "p90_ms", "p99_ms", "p999_ms",
              "mean_ms", "rtos", "rto_ms", "probes", "rexmits");
  // The reference, RACK-TLP as configured by default (a one-segment
  // flight's probe waits RFC 8985's 200 ms worst-case delayed ACK, so it
  // comes with the RTO), and RACK-TLP for peers known to delay ACKs by at
  // most 40 ms (xk's and Linux's delayed-ACK minimum).
  double p99[3] = {0, 0, 0};
  const char* labels[3] = {"rfc6675", "rack", "rack,delack40"};
  const char* modes[3] = {"recovery=rfc6675", "recovery=rack", "recovery=rack tlp_delack_ms=40"};
  for (int m = 0; m < 3; ++m) {
    Run run(p, modes[m]);
    Outcome o = run.go();
    double sum = 0;
    for (double x : o.ms) sum += x;
    p99[m] = pct(o.ms, 0.99);
    std::printf("%-13s %9.2f %9.2f %9.2f %9.2f %9.2f %6llu %10.1f %7llu %8llu\n", labels[m], pct(o.ms, 0.5),
                pct(o.ms, 0.9), p99[m], pct(o.ms, 0.999), sum / static_cast<double>(o.ms.size()),
                static_cast<unsigned long long>(o.rtos), o.rto_ms, static_cast<unsigned long long>(o.probes),
                static_cast<unsigned long long>(o.retransmits));
  }
  std::printf("RESULT p99_rack_over_rfc6675=%.3f p99_rack_delack40_over_rfc6675=%.3f\n", p99[1] / p99[0],
              p99[2] / p99[0]);
  return 0;
}

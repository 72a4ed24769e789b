// xk-core-probe: how far apart two CPUs are right now -- the round trip of
// one cache line between them -- sampled beside a benchmark run.
//
//   xk-core-probe CPU_A CPU_B [PERIOD_MS] [ROUND_TRIPS]
//
// On a VM the host may place the two vCPUs on cores that share a cache or on
// cores that do not (another core complex, another die), and moves them while
// a run goes on: here a round trip is ~100 ns near and ~400 ns far, and a
// bulk transfer over net_memif -- whose every frame is written by one core and
// read by the other -- runs at half speed while they are far
// (docs/BENCHMARKS.md, "The vCPUs' placement"). A benchmark
// that compares two programs run seconds apart needs to know which runs
// caught which placement.
//
// Every PERIOD_MS (default 100) one thread on each CPU wakes and the pair
// bounces a cache line ROUND_TRIPS times (default 1000: ~0.1-0.5 ms, well
// under 1 % of either CPU), in ten batches; the fastest batch is the
// burst's figure, so an interrupt on either CPU does not read as distance.
// The threads run SCHED_FIFO when allowed, so a busy-polling program on the
// same CPU does not delay the burst; otherwise they run as ordinary threads
// and a burst can include a wait for the CPU. Before the round trips each
// thread times a fixed chain of arithmetic, the CPU's own speed (a vCPU
// whose clock is down runs it slower). Runs until SIGTERM or SIGINT,
// printing one line per burst
//   BURST t=SECONDS rt_ns=NS work_a_ns=NS work_b_ns=NS
// and at the end
//   RESULT bursts=N rt_ns_min=A rt_ns_p50=B rt_ns_max=C fifo=0|1

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

long to_long(const char* s, const char* what) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 0) {
    std::fprintf(stderr, "xk-core-probe: bad %s '%s'\n", what, s);
    std::exit(2);
  }
  return v;
}

// Pins the calling thread to CPU and asks for SCHED_FIFO; returns whether the
// real-time class was granted (pinning failing is fatal: the probe would
// measure nothing).
bool place(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0) {
    std::fprintf(stderr, "xk-core-probe: cannot run on CPU %d: %s\n", cpu, std::strerror(rc));
    std::exit(1);
  }
  sched_param param{};
  param.sched_priority = 1;
  return pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0;
}

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void sleep_until(const timespec& when) {
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &when, nullptr) == EINTR) {
    if (g_stop.load(std::memory_order_relaxed)) return;
  }
}

timespec plus_ms(timespec t, long ms) {
  t.tv_nsec += ms * 1'000'000L;
  t.tv_sec += t.tv_nsec / 1'000'000'000L;
  t.tv_nsec %= 1'000'000'000L;
  return t;
}

// The ball, alone on its cache line, and the quit flag on another.
struct alignas(64) Line {
  std::atomic<long> value{0};
};
Line g_ball;    // odd: A served it, B's turn; even: B returned it
Line g_quit;    // nonzero: B leaves
Line g_work_b;  // B's last work time, ns

// A fixed chain of dependent multiply-adds (~16k cycles): how fast this CPU
// runs plain work right now (a lower clock shows; a chain bound by latency
// feels little of a busy hyperthread beside it).
long work_ns() {
  const double t0 = now_s();
  std::uint64_t x = 1;
  for (int i = 0; i < 4096; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  // Keep the chain from being folded away.
  asm volatile("" : : "r"(x));
  return std::lround((now_s() - t0) * 1e9);
}

// Burst k starts at start + k periods on both threads: each sleeps until
// then, so neither spins between bursts and the one that wakes first waits
// only for the other's wake-up.
timespec burst_time(const timespec& start, long burst, long period_ms) { return plus_ms(start, burst * period_ms); }

bool quitting() { return g_quit.value.load(std::memory_order_acquire) != 0; }

// Spins until the ball holds WANT; false if the probe is quitting (only B
// ever sees that: A is the one that quits). Both
// threads may hold their CPU at real-time priority, so no wait is unbounded:
// after a second (the other thread cannot be running) the probe ends with an
// error rather than keep a CPU from everything else.
bool await_ball(long want) {
  double since = 0;
  for (unsigned spins = 1;; ++spins) {
    if (g_ball.value.load(std::memory_order_acquire) == want) return true;
    if (spins % 4096 != 0) continue;
    if (quitting()) return false;
    const double t = now_s();
    if (since == 0) {
      since = t;
    } else if (t - since > 1.0) {
      std::fprintf(stderr, "xk-core-probe: the thread on the other CPU stopped answering\n");
      std::_Exit(1);
    }
  }
}

// One burst's shape: a first round trip that waits for the other thread to
// wake (not timed), then BATCHES timed batches of BATCH round trips.
struct Shape {
  static constexpr long kBatches = 10;
  long batch;
  long round_trips() const { return 1 + kBatches * batch; }
};

// B's side: return every ball A serves.
void partner(int cpu, timespec start, long period_ms, Shape shape) {
  place(cpu);
  const long n = shape.round_trips();
  for (long burst = 1; !quitting(); ++burst) {
    sleep_until(burst_time(start, burst, period_ms));
    g_work_b.value.store(work_ns(), std::memory_order_relaxed);
    const long base = (burst - 1) * 2 * n;
    for (long i = 1; i <= n; ++i) {
      if (!await_ball(base + 2 * i - 1)) return;
      g_ball.value.store(base + 2 * i, std::memory_order_release);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: xk-core-probe CPU_A CPU_B [PERIOD_MS] [ROUND_TRIPS]\n");
    return 2;
  }
  const int cpu_a = static_cast<int>(to_long(argv[1], "CPU_A"));
  const int cpu_b = static_cast<int>(to_long(argv[2], "CPU_B"));
  const long period_ms = argc > 3 ? to_long(argv[3], "PERIOD_MS") : 100;
  const long round_trips = argc > 4 ? to_long(argv[4], "ROUND_TRIPS") : 1000;
  if (cpu_a == cpu_b || period_ms < 1 || round_trips < Shape::kBatches) {
    std::fprintf(stderr, "xk-core-probe: two different CPUs, PERIOD_MS >= 1, ROUND_TRIPS >= %ld\n", Shape::kBatches);
    return 2;
  }
  const Shape shape{round_trips / Shape::kBatches};
  const long n = shape.round_trips();
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  std::thread b(partner, cpu_b, start, period_ms, shape);
  const bool fifo = place(cpu_a);
  std::vector<double> rts;
  for (long burst = 1;; ++burst) {
    sleep_until(burst_time(start, burst, period_ms));
    if (g_stop.load(std::memory_order_relaxed)) break;
    const long work_a = work_ns();
    const long base = (burst - 1) * 2 * n;
    g_ball.value.store(base + 1, std::memory_order_release);
    await_ball(base + 2);
    // The fastest batch is the burst's figure: an interrupt or softirq that
    // lands on either CPU mid-burst (the kernel's own network work beside a
    // Linux run) only lengthens a batch, so the fastest is the cache line's
    // round trip itself.
    double rt_ns = 0;
    for (long k = 0; k < Shape::kBatches; ++k) {
      const long first = 2 + k * shape.batch;
      const double t0 = now_s();
      for (long i = first; i < first + shape.batch; ++i) {
        g_ball.value.store(base + 2 * i - 1, std::memory_order_release);
        await_ball(base + 2 * i);
      }
      const double ns = (now_s() - t0) * 1e9 / static_cast<double>(shape.batch);
      if (k == 0 || ns < rt_ns) rt_ns = ns;
    }
    rts.push_back(rt_ns);
    // B stored its work time before it returned the first ball.
    std::printf("BURST t=%.3f rt_ns=%.1f work_a_ns=%ld work_b_ns=%ld\n", static_cast<double>(burst * period_ms) / 1e3,
                rt_ns, work_a, g_work_b.value.load(std::memory_order_relaxed));
    std::fflush(stdout);
  }
  g_quit.value.store(1, std::memory_order_release);
  b.join();
  if (rts.empty()) {
    std::printf("RESULT bursts=0 fifo=%d\n", fifo ? 1 : 0);
    return 0;
  }
  std::sort(rts.begin(), rts.end());
  std::printf("RESULT bursts=%zu rt_ns_min=%.1f rt_ns_p50=%.1f rt_ns_max=%.1f fifo=%d\n", rts.size(), rts.front(),
              rts[rts.size() / 2], rts.back(), fifo ? 1 : 0);
  return 0;
}

// xk-wake-floor: what waking a sleeping process costs on this machine, the
// floor under any ping-pong whose messages find the other end asleep.
//
//   xk-wake-floor GAP_US COUNT [SERVER_CPU CLIENT_CPU]
//
// Two processes over a pair of pipes, no network stack at all. The
// "server" blocks in read(); every GAP_US the "client" writes one byte and
// spins (non-blocking reads) until the answer comes back, as sockperf's
// client, awake for its own pacing, waits for a reply under xkrun. So each
// exchange is one wake-up of a process that slept GAP_US, plus two pipe
// writes. Prints
//   RESULT gap_us=G exchanges=N half_rtt_p50_us=M half_rtt_avg_us=A
// (half-RTT = one exchange / 2, as sockperf and NetPIPE report).

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
}

// The server: echo every byte until the pipe closes.
int serve(int in, int out) {
  char b;
  for (;;) {
    const ssize_t n = ::read(in, &b, 1);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR) continue;
      die("server read");
    }
    if (::write(out, &b, 1) != 1) die("server write");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: xk-wake-floor GAP_US COUNT [SERVER_CPU CLIENT_CPU]\n");
    return 2;
  }
  const long gap_us = std::strtol(argv[1], nullptr, 10);
  const long count = std::strtol(argv[2], nullptr, 10);
  const int server_cpu = argc == 5 ? std::atoi(argv[3]) : -1;
  const int client_cpu = argc == 5 ? std::atoi(argv[4]) : -1;
  if (gap_us < 0 || count <= 0) {
    std::fprintf(stderr, "xk-wake-floor: GAP_US >= 0 and COUNT > 0\n");
    return 2;
  }
  int to_server[2];
  int to_client[2];
  if (::pipe(to_server) != 0 || ::pipe(to_client) != 0) die("pipe");
  const pid_t child = ::fork();
  if (child < 0) die("fork");
  if (child == 0) {
    pin(server_cpu);
    ::close(to_server[1]);
    ::close(to_client[0]);
    return serve(to_server[0], to_client[1]);
  }
  pin(client_cpu);
  ::close(to_server[0]);
  ::close(to_client[1]);
  if (::fcntl(to_client[0], F_SETFL, O_NONBLOCK) != 0) die("fcntl");
  using clock = std::chrono::steady_clock;
  std::vector<double> half_us;
  half_us.reserve(static_cast<std::size_t>(count));
  auto next = clock::now();
  for (long i = 0; i < count + 1; ++i) {  // the first exchange is a warm-up
    next += std::chrono::microseconds(gap_us);
    while (clock::now() < next) {
      // Paced as sockperf paces: awake, on its own CPU.
    }
    const auto t0 = clock::now();
    if (::write(to_server[1], "x", 1) != 1) die("client write");
    char b;
    for (;;) {
      const ssize_t n = ::read(to_client[0], &b, 1);
      if (n == 1) break;
      if (n == 0) {
        std::fprintf(stderr, "xk-wake-floor: the server went away\n");
        return 1;
      }
      if (errno != EAGAIN && errno != EINTR) die("client read");
    }
    const double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
    if (i > 0) half_us.push_back(us / 2);
  }
  ::close(to_server[1]);
  int status = 0;
  (void)::waitpid(child, &status, 0);
  double sum = 0;
  for (double v : half_us) sum += v;
  std::vector<double> sorted = half_us;
  std::sort(sorted.begin(), sorted.end());
  std::printf("RESULT gap_us=%ld exchanges=%zu half_rtt_p50_us=%.2f half_rtt_avg_us=%.2f\n", gap_us, sorted.size(),
              sorted[sorted.size() / 2], sum / static_cast<double>(sorted.size()));
  return 0;
}

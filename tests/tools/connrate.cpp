// xk-connrate: TCP connection setup rate -- connect, accept, close -- over
// the kernel's sockets or xk's C API, with the same code for both, so the
// two figures of tests/bench/connrate_bench.sh come from one program.
//
//   xk-connrate server --backend kernel|xk [--listen A.B.C.D:P] [--count N] [--group]
//   xk-connrate client --backend kernel|xk --peer A.B.C.D:P [--count N] [--parallel K]
//
// One connection: the client connects; the server accepts it and closes at
// once; the client reads the end of the stream and closes. The server closes
// first so TIME-WAIT stays on its side and the client's ephemeral ports (and,
// behind filterd, the host-wide ones filterd hands out) come free at once.
// The client keeps K connections in flight and prints
//   RESULT role=client conns=N seconds=S rate=R cpu_s=C failures=F
// The xk backend takes its stack from the environment (xk_stack_create(NULL):
// XK_FILTERD for a node behind filterd, or XK_PORT/XK_IP standalone; see
// docs/api.md), so this runs on a standalone stack, on a node in steer mode
// and on a node in central mode alike: it is also the C API's exercise
// behind filterd.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "sock_api.hpp"
#include "xk/xk.h"

namespace {

constexpr const char* kUsage = R"(usage: xk-connrate server|client --backend kernel|xk [options]

TCP connection setup rate (connect + accept + close) over kernel sockets or xk.

  --backend kernel|xk   kernel sockets, or xk's C API on a stack from the
                        environment (XK_FILTERD, or XK_PORT and XK_IP; docs/api.md)
  --listen A.B.C.D:P    server: where to listen (default 0.0.0.0:5001)
  --group               server behind filterd: listen as one of a group (SO_REUSEPORT)
  --peer A.B.C.D:P      client: the server
  --count N             client: connections to make (default 10000); server: exit
                        after N accepted (default 0: never)
  --parallel K          client: connections in flight (default 8)
  --timeout SEC         give up after this long without a finished connection (the server:
                        without an accepted one, when it has a --count) (default 10)
  --help
exit status: 0 success, 1 failure, 2 bad command line
)";

using xk::tools::cpu_seconds;
using xk::tools::g_stack;
using Api = xk::tools::SockApi;

struct Args {
  bool server = false;
  bool xk = false;
  sockaddr_in addr{};
  bool group = false;
  long long count = -1;
  int parallel = 8;
  int timeout_s = 10;
};

Args parse(int argc, char** argv) {
  xk::tools::CommandLine cl("xk-connrate", kUsage, argc, argv);
  Args a;
  a.server = cl.server();
  bool peer = false;
  a.addr.sin_family = AF_INET;
  a.addr.sin_port = htons(5001);
  for (std::string_view f; cl.next(f);) {
    if (f == "--listen" && a.server) {
      a.addr = cl.endpoint();
    } else if (f == "--group" && a.server) {
      a.group = true;
    } else if (f == "--peer" && !a.server) {
      a.addr = cl.endpoint();
      peer = true;
    } else if (f == "--count") {
      a.count = cl.number(a.server ? 0 : 1, 1'000'000'000);
    } else if (f == "--parallel" && !a.server) {
      a.parallel = static_cast<int>(cl.number(1, 4096));
    } else if (f == "--timeout") {
      a.timeout_s = static_cast<int>(cl.number(1, 3600));
    } else {
      cl.unknown();
    }
  }
  a.xk = cl.xk();
  if (!a.server && !peer) cl.error("client: --peer A.B.C.D:P is required");
  if (a.count < 0) a.count = a.server ? 0 : 10000;
  return a;
}

[[noreturn]] void fail(const char* what) { xk::tools::fail("xk-connrate", what); }

// TCP's counters that say why connections did not get through, for the
// RESULT line (xk only).
std::string tcp_counters() {
  if (g_stack == nullptr) return {};
  std::string out;
  for (const char* name : {"passive_opens", "resets_sent", "resets_received", "drop_no_listener", "drop_syn_queue",
                           "drop_accept_queue", "syncookies_sent", "time_wait_reused", "drop_paws"}) {
    unsigned long long v = 0;
    if (xk_stack_counter(g_stack, "tcp0", name, &v) == 0) out += " " + std::string(name) + "=" + std::to_string(v);
  }
  return out;
}

int run_server(const Api& api, const Args& a) {
  const auto [ls, ep] = xk::tools::listen_ready(api, "xk-connrate", a.addr, 4096, a.group);
  long long accepted = 0;
  auto last_accept = std::chrono::steady_clock::now();
  int rc = 0;
  while (a.count == 0 || accepted < a.count) {
    if (a.count != 0 && std::chrono::steady_clock::now() - last_accept > std::chrono::seconds(a.timeout_s)) {
      std::fprintf(stderr, "xk-connrate: no connection accepted in %d s (%lld of %lld)\n", a.timeout_s, accepted,
                   a.count);
      rc = 1;
      break;
    }
    epoll_event got[4];
    const int n = api.epoll_wait(ep, got, 4, 1000);
    if (n < 0 && errno != EINTR) fail("epoll_wait");
    for (;;) {
      const int c = api.accept4(ls, nullptr, nullptr, SOCK_NONBLOCK);
      if (c < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        if (errno == ECONNABORTED) continue;
        fail("accept");
      }
      api.close(c);  // FIN at once: TIME-WAIT stays here
      ++accepted;
      last_accept = std::chrono::steady_clock::now();
    }
  }
  // Let the last FINs go out before the stack goes away.
  if (g_stack != nullptr) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (std::chrono::steady_clock::now() < until) xk_stack_poll(g_stack);
  }
  std::printf("RESULT role=server accepted=%lld cpu_s=%.3f%s\n", accepted, cpu_seconds(), tcp_counters().c_str());
  api.close(ep);
  api.close(ls);
  return rc;
}

int run_client(const Api& api, const Args& a) {
  const int ep = api.epoll_create1(0);
  if (ep < 0) fail("epoll_create1");
  long long started = 0, done = 0, failures = 0, refused = 0;
  int in_flight = 0;
  auto start_one = [&] {
    // Readable at the server's FIN (or an error).
    (void)xk::tools::start_connect(api, "xk-connrate", a.addr, ep, EPOLLIN | EPOLLRDHUP);
    ++started;
    ++in_flight;
  };
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  auto last_done = t0;
  while (done + failures < a.count) {
    while (in_flight < a.parallel && started < a.count) start_one();
    epoll_event got[64];
    const int n = api.epoll_wait(ep, got, 64, 100);
    if (n < 0 && errno != EINTR) fail("epoll_wait");
    for (int i = 0; i < n; ++i) {
      const int s = got[i].data.fd;
      char b[16];
      const ssize_t r = api.read(s, b, sizeof b);
      if (r > 0) continue;  // the server sends nothing; keep reading to the end
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (r < 0 && errno == ECONNREFUSED && done == 0) {
        // A standalone server's link comes up before its listener: until
        // the first connection gets through, a refusal is tried again.
        ++refused;
        --started;
      } else if (r < 0) {
        ++failures;
        if (failures <= 5) std::fprintf(stderr, "xk-connrate: connection failed: %s\n", std::strerror(errno));
      } else {
        ++done;
      }
      api.epoll_ctl(ep, EPOLL_CTL_DEL, s, nullptr);
      api.close(s);
      --in_flight;
      last_done = std::chrono::steady_clock::now();
    }
    if (std::chrono::steady_clock::now() - last_done > std::chrono::seconds(a.timeout_s)) {
      std::fprintf(stderr, "xk-connrate: no connection finished in %d s (%lld done, %d in flight)\n", a.timeout_s,
                   done, in_flight);
      return 1;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The last FIN-ACKs leave before the stack goes.
  if (g_stack != nullptr) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < until) xk_stack_poll(g_stack);
  }
  std::printf("RESULT role=client conns=%lld seconds=%.3f rate=%.0f cpu_s=%.3f failures=%lld refused=%lld%s\n", done,
              secs, static_cast<double>(done) / secs, cpu_seconds() - cpu0, failures, refused, tcp_counters().c_str());
  api.close(ep);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.xk) {
    g_stack = xk_stack_create(nullptr);
    if (g_stack == nullptr) {
      std::fprintf(stderr, "xk-connrate: cannot make the xk stack: %s\n", xk_last_error());
      return 1;
    }
  }
  const Api& api = a.xk ? xk::tools::kXkApi : xk::tools::kKernelApi;
  const int rc = a.server ? run_server(api, a) : run_client(api, a);
  if (g_stack != nullptr) xk_stack_destroy(g_stack);
  return rc;
}

// xk-soak: many TCP connections opening, carrying data, closing, for as long
// as asked -- the soak test's two ends (tests/soak/soak.sh, docs/soak.md).
//
//   xk-soak server --backend kernel|xk [--listen A.B.C.D:P] [--report SEC]
//   xk-soak client --backend kernel|xk --peer A.B.C.D:P [--seconds S]
//                  [--parallel K] [--max-bytes N] [--seed N] [--report SEC]
//
// One connection: the client connects, sends a random number (0..max-bytes)
// of bytes drawn from a pattern that depends on the connection and the
// offset, and shuts its side down; the server echoes every byte and closes
// after the client's end of stream; the client checks each byte it gets back
// against the pattern and that the stream ends exactly at the length it
// sent. The client keeps K connections in flight and starts new ones until
// --seconds have passed, then lets the last ones finish.
//
// Both ends print, every --report seconds,
//   PROGRESS t=S conns=N failures=F bytes=B in_flight=K heap_kb=H rss_kb=R
//            tcp_conns=C time_wait=W
// (heap: bytes malloc has handed out and not had back; tcp_conns/time_wait:
// the xk stack's TCP table, from xk_stack_counter) and, at the end,
//   RESULT role=... conns=N failures=F mismatches=M refused=E bytes=B seconds=S
//          heap_kb=H rss_kb=R tcp_conns=C time_wait=W left=L
// where `refused` counts the client's connections refused before the
// server listened (tried again, not in conns, but opened by its TCP), and
// `left` is what the TCP table still held once the end's own
// connections were closed and TIME-WAIT had run out (the xk backend waits up
// to --drain seconds for it): a connection stuck in any other state stays.
// The server ends on SIGTERM or SIGINT (or after --seconds, if given).
// Exit status: 0 when every connection carried its bytes intact and nothing
// was left behind, 1 otherwise, 2 for a bad command line.

#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sock_api.hpp"
#include "xk/xk.h"

namespace {

using xk::tools::g_stack;
using Api = xk::tools::SockApi;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage = R"(usage: xk-soak server|client --backend kernel|xk [options]

Soak: TCP connections opening, carrying verified data both ways, and closing,
for a long time; progress lines show memory and the TCP table as it goes.

  --backend kernel|xk   kernel sockets, or xk's C API on a stack from the
                        environment (XK_GRAPH, XK_PORT/XK_IP, XK_FILTERD; docs/api.md)
  --listen A.B.C.D:P    server: where to listen (default 0.0.0.0:5001)
  --peer A.B.C.D:P      client: the server (required)
  --seconds S           client: start connections for this long (default 60);
                        server: stop after this long (default 0: at SIGTERM)
  --parallel K          client: connections in flight (default 16)
  --max-bytes N         client: each connection sends 0..N bytes (default 262144)
  --seed N              client: the sizes' and patterns' seed (default 1)
  --report SEC          a PROGRESS line every SEC seconds (default 10)
  --timeout SEC         client: fail when no connection finished for this long (default 30)
  --drain SEC           at the end: wait this long for TIME-WAIT to empty (default 10)
  --counters LIST       xk: also print these stack counters in RESULT, e.g.
                        tcp0.active_opens,f0.tx_lost (as tcp0.active_opens=N ...)
  --help
exit status: 0 every byte intact and nothing left, 1 otherwise, 2 bad command line
)";

struct Args {
  bool server = false;
  bool xk = false;
  sockaddr_in addr{};
  long long seconds = -1;
  int parallel = 16;
  long long max_bytes = 262144;
  std::uint64_t seed = 1;
  int report_s = 10;
  int timeout_s = 30;
  int drain_s = 10;
  std::vector<std::string> counters;  // instance.name
};

Args parse(int argc, char** argv) {
  xk::tools::CommandLine cl("xk-soak", kUsage, argc, argv);
  Args a;
  a.server = cl.server();
  bool peer = false;
  a.addr.sin_family = AF_INET;
  a.addr.sin_port = htons(5001);
  for (std::string_view f; cl.next(f);) {
    if ((f == "--listen" && a.server) || (f == "--peer" && !a.server)) {
      a.addr = cl.endpoint();
      peer = true;
    } else if (f == "--seconds") {
      a.seconds = cl.number(a.server ? 0 : 1, 1'000'000);
    } else if (f == "--parallel" && !a.server) {
      a.parallel = static_cast<int>(cl.number(1, 4096));
    } else if (f == "--max-bytes" && !a.server) {
      a.max_bytes = cl.number(0, 1LL << 32);
    } else if (f == "--seed" && !a.server) {
      a.seed = static_cast<std::uint64_t>(cl.number(0, 1LL << 62));
    } else if (f == "--report") {
      a.report_s = static_cast<int>(cl.number(1, 86400));
    } else if (f == "--timeout" && !a.server) {
      a.timeout_s = static_cast<int>(cl.number(1, 3600));
    } else if (f == "--drain") {
      a.drain_s = static_cast<int>(cl.number(0, 3600));
    } else if (f == "--counters") {
      const std::string v = cl.value();
      std::size_t from = 0;
      while (from <= v.size()) {
        const std::size_t comma = std::min(v.find(',', from), v.size());
        const std::string item = v.substr(from, comma - from);
        const std::size_t dot = item.find('.');
        if (dot == std::string::npos || dot == 0 || dot + 1 == item.size()) {
          cl.error("--counters: '" + item + "' is not INSTANCE.COUNTER");
        }
        a.counters.push_back(item);
        from = comma + 1;
      }
    } else {
      cl.unknown();
    }
  }
  a.xk = cl.xk();
  if (!a.server && !peer) cl.error("client: --peer A.B.C.D:P is required");
  if (a.seconds < 0) a.seconds = a.server ? 0 : 60;
  return a;
}

[[noreturn]] void fail(const char* what) { xk::tools::fail("xk-soak", what); }

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

// The byte at `offset` of connection `id`'s stream: no short period, and a
// different stream per connection, so a byte from the wrong place or the
// wrong connection shows.
unsigned char pattern(std::uint64_t id, std::uint64_t offset) {
  std::uint64_t x = (id * 0x9e3779b97f4a7c15ULL) ^ (offset >> 6) * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return static_cast<unsigned char>((x + offset * 131) >> 3);
}

std::uint64_t next_random(std::uint64_t& s) {  // splitmix64
  s += 0x9e3779b97f4a7c15ULL;
  std::uint64_t z = s;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Gauges {
  unsigned long long heap_kb = 0;
  unsigned long long rss_kb = 0;
  unsigned long long tcp_conns = 0;
  unsigned long long time_wait = 0;
};

Gauges gauges() {
  Gauges g;
  const struct mallinfo2 mi = mallinfo2();
  g.heap_kb = mi.uordblks / 1024;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r"); f != nullptr) {
    unsigned long long size = 0, resident = 0;
    if (std::fscanf(f, "%llu %llu", &size, &resident) == 2) {
      g.rss_kb = resident * static_cast<unsigned long long>(sysconf(_SC_PAGESIZE)) / 1024;
    }
    std::fclose(f);
  }
  if (g_stack != nullptr) {
    (void)xk_stack_counter(g_stack, "tcp0", "connections", &g.tcp_conns);
    (void)xk_stack_counter(g_stack, "tcp0", "time_wait", &g.time_wait);
  }
  return g;
}

// What the xk stack knows of a connection that is not moving.
void describe(int fd, const char* who) {
  if (g_stack == nullptr) return;
  xk_tcp_info i{};
  if (xk_get_tcp_info(fd, &i) != 0) return;
  std::fprintf(stderr,
               "xk-soak: %s: state %u sent %llu acked %llu received %llu snd_wnd %u rcv_wnd %u cwnd %u rto_us %u "
               "retransmits %llu rto_expiries %llu segs out %llu in %llu\n",
               who, unsigned{i.state}, static_cast<unsigned long long>(i.bytes_sent),
               static_cast<unsigned long long>(i.bytes_acked), static_cast<unsigned long long>(i.bytes_received),
               i.snd_wnd, i.rcv_wnd, i.cwnd, i.rto_us, static_cast<unsigned long long>(i.retransmits),
               static_cast<unsigned long long>(i.rto_expiries), static_cast<unsigned long long>(i.segs_out),
               static_cast<unsigned long long>(i.segs_in));
}

struct Totals {
  long long conns = 0;
  long long failures = 0;
  long long mismatches = 0;
  long long refused = 0;  // client: refused before the server listened
  unsigned long long bytes = 0;
  int in_flight = 0;
};

void progress(const char* role, Clock::time_point t0, const Totals& t) {
  const Gauges g = gauges();
  std::printf("PROGRESS role=%s t=%.0f conns=%lld failures=%lld bytes=%llu in_flight=%d heap_kb=%llu rss_kb=%llu "
              "tcp_conns=%llu time_wait=%llu\n",
              role, std::chrono::duration<double>(Clock::now() - t0).count(), t.conns, t.failures, t.bytes,
              t.in_flight, g.heap_kb, g.rss_kb, g.tcp_conns, g.time_wait);
  std::fflush(stdout);
}

// With our own connections closed: what the TCP table still holds once
// TIME-WAIT has run out (waiting up to `drain_s`). 0 for the kernel backend
// (its table is not ours to see).
unsigned long long left_behind(int drain_s) {
  if (g_stack == nullptr) return 0;
  const auto until = Clock::now() + std::chrono::seconds(drain_s);
  unsigned long long n = 0;
  for (;;) {
    (void)xk_stack_poll(g_stack);
    if (xk_stack_counter(g_stack, "tcp0", "connections", &n) != 0) return ~0ULL;
    if (n == 0) return 0;
    if (Clock::now() >= until) break;
    usleep(1000);
  }
  // Say where they are stuck.
  static constexpr const char* kStates[] = {"SYN-SENT",   "SYN-RECEIVED", "ESTABLISHED", "FIN-WAIT-1",
                                            "FIN-WAIT-2", "CLOSE-WAIT",   "CLOSING",     "LAST-ACK",
                                            "TIME-WAIT"};
  for (const char* st : kStates) {
    unsigned long long k = 0;
    const std::string name = std::string("state:") + st;
    if (xk_stack_counter(g_stack, "tcp0", name.c_str(), &k) == 0 && k != 0) {
      std::fprintf(stderr, "xk-soak: %llu connections left in %s\n", k, st);
    }
  }
  return n;
}

void result(const Args& a, const char* role, Clock::time_point t0, const Totals& t, unsigned long long left) {
  const Gauges g = gauges();
  std::string extra;
  for (const std::string& c : a.counters) {
    if (g_stack == nullptr) break;
    const std::size_t dot = c.find('.');
    unsigned long long v = 0;
    if (xk_stack_counter(g_stack, c.substr(0, dot).c_str(), c.substr(dot + 1).c_str(), &v) != 0) {
      std::fprintf(stderr, "xk-soak: %s\n", xk_last_error());
      extra += " " + c + "=?";
    } else {
      extra += " " + c + "=" + std::to_string(v);
    }
  }
  std::printf("RESULT role=%s conns=%lld failures=%lld mismatches=%lld refused=%lld bytes=%llu seconds=%.1f heap_kb=%llu "
              "rss_kb=%llu tcp_conns=%llu time_wait=%llu left=%llu cpu_s=%.2f%s\n",
              role, t.conns, t.failures, t.mismatches, t.refused, t.bytes, std::chrono::duration<double>(Clock::now() - t0).count(),
              g.heap_kb, g.rss_kb, g.tcp_conns, g.time_wait, left, xk::tools::cpu_seconds(), extra.c_str());
  std::fflush(stdout);
}

// ---- the server: echo ------------------------------------------------------

struct EchoConn {
  std::vector<unsigned char> pending;  // read, not yet written back
  std::size_t sent = 0;                // of pending
  bool eof = false;
};

int run_server(const Api& api, const Args& a) {
  const auto [ls, ep] = xk::tools::listen_ready(api, "xk-soak", a.addr, 1024, false);

  std::unordered_map<int, EchoConn> conns;
  Totals t;
  std::vector<unsigned char> buf(65536);
  const auto t0 = Clock::now();
  auto next_report = t0 + std::chrono::seconds(a.report_s);
  auto finish = [&](int fd, bool failed) {
    api.epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    api.close(fd);
    conns.erase(fd);
    failed ? ++t.failures : ++t.conns;
    --t.in_flight;
  };
  // Write back what is pending; at the client's end of stream, with all of
  // it written, close (our FIN). Watch for writability only while stuck.
  auto pump = [&](int fd, EchoConn& c) {
    while (c.sent < c.pending.size()) {
      const ssize_t w = api.write(fd, c.pending.data() + c.sent, c.pending.size() - c.sent);
      if (w > 0) {
        c.sent += static_cast<std::size_t>(w);
        t.bytes += static_cast<unsigned long long>(w);
        continue;
      }
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (t.failures < 5) std::fprintf(stderr, "xk-soak: server write: %s\n", std::strerror(errno));
      finish(fd, true);
      return;
    }
    if (c.sent == c.pending.size()) {
      c.pending.clear();
      c.sent = 0;
      if (c.eof) {
        finish(fd, false);
        return;
      }
    }
    epoll_event e{};
    e.events = (c.pending.empty() ? EPOLLIN | EPOLLRDHUP : EPOLLOUT);
    e.data.fd = fd;
    api.epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
  };
  while (!g_stop && (a.seconds == 0 || Clock::now() - t0 < std::chrono::seconds(a.seconds))) {
    epoll_event got[64];
    const int n = api.epoll_wait(ep, got, 64, 100);
    if (n < 0 && errno != EINTR) fail("epoll_wait");
    for (int i = 0; i < n; ++i) {
      const int fd = got[i].data.fd;
      if (fd == ls) {
        for (;;) {
          const int c = api.accept4(ls, nullptr, nullptr, SOCK_NONBLOCK);
          if (c < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            if (errno == ECONNABORTED) continue;
            fail("accept");
          }
          conns.emplace(c, EchoConn{});
          ++t.in_flight;
          epoll_event e{};
          e.events = EPOLLIN | EPOLLRDHUP;
          e.data.fd = c;
          if (api.epoll_ctl(ep, EPOLL_CTL_ADD, c, &e) != 0) fail("epoll_ctl");
        }
        continue;
      }
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      EchoConn& c = it->second;
      if (!c.pending.empty()) {
        pump(fd, c);
        continue;
      }
      const ssize_t r = api.read(fd, buf.data(), buf.size());
      if (r > 0) {
        c.pending.assign(buf.begin(), buf.begin() + r);
        pump(fd, c);
      } else if (r == 0) {
        c.eof = true;
        pump(fd, c);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        if (t.failures < 5) std::fprintf(stderr, "xk-soak: server read: %s\n", std::strerror(errno));
        finish(fd, true);
      }
    }
    if (Clock::now() >= next_report) {
      progress("server", t0, t);
      next_report += std::chrono::seconds(a.report_s);
    }
  }
  // Connections still open at the end are the client's business (it reports
  // them); ours are closed now.
  const int still_open = t.in_flight;
  for (auto& [fd, c] : conns) {
    const std::string who = "server connection with " + std::to_string(c.pending.size() - c.sent) + " bytes to echo" +
                            (c.eof ? " after the end" : "");
    describe(fd, who.c_str());
    api.close(fd);
  }
  conns.clear();
  api.close(ls);
  api.close(ep);
  const unsigned long long left = left_behind(a.drain_s);
  result(a, "server", t0, t, left);
  if (still_open != 0) std::fprintf(stderr, "xk-soak: %d connections were still open at the end\n", still_open);
  return t.failures == 0 && left == 0 && still_open == 0 ? 0 : 1;
}

// ---- the client: send, check the echo ---------------------------------------

struct SoakConn {
  std::uint64_t id = 0;
  std::uint64_t size = 0;
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  bool shut = false;
};

int run_client(const Api& api, const Args& a) {
  const int ep = api.epoll_create1(0);
  if (ep < 0) fail("epoll_create1");
  std::unordered_map<int, SoakConn> conns;
  Totals t;
  std::uint64_t rng = a.seed, next_id = 0;
  std::vector<unsigned char> out(65536), in(65536);
  const auto t0 = Clock::now();
  const auto stop_starting = t0 + std::chrono::seconds(a.seconds);
  auto next_report = t0 + std::chrono::seconds(a.report_s);
  auto last_done = t0;

  auto start_one = [&] {
    const int s = xk::tools::start_connect(api, "xk-soak", a.addr, ep, EPOLLIN | EPOLLOUT | EPOLLRDHUP);
    SoakConn c;
    c.id = next_id++;
    c.size = a.max_bytes == 0 ? 0 : next_random(rng) % static_cast<std::uint64_t>(a.max_bytes + 1);
    conns.emplace(s, c);
    ++t.in_flight;
  };
  // Until the first connection gets through, a refused one is the server
  // not listening yet (both stacks come up together): tried again, not
  // counted, for up to --timeout.
  bool through = false;
  auto finish = [&](int fd, bool failed, const char* why, int err = 0) {
    api.epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    api.close(fd);
    conns.erase(fd);
    --t.in_flight;
    if (failed && err == ECONNREFUSED && !through && Clock::now() - t0 < std::chrono::seconds(a.timeout_s)) {
      ++t.refused;
      usleep(10000);
      return;
    }
    if (failed && t.failures < 5) std::fprintf(stderr, "xk-soak: connection failed: %s\n", why);
    failed ? ++t.failures : ++t.conns;
    through = through || !failed;
    last_done = Clock::now();
  };

  while (!g_stop) {
    const bool starting = Clock::now() < stop_starting;
    while (starting && t.in_flight < a.parallel) start_one();
    if (!starting && t.in_flight == 0) break;
    epoll_event got[64];
    const int n = api.epoll_wait(ep, got, 64, 100);
    if (n < 0 && errno != EINTR) fail("epoll_wait");
    for (int i = 0; i < n; ++i) {
      const int fd = got[i].data.fd;
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      SoakConn& c = it->second;
      if ((got[i].events & EPOLLOUT) != 0 && !c.shut) {
        int werr = 0;
        while (c.sent < c.size) {
          const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), c.size - c.sent));
          for (std::size_t k = 0; k < len; ++k) out[k] = pattern(c.id, c.sent + k);
          const ssize_t w = api.write(fd, out.data(), len);
          if (w > 0) {
            c.sent += static_cast<std::uint64_t>(w);
            continue;
          }
          if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) werr = errno;
          break;
        }
        // A write that fails takes the socket's pending error with it (a
        // refused connect's ECONNREFUSED): the read after it sees only EOF.
        if (werr != 0) {
          finish(fd, true, std::strerror(werr), werr);
          continue;
        }
        if (c.sent == c.size) {
          if (api.shutdown(fd, SHUT_WR) == 0) {
            c.shut = true;
            epoll_event e{};
            e.events = EPOLLIN | EPOLLRDHUP;
            e.data.fd = fd;
            api.epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
          } else if (errno != ENOTCONN) {
            finish(fd, true, std::strerror(errno), errno);
            continue;
          }
        }
      }
      for (;;) {
        const ssize_t r = api.read(fd, in.data(), in.size());
        if (r > 0) {
          for (ssize_t k = 0; k < r; ++k) {
            const std::uint64_t at = c.received + static_cast<std::uint64_t>(k);
            if (in[static_cast<std::size_t>(k)] != pattern(c.id, at)) {
              if (t.mismatches++ < 5) {
                sockaddr_in me{};
                socklen_t len = sizeof me;
                (void)api.getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len);
                std::fprintf(stderr,
                             "xk-soak: connection %llu (port %u, %llu bytes): byte %llu is 0x%02x, expected 0x%02x "
                             "(%zd bytes in this read, from byte %llu)\n",
                             static_cast<unsigned long long>(c.id), ntohs(me.sin_port),
                             static_cast<unsigned long long>(c.size), static_cast<unsigned long long>(at),
                             in[static_cast<std::size_t>(k)], pattern(c.id, at), r,
                             static_cast<unsigned long long>(c.received));
              }
              break;
            }
          }
          c.received += static_cast<std::uint64_t>(r);
          t.bytes += static_cast<unsigned long long>(r);
          continue;
        }
        if (r == 0) {
          if (c.received != c.size || !c.shut) {
            sockaddr_in me{};
            socklen_t len = sizeof me;
            (void)api.getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len);
            const std::string why = "connection " + std::to_string(c.id) + " (port " + std::to_string(ntohs(me.sin_port)) +
                                    "): the echo ended after " + std::to_string(c.received) + " of " +
                                    std::to_string(c.size) + " bytes (" + std::to_string(c.sent) + " sent" +
                                    (c.shut ? ", shut down)" : ")");
            finish(fd, true, why.c_str());
          } else {
            finish(fd, false, "");
          }
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          finish(fd, true, std::strerror(errno), errno);
        }
        break;
      }
    }
    if (Clock::now() >= next_report) {
      progress("client", t0, t);
      next_report += std::chrono::seconds(a.report_s);
    }
    if (t.in_flight > 0 && Clock::now() - last_done > std::chrono::seconds(a.timeout_s)) {
      std::fprintf(stderr, "xk-soak: no connection finished in %d s (%lld done, %d in flight)\n", a.timeout_s, t.conns,
                   t.in_flight);
      break;
    }
  }
  const int still_open = t.in_flight;
  for (auto& [fd, c] : conns) {
    const std::string who = "client connection " + std::to_string(c.id) + " (" + std::to_string(c.size) + " bytes, " +
                            std::to_string(c.sent) + " written, " + std::to_string(c.received) + " back" +
                            (c.shut ? ", shut down)" : ")");
    describe(fd, who.c_str());
    api.close(fd);
  }
  conns.clear();
  api.close(ep);
  if (t.refused != 0) std::printf("xk-soak: %lld connections refused before the server listened\n", t.refused);
  const unsigned long long left = left_behind(a.drain_s);
  result(a, "client", t0, t, left);
  if (still_open != 0) std::fprintf(stderr, "xk-soak: %d connections were still open at the end\n", still_open);
  return t.failures == 0 && t.mismatches == 0 && left == 0 && still_open == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  if (a.xk) {
    g_stack = xk_stack_create(nullptr);
    if (g_stack == nullptr) {
      std::fprintf(stderr, "xk-soak: cannot make the xk stack: %s\n", xk_last_error());
      return 1;
    }
  }
  const Api& api = a.xk ? xk::tools::kXkApi : xk::tools::kKernelApi;
  const int rc = a.server ? run_server(api, a) : run_client(api, a);
  if (g_stack != nullptr) xk_stack_destroy(g_stack);
  return rc;
}

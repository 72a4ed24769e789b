// One end of N idle TCP connections, to measure what each costs at rest:
// the same program drives Linux's sockets or xk's (the C API, so a
// program's descriptor state counts too), through the same calls.
//
//   xk-conn-scale server|client linux|xk --count N --ports P --ip A [--peer B]
//       [--base-port B] [--port DEVARGS] [--tcp-opts OPTS]
//
// The server listens on ports B..B+P-1 of A (B: 5001); the client opens N
// connections to them (connection i to port B + i % P), at most 256
// opening at once. When all N are established each end prints
//   ESTABLISHED n=N rss_kb=R heap=H base_rss_kb=R0 base_heap=H0
// (its RSS and heap in use now and before the first connection) and waits
// for a line on stdin. Then the client sends one byte on every connection,
// the server echoes each, the client checks every echo, and both print
//   ECHOED n=N
// (the client then exits; the server runs on until stopped, to send again
// what was lost). tests/bench/conn_scale.sh runs the four and reads the kernel's
// slab for Linux's side (docs/BENCHMARKS.md, "A million idle connections").
#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "xk/xk.h"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "xk-conn-scale: %s\n", what.c_str());
  std::exit(1);
}

// The socket calls, Linux's or xk's.
struct Api {
  bool xk = false;
  xk_stack* st = nullptr;
  int socket() const {
    return xk ? xk_socket(st, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)
              : ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  }
  int bind(int fd, const sockaddr_in& a) const {
    const auto* p = reinterpret_cast<const sockaddr*>(&a);
    return xk ? xk_bind(fd, p, sizeof a) : ::bind(fd, p, sizeof a);
  }
  int listen(int fd) const { return xk ? xk_listen(fd, 65535) : ::listen(fd, 65535); }
  int accept(int fd) const {
    return xk ? xk_accept4(fd, nullptr, nullptr, SOCK_NONBLOCK) : ::accept4(fd, nullptr, nullptr, SOCK_NONBLOCK);
  }
  int connect(int fd, const sockaddr_in& a) const {
    const auto* p = reinterpret_cast<const sockaddr*>(&a);
    return xk ? xk_connect(fd, p, sizeof a) : ::connect(fd, p, sizeof a);
  }
  int error_of(int fd) const {
    int err = 0;
    socklen_t len = sizeof err;
    const int rc = xk ? xk_getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) : ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    return rc == 0 ? err : errno;
  }
  int epoll() const { return xk ? xk_epoll_create1(0) : ::epoll_create1(0); }
  int ctl(int ep, int op, int fd, std::uint32_t events) const {
    epoll_event e{};
    e.events = events;
    e.data.fd = fd;
    return xk ? xk_epoll_ctl(ep, op, fd, &e) : ::epoll_ctl(ep, op, fd, &e);
  }
  int wait(int ep, epoll_event* out, int n, int ms) const {
    return xk ? xk_epoll_wait(ep, out, n, ms) : ::epoll_wait(ep, out, n, ms);
  }
  ssize_t read(int fd, void* b, std::size_t n) const { return xk ? xk_read(fd, b, n) : ::read(fd, b, n); }
  ssize_t write(int fd, const void* b, std::size_t n) const { return xk ? xk_write(fd, b, n) : ::write(fd, b, n); }
  const char* error() const { return xk ? xk_last_error() : std::strerror(errno); }
};

sockaddr_in addr_of(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) die("bad address " + ip);
  return a;
}

long rss_kb() {
  long pages = 0, resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr || std::fscanf(f, "%ld %ld", &pages, &resident) != 2) die("cannot read /proc/self/statm");
  std::fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

std::size_t heap() { return mallinfo2().uordblks; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: xk-conn-scale server|client linux|xk --count N --ports P --ip A [--peer B] [--port DEVARGS] "
                 "[--tcp-opts OPTS]\n");
    return 2;
  }
  const std::string role = argv[1], kind = argv[2];
  long count = 0;
  int ports = 16, base = 5001;
  std::string ip, peer, devargs, tcp_opts;
  for (int i = 3; i < argc; ++i) {
    auto next = [&] {
      if (i + 1 >= argc) die(std::string(argv[i]) + " needs a value");
      return std::string(argv[++i]);
    };
    const std::string a = argv[i];
    if (a == "--count") count = std::atol(next().c_str());
    else if (a == "--ports") ports = std::atoi(next().c_str());
    else if (a == "--ip") ip = next();
    else if (a == "--peer") peer = next();
    else if (a == "--base-port") base = std::atoi(next().c_str());
    else if (a == "--port") devargs = next();
    else if (a == "--tcp-opts") tcp_opts = next();
    else die("unknown argument " + a);
  }
  if ((role != "server" && role != "client") || (kind != "linux" && kind != "xk") || count <= 0 || ports < 1 ||
      ports > 1000 || base < 1 || base + ports > 65536 || ip.empty() || (role == "client" && peer.empty()) || (kind == "xk" && devargs.empty())) {
    std::fprintf(stderr, "xk-conn-scale: server|client, linux|xk, --count > 0, --ports 1..1000, --ip, a client's --peer, "
                         "xk's --port\n");
    return 2;
  }
  rlimit nofile{};
  (void)getrlimit(RLIMIT_NOFILE, &nofile);
  if (kind == "linux" && nofile.rlim_cur < static_cast<rlim_t>(count + 100)) {
    nofile.rlim_cur = static_cast<rlim_t>(count + 100);
    nofile.rlim_max = std::max(nofile.rlim_max, nofile.rlim_cur);
    if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) {
      die("cannot raise RLIMIT_NOFILE to " + std::to_string(count + 100) + ": " + std::strerror(errno));
    }
  }

  Api api;
  if (kind == "xk") {
    api.xk = true;
    xk_stack_config c;
    xk_stack_config_init(&c);
    const std::string cidr = ip + "/24";
    c.port = devargs.c_str();
    c.ip = cidr.c_str();
    c.tcp_opts = tcp_opts.c_str();
    c.idle = XK_IDLE_YIELD_THEN_SLEEP;
    c.link_wait_ms = 30000;
    api.st = xk_stack_create(&c);
    if (api.st == nullptr) die(std::string("stack: ") + xk_last_error());
  }
  const int ep = api.epoll();
  if (ep < 0) die(std::string("epoll: ") + api.error());
  std::vector<epoll_event> out(4096);
  std::vector<int> conns;
  conns.reserve(static_cast<std::size_t>(count));
  std::vector<int> listeners;

  malloc_trim(0);
  const long base_rss = rss_kb();
  const std::size_t base_heap = heap();

  if (role == "server") {
    for (int p = 0; p < ports; ++p) {
      const int l = api.socket();
      int one = 1;
      if (!api.xk) (void)::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (l < 0 || api.bind(l, addr_of(ip, base + p)) != 0 || api.listen(l) != 0) {
        die("listen on port " + std::to_string(base + p) + ": " + api.error());
      }
      if (api.ctl(ep, EPOLL_CTL_ADD, l, EPOLLIN) != 0) die(std::string("epoll_ctl: ") + api.error());
      listeners.push_back(l);
    }
    std::printf("LISTENING ports=%d\n", ports);
    std::fflush(stdout);
    while (static_cast<long>(conns.size()) < count) {
      const int n = api.wait(ep, out.data(), static_cast<int>(out.size()), 1000);
      for (int k = 0; k < n; ++k) {
        for (;;) {
          const int fd = api.accept(out[static_cast<std::size_t>(k)].data.fd);
          if (fd < 0) break;
          conns.push_back(fd);
        }
      }
    }
  } else {
    // The server may still be starting (a memif server's stack comes up
    // with the link): one connection, tried again until it listens.
    for (int tries = 0;; ++tries) {
      const int fd = api.socket();
      if (fd < 0) die(std::string("socket: ") + api.error());
      (void)api.connect(fd, addr_of(peer, base));
      (void)api.ctl(ep, EPOLL_CTL_ADD, fd, EPOLLOUT);
      int n = 0;
      for (int i = 0; i < 100 && n == 0; ++i) n = api.wait(ep, out.data(), 1, 10);
      (void)api.ctl(ep, EPOLL_CTL_DEL, fd, 0);
      if (n == 1 && api.error_of(fd) == 0) {
        conns.push_back(fd);
        break;
      }
      if (api.xk) (void)xk_close(fd); else (void)::close(fd);
      if (tries == 300) die("the server never listened on port " + std::to_string(base));
      usleep(100'000);
    }
    long started = 1, opening = 0;
    while (static_cast<long>(conns.size()) < count) {
      while (started < count && opening < 256) {
        const int fd = api.socket();
        if (fd < 0) die("socket " + std::to_string(started) + ": " + api.error());
        const int rc = api.connect(fd, addr_of(peer, base + static_cast<int>(started % ports)));
        if (rc != 0 && errno != EINPROGRESS) die("connect " + std::to_string(started) + ": " + api.error());
        if (api.ctl(ep, EPOLL_CTL_ADD, fd, EPOLLOUT) != 0) die(std::string("epoll_ctl: ") + api.error());
        ++started;
        ++opening;
      }
      const int n = api.wait(ep, out.data(), static_cast<int>(out.size()), 1000);
      for (int k = 0; k < n; ++k) {
        const int fd = out[static_cast<std::size_t>(k)].data.fd;
        if (const int err = api.error_of(fd); err != 0) {
          die("connection " + std::to_string(conns.size()) + " failed: " + std::strerror(err));
        }
        (void)api.ctl(ep, EPOLL_CTL_DEL, fd, 0);
        conns.push_back(fd);
        --opening;
      }
    }
  }
  // At rest: the last handshakes' ACKs have gone both ways.
  for (int i = 0; i < 100; ++i) (void)api.wait(ep, out.data(), static_cast<int>(out.size()), 10);
  malloc_trim(0);
  std::printf("ESTABLISHED n=%zu rss_kb=%ld heap=%zu base_rss_kb=%ld base_heap=%zu\n", conns.size(), rss_kb(), heap(),
              base_rss, base_heap);
  std::fflush(stdout);

  char line[64];
  if (std::fgets(line, sizeof line, stdin) == nullptr) die("stdin closed before the echo");

  // One byte each way on every connection.
  for (int fd : conns) {
    if (api.ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN) != 0) die(std::string("epoll_ctl: ") + api.error());
  }
  if (role == "client") {
    for (std::size_t i = 0; i < conns.size(); ++i) {
      const char b = static_cast<char>('a' + i % 26);
      while (api.write(conns[i], &b, 1) != 1) {
        if (errno != EAGAIN) die(std::string("write: ") + api.error());
        (void)api.wait(ep, out.data(), 1, 1);
      }
    }
  }
  std::vector<char> seen(conns.size(), 0);
  std::vector<long> index_of_fd;
  for (std::size_t i = 0; i < conns.size(); ++i) {
    const auto fd = static_cast<std::size_t>(conns[i]);
    if (fd >= index_of_fd.size()) index_of_fd.resize(fd + 1, -1);
    index_of_fd[fd] = static_cast<long>(i);
  }
  long done = 0;
  while (done < static_cast<long>(conns.size())) {
    const int n = api.wait(ep, out.data(), static_cast<int>(out.size()), 1000);
    if (n < 0 && errno != EINTR) die(std::string("epoll_wait: ") + api.error());
    for (int k = 0; k < n; ++k) {
      const int fd = out[static_cast<std::size_t>(k)].data.fd;
      char b = 0;
      if (api.read(fd, &b, 1) != 1) continue;
      const long i = index_of_fd[static_cast<std::size_t>(fd)];
      if (i < 0 || seen[static_cast<std::size_t>(i)]) die("an unexpected byte");
      seen[static_cast<std::size_t>(i)] = 1;
      if (role == "server") {
        while (api.write(fd, &b, 1) != 1) {
          if (errno != EAGAIN) die(std::string("echo: ") + api.error());
        }
      } else if (b != static_cast<char>('a' + i % 26)) {
        die("connection " + std::to_string(i) + " echoed the wrong byte");
      }
      ++done;
    }
  }
  std::printf("ECHOED n=%ld\n", done);
  std::fflush(stdout);
  if (role == "server") {
    // An echo lost on the way (a burst of a million overruns any ring) is
    // sent again by this stack: it runs until the script, which has seen
    // the client's ECHOED, stops it.
    for (;;) (void)api.wait(ep, out.data(), static_cast<int>(out.size()), 100);
  }
  return 0;
}

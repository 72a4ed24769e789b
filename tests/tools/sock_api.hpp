#pragma once
// The socket calls the test tools make, with POSIX signatures, over either
// the kernel's sockets or xk's C API on one stack: one program, two backends
// (xk-connrate, xk-soak).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "xk/xk.h"

namespace xk::tools {

struct SockApi {
  int (*socket)(int, int, int);
  int (*bind)(int, const sockaddr*, socklen_t);
  int (*listen)(int, int);
  int (*accept4)(int, sockaddr*, socklen_t*, int);
  int (*connect)(int, const sockaddr*, socklen_t);
  ssize_t (*read)(int, void*, size_t);
  ssize_t (*write)(int, const void*, size_t);
  int (*shutdown)(int, int);
  int (*close)(int);
  int (*setsockopt)(int, int, int, const void*, socklen_t);
  int (*getsockopt)(int, int, int, void*, socklen_t*);
  int (*getsockname)(int, sockaddr*, socklen_t*);
  int (*epoll_create1)(int);
  int (*epoll_ctl)(int, int, int, epoll_event*);
  int (*epoll_wait)(int, epoll_event*, int, int);
};

// The stack the xk backend's socket() makes sockets on.
inline xk_stack* g_stack = nullptr;
inline int xk_socket_on_stack(int d, int t, int p) { return xk_socket(g_stack, d, t, p); }

inline const SockApi kKernelApi{::socket,     ::bind,       ::listen,   ::accept4,       ::connect,
                                ::read,       ::write,      ::shutdown, ::close,         ::setsockopt,
                                ::getsockopt, ::getsockname, ::epoll_create1, ::epoll_ctl, ::epoll_wait};
inline const SockApi kXkApi{xk_socket_on_stack, xk_bind,        xk_listen,      xk_accept4,       xk_connect,
                            xk_read,            xk_write,       xk_shutdown,    xk_close,         xk_setsockopt,
                            xk_getsockopt,      xk_getsockname,  xk_epoll_create1, xk_epoll_ctl, xk_epoll_wait};

// "A.B.C.D:PORT", or false.
inline bool parse_endpoint(const std::string& v, sockaddr_in& out) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  const auto colon = v.rfind(':');
  if (colon == std::string::npos) return false;
  char* end = nullptr;
  const long port = std::strtol(v.c_str() + colon + 1, &end, 10);
  if (end == v.c_str() + colon + 1 || *end != '\0' || port < 1 || port > 65535 ||
      inet_pton(AF_INET, v.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    return false;
  }
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  out = a;
  return true;
}

// A whole number in [min, max], or false.
inline bool parse_number(const std::string& v, long long min, long long max, long long& out) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < min || n > max) return false;
  out = n;
  return true;
}

// The command line both tools take: `PROG server|client --backend kernel|xk
// [--flag value]...`. --help anywhere prints the usage; a bad line says what
// is wrong and exits 2.
class CommandLine {
 public:
  CommandLine(const char* prog, const char* usage, int argc, char** argv) : prog_(prog), argc_(argc), argv_(argv) {
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
        std::fputs(usage, stdout);
        std::exit(0);
      }
    }
    if (argc < 2) error("say server or client");
    role_ = argv[1];
    if (role_ != "server" && role_ != "client") error("'" + std::string(role_) + "': server or client");
  }
  bool server() const noexcept { return role_ == "server"; }

  // The next flag, or false at the end (then --backend must have been given).
  bool next(std::string_view& flag) {
    if (++i_ >= argc_) {
      if (!backend_) error("--backend kernel|xk is required");
      return false;
    }
    flag = flag_ = argv_[i_];
    if (flag_ == "--backend") {
      const std::string v = value();
      if (v != "kernel" && v != "xk") error("--backend: kernel or xk, not '" + v + "'");
      xk_ = v == "xk";
      backend_ = true;
      return next(flag);
    }
    return true;
  }
  bool xk() const noexcept { return xk_; }

  // The current flag's value, as text, a whole number in [min, max], or an
  // A.B.C.D:PORT.
  std::string value() {
    if (i_ + 1 >= argc_) error(std::string(flag_) + " needs a value");
    return argv_[++i_];
  }
  long long number(long long min, long long max) {
    const std::string v = value();
    long long n = 0;
    if (!parse_number(v, min, max, n)) {
      error(std::string(flag_) + ": '" + v + "' is not a number in " + std::to_string(min) + ".." +
            std::to_string(max));
    }
    return n;
  }
  sockaddr_in endpoint() {
    const std::string v = value();
    sockaddr_in a{};
    if (!parse_endpoint(v, a)) error(std::string(flag_) + ": '" + v + "' is not A.B.C.D:PORT");
    return a;
  }
  [[noreturn]] void unknown() const {
    error("unknown " + std::string(role_) + " option '" + std::string(flag_) + "'");
  }
  [[noreturn]] void error(const std::string& what) const {
    std::fprintf(stderr, "%s: %s\ntry '%s --help'\n", prog_, what.c_str(), prog_);
    std::exit(2);
  }

 private:
  const char* prog_;
  int argc_;
  char** argv_;
  int i_ = 1;
  std::string_view role_;
  std::string_view flag_;
  bool backend_ = false;
  bool xk_ = false;
};

// A call failed: say which, with errno's text and xk's own word, and exit 1.
[[noreturn]] inline void fail(const char* prog, const char* what) {
  const int e = errno;
  std::fprintf(stderr, "%s: %s: %s%s%s\n", prog, what, std::strerror(e), g_stack ? "; " : "",
               g_stack ? xk_last_error() : "");
  std::exit(1);
}

// A non-blocking listener on `addr` (SO_REUSEADDR; SO_REUSEPORT for a
// listen group) and a new epoll set watching it; prints "PROG: server on
// port P: ready" once both are there.
struct Listening {
  int listener;
  int epoll;
};
inline Listening listen_ready(const SockApi& api, const char* prog, const sockaddr_in& addr, int backlog,
                              bool reuseport) {
  const int ls = api.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (ls < 0) fail(prog, "socket");
  const int one = 1;
  if (api.setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) fail(prog, "SO_REUSEADDR");
  if (reuseport && api.setsockopt(ls, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) fail(prog, "SO_REUSEPORT");
  if (api.bind(ls, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) fail(prog, "bind");
  if (api.listen(ls, backlog) != 0) fail(prog, "listen");
  const int ep = api.epoll_create1(0);
  if (ep < 0) fail(prog, "epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = ls;
  if (api.epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev) != 0) fail(prog, "epoll_ctl");
  std::printf("%s: server on port %u: ready\n", prog, ntohs(addr.sin_port));
  std::fflush(stdout);
  return {ls, ep};
}

// A non-blocking connect to `addr`, under way, added to `ep` for `events`.
inline int start_connect(const SockApi& api, const char* prog, const sockaddr_in& addr, int ep, std::uint32_t events) {
  const int s = api.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (s < 0) fail(prog, "socket");
  if (api.connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    fail(prog, "connect");
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = s;
  if (api.epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) != 0) fail(prog, "epoll_ctl");
  return s;
}

inline double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace xk::tools

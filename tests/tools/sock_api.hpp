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
#include <cstdlib>
#include <string>

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

inline double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace xk::tools

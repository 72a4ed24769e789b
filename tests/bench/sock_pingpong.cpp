// xk-sock-pingpong: a TCP ping-pong written against plain BSD sockets, with
// nothing of xk in it -- the leanest "unmodified program" for xkrun, so the
// preload bench can tell the shim's cost from a bigger program's own work
// (sockperf's, which Linux pays too).
//
//   xk-sock-pingpong server PORT
//       accepts one connection and echoes what it reads until it ends
//   xk-sock-pingpong client ADDR PORT SIZE SECONDS
//       writes SIZE bytes and reads them back, again and again for SECONDS
//       (the first 0.3 s are warm-up), then prints
//       RESULT exchanges=N half_rtt_avg_us=A half_rtt_p50_us=M
//
// Blocking calls, TCP_NODELAY on both ends; half-RTT = one exchange / 2.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int usage() {
  std::fprintf(stderr,
               "usage: xk-sock-pingpong server PORT\n"
               "       xk-sock-pingpong client ADDR PORT SIZE SECONDS\n");
  return 2;
}

// All `n` bytes, or false (the peer ended the stream, or an error: said).
bool read_all(int fd, char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR) continue;
      std::perror("read");
      return false;
    }
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      std::perror("write");
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool parse_port(const char* s, std::uint16_t& port) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > 65535) return false;
  port = static_cast<std::uint16_t>(v);
  return true;
}

void no_delay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) std::perror("setsockopt TCP_NODELAY");
}

int serve(std::uint16_t port) {
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) return std::perror("socket"), 1;
  const int one = 1;
  (void)::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::bind(l, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return std::perror("bind"), 1;
  if (::listen(l, 1) != 0) return std::perror("listen"), 1;
  const int s = ::accept(l, nullptr, nullptr);
  if (s < 0) return std::perror("accept"), 1;
  no_delay(s);
  std::vector<char> buf(64 * 1024);
  for (;;) {
    const ssize_t r = ::read(s, buf.data(), buf.size());
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      return std::perror("read"), 1;
    }
    if (!write_all(s, buf.data(), static_cast<std::size_t>(r))) return 1;
  }
  ::close(s);
  ::close(l);
  return 0;
}

int ping(const char* addr, std::uint16_t port, std::size_t size, double seconds) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, addr, &a.sin_addr) != 1) return std::fprintf(stderr, "bad address %s\n", addr), 2;
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return std::perror("socket"), 1;
  if (::connect(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return std::perror("connect"), 1;
  no_delay(s);
  std::vector<char> msg(size, 'x'), back(size);
  std::vector<float> half_us;
  half_us.reserve(1 << 20);
  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_from = start + std::chrono::milliseconds(300);
  const Clock::time_point end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (;;) {
    const Clock::time_point t0 = Clock::now();
    if (t0 >= end) break;
    if (!write_all(s, msg.data(), size) || !read_all(s, back.data(), size)) return 1;
    if (t0 >= measure_from) {
      half_us.push_back(std::chrono::duration<float, std::micro>(Clock::now() - t0).count() / 2);
    }
  }
  ::close(s);
  if (half_us.empty()) return std::fprintf(stderr, "no exchange measured (SECONDS > 0.3)\n"), 1;
  double sum = 0;
  for (float v : half_us) sum += v;
  const auto mid = half_us.begin() + static_cast<std::ptrdiff_t>(half_us.size() / 2);
  std::nth_element(half_us.begin(), mid, half_us.end());
  std::printf("RESULT exchanges=%zu half_rtt_avg_us=%.3f half_rtt_p50_us=%.3f\n", half_us.size(),
              sum / static_cast<double>(half_us.size()), static_cast<double>(*mid));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string role = argv[1];
  std::uint16_t port = 0;
  if (role == "server" && argc == 3 && parse_port(argv[2], port)) return serve(port);
  if (role == "client" && argc == 6 && parse_port(argv[3], port)) {
    const long size = std::strtol(argv[4], nullptr, 10);
    const double seconds = std::strtod(argv[5], nullptr);
    if (size < 1 || size > (1 << 20) || !(seconds > 0)) return usage();
    return ping(argv[2], port, static_cast<std::size_t>(size), seconds);
  }
  return usage();
}

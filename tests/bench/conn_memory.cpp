// Heap per idle established connection: N connections between two sockets
// of one stack over loopback (both ends counted), through the C API as a
// program holds them; the heap in use (mallinfo2) before and after, divided
// by the connections. No data queued: what a connection costs at rest.
//
//   build/release/tests/bench/xk-conn-memory [N]     (default 5000 pairs)
//
// docs/BENCHMARKS.md, "Memory per idle connection".
#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "xk/xk.h"

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 5000;
  if (n <= 0 || n > 16000) {
    std::fprintf(stderr, "xk-conn-memory: N is 1..16000 pairs (the ephemeral ports of one peer address)\n");
    return 2;
  }
  xk_stack_config c;
  xk_stack_config_init(&c);
  c.graph =
      "loopback lo0 mtu=9000\n"
      "ipv4 ip0 below=lo0 addr=192.0.2.1/24\n"
      "tcp tcp0 below=ip0 syn_backlog=100000\n";
  xk_stack* st = xk_stack_create(&c);
  if (st == nullptr) {
    std::fprintf(stderr, "xk-conn-memory: %s\n", xk_last_error());
    return 1;
  }
  const int l = xk_socket(st, AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(5001);
  inet_pton(AF_INET, "192.0.2.1", &a.sin_addr);
  if (xk_bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || xk_listen(l, 100000) != 0) {
    std::fprintf(stderr, "xk-conn-memory: %s\n", xk_last_error());
    return 1;
  }
  std::vector<int> fds;
  fds.reserve(2 * static_cast<std::size_t>(n) + 2);
  auto connect_one = [&] {
    const int cfd = xk_socket(st, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    (void)xk_connect(cfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    pollfd p{l, POLLIN, 0};
    if (xk_poll(&p, 1, 1000) != 1) return false;
    const int sfd = xk_accept(l, nullptr, nullptr);
    fds.push_back(cfd);
    fds.push_back(sfd);
    return sfd >= 0;
  };
  if (!connect_one()) return 1;  // warm-up: the stack's own structures grow first
  for (int i = 0; i < 10; ++i) xk_stack_poll(st);
  malloc_trim(0);
  const std::size_t before = mallinfo2().uordblks;
  for (int i = 0; i < n; ++i) {
    if (!connect_one()) {
      std::fprintf(stderr, "xk-conn-memory: connection %d failed: %s\n", i, xk_last_error());
      return 1;
    }
  }
  for (int i = 0; i < 100; ++i) xk_stack_poll(st);  // the handshakes' last ACKs
  const std::size_t after = mallinfo2().uordblks;
  const double per = static_cast<double>(after - before) / (2.0 * n);
  std::printf("RESULT pairs=%d heap_bytes_per_connection=%.0f\n", n, per);
  for (int fd : fds) xk_close(fd);
  xk_close(l);
  xk_stack_destroy(st);
  return 0;
}

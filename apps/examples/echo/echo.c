/*
 * A program outside xk's source tree, built against the installed libxk
 * (pkg-config libxk): a TCP echo server and a client in one process, on one
 * stack that talks to its own address over the loopback driver -- so it runs
 * anywhere, without DPDK, root or a network.
 *
 *   cc -o echo echo.c $(pkg-config --cflags --libs libxk) -lpthread
 *   ./echo [inline|service]
 *
 * Prints "echo: N bytes echoed intact" and exits 0, or says what failed and
 * exits 1. With XK_PORT/XK_IP set (see xk.h) it uses that stack instead.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xk/xk.h>

#define PORT 7
#define TOTAL (4u << 20)

static xk_stack* stack;
static int listener;

static int die(const char* what) {
  fprintf(stderr, "echo: %s: %s (%s)\n", what, strerror(errno), xk_last_error());
  exit(1);
}

/* The server: accept one connection, send back everything until the end. */
static void* serve(void* arg) {
  (void)arg;
  char buf[65536];
  int s = xk_accept(listener, NULL, NULL);
  if (s < 0) die("accept");
  for (;;) {
    ssize_t n = xk_read(s, buf, sizeof buf);
    if (n < 0) die("server read");
    if (n == 0) break;
    if (xk_write(s, buf, (size_t)n) != n) die("server write");
  }
  xk_close(s);
  return NULL;
}

/* The client's writer: the whole pattern, then the end of the stream. */
struct job {
  int fd;
  const unsigned char* data;
};
static void* send_all(void* arg) {
  struct job* j = arg;
  if (xk_write(j->fd, j->data, TOTAL) != (ssize_t)TOTAL) die("client write");
  if (xk_shutdown(j->fd, SHUT_WR) != 0) die("shutdown");
  return NULL;
}

int main(int argc, char** argv) {
  struct xk_stack_config config;
  xk_stack_config_init(&config);
  config.graph =
      "loopback lo0\n"
      "ipv4     ip0  below=lo0 addr=192.0.2.1/24\n"
      "tcp      tcp0 below=ip0\n";
  config.mode = argc > 1 && strcmp(argv[1], "inline") == 0 ? XK_MODE_INLINE : XK_MODE_SERVICE;
  stack = xk_stack_create(getenv("XK_PORT") != NULL ? NULL : &config);
  if (stack == NULL) die("xk_stack_create");

  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons(PORT);
  addr.sin_addr.s_addr = htonl(0xC0000201); /* 192.0.2.1 */
  listener = xk_socket(stack, AF_INET, SOCK_STREAM, 0);
  if (listener < 0 || xk_bind(listener, (struct sockaddr*)&addr, sizeof addr) != 0 || xk_listen(listener, 4) != 0) {
    die("listen");
  }
  pthread_t server, writer;
  pthread_create(&server, NULL, serve, NULL);

  int c = xk_socket(stack, AF_INET, SOCK_STREAM, 0);
  if (c < 0 || xk_connect(c, (struct sockaddr*)&addr, sizeof addr) != 0) die("connect");
  unsigned char* data = malloc(TOTAL);
  unsigned char* back = malloc(TOTAL);
  for (unsigned i = 0; i < TOTAL; ++i) data[i] = (unsigned char)(i * 2654435761u >> 24);
  struct job j = {c, data};
  pthread_create(&writer, NULL, send_all, &j);
  size_t got = 0;
  for (;;) {
    ssize_t n = xk_read(c, back + got, TOTAL - got);
    if (n < 0) die("client read");
    if (n == 0 || (got += (size_t)n) == TOTAL) break;
  }
  pthread_join(writer, NULL);
  pthread_join(server, NULL);
  if (got != TOTAL || memcmp(data, back, TOTAL) != 0) {
    fprintf(stderr, "echo: %zu of %u bytes came back, or not as sent\n", got, TOTAL);
    return 1;
  }
  struct xk_tcp_info info;
  if (xk_get_tcp_info(c, &info) != 0) die("xk_get_tcp_info");
  printf("echo: %u bytes echoed intact (%s mode, %llu segments out, mss %u)\n", TOTAL,
         config.mode == XK_MODE_INLINE ? "inline" : "service", (unsigned long long)info.segs_out, info.mss);
  xk_close(c);
  xk_close(listener);
  xk_stack_destroy(stack);
  free(data);
  free(back);
  return 0;
}

/* xk-capi-node: a compute node of several stacks behind filterd, written in C
 * against the C API alone (xk/xk.h): xk_node_create() makes the stacks, and
 * each stack's listener joins one listen group with SO_REUSEPORT. A TCP echo
 * server: every stack has an application thread that accepts and echoes one
 * connection at a time with blocking calls.
 *
 *   XK_FILTERD=/path/filterd.sock xk-capi-node --stacks K [--port P] [--conns N]
 *
 * The stacks come from the environment like xk_stack_create(NULL)'s (XK_MODE,
 * XK_CPU, XK_TCP_OPTS, ...: docs/api.md). Prints "ready" when every stack
 * listens, and at the end one line per stack:
 *   xk-capi-node: stack Q: C connections, B bytes
 * It ends after N connections in all (default: at SIGINT/SIGTERM).
 * Exit status: 0 success, 1 failure, 2 bad command line. */

#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "xk/xk.h"

#define PROG "xk-capi-node"
#define MAX_STACKS 64

static const char* const kUsage =
    "usage: " PROG " --stacks K [--port P] [--conns N]\n"
    "A TCP echo node of K stacks behind filterd (XK_FILTERD), through the C API.\n"
    "  --stacks K   stacks in the node, 1..64 (one channel queue each)\n"
    "  --port P     the TCP port every stack listens on, as one group (default 7)\n"
    "  --conns N    exit after N connections in all (default 0: at SIGINT/SIGTERM)\n";

struct worker {
  xk_stack* stack;
  unsigned index;
  int listener;
  unsigned long long conns;
  unsigned long long bytes;
  int failed;
  pthread_t thread;
};

static atomic_int g_stop;
static atomic_ullong g_total;
static unsigned long long g_want;

static void on_signal(int sig) {
  (void)sig;
  atomic_store(&g_stop, 1);
}

static int usage_error(const char* flag, const char* value, const char* msg) {
  if (value != NULL) {
    fprintf(stderr, PROG ": %s: '%s' %s\ntry '" PROG " --help' for more\n", flag, value, msg);
  } else {
    fprintf(stderr, PROG ": %s%s\ntry '" PROG " --help' for more\n", flag, msg);
  }
  return 2;
}

static int parse_number(const char* s, unsigned long long max, unsigned long long* out) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v > max) return -1;
  *out = v;
  return 0;
}

/* Echo one connection to its end: blocking reads and writes on the stack. */
static int echo(struct worker* w, int c) {
  char buf[16384];
  for (;;) {
    ssize_t n = xk_read(c, buf, sizeof buf);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, PROG ": stack %u: read: %s (%s)\n", w->index, strerror(errno), xk_last_error());
      return -1;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t k = xk_write(c, buf + off, (size_t)(n - off));
      if (k < 0) {
        if (errno == EINTR) continue;
        fprintf(stderr, PROG ": stack %u: write: %s (%s)\n", w->index, strerror(errno), xk_last_error());
        return -1;
      }
      off += k;
    }
    w->bytes += (unsigned long long)n;
  }
}

static void* serve(void* arg) {
  struct worker* w = arg;
  while (!atomic_load(&g_stop)) {
    /* Wait for a connection in slices, so a stop is seen. */
    struct pollfd p = {.fd = w->listener, .events = POLLIN};
    int r = xk_poll(&p, 1, 100);
    if (r < 0 && errno != EINTR) {
      fprintf(stderr, PROG ": stack %u: poll: %s\n", w->index, strerror(errno));
      w->failed = 1;
      break;
    }
    if (r <= 0) continue;
    int c = xk_accept4(w->listener, NULL, NULL, 0); /* blocking */
    if (c < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) continue;
      fprintf(stderr, PROG ": stack %u: accept: %s\n", w->index, strerror(errno));
      w->failed = 1;
      break;
    }
    if (echo(w, c) != 0) w->failed = 1;
    xk_close(c);
    ++w->conns;
    if (g_want != 0 && atomic_fetch_add(&g_total, 1) + 1 >= g_want) atomic_store(&g_stop, 1);
  }
  return NULL;
}

static int listen_on(struct worker* w, unsigned port) {
  int s = xk_socket(w->stack, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (s < 0) return -1;
  int one = 1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  if (xk_setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
      xk_bind(s, (const struct sockaddr*)&a, sizeof a) != 0 || xk_listen(s, 128) != 0) {
    int e = errno;
    xk_close(s);
    errno = e;
    return -1;
  }
  w->listener = s;
  return 0;
}

int main(int argc, char** argv) {
  unsigned long long stacks = 0, port = 7;
  g_want = 0;
  for (int i = 1; i < argc; ++i) {
    const char* f = argv[i];
    if (strcmp(f, "--help") == 0) {
      fputs(kUsage, stdout);
      return 0;
    }
    if (strcmp(f, "--stacks") != 0 && strcmp(f, "--port") != 0 && strcmp(f, "--conns") != 0) {
      fprintf(stderr, PROG ": unknown option '%s'\ntry '" PROG " --help' for more\n", f);
      return 2;
    }
    if (i + 1 >= argc) return usage_error(f, NULL, " needs a value");
    const char* v = argv[++i];
    if (strcmp(f, "--stacks") == 0) {
      if (parse_number(v, MAX_STACKS, &stacks) != 0 || stacks == 0) return usage_error(f, v, "is not a number in 1..64");
    } else if (strcmp(f, "--port") == 0) {
      if (parse_number(v, 65535, &port) != 0 || port == 0) return usage_error(f, v, "is not a number in 1..65535");
    } else if (parse_number(v, 1000000000ULL, &g_want) != 0) {
      return usage_error(f, v, "is not a number in 0..1000000000");
    }
  }
  if (stacks == 0) return usage_error("--stacks K is required", NULL, "");

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  xk_stack* handles[MAX_STACKS];
  if (xk_node_create(NULL, (unsigned)stacks, handles) != 0) {
    fprintf(stderr, PROG ": %s\n", xk_last_error());
    return 1;
  }
  struct worker workers[MAX_STACKS];
  memset(workers, 0, sizeof workers);
  for (unsigned q = 0; q < MAX_STACKS; ++q) workers[q].listener = -1;
  int rc = 0;
  unsigned started = 0;
  for (unsigned q = 0; q < stacks; ++q) {
    workers[q].stack = handles[q];
    workers[q].index = q;
    if (listen_on(&workers[q], (unsigned)port) != 0) {
      fprintf(stderr, PROG ": stack %u: listen on port %llu: %s (%s)\n", q, port, strerror(errno), xk_last_error());
      rc = 1;
      break;
    }
  }
  if (rc == 0) {
    printf(PROG ": ready (%llu stacks on port %llu)\n", stacks, port);
    fflush(stdout);
    for (; started < stacks; ++started) {
      if (pthread_create(&workers[started].thread, NULL, serve, &workers[started]) != 0) {
        fprintf(stderr, PROG ": cannot start a thread\n");
        atomic_store(&g_stop, 1);
        rc = 1;
        break;
      }
    }
  }
  unsigned long long total = 0;
  for (unsigned q = 0; q < started; ++q) {
    pthread_join(workers[q].thread, NULL);
    printf(PROG ": stack %u: %llu connections, %llu bytes\n", q, workers[q].conns, workers[q].bytes);
    total += workers[q].conns;
    if (workers[q].failed) rc = 1;
  }
  printf(PROG ": %llu connections in all\n", total);
  for (unsigned q = 0; q < stacks; ++q) {
    if (workers[q].listener >= 0) xk_close(workers[q].listener);
    xk_stack_destroy(handles[q]);
  }
  return rc;
}

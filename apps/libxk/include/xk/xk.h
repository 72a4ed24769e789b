#ifndef XK_XK_H
#define XK_XK_H
/*
 * libxk: the C API of xk, with POSIX semantics.
 *
 * A program makes one or more stacks (xk_stack_create), then uses sockets on
 * them much as it would kernel sockets: the calls are named and behave like
 * their POSIX namesakes (xk_connect ~ connect(2)), return -1 and set errno on
 * failure, block unless the socket is non-blocking (SOCK_NONBLOCK, O_NONBLOCK,
 * MSG_DONTWAIT), and take the system's own structures and constants
 * (struct sockaddr_in, struct iovec, struct pollfd, struct epoll_event,
 * SOL_SOCKET/SO_*, IPPROTO_TCP/TCP_NODELAY, EPOLLIN, POLLIN, ...). That is what
 * lets an LD_PRELOAD shim map real sockets onto these calls one to one.
 *
 * Descriptors are small integers of xk's own, process-wide, distinct from the
 * kernel's: an xk descriptor means nothing to read(2) and a kernel one nothing
 * to xk_read. A socket belongs to the stack it was made on; an xk epoll
 * instance watches sockets of one stack.
 *
 * Differences from the kernel worth knowing (docs/api.md has them all):
 *   - AF_INET only; SOCK_STREAM (TCP) and SOCK_DGRAM (UDP).
 *   - No signals: a write on a connection that is gone fails with EPIPE and
 *     never raises SIGPIPE (as if MSG_NOSIGNAL were always given).
 *   - Inline stacks run in the calling thread: nothing happens on the network
 *     between calls. A program that does not call in for a while should call
 *     xk_stack_poll() (or wait in xk_epoll_wait/xk_poll, which run the stack).
 *
 * Thread safety: every call may be made from any thread. On a service-thread
 * stack, calls from many threads proceed concurrently; on an inline stack they
 * take turns (one lock per stack) and a blocked call holds the stack, so
 * programs with several threads that block independently want service mode.
 * A hybrid stack is inline while calls come in and runs on a thread of its
 * own while none do (a blocked call hands it over before it sleeps): the
 * latency of inline with the independence of service.
 */

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XK_VERSION_MAJOR 0
#define XK_VERSION_MINOR 1

typedef struct xk_stack xk_stack;

/* How a stack runs (see the header comment). */
enum xk_mode {
  XK_MODE_INLINE = 0,  /* the calling thread runs the stack in every call: lowest latency */
  XK_MODE_SERVICE = 1, /* a thread of the stack's own runs it; calls hand work over rings */
  XK_MODE_HYBRID = 2,  /* inline while someone calls; the stack's own thread while nobody does */
};

/* What a stack does when it has nothing to do. */
enum xk_idle {
  XK_IDLE_SPIN_THEN_SLEEP = 0, /* poll for spin_us after the last work, then sleep */
  XK_IDLE_BUSY_POLL = 1,       /* never sleep: lowest latency, one core at 100 % */
  XK_IDLE_YIELD_THEN_SLEEP = 2, /* as SPIN_THEN_SLEEP, giving the core away (sched_yield)
                                   between polls: for more busy processes than cores */
};

struct xk_stack_config {
  /* The graph spec (docs/graph-spec.md) as text. NULL: composed from the
   * fields below: dpdk (port) -> eth -> arp -> ipv4 (ip, gw) -> icmp, udp, tcp. */
  const char* graph;
  const char* port;     /* DPDK devargs, e.g. "net_memif0,role=client,socket=/run/x.sock" */
  const char* ip;       /* "A.B.C.D/N" */
  const char* gw;       /* "A.B.C.D" or NULL */
  const char* mac;      /* "aa:bb:cc:dd:ee:ff" or NULL: the port's own */
  const char* tcp_opts; /* extra tcp options of the graph, "wscale=14 cc=newreno", or NULL */
  int csum;             /* 1: TCP and UDP checksums on (default); 0: off end to end */
  int mode;             /* enum xk_mode */
  int idle;             /* enum xk_idle */
  unsigned spin_us;     /* spin before sleeping (default 50) */
  int cpu;              /* service, hybrid: pin the stack's thread to this CPU; -1: no */
  unsigned link_wait_ms; /* wait this long for the port's link at creation (default 5000) */
  /* Attach to filterd through this control socket: the graph (port, address,
   * secret) comes from filterd, and ports are agreed with it. NULL: standalone.
   * "tcp:HOST:PORT": a node on another host; `port` (and `mac`) are then its
   * own port on filterd's node port, and XK_FILTERD_TOKEN names the token file. */
  const char* filterd;
};

/* Defaults: graph NULL, csum 1, inline, spin-then-sleep 50 us, cpu -1, 5 s. */
void xk_stack_config_init(struct xk_stack_config* config);

/* Builds and starts a stack. NULL config: from the environment -- XK_FILTERD
 * (attach to filterd's control socket, or tcp:HOST:PORT with XK_FILTERD_TOKEN
 * and XK_PORT for a node on another host), XK_GRAPH (a
 * file holding a graph spec), or XK_PORT, XK_IP, XK_GW, XK_MAC, XK_TCP_OPTS,
 * XK_CSUM (on|off); XK_MODE (inline|service|hybrid), XK_IDLE
 * (spin|busy|yield), XK_SPIN_US, XK_CPU, XK_HAND_BACK_US (hybrid: how long
 * the calls leave the stack alone before its thread takes it, default 500). On failure returns NULL with errno set (EINVAL for a bad
 * configuration, EIO when the port or its link cannot be brought up) and
 * xk_last_error() saying what went wrong. */
xk_stack* xk_stack_create(const struct xk_stack_config* config);
/* A node of `count` stacks (1..64) sharing filterd's address, one per core:
 * one registration with filterd (config->filterd, a Unix socket, or
 * XK_FILTERD for a NULL config) asks for a channel queue per stack, and
 * filterd steers every flow to the queue of the stack that owns it. Each of
 * stacks[0..count) is an ordinary stack with its own sockets, epoll sets and
 * (service mode) thread, pinned to CPU cpu + i when cpu >= 0 (XK_CPU). A TCP
 * port that SO_REUSEPORT listeners on several stacks bind becomes one listen
 * group: filterd spreads new connections over them. Returns 0, or -1 with
 * errno set (EINVAL: no filterd, a count out of range, a filterd over TCP;
 * EIO: filterd or a channel failed) and nothing created. Destroy the stacks
 * together with xk_stack_destroy: the first watches filterd for a restart. */
int xk_node_create(const struct xk_stack_config* config, unsigned count, xk_stack** stacks);
/* Closes every descriptor of the stack (connections are reset) and frees it. */
void xk_stack_destroy(xk_stack* stack);
/* Runs the stack until every TCP connection it holds has finished -- closed,
 * or in TIME-WAIT: what closed sockets still had to send was delivered and
 * the FINs exchanged -- or `timeout_ms` passes (-1: no limit). Returns how
 * many are still open (0: all done), or -1 with errno. A program about to
 * destroy its stack after a graceful close calls it first, as the kernel
 * keeps sending a closed socket's data after its process is gone. */
int xk_stack_drain(xk_stack* stack, int timeout_ms);
/* Inline stacks: one pass of the stack (receive, timers, transmit) in the
 * calling thread; returns the work done. Service stacks: returns 0. */
int xk_stack_poll(xk_stack* stack);
/* One of the stack's counters, as the apps' tables and netstat -s show them:
 * counter `name` of graph instance `instance` (e.g. "tcp0", "established";
 * "net0", "rx_frames"), read on the stack's thread. The TCP instance also
 * answers gauges: "connections" (in its table now, TIME-WAIT included),
 * "time_wait", and "state:NAME" (those in state NAME, as RFC 9293 spells it:
 * "state:FIN-WAIT-2"). Returns 0 and sets *value, or -1 with errno ENOENT for an
 * unknown instance or counter (EINVAL for a null argument). */
int xk_stack_counter(xk_stack* stack, const char* instance, const char* name, unsigned long long* value);
/* Every counter of the stack -- each graph instance's and its event loop's
 * (owner "stack": passes, idle passes, sleeps) -- as the apps' table, one
 * "owner counter value" line each under a header line, written to descriptor
 * fd (a kernel one). Returns 0, or -1 with errno (EINVAL for a null stack,
 * or the write's). */
int xk_stack_write_counters(xk_stack* stack, int fd);
/* The stack's IPv4 address, its prefix length and its gateway (0.0.0.0:
 * none), in network byte order; any pointer may be NULL. Returns 0, or -1
 * with errno ENOENT for a graph without an ipv4 layer. */
int xk_stack_addr(xk_stack* stack, struct in_addr* addr, int* prefix_len, struct in_addr* gw);
/* The stack's IPv6 addresses one at a time: the `index`-th (0, 1, ...; the
 * link-local one first, when the stack has one) with its prefix length, and
 * the default router (::: none); any pointer may be NULL. Returns 0, or -1
 * with errno ENOENT past the last one or for a graph without an ipv6 layer. */
int xk_stack_addr6(xk_stack* stack, unsigned index, struct in6_addr* addr, int* prefix_len, struct in6_addr* gw);
/* The most xk descriptors (sockets and epoll sets, of every stack) the
 * process may hold at once: numbers 0..limit-1. Default 2^20, at most 2^30;
 * XK_MAX_FDS sets it for stacks made from the environment. Returns 0, or -1
 * with errno EINVAL (out of range) or EBUSY (a descriptor at or above the
 * new limit is open). Past the limit socket, accept and epoll_create fail
 * with EMFILE. */
int xk_set_fd_limit(int limit);
int xk_get_fd_limit(void);
/* The message of the calling thread's last failed xk call ("" if none). */
const char* xk_last_error(void);

/* Sockets: AF_INET; SOCK_STREAM or SOCK_DGRAM, optionally | SOCK_NONBLOCK
 * (| SOCK_CLOEXEC is accepted and ignored); protocol 0 or the matching
 * IPPROTO_TCP / IPPROTO_UDP. */
int xk_socket(xk_stack* stack, int domain, int type, int protocol);
int xk_bind(int fd, const struct sockaddr* addr, socklen_t len);
int xk_listen(int fd, int backlog);
int xk_accept(int fd, struct sockaddr* addr, socklen_t* len);
int xk_accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags);
/* Non-blocking: -1/EINPROGRESS, then writable when connected (or failed:
 * SO_ERROR tells). Blocking: waits for the handshake. */
int xk_connect(int fd, const struct sockaddr* addr, socklen_t len);
ssize_t xk_read(int fd, void* buf, size_t len);
ssize_t xk_write(int fd, const void* buf, size_t len);
ssize_t xk_readv(int fd, const struct iovec* iov, int iovcnt);
ssize_t xk_writev(int fd, const struct iovec* iov, int iovcnt);
/* flags: MSG_DONTWAIT, MSG_TRUNC (datagram receive: return the whole length), MSG_WAITALL (stream receive), MSG_PEEK (receive:
 * the data stays), MSG_MORE (stream send: the short tail waits for a send
 * without it, or the FIN), MSG_EOR (taken), MSG_NOSIGNAL (always),
 * MSG_OOB (stream send: the last byte is urgent). Urgent data arrives in
 * line (SO_OOBINLINE is always on, RFC 6093): POLLPRI until the urgent byte
 * is read, a read stops before it, SIOCATMARK says when it is next; receive
 * with MSG_OOB is EINVAL, as on Linux with SO_OOBINLINE. */
ssize_t xk_recv(int fd, void* buf, size_t len, int flags);
ssize_t xk_send(int fd, const void* buf, size_t len, int flags);
ssize_t xk_recvfrom(int fd, void* buf, size_t len, int flags, struct sockaddr* from, socklen_t* fromlen);
ssize_t xk_sendto(int fd, const void* buf, size_t len, int flags, const struct sockaddr* to, socklen_t tolen);
/* recvmsg(2) and sendmsg(2): the buffers of msg_iov scattered / gathered
 * (a datagram is one datagram however many buffers), msg_name the datagram's
 * source / destination (a stream ignores it, as Linux does; recvmsg on a
 * stream sets msg_namelen 0). recvmsg sets msg_flags: MSG_TRUNC when a
 * datagram was longer than the buffers (with MSG_TRUNC in `flags` it returns
 * the whole length), MSG_CTRUNC when a control message did not fit. Its
 * control messages: TCP_CM_INQ (an int: the bytes left to read, 1 at the end
 * of the stream) on a stream with TCP_INQ set. sendmsg takes no control
 * message xk would act on: malformed ones and any but SCM_RIGHTS or
 * SCM_CREDENTIALS at SOL_SOCKET (or, on a datagram socket, at IPPROTO_IP)
 * are EINVAL; a stream ignores other levels, as Linux does. A msg_iovlen
 * over IOV_MAX is EMSGSIZE. */
ssize_t xk_recvmsg(int fd, struct msghdr* msg, int flags);
ssize_t xk_sendmsg(int fd, const struct msghdr* msg, int flags);
int xk_shutdown(int fd, int how);
/* Graceful close (FIN after the queued data; SO_LINGER as in socket(7)). */
int xk_close(int fd);

/* SOL_SOCKET: SO_RCVBUF, SO_SNDBUF (read back doubled, as on Linux),
 * SO_KEEPALIVE, SO_LINGER, SO_REUSEADDR, SO_REUSEPORT (a node behind
 * filterd listens as one of a group), SO_RCVTIMEO, SO_SNDTIMEO, SO_RCVLOWAT,
 * SO_ERROR and SO_TYPE (get only), SO_ACCEPTCONN (get only). IPPROTO_TCP:
 * TCP_NODELAY, TCP_CORK, TCP_MAXSEG, TCP_KEEPIDLE, TCP_KEEPINTVL,
 * TCP_KEEPCNT, TCP_USER_TIMEOUT, TCP_QUICKACK, TCP_CONGESTION ("cubic",
 * "reno"), TCP_NOTSENT_LOWAT, TCP_DEFER_ACCEPT (no effect), TCP_INQ (see
 * xk_recvmsg), TCP_INFO (get
 * only: Linux's struct tcp_info), XK_TCP_CHECKSUM. Anything else:
 * ENOPROTOOPT (docs/api.md, "Options"). */
int xk_setsockopt(int fd, int level, int name, const void* value, socklen_t len);
int xk_getsockopt(int fd, int level, int name, void* value, socklen_t* len);
int xk_getsockname(int fd, struct sockaddr* addr, socklen_t* len);
int xk_getpeername(int fd, struct sockaddr* addr, socklen_t* len);
/* F_GETFL, F_SETFL (O_NONBLOCK), F_GETFD/F_SETFD (accepted, no effect). */
int xk_fcntl(int fd, int cmd, ...);

/* IPPROTO_TCP option of xk's own: checksums of this connection. An int:
 * 0 off, 1 compute on send only, 2 verify on receive only, 3 both. Off means
 * off end to end: both sides must agree. Default: the stack's csum. */
#define XK_TCP_CHECKSUM 0x7801

/* Readiness, like epoll(7): level-triggered by default, EPOLLET and
 * EPOLLONESHOT as there; EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLERR, EPOLLHUP.
 * Waiting in xk_epoll_wait runs an inline stack; a service stack's thread
 * wakes the waiter. */
int xk_epoll_create1(int flags);
int xk_epoll_ctl(int epfd, int op, int fd, struct epoll_event* event);
int xk_epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout_ms);
/* A kernel descriptor (an eventfd, owned by the set: do not close it) that
 * polls readable while the xk epoll set has entries ready to report, so the
 * set can wait inside a kernel poll/select/epoll beside kernel descriptors:
 * wait for it, then call xk_epoll_wait with timeout 0. It may read ready
 * when a level-triggered entry turns out not to be; it is never silent
 * while one is ready. Call it right before each such sleep: on a hybrid
 * stack it also hands the stack to its own thread, which runs it while the
 * caller sleeps. -1 with errno on failure. */
int xk_epoll_fd(int epfd);
/* The whole of such a sleep in one call, as ppoll(2) on `fds` (kernel
 * descriptors; revents filled, `sigmask` in force while it sleeps) that
 * also ends when the xk set `epfd` has entries ready: returns the count of
 * `fds` ready, 0 at the timeout or when the set is ready (look with
 * xk_epoll_wait, timeout 0), or -1 with errno (EINTR: a signal handler
 * ran). On an inline or hybrid stack the sleep watches the stack's own
 * wake-ups too (its port, its timers, other threads' calls), and the
 * caller runs the stack itself when one comes: one wake-up per frame,
 * where waiting on xk_epoll_fd takes two in a row (the stack's thread's,
 * then the caller's). */
int xk_epoll_psleep(int epfd, struct pollfd* fds, nfds_t nfds, const struct timespec* timeout,
                    const sigset_t* sigmask);
/* Like poll(2), for xk descriptors of one stack. */
int xk_poll(struct pollfd* fds, nfds_t nfds, int timeout_ms);

/* ioctl(2) for sockets: FIONBIO; FIONREAD (SIOCINQ: bytes to read, or the
 * next datagram's size); SIOCOUTQ (bytes not yet acknowledged) and
 * SIOCOUTQNSD (bytes not yet sent) of a stream; SIOCATMARK (1 when the
 * next byte read is the peer's urgent byte). `arg` points to an int.
 * Anything else: ENOTTY. */
int xk_ioctl(int fd, unsigned long request, void* arg);

/* TCP_INFO-like statistics of a connection (getsockopt TCP_INFO gives
 * Linux's struct tcp_info). */
struct xk_tcp_info {
  uint8_t state; /* RFC 9293 order: 0 CLOSED, 1 LISTEN, 2 SYN-SENT, ... 10 TIME-WAIT */
  uint8_t snd_wscale, rcv_wscale, sack, timestamps;
  uint16_t mss;
  uint32_t srtt_us, rttvar_us, rto_us;
  uint32_t cwnd, ssthresh, snd_wnd, rcv_wnd;
  uint64_t bytes_sent, bytes_acked, bytes_received;
  uint64_t segs_out, segs_in, retransmits, rto_expiries, fast_retransmits;
  uint64_t sack_blocks_in, sack_blocks_out, dup_acks_in, ooo_segments;
};
int xk_get_tcp_info(int fd, struct xk_tcp_info* info);

#ifdef __cplusplus
}
#endif

#endif /* XK_XK_H */

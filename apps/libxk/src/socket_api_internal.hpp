#pragma once
// Private to libxk: what the files of the C API (socket_api_*.cpp) share --
// the descriptor types, the table, errors, and the helpers for running a call
// on a socket's stack thread. Not installed.
//
// The C API (xk/xk.h): POSIX-style descriptors over xk::Stack.
//
// Every descriptor is a File in one process-wide table: a Sock (a TCP or UDP
// socket) or an Epoll. A Sock's protocol objects (TcpSocket, TcpListener,
// UdpSocket) and its bookkeeping live on its stack's thread: they are touched
// only inside Stack::call(). What other threads may read is atomic: the
// readiness word `events` (EPOLL* bits, recomputed on the stack's thread each
// time the socket reports a change) and the WaitPoint that blocked callers
// sleep on. A blocking call is: sample the WaitPoint, try on the stack's
// thread, and if it would block, sleep until the WaitPoint moves, then try
// again -- so a wake-up between the try and the sleep is never lost.
//
// An Epoll keeps one Reg per watched socket and a ready queue. The socket's
// stack thread queues a Reg when the socket's events meet the Reg's interest;
// xk_epoll_wait takes the queue under the Epoll's mutex, re-reads each
// socket's events, and keeps level-triggered entries queued while they stay
// ready. A Reg is added and removed on the socket's stack thread (under the
// Epoll's mutex too), so a socket never reports to a Reg that is gone and a
// waiter never reads a socket that is gone.

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "xk/endpoint.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"
#include "xk/stack.hpp"
#include "xk/xk.h"

struct xk_stack {
  std::unique_ptr<xk::Stack> stack;
};

// Internal to the library: none of this is exported from libxk.so.
#pragma GCC visibility push(hidden)

namespace xk::capi {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;

// The message of xk_last_error(), per thread. A failure with an Errc
// keeps only what it was (a string literal naming the call) and the code:
// the text is made when asked for, so an EAGAIN -- which a program that
// does not block meets on every burst -- allocates nothing.
class LastError {
 public:
  void set(std::string message) {
    text_ = std::move(message);
    what_ = nullptr;
  }
  void set(const char* what, Errc e) noexcept {
    what_ = what;
    code_ = e;
  }
  void clear() noexcept {
    what_ = nullptr;
    text_.clear();
  }
  const char* text();

 private:
  std::string text_;
  const char* what_ = nullptr;  // a literal; null: text_ is the message
  Errc code_ = Errc::ok;
};
extern thread_local LastError t_last_error;

// Errors (socket_api_descriptors.cpp): fail() sets errno and the message of
// xk_last_error() and returns -1; errno_of() is the errno of an Errc.
int fail(int err, std::string message);
int errno_of(Errc e) noexcept;
int fail(Errc e, const char* what);  // `what`: a string literal (kept, not copied)

// ---- files and the descriptor table --------------------------------------------

struct File {
  enum class Kind : std::uint8_t { socket, epoll };
  explicit File(Kind k) : kind(k) {}
  virtual ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  const Kind kind;
};

struct Epoll;
struct Sock;

// One socket watched by one epoll instance.
struct Reg {
  Epoll* ep;
  Sock* sock;
  int key;  // the descriptor it was added as (a pollfd index for xk_poll)
  std::uint32_t mask;
  epoll_data_t data;
  bool queued = false;
  bool disabled = false;  // EPOLLONESHOT fired; MOD re-arms
};

struct Epoll final : File {
  Epoll() : File(Kind::epoll) {}
  ~Epoll() override;
  std::mutex mu;
  Stack* stack = nullptr;  // of the sockets it watches: set by the first ADD
  std::map<int, std::unique_ptr<Reg>> regs;
  std::deque<Reg*> ready;
  WaitPoint wp;
  // xk_epoll_fd: an eventfd made readable while `ready` is not empty
  // (`signalled`: it is), under `mu`. -1: nobody asked for one.
  int efd = -1;
  bool signalled = false;
  // Makes the eventfd match the ready queue (under `mu`).
  void sync_efd();
};

struct Linger {
  bool on = false;
  int seconds = 0;
};

struct Sock final : File {
  Sock(Stack& s, int t, int f) : File(Kind::socket), stack(&s), type(t), family(f) {
    // Unbound, a socket is at its family's wildcard: an AF_INET socket
    // listens on every IPv4 address, an AF_INET6 one on every address of
    // both families until IPV6_V6ONLY says IPv6 alone.
    if (f == AF_INET) bind_addr = kAnyIpv4;
  }
  ~Sock() override = default;

  Stack* const stack;
  const int type;    // SOCK_STREAM or SOCK_DGRAM
  const int family;  // AF_INET or AF_INET6
  std::atomic<bool> nonblock{false};
  std::atomic<std::int64_t> rcvtimeo_ns{0};  // 0: none
  std::atomic<std::int64_t> sndtimeo_ns{0};

  // ---- the stack's thread only -------------------------------------------------
  tcp::TcpSocket conn;     // a stream socket before listen(), and after connect/accept
  tcp::TcpListener listener;
  udp::UdpSocket udp;
  bool listening = false;
  bool connected = false;  // connect() issued, or accepted
  bool reserved = false;   // bind() holds (bind_addr, bind_port) in tcp
  IpAddr bind_addr;
  Port bind_port;
  bool reuse_addr = false;
  bool reuse_port = false;  // listen as one of a group of nodes (filterd)
  bool v6only = false;      // IPV6_V6ONLY: an AF_INET6 socket's :: takes IPv6 alone
  bool keepalive = false;
  bool nodelay = false;
  bool cork = false;
  std::size_t sndbuf = 0;  // 0: the stack's default
  std::size_t rcvbuf = 0;
  tcp::Tuning tuning;      // TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT, TCP_MAXSEG, TCP_CONGESTION
  bool quickack = true;    // TCP_QUICKACK as getsockopt reads it
  std::size_t rcvlowat = 1;               // SO_RCVLOWAT
  std::size_t notsent_lowat = SIZE_MAX;   // TCP_NOTSENT_LOWAT (none)
  bool more = false;       // a send with MSG_MORE left the connection corked
  int defer_accept = 0;    // TCP_DEFER_ACCEPT: kept and read back, no effect
  bool inq = false;        // TCP_INQ: recvmsg tells what is left to read (TCP_CM_INQ)
  std::optional<ChecksumMode> csum;
  Linger linger;
  bool shut_rd = false;
  bool shut_wr = false;
  bool closing = false;
  std::vector<Reg*> watchers;

  // ---- any thread -------------------------------------------------------------
  std::atomic<std::uint32_t> events{0};
  std::atomic<bool> closed{false};
  WaitPoint wp;
};

class FdTable {
 public:
  // How many descriptors a process may hold at once (numbers 0..limit-1):
  // xk_set_fd_limit, XK_MAX_FDS. The table grows only as far as used.
  static constexpr int kDefaultLimit = 1 << 20;
  static constexpr int kMaxLimit = 1 << 30;

  int add(std::shared_ptr<File> f) {
    std::lock_guard<std::mutex> lock(mu_);
    int fd;
    if (!free_.empty() && *free_.begin() < limit_) {
      fd = *free_.begin();  // the lowest free number, as POSIX hands out
      free_.erase(free_.begin());
    } else {
      if (files_.size() >= static_cast<std::size_t>(limit_)) return -1;
      fd = static_cast<int>(files_.size());
      files_.emplace_back();
    }
    files_[static_cast<std::size_t>(fd)] = std::move(f);
    return fd;
  }
  std::shared_ptr<File> get(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd < 0 || static_cast<std::size_t>(fd) >= files_.size()) return nullptr;
    return files_[static_cast<std::size_t>(fd)];
  }
  std::shared_ptr<File> take(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd < 0 || static_cast<std::size_t>(fd) >= files_.size() || !files_[static_cast<std::size_t>(fd)]) {
      return nullptr;
    }
    free_.insert(fd);
    return std::move(files_[static_cast<std::size_t>(fd)]);
  }
  // A new limit; false (nothing changed) when a descriptor at or above it
  // is open.
  bool set_limit(int limit) {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = static_cast<std::size_t>(limit); i < files_.size(); ++i) {
      if (files_[i]) return false;
    }
    limit_ = limit;
    return true;
  }
  int limit() {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
  }
  // The descriptors whose file `pred` picks.
  template <class Pred>
  std::vector<int> select(Pred pred) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int> out;
    for (std::size_t i = 0; i < files_.size(); ++i) {
      if (files_[i] && pred(*files_[i])) out.push_back(static_cast<int>(i));
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<File>> files_;
  std::set<int> free_;
  int limit_ = kDefaultLimit;
};

// The process-wide table of xk descriptors.
FdTable& table();
// The socket behind `fd`, or null with errno set (EBADF, ENOTSOCK).
std::shared_ptr<Sock> get_sock(int fd);
Deadline deadline_after_ns(std::int64_t ns);

// ---- readiness (stack's thread; socket_api_readiness.cpp) --------------------------

// After anything that may have changed the socket: new events, wake the
// blocked callers and the epoll sets. `forced`: the socket itself said so
// (new data is news to an edge-triggered watcher even if the bits stay).
void refresh(Sock& s, bool forced);
// Has the socket's protocol object call refresh() when it changes.
void watch(Sock& s);
// Unregisters from every epoll set (stack's thread).
void unwatch_all(Sock& s);
// Stops watching every socket of the set (on their stack's thread).
void close_epoll(Epoll& ep);
// Whether the stack's latest pass is recent enough that a call may skip
// the pass before it (xk_poll, a write with room; see kFresh).
bool fresh(Stack& stack);

// ---- results of work on the stack's thread -----------------------------------------

struct Outcome {
  Errc err = Errc::ok;
  std::size_t n = 0;
  static Outcome ok(std::size_t n = 0) { return {Errc::ok, n}; }
  static Outcome error(Errc e) { return {e, 0}; }
};

// The standard blocking loop: try `op` on the stack's thread; while it would
// block and the call may block, sleep until the socket changes (a signal
// handler that runs meanwhile ends it: Errc::interrupted, EINTR).
// `needs`: the readiness that says `op` has what it needs without the
// stack's input (EPOLLIN: bytes to read; EPOLLOUT: room to write). While the
// socket shows it, a try skips the pass before `op` and only flushes what
// `op` queued after it (Stack::call_after). Room to write counts only while
// the stack's latest pass is fresh: a program that only writes still lets
// the stack take its input (ACKs, ARP replies).
template <class Op>
Outcome blocking(Sock& s, bool may_block, Deadline deadline, Op&& op, std::uint32_t needs = 0) {
  for (;;) {
    const std::uint32_t seen = s.wp.gen();
    const std::uint32_t shown = s.events.load(std::memory_order_relaxed) & needs;
    const bool ready = (shown & EPOLLIN) != 0 || ((shown & EPOLLOUT) != 0 && fresh(*s.stack));
    auto attempt = [&] {
      if (s.closed.load(std::memory_order_relaxed)) return Outcome::error(Errc::closed);
      Outcome r = op();
      refresh(s, false);
      return r;
    };
    Outcome o = ready ? s.stack->call_after(attempt) : s.stack->call(attempt);
    if (o.err != Errc::would_block || !may_block) return o;
    const WaitEnd w = s.stack->wait(s.wp, seen, deadline);
    if (w == WaitEnd::interrupted) return Outcome::error(Errc::interrupted);
    if (w == WaitEnd::deadline) return o;
  }
}

// `e` as the socket's family writes it: an AF_INET6 socket's IPv4 peers as
// v4-mapped sockaddr_in6s.
void write_sockaddr(const Sock& s, const Endpoint& e, sockaddr* addr, socklen_t* len);
// An address given to the socket, in its family's sockaddr (an AF_INET6
// socket's v4-mapped addresses are IPv4 ones). EAFNOSUPPORT for another
// family, EINVAL for a short one.
bool read_sockaddr(const Sock& s, const sockaddr* addr, socklen_t len, Endpoint& e, int& err);

// Runs `body`, turning what escapes into errno (the C API never throws).
template <class Body>
auto guarded(const char* what, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return static_cast<decltype(body())>(fail(ENOMEM, std::string(what) + ": out of memory"));
  } catch (const std::exception& e) {
    return static_cast<decltype(body())>(fail(EIO, std::string(what) + ": " + e.what()));
  }
}

// Closes the socket on its stack's thread: abortive (`reset`), with SO_LINGER
// as set, or graceful.
int close_sock(const std::shared_ptr<Sock>& sp, bool reset);

}  // namespace xk::capi

#pragma GCC visibility pop

#pragma once
// libxk_preload.so: what its calls share (docs/preload.md).
//
// A program runs unmodified under `xkrun`; the library interposes the socket
// calls of libc. Every AF_INET socket starts as a real kernel socket (so its
// number is the kernel's and never collides with the program's files), and
// stays one until the first call that says where its traffic goes -- bind,
// connect, listen, sendto -- picks a side by the policy: traffic that can
// leave through the xk stack goes to xk, the rest (loopback, other networks)
// stays with the kernel. A socket that goes to xk keeps its kernel socket as
// the placeholder of its number; the table below maps that number to the xk
// descriptor.
//
// The table is one slot per kernel descriptor number, read without a lock
// on every call:
//   0            the kernel's (a file, a pipe, a decided kernel socket, ...)
//   -1           an AF_INET socket not yet decided (a Pending record)
//   x + 1 > 0    xk descriptor x
//   -(e + 2)     a kernel epoll set that watches xk sockets through xk
//                epoll set e (its "side" set)
//   INT_MIN      the library's own (the stack's port, loop, bells): the
//                program did not open it and may not close it

#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "xk/options.hpp"
#include "xk/xk.h"

namespace xk::preload {

// The real libc calls, found with dlsym(RTLD_NEXT) once.
struct Libc {
  int (*socket)(int, int, int);
  int (*bind)(int, const sockaddr*, socklen_t);
  int (*listen)(int, int);
  int (*accept)(int, sockaddr*, socklen_t*);
  int (*accept4)(int, sockaddr*, socklen_t*, int);
  int (*connect)(int, const sockaddr*, socklen_t);
  ssize_t (*read)(int, void*, size_t);
  ssize_t (*write)(int, const void*, size_t);
  ssize_t (*readv)(int, const iovec*, int);
  ssize_t (*writev)(int, const iovec*, int);
  ssize_t (*recv)(int, void*, size_t, int);
  ssize_t (*send)(int, const void*, size_t, int);
  ssize_t (*recvfrom)(int, void*, size_t, int, sockaddr*, socklen_t*);
  ssize_t (*sendto)(int, const void*, size_t, int, const sockaddr*, socklen_t);
  ssize_t (*recvmsg)(int, msghdr*, int);
  ssize_t (*sendmsg)(int, const msghdr*, int);
  int (*recvmmsg)(int, mmsghdr*, unsigned, int, timespec*);
  int (*sendmmsg)(int, mmsghdr*, unsigned, int);
  int (*close)(int);
  int (*shutdown)(int, int);
  int (*getsockopt)(int, int, int, void*, socklen_t*);
  int (*setsockopt)(int, int, int, const void*, socklen_t);
  int (*getsockname)(int, sockaddr*, socklen_t*);
  int (*getpeername)(int, sockaddr*, socklen_t*);
  int (*fcntl)(int, int, ...);
  int (*ioctl)(int, unsigned long, ...);
  int (*dup)(int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
  int (*poll)(pollfd*, nfds_t, int);
  int (*ppoll)(pollfd*, nfds_t, const timespec*, const sigset_t*);
  int (*select)(int, fd_set*, fd_set*, fd_set*, timeval*);
  int (*pselect)(int, fd_set*, fd_set*, fd_set*, const timespec*, const sigset_t*);
  int (*epoll_create)(int);
  int (*epoll_create1)(int);
  int (*epoll_ctl)(int, int, int, epoll_event*);
  int (*epoll_wait)(int, epoll_event*, int, int);
  int (*epoll_pwait)(int, epoll_event*, int, int, const sigset_t*);
  int (*epoll_pwait2)(int, epoll_event*, int, const timespec*, const sigset_t*);
  ssize_t (*sendfile)(int, int, off_t*, size_t);
  int (*getifaddrs)(ifaddrs**);
  void (*freeifaddrs)(ifaddrs*);
  int (*sigaction)(int, const struct sigaction*, struct sigaction*);
};
const Libc& libc();

// What a descriptor number is now (see the header comment).
struct Slot {
  enum class Kind : std::uint8_t { kernel, pending, xk, side, stale, own };
  Kind kind;
  int xk;  // the xk descriptor (xk, side)
};

// Which traffic goes to xk: a destination the stack can reach (on its
// subnet, or any with a gateway) that is not in a kernel network
// (127.0.0.0/8 always, plus XK_PRELOAD_KERNEL); a bind to INADDR_ANY or the
// stack's own address.
// Which sockets are xk's, decided by address (either family).
struct Policy {
  std::vector<xk::IpCidr> addrs;        // the stack's, with their on-link prefixes
  bool gateway4 = false;                // off-link IPv4 goes through the stack
  bool gateway6 = false;                // and IPv6
  std::vector<xk::IpCidr> kernel_nets;  // XK_PRELOAD_KERNEL: left to the kernel
  std::uint32_t addr4() const noexcept;  // the IPv4 address (host order), 0: none
  std::uint32_t mask4() const noexcept;
  bool to_xk(const xk::IpAddr& dst) const;
  bool bind_to_xk(const xk::IpAddr& a) const;
};

// The address in a sockaddr of either family (an AF_INET6 one's v4-mapped
// address is IPv4's); false for another family or a short one.
bool address_of(const sockaddr* a, socklen_t len, xk::IpAddr& out);

// An AF_INET socket not yet decided: what was done to its kernel socket
// that the xk socket must repeat.
struct Pending {
  int type = 0;    // SOCK_STREAM or SOCK_DGRAM
  int family = 0;  // AF_INET or AF_INET6
  struct Option {
    int level, name;
    std::vector<char> value;
  };
  std::vector<Option> options;
  struct Watch {
    int epfd;
    epoll_event event;
  };
  std::vector<Watch> watches;  // kernel epoll sets it was added to
};

class Process {
 public:
  // The process's state, or null while it is being made (the stack's own
  // start-up opens sockets too: they are the kernel's).
  static Process* instance() noexcept { return instance_.load(std::memory_order_acquire); }
  static void start();

  // The stack, or null: none in this process (not xkrun's, or forked).
  // (Also null once the process is exiting: shut_down() destroyed it.)
  xk_stack* stack() const noexcept { return forked_ ? nullptr : stack_.load(std::memory_order_acquire); }
  const Policy& policy() const noexcept { return policy_; }
  unsigned spin_us() const noexcept { return spin_us_; }
  // How long a zero-timeout wait that found its kernel descriptors idle
  // answers for them again without asking the kernel (XK_KERNEL_POLL_US).
  unsigned kernel_poll_us() const noexcept { return kernel_poll_us_; }

  Slot slot(int fd) const noexcept {
    if (fd < 0 || static_cast<std::size_t>(fd) >= size_) return {Slot::Kind::kernel, -1};
    const int v = slots_[fd].load(std::memory_order_acquire);
    if (v == 0) return {Slot::Kind::kernel, -1};
    if (v == -1) return {Slot::Kind::pending, -1};
    // A child's copies of the library's descriptors are its to close.
    if (v == kOwn) return {forked_ ? Slot::Kind::kernel : Slot::Kind::own, -1};
    if (forked_) return {Slot::Kind::stale, -1};
    if (v > 0) return {Slot::Kind::xk, v - 1};
    return {Slot::Kind::side, -v - 2};
  }
  // Whether the caller may close `fd` (or make it another's with dup2): not
  // a program's thread when it is the library's own, unless the process
  // is exiting (the stack is being destroyed).
  bool may_close(int fd) const noexcept;
  // close_range(2) for the table: what an xk socket in [first, last] was is
  // released; the library's own descriptors in it are left out. Calls
  // `close(lo, hi)` for each run of numbers to close; returns -1 on the
  // first that fails.
  template <class F>
  int close_range(unsigned first, unsigned last, F&& close) {
    const std::size_t top = top_.load(std::memory_order_acquire);
    std::size_t lo = first;  // the run not yet closed starts here
    for (std::size_t fd = first; fd < top && fd <= last; ++fd) {
      if (may_close(static_cast<int>(fd))) {
        release(static_cast<int>(fd));
        continue;
      }
      if (fd > lo && close(static_cast<unsigned>(lo), static_cast<unsigned>(fd - 1)) != 0) return -1;
      lo = fd + 1;
    }
    return lo > last ? 0 : close(static_cast<unsigned>(lo), last);
  }

  // A new AF_INET socket, undecided.
  void add_pending(int fd, int type, int family);
  // The xk descriptor of a pending socket now going to xk (made, options
  // replayed, kernel epoll registrations moved over), or -1 with errno.
  int promote(int fd);
  // A pending socket decided for the kernel.
  void keep_in_kernel(int fd);
  // Records what a pending socket was given (setsockopt, epoll_ctl).
  void note_option(int fd, int level, int name, const void* value, socklen_t len);
  void note_watch(int fd, int epfd, int op, const epoll_event* ev);
  // Kernel descriptor `fd` now stands for xk descriptor `x` (one more
  // reference to it).
  void map_xk(int fd, int x);
  // The side xk epoll set of kernel epoll set `epfd`, made on first use.
  int side_of(int epfd);
  // Forgets `fd` (before the kernel closes it): the last reference to an xk
  // socket closes it; a side set is closed with its kernel set.
  void release(int fd);
  // dup: `to` is a new number for what `from` is.
  void duplicate(int from, int to);
  // The library opened `fd` for itself / is about to close it (own_fds.hpp).
  void mark_own(int fd) noexcept;
  void unmark_own(int fd) noexcept;
  // The library's own, and closed on exec (what the stack opened as it
  // started). Returns `fd`.
  int adopt(int fd) noexcept;
  // What a call made on one of the library's threads -- DPDK's interrupt
  // thread taking a memif peer (its socket, the memory and interrupt
  // descriptors that come over it, the EAL's epoll set made again), the
  // loop reconnecting to filterd -- is adopted; a program's is left as it
  // is. Returns `fd`.
  static int adopt_if_made_by_library(int fd) noexcept;

  // At exit: close every xk socket gracefully and let the stack send what
  // that makes (FINs) for a moment.
  void shut_down();

 private:
  Process();
  static void after_fork_child();
  void write_stats(xk_stack* s) const;
  static inline std::atomic<Process*> instance_{nullptr};
  static constexpr int kOwn = INT_MIN;
  // A slot is about to hold something: the table's top moves past it.
  void touch(int fd) noexcept;
  // The library's descriptors made while the stack started (all its port's
  // and loop's, DPDK's among them): what is open after that was not before.
  void mark_opened_since(const std::vector<int>& before);

  std::atomic<xk_stack*> stack_{nullptr};
  unsigned exit_linger_ms_ = 1000;
  std::string stats_path_;  // XK_STATS: where the stack's counters go at exit ("-": stderr)
  pid_t owner_ = 0;
  Policy policy_;
  unsigned spin_us_ = 50;
  unsigned kernel_poll_us_ = 20;
  static inline bool forked_ = false;

  std::atomic<int>* slots_ = nullptr;
  std::size_t size_ = 0;
  std::atomic<std::size_t> top_{0};  // no slot at or above it was ever set
  std::atomic<bool> exiting_{false};

  std::mutex mu_;
  std::unordered_map<int, Pending> pending_;
  std::unordered_map<int, int> refs_;  // xk descriptor -> kernel numbers naming it
};

// errno = err, -1 (and, for the first few, a line on stderr when `why`).
int fail(int err);

}  // namespace xk::preload

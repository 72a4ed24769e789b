// libxk_preload.so: the socket calls -- making, deciding, naming, options,
// descriptors (close, dup, fcntl, ioctl) and data. Each looks up what its
// descriptor is (process.hpp) and calls xk or the real libc.

#include <fcntl.h>
#include <linux/sockios.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <vector>

#include "exports.hpp"
#include "interfaces.hpp"
#include "process.hpp"
#include "xk/own_fds.hpp"

using namespace xk::preload;

namespace {

Slot where(int fd) {
  const Process* p = Process::instance();
  return p != nullptr ? p->slot(fd) : Slot{Slot::Kind::kernel, -1};
}

// An xk socket a child inherited across fork: its stack is the parent's.
int stale() { return fail(EIO); }

// Calls `on_xk(x)` for an xk socket, else `on_kernel()`.
template <class X, class K>
auto route(int fd, X&& on_xk, K&& on_kernel) -> decltype(on_kernel()) {
  const Slot s = where(fd);
  if (s.kind == Slot::Kind::xk) return on_xk(s.xk);
  if (s.kind == Slot::Kind::stale) return stale();
  return on_kernel();
}

// A write on a connection that is gone raises SIGPIPE unless MSG_NOSIGNAL
// (xk never signals by itself; the program expects the kernel's way).
template <class T>
T piped(T r, int flags) {
  if (r < 0 && errno == EPIPE && (flags & MSG_NOSIGNAL) == 0) {
    const int saved = errno;
    (void)raise(SIGPIPE);
    errno = saved;
  }
  return r;
}

// A pending socket about to send to or connect to `a`: its side, decided
// now. Returns the xk descriptor, -2 for the kernel, -1 on failure.
int decide_for(Process& p, int fd, const sockaddr* a, socklen_t len) {
  xk::IpAddr to;
  if (!address_of(a, len, to)) return -2;  // AF_UNSPEC (a disconnect) and the like: the kernel answers
  if (p.policy().to_xk(to)) return p.promote(fd);
  p.keep_in_kernel(fd);
  return -2;
}

// The descriptors that came with a message the library received.
ssize_t received_by_library(ssize_t r, const msghdr* m) {
  if (r < 0 || m == nullptr || !xk::on_library_thread()) return r;
  for (cmsghdr* c = CMSG_FIRSTHDR(m); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(m), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      (void)Process::adopt_if_made_by_library(fd);
    }
  }
  return r;
}

}  // namespace

// ---- making and deciding -------------------------------------------------------------

XK_EXPORT int socket(int domain, int type, int protocol) {
  const int fd = libc().socket(domain, type, protocol);
  if (xk::on_library_thread()) return Process::adopt_if_made_by_library(fd);
  Process* p = Process::instance();
  if (fd < 0 || p == nullptr || p->stack() == nullptr || (domain != AF_INET && domain != AF_INET6)) return fd;
  const int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  const bool tcp = base == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP);
  const bool udp = base == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP);
  if (tcp || udp) p->add_pending(fd, base, domain);
  return fd;
}

XK_EXPORT int bind(int fd, const sockaddr* a, socklen_t len) {
  const Slot s = where(fd);
  if (s.kind == Slot::Kind::pending) {
    Process& p = *Process::instance();
    xk::IpAddr at;
    if (address_of(a, len, at) && p.policy().bind_to_xk(at)) {
      const int x = p.promote(fd);
      return x < 0 ? -1 : xk_bind(x, a, len);
    }
    p.keep_in_kernel(fd);
  }
  return route(fd, [&](int x) { return xk_bind(x, a, len); }, [&] { return libc().bind(fd, a, len); });
}

XK_EXPORT int listen(int fd, int backlog) {
  if (where(fd).kind == Slot::Kind::pending) {
    // Never bound: the kernel would bind it to INADDR_ANY, which is xk's.
    if (Process::instance()->promote(fd) < 0) return -1;
  }
  return route(fd, [&](int x) { return xk_listen(x, backlog); }, [&] { return libc().listen(fd, backlog); });
}

XK_EXPORT int connect(int fd, const sockaddr* a, socklen_t len) {
  if (where(fd).kind == Slot::Kind::pending && decide_for(*Process::instance(), fd, a, len) == -1) return -1;
  return route(fd, [&](int x) { return xk_connect(x, a, len); }, [&] { return libc().connect(fd, a, len); });
}

XK_EXPORT int accept4(int fd, sockaddr* a, socklen_t* len, int flags) {
  return route(
      fd,
      [&](int x) {
        const int y = xk_accept4(x, a, len, flags & SOCK_NONBLOCK);
        if (y < 0) return -1;
        // The new connection's number: a kernel socket of its own.
        const int k = libc().socket(AF_INET, SOCK_STREAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC)), 0);
        if (k < 0) {
          const int saved = errno;
          (void)xk_close(y);
          return fail(saved);
        }
        Process::instance()->map_xk(k, y);
        return k;
      },
      [&] { return Process::adopt_if_made_by_library(libc().accept4(fd, a, len, flags)); });
}

XK_EXPORT int accept(int fd, sockaddr* a, socklen_t* len) { return accept4(fd, a, len, 0); }

// ---- names, options, shutdown ------------------------------------------------------------

XK_EXPORT int getsockname(int fd, sockaddr* a, socklen_t* len) {
  return route(fd, [&](int x) { return xk_getsockname(x, a, len); }, [&] { return libc().getsockname(fd, a, len); });
}

XK_EXPORT int getpeername(int fd, sockaddr* a, socklen_t* len) {
  return route(fd, [&](int x) { return xk_getpeername(x, a, len); }, [&] { return libc().getpeername(fd, a, len); });
}

XK_EXPORT int getsockopt(int fd, int level, int name, void* v, socklen_t* len) {
  return route(fd, [&](int x) { return xk_getsockopt(x, level, name, v, len); },
               [&] { return libc().getsockopt(fd, level, name, v, len); });
}

XK_EXPORT int setsockopt(int fd, int level, int name, const void* v, socklen_t len) {
  return route(fd, [&](int x) { return xk_setsockopt(x, level, name, v, len); },
               [&] {
                 const int r = libc().setsockopt(fd, level, name, v, len);
                 if (r == 0 && where(fd).kind == Slot::Kind::pending) {
                   Process::instance()->note_option(fd, level, name, v, len);
                 }
                 return r;
               });
}

XK_EXPORT int shutdown(int fd, int how) {
  return route(fd, [&](int x) { return xk_shutdown(x, how); }, [&] { return libc().shutdown(fd, how); });
}

// ---- descriptors -------------------------------------------------------------------------

// The library's own descriptors (the stack's port, loop and bells) are not
// the program's to close: to it they are not open (EBADF).
XK_EXPORT int close(int fd) {
  if (Process* p = Process::instance()) {
    if (!p->may_close(fd)) return fail(EBADF);
    p->release(fd);
  }
  return libc().close(fd);
}

// Closes [first, last] but the library's own descriptors in it. With
// CLOSE_RANGE_UNSHARE the table is taken for the process's all the same
// (a thread with a table of its own is not modelled).
XK_EXPORT int close_range(unsigned first, unsigned last, int flags) {
  auto kernel = [flags](unsigned lo, unsigned hi) { return static_cast<int>(syscall(SYS_close_range, lo, hi, flags)); };
  Process* p = Process::instance();
  const bool closes = (flags & CLOSE_RANGE_CLOEXEC) == 0 && (flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)) == 0;
  if (p == nullptr || !closes || first > last) return kernel(first, last);  // marks close-on-exec, or an error
  return p->close_range(first, last, kernel);
}

// glibc's closefrom calls the system call itself, past close_range.
XK_EXPORT void closefrom(int lowfd) {
  if (lowfd < 0) lowfd = 0;
  (void)close_range(static_cast<unsigned>(lowfd), ~0u, 0);
}

XK_EXPORT int dup(int fd) {
  const int r = libc().dup(fd);
  if (r >= 0 && where(fd).kind != Slot::Kind::kernel) Process::instance()->duplicate(fd, r);
  return r;
}

namespace {
int dup_onto(int from, int to, int flags, bool three) {
  if (from == to) return three ? fail(EINVAL) : libc().dup2(from, to);
  // The old meaning of `to` goes first (the kernel closes it inside dup2);
  // only once `from` is known to be open.
  if (libc().fcntl(from, F_GETFD) < 0) return -1;
  if (Process* p = Process::instance()) {
    // The library's own descriptor stays: the program takes a number in use.
    if (!p->may_close(to)) return fail(EBUSY);
    p->release(to);
  }
  const int r = three ? libc().dup3(from, to, flags) : libc().dup2(from, to);
  if (r >= 0 && where(from).kind != Slot::Kind::kernel) Process::instance()->duplicate(from, r);
  return r;
}
}  // namespace

XK_EXPORT int dup2(int from, int to) { return dup_onto(from, to, 0, false); }
XK_EXPORT int dup3(int from, int to, int flags) { return dup_onto(from, to, flags, true); }

namespace {
int fcntl_any(int fd, int cmd, void* arg) {
  const auto iarg = static_cast<int>(reinterpret_cast<std::intptr_t>(arg));
  const Slot s = where(fd);
  if (s.kind == Slot::Kind::stale && cmd != F_GETFD && cmd != F_SETFD) return stale();
  if (s.kind == Slot::Kind::xk && cmd == F_SETFL) {
    // O_NONBLOCK for xk; the placeholder keeps the flags F_GETFL reads.
    if (xk_fcntl(s.xk, F_SETFL, iarg & O_NONBLOCK) != 0) return -1;
  }
  const int r = libc().fcntl(fd, cmd, arg);
  if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && s.kind != Slot::Kind::kernel) {
    Process::instance()->duplicate(fd, r);
  }
  return r;
}
}  // namespace

XK_EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return fcntl_any(fd, cmd, arg);
}

// glibc's 64-bit name for the same call.
XK_EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

XK_EXPORT int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  const Slot s = where(fd);
  if (s.kind == Slot::Kind::stale) return stale();
  if (int r = 0; interface_ioctl(fd, request, arg, r)) return r;
  if (s.kind == Slot::Kind::xk) {
    switch (request) {
      case FIONBIO:
        if (xk_ioctl(s.xk, request, arg) != 0) return -1;
        break;  // the placeholder too, so F_GETFL says the same
      case FIONREAD:
      case SIOCOUTQ:
      case SIOCOUTQNSD:
      case SIOCATMARK:
        return xk_ioctl(s.xk, request, arg);
      default:
        break;  // interface requests (SIOCGIFCONF, ...) are the kernel's
    }
  }
  return libc().ioctl(fd, request, arg);
}

// ---- data ----------------------------------------------------------------------------------

XK_EXPORT ssize_t read(int fd, void* buf, size_t n) {
  return route(fd, [&](int x) { return xk_read(x, buf, n); }, [&] { return libc().read(fd, buf, n); });
}

XK_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  return route(fd, [&](int x) { return piped(xk_write(x, buf, n), 0); }, [&] { return libc().write(fd, buf, n); });
}

XK_EXPORT ssize_t readv(int fd, const iovec* iov, int n) {
  return route(fd, [&](int x) { return xk_readv(x, iov, n); }, [&] { return libc().readv(fd, iov, n); });
}

XK_EXPORT ssize_t writev(int fd, const iovec* iov, int n) {
  return route(fd, [&](int x) { return piped(xk_writev(x, iov, n), 0); }, [&] { return libc().writev(fd, iov, n); });
}

XK_EXPORT ssize_t recv(int fd, void* buf, size_t n, int flags) {
  return route(fd, [&](int x) { return xk_recv(x, buf, n, flags); }, [&] { return libc().recv(fd, buf, n, flags); });
}

XK_EXPORT ssize_t send(int fd, const void* buf, size_t n, int flags) {
  return route(fd, [&](int x) { return piped(xk_send(x, buf, n, flags), flags); },
               [&] { return libc().send(fd, buf, n, flags); });
}

XK_EXPORT ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* a, socklen_t* len) {
  return route(fd, [&](int x) { return xk_recvfrom(x, buf, n, flags, a, len); },
               [&] { return libc().recvfrom(fd, buf, n, flags, a, len); });
}

XK_EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* a, socklen_t len) {
  if (where(fd).kind == Slot::Kind::pending && a != nullptr && decide_for(*Process::instance(), fd, a, len) == -1) {
    return -1;
  }
  return route(fd, [&](int x) { return piped(xk_sendto(x, buf, n, flags, a, len), flags); },
               [&] { return libc().sendto(fd, buf, n, flags, a, len); });
}

XK_EXPORT ssize_t recvmsg(int fd, msghdr* m, int flags) {
  return route(fd, [&](int x) { return xk_recvmsg(x, m, flags); },
               [&] { return received_by_library(libc().recvmsg(fd, m, flags), m); });
}

XK_EXPORT ssize_t sendmsg(int fd, const msghdr* m, int flags) {
  if (where(fd).kind == Slot::Kind::pending && m != nullptr && m->msg_name != nullptr &&
      decide_for(*Process::instance(), fd, static_cast<const sockaddr*>(m->msg_name), m->msg_namelen) == -1) {
    return -1;
  }
  return route(fd, [&](int x) { return piped(xk_sendmsg(x, m, flags), flags); },
               [&] { return libc().sendmsg(fd, m, flags); });
}

// Several datagrams (or stream reads) in one call, as recvmsg and sendmsg
// one after the other on an xk socket. recvmmsg: MSG_WAITFORONE makes every
// receive after the first non-blocking; the timeout, as Linux's, is looked
// at only after each message (a first receive still blocks). Both stop at
// the first error after a message went through, which the next call then
// meets; an error before any is the call's.
XK_EXPORT int recvmmsg(int fd, mmsghdr* v, unsigned n, int flags, timespec* timeout) {
  if (where(fd).kind == Slot::Kind::kernel) return libc().recvmmsg(fd, v, n, flags, timeout);
  if (v == nullptr && n > 0) return fail(EFAULT);
  using Clock = std::chrono::steady_clock;
  Clock::time_point end{};
  if (timeout != nullptr) {
    if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1'000'000'000) return fail(EINVAL);
    end = Clock::now() + std::chrono::seconds(timeout->tv_sec) + std::chrono::nanoseconds(timeout->tv_nsec);
  }
  unsigned done = 0;
  while (done < n) {
    int f = flags & ~MSG_WAITFORONE;
    if (done > 0 && (flags & MSG_WAITFORONE) != 0) f |= MSG_DONTWAIT;
    const ssize_t r = recvmsg(fd, &v[done].msg_hdr, f);
    if (r < 0) return done > 0 ? static_cast<int>(done) : -1;
    v[done++].msg_len = static_cast<unsigned>(r);
    if (timeout != nullptr && Clock::now() >= end) break;
  }
  return static_cast<int>(done);
}

XK_EXPORT int sendmmsg(int fd, mmsghdr* v, unsigned n, int flags) {
  if (where(fd).kind == Slot::Kind::kernel) return libc().sendmmsg(fd, v, n, flags);
  if (v == nullptr && n > 0) return fail(EFAULT);
  unsigned done = 0;
  while (done < n) {
    const ssize_t r = sendmsg(fd, &v[done].msg_hdr, flags);
    if (r < 0) return done > 0 ? static_cast<int>(done) : -1;
    v[done++].msg_len = static_cast<unsigned>(r);
  }
  return static_cast<int>(done);
}

// sendfile to an xk socket: the file's bytes are read and written (a copy;
// xk has no page-cache path). Only as many bytes as the socket took are
// consumed from the file, so a short send on a non-blocking socket loses
// nothing.
XK_EXPORT ssize_t sendfile(int out, int in, off_t* offset, size_t count) {
  if (where(in).kind == Slot::Kind::xk) return fail(EINVAL);
  return route(
      out,
      [&](int x) -> ssize_t {
        off_t pos = offset != nullptr ? *offset : lseek(in, 0, SEEK_CUR);
        if (pos < 0) return fail(errno == ESPIPE ? EINVAL : errno);
        // One buffer per thread, kept: nginx calls this for every chunk of every file.
        thread_local std::vector<char> buf(256 * 1024);
        size_t done = 0;
        while (done < count) {
          const ssize_t got = pread(in, buf.data(), std::min(buf.size(), count - done), pos);
          if (got < 0 && done == 0) return -1;
          if (got <= 0) break;
          const ssize_t put = piped(xk_write(x, buf.data(), static_cast<size_t>(got)), 0);
          if (put < 0 && done == 0) return -1;
          if (put <= 0) break;
          done += static_cast<size_t>(put);
          pos += put;
          if (put < got) break;
        }
        if (offset != nullptr) {
          *offset = pos;
        } else {
          (void)lseek(in, pos, SEEK_SET);
        }
        return static_cast<ssize_t>(done);
      },
      [&] { return libc().sendfile(out, in, offset, count); });
}

XK_EXPORT ssize_t sendfile64(int out, int in, off_t* offset, size_t count) __attribute__((alias("sendfile")));

// ---- glibc's fortified variants (_FORTIFY_SOURCE) ------------------------------------------

extern "C" [[noreturn]] void __chk_fail(void);

XK_EXPORT ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return read(fd, buf, n);
}

XK_EXPORT ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  if (n > buflen) __chk_fail();
  return recv(fd, buf, n, flags);
}

XK_EXPORT ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, sockaddr* a, socklen_t* len) {
  if (n > buflen) __chk_fail();
  return recvfrom(fd, buf, n, flags, a, len);
}

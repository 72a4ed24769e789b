// libxk_preload.so: the program's signal handlers, counted. A blocked call
// on an xk socket spins (or busy-polls) before it sleeps, and a handler that
// runs during the spin ends no system call, so nothing would tell the call
// that the program expects EINTR. The library puts a trampoline in front of
// every handler the program installs (sigaction, signal, ssignal,
// bsd_signal, sysv_signal, sigset): it counts the run on its thread and
// calls the program's handler. A waiting call compares the count with the
// one it started with (docs/preload.md, "Signals").

#include "signals.hpp"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "exports.hpp"
#include "process.hpp"
#include "xk/stack.hpp"

namespace xk::preload {
namespace {

// The program's handler of each signal, as it gave it (flags included).
struct Handler {
  std::atomic<void*> fn{nullptr};
  std::atomic<int> flags{0};
};
Handler handlers[NSIG];

// Per thread, read by the thread's own waits only; initial-exec so that a
// handler's first touch allocates nothing (the library is loaded at start).
__attribute__((tls_model("initial-exec"))) thread_local std::uint64_t t_all = 0;
__attribute__((tls_model("initial-exec"))) thread_local std::uint64_t t_interrupting = 0;

void trampoline(int sig, siginfo_t* info, void* context) {
  const int flags = handlers[sig].flags.load(std::memory_order_acquire);
  void* fn = handlers[sig].fn.load(std::memory_order_acquire);
  // SA_RESTART as installed now: glibc's siginterrupt() changes it with a
  // sigaction of its own, which does not come through here.
  struct sigaction now {};
  const int installed = libc().sigaction(sig, nullptr, &now) == 0 ? now.sa_flags : flags;
  ++t_all;
  if ((installed & SA_RESTART) == 0) {
    ++t_interrupting;
    // A blocked call of this thread past its last look at the count, on
    // its way into the futex, must not sleep now.
    xk::signal_landed();
  }
  if (fn == nullptr) return;
  if ((flags & SA_SIGINFO) != 0) {
    reinterpret_cast<void (*)(int, siginfo_t*, void*)>(fn)(sig, info, context);
  } else {
    reinterpret_cast<void (*)(int)>(fn)(sig);
  }
}

// What the program installed (`fn`, `flags`), in place of our trampoline
// in `a`.
void as_the_programs(struct sigaction& a, void* fn, int flags) {
  if ((a.sa_flags & SA_SIGINFO) == 0 || a.sa_sigaction != &trampoline) return;
  a.sa_flags = flags;
  if ((flags & SA_SIGINFO) != 0) {
    a.sa_sigaction = reinterpret_cast<void (*)(int, siginfo_t*, void*)>(fn);
  } else {
    a.sa_handler = reinterpret_cast<void (*)(int)>(fn);
  }
}

}  // namespace

std::uint64_t handlers_run() noexcept { return t_all; }
std::uint64_t interrupting_handlers_run() noexcept { return t_interrupting; }

}  // namespace xk::preload

using namespace xk::preload;

XK_EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (sig <= 0 || sig >= NSIG) return libc().sigaction(sig, act, old);
  // The program's previous handler, for `old`, before the table changes.
  void* const prev_fn = handlers[sig].fn.load(std::memory_order_acquire);
  const int prev_flags = handlers[sig].flags.load(std::memory_order_acquire);
  if (act == nullptr) {
    const int r = libc().sigaction(sig, nullptr, old);
    if (r == 0 && old != nullptr) as_the_programs(*old, prev_fn, prev_flags);
    return r;
  }
  struct sigaction mine = *act;
  const bool handler = (act->sa_flags & SA_SIGINFO) != 0 ? act->sa_sigaction != nullptr
                                                        : act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
  if (handler) {
    void* fn = (act->sa_flags & SA_SIGINFO) != 0 ? reinterpret_cast<void*>(act->sa_sigaction)
                                                 : reinterpret_cast<void*>(act->sa_handler);
    handlers[sig].flags.store(act->sa_flags, std::memory_order_release);
    handlers[sig].fn.store(fn, std::memory_order_release);
    mine.sa_sigaction = &trampoline;
    mine.sa_flags |= SA_SIGINFO;
  }
  const int r = libc().sigaction(sig, &mine, old);
  if (r == 0 && old != nullptr) as_the_programs(*old, prev_fn, prev_flags);
  return r;
}

namespace {

// The older ways to install a handler, each a sigaction with its own flags
// (glibc calls its own sigaction inside them, which would bypass the
// trampoline): `flags`, and the signal itself blocked while its handler
// runs unless `flags` has SA_NODEFER.
sighandler_t install(int sig, sighandler_t handler, int flags) {
  if (handler == SIG_ERR || sig <= 0 || sig >= NSIG) {
    errno = EINVAL;
    return SIG_ERR;
  }
  struct sigaction a {};
  a.sa_handler = handler;
  sigemptyset(&a.sa_mask);
  if ((flags & SA_NODEFER) == 0) sigaddset(&a.sa_mask, sig);
  a.sa_flags = flags;
  struct sigaction old {};
  if (sigaction(sig, &a, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

}  // namespace

// glibc's signal() (and its ssignal) and BSD's bsd_signal(): the handler
// stays, interrupted calls restart, the signal is blocked in its handler.
XK_EXPORT sighandler_t signal(int sig, sighandler_t handler) { return install(sig, handler, SA_RESTART); }
XK_EXPORT sighandler_t ssignal(int sig, sighandler_t handler) { return install(sig, handler, SA_RESTART); }
XK_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler) { return install(sig, handler, SA_RESTART); }

// System V's signal (glibc's sysv_signal, and signal() under _XOPEN_SOURCE
// in old programs): one shot -- the disposition goes back to SIG_DFL as
// the handler starts -- the signal not blocked in its handler, and
// interrupted calls end with EINTR.
XK_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler) {
  return install(sig, handler, SA_RESETHAND | SA_NODEFER);
}
XK_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler) { return sysv_signal(sig, handler); }

// System V's sigset(): SIG_HOLD blocks the signal and leaves its handler;
// anything else installs it (no SA_RESTART, the signal blocked in it) and
// unblocks the signal. Either way the answer is SIG_HOLD if the signal was
// blocked before, otherwise the disposition it had.
XK_EXPORT sighandler_t sigset(int sig, sighandler_t disposition) {
  if (sig <= 0 || sig >= NSIG || disposition == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  sigset_t before;
  sighandler_t old = SIG_ERR;
  if (disposition == SIG_HOLD) {
    struct sigaction now {};
    if (sigaction(sig, nullptr, &now) != 0) return SIG_ERR;
    if (sigprocmask(SIG_BLOCK, &one, &before) != 0) return SIG_ERR;
    old = now.sa_handler;
  } else {
    old = install(sig, disposition, 0);
    if (old == SIG_ERR) return SIG_ERR;
    if (sigprocmask(SIG_UNBLOCK, &one, &before) != 0) return SIG_ERR;
  }
  return sigismember(&before, sig) == 1 ? SIG_HOLD : old;
}

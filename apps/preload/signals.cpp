// libxk_preload.so: the program's signal handlers, counted. A blocked call
// on an xk socket spins (or busy-polls) before it sleeps, and a handler that
// runs during the spin ends no system call, so nothing would tell the call
// that the program expects EINTR. The library puts a trampoline in front of
// every handler the program installs (sigaction, signal): it counts the run
// on its thread and calls the program's handler. A waiting call compares
// the count with the one it started with (docs/preload.md, "Signals").

#include "signals.hpp"

#include <signal.h>

#include <atomic>
#include <cstdint>

#include "exports.hpp"
#include "process.hpp"

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
  if ((installed & SA_RESTART) == 0) ++t_interrupting;
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

// glibc's signal(): BSD semantics (SA_RESTART, the signal blocked in its
// handler), through the sigaction above.
XK_EXPORT sighandler_t signal(int sig, sighandler_t handler) {
  struct sigaction a {};
  a.sa_handler = handler;
  sigemptyset(&a.sa_mask);
  if (sig > 0 && sig < NSIG) sigaddset(&a.sa_mask, sig);
  a.sa_flags = SA_RESTART;
  struct sigaction old {};
  if (sigaction(sig, &a, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

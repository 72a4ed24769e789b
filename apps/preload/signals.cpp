// libxk_preload.so: the program's signal handlers, counted. A blocked call
// on an xk socket spins (or busy-polls) before it sleeps, and a handler that
// runs during the spin ends no system call, so nothing would tell the call
// that the program expects EINTR. The library puts a trampoline in front of
// every handler the program installs (sigaction, signal): it counts the run
// on its thread and calls the program's handler. A waiting call compares
// the count with the one it started with (docs/preload.md, "Signals").

#include "signals.hpp"

#include <dlfcn.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "exports.hpp"

namespace xk::preload {
namespace {

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);

SigactionFn real_sigaction() {
  static const auto f = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
  if (f == nullptr) {
    std::fprintf(stderr, "xkrun: libc has no sigaction\n");
    std::abort();
  }
  return f;
}

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
  const int installed = real_sigaction()(sig, nullptr, &now) == 0 ? now.sa_flags : flags;
  ++t_all;
  if ((installed & SA_RESTART) == 0) ++t_interrupting;
  if (fn == nullptr) return;
  if ((flags & SA_SIGINFO) != 0) {
    reinterpret_cast<void (*)(int, siginfo_t*, void*)>(fn)(sig, info, context);
  } else {
    reinterpret_cast<void (*)(int)>(fn)(sig);
  }
}

bool is_ours(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) != 0 && a.sa_sigaction == &trampoline;
}

// What the program installed, in place of our trampoline in `a`.
void as_the_programs(int sig, struct sigaction& a) {
  if (!is_ours(a)) return;
  const int flags = handlers[sig].flags.load(std::memory_order_acquire);
  void* fn = handlers[sig].fn.load(std::memory_order_acquire);
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
  if (sig <= 0 || sig >= NSIG || act == nullptr) {
    const int r = real_sigaction()(sig, act, old);
    if (r == 0 && old != nullptr && sig > 0 && sig < NSIG) as_the_programs(sig, *old);
    return r;
  }
  struct sigaction mine = *act;
  const bool handler = (act->sa_flags & SA_SIGINFO) != 0 ? act->sa_sigaction != nullptr
                                                        : act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
  // The previous program handler, for `old`, before the table changes.
  struct sigaction before {};
  if (old != nullptr) {
    (void)real_sigaction()(sig, nullptr, &before);
    as_the_programs(sig, before);
  }
  if (handler) {
    void* fn = (act->sa_flags & SA_SIGINFO) != 0 ? reinterpret_cast<void*>(act->sa_sigaction)
                                                 : reinterpret_cast<void*>(act->sa_handler);
    handlers[sig].flags.store(act->sa_flags, std::memory_order_release);
    handlers[sig].fn.store(fn, std::memory_order_release);
    mine.sa_sigaction = &trampoline;
    mine.sa_flags |= SA_SIGINFO;
  }
  const int r = real_sigaction()(sig, &mine, nullptr);
  if (r == 0 && old != nullptr) *old = before;
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

#include "xk/drivers/fault_fence.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace xk::drivers {
namespace {

// Per thread: the jump buffer of the fence this thread is in (armed), and the
// signal that last cut one short. initial-exec TLS: reading it in the signal
// handler never allocates, even from a shared libxk.
struct ThreadFence {
  sigjmp_buf env;
  bool armed = false;
  int last_signal = 0;
};
thread_local ThreadFence t_fence __attribute__((tls_model("initial-exec")));

std::atomic<std::uint64_t> g_caught{0};
struct sigaction g_prev_segv {};
struct sigaction g_prev_bus {};
std::once_flag g_install;

const struct sigaction& previous(int sig) { return sig == SIGBUS ? g_prev_bus : g_prev_segv; }

// Hand the signal to whoever had it before us. For the default action (or an
// ignored fault, which cannot be ignored), put the default back: a fault
// re-executes its instruction and dies of it; a signal sent by kill() is
// raised again.
void pass_on(int sig, siginfo_t* info, void* ctx) {
  const struct sigaction& prev = previous(sig);
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, ctx);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  (void)sigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) (void)raise(sig);
}

void on_fault(int sig, siginfo_t* info, void* ctx) {
  ThreadFence& f = t_fence;
  if (f.armed && info != nullptr && info->si_code > 0) {  // a real fault, in a fence
    f.armed = false;
    f.last_signal = sig;
    g_caught.fetch_add(1, std::memory_order_relaxed);
    siglongjmp(f.env, 1);
  }
  pass_on(sig, info, ctx);
}

}  // namespace

void FaultFence::install() {
  std::call_once(g_install, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &g_prev_segv) != 0 || sigaction(SIGBUS, &sa, &g_prev_bus) != 0) {
      std::fprintf(stderr, "xk: cannot install the fault fence's handler: %s\n", std::strerror(errno));
    }
  });
}

bool FaultFence::armed() noexcept { return t_fence.armed; }

void FaultFence::arm() noexcept {
  install();
  t_fence.armed = true;
}

void FaultFence::disarm() noexcept { t_fence.armed = false; }

sigjmp_buf* FaultFence::frame() noexcept { return &t_fence.env; }

void FaultFence::crash(const char* why) {
  const int sig = t_fence.last_signal != 0 ? t_fence.last_signal : SIGSEGV;
  std::fprintf(stderr, "xk: %s: a fault (signal %d) the fence did not expect; dying of it\n", why, sig);
  (void)sigaction(sig, &previous(sig), nullptr);
  (void)raise(sig);
  // A previous handler that returns from a raised fault leaves us here.
  signal(sig, SIG_DFL);
  (void)raise(sig);
  _exit(128 + sig);
}

std::uint64_t FaultFence::caught() noexcept { return g_caught.load(std::memory_order_relaxed); }

}  // namespace xk::drivers

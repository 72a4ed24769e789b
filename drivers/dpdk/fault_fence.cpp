#include "xk/drivers/fault_fence.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace xk::drivers {

struct FaultFence::Lease {
  std::atomic<pid_t> tid{0};
  sigjmp_buf* volatile env = nullptr;  // written and read by the same thread
  volatile int last_signal = 0;
};

namespace {

// Where each fenced thread jumps back to, in a table the handler can search
// by thread id. Not thread_local storage: in a library that is dlopen()ed
// (the packetdrill adapter), initial-exec TLS may find no room in the static
// TLS block, and other TLS may allocate on first touch -- not a thing to do
// in a signal handler. A thread claims a slot the first time it fences (a
// thread_local in ordinary code remembers which) and gives it back when it
// ends; past kSlots threads, a thread's bursts run unfenced.
constexpr std::size_t kSlots = 128;
using Slot = FaultFence::Lease;
Slot g_slots[kSlots];
std::atomic<bool> g_full_said{false};

// The slot is a plain pointer (a run reads it with one thread-local lookup,
// no initialisation check); the object that gives it back at the thread's
// end is touched only when the slot is taken.
thread_local Slot* t_slot = nullptr;
thread_local bool t_tried = false;
struct GiveBack {
  Slot* slot = nullptr;
  ~GiveBack() {
    if (slot != nullptr) {
      slot->env = nullptr;
      slot->tid.store(0, std::memory_order_release);
    }
    // The thread may still run fenced code after this (the main thread's
    // exit runs the stack): unfenced from now on, not in a slot another
    // thread may have claimed.
    t_slot = nullptr;
  }
};
thread_local GiveBack t_give_back;

Slot* take_slot() noexcept {
  t_tried = true;
  const pid_t me = gettid();
  for (Slot& s : g_slots) {
    pid_t free = 0;
    if (s.tid.compare_exchange_strong(free, me, std::memory_order_acq_rel)) {
      s.env = nullptr;
      s.last_signal = 0;
      t_give_back.slot = &s;
      t_slot = &s;
      return &s;
    }
  }
  if (!g_full_said.exchange(true)) {
    std::fprintf(stderr, "xk: more than %zu threads use fault fences; the rest run unfenced\n", kSlots);
  }
  return nullptr;
}

// In the handler: this thread's slot, found by its id (gettid is a system
// call, async-signal-safe).
Slot* slot_of_this_thread() noexcept {
  const pid_t me = gettid();
  for (Slot& s : g_slots) {
    if (s.tid.load(std::memory_order_acquire) == me) return &s;
  }
  return nullptr;
}

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
  if (info != nullptr && info->si_code > 0) {  // a real fault (not kill())
    Slot* s = slot_of_this_thread();
    sigjmp_buf* env = s != nullptr ? s->env : nullptr;
    if (env != nullptr) {  // ... in a fence
      s->env = nullptr;
      s->last_signal = sig;
      g_caught.fetch_add(1, std::memory_order_relaxed);
      siglongjmp(*env, 1);
    }
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

FaultFence::Lease* FaultFence::lease() noexcept {
  if (Slot* s = t_slot; s != nullptr) return s;
  if (t_tried) return nullptr;
  install();
  return take_slot();
}

bool FaultFence::armed(const Lease* l) noexcept { return l->env != nullptr; }

void FaultFence::arm(Lease* l, sigjmp_buf* env) noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  l->env = env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

void FaultFence::disarm(Lease* l) noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  l->env = nullptr;
}

void FaultFence::crash(const char* why) {
  const Slot* s = t_slot;
  const int sig = s != nullptr && s->last_signal != 0 ? s->last_signal : SIGSEGV;
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

#pragma once
// fault_fence: a call into code that reads memory another thread may unmap
// under it, made survivable.
//
// DPDK 22.11's memif is such code. When the peer goes away (filterd killed,
// a node killed), the EAL's interrupt thread runs the PMD's disconnect, which
// clears the "connected" flag and unmaps the link's shared regions at once.
// The data path checks that flag only on entry: a thread already inside
// rte_eth_rx_burst or rte_eth_tx_burst, copying from or into the regions,
// faults. Nothing in the PMD lets a caller wait for the disconnect or hold it
// off, so the port's owner fences its bursts instead:
//
//   FaultFence::run(fn) calls fn(). If fn takes SIGSEGV or SIGBUS in this
//   thread, the handler jumps back out of it and run() returns false. fn is
//   abandoned midway: what it held (mbufs it was filling, mbufs it had not yet
//   freed) is lost -- leaked, never freed twice. The caller then checks that
//   the fault is the expected one (for memif: the link is down) and otherwise
//   calls crash(), which dies of the signal as if no fence had been there.
//
// A fault outside a fence goes to the handler that was installed before ours
// (the default action, or a sanitizer's report). The jump saves no signal
// mask (sigsetjmp(.., 0): no system call per run); the handler runs with
// SA_NODEFER, so the fault signal is never left blocked after the jump.
// A fence costs a few nanoseconds: it is meant for bursts, not for bytes.

#include <csetjmp>
#include <cstdint>

namespace xk::drivers {

class FaultFence {
 public:
  // Calls fn(); false if a fault in this thread cut it short. Installs the
  // handler on first use. Not reentrant: a fence inside a fence is refused
  // (the inner fn runs unfenced -- it is the outer fence's).
  template <class Fn>
  static bool run(Fn&& fn) {
    Lease* l = lease();  // this thread's slot: one thread-local lookup per run
    if (l == nullptr || armed(l)) {
      fn();
      return true;
    }
    sigjmp_buf env;
    if (sigsetjmp(env, 0) != 0) return false;  // the handler jumped here (and disarmed)
    arm(l, &env);
    fn();
    disarm(l);
    return true;
  }

  // Put the handler in place (once per process; later calls do nothing).
  static void install();

  // The caller found the last caught fault unexpected: restore the handler
  // that was there before ours and raise the signal again. Does not return.
  [[noreturn]] static void crash(const char* why);

  // Faults caught by fences, in this process.
  static std::uint64_t caught() noexcept;

  // A fenced thread's slot in the table the handler searches by thread id.
  struct Lease;

 private:
  // This thread's slot, leased on its first fence (null: none left, the
  // thread runs unfenced).
  static Lease* lease() noexcept;
  static bool armed(const Lease* l) noexcept;
  static void arm(Lease* l, sigjmp_buf* env) noexcept;
  static void disarm(Lease* l) noexcept;
};

}  // namespace xk::drivers

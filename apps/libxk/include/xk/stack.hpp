#pragma once
// xk::Stack: one running stack -- a graph on an event loop, driven inline by
// the callers, by a service thread of its own, or by both in turn (hybrid) --
// and the one door into it,
// call(): run this on the stack's thread, give me the result. The C API
// (xk/xk.h) is built on it; C++ programs may use it directly with the socket
// classes of the protocols (TcpSocket, TcpListener, UdpSocket) inside call().
//
//   xk::StackConfig c;
//   c.graph = "loopback lo0\nipv4 ip0 below=lo0 addr=192.0.2.1/24\ntcp tcp0 below=ip0\n";
//   c.mode = xk::StackMode::service;
//   auto stack = xk::Stack::create(c);
//   auto listener = stack->call([&] { return stack->tcp()->listen({}, xk::Port{5001}); });
//
// Everything the stack owns (sockets included) is touched only inside call()
// (or, in service mode, by tasks on its thread): the stack itself takes no
// locks on its data path.

#include <poll.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/kinds.hpp"  // register_all_kinds: what compose_graph's graphs are built from

// The C API's handle of a stack (xk/xk.h).
struct xk_stack;

namespace xk {

namespace tcp {
class TcpProtocol;
}
namespace udp {
class UdpProtocol;
}
class PortAuthority;
class FilterdClient;

enum class StackMode : std::uint8_t {
  inline_calls,    // the calling thread runs the stack in every call
  service_thread,  // a pthread runs the stack; calls are posted to it
  // Inline while someone calls, the stack's own thread while nobody does: a
  // call runs the stack in the calling thread (as inline), a blocked call
  // drives it while it spins and hands it to the thread before it sleeps,
  // and the thread takes it over when no call has come in for `hand_back`
  // (noticed within 8 x hand_back: drive_while_alone).
  // For programs that do not call in all the time (libxk_preload.so).
  hybrid,
};

struct StackConfig {
  std::string graph;               // spec text (docs/graph-spec.md)
  std::string source = "config";   // names the spec in error messages
  StackMode mode = StackMode::inline_calls;
  EventLoopConfig loop;            // idle policy (busy_poll / spin_then_sleep), spin
  ThreadOptions thread;            // service and hybrid: the thread's CPU pinning and name
  // Hybrid: how long the calls must leave the stack alone before its thread
  // takes it over (a blocked call that goes to sleep hands it over at once).
  // The thread looks that often at first, and less often while the calls
  // keep coming: it notices calls that stopped within 8 x hand_back.
  std::chrono::microseconds hand_back{500};
  std::chrono::milliseconds link_wait{5000};  // for a DPDK port named net0
  // Whether create() waits for that link; false: the caller does, with
  // Stack::wait_for_link() (the apps say "waiting for the link" first).
  bool wait_link = true;
  std::string tcp = "tcp0";        // the instances the socket API uses (may be absent)
  std::string udp = "udp0";
  // Attach to filterd through this control socket (docs/filterd.md): the
  // graph then comes from filterd (graph must be empty; tcp_opts are added
  // to its tcp line) and every port is agreed with it.
  std::string filterd;
  // filterd over TCP (tcp:HOST:PORT): the node is on another host, and its
  // channel is this DPDK port of its own (with its MAC, if given) on
  // filterd's node port; the token comes from XK_FILTERD_TOKEN=FILE.
  std::string node_port;
  std::string node_mac;
  // Extra dpdk options for the node's channel: its memif, or its own port.
  std::string node_port_opts;
  // The token file (docs/control-protocol.md); empty: XK_FILTERD_TOKEN=FILE.
  std::string filterd_token;
  std::string tcp_opts;
  std::string node_name = "xk";    // how filterd and xkctl name this node
  // The clock the stack's timers read (it must outlive the stack); null: the
  // monotonic clock. A ManualClock gives a stack on virtual time (the
  // packetdrill adapter): the program moves it and then runs the stack
  // (poll() or call()), as sleeps in the loop stay real-time.
  const Clock* clock = nullptr;
};

// The simple graph most programs want, for xk_stack_config and the apps:
//   dpdk net0 devargs=PORT -> eth eth0 -> arp arp0 -> ipv4 ip0 addr=IP gw=GW
//   -> icmp icmp0, udp udp0, tcp tcp0
// and with IPv6 addresses beside (or instead of) the IPv4 one: nd nd0,
// ipv6 ip6 and icmpv6 icmp6 beside them, udp and tcp on both families.
struct SimpleGraph {
  std::string port;      // DPDK devargs
  std::string port_opts; // extra dpdk options, "K=V .."
  std::string ip;        // "A.B.C.D/N", "X:X::X/N", or several, comma-separated (one IPv4)
  std::string gw;        // may be empty; one per family, comma-separated
  std::string mac;       // may be empty
  std::string tcp_opts;  // extra tcp options
  std::string capture;   // a pcap file to write (a capture layer over the port), or empty
  bool csum = true;
};
// Throws std::invalid_argument for a missing port or address (the graph's own
// parser checks the rest).
std::string compose_graph(const SimpleGraph& g);

// How a wait ended: what it waited for happened, its deadline passed, or a
// signal handler ran while it slept (the caller's EINTR).
enum class WaitEnd : std::uint8_t { moved, deadline, interrupted };

// A count of the program's signal handlers that ran on the calling thread
// and ask for EINTR (no SA_RESTART), kept by whoever sees them run (the
// preload library puts a trampoline in front of them). A wait that spins or
// busy-polls ends `interrupted` when it moves, as a sleeping one does when a
// handler ends its futex sleep. Null (the default): only the sleep can tell.
using SignalCount = std::uint64_t (*)() noexcept;
void set_signal_count(SignalCount count) noexcept;
// The count now (0 without one): what a wait that began earlier compares
// with (WaitPoint::wait_since).
std::uint64_t signal_count() noexcept;
// For the keeper of the count, from inside a handler that asks for EINTR,
// after counting it: a wait of this thread that has taken its last look
// at the count but not yet gone to sleep does not go to sleep (its futex
// word moves under it), so a handler that lands in that gap still ends the
// wait. Async-signal-safe; does nothing when the thread is not waiting.
void signal_landed() noexcept;

// A counter for one kind of wait: a waiter samples gen(), does its check, and
// sleeps until gen() moves on (or a deadline); bump() moves it and wakes the
// sleepers. The futex is touched only when someone sleeps.
class WaitPoint {
 public:
  std::uint32_t gen() const noexcept { return gen_.load(std::memory_order_seq_cst); }
  void bump() noexcept;
  // Spin for `spin` (pausing as `idle` says), then sleep while gen() == seen.
  // A signal handler that runs during the sleep ends it (interrupted), as
  // it would a kernel call's: SA_RESTART handlers restart an untimed sleep.
  WaitEnd wait(std::uint32_t seen, std::optional<std::chrono::steady_clock::time_point> deadline,
               std::chrono::nanoseconds spin, IdleMode idle = IdleMode::spin_then_sleep) const noexcept {
    return wait_since(signal_count(), seen, deadline, spin, idle);
  }
  // The same for a call that began before the wait: a handler that ran
  // since `signals` (signal_count() then) ends it.
  WaitEnd wait_since(std::uint64_t signals, std::uint32_t seen,
                     std::optional<std::chrono::steady_clock::time_point> deadline, std::chrono::nanoseconds spin,
                     IdleMode idle) const noexcept;

 private:
  // Mutable: a handler that lands just before a sleep moves it too
  // (signal_landed), spuriously for the other waiters, who look again.
  mutable std::atomic<std::uint32_t> gen_{0};
  mutable std::atomic<std::uint32_t> sleepers_{0};
};

class Stack;

// The C API (xk/xk.h) over a stack built in C++ -- a graph with a driver of
// the program's own, an injected clock -- so its sockets are the C API's
// descriptors. The handle owns the stack: xk_stack_destroy() frees both.
::xk_stack* adopt_for_c_api(std::unique_ptr<Stack> stack);

class Stack {
 public:
  // Builds the graph, waits for the link, starts the service thread. Throws
  // std::runtime_error (GraphError for a bad spec) saying what failed.
  static std::unique_ptr<Stack> create(StackConfig config);
  // A node of `count` stacks attached to filterd (config.filterd, a Unix
  // socket; no graph): one HELLO asks for a channel queue per stack, and
  // filterd steers each flow to the queue of the stack that owns it
  // (docs/filterd.md, "Several stacks per node"). Stack q has its own loop,
  // graph and, in service mode, thread (pinned to config.thread.cpu + q when
  // that is set); they share the control connection, which closes with the
  // last of them. Destroy them together: the first stack also watches the
  // connection for a filterd restart.
  static std::vector<std::unique_ptr<Stack>> create_node(StackConfig config, std::size_t count);
  ~Stack();
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;

  StackMode mode() const noexcept { return mode_; }
  const StackConfig& config() const noexcept;
  EventLoop& loop() noexcept { return loop_; }
  Graph& graph() noexcept;
  tcp::TcpProtocol* tcp() const noexcept { return tcp_; }
  udp::UdpProtocol* udp() const noexcept { return udp_; }

  // Runs `f` on the stack's thread and returns what it returns (an exception
  // it throws is thrown here). Inline and hybrid: under the stack's lock,
  // after a pass of the stack (so what arrived is seen) and before another
  // (so what `f` queued leaves). Service: posted to the stack's thread, the
  // caller spins and then sleeps until it is done. On the thread running
  // the stack (service, hybrid) `f` runs at once.
  template <class F>
  std::invoke_result_t<F&> call(F&& f) {
    return call(std::forward<F>(f), true);
  }
  // As call(), without the pass before `f` when the caller knows what `f`
  // needs is there already (bytes to read): what `f` queues still leaves.
  template <class F>
  std::invoke_result_t<F&> call_after(F&& f) {
    return call(std::forward<F>(f), false);
  }

  // Blocks until `ready` moves on from `seen` (or the deadline, or a signal
  // in service and hybrid mode: WaitPoint::wait), running an inline stack
  // meanwhile with its idle policy (and letting other callers in between
  // passes); a hybrid stack while it spins, before it hands the stack over.
  WaitEnd wait(const WaitPoint& ready, std::uint32_t seen,
               std::optional<std::chrono::steady_clock::time_point> deadline);

  // Hybrid: the caller is about to sleep outside the stack (in the kernel,
  // on a descriptor the stack makes ready: xk_epoll_fd): let the stack's
  // thread run it now rather than after `hand_back`. Otherwise nothing.
  void hand_over() noexcept;

  // Inline and hybrid (can_sleep_beside()): sleep in the kernel on `fds`
  // (as ppoll(2), `mask` in force) and on the stack's own wake-ups in the
  // same call -- its port, its timers, other threads' calls -- then run a
  // pass of the stack in this thread. So a frame for a caller that sleeps
  // costs one wake-up, this one, not two in a row (the stack's thread's,
  // then the caller's, woken by what the thread found: tens of
  // microseconds each in a VM). Nothing sleeps when `done()`, asked under
  // the stack, says the wait is over. Returns ppoll's count for `fds` --
  // 0: the timeout, or the stack ran (look again) -- or -1 with errno
  // (EINTR: a signal). `taken`: another thread ran the stack meanwhile
  // and woke this one; a caller of a busy stack does better sleeping as
  // service-mode callers do (hand_over) than being woken at each call.
  bool can_sleep_beside() const noexcept { return mode_ != StackMode::service_thread; }
  int sleep_beside(std::span<pollfd> fds, std::optional<Duration> max, const sigset_t* mask,
                   const std::function<bool()>& done, bool& taken);

  // Inline and hybrid: one pass in the calling thread; service: 0.
  std::size_t poll();

  // Under the stack (in a call): brings the loop's counters of the hybrid
  // thread (hand_back_looks, takeovers) up to date, for a dump.
  void sync_counters() noexcept;

  // Runs the stack until the link of net0 is up (a DPDK or shm port whose
  // peer connects), at most `limit`; then a standalone stack announces its
  // address (ARP). True at once for a graph without such a port. For
  // config.wait_link = false, before the service thread would start: call it
  // on an inline stack.
  bool wait_for_link(std::chrono::milliseconds limit);

 private:
  // What the stack owns and how it is run -- the graph, the loop, the
  // callers' lock, the hybrid thread, sleeps beside the loop (stack.cpp).
  class Core;
  explicit Stack(StackConfig config);
  static std::unique_ptr<Stack> build(StackConfig config, std::shared_ptr<FilterdClient> node, std::uint16_t queue);
  template <class F>
  std::invoke_result_t<F&> call(F&& f, bool pass_before);
  // Inline and hybrid: a caller's turn at running the stack, taken and
  // given back around each call (false: this thread holds it already).
  bool take_turn();
  void end_turn() noexcept;
  // Service: runs run(frame) on the stack's thread and waits for it.
  void post_and_wait(void (*run)(void*), void* frame);

  std::unique_ptr<Core> core_;
  // What call() and the socket layer read on every call, from the core.
  StackMode mode_;
  EventLoop& loop_;
  tcp::TcpProtocol* tcp_ = nullptr;
  udp::UdpProtocol* udp_ = nullptr;
};

template <class F>
std::invoke_result_t<F&> Stack::call(F&& f, bool pass_before) {
  using R = std::invoke_result_t<F&>;
  if (mode_ == StackMode::hybrid && loop_.in_loop_thread()) return f();
  if (mode_ != StackMode::service_thread) {
    struct Turn {
      Stack& s;
      bool took;
      ~Turn() {
        if (took) s.end_turn();
      }
    } turn{*this, take_turn()};
    if (pass_before) loop_.run_once();
    // After: a whole pass, or (call_after: the caller reads what is there
    // and looks at the input later) only what `f` queued.
    auto after = [&] { pass_before ? loop_.run_once() : loop_.flush_output(); };
    if constexpr (std::is_void_v<R>) {
      f();
      after();
    } else {
      R r = f();
      after();
      return r;
    }
  } else if (loop_.in_loop_thread()) {
    return f();
  } else {
    struct Frame {
      std::remove_reference_t<F>* fn;
      std::optional<std::conditional_t<std::is_void_v<R>, char, R>> out;
      std::exception_ptr error;
    } frame{&f, std::nullopt, nullptr};
    post_and_wait(
        [](void* p) {
          auto* fr = static_cast<Frame*>(p);
          try {
            if constexpr (std::is_void_v<R>) {
              (*fr->fn)();
              fr->out.emplace('\0');
            } else {
              fr->out.emplace((*fr->fn)());
            }
          } catch (...) {
            fr->error = std::current_exception();
          }
        },
        &frame);
    if (frame.error) std::rethrow_exception(frame.error);
    if constexpr (!std::is_void_v<R>) return std::move(*frame.out);
  }
}

}  // namespace xk

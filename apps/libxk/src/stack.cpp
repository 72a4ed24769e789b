// xk::Stack: building a stack, and the two ways of running it (xk/stack.hpp).

#include "xk/stack.hpp"

#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "xk/driver.hpp"
#include "xk/kinds.hpp"
#include "xk/options.hpp"
#include "xk/own_fds.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/nd.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"
#include "xk/filterd/token.hpp"
#include "xk/filterd_client.hpp"

namespace xk {

namespace {


// False when a signal handler ran during the sleep.
bool futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected, const timespec* timeout) noexcept {
  // The kernel compares the word with `expected` under its own lock: a wake
  // between our check and the sleep is not lost.
  const int saved = errno;
  const long r = syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected,
                         timeout, nullptr, 0);
  const bool interrupted = r != 0 && errno == EINTR;
  errno = saved;
  return !interrupted;
}

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr,
                0);
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

namespace {
// "a,b c" -> {a, b, c}: addresses given as one list (XK_IP) or repeated.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  for (char ch : text + ",") {
    if (ch == ',' || ch == ' ') {
      if (!word.empty()) out.push_back(word);
      word.clear();
    } else {
      word += ch;
    }
  }
  return out;
}
}  // namespace

std::string compose_graph(const SimpleGraph& g) {
  if (g.port.empty()) throw std::invalid_argument("no port: give the DPDK devargs of the port (or a whole graph)");
  if (g.ip.empty()) throw std::invalid_argument("no address: give the stack's A.B.C.D/N (or a whole graph)");
  std::ostringstream s;
  if (g.port.rfind("shm:", 0) == 0) {
    // Our own shared-memory link to another xk process: shm:PATH[,K=V...]
    // (docs/shm-driver.md).
    const std::string rest = g.port.substr(4);
    const std::size_t comma = rest.find(',');
    s << "shm     net0  path=" << spec_value(rest.substr(0, comma));
    if (comma != std::string::npos) {
      std::string opts = rest.substr(comma);
      std::replace(opts.begin(), opts.end(), ',', ' ');
      s << opts;
    }
  } else {
    s << "dpdk    net0  devargs=" << spec_value(g.port);
    // Checksums off: the driver's receive coalescing does not check them
    // either (it carries the parts' into the merged segment).
    if (!g.csum && g.port_opts.find("gro_csum=") == std::string::npos) s << " gro_csum=carry";
  }
  if (!g.port_opts.empty()) s << " " << g.port_opts;
  s << "\n";
  std::string link = "net0";
  if (!g.capture.empty()) {
    s << "capture cap0  below=net0 file=" << spec_value(g.capture) << " linktype=ether flush=off\n";
    link = "cap0";
  }
  s << "eth     eth0  below=" << link;
  if (!g.mac.empty()) s << " mac=" << g.mac;
  s << "\n";
  // The addresses by family: ipv4 takes one, ipv6 any number.
  std::string v4, v6, gw4, gw6;
  for (const std::string& word : split_list(g.ip)) {
    Result<IpCidr> c = parse_ip_cidr(word);
    if (!c) throw std::invalid_argument("address '" + word + "' is not A.B.C.D/N or X:X::X/N");
    std::string& into = c->addr.is_v4() ? v4 : v6;
    if (c->addr.is_v4() && !v4.empty()) throw std::invalid_argument("one IPv4 address per stack: " + g.ip);
    into += (into.empty() ? "" : ",") + word;
  }
  for (const std::string& word : split_list(g.gw)) {
    Result<IpAddr> a = parse_ip(word);
    if (!a) throw std::invalid_argument("gateway '" + word + "' is not an address");
    std::string& into = a->is_v4() ? gw4 : gw6;
    if (!into.empty()) throw std::invalid_argument("one gateway per family: " + g.gw);
    into = word;
  }
  if (!gw4.empty() && v4.empty()) throw std::invalid_argument("an IPv4 gateway without an IPv4 address");
  if (!gw6.empty() && v6.empty()) throw std::invalid_argument("an IPv6 gateway without an IPv6 address");
  // A 65507-byte datagram is 45 fragments: let them all wait for one ARP reply.
  if (!v4.empty()) s << "arp     arp0  below=eth0 pending=64\n";
  if (!v6.empty()) s << "nd      nd0   below=eth0 pending=64\n";
  if (!v4.empty()) {
    s << "ipv4    ip0   below=eth0,arp0 addr=" << v4;
    if (!gw4.empty()) s << " gw=" << gw4;
    s << "\n";
  }
  if (!v6.empty()) {
    s << "ipv6    ip6   below=eth0,nd0 addr=" << v6;
    if (!gw6.empty()) s << " gw=" << gw6;
    s << "\n";
  }
  const std::string ips = v4.empty() ? "ip6" : v6.empty() ? "ip0" : "ip0,ip6";
  if (!v4.empty()) s << "icmp    icmp0 below=ip0\n";
  if (!v6.empty()) s << "icmpv6  icmp6 below=ip6,nd0\n";
  s << "udp     udp0  below=" << ips << " csum=" << (g.csum ? "on" : "off") << "\n";
  s << "tcp     tcp0  below=" << ips << " csum=" << (g.csum ? "on" : "off");
  if (!g.tcp_opts.empty()) s << " " << g.tcp_opts;
  s << "\n";
  return s.str();
}

// ---- signals during a spin ------------------------------------------------------

namespace {
std::atomic<SignalCount> g_signal_count{nullptr};

// The futex word this thread is about to sleep on, from just before its
// last look at the signal count until it is awake again (null otherwise).
// The default TLS model, not initial-exec: libxk may be in a library that
// is dlopen()ed (the packetdrill adapter). A handler's touch allocates
// nothing where it matters: libxk_preload.so is loaded with the program,
// so its TLS is in the static block.
thread_local std::atomic<std::atomic<std::uint32_t>*> t_about_to_sleep{nullptr};
}  // namespace

void set_signal_count(SignalCount count) noexcept { g_signal_count.store(count, std::memory_order_relaxed); }

std::uint64_t signal_count() noexcept {
  const SignalCount f = g_signal_count.load(std::memory_order_relaxed);
  return f != nullptr ? f() : 0;
}

void signal_landed() noexcept {
  // The handler runs on the waiting thread itself, so the word is either
  // set (the wait is past its last look: make FUTEX_WAIT find another
  // value) or not (the wait has yet to look, and will see the count).
  std::atomic<std::uint32_t>* word = t_about_to_sleep.load(std::memory_order_relaxed);
  if (word != nullptr) word->fetch_add(1, std::memory_order_seq_cst);
}

// ---- WaitPoint ----------------------------------------------------------------

void WaitPoint::bump() noexcept {
  gen_.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with the sleeper's increment of sleepers_ before its last look at
  // gen_: either it sees the new gen_, or we see it counted and wake it.
  if (sleepers_.load(std::memory_order_seq_cst) != 0) futex_wake_all(gen_);
}

WaitEnd WaitPoint::wait_since(std::uint64_t signals, std::uint32_t seen,
                              std::optional<std::chrono::steady_clock::time_point> deadline,
                              std::chrono::nanoseconds spin, IdleMode idle) const noexcept {
  using clock = std::chrono::steady_clock;
  const auto spin_until = clock::now() + spin;
  bool slept = true;
  for (;;) {
    // The signals first: a handler that landed just before the sleep moved
    // gen_ as well (signal_landed), and it is the handler that counts.
    if (!slept || signal_count() != signals) return WaitEnd::interrupted;
    if (gen_.load(std::memory_order_acquire) != seen) return WaitEnd::moved;
    auto now = clock::now();
    if (deadline && now >= *deadline) return WaitEnd::deadline;
    if (now < spin_until) {
      idle_pause(idle);
      continue;
    }
    // Published before the last look at the count: a handler from here on
    // moves gen_, and the futex will not sleep on the old value. (A handler
    // may itself wait, nested: each puts back what it found.)
    std::atomic<std::uint32_t>* const outer = t_about_to_sleep.exchange(&gen_, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (signal_count() == signals) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (gen_.load(std::memory_order_seq_cst) == seen) {
        if (deadline) {
          timespec ts = to_timespec(std::chrono::duration_cast<Duration>(*deadline - now));
          slept = futex_wait(gen_, seen, &ts);
        } else {
          slept = futex_wait(gen_, seen, nullptr);
        }
      }
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_about_to_sleep.store(outer, std::memory_order_relaxed);
  }
}

// ---- Stack ----------------------------------------------------------------------

class Stack::Core {
 public:
  explicit Core(StackConfig config);
  ~Core();

  bool runs_inline() const noexcept { return config_.mode != StackMode::service_thread; }
  void post_and_wait(void (*run)(void*), void* frame);
  WaitEnd wait(const WaitPoint& ready, std::uint32_t seen, std::optional<std::chrono::steady_clock::time_point> deadline);
  void hand_over() noexcept;
  int sleep_beside(std::span<pollfd> fds, std::optional<Duration> max, const sigset_t* mask,
                   const std::function<bool()>& done, bool& taken);
  std::size_t poll();
  void sync_counters() noexcept;
  bool wait_for_link(std::chrono::milliseconds limit);

  StackConfig config_;
  Registry registry_;
  EventLoop loop_;
  // filterd's side of the ports (null: standalone), shared by the stacks of
  // a node; this stack is its queue `queue_`. Before the graph, so it
  // outlives the connections that give their ports back to it.
  std::shared_ptr<FilterdClient> node_;
  std::uint16_t queue_ = 0;
  bool attached_ = false;  // its loop is attached to the node (detach before going)
  std::optional<Graph> graph_;

  // Inline and hybrid mode: one caller runs the stack at a time. A caller
  // that finds it taken wakes the holder (which may be asleep in the loop,
  // waiting for the network on behalf of a blocked call, or the hybrid
  // stack's thread) and counts itself in `contenders_`, so a blocked caller
  // that drives the stack, or the thread, lets it go between passes.
  // False: this thread holds the stack already (hybrid: a signal handler
  // calling in, or a program that longjmp()ed out of a call -- iperf3 does
  // on SIGTERM -- and now exits): it goes on holding it.
  // A caller that finds the loop asleep (sleep_id_) finishes that sleep
  // and wakes the sleeper as it leaves -- unless it is the sleep `own`.
  bool lock_inline(std::uint64_t own = 0);
  void unlock_inline() noexcept;
  // One caller's turn at running the stack (inline and hybrid).
  class Turn {
   public:
    explicit Turn(Core& s, std::uint64_t own_sleep = 0) : s_(s), took_(s_.lock_inline(own_sleep)) {}
    ~Turn() {
      if (took_) s_.unlock_inline();
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    Core& s_;
    bool took_;
  };
  std::mutex inline_mu_;
  std::atomic<int> contenders_{0};
  // Hybrid: the thread's part. `entries_` counts the callers' turns (the
  // thread takes the stack over only after a hand_back with none);
  // `kick_` wakes it at once (hand_over, destruction).
  void drive_while_alone();
  bool run_alone();
  std::atomic<std::uint64_t> entries_{0};
  // The thread's looks back off to one every kLongestLook x hand_back while
  // the calls keep coming (drive_while_alone).
  static constexpr int kLongestLook = 8;
  // Counted by the thread outside the lock, copied into the loop's table
  // (as hand_back_looks and takeovers) by sync_counters().
  std::atomic<std::uint64_t> looks_{0};
  std::atomic<std::uint64_t> takeovers_{0};
  Counter& looks_counter_;
  Counter& takeovers_counter_;
  // Whoever sleeps in the loop -- the hybrid thread (run_alone) or a caller
  // (sleep_beside) -- sleeps without the lock: `sleep_id_` names that sleep
  // (0: none) while it is still to be finished, by the sleeper or by
  // whoever takes the lock first (under the lock, as are `sleep_` and
  // `sleeper_bell_`). A caller that finds it so counts in
  // `sleep_takeovers_` (the loop's table: the holder is its thread) and
  // rings the sleeper's own bell as it leaves. (Not the loop's doorbell: a
  // new sleeper in the loop would wake for it, and might drain it before
  // the old one saw it, leaving that one asleep with its sleep taken.)
  class Bell {
   public:
    Bell();  // throws std::system_error
    ~Bell();
    Bell(const Bell&) = delete;
    Bell& operator=(const Bell&) = delete;
    int fd() const noexcept { return fd_; }
    void ring() const noexcept;
    void drain() const noexcept;

   private:
    int fd_;
  };
  static std::shared_ptr<const Bell> caller_bell() noexcept;
  std::uint64_t sleep_id_ = 0;
  std::uint64_t last_sleep_id_ = 0;
  EventLoop::Sleep sleep_;
  std::shared_ptr<const Bell> sleeper_bell_;
  std::shared_ptr<const Bell> ring_on_unlock_;  // the caller that finished a sleep wakes its sleeper as it leaves
  std::shared_ptr<const Bell> thread_bell_;     // hybrid: the thread's
  Counter& sleep_takeovers_;
  Counter& beside_sleeps_;
  std::uint64_t begin_sleep(const EventLoop::Sleep& sleep, std::shared_ptr<const Bell> bell) noexcept;
  // The system call of a sleep in the loop, under no lock: ppoll on `fds`,
  // the loop's descriptor and the sleeper's bell (drained). r: ppoll's
  // count for `fds` alone, or -1 (err). What the loop reported is taken
  // (how) only by the owner of the sleep, under the lock: a sleeper whose
  // sleep was taken may wake beside the next one, and must not drain a
  // doorbell rung for that one.
  struct Woken {
    long r;
    int err;
    bool loop;
    EventLoop::Woke how(EventLoop& l) const noexcept;
  };
  Woken block_beside(std::span<pollfd> fds, const Bell& bell, std::optional<Duration> timeout,
                     const sigset_t* mask) noexcept;
  // Stack::wait's sleep on a hybrid stack (sleep_beside, no descriptors of
  // its own): an end, or nullopt to look again.
  std::optional<WaitEnd> wait_beside(const WaitPoint& ready, std::uint32_t seen,
                                     std::optional<std::chrono::steady_clock::time_point> deadline,
                                     std::uint64_t signals, bool& taken);
  void finish_loop_sleep(std::optional<EventLoop::Woke> woke) noexcept;
  WaitPoint kick_;
  std::atomic<bool> wanted_{false};  // hand_over() asked; the thread has not taken it yet
  std::atomic<bool> stopping_{false};
};

Stack::Core::Core(StackConfig config)
    : config_(std::move(config)),
      loop_(config_.clock, config_.loop),
      looks_counter_(loop_.counters().add("hand_back_looks",
                                          "hybrid: times the stack's thread woke to see whether the calls stopped")),
      takeovers_counter_(loop_.counters().add(
          "takeovers", "hybrid: times the stack's thread took the stack over (handed over, or the calls stopped)")),
      sleep_takeovers_(loop_.counters().add(
          "sleep_takeovers", "calls that took the stack while another thread slept in its loop, without waking it first")),
      beside_sleeps_(loop_.counters().add(
          "beside_sleeps", "sleeps of a caller on its own descriptors and the loop's at once (sleep_beside)")) {}

void Stack::Core::sync_counters() noexcept {
  looks_counter_.set(looks_.load(std::memory_order_relaxed));
  takeovers_counter_.set(takeovers_.load(std::memory_order_relaxed));
}

namespace {
// The control connection of a node of `queues` stacks. Over TCP the node is
// on another host, with one port of its own (and so one stack).
std::shared_ptr<FilterdClient> connect_node(const StackConfig& config, std::uint16_t queues) {
  if (!config.graph.empty()) throw std::invalid_argument("a node attached to filterd gets its graph from filterd");
  FilterdClient::Options options = FilterdClient::options_from_env();
  options.queues = queues;
  options.wait_like(config.loop.idle, config.loop.spin);
  if (!config.filterd_token.empty()) options.token = filterd::read_token_file(config.filterd_token);
  options.node_port_opts = config.node_port_opts;
  if (FilterdClient::is_tcp(config.filterd)) {
    if (queues > 1) throw std::invalid_argument("a node on another host (filterd over TCP) runs one stack on its own port");
    options.node_port = config.node_port;  // a node on this host has its memif channel
    if (!options.node_port.empty() && !config.node_mac.empty()) {
      Result<MacAddr> m = parse_mac(config.node_mac);
      if (!m) throw std::invalid_argument("node MAC '" + config.node_mac + "' is not aa:bb:cc:dd:ee:ff");
      options.node_mac = *m;
    }
  }
  return FilterdClient::connect(config.filterd, config.node_name, options);
}
}  // namespace

std::unique_ptr<Stack> Stack::create(StackConfig config) {
  if (config.filterd.empty()) return build(std::move(config), nullptr, 0);
  return std::move(create_node(std::move(config), 1).front());
}

std::vector<std::unique_ptr<Stack>> Stack::create_node(StackConfig config, std::size_t count) {
  if (count == 0 || count > 64) throw std::invalid_argument("a node runs 1..64 stacks");
  if (config.filterd.empty()) {
    throw std::invalid_argument("several stacks sharing one address need filterd (a standalone port is one stack's)");
  }
  std::shared_ptr<FilterdClient> node = connect_node(config, static_cast<std::uint16_t>(count));
  std::vector<std::unique_ptr<Stack>> stacks;
  for (std::size_t q = 0; q < count; ++q) {
    StackConfig c = config;
    if (count > 1) {
      if (c.thread.cpu >= 0) c.thread.cpu += static_cast<int>(q);
      if (c.loop.name == "loop") c.loop.name = "stack" + std::to_string(q);
    }
    // On failure the stacks built so far go, then the node.
    stacks.push_back(build(std::move(c), node, static_cast<std::uint16_t>(q)));
  }
  return stacks;
}

std::unique_ptr<Stack> Stack::build(StackConfig config, std::shared_ptr<FilterdClient> node, std::uint16_t queue) {
  if (config.loop.name == "loop") config.loop.name = "stack";
  std::unique_ptr<Stack> s(new Stack(std::move(config)));
  Core& c = *s->core_;
  register_all_kinds(c.registry_);
  if (node != nullptr) {
    c.config_.graph = node->graph_spec(c.config_.tcp_opts, queue);
    c.config_.source = node->queues() > 1 ? "filterd (stack " + std::to_string(queue) + ")" : "filterd";
    c.node_ = std::move(node);
    c.queue_ = queue;
  }
  c.graph_.emplace(Graph::build(c.config_.graph, c.registry_, &c.loop_, c.config_.source));
  s->tcp_ = c.graph_->find_as<tcp::TcpProtocol>(c.config_.tcp);
  s->udp_ = c.graph_->find_as<udp::UdpProtocol>(c.config_.udp);
  if (c.node_) {
    PortAuthority& authority = c.node_->queue(queue);
    if (s->tcp_ != nullptr) s->tcp_->set_port_authority(&authority);
    if (s->udp_ != nullptr) s->udp_->set_port_authority(&authority);
    // filterd may restart under us: reconnect, and declare what we hold.
    attach_node(*c.node_, c.loop_, s->tcp_, s->udp_, c.graph_->find_as<Driver>("net0"), queue);
    c.attached_ = true;
  }
  if (c.config_.wait_link && !c.wait_for_link(c.config_.link_wait)) {
    throw std::runtime_error("the link of port net0 stayed down for " + std::to_string(c.config_.link_wait.count()) +
                             " ms");
  }
  if (c.config_.mode == StackMode::service_thread) c.loop_.start_thread(c.config_.thread);
  if (c.config_.mode == StackMode::hybrid) {
    Core* self = &c;
    c.thread_bell_ = std::make_shared<const Core::Bell>();
    c.loop_.start_thread(c.config_.thread, Task([self] { self->drive_while_alone(); }));
  }
  return s;
}

Stack::Stack(StackConfig config)
    : core_(std::make_unique<Core>(std::move(config))), mode_(core_->config_.mode), loop_(core_->loop_) {}

Stack::~Stack() = default;

const StackConfig& Stack::config() const noexcept { return core_->config_; }
Graph& Stack::graph() noexcept { return *core_->graph_; }
bool Stack::take_turn() { return core_->lock_inline(); }
void Stack::end_turn() noexcept { core_->unlock_inline(); }
void Stack::post_and_wait(void (*run)(void*), void* frame) { core_->post_and_wait(run, frame); }
WaitEnd Stack::wait(const WaitPoint& ready, std::uint32_t seen,
                    std::optional<std::chrono::steady_clock::time_point> deadline) {
  return core_->wait(ready, seen, deadline);
}
void Stack::hand_over() noexcept { core_->hand_over(); }
int Stack::sleep_beside(std::span<pollfd> fds, std::optional<Duration> max, const sigset_t* mask,
                        const std::function<bool()>& done, bool& taken) {
  return core_->sleep_beside(fds, max, mask, done, taken);
}
std::size_t Stack::poll() { return core_->poll(); }
void Stack::sync_counters() noexcept { core_->sync_counters(); }
bool Stack::wait_for_link(std::chrono::milliseconds limit) { return core_->wait_for_link(limit); }

Stack::Core::~Core() {
  if (config_.mode == StackMode::service_thread) {
    loop_.stop();
    loop_.join();
  }
  if (config_.mode == StackMode::hybrid) {
    stopping_.store(true, std::memory_order_seq_cst);
    kick_.bump();          // parked
    if (thread_bell_ != nullptr) thread_bell_->ring();  // or asleep in the loop
    loop_.join();
  }
  // The loop is stopped: nothing of this stack runs for the node any more.
  if (attached_) node_->detach_queue(queue_);
  graph_.reset();  // protocols go before the loop they registered with (and the node's ports)
  node_.reset();   // the last stack of a node closes its control connection
}

namespace {
struct Completion {
  // 0: running, 1: done, 2: the caller sleeps on the futex.
  std::atomic<std::uint32_t> state{0};
};
}  // namespace

void Stack::Core::post_and_wait(void (*run)(void*), void* frame) {
  Completion done;
  loop_.post([run, frame, &done]() noexcept {
    run(frame);
    if (done.state.exchange(1, std::memory_order_acq_rel) == 2) futex_wake_all(done.state);
  });
  // A round trip to a polling stack takes about a microsecond: spin that
  // long and more before paying for a sleep and a wake-up.
  using clock = std::chrono::steady_clock;
  const auto spin_until = clock::now() + config_.loop.spin;
  for (;;) {
    if (done.state.load(std::memory_order_acquire) == 1) return;
    if (clock::now() < spin_until) {
      idle_pause(config_.loop.idle);
      continue;
    }
    std::uint32_t expected = 0;
    if (done.state.compare_exchange_strong(expected, 2, std::memory_order_acq_rel)) {
      while (done.state.load(std::memory_order_acquire) == 2) futex_wait(done.state, 2, nullptr);
    }
    // The exchange on the stack's side is the last touch of `done`.
    if (done.state.load(std::memory_order_acquire) == 1) return;
  }
}

bool Stack::Core::lock_inline(std::uint64_t own) {
  const bool hybrid = config_.mode == StackMode::hybrid;
  if (hybrid && loop_.in_loop_thread()) return false;
  if (!inline_mu_.try_lock()) {
    contenders_.fetch_add(1, std::memory_order_seq_cst);  // before the wake-up: see Stack::Core::wait
    loop_.wake();
    bool got = false;
    // The holder lets go within a pass (the hybrid stack's thread as soon
    // as it sees us): a short spin saves a sleep and a wake-up on the mutex.
    for (int i = 0; hybrid && i < 512 && !got; ++i) {
      cpu_relax();
      got = inline_mu_.try_lock();
    }
    if (!got) inline_mu_.lock();
    contenders_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (hybrid) {
    // Under the lock: no read-modify-write needed, and the thread only asks
    // whether it moved.
    entries_.store(entries_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    loop_.enter();
  }
  if (sleep_id_ != 0 && sleep_id_ != own) {
    // Another thread sleeps in the loop: its sleep ends here, and a ring
    // gets it out of the kernel -- the hybrid thread to park (it may get no
    // other wake-up before the calls stop, and it must take the stack over
    // then), a caller to look at what this call did for it -- once this
    // call is done: woken now, it could take this very CPU from it.
    ring_on_unlock_ = std::move(sleeper_bell_);
    finish_loop_sleep(std::nullopt);
    ++sleep_takeovers_;
  }
  return true;
}

void Stack::Core::unlock_inline() noexcept {
  const bool hybrid = config_.mode == StackMode::hybrid;
  if (hybrid) loop_.leave();
  std::shared_ptr<const Bell> ring = std::move(ring_on_unlock_);
  inline_mu_.unlock();
  if (ring != nullptr) ring->ring();
  // A hand-over the thread could not take (this caller held the stack):
  // it may take it now.
  if (hybrid && wanted_.load(std::memory_order_seq_cst)) kick_.bump();
}

// ---- sleeping in the loop -------------------------------------------------------

Stack::Core::Bell::Bell() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd for a sleeper's bell");
  own_fd_opened(fd_);
}

Stack::Core::Bell::~Bell() {
  own_fd_closing(fd_);
  ::close(fd_);
}

void Stack::Core::Bell::ring() const noexcept { (void)eventfd_write(fd_, 1); }

void Stack::Core::Bell::drain() const noexcept {
  eventfd_t v;
  (void)eventfd_read(fd_, &v);
}

// One per thread that ever sleeps beside a stack, made at its first such
// sleep and closed when the thread ends (or when the last taker that may
// ring it lets go: a ring never reaches a descriptor number reused).
std::shared_ptr<const Stack::Core::Bell> Stack::Core::caller_bell() noexcept {
  thread_local std::shared_ptr<const Bell> bell;
  if (bell == nullptr) {
    try {
      bell = std::make_shared<const Bell>();
    } catch (const std::exception&) {
      return nullptr;
    }
  }
  return bell;
}

std::uint64_t Stack::Core::begin_sleep(const EventLoop::Sleep& sleep, std::shared_ptr<const Bell> bell) noexcept {
  sleep_ = sleep;
  sleeper_bell_ = std::move(bell);
  sleep_id_ = ++last_sleep_id_;
  return sleep_id_;
}

void Stack::Core::finish_loop_sleep(std::optional<EventLoop::Woke> woke) noexcept {
  sleep_id_ = 0;
  sleeper_bell_.reset();
  loop_.finish_sleep(sleep_, woke);
}

Stack::Core::Woken Stack::Core::block_beside(std::span<pollfd> fds, const Bell& bell, std::optional<Duration> timeout,
                                 const sigset_t* mask) noexcept {
  constexpr std::size_t kOnStack = 8;
  pollfd on_stack[kOnStack];
  std::vector<pollfd> on_heap;
  pollfd* all = on_stack;
  const std::size_t n = fds.size();
  if (n + 2 > kOnStack) {
    try {
      on_heap.resize(n + 2);
    } catch (const std::bad_alloc&) {
      return {-1, ENOMEM, false};
    }
    all = on_heap.data();
  }
  std::copy(fds.begin(), fds.end(), all);
  all[n] = {loop_.wait_fd(), POLLIN, 0};
  all[n + 1] = {bell.fd(), POLLIN, 0};
  const timespec ts = timeout ? to_timespec(*timeout) : timespec{};
  // The system call itself: a preloaded program's ppoll is the preload
  // library's.
  const long r = syscall(SYS_ppoll, all, n + 2, timeout ? &ts : nullptr, mask, _NSIG / 8);
  Woken w{r, r < 0 ? errno : 0, r > 0 && all[n].revents != 0};
  const bool rung = r > 0 && all[n + 1].revents != 0;
  for (std::size_t i = 0; i < n; ++i) fds[i].revents = all[i].revents;
  if (rung) bell.drain();
  if (w.r > 0) w.r -= (w.loop ? 1 : 0) + (rung ? 1 : 0);
  return w;
}

EventLoop::Woke Stack::Core::Woken::how(EventLoop& l) const noexcept {
  if (loop) return l.reap();
  return r == 0 ? EventLoop::Woke::timeout : EventLoop::Woke::interrupted;
}

int Stack::Core::sleep_beside(std::span<pollfd> fds, std::optional<Duration> max, const sigset_t* mask,
                        const std::function<bool()>& done, bool& taken) {
  taken = false;
  std::shared_ptr<const Bell> bell = caller_bell();
  if (bell == nullptr) {
    taken = true;  // no bell of its own: sleep as service-mode callers do
    return 0;
  }
  std::uint64_t mine = 0;
  std::optional<Duration> timeout;
  {
    Turn turn(*this);
    if (done()) return 0;
    const EventLoop::Sleep sleep = loop_.prepare_sleep(max);
    if (sleep.busy) {
      loop_.finish_sleep(sleep, std::nullopt);
      (void)loop_.run_once();
      return 0;
    }
    timeout = sleep.timeout;
    mine = begin_sleep(sleep, bell);
    ++beside_sleeps_;
  }
  const Woken w = block_beside(fds, *bell, timeout, mask);
  {
    Turn turn(*this, mine);
    if (sleep_id_ == mine) {
      finish_loop_sleep(w.how(loop_));
    } else {
      taken = true;
    }
    (void)loop_.run_once();
  }
  if (w.r < 0) {
    errno = w.err;
    return -1;
  }
  return static_cast<int>(w.r);
}

WaitEnd Stack::Core::wait(const WaitPoint& ready, std::uint32_t seen,
                    std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (config_.mode == StackMode::service_thread) {
    return ready.wait(seen, deadline, config_.loop.spin, config_.loop.idle);
  }
  // Inline and hybrid: this thread drives the stack until `ready` moves, one
  // pass at a time under the lock, so other callers get their turn in between.
  using clock = std::chrono::steady_clock;
  clock::time_point idle_since{};  // the epoch: not idle
  const std::uint64_t signals = signal_count();
  bool beside_taken = false;
  bool slept = false;  // beside the stack: woken, it spins no more
  for (;;) {
    std::size_t work;
    {
      Turn turn(*this);
      work = loop_.run_once();
    }
    if (ready.gen() != seen) return WaitEnd::moved;
    if (signal_count() != signals) return WaitEnd::interrupted;
    auto now = clock::now();
    if (deadline && now >= *deadline) return WaitEnd::deadline;
    // Another caller is waiting for the lock: let it have its turn (the mutex
    // is not fair, and this thread would take it straight back).
    for (int i = 0; i < 64 && contenders_.load(std::memory_order_relaxed) != 0; ++i) std::this_thread::yield();
    if (work != 0) {
      idle_since = {};
      slept = false;
      continue;
    }
    if (config_.loop.idle == IdleMode::busy_poll) {
      cpu_relax();
      continue;
    }
    if (idle_since == clock::time_point{}) idle_since = now;
    if (now - idle_since < config_.loop.spin && !slept) {
      idle_pause(config_.loop.idle);
      continue;
    }
    if (config_.mode == StackMode::hybrid) {
      // Sleep beside the stack, running it on each wake-up; or, once another
      // caller has woken us from such a sleep (the stack is busy), as a
      // service-mode caller does, its thread running it meanwhile. (The
      // first needs the program's handlers counted: ppoll ends with EINTR
      // for all of them, and only those without SA_RESTART end the call.
      // Without a count the futex sleep leaves that to the kernel.)
      if (!beside_taken && g_signal_count.load(std::memory_order_relaxed) != nullptr) {
        std::optional<WaitEnd> end = wait_beside(ready, seen, deadline, signals, beside_taken);
        if (end) return *end;
        slept = true;
        continue;
      }
      hand_over();
      return ready.wait_since(signals, seen, deadline, std::chrono::nanoseconds(0), config_.loop.idle);
    }
    // Sleep in the loop until the network, a timer or another caller (who
    // wakes us in lock_inline) has something.
    std::optional<Duration> max;
    if (deadline) max = std::chrono::duration_cast<Duration>(*deadline - now);
    {
      Turn turn(*this);
      // Not while another caller waits for the lock: its wake-up may have
      // been spent on an earlier sleep, and it would wait for this one.
      if (ready.gen() == seen && contenders_.load(std::memory_order_seq_cst) == 0) loop_.wait(max);
    }
    idle_since = {};
  }
}

std::optional<WaitEnd> Stack::Core::wait_beside(const WaitPoint& ready, std::uint32_t seen,
                                          std::optional<std::chrono::steady_clock::time_point> deadline,
                                          std::uint64_t signals, bool& taken) {
  // Every signal is blocked from the last look at the count until ppoll
  // puts the thread's mask back for its sleep, so a handler cannot land
  // unseen between the two; one that asks for a restart (SA_RESTART) ends
  // the sleep and not the wait.
  sigset_t all;
  sigset_t mine;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &mine);
  struct Restore {
    const sigset_t& mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{mine};
  if (signal_count() != signals) return WaitEnd::interrupted;
  std::optional<Duration> max;
  if (deadline) {
    max = std::chrono::duration_cast<Duration>(*deadline - std::chrono::steady_clock::now());
    if (max->count() <= 0) return WaitEnd::deadline;
  }
  (void)sleep_beside({}, max, &mine, [&] { return ready.gen() != seen; }, taken);
  return std::nullopt;  // the wait's loop looks again
}

void Stack::Core::hand_over() noexcept {
  if (config_.mode != StackMode::hybrid) return;
  wanted_.store(true, std::memory_order_seq_cst);
  kick_.bump();
}

// The hybrid stack's thread: it runs the stack while no caller does, and
// otherwise stays parked, waking to see whether the callers have gone quiet
// (no syscall on the callers' path: they never wake it, except hand_over()
// before a sleep). It looks after hand_back, and while the callers keep
// calling, half as often each time, down to once every kLongestLook
// hand_backs: each look is a wake-up on some program thread's CPU, and at
// one every 500 us it put 1 % of a 14-byte sockperf ping-pong's exchanges
// at 30 us (docs/BENCHMARKS.md). So calls that stop are noticed
// within hand_back to kLongestLook x hand_back.
void Stack::Core::drive_while_alone() {
  using clock = std::chrono::steady_clock;
  const auto longest = config_.hand_back * kLongestLook;
  for (;;) {
    // Sampled before trying: a kick from now on (while it runs the stack,
    // or finds a caller holding it) wakes the park below at once.
    std::uint32_t gen = kick_.gen();
    // While a caller sleeps beside the stack, it runs it: look again only
    // now and then.
    auto look = run_alone() ? config_.hand_back : longest;
    for (;;) {
      if (stopping_.load(std::memory_order_acquire)) return;
      const std::uint64_t before = entries_.load(std::memory_order_relaxed);
      const WaitEnd e = kick_.wait(gen, clock::now() + look, std::chrono::nanoseconds(0));
      if (stopping_.load(std::memory_order_acquire)) return;
      if (e == WaitEnd::moved) break;
      looks_.fetch_add(1, std::memory_order_relaxed);
      if (entries_.load(std::memory_order_relaxed) == before && contenders_.load(std::memory_order_relaxed) == 0) {
        break;
      }
      look = std::min(look * 2, longest);
      gen = kick_.gen();
    }
  }
}

// Runs the stack, with its idle policy, until a caller wants it. It sleeps
// without the lock: a call that comes meanwhile takes the stack at once,
// instead of waking the thread (tens of microseconds in a VM) and waiting
// for it to let go.
bool Stack::Core::run_alone() {
  if (!inline_mu_.try_lock()) return true;  // a caller has it
  if (sleep_id_ != 0) {
    // A caller sleeps beside the stack and runs it when anything comes:
    // nothing for the thread to do.
    inline_mu_.unlock();
    return false;
  }
  wanted_.store(false, std::memory_order_seq_cst);
  takeovers_.fetch_add(1, std::memory_order_relaxed);
  loop_.enter();
  bool held = true;
  struct Release {
    Core* s;
    bool& held;
    ~Release() {
      if (held) s->unlock_inline();
    }
  } release{this, held};
  using clock = std::chrono::steady_clock;
  std::optional<clock::time_point> idle_since;
  // Woken with nothing to do (a port's back-off timer): back to sleep
  // without the spin, which is for work that comes in bursts. (Spinning
  // after each of a 1 ms back-off's wake-ups cost an idle xkrun process
  // a fifth of a core with its 200 us spin.)
  bool woke_idle = false;
  while (!stopping_.load(std::memory_order_relaxed) && contenders_.load(std::memory_order_seq_cst) == 0) {
    if (loop_.run_once() != 0) {
      idle_since.reset();
      woke_idle = false;
      continue;
    }
    if (config_.loop.idle == IdleMode::busy_poll) {
      cpu_relax();
      continue;
    }
    const auto now = clock::now();
    if (!idle_since) idle_since = now;
    if (now - *idle_since < config_.loop.spin && !woke_idle) {
      idle_pause(config_.loop.idle);
      continue;
    }
    idle_since.reset();
    // A caller wakes it (lock_inline), as the network and the timers do.
    const EventLoop::Sleep sleep = loop_.prepare_sleep();
    if (sleep.busy) {
      loop_.finish_sleep(sleep, std::nullopt);
      continue;
    }
    const std::uint64_t mine = begin_sleep(sleep, thread_bell_);
    loop_.leave();
    inline_mu_.unlock();
    held = false;
    const Woken w = block_beside({}, *thread_bell_, sleep.timeout, nullptr);
    // A caller that has the stack now, or had it meanwhile, finished the
    // sleep: the calls are on, and the thread parks (drive_while_alone).
    if (!inline_mu_.try_lock()) return true;
    held = true;
    loop_.enter();
    if (sleep_id_ != mine) return true;
    finish_loop_sleep(w.how(loop_));
    woke_idle = true;
  }
  return true;
}

bool Stack::Core::wait_for_link(std::chrono::milliseconds limit) {
  auto* net = graph_->find_as<Driver>("net0");
  if (net == nullptr || net->link_state() == Driver::Link::none) return true;
  // A memif peer connects through DPDK's interrupt thread, a shm peer
  // through the loop; keep the stack running meanwhile so whatever arrives
  // is handled as usual.
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (net->link_state() == Driver::Link::down) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    for (int i = 0; i < 100; ++i) loop_.run_once();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // What ARP announced while the link was down (a memif client's, always)
  // reached nobody; a neighbour may still map our address to the MAC of the
  // process that had it before us. (Not a node's: its address is filterd's,
  // which answers for it.)
  if (config_.filterd.empty()) {
    for (Protocol* p : graph_->protocols()) {
      if (auto* arp = dynamic_cast<arp::ArpProtocol*>(p)) arp->announce();
      if (auto* nd = dynamic_cast<nd::NdProtocol*>(p)) nd->link_up();
    }
    (void)loop_.run_once();  // out now
    // IPv6 addresses are usable once their duplicate checks pass (about a
    // second, RFC 4862): a program's first connect should not find them
    // tentative.
    for (Protocol* p : graph_->protocols()) {
      auto* nd = dynamic_cast<nd::NdProtocol*>(p);
      while (nd != nullptr && nd->checks_pending()) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        for (int i = 0; i < 100; ++i) loop_.run_once();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  return true;
}

std::size_t Stack::Core::poll() {
  if (config_.mode == StackMode::service_thread) return 0;
  Turn turn(*this);
  return loop_.run_once();
}

}  // namespace xk

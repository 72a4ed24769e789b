#pragma once
// What every standalone xk program shares: the stack flags (--port, --ip, ...)
// and the graph they compose, a registry of every kind the program can use,
// SIGINT/SIGTERM read from the event loop, waiting for the link, and the
// counters table at exit. Apps keep only their own logic.

#include <chrono>
#include <charconv>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "xk/address.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/options.hpp"
#include "xk/port_authority.hpp"
#include "xk/stack.hpp"

namespace xk {
class FilterdClient;
}

namespace xk::apps {

// A bad command line: the message is printed with "try '<prog> --help'", exit 2.
struct UsageError {
  std::string what;
};

template <class T>
T parse_number(std::string_view flag, std::string_view text, T min, T max) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty() || v < min || v > max) {
    throw UsageError{std::string(flag) + ": '" + std::string(text) + "' is not a number in " + std::to_string(min) +
                     ".." + std::to_string(max)};
  }
  return v;
}

// One flag of a command line: `--name value` or `--name=value`.
class Flag {
 public:
  std::string_view name() const noexcept { return name_; }
  // The flag's value (the inline one, or the next word).
  std::string_view value();
  // Throws if the flag was given a value inline.
  void no_value() const;

 private:
  friend void for_each_flag(std::span<const std::string_view>, const std::function<void(Flag&)>&);
  std::string_view name_;
  std::optional<std::string_view> inline_;
  std::span<const std::string_view> words_;
  std::size_t* next_ = nullptr;
};

// Calls `fn` for each flag in `words` (the mode word already taken off).
void for_each_flag(std::span<const std::string_view> words, const std::function<void(Flag&)>& fn);

// A positive number of seconds, at most an hour.
double parse_seconds(std::string_view flag, std::string_view text);

// A byte count with an optional binary suffix: "1500", "64k", "100m", "2g"
// (at most 16 TiB).
std::uint64_t parse_bytes(std::string_view flag, std::string_view text);

// "A.B.C.D:PORT" or "[X:X::X]:PORT" (port 1..65535).
std::pair<IpAddr, std::uint16_t> parse_endpoint(std::string_view flag, std::string_view text);

// The flags that describe the stack, shared by every app:
//   --port DEVARGS --port-opts 'K=V ..' --ip PREFIX.. --gw ADDR.. --mac MAC
//   --csum on|off --tcp-opts 'K=V ..' --capture FILE --graph FILE
struct StackFlags {
  std::string port;
  std::string port_opts;
  std::string tcp_opts;
  std::vector<IpCidr> ips;  // --ip, repeated: at most one IPv4
  std::vector<IpAddr> gws;  // --gw, repeated: at most one per family
  std::optional<MacAddr> mac;
  bool csum = true;
  std::string capture;
  std::string graph_file;
  std::string filterd;  // attach to filterd's control socket (the graph comes from it)
  std::string filterd_token;  // over TCP: the file with filterd's token
  unsigned stacks = 1;    // --stacks K behind filterd: K stacks, one channel (queue) each
  std::vector<int> cpus;  // --cpus LIST: stack q's thread pinned to cpus[q % size]
  bool composed_flag_seen = false;  // any flag other than --graph, --filterd, --stacks, --cpus

  // Takes `flag` if it is a stack flag, reading its value with `value()`.
  template <class ValueFn>
  bool take(std::string_view flag, ValueFn&& value) {
    if (flag == "--graph") {
      graph_file = std::string(value());
      return true;
    }
    if (flag == "--filterd") {
      filterd = std::string(value());
      if (filterd.empty()) throw UsageError{"--filterd: empty socket path"};
      return true;
    }
    if (flag == "--filterd-token") {
      filterd_token = std::string(value());
      if (filterd_token.empty()) throw UsageError{"--filterd-token: empty file name"};
      return true;
    }
    if (flag == "--stacks") {
      stacks = parse_number<unsigned>(flag, value(), 1, 64);
      return true;
    }
    if (flag == "--cpus") {
      cpus = parse_cpus(flag, value());
      return true;
    }
    if (!is_composed_flag(flag)) return false;
    composed_flag_seen = true;
    set(flag, value());
    return true;
  }
  // After all flags: either --graph alone, or at least --port and --ip.
  void validate() const;

  static bool is_composed_flag(std::string_view flag);
  // "0,1,3": CPU numbers 0..4095, at least one.
  static std::vector<int> parse_cpus(std::string_view flag, std::string_view text);
  void set(std::string_view flag, std::string_view value);
};

// Help text for the stack flags (indented two spaces, one flag a line).
extern const char* const kStackFlagsHelp;

// What every app's command line holds besides its own flags. An app's Args
// derives from it.
struct CommonArgs {
  StackFlags stack;
  double link_wait_s = 10;  // --link-wait SEC
  IdleMode idle_mode = IdleMode::busy_poll;  // --idle busy|sleep|yield
  IdleMode idle() const noexcept { return idle_mode; }
};

// The shape of an app's command line: `prog ROLE [flags]` (or `prog [flags]`
// without roles).
struct CommandLineSpec {
  const char* usage_head;  // --help prints usage_head, kStackFlagsHelp, usage_tail
  const char* usage_tail;
  // "role" or "mode", as the app's messages call the first word; with no
  // roles there is no first word.
  const char* role_noun = "role";
  struct Role {
    std::string_view word;
    std::string_view alias = {};  // e.g. "-r" for "receive"
  };
  std::vector<Role> roles;
  bool idle_flag = true;  // whether the app takes --idle
};

// Parses what every app parses alike: --help or -h anywhere (the usage on
// stdout, exit 0), the role word ("missing role: server or client",
// "unknown role 'x': expected server or client"), the stack flags,
// --link-wait and --idle; every other flag goes to `fn`. Returns the role's
// index in spec.roles (0 without roles). The caller validates the stack
// flags once its own flags are in.
std::size_t parse_command_line(int argc, char** argv, const CommandLineSpec& spec, CommonArgs& common,
                               const std::function<void(Flag&)>& fn);

// The graph the flags describe:
//   dpdk net0 -> [capture cap0] -> eth eth0 -> arp arp0 -> ipv4 ip0 -> icmp icmp0, udp udp0, tcp tcp0
// or the text of --graph (`source` says which, for error messages).
struct StackSpec {
  std::string text;
  std::string source;
};
StackSpec stack_spec(const StackFlags& flags);

// SIGINT/SIGTERM, blocked in every thread (call block() before the EAL starts
// its threads, so they inherit the mask) and read from a signalfd that the
// loop polls: the loop stops, and the program tears down normally.
class SignalSource final : public Pollable {
 public:
  explicit SignalSource(EventLoop& loop);
  ~SignalSource() override;
  SignalSource(const SignalSource&) = delete;
  SignalSource& operator=(const SignalSource&) = delete;

  static void block();
  // Reads the signalfd after every sleep and every kCheckEvery passes: a
  // busy-polling loop must not pay a system call per pass.
  std::size_t poll(std::size_t) override;
  int wait_fd() const noexcept override { return fd_; }
  void after_sleep() noexcept override { passes_ = kCheckEvery; }
  // The signal that stopped the loop, or 0.
  int signal() const noexcept { return signal_; }
  const char* signal_name() const noexcept;

 private:
  static constexpr unsigned kCheckEvery = 4096;  // well under a millisecond of passes
  EventLoop& loop_;
  int fd_ = -1;
  int signal_ = 0;
  unsigned passes_ = kCheckEvery;
};

// "192.0.2.10/24 on port 0 (aa:bb:.., mtu 1500)"
std::string describe_stack(Graph& graph);

// Every counter of the graph and the loop, as a table on stdout.
void print_counters(const Graph& graph, EventLoop& loop);

// CPU seconds this process has used (user + system).
double process_cpu_seconds();

// What every standalone app runs on: the graph the flags describe, as a
// libxk Stack (xk/stack.hpp) driven inline by the app's own loop, with
// SIGINT/SIGTERM stopping the loop. The flags are turned into a StackConfig
// (stack_config()), so the apps and the library build stacks one way.
// Construction throws std::runtime_error saying what failed.
class AppStack {
 public:
  AppStack(const char* prog, const StackFlags& flags, IdleMode idle);
  ~AppStack();
  AppStack(const AppStack&) = delete;
  AppStack& operator=(const AppStack&) = delete;

  EventLoop& loop() noexcept { return stack_->loop(); }
  Graph& graph() noexcept { return stack_->graph(); }
  // SIGINT/SIGTERM as this stack's loop read them (an AppNode's stacks read
  // none: the node does).
  const SignalSource& signals() const noexcept { return signals_; }
  // The instance `name` of type T, or a runtime_error naming what is missing.
  template <class T>
  T& require(std::string_view name) {
    if (T* p = graph().find_as<T>(name)) return *p;
    throw std::runtime_error("the graph has no " + std::string(name) + " of the kind this program needs");
  }
  // Says "stack ... built, waiting for the link" and waits; throws when the
  // link stays down (scripts wait for that line before starting a peer).
  void wait_for_link(double seconds, bool announce = true);
  // "stopped by SIGTERM" and the counters, if a signal stopped the loop.
  void report_signal(bool always_counters = false);

 private:
  friend class AppNode;
  // Stack `q` of an AppNode: SIGINT/SIGTERM are the node's to read.
  AppStack(const char* prog, std::unique_ptr<Stack> stack);

  const char* prog_;
  std::unique_ptr<Stack> stack_;
  SignalSource signals_;
  bool signals_added_ = false;  // a standalone stack's loop reads them
};

// The StackConfig the flags describe: a graph of its own (stack_spec), or
// filterd's; inline mode, the node named after the program, and no wait for
// the link in create() (AppStack::wait_for_link says it waits first).
StackConfig stack_config(const char* prog, const StackFlags& flags, IdleMode idle);

// A node of several stacks behind filterd (--stacks K): one control
// connection (HELLO with queues=K), K AppStacks -- Stack::create_node's --
// each with its own channel, event loop and thread, pinned to its CPU
// (--cpus). run() starts the threads and waits for SIGINT/SIGTERM or
// `done()`, then stops them all.
class AppNode {
 public:
  AppNode(const char* prog, const StackFlags& flags, IdleMode idle);
  ~AppNode();
  AppNode(const AppNode&) = delete;
  AppNode& operator=(const AppNode&) = delete;

  std::size_t size() const noexcept { return stacks_.size(); }
  AppStack& stack(std::size_t q) { return *stacks_[q]; }
  // The CPU stack q runs on (-1: not pinned).
  int cpu(std::size_t q) const noexcept;
  // Runs body(q) on stack q's thread for every q (each runs its loop);
  // polls `done` every 10 ms on this thread, and on done, a signal, or any
  // body returning, stops every loop. Returns when all bodies have.
  void run(const std::function<void(std::size_t)>& body, const std::function<bool()>& done);
  // The signal that stopped the node, or 0.
  int signal() const noexcept { return signal_; }

 private:
  const char* prog_;
  StackFlags flags_;
  std::vector<std::unique_ptr<AppStack>> stacks_;  // they share the control connection
  int signal_ = 0;
};

// main() of an app: parse (UsageError: exit 2 with a hint), run (any
// exception: exit 1 with its message).
int app_main(const char* prog, const std::function<void()>& parse, const std::function<int()>& run);

}  // namespace xk::apps

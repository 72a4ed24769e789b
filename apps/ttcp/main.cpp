// xk-ttcp: ttcp on a standalone xk stack (docs/apps-ttcp.md).
//
//   xk-ttcp receive|-r STACK [--tcp-port 5001] [--connections N] [--group] [--buflen N]
//                     [--rcvbuf N] [--verify on|off] [--timeout SEC] [--progress SEC]
//   xk-ttcp transmit|-t STACK --peer A.B.C.D:P [--bytes N | --seconds S] [--connections K]
//                     [--buflen N] [--sndbuf N] [--nodelay] [--verify on|off] [--seed S]
//                     [--label TEXT]
//
// The transmitter writes the test stream of xk-tcp-perf (xk/apps/stream.hpp)
// in --buflen writes, shuts its side down and waits for the receiver's close;
// with --connections K it does so on K connections at once, one event loop.
// The receiver serves its --connections all at once in one event loop, reads
// each to its end and closes it. Both print `RESULT key=value ...` lines:
// these lines are what the experiment runner (xk-scale) parses, so keys are
// only ever added, never renamed.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "xk/apps/servers.hpp"
#include "xk/apps/digest.hpp"
#include "xk/apps/stack.hpp"
#include "xk/apps/stream.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/timer.hpp"

namespace {

constexpr const char* kProg = "xk-ttcp";
constexpr int kExitOk = 0;
constexpr int kExitFail = 1;

using xk::apps::finish_handshakes;
using xk::apps::parse_bytes;
using xk::apps::parse_number;
using xk::apps::UsageError;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsageHead = R"(usage: xk-ttcp receive|transmit [options]     (-r, -t: the same)

ttcp on a standalone xk stack: bulk TCP transfer, reported as Gbit/s and CPU seconds per GB.

stack:
)";
constexpr const char* kUsageTail = R"(  --link-wait SEC     wait this long for the port's link (default 10)
  --idle MODE         busy (default), sleep or yield: how the loop idles

receive:
  --tcp-port N        port to listen on (default 5001)
  --connections N     connections to serve, all at once; exit when all have ended (default 1)
  --group             behind filterd (--filterd): share the port with other nodes
  --progress SEC      print PROGRESS bytes=B gbps=G every SEC seconds

transmit:
  --peer A.B.C.D:P    the receiver (required)
  --bytes N           bytes to send on each connection (default 100m; suffixes k, m, g)
  --seconds S         send for S seconds instead of a byte count
  --connections K     open K connections at once (default 1); the RESULT line counts
                      them all, and K > 1 adds one line per connection (conn=)
  --seed S            the stream's seed (default 1)
  --label TEXT        copied to the RESULT line as label=TEXT (no spaces)

both:
  --buflen N          bytes per write / at most per read (default 128k)
  --sndbuf N, --rcvbuf N  socket buffers (default: the stack's; window scaling and
                      the rest of TCP's options: --tcp-opts)
  --nodelay           TCP_NODELAY
  --verify on|off     SHA-256 of the stream (default on; off saves about 4 ns per byte)
  --timeout SEC       fail after this long without progress: no new connection and
                      no byte moved (default 30)
  --stats             a STATS line per connection (srtt, cwnd, retransmits, ...),
                      and the stack's counters at the end
  --help

exit status: 0 success, 1 failure, 2 bad command line
)";

const xk::apps::CommandLineSpec kCommandLine{
    .usage_head = kUsageHead,
    .usage_tail = kUsageTail,
    .role_noun = "role",
    .roles = {{"receive", "-r"}, {"transmit", "-t"}},
};

// Housekeeping (timeout, progress, the end of --seconds) runs this often, from
// a timer, so a sleeping loop wakes for it.
constexpr auto kTick = std::chrono::milliseconds(10);

struct Args : xk::apps::CommonArgs {
  enum class Role { receive, transmit } role = Role::receive;  // as in kCommandLine.roles
  // receive
  std::uint16_t port = 5001;
  std::uint32_t connections = 1;
  bool group = false;
  double progress_s = 0;
  // transmit
  std::optional<xk::IpAddr> peer;
  std::uint16_t peer_port = 0;
  std::uint64_t bytes = 100ull << 20;
  double seconds = 0;  // > 0: send for this long instead of `bytes`
  std::uint64_t seed = 1;
  std::string label;
  // both
  std::size_t buflen = 128 << 10;
  std::optional<std::size_t> sndbuf, rcvbuf;
  bool nodelay = false;
  bool verify = true;
  double timeout_s = 30;
  bool stats = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  std::vector<std::string> receive_only, transmit_only;  // flags given, for the role check
  std::optional<std::uint64_t> bytes;
  std::size_t role = xk::apps::parse_command_line(argc, argv, kCommandLine, a, [&](xk::apps::Flag& f) {
    const std::string name(f.name());
    if (name == "--tcp-port") {
      a.port = parse_number<std::uint16_t>(name, f.value(), 1, 65535);
      receive_only.push_back(name);
    } else if (name == "--connections") {
      a.connections = parse_number<std::uint32_t>(name, f.value(), 1, 65536);
    } else if (name == "--group") {
      f.no_value();
      a.group = true;
      receive_only.push_back(name);
    } else if (name == "--progress") {
      a.progress_s = xk::apps::parse_seconds(name, f.value());
      receive_only.push_back(name);
    } else if (name == "--peer") {
      std::tie(a.peer, a.peer_port) = xk::apps::parse_endpoint(name, f.value());
      transmit_only.push_back(name);
    } else if (name == "--bytes") {
      bytes = parse_bytes(name, f.value());
      transmit_only.push_back(name);
    } else if (name == "--seconds") {
      a.seconds = xk::apps::parse_seconds(name, f.value());
      transmit_only.push_back(name);
    } else if (name == "--seed") {
      a.seed = parse_number<std::uint64_t>(name, f.value(), 0, ~std::uint64_t{0});
      transmit_only.push_back(name);
    } else if (name == "--label") {
      auto v = f.value();
      if (v.empty() || v.size() > 200 || v.find_first_of(" \t\r\n") != std::string_view::npos) {
        throw UsageError{"--label: 1 to 200 characters, no spaces (it is one key=value of the RESULT line)"};
      }
      a.label = std::string(v);
      transmit_only.push_back(name);
    } else if (name == "--buflen") {
      auto v = parse_bytes(name, f.value());
      if (v < 1 || v > (64u << 20)) throw UsageError{"--buflen: 1 byte to 64m"};
      a.buflen = static_cast<std::size_t>(v);
    } else if (name == "--sndbuf" || name == "--rcvbuf") {
      auto v = parse_bytes(name, f.value());
      if (v < 1 || v > (1u << 30)) throw UsageError{name + ": 1 byte to 1g"};
      (name == "--sndbuf" ? a.sndbuf : a.rcvbuf) = static_cast<std::size_t>(v);
    } else if (name == "--nodelay") {
      f.no_value();
      a.nodelay = true;
    } else if (name == "--verify") {
      auto v = f.value();
      if (v != "on" && v != "off") throw UsageError{"--verify: on or off"};
      a.verify = v == "on";
    } else if (name == "--timeout") {
      a.timeout_s = xk::apps::parse_seconds(name, f.value());
    } else if (name == "--stats") {
      f.no_value();
      a.stats = true;
    } else {
      throw UsageError{"unknown option '" + name + "'"};
    }
  });
  a.role = static_cast<Args::Role>(role);
  a.stack.validate();
  if (a.role == Args::Role::receive) {
    if (!transmit_only.empty()) throw UsageError{transmit_only.front() + " is for transmit"};
  } else {
    if (!receive_only.empty()) throw UsageError{receive_only.front() + " is for receive"};
    if (!a.peer) throw UsageError{"transmit: --peer A.B.C.D:PORT or [X:X::X]:PORT is required"};
    if (bytes && a.seconds > 0) throw UsageError{"--bytes and --seconds: give one of them"};
    if (bytes) a.bytes = *bytes;
  }
  return a;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
double gbps(std::uint64_t bytes, double secs) { return secs > 0 ? static_cast<double>(bytes) * 8 / secs / 1e9 : 0.0; }
// CPU seconds per 1e9 bytes moved (0 when nothing moved).
double cpu_per_gb(double cpu_s, std::uint64_t bytes) {
  return bytes > 0 ? cpu_s / (static_cast<double>(bytes) / 1e9) : 0.0;
}

void apply_socket_options(xk::tcp::TcpSocket& s, const Args& a) {
  if (a.sndbuf) s.set_sndbuf(*a.sndbuf);
  if (a.rcvbuf) s.set_rcvbuf(*a.rcvbuf);
  if (a.nodelay) s.set_nodelay(true);
}

// ---- receive -----------------------------------------------------------------

// Accepts --connections connections and reads them all at once; the loop
// stops when every one has ended (or nothing moved for --timeout).
class Receiver final : public xk::Pollable {
 public:
  Receiver(xk::tcp::TcpListener& l, xk::EventLoop& loop, const Args& a)
      : l_(l), loop_(loop), a_(a), tick_(loop.timers(), [this] { on_tick(); }) {
    last_progress_ = last_report_ = Clock::now();
    tick_.arm_after(kTick);
  }

  std::size_t poll(std::size_t) override {
    std::size_t work = 0;
    while (accepted_ < a_.connections) {
      auto s = l_.accept();
      if (!s) break;
      apply_socket_options(*s, a_);
      auto c = std::make_unique<Conn>();
      c->sock = std::move(*s);
      c->id = accepted_++;
      c->start = Clock::now();
      if (c->id == 0) {
        first_ = c->start;
        cpu_first_ = xk::apps::process_cpu_seconds();
      }
      conns_.push_back(std::move(c));
      last_progress_ = Clock::now();
      ++work;
    }
    // Every connection expected is in: a later one is refused rather than
    // left in the backlog unanswered.
    if (accepted_ == a_.connections && l_.is_open()) (void)l_.close();
    for (auto& c : conns_) work += serve(*c);
    if (work != 0) std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->done; });
    if (ended_ == a_.connections) loop_.stop();
    return work;
  }
  bool before_sleep() noexcept override {
    if (l_.is_open() && (l_.events() & xk::tcp::ev_acceptable)) return false;
    return std::none_of(conns_.begin(), conns_.end(), [](const std::unique_ptr<Conn>& c) {
      return (c->sock.events() & (xk::tcp::ev_readable | xk::tcp::ev_error | xk::tcp::ev_hangup)) != 0;
    });
  }

  // The loop has stopped: no more housekeeping (it would run again in
  // finish_handshakes()).
  void quiesce() noexcept { tick_.cancel(); }
  bool timed_out() const noexcept { return timed_out_; }
  bool complete() const noexcept { return ended_ == a_.connections; }
  std::uint64_t failures() const noexcept { return failures_; }
  std::uint64_t ended() const noexcept { return ended_; }
  std::uint64_t bytes() const noexcept { return total_; }
  // From the first accept to the last end.
  double seconds() const noexcept { return accepted_ > 0 ? seconds_between(first_, last_end_) : 0.0; }
  // The process's CPU seconds over the same span (the transfer's, without
  // the start-up and the wait for the first connection).
  double transfer_cpu() const noexcept { return accepted_ > 0 ? cpu_last_end_ - cpu_first_ : 0.0; }

 private:
  struct Conn {
    xk::tcp::TcpSocket sock;
    xk::apps::StreamDigest sha;
    std::uint32_t id = 0;
    std::uint64_t bytes = 0;
    Clock::time_point start{};
    bool done = false;
  };

  std::size_t serve(Conn& c) {
    std::size_t work = 0;
    // A bounded number of reads per pass: one fast connection must not keep
    // the others (and the driver) waiting.
    for (int i = 0; i < 16 && !c.done; ++i) {
      auto m = c.sock.read_msg(a_.buflen);
      if (!m) {
        if (m.error() == xk::Errc::would_block) break;
        std::fprintf(stderr, "%s: connection %u (peer %s): %s after %llu bytes\n", kProg, c.id, peer(c).c_str(),
                     xk::to_string(m.error()), static_cast<unsigned long long>(c.bytes));
        ++failures_;
        end(c, false);
        return work + 1;
      }
      ++work;
      last_progress_ = Clock::now();
      if (m->empty()) {  // the peer's FIN
        end(c, true);
        return work;
      }
      c.bytes += m->size();
      total_ += m->size();
      if (a_.verify) {
        for (const xk::Frag& f : m->fragments()) c.sha.update(f.bytes());
      }
    }
    return work;
  }

  static std::string peer(const Conn& c) {
    return xk::to_string(c.sock.tuple().remote);
  }

  void end(Conn& c, bool eof) {
    auto now = Clock::now();
    last_end_ = now;
    cpu_last_end_ = xk::apps::process_cpu_seconds();
    if (eof) {
      double secs = seconds_between(c.start, now);
      std::printf("RESULT role=receiver conn=%u peer=%s bytes=%llu seconds=%.6f gbps=%.3f", c.id, peer(c).c_str(),
                  static_cast<unsigned long long>(c.bytes), secs, gbps(c.bytes, secs));
      if (a_.verify) std::printf(" sha256=%s", c.sha.hex().c_str());
      std::printf("\n");
    }
    if (a_.stats) xk::apps::print_conn_stats("receiver", c.sock);
    std::fflush(stdout);
    (void)c.sock.close();
    c.done = true;
    ++ended_;
  }

  void on_tick() {
    auto now = Clock::now();
    if (ended_ < a_.connections && seconds_between(last_progress_, now) > a_.timeout_s) {
      std::fprintf(stderr, "%s: no progress for %.1f s: %u of %u connections accepted, %llu ended\n", kProg,
                   a_.timeout_s, accepted_, a_.connections, static_cast<unsigned long long>(ended_));
      timed_out_ = true;
      loop_.stop();
      return;
    }
    if (a_.progress_s > 0 && seconds_between(last_report_, now) >= a_.progress_s) {
      // The rate since the last PROGRESS line; bytes are the total so far.
      std::printf("PROGRESS bytes=%llu gbps=%.3f\n", static_cast<unsigned long long>(total_),
                  gbps(total_ - reported_, seconds_between(last_report_, now)));
      std::fflush(stdout);
      last_report_ = now;
      reported_ = total_;
    }
    tick_.arm_after(kTick);
  }

  xk::tcp::TcpListener& l_;
  xk::EventLoop& loop_;
  const Args& a_;
  xk::Timer tick_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::uint32_t accepted_ = 0;
  std::uint64_t ended_ = 0;
  std::uint64_t failures_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t reported_ = 0;
  bool timed_out_ = false;
  Clock::time_point first_{}, last_end_{}, last_progress_{}, last_report_{};
  double cpu_first_ = 0, cpu_last_end_ = 0;
};

int run_receive(xk::apps::AppStack& stack, xk::tcp::TcpProtocol& tcp, const Args& a) {
  xk::EventLoop& loop = stack.loop();
  auto l = tcp.listen(xk::IpAddr{}, xk::Port{a.port}, std::max<std::size_t>(128, a.connections), a.group);
  if (!l) {
    std::fprintf(stderr, "%s: cannot listen on port %u: %s\n", kProg, a.port, xk::to_string(l.error()));
    return kExitFail;
  }
  Receiver rx(*l, loop, a);
  loop.add(rx);
  std::printf("%s: receiving %u connection%s on tcp port %u: ready\n", kProg, a.connections,
              a.connections == 1 ? "" : "s", a.port);
  std::fflush(stdout);
  loop.run();
  loop.remove(rx);
  rx.quiesce();
  if (l->is_open()) (void)l->close();
  finish_handshakes(loop, tcp);
  int rc = kExitOk;
  if (rx.complete()) {
    double cpu = xk::apps::process_cpu_seconds();
    std::printf("RESULT role=receiver total=1 connections=%llu bytes=%llu seconds=%.6f gbps=%.3f cpu_s=%.3f "
                "cpu_s_per_gb=%.3f failed=%llu xfer_cpu_s=%.3f\n",
                static_cast<unsigned long long>(rx.ended()), static_cast<unsigned long long>(rx.bytes()),
                rx.seconds(), gbps(rx.bytes(), rx.seconds()), cpu, cpu_per_gb(cpu, rx.bytes()),
                static_cast<unsigned long long>(rx.failures()), rx.transfer_cpu());
    std::fflush(stdout);
  } else {
    rc = kExitFail;  // timed out or stopped by a signal
  }
  if (rx.failures() != 0 || rx.timed_out()) rc = kExitFail;
  return rc;
}

// ---- transmit ----------------------------------------------------------------

// What a transmitter tells the run it is part of (the Fleet below).
class TransmitterEvents {
 public:
  virtual void connected() = 0;     // its handshake has ended
  virtual void ended(bool ok) = 0;  // it is done, or has failed (once)

 protected:
  ~TransmitterEvents() = default;
};

// One connection's sender: writes the stream (--bytes of it, or for
// --seconds), shuts its side down and waits for the receiver's close.
class Transmitter final : public xk::Pollable {
 public:
  Transmitter(xk::tcp::TcpSocket& s, xk::EventLoop& loop, const Args& a, const std::vector<std::byte>& block,
              TransmitterEvents& events)
      : s_(s), a_(a), block_(block), tick_(loop.timers(), [this] { on_tick(); }), events_(events) {
    last_progress_ = Clock::now();
    tick_.arm_after(kTick);
  }

  std::size_t poll(std::size_t) override {
    if (done_) return 0;
    if (!connected_) {
      if (s_.state() == xk::tcp::State::syn_sent) return 0;
      if (s_.state() != xk::tcp::State::established) return connect_failed();
      connected_ = true;
      start_ = last_progress_ = Clock::now();
      events_.connected();
    }
    std::size_t work = 0;
    while (!shut_ && more_to_send()) {
      std::size_t off = static_cast<std::size_t>(sent_ % block_.size());
      std::uint64_t want = std::min<std::uint64_t>(a_.buflen, block_.size() - off);
      if (a_.seconds <= 0) want = std::min<std::uint64_t>(want, a_.bytes - sent_);
      auto chunk = std::span<const std::byte>(block_).subspan(off, static_cast<std::size_t>(want));
      auto w = s_.write(chunk);
      if (!w) {
        if (w.error() == xk::Errc::would_block) break;
        return fail(std::string("write: ") + xk::to_string(w.error()));
      }
      if (a_.verify) sha_.update(chunk.first(*w));
      sent_ += *w;
      last_progress_ = Clock::now();
      ++work;
      if (*w < chunk.size()) break;  // the send buffer is full
    }
    if (!shut_ && !more_to_send()) {
      (void)s_.shutdown_write();
      shut_ = true;
      ++work;
    }
    if (shut_) {
      // The receiver closes once it has read everything: wait for its FIN
      // (anything it sends before is read and dropped).
      std::byte b[2048];
      for (;;) {
        auto r = s_.read(b);
        if (!r) {
          if (r.error() != xk::Errc::would_block) return fail(std::string("after sending: ") + xk::to_string(r.error()));
          break;
        }
        ++work;
        if (*r == 0) {
          end_ = Clock::now();
          done_ = true;
          events_.ended(true);
          break;
        }
      }
    }
    return work;
  }
  bool before_sleep() noexcept override {
    if (done_) return true;
    auto ev = s_.events();
    if (ev & (xk::tcp::ev_readable | xk::tcp::ev_error | xk::tcp::ev_hangup)) return false;
    if (connected_ && !shut_ && (ev & xk::tcp::ev_writable)) return false;
    if (!connected_ && s_.state() != xk::tcp::State::syn_sent) return false;
    return true;
  }

  void quiesce() noexcept { tick_.cancel(); }
  bool ok() const noexcept { return done_ && !failed_; }
  std::uint64_t sent() const noexcept { return sent_; }
  double seconds() const noexcept { return seconds_between(start_, end_); }
  Clock::time_point started_at() const noexcept { return start_; }
  Clock::time_point ended_at() const noexcept { return end_; }
  std::string sha256() { return sha_.hex(); }

 private:
  bool more_to_send() const noexcept { return a_.seconds > 0 ? !time_up_ : sent_ < a_.bytes; }

  std::size_t connect_failed() {
    std::byte b[1];
    auto r = s_.read(b);
    return fail(std::string("connect failed: ") + (r ? "closed" : xk::to_string(r.error())));
  }

  std::size_t fail(const std::string& what) {
    std::fprintf(stderr, "%s: %s (%llu bytes sent)\n", kProg, what.c_str(), static_cast<unsigned long long>(sent_));
    failed_ = done_ = true;
    events_.ended(false);
    return 1;
  }

  void on_tick() {
    if (done_) return;
    auto now = Clock::now();
    if (connected_ && a_.seconds > 0 && !time_up_ && seconds_between(start_, now) >= a_.seconds) time_up_ = true;
    if (seconds_between(last_progress_, now) > a_.timeout_s) {
      char what[96];
      std::snprintf(what, sizeof what, "no progress for %.1f s (state %s)", a_.timeout_s,
                    xk::tcp::to_string(s_.state()));
      fail(what);
      return;
    }
    tick_.arm_after(kTick);
  }

  xk::tcp::TcpSocket& s_;
  const Args& a_;
  const std::vector<std::byte>& block_;  // the stream's pattern, shared by all connections
  xk::Timer tick_;
  TransmitterEvents& events_;
  xk::apps::StreamDigest sha_;
  std::uint64_t sent_ = 0;
  bool connected_ = false, shut_ = false, time_up_ = false, done_ = false, failed_ = false;
  Clock::time_point start_{}, end_{}, last_progress_{};
};

// The --connections transmitters of one run, in one loop. The first
// connection goes alone: its SYN resolves the next hop's link address, and
// the others, opened when its handshake ends, do not overflow ARP's queue
// for an unresolved neighbour (a dropped SYN waits a second to be sent again).
class Fleet final : public TransmitterEvents {
 public:
  Fleet(xk::EventLoop& loop, xk::tcp::TcpProtocol& tcp, const Args& a)
      : loop_(loop), tcp_(tcp), a_(a), block_(xk::apps::stream_block(a.seed)), running_(a.connections) {
    socks_.reserve(a.connections);  // the transmitters hold references
    txs_.reserve(a.connections);
  }

  // Opens the first connection and runs the loop until every one has ended
  // or one has failed; false then.
  bool run() {
    if (open()) loop_.run();
    for (auto& tx : txs_) {
      loop_.remove(*tx);
      tx->quiesce();
    }
    return !failed_ && std::all_of(txs_.begin(), txs_.end(), [](const auto& t) { return t->ok(); });
  }

  void connected() override {
    while (socks_.size() < a_.connections && open()) {
    }
  }
  void ended(bool ok) override {
    failed_ = failed_ || !ok;
    if (--running_ == 0 || !ok) loop_.stop();
  }

  const std::vector<std::unique_ptr<Transmitter>>& transmitters() const noexcept { return txs_; }
  std::vector<xk::tcp::TcpSocket>& sockets() noexcept { return socks_; }

 private:
  bool open() {
    xk::tcp::TcpSocket& s = socks_.emplace_back(tcp_.socket());
    apply_socket_options(s, a_);
    if (xk::Status st = s.connect(*a_.peer, xk::Port{a_.peer_port}); !st) {
      std::fprintf(stderr, "%s: connect (connection %zu of %u): %s\n", kProg, socks_.size(), a_.connections,
                   xk::to_string(st.error()));
      failed_ = true;
      loop_.stop();
      return false;
    }
    txs_.push_back(std::make_unique<Transmitter>(s, loop_, a_, block_, *this));
    loop_.add(*txs_.back());
    return true;
  }

  xk::EventLoop& loop_;
  xk::tcp::TcpProtocol& tcp_;
  const Args& a_;
  const std::vector<std::byte> block_;  // the stream's pattern, shared by all connections
  std::vector<xk::tcp::TcpSocket> socks_;
  std::vector<std::unique_ptr<Transmitter>> txs_;
  std::uint32_t running_;
  bool failed_ = false;
};

int run_transmit(xk::apps::AppStack& stack, xk::tcp::TcpProtocol& tcp, const Args& a) {
  xk::EventLoop& loop = stack.loop();
  const double cpu0 = xk::apps::process_cpu_seconds();  // the transfer's CPU starts here
  Fleet fleet(loop, tcp, a);
  const bool ok = fleet.run();
  const auto& txs = fleet.transmitters();
  int rc = kExitFail;
  if (ok) {
    const double cpu = xk::apps::process_cpu_seconds();
    std::uint64_t total = 0;
    Clock::time_point first = txs.front()->started_at(), last = txs.front()->ended_at();
    for (std::size_t i = 0; i < txs.size(); ++i) {
      const Transmitter& t = *txs[i];
      total += t.sent();
      first = std::min(first, t.started_at());
      last = std::max(last, t.ended_at());
      if (txs.size() > 1) {
        std::printf("RESULT role=transmitter conn=%zu bytes=%llu seconds=%.6f gbps=%.3f", i,
                    static_cast<unsigned long long>(t.sent()), t.seconds(), gbps(t.sent(), t.seconds()));
        if (a.verify) std::printf(" sha256=%s", txs[i]->sha256().c_str());
        std::printf("\n");
      }
    }
    // All connections: bytes over the time from the first start to the last end.
    const double secs = seconds_between(first, last);
    // cpu_s: the whole process's life (start-up included); xfer_cpu_s: from
    // the first connect to the last connection's end.
    std::printf("RESULT role=transmitter bytes=%llu seconds=%.6f gbps=%.3f cpu_s=%.3f cpu_s_per_gb=%.3f "
                "xfer_cpu_s=%.3f",
                static_cast<unsigned long long>(total), secs, gbps(total, secs), cpu, cpu_per_gb(cpu, total),
                cpu - cpu0);
    if (txs.size() > 1) std::printf(" connections=%zu", txs.size());
    if (a.verify && txs.size() == 1) std::printf(" sha256=%s", txs.front()->sha256().c_str());
    if (!a.label.empty()) std::printf(" label=%s", a.label.c_str());
    std::printf("\n");
    if (a.stats) {
      for (auto& s : fleet.sockets()) xk::apps::print_conn_stats("transmitter", s);
    }
    std::fflush(stdout);
    rc = kExitOk;
  }
  for (auto& s : fleet.sockets()) (void)s.close();
  finish_handshakes(loop, tcp);
  return rc;
}

int run(const Args& a) {
  xk::apps::AppStack stack(kProg, a.stack, a.idle());
  auto& tcp = stack.require<xk::tcp::TcpProtocol>("tcp0");
  stack.wait_for_link(a.link_wait_s);
  int rc = a.role == Args::Role::receive ? run_receive(stack, tcp, a) : run_transmit(stack, tcp, a);
  if (stack.signals().signal() != 0) rc = kExitFail;
  stack.report_signal(a.stats);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  return xk::apps::app_main(kProg, [&] { args = parse_args(argc, argv); }, [&] { return run(args); });
}

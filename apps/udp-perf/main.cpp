// xk-udp-perf: UDP latency and datagram rate between two standalone xk stacks
// (docs/apps-udp-perf.md).
//
//   xk-udp-perf server   --port DEVARGS --ip A/N [--sink]
//   xk-udp-perf pingpong --port DEVARGS --ip A/N --peer B:P --size 64 --count 100000
//   xk-udp-perf rate     --port DEVARGS --ip A/N --peer B:P --size 64 --seconds 5
//
// pingpong keeps one datagram in flight and reports half the round-trip time
// (mean and percentiles), as sockperf's ping-pong does; rate sends as fast as
// the stack accepts for a fixed time while a `server --sink` counts what
// arrives. Each prints one `RESULT key=value ...` line for scripts, with the
// process's CPU seconds. The loop busy-polls: these are measurements.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "xk/apps/stack.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/udp.hpp"
#include "xk/timer.hpp"

namespace {

constexpr const char* kProg = "xk-udp-perf";
constexpr int kExitOk = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;

using xk::apps::parse_number;
using xk::apps::UsageError;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsageHead = R"(usage: xk-udp-perf server|pingpong|rate [options]

UDP latency and datagram rate between standalone xk stacks.
server:   echo every datagram back (--sink: count them instead, for rate)
pingpong: one datagram in flight; report half the round-trip time
rate:     send as fast as the stack accepts for --seconds; the sink counts

stack:
)";
constexpr const char* kUsageTail = R"(  --link-wait SEC     wait this long for the port's link (default 10)
  --idle MODE         busy (default), sleep or yield: how the loop idles

test:
  --udp-port N        server: port (default 9000)
  --peer A.B.C.D:P    pingpong, rate: the server
  --size N            payload bytes, 1..65507 (default 64)
  --count N           pingpong: timed round trips (default 100000)
  --warmup N          pingpong: untimed round trips first (default 1000)
  --seconds S         rate: how long to send (default 5)
  --pps N             rate: send at most N datagrams a second (default: as fast as the stack
                      takes them), so the sink's CPU per datagram is measured below overload
  --sink              server: count, do not echo
  --idle-exit S       server: exit S seconds after the last datagram (default: never)
  --help

exit status: 0 success, 1 failure, 2 bad command line
)";

struct Args : xk::apps::CommonArgs {
  enum class Mode { server, pingpong, rate } mode = Mode::server;  // as in kCommandLine.roles
  std::uint16_t udp_port = 9000;
  std::optional<xk::IpAddr> peer;
  std::uint16_t peer_port = 0;
  std::size_t size = 64;
  std::uint64_t count = 100000;
  std::uint64_t warmup = 1000;
  double seconds = 5;
  std::uint64_t pps = 0;  // 0: no pacing
  bool sink = false;
  std::optional<double> idle_exit_s;
};

const xk::apps::CommandLineSpec kCommandLine{
    .usage_head = kUsageHead,
    .usage_tail = kUsageTail,
    .role_noun = "mode",
    .roles = {{"server"}, {"pingpong"}, {"rate"}},
};

Args parse_args(int argc, char** argv) {
  Args a;
  std::size_t mode = xk::apps::parse_command_line(argc, argv, kCommandLine, a, [&](xk::apps::Flag& f) {
    if (f.name() == "--udp-port") {
      a.udp_port = parse_number<std::uint16_t>(f.name(), f.value(), 1, 65535);
    } else if (f.name() == "--peer") {
      std::tie(a.peer, a.peer_port) = xk::apps::parse_endpoint(f.name(), f.value());
    } else if (f.name() == "--size") {
      a.size = parse_number<std::size_t>(f.name(), f.value(), 1, xk::udp::UdpProtocol::kMaxPayload);
    } else if (f.name() == "--count") {
      a.count = parse_number<std::uint64_t>(f.name(), f.value(), 1, std::uint64_t{1} << 40);
    } else if (f.name() == "--warmup") {
      a.warmup = parse_number<std::uint64_t>(f.name(), f.value(), 0, std::uint64_t{1} << 40);
    } else if (f.name() == "--seconds") {
      a.seconds = xk::apps::parse_seconds(f.name(), f.value());
    } else if (f.name() == "--pps") {
      a.pps = parse_number<std::uint64_t>(f.name(), f.value(), 1, 100'000'000);
    } else if (f.name() == "--sink") {
      f.no_value();
      a.sink = true;
    } else if (f.name() == "--idle-exit") {
      a.idle_exit_s = xk::apps::parse_seconds(f.name(), f.value());
    } else {
      throw UsageError{"unknown option '" + std::string(f.name()) + "'"};
    }
  });
  a.mode = static_cast<Args::Mode>(mode);
  a.stack.validate();
  if (a.mode == Args::Mode::server) {
    if (a.peer) throw UsageError{"--peer is for pingpong and rate"};
  } else {
    if (!a.peer) throw UsageError{"--peer A.B.C.D:PORT or [X:X::X]:PORT is required"};
    if (a.sink) throw UsageError{"--sink is for the server"};
  }
  if (a.pps != 0 && a.mode != Args::Mode::rate) throw UsageError{"--pps is for rate"};
  return a;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---- server: echo or sink --------------------------------------------------

class Server final : public xk::Pollable {
 public:
  Server(xk::udp::UdpSocket& sock, xk::EventLoop& loop, const Args& a)
      : sock_(sock), loop_(loop), sink_(a.sink), idle_exit_s_(a.idle_exit_s) {}

  std::size_t poll(std::size_t budget) override {
    std::size_t n = 0;
    while (n < budget) {
      auto d = sock_.recvfrom();
      if (!d) break;  // would_block, or an ICMP error: nothing to do with it
      ++n;
      auto now = Clock::now();
      if (datagrams_ == 0) {
        first_ = now;
        cpu_first_ = xk::apps::process_cpu_seconds();
      }
      last_ = now;
      ++datagrams_;
      bytes_ += d->payload.size();
      if (!sink_) {
        if (!sock_.sendto(std::move(d->payload), d->from, d->from_port)) ++send_errors_;
      }
    }
    if (n == 0 && idle_exit_s_ && datagrams_ != 0 && seconds_between(last_, Clock::now()) > *idle_exit_s_) {
      loop_.stop();
    }
    return n;
  }
  // With --idle-exit the loop must come back to poll() to notice the silence.
  bool before_sleep() noexcept override { return !sock_.readable() && !idle_exit_s_; }

  void report() const {
    double span = datagrams_ > 1 ? seconds_between(first_, last_) : 0;
    double rate = span > 0 ? static_cast<double>(datagrams_ - 1) / span : 0;
    std::printf("%s: %s: %llu datagrams, %llu bytes in %.3f s: %.0f datagrams/s, %.3f Gbit/s\n", kProg,
                sink_ ? "sink" : "echo", static_cast<unsigned long long>(datagrams_),
                static_cast<unsigned long long>(bytes_), span, rate,
                span > 0 ? static_cast<double>(bytes_) * 8 / span / 1e9 : 0.0);
    // CPU from the first datagram on, per datagram: what each costs (with
    // --idle sleep; a busy loop spends all the time it has).
    const double cpu = xk::apps::process_cpu_seconds();
    const double per = datagrams_ > 1 ? (cpu - cpu_first_) / static_cast<double>(datagrams_ - 1) * 1e6 : 0;
    std::printf("RESULT mode=%s datagrams=%llu bytes=%llu seconds=%.6f rate=%.0f send_errors=%llu cpu_s=%.3f "
                "cpu_us_per_datagram=%.2f\n",
                sink_ ? "sink" : "echo", static_cast<unsigned long long>(datagrams_),
                static_cast<unsigned long long>(bytes_), span, rate, static_cast<unsigned long long>(send_errors_), cpu,
                per);
  }

 private:
  xk::udp::UdpSocket& sock_;
  xk::EventLoop& loop_;
  bool sink_;
  std::optional<double> idle_exit_s_;
  std::uint64_t datagrams_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t send_errors_ = 0;
  Clock::time_point first_{};
  double cpu_first_ = 0;  // process CPU seconds at the first datagram
  Clock::time_point last_{};
};

// ---- pingpong ----------------------------------------------------------------

class PingPong final : public xk::Pollable {
 public:
  PingPong(xk::udp::UdpSocket& sock, xk::EventLoop& loop, const Args& a)
      : sock_(sock), loop_(loop), payload_(a.size), total_(a.warmup + a.count), warmup_(a.warmup),
        timer_(loop.timers(), [this] { on_timeout(); }) {
    samples_ns_.reserve(a.count);
  }

  void start() { send(); }

  std::size_t poll(std::size_t budget) override {
    std::size_t n = 0;
    while (n < budget) {
      auto d = sock_.recvfrom();
      if (!d) break;
      ++n;
      std::uint64_t seq = 0;
      if (d->payload.size() != payload_.size() || !read_seq(d->payload, seq) || seq != done_) continue;  // stale
      auto now = Clock::now();
      if (done_ >= warmup_) {
        samples_ns_.push_back(static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - sent_at_).count()));
      }
      if (done_ == warmup_) started_ = now;
      ++done_;
      if (done_ == total_) {
        finished_ = now;
        timer_.cancel();
        loop_.stop();
        break;
      }
      send();
    }
    return n;
  }
  bool before_sleep() noexcept override { return !sock_.readable(); }

  int report(std::size_t size) {
    if (samples_ns_.empty()) {
      std::fprintf(stderr, "%s: pingpong: no round trip completed\n", kProg);
      return kExitFail;
    }
    std::vector<std::uint64_t> s = samples_ns_;
    std::sort(s.begin(), s.end());
    auto pct = [&](double p) {
      return static_cast<double>(s[std::min(s.size() - 1, static_cast<std::size_t>(p * static_cast<double>(s.size())))]) /
             2000.0;
    };
    double sum = 0;
    for (auto v : s) sum += static_cast<double>(v);
    double half_avg_us = sum / static_cast<double>(s.size()) / 2000.0;
    double span = seconds_between(started_, finished_);
    std::printf("%s: pingpong: %zu-byte payload, %zu round trips: half-RTT avg %.2f us, min %.2f, p50 %.2f, "
                "p99 %.2f, p99.9 %.2f, max %.2f; %llu re-sent\n",
                kProg, size, s.size(), half_avg_us, static_cast<double>(s.front()) / 2000.0, pct(0.5), pct(0.99),
                pct(0.999), static_cast<double>(s.back()) / 2000.0, static_cast<unsigned long long>(resent_));
    std::printf("RESULT mode=pingpong size=%zu round_trips=%zu half_rtt_avg_us=%.3f half_rtt_p50_us=%.3f "
                "half_rtt_p99_us=%.3f resent=%llu seconds=%.3f cpu_s=%.3f\n",
                size, s.size(), half_avg_us, pct(0.5), pct(0.99), static_cast<unsigned long long>(resent_), span,
                xk::apps::process_cpu_seconds());
    return kExitOk;
  }

 private:
  // Datagrams of 8 bytes or more carry their sequence number, so a late echo
  // after a re-send is recognised; smaller ones are matched by order alone.
  static bool read_seq(const xk::Msg& m, std::uint64_t& seq) {
    if (m.size() < 8) return true;
    std::byte b[8];
    if (!m.copy_out(0, b).ok()) return false;
    std::memcpy(&seq, b, 8);
    return true;
  }
  void send() {
    if (payload_.size() >= 8) std::memcpy(payload_.data(), &done_, 8);
    sent_at_ = Clock::now();
    (void)sock_.send(std::span<const std::byte>(payload_));  // a loss is re-sent on timeout
    timer_.arm_after(std::chrono::milliseconds(200));
  }
  void on_timeout() {
    ++resent_;
    send();
  }

  xk::udp::UdpSocket& sock_;
  xk::EventLoop& loop_;
  std::vector<std::byte> payload_;
  std::uint64_t total_;
  std::uint64_t warmup_;
  std::uint64_t done_ = 0;
  std::uint64_t resent_ = 0;
  Clock::time_point sent_at_{};
  Clock::time_point started_{};
  Clock::time_point finished_{};
  std::vector<std::uint64_t> samples_ns_;
  xk::Timer timer_;
};

// ---- rate ------------------------------------------------------------------

class RateSender final : public xk::Pollable {
 public:
  RateSender(xk::udp::UdpSocket& sock, xk::EventLoop& loop, const Args& a)
      : sock_(sock), loop_(loop), payload_(a.size, std::byte{0x5a}),
        duration_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds))),
        pps_(a.pps) {}

  void start() { start_ = Clock::now(); }

  std::size_t poll(std::size_t budget) override {
    auto now = Clock::now();
    if (now - start_ >= duration_) {
      end_ = now;
      loop_.stop();
      return 0;
    }
    // Paced: no more than the time since the start allows.
    std::size_t allowed = budget;
    if (pps_ != 0) {
      const double due = std::chrono::duration<double>(now - start_).count() * static_cast<double>(pps_);
      const std::uint64_t done = sent_ + refused_;
      allowed = due > static_cast<double>(done) ? std::min<std::size_t>(budget, static_cast<std::size_t>(due - static_cast<double>(done)) + 1) : 0;
    }
    for (std::size_t i = 0; i < allowed; ++i) {
      if (sock_.send(std::span<const std::byte>(payload_))) {
        ++sent_;
      } else {
        ++refused_;
      }
    }
    while (sock_.recvfrom()) {
    }  // nothing is expected back; keep the queue empty
    return budget;
  }
  bool before_sleep() noexcept override { return false; }

  void report(std::size_t size) const {
    double span = seconds_between(start_, end_);
    double rate = static_cast<double>(sent_) / span;
    std::printf("%s: rate: %zu-byte payload: %llu datagrams sent in %.3f s: %.0f datagrams/s (%llu refused)\n",
                kProg, size, static_cast<unsigned long long>(sent_), span, rate,
                static_cast<unsigned long long>(refused_));
    std::printf("RESULT mode=rate size=%zu sent=%llu refused=%llu seconds=%.6f rate=%.0f cpu_s=%.3f\n", size,
                static_cast<unsigned long long>(sent_), static_cast<unsigned long long>(refused_), span, rate,
                xk::apps::process_cpu_seconds());
  }

 private:
  xk::udp::UdpSocket& sock_;
  xk::EventLoop& loop_;
  std::vector<std::byte> payload_;
  Clock::duration duration_;
  std::uint64_t pps_;
  Clock::time_point start_{};
  Clock::time_point end_{};
  std::uint64_t sent_ = 0;
  std::uint64_t refused_ = 0;
};

int run(const Args& a) {
  xk::apps::AppStack stack(kProg, a.stack, a.idle());
  xk::EventLoop& loop = stack.loop();
  auto& udp = stack.require<xk::udp::UdpProtocol>("udp0");
  stack.wait_for_link(a.link_wait_s);
  xk::udp::SocketOptions so;
  so.rcvbuf_bytes = 16u << 20;
  so.rcvbuf_datagrams = 8192;
  xk::udp::UdpSocket sock = udp.socket(so);
  std::string where = xk::apps::describe_stack(stack.graph());

  int rc = kExitOk;
  if (a.mode == Args::Mode::server) {
    if (xk::Status s = sock.bind(xk::IpAddr{}, xk::Port{a.udp_port}); !s) {
      std::fprintf(stderr, "%s: cannot bind udp port %u: %s\n", kProg, a.udp_port, xk::to_string(s.error()));
      return kExitFail;
    }
    Server server(sock, loop, a);
    loop.add(server);
    std::printf("%s: %s %s, udp port %u: ready\n", kProg, a.sink ? "sink" : "echo server", where.c_str(), a.udp_port);
    std::fflush(stdout);
    loop.run();
    loop.remove(server);
    server.report();
  } else {
    if (xk::Status s = sock.connect(*a.peer, xk::Port{a.peer_port}); !s) {
      std::fprintf(stderr, "%s: cannot connect to %s:%u: %s\n", kProg, xk::to_string(*a.peer).c_str(), a.peer_port,
                   xk::to_string(s.error()));
      return kExitFail;
    }
    if (a.mode == Args::Mode::pingpong) {
      PingPong pp(sock, loop, a);
      loop.add(pp);
      pp.start();
      loop.run();
      loop.remove(pp);
      rc = stack.signals().signal() != 0 ? kExitFail : pp.report(a.size);
    } else {
      RateSender rs(sock, loop, a);
      loop.add(rs);
      rs.start();
      loop.run();
      loop.remove(rs);
      rs.report(a.size);
    }
  }
  stack.report_signal();
  sock.close().ok();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  return xk::apps::app_main(kProg, [&] { args = parse_args(argc, argv); }, [&] { return run(args); });
}

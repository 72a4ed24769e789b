// xk-tcp-perf: TCP throughput and latency on a standalone xk stack
// (docs/apps-tcp-perf.md).
//
//   xk-tcp-perf server STACK [--tcp-port 5001] [--mode sink|echo] [--count N]
//   xk-tcp-perf client STACK --peer A.B.C.D:P [--mode send|pingpong] [--bytes N]
//                      [--size N --count N] [--seed S]
//
// send: the client writes --bytes of a stream derived from --seed (a 1 MiB
// block of SHA-256(seed, counter) outputs, repeated: tests/integration/
// tcp_peer.py makes the same one), shuts its side down and waits for the
// server to close; both print the SHA-256 of the stream they sent / received.
// pingpong: --size bytes written, the same number read back from an echo
// server, --count times; half the round-trip time is reported.
// Each prints `RESULT key=value ...` lines for scripts.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "xk/apps/servers.hpp"
#include "xk/apps/digest.hpp"
#include "xk/apps/stack.hpp"
#include "xk/apps/stream.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/tcp.hpp"

namespace {

constexpr const char* kProg = "xk-tcp-perf";
constexpr int kExitOk = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;

using xk::apps::finish_handshakes;
using xk::apps::parse_bytes;
using xk::apps::print_conn_stats;
using xk::apps::parse_number;
using xk::apps::UsageError;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsageHead = R"(usage: xk-tcp-perf server|client [options]

TCP bulk transfer (checked with SHA-256) and ping-pong latency on a standalone xk stack.

stack:
)";
constexpr const char* kUsageTail = R"(  --link-wait SEC     wait this long for the port's link (default 10)
  --idle MODE         busy (default), sleep or yield: how the loop idles

test:
  --tcp-port N        server: port to listen on (default 5001)
  --peer A.B.C.D:P    client: the server
  --mode M            server: sink (default) or echo; client: send (default) or pingpong
  --group             server behind filterd (--filterd): share the port with other nodes,
                      new connections spread over them
  --bytes N           client send: bytes to send (default 100M; suffixes k, m, g)
  --seed S            client send: the stream's seed (default 1)
  --size N            client pingpong: bytes per exchange (default 1)
  --count N           client pingpong: exchanges (default 100000); server: exit after
                      N connections (default 0: never)
  --warmup N          client pingpong: untimed exchanges first (default 1000)
  --sndbuf N, --rcvbuf N  socket buffers (default: the stack's)
  --nodelay           TCP_NODELAY (pingpong sets it anyway)
  --verify on|off     SHA-256 of the stream (default on; off for throughput runs: it
                      costs about 4 ns per byte)
  --read MODE         server sink: copy (default) reads into a 128 KiB buffer, as a
                      program calling read() does; zero-copy takes the received
                      buffers themselves (read_msg)
  --timeout SEC       give up after this long without progress (default 30)
  --stats             the stack's counters at the end (as xkrun --stats writes them)
  --help

exit status: 0 success, 1 failure, 2 bad command line
)";

struct Args : xk::apps::CommonArgs {
  enum class Role { server, client } role = Role::server;  // as in kCommandLine.roles
  std::uint16_t port = 5001;
  std::optional<xk::IpAddr> peer;
  std::uint16_t peer_port = 0;
  std::string mode;
  std::uint64_t bytes = 100ull << 20;
  std::uint64_t seed = 1;
  std::size_t size = 1;
  std::uint64_t count = 0;
  std::uint64_t warmup = 1000;
  std::optional<std::size_t> sndbuf, rcvbuf;
  bool nodelay = false;
  bool group = false;  // server behind filterd: listen as one of a group
  bool verify = true;
  bool read_copy = true;  // sink: read() into a buffer, not read_msg()
  bool stats = false;     // the stack's counters at the end
  double timeout_s = 30;
};

const xk::apps::CommandLineSpec kCommandLine{
    .usage_head = kUsageHead,
    .usage_tail = kUsageTail,
    .role_noun = "role",
    .roles = {{"server"}, {"client"}},
};

Args parse_args(int argc, char** argv) {
  Args a;
  std::optional<std::uint64_t> count;
  bool read_flag = false;
  std::size_t role = xk::apps::parse_command_line(argc, argv, kCommandLine, a, [&](xk::apps::Flag& f) {
    if (f.name() == "--tcp-port") {
      a.port = parse_number<std::uint16_t>(f.name(), f.value(), 1, 65535);
    } else if (f.name() == "--peer") {
      std::tie(a.peer, a.peer_port) = xk::apps::parse_endpoint(f.name(), f.value());
    } else if (f.name() == "--mode") {
      a.mode = std::string(f.value());
    } else if (f.name() == "--bytes") {
      a.bytes = parse_bytes(f.name(), f.value());
    } else if (f.name() == "--seed") {
      a.seed = parse_number<std::uint64_t>(f.name(), f.value(), 0, ~std::uint64_t{0});
    } else if (f.name() == "--size") {
      a.size = parse_number<std::size_t>(f.name(), f.value(), 1, 1 << 20);
    } else if (f.name() == "--count") {
      count = parse_number<std::uint64_t>(f.name(), f.value(), 0, std::uint64_t{1} << 40);
    } else if (f.name() == "--warmup") {
      a.warmup = parse_number<std::uint64_t>(f.name(), f.value(), 0, std::uint64_t{1} << 40);
    } else if (f.name() == "--sndbuf") {
      a.sndbuf = parse_bytes(f.name(), f.value());
    } else if (f.name() == "--rcvbuf") {
      a.rcvbuf = parse_bytes(f.name(), f.value());
    } else if (f.name() == "--nodelay") {
      f.no_value();
      a.nodelay = true;
    } else if (f.name() == "--group") {
      f.no_value();
      a.group = true;
    } else if (f.name() == "--stats") {
      f.no_value();
      a.stats = true;
    } else if (f.name() == "--verify") {
      auto v = f.value();
      if (v != "on" && v != "off") throw UsageError{"--verify: on or off"};
      a.verify = v == "on";
    } else if (f.name() == "--read") {
      auto v = f.value();
      if (v != "copy" && v != "zero-copy") throw UsageError{"--read: copy or zero-copy"};
      a.read_copy = v == "copy";
      read_flag = true;
    } else if (f.name() == "--timeout") {
      a.timeout_s = xk::apps::parse_seconds(f.name(), f.value());
    } else {
      throw UsageError{"unknown option '" + std::string(f.name()) + "'"};
    }
  });
  a.role = static_cast<Args::Role>(role);
  a.stack.validate();
  if (a.role == Args::Role::server) {
    if (a.mode.empty()) a.mode = "sink";
    if (a.mode != "sink" && a.mode != "echo") throw UsageError{"server --mode: sink or echo"};
    if (a.peer) throw UsageError{"--peer is for the client"};
    if (read_flag && a.mode != "sink") throw UsageError{"--read is for the sink server"};
    a.count = count.value_or(0);
  } else {
    if (a.mode.empty()) a.mode = "send";
    if (a.mode != "send" && a.mode != "pingpong") throw UsageError{"client --mode: send or pingpong"};
    if (!a.peer) throw UsageError{"client: --peer A.B.C.D:PORT or [X:X::X]:PORT is required"};
    if (read_flag) throw UsageError{"--read is for the sink server"};
    a.count = count.value_or(100000);
  }
  return a;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void apply_socket_options(xk::tcp::TcpSocket& s, const Args& a) {
  if (a.sndbuf) s.set_sndbuf(*a.sndbuf);
  if (a.rcvbuf) s.set_rcvbuf(*a.rcvbuf);
  if (a.nodelay || a.mode == "pingpong") s.set_nodelay(true);
}

// ---- server ------------------------------------------------------------------

class Server final : public xk::Pollable {
 public:
  Server(xk::tcp::TcpListener& l, xk::EventLoop& loop, const Args& a) : l_(l), loop_(loop), a_(a) {}

  std::size_t poll(std::size_t) override {
    std::size_t work = 0;
    while (auto s = l_.accept()) {
      apply_socket_options(*s, a_);
      auto c = std::make_unique<Conn>();
      c->sock = std::move(*s);
      c->start = Clock::now();
      c->cpu0 = xk::apps::process_cpu_seconds();
      conns_.push_back(std::move(c));
      ++work;
    }
    for (auto& c : conns_) {
      if (!c->sock.is_open() && c->done) continue;
      work += serve(*c);
    }
    std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->done; });
    if (a_.count != 0 && finished_ >= a_.count && conns_.empty()) loop_.stop();
    return work;
  }
  // Under --idle sleep or yield the loop may sleep once no connection waits
  // for us: a frame (or the driver's timer) wakes it again.
  bool before_sleep() noexcept override {
    if (l_.events() & xk::tcp::ev_acceptable) return false;
    return std::none_of(conns_.begin(), conns_.end(), [](const std::unique_ptr<Conn>& c) {
      // An echo still waiting for room reads nothing more until it has left.
      const std::uint32_t e = c->sock.events();
      return (e & (c->echo_pending.empty() ? xk::tcp::ev_readable : xk::tcp::ev_writable | xk::tcp::ev_error)) != 0;
    });
  }
  std::uint64_t failures() const noexcept { return failures_; }

 private:
  struct Conn {
    xk::tcp::TcpSocket sock;
    xk::apps::StreamDigest sha;
    std::uint64_t bytes = 0;
    Clock::time_point start{};
    double cpu0 = 0;  // the process's CPU seconds when it was accepted
    bool done = false;
    std::deque<xk::Msg> echo_pending;
  };

  std::size_t serve(Conn& c) {
    if (a_.mode == "sink" && a_.read_copy) return serve_copy(c);
    std::size_t work = 0;
    for (int i = 0; i < 64; ++i) {
      if (a_.mode == "echo") {
        while (!c.echo_pending.empty()) {
          if (!c.sock.write(c.echo_pending.front())) return work;
          c.echo_pending.pop_front();
        }
      }
      auto m = c.sock.read_msg(1 << 20);
      if (!m) {
        if (m.error() == xk::Errc::would_block) return work;
        return work + fail(c, m.error());
      }
      if (m->empty()) {  // end of stream
        finish(c, true);
        return work + 1;
      }
      ++work;
      c.bytes += m->size();
      if (a_.mode == "sink") {
        if (a_.verify) {
          for (const xk::Frag& f : m->fragments()) c.sha.update(f.bytes());
        }
      } else {
        c.echo_pending.push_back(std::move(*m));
      }
    }
    return work;
  }

  // The sink as a program that calls read() is: the bytes are copied into
  // a buffer of its own, then looked at.
  std::size_t serve_copy(Conn& c) {
    std::size_t work = 0;
    for (int i = 0; i < 64; ++i) {
      auto r = c.sock.read(buf_);
      if (!r) {
        if (r.error() == xk::Errc::would_block) return work;
        return work + fail(c, r.error());
      }
      if (*r == 0) {  // end of stream
        finish(c, true);
        return work + 1;
      }
      ++work;
      c.bytes += *r;
      if (a_.verify) c.sha.update(std::span<const std::byte>(buf_).first(*r));
    }
    return work;
  }

  // A failed connection: said, counted, ended; the work it was (1).
  std::size_t fail(Conn& c, xk::Errc e) {
    std::fprintf(stderr, "%s: connection %llu: %s\n", kProg, static_cast<unsigned long long>(finished_),
                 xk::to_string(e));
    ++failures_;
    finish(c, false);
    return 1;
  }

  void finish(Conn& c, bool eof) {
    double secs = seconds_between(c.start, Clock::now());
    if (a_.mode == "sink") {
      const double cpu = xk::apps::process_cpu_seconds();
      std::printf("RESULT role=server conn=%llu bytes=%llu sha256=%s seconds=%.6f gbps=%.3f eof=%d cpu_s=%.3f "
                  "xfer_cpu_s=%.3f\n",
                  static_cast<unsigned long long>(finished_), static_cast<unsigned long long>(c.bytes),
                  a_.verify ? c.sha.hex().c_str() : "off", secs,
                  secs > 0 ? static_cast<double>(c.bytes) * 8 / secs / 1e9 : 0.0, eof ? 1 : 0, cpu, cpu - c.cpu0);
    }
    print_conn_stats("server", c.sock);
    std::fflush(stdout);
    (void)c.sock.close();
    c.done = true;
    ++finished_;
  }

  xk::tcp::TcpListener& l_;
  xk::EventLoop& loop_;
  const Args& a_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<std::byte> buf_ = std::vector<std::byte>(128 * 1024);  // iperf3's default read size
  std::uint64_t finished_ = 0;
  std::uint64_t failures_ = 0;
};

// ---- client ------------------------------------------------------------------

class Client final : public xk::Pollable {
 public:
  Client(xk::tcp::TcpSocket& s, xk::EventLoop& loop, const Args& a) : s_(s), loop_(loop), a_(a) {
    if (a.mode == "send") block_ = xk::apps::stream_block(a.seed);
    if (a.mode == "pingpong") {
      msg_.assign(a.size, std::byte{0x42});
      got_.resize(a.size);
      samples_.reserve(a.count);
    }
    start_ = last_progress_ = Clock::now();
  }

  std::size_t poll(std::size_t) override {
    auto now = Clock::now();
    if (seconds_between(last_progress_, now) > a_.timeout_s) {
      std::fprintf(stderr, "%s: no progress for %.1f s (state %s)\n", kProg, a_.timeout_s, xk::tcp::to_string(s_.state()));
      rc_ = kExitFail;
      loop_.stop();
      return 0;
    }
    if (s_.state() == xk::tcp::State::syn_sent) return 0;
    return a_.mode == "send" ? poll_send() : poll_pingpong();
  }
  // Sleep (under --idle sleep or yield) only while nothing we wait for is
  // there: the connection's answer, room in the send buffer, the echo, the
  // peer's FIN. The no-progress check rides on the driver's wake-ups.
  bool before_sleep() noexcept override {
    const std::uint32_t e = s_.events();
    if (e & (xk::tcp::ev_readable | xk::tcp::ev_hangup | xk::tcp::ev_error)) return false;
    if (!connected_) return (e & xk::tcp::ev_writable) == 0;  // established: the first write
    return !(a_.mode == "send" && sent_ < a_.bytes && (e & xk::tcp::ev_writable));
  }
  int rc() const noexcept { return rc_; }

 private:
  std::size_t poll_send() {
    std::size_t work = 0;
    if (!connected_) {
      if (s_.state() != xk::tcp::State::established) return fail_if_closed();
      connected_ = true;
      start_ = Clock::now();
      cpu0_ = xk::apps::process_cpu_seconds();
    }
    while (sent_ < a_.bytes) {
      std::size_t off = static_cast<std::size_t>(sent_ % block_.size());
      std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(a_.bytes - sent_, block_.size() - off));
      auto w = s_.write(std::span<const std::byte>(block_).subspan(off, n));
      if (!w) {
        if (w.error() == xk::Errc::would_block) break;
        std::fprintf(stderr, "%s: write: %s\n", kProg, xk::to_string(w.error()));
        rc_ = kExitFail;
        loop_.stop();
        return 1;
      }
      if (a_.verify) sha_.update(std::span<const std::byte>(block_).subspan(off, *w));
      sent_ += *w;
      last_progress_ = Clock::now();
      ++work;
    }
    if (sent_ == a_.bytes && !shut_) {
      (void)s_.shutdown_write();
      shut_ = true;
      sent_done_ = Clock::now();
    }
    if (shut_) {
      // The server closes once it has everything: wait for its FIN.
      std::byte b[256];
      auto r = s_.read(b);
      if (r && *r == 0) {
        finish();
        return work + 1;
      }
      if (!r && r.error() != xk::Errc::would_block) {
        std::fprintf(stderr, "%s: after sending: %s\n", kProg, xk::to_string(r.error()));
        rc_ = kExitFail;
        loop_.stop();
      }
    }
    return work;
  }

  std::size_t poll_pingpong() {
    if (!connected_) {
      if (s_.state() != xk::tcp::State::established) return fail_if_closed();
      connected_ = true;
      send_one();
    }
    std::size_t work = 0;
    for (;;) {
      auto r = s_.read(std::span<std::byte>(got_).subspan(have_));
      if (!r) {
        if (r.error() != xk::Errc::would_block) {
          std::fprintf(stderr, "%s: read: %s\n", kProg, xk::to_string(r.error()));
          rc_ = kExitFail;
          loop_.stop();
        }
        return work;
      }
      if (*r == 0) {
        std::fprintf(stderr, "%s: the server closed during ping-pong\n", kProg);
        rc_ = kExitFail;
        loop_.stop();
        return work;
      }
      ++work;
      have_ += *r;
      if (have_ < a_.size) continue;
      auto now = Clock::now();
      last_progress_ = now;
      if (done_ >= a_.warmup) samples_.push_back(std::chrono::duration<double, std::micro>(now - sent_at_).count());
      if (done_ == a_.warmup) start_ = now;
      ++done_;
      have_ = 0;
      if (done_ >= a_.warmup + a_.count) {
        report_pingpong(now);
        (void)s_.close();
        loop_.stop();
        return work;
      }
      send_one();
    }
  }

  void send_one() {
    sent_at_ = Clock::now();
    auto w = s_.write(msg_);
    if (!w || *w != msg_.size()) {
      std::fprintf(stderr, "%s: ping-pong write did not fit\n", kProg);
      rc_ = kExitFail;
      loop_.stop();
    }
  }

  std::size_t fail_if_closed() {
    if (s_.state() == xk::tcp::State::closed) {
      std::byte b[1];
      auto r = s_.read(b);
      std::fprintf(stderr, "%s: connect failed: %s\n", kProg, r ? "closed" : xk::to_string(r.error()));
      rc_ = kExitFail;
      loop_.stop();
    }
    return 0;
  }

  void finish() {
    auto now = Clock::now();
    double secs = seconds_between(start_, now);
    const double cpu = xk::apps::process_cpu_seconds();
    std::printf("RESULT role=client bytes=%llu sha256=%s seconds=%.6f gbps=%.3f send_seconds=%.6f cpu_s=%.3f "
                "xfer_cpu_s=%.3f\n",
                static_cast<unsigned long long>(sent_), a_.verify ? sha_.hex().c_str() : "off", secs,
                secs > 0 ? static_cast<double>(sent_) * 8 / secs / 1e9 : 0.0, seconds_between(start_, sent_done_), cpu,
                cpu - cpu0_);
    print_conn_stats("client", s_);
    std::fflush(stdout);
    (void)s_.close();
    loop_.stop();
  }

  void report_pingpong(Clock::time_point now) {
    std::sort(samples_.begin(), samples_.end());
    double sum = 0;
    for (double v : samples_) sum += v;
    auto pct = [&](double p) {
      return samples_[std::min(samples_.size() - 1, static_cast<std::size_t>(p * static_cast<double>(samples_.size())))] / 2;
    };
    double avg = sum / static_cast<double>(samples_.size()) / 2;
    std::printf("%s: pingpong: %zu-byte messages, %zu exchanges: half-RTT avg %.2f us, p50 %.2f, p99 %.2f\n", kProg,
                a_.size, samples_.size(), avg, pct(0.5), pct(0.99));
    std::printf("RESULT role=pingpong size=%zu exchanges=%zu half_rtt_avg_us=%.3f half_rtt_p50_us=%.3f "
                "half_rtt_p99_us=%.3f seconds=%.3f cpu_s=%.3f\n",
                a_.size, samples_.size(), avg, pct(0.5), pct(0.99), seconds_between(start_, now),
                xk::apps::process_cpu_seconds());
    std::fflush(stdout);
  }

  xk::tcp::TcpSocket& s_;
  xk::EventLoop& loop_;
  const Args& a_;
  std::vector<std::byte> block_;
  xk::apps::StreamDigest sha_;
  std::uint64_t sent_ = 0;
  bool connected_ = false;
  bool shut_ = false;
  Clock::time_point start_{}, sent_done_{}, last_progress_{}, sent_at_{};
  double cpu0_ = 0;  // the process's CPU seconds when the connection was up
  std::vector<std::byte> msg_, got_;
  std::size_t have_ = 0;
  std::uint64_t done_ = 0;
  std::vector<double> samples_;
  int rc_ = kExitOk;
};

int run(const Args& a) {
  xk::apps::AppStack stack(kProg, a.stack, a.idle());
  xk::EventLoop& loop = stack.loop();
  auto& tcp = stack.require<xk::tcp::TcpProtocol>("tcp0");
  stack.wait_for_link(a.link_wait_s);
  int rc = kExitOk;
  if (a.role == Args::Role::server) {
    auto l = tcp.listen(xk::IpAddr{}, xk::Port{a.port}, 128, a.group);
    if (!l) {
      std::fprintf(stderr, "%s: cannot listen on port %u: %s\n", kProg, a.port, xk::to_string(l.error()));
      return kExitFail;
    }
    Server server(*l, loop, a);
    loop.add(server);
    std::printf("%s: %s server on tcp port %u: ready\n", kProg, a.mode.c_str(), a.port);
    std::fflush(stdout);
    loop.run();
    loop.remove(server);
    if (server.failures() != 0) rc = kExitFail;
    (void)l->close();
    finish_handshakes(loop, tcp);
  } else {
    xk::tcp::TcpSocket s = tcp.socket();
    apply_socket_options(s, a);
    if (xk::Status st = s.connect(*a.peer, xk::Port{a.peer_port}); !st) {
      std::fprintf(stderr, "%s: connect: %s\n", kProg, xk::to_string(st.error()));
      return kExitFail;
    }
    Client client(s, loop, a);
    loop.add(client);
    loop.run();
    loop.remove(client);
    rc = client.rc();
    if (stack.signals().signal() != 0) rc = kExitFail;
    finish_handshakes(loop, tcp);
  }
  stack.report_signal(a.stats);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  return xk::apps::app_main(kProg, [&] { args = parse_args(argc, argv); }, [&] { return run(args); });
}

// xk-pingpong: a NetPIPE-style latency and bandwidth sweep over TCP
// (docs/apps-pingpong.md).
//
//   xk-pingpong server STACK [--tcp-port 5002] [--count N] [--echo whole|stream]
//   xk-pingpong client STACK --peer A.B.C.D:P [--min 1] [--max 8m] [--perturb 3]
//                      [--trial-seconds 0.02] [--trials 3] [--warmup 1000] [--csv FILE] [--verify]
//                      [--echo whole|stream]
//
// The client walks the message sizes NetPIPE walks -- every power of two from
// --min to --max, each also 3 bytes smaller and 3 bytes larger (--perturb) --
// and for each size times a run of exchanges (write the message, read the
// server's echo of it; by default the server reads all of it first, as
// NetPIPE's receiver does: --echo). The number of exchanges per run is chosen from the
// previous size's time so that a run lasts about --trial-seconds; each size
// gets --trials runs and the fastest counts (what a loaded machine adds is
// noise, not the network's cost). Per size: half the round-trip time, and the
// throughput that gives (message bits over the one-way time), as a table and
// as CSV.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "xk/apps/servers.hpp"
#include "xk/apps/stack.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/tcp.hpp"

namespace {

constexpr const char* kProg = "xk-pingpong";
constexpr int kExitOk = 0;
constexpr int kExitFail = 1;

using xk::apps::finish_handshakes;
using xk::apps::parse_bytes;
using xk::apps::parse_number;
using xk::apps::UsageError;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxMessage = std::size_t{64} << 20;

constexpr const char* kUsageHead = R"(usage: xk-pingpong server|client [options]

A NetPIPE-style sweep: TCP ping-pong of messages from --min to --max bytes,
half round-trip time and throughput per size.

stack:
)";
constexpr const char* kUsageTail = R"(  --link-wait SEC     wait this long for the port's link (default 10)
  --idle MODE         busy (default), sleep or yield: how the loop idles

test:
  --tcp-port N        server: port to listen on (default 5002)
  --count N           server: exit after N connections (default 0: never)
  --peer A.B.C.D:P    client: the server (an xk-pingpong server, or any TCP echo server)
  --min N             client: smallest message (default 1; suffixes k, m, g)
  --max N             client: largest message (default 8m, at most 64m)
  --perturb N         client: also N bytes below and above each power of two
                      (default 3; 0: powers of two only)
  --trial-seconds S   client: aim for runs this long (default 0.02)
  --trials N          client: runs per size, the fastest counts (default 3)
  --warmup N          client: untimed exchanges of the smallest size first (default 1000)
  --csv FILE          client: also write the table as CSV
  --verify            client: check every echoed byte
  --read MODE         copy (default): read into a buffer of the program's own (the
                      server writes it back from there), as NPtcp and every program
                      calling read() and write() does; zero-copy: take the received
                      buffers themselves (read_msg) and echo them as they are
  --echo MODE         whole (default, both roles): the server reads each message
                      in full before it writes it back, as NPtcp's receiver and an
                      MPI rank do; stream: it echoes every byte as it comes (a
                      plain echo server, or any other one: the client's --peer)
  --timeout SEC       give up after this long without progress (default 30)
  --help

exit status: 0 success, 1 failure, 2 bad command line
)";

struct Args : xk::apps::CommonArgs {
  enum class Role { server, client } role = Role::server;  // as in kCommandLine.roles
  std::uint16_t port = 5002;
  std::uint64_t count = 0;
  std::optional<xk::IpAddr> peer;
  std::uint16_t peer_port = 0;
  std::size_t min = 1;
  std::size_t max = std::size_t{8} << 20;
  std::size_t perturb = 3;
  double trial_s = 0.02;
  unsigned trials = 3;
  std::uint64_t warmup = 1000;
  std::string csv;
  bool verify = false;
  bool read_copy = true;
  bool whole = true;  // --echo whole
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
  bool client_flag = false;
  bool server_flag = false;
  std::size_t role = xk::apps::parse_command_line(argc, argv, kCommandLine, a, [&](xk::apps::Flag& f) {
    auto bytes = [&] {
      std::uint64_t v = parse_bytes(f.name(), f.value());
      if (v < 1 || v > kMaxMessage) throw UsageError{std::string(f.name()) + ": a message is 1 byte to 64m"};
      return static_cast<std::size_t>(v);
    };
    if (f.name() == "--tcp-port") {
      a.port = parse_number<std::uint16_t>(f.name(), f.value(), 1, 65535);
      server_flag = true;
    } else if (f.name() == "--count") {
      a.count = parse_number<std::uint64_t>(f.name(), f.value(), 0, std::uint64_t{1} << 40);
      server_flag = true;
    } else if (f.name() == "--peer") {
      std::tie(a.peer, a.peer_port) = xk::apps::parse_endpoint(f.name(), f.value());
    } else if (f.name() == "--min") {
      a.min = bytes();
      client_flag = true;
    } else if (f.name() == "--max") {
      a.max = bytes();
      client_flag = true;
    } else if (f.name() == "--perturb") {
      a.perturb = parse_number<std::size_t>(f.name(), f.value(), 0, 1 << 10);
      client_flag = true;
    } else if (f.name() == "--trial-seconds") {
      a.trial_s = xk::apps::parse_seconds(f.name(), f.value());
      client_flag = true;
    } else if (f.name() == "--trials") {
      a.trials = parse_number<unsigned>(f.name(), f.value(), 1, 1000);
      client_flag = true;
    } else if (f.name() == "--warmup") {
      a.warmup = parse_number<std::uint64_t>(f.name(), f.value(), 0, 1000000);
      client_flag = true;
    } else if (f.name() == "--csv") {
      a.csv = std::string(f.value());
      if (a.csv.empty()) throw UsageError{"--csv: empty file name"};
      client_flag = true;
    } else if (f.name() == "--verify") {
      f.no_value();
      a.verify = true;
      client_flag = true;
    } else if (f.name() == "--read") {
      auto v = f.value();
      if (v != "copy" && v != "zero-copy") throw UsageError{"--read: copy or zero-copy"};
      a.read_copy = v == "copy";
    } else if (f.name() == "--echo") {
      auto v = f.value();
      if (v != "whole" && v != "stream") throw UsageError{"--echo: whole or stream"};
      a.whole = v == "whole";
    } else if (f.name() == "--timeout") {
      a.timeout_s = xk::apps::parse_seconds(f.name(), f.value());
    } else {
      throw UsageError{"unknown option '" + std::string(f.name()) + "'"};
    }
  });
  a.role = static_cast<Args::Role>(role);
  a.stack.validate();
  if (a.role == Args::Role::server) {
    if (a.peer) throw UsageError{"--peer is for the client"};
    if (client_flag) throw UsageError{"--min, --max, --perturb, --trial-seconds, --trials, --warmup, --csv and --verify are for the client"};
  } else {
    if (!a.peer) throw UsageError{"client: --peer A.B.C.D:PORT or [X:X::X]:PORT is required"};
    if (server_flag) throw UsageError{"--tcp-port and --count are for the server"};
    if (a.min > a.max) throw UsageError{"--min is larger than --max"};
  }
  return a;
}

// NetPIPE's schedule: each power of two p in [min, max] (and min itself),
// with p - perturb and p + perturb beside it; sorted, without repeats, every
// size within [min, max].
std::vector<std::size_t> schedule(std::size_t min, std::size_t max, std::size_t perturb) {
  std::vector<std::size_t> sizes{min};
  for (std::size_t p = 1; p <= max; p *= 2) {
    for (std::size_t s : {p - std::min(p, perturb), p, p + perturb}) {
      if (s >= min && s <= max && s != 0) sizes.push_back(s);
    }
    if (p > max / 2) break;
  }
  sizes.push_back(max);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---- --echo whole: the run header ----------------------------------------------------
//
// NetPIPE's receiver reads each message in full before it sends it back, so
// the two directions never overlap; an echo server cannot, not knowing where
// a message ends. With --echo whole the client says so before every run
// (the warm-up included), untimed: "XKPP-RUN", the message size and the
// number of exchanges (big-endian 32-bit each); the server answers
// "XKPP-GO!" and then, that many times, reads `size` bytes and writes them
// back. A plain echo server returns the header itself, which the client
// recognises and reports.

constexpr std::size_t kRunHeader = 16;
constexpr std::size_t kRunReply = 8;
constexpr std::string_view kRunMagic = "XKPP-RUN";
constexpr std::string_view kRunGo = "XKPP-GO!";

std::array<std::byte, kRunHeader> run_header(std::size_t size, std::uint64_t reps) {
  std::array<std::byte, kRunHeader> h{};
  std::memcpy(h.data(), kRunMagic.data(), kRunMagic.size());
  auto be32 = [&](std::size_t at, std::uint64_t v) {
    for (int i = 0; i < 4; ++i) h[at + i] = std::byte(static_cast<unsigned char>(v >> (24 - 8 * i)));
  };
  be32(8, size);
  be32(12, reps);
  return h;
}

// The size and count of a run header, or nothing if it is not one.
std::optional<std::pair<std::size_t, std::uint64_t>> parse_run_header(std::span<const std::byte, kRunHeader> h) {
  if (std::memcmp(h.data(), kRunMagic.data(), kRunMagic.size()) != 0) return std::nullopt;
  auto be32 = [&](std::size_t at) {
    std::uint64_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | std::to_integer<std::uint64_t>(h[at + i]);
    return v;
  };
  return std::pair{static_cast<std::size_t>(be32(8)), be32(12)};
}

// A step's answer to a socket error: false (try again later) while the
// socket would block, else the error.
xk::Result<bool> later_or(xk::Errc e) { return e == xk::Errc::would_block ? xk::Result<bool>(false) : e; }

// Moves bytes between a fixed buffer and the socket until it is full or
// sent: true when done, false while the socket would block, an error else.
xk::Result<bool> fill(xk::tcp::TcpSocket& s, std::span<std::byte> buf, std::size_t& at) {
  while (at < buf.size()) {
    auto r = s.read(buf.subspan(at));
    if (!r) return later_or(r.error());
    if (*r == 0) return xk::Errc::closed;
    at += *r;
  }
  return true;
}
xk::Result<bool> drain(xk::tcp::TcpSocket& s, std::span<const std::byte> buf, std::size_t& at) {
  while (at < buf.size()) {
    auto w = s.write(buf.subspan(at));
    if (!w) return later_or(w.error());
    at += *w;
  }
  return true;
}

// ---- server: --echo whole -----------------------------------------------------------

// The server's side of a run: each message read in full, then written
// back; into a buffer of its own (--read copy) or as the received buffers
// (--read zero-copy). Any number of connections at once, as the stream
// echo.
class WholeEchoServer final : public xk::Pollable {
 public:
  WholeEchoServer(xk::tcp::TcpListener& listener, xk::EventLoop& loop, const Args& a)
      : listener_(listener), loop_(loop), a_(a) {}

  std::size_t poll(std::size_t) override {
    std::size_t work = 0;
    while (auto s = listener_.accept()) {
      s->set_nodelay(true);
      conns_.push_back(std::make_unique<Conn>(std::move(*s)));
      ++work;
    }
    for (auto& c : conns_) work += serve(*c);
    std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->done; });
    if (a_.count != 0 && finished_ >= a_.count && conns_.empty()) loop_.stop();
    return work;
  }
  bool before_sleep() noexcept override {
    if (listener_.events() & xk::tcp::ev_acceptable) return false;
    return std::none_of(conns_.begin(), conns_.end(), [](const std::unique_ptr<Conn>& c) {
      const bool sending = c->phase == Phase::reply || c->phase == Phase::back;
      return (c->sock.events() & (sending ? xk::tcp::ev_writable | xk::tcp::ev_error : xk::tcp::ev_readable)) != 0;
    });
  }
  std::uint64_t failures() const noexcept { return failures_; }

 private:
  enum class Phase { header, reply, in, back };
  struct Conn {
    explicit Conn(xk::tcp::TcpSocket s) : sock(std::move(s)) {}
    xk::tcp::TcpSocket sock;
    Phase phase = Phase::header;
    std::array<std::byte, kRunHeader> header{};
    std::size_t at = 0;  // of the header, the reply, or the message
    std::size_t size = 0;
    std::uint64_t left = 0;       // exchanges of this run still to do
    std::vector<std::byte> buf;   // --read copy: the message
    xk::Msg held;                 // --read zero-copy: the message
    bool done = false;
  };

  std::size_t serve(Conn& c) {
    std::size_t work = 0;
    for (int i = 0; i < 64 && !c.done; ++i) {
      xk::Result<bool> r = step(c);
      if (!r) return work + fail(c, r.error());
      if (!*r) return work;
      ++work;
    }
    return work;
  }

  // One phase of a connection's run to its end: true when it moved on.
  xk::Result<bool> step(Conn& c) {
    switch (c.phase) {
      case Phase::header: {
        auto r = fill(c.sock, c.header, c.at);
        if (!r && r.error() == xk::Errc::closed) {
          // Between runs, the end of the connection is the client's goodbye.
          if (c.at == 0) {
            finish(c);
            return true;
          }
          std::fprintf(stderr, "%s: the connection ended inside a run header (a client with --echo stream?)\n", kProg);
          return xk::Errc::invalid_argument;
        }
        if (!r || !*r) return r;
        auto run = parse_run_header(c.header);
        if (!run) {
          std::fprintf(stderr, "%s: a connection did not start a run (a client without --echo whole?)\n", kProg);
          return xk::Errc::invalid_argument;
        }
        if (run->first == 0 || run->first > kMaxMessage || run->second == 0) {
          std::fprintf(stderr, "%s: a run of %llu messages of %zu bytes: out of range\n", kProg,
                       static_cast<unsigned long long>(run->second), run->first);
          return xk::Errc::invalid_argument;
        }
        c.size = run->first;
        c.left = run->second;
        if (a_.read_copy && c.buf.size() < c.size) c.buf.resize(c.size);
        c.phase = Phase::reply;
        c.at = 0;
        return true;
      }
      case Phase::reply: {
        auto r = drain(c.sock, std::as_bytes(std::span(kRunGo)), c.at);
        if (!r || !*r) return r;
        c.phase = Phase::in;
        c.at = 0;
        return true;
      }
      case Phase::in: {
        if (a_.read_copy) {
          auto r = fill(c.sock, std::span(c.buf).first(c.size), c.at);
          if (!r || !*r) return r;
        } else {
          while (c.held.size() < c.size) {
            auto m = c.sock.read_msg(c.size - c.held.size());
            if (!m) return later_or(m.error());
            if (m->empty()) return xk::Errc::closed;
            c.held.join(std::move(*m));
          }
        }
        c.phase = Phase::back;
        c.at = 0;
        return true;
      }
      case Phase::back: {
        if (a_.read_copy) {
          auto r = drain(c.sock, std::span<const std::byte>(c.buf).first(c.size), c.at);
          if (!r || !*r) return r;
        } else if (xk::Status st = c.sock.write(c.held); !st) {
          return later_or(st.error());
        }
        c.at = 0;
        c.phase = --c.left == 0 ? Phase::header : Phase::in;
        return true;
      }
    }
    return false;
  }

  std::size_t fail(Conn& c, xk::Errc e) {
    if (e == xk::Errc::closed) {
      std::fprintf(stderr, "%s: the client closed the connection in the middle of a run\n", kProg);
    } else if (e != xk::Errc::invalid_argument) {  // (a bad header: said already)
      std::fprintf(stderr, "%s: connection: %s\n", kProg, xk::to_string(e));
    }
    ++failures_;
    finish(c);
    return 1;
  }
  void finish(Conn& c) {
    (void)c.sock.close();
    c.done = true;
    ++finished_;
  }

  xk::tcp::TcpListener& listener_;
  xk::EventLoop& loop_;
  const Args& a_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::uint64_t finished_ = 0;
  std::uint64_t failures_ = 0;
};

// ---- client: the sweep -------------------------------------------------------------

struct Point {
  std::size_t bytes = 0;
  std::uint64_t reps = 0;
  double half_rtt_us = 0;
  double mbit_s = 0;
};

class Sweep final : public xk::Pollable {
 public:
  Sweep(xk::tcp::TcpSocket& s, xk::EventLoop& loop, const Args& a)
      : s_(s), loop_(loop), a_(a), sizes_(schedule(a.min, a.max, a.perturb)), tx_(a.max) {
    for (std::size_t i = 0; i < tx_.size(); ++i) tx_[i] = std::byte(static_cast<unsigned char>(i + i / 251));
    last_progress_ = Clock::now();
  }

  std::size_t poll(std::size_t) override {
    if (done_) return 0;
    auto now = Clock::now();
    if (seconds_between(last_progress_, now) > a_.timeout_s) {
      return fail("no progress for " + std::to_string(a_.timeout_s) + " s (state " +
                  xk::tcp::to_string(s_.state()) + ")");
    }
    if (!started_) {
      if (s_.state() == xk::tcp::State::syn_sent) return 0;
      if (s_.state() != xk::tcp::State::established) return fail("connect failed");
      started_ = true;
      std::printf("%12s %10s %14s %12s\n", "bytes", "reps", "half-RTT us", "Mbit/s");
      warm_left_ = a_.warmup;
      if (warm_left_ == 0) {
        begin_size();
      } else {
        announce(sizes_[idx_], warm_left_);
      }
    }
    std::size_t work = 0;
    if (announcing_) {
      xk::Result<bool> r = drain(s_, announce_, announced_);
      if (r && *r) r = fill(s_, answer_, answered_);
      if (!r) return fail(std::string("starting a run: ") + xk::to_string(r.error()));
      if (!*r) return 0;
      if (std::memcmp(answer_.data(), kRunGo.data(), kRunGo.size()) != 0) {
        return fail(std::memcmp(answer_.data(), kRunMagic.data(), kRunMagic.size()) == 0
                        ? "the server echoed the run header: it is a stream echo (xk-pingpong server --echo stream, "
                          "or another echo server); use --echo stream here, or --echo whole there"
                        : "the server's answer to a run header is not xk-pingpong's");
      }
      announcing_ = false;
      trial_start_ = Clock::now();  // the run starts now, not with its header
      ++work;
    }
    std::size_t size = sizes_[idx_];
    while (written_ < size) {
      auto w = s_.write(std::span<const std::byte>(tx_).subspan(written_, size - written_));
      if (!w) {
        if (w.error() == xk::Errc::would_block) break;
        return fail(std::string("write: ") + xk::to_string(w.error()));
      }
      written_ += *w;
      ++work;
    }
    if (a_.read_copy) return work + read_copy(size);
    for (;;) {
      auto m = s_.read_msg(size - echoed_);
      if (!m) {
        if (m.error() == xk::Errc::would_block) break;
        return fail(std::string("read: ") + xk::to_string(m.error()));
      }
      if (m->empty()) return fail("the server closed the connection");
      ++work;
      if (a_.verify) {
        std::size_t off = echoed_;
        for (const xk::Frag& f : m->fragments()) {
          auto b = f.bytes();
          if (std::memcmp(b.data(), tx_.data() + off, b.size()) != 0) {
            return fail("the echo of a " + std::to_string(size) + "-byte message differs near byte " +
                        std::to_string(off));
          }
          off += b.size();
        }
      }
      echoed_ += m->size();
      if (echoed_ < size) continue;
      last_progress_ = Clock::now();
      exchange_done(last_progress_);
      if (done_) return work;
      size = sizes_[idx_];
      break;  // the next exchange's write starts on the next pass
    }
    return work;
  }
  bool before_sleep() noexcept override { return false; }
  int rc() const noexcept { return rc_; }

  // The echo read into the program's own buffer (--read copy).
  std::size_t read_copy(std::size_t size) {
    std::size_t work = 0;
    while (echoed_ < size) {
      auto r = s_.read(std::span<std::byte>(rx_).subspan(echoed_, size - echoed_));
      if (!r) {
        if (r.error() == xk::Errc::would_block) return work;
        return fail(std::string("read: ") + xk::to_string(r.error()));
      }
      if (*r == 0) return fail("the server closed the connection");
      ++work;
      if (a_.verify && std::memcmp(rx_.data() + echoed_, tx_.data() + echoed_, *r) != 0) {
        return fail("the echo of a " + std::to_string(size) + "-byte message differs near byte " +
                    std::to_string(echoed_));
      }
      echoed_ += *r;
    }
    last_progress_ = Clock::now();
    exchange_done(last_progress_);
    return work;
  }
  const std::vector<Point>& points() const noexcept { return points_; }

 private:
  void begin_size() {
    // A run of about trial_s, from the last size's time per exchange (at
    // least 3 exchanges; the first size starts with 100 to learn it).
    if (per_exchange_s_ > 0) {
      double n = a_.trial_s / per_exchange_s_;
      reps_ = static_cast<std::uint64_t>(std::clamp(n, 3.0, 1e6));
    } else {
      reps_ = 100;
    }
    trial_ = 0;
    best_s_ = 0;
    begin_trial(Clock::now());
  }

  void begin_trial(Clock::time_point now) {
    rep_ = 0;
    written_ = echoed_ = 0;
    trial_start_ = now;
    announce(sizes_[idx_], reps_);
  }

  // --echo whole: the next run's header goes first (no-op for a stream echo).
  void announce(std::size_t size, std::uint64_t reps) {
    if (!a_.whole) return;
    announce_ = run_header(size, reps);
    announced_ = answered_ = 0;
    announcing_ = true;
  }

  void exchange_done(Clock::time_point now) {
    written_ = echoed_ = 0;
    if (warm_left_ > 0) {  // caches, page faults, the peer's first sleep: not the network
      if (--warm_left_ == 0) begin_size();
      return;
    }
    if (++rep_ < reps_) return;
    double secs = seconds_between(trial_start_, now);
    if (trial_ == 0 || secs < best_s_) best_s_ = secs;
    if (++trial_ < a_.trials) {
      begin_trial(now);
      return;
    }
    per_exchange_s_ = best_s_ / static_cast<double>(reps_);
    Point p;
    p.bytes = sizes_[idx_];
    p.reps = reps_;
    p.half_rtt_us = per_exchange_s_ / 2 * 1e6;
    p.mbit_s = static_cast<double>(p.bytes) * 8 / (per_exchange_s_ / 2) / 1e6;
    points_.push_back(p);
    std::printf("%12zu %10llu %14.3f %12.3f\n", p.bytes, static_cast<unsigned long long>(p.reps), p.half_rtt_us,
                p.mbit_s);
    std::fflush(stdout);
    if (++idx_ == sizes_.size()) {
      done_ = true;
      loop_.stop();
      return;
    }
    // The next size's runs are sized from this size's time per exchange, as
    // NetPIPE does: where bandwidth dominates, a doubled message makes a run
    // last up to twice --trial-seconds, which is fine.
    begin_size();
  }

  std::size_t fail(const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", kProg, why.c_str());
    rc_ = kExitFail;
    done_ = true;
    loop_.stop();
    return 1;
  }

  xk::tcp::TcpSocket& s_;
  xk::EventLoop& loop_;
  const Args& a_;
  std::vector<std::size_t> sizes_;
  std::vector<std::byte> tx_;
  std::vector<std::byte> rx_ = std::vector<std::byte>(a_.read_copy ? a_.max : 0);
  std::vector<Point> points_;
  std::size_t idx_ = 0;
  std::uint64_t warm_left_ = 0;
  std::uint64_t reps_ = 0, rep_ = 0;
  unsigned trial_ = 0;
  double best_s_ = 0;
  double per_exchange_s_ = 0;
  std::size_t written_ = 0, echoed_ = 0;
  std::array<std::byte, kRunHeader> announce_{};  // --echo whole: the run's header ...
  std::array<std::byte, kRunReply> answer_{};     // ... and the server's answer
  std::size_t announced_ = 0, answered_ = 0;
  bool announcing_ = false;
  Clock::time_point trial_start_{}, last_progress_{};
  bool started_ = false;
  bool done_ = false;
  int rc_ = kExitOk;
};

bool write_csv(const std::string& path, const std::vector<Point>& points) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", kProg, path.c_str(), std::strerror(errno));
    return false;
  }
  std::fprintf(f, "bytes,reps,half_rtt_us,mbit_s\n");
  for (const Point& p : points) {
    std::fprintf(f, "%zu,%llu,%.3f,%.3f\n", p.bytes, static_cast<unsigned long long>(p.reps), p.half_rtt_us, p.mbit_s);
  }
  bool ok = std::fclose(f) == 0;
  if (!ok) std::fprintf(stderr, "%s: writing %s failed\n", kProg, path.c_str());
  return ok;
}

int run(const Args& a) {
  xk::apps::AppStack stack(kProg, a.stack, a.idle());
  xk::EventLoop& loop = stack.loop();
  auto& tcp = stack.require<xk::tcp::TcpProtocol>("tcp0");
  stack.wait_for_link(a.link_wait_s);
  int rc = kExitOk;
  if (a.role == Args::Role::server) {
    auto l = tcp.listen(xk::IpAddr{}, xk::Port{a.port}, 128, false);
    if (!l) {
      std::fprintf(stderr, "%s: cannot listen on port %u: %s\n", kProg, a.port, xk::to_string(l.error()));
      return kExitFail;
    }
    xk::apps::TcpEchoServer stream(kProg, *l, loop, a.count, a.read_copy);
    WholeEchoServer whole(*l, loop, a);
    xk::Pollable& server = a.whole ? static_cast<xk::Pollable&>(whole) : stream;
    loop.add(server);
    std::printf("%s: %s echo server on tcp port %u: ready\n", kProg, a.whole ? "whole-message" : "stream", a.port);
    std::fflush(stdout);
    loop.run();
    loop.remove(server);
    if ((a.whole ? whole.failures() : stream.failures()) != 0) rc = kExitFail;
    (void)l->close();
    finish_handshakes(loop, tcp);
  } else {
    xk::tcp::TcpSocket s = tcp.socket();
    s.set_nodelay(true);
    if (xk::Status st = s.connect(*a.peer, xk::Port{a.peer_port}); !st) {
      std::fprintf(stderr, "%s: connect: %s\n", kProg, xk::to_string(st.error()));
      return kExitFail;
    }
    Sweep sweep(s, loop, a);
    loop.add(sweep);
    loop.run();
    loop.remove(sweep);
    rc = sweep.rc();
    if (stack.signals().signal() != 0) rc = kExitFail;
    const auto& pts = sweep.points();
    if (rc == kExitOk && !pts.empty()) {
      auto best = std::max_element(pts.begin(), pts.end(), [](const Point& x, const Point& y) { return x.mbit_s < y.mbit_s; });
      std::printf("RESULT role=pingpong sizes=%zu min_bytes=%zu half_rtt_us=%.3f max_bytes=%zu max_mbit_s=%.3f "
                  "at_bytes=%zu cpu_s=%.3f\n",
                  pts.size(), pts.front().bytes, pts.front().half_rtt_us, pts.back().bytes, best->mbit_s, best->bytes,
                  xk::apps::process_cpu_seconds());
    }
    if (!a.csv.empty() && !write_csv(a.csv, pts)) rc = kExitFail;
    (void)s.close();
    finish_handshakes(loop, tcp);
  }
  stack.report_signal();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  return xk::apps::app_main(kProg, [&] { args = parse_args(argc, argv); }, [&] { return run(args); });
}

// xk-synflood: a bulk TCP transfer and a SYN flood on the same link, from one
// xk stack -- the client side of the SYN-flood benchmark
// (tests/bench/synflood_bench.sh, docs/BENCHMARKS.md).
//
//   xk-synflood STACK --peer A.B.C.D:P [--seconds S] [--flood-rate R|max]
//               [--flood-from A.B.C.D/N] [--flood-burst K] [--probe-ms MS]
//
// The stack connects to --peer and sends for --seconds (the stream of
// xk-tcp-perf, unverified), shuts down and waits for the server's FIN, as
// xk-tcp-perf's client does: the throughput is the bytes sent over the time
// from the handshake to that FIN. Once the connection is up (so ARP has the server's MAC) a
// Pollable on the same loop writes SYNs straight into the driver: Ethernet to
// the server's MAC, IPv4 from a random address of --flood-from (off our
// subnet, so the server answers through its gateway, which is us, and its
// answers cost it a route lookup, not an ARP storm), TCP to --peer's port
// from a random port with a random ISN and the options Linux puts in a SYN
// (MSS, SACK-permitted, timestamps, window scale). --flood-rate paces them
// (SYNs per second); `max` sends --flood-burst every pass of the loop. The
// flood stops when the sending does.
//
// Every --probe-ms a probe connection is opened to --peer, shut down at once,
// and must see the server's FIN within 3 s: the listener still answering new
// clients while flooded (through SYN cookies once its half-open queue is
// full) -- the other half of what the benchmark checks.
//
// Prints `RESULT bytes=B seconds=S gbps=G flood_sent=N flood_rate=R
// probes=P probes_ok=K probe_ms_avg=A probe_ms_max=M cpu_s=C`; exit 0 when
// the transfer completed and every probe connected, 1 otherwise, 2 for a bad
// command line.
//
// The flooder runs on the client's thread: on this two-core machine a third
// busy thread would only take turns with the other two. The benchmark's
// unflooded run therefore opens the same probes, and the flood's own cost to
// the client shows in its CPU figure.

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "xk/apps/servers.hpp"
#include "xk/apps/stack.hpp"
#include "xk/apps/stream.hpp"
#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"
#include "xk/drivers/dpdk.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/tcp.hpp"

namespace {

constexpr const char* kProg = "xk-synflood";
using Clock = std::chrono::steady_clock;
using xk::apps::UsageError;

constexpr const char* kUsageHead = R"(usage: xk-synflood [options]

A bulk TCP transfer and a SYN flood from spoofed addresses on the same link
(the SYN-flood benchmark's client; tests/bench/synflood_bench.sh).

stack:
)";
constexpr const char* kUsageTail = R"(  --link-wait SEC     wait this long for the port's link (default 10)

test:
  --peer A.B.C.D:P    the server (bulk transfer, probes and flood all go there)
  --seconds S         send for this long (default 5)
  --flood-rate R      SYNs per second, or max (default 0: no flood)
  --flood-from CIDR   spoofed source addresses (default 203.0.113.0/24)
  --flood-burst K     SYNs per pass of the loop at most (default 32)
  --probe-ms MS       open a probe connection this often (default 50; 0: none)
  --timeout SEC       give up after this long without progress (default 30)
  --help

exit status: 0 success, 1 failure, 2 bad command line
)";

struct Args : xk::apps::CommonArgs {
  std::optional<xk::Ipv4Addr> peer;
  std::uint16_t peer_port = 0;
  double seconds = 5;
  double flood_rate = 0;  // SYNs per second; < 0: max
  xk::Ipv4Cidr flood_from{xk::Ipv4Addr{0xCB007100u}, 24};  // 203.0.113.0/24
  unsigned flood_burst = 32;
  unsigned probe_ms = 50;
  double timeout_s = 30;
};

const xk::apps::CommandLineSpec kCommandLine{
    .usage_head = kUsageHead, .usage_tail = kUsageTail, .role_noun = "role", .roles = {}, .idle_flag = false};

Args parse_args(int argc, char** argv) {
  Args a;
  xk::apps::parse_command_line(argc, argv, kCommandLine, a, [&](xk::apps::Flag& f) {
    using xk::apps::parse_number;
    if (f.name() == "--peer") {
      xk::IpAddr peer;
      std::tie(peer, a.peer_port) = xk::apps::parse_endpoint(f.name(), f.value());
      // It forges IPv4 SYNs by hand.
      if (!peer.is_v4()) throw UsageError{"--peer: an IPv4 address (the flood is IPv4's)"};
      a.peer = peer.v4();
    } else if (f.name() == "--seconds") {
      a.seconds = xk::apps::parse_seconds(f.name(), f.value());
    } else if (f.name() == "--flood-rate") {
      auto v = f.value();
      std::uint64_t r = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), r);
      if (v != "max" && (v.empty() || ec != std::errc{} || end != v.data() + v.size() || r > 1'000'000'000)) {
        throw UsageError{"--flood-rate: '" + std::string(v) + "' is neither SYNs per second (0..1000000000) nor max"};
      }
      a.flood_rate = v == "max" ? -1.0 : static_cast<double>(r);
    } else if (f.name() == "--flood-from") {
      auto v = f.value();
      auto c = xk::parse_cidr(v);
      if (!c || c->prefix_len < 8) throw UsageError{"--flood-from: '" + std::string(v) + "' is not a.b.c.d/n with n >= 8"};
      a.flood_from = *c;
    } else if (f.name() == "--flood-burst") {
      a.flood_burst = parse_number<unsigned>(f.name(), f.value(), 1, 1024);
    } else if (f.name() == "--probe-ms") {
      a.probe_ms = parse_number<unsigned>(f.name(), f.value(), 0, 60'000);
    } else if (f.name() == "--timeout") {
      a.timeout_s = xk::apps::parse_seconds(f.name(), f.value());
    } else {
      throw UsageError{"unknown option '" + std::string(f.name()) + "'"};
    }
  });
  a.stack.validate();
  if (!a.peer) throw UsageError{"--peer A.B.C.D:PORT is required"};
  return a;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---- the flood ------------------------------------------------------------------

using xk::store_be16;
using xk::store_be32;

// A checksum as csum::finish gives it (memory order) into its field.
void put_checksum(std::byte* p, std::uint16_t v) { std::memcpy(p, &v, sizeof v); }

// SYNs from random sources, written into the driver's transmit queue.
class Flood final : public xk::Pollable {
 public:
  static constexpr std::size_t kEth = 14, kIp = 20, kTcp = 40, kFrame = kEth + kIp + kTcp;

  Flood(xk::drivers::DpdkDriver& net, const Args& a, xk::MacAddr server_mac, bool csum)
      : net_(net), a_(a), csum_(csum) {
    std::byte* f = frame_.data();
    std::memcpy(f, server_mac.bytes.data(), 6);
    std::memcpy(f + 6, net.mac().bytes.data(), 6);
    store_be16(f + 12, 0x0800);
    std::byte* ip = f + kEth;
    ip[0] = std::byte{0x45};
    store_be16(ip + 2, kIp + kTcp);
    store_be16(ip + 6, 0x4000);  // DF
    ip[8] = std::byte{64};
    ip[9] = std::byte{6};
    store_be32(ip + 16, a.peer->value);
    std::byte* t = ip + kIp;
    store_be16(t + 2, a.peer_port);
    t[12] = std::byte{(kTcp / 4) << 4};
    t[13] = std::byte{0x02};  // SYN
    store_be16(t + 14, 64240);
    // Options as Linux sends them: MSS 1460, SACK permitted, timestamps,
    // NOP, window scale 7 (RFC 9293 3.2, RFC 2018, RFC 7323).
    const std::uint8_t opts[20] = {2, 4, 0x05, 0xB4, 4, 2, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0, 1, 3, 3, 7};
    std::memcpy(t + 20, opts, sizeof opts);
    last_ = Clock::now();
  }

  std::size_t poll(std::size_t) override {
    if (stopped_) return 0;
    unsigned n = a_.flood_burst;
    if (a_.flood_rate >= 0) {
      auto now = Clock::now();
      credit_ = std::min(credit_ + seconds_between(last_, now) * a_.flood_rate, static_cast<double>(a_.flood_burst));
      last_ = now;
      n = static_cast<unsigned>(credit_);
      credit_ -= n;
    }
    for (unsigned i = 0; i < n; ++i) {
      build_next();
      xk::Msg m = xk::Msg::copy_of(frame_, 0);
      // A full ring drops at the next flush (net0's tx_drop_full counts it):
      // the flood is what this loop can hand the port.
      if (net_.transmit(m) != xk::Status{}) break;
      ++sent_;
    }
    return n;
  }
  bool before_sleep() noexcept override { return stopped_; }

  void stop() noexcept { stopped_ = true; }
  std::uint64_t sent() const noexcept { return sent_; }

 private:
  std::uint64_t next_random() noexcept {  // xorshift64*
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return rng_ * 0x2545F4914F6CDD1Dull;
  }

  void build_next() {
    std::byte* ip = frame_.data() + kEth;
    std::byte* t = ip + kIp;
    const std::uint64_t r = next_random();
    const std::uint32_t host_mask = a_.flood_from.prefix_len >= 32 ? 0 : (0xFFFFFFFFu >> a_.flood_from.prefix_len);
    std::uint32_t src = (a_.flood_from.network().value & ~host_mask) | (static_cast<std::uint32_t>(r) & host_mask);
    if ((src & host_mask) == 0 || (src & host_mask) == host_mask) src ^= 1;  // no network or broadcast address
    store_be16(ip + 4, static_cast<std::uint16_t>(sent_));  // IP id
    store_be32(ip + 12, src);
    store_be16(ip + 10, 0);
    put_checksum(ip + 10, xk::csum::finish(xk::csum::partial(ip, kIp)));
    store_be16(t, static_cast<std::uint16_t>(1024 + (r >> 32) % 64000));
    store_be32(t + 4, static_cast<std::uint32_t>(r >> 16));       // ISN
    store_be32(t + 28, static_cast<std::uint32_t>(r >> 24));      // TSval
    store_be16(t + 16, 0);
    if (csum_) {
      const std::uint32_t pseudo = xk::csum::pseudo_header_v4(xk::Ipv4Addr{src}, *a_.peer, 6, kTcp);
      put_checksum(t + 16, xk::csum::finish(xk::csum::partial(t, kTcp, pseudo)));
    }
  }

  xk::drivers::DpdkDriver& net_;
  const Args& a_;
  bool csum_;
  std::array<std::byte, kFrame> frame_{};
  std::uint64_t rng_ = 0x9E3779B97F4A7C15ull;
  double credit_ = 0;
  Clock::time_point last_;
  std::uint64_t sent_ = 0;
  bool stopped_ = false;
};

// ---- the bulk transfer and the probes ----------------------------------------------

class Client final : public xk::Pollable {
 public:
  Client(xk::apps::AppStack& stack, xk::tcp::TcpProtocol& tcp, const Args& a, bool csum)
      : stack_(stack), tcp_(tcp), a_(a), csum_(csum), block_(xk::apps::stream_block(1)), bulk_(tcp.socket()) {
    start_ = last_progress_ = next_probe_ = Clock::now();
  }

  ~Client() override {
    if (flood_) stack_.loop().remove(*flood_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  xk::Status start() { return bulk_.connect(*a_.peer, xk::Port{a_.peer_port}); }

  std::size_t poll(std::size_t) override {
    auto now = Clock::now();
    if (seconds_between(last_progress_, now) > a_.timeout_s) {
      return fail("no progress for " + std::to_string(a_.timeout_s) + " s (bulk connection " +
                  xk::tcp::to_string(bulk_.state()) + ")");
    }
    std::size_t work = poll_bulk(now);
    if (connected_ && ok_) work += poll_probes(now);
    // The probes still open when the bulk stream ends get their time too.
    if ((done_ && probes_open_.empty()) || !ok_) stack_.loop().stop();
    return work;
  }
  bool before_sleep() noexcept override { return false; }

  void report() const {
    double secs = seconds_between(start_, end_);
    double avg = 0, max = 0;
    for (double v : probe_ms_) {
      avg += v;
      max = std::max(max, v);
    }
    if (!probe_ms_.empty()) avg /= static_cast<double>(probe_ms_.size());
    double flood_secs = seconds_between(start_, flood_end_);
    std::uint64_t flooded = flood_ ? flood_->sent() : 0;
    std::printf("RESULT bytes=%llu seconds=%.6f gbps=%.3f flood_sent=%llu flood_rate=%.0f "
                "probes=%llu probes_ok=%zu probe_ms_avg=%.3f probe_ms_max=%.3f cpu_s=%.3f\n",
                static_cast<unsigned long long>(sent_), secs, secs > 0 ? static_cast<double>(sent_) * 8 / secs / 1e9 : 0.0,
                static_cast<unsigned long long>(flooded), flood_secs > 0 ? static_cast<double>(flooded) / flood_secs : 0.0,
                static_cast<unsigned long long>(probes_),
                probe_ms_.size(), avg, max, xk::apps::process_cpu_seconds());
    xk::apps::print_conn_stats("bulk", bulk_);
    std::fflush(stdout);
  }
  // Stopped by a signal: the figures so far.
  void finish() {
    if (done_) return;
    end_ = Clock::now();
    if (!shut_) flood_end_ = end_;
  }
  bool ok() const noexcept { return ok_ && done_ && probe_ms_.size() == probes_; }

 private:
  struct Probe {
    xk::tcp::TcpSocket sock;
    Clock::time_point opened;
    bool shut = false;
  };

  std::size_t poll_bulk(Clock::time_point now) {
    if (done_) return 0;
    if (!connected_) {
      if (bulk_.state() == xk::tcp::State::syn_sent) return 0;
      if (bulk_.state() != xk::tcp::State::established) return fail("the bulk connection did not open");
      connected_ = true;
      start_ = next_probe_ = Clock::now();
      start_flood();
    }
    std::size_t work = 0;
    const bool sending = !shut_ && seconds_between(start_, now) < a_.seconds;
    while (sending) {
      std::size_t off = static_cast<std::size_t>(sent_ % block_.size());
      std::size_t n = block_.size() - off;
      auto w = bulk_.write(std::span<const std::byte>(block_).subspan(off, n));
      if (!w) {
        if (w.error() == xk::Errc::would_block) break;
        return fail(std::string("bulk write: ") + xk::to_string(w.error()));
      }
      sent_ += *w;
      last_progress_ = now;
      ++work;
    }
    if (!sending && !shut_) {
      (void)bulk_.shutdown_write();
      shut_ = true;
      flood_end_ = Clock::now();
      if (flood_) flood_->stop();
    }
    if (shut_) {
      std::byte b[256];
      auto r = bulk_.read(b);
      if (r && *r == 0) {
        end_ = Clock::now();
        done_ = true;
        return work + 1;
      }
      if (!r && r.error() != xk::Errc::would_block) return fail(std::string("bulk, after sending: ") + xk::to_string(r.error()));
    }
    return work;
  }

  void start_flood() {
    if (a_.flood_rate == 0) return;
    auto& arp = stack_.require<xk::arp::ArpProtocol>("arp0");
    auto& net = stack_.require<xk::drivers::DpdkDriver>("net0");
    // The server is on our subnet (the bulk connection reached it): ARP has it.
    auto e = arp.lookup(*a_.peer);
    if (!e || e->mac == xk::MacAddr{}) {
      fail("ARP has no address for the server");
      return;
    }
    flood_.emplace(net, a_, e->mac, csum_);
    stack_.loop().add(*flood_);
  }

  std::size_t poll_probes(Clock::time_point now) {
    std::size_t work = 0;
    if (a_.probe_ms != 0 && now >= next_probe_ && !shut_) {
      Probe p{tcp_.socket(), now};
      if (xk::Status st = p.sock.connect(*a_.peer, xk::Port{a_.peer_port}); !st) {
        fail(std::string("probe connect: ") + xk::to_string(st.error()));
        return 1;
      }
      probes_open_.push_back(std::move(p));
      ++probes_;
      next_probe_ = now + std::chrono::milliseconds(a_.probe_ms);
      ++work;
    }
    for (Probe& p : probes_open_) {
      if (!p.shut && p.sock.state() == xk::tcp::State::established) {
        (void)p.sock.shutdown_write();
        p.shut = true;
        ++work;
      }
      if (p.shut) {
        std::byte b[16];
        auto r = p.sock.read(b);
        if (r && *r == 0) {
          probe_ms_.push_back(std::chrono::duration<double, std::milli>(now - p.opened).count());
          (void)p.sock.close();
          ++work;
        }
      }
    }
    std::erase_if(probes_open_, [&](const Probe& p) {
      if (!p.sock.is_open()) return true;
      if (seconds_between(p.opened, now) > 3.0) {
        std::fprintf(stderr, "%s: a probe connection did not complete in 3 s (state %s)\n", kProg,
                     xk::tcp::to_string(p.sock.state()));
        return true;
      }
      return false;
    });
    return work;
  }

  std::size_t fail(const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", kProg, why.c_str());
    ok_ = false;
    done_ = true;
    end_ = Clock::now();
    if (flood_) flood_->stop();
    stack_.loop().stop();
    return 1;
  }

  xk::apps::AppStack& stack_;
  xk::tcp::TcpProtocol& tcp_;
  const Args& a_;
  bool csum_;
  std::vector<std::byte> block_;
  xk::tcp::TcpSocket bulk_;
  std::optional<Flood> flood_;
  std::deque<Probe> probes_open_;
  std::vector<double> probe_ms_;
  std::uint64_t probes_ = 0;
  std::uint64_t sent_ = 0;
  bool connected_ = false, shut_ = false, done_ = false, ok_ = true;
  Clock::time_point start_{}, end_{}, flood_end_{}, last_progress_{}, next_probe_{};
};

int run(const Args& a) {
  xk::apps::AppStack stack(kProg, a.stack, a.idle());
  auto& tcp = stack.require<xk::tcp::TcpProtocol>("tcp0");
  stack.wait_for_link(a.link_wait_s);
  Client client(stack, tcp, a, a.stack.csum);
  if (xk::Status st = client.start(); !st) {
    std::fprintf(stderr, "%s: connect: %s\n", kProg, xk::to_string(st.error()));
    return 1;
  }
  stack.loop().add(client);
  stack.loop().run();
  stack.loop().remove(client);
  client.finish();
  client.report();
  xk::apps::finish_handshakes(stack.loop(), tcp);
  stack.report_signal(true);  // the counters: net0's tx_drop_full is the flood the link refused
  return client.ok() && stack.signals().signal() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  return xk::apps::app_main(kProg, [&] { args = parse_args(argc, argv); }, [&] { return run(args); });
}

// TCP between two whole xk stacks in one process (pair -> eth -> arp -> ipv4
// -> [fault] -> tcp), on a manual clock that jumps to the next timer when both
// stacks are idle: handshakes, options, bulk data both ways, closes, RSTs,
// loss recovery. The scripted single-stack tests are in tcp_script_test.cpp.
#include <cstdio>

#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tcb.hpp"
#include "xk/apps/digest.hpp"
#include "xk/clock.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/kinds.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/fault.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/tcp.hpp"

namespace xk::tcp {
namespace {

using namespace std::chrono_literals;

constexpr Ipv4Addr kIpA{0xC000020A};  // 192.0.2.10
constexpr Ipv4Addr kIpB{0xC0000214};  // 192.0.2.20

struct StackOpts {
  std::string tcp = "";    // extra tcp options
  std::string fault = "";  // fault options between ip and tcp ("" = no fault layer)
  std::string pair = "";   // extra pair options
};

std::string spec(const char* mac, const char* addr, const StackOpts& o) {
  std::string s = std::string("pair net0 link=wire mac=") + mac + " " + o.pair +
                  "\n"
                  "eth  eth0 below=net0\n"
                  "arp  arp0 below=eth0\n"
                  "ipv4 ip0  below=eth0,arp0 addr=" +
                  addr + "\n";
  std::string below = "ip0";
  if (!o.fault.empty()) {
    s += "fault f0 below=ip0 " + o.fault + "\n";
    below = "f0";
  }
  s += "tcp  tcp0 below=" + below + " rto_min_ms=10 " + o.tcp + "\n";
  return s;
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = std::byte(static_cast<unsigned char>(x >> 24));
  }
  return v;
}

struct Tcp2 : ::testing::Test {
  ManualClock clock{Time(std::chrono::seconds(1000))};
  EventLoop loop_a{clock};
  EventLoop loop_b{clock};
  drivers::PairHub hub;
  Registry registry;
  std::unique_ptr<Graph> a;
  std::unique_ptr<Graph> b;

  void build(const StackOpts& oa = {}, const StackOpts& ob = {}) {
    register_all_kinds(registry);
    drivers::register_pair(registry, hub);
    a = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:0a", "192.0.2.10/24", oa), registry, &loop_a, "A"));
    b = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:14", "192.0.2.20/24", ob), registry, &loop_b, "B"));
  }
  void TearDown() override {
    b.reset();
    a.reset();
  }
  TcpProtocol& tcp_a() { return *a->find_as<TcpProtocol>("tcp0"); }
  TcpProtocol& tcp_b() { return *b->find_as<TcpProtocol>("tcp0"); }
  std::uint64_t counter(Graph& g, const char* proto, const char* name) { return g.find(proto)->counters().value(name); }

  // Runs both stacks until `done` or nothing is left to do; when both are
  // idle, jumps the clock to the next timer. False if `limit` passed first.
  template <class F>
  bool run_until(F&& done, Duration limit = 600s) {
    const Time end = clock.now() + limit;
    for (long i = 0; i < 50'000'000; ++i) {
      if (done()) return true;
      std::size_t work = loop_a.run_once() + loop_b.run_once();
      if (work != 0) continue;
      std::optional<Time> na = loop_a.timers().next_deadline();
      std::optional<Time> nb = loop_b.timers().next_deadline();
      std::optional<Time> next = na;
      if (nb && (!next || *nb < *next)) next = nb;
      if (!next) return done();
      if (*next > end) return done();
      if (*next > clock.now()) clock.set(*next);
    }
    return done();
  }
  void settle() {
    run_until([] { return false; }, 1ms);
  }

  // Sends `out` through `from` while draining `to` into `in`.
  void transfer(TcpSocket& from, TcpSocket& to, const std::vector<std::byte>& out, std::vector<std::byte>& in,
                Duration limit = 600s) {
    std::size_t sent = 0;
    std::vector<std::byte> buf(65536);
    bool ok = run_until(
        [&] {
          while (sent < out.size()) {
            auto n = from.write(std::span<const std::byte>(out).subspan(sent));
            if (!n) break;
            sent += *n;
          }
          for (;;) {
            auto n = to.read(buf);
            if (!n || *n == 0) break;
            in.insert(in.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
          }
          return in.size() >= out.size();
        },
        limit);
    EXPECT_TRUE(ok) << "transfer stalled at " << in.size() << " of " << out.size() << " bytes (sent " << sent << ")";
  }

  // What the retransmission timer cost a side, printed with the test's
  // output (the time lost to RTOs is what RACK-TLP exists to save).
  struct RtoReport {
    std::uint64_t expiries = 0;
    double wait_ms = 0;
    std::uint64_t probes = 0;
    std::uint64_t recoveries = 0;
    std::uint64_t spurious = 0;  // timeouts undone (RFC 3522)
  };
  RtoReport rto_report(Graph& g, const std::string& label) {
    RtoReport r{counter(g, "tcp0", "rto_expiries"), static_cast<double>(counter(g, "tcp0", "rto_wait_us")) / 1000.0,
                counter(g, "tcp0", "loss_probes"), counter(g, "tcp0", "fast_retransmits"),
                counter(g, "tcp0", "spurious_rtos")};
    std::printf("RTO report %s: rto_expiries=%llu (%llu undone) time_in_rto_ms=%.1f loss_probes=%llu fast_recoveries=%llu\n",
                label.c_str(), static_cast<unsigned long long>(r.expiries), static_cast<unsigned long long>(r.spurious),
                r.wait_ms, static_cast<unsigned long long>(r.probes), static_cast<unsigned long long>(r.recoveries));
    return r;
  }

  // A connected pair: A connects to B's listener on port 5001.
  std::pair<TcpSocket, TcpSocket> connected(std::size_t backlog = 8) {
    Result<TcpListener> l = tcp_b().listen(Ipv4Addr{}, Port{5001}, backlog);
    EXPECT_TRUE(l.ok());
    listener = std::move(*l);
    TcpSocket c = tcp_a().socket();
    EXPECT_TRUE(c.connect(kIpB, Port{5001}).ok());
    TcpSocket s;
    EXPECT_TRUE(run_until([&] {
      if (!s.is_open()) {
        auto r = listener.accept();
        if (r) s = std::move(*r);
      }
      return s.is_open() && c.state() == State::established;
    }));
    return {std::move(c), std::move(s)};
  }
  TcpListener listener;
};

TEST_F(Tcp2, HandshakeNegotiatesWindowScaleSackTimestampsAndMss) {
  build();
  auto [c, s] = connected();
  ASSERT_EQ(c.state(), State::established);
  ASSERT_EQ(s.state(), State::established);
  for (TcpSocket* x : {&c, &s}) {
    ConnStats st = x->stats();
    EXPECT_TRUE(st.sack);
    EXPECT_TRUE(st.timestamps);
    // 64 MiB buffers: 65535 << 10 falls 1 KiB short, so the shift is 11 (RFC 7323 2.3).
    EXPECT_EQ(st.snd_wscale, 11);
    EXPECT_EQ(st.rcv_wscale, 11);
    EXPECT_EQ(st.mss, 1460);
  }
  EXPECT_EQ(c.tuple().remote.port, 5001);
  EXPECT_EQ(s.tuple().local.port, 5001);
  EXPECT_EQ(s.tuple().remote.port, c.tuple().local.port);
  EXPECT_GE(c.tuple().local.port, 49152);
  EXPECT_EQ(counter(*a, "tcp0", "active_opens"), 1u);
  EXPECT_EQ(counter(*b, "tcp0", "passive_opens"), 1u);
}

// What a node declares to a filterd that restarted (RESYNC): its listeners
// with their group flag, its connections with their 4-tuples and whether a
// listener made them.
TEST_F(Tcp2, ListenersAndConnectionsCanBeEnumerated) {
  build();
  EXPECT_TRUE(tcp_b().listeners().empty());
  EXPECT_TRUE(tcp_b().connections().empty());
  Result<TcpListener> grouped = tcp_b().listen(Ipv4Addr{}, Port{6000}, 8, /*group=*/true);
  ASSERT_TRUE(grouped.ok());
  auto [c, s] = connected();
  std::vector<TcpProtocol::ListenerInfo> ls = tcp_b().listeners();
  ASSERT_EQ(ls.size(), 2u);
  std::sort(ls.begin(), ls.end(), [](const auto& x, const auto& y) { return x.port.value < y.port.value; });
  EXPECT_EQ(ls[0].port.value, 5001);
  EXPECT_FALSE(ls[0].group);
  EXPECT_EQ(ls[1].port.value, 6000);
  EXPECT_TRUE(ls[1].group);
  std::vector<TcpProtocol::ConnectionInfo> accepted = tcp_b().connections();
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_TRUE(accepted[0].passive);
  EXPECT_FALSE(accepted[0].claimed);  // no authority here
  EXPECT_EQ(accepted[0].state, State::established);
  EXPECT_EQ(accepted[0].tuple, s.tuple());
  std::vector<TcpProtocol::ConnectionInfo> opened = tcp_a().connections();
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_FALSE(opened[0].passive);
  EXPECT_EQ(opened[0].tuple, c.tuple());
  // A closed listener is gone from the list; its accepted connection stays.
  ASSERT_TRUE(grouped->close().ok());
  ASSERT_TRUE(listener.close().ok());
  EXPECT_TRUE(tcp_b().listeners().empty());
  EXPECT_EQ(tcp_b().connections().size(), 1u);
}

TEST_F(Tcp2, OptionsOffOnOneSideAreOffForBoth) {
  build({.tcp = "sack=off ts=off wscale=0"}, {});
  auto [c, s] = connected();
  for (TcpSocket* x : {&c, &s}) {
    ConnStats st = x->stats();
    EXPECT_FALSE(st.sack);
    EXPECT_FALSE(st.timestamps);
    EXPECT_EQ(st.snd_wscale, 0);
    EXPECT_EQ(st.rcv_wscale, 0);
  }
  std::vector<std::byte> out = pattern(300000, 1), in;
  transfer(c, s, out, in);
  EXPECT_EQ(in, out);
}

TEST_F(Tcp2, BulkBothWaysThenGracefulClose) {
  build();
  auto [c, s] = connected();
  std::vector<std::byte> ab = pattern(4 << 20, 2), ba = pattern(3 << 20, 3), got_b, got_a;
  transfer(c, s, ab, got_b);
  EXPECT_EQ(got_b, ab);
  transfer(s, c, ba, got_a);
  EXPECT_EQ(got_a, ba);
  EXPECT_EQ(c.stats().retransmits, 0u);
  EXPECT_EQ(s.stats().retransmits, 0u);
  // The client closes first: it ends in TIME-WAIT, the server in CLOSED.
  TcpConnection* cc = c.connection();
  Ref<TcpConnection> keep_c(cc);
  ASSERT_TRUE(c.shutdown_write().ok());
  std::byte one[1];
  ASSERT_TRUE(run_until([&] {
    auto r = s.read(one);
    return r && *r == 0;
  })) << "the server must see end of stream";
  EXPECT_EQ(s.state(), State::close_wait);
  ASSERT_TRUE(s.close().ok());
  ASSERT_TRUE(run_until([&] { return keep_c->state() == State::time_wait; }, 10s));
  EXPECT_EQ(tcp_b().connection_count(), 0u) << "LAST-ACK ended when our FIN was acknowledged";
  EXPECT_EQ(tcp_a().connection_count(), 1u) << "TIME-WAIT keeps the 4-tuple";
  // 2 MSL later it is gone.
  ASSERT_TRUE(run_until([&] { return tcp_a().connection_count() == 0; }, 120s));
  EXPECT_EQ(keep_c->state(), State::closed);
  (void)c.close();
}

TEST_F(Tcp2, ConnectToAClosedPortIsRefused) {
  build();
  TcpSocket c = tcp_a().socket();
  ASSERT_TRUE(c.connect(kIpB, Port{7777}).ok());
  ASSERT_TRUE(run_until([&] { return c.state() == State::closed; }, 10s));
  std::byte buf[4];
  auto r = c.read(buf);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Errc::refused);
  EXPECT_EQ(counter(*b, "tcp0", "drop_no_listener"), 1u);
  EXPECT_EQ(counter(*b, "tcp0", "resets_sent"), 1u);
}

// TCP takes IPv6 endpoints; the IP layer under it is IPv4's so far, and says
// so instead of sending anything.
TEST_F(Tcp2, AnIpv6PeerIsUnsupportedBelowAndNothingLeaves) {
  build();
  TcpSocket c = tcp_a().socket();
  const IpAddr v6 = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10});
  EXPECT_EQ(c.connect(v6, Port{80}).error(), Errc::unsupported);
  EXPECT_EQ(c.state(), State::closed);
  EXPECT_EQ(tcp_a().connection_count(), 0u);
  EXPECT_EQ(counter(*a, "tcp0", "tx_segments"), 0u);
  // The socket is still good for an IPv4 peer.
  ASSERT_TRUE(c.connect(kIpB, Port{7777}).ok());
  ASSERT_TRUE(run_until([&] { return c.state() == State::closed; }, 10s));
}

TEST_F(Tcp2, AbortResetsThePeer) {
  build();
  auto [c, s] = connected();
  c.abort();
  ASSERT_TRUE(run_until([&] { return s.state() == State::closed; }, 10s));
  std::byte buf[4];
  auto r = s.read(buf);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Errc::reset);
}

TEST_F(Tcp2, SynRetransmissionsBackOffThenTimeOut) {
  build({.tcp = "rto_initial_ms=1000"}, {.pair = "queue=1"});
  // B's driver never polls: everything A sends waits, then drops.
  b.reset();
  TcpSocket c = tcp_a().socket();
  const Time t0 = clock.now();
  ASSERT_TRUE(c.connect(kIpB, Port{80}).ok());
  ASSERT_TRUE(run_until([&] { return c.state() == State::closed; }, 1000s));
  // 1 + 2 + 4 + 8 + 16 + 32 s for the six retries, then a last wait capped
  // at rto_max (60 s): RFC 6298 5.5 doubling with RFC 6298 2.5's maximum.
  Duration took = clock.now() - t0;
  EXPECT_EQ(took, 123s);
  EXPECT_EQ(counter(*a, "tcp0", "rto_expiries"), 6u);
  std::byte buf[1];
  EXPECT_EQ(c.read(buf).error(), Errc::timed_out);
}

// Loss, both ways: recovery (SACK, then without) must deliver every byte.
struct Tcp2Loss : Tcp2, ::testing::WithParamInterface<const char*> {};

TEST_P(Tcp2Loss, EveryByteArrivesUnderLoss) {
  std::string tcp_opts = GetParam();
  build({.tcp = tcp_opts, .fault = "loss=0.02 seed=11"}, {.tcp = tcp_opts, .fault = "loss=0.02 seed=12"});
  auto [c, s] = connected();
  std::vector<std::byte> out = pattern(2 << 20, 4), in;
  transfer(c, s, out, in);
  EXPECT_EQ(in, out);
  ConnStats st = c.stats();
  EXPECT_GT(st.retransmits, 0u);
  EXPECT_GT(st.fast_retransmits, 0u) << "losses should mostly be repaired without a timeout";
  (void)rto_report(*a, tcp_opts.empty() ? "sender" : tcp_opts);
}

// A fault layer that delays what it receives hands it up after IP's upcall
// ended: TCP still learns whom it came from (the facts travel in the Msg).
TEST_F(Tcp2, AStreamCrossesADelayedPath) {
  build({.fault = "delay=5"}, {.fault = "delay=5"});
  const Time t0 = clock.now();
  auto [c, s] = connected();
  ASSERT_EQ(c.state(), State::established);
  EXPECT_GE(clock.now() - t0, 10ms) << "a round trip is 2 x 5 ms";
  EXPECT_LT(clock.now() - t0, 100ms);
  std::vector<std::byte> out = pattern(1 << 20, 3), in;
  transfer(c, s, out, in);
  EXPECT_EQ(in, out);
  EXPECT_GE(c.stats().srtt, 10ms);
}

// ECN end to end (RFC 3168): A asks, B accepts; a congested hop (the fault
// layer under A's TCP) marks 2 % of A's data CE instead of dropping it.
// Every byte arrives with no retransmission, B echoes the marks, A cuts
// its window for them.
TEST_F(Tcp2, EcnMarksCutTheWindowWithoutALoss) {
  build({.tcp = "ecn=on", .fault = "dir=tx ce=0.02 seed=3"}, {});
  auto [c, s] = connected();
  EXPECT_TRUE(c.stats().ecn);
  EXPECT_TRUE(s.stats().ecn);
  std::vector<std::byte> out = pattern(4 << 20, 5), in;
  transfer(c, s, out, in);
  EXPECT_EQ(in, out);
  EXPECT_GT(counter(*a, "f0", "tx_ce_marked"), 0u);
  EXPECT_EQ(counter(*b, "tcp0", "ecn_ce_received"), counter(*a, "f0", "tx_ce_marked"));
  EXPECT_GT(counter(*a, "tcp0", "ecn_reductions"), 0u);
  EXPECT_EQ(c.stats().retransmits, 0u);
}

// RACK-TLP against RFC 6675 on the same 1 % loss (same seeds, same bytes):
// time-based detection repairs the lost retransmissions and the losses near
// a flight's end that the duplicate-ACK rule leaves to the RTO. (The link
// has no delay, so ACKs never leave a probe time to fire; the scripted
// tests and the request/response benchmark show the probes.) Judged are the
// timeouts that stood: with rto_min 10 ms below the peer's 40 ms delayed
// ACK, a flight's last ACK (or a lost one's successor) may come after the
// RTO, and its timestamp echo then shows that nothing was lost; such a
// timeout is undone (RFC 3522/4015), costs the one segment, and is no loss
// either algorithm could have repaired.
struct LossRun : Tcp2 {
  void TestBody() override {}
};

TEST(Tcp2Recovery, RackTlpRepairsOnePercentLossAlmostWithoutTimeouts) {
  Tcp2::RtoReport r[2];
  const char* modes[2] = {"recovery=rfc6675", "recovery=rack"};
  for (int m = 0; m < 2; ++m) {
    SCOPED_TRACE(modes[m]);
    LossRun run;
    run.build({.tcp = modes[m], .fault = "loss=0.01 delay=1 seed=41"},
              {.tcp = modes[m], .fault = "loss=0.01 delay=1 seed=42"});
    auto [c, s] = run.connected();
    std::vector<std::byte> out = pattern(8 << 20, 9), in;
    const Time t0 = run.clock.now();
    run.transfer(c, s, out, in, 3600s);
    EXPECT_EQ(in, out);
    std::printf("%s: 8 MiB in %.1f ms of virtual time, %llu retransmits\n", modes[m],
                std::chrono::duration<double, std::milli>(run.clock.now() - t0).count(),
                static_cast<unsigned long long>(c.stats().retransmits));
    r[m] = run.rto_report(*run.a, modes[m]);
    run.TearDown();
  }
  const std::uint64_t stood[2] = {r[0].expiries - r[0].spurious, r[1].expiries - r[1].spurious};
  EXPECT_GT(stood[0], 0u) << "the reference: RFC 6675 leaves some losses to the RTO";
  EXPECT_LE(stood[1] * 4, stood[0]) << "RACK-TLP: at most a quarter of RFC 6675's timeouts";
}

INSTANTIATE_TEST_SUITE_P(Recovery, Tcp2Loss, ::testing::Values("", "sack=off", "cc=newreno", "sack=off cc=newreno"),
                         [](const auto& p) {
                           std::string n = p.param;
                           if (n.empty()) return std::string("sack_cubic");
                           for (char& ch : n) {
                             if (ch == '=' || ch == ' ') ch = '_';
                           }
                           return n;
                         });

// Sequence numbers are modulo 2^32 (RFC 9293 3.4): a stream whose sequence
// space crosses zero must go through like any other, under loss, reordering
// and duplicates (SACK blocks, reassembly, RTT samples and the send buffer
// all straddle the wrap). The clock is set so that one side's ISN (RFC 6528:
// 4-us ticks + the keyed hash of the tuple) lies 100 kB before zero.
struct Tcp2Wrap : Tcp2, ::testing::WithParamInterface<bool> {};  // true: the client's ISN wraps, false: the server's

TEST_P(Tcp2Wrap, StreamsCrossTheSequenceWrapIntactUnderFaults) {
  const char* hex = "000102030405060708090a0b0c0d0e0f";
  Secret key{};
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = std::byte(static_cast<unsigned char>(i));
  const IsnGenerator gen(key);
  const FourTuple client_side{{kIpA, 49152}, {kIpB, 5001}};  // the first ephemeral port
  const FourTuple server_side{{kIpB, 5001}, {kIpA, 49152}};
  const std::uint32_t f = gen.offset(GetParam() ? client_side : server_side);
  const std::uint32_t want_ticks = 0u - 100'000u - f;
  const std::uint32_t forward = want_ticks - IsnGenerator::clock_ticks(clock.now());
  clock.set(clock.now() + std::chrono::microseconds(std::uint64_t{forward} * 4));
  const std::string tcp_opts = std::string("secret=") + hex + " ephemeral_random=off";
  build({.tcp = tcp_opts, .fault = "loss=0.01 reorder=0.01 duplicate=0.01 seed=31"},
        {.tcp = tcp_opts, .fault = "loss=0.01 reorder=0.01 duplicate=0.01 seed=32"});
  auto [c, s] = connected();
  const std::uint32_t iss = GetParam() ? gen.isn(client_side, clock.now()).raw() : gen.isn(server_side, clock.now()).raw();
  EXPECT_GE(iss, 0u - 110'000u) << "the ISN lies just before the wrap";
  std::vector<std::byte> there = pattern(1 << 20, 7), in_there;
  transfer(c, s, there, in_there);
  EXPECT_EQ(in_there, there);
  std::vector<std::byte> back = pattern(1 << 20, 8), in_back;
  transfer(s, c, back, in_back);
  EXPECT_EQ(in_back, back);
  EXPECT_GT(c.stats().retransmits + s.stats().retransmits, 0u);
  // And a clean close on both sides.
  ASSERT_TRUE(c.shutdown_write().ok());
  ASSERT_TRUE(s.shutdown_write().ok());
  EXPECT_TRUE(run_until([&] { return c.state() == State::time_wait || c.state() == State::closed; }, 60s))
      << to_string(c.state());
}

INSTANTIATE_TEST_SUITE_P(Sides, Tcp2Wrap, ::testing::Values(true, false),
                         [](const auto& p) { return std::string(p.param ? "client_isn" : "server_isn"); });

// The fault layer under the whole stack (between the driver and eth): every
// impairment at once, with checksums on. Each way a stream is sent and its
// SHA-256 compared; then both sides close cleanly.
struct Tcp2Faults : Tcp2, ::testing::WithParamInterface<const char*> {};

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kFaultBytes = 24u << 20;  // ASan runs several times slower
#else
constexpr std::size_t kFaultBytes = 256u << 20;
#endif

// Streams `total` bytes of a seeded pattern through `from`, hashing what is
// sent and what `to` reads; both digests come back.
std::pair<std::string, std::string> stream(Tcp2& t, TcpSocket& from, TcpSocket& to, std::size_t total, unsigned seed) {
  std::vector<std::byte> block = pattern(1 << 20, seed);
  std::vector<std::byte> buf(1 << 16);
  apps::StreamDigest sent_sha, got_sha;
  std::size_t sent = 0, got = 0;
  bool ok = t.run_until([&] {
    while (sent < total) {
      std::size_t off = sent % block.size();
      std::size_t n = std::min(total - sent, block.size() - off);
      auto w = from.write(std::span<const std::byte>(block).subspan(off, n));
      if (!w) break;
      sent_sha.update(std::span<const std::byte>(block).subspan(off, *w));
      sent += *w;
    }
    for (;;) {
      auto r = to.read(buf);
      if (!r || *r == 0) break;
      got_sha.update(std::span<const std::byte>(buf).first(*r));
      got += *r;
    }
    return got >= total;
  }, 3600s);
  EXPECT_TRUE(ok) << "stalled at " << got << " of " << total << " bytes";
  return {sent_sha.hex(), got_sha.hex()};
}

TEST_P(Tcp2Faults, StreamsSurviveEveryImpairmentWithChecksumsOn) {
  StackOpts oa{.pair = "queue=4096"}, ob{.pair = "queue=4096"};
  std::string faults = GetParam();
  // The fault layer sits on the driver: frames of every layer are hit.
  oa.fault = faults + " seed=21";
  ob.fault = faults + " seed=22";
  register_all_kinds(registry);
  drivers::register_pair(registry, hub);
  auto mk = [&](const char* mac, const char* addr, const StackOpts& o) {
    return std::string("pair net0 link=wire mac=") + mac + " " + o.pair + "\nfault f0 below=net0 " + o.fault +
           "\neth eth0 below=f0\narp arp0 below=eth0\nipv4 ip0 below=eth0,arp0 addr=" + addr +
           "\ntcp tcp0 below=ip0 rto_min_ms=10\n";
  };
  a = std::make_unique<Graph>(Graph::build(mk("02:00:00:00:00:0a", "192.0.2.10/24", oa), registry, &loop_a, "A"));
  b = std::make_unique<Graph>(Graph::build(mk("02:00:00:00:00:14", "192.0.2.20/24", ob), registry, &loop_b, "B"));
  auto [c, s] = connected();
  ASSERT_EQ(c.state(), State::established);
  auto [ab_sent, ab_got] = stream(*this, c, s, kFaultBytes, 5);
  EXPECT_EQ(ab_got, ab_sent);
  auto [ba_sent, ba_got] = stream(*this, s, c, kFaultBytes, 6);
  EXPECT_EQ(ba_got, ba_sent);
  // The impairments happened, and checksums caught the corruption.
  EXPECT_GT(counter(*a, "f0", "tx_lost") + counter(*a, "f0", "rx_lost"), 0u);
  EXPECT_GT(counter(*a, "f0", "tx_reordered") + counter(*b, "f0", "tx_duplicated"), 0u);
  std::uint64_t csum_drops = counter(*a, "tcp0", "drop_bad_csum") + counter(*b, "tcp0", "drop_bad_csum") +
                             counter(*a, "ip0", "drop_bad_csum") + counter(*b, "ip0", "drop_bad_csum");
  EXPECT_GT(counter(*a, "f0", "tx_corrupted") + counter(*b, "f0", "tx_corrupted"), 0u);
  EXPECT_GT(csum_drops, 0u) << "corrupted frames must be caught by a checksum";
  (void)rto_report(*a, std::string("A, ") + faults);
  (void)rto_report(*b, std::string("B, ") + faults);
  // A clean close both ways: both FINs cross (a simultaneous close, so both
  // sides pass through TIME-WAIT), both readers see the end of the stream.
  ASSERT_TRUE(c.shutdown_write().ok());
  ASSERT_TRUE(s.shutdown_write().ok());
  std::byte one[1];
  auto finished = [](State st) { return st == State::time_wait || st == State::closed; };
  ASSERT_TRUE(run_until([&] {
    auto rc = c.read(one);
    auto rs = s.read(one);
    return rc && *rc == 0 && rs && *rs == 0 && finished(c.state()) && finished(s.state());
  }, 600s)) << "client " << to_string(c.state()) << ", server " << to_string(s.state());
  EXPECT_EQ(c.connection()->pending_error(), Errc::ok);
  EXPECT_EQ(s.connection()->pending_error(), Errc::ok);
}

INSTANTIATE_TEST_SUITE_P(Impairments, Tcp2Faults,
                         ::testing::Values("loss=0.01 reorder=0.01 duplicate=0.01 corrupt=0.001",
                                           "loss=0.05 reorder=0.01 duplicate=0.01 corrupt=0.001"),
                         [](const auto& p) { return std::string(p.index == 0 ? "loss1pct" : "loss5pct"); });

}  // namespace
}  // namespace xk::tcp

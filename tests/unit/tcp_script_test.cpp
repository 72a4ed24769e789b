// Scripted-packet tests of one TCP against a scripted peer, on virtual time
// (tests/unit/support/tcp_script.hpp): the exact segments the stack sends for
// what the peer sends, and the counters it keeps. Each test names the RFC
// rule it checks. Sequence numbers in scripts are relative (see the harness).
#include "tcp_script.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <unistd.h>

namespace xk::tcp::script {
namespace {

using TcpScript = Script;

Errc read_error(TcpSocket& s) {
  std::byte b[16];
  Result<std::size_t> r = s.read(b);
  return r ? Errc::ok : r.error();
}

// ---- handshake options (RFC 9293 3.7.1, RFC 7323 2.2/3.2, RFC 2018 2) -------

TEST_F(TcpScript, PassiveOpenEchoesEveryOptionThePeerOffered) {
  start();
  listen();
  irs = SeqNum(0x10000000);
  inject(syn().seq(0).win(29200).mss(1460).ws(7).sackok().ts(100, 0));
  // 64 MiB buffers need a shift of 11 (65535 << 10 falls 1 KiB short).
  expect(syn_ack().ack(1).win(65535).mss(1460).ws(11).sackok().ts(now_ms(), 100));
  expect_nothing();
  EXPECT_EQ(tcp->connection_count(), 1u);
  EXPECT_EQ(stats().passive_opens.value(), 1u);
  inject(ack().seq(1).ack(1).win(229).ts(101, now_ms()));
  Result<TcpSocket> a = listener.accept();
  ASSERT_TRUE(a.ok());
  sock = std::move(*a);
  ConnStats st = sock.stats();
  EXPECT_EQ(st.state, State::established);
  EXPECT_EQ(st.mss, 1460);
  EXPECT_EQ(st.snd_wscale, 7);
  EXPECT_EQ(st.rcv_wscale, 11);
  EXPECT_TRUE(st.sack);
  EXPECT_TRUE(st.timestamps);
  EXPECT_EQ(st.snd_wnd, 229u << 7) << "the window of a non-SYN segment is scaled";
  EXPECT_EQ(stats().established.value(), 1u);
  expect_nothing();
}

TEST_F(TcpScript, SynAckOffersOnlyWhatTheSynOffered) {
  start();
  listen();
  irs = SeqNum(0x30000000);
  struct Case {
    Offer offer;
    const char* what;
  };
  const Case cases[] = {
      {Offer().mss(1200), "MSS only"},
      {Offer().mss(1200).ws(3), "window scale"},
      {Offer().mss(1200).sack(), "SACK-permitted"},
      {Offer().mss(1200).ts(), "timestamps"},
      {Offer().no_mss(), "no options at all"},
  };
  std::uint16_t port = 41000;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    pport = port++;
    inject(offer_syn(c.offer, 777));
    // Our MSS is always there (RFC 9293 3.7.1: MUST send in the SYN).
    Seg sa = syn_ack().ack(1).win(65535).mss(1460);
    if (c.offer.ws_) sa.ws(11);
    if (c.offer.sack_) sa.sackok();
    if (c.offer.ts_) sa.ts(now_ms(), 777);
    expect(sa);
  }
  expect_nothing();
  EXPECT_EQ(tcp->connection_count(), 5u);
}

// The order of a SYN-ACK's options is the one Linux, the BSDs and Windows
// write, so captures compare byte for byte: with timestamps, mss, sackOK,
// TS, nop, wscale; without, mss, nop, nop, sackOK, nop, wscale.
TEST_F(TcpScript, SynAckOptionsComeInTheCommonOrder) {
  start();
  listen();
  irs = SeqNum(0x30000000);
  pport = 41000;
  inject(offer_syn(Offer().mss(1200).ws(3).sack(), 777));
  Got g = expect(syn_ack().ack(1).win(65535).mss(1460).ws(11).sackok());
  EXPECT_EQ(g.raw_options, (std::vector<std::byte>{std::byte{2}, std::byte{4}, std::byte{0x05}, std::byte{0xb4},
                                                   std::byte{1}, std::byte{1}, std::byte{4}, std::byte{2},
                                                   std::byte{1}, std::byte{3}, std::byte{3}, std::byte{11}}));
  pport = 41001;
  inject(offer_syn(Offer().mss(1200).ws(3).sack().ts(), 777));
  g = expect(syn_ack().ack(1).win(65535).mss(1460).ws(11).sackok().ts(now_ms(), 777));
  ASSERT_EQ(g.raw_options.size(), 20u);
  EXPECT_EQ(g.raw_options[4], std::byte{4}) << "sackOK right after the MSS";
  EXPECT_EQ(g.raw_options[6], std::byte{8}) << "then the timestamps";
  EXPECT_EQ(g.raw_options[16], std::byte{1}) << "then nop, wscale";
  EXPECT_EQ(g.raw_options[17], std::byte{3});
  expect_nothing();
}

// By default each TCP starts its ephemeral search at a random port of the
// range (RFC 6056), so a program run again does not reuse its last run's
// 4-tuple; ephemeral_random=off starts at ephemeral_min.
TEST_F(TcpScript, EphemeralPortsStartAtARandomPortOfTheRange) {
  std::set<std::uint16_t> firsts;
  for (int i = 0; i < 8; ++i) {
    TcpConfig c;
    c.secret = test_secret();
    c.ephemeral_min = 40000;
    c.ephemeral_max = 40999;
    TearDown();
    tcp = std::make_unique<TcpProtocol>("tcp0", ip, loop.timers(), c);
    sock = tcp->socket();
    ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
    const std::uint16_t first = sock.tuple().local.port;
    EXPECT_GE(first, 40000);
    EXPECT_LE(first, 40999);
    TcpSocket next = tcp->socket();
    ASSERT_TRUE(next.connect(kPeer, Port{80}).ok());
    EXPECT_EQ(next.tuple().local.port, first == 40999 ? 40000 : first + 1) << "then steps of one, wrapping";
    firsts.insert(first);
  }
  EXPECT_GT(firsts.size(), 1u) << "eight stacks, one first port: not random";
}

TEST_F(TcpScript, ActiveOpenOffersEverythingAndUsesOnlyWhatTheSynAckGives) {
  start();
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  pport = 80;
  expect(syn().win(65535).mss(1460).ws(11).sackok().ts(now_ms(), 0));
  EXPECT_EQ(lport, 49152) << "the first ephemeral port (RFC 6335 6)";
  EXPECT_EQ(sock.state(), State::syn_sent);
  EXPECT_EQ(stats().active_opens.value(), 1u);
  irs = SeqNum(0x20000000);
  inject(syn_ack().seq(0).ack(1).win(5000).mss(1200));
  // No window scale in the SYN-ACK: neither side scales (RFC 7323 2.2), so
  // our window is 65535 unscaled; no timestamps either.
  expect(ack().seq(1).ack(1).win(65535));
  ConnStats st = sock.stats();
  EXPECT_EQ(st.state, State::established);
  EXPECT_EQ(st.mss, 1200);
  EXPECT_EQ(st.snd_wscale, 0);
  EXPECT_EQ(st.rcv_wscale, 0);
  EXPECT_FALSE(st.sack);
  EXPECT_FALSE(st.timestamps);
  EXPECT_EQ(st.snd_wnd, 5000u);
  expect_nothing();
}

TEST_F(TcpScript, ActiveOpenWithEveryOption) {
  TcpConfig c;
  c.rcvbuf = std::size_t{1} << 20;  // (the default depends on the machine's cache)
  start(c);
  active_open(Offer().mss(1460).ws(2).sack().ts());
  ConnStats st = sock.stats();
  EXPECT_EQ(st.snd_wscale, 2);
  EXPECT_EQ(st.rcv_wscale, 11);
  EXPECT_TRUE(st.sack);
  EXPECT_TRUE(st.timestamps);
  EXPECT_EQ(st.mss, 1460);
  // Our window is scaled now: 1 MiB >> 11.
  inject(ack().seq(1).ack(1).len(100));
  advance(40ms);
  expect(ack().seq(1).ack(101).win(512).ecr(peer_tsval));
}

TEST_F(TcpScript, OptionsTurnedOffAreNeverOffered) {
  TcpConfig c;
  c.wscale = 0;
  c.sack = false;
  c.timestamps = false;
  start(c);
  listen();
  irs = SeqNum(0x11110000);
  inject(syn().seq(0).mss(1460).ws(7).sackok().ts(100, 0));
  expect(syn_ack().ack(1).win(65535).mss(1460));
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{81}).ok());
  expect(syn().win(65535).mss(1460).to(49152).from(81));
}

// A retransmitted SYN means our SYN-ACK was lost: send it again, same ISS.
TEST_F(TcpScript, DuplicateSynInSynReceivedGetsTheSynAckAgain) {
  start();
  listen();
  irs = SeqNum(0x12340000);
  inject(syn().seq(0).mss(1000));
  expect(syn_ack().ack(1).mss(1460));
  const SeqNum first = iss;
  advance(300ms);
  inject(syn().seq(0).mss(1000));
  expect(syn_ack().seq(0).ack(1).mss(1460));
  EXPECT_EQ(iss, first);
  inject(ack().seq(1).ack(1));
  Result<TcpSocket> a = listener.accept();
  ASSERT_TRUE(a.ok());
  sock = std::move(*a);
  EXPECT_EQ(sock.state(), State::established);
  expect_nothing();
}

// RFC 6298 5.7: after a retransmitted SYN-ACK (and so no RTT sample, by
// Karn's rule) the RTO of the connection starts at 3 s.
TEST_F(TcpScript, SynAckRetransmissionsBackOffAndLeaveAnRtoOf3s) {
  start();
  listen();
  irs = SeqNum(0x12350000);
  inject(syn().seq(0).mss(1000));
  expect(syn_ack().ack(1).mss(1460));
  advance(999ms);
  expect_nothing();
  advance(1ms);
  expect(syn_ack().seq(0).ack(1).mss(1460));
  advance(1999ms);
  expect_nothing();
  advance(1ms);
  expect(syn_ack().seq(0).ack(1).mss(1460));
  EXPECT_EQ(stats().rto_expiries.value(), 2u);
  advance(100ms);
  inject(ack().seq(1).ack(1));
  Result<TcpSocket> a = listener.accept();
  ASSERT_TRUE(a.ok());
  sock = std::move(*a);
  EXPECT_EQ(sock.stats().rto, 3s);
  EXPECT_EQ(sock.stats().srtt, 0ns) << "no sample from a retransmitted SYN-ACK";
  expect_nothing();
}

TEST_F(TcpScript, SynReceivedAnswersABadAckWithRstAndARstWithListen) {
  start();
  listen();
  irs = SeqNum(0x12360000);
  inject(syn().seq(0).mss(1000));
  expect(syn_ack().ack(1).mss(1460));
  inject(ack().seq(1).ack(7));  // acknowledges nothing we sent
  expect(rst().seq(7));         // <SEQ=SEG.ACK><CTL=RST> (RFC 9293 3.10.7.4 fifth)
  EXPECT_EQ(tcp->connection_count(), 1u);
  inject(rst().seq(1));         // back to LISTEN: the half-open connection is forgotten
  expect_nothing();
  EXPECT_EQ(tcp->connection_count(), 0u);
  EXPECT_FALSE(listener.accept().ok());
  EXPECT_TRUE(listener.is_open());
  EXPECT_EQ(stats().resets_sent.value(), 1u);
  EXPECT_EQ(stats().resets_received.value(), 1u);
}

// A config with quick-ACK mode off, for the tests of what comes after it:
// the delayed-ACK algorithm, and ACK cadences they count on.
TcpConfig no_quickack(TcpConfig c = {}) {
  c.quickacks = 0;
  return c;
}

// ---- our receive window (RFC 9293 3.8.6.2, 3.10.7.4; RFC 1122 4.2.3.3) ---------------------

TEST_F(TcpScript, OurWindowFillsClosesAndReopens) {
  TcpConfig c = no_quickack();
  c.rcvbuf = 4096;
  start(c);
  passive_open(Offer());  // no window scale: the window is in bytes
  inject(ack().seq(1).ack(1).len(1000));
  inject(ack().seq(1001).ack(1).len(1000));
  expect(ack().seq(1).ack(2001).win(2096));  // the right edge stays where it was
  inject(ack().seq(2001).ack(1).len(1000));
  inject(ack().seq(3001).ack(1).len(1000));
  expect(ack().seq(1).ack(4001).win(96));
  // 904 of these bytes lie past the window: cut, and an ACK at once.
  inject(ack().seq(4001).ack(1).len(1000));
  expect(ack().seq(1).ack(4097).win(0));
  // A zero-window probe with one byte of data: not acceptable, but answered.
  inject(ack().seq(4097).ack(1).len(1));
  expect(ack().seq(1).ack(4097).win(0));
  // The application reads: a window that had shrunk (to half the buffer or
  // less) and at least doubles -- here from 0 to an MSS -- is news at once
  // (as Linux's tcp_cleanup_rbuf), the peer may be waiting on it.
  expect_read(1000);
  expect(ack().seq(1).ack(4097).win(1000));
  expect_read(1000);
  expect(ack().seq(1).ack(4097).win(2000));
  expect_read(2096);
  expect(ack().seq(1).ack(4097).win(4096));
  expect_nothing();
}

// ---- window scaling at its limits (RFC 7323 2.2, 2.3) --------------------------

TEST_F(TcpScript, PeerWindowOf65535ShiftedBy14) {
  start();
  passive_open(Offer().ws(14));
  ConnStats st = sock.stats();
  EXPECT_EQ(st.snd_wscale, 14);
  EXPECT_EQ(st.snd_wnd, 65535u << 14);
  EXPECT_EQ(st.snd_wnd, 1073725440u);
}

TEST_F(TcpScript, AShiftAbove14IsUsedAs14) {
  start();
  passive_open(Offer().ws(15));
  EXPECT_EQ(sock.stats().snd_wscale, 14);
  EXPECT_EQ(sock.stats().snd_wnd, 65535u << 14);
}

TEST_F(TcpScript, OurShift14AndAWindowNear2To30) {
  TcpConfig c;
  c.buf_max = std::size_t{1} << 30;
  c.rcvbuf = std::size_t{1} << 30;
  start(c);
  passive_open(Offer().ws(14).sack());
  EXPECT_EQ(sock.stats().rcv_wscale, 14);
  inject(ack().seq(1).ack(1).len(100));
  advance(40ms);
  // 2^30 - 100 bytes of room: the field saturates at 65535 (<< 14).
  expect(ack().seq(1).ack(101).win(65535));
  EXPECT_EQ(sock.stats().rcv_wnd, 65535u << 14);
  const std::uint32_t edge = 101 + (65535u << 14);  // RCV.NXT + RCV.WND
  // The last 100 bytes of the window are acceptable (out of order: SACKed).
  inject(ack().seq(edge - 100).ack(1).len(100));
  expect(ack().seq(1).ack(101).win(65535).sack({{edge - 100, edge}}));
  // The first byte past it is not (RFC 9293 3.10.7.4).
  inject(ack().seq(edge).ack(1).len(10));
  expect(ack().seq(1).ack(101).win(65535).sack({{edge - 100, edge}}));
  EXPECT_EQ(stats().drop_out_of_window.value(), 1u);
  EXPECT_EQ(stats().ooo_segments.value(), 1u);
  expect_nothing();
}

TEST_F(TcpScript, AScaledPeerWindowLimitsWhatWeSend) {
  start();
  passive_open(Offer().ws(10));
  inject(ack().seq(1).ack(1).win(3));  // 3 << 10 = 3072 bytes
  EXPECT_EQ(sock.stats().snd_wnd, 3072u);
  write(5000);
  expect(ack().seq(1).ack(1).len(1000));
  expect(ack().seq(1001).ack(1).len(1000));
  expect(ack().seq(2001).ack(1).len(1000));
  expect_nothing();  // 72 bytes of window left: sender SWS avoidance waits
  inject(ack().seq(1).ack(3001).win(3));
  expect(ack().seq(3001).ack(1).len(1000));
  expect(psh_ack().seq(4001).ack(1).len(1000));
  expect_nothing();
}

// PSH goes on the segment that carries the last byte of each write (as
// Linux marks the tail of every write), not only on the one that empties
// the buffer: here a second write keeps the buffer from emptying.
TEST_F(TcpScript, PshMarksTheLastSegmentOfEveryWrite) {
  start();
  passive_open(Offer());
  sock.set_nodelay(true);
  inject(ack().seq(1).ack(1).win(1000));
  write(1500);  // ends at 1501
  expect(ack().seq(1).ack(1).len(1000));
  expect_nothing();  // the window is full
  write(1500);  // ends at 3001
  expect_nothing();
  inject(ack().seq(1).ack(1001).win(3000));
  expect(psh_ack().seq(1001).ack(1).len(1000));  // it carries the first write's last byte
  expect(psh_ack().seq(2001).ack(1).len(1000));
  expect_nothing();
}

// ---- timestamps: PAWS and TS.Recent (RFC 7323 4.3, 5) ------------------------------

TEST_F(TcpScript, PawsDropsOldTimestampsAndTsRecentFollowsTheRules) {
  start();
  passive_open(Offer().ts());  // TS.Recent = 5000
  inject(ack().seq(1).ack(1).len(100).ts(5010, last_tsval_));
  advance(40ms);
  expect(ack().seq(1).ack(101).ecr(5010));
  // An older TSval: not acceptable (R1); ACK and drop.
  inject(ack().seq(101).ack(1).len(100).ts(5005, last_tsval_));
  expect(ack().seq(1).ack(101).ecr(5010));
  EXPECT_EQ(stats().drop_paws.value(), 1u);
  // An equal one is fine.
  inject(ack().seq(101).ack(1).len(100).ts(5010, last_tsval_));
  advance(40ms);
  expect(ack().seq(1).ack(201).ecr(5010));
  // Out of order, SEG.SEQ > Last.ACK.sent: TS.Recent keeps its value (4.3 (2)).
  inject(ack().seq(301).ack(1).len(100).ts(5020, last_tsval_));
  expect(ack().seq(1).ack(201).ecr(5010));
  // The segment that fills the hole gives its TSval (4.3 case C).
  inject(ack().seq(201).ack(1).len(100).ts(5015, last_tsval_));
  expect(ack().seq(1).ack(401).ecr(5015));
  expect_read(400);
  expect_read_all();
  // A RST is never PAWS-checked; it is still sequence-checked: this one is
  // in the window but not at RCV.NXT, so it gets a challenge ACK.
  inject(rst().seq(402).ts(1, 0));
  expect(ack().seq(1).ack(401).ecr(5015));
  EXPECT_EQ(stats().drop_paws.value(), 1u);
  // TS.Recent idle for more than 24 days is invalid (5.5): accepted.
  advance(std::chrono::hours(25 * 24));
  inject(ack().seq(401).ack(1).len(10).ts(100, last_tsval_));
  advance(40ms);
  expect(ack().seq(1).ack(411).ecr(100));
  expect_read(10);
  EXPECT_EQ(stats().drop_paws.value(), 1u);
  expect_nothing();
}

// A segment whose ACK acknowledges data never sent is dropped (RFC 9293
// 3.10.7.4 fifth, RFC 5961 5.2) and must leave TS.Recent alone: else one
// forged segment with a huge TSval makes PAWS drop every honest one after it.
TEST_F(TcpScript, AnUnacceptableAckDoesNotMoveTsRecent) {
  start();
  passive_open(Offer().ts());  // TS.Recent = 5000
  inject(ack().seq(1).ack(1000).len(10).ts(0x7fff0000, last_tsval_));
  expect(ack().seq(1).ack(1).ecr(5000));  // ACK and drop
  EXPECT_EQ(stats().drop_ack_unacceptable.value(), 1u);
  inject(ack().seq(1).ack(1).len(100).ts(5010, last_tsval_));
  advance(40ms);
  expect(ack().seq(1).ack(101).ecr(5010));
  expect_read(100);
  EXPECT_EQ(stats().drop_paws.value(), 0u);
  expect_nothing();
}

// ---- SACK blocks we send (RFC 2018 4, RFC 2883) -----------------------------------

TEST_F(TcpScript, SackBlocksMostRecentFirstAndDsack) {
  start();
  passive_open(Offer().sack());
  inject(ack().seq(201).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{201, 301}}));
  inject(ack().seq(401).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{401, 501}, {201, 301}}));
  inject(ack().seq(601).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{601, 701}, {401, 501}, {201, 301}}));
  // Growing an older block makes it the most recent one.
  inject(ack().seq(301).ack(1).len(50));
  expect(ack().seq(1).ack(1).sack({{201, 351}, {601, 701}, {401, 501}}));
  inject(ack().seq(801).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{801, 901}, {201, 351}, {601, 701}, {401, 501}}));
  // Five blocks, room for four (no timestamps): the oldest report is left out.
  inject(ack().seq(1001).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{1001, 1101}, {801, 901}, {201, 351}, {601, 701}}));
  // A duplicate of queued data: D-SACK first, then the block holding it.
  inject(ack().seq(401).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{401, 501}, {401, 501}, {1001, 1101}, {801, 901}}));
  inject(ack().seq(1).ack(1).len(100));
  expect(ack().seq(1).ack(101).sack({{401, 501}, {1001, 1101}, {801, 901}, {201, 351}}));
  // A duplicate below the cumulative ACK: D-SACK of it.
  inject(ack().seq(1).ack(1).len(100));
  expect(ack().seq(1).ack(101).sack({{1, 101}, {401, 501}, {1001, 1101}, {801, 901}}));
  // Filling the first hole: ACK at once.
  inject(ack().seq(101).ack(1).len(100));
  expect(ack().seq(1).ack(351).sack({{401, 501}, {1001, 1101}, {801, 901}, {601, 701}}));
  expect_read(350);
  expect_read_all();
  EXPECT_EQ(stats().ooo_segments.value(), 7u);
  EXPECT_EQ(stats().drop_out_of_window.value(), 1u);
  expect_nothing();
}

// A large write is copied and sent in 64 KiB pieces (the peer starts on the
// first while the rest is copied), yet the stream's segments are what one
// write of it makes: full ones, PSH and the short one only at the end --
// even with TCP_NODELAY, which would send a piece's short tail at once.
TEST_F(TcpScript, ALargeWriteLeavesInFullSegmentsThoughCopiedInPieces) {
  TcpConfig c;
  c.sndbuf = std::size_t{1} << 20;  // named: the default follows the host's cache
  start(c);
  passive_open(Offer().ws(7));  // MSS 1000; the peer's windows below are 1 MiB
  sock.set_nodelay(true);
  // Takes what was sent, acking each segment as it comes (slow start
  // doubles cwnd a round); the payload lengths, and how many had PSH.
  std::size_t total = 0, psh = 0;
  auto drain = [&](std::vector<std::size_t>& lens) {
    for (int guard = 0; guard < 100000 && !ip.sent.empty(); ++guard) {
      const std::vector<std::byte> b = ip.sent.front().bytes;
      ip.sent.pop_front();
      const std::size_t len = b.size() - (std::to_integer<std::size_t>(b[12]) >> 4) * 4;
      if (len == 0) continue;
      lens.push_back(len);
      total += len;
      if ((std::to_integer<unsigned>(b[13]) & 0x08) != 0) ++psh;
      inject(ack().seq(1).ack(static_cast<std::uint32_t>(1 + total)).win(8192));
    }
  };
  std::vector<std::size_t> warm;
  write(300000);  // cwnd grows past 150 KB
  drain(warm);
  ASSERT_EQ(total, 300000u);
  // Now the window takes a whole 64 KiB piece at once: without the cork a
  // piece's short tail would leave as a segment of its own.
  total = psh = 0;
  std::vector<std::size_t> lens;
  write(150500);
  drain(lens);
  ASSERT_EQ(total, 150500u);
  ASSERT_FALSE(lens.empty());
  EXPECT_EQ(lens.back(), 500u);
  for (std::size_t i = 0; i + 1 < lens.size(); ++i) ASSERT_EQ(lens[i], 1000u) << "segment " << i;
  EXPECT_EQ(psh, 1u) << "PSH on the last segment only";
}

// ---- segmentation offload (docs/tcp.md) ----------------------------------

TEST_F(TcpScript, WithSegmentationOffloadNewDataGoesDownAsOneSegmentPerSend) {
  ip.offloads.tx_tcp_seg = true;
  start();
  passive_open(Offer());  // MSS 1000, no timestamps
  write(25000);
  // The initial window (RFC 6928: 10 segments) leaves as one segment for the
  // port to cut into 1000-byte pieces; their checksums are the port's too.
  ASSERT_FALSE(ip.sent.empty());
  Offload o = ip.sent.front().offload;
  EXPECT_TRUE(o.has(Offload::tx_tcp_seg));
  EXPECT_TRUE(o.has(Offload::tx_tcp_csum));
  EXPECT_EQ(o.seg_size, 1000);
  expect(ack().seq(1).ack(1).len(10000).no_csum());
  expect_nothing();
  EXPECT_EQ(sock.stats().segs_out, 10u + 1u) << "pieces count as segments (and the SYN-ACK)";
  EXPECT_EQ(stats().tx_gso.value(), 1u);
  // Slow start (RFC 3465, L = 2 SMSS): cwnd 12000 against 5000 in flight.
  inject(ack().seq(1).ack(5001));
  expect(ack().seq(10001).ack(1).len(7000).no_csum());
  // All acknowledged: the 8000 bytes left go as one, PSH (cut: on the last piece).
  inject(ack().seq(1).ack(17001));
  ASSERT_FALSE(ip.sent.empty());
  EXPECT_TRUE(ip.sent.front().offload.has(Offload::tx_tcp_seg));
  expect(psh_ack().seq(17001).ack(1).len(8000).no_csum());
  EXPECT_EQ(stats().tx_gso.value(), 3u);
  // Lost: the retransmission timer resends one segment, never a batch.
  clock.advance(std::chrono::seconds(2));
  (void)loop.timers().run_expired(clock.now());
  ASSERT_FALSE(ip.sent.empty());
  EXPECT_FALSE(ip.sent.front().offload.has(Offload::tx_tcp_seg));
  expect(ack().seq(17001).ack(1).len(1000));
  inject(ack().seq(1).ack(25001));
  expect_nothing();
  // Less than a full segment: it goes as itself, with its own checksum.
  write(500);
  ASSERT_FALSE(ip.sent.empty());
  EXPECT_FALSE(ip.sent.front().offload.has(Offload::tx_tcp_seg));
  expect(psh_ack().seq(25001).ack(1).len(500));
}

TEST_F(TcpScript, GsoOffSendsEverySegmentItself) {
  ip.offloads.tx_tcp_seg = true;
  TcpConfig c;
  c.gso = false;
  start(c);
  passive_open(Offer());
  write(3000);
  for (std::uint32_t i = 0; i < 3; ++i) {
    ASSERT_FALSE(ip.sent.empty());
    EXPECT_FALSE(ip.sent.front().offload.has(Offload::tx_tcp_seg));
    expect((i == 2 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  }
  EXPECT_EQ(stats().tx_gso.value(), 0u);
}

// ---- receive buffers and the port's pool (docs/tcp.md) ----------------------

TEST_F(TcpScript, FramesOfAPortShortOfBuffersAreCopiedBeforeTheyWait) {
  start();
  passive_open(Offer().sack());
  // Out of order, the port not short of buffers: queued zero-copy.
  inject_from_port(ack().seq(1001).ack(1).len(1000), false);
  expect(ack().seq(1).ack(1).sack({{1001, 2001}}));
  EXPECT_EQ(port_held(), 1);
  // Out of order, the port short: queued as a copy, its buffer given back.
  inject_from_port(ack().seq(3001).ack(1).len(1000), true);
  expect(ack().seq(1).ack(1).sack({{3001, 4001}, {1001, 2001}}));
  EXPECT_EQ(port_held(), 1);
  // In order, the port short, nobody reading: the receive buffer keeps a copy.
  inject_from_port(ack().seq(1).ack(1).len(1000), true);
  expect(ack().seq(1).ack(2001).sack({{3001, 4001}}));
  EXPECT_EQ(port_held(), 1) << "the zero-copy segment from before stays until it is read";
  inject_from_port(ack().seq(2001).ack(1).len(1000), false);
  expect(ack().seq(1).ack(4001));
  EXPECT_EQ(port_held(), 2);
  expect_read(4000);
  EXPECT_EQ(port_held(), 0);
  expect_read_all();
  expect_nothing();
}

TEST_F(TcpScript, WithTimestampsThreeSackBlocksFit) {
  start();
  passive_open(Offer().sack().ts());
  inject(ack().seq(201).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{201, 301}}));
  inject(ack().seq(401).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{401, 501}, {201, 301}}));
  inject(ack().seq(601).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{601, 701}, {401, 501}, {201, 301}}));
  inject(ack().seq(801).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{801, 901}, {601, 701}, {401, 501}}));
  expect_nothing();
}

TEST_F(TcpScript, DataSegmentsCarryOnlyTheSackBlocksTheMssLeavesRoomFor) {
  start();
  passive_open(Offer().sack());  // MSS 1000, no timestamps
  inject(ack().seq(201).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{201, 301}}));
  inject(ack().seq(401).ack(1).len(100));
  expect(ack().seq(1).ack(1).sack({{401, 501}, {201, 301}}));
  // RFC 6691: options come out of the MSS, so a segment never outgrows the
  // path (DF, RFC 1191). A full one has no room for a block.
  sock.set_nodelay(true);
  write(1000);
  expect(psh_ack().seq(1).ack(1).len(1000));
  write(985);  // 15 bytes left: one block (12 with its NOPs), not two (20)
  expect(psh_ack().seq(1001).ack(1).len(985).sack({{401, 501}}));
  write(980);
  expect(psh_ack().seq(1986).ack(1).len(980).sack({{401, 501}, {201, 301}}));
  expect_nothing();
}

// ---- loss recovery ---------------------------------------------------------------------

// RFC 6675: which segments a SACK pattern makes us retransmit. Ten segments
// of 1000 bytes; the first, third and sixth are lost.
TEST_F(TcpScript, SackRecoveryRetransmitsWhatRfc6675Says) {
  TcpConfig c;
  c.cc = "newreno";
  c.recovery = TcpConfig::Recovery::rfc6675;  // the RACK-TLP tests are below
  start(c);
  passive_open(Offer().sack());
  write(10000);
  for (std::uint32_t i = 0; i < 10; ++i) expect((i == 9 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(1).ack(1).sack({{1001, 2001}}));
  expect_nothing();
  inject(ack().seq(1).ack(1).sack({{3001, 4001}, {1001, 2001}}));
  expect_nothing();  // two SACKed ranges, 2000 bytes: nothing is lost yet
  inject(ack().seq(1).ack(1).sack({{3001, 5001}, {1001, 2001}}));
  // The third duplicate: fast retransmit of the first hole. cwnd = ssthresh
  // = 5000, pipe = 7000: nothing else.
  expect(ack().seq(1).ack(1).len(1000));
  EXPECT_EQ(sock.stats().cwnd, 5000u);
  expect_nothing();
  inject(ack().seq(1).ack(1).sack({{6001, 7001}, {3001, 5001}, {1001, 2001}}));
  expect_nothing();  // pipe = 5000
  inject(ack().seq(1).ack(1).sack({{6001, 8001}, {3001, 5001}, {1001, 2001}}));
  expect(ack().seq(2001).ack(1).len(1000));  // pipe 4000: IsLost(2001), rule 1
  expect_nothing();
  inject(ack().seq(1).ack(1).sack({{6001, 9001}, {3001, 5001}, {1001, 2001}}));
  expect(ack().seq(5001).ack(1).len(1000));  // [5001, 6001) has 3000 SACKed bytes above it
  expect_nothing();
  inject(ack().seq(1).ack(1).sack({{6001, 10001}, {3001, 5001}, {1001, 2001}}));
  expect_nothing();  // every hole retransmitted, no new data, no rescue yet
  // A partial ACK: HighACK passed RescueRxt, so rule 4 sends one rescue
  // retransmission holding the highest unSACKed byte.
  inject(ack().seq(1).ack(2001).sack({{6001, 10001}, {3001, 5001}}));
  expect(ack().seq(5001).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(1).ack(5001).sack({{6001, 10001}}));
  expect_nothing();
  inject(ack().seq(1).ack(10001));
  expect_nothing();
  EXPECT_EQ(stats().fast_retransmits.value(), 1u);
  EXPECT_EQ(stats().sack_recoveries.value(), 1u);
  EXPECT_EQ(stats().retransmits.value(), 4u);
  EXPECT_EQ(stats().rto_expiries.value(), 0u);
  EXPECT_EQ(sock.stats().dup_acks_in, 7u);
}

// ---- RACK-TLP (RFC 8985) and PRR (RFC 6937), recovery=rack ------------------------------

// RFC 8985 7.2-7.3: a flight whose ACKs never come is probed after 2 SRTT
// (the RTO is 200 ms) by sending its last segment again; the probe's SACK
// shows what is missing and RACK marks it lost at once (an RTT has passed),
// so the holes go out without a timeout. PRR lets the first one go on the
// ACK that started recovery.
TEST_F(TcpScript, ATailLossProbeAfterTwoSrttFindsTheLossInsteadOfTheRto) {
  TcpConfig c;
  c.cc = "newreno";
  c.tlp_min = 2ms;  // RFC 8985's own floor, not a quarter of rto_min
  start(c);
  passive_open(Offer().sack().rtt(10ms));
  EXPECT_EQ(sock.stats().srtt, 10ms);
  write(4000);
  for (std::uint32_t i = 0; i < 4; ++i) expect((i == 3 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  advance(19999us);
  expect_nothing();
  advance(1us);
  expect(ack().seq(3001).ack(1).len(1000));  // PTO = 2 SRTT: the last segment again
  EXPECT_EQ(stats().loss_probes.value(), 1u);
  advance(10ms);
  inject(ack().seq(1).ack(1).sack({{3001, 4001}}));
  // Segments 1-3 were sent an RTT before the probe that arrived: lost.
  // ssthresh 2000 and pipe 0: PRR-SSRB lets 2000 go (delivered + 1 SMSS).
  expect(ack().seq(1).ack(1).len(1000));
  expect(ack().seq(1001).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(1).ack(1001).sack({{3001, 4001}}));
  expect(ack().seq(2001).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(1).ack(4001));
  expect_nothing();
  EXPECT_EQ(stats().rto_expiries.value(), 0u);
  EXPECT_EQ(stats().fast_retransmits.value(), 1u);
  EXPECT_EQ(sock.stats().retransmits, 4u);
  EXPECT_EQ(sock.stats().cwnd, 2000u) << "PRR ends a recovery at ssthresh (RFC 6937 3)";
}

// RFC 8985 7.3: with unsent data the probe is new data, beyond what cwnd
// allows; its ACK covering all is no loss (7.4), and the window stays.
// And by default no probe comes before a quarter of rto_min.
TEST_F(TcpScript, TheProbeWaitsAtLeastAQuarterOfRtoMinByDefault) {
  start();
  passive_open(Offer().sack().rtt(10ms));
  write(4000);
  for (std::uint32_t i = 0; i < 4; ++i) expect((i == 3 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  advance(49999us);
  expect_nothing();
  advance(1us);
  expect(ack().seq(3001).ack(1).len(1000));
  EXPECT_EQ(stats().loss_probes.value(), 1u);
}

TEST_F(TcpScript, AProbeSendsNewDataWhenThereIsSome) {
  TcpConfig c;
  c.tlp_min = 2ms;
  start(c);
  passive_open(Offer().sack().rtt(10ms));
  write(12000);
  for (std::uint32_t i = 0; i < 10; ++i) expect(ack().seq(1 + 1000 * i).ack(1).len(1000));
  expect_nothing();  // IW10
  advance(20ms);
  expect(ack().seq(10001).ack(1).len(1000));
  expect_nothing();
  EXPECT_EQ(stats().loss_probes.value(), 1u);
  const std::uint32_t cwnd = sock.stats().cwnd;
  inject(ack().seq(1).ack(11001));
  EXPECT_GE(sock.stats().cwnd, cwnd);
  EXPECT_EQ(stats().loss_probe_repairs.value(), 0u);
  expect(psh_ack().seq(11001).ack(1).len(1000));
}

// RFC 8985 7.2: a one-segment flight waits for the peer's delayed ACK too
// (WCDelAckT, 200 ms), as long as the RTO is later still.
TEST_F(TcpScript, AOneSegmentFlightIsProbedAfterTwoSrttPlusTheDelayedAck) {
  TcpConfig c;
  c.rto_min = 1s;
  c.tlp_min = 2ms;  // RFC 8985's own floor, not a quarter of rto_min
  start(c);
  passive_open(Offer().sack().rtt(10ms));
  write(500);
  expect(psh_ack().seq(1).ack(1).len(500));
  advance(219999us);
  expect_nothing();
  advance(1us);
  expect(ack().seq(1).ack(1).len(500));
  inject(ack().seq(1).ack(501));
  EXPECT_EQ(stats().loss_probe_repairs.value(), 0u) << "the original or the probe: not known yet";
  // The probe repaired the loss: ACKed past it without a D-SACK (7.4).
  write(100);
  expect(psh_ack().seq(501).ack(1).len(100));
  inject(ack().seq(1).ack(601));
  EXPECT_EQ(stats().loss_probe_repairs.value(), 1u);
  EXPECT_EQ(stats().rto_expiries.value(), 0u);
}

// RFC 8985 7.4: a D-SACK for the probe says the original arrived as well:
// no loss, no reduction.
TEST_F(TcpScript, ADsackOfTheProbeMeansNothingWasLost) {
  TcpConfig c;
  c.rto_min = 1s;
  c.tlp_min = 2ms;  // RFC 8985's own floor, not a quarter of rto_min
  start(c);
  passive_open(Offer().sack().rtt(10ms));
  write(500);
  expect(psh_ack().seq(1).ack(1).len(500));
  advance(220ms);
  expect(ack().seq(1).ack(1).len(500));
  const std::uint32_t cwnd = sock.stats().cwnd;
  inject(ack().seq(1).ack(501).sack({{1, 501}}));
  write(100);
  expect(psh_ack().seq(501).ack(1).len(100));
  inject(ack().seq(1).ack(601));
  EXPECT_EQ(stats().loss_probe_repairs.value(), 0u);
  EXPECT_GE(sock.stats().cwnd, cwnd);
}

// RFC 8985 6.2: one SACKed segment is not yet a loss: the reordering window
// (min RTT / 4) is waited out first, and the segment that was only late
// costs nothing. A segment still missing when it ends is lost (the
// reordering timer).
TEST_F(TcpScript, RackWaitsOutTheReorderingWindowBeforeALoss) {
  TcpConfig c;
  c.cc = "newreno";
  c.tlp_min = 2ms;  // RFC 8985's own floor, not a quarter of rto_min
  start(c);
  passive_open(Offer().sack().rtt(8ms));
  write(4000);
  for (std::uint32_t i = 0; i < 4; ++i) expect((i == 3 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  advance(8ms);
  inject(ack().seq(1).ack(1).sack({{1001, 2001}}));
  expect_nothing();  // reo_wnd = 8 ms / 4
  advance(1ms);
  inject(ack().seq(1).ack(2001));  // it was reordering: segment 1 came late
  advance(5ms);
  expect_nothing();
  EXPECT_EQ(stats().reorder_timeouts.value(), 0u);
  // Segment 3 is missing past the window: lost when the timer ends.
  inject(ack().seq(1).ack(2001).sack({{3001, 4001}}));
  advance(1999us);
  expect_nothing();
  advance(1us);
  expect(ack().seq(2001).ack(1).len(1000));
  EXPECT_EQ(stats().reorder_timeouts.value(), 1u);
  EXPECT_EQ(stats().rack_lost_bytes.value(), 1000u);
  inject(ack().seq(1).ack(4001));
  expect_nothing();
  EXPECT_EQ(stats().rto_expiries.value(), 0u);
}

// RFC 8985 6.2 step 3: once reordering was seen, three SACKed segments are
// no proof of loss any more: the window is waited out for them too.
TEST_F(TcpScript, AfterReorderingThreeSacksWaitForTheWindow) {
  TcpConfig c;
  c.cc = "newreno";
  c.tlp_min = 2ms;  // RFC 8985's own floor, not a quarter of rto_min
  start(c);
  passive_open(Offer().sack().rtt(8ms));
  write(2000);
  expect(ack().seq(1).ack(1).len(1000));
  expect(psh_ack().seq(1001).ack(1).len(1000));
  advance(8ms);
  inject(ack().seq(1).ack(1).sack({{1001, 2001}}));
  inject(ack().seq(1).ack(2001));  // the first came after the second
  write(5000);
  for (std::uint32_t i = 0; i < 5; ++i) expect((i == 4 ? psh_ack() : ack()).seq(2001 + 1000 * i).ack(1).len(1000));
  advance(8ms);
  inject(ack().seq(1).ack(2001).sack({{3001, 6001}}));
  expect_nothing();  // three segments SACKed, but reordering was seen: wait
  advance(2ms);
  expect(ack().seq(2001).ack(1).len(1000));
}

// RFC 8985 6.2: a retransmission that is lost again is found the same way
// (a segment sent after it was delivered), with no RTO.
TEST_F(TcpScript, ALostRetransmissionIsFoundWithoutAnRto) {
  TcpConfig c;
  c.cc = "newreno";
  c.tlp_min = 2ms;  // RFC 8985's own floor, not a quarter of rto_min
  start(c);
  passive_open(Offer().sack().rtt(10ms));
  write(5000);
  for (std::uint32_t i = 0; i < 5; ++i) expect((i == 4 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  advance(10ms);
  inject(ack().seq(1).ack(1).sack({{1001, 4001}}));
  expect(ack().seq(1).ack(1).len(1000));  // three SACKed: segment 1 lost
  expect_nothing();
  advance(10ms);
  inject(ack().seq(1).ack(1).sack({{1001, 5001}}));
  expect_nothing();
  write(1000);
  expect(psh_ack().seq(5001).ack(1).len(1000));
  // The retransmission is lost too; a segment sent after it arrives.
  advance(10ms);
  inject(ack().seq(1).ack(1).sack({{1001, 6001}}));
  expect(ack().seq(1).ack(1).len(1000));
  inject(ack().seq(1).ack(6001));
  expect_nothing();
  EXPECT_EQ(stats().rto_expiries.value(), 0u);
  EXPECT_EQ(sock.stats().retransmits, 2u);
}

// RFC 6937: during recovery PRR sends in proportion to what is delivered
// (ssthresh / RecoverFS of it) while pipe is above ssthresh, then grows back
// to ssthresh by at most one segment more than is delivered (PRR-SSRB);
// RFC 6675 would send nothing until pipe fell below cwnd = ssthresh.
TEST_F(TcpScript, PrrSpreadsTheReductionOverTheRecovery) {
  TcpConfig c;
  c.cc = "newreno";
  c.tlp_min = 2ms;  // RFC 8985's own floor, not a quarter of rto_min
  start(c);
  passive_open(Offer().sack().rtt(10ms));
  write(10000);
  for (std::uint32_t i = 0; i < 10; ++i) expect((i == 9 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  advance(10ms);
  // Segment 1 is lost; 2, 3, 4 arrive: loss (3 SACKed), ssthresh 5000, RecoverFS 10000.
  inject(ack().seq(1).ack(1).sack({{1001, 2001}}));
  inject(ack().seq(1).ack(1).sack({{1001, 3001}}));
  expect_nothing();
  inject(ack().seq(1).ack(1).sack({{1001, 4001}}));
  expect(ack().seq(1).ack(1).len(1000));  // the first ACK of a recovery: the retransmission
  expect_nothing();
  write(10000);  // more to send: pipe 7000 = cwnd (6000 + the 1000 PRR allowed)
  expect_nothing();
  // Delivered 2000, pipe 6000: ceil(2000 * 5000 / 10000) - 1000 = 0.
  inject(ack().seq(1).ack(1).sack({{1001, 5001}}));
  expect_nothing();
  // Delivered 3000, pipe 5000 (not above ssthresh): SSRB, ssthresh - pipe = 0.
  inject(ack().seq(1).ack(1).sack({{1001, 6001}}));
  expect_nothing();
  // Delivered 4000, pipe 4000: min(5000 - 4000, 4000 - 1000 + 1000) = 1000.
  inject(ack().seq(1).ack(1).sack({{1001, 7001}}));
  expect(ack().seq(10001).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(1).ack(1).sack({{1001, 8001}}));
  expect(ack().seq(11001).ack(1).len(1000));
  expect_nothing();
  EXPECT_EQ(sock.stats().cwnd, 5000u);
  inject(ack().seq(1).ack(10001));
  EXPECT_EQ(sock.stats().cwnd, 5000u) << "ssthresh at the end of recovery";
  EXPECT_EQ(stats().rto_expiries.value(), 0u);
}

// ---- ECN (RFC 3168) -----------------------------------------------------------------------

// 6.1.1: an ECN-setup SYN (ECE and CWR) gets ECE alone in the SYN-ACK (the
// harness checks it); new data then goes out ECT(0); pure ACKs and
// retransmissions do not (6.1.4, 6.1.5).
TEST_F(TcpScript, EcnIsAcceptedWhenAskedAndOnlyNewDataIsEcnCapable) {
  start();
  passive_open(Offer().ecn());
  EXPECT_TRUE(sock.stats().ecn);
  write(1000);
  Got g = expect(psh_ack().seq(1).ack(1).len(1000));
  EXPECT_EQ(g.tos, kEcnEct0);
  inject(ack().seq(1).ack(1).len(100));
  g = expect(ack().seq(1001).ack(101));
  EXPECT_EQ(g.tos, 0) << "a pure ACK is not ECN-capable";
  advance(1s);  // RTO
  g = expect(ack().seq(1).ack(101).len(1000));
  EXPECT_EQ(g.tos, 0) << "nor a retransmission";
}

// IP_TOS: every packet carries the DSCP bits; the ECN field stays the
// stack's (ECT(0) on new data of an ECN connection).
TEST_F(TcpScript, TosDscpBitsGoOnEveryPacketBesideEcn) {
  start();
  passive_open(Offer().ecn());
  Tuning t;
  t.tos = 0xb9;
  ASSERT_TRUE(sock.tune(t).ok());
  write(1000);
  EXPECT_EQ(expect(psh_ack().seq(1).ack(1).len(1000)).tos, 0xb8 | kEcnEct0);
  inject(ack().seq(1).ack(1001).len(100));
  EXPECT_EQ(expect(ack().seq(1001).ack(101)).tos, 0xb8);
}

// ---- buffer autotuning -----------------------------------------------------------------

// The peer fills the window we advertise, once per 10 ms round trip, and the
// application reads everything at once.
class TcpAutotune : public Script {
 protected:
  // Our receive buffer after `rounds` rounds.
  std::uint32_t fill_windows(int rounds, Duration rtt = 10ms) {
    std::uint32_t seq = 1 + static_cast<std::uint32_t>(read_off);
    for (int r = 0; r < rounds; ++r) {
      const std::uint32_t wnd = sock.stats().rcv_wnd;
      std::uint32_t sent = 0;
      for (; sent + 1000 <= wnd; sent += 1000, seq += 1000) inject(ack().seq(seq).ack(1).len(1000));
      expect_read(sent);
      advance(rtt);
      ip.sent.clear();
    }
    return sock.stats().rcvbuf;
  }
};

// Buffers nobody named start at a quarter of the core's L2 cache, 256 KiB to
// 1 MiB (docs/tcp.md, "Buffer autotuning"): the window bounds what both ends
// keep in flight, and past the cache every byte misses on its way out.
TEST_F(TcpScript, BuffersNobodyNamedStartAtAQuarterOfTheL2Cache) {
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  const std::size_t want =
      l2 > 0 ? std::clamp<std::size_t>(static_cast<std::size_t>(l2) / 4, 256u << 10, 1u << 20) : 256u << 10;
  EXPECT_EQ(cache_fit_buffer(), want) << "L2 " << l2;
  const TcpConfig c;
  EXPECT_EQ(c.rcvbuf, want);
  EXPECT_EQ(c.sndbuf, want);
  start(c);
  passive_open(Offer().ws(7));
  EXPECT_EQ(sock.stats().rcvbuf, want);
  EXPECT_EQ(sock.stats().sndbuf, want) << "more than two initial windows: autotuning left it";
}

// Dynamic right-sizing: once per receiver RTT (here from how long a window
// takes to arrive: no timestamps), the buffer grows to hold two RTTs of what
// the application read, and the window we advertise with it.
TEST_F(TcpAutotune, ReceiveBufferGrowsWithWhatTheApplicationReadsPerRtt) {
  TcpConfig c;
  c.rcvbuf = 16384;
  c.autotune_max = 1 << 20;
  start(c);
  passive_open(Offer().ws(7));
  EXPECT_EQ(sock.stats().rcvbuf, 16384u);
  const std::uint32_t grown = fill_windows(10);
  EXPECT_GT(grown, 200'000u) << "ten round trips of a peer that fills every window";
  EXPECT_LE(grown, 1u << 20) << "never past autotune_max";
  EXPECT_GT(sock.stats().rcv_wnd, 16384u);
  EXPECT_EQ(sock.stats().rcv_rtt_us, 10'000u);
  EXPECT_GT(stats().rcvbuf_grown.value(), 0u);
}

// Under a millisecond (a LAN): the configured buffer already holds the
// path's bandwidth-delay product; growing it would only let the sender
// overrun the link's queues.
TEST_F(TcpAutotune, ASubMillisecondPathKeepsTheConfiguredBuffer) {
  TcpConfig c;
  c.rcvbuf = 16384;
  start(c);
  passive_open(Offer().ws(7));
  EXPECT_EQ(fill_windows(20, 500us), 16384u);
  EXPECT_EQ(sock.stats().rcv_rtt_us, 500u);
}

// SO_RCVBUF set by the program: its size is kept (as Linux).
TEST_F(TcpAutotune, ReceiveBufferTheProgramSetIsNotAutotuned) {
  TcpConfig c;
  c.rcvbuf = 16384;
  start(c);
  passive_open(Offer().ws(7));
  sock.set_rcvbuf(16384);
  EXPECT_EQ(fill_windows(10), 16384u);
  EXPECT_EQ(stats().rcvbuf_grown.value(), 0u);
}

TEST_F(TcpAutotune, NoAutotuningWhenTurnedOff) {
  TcpConfig c;
  c.rcvbuf = 16384;
  c.autotune = false;
  start(c);
  passive_open(Offer().ws(7));
  EXPECT_EQ(fill_windows(10), 16384u);
}

// The send buffer grows to twice the congestion window, so a growing
// window always has data to send.
TEST_F(TcpScript, SendBufferGrowsWithTheCongestionWindow) {
  TcpConfig c;
  c.sndbuf = 8192;
  start(c);
  passive_open(Offer().ws(7));
  // The handshake's ACK already: room for two initial windows.
  EXPECT_EQ(sock.stats().sndbuf, 2 * sock.stats().cwnd);
  EXPECT_EQ(sock.stats().cwnd, 10'000u);
  write(20000);
  for (std::uint32_t seq = 1; seq < 10001; seq += 1000) expect(ack().seq(seq).ack(1).len(1000));
  inject(ack().seq(1).ack(10001));  // slow start
  EXPECT_GT(sock.stats().cwnd, 10'000u);
  EXPECT_EQ(sock.stats().sndbuf, 2 * sock.stats().cwnd);
  EXPECT_EQ(stats().sndbuf_grown.value(), 2u);
  sock.set_sndbuf(8192);  // the program's size is kept from now on
  EXPECT_EQ(sock.stats().sndbuf, 8192u);
  ip.sent.clear();
  inject(ack().seq(1).ack(20001));
  EXPECT_EQ(sock.stats().sndbuf, 8192u);
}

// A Msg larger than the room left is taken in part, as a POSIX write:
// the rest stays with the caller, so a writable socket always makes
// progress (an echo that waited for "writable" with a Msg larger than the
// room would otherwise spin). Nothing is copied and nothing is lost.
TEST_F(TcpScript, AMsgWriteTakesWhatFitsAndLeavesTheRest) {
  start(no_quickack());
  passive_open(Offer());  // MSS 1000, no timestamps
  sock.set_sndbuf(4000);
  std::vector<std::byte> b(10000);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = pattern_byte(i, 1);
  Msg m = Msg::copy_of(b);
  Status st = sock.write(m);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error(), Errc::would_block);
  EXPECT_EQ(m.size(), 6000u) << "4000 taken, the rest left in the Msg";
  EXPECT_EQ(sock.events() & tcp::ev_writable, 0u);
  for (std::uint32_t seq = 1; seq < 3001; seq += 1000) expect(ack().seq(seq).ack(1).len(1000));
  expect(psh_ack().seq(3001).ack(1).len(1000));  // the end of what was taken
  st = sock.write(m);  // no room: nothing taken
  EXPECT_EQ(st.error(), Errc::would_block);
  EXPECT_EQ(m.size(), 6000u);
  inject(ack().seq(1).ack(2001));
  EXPECT_NE(sock.events() & tcp::ev_writable, 0u);
  st = sock.write(m);
  EXPECT_EQ(st.error(), Errc::would_block);
  EXPECT_EQ(m.size(), 4000u);
  inject(ack().seq(1).ack(4001));
  inject(ack().seq(1).ack(6001));
  st = sock.write(m);
  EXPECT_TRUE(st.ok());
  EXPECT_TRUE(m.empty());
  inject(ack().seq(1).ack(8001));
  inject(ack().seq(1).ack(10001));
  std::size_t sent = 0;
  while (!ip.sent.empty()) {
    const std::vector<std::byte> seg = ip.sent.front().bytes;
    ip.sent.pop_front();
    const std::size_t hl = (std::to_integer<std::size_t>(seg[12]) >> 4) * 4;
    for (std::size_t i = hl; i < seg.size(); ++i, ++sent) {
      ASSERT_EQ(seg[i], pattern_byte(4000 + sent, 1)) << "byte " << 4000 + sent;
    }
  }
  EXPECT_EQ(sent, 6000u) << "every byte of the Msg went out once, in order";
}

// ---- urgent data (RFC 9293 3.8.5, in line as RFC 6093 asks) ------------------------

// The pointer names the byte after the urgent one, goes on every segment
// before it (a pointer past a segment's own data too), and stops once the
// urgent byte is acknowledged.
TEST_F(TcpScript, AnUrgentSendCarriesThePointerUntilAcknowledged) {
  start();
  passive_open(Offer());
  ASSERT_TRUE(sock.mark_urgent(2500).ok());
  write(2500);
  expect(ack().urg(2500).seq(1).ack(1).len(1000));
  expect(ack().urg(1500).seq(1001).ack(1).len(1000));
  expect(psh_ack().urg(500).seq(2001).ack(1).len(500));
  expect_nothing();
  EXPECT_EQ(stats().urgent_out.value(), 1u);
  advance(1s);  // RTOs: every retransmission says it again
  expect(ack().urg(2500).seq(1).ack(1).len(1000));
  while (!ip.sent.empty()) expect(ack().urg(2500).seq(1).ack(1).len(1000));
  inject(ack().seq(1).ack(2501));
  write(10);
  expect(psh_ack().seq(2501).ack(1).len(10));  // acknowledged: no URG any more
}

// Urgent data goes without waiting for Nagle (as Linux's urgent mode).
TEST_F(TcpScript, UrgentDataIsNotHeldByNagle) {
  start();
  passive_open(Offer());
  write(100);
  expect(psh_ack().seq(1).ack(1).len(100));
  write(5);
  expect_nothing();  // Nagle: 100 bytes unacknowledged
  ASSERT_TRUE(sock.mark_urgent(1).ok());
  write(1);
  expect(psh_ack().urg(6).seq(101).ack(1).len(6));
}

// RFC 9293 3.10.7.4 sixth: RCV.UP moves forward and the application hears
// of it (ev_urgent) until it reads the urgent byte; a read stops before
// that byte, at_urgent_mark() says it is next. A pointer the sender
// repeats, or one that points at bytes already read, is no news.
TEST_F(TcpScript, UrgentPointerIsTakenInLineAndAReadStopsAtTheMark) {
  start();
  passive_open(Offer());
  inject(psh_ack().urg(5).seq(1).ack(1).len(8));  // the urgent byte: the 5th
  expect(ack().seq(1).ack(9));
  EXPECT_TRUE(sock.events() & ev_urgent);
  EXPECT_FALSE(sock.at_urgent_mark());
  std::vector<std::byte> b(16);
  Result<std::size_t> r = sock.read(b);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4u) << "the read stops before the urgent byte";
  EXPECT_TRUE(sock.at_urgent_mark());
  EXPECT_TRUE(sock.events() & ev_urgent);
  r = sock.read(b);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4u) << "at the mark the read goes on through the urgent byte";
  EXPECT_EQ(b[0], pattern_byte(4, 0));
  read_off += 8;
  EXPECT_FALSE(sock.events() & ev_urgent);
  EXPECT_FALSE(sock.at_urgent_mark());
  EXPECT_EQ(stats().urgent_in.value(), 1u);
  // The segment again (the sender repeats the pointer): no news.
  inject(psh_ack().urg(5).seq(1).ack(1).len(8));
  expect(ack().seq(1).ack(9));
  EXPECT_FALSE(sock.events() & ev_urgent);
  // A pointer past the data: pending before its byte arrives.
  inject(ack().urg(1000).seq(9).ack(1).len(10));
  EXPECT_TRUE(sock.events() & ev_urgent);
  expect_read(10);
  EXPECT_TRUE(sock.events() & ev_urgent) << "the urgent byte has not come yet";
  EXPECT_EQ(stats().urgent_in.value(), 2u);
}

TEST_F(TcpScript, NoEcnUnlessBothAskOrWhenTurnedOff) {
  start();
  passive_open(Offer());
  EXPECT_FALSE(sock.stats().ecn);
  write(1000);
  EXPECT_EQ(expect(psh_ack().seq(1).ack(1).len(1000)).tos, 0);
}

TEST_F(TcpScript, EcnOffRefusesAnEcnSetupSyn) {
  TcpConfig c;
  c.ecn = TcpConfig::Ecn::off;
  start(c);
  passive_open(Offer().ecn());  // the SYN-ACK has no ECE: checked by passive_open
  EXPECT_FALSE(sock.stats().ecn);
}

// 6.1.1: with ecn=on our SYN asks for it; a SYN sent again does not (a
// middlebox may drop ECN-setup SYNs, 6.1.1.1).
TEST_F(TcpScript, AnActiveOpenAsksForEcnOnlyInItsFirstSyn) {
  TcpConfig c;
  c.ecn = TcpConfig::Ecn::on;
  start(c);
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  pport = 80;
  expect(seg(kSyn | kEce | kCwr).win(65535).mss(1460).ws(11).sackok().ts(now_ms(), 0));
  advance(1s);
  expect(syn().win(65535).mss(1460).ws(11).sackok().ts(now_ms(), 0));
}

// 6.1.3: a CE mark is echoed with ECE on every ACK, the first at once,
// until the peer's CWR.
TEST_F(TcpScript, ACongestionMarkIsEchoedUntilThePeerSaysCwr) {
  start();
  passive_open(Offer().ecn());
  inject(ack().seq(1).ack(1).len(1000).ce());
  expect(seg(kAck | kEce).seq(1).ack(1001));
  EXPECT_EQ(stats().ecn_ce_received.value(), 1u);
  inject(ack().seq(1001).ack(1).len(1000));
  expect(seg(kAck | kEce).seq(1).ack(2001));
  inject(seg(kAck | kCwr).seq(2001).ack(1).len(1000));
  expect(ack().seq(1).ack(3001));
  expect_nothing();
}

// 6.1.2: an ECN-Echo reduces the window as a loss would, once per window of
// data, and the next new data carries CWR.
TEST_F(TcpScript, AnEcnEchoHalvesTheWindowOncePerWindowAndCwrFollows) {
  TcpConfig c;
  c.cc = "newreno";
  start(c);
  passive_open(Offer().ecn());
  write(4000);
  for (std::uint32_t i = 0; i < 4; ++i) expect((i == 3 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  inject(seg(kAck | kEce).seq(1).ack(1001));
  EXPECT_EQ(sock.stats().cwnd, 2000u) << "ssthresh = FlightSize / 2";
  EXPECT_EQ(stats().ecn_reductions.value(), 1u);
  inject(seg(kAck | kEce).seq(1).ack(2001));
  EXPECT_EQ(stats().ecn_reductions.value(), 1u) << "the same mark, echoed until our CWR";
  write(1000);
  expect_nothing();  // 2000 in flight: cwnd is full
  inject(ack().seq(1).ack(3001));
  Got g = expect(seg(kAck | kPsh | kCwr).seq(4001).ack(1).len(1000));  // new data, with CWR
  EXPECT_EQ(g.tos, kEcnEct0);
  // A mark on data of the next window is a new congestion event.
  inject(seg(kAck | kEce).seq(1).ack(4001));
  EXPECT_EQ(stats().ecn_reductions.value(), 2u);
  EXPECT_EQ(stats().retransmits.value(), 0u);
}

// RFC 6582 without SACK: fast retransmit on the third duplicate ACK, the next
// hole at once on a partial ACK; and the next loss, right at the old recovery
// point, is again a fast retransmit (RFC 6582 3.2 step 2: the ACK covers more
// than "recover", the highest byte sent).
TEST_F(TcpScript, NewRenoFastRetransmitAndPartialAcks) {
  TcpConfig c;
  c.cc = "newreno";
  start(c);
  passive_open(Offer());
  write(10000);
  for (std::uint32_t i = 0; i < 10; ++i) expect((i == 9 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  // Segments 1 and 5 were lost: eight duplicate ACKs come back.
  inject(ack().seq(1).ack(1));
  inject(ack().seq(1).ack(1));
  expect_nothing();
  inject(ack().seq(1).ack(1));
  expect(ack().seq(1).ack(1).len(1000));
  EXPECT_EQ(sock.stats().cwnd, 8000u) << "ssthresh 5000 + 3 SMSS (RFC 5681 3.2 step 3)";
  for (int i = 0; i < 5; ++i) inject(ack().seq(1).ack(1));
  EXPECT_EQ(sock.stats().cwnd, 13000u);
  expect_nothing();
  inject(ack().seq(1).ack(4001));  // partial ACK: segment 5 at once
  expect(ack().seq(4001).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(1).ack(10001));
  expect_nothing();
  EXPECT_EQ(stats().fast_retransmits.value(), 1u);
  EXPECT_EQ(stats().retransmits.value(), 2u);
  EXPECT_EQ(sock.stats().cwnd, 2000u) << "RFC 6582 3.2 step 3 option 1";

  write(10000);
  expect(ack().seq(10001).ack(1).len(1000));
  expect(ack().seq(11001).ack(1).len(1000));
  expect_nothing();
  // 10001 is lost. Limited transmit (RFC 3042): one new segment per each of
  // the first two duplicate ACKs.
  inject(ack().seq(1).ack(10001));
  expect(ack().seq(12001).ack(1).len(1000));
  inject(ack().seq(1).ack(10001));
  expect(ack().seq(13001).ack(1).len(1000));
  inject(ack().seq(1).ack(10001));
  expect(ack().seq(10001).ack(1).len(1000));
  // cwnd = 2000 + 3000 against 4000 in flight: one new segment.
  expect(ack().seq(14001).ack(1).len(1000));
  expect_nothing();
  EXPECT_EQ(stats().fast_retransmits.value(), 2u);
  EXPECT_EQ(stats().rto_expiries.value(), 0u);
}

// ---- retransmission timer (RFC 6298) ------------------------------------------------------

TEST_F(TcpScript, RtoFromRttSamplesAndBackoffDoubling) {
  start();
  passive_open(Offer().rtt(100ms));
  ConnStats st = sock.stats();
  EXPECT_EQ(st.srtt, 100ms);  // 2.2: SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR
  EXPECT_EQ(st.rttvar, 50ms);
  EXPECT_EQ(st.rto, 300ms);
  write(1000);
  expect(psh_ack().seq(1).ack(1).len(1000));
  advance(200ms);
  inject(ack().seq(1).ack(1001));
  st = sock.stats();
  // 2.3: RTTVAR = 3/4 50 + 1/4 |100 - 200| = 62.5; SRTT = 7/8 100 + 1/8 200 = 112.5.
  EXPECT_EQ(st.rttvar, 62500us);
  EXPECT_EQ(st.srtt, 112500us);
  EXPECT_EQ(st.rto, 362500us);
  write(1000);
  expect(psh_ack().seq(1001).ack(1).len(1000));
  advance(362499us);
  expect_nothing();
  advance(1us);
  expect(ack().seq(1001).ack(1).len(1000));
  EXPECT_EQ(sock.stats().rto, 725ms);  // 5.5: doubled
  advance(724999us);
  expect_nothing();
  advance(1us);
  expect(ack().seq(1001).ack(1).len(1000));
  EXPECT_EQ(sock.stats().rto, 1450ms);
  advance(1450ms);
  expect(ack().seq(1001).ack(1).len(1000));
  EXPECT_EQ(stats().rto_expiries.value(), 3u);
  EXPECT_EQ(sock.stats().rto, 2900ms);
  // Karn: the ACK of a retransmitted segment gives no sample; the backed-off
  // RTO stays until one does.
  inject(ack().seq(1).ack(2001));
  EXPECT_EQ(sock.stats().rto, 2900ms);
  EXPECT_EQ(sock.stats().srtt, 112500us);
  write(1000);
  expect(psh_ack().seq(2001).ack(1).len(1000));
  advance(50ms);
  inject(ack().seq(1).ack(3001));
  st = sock.stats();
  EXPECT_EQ(st.srtt, 104687500ns);
  EXPECT_EQ(st.rttvar, 62500us);
  EXPECT_EQ(st.rto, 354687500ns);
  EXPECT_EQ(sock.stats().retransmits, 3u);
  expect_nothing();
}

// RFC 9293 3.10.7.4: a bare ACK carries SND.NXT -- the highest sequence
// number sent, even while an RTO has us resending from SND.UNA. The peer
// may have our data but not our ACK of its own; an ACK numbered from
// SND.UNA would be below its RCV.NXT, unacceptable, dropped. With both ends
// in that state each dropped the other's ACKs for ever (the soak test).
TEST_F(TcpScript, ABareAckDuringRtoRecoveryCarriesTheHighestSequenceSent) {
  start(no_quickack());
  passive_open(Offer().rtt(100ms));
  write(3000);
  expect(ack().seq(1).ack(1).len(1000));
  expect(ack().seq(1001).ack(1).len(1000));
  expect(psh_ack().seq(2001).ack(1).len(1000));
  advance(300ms);  // the RTO: back to SND.UNA, one segment
  expect(ack().seq(1).ack(1).len(1000));
  expect_nothing();
  // The peer's data, then the same again (its first copy's ACK lost): the
  // copy is old, unacceptable, and answered at once with a bare ACK.
  inject(ack().seq(1).ack(1).len(100));
  inject(ack().seq(1).ack(1).len(100));
  expect(ack().seq(3001).ack(101));
  expect_nothing();
  // Its ACK of everything ends the recovery.
  inject(ack().seq(101).ack(3001));
  expect_read(100);
  expect_nothing();
}

// ---- spurious timeouts (RFC 3522 Eifel detection, RFC 4015 response) ----------------

// Connections whose flight times out (newreno, no probes: the RTO alone).
class SpuriousRto : public TcpScript {
 protected:
  struct TimedOut {
    std::uint32_t original_ts = 0;
    std::uint32_t retransmit_ts = 0;
  };
  void SetUp() override {
    TcpConfig c;
    c.cc = "newreno";
    c.tlp = false;
    start(c);
  }
  // Four segments out (the RTO is 300 ms), their ACKs late: the timeout
  // sends the first again. The TSvals the originals and the retransmission
  // carried.
  TimedOut time_out_a_flight() {
    write(4000);
    TimedOut r;
    for (std::uint32_t i = 0; i < 4; ++i) {
      Got g = expect((i == 3 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
      if (i == 0 && g.opts.timestamps) r.original_ts = g.opts.timestamps->tsval;
    }
    advance(300ms);
    Got g = expect(ack().seq(1).ack(1).len(1000));
    if (g.opts.timestamps) r.retransmit_ts = g.opts.timestamps->tsval;
    expect_nothing();
    EXPECT_EQ(stats().rto_expiries.value(), 1u);
    EXPECT_EQ(sock.stats().cwnd, 1000u) << "RFC 5681 3.1: the loss window";
    return r;
  }
};

// The ACK of two originals comes after the timeout, its echo older than the
// retransmission's TSval: nothing was lost. Nothing more goes again (RACK's
// lost marks are undone), the window is the flight's again, and the RTO is
// the late ACK's RTT, not a doubling (RFC 4015 4 steps 4-6).
TEST_F(SpuriousRto, AnAckOfAnOriginalAfterTheTimeoutUndoesIt) {
  passive_open(Offer().mss(1012).sack().ts().rtt(100ms));  // 1000 bytes beside the timestamps
  const TimedOut t = time_out_a_flight();
  ASSERT_LT(t.original_ts, t.retransmit_ts);
  advance(10ms);
  inject(ack().seq(1).ack(2001).ts(peer_tsval, t.original_ts));
  expect_nothing();
  EXPECT_EQ(stats().spurious_rtos.value(), 1u);
  EXPECT_EQ(sock.stats().spurious_rtos, 1u);
  EXPECT_EQ(sock.stats().cwnd, 4000u) << "FlightSize 2000 + min(acked 2000, IW)";
  // SRTT = max(100, 310) ms, RTTVAR = max(50, 155) ms: RTO = 310 + 4 * 155.
  EXPECT_EQ(sock.stats().rto, 930ms);
  // New data goes at once, beside the originals still out.
  write(1000);
  expect(psh_ack().seq(4001).ack(1).len(1000));
  inject(ack().seq(1).ack(5001).ts(peer_tsval, t.original_ts + 310));
  expect_nothing();
  EXPECT_EQ(sock.stats().retransmits, 1u) << "only the timeout's own segment";
  EXPECT_EQ(sock.stats().unacked, 0u);
  // The next timeout is armed afresh: a second late flight is judged again.
  const Duration rto = sock.stats().rto;
  write(1000);
  expect(psh_ack().seq(5001).ack(1).len(1000));
  advance(rto - 1us);
  expect_nothing();
  advance(1us);
  expect(ack().seq(5001).ack(1).len(1000));
  EXPECT_EQ(stats().rto_expiries.value(), 2u);
}

// The ACK echoes the retransmission: the first segment was lost, the
// timeout was real. The slow start it began goes on (RACK sends what the
// timeout marked lost, two segments for the one acknowledged).
TEST_F(SpuriousRto, AnAckOfTheRetransmissionKeepsTheTimeout) {
  passive_open(Offer().mss(1012).sack().ts().rtt(100ms));  // 1000 bytes beside the timestamps
  const TimedOut t = time_out_a_flight();
  advance(10ms);
  inject(ack().seq(1).ack(1001).ts(peer_tsval, t.retransmit_ts));
  expect(ack().seq(1001).ack(1).len(1000));
  expect(ack().seq(2001).ack(1).len(1000));
  expect_nothing();
  EXPECT_EQ(stats().spurious_rtos.value(), 0u);
  EXPECT_EQ(sock.stats().cwnd, 2000u);
  EXPECT_EQ(sock.stats().rto, 600ms) << "still backed off (Karn: no sample)";
}

// Without timestamps an ACK cannot say which copy it answers: the timeout
// stands and everything goes again (F-RTO, RFC 5682, is not done).
TEST_F(SpuriousRto, WithoutTimestampsALateAckCannotUndoTheTimeout) {
  passive_open(Offer().sack().rtt(100ms));
  (void)time_out_a_flight();
  advance(10ms);
  inject(ack().seq(1).ack(2001));
  expect(ack().seq(2001).ack(1).len(1000));
  expect(ack().seq(3001).ack(1).len(1000));
  expect_nothing();
  EXPECT_EQ(stats().spurious_rtos.value(), 0u);
}

// Without SACK the timeout goes back to SND.UNA (go-back-N); undone, SND.NXT
// is the highest sequence sent again, so the next segment is new data.
TEST_F(SpuriousRto, AnUndoneTimeoutWithoutSackResumesWithNewData) {
  passive_open(Offer().mss(1012).ts().rtt(100ms));
  const TimedOut t = time_out_a_flight();
  advance(10ms);
  inject(ack().seq(1).ack(1001).ts(peer_tsval, t.original_ts));
  expect_nothing();
  EXPECT_EQ(stats().spurious_rtos.value(), 1u);
  write(1000);
  expect(psh_ack().seq(4001).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(1).ack(5001).ts(peer_tsval, t.original_ts + 320));
  expect_nothing();
  EXPECT_EQ(sock.stats().retransmits, 1u);
}

TEST_F(TcpScript, RtoBackoffIsCappedAndTheConnectionGivesUp) {
  TcpConfig c;
  c.rto_max = 1s;
  c.max_retries = 3;
  start(c);
  passive_open(Offer().rtt(100ms));
  write(1000);
  expect(psh_ack().seq(1).ack(1).len(1000));
  advance(300ms);
  expect(ack().seq(1).ack(1).len(1000));
  advance(600ms);
  expect(ack().seq(1).ack(1).len(1000));
  advance(999ms);
  expect_nothing();
  advance(1ms);  // 1200 ms capped at rto_max
  expect(ack().seq(1).ack(1).len(1000));
  EXPECT_EQ(sock.state(), State::established);
  advance(1s);
  expect_nothing();
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(read_error(sock), Errc::timed_out);
  EXPECT_EQ(stats().timeouts.value(), 1u);
  EXPECT_EQ(stats().rto_expiries.value(), 3u);
  EXPECT_EQ(tcp->connection_count(), 0u);
}

// ---- Nagle (RFC 1122 4.2.3.4, RFC 896) ------------------------------------------------------

TEST_F(TcpScript, NagleHoldsASmallSegmentUntilTheAck) {
  start();
  passive_open(Offer());
  write(100);
  expect(psh_ack().seq(1).ack(1).len(100));
  write(50);
  expect_nothing();
  inject(ack().seq(1).ack(101));
  expect(psh_ack().seq(101).ack(1).len(50));
  inject(ack().seq(1).ack(151));
  // A full segment goes at once; the short tail waits.
  write(100);
  expect(psh_ack().seq(151).ack(1).len(100));
  write(1500);
  expect(ack().seq(251).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(1).ack(1251));
  expect(psh_ack().seq(1251).ack(1).len(500));
  inject(ack().seq(1).ack(1751));
  expect_nothing();
}

// Minshall's form of Nagle (as Linux): a write's short tail follows its
// full segments at once, since no short segment is unacknowledged; the next
// short write then waits for that one's ACK.
TEST_F(TcpScript, NagleLetsAWritesTailFollowItsFullSegments) {
  start();
  passive_open(Offer());
  write(2500);
  expect(ack().seq(1).ack(1).len(1000));
  expect(ack().seq(1001).ack(1).len(1000));
  expect(psh_ack().seq(2001).ack(1).len(500));
  write(100);
  expect_nothing();  // the 500-byte segment is unacknowledged
  inject(ack().seq(1).ack(2001));
  expect_nothing();  // ... still
  inject(ack().seq(1).ack(2501));
  expect(psh_ack().seq(2501).ack(1).len(100));
}

TEST_F(TcpScript, NodelaySendsSmallSegmentsAtOnce) {
  start();
  passive_open(Offer());
  sock.set_nodelay(true);
  write(100);
  expect(psh_ack().seq(1).ack(1).len(100));
  write(50);
  expect(psh_ack().seq(101).ack(1).len(50));
  write(10);
  expect(psh_ack().seq(151).ack(1).len(10));
  expect_nothing();
}

// ---- delayed ACK (RFC 1122 4.2.3.2, RFC 5681 4.2) ----------------------------------------

// Quick-ACK mode: a young connection ACKs its first `quickacks` segments at
// once, so the peer's slow start is not held back by 40 ms waits; then the
// delayed-ACK rules apply. An idle period longer than the RTO starts it
// again (the peer's window may have been reset, RFC 5681 4.1).
TEST_F(TcpScript, QuickAckModeAcksAYoungConnectionsFirstSegmentsAtOnce) {
  TcpConfig c;
  c.quickacks = 3;
  start(c);
  passive_open(Offer());
  inject(ack().seq(1).ack(1).len(100));
  expect(ack().seq(1).ack(101));  // at once, not after 40 ms
  inject(ack().seq(101).ack(1).len(100));
  expect(ack().seq(1).ack(201));
  inject(ack().seq(201).ack(1).len(100));
  expect(ack().seq(1).ack(301));
  inject(ack().seq(301).ack(1).len(100));
  expect_nothing();  // the mode is spent: the delayed ACK
  advance(40ms);
  expect(ack().seq(1).ack(401));
  // Idle longer than the RTO (1 s before any sample): quick again.
  advance(std::chrono::seconds(2));
  inject(ack().seq(401).ack(1).len(100));
  expect(ack().seq(1).ack(501));
  expect_nothing();
  expect_read(500);
}

TEST_F(TcpScript, QuickAcksCountTheFullSegmentsTheyCover) {
  TcpConfig c;
  c.quickacks = 4;
  start(c);
  passive_open(Offer());
  inject(ack().seq(1).ack(1).len(3000));  // a coalesced segment: 3 of the 4
  expect(ack().seq(1).ack(3001));
  inject(ack().seq(3001).ack(1).len(1000));  // the fourth
  expect(ack().seq(1).ack(4001));
  inject(ack().seq(4001).ack(1).len(1000));
  expect_nothing();
  advance(40ms);
  expect(ack().seq(1).ack(5001));
  expect_read(5000);
}

TEST_F(TcpScript, DelayedAckEverySecondFullSegmentOrAfter40ms) {
  start(no_quickack());
  passive_open(Offer());
  inject(ack().seq(1).ack(1).len(1000));
  expect_nothing();
  advance(39ms);
  expect_nothing();
  advance(1ms);
  expect(ack().seq(1).ack(1001));
  EXPECT_EQ(stats().delayed_acks.value(), 1u);
  inject(ack().seq(1001).ack(1).len(1000));
  expect_nothing();
  inject(ack().seq(2001).ack(1).len(1000));
  expect(ack().seq(1).ack(3001));  // the second full segment: at once
  inject(ack().seq(3001).ack(1).len(100));
  expect_nothing();
  advance(40ms);
  expect(ack().seq(1).ack(3101));
  EXPECT_EQ(stats().delayed_acks.value(), 2u);
  expect_read(3100);
  expect_read_all();
  expect_nothing();
}

// One burst of full segments gets one ACK at its end (ack_per_burst, the
// default): for the whole burst, not for each second segment.
TEST_F(TcpScript, AckPerBurstCoversTheWholeBurstOnce) {
  start(no_quickack());
  passive_open(Offer());
  inject_burst({ack().seq(1).ack(1).len(1000), ack().seq(1001).ack(1).len(1000), ack().seq(2001).ack(1).len(1000),
                ack().seq(3001).ack(1).len(1000), ack().seq(4001).ack(1).len(1000)});
  expect(ack().seq(1).ack(5001));
  expect_nothing();
  EXPECT_EQ(stats().burst_acks.value(), 1u);
  EXPECT_EQ(stats().delayed_acks.value(), 0u);
  // One full segment alone is still left to the delayed-ACK timer.
  inject_burst({ack().seq(5001).ack(1).len(1000)});
  expect_nothing();
  advance(40ms);
  expect(ack().seq(1).ack(6001));
  EXPECT_EQ(stats().delayed_acks.value(), 1u);
  // A hole is reported at once, in the middle of the burst.
  inject_burst({ack().seq(7001).ack(1).len(1000), ack().seq(6001).ack(1).len(1000)});
  expect(ack().seq(1).ack(6001));  // a duplicate ACK: the peer offered no SACK
  expect(ack().seq(1).ack(8001));
  expect_nothing();
  expect_read(8000);
}

// A segment of several MSS -- segments the driver coalesced (GRO), or a
// large frame from an xk peer -- is acked as the segments it holds would be
// in one burst: one ACK at the burst's end, the same number and window; a
// single MSS is still left to the timer; one past a hole is acked at once.
TEST_F(TcpScript, ACoalescedSegmentIsAckedAsTheSegmentsItHolds) {
  start(no_quickack());
  passive_open(Offer());
  inject_burst({ack().seq(1).ack(1).len(5000)});
  expect(ack().seq(1).ack(5001));
  expect_nothing();
  EXPECT_EQ(stats().burst_acks.value(), 1u);
  EXPECT_EQ(stats().delayed_acks.value(), 0u);
  inject_burst({ack().seq(5001).ack(1).len(1000)});
  expect_nothing();
  advance(40ms);
  expect(ack().seq(1).ack(6001));
  EXPECT_EQ(stats().delayed_acks.value(), 1u);
  // Two segments merged are two full ones: acked at the burst's end.
  inject_burst({ack().seq(6001).ack(1).len(2000)});
  expect(ack().seq(1).ack(8001));
  expect_nothing();
  // After a hole, at once: a duplicate ACK, then the ACK for all of it.
  inject_burst({ack().seq(10001).ack(1).len(3000), ack().seq(8001).ack(1).len(2000)});
  expect(ack().seq(1).ack(8001));
  expect(ack().seq(1).ack(13001));
  expect_nothing();
  expect_read(13000);
}

// ack_burst_max: a burst ACK covers at most that many bytes; past them the
// ACK leaves at once, in the middle of the burst.
TEST_F(TcpScript, AckPerBurstCoversAtMostAckBurstMaxBytes) {
  TcpConfig cfg = no_quickack();
  cfg.ack_burst_max = 2000;
  start(cfg);
  passive_open(Offer());
  inject_burst({ack().seq(1).ack(1).len(1000), ack().seq(1001).ack(1).len(1000), ack().seq(2001).ack(1).len(1000),
                ack().seq(3001).ack(1).len(1000), ack().seq(4001).ack(1).len(1000), ack().seq(5001).ack(1).len(1000),
                ack().seq(6001).ack(1).len(1000)});
  expect(ack().seq(1).ack(2001));
  expect(ack().seq(1).ack(4001));
  expect(ack().seq(1).ack(6001));
  expect_nothing();
  EXPECT_EQ(stats().burst_acks.value(), 0u);
  advance(40ms);  // the seventh segment: alone since the last ACK
  expect(ack().seq(1).ack(7001));
  EXPECT_EQ(stats().delayed_acks.value(), 1u);
}

// ack_per_burst=off: the ACK for every second full segment leaves at once.
TEST_F(TcpScript, WithoutAckPerBurstEverySecondSegmentIsAckedAtOnce) {
  TcpConfig cfg = no_quickack();
  cfg.ack_per_burst = false;
  start(cfg);
  passive_open(Offer());
  inject_burst({ack().seq(1).ack(1).len(1000), ack().seq(1001).ack(1).len(1000), ack().seq(2001).ack(1).len(1000),
                ack().seq(3001).ack(1).len(1000), ack().seq(4001).ack(1).len(1000)});
  expect(ack().seq(1).ack(2001));
  expect(ack().seq(1).ack(4001));
  expect_nothing();
  EXPECT_EQ(stats().burst_acks.value(), 0u);
  advance(40ms);
  expect(ack().seq(1).ack(5001));
  EXPECT_EQ(stats().delayed_acks.value(), 1u);
}

// ---- zero window (RFC 9293 3.8.6.1, RFC 1122 4.2.2.17) ---------------------------------------

TEST_F(TcpScript, ZeroWindowProbesBackOffAndDataFlowsWhenTheWindowOpens) {
  start();
  passive_open(Offer().rtt(100ms));  // RTO 300 ms
  inject(ack().seq(1).ack(1).win(0));
  write(100);
  expect_nothing();
  advance(299ms);
  expect_nothing();
  advance(1ms);
  expect(ack().seq(0).ack(1));  // the probe: SND.UNA - 1, no data
  inject(ack().seq(1).ack(1).win(0));
  expect_nothing();
  // "SHOULD increase exponentially the interval between successive probes".
  advance(599ms);
  expect_nothing();
  advance(1ms);
  expect(ack().seq(0).ack(1));
  inject(ack().seq(1).ack(1).win(0));
  advance(1199ms);
  expect_nothing();
  advance(1ms);
  expect(ack().seq(0).ack(1));
  EXPECT_EQ(stats().window_probes.value(), 3u);
  inject(ack().seq(1).ack(1).win(1000));
  expect(psh_ack().seq(1).ack(1).len(100));
  inject(ack().seq(1).ack(101).win(1000));
  advance(10s);
  expect_nothing();
  EXPECT_EQ(stats().window_probes.value(), 3u);
}

// A window that opens by less than a segment: sender SWS avoidance waits, but
// not forever (RFC 1122 4.2.3.4 (4), the override timeout).
TEST_F(TcpScript, AWindowSmallerThanTheDataIsUsedAfterTheOverrideTimeout) {
  start();
  passive_open(Offer().rtt(100ms));
  inject(ack().seq(1).ack(1).win(0));
  write(100);
  expect_nothing();
  inject(ack().seq(1).ack(1).win(50));
  expect_nothing();
  advance(300ms);
  expect(ack().seq(1).ack(1).len(50));
  inject(ack().seq(1).ack(51).win(50));
  expect(psh_ack().seq(51).ack(1).len(50));
  inject(ack().seq(1).ack(101).win(1000));
  expect_nothing();
}

// ---- keepalive (RFC 1122 4.2.3.6) ------------------------------------------------------------

TEST_F(TcpScript, KeepaliveProbesAndTheDropAfterUnansweredOnes) {
  TcpConfig c;
  c.keepalive_idle = 10s;
  c.keepalive_interval = 1s;
  c.keepalive_probes = 3;
  start(c);
  passive_open(Offer());
  sock.set_keepalive(true);
  advance(9999ms);
  expect_nothing();
  advance(1ms);
  expect(ack().seq(0).ack(1));
  EXPECT_EQ(stats().keepalive_probes.value(), 1u);
  inject(ack().seq(1).ack(1));  // answered: idle again from here
  advance(9999ms);
  expect_nothing();
  advance(1ms);
  expect(ack().seq(0).ack(1));
  advance(1s);
  expect(ack().seq(0).ack(1));
  advance(1s);
  expect(ack().seq(0).ack(1));
  advance(999ms);
  expect_nothing();
  EXPECT_EQ(sock.state(), State::established);
  advance(1ms);
  expect_nothing();
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(read_error(sock), Errc::timed_out);
  EXPECT_EQ(stats().keepalive_probes.value(), 4u);
  EXPECT_EQ(stats().timeouts.value(), 1u);
  EXPECT_EQ(tcp->connection_count(), 0u);
}

// TCP_CORK holds a short tail -- but not once the FIN follows it: shutdown
// (or close) sends the tail with the FIN, as Linux pushes at close.
TEST_F(TcpScript, ACorkedTailLeavesWithTheFin) {
  start();
  passive_open(Offer());
  sock.set_cork(true);
  write(100);
  expect_nothing();
  ASSERT_TRUE(sock.shutdown_write().ok());
  expect(Seg(kFin | kPsh | kAck).seq(1).ack(1).len(100));  // PSH: the write's last byte
  expect_nothing();
}

// TCP_CONGESTION mid-connection: the new algorithm takes the window over.
TEST_F(TcpScript, CongestionControlChangesMidConnectionKeepingTheWindow) {
  start();
  passive_open(Offer());
  const std::uint32_t cwnd = sock.stats().cwnd;
  Tuning t;
  t.congestion = "newreno";
  ASSERT_TRUE(sock.tune(t).ok());
  EXPECT_EQ(sock.connection()->stats().cwnd, cwnd);
  t.congestion = "bbr";
  EXPECT_EQ(sock.tune(t).error(), Errc::not_found);
  write(1000);
  expect(psh_ack().seq(1).ack(1).len(1000));
  expect_nothing();
}

// ---- per-connection settings (TcpSocket::tune: setsockopt's TCP options) ----------------

// TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT on one connection, over the
// stack's 2 h / 75 s / 9; a new idle time re-arms the timer at once.
TEST_F(TcpScript, PerConnectionKeepaliveTimings) {
  start();
  passive_open(Offer());
  sock.set_keepalive(true);
  Tuning t;
  t.keepalive_idle = 10s;
  t.keepalive_interval = 1s;
  t.keepalive_probes = 2;
  ASSERT_TRUE(sock.tune(t).ok());
  advance(9999ms);
  expect_nothing();
  advance(1ms);
  expect(ack().seq(0).ack(1));
  advance(1s);
  expect(ack().seq(0).ack(1));
  advance(999ms);
  expect_nothing();
  EXPECT_EQ(sock.state(), State::established);
  advance(1ms);
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(read_error(sock), Errc::timed_out);
  EXPECT_EQ(stats().keepalive_probes.value(), 2u);
}

// TCP_USER_TIMEOUT: data unacknowledged that long ends the connection,
// whatever max_retries (15 here) would allow.
TEST_F(TcpScript, UserTimeoutEndsAConnectionWhoseDataStaysUnacknowledged) {
  start();
  passive_open(Offer().rtt(100ms));  // RTO 300 ms
  Tuning t;
  t.user_timeout = 1s;
  ASSERT_TRUE(sock.tune(t).ok());
  write(1000);
  expect(psh_ack().seq(1).ack(1).len(1000));
  advance(300ms);
  expect(ack().seq(1).ack(1).len(1000));
  advance(600ms);  // 900 ms since it was sent
  expect(ack().seq(1).ack(1).len(1000));
  EXPECT_EQ(sock.state(), State::established);
  advance(1200ms);  // the next expiry, 2.1 s after: past the user timeout
  expect_nothing();
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(read_error(sock), Errc::timed_out);
  EXPECT_EQ(stats().timeouts.value(), 1u);
}

// TCP_MAXSEG before connect(): our SYN offers it and we send no more, even
// when the peer offers more.
TEST_F(TcpScript, MaxSegmentCapsOurOfferAndWhatWeSend) {
  start();
  pport = 80;
  sock = tcp->socket();
  Tuning t;
  t.max_segment = 600;
  ASSERT_TRUE(sock.tune(t).ok());
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  expect(syn().win(65535).mss(600).ws(our_wscale()).sackok().ts(now_ms(), 0));
  irs = SeqNum(0x20000000);
  inject(syn_ack().seq(0).ack(1).mss(1460));
  expect(ack().seq(1).ack(1));
  EXPECT_EQ(sock.stats().mss, 600);
  sock.set_nodelay(true);
  write(1500);
  expect(ack().seq(1).ack(1).len(600));
  expect(ack().seq(601).ack(1).len(600));
  expect(psh_ack().seq(1201).ack(1).len(300));
  expect_nothing();
}

// TCP_QUICKACK: a delayed ACK that is pending leaves at once, and the next
// segments are ACKed at once too; false ends the mode.
TEST_F(TcpScript, QuickAckOptionSendsThePendingAckNow) {
  start(no_quickack());
  passive_open(Offer());
  inject(ack().seq(1).ack(1).len(100));
  expect_nothing();  // delayed
  Tuning on;
  on.quickack = true;
  ASSERT_TRUE(sock.tune(on).ok());
  expect(ack().seq(1).ack(101));
  inject(ack().seq(101).ack(1).len(100));
  expect(ack().seq(1).ack(201));
  Tuning off;
  off.quickack = false;
  ASSERT_TRUE(sock.tune(off).ok());
  inject(ack().seq(201).ack(1).len(100));
  expect_nothing();
  advance(40ms);
  expect(ack().seq(1).ack(301));
}

TEST_F(TcpScript, TuneRefusesValuesOutOfRange) {
  start();
  passive_open(Offer());
  Tuning idle0;
  idle0.keepalive_idle = Duration{0};
  EXPECT_EQ(sock.tune(idle0).error(), Errc::invalid_argument);
  Tuning probes0;
  probes0.keepalive_probes = 0u;
  EXPECT_EQ(sock.tune(probes0).error(), Errc::invalid_argument);
  Tuning mss;
  mss.max_segment = std::uint16_t{87};
  EXPECT_EQ(sock.tune(mss).error(), Errc::invalid_argument);
  Tuning negative;
  negative.user_timeout = -1ms;
  EXPECT_EQ(sock.tune(negative).error(), Errc::invalid_argument);
  expect_nothing();
}

// ---- TIME-WAIT (RFC 9293 3.6.1, 3.10.7.4; RFC 6191) -------------------------------------

// We close first; the peer's FIN takes us to TIME-WAIT. The application has
// let go, so the connection is freed and a record of the protocol's keeps
// the TIME-WAIT (tcp_timewait.cpp).
class TimeWait : public Script {
 protected:
  Ref<TcpConnection> closing;
  SeqNum old_iss;

  void to_time_wait(const Offer& o = Offer()) {
    passive_open(o);
    old_iss = iss;
    closing = Ref<TcpConnection>(sock.connection());
    ASSERT_TRUE(sock.close().ok());
    expect(fin_ack().seq(1 + static_cast<std::uint32_t>(write_off)).ack(1));
    inject(ack().seq(1).ack(2 + static_cast<std::uint32_t>(write_off)));
    EXPECT_EQ(closing->state(), State::fin_wait_2);
    inject(fin_ack().seq(1).ack(2 + static_cast<std::uint32_t>(write_off)));
    expect(ack().seq(2 + static_cast<std::uint32_t>(write_off)).ack(2));
    EXPECT_EQ(closing->state(), State::closed) << "the connection went; a record keeps TIME-WAIT";
    EXPECT_TRUE(closing->detached());
    EXPECT_EQ(tcp->time_wait_count(), 1u);
  }
  bool in_time_wait() const { return tcp->time_wait_count() == 1; }
  void TearDown() override {
    closing = Ref<TcpConnection>();
    Script::TearDown();
  }
};

TEST_F(TimeWait, LastsTwoMslAndReAcksARetransmittedFin) {
  start();
  to_time_wait();
  EXPECT_EQ(tcp->connection_count(), 1u);
  advance(30s);
  inject(fin_ack().seq(1).ack(2));
  expect(ack().seq(2).ack(2));
  // The 2 MSL restart from the retransmitted FIN.
  advance(59999ms);
  EXPECT_TRUE(in_time_wait());
  EXPECT_EQ(tcp->connection_count(), 1u);
  advance(1ms);
  EXPECT_FALSE(in_time_wait());
  EXPECT_EQ(tcp->connection_count(), 0u);
  EXPECT_TRUE(ip.sessions.empty()) << "the IP session of the peer is closed with its last connection";
  expect_nothing();
}

TEST_F(TimeWait, ANewSynWithAHigherSequenceNumberReopens) {
  start();
  to_time_wait();
  advance(1s);
  irs = irs + 1000;  // past the old RCV.NXT
  inject(syn().seq(0).mss(1000));
  expect(syn_ack().ack(1).mss(1460));
  EXPECT_GE(iss - old_iss, 2) << "the new ISS is past everything the old connection sent";
  EXPECT_EQ(stats().time_wait_reused.value(), 1u);
  EXPECT_FALSE(in_time_wait());
  inject(ack().seq(1).ack(1));
  Result<TcpSocket> a = listener.accept();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->state(), State::established);
  EXPECT_EQ(tcp->connection_count(), 1u);
}

TEST_F(TimeWait, ASynWithAnOldSequenceNumberDoesNotReopen) {
  start();
  to_time_wait();
  inject(syn().seq(0).mss(1000));  // the old connection's own SYN
  expect(ack().seq(2).ack(2));
  EXPECT_EQ(stats().time_wait_reused.value(), 0u);
  EXPECT_TRUE(in_time_wait());
}

// RFC 9293 3.6.1 (1): reopening from TIME-WAIT needs an ISS above every
// sequence number the old connection used, even when the ISN clock has not
// moved that far.
TEST_F(TimeWait, TheReopenedConnectionStartsAboveTheOldSequenceSpace) {
  start();
  passive_open(Offer());
  write(5000);
  for (std::uint32_t i = 0; i < 5; ++i) expect((i == 4 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(1).len(1000));
  inject(ack().seq(1).ack(5001));
  SeqNum first_iss = iss;
  sock = TcpSocket();  // closes
  expect(fin_ack().seq(5001).ack(1));
  inject(ack().seq(1).ack(5002));
  inject(fin_ack().seq(1).ack(5002));
  expect(ack().seq(5002).ack(2));
  advance(1ms);
  irs = irs + 1000;
  inject(syn().seq(0).mss(1000));
  expect(syn_ack().ack(1).mss(1460));
  EXPECT_GE(iss - first_iss, 5002);
  EXPECT_EQ(stats().time_wait_reused.value(), 1u);
}

// RFC 6191 2: with timestamps, the SYN's TSval decides.
TEST_F(TimeWait, WithTimestampsTheSynsTimestampDecides) {
  start();
  to_time_wait(Offer().ts());  // TS.Recent = 5000
  const SeqNum old_irs = irs;
  // A higher sequence number but an older timestamp: no new incarnation
  // (and PAWS answers it with an ACK).
  inject(syn().seq(1000).mss(1000).ts(4000, 0));
  expect(ack().seq(2).ack(2));
  EXPECT_EQ(stats().time_wait_reused.value(), 0u);
  EXPECT_TRUE(in_time_wait());
  // A lower sequence number but a newer timestamp: reopened.
  irs = old_irs - 5000;
  inject(syn().seq(0).mss(1000).ts(6000, 0));
  expect(syn_ack().ack(1).mss(1460).ts(now_ms(), 6000));
  EXPECT_EQ(stats().time_wait_reused.value(), 1u);
  EXPECT_FALSE(in_time_wait());
}

TEST_F(TimeWait, OnlyAnExactRstEndsItAnInWindowOneGetsAChallengeAck) {
  start();
  to_time_wait();
  inject(rst().seq(100));  // in the window, not RCV.NXT (RFC 5961 3.2)
  expect(ack().seq(2).ack(2));
  EXPECT_TRUE(in_time_wait());
  inject(rst().seq(2));
  expect_nothing();
  EXPECT_FALSE(in_time_wait());
  EXPECT_EQ(stats().resets_received.value(), 1u);
  EXPECT_EQ(tcp->connection_count(), 0u);
}

TEST_F(TimeWait, OldDataOrAnAckOfWhatWasNeverSentGetsAnAck) {
  start();
  to_time_wait();
  inject(ack().seq(2).ack(9));  // past our FIN
  expect(ack().seq(2).ack(2));
  EXPECT_EQ(stats().drop_ack_unacceptable.value(), 1u);
  inject(psh_ack().seq(1).ack(2).len(1));  // below RCV.NXT: out of window
  expect(ack().seq(2).ack(2));
  inject(ack().seq(2).ack(2));  // a duplicate of the last ACK: nothing to say
  expect_nothing();
  inject(syn_ack().seq(2).ack(2));  // RFC 5961 4.2
  expect(ack().seq(2).ack(2));
  deliver_icmp(icmp(3, 3, 1));  // nothing is in flight in TIME-WAIT (RFC 5927 4.1)
  EXPECT_EQ(stats().icmp_out_of_window.value(), 1u);
  EXPECT_TRUE(in_time_wait());
}

// PAWS (RFC 7323 5.3) holds in TIME-WAIT too: an older timestamp is
// dropped with an ACK, a newer one is remembered for the next check.
TEST_F(TimeWait, PawsDropsASegmentWithAnOlderTimestamp) {
  start();
  to_time_wait(Offer().ts());  // TS.Recent = 5000
  const std::uint64_t paws = stats().drop_paws.value();
  inject(fin_ack().seq(1).ack(2).ts(4000, 0));
  expect(ack().seq(2).ack(2).ts(now_ms(), 5000));
  EXPECT_EQ(stats().drop_paws.value(), paws + 1);
  inject(fin_ack().seq(1).ack(2).ts(7000, 0));  // the FIN again, newer
  expect(ack().seq(2).ack(2).ts(now_ms(), 5000));
  inject(fin_ack().seq(1).ack(2).ts(6000, 0));  // no older than 5000: still fine
  expect(ack().seq(2).ack(2).ts(now_ms(), 5000));
  EXPECT_EQ(stats().drop_paws.value(), paws + 1);
}

// While the application still holds the connection, TIME-WAIT stays in it;
// its close hands the 4-tuple to a record.
TEST_F(TcpScript, TimeWaitStaysInAConnectionStillHeldUntilItIsClosed) {
  start();
  passive_open(Offer());
  ASSERT_TRUE(sock.shutdown_write().ok());
  expect(fin_ack().seq(1).ack(1));
  inject(ack().seq(1).ack(2));
  inject(fin_ack().seq(1).ack(2));
  expect(ack().seq(2).ack(2));
  EXPECT_EQ(sock.state(), State::time_wait);
  EXPECT_EQ(tcp->time_wait_count(), 1u);
  Ref<TcpConnection> c(sock.connection());
  sock = TcpSocket();  // closes
  EXPECT_TRUE(c->detached());
  EXPECT_EQ(tcp->time_wait_count(), 1u);
  EXPECT_EQ(tcp->connection_count(), 1u);
  inject(fin_ack().seq(1).ack(2));  // the FIN again: the record answers
  expect(ack().seq(2).ack(2));
  advance(60s);
  EXPECT_EQ(tcp->connection_count(), 0u);
  EXPECT_TRUE(ip.sessions.empty());
}

// Linux's tcp_max_tw_buckets: past the table's size a closing connection
// skips TIME-WAIT (counted) rather than hold memory without bound.
TEST_F(TcpScript, PastTimeWaitMaxAConnectionClosesWithoutOne) {
  TcpConfig c;
  c.time_wait_max = 0;
  start(c);
  passive_open(Offer());
  sock = TcpSocket();  // closes
  expect(fin_ack().seq(1).ack(1));
  inject(ack().seq(1).ack(2));
  inject(fin_ack().seq(1).ack(2));
  expect(ack().seq(2).ack(2));
  EXPECT_EQ(stats().time_wait_overflow.value(), 1u);
  EXPECT_EQ(tcp->connection_count(), 0u);
  inject(fin_ack().seq(1).ack(2));  // for no connection now: RST
  expect(rst().seq(2));
}

// ---- RST and RFC 5961 ----------------------------------------------------------------------

TEST_F(TcpScript, OnlyAnExactRstResetsInWindowOnesGetAChallengeAck) {
  start();
  passive_open(Offer());
  inject(rst().seq(1000));
  expect(ack().seq(1).ack(1));  // RFC 5961 3.2: challenge ACK
  inject(rst_ack().seq(500).ack(1));
  expect(ack().seq(1).ack(1));
  EXPECT_EQ(stats().challenge_acks.value(), 2u);
  inject(rst().seq(70000));  // past the window
  inject(rst().seq(0));      // just before RCV.NXT
  expect_nothing();
  EXPECT_EQ(stats().drop_out_of_window.value(), 2u);
  EXPECT_EQ(sock.state(), State::established);
  EXPECT_EQ(stats().resets_received.value(), 0u);
  inject(rst().seq(1));
  expect_nothing();
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(read_error(sock), Errc::reset);
  EXPECT_EQ(stats().resets_received.value(), 1u);
  EXPECT_EQ(tcp->connection_count(), 0u);
}

TEST_F(TcpScript, RstInSynSentNeedsAnAcceptableAck) {
  start();
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  pport = 80;
  expect(syn().mss(1460).ws(11).sackok().ts(now_ms(), 0));
  irs = SeqNum(0x70000000);
  inject(rst().seq(0));  // no ACK: ignored (RFC 9293 3.10.7.3)
  inject(rst_ack().seq(0).ack(5));  // an ACK of nothing we sent: ignored
  expect_nothing();
  // An unacceptable ACK without RST: <SEQ=SEG.ACK><CTL=RST>.
  inject(ack().seq(0).ack(100));
  expect(rst().seq(100));
  EXPECT_EQ(sock.state(), State::syn_sent);
  inject(rst_ack().seq(0).ack(1));
  expect_nothing();
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(read_error(sock), Errc::refused);
  EXPECT_EQ(stats().resets_received.value(), 1u);
  EXPECT_EQ(stats().resets_sent.value(), 1u);
}

TEST_F(TcpScript, SynInEstablishedGetsAChallengeAck) {
  start();
  passive_open(Offer());
  inject(syn().seq(100).mss(1000));
  expect(ack().seq(1).ack(1));  // RFC 5961 4.2
  EXPECT_EQ(stats().challenge_acks.value(), 1u);
  inject(syn().seq(static_cast<std::uint32_t>(-100000)).mss(1000));
  expect(ack().seq(1).ack(1));  // out of the window: the usual ACK
  EXPECT_EQ(stats().drop_out_of_window.value(), 1u);
  EXPECT_EQ(sock.state(), State::established);
  inject(ack().seq(1).ack(1).len(100));
  advance(40ms);
  expect(ack().seq(1).ack(101));
  expect_read(100);
}

// RFC 5961 5.2: acceptable ACKs lie in [SND.UNA - MAX.SND.WND, SND.NXT].
TEST_F(TcpScript, BlindDataWithAnUnacceptableAckIsDropped) {
  start();
  passive_open(Offer());  // MAX.SND.WND = 65535
  write(1000);
  expect(psh_ack().seq(1).ack(1).len(1000));
  inject(ack().seq(1).ack(5000).len(100));  // acknowledges what was never sent
  expect(ack().seq(1001).ack(1));
  EXPECT_EQ(stats().drop_ack_unacceptable.value(), 1u);
  EXPECT_EQ(read_error(sock), Errc::would_block);
  inject(ack().seq(1).ack(static_cast<std::uint32_t>(1 - 65535 - 1)).len(100));  // one too old
  expect(ack().seq(1001).ack(1));
  EXPECT_EQ(stats().challenge_acks.value(), 1u);
  EXPECT_EQ(stats().drop_ack_unacceptable.value(), 2u);
  EXPECT_EQ(read_error(sock), Errc::would_block);
  inject(ack().seq(1).ack(static_cast<std::uint32_t>(1 - 65535)).len(100));  // the oldest acceptable
  advance(40ms);
  expect(ack().seq(1001).ack(101));
  expect_read(100);
  EXPECT_EQ(stats().drop_ack_unacceptable.value(), 2u);
  EXPECT_EQ(stats().challenge_acks.value(), 1u);
  inject(ack().seq(101).ack(1001));
  expect_nothing();
}

TEST_F(TcpScript, ChallengeAcksAreRateLimited) {
  TcpConfig c;
  c.challenge_acks_per_s = 2;
  start(c);
  passive_open(Offer());
  for (std::uint32_t i = 0; i < 5; ++i) inject(rst().seq(1000 + i));
  expect(ack().seq(1).ack(1));
  expect(ack().seq(1).ack(1));
  expect_nothing();
  EXPECT_EQ(stats().challenge_acks.value(), 2u);
  EXPECT_EQ(stats().challenge_acks_limited.value(), 3u);
  advance(1s);
  inject(rst().seq(1000));
  expect(ack().seq(1).ack(1));
  inject(syn().seq(100));
  expect(ack().seq(1).ack(1));
  inject(syn().seq(100));
  expect_nothing();  // SYNs share the budget (RFC 5961 7)
  EXPECT_EQ(stats().challenge_acks.value(), 4u);
  EXPECT_EQ(stats().challenge_acks_limited.value(), 4u);
  EXPECT_EQ(sock.state(), State::established);
}

// ---- SYN cookies (RFC 4987 3.6) --------------------------------------------------------------

TEST_F(TcpScript, SynCookieWithoutStateAndTheOptionsRecovered) {
  TcpConfig c;
  c.syn_backlog = 0;
  start(c);
  listen();
  irs = SeqNum(0x50000000);
  inject(syn().seq(0).mss(1300).ws(7).sackok().ts(700, 0));
  Got g = expect(syn_ack().ack(1).win(65535).mss(1460).ws(11).sackok().ecr(700));
  EXPECT_EQ(tcp->connection_count(), 0u) << "a cookie keeps no state";
  EXPECT_EQ(stats().syncookies_sent.value(), 1u);
  ASSERT_TRUE(g.opts.timestamps.has_value());
  EXPECT_EQ(decode_cookie_tsecr(g.opts.timestamps->tsval), (CookieOptions{std::uint8_t{7}, true}));
  inject(ack().seq(1).ack(1).ts(701, g.opts.timestamps->tsval));
  Result<TcpSocket> a = listener.accept();
  ASSERT_TRUE(a.ok());
  sock = std::move(*a);
  ConnStats st = sock.stats();
  EXPECT_EQ(st.state, State::established);
  EXPECT_EQ(st.mss, 1220) << "the largest table entry not above the peer's 1300";
  EXPECT_EQ(st.snd_wscale, 7);
  EXPECT_EQ(st.rcv_wscale, 11);
  EXPECT_TRUE(st.sack);
  EXPECT_TRUE(st.timestamps);
  EXPECT_EQ(stats().syncookies_ok.value(), 1u);
  EXPECT_EQ(stats().passive_opens.value(), 1u);
  EXPECT_EQ(stats().established.value(), 1u);
  expect_nothing();
  // TS.Recent follows the peer from here (RFC 7323 4.3).
  conn_ts = true;
  inject(ack().seq(1).ack(1).len(100).ts(800, last_tsval_));
  advance(40ms);
  expect(ack().seq(1).ack(101).ecr(800));
  expect_read(100);
}

TEST_F(TcpScript, SynCookieHandshakeAckMayCarryData) {
  TcpConfig c;
  c.syn_backlog = 0;
  start(c);
  listen();
  irs = SeqNum(0x51000000);
  inject(syn().seq(0).mss(1460).ws(7).sackok());
  // Without timestamps there is nowhere to keep the window scale and SACK.
  expect(syn_ack().ack(1).win(65535).mss(1460));
  inject(ack().seq(1).ack(1).len(100));
  Result<TcpSocket> a = listener.accept();
  ASSERT_TRUE(a.ok());
  sock = std::move(*a);
  EXPECT_EQ(sock.stats().mss, 1460);
  EXPECT_FALSE(sock.stats().sack);
  EXPECT_EQ(sock.stats().snd_wscale, 0);
  expect_read(100);
  advance(40ms);
  expect(ack().seq(1).ack(101).win(65535));
  expect_nothing();
}

TEST_F(TcpScript, AWrongCookieGetsARst) {
  TcpConfig c;
  c.syn_backlog = 0;
  start(c);
  listen();
  irs = SeqNum(0x52000000);
  inject(syn().seq(0).mss(1460));
  expect(syn_ack().ack(1).mss(1460));
  inject(ack().seq(1).ack(2));
  expect(rst().seq(2));  // <SEQ=SEG.ACK><CTL=RST>
  inject(ack().seq(2).ack(1));  // the right cookie for another client ISN
  expect(rst().seq(1));
  EXPECT_EQ(stats().syncookies_bad.value(), 2u);
  EXPECT_EQ(stats().syncookies_ok.value(), 0u);
  EXPECT_EQ(stats().resets_sent.value(), 2u);
  EXPECT_EQ(tcp->connection_count(), 0u);
  EXPECT_FALSE(listener.accept().ok());
}

TEST_F(TcpScript, AFullSynQueueFallsBackToCookies) {
  TcpConfig c;
  c.syn_backlog = 1;
  start(c);
  listen();
  irs = SeqNum(0x53000000);
  pport = 41000;
  inject(syn().seq(0).mss(1000));
  expect(syn_ack().ack(1).mss(1460));
  EXPECT_EQ(tcp->connection_count(), 1u);
  pport = 41001;
  inject(syn().seq(0).mss(1000));
  expect(syn_ack().ack(1).mss(1460));
  EXPECT_EQ(tcp->connection_count(), 1u);
  EXPECT_EQ(stats().syncookies_sent.value(), 1u);
  inject(ack().seq(1).ack(1));
  Result<TcpSocket> a = listener.accept();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->tuple().remote.port, 41001);
  EXPECT_EQ(a->stats().mss, 536) << "1000 is stored as the table's 536";
  EXPECT_EQ(stats().syncookies_ok.value(), 1u);
  EXPECT_EQ(tcp->connection_count(), 2u);
}

// ---- sequence numbers across 2^32 ------------------------------------------------------------

TEST_F(TcpScript, SequenceNumbersWrapAround) {
  start();
  clock.set(time_for_isn(FourTuple{{kLocal, kListenPort}, {kPeer, kPeerPort}}, 0xFFFFFF00));
  passive_open(Offer().sack().rtt(10ms), 0xFFFFFF80);
  EXPECT_EQ(iss.raw(), 0xFFFFFF00u);
  // A hole whose two sides lie on either side of the wrap.
  inject(ack().seq(201).ack(1).len(200));
  expect(ack().seq(1).ack(1).sack({{201, 401}}));
  inject(ack().seq(1).ack(1).len(200));
  expect(ack().seq(1).ack(401));
  expect_read(400);
  expect_read_all();
  // Our data across the wrap: the first segment, which crosses it, is lost
  // and SACK recovery repairs it (RACK: once three segments are SACKed,
  // without waiting out the reordering window).
  write(4000);
  for (std::uint32_t i = 0; i < 4; ++i) expect((i == 3 ? psh_ack() : ack()).seq(1 + 1000 * i).ack(401).len(1000));
  advance(10ms);
  inject(ack().seq(401).ack(1).sack({{1001, 2001}}));
  inject(ack().seq(401).ack(1).sack({{1001, 3001}}));
  expect_nothing();
  inject(ack().seq(401).ack(1).sack({{1001, 4001}}));
  expect(ack().seq(1).ack(401).len(1000));
  expect_nothing();
  inject(ack().seq(401).ack(4001));
  EXPECT_EQ(sock.stats().bytes_acked, 4000u);
  EXPECT_EQ(stats().fast_retransmits.value(), 1u);
  write(100);
  expect(psh_ack().seq(4001).ack(401).len(100));
  inject(ack().seq(401).ack(4101));
  EXPECT_EQ(sock.stats().bytes_acked, 4100u);
  expect_nothing();
}

// ---- simultaneous open and close (RFC 9293 3.5 figure 8, 3.6 figure 13) -----------------------

TEST_F(TcpScript, SimultaneousOpen) {
  start();
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  pport = 80;
  expect(syn().win(65535).mss(1460).ws(11).sackok().ts(now_ms(), 0));
  irs = SeqNum(0x60000000);
  inject(syn().seq(0).win(8000).mss(1000));
  // SYN-RECEIVED: our SYN again, with the ACK, offering what the peer did.
  expect(syn_ack().seq(0).ack(1).win(65535).mss(1460));
  EXPECT_EQ(sock.state(), State::syn_received);
  // The peer's SYN-ACK acknowledges ours: ESTABLISHED (figure 8 line 6).
  inject(syn_ack().seq(0).ack(1).win(8000).mss(1000));
  expect_nothing();
  EXPECT_EQ(sock.state(), State::established);
  EXPECT_EQ(sock.stats().mss, 1000);
  EXPECT_EQ(sock.stats().snd_wnd, 8000u);
  write(100);
  expect(psh_ack().seq(1).ack(1).len(100));
  inject(ack().seq(1).ack(101).len(10));
  advance(40ms);
  expect(ack().seq(101).ack(11));
  expect_read(10);
  EXPECT_EQ(stats().established.value(), 1u);
}

TEST_F(TcpScript, SimultaneousCloseGoesThroughClosing) {
  start();
  passive_open(Offer());
  ASSERT_TRUE(sock.shutdown_write().ok());
  expect(fin_ack().seq(1).ack(1));
  EXPECT_EQ(sock.state(), State::fin_wait_1);
  inject(fin_ack().seq(1).ack(1));  // the peer's FIN crossed ours
  expect(ack().seq(2).ack(2));
  EXPECT_EQ(sock.state(), State::closing);
  inject(ack().seq(2).ack(2));
  EXPECT_EQ(sock.state(), State::time_wait);
  expect_nothing();
  advance(60s);
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(tcp->connection_count(), 0u);
  expect_nothing();
}

// ---- half-close (RFC 9293 3.6) --------------------------------------------------------------

TEST_F(TcpScript, AfterShutdownWriteWeKeepReceiving) {
  start(no_quickack());
  passive_open(Offer());
  ASSERT_TRUE(sock.shutdown_write().ok());
  expect(fin_ack().seq(1).ack(1));
  inject(ack().seq(1).ack(2));
  EXPECT_EQ(sock.state(), State::fin_wait_2);
  inject(ack().seq(1).ack(2).len(1000));
  inject(ack().seq(1001).ack(2).len(1000));
  expect(ack().seq(2).ack(2001));
  expect_read(2000);
  expect_read_all();
  std::byte one[1]{};
  Result<std::size_t> w = sock.write(one);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error(), Errc::closed);
  inject(fin_ack().seq(2001).ack(2));
  expect(ack().seq(2).ack(2002));
  EXPECT_EQ(sock.state(), State::time_wait);
  Result<std::size_t> eof = sock.read(one);
  ASSERT_TRUE(eof.ok());
  EXPECT_EQ(*eof, 0u);
  expect_nothing();
}

// Data and FIN in one segment: the FIN's ACK covers the data too, with no
// delayed ACK after it -- and in FIN-WAIT-2 the FIN ends the connection in
// TIME-WAIT, which must not then be asked to schedule anything (fuzz find).
TEST_F(TcpScript, DataWithFinGetsOneAck) {
  start();
  passive_open(Offer());
  inject(fin_ack().seq(1).ack(1).len(1000));
  expect(ack().seq(1).ack(1002));
  EXPECT_EQ(sock.state(), State::close_wait);
  advance(500ms);
  expect_nothing();
  expect_read(1000);
}

TEST_F(TcpScript, DataWithFinInFinWait2EntersTimeWait) {
  start();
  passive_open(Offer());
  ASSERT_TRUE(sock.shutdown_write().ok());
  expect(fin_ack().seq(1).ack(1));
  inject(ack().seq(1).ack(2));
  EXPECT_EQ(sock.state(), State::fin_wait_2);
  inject(fin_ack().seq(1).ack(2).len(1460));
  expect(ack().seq(2).ack(1462));
  EXPECT_EQ(sock.state(), State::time_wait);
  advance(500ms);
  expect_nothing();
  expect_read(1460);
}

TEST_F(TcpScript, AfterThePeersFinWeKeepSending) {
  start();
  passive_open(Offer());
  inject(fin_ack().seq(1).ack(1));
  expect(ack().seq(1).ack(2));
  EXPECT_EQ(sock.state(), State::close_wait);
  std::byte one[1]{};
  Result<std::size_t> eof = sock.read(one);
  ASSERT_TRUE(eof.ok());
  EXPECT_EQ(*eof, 0u);
  write(500);
  expect(psh_ack().seq(1).ack(2).len(500));
  inject(ack().seq(2).ack(501));
  Ref<TcpConnection> c(sock.connection());
  ASSERT_TRUE(sock.close().ok());
  expect(fin_ack().seq(501).ack(2));
  EXPECT_EQ(c->state(), State::last_ack);
  inject(ack().seq(2).ack(502));
  EXPECT_EQ(c->state(), State::closed);
  EXPECT_EQ(tcp->connection_count(), 0u);
  expect_nothing();
}

// ---- segments for no connection (RFC 9293 3.10.7.1) ---------------------------------------

TEST_F(TcpScript, ResetsForAClosedPort) {
  start();
  irs = SeqNum(0x70000000);
  lport = 9;  // nobody listens; iss stays 0, so our sequence numbers are absolute
  inject(syn().seq(0).mss(1460));
  expect(rst_ack().seq(0).ack(1).win(0));  // <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>
  inject(syn().seq(0).len(10));
  expect(rst_ack().seq(0).ack(11).win(0));
  inject(ack().seq(5).abs_ack(12345).len(3));
  expect(rst().abs_seq(12345).win(0));  // <SEQ=SEG.ACK><CTL=RST>
  inject(seg(kFin).seq(5).len(3));
  expect(rst_ack().seq(0).ack(9).win(0));
  inject(rst().seq(5));  // never a RST for a RST
  expect_nothing();
  EXPECT_EQ(stats().rx_segments.value(), 5u);
  EXPECT_EQ(stats().drop_no_listener.value(), 5u);
  EXPECT_EQ(stats().resets_sent.value(), 4u);
  EXPECT_EQ(stats().tx_segments.value(), 4u);
  EXPECT_TRUE(ip.sessions.empty()) << "no IP session kept for a peer without connections";
}

// ---- malformed segments --------------------------------------------------------------------

TEST_F(TcpScript, MalformedSegmentsAreCountedAndDropped) {
  start();
  passive_open(Offer());
  EXPECT_EQ(try_inject(ack().seq(1).ack(1).len(10).doff(4)).error(), Errc::malformed);
  EXPECT_EQ(try_inject(ack().seq(1).ack(1).doff(15)).error(), Errc::malformed);  // past the end
  EXPECT_EQ(try_inject(ack().seq(1).ack(1).len(10).cut(12)).error(), Errc::malformed);  // shorter than 20
  EXPECT_EQ(stats().drop_malformed.value(), 3u);
  EXPECT_EQ(try_inject(ack().seq(1).ack(1).len(10).bad_csum()).error(), Errc::malformed);
  EXPECT_EQ(stats().drop_bad_csum.value(), 1u);
  auto bytes = [](std::initializer_list<int> v) {
    std::vector<std::byte> b;
    for (int x : v) b.push_back(std::byte(static_cast<unsigned char>(x)));
    return b;
  };
  const std::vector<std::vector<std::byte>> bad_options = {
      bytes({1, 1, 8, 10}),              // timestamps running past the end
      bytes({1, 1, 1, 2}),               // a kind without its length byte
      bytes({5, 0, 1, 1}),               // length 0
      bytes({2, 1, 1, 1}),               // length 1
      bytes({2, 3, 5, 1}),               // MSS of the wrong length
      bytes({5, 6, 0, 0, 0, 0, 1, 1}),  // SACK with half a block
  };
  for (const auto& o : bad_options) {
    EXPECT_EQ(try_inject(ack().seq(1).ack(1).len(10).raw_options(o)).error(), Errc::malformed);
  }
  EXPECT_EQ(stats().drop_malformed.value(), 9u);
  expect_nothing();
  EXPECT_EQ(read_error(sock), Errc::would_block);
  EXPECT_EQ(sock.state(), State::established);
  // The connection is unharmed.
  inject(ack().seq(1).ack(1).len(10));
  advance(40ms);
  expect(ack().seq(1).ack(11));
  expect_read(10);
  // Nor does a listener answer malformed SYNs.
  pport = 42000;
  EXPECT_FALSE(try_inject(syn().seq(0).mss(1460).bad_csum()).ok());
  EXPECT_FALSE(try_inject(syn().seq(0).raw_options(bytes({2, 4, 5, 0xb4, 1, 1, 8, 10}))).ok());
  expect_nothing();
  EXPECT_EQ(stats().drop_bad_csum.value(), 2u);
  EXPECT_EQ(tcp->connection_count(), 1u);
}

// ---- ICMP errors (RFC 1122 4.2.3.9, RFC 5927, RFC 1191 path MTU discovery) -----------------

TEST_F(TcpScript, FragNeededInFlightShrinksTheMssAndResendsAtOnce) {
  start();
  active_open(Offer().mss(1460));
  ConnStats st = sock.stats();
  EXPECT_EQ(st.mss, 1460);
  EXPECT_EQ(st.pmtu, 1500) << "until a router says otherwise, the link's MTU";
  write(1000);
  expect(psh_ack().seq(1).ack(1).len(1000));
  inject(ack().seq(1).ack(1001));  // cwnd is no longer the initial window
  write(2920);
  expect(ack().seq(1001).ack(1).len(1460));
  expect(psh_ack().seq(2461).ack(1).len(1460));
  const ConnStats before = sock.stats();
  // A router on the path refused the second segment: MTU 1280, MSS 1240.
  deliver_icmp(icmp(3, 4, 2461, 1280));
  // RFC 1191 6.4: all that is in flight, again from SND.UNA, without waiting
  // for the retransmission timer; the short tail is not held by Nagle.
  expect(ack().seq(1001).ack(1).len(1240));
  expect(ack().seq(2241).ack(1).len(1240));
  expect(psh_ack().seq(3481).ack(1).len(440));
  expect_nothing();
  st = sock.stats();
  EXPECT_EQ(st.pmtu, 1280);
  EXPECT_EQ(st.mss, 1240);
  EXPECT_EQ(st.cwnd, before.cwnd) << "not a congestion signal";
  EXPECT_EQ(st.ssthresh, before.ssthresh);
  EXPECT_EQ(st.rto, before.rto) << "no backoff";
  EXPECT_EQ(st.retransmits, 3u);
  EXPECT_EQ(st.pmtu_updates, 1u);
  EXPECT_EQ(st.icmp_errors, 1u);
  EXPECT_EQ(stats().icmp_errors.value(), 1u);
  EXPECT_EQ(stats().pmtu_updates.value(), 1u);
  EXPECT_EQ(stats().rto_expiries.value(), 0u);
  EXPECT_EQ(sock.connection()->soft_error(), Errc::ok) << "frag-needed is acted on, not kept";
  inject(ack().seq(1).ack(3921));
  expect_nothing();
  // New data goes out in the new size too.
  write(2480);
  expect(ack().seq(3921).ack(1).len(1240));
  expect(psh_ack().seq(5161).ack(1).len(1240));
  expect_nothing();
}

TEST_F(TcpScript, IcmpErrorsAboutSegmentsNotInFlightAreIgnored) {
  start();
  active_open(Offer().mss(1460));
  write(1460);
  expect(psh_ack().seq(1).ack(1).len(1460));
  // RFC 5927 4.1: only SND.UNA <= SEG.SEQ < SND.NXT is believed.
  deliver_icmp(icmp(3, 4, 1461, 1280));        // SND.NXT: nothing sent there yet
  deliver_icmp(icmp(3, 4, 0, 1280));           // our SYN, acknowledged long ago
  deliver_icmp(icmp(3, 4, 0x40000000, 1280));  // a blind guess
  deliver_icmp(icmp(3, 3, 0x40000000));        // a port unreachable likewise
  expect_nothing();
  ConnStats st = sock.stats();
  EXPECT_EQ(st.mss, 1460);
  EXPECT_EQ(st.pmtu, 1500);
  EXPECT_EQ(st.icmp_errors, 0u);
  EXPECT_EQ(stats().icmp_errors.value(), 4u);
  EXPECT_EQ(stats().icmp_out_of_window.value(), 4u);
  EXPECT_EQ(stats().pmtu_updates.value(), 0u);
  EXPECT_EQ(stats().icmp_soft_errors.value(), 0u);
  EXPECT_EQ(sock.connection()->soft_error(), Errc::ok);
  // Another 4-tuple is no connection of ours.
  pport = 81;
  deliver_icmp(icmp(3, 4, 1, 1280));
  EXPECT_EQ(stats().icmp_no_connection.value(), 1u);
  pport = 80;
  expect_nothing();
  // In flight, it is believed.
  deliver_icmp(icmp(3, 4, 1, 1280));
  expect(ack().seq(1).ack(1).len(1240));
  expect(psh_ack().seq(1241).ack(1).len(220));
  EXPECT_EQ(stats().pmtu_updates.value(), 1u);
}

TEST_F(TcpScript, AFragNeededNotBelowThePathMtuIsIgnored) {
  start();
  active_open(Offer().mss(1460));
  write(1460);
  expect(psh_ack().seq(1).ack(1).len(1460));
  deliver_icmp(icmp(3, 4, 1, 1500));
  deliver_icmp(icmp(3, 4, 1, 9000));
  expect_nothing();
  EXPECT_EQ(sock.stats().mss, 1460);
  EXPECT_EQ(sock.stats().pmtu, 1500);
  EXPECT_EQ(stats().pmtu_ignored.value(), 2u);
  EXPECT_EQ(stats().pmtu_updates.value(), 0u);
  deliver_icmp(icmp(3, 4, 1, 1400));
  expect(ack().seq(1).ack(1).len(1360));
  expect(psh_ack().seq(1361).ack(1).len(100));
  // RFC 1191 3: an ICMP never raises the estimate again.
  deliver_icmp(icmp(3, 4, 1, 1450));
  expect_nothing();
  EXPECT_EQ(sock.stats().mss, 1360);
  EXPECT_EQ(sock.stats().pmtu, 1400);
  EXPECT_EQ(stats().pmtu_ignored.value(), 3u);
  EXPECT_EQ(stats().pmtu_updates.value(), 1u);
}

TEST_F(TcpScript, AFragNeededWithoutAnMtuTakesThePlateauBelow) {
  start();
  active_open(Offer().mss(1460));
  write(1460);
  expect(psh_ack().seq(1).ack(1).len(1460));
  // RFC 1191 5: an old router says 0; the plateau below our 1500-byte packets.
  deliver_icmp(icmp(3, 4, 1));
  EXPECT_EQ(sock.stats().pmtu, 1492);
  EXPECT_EQ(sock.stats().mss, 1452);
  expect(ack().seq(1).ack(1).len(1452));
  expect(psh_ack().seq(1453).ack(1).len(8));
  deliver_icmp(icmp(3, 4, 1));
  EXPECT_EQ(sock.stats().pmtu, 1006);
  EXPECT_EQ(sock.stats().mss, 966);
  expect(ack().seq(1).ack(1).len(966));
  expect(psh_ack().seq(967).ack(1).len(494));
  // RFC 1191 3: our segments carry don't-fragment, asked of IP by a typed
  // query (ctl::SetDontFragment) that micro-protocols between pass down ...
  auto& ips = static_cast<FakeIp::S&>(*ip.sessions.at(kPeer.value));
  EXPECT_TRUE(ips.dont_fragment);
  // Not below 576, however small the report: the MSS stays at 536 ...
  deliver_icmp(icmp(3, 4, 1, 300));
  EXPECT_EQ(sock.stats().pmtu, 576);
  EXPECT_EQ(sock.stats().mss, 536);
  expect(ack().seq(1).ack(1).len(536));
  expect(ack().seq(537).ack(1).len(536));
  expect(psh_ack().seq(1073).ack(1).len(388));
  expect_nothing();
  EXPECT_EQ(stats().pmtu_updates.value(), 3u);
  // ... and below it the segments go without DF, for routers to fragment.
  EXPECT_FALSE(ips.dont_fragment);
}

TEST_F(TcpScript, TheFallbackPlateauIsBelowThePacketsWeReallySend) {
  start();
  active_open(Offer().mss(1000));  // the peer's MSS: 1040-byte packets on a 1500 link
  write(1000);
  expect(psh_ack().seq(1).ack(1).len(1000));
  // A smaller MTU that our packets already fit lowers the estimate only.
  deliver_icmp(icmp(3, 4, 1, 1200));
  EXPECT_EQ(sock.stats().pmtu, 1200);
  EXPECT_EQ(sock.stats().mss, 1000);
  expect_nothing();
  // RFC 1191 5: without an MTU, the plateau below the 1040 bytes we send.
  deliver_icmp(icmp(3, 4, 1));
  EXPECT_EQ(sock.stats().pmtu, 1006);
  EXPECT_EQ(sock.stats().mss, 966);
  expect(ack().seq(1).ack(1).len(966));
  expect(psh_ack().seq(967).ack(1).len(34));
  expect_nothing();
  EXPECT_EQ(stats().pmtu_updates.value(), 2u);
}

TEST_F(TcpScript, PortUnreachableInSynSentAbortsTheConnect) {
  start();
  pport = 80;
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  expect(syn().win(65535).mss(1460).ws(our_wscale()).sackok().ts(now_ms(), 0));
  deliver_icmp(icmp(3, 3, 1));  // SND.NXT: not about our SYN
  EXPECT_EQ(sock.state(), State::syn_sent);
  // RFC 1122 4.2.3.9: a hard error; before the peer said anything it ends the attempt.
  deliver_icmp(icmp(3, 3, 0));
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_NE(sock.events() & ev_error, 0u);
  EXPECT_EQ(read_error(sock), Errc::refused);
  EXPECT_EQ(stats().icmp_hard_errors.value(), 1u);
  EXPECT_EQ(stats().icmp_out_of_window.value(), 1u);
  EXPECT_EQ(tcp->connection_count(), 0u);
  advance(10s);
  expect_nothing();  // no SYN again
  // Protocol unreachable likewise.
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  expect(syn().win(65535).mss(1460).ws(our_wscale()).sackok().ts(now_ms(), 0));
  deliver_icmp(icmp(3, 2, 0));
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(read_error(sock), Errc::refused);
  EXPECT_EQ(stats().icmp_hard_errors.value(), 2u);
  EXPECT_TRUE(ip.sessions.empty());
}

TEST_F(TcpScript, SoftErrorsDoNotAbortAndOnlyATimeoutReportsThem) {
  TcpConfig c;
  c.max_retries = 2;
  start(c);
  pport = 80;
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  expect(syn().win(65535).mss(1460).ws(our_wscale()).sackok().ts(now_ms(), 0));
  // RFC 1122 4.2.3.9: host unreachable is soft, even in SYN-SENT.
  deliver_icmp(icmp(3, 1, 0));
  EXPECT_EQ(sock.state(), State::syn_sent);
  EXPECT_EQ(sock.connection()->soft_error(), Errc::no_route);
  EXPECT_EQ(sock.events() & ev_error, 0u);
  // The handshake completes: the error is forgotten.
  irs = SeqNum(0x20000000);
  inject(syn_ack().seq(0).ack(1).mss(1460));
  expect(ack().seq(1).ack(1));
  EXPECT_EQ(sock.state(), State::established);
  EXPECT_EQ(sock.connection()->soft_error(), Errc::ok);
  write(100);
  expect(psh_ack().seq(1).ack(1).len(100));
  // RFC 5927 5.2: once synchronized, hard errors are soft too; the last one is kept.
  deliver_icmp(icmp(3, 3, 1));
  EXPECT_EQ(sock.connection()->soft_error(), Errc::refused);
  deliver_icmp(icmp(11, 0, 1));  // time exceeded
  EXPECT_EQ(sock.state(), State::established);
  EXPECT_EQ(sock.connection()->soft_error(), Errc::no_route);
  EXPECT_EQ(read_error(sock), Errc::would_block);
  EXPECT_EQ(stats().icmp_soft_errors.value(), 3u);
  EXPECT_EQ(stats().icmp_hard_errors.value(), 0u);
  expect_nothing();
  // The peer stays silent: the timeout reports what the routers said.
  advance(60s);
  ip.sent.clear();
  EXPECT_EQ(sock.state(), State::closed);
  EXPECT_EQ(read_error(sock), Errc::no_route);
  EXPECT_EQ(stats().timeouts.value(), 1u);
}

// ---- per-socket checksums ------------------------------------------------------------------

TEST_F(TcpScript, ASocketWithChecksumsOffTakesWhatAnotherConnectionDrops) {
  start();
  passive_open(Offer());  // the stack's mode: on
  TcpSocket verifying = std::move(sock);
  const SeqNum iss_on = iss;
  const SeqNum irs_on = irs;
  pport = 40001;
  passive_open(Offer(), 0x50000000);
  sock.set_checksum(ChecksumMode::off);
  EXPECT_EQ(sock.connection()->checksum_mode(), ChecksumMode::off);
  EXPECT_EQ(verifying.connection()->checksum_mode(), ChecksumMode::on);
  inject(ack().seq(1).ack(1).len(10).bad_csum());
  EXPECT_EQ(sock.connection()->rcv_queued(), 10u);
  advance(40ms);
  expect(ack().seq(1).ack(11).no_csum());  // and it sends none
  EXPECT_EQ(stats().rx_csum_unchecked.value(), 1u);
  EXPECT_EQ(stats().drop_bad_csum.value(), 0u);
  // The same segment to the connection that verifies is dropped.
  pport = 40000;
  iss = iss_on;
  irs = irs_on;
  EXPECT_EQ(try_inject(ack().seq(1).ack(1).len(10).bad_csum()).error(), Errc::malformed);
  EXPECT_EQ(stats().drop_bad_csum.value(), 1u);
  EXPECT_EQ(verifying.connection()->rcv_queued(), 0u);
  advance(40ms);
  expect_nothing();
  // A segment for nobody follows the stack's mode: dropped, no RST.
  EXPECT_EQ(try_inject(ack().seq(1).ack(1).to(9).bad_csum()).error(), Errc::malformed);
  EXPECT_EQ(stats().drop_bad_csum.value(), 2u);
  expect_nothing();
  inject(ack().seq(1).ack(1).len(10));
  EXPECT_EQ(verifying.connection()->rcv_queued(), 10u);
}

TEST_F(TcpScript, PerSocketChecksumModesOnTheSendAndReceivePaths) {
  start();
  passive_open(Offer());
  sock.set_checksum(ChecksumMode::off);
  write(100);
  expect(psh_ack().seq(1).ack(1).len(100).no_csum());
  inject(ack().seq(1).ack(101).no_csum());  // a peer computing none
  EXPECT_EQ(sock.stats().bytes_acked, 100u);
  // tx_only: computed, not verified.
  sock.set_checksum(ChecksumMode::tx_only);
  inject(ack().seq(1).ack(101).len(5).bad_csum());
  advance(40ms);
  expect(ack().seq(101).ack(6));
  expect_read(5);
  // rx_only: verified, not computed.
  sock.set_checksum(ChecksumMode::rx_only);
  EXPECT_EQ(try_inject(ack().seq(6).ack(101).len(5).bad_csum()).error(), Errc::malformed);
  write(10);
  expect(psh_ack().seq(101).ack(6).len(10).no_csum());
  // On a connection, the control queries are the connection's, not the stack's.
  ASSERT_TRUE(sock.connection()->control(ctl::SetChecksum{ChecksumMode::on}).ok());
  EXPECT_EQ(*sock.connection()->control(ctl::GetChecksum{}), ChecksumMode::on);
  EXPECT_EQ(tcp->checksum_mode(), ChecksumMode::on);
  inject(ack().seq(6).ack(111));
  write(10);
  expect(psh_ack().seq(111).ack(6).len(10));
  expect_nothing();
}

TEST_F(TcpScript, AListenersChecksumModeGoesToWhatItAccepts) {
  start();
  listen();
  listener.set_checksum(ChecksumMode::off);
  irs = SeqNum(0x10000000);
  inject(syn().seq(0).mss(1000).no_csum());
  expect(syn_ack().ack(1).mss(1460).no_csum());
  inject(ack().seq(1).ack(1).no_csum());
  Result<TcpSocket> a = listener.accept();
  ASSERT_TRUE(a.ok());
  sock = std::move(*a);
  EXPECT_EQ(sock.connection()->checksum_mode(), ChecksumMode::off);
  write(10);
  expect(psh_ack().seq(1).ack(1).len(10).no_csum());
  TcpSocket accepted = std::move(sock);
  // The stack-wide switch governs the connections that never chose.
  ASSERT_TRUE(tcp->control(ctl::SetChecksum{ChecksumMode::off}).ok());
  pport = 80;
  sock = tcp->socket();
  ASSERT_TRUE(sock.connect(kPeer, Port{80}).ok());
  expect(syn().win(65535).mss(1460).ws(our_wscale()).sackok().ts(now_ms(), 0).no_csum());
  EXPECT_EQ(stats().drop_bad_csum.value(), 0u);
}

}  // namespace
}  // namespace xk::tcp::script

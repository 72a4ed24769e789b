// filterd's control socket over TCP (xk/filterd/control_server.hpp): only
// AUTH then a HELLO with the proof of the token registers (the token itself,
// a wrong or replayed proof, anything else is refused and closed); a
// hostile peer (garbage, a flood of connections, silence) disturbs no
// other node; a connection that closes, falls silent past its heartbeats,
// or whose channel went down (drop_node) takes its node with it. The server
// runs on this thread's loop; the peers are plain sockets.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "xk/clock.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/control_server.hpp"
#include "xk/filterd/registry.hpp"
#include "xk/filterd/token.hpp"

namespace xk::filterd {
namespace {

using namespace std::chrono_literals;
using ctl::ErrorCode;
using ctl::Message;

const std::vector<std::byte> kToken(32, std::byte{0x42});
const MacAddr kPortMac{{0x02, 0x78, 0x6b, 0, 0, 0x99}};

class ControlServerTcpTest : public ::testing::Test {
 protected:
  void start(ControlServer::Config extra = {}) {
    FilterConfig f;
    f.shared_ip = Ipv4Addr{0xC000020A};
    filter.emplace(f, clock);
    RegistryConfig c;
    c.shared = Ipv4Cidr{Ipv4Addr{0xC000020A}, 24};
    c.node_port_mac = kPortMac;
    registry.emplace(c, *filter,
                     NodeRegistry::Hooks{[](const NodeInfo&) { return Status(); },
                                         [this](NodeId n) { gone.push_back(n); }, {}, {}});
    ControlServer::Config cc = extra;
    cc.path.clear();  // TCP only
    cc.tcp = "127.0.0.1:0";
    cc.token = kToken;
    server.emplace(loop, *registry, cc);
  }
  void TearDown() override {
    for (int fd : fds) ::close(fd);
    server.reset();
  }

  int dial() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(server->tcp_port());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    fds.push_back(fd);
    for (int i = 0; i < 10; ++i) loop.run_once();  // accepted
    return fd;
  }
  void send_bytes(int fd, std::span<const std::byte> b) {
    ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
  }
  // Sends `m` and runs the server until its reply is read (nullopt: the
  // connection closed, or nothing came in 5 s).
  std::optional<Message> ask(int fd, const Message& m) {
    Result<std::vector<std::byte>> b = ctl::encode(m);
    EXPECT_TRUE(b.ok());
    send_bytes(fd, *b);
    return reply(fd);
  }
  std::optional<Message> reply(int fd) {
    ctl::FrameReader& r = readers[fd];
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < end) {
      ctl::ReadResult res = r.next();
      if (res.has_message()) return res.message();
      loop.run_once();
      std::byte buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return std::nullopt;
      if (n > 0) r.feed(std::span<const std::byte>(buf, static_cast<std::size_t>(n)));
    }
    return std::nullopt;
  }
  // Runs the server until the peer sees its connection closed.
  bool closed_by_server(int fd, std::chrono::milliseconds limit = 5000ms) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      loop.run_once();
      std::byte buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
    return false;
  }
  static ctl::Hello remote_hello(std::vector<std::byte> token, std::uint8_t mac_last = 1) {
    ctl::Hello h{"far", 4242, 1};
    h.token = std::move(token);
    h.ethernet = MacAddr{{0x02, 0, 0, 0, 0x0c, mac_last}};
    return h;
  }
  // AUTH with a fresh nonce, filterd's proof checked, then HELLO with the
  // node's proof made with `token`: filterd's answer to the HELLO (or to
  // the AUTH, if that was refused).
  std::optional<Message> join(int fd, std::uint8_t mac_last = 1, const std::vector<std::byte>& token = kToken) {
    const ctl::Nonce ours = ctl::fresh_nonce();
    std::optional<Message> a = ask(fd, Message{1, ctl::Auth{ours}});
    if (!a) return a;
    const auto* ar = std::get_if<ctl::AuthReply>(&a->body);
    if (ar == nullptr) return a;
    EXPECT_TRUE(ctl::proofs_equal(ar->proof, ctl::server_proof(kToken, ours, ar->nonce))) << "filterd's own proof";
    ctl::Hello h = remote_hello({}, mac_last);
    h.proof = ctl::node_proof(token, ours, ar->nonce);
    last_proof = *h.proof;
    return ask(fd, Message{2, h});
  }
  static ErrorCode code(const std::optional<Message>& m) {
    if (!m) return ErrorCode{};
    const auto* e = std::get_if<ctl::Error>(&m->body);
    return e == nullptr ? ErrorCode{} : e->code;
  }
  std::uint64_t counter(const char* name) { return server->counters().value(name); }

  ManualClock clock;
  EventLoop loop;
  std::optional<FilterEngine> filter;
  std::optional<NodeRegistry> registry;
  std::optional<ControlServer> server;
  std::vector<NodeId> gone;
  ctl::Proof last_proof{};  // the node proof join() sent last
  std::vector<int> fds;
  std::map<int, ctl::FrameReader> readers;
};

TEST_F(ControlServerTcpTest, AHelloWithTheProofRegistersWithoutAPidCheck) {
  start();
  ASSERT_NE(server->tcp_port(), 0);
  int fd = dial();
  std::optional<Message> r = join(fd);
  ASSERT_TRUE(r.has_value());
  const auto* h = std::get_if<ctl::HelloReply>(&r->body);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->filterd_mac, kPortMac);
  EXPECT_EQ(registry->node_count(), 1u);
  // Then it is a node like any other.
  std::optional<Message> l = ask(fd, Message{2, ctl::Listen{ctl::Proto::tcp, 5001, false, 0}});
  ASSERT_TRUE(l.has_value());
  EXPECT_TRUE(std::holds_alternative<ctl::ListenReply>(l->body));
  EXPECT_EQ(counter("tcp_accepted"), 1u);
  EXPECT_EQ(counter("refused_token"), 0u);
}

// The sockets cost a system call to look at: the server looks every pass
// while requests come, every kLookEvery-th pass once they have been quiet
// for a while, and at once after the loop slept.
TEST_F(ControlServerTcpTest, AQuietServerLooksLessOftenAndABusyOneEveryPass) {
  start();
  int fd = dial();
  ASSERT_TRUE(join(fd).has_value());
  std::uint32_t id = 2;
  // Passes from sending a PING to its reply being there (loopback TCP: the
  // reply is readable as soon as the pass that answers it is over).
  auto passes_to_answer = [&] {
    Result<std::vector<std::byte>> b = ctl::encode(Message{id++, ctl::Ping{}});
    send_bytes(fd, *b);
    for (int pass = 1; pass <= 100; ++pass) {
      loop.run_once();
      std::byte buf[256];
      if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) return pass;
    }
    return 0;
  };
  auto quiet = [&] {
    for (std::uint32_t i = 0; i <= ControlServer::kQuietLooks; ++i) loop.run_once();
  };
  EXPECT_EQ(passes_to_answer(), 1);
  quiet();
  const int late = passes_to_answer();
  EXPECT_GT(late, 1) << "quiet: not looked at every pass";
  EXPECT_LE(late, static_cast<int>(ControlServer::kLookEvery));
  EXPECT_EQ(passes_to_answer(), 1) << "a request came: every pass again";
  quiet();
  server->after_sleep();
  EXPECT_EQ(passes_to_answer(), 1) << "after a sleep: at once";
}

TEST_F(ControlServerTcpTest, NoProofAWrongOneTheTokenInClearOrAnythingButAuthIsRefusedAndClosed) {
  start();
  int a = dial(), b = dial(), c = dial(), d = dial(), e = dial(), f = dial();
  // The token itself, even the right one: it must never cross the network.
  EXPECT_EQ(code(ask(a, Message{1, remote_hello(kToken)})), ErrorCode::permission_denied);
  // HELLO without AUTH first, and HELLO without a proof after it.
  EXPECT_EQ(code(ask(b, Message{1, remote_hello({})})), ErrorCode::permission_denied);
  ASSERT_TRUE(std::holds_alternative<ctl::AuthReply>(ask(c, Message{1, ctl::Auth{ctl::fresh_nonce()}})->body));
  EXPECT_EQ(code(ask(c, Message{2, remote_hello({})})), ErrorCode::permission_denied);
  // A proof made with another token (one byte off).
  std::vector<std::byte> near = kToken;
  near.back() ^= std::byte{1};
  EXPECT_EQ(code(join(d, 1, near)), ErrorCode::permission_denied);
  // Admin requests are for the Unix socket only; a second AUTH is refused.
  EXPECT_EQ(code(ask(e, Message{1, ctl::Nodes{}})), ErrorCode::permission_denied);
  ASSERT_TRUE(std::holds_alternative<ctl::AuthReply>(ask(f, Message{1, ctl::Auth{ctl::fresh_nonce()}})->body));
  EXPECT_EQ(code(ask(f, Message{2, ctl::Auth{ctl::fresh_nonce()}})), ErrorCode::permission_denied);
  for (int fd : {a, b, c, d, e, f}) EXPECT_TRUE(closed_by_server(fd));
  EXPECT_EQ(counter("refused_token"), 6u);
  EXPECT_EQ(counter("refused_replay"), 0u);
  EXPECT_EQ(registry->node_count(), 0u);
  EXPECT_EQ(server->connections(), 0u);
}

// Someone who recorded a node's AUTH and HELLO cannot play them again: the
// new connection gets a new filterd nonce, so the old proof does not fit.
TEST_F(ControlServerTcpTest, AReplayedProofIsRefusedAndCounted) {
  start();
  int node = dial();
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(join(node)->body));
  const ctl::Proof recorded = last_proof;
  int thief = dial();
  std::optional<Message> a = ask(thief, Message{1, ctl::Auth{ctl::fresh_nonce()}});
  ASSERT_TRUE(a.has_value());
  ctl::Hello h = remote_hello({}, 2);
  h.proof = recorded;
  EXPECT_EQ(code(ask(thief, Message{2, h})), ErrorCode::permission_denied);
  EXPECT_TRUE(closed_by_server(thief));
  EXPECT_EQ(counter("refused_replay"), 1u);
  EXPECT_EQ(counter("refused_token"), 0u);
  EXPECT_EQ(registry->node_count(), 1u);
}

TEST_F(ControlServerTcpTest, AHostilePeerDoesNotDisturbAnotherNode) {
  ControlServer::Config cc;
  cc.max_per_peer = 6;
  start(cc);
  int good = dial();
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(join(good)->body));
  // Garbage: random bytes, then a frame that claims a 1 GiB body.
  int junk = dial();
  std::mt19937_64 rng(5);
  std::vector<std::byte> noise(100000);
  for (auto& x : noise) x = std::byte(static_cast<unsigned char>(rng()));
  send_bytes(junk, noise);
  EXPECT_TRUE(closed_by_server(junk));
  int big = dial();
  std::vector<std::byte> hdr(ctl::kHeaderSize);
  ctl::FrameHeader fh;
  fh.type = 0x01;
  fh.body_length = 1u << 30;
  fh.write(std::span<std::byte, ctl::kHeaderSize>(hdr.data(), ctl::kHeaderSize));
  send_bytes(big, hdr);
  EXPECT_TRUE(closed_by_server(big));
  // A flood of connections from one address: past the limit they are
  // refused at once (the good node's counts: 6 in all).
  std::vector<int> flood;
  for (int i = 0; i < 10; ++i) flood.push_back(dial());
  EXPECT_GE(counter("refused_peer_limit"), 5u);
  EXPECT_LE(server->connections(), 6u);
  // The good node is answered all along.
  std::optional<Message> l = ask(good, Message{2, ctl::Listen{ctl::Proto::tcp, 5001, false, 0}});
  ASSERT_TRUE(l.has_value());
  EXPECT_TRUE(std::holds_alternative<ctl::ListenReply>(l->body));
  EXPECT_EQ(registry->node_count(), 1u);
  EXPECT_TRUE(gone.empty());
}

TEST_F(ControlServerTcpTest, ANodeWhoseConnectionClosesIsGoneWithItsPorts) {
  start();
  int fd = dial();
  ASSERT_TRUE(join(fd).has_value());
  ASSERT_TRUE(std::holds_alternative<ctl::ListenReply>(
      ask(fd, Message{2, ctl::Listen{ctl::Proto::tcp, 5001, false, 0}})->body));
  ::close(fd);
  fds.clear();
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (gone.empty() && std::chrono::steady_clock::now() < end) loop.run_once();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(registry->node_count(), 0u);
  EXPECT_FALSE(filter->listener(Proto::tcp, 5001).has_value());
  // Its MAC and port are free for the next.
  int again = dial();
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(join(again)->body));
  EXPECT_TRUE(std::holds_alternative<ctl::ListenReply>(
      ask(again, Message{2, ctl::Listen{ctl::Proto::tcp, 5001, false, 0}})->body));
}

TEST_F(ControlServerTcpTest, SilenceAndADownChannelEndTheNode) {
  ControlServer::Config cc;
  cc.heartbeat = 50ms;
  cc.auth_timeout = 100ms;
  start(cc);
  // Says nothing at all: closed once the time for HELLO is over.
  int mute = dial();
  EXPECT_TRUE(closed_by_server(mute, 3000ms));
  EXPECT_EQ(counter("auth_timeouts"), 1u);
  // Registered but not pinging yet (its stack is starting): not held to it.
  int quiet = dial();
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(join(quiet)->body));
  EXPECT_FALSE(closed_by_server(quiet, 400ms));
  // It pinged once, then fell silent past three heartbeats: its host is gone.
  ASSERT_TRUE(ask(quiet, Message{2, ctl::Ping{}}).has_value());
  EXPECT_TRUE(closed_by_server(quiet, 3000ms));
  EXPECT_EQ(counter("heartbeat_lost"), 1u);
  ASSERT_EQ(gone.size(), 1u);
  // One that pings stays; drop_node (its channel's link went down) ends it.
  int alive = dial();
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(join(alive, 2)->body));
  NodeId id = 0;
  for (int i = 0; i < 8; ++i) {
    std::this_thread::sleep_for(25ms);
    ASSERT_TRUE(ask(alive, Message{static_cast<std::uint32_t>(10 + i), ctl::Ping{}}).has_value());
  }
  EXPECT_EQ(registry->node_count(), 1u);
  EXPECT_EQ(counter("heartbeat_lost"), 1u);
  for (NodeId n = 1; n < 10; ++n) {
    if (registry->node(n) != nullptr) id = n;
  }
  ASSERT_NE(id, 0);
  server->drop_node(id);
  EXPECT_TRUE(closed_by_server(alive));
  EXPECT_EQ(registry->node_count(), 0u);
  EXPECT_EQ(counter("dropped_nodes"), 1u);
}

TEST(ControlServerConfig, TcpWithoutATokenOrABadAddressIsRefused) {
  ManualClock clock;
  EventLoop loop;
  FilterConfig f;
  FilterEngine filter(f, clock);
  NodeRegistry registry(RegistryConfig{}, filter, NodeRegistry::Hooks{});
  ControlServer::Config c;
  c.tcp = "127.0.0.1:0";
  EXPECT_THROW(ControlServer(loop, registry, c), std::runtime_error);
  c.token = kToken;
  for (const char* bad : {"127.0.0.1", "localhost:80", "127.0.0.1:99999", "127.0.0.1:x"}) {
    c.tcp = bad;
    EXPECT_THROW(ControlServer(loop, registry, c), std::runtime_error) << bad;
  }
  EXPECT_THROW(ControlServer(loop, registry, ControlServer::Config{}), std::runtime_error);
}

// The token file: its owner's only, 16..256 bytes, a trailing newline dropped.
TEST(TokenFile, OnlyAPrivateFileOfTheRightSizeIsRead) {
  const std::string path = "/tmp/xk-token-test-" + std::to_string(::getpid());
  auto write = [&](const std::string& text, mode_t mode) {
    ::unlink(path.c_str());
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    ::chmod(path.c_str(), mode);
  };
  const std::string good(40, 'k');
  write(good + "\n", 0600);
  std::vector<std::byte> t = read_token_file(path);
  EXPECT_EQ(t.size(), 40u);
  EXPECT_EQ(t.front(), std::byte{'k'});
  write(good, 0640);  // the group may read it: refused
  EXPECT_THROW(read_token_file(path), std::runtime_error);
  write(good, 0604);
  EXPECT_THROW(read_token_file(path), std::runtime_error);
  write("too short\n", 0600);
  EXPECT_THROW(read_token_file(path), std::runtime_error);
  write(std::string(257, 'x'), 0600);
  EXPECT_THROW(read_token_file(path), std::runtime_error);
  ::unlink(path.c_str());
  EXPECT_THROW(read_token_file(path), std::runtime_error);  // missing
}

}  // namespace
}  // namespace xk::filterd

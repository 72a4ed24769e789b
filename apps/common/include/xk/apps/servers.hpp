#pragma once
// Pieces several apps share beyond the stack: the TCP and UDP echo servers
// (xk-echo, xk-pingpong's server, xk-udp-echo's server), a clean TCP
// teardown, and a connection's statistics as one line for scripts.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "xk/event_loop.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace xk::apps {

// Echoes every byte of every connection the listener accepts (any number, at
// once), passing the received Msgs back down as they are (no copy) -- or,
// with `copy`, as a program calling read() and write() does: into a buffer
// of its own and out of it again. The loop stops after `stop_after`
// connections have ended (0: never).
class TcpEchoServer final : public Pollable {
 public:
  TcpEchoServer(const char* prog, tcp::TcpListener& listener, EventLoop& loop, std::uint64_t stop_after,
                bool copy = false);
  ~TcpEchoServer() override;
  TcpEchoServer(const TcpEchoServer&) = delete;
  TcpEchoServer& operator=(const TcpEchoServer&) = delete;

  std::size_t poll(std::size_t budget) override;
  bool before_sleep() noexcept override;

  // Readable from another thread (a node of several stacks sums them).
  std::uint64_t connections() const noexcept { return finished_.load(std::memory_order_relaxed); }
  std::uint64_t bytes() const noexcept { return bytes_; }
  std::uint64_t failures() const noexcept { return failures_; }

 private:
  struct Conn {
    explicit Conn(tcp::TcpSocket s) : sock(std::move(s)) {}
    tcp::TcpSocket sock;
    std::deque<Msg> pending;  // read, not yet taken by the send buffer
    std::vector<std::byte> buf;     // copy: what was read ...
    std::size_t off = 0, left = 0;  // ... and the part not yet written
    bool done = false;
  };
  std::size_t serve(Conn& c);
  std::size_t serve_copy(Conn& c);
  // A failed connection: said, counted, closed; the work it was (1).
  std::size_t fail(Conn& c, Errc e);
  void finish(Conn& c);

  const char* prog_;
  tcp::TcpListener& listener_;
  EventLoop& loop_;
  std::uint64_t stop_after_;
  bool copy_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::atomic<std::uint64_t> finished_{0};
  std::uint64_t bytes_ = 0;
  std::uint64_t failures_ = 0;
};

// Echoes every datagram to its sender, sending back the very Msg received
// (its mbufs go straight back down). The loop stops after `stop_after`
// datagrams (0: never). `quiet`: no message per failed echo.
class UdpEchoServer final : public Pollable {
 public:
  UdpEchoServer(const char* prog, udp::UdpSocket& sock, EventLoop& loop, std::uint64_t stop_after, bool quiet);

  std::size_t poll(std::size_t budget) override;
  bool before_sleep() noexcept override { return !sock_.readable(); }

  std::uint64_t received() const noexcept { return received_; }
  std::uint64_t echoed() const noexcept { return echoed_; }
  std::uint64_t bytes() const noexcept { return bytes_; }
  std::uint64_t send_errors() const noexcept { return send_errors_; }

 private:
  const char* prog_;
  udp::UdpSocket& sock_;
  EventLoop& loop_;
  std::uint64_t stop_after_;
  bool quiet_;
  std::uint64_t received_ = 0;
  std::uint64_t echoed_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t send_errors_ = 0;
  std::uint64_t errors_ = 0;
};

// Runs the loop until every closed connection has finished its FIN handshake
// (TIME-WAIT is not waited for), at most `limit`: the peer sees a clean close
// before the stack goes away.
void finish_handshakes(EventLoop& loop, tcp::TcpProtocol& tcp,
                       std::chrono::milliseconds limit = std::chrono::seconds(2));

// "STATS who=... srtt_us=... cwnd=... retransmits=..." on stdout.
void print_conn_stats(const char* who, const tcp::TcpSocket& s);

}  // namespace xk::apps

#pragma once
// Two xk stacks in one process over the pair driver, each with a fault layer
// under its TCP, on one manual clock that jumps to the next timer whenever
// neither stack has work: benchmarks whose figures are protocol time (round
// trips, probes, timeouts), deterministic for a seed and independent of the
// machine's speed (xk-rr-loss, xk-long-fat).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "xk/clock.hpp"
#include "xk/drivers/pair.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/arp.hpp"
#include "xk/protocols/eth.hpp"
#include "xk/protocols/fault.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/tcp.hpp"

namespace xk::bench {

class TwoStacks {
 public:
  // Stack A is 192.0.2.10, stack B 192.0.2.20; `fault_a`/`fault_b` are
  // their fault layers' options, `tcp_opts` both TCPs'.
  TwoStacks(const std::string& fault_a, const std::string& fault_b, const std::string& tcp_opts) {
    drivers::register_pair(registry_, hub_);
    eth::register_eth(registry_);
    arp::register_arp(registry_);
    ipv4::register_ipv4(registry_);
    fault::register_fault(registry_);
    tcp::register_tcp(registry_);
    auto spec = [&](const char* mac, const char* addr, const std::string& fault) {
      return std::string("pair net0 link=wire queue=1048576 mac=") + mac + "\neth eth0 below=net0\narp arp0 below=eth0\n" +
             "ipv4 ip0 below=eth0,arp0 addr=" + addr + "\nfault f0 below=ip0 " + fault + "\ntcp tcp0 below=f0 " +
             tcp_opts + "\n";
    };
    a_ = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:0a", "192.0.2.10/24", fault_a), registry_, &loop_a_, "a"));
    b_ = std::make_unique<Graph>(Graph::build(spec("02:00:00:00:00:14", "192.0.2.20/24", fault_b), registry_, &loop_b_, "b"));
  }

  Graph& a() noexcept { return *a_; }
  Graph& b() noexcept { return *b_; }
  tcp::TcpProtocol& tcp_a() { return *a_->find_as<tcp::TcpProtocol>("tcp0"); }
  tcp::TcpProtocol& tcp_b() { return *b_->find_as<tcp::TcpProtocol>("tcp0"); }
  Time now() const noexcept { return clock_.now(); }

  // A connection from A to a listener of B's on port 5001; `fail` on
  // failure.
  void connect(tcp::TcpSocket& client, tcp::TcpSocket& server, const char* who) {
    Result<tcp::TcpListener> l = tcp_b().listen(Ipv4Addr{}, Port{5001}, 8);
    if (!l) fail(who, "listen");
    client = tcp_a().socket();
    if (!client.connect(Ipv4Addr{0xC0000214}, Port{5001}).ok()) fail(who, "connect");
    run_until(now() + std::chrono::seconds(10), [&] {
      if (!server.is_open()) {
        if (auto r = l->accept()) server = std::move(*r);
      }
      return server.is_open() && client.state() == tcp::State::established;
    });
    if (!server.is_open()) fail(who, "handshake");
  }

  // Runs both loops until `done()` or `end`, moving the clock to the next
  // timer whenever neither has work; true if `done()` said so.
  template <class F>
  bool run_until(Time end, F&& done) {
    while (clock_.now() < end) {
      if (done()) return true;
      if (loop_a_.run_once() + loop_b_.run_once() != 0) continue;
      if (done()) return true;
      std::optional<Time> next = loop_a_.timers().next_deadline();
      std::optional<Time> nb = loop_b_.timers().next_deadline();
      if (nb && (!next || *nb < *next)) next = nb;
      if (!next || *next > end) {
        clock_.set(end);
        return done();
      }
      if (*next > clock_.now()) clock_.set(*next);
    }
    return done();
  }

  [[noreturn]] static void fail(const char* who, const char* what) {
    std::fprintf(stderr, "%s: %s\n", who, what);
    std::exit(1);
  }

 private:
  ManualClock clock_{Time(std::chrono::seconds(1000))};
  EventLoop loop_a_{clock_};
  EventLoop loop_b_{clock_};
  drivers::PairHub hub_;
  Registry registry_;
  std::unique_ptr<Graph> a_;
  std::unique_ptr<Graph> b_;
};

}  // namespace xk::bench

#pragma once
// The control socket: a Unix domain stream socket that nodes connect to
// (docs/control-protocol.md). Non-blocking, polled by filterd's event loop
// through one epoll descriptor of its own; every connection has a
// FrameReader, so a request may arrive in any number of pieces and several
// in one read. Who may connect: the socket file's permissions (0660 by
// default) and SO_PEERCRED (root, or the daemon's own user); the peer's pid
// is handed to the registry, which checks it against the HELLO.
//
// A malformed request gets an ERROR reply and the connection goes on; a
// broken stream (bad magic, version, an oversized frame) is closed. Either
// way no other node notices. A connection that closes takes its node with it
// (NodeRegistry::node_gone).

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "xk/counters.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/control.hpp"
#include "xk/filterd/registry.hpp"

namespace xk::filterd {

class ControlServer final : public Pollable {
 public:
  struct Config {
    std::string path;                 // the socket file (replaced if stale)
    mode_t mode = 0660;
    std::size_t max_connections = 4096;
    std::size_t max_pending_output = 1 << 20;  // a peer that does not read is dropped
  };

  // Binds and listens; throws std::runtime_error saying why it cannot.
  ControlServer(EventLoop& loop, NodeRegistry& registry, Config config);
  ~ControlServer() override;
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  std::size_t poll(std::size_t budget) override;
  int wait_fd() const noexcept override { return epoll_fd_; }

  std::size_t connections() const noexcept { return conns_.size(); }
  const CounterSet& counters() const noexcept { return counters_; }

 private:
  struct Conn {
    int fd = -1;
    NodeId node = 0;
    pid_t pid = 0;
    ctl::FrameReader reader;
    std::vector<std::byte> out;
    bool closing = false;  // flush `out`, then close
  };
  void accept_all();
  void on_readable(Conn& c);
  void flush(Conn& c);
  void close_conn(int fd);
  void want_output(Conn& c, bool on);

  EventLoop& loop_;
  NodeRegistry& registry_;
  Config config_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  std::map<int, std::unique_ptr<Conn>> conns_;
  CounterSet counters_{"control"};
  Counter& accepted_;
  Counter& refused_creds_;
  Counter& messages_;
  Counter& bad_messages_;
  Counter& dropped_streams_;
  Counter& closed_;
};

}  // namespace xk::filterd

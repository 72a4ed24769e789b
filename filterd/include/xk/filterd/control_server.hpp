#pragma once
// The control socket: a Unix domain stream socket that nodes connect to
// (docs/control-protocol.md), and optionally a TCP socket for nodes on other
// hosts. Non-blocking, polled by filterd's event loop through one epoll
// descriptor of its own; every connection has a FrameReader, so a request
// may arrive in any number of pieces and several in one read.
//
// Who may connect. Unix: the socket file's permissions (0660 by default)
// and SO_PEERCRED (root, or the daemon's own user); the peer's pid is handed
// to the registry, which checks it against the HELLO. TCP has no peer
// credentials: the first request must be a HELLO carrying the configured
// token (compared in constant time), or the connection gets ERROR
// permission_denied and is closed; admin connections (no HELLO) are Unix
// only. A peer address may hold only so many TCP connections, and one that
// has not said a good HELLO within auth_timeout is closed.
//
// A malformed request gets an ERROR reply and the connection goes on; a
// broken stream (bad magic, version, an oversized frame) is closed. Either
// way no other node notices: a connection is read at most kReadChunks
// chunks a pass and its reader holds at most one partial frame. A connection
// that closes takes its node with it (NodeRegistry::node_gone); a TCP one
// also goes when TCP keepalive finds its host gone, or when, once it has
// pinged, it stays silent for three heartbeats (Config::heartbeat).

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "xk/counters.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/control.hpp"
#include "xk/filterd/registry.hpp"
#include "xk/timer.hpp"

namespace xk::filterd {

class ControlServer final : public Pollable {
 public:
  struct Config {
    std::string path;                 // the socket file (replaced if stale); empty: TCP only
    mode_t mode = 0660;
    std::size_t max_connections = 4096;
    std::size_t max_pending_output = 1 << 20;  // a peer that does not read is dropped
    // TCP for nodes on other hosts: "A.B.C.D:PORT" (port 0: any; see
    // tcp_port()). Empty: none. Needs a token.
    std::string tcp;
    std::vector<std::byte> token;     // what a TCP node's HELLO must carry
    std::size_t max_per_peer = 16;    // TCP connections from one address
    std::chrono::milliseconds auth_timeout{5000};  // TCP: until a good HELLO
    // TCP: a connection that has sent PING and then is silent for 3
    // heartbeats is dead (0: no such check; the nodes learn the interval
    // from HELLO_REPLY). Not before its first PING: a node's stack may take
    // seconds to start after its HELLO (keepalive covers that time).
    std::chrono::milliseconds heartbeat{0};
    // TCP keepalive: the kernel probes an idle connection after `idle`, every
    // `interval`, and gives up after `probes` unanswered (and unacknowledged
    // data times out as soon: TCP_USER_TIMEOUT), so a vanished host is
    // noticed within idle + interval * probes.
    std::chrono::seconds keepalive_idle{2};
    std::chrono::seconds keepalive_interval{1};
    int keepalive_probes = 3;
  };

  // Binds and listens; throws std::runtime_error saying why it cannot.
  ControlServer(EventLoop& loop, NodeRegistry& registry, Config config);
  ~ControlServer() override;
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Looks at the sockets (one epoll_wait) every pass while requests come,
  // and only every kLookEvery-th pass once kQuietLooks looks in a row found
  // nothing: a filterd forwarding a bulk transfer passes its loop once per
  // burst, and the system call was a good part of each pass. Looking every
  // 16th pass always halved the rate of a node that opens each connection
  // with a CONNECT round trip (tried and measured); a stream of requests keeps
  // every-pass looking on. After a sleep it looks at once.
  static constexpr std::uint32_t kLookEvery = 16;
  static constexpr std::uint32_t kQuietLooks = 256;
  std::size_t poll(std::size_t budget) override;
  int wait_fd() const noexcept override { return epoll_fd_; }
  void after_sleep() noexcept override { skipped_ = kLookEvery; }

  std::size_t connections() const noexcept { return conns_.size(); }
  const CounterSet& counters() const noexcept { return counters_; }
  // The TCP socket's port (0: no TCP socket).
  std::uint16_t tcp_port() const noexcept { return tcp_port_; }
  // Close the control connection of `node` (its channel went down): the
  // node goes as if it had died, and notices.
  void drop_node(NodeId node);

 private:
  struct Conn {
    int fd = -1;
    NodeId node = 0;
    pid_t pid = 0;
    bool tcp = false;
    bool authed = false;     // Unix: always; TCP: after a HELLO with the right proof
    // TCP: the nonces of this connection's AUTH exchange (docs/control-protocol.md).
    struct Nonces {
      ctl::Nonce node;
      ctl::Nonce ours;
    };
    std::optional<Nonces> nonces;
    bool pinged = false;     // has sent PING: held to the heartbeat from now on
    std::uint32_t peer = 0;  // TCP: the peer's IPv4 address
    Time opened{};
    Time last_rx{};
    ctl::FrameReader reader;
    std::vector<std::byte> out;
    bool closing = false;  // flush `out`, then close
    bool polling_out = false;  // EPOLLOUT is asked for (`out` did not all go)
  };
  void open_tcp();
  void accept_all();
  void accept_tcp();
  void add_conn(int fd, pid_t pid, bool tcp, std::uint32_t peer);
  void on_readable(Conn& c);
  // Answers every whole request the reader holds (a refused TCP peer: the
  // ERROR, then closing).
  void process(Conn& c);
  // A TCP peer's request before registration: AUTH is answered here, then
  // only a HELLO with the right proof is let through; anything else is
  // refused, saying why.
  struct Verdict {
    const char* refused = nullptr;  // why, or null
    bool replay = false;            // refused: a proof some earlier connection used
    bool answered = false;          // an AUTH, answered here
  };
  Verdict authenticate(Conn& c, const ctl::Message& m);
  // Node proofs accepted lately, to tell a replayed one from a forged one.
  bool seen_proof(const ctl::Proof& p) const noexcept;
  void remember_proof(const ctl::Proof& p);
  void housekeeping();
  void flush(Conn& c);
  void close_conn(int fd);
  void want_output(Conn& c, bool on);

  std::uint32_t quiet_looks_ = 0;  // looks in a row that found nothing
  std::uint32_t skipped_ = 0;      // passes not looked at since the last look
  EventLoop& loop_;
  NodeRegistry& registry_;
  Config config_;
  int listen_fd_ = -1;
  int tcp_fd_ = -1;
  std::uint16_t tcp_port_ = 0;
  int epoll_fd_ = -1;
  std::map<int, std::unique_ptr<Conn>> conns_;
  std::map<std::uint32_t, std::size_t> per_peer_;  // TCP connections by address
  std::deque<ctl::Proof> accepted_proofs_;          // the last kRememberedProofs
  std::optional<Timer> housekeeping_;
  CounterSet counters_{"control"};
  Counter& accepted_;
  Counter& refused_creds_;
  Counter& messages_;
  Counter& bad_messages_;
  Counter& dropped_streams_;
  Counter& closed_;
  Counter& tcp_accepted_;
  Counter& refused_peer_limit_;
  Counter& refused_token_;
  Counter& refused_replay_;
  Counter& auth_timeouts_;
  Counter& heartbeat_lost_;
  Counter& dropped_nodes_;
};

}  // namespace xk::filterd

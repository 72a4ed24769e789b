#pragma once
// A node's side of filterd (docs/filterd.md): the control connection, and
// the PortAuthority that TCP and UDP ask for every port. libxk makes one when
// a stack is configured with a filterd socket (XK_FILTERD=/run/xk/filterd.sock
// or StackConfig::filterd): the node's graph then comes from filterd's HELLO
// reply -- a memif channel, the shared address, the ISN secret -- and the
// application's code is the same as standalone.
//
// A node on another host reaches filterd over TCP (XK_FILTERD=tcp:HOST:PORT)
// with the shared token (XK_FILTERD_TOKEN=FILE), and its channel is its own
// DPDK port (Options::node_port, from XK_PORT or --port) on filterd's node
// port: plain Ethernet, filterd told the port's MAC in HELLO. The graph is
// the same but for its bottom driver.
//
// The calls block for one control round trip; they happen at listen(),
// connect(), bind() and when a connection or listener is over, never per
// packet. One thread at a time (the stack's).
//
// filterd may die or restart under a running node. Attached to the node's
// event loop (attach()), the client notices its control connection close,
// and reconnects with back-off for a while (Options::reconnect_for): a HELLO
// that asks for the node's earlier id and channels back (resume), then
// RESYNC of everything the node's stacks hold -- listeners with their group
// membership, connected and accepted TCP connections, bound UDP ports -- so
// established connections carry on (TCP retransmits what the gap lost).
// Meanwhile listen() and connect() fail with would_block (EAGAIN): filterd
// is away, try again; once the client has given up, with no_route
// (ENETUNREACH).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xk/event_loop.hpp"
#include "xk/filterd/control.hpp"
#include "xk/port_authority.hpp"
#include "xk/protocol.hpp"
#include "xk/timer.hpp"

namespace xk {

namespace tcp {
class TcpProtocol;
}
namespace udp {
class UdpProtocol;
}

class FilterdClient final : public PortAuthority, public Pollable {
 public:
  struct Options {
    std::chrono::milliseconds timeout = std::chrono::seconds(30);  // for one reply
    // After the control connection closed: keep trying this long, waiting
    // backoff_min between the first attempts and doubling up to
    // backoff_max. 0: give up at once. XK_FILTERD_RECONNECT_MS overrides it
    // for the stacks libxk and the apps build (options_from_env).
    std::chrono::milliseconds reconnect_for = std::chrono::seconds(30);
    std::chrono::milliseconds backoff_min{20};
    std::chrono::milliseconds backoff_max{500};
    // What a TCP control connection's HELLO carries (token.hpp); from
    // XK_FILTERD_TOKEN=FILE in options_from_env.
    std::vector<std::byte> token;
    // The node's own port, for a node on filterd's node port (plain
    // Ethernet; needed over TCP): DPDK devargs and more dpdk options, and
    // its MAC (absent: filterd picks one, and the port is set to it).
    std::string node_port;
    std::string node_port_opts;
    std::optional<MacAddr> node_mac;
    // How long to wait for a TCP connection to filterd.
    std::chrono::milliseconds connect_timeout{3000};
  };
  // What the node's stacks hold, as RESYNC declares it.
  struct Holdings {
    std::vector<filterd::ctl::ListenerEntry> listeners;
    std::vector<filterd::ctl::FlowEntry> flows;
  };
  struct Hooks {
    std::function<Holdings()> holdings;  // what the stacks hold now
    std::function<void()> resumed;       // after the RESYNC: e.g. start the memif channel again
  };
  enum class State : std::uint8_t { connected, reconnecting, failed };
  struct Stats {
    std::uint64_t lost = 0;            // control connections that closed under us
    std::uint64_t attempts = 0;        // reconnection attempts
    std::uint64_t resumes = 0;         // times filterd took us back
    std::uint64_t resynced = 0;        // RESYNC entries sent
    std::uint64_t resync_refused = 0;  // RESYNC messages answered with ERROR
    std::chrono::milliseconds last_gap{0};  // from losing filterd to the last resume
  };

  // Connects and registers (HELLO). Throws std::runtime_error saying why not.
  static std::unique_ptr<FilterdClient> connect(const std::string& path, const std::string& name,
                                                Options options);
  static std::unique_ptr<FilterdClient> connect(const std::string& path, const std::string& name) {
    return connect(path, name, Options());
  }
  // Options with XK_FILTERD_RECONNECT_MS and XK_FILTERD_TOKEN applied.
  static Options options_from_env();
  // Whether `where` names filterd's TCP control socket ("tcp:HOST:PORT", or
  // "HOST:PORT" with no '/') rather than a Unix socket's path.
  static bool is_tcp(const std::string& where);
  ~FilterdClient() override;  // BYE, then close
  FilterdClient(const FilterdClient&) = delete;
  FilterdClient& operator=(const FilterdClient&) = delete;

  // Watch the control connection from `loop` (the stack's, on its thread)
  // and reconnect when it closes. Without it, a lost filterd is final.
  void attach(EventLoop& loop, Hooks hooks);

  const filterd::ctl::HelloReply& hello() const noexcept { return hello_; }
  // On filterd's node port (its own DPDK port), not a memif channel.
  bool ethernet() const noexcept { return !options_.node_port.empty(); }
  State state() const noexcept { return state_; }
  const Stats& stats() const noexcept { return stats_; }
  // The node's graph: its memif channel to filterd, the shared address, the
  // ISN/SYN-cookie secret, and `tcp_opts` added to the tcp line. In central
  // mode (the HELLO reply says so) tcp sits on a relay layer instead of ip0:
  // the same sockets, carried by filterd's TCP (docs/filterd.md).
  std::string graph_spec(const std::string& tcp_opts = {}) const;

  // One request, its reply (an Error reply is a reply, not a failure);
  // timed_out or closed when filterd does not answer (closed also starts
  // reconnecting).
  Result<filterd::ctl::Message> request(filterd::ctl::Body body);
  // While reconnecting: one attempt now (the timer makes the others).
  // Whether the client is connected afterwards.
  bool reconnect_now();

  Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool group) override;
  void release_listen(std::uint8_t proto, std::uint16_t port) noexcept override;
  Result<std::uint16_t> claim_connect(std::uint8_t proto, std::uint16_t local_port, Ipv4Addr remote,
                                      std::uint16_t remote_port) override;
  void release_connect(std::uint8_t proto, std::uint16_t local_port, Ipv4Addr remote,
                       std::uint16_t remote_port) noexcept override;

  // Pollable: a cheap look at the control socket every so many passes (and
  // after every sleep), so a closed connection is noticed at once.
  std::size_t poll(std::size_t budget) override;
  int wait_fd() const noexcept override { return epoll_fd_; }
  void after_sleep() noexcept override { check_now_ = true; }

 private:
  FilterdClient(std::string path, std::string name, Options options);
  filterd::ctl::Hello make_hello() const;
  void heartbeat();
  Status send_all(const std::vector<std::byte>& bytes);
  Result<filterd::ctl::Message> request(filterd::ctl::Body body, std::chrono::milliseconds timeout);
  Status usable();
  void watch(bool on) noexcept;
  void close_socket() noexcept;
  void lost(const char* why);
  void give_up(const std::string& why);
  Time now() const noexcept;

  std::string path_;
  std::string name_;
  Options options_;
  int fd_ = -1;
  int epoll_fd_ = -1;
  filterd::ctl::FrameReader reader_;
  std::uint32_t next_id_ = 1;
  filterd::ctl::HelloReply hello_;
  State state_ = State::connected;
  EventLoop* loop_ = nullptr;
  Hooks hooks_;
  std::optional<Timer> retry_;
  std::optional<Timer> ping_;
  Time lost_at_{};
  std::chrono::milliseconds backoff_{0};
  std::uint32_t passes_ = 0;
  bool check_now_ = false;
  bool in_attempt_ = false;
  Stats stats_;
};

// What a node's TCP and UDP hold, as filterd's RESYNC declares it: every
// listener (TCP, with its group membership; UDP: each bound port), every TCP
// connection whose port filterd gave (CONNECT) or that a listener accepted.
// Either protocol may be null.
FilterdClient::Holdings filterd_holdings(const tcp::TcpProtocol* tcp, const udp::UdpProtocol* udp);

// attach() for a node's stack: RESYNC from its tcp and udp, and after a
// resume its channel `net` (the graph's DPDK memif client; may be null)
// started again, since a memif client does not reconnect by itself.
void attach_node(FilterdClient& client, EventLoop& loop, tcp::TcpProtocol* tcp, udp::UdpProtocol* udp,
                 Protocol* net);

}  // namespace xk

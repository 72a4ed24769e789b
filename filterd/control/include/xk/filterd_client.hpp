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
// the same but for its bottom driver. Such a node runs one stack (queue 0).
//
// The calls block for one control round trip; they happen at listen(),
// connect(), bind() and when a connection or listener is over, never per
// packet.
//
// A node may run several stacks, one per core (Options::queues): one HELLO
// asks for a channel per stack, and queue(q) is the PortAuthority of stack
// q, whose ports and flows filterd steers to channel q. The stacks' threads
// share the one control connection (a mutex keeps their round trips apart);
// the first stack attached watches it and drives the reconnection, which
// collects every stack's holdings on that stack's own thread.
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

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "xk/event_loop.hpp"
#include "xk/filterd/control.hpp"
#include "xk/port_authority.hpp"
#include "xk/protocol.hpp"
#include "xk/timer.hpp"

namespace xk {

class Driver;
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
    // How a round trip waits for its reply: look for it for `spin`, pausing
    // as `idle` says, before sleeping in poll(2) -- the stack's own idle
    // policy, so a node that yields its core between polls yields it here
    // too (filterd answers a CONNECT in microseconds when it is awake). 0: sleep at once.
    IdleMode idle = IdleMode::spin_then_sleep;
    std::chrono::microseconds spin{0};
    // Wait for replies the way a stack with this policy waits for work; a
    // busy-polling stack's node keeps the default (sleep at once).
    void wait_like(IdleMode stack_idle, std::chrono::nanoseconds stack_spin) {
      if (stack_idle == IdleMode::busy_poll) return;
      idle = stack_idle;
      spin = std::chrono::duration_cast<std::chrono::microseconds>(stack_spin);
    }
    // After the control connection closed: keep trying this long, waiting
    // backoff_min between the first attempts and doubling up to
    // backoff_max. 0: give up at once. XK_FILTERD_RECONNECT_MS overrides it
    // for the stacks libxk and the apps build (options_from_env).
    std::chrono::milliseconds reconnect_for = std::chrono::seconds(30);
    std::chrono::milliseconds backoff_min{20};
    std::chrono::milliseconds backoff_max{500};
    std::uint16_t queues = 1;  // stacks the node runs (1..64): a channel each
    // The token a TCP node proves it knows (token.hpp; never sent); from
    // XK_FILTERD_TOKEN=FILE in options_from_env.
    std::vector<std::byte> token;
    // The node's own port, for a node on filterd's node port (plain
    // Ethernet; needed over TCP): DPDK devargs and more dpdk options, and
    // its MAC (absent: filterd picks one, and the port is set to it).
    // node_port_opts also reach the memif channel of a node on filterd's
    // host (e.g. frame_max=0: MTU-sized frames only).
    std::string node_port;
    std::string node_port_opts;
    std::optional<MacAddr> node_mac;
    // How long to wait for a TCP connection to filterd.
    std::chrono::milliseconds connect_timeout{3000};
    // Ports asked for at once by LEASE (protocol version 3): a TCP connect
    // from an ephemeral port takes one of the node's leased ports with no
    // round trip, and gives it back to the pool when the connection is over.
    // 0: a CONNECT (and a RELEASE) for every connection, as with a filterd
    // that predates LEASE or runs central mode. XK_FILTERD_LEASE overrides it.
    std::uint16_t lease_block = 64;
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
    std::uint64_t leases = 0;          // LEASE requests answered with ports
    std::uint64_t leased_connects = 0; // connects from a leased port (no CONNECT)
    std::uint64_t lost = 0;            // control connections that closed under us
    std::uint64_t attempts = 0;        // reconnection attempts
    std::uint64_t resumes = 0;         // times filterd took us back
    std::uint64_t resynced = 0;        // RESYNC entries sent
    std::uint64_t resync_refused = 0;  // RESYNC messages answered with ERROR
    std::uint64_t releases_held = 0;   // flow RELEASEs sent in a batch, not each on its own
    std::uint64_t release_batches = 0; // the batches: one write each
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
  void attach(EventLoop& loop, Hooks hooks) { attach_queue(0, loop, std::move(hooks)); }
  // Stack q's loop and hooks: holdings() and resumed() run on that loop's
  // thread (posted to it when the reconnection runs elsewhere). The first
  // queue attached watches the connection. detach_queue() before the
  // stack goes (its loop stopped, or from its thread).
  void attach_queue(std::uint16_t queue, EventLoop& loop, Hooks hooks);
  void detach_queue(std::uint16_t queue) noexcept;

  std::uint16_t queues() const noexcept { return options_.queues; }
  // The PortAuthority of stack `queue` (queue(0) is this client itself).
  // Throws std::out_of_range for a queue the node does not have.
  PortAuthority& queue(std::uint16_t queue);

  const filterd::ctl::HelloReply& hello() const noexcept { return hello_; }
  // On filterd's node port (its own DPDK port), not a memif channel.
  bool ethernet() const noexcept { return !options_.node_port.empty(); }
  // filterd gives its channels as shm links (its memif socket says "shm:PATH";
  // queue q's link is PATH.<its id>), not memif interfaces.
  bool shm_channels() const { return !ethernet() && filterd::ctl::shm_channel_path(hello_, 0).has_value(); }
  State state() const noexcept { return state_; }
  const Stats& stats() const noexcept { return stats_; }
  // Ports leased to stack `queue`, and those of them no connection uses.
  std::size_t leased_ports(std::uint16_t queue = 0) const;
  std::size_t free_leased_ports(std::uint16_t queue = 0) const;
  // The node's graph: its memif channel to filterd, the shared address, the
  // ISN/SYN-cookie secret, and `tcp_opts` added to the tcp line. In central
  // mode (the HELLO reply says so) tcp sits on a relay layer instead of ip0:
  // the same sockets, carried by filterd's TCP (docs/filterd.md).
  std::string graph_spec(const std::string& tcp_opts = {}) const { return graph_spec(tcp_opts, 0); }
  // Stack `queue`'s graph: its own channel (and its own DPDK port name,
  // net_memif<queue>, since the stacks of a node share one DPDK process).
  std::string graph_spec(const std::string& tcp_opts, std::uint16_t queue) const;

  // One request, its reply (an Error reply is a reply, not a failure);
  // timed_out or closed when filterd does not answer (closed also starts
  // reconnecting).
  Result<filterd::ctl::Message> request(filterd::ctl::Body body);
  // While reconnecting: one attempt now (the timer makes the others).
  // Whether the client is connected afterwards.
  bool reconnect_now();

  // Queue 0's port operations (queue(q) for the others).
  Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool group) override {
    return claim_listen_on(0, proto, port, group);
  }
  void release_listen(std::uint8_t proto, std::uint16_t port) noexcept override { release_listen_on(0, proto, port); }
  // A flow with an IPv6 peer needs a filterd that speaks version 4
  // (docs/control-protocol.md); with an older one it is unsupported.
  Result<std::uint16_t> claim_connect(std::uint8_t proto, std::uint16_t local_port, const IpAddr& remote,
                                      std::uint16_t remote_port) override {
    return claim_connect_on(0, proto, local_port, remote, remote_port);
  }
  void release_connect(std::uint8_t proto, std::uint16_t local_port, const IpAddr& remote,
                       std::uint16_t remote_port) noexcept override {
    release_connect_on(0, proto, local_port, remote, remote_port);
  }
  Result<std::uint16_t> claim_listen_on(std::uint16_t queue, std::uint8_t proto, std::uint16_t port, bool group);
  void release_listen_on(std::uint16_t queue, std::uint8_t proto, std::uint16_t port) noexcept;
  Result<std::uint16_t> claim_connect_on(std::uint16_t queue, std::uint8_t proto, std::uint16_t local_port,
                                         const IpAddr& remote, std::uint16_t remote_port);
  void release_connect_on(std::uint16_t queue, std::uint8_t proto, std::uint16_t local_port, const IpAddr& remote,
                          std::uint16_t remote_port) noexcept;

  // Pollable: a cheap look at the control socket every so many passes (and
  // after every sleep), so a closed connection is noticed at once.
  std::size_t poll(std::size_t budget) override;
  int wait_fd() const noexcept override { return epoll_fd_; }
  bool before_sleep() noexcept override;
  void after_sleep() noexcept override { check_now_ = true; }

  // A flow RELEASE (a connection over, nobody waits for the answer) made on
  // the watching stack's thread waits in an outbox for company: up to
  // kOutboxMax of them, at most kOutboxDelay, and never past the loop going
  // to sleep or another request (filterd reads our requests in order). A
  // server ending thousands of connections a second otherwise costs filterd
  // a wake-up, a read and a write for each.
  static constexpr std::size_t kOutboxMax = 32;
  static constexpr std::chrono::microseconds kOutboxDelay{1000};
  // RELEASEs waiting in the outbox.
  std::size_t held_releases() const;

 private:
  class QueuePort;
  struct Attached {
    EventLoop* loop = nullptr;
    Hooks hooks;
  };
  FilterdClient(std::string path, std::string name, Options options);
  filterd::ctl::Hello make_hello() const;
  void heartbeat();
  Status send_all(const std::vector<std::byte>& bytes);
  // With mu_ held.
  Result<filterd::ctl::Message> request_locked(filterd::ctl::Body body, std::chrono::milliseconds timeout);
  // With mu_ held, over TCP before HELLO: AUTH with a fresh nonce, filterd's
  // proof checked, and the node's proof for HELLO put in `proof`. Empty, or
  // why it failed (docs/control-protocol.md, "Proving the token").
  std::string prove_token_locked(std::chrono::milliseconds timeout, std::optional<filterd::ctl::Proof>& proof);
  // With mu_ held: sends without waiting for the reply, which the next
  // request (it skips replies to other ids) or poll() reads and drops.
  Status notify_locked(filterd::ctl::Body body);
  // With mu_ held: the outbox (above), and sending it as one write.
  void hold_release_locked(filterd::ctl::Body body);
  Status flush_outbox_locked();
  // With mu_ held: reads what filterd sent unasked or late (replies nobody
  // waits for) without blocking: how many bytes, nullopt when the
  // connection turned out closed (lost() has run).
  std::optional<std::size_t> drain_locked();
  Status usable();
  void watch(bool on) noexcept;
  void close_socket() noexcept;
  void lost(const char* why);
  void give_up(const std::string& why);
  void on_retry();
  // Every attached stack's holdings, each read on its own thread; nullopt
  // when a stack did not answer in time.
  std::optional<Holdings> gather_holdings();
  // Gives a port or flow back; `wait` for filterd's answer (a port another
  // node may claim next must be free when the call returns), or not (a flow:
  // only this node's later requests, behind it on the same stream, can care).
  void release(filterd::ctl::Body body, bool wait) noexcept;
  Time now() const noexcept;
  // With mu_ held: LEASE lease_block more ports for `queue`. Whether any came.
  bool lease_more_locked(std::uint16_t queue);
  // With mu_ held, after a resuming HELLO: ask the new filterd for every
  // leased port back; those it refuses are no longer ours.
  Status renew_leases_locked(bool filterd_leases);

  std::string path_;
  std::string name_;
  Options options_;
  // One round trip at a time: the stacks' threads share the connection.
  mutable std::mutex mu_;
  int fd_ = -1;
  int epoll_fd_ = -1;
  filterd::ctl::FrameReader reader_;
  std::uint32_t next_id_ = 1;
  filterd::ctl::HelloReply hello_;
  std::atomic<State> state_{State::connected};
  EventLoop* loop_ = nullptr;  // the watching stack's
  std::uint16_t watcher_ = 0;
  std::vector<Attached> attached_;  // by queue
  std::vector<std::unique_ptr<QueuePort>> ports_;  // queues 1..
  std::vector<filterd::ctl::Body> released_meanwhile_;  // RELEASE/UNLISTEN while away: sent after the RESYNC
  std::vector<filterd::ctl::Body> outbox_;               // flow RELEASEs held back (mu_)
  Time outbox_since_{};                                  // when the first of them came
  std::atomic<bool> outbox_waiting_{false};              // outbox_ is not empty: poll() looks
  std::optional<Timer> retry_;
  std::atomic<bool> arm_retry_{false};  // lost() on another stack's thread: the watcher arms the timer
  std::optional<Timer> ping_;
  Time lost_at_{};
  std::chrono::milliseconds backoff_{0};
  std::uint32_t passes_ = 0;
  bool check_now_ = false;
  // Leased ports by queue (mu_): all of them, and those free, oldest
  // given back first (a port is reused as late as it can be, which keeps
  // a peer's TIME-WAIT for its last connection out of the way).
  struct LeasePool {
    std::vector<std::uint16_t> held;  // sorted
    std::deque<std::uint16_t> free;
  };
  std::vector<LeasePool> leases_;
  bool leasing_ = false;  // filterd speaks version 3 and is not central
  std::atomic<bool> ipv6_flows_{false};  // filterd speaks version 4: a flow's peer may be IPv6
  std::atomic<bool> in_attempt_{false};
  Stats stats_;
};

// What a node's TCP and UDP hold, as filterd's RESYNC declares it: every
// listener (TCP, with its group membership; UDP: each bound port), every TCP
// connection whose port filterd gave (CONNECT) or that a listener accepted.
// Either protocol may be null.
// The entries carry queue 0; the client sets each stack's own queue.
FilterdClient::Holdings filterd_holdings(const tcp::TcpProtocol* tcp, const udp::UdpProtocol* udp);

// attach() for a node's stack: RESYNC from its tcp and udp, and after a
// resume its channel `net` (the graph's driver; may be null) reconnected
// (Driver::reconnect), since a memif client does not come back by itself.
// `queue`: the stack's queue, for a node that runs several.
void attach_node(FilterdClient& client, EventLoop& loop, tcp::TcpProtocol* tcp, udp::UdpProtocol* udp,
                 Driver* net, std::uint16_t queue = 0);

}  // namespace xk

#pragma once
// fault: a pass-through that damages the traffic crossing one edge of a graph,
// for testing the layers above it under loss, duplication, reordering, delay,
// corruption and a rate limit:
//
//   fault f0 below=ip0 loss=0.01 reorder=0.005 delay=2 seed=7
//   udp   u0 below=f0
//
// Each message in an affected direction (dir=both|tx|rx) goes through, in
// order: the rate limit (token bucket; over the rate is dropped), loss,
// corruption (one random bit of one random byte flipped, in a private copy:
// the message may share its buffers with the sender), duplication (a second
// message over the same buffers follows the first), reordering (the message is
// held and goes out after the next one in its direction, or after reorder_ms
// when there is an event loop), delay (delay ms plus up to jitter ms, on the
// event loop's timers). One deterministic PRNG per instance, from seed=.
// ce=P marks ECN-capable packets going down Congestion Experienced (above
// ipv4 only: it rewrites the TOS byte the transport asks IP for).

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>

#include "xk/clock.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/passthrough.hpp"
#include "xk/timer.hpp"

namespace xk::fault {

enum class Direction : std::uint8_t { both, tx, rx };

struct FaultConfig {
  Direction dir = Direction::both;
  double loss = 0;       // probability a message is dropped
  double duplicate = 0;  // probability a message is sent twice
  double reorder = 0;    // probability a message is held back behind the next
  double corrupt = 0;    // probability one bit of a message is flipped
  // Probability an ECN-capable packet going down is marked Congestion
  // Experienced (RFC 3168), as a congested router would instead of dropping
  // it: the IPv4 TOS byte the transport asked for (Offload::tos) becomes CE.
  // Only for a fault layer above ipv4, in the tx direction.
  double ce = 0;
  Duration delay{0};     // added to every message
  Duration jitter{0};    // plus a uniform random 0..jitter
  Duration reorder_hold = std::chrono::milliseconds(10);  // longest hold (with a loop)
  std::uint64_t rate = 0;       // bytes per second; 0: no limit
  std::uint64_t burst = 65536;  // bucket size in bytes
  // With rate: 0 polices (a token bucket of `burst` drops what is over the
  // rate); else a bottleneck link of that rate with a FIFO of this many
  // bytes in front: a message waits its turn (its serialization and what
  // queued before it) and is dropped only when the queue is full (tail drop).
  std::uint64_t queue = 0;
  std::uint64_t seed = 1;
};

class FaultProtocol final : public PassThrough {
 public:
  // `loop` gives the clock and timers; delay and jitter need it (throws
  // std::invalid_argument without one). The rate limit uses the loop's clock,
  // or a MonotonicClock.
  FaultProtocol(std::string name, Protocol& below, FaultConfig config, EventLoop* loop = nullptr);
  ~FaultProtocol() override;

  const FaultConfig& config() const noexcept { return config_; }
  // Messages held by the reordering or delay stages right now.
  std::size_t held() const noexcept;

 protected:
  Status on_tx(PassSession& s, Msg msg) override;
  Status on_rx(PassSession& s, Msg msg) override;

 private:
  enum Dir : std::uint8_t { kTx = 0, kRx = 1 };
  struct DirCounters {
    Counter* passed;
    Counter* lost;
    Counter* rate_dropped;
    Counter* corrupted;
    Counter* ce_marked;
    Counter* duplicated;
    Counter* reordered;
    Counter* delayed;
  };
  // A message held back (what IP learned of a received one travels in it,
  // Msg::rx()).
  struct Held {
    Ref<PassSession> session;
    Msg msg;
    Duration queued{0};
  };
  struct Pending {
    Time due;
    Dir dir;
    Ref<PassSession> session;
    Msg msg;
  };
  struct Bucket {
    double tokens = 0;
    Time last{};
    bool started = false;
  };

  bool applies(Dir d) const noexcept;
  bool chance(double p) noexcept;
  double uniform() noexcept { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  Status process(Dir d, PassSession& s, Msg msg);
  Status reorder_stage(Dir d, PassSession& s, Msg msg, Duration queued);
  // `queued`: the message's wait in the bottleneck queue (queue=), added
  // to the delay.
  Status delay_stage(Dir d, PassSession& s, Msg msg, Duration queued);
  Status deliver(Dir d, PassSession& s, Msg msg);
  bool within_rate(Dir d, std::size_t bytes) noexcept;
  // queue=: how long a message of `bytes` waits until it has left the
  // bottleneck link, or none when the queue is full.
  std::optional<Duration> through_queue(Dir d, std::size_t bytes) noexcept;
  Msg corrupted_copy(const Msg& msg);
  void release_held(Dir d);
  void on_delay_timer();
  void arm_delay_timer();

  FaultConfig config_;
  EventLoop* loop_;
  MonotonicClock own_clock_;
  const Clock& clock_;
  std::mt19937_64 rng_;
  std::array<DirCounters, 2> dir_counters_{};
  std::array<std::optional<Held>, 2> held_;
  std::array<Bucket, 2> buckets_{};
  std::array<Time, 2> link_free_{};  // queue=: when the link has sent all it holds
  std::deque<Pending> delayed_;  // by due time, FIFO among equals
  std::optional<Timer> delay_timer_;
  std::optional<Timer> hold_timer_tx_;
  std::optional<Timer> hold_timer_rx_;
};

// Make the kind `fault` available to graph specs:
//   fault f0 below=X [dir=both|tx|rx] [loss=P] [duplicate=P] [reorder=P]
//         [reorder_ms=MS] [corrupt=P] [ce=P] [delay=MS] [jitter=MS] [rate=BYTES/s]
//         [burst=BYTES] [queue=BYTES] [seed=N]
void register_fault(Registry& registry);

}  // namespace xk::fault

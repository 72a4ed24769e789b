#pragma once
// memdev: a network device in memory, for a program that is itself the other
// end of the wire -- the packetdrill adapter, tests that script a peer. The
// program injects frames, which the stack receives when the loop next polls
// the driver, and takes what the stack sent, each frame with the time (on the
// loop's clock) it left. A frame is whatever the layer above speaks: a bare
// IP packet under ipv4 (no Ethernet, no ARP), an Ethernet frame under eth.
//
//   memdev net0 mtu=1500 queue=4096
//   ipv4   ip0  below=net0 addr=192.168.0.1/16 gw=192.168.0.2
//
// Like loopback it belongs to the loop's thread: inject() and take_sent()
// are called there (inside xk::Stack::call(), or between run_once() calls).

#include <cstddef>
#include <deque>
#include <optional>
#include <span>

#include "xk/clock.hpp"
#include "xk/driver.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"

namespace xk::drivers {

class MemDev final : public Driver, public Pollable {
 public:
  struct Config {
    std::size_t mtu = 1500;          // largest frame either way
    std::size_t queue_limit = 4096;  // frames held each way; beyond: refused and counted
  };

  // A frame the stack sent, and when.
  struct Sent {
    Msg frame;
    Time at;
  };

  // With a loop, the loop polls the driver (and stamps sent frames with its
  // clock) until the driver is destroyed.
  MemDev(std::string name, Config config, EventLoop* loop = nullptr);
  ~MemDev() override;

  Result<ControlReply> control_any(const ControlQuery& query) override;
  // A frame the stack sends: kept for take_sent().
  Status send(Msg frame) override;

  // Queue a frame for the stack: too_large over the MTU, would_block when
  // `queue` frames already wait (both counted).
  Status inject(Msg frame);
  Status inject(std::span<const std::byte> frame);
  // The oldest frame the stack sent that nobody has taken yet.
  std::optional<Sent> take_sent();
  std::size_t sent_queued() const noexcept { return sent_.size(); }
  std::size_t inbox_queued() const noexcept { return inbox_.size(); }
  const Config& config() const noexcept { return config_; }

  // Hand up to `budget` injected frames to the receiver.
  std::size_t poll(std::size_t budget) override;
  // Frames are injected from the loop's own thread only, so an empty inbox
  // stays empty until the loop runs again.
  bool before_sleep() noexcept override { return inbox_.empty(); }

 private:
  Config config_;
  EventLoop* loop_;
  std::deque<Msg> inbox_;
  std::deque<Sent> sent_;
  Counter& tx_frames_;
  Counter& rx_frames_;
  Counter& drop_tx_too_big_;
  Counter& drop_tx_full_;
  Counter& drop_rx_too_big_;
  Counter& drop_rx_full_;
  Counter& drop_no_receiver_;
};

// Make the kind `memdev` available to graph specs:
//   memdev net0 mtu=1500 queue=4096
void register_memdev(Registry& registry);

}  // namespace xk::drivers

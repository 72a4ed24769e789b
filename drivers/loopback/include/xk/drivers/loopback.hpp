#pragma once
// loopback: the simplest bottom of a graph. Everything pushed into any of its
// sessions comes back up, in order, to the protocol that enabled it
// (open_enable), when it is polled. No DPDK, no system calls: it lets the
// framework and the protocols be tested in one process. Given an EventLoop it
// registers itself there, so frames move whenever the loop runs.

#include <cstddef>
#include <deque>

#include "xk/driver.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"

namespace xk::drivers {

class Loopback final : public Driver, public Pollable {
 public:
  struct Config {
    std::size_t mtu = 1500;
    std::size_t queue_limit = 4096;  // frames waiting for poll(); beyond: counted drop
  };

  // With a loop, the driver is polled by it (and leaves it when destroyed).
  Loopback(std::string name, Config config, EventLoop* loop = nullptr);
  ~Loopback() override;

  Result<ControlReply> control_any(const ControlQuery& query) override;
  // Queued for the next poll(), which hands it back up.
  Status send(Msg msg) override;

  // Deliver up to `budget` queued frames upward; returns how many were handled.
  std::size_t poll(std::size_t budget) override;
  // Frames are only queued from the loop's own thread, so "nothing queued" is
  // final until the loop runs again.
  bool before_sleep() noexcept override { return queue_.empty(); }
  std::size_t queued() const noexcept { return queue_.size(); }

 private:
  Config config_;
  EventLoop* loop_;
  std::deque<Msg> queue_;
  Counter& tx_frames_;
  Counter& rx_frames_;
  Counter& drop_queue_full_;
  Counter& drop_too_big_;
  Counter& drop_no_receiver_;
};

// Make the kind `loopback` available to graph specs:
//   loopback lo0 mtu=9000 queue=4096
void register_loopback(Registry& registry);

}  // namespace xk::drivers

#pragma once
// pair: an in-process Ethernet cable between two stacks in one process (one
// thread). A PairLink has two ends; a PairDriver attaches to one of them. A
// frame pushed into one end is queued (bounded, drops counted) at the other
// end and handed to that end's receiver when the other driver is polled. The
// Msg itself crosses: nothing is copied.
//
// Graph specs find links by name through a PairHub the program owns and
// passes to register_pair() (no global registry of links):
//
//   xk::drivers::PairHub hub;
//   xk::drivers::register_pair(reg, hub);
//   pair net0 link=wire0 mac=02:00:00:00:00:01      # stack A
//   pair net0 link=wire0 mac=02:00:00:00:00:02      # stack B (another graph)
//
// Both ends, their stacks and their loops must run on one thread: the queues
// take no locks. The hub (and each link) must outlive the drivers on it.

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "xk/driver.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"

namespace xk::drivers {

class PairDriver;

// The cable. Two inboxes, one per end: inbox[i] holds frames for end i.
class PairLink {
 public:
  explicit PairLink(std::string name) : name_(std::move(name)) {}
  // Detaches drivers still attached (they then drop what they send).
  ~PairLink();
  PairLink(const PairLink&) = delete;
  PairLink& operator=(const PairLink&) = delete;

  const std::string& name() const noexcept { return name_; }
  // How many ends are taken (0..2).
  std::size_t attached() const noexcept;
  // Frames waiting at end `end` (0 or 1) for its driver's poll().
  std::size_t queued(std::size_t end) const noexcept { return ends_[end].inbox.size(); }

 private:
  friend class PairDriver;
  struct End {
    PairDriver* driver = nullptr;
    std::deque<Msg> inbox;
  };
  End ends_[2];
  std::string name_;
};

// Links by name, owned by the program (or the test), found by the factory.
class PairHub {
 public:
  // The link called `name`, created on first use.
  PairLink& link(const std::string& name);
  // nullptr if no link of that name was made.
  PairLink* find(const std::string& name) const noexcept;
  std::size_t size() const noexcept { return links_.size(); }

 private:
  std::map<std::string, std::unique_ptr<PairLink>, std::less<>> links_;
};

class PairDriver final : public Driver, public Pollable {
 public:
  struct Config {
    MacAddr mac;                     // answered to GetLocalAddr
    std::size_t mtu = 1514;          // largest frame, Ethernet header included
    std::size_t queue_limit = 1024;  // frames waiting at this end; beyond: dropped by the sender
    // Behave like a port with IPv4/UDP/TCP checksum offload: offer it in
    // GetOffloads, fill the checksums a frame asks for on transmit, and flag
    // the ones found good on receive. Done in software, as net_tap does, so
    // the layers' offload paths can be tested without a NIC.
    bool csum_offload = false;
  };

  // Takes a free end of `link` (throws std::invalid_argument when both are
  // taken). With a loop, the loop polls the driver until it is destroyed.
  PairDriver(std::string name, PairLink& link, Config config, EventLoop* loop = nullptr);
  ~PairDriver() override;

  Result<ControlReply> control_any(const ControlQuery& query) override;
  // Into the other end's inbox (copied nothing), or a counted drop.
  Status send(Msg msg) override;

  // Deliver up to `budget` frames waiting at this end; returns how many were handled.
  std::size_t poll(std::size_t budget) override;
  // One thread owns both ends, so "nothing waiting" holds until the loop runs.
  bool before_sleep() noexcept override { return queued() == 0; }

  std::size_t queued() const noexcept;
  const Config& config() const noexcept { return config_; }
  // Which end of the link this driver holds (0 or 1).
  std::size_t end() const noexcept { return end_; }

 private:
  friend class PairLink;
  Status fill_requested_checksums(Msg& frame);
  void flag_verified_checksums(Msg& frame);

  Config config_;
  PairLink* link_;
  std::size_t end_ = 0;
  EventLoop* loop_;
  Counter& tx_frames_;
  Counter& rx_frames_;
  Counter& drop_too_big_;
  Counter& drop_queue_full_;
  Counter& drop_no_peer_;
  Counter& drop_no_receiver_;
  Counter& drop_bad_offload_;
  Counter& tx_csum_filled_;
  Counter& rx_csum_verified_;
};

// Make the kind `pair` available to graph specs; links are looked up (and
// created on first use) in `hub`, which must outlive every graph built:
//   pair net0 link=wire0 mac=02:00:00:00:00:01 mtu=1514 queue=1024 csum_offload=off
void register_pair(Registry& registry, PairHub& hub);

}  // namespace xk::drivers

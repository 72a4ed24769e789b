#pragma once
// One node's channel as steer holds it (steer.cpp, steer_v6.cpp).

#include <string>

#include "xk/filterd/steer.hpp"

namespace xk::filterd {

// The upper of one node's channel driver: frames from the node come to it,
// and its session sends frames to the node. A node on the node port has no
// driver of its own: it sends through the node port's session, and its
// frames come up through the NodePort.
class Steer::Channel final : public Protocol {
 public:
  Channel(Steer& steer, NodeId node, std::uint16_t queue, Protocol& driver, MacAddr node_mac)
      : Protocol(steer.name() + "/node" + std::to_string(node) + "q" + std::to_string(queue), "steer-channel"),
        steer_(steer),
        node_(node),
        queue_(queue),
        driver_(&driver),
        node_mac_(node_mac),
        our_mac_(steer.config_.channel_mac),
        rx_(counters().add("rx_frames", "frames steered to this queue")),
        tx_(counters().add("tx_frames", "frames from this queue sent out")),
        other_queue_(counters().add("tx_other_queue", "sent for a flow another queue of the node owns")) {
    Participants none;
    Result<SessionRef> s = driver.open(*this, none);
    if (!s) throw std::invalid_argument("cannot open a session on '" + driver.name() + "': " + to_string(s.error()));
    session_ = *s;
    Participants none2;
    if (Status st = driver.open_enable(*this, none2); !st) {
      throw std::invalid_argument("channel '" + driver.name() + "' refused us as receiver: " + to_string(st.error()));
    }
  }
  // On the node port: its session (not ours to close), its MAC as our source.
  // Such a node runs one queue (the registry refuses more).
  Channel(Steer& steer, NodeId node, SessionRef shared_tx, MacAddr node_mac, MacAddr our_mac)
      : Protocol(steer.name() + "/node" + std::to_string(node) + "q0", "steer-channel"),
        steer_(steer),
        node_(node),
        node_mac_(node_mac),
        our_mac_(our_mac),
        session_(std::move(shared_tx)),
        rx_(counters().add("rx_frames", "frames steered to this queue")),
        tx_(counters().add("tx_frames", "frames from this queue sent out")),
        other_queue_(counters().add("tx_other_queue", "sent for a flow another queue of the node owns")) {}
  ~Channel() override {
    if (driver_ == nullptr) return;
    Participants none;
    (void)driver_->open_disable(*this, none);
    if (session_) (void)session_->close();
  }

  Status demux(Session&, Msg msg) override { return steer_.egress(*this, std::move(msg)); }

  // To the node: its MAC as destination, ours as source.
  Status send(Msg frame) {
    Result<std::span<const std::byte>> p = frame.pop(eth::Header::kSize);
    if (!p) return p.error();
    const std::uint16_t type = load_be16(p->data() + 12);
    Result<std::span<std::byte>> room = frame.push(eth::Header::kSize);
    if (!room) return room.error();
    eth::Header{node_mac_, our_mac_, type}.write(room->first<eth::Header::kSize>());
    return session_->push(std::move(frame));
  }

  // A frame whose Ethernet header is still to come (a relay frame).
  Status send_typed(Msg frame, std::uint16_t type) {
    Result<std::span<std::byte>> room = frame.push(eth::Header::kSize);
    if (!room) return room.error();
    eth::Header{node_mac_, our_mac_, type}.write(room->first<eth::Header::kSize>());
    return session_->push(std::move(frame));
  }

  // The largest frame the node takes now (memif: more than the MTU once its
  // driver said it takes large frames); 0 on the node port (MTU-sized).
  std::size_t frame_max() const {
    if (driver_ == nullptr) return 0;
    Result<std::size_t> m = driver_->control(ctl::GetFrameMax{});
    return m ? *m : 0;
  }

  NodeId node() const noexcept { return node_; }
  std::uint16_t queue() const noexcept { return queue_; }
  MacAddr node_mac() const noexcept { return node_mac_; }
  MacAddr our_mac() const noexcept { return our_mac_; }
  bool ethernet() const noexcept { return driver_ == nullptr; }

 private:
  Steer& steer_;
  NodeId node_;
  std::uint16_t queue_ = 0;
  Protocol* driver_ = nullptr;  // null on the node port
  MacAddr node_mac_;
  MacAddr our_mac_;
  SessionRef session_;

 public:
  Counter& rx_;           // steered to this queue
  Counter& tx_;           // sent out from it
  Counter& other_queue_;  // allowed, but another queue's flow
};

}  // namespace xk::filterd

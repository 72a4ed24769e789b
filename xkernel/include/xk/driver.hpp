#pragma once
// The bottom of a graph: what every driver (dpdk, shm, pair, loopback,
// memdev) has in common. Any upper may open a session to send through it;
// one upper at a time -- the one that enabled it -- receives what arrives.
// A driver says how a frame leaves (send) and hands what arrives to
// deliver_up().

#include <cstdint>
#include <string>

#include "xk/msg.hpp"
#include "xk/protocol.hpp"

namespace xk {

class Driver : public Protocol {
 public:
  Driver(std::string name, std::string kind) : Protocol(std::move(name), std::move(kind)) {}

  // A session whose push() is send().
  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  // The receiver: every frame goes to upper->demux(session, frame). One at
  // a time (exists if another holds it).
  Status open_enable(Protocol& upper, Participants& parts) override;
  Status open_disable(Protocol& upper, Participants& parts) override;

  // One frame from a session above.
  virtual Status send(Msg frame) = 0;
  // Whether frames can leave now: a port's carrier, a peer connected (up or
  // down), or `none` for a driver with no link to wait for (in-process
  // ones). A program waits for `up` before it starts, and then announces
  // its address (what it sent while down reached nobody).
  enum class Link : std::uint8_t { none, down, up };
  virtual Link link_state() { return Link::none; }
  // The link's other end came back after going away (filterd restarted):
  // a driver whose link does not come back by itself starts it again.
  // unsupported: nothing to do here (the link reconnects alone, or has no
  // other end); not_connected: the other end is not there yet, try later.
  virtual Status reconnect() { return Errc::unsupported; }

 protected:
  bool receiving() const noexcept { return receiver_ != nullptr; }
  // Hands a received frame up; false (the frame dropped, for the driver to
  // count) when no upper is enabled.
  bool deliver_up(Msg frame);

 private:
  Protocol* receiver_ = nullptr;
  SessionRef rx_session_;  // what frames arrive on
};

}  // namespace xk

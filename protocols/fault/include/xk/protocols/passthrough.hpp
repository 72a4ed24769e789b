#pragma once
// PassThrough: the base of micro-protocols that sit on any edge of a graph
// (fault, capture) and act on the messages crossing it.
//
// Every call is forwarded to the protocol below, with one of our own sessions
// wrapped around each lower session, so that pushes come through us going
// down and demuxes come through us going up:
//
//   upper.open(...)      -> below.open(tap, parts), wrapped, handed to upper
//   below's passive open -> tap.open_done(below, lower_session, parts)
//                           -> wrapped -> upper.open_done(*this, wrapper, parts)
//   below.demux upcall   -> tap.demux(lower_session, msg)
//                           -> on_rx(wrapper, msg) -> upper.demux(wrapper, msg)
//   wrapper.push(msg)    -> on_tx(wrapper, msg) -> lower_session.push(msg)
//
// A "tap" is a small inner protocol, one per upper protocol, that the layer
// below sees as its upper: that is how an upcall from below finds the right
// upper when several protocols sit on one pass-through (udp and tcp over one
// `fault` over ip0). ICMP errors (ctl::DeliverError) reaching a tap go to its
// upper unchanged; every other control query goes down.
//
// A lower session that was never opened through us (a driver's receive
// session) gets a wrapper the first time it delivers.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xk/demux.hpp"
#include "xk/protocol.hpp"

namespace xk::fault {

class PassThrough;

class PassSession final : public Session {
 public:
  PassSession(PassThrough& proto, Protocol* upper, SessionRef lower);

  // Downward: through the pass-through's on_tx.
  Status push(Msg msg) override;
  // Upward: through the pass-through's on_rx.
  Status pop(Session& lower, Msg msg) override;
  Status close() override;
  // Everything a session is asked is the lower session's business.
  Result<ControlReply> control_any(const ControlQuery& query) override;

  Session& lower() const noexcept { return *lower_; }
  bool is_closed() const noexcept { return proto_ == nullptr; }
  // The unmodified hops, for on_tx/on_rx to call when a message goes on.
  Status send_down(Msg msg) { return lower_->push(std::move(msg)); }
  Status deliver_up(Msg msg) {
    if (upper() == nullptr) return Errc::closed;
    return upper()->demux(*this, std::move(msg));
  }

 private:
  friend class PassThrough;
  PassThrough* proto_;  // null once the protocol is gone
  SessionRef lower_;
};

class PassThrough : public Protocol {
 public:
  PassThrough(std::string name, std::string kind, Protocol& below);
  ~PassThrough() override;

  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  Status open_enable(Protocol& upper, Participants& parts) override;
  Status open_disable(Protocol& upper, Participants& parts) override;
  // Our own counters; everything else is the lower protocol's to answer.
  Result<ControlReply> control_any(const ControlQuery& query) override;

  Protocol& lower_protocol() const noexcept { return below_; }
  std::size_t session_count() const noexcept { return by_lower_.size(); }

 protected:
  // A message crossing the edge. The defaults pass it on unchanged.
  virtual Status on_tx(PassSession& s, Msg msg) { return s.send_down(std::move(msg)); }
  virtual Status on_rx(PassSession& s, Msg msg) { return s.deliver_up(std::move(msg)); }

 private:
  friend class PassSession;
  class Tap;
  struct LowerKey {
    std::uintptr_t p;
    friend bool operator==(const LowerKey&, const LowerKey&) = default;
  };

  Tap& tap_for(Protocol& upper);
  Ref<PassSession> wrap(Protocol& upper, Session& lower);
  Status lower_open_done(Tap& tap, Session& lower, Participants& parts);
  Status lower_demux(Tap& tap, Session& lower, Msg msg);
  void forget(PassSession& s) noexcept;

  Protocol& below_;
  std::vector<std::unique_ptr<Tap>> taps_;
  FlatMap<LowerKey, Ref<PassSession>> by_lower_;
};

}  // namespace xk::fault

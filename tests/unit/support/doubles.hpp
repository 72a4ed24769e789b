#pragma once
// Test doubles several suites share (tests/unit/support/fake_ip.hpp has the
// IPv4 one):
//   CaptureDriver -- the bottom of a graph: keeps what is pushed to it, says
//                    what its configuration says about itself (MTU, header
//                    room, MAC), and remembers who enabled it;
//   Sink          -- the top of a graph: keeps what arrives, its text, and
//                    the session it came up through;
//   FakeLink      -- below a micro-protocol: records pushes, delivers upward
//                    as a driver or as ipv4 would;
//   App           -- the top of a graph for layers that open sessions.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xk/address.hpp"
#include "xk/msg.hpp"
#include "xk/protocol.hpp"

namespace xk::test {

// The bytes of a message as a string (byte for byte).
inline std::string text_of_msg(const Msg& m) {
  std::string s(m.size(), '\0');
  if (!m.empty()) (void)m.copy_out(0, std::as_writable_bytes(std::span(s)));
  return s;
}

struct CaptureConfig {
  std::optional<MacAddr> mac;                               // GetLocalAddr; none: not answered
  std::size_t mtu = 1514;                                   // GetMtu
  std::optional<std::size_t> header_room = std::size_t{0};  // GetHeaderRoom; none: not answered
};

class CaptureDriver final : public Protocol {
 public:
  using Config = CaptureConfig;
  explicit CaptureDriver(Config config = Config{}) : Protocol("cap0", "capture"), config_(std::move(config)) {}

  class S final : public Session {
   public:
    S(CaptureDriver& d, Protocol* up) : Session(d, up), d_(d) {}
    Status push(Msg m) override {
      if (d_.fail_next) {
        d_.fail_next = false;
        return Errc::would_block;
      }
      d_.sent.push_back(std::move(m));
      return {};
    }
    Status pop(Session&, Msg) override { return Errc::unsupported; }

   private:
    CaptureDriver& d_;
  };
  Result<SessionRef> open(Protocol& up, Participants&) override { return SessionRef(make_ref<S>(*this, &up)); }
  Status open_enable(Protocol& up, Participants& p) override {
    receiver = &up;
    enabled_type = p.local.peek<ProtoNum>().ok() ? p.local.peek<ProtoNum>()->value : 0;
    return {};
  }
  Status open_disable(Protocol&, Participants&) override {
    receiver = nullptr;
    return {};
  }
  Result<ControlReply> control_any(const ControlQuery& q) override {
    if (std::holds_alternative<ctl::GetMtu>(q)) return ControlReply{config_.mtu};
    if (std::holds_alternative<ctl::GetHeaderRoom>(q) && config_.header_room) {
      return ControlReply{*config_.header_room};
    }
    if (std::holds_alternative<ctl::GetLocalAddr>(q) && config_.mac) return ControlReply{Participant{*config_.mac}};
    return Protocol::control_any(q);
  }
  // What was pushed, as text (byte for byte).
  std::string sent_text(std::size_t i) const { return text_of_msg(sent.at(i)); }
  // A session to hand frames up on, as a driver's receive session.
  SessionRef rx_session() {
    Participants none;
    return *open(*this, none);
  }

  std::vector<Msg> sent;
  Protocol* receiver = nullptr;    // who enabled us last
  std::uint32_t enabled_type = 0;  // the ProtoNum it enabled (an EtherType), or 0
  bool fail_next = false;          // the next push is refused (would_block)

 private:
  Config config_;
};

class Sink final : public Protocol {
 public:
  explicit Sink(std::string name = "sink0") : Protocol(std::move(name), "sink") {}
  Status demux(Session& lower, Msg msg) override {
    texts.push_back(text_of_msg(msg));
    sessions.push_back(&lower);
    received.push_back(std::move(msg));
    return {};
  }
  std::vector<Msg> received;
  std::vector<std::string> texts;
  std::vector<Session*> sessions;
};

// The layer below: records pushes, and delivers upward like a driver (one
// receiver, a receive session) or like ipv4 (per-session upcalls, passive
// opens announced with open_done).
class FakeLink final : public Protocol {
 public:
  explicit FakeLink(std::string name = "link0") : Protocol(std::move(name), "fake-link") {}
  class S final : public Session {
   public:
    S(FakeLink& l, Protocol* up) : Session(l, up), l_(l) {}
    Status push(Msg m) override {
      l_.sent.push_back(std::move(m));
      return {};
    }
    Status pop(Session&, Msg) override { return Errc::unsupported; }
    Status close() override {
      ++l_.closes;
      return {};
    }
    Result<ControlReply> control_any(const ControlQuery& q) override {
      if (std::holds_alternative<ctl::GetPeerAddr>(q)) return ControlReply{Participant{Ipv4Addr{0x0a000002}}};
      return Session::control_any(q);
    }

   private:
    FakeLink& l_;
  };
  Result<SessionRef> open(Protocol& up, Participants&) override {
    SessionRef s = make_ref<S>(*this, &up);
    opened.push_back(s);
    return s;
  }
  Status open_enable(Protocol& up, Participants&) override {
    receiver = &up;
    rx_session = make_ref<S>(*this, &up);
    return {};
  }
  Status open_disable(Protocol&, Participants&) override {
    receiver = nullptr;
    return {};
  }
  Result<ControlReply> control_any(const ControlQuery& q) override {
    if (std::holds_alternative<ctl::GetMtu>(q)) return ControlReply{std::size_t{1500}};
    return Protocol::control_any(q);
  }
  // As a driver: every frame to the one receiver.
  Status deliver(Msg m) { return receiver->demux(*rx_session, std::move(m)); }
  // As ipv4: a message on one of the sessions.
  Status deliver_on(Session& s, Msg m) { return s.upper()->demux(s, std::move(m)); }
  // As ipv4's passive open: a new session announced to the receiver.
  Result<SessionRef> announce() {
    SessionRef s = make_ref<S>(*this, receiver);
    opened.push_back(s);
    Participants parts;
    parts.remote.push(Ipv4Addr{0x0a000002});
    if (Status st = receiver->open_done(*this, *s, parts); !st) return st.error();
    return s;
  }

  std::vector<Msg> sent;
  std::vector<SessionRef> opened;
  Protocol* receiver = nullptr;
  SessionRef rx_session;
  int closes = 0;
};

// The top of a graph, for layers that open sessions (a transport above ipv4,
// an application above udp): records deliveries (the session each came up
// through, its text, its packet facts) and answers `answer`; records the
// sessions announced to it (or closes them at once: keep_opened = false) and
// the errors delivered to it; answers ipv4's ClaimsOwn when told which port
// is its own.
class App : public Protocol {
 public:
  explicit App(std::string name = "app0") : Protocol(std::move(name), "app") {}
  Status demux(Session& lower, Msg msg) override {
    received.push_back({&lower, text_of_msg(msg), msg.rx()});
    return answer;
  }
  Status open_done(Protocol&, Session& s, Participants& parts) override {
    if (refuse) return Errc::bad_state;
    if (on_open) on_open(parts);
    if (keep_opened) {
      opened.push_back(SessionRef(&s));
    } else {
      (void)s.close();
    }
    last_parts = parts;
    return {};
  }
  Result<ControlReply> control_any(const ControlQuery& q) override {
    if (const auto* d = std::get_if<ctl::DeliverError>(&q)) {
      net_errors.push_back(d->error);
      ++errors;
      return ControlReply{std::monostate{}};
    }
    if (const auto* c = std::get_if<ctl::ClaimsOwn>(&q); c != nullptr && claimed_port) {
      claims_asked.push_back(*c);
      if (c->to.value != *claimed_port) return Errc::not_found;
      return ControlReply{std::monostate{}};
    }
    return Protocol::control_any(q);
  }
  struct Delivery {
    Session* session;
    std::string text;
    RxInfo info;
  };
  std::vector<Delivery> received;
  std::vector<SessionRef> opened;
  Participants last_parts;
  int errors = 0;
  std::vector<ctl::NetError> net_errors;
  Status answer;                                 // what demux returns
  bool refuse = false;                           // open_done says no
  bool keep_opened = true;                       // false: close what open_done is given
  std::optional<std::uint16_t> claimed_port;     // set: ClaimsOwn answered (this port is ours)
  std::vector<ctl::ClaimsOwn> claims_asked;
  std::function<void(Participants&)> on_open;  // a suite's checks of what open_done is given
};

}  // namespace xk::test

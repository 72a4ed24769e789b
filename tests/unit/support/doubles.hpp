#pragma once
// Test doubles several suites share (tests/unit/support/fake_ip.hpp has the
// IPv4 one):
//   CaptureDriver -- the bottom of a graph: keeps what is pushed to it, says
//                    what its configuration says about itself (MTU, header
//                    room, MAC), and remembers who enabled it;
//   Sink          -- the top of a graph: keeps what arrives, its text, and
//                    the session it came up through.
#include <cstddef>
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
      d_.sent.push_back(std::move(m));
      return {};
    }
    Status pop(Session&, Msg) override { return Errc::unsupported; }

   private:
    CaptureDriver& d_;
  };
  Result<SessionRef> open(Protocol& up, Participants&) override { return SessionRef(make_ref<S>(*this, &up)); }
  Status open_enable(Protocol& up, Participants&) override {
    receiver = &up;
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

  std::vector<Msg> sent;
  Protocol* receiver = nullptr;  // who enabled us last

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

}  // namespace xk::test

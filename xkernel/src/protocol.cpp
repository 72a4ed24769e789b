#include "xk/protocol.hpp"

namespace xk {

std::atomic<std::int64_t> Session::live_{0};

Session::Session(Protocol& self, Protocol* upper) noexcept : self_(&self), upper_(upper) {
  live_.fetch_add(1, std::memory_order_relaxed);
}

Session::~Session() { live_.fetch_sub(1, std::memory_order_relaxed); }

Status Session::close() { return {}; }

Result<ControlReply> Session::control_any(const ControlQuery& query) {
  // A session knows nothing of its own by default: ask its protocol.
  return self_->control_any(query);
}

Protocol::Protocol(std::string name, std::string kind, std::vector<Protocol*> below)
    : name_(std::move(name)),
      kind_(std::move(kind)),
      below_(std::move(below)),
      counters_(name_),
      drop_no_session_(&counters_.add("drop_no_session", "messages with no session or listener")) {}

Protocol::~Protocol() = default;

Result<SessionRef> Protocol::open(Protocol&, Participants&) { return Errc::unsupported; }

Status Protocol::open_enable(Protocol&, Participants&) { return Errc::unsupported; }

Status Protocol::open_disable(Protocol&, Participants&) { return Errc::unsupported; }

Status Protocol::open_done(Protocol&, Session&, Participants&) { return {}; }

Status Protocol::demux(Session&, Msg) {
  ++drops_no_session();
  return Errc::not_found;
}

Result<ControlReply> Protocol::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetCounters>(query)) return ControlReply{&counters_};
  return Errc::unsupported;
}

}  // namespace xk

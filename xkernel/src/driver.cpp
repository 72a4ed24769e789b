#include "xk/driver.hpp"

namespace xk {

namespace {
class DriverSession final : public Session {
 public:
  DriverSession(Driver& d, Protocol* upper) : Session(d, upper), d_(d) {}
  Status push(Msg msg) override { return d_.send(std::move(msg)); }
  // Nothing sits below a driver.
  Status pop(Session&, Msg) override { return Errc::unsupported; }

 private:
  Driver& d_;
};
}  // namespace

Result<SessionRef> Driver::open(Protocol& upper, Participants&) {
  return SessionRef(make_ref<DriverSession>(*this, &upper));
}

Status Driver::open_enable(Protocol& upper, Participants&) {
  if (receiver_ != nullptr && receiver_ != &upper) return Errc::exists;
  receiver_ = &upper;
  rx_session_ = make_ref<DriverSession>(*this, &upper);
  return {};
}

Status Driver::open_disable(Protocol& upper, Participants&) {
  if (receiver_ != &upper) return Errc::not_found;
  receiver_ = nullptr;
  rx_session_ = nullptr;
  return {};
}

bool Driver::deliver_up(Msg frame) {
  if (receiver_ == nullptr) return false;
  // Keep the session alive across the upcall even if the upper disables us.
  SessionRef rx = rx_session_;
  (void)receiver_->demux(*rx, std::move(frame));
  return true;
}

}  // namespace xk

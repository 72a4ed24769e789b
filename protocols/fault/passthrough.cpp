#include "xk/protocols/passthrough.hpp"

#include <utility>

namespace xk::fault {

namespace {
std::uintptr_t key_of(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }
}  // namespace

// What the protocol below sees as its upper, one per protocol above us.
class PassThrough::Tap final : public Protocol {
 public:
  Tap(PassThrough& owner, Protocol& upper)
      : Protocol(owner.name() + "/" + upper.name(), owner.kind() + "-tap"), owner_(owner), upper_(upper) {}

  Protocol& upper() const noexcept { return upper_; }

  Status open_done(Protocol&, Session& session, Participants& parts) override {
    return owner_.lower_open_done(*this, session, parts);
  }
  Status demux(Session& lower, Msg msg) override { return owner_.lower_demux(*this, lower, std::move(msg)); }
  Result<ControlReply> control_any(const ControlQuery& query) override {
    // ICMP errors from ipv4 are for the transport above us.
    if (std::holds_alternative<ctl::DeliverError>(query)) return upper_.control_any(query);
    return Protocol::control_any(query);
  }

 private:
  PassThrough& owner_;
  Protocol& upper_;
};

// ---- session ------------------------------------------------------------

PassSession::PassSession(PassThrough& proto, Protocol* upper, SessionRef lower)
    : Session(proto, upper), proto_(&proto), lower_(std::move(lower)) {}

Status PassSession::push(Msg msg) {
  if (proto_ == nullptr) return Errc::closed;
  return proto_->on_tx(*this, std::move(msg));
}

Status PassSession::pop(Session&, Msg msg) {
  if (proto_ == nullptr) return Errc::closed;
  return proto_->on_rx(*this, std::move(msg));
}

Status PassSession::close() {
  if (proto_ == nullptr) return Errc::closed;
  SessionRef keep(this);  // the map may hold the last reference
  proto_->forget(*this);
  proto_ = nullptr;
  return lower_->close();
}

// A pass-through layer sees (drops, corrupts, records) frames as the wire
// carries them, so the layers above must not hand it segments for the port
// to cut: segmentation offload stops here.
static Result<ControlReply> without_segmentation(const ControlQuery& query, Result<ControlReply> reply) {
  if (reply && std::holds_alternative<ctl::GetOffloads>(query)) {
    if (auto* o = std::get_if<LinkOffloads>(&*reply)) o->tx_tcp_seg = false;
  }
  return reply;
}

Result<ControlReply> PassSession::control_any(const ControlQuery& query) {
  return without_segmentation(query, lower_->control_any(query));
}

// ---- protocol -----------------------------------------------------------

PassThrough::PassThrough(std::string name, std::string kind, Protocol& below)
    : Protocol(std::move(name), std::move(kind), {&below}), below_(below) {}

PassThrough::~PassThrough() {
  // Uppers may still hold wrappers: they become closed handles.
  by_lower_.for_each([](const LowerKey&, Ref<PassSession>& s) { s->proto_ = nullptr; });
  by_lower_.clear();
}

PassThrough::Tap& PassThrough::tap_for(Protocol& upper) {
  for (auto& t : taps_) {
    if (&t->upper() == &upper) return *t;
  }
  taps_.push_back(std::make_unique<Tap>(*this, upper));
  return *taps_.back();
}

Ref<PassSession> PassThrough::wrap(Protocol& upper, Session& lower) {
  Ref<PassSession> w = make_ref<PassSession>(*this, &upper, SessionRef(&lower));
  by_lower_.insert(LowerKey{key_of(&lower)}, w);
  return w;
}

void PassThrough::forget(PassSession& s) noexcept {
  LowerKey key{key_of(s.lower_.get())};
  if (Ref<PassSession>* w = by_lower_.find(key); w != nullptr && w->get() == &s) by_lower_.erase(key);
}

Result<SessionRef> PassThrough::open(Protocol& upper, Participants& parts) {
  Result<SessionRef> lower = below_.open(tap_for(upper), parts);
  if (!lower) return lower;
  // The layer below may hand out a session it already had (one per peer).
  if (Ref<PassSession>* w = by_lower_.find(LowerKey{key_of(lower->get())})) return SessionRef(*w);
  return SessionRef(wrap(upper, **lower));
}

Status PassThrough::open_enable(Protocol& upper, Participants& parts) {
  return below_.open_enable(tap_for(upper), parts);
}

Status PassThrough::open_disable(Protocol& upper, Participants& parts) {
  return below_.open_disable(tap_for(upper), parts);
}

Result<ControlReply> PassThrough::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetCounters>(query)) return Protocol::control_any(query);
  return without_segmentation(query, below_.control_any(query));
}

Status PassThrough::lower_open_done(Tap& tap, Session& lower, Participants& parts) {
  Ref<PassSession> w = wrap(tap.upper(), lower);
  if (Status st = tap.upper().open_done(*this, *w, parts); !st) {
    forget(*w);
    w->proto_ = nullptr;
    return st;
  }
  return {};
}

Status PassThrough::lower_demux(Tap& tap, Session& lower, Msg msg) {
  Ref<PassSession> w;
  if (Ref<PassSession>* found = by_lower_.find(LowerKey{key_of(&lower)})) {
    w = *found;
  } else {
    w = wrap(tap.upper(), lower);
  }
  return on_rx(*w, std::move(msg));
}

}  // namespace xk::fault

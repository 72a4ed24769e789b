#include "xk/protocols/template.hpp"

#include "xk/protocols/template_wire.hpp"

namespace xk::tmpl {

// ---- session ------------------------------------------------------------

TemplateSession::TemplateSession(TemplateProtocol& proto, Protocol* upper, std::uint16_t tag,
                                 SessionRef lower)
    : Session(proto, upper), proto_(proto), tag_(tag), lower_(std::move(lower)) {}

Status TemplateSession::push(Msg msg) {
  std::size_t total = msg.size() + Header::kSize;
  if (total > 0xffff) return Errc::too_large;
  Result<std::span<std::byte>> room = msg.push(Header::kSize);
  if (!room) return room.status();
  Header{tag_, static_cast<std::uint16_t>(total)}.write(room->first<Header::kSize>());
  ++proto_.tx_msgs_;
  return lower_->push(std::move(msg));
}

Status TemplateSession::pop(Session&, Msg msg) {
  if (upper() == nullptr) return Errc::closed;
  return upper()->demux(*this, std::move(msg));
}

Status TemplateSession::close() {
  // Drop the protocol's reference; the caller's keeps us alive until it lets go.
  proto_.active_.erase(TemplateProtocol::Key{tag_});
  return {};
}

Result<ControlReply> TemplateSession::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetPeerAddr>(query)) {
    Participant p;
    p.push(ProtoNum{tag_});
    return ControlReply{p};
  }
  return proto_.control_any(query);
}

// ---- protocol -----------------------------------------------------------

TemplateProtocol::TemplateProtocol(std::string name, Protocol& below)
    : Protocol(std::move(name), "template", {&below}),
      below_(below),
      rx_msgs_(counters().add("rx_msgs")),
      tx_msgs_(counters().add("tx_msgs")),
      drop_malformed_(counters().add("drop_malformed", "bad header or length")) {}

TemplateProtocol::~TemplateProtocol() {
  if (lower_enabled_) {
    Participants none;
    (void)below_.open_disable(*this, none);
  }
}

Result<SessionRef> TemplateProtocol::lower_session() {
  if (!lower_) {
    Participants none;
    Result<SessionRef> s = below_.open(*this, none);
    if (!s) return s;
    lower_ = *s;
  }
  // Receiving needs the lower layer to hand us what arrives.
  if (!lower_enabled_) {
    Participants none;
    if (Status st = below_.open_enable(*this, none); !st) return st.error();
    lower_enabled_ = true;
  }
  return lower_;
}

Result<SessionRef> TemplateProtocol::open(Protocol& upper, Participants& parts) {
  Result<ProtoNum> tag = parts.remote.pop<ProtoNum>();
  if (!tag) return tag.error();
  if (tag->value > 0xffff) return Errc::invalid_argument;
  Key key{static_cast<std::uint16_t>(tag->value)};
  if (active_.contains(key)) return Errc::exists;
  Result<SessionRef> lower = lower_session();
  if (!lower) return lower;
  SessionRef s = make_ref<TemplateSession>(*this, &upper, key.tag, *lower);
  active_.insert(key, s);
  return s;
}

Status TemplateProtocol::open_enable(Protocol& upper, Participants& parts) {
  Result<ProtoNum> tag = parts.local.pop<ProtoNum>();
  if (!tag) return tag.error();
  if (tag->value > 0xffff) return Errc::invalid_argument;
  Key key{static_cast<std::uint16_t>(tag->value)};
  if (passive_.upper(key) == nullptr) {
    if (Result<SessionRef> lower = lower_session(); !lower) return lower.error();
  }
  return passive_.enable(key, upper);
}

Status TemplateProtocol::open_disable(Protocol& upper, Participants& parts) {
  Result<ProtoNum> tag = parts.local.pop<ProtoNum>();
  if (!tag) return tag.error();
  return passive_.disable(Key{static_cast<std::uint16_t>(tag->value)}, upper);
}

Status TemplateProtocol::demux(Session& lower, Msg msg) {
  Result<std::span<const std::byte>> raw = msg.pop(Header::kSize);
  if (!raw) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  Header h = Header::read(raw->first<Header::kSize>());
  // The length covers the header: anything else is damage, not data.
  if (h.length < Header::kSize || h.length - Header::kSize > msg.size()) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  // Lower layers may pad (Ethernet's 60-byte minimum): keep what we were sent.
  (void)msg.truncate(h.length - Header::kSize);
  Key key{h.tag};
  if (SessionRef* s = active_.find(key)) {
    ++rx_msgs_;
    SessionRef keep = *s;  // the upcall may close the session
    return keep->pop(lower, std::move(msg));
  }
  if (Protocol* upper = passive_.upper(key)) {
    SessionRef s = make_ref<TemplateSession>(*this, upper, key.tag, lower_);
    active_.insert(key, s);
    Participants parts;
    parts.local.push(ProtoNum{key.tag});
    parts.remote.push(ProtoNum{key.tag});
    if (Status st = upper->open_done(*this, *s, parts); !st) {
      // The upper refused the new session: forget it and drop the message.
      active_.erase(key);
      ++drops_no_session();
      return st;
    }
    ++rx_msgs_;
    return s->pop(lower, std::move(msg));
  }
  ++drops_no_session();
  return Errc::not_found;
}

Result<ControlReply> TemplateProtocol::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) {
    Result<std::size_t> mtu = below_.control(ctl::GetMtu{});
    if (!mtu) return mtu.error();
    return ControlReply{*mtu > Header::kSize ? *mtu - Header::kSize : std::size_t{0}};
  }
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) {
    Result<std::size_t> room = below_.control(ctl::GetHeaderRoom{});
    if (!room) return room.error();
    return ControlReply{*room + Header::kSize};
  }
  return Protocol::control_any(query);
}

// ---- graph kind ---------------------------------------------------------

void register_template(Registry& registry) {
  registry.add(KindSpec("template", "tag/length framing, one session per tag (the protocol to copy)")
                   .with_below(1, 1)
                   .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     return std::make_unique<TemplateProtocol>(args.name, *args.below[0]);
                   }));
}

}  // namespace xk::tmpl

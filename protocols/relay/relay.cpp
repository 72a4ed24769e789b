// relay: central mode's streams on the node (xk/protocols/relay.hpp).

#include "xk/protocols/relay.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "xk/protocols/eth_wire.hpp"

namespace xk::relay {

namespace {
constexpr std::uint8_t kTcp = 6;
std::uint32_t clamp32(std::uint64_t v) noexcept { return static_cast<std::uint32_t>(std::min<std::uint64_t>(v, 0xffffffffu)); }
}  // namespace

// ---- RelayConnection ---------------------------------------------------------

RelayConnection::RelayConnection(RelayProtocol& proto)
    : StreamEndpoint(proto, nullptr), proto_(&proto), window_(proto.config().window) {}

RelayConnection::~RelayConnection() = default;

void RelayConnection::notify() {
  if (on_event_) {
    // The callback may drop the last handle but one: keep us alive through it.
    Ref<RelayConnection> keep(this);
    on_event_();
  }
}

void RelayConnection::set_rcvbuf(std::size_t bytes) noexcept {
  // Before the stream opens: the credit it starts with. Later: more credit
  // now (a window is never taken back).
  bytes = std::max<std::size_t>(bytes, 2048);
  if (phase_ == Phase::idle) {
    window_ = bytes;
  } else if (bytes > window_) {
    ungranted_ += bytes - window_;
    window_ = bytes;
    grant(0);
  }
}

Status RelayConnection::connect(IpAddr addr, Port port, IpAddr, Port local_port) {
  if (proto_ == nullptr || phase_ == Phase::done) return Errc::closed;
  if (phase_ != Phase::idle) return Errc::exists;
  if (port.value == 0 || addr.is_unspecified()) return Errc::invalid_argument;
  id_ = kNodeIdBit | (proto_->next_id_++ & ~kNodeIdBit);
  if (id_ == kNodeIdBit) id_ = kNodeIdBit | (proto_->next_id_++ & ~kNodeIdBit);
  std::array<std::byte, ConnectBody::kMaxSize> raw;
  const std::span<const std::byte> body = ConnectBody{addr, port.value, local_port.value}.write(raw);
  rcv_allowed_ = window_;
  if (Status st = proto_->send_control(Op::connect, id_, clamp32(window_), body); !st) return st;
  tuple_.remote = {addr, port.value};
  tuple_.local.port = local_port.value;
  phase_ = Phase::connecting;
  proto_->conns_.emplace(id_, Ref<RelayConnection>(this));
  return {};
}

Status RelayConnection::send_data(Msg chunk) {
  const std::size_t n = chunk.size();
  if (Status st = prepend_header(chunk, Header{kVersion, Op::data, 0, id_, 0}); !st) return st;
  if (Status st = proto_->send_frame(std::move(chunk)); !st) return st;
  credit_ -= n;
  bytes_sent_ += n;
  return {};
}

Result<std::size_t> RelayConnection::write(std::span<const std::byte> bytes, bool /*more*/) {
  if (error_ != Errc::ok) return take_error();
  if (fin_sent_ || phase_ == Phase::done || proto_ == nullptr) return Errc::closed;
  if (phase_ == Phase::idle) return Errc::not_connected;
  if (phase_ == Phase::connecting) return Errc::would_block;
  if (bytes.empty()) return std::size_t{0};
  if (proto_->tx_full()) return Errc::would_block;
  const std::size_t n = std::min<std::size_t>(bytes.size(), credit_);
  if (n == 0) return Errc::would_block;
  std::size_t done = 0;
  while (done < n) {
    const std::size_t k = std::min(n - done, proto_->max_payload());
    if (Status st = send_data(Msg::copy_of(bytes.subspan(done, k), Msg::kDefaultHeadroom)); !st) {
      if (done == 0) return st.error();
      break;
    }
    done += k;
  }
  return done;
}

Status RelayConnection::push(Msg msg) {
  if (proto_ != nullptr && phase_ == Phase::open) {
    const std::size_t frames = (msg.size() + proto_->max_payload() - 1) / proto_->max_payload();
    if (msg.size() > credit_ || frames > proto_->tx_room()) return Errc::would_block;
  }
  return write_msg(msg);
}

Status RelayConnection::write_msg(Msg& msg) {
  if (error_ != Errc::ok) return take_error();
  if (fin_sent_ || phase_ == Phase::done || proto_ == nullptr) return Errc::closed;
  if (phase_ == Phase::idle) return Errc::not_connected;
  if (msg.empty()) return {};
  if (phase_ == Phase::connecting || credit_ == 0 || proto_->tx_full()) return Errc::would_block;
  // As much as the credit and the frame queue allow, as TCP's send buffer
  // takes (a partial write); the chunks share the message's buffers, and
  // what is not sent stays in msg.
  std::size_t allowed = std::min(msg.size(), credit_);
  while (allowed > 0 && !proto_->tx_full()) {
    const std::size_t k = std::min(allowed, proto_->max_payload());
    Msg chunk = std::move(msg);
    if (k < chunk.size()) {
      Result<Msg> rest = chunk.split(k);
      if (!rest) {
        msg = std::move(chunk);
        return rest.error();
      }
      msg = std::move(*rest);
    }
    // A chunk's first buffer is shared with the rest: its header goes in a
    // buffer of its own when there is no room of ours in front.
    if (Status st = send_data(std::move(chunk)); !st) return st;
    allowed -= k;
  }
  return msg.empty() ? Status{} : Status{Errc::would_block};
}

void RelayConnection::grant(std::size_t read) {
  ungranted_ += read;
  if (proto_ == nullptr || phase_ != Phase::open || fin_rcvd_ || ungranted_ == 0) return;
  // Grant in steps of a quarter window (or when nothing is left to read), not
  // per read: one CREDIT frame per many DATA frames.
  if (ungranted_ < window_ / 4 && rcv_bytes_ != 0) return;
  const std::uint32_t g = clamp32(ungranted_);
  if (proto_->send_control(Op::credit, id_, g)) {
    rcv_allowed_ += g;
    ungranted_ -= g;
  }
}

Result<std::size_t> RelayConnection::read(std::span<std::byte> dst) {
  if (!rcvq_.empty()) {
    std::size_t done = 0;
    while (done < dst.size() && !rcvq_.empty()) {
      Msg& m = rcvq_.front();
      const std::size_t k = std::min(dst.size() - done, m.size());
      (void)m.copy_out(0, dst.subspan(done, k));
      done += k;
      if (k == m.size()) {
        rcvq_.pop_front();
      } else {
        (void)m.trim_front(k);
      }
    }
    rcv_bytes_ -= done;
    grant(done);
    return done;
  }
  if (error_ != Errc::ok) return take_error();
  if (fin_rcvd_ || phase_ == Phase::done) return std::size_t{0};
  if (phase_ == Phase::idle) return Errc::not_connected;
  return Errc::would_block;
}

Result<Msg> RelayConnection::read_msg(std::size_t max) {
  if (!rcvq_.empty()) {
    Msg out = std::move(rcvq_.front());
    rcvq_.pop_front();
    if (out.size() > max) {
      Result<Msg> rest = out.split(max);
      if (!rest) return rest.error();
      rcvq_.push_front(std::move(*rest));
    }
    rcv_bytes_ -= out.size();
    grant(out.size());
    return out;
  }
  if (error_ != Errc::ok) return take_error();
  if (fin_rcvd_ || phase_ == Phase::done) return Msg();
  if (phase_ == Phase::idle) return Errc::not_connected;
  return Errc::would_block;
}

Status RelayConnection::shutdown_write() {
  if (phase_ == Phase::idle) return Errc::not_connected;
  if (phase_ == Phase::done || proto_ == nullptr) return Errc::closed;
  if (fin_sent_) return {};
  if (phase_ == Phase::connecting) return Errc::not_connected;
  // In order behind the DATA already queued: the FIN follows the bytes.
  if (Status st = proto_->send_control(Op::fin, id_, 0); !st) return st;
  fin_sent_ = true;
  maybe_finished();
  return {};
}

Status RelayConnection::close_gracefully() {
  user_closed_ = true;
  on_event_ = {};
  if (proto_ == nullptr || phase_ == Phase::idle || phase_ == Phase::done) return {};
  if (phase_ == Phase::connecting) {
    abort();
    return {};
  }
  // Unread bytes are dropped; their credit goes back so filterd can drain
  // the peer until its FIN.
  std::size_t unread = rcv_bytes_;
  rcvq_.clear();
  rcv_bytes_ = 0;
  grant(unread);
  if (!fin_sent_) return shutdown_write();
  return {};
}

void RelayConnection::abort() {
  on_event_ = {};
  if (proto_ == nullptr || phase_ == Phase::idle || phase_ == Phase::done) return;
  (void)proto_->send_control(Op::rst, id_, static_cast<std::uint32_t>(RstCode::aborted));
  rcvq_.clear();
  rcv_bytes_ = 0;
  phase_ = Phase::done;
  proto_->forget(*this);
}

void RelayConnection::end(Errc e) {
  if (phase_ == Phase::connecting || !user_closed_) error_ = e;
  phase_ = Phase::done;
  if (proto_ != nullptr) proto_->forget(*this);
  notify();
}

void RelayConnection::maybe_finished() {
  if (fin_sent_ && fin_rcvd_ && proto_ != nullptr) {
    phase_ = Phase::done;
    proto_->forget(*this);
  }
}

tcp::State RelayConnection::state() const noexcept {
  switch (phase_) {
    case Phase::idle: return tcp::State::closed;
    case Phase::connecting: return tcp::State::syn_sent;
    case Phase::done: return tcp::State::closed;
    case Phase::open: break;
  }
  if (fin_sent_) return fin_rcvd_ ? tcp::State::closed : tcp::State::fin_wait_2;
  return fin_rcvd_ ? tcp::State::close_wait : tcp::State::established;
}

std::uint32_t RelayConnection::events() const noexcept {
  std::uint32_t ev = 0;
  if (!rcvq_.empty() || fin_rcvd_ || error_ != Errc::ok || phase_ == Phase::done) ev |= tcp::ev_readable;
  if (phase_ == Phase::open && !fin_sent_ && credit_ > 0 && proto_ != nullptr && !proto_->tx_full()) {
    ev |= tcp::ev_writable;
  }
  if (error_ != Errc::ok) ev |= tcp::ev_error;
  if (fin_rcvd_ || phase_ == Phase::done) ev |= tcp::ev_hangup;
  return ev;
}

tcp::ConnStats RelayConnection::stats() const noexcept {
  tcp::ConnStats s;
  s.state = state();
  s.snd_wnd = clamp32(credit_);
  s.rcv_wnd = clamp32(rcv_allowed_);
  s.bytes_sent = bytes_sent_;
  s.bytes_acked = bytes_sent_;
  s.bytes_received = bytes_received_;
  return s;
}

void RelayConnection::on_frame(const Parsed& p, Msg payload) {
  const Header& h = p.header;
  switch (h.op) {
    case Op::connected:
      if (phase_ != Phase::connecting) break;
      tuple_ = tcp::FourTuple{{p.tuple->local_addr, p.tuple->local_port}, {p.tuple->remote_addr, p.tuple->remote_port}};
      credit_ += h.arg;
      phase_ = Phase::open;
      notify();
      return;
    case Op::data: {
      if (phase_ != Phase::open || fin_rcvd_) break;
      const std::size_t n = payload.size();
      if (n > rcv_allowed_) {
        // More than we granted: filterd broke the protocol. The stream is
        // beyond repair.
        ++proto_->drop_over_credit_;
        (void)proto_->send_control(Op::rst, id_, static_cast<std::uint32_t>(RstCode::aborted));
        end(Errc::reset);
        return;
      }
      rcv_allowed_ -= n;
      bytes_received_ += n;
      if (user_closed_) {
        grant(n);
        return;
      }
      rcv_bytes_ += n;
      rcvq_.push_back(std::move(payload));
      notify();
      return;
    }
    case Op::credit: {
      if (phase_ != Phase::open && phase_ != Phase::connecting) break;
      const bool was_blocked = credit_ == 0;
      credit_ += h.arg;
      if (was_blocked) notify();
      return;
    }
    case Op::fin:
      if (phase_ != Phase::open || fin_rcvd_) break;
      fin_rcvd_ = true;
      notify();
      maybe_finished();
      return;
    case Op::rst:
      end(errc_of(static_cast<RstCode>(h.arg)));
      return;
    default:
      break;
  }
  ++proto_->drop_malformed_;  // an op this stream cannot take in its state
}

// ---- RelayListener -----------------------------------------------------------

RelayListener::RelayListener(RelayProtocol& proto, IpAddr addr, Port port, std::size_t backlog,
                             PortAuthority* authority)
    : ListenEndpoint(proto, nullptr), proto_(&proto), addr_(addr), port_(port), backlog_(backlog),
      authority_(authority) {}

RelayListener::~RelayListener() { (void)close(); }

Status RelayListener::close() {
  if (proto_ == nullptr) return {};
  RelayProtocol* p = std::exchange(proto_, nullptr);
  p->listeners_.erase(port_.value);
  on_event_ = {};
  // Connections nobody accepted: their peers get a RST through filterd.
  std::deque<Ref<RelayConnection>> q;
  q.swap(accept_q_);
  for (Ref<RelayConnection>& c : q) c->abort();
  if (authority_ != nullptr) authority_->release_listen(kTcp, port_.value);
  return {};
}

Result<Ref<tcp::StreamEndpoint>> RelayListener::accept_stream() {
  if (proto_ == nullptr) return Errc::closed;
  if (accept_q_.empty()) return Errc::would_block;
  Ref<RelayConnection> c = std::move(accept_q_.front());
  accept_q_.pop_front();
  return Ref<tcp::StreamEndpoint>(c);
}

// ---- RelayProtocol -----------------------------------------------------------

RelayProtocol::RelayProtocol(std::string name, Protocol& eth, EventLoop* loop, RelayConfig config)
    : Protocol(std::move(name), "relay", {&eth}),
      eth_(eth),
      loop_(loop),
      config_(config),
      rx_frames_(counters().add("rx_frames")),
      tx_frames_(counters().add("tx_frames")),
      tx_queued_(counters().add("tx_queued", "frames the channel could not take at once (sent later)")),
      drop_malformed_(counters().add("drop_malformed", "relay frames that failed the checks, or an op out of place")),
      drop_unknown_id_(counters().add("drop_unknown_id", "frames for a connection we do not have")),
      drop_over_credit_(counters().add("drop_over_credit", "DATA beyond the credit we granted (stream reset)")),
      opens_refused_(counters().add("opens_refused", "OPENs with no listener or a full accept queue")),
      tx_errors_(counters().add("tx_errors", "frames the channel refused for good")) {
  Participants parts;
  parts.remote.push(config_.peer);
  parts.remote.push(ProtoNum{kEtherType});
  Result<SessionRef> s = eth.open(*this, parts);
  if (!s) throw std::invalid_argument("relay: cannot open a session on '" + eth.name() + "': " + to_string(s.error()));
  tx_ = *s;
  Participants en;
  en.local.push(ProtoNum{kEtherType});
  if (Status st = eth.open_enable(*this, en); !st) {
    (void)tx_->close();
    throw std::invalid_argument("relay: '" + eth.name() + "' refused EtherType 0x88b5: " + to_string(st.error()));
  }
  enabled_ = true;
  Result<std::size_t> mtu = tx_->control(ctl::GetMtu{});
  const std::size_t m = mtu ? *mtu : 1500;
  if (m < Header::kSize + 64) throw std::invalid_argument("relay: the channel's MTU is too small");
  max_payload_ = std::min<std::size_t>(m - Header::kSize, 0xffff);
  if (loop_ != nullptr) loop_->add(*this);
}

RelayProtocol::~RelayProtocol() {
  if (loop_ != nullptr) loop_->remove(*this);
  (void)flush();
  for (auto& [port, l] : listeners_) l->proto_ = nullptr;
  listeners_.clear();
  for (auto& [id, c] : conns_) c->proto_ = nullptr;
  conns_.clear();
  txq_.clear();
  if (enabled_) {
    Participants en;
    en.local.push(ProtoNum{kEtherType});
    (void)eth_.open_disable(*this, en);
  }
  if (tx_) (void)tx_->close();
}

Result<ControlReply> RelayProtocol::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{max_payload_};
  return Protocol::control_any(query);
}

Ref<tcp::StreamEndpoint> RelayProtocol::make_stream() { return make_ref<RelayConnection>(*this); }

Result<Ref<tcp::ListenEndpoint>> RelayProtocol::make_listener(IpAddr addr, Port port, std::size_t backlog,
                                                              PortAuthority* authority) {
  if (port.value == 0) return Errc::invalid_argument;  // the authority gives one
  if (listeners_.count(port.value) != 0) return Errc::exists;
  Ref<RelayListener> l = make_ref<RelayListener>(*this, addr, port, backlog, authority);
  listeners_[port.value] = l.get();
  return Ref<tcp::ListenEndpoint>(l);
}

Status RelayProtocol::send_control(Op op, std::uint32_t id, std::uint32_t arg, std::span<const std::byte> body) {
  Result<Msg> f = make_frame(Header{kVersion, op, 0, id, arg}, body);
  if (!f) return f.error();
  return send_frame(std::move(*f));
}

Status RelayProtocol::send_frame(Msg frame) {
  if (txq_.empty()) {
    // A shared copy goes down: if the channel is full the frame is still ours.
    Status st = tx_->push(frame.share());
    if (st) {
      ++tx_frames_;
      return {};
    }
    if (st.error() != Errc::would_block) {
      ++tx_errors_;
      return st;
    }
  }
  ++tx_queued_;
  txq_.push_back(std::move(frame));
  return {};
}

bool RelayProtocol::flush() {
  const bool was_full = tx_full();
  while (!txq_.empty()) {
    Status st = tx_->push(txq_.front().share());
    if (!st && st.error() == Errc::would_block) break;
    if (st) {
      ++tx_frames_;
    } else {
      ++tx_errors_;
    }
    txq_.pop_front();
  }
  if (was_full && !tx_full()) {
    // Writers that found the queue full may go on.
    std::vector<Ref<RelayConnection>> all;
    for (auto& [id, c] : conns_) all.push_back(c);
    for (Ref<RelayConnection>& c : all) c->notify();
  }
  return txq_.empty();
}

std::size_t RelayProtocol::poll(std::size_t) {
  if (txq_.empty()) return 0;
  const std::size_t before = txq_.size();
  (void)flush();
  return before - txq_.size();
}

bool RelayProtocol::before_sleep() noexcept { return flush(); }

void RelayProtocol::forget(RelayConnection& c) noexcept {
  Ref<RelayConnection> keep(&c);
  conns_.erase(c.id_);
  c.proto_ = nullptr;
}

void RelayProtocol::on_open(const Parsed& p) {
  const std::uint32_t id = p.header.id;
  if ((id & kNodeIdBit) != 0 || conns_.count(id) != 0) {
    ++drop_malformed_;
    return;
  }
  auto it = listeners_.find(p.tuple->local_port);
  if (it == listeners_.end() || it->second->accept_q_.size() >= it->second->backlog_) {
    ++opens_refused_;
    (void)send_control(Op::rst, id, static_cast<std::uint32_t>(RstCode::no_listener));
    return;
  }
  RelayListener& l = *it->second;
  Ref<RelayConnection> c = make_ref<RelayConnection>(*this);
  c->id_ = id;
  c->phase_ = RelayConnection::Phase::open;
  c->tuple_ = tcp::FourTuple{{p.tuple->local_addr, p.tuple->local_port}, {p.tuple->remote_addr, p.tuple->remote_port}};
  c->credit_ = p.header.arg;
  c->rcv_allowed_ = c->window_;
  conns_.emplace(id, c);
  (void)send_control(Op::credit, id, clamp32(c->window_));
  l.accept_q_.push_back(std::move(c));
  if (l.on_event_) l.on_event_();
}

Status RelayProtocol::demux(Session&, Msg msg) {
  ++rx_frames_;
  Result<std::span<const std::byte>> head = msg.peek(std::min(msg.size(), kMaxHead));
  if (!head) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  Result<Parsed> p = parse(*head, msg.size());
  if (!p) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  const Header h = p->header;
  if (h.op == Op::open) {
    on_open(*p);
    return {};
  }
  if (h.op == Op::connect) {  // filterd never sends it
    ++drop_malformed_;
    return Errc::malformed;
  }
  auto it = conns_.find(h.id);
  if (it == conns_.end()) {
    ++drop_unknown_id_;
    return Errc::not_found;
  }
  Msg payload;
  if (h.op == Op::data) {
    (void)msg.pop(Header::kSize);
    (void)msg.truncate(h.length);  // Ethernet padding goes
    payload = std::move(msg);
  }
  Ref<RelayConnection> c = it->second;
  c->on_frame(*p, std::move(payload));
  return {};
}

// ---- graph kind --------------------------------------------------------------

void register_relay(Registry& registry) {
  registry.add(KindSpec("relay", "central mode: TCP streams relayed by filterd over the node's channel")
                   .with_below(1, 1)
                   .with_option(OptionSpec::mac("peer", "filterd's MAC on the channel").mandatory())
                   .with_option(OptionSpec::size("window", 4096, std::size_t{1} << 30,
                                                 "receive credit per connection").defaults_to("256k"))
                   .with_option(OptionSpec::integer("tx_queue", 16, 1 << 20,
                                                    "frames waiting for the channel before writes block")
                                    .defaults_to("1024"))
                   .with_factory([](const BuildArgs& a) -> std::unique_ptr<Protocol> {
                     RelayConfig c;
                     c.peer = a.options.get_mac("peer");
                     c.window = a.options.get_size("window");
                     c.tx_queue_frames = static_cast<std::size_t>(a.options.get_int("tx_queue"));
                     return std::make_unique<RelayProtocol>(a.name, *a.below[0], a.loop, c);
                   }));
}

}  // namespace xk::relay

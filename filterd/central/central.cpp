// Central mode's bridge (xk/filterd/central.hpp).

#include "xk/filterd/central.hpp"

#include <algorithm>
#include <array>

namespace xk::filterd {

using relay::Header;
using relay::Op;
using relay::RstCode;

namespace {
std::uint32_t clamp32(std::uint64_t v) noexcept { return static_cast<std::uint32_t>(std::min<std::uint64_t>(v, 0xffffffffu)); }
}  // namespace

struct Central::Bridge {
  NodeId node = 0;
  std::uint32_t id = 0;
  tcp::TcpSocket sock;
  bool connecting = false;       // the node's CONNECT: not yet established
  std::uint64_t node_credit = 0; // bytes we may send the node
  std::uint64_t granted = 0;     // bytes the node may still send us
  std::deque<Msg> to_tcp;        // the node's bytes the socket has not taken yet
  std::size_t to_tcp_bytes = 0;
  bool fin_from_node = false;
  bool tcp_shut = false;
  bool fin_to_node = false;
  bool dirty = false;
};

Central::Central(tcp::TcpProtocol& tcp, Steer& steer, EventLoop* loop, CentralConfig config)
    : tcp_(tcp),
      steer_(steer),
      loop_(loop),
      config_(config),
      accepted_(counters_.add("accepted", "connections filterd's TCP accepted for a node (OPEN)")),
      connects_(counters_.add("connects", "CONNECTs from nodes")),
      connected_(counters_.add("connected", "of those, established (CONNECTED)")),
      connect_failed_(counters_.add("connect_failed", "of those, refused, timed out or not started (RST)")),
      closed_(counters_.add("closed", "relayed connections that ended with both FINs")),
      rst_to_nodes_(counters_.add("rst_to_nodes", "connections reset towards the node")),
      rst_from_nodes_(counters_.add("rst_from_nodes", "connections a node reset (RST to the peer)")),
      bytes_to_nodes_(counters_.add("bytes_to_nodes", "stream bytes relayed to nodes")),
      bytes_from_nodes_(counters_.add("bytes_from_nodes", "stream bytes relayed from nodes")),
      frames_to_nodes_(counters_.add("frames_to_nodes")),
      frames_queued_(counters_.add("frames_queued", "frames a node's channel could not take at once (sent later)")),
      malformed_(counters_.add("malformed", "relay frames that failed the checks or came out of place")),
      unknown_id_(counters_.add("unknown_id", "relay frames for no connection")),
      over_credit_(counters_.add("over_credit", "DATA beyond the credit granted (connection reset)")),
      no_node_(counters_.add("no_node", "accepted connections nobody listens for any more (RST)")),
      listen_failed_(counters_.add("listen_failed", "ports filterd's TCP could not listen on")),
      aborted_node_gone_(counters_.add("aborted_node_gone", "connections reset because their node went")) {
  steer_.set_central([this](NodeId node, Msg frame) { from_node(node, std::move(frame)); });
  if (loop_ != nullptr) loop_->add(*this);
}

Central::~Central() {
  if (loop_ != nullptr) loop_->remove(*this);
  steer_.set_central({});
  for (auto& [k, b] : bridges_) b->sock.abort();
  bridges_.clear();
  ports_.clear();
}

// ---- the control plane's hooks ---------------------------------------------------

void Central::listened(NodeId node, std::uint16_t port) {
  PortListen& p = ports_[port];
  if (!p.listener.is_open()) {
    // [::], not IPv6-only: the peers of either family filterd has an
    // address of.
    Result<tcp::TcpListener> l = tcp_.listen(IpAddr{}, Port{port}, config_.backlog);
    if (!l) {
      ++listen_failed_;
      ports_.erase(port);
      return;
    }
    p.listener = std::move(*l);
    p.listener.set_on_event([this, port] { accept_dirty_.push_back(port); });
  }
  p.members.insert(node);
}

void Central::unlistened(NodeId node, std::uint16_t port) {
  auto it = ports_.find(port);
  if (it == ports_.end()) return;
  it->second.members.erase(node);
  if (it->second.members.empty()) ports_.erase(it);  // the listener closes: later SYNs get RST
}

void Central::node_gone(NodeId node) {
  for (auto it = ports_.begin(); it != ports_.end();) {
    it->second.members.erase(node);
    it = it->second.members.empty() ? ports_.erase(it) : std::next(it);
  }
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return;
  for (std::uint32_t id : n->second.ids) {
    auto b = bridges_.find(key(node, id));
    if (b == bridges_.end()) continue;
    b->second->sock.abort();  // RST to the peer (RFC 9293 3.10.5)
    ++aborted_node_gone_;
    bridges_.erase(b);
  }
  nodes_.erase(n);
}

// ---- bridges -----------------------------------------------------------------------

Central::Bridge& Central::add_bridge(NodeId node, std::uint32_t id, tcp::TcpSocket sock) {
  auto b = std::make_unique<Bridge>();
  b->node = node;
  b->id = id;
  b->sock = std::move(sock);
  const std::uint64_t k = key(node, id);
  b->sock.set_on_event([this, k] { mark(k); });
  Bridge& ref = *b;
  bridges_[k] = std::move(b);
  nodes_[node].ids.insert(id);
  return ref;
}

void Central::erase(std::uint64_t k) {
  auto it = bridges_.find(k);
  if (it == bridges_.end()) return;
  auto n = nodes_.find(it->second->node);
  if (n != nodes_.end()) n->second.ids.erase(it->second->id);
  bridges_.erase(it);
}

void Central::mark(std::uint64_t k) {
  auto it = bridges_.find(k);
  if (it == bridges_.end() || it->second->dirty) return;
  it->second->dirty = true;
  dirty_.push_back(k);
}

void Central::reset_node_side(Bridge& b, RstCode code) {
  ++rst_to_nodes_;
  (void)send_control(b.node, Op::rst, b.id, static_cast<std::uint32_t>(code));
}

void Central::accept_all(std::uint16_t port) {
  auto p = ports_.find(port);
  if (p == ports_.end()) return;
  for (;;) {
    Result<tcp::TcpSocket> s = p->second.listener.accept();
    if (!s) break;
    const tcp::FourTuple t = s->tuple();
    std::optional<Target> target =
        steer_.filter().listener_for(FlowKey{Proto::tcp, t.remote.addr, t.remote.port, t.local.port});
    if (!target || !steer_.attached(target->node)) {
      ++no_node_;
      s->abort();
      continue;
    }
    std::uint32_t id = next_id_++ & ~relay::kNodeIdBit;
    if (id == 0) id = next_id_++ & ~relay::kNodeIdBit;
    s->set_sndbuf(config_.sndbuf);
    s->set_rcvbuf(config_.rcvbuf);
    Bridge& b = add_bridge(target->node, id, std::move(*s));
    b.granted = config_.sndbuf;
    std::array<std::byte, relay::TupleBody::kMaxSize> raw;
    const auto body = relay::TupleBody{t.local.addr, t.remote.addr, t.local.port, t.remote.port}.write(raw);
    ++accepted_;
    (void)send_control(b.node, Op::open, id, clamp32(b.granted), body);
  }
}

void Central::pump(Bridge& b) {
  const std::uint64_t k = key(b.node, b.id);
  tcp::StreamEndpoint* c = b.sock.endpoint();
  if (c == nullptr) {
    erase(k);
    return;
  }
  if (c->pending_error() != Errc::ok) {
    const Errc e = c->take_error();
    if (b.connecting) ++connect_failed_;
    reset_node_side(b, relay::rst_code_of(e));
    erase(k);
    return;
  }
  if (b.connecting) {
    if (b.sock.state() == tcp::State::syn_sent || b.sock.state() == tcp::State::syn_received) return;
    if (b.sock.state() == tcp::State::closed) {
      ++connect_failed_;
      reset_node_side(b, RstCode::refused);
      erase(k);
      return;
    }
    b.connecting = false;
    ++connected_;
    const tcp::FourTuple t = b.sock.tuple();
    b.granted = config_.sndbuf;
    std::array<std::byte, relay::TupleBody::kMaxSize> raw;
    const auto body = relay::TupleBody{t.local.addr, t.remote.addr, t.local.port, t.remote.port}.write(raw);
    (void)send_control(b.node, Op::connected, b.id, clamp32(b.granted), body);
  }
  // The node's bytes that did not fit before.
  while (!b.to_tcp.empty()) {
    Msg& m = b.to_tcp.front();
    Result<std::span<const std::byte>> bytes = m.peek(std::min<std::size_t>(m.size(), m.fragments()[0].len));
    if (!bytes) break;
    Result<std::size_t> n = b.sock.write(*bytes);
    if (!n || *n == 0) break;
    (void)m.trim_front(*n);
    b.to_tcp_bytes -= *n;
    if (m.size() == 0) b.to_tcp.pop_front();
  }
  // Credit for the node: what the send buffer can take now.
  if (!b.fin_from_node) {
    const std::size_t queued = c->snd_queued() + b.to_tcp_bytes;
    const std::uint64_t room = queued >= config_.sndbuf ? 0 : config_.sndbuf - queued;
    if (room > b.granted && (room - b.granted >= config_.sndbuf / 4 || b.granted == 0)) {
      const std::uint32_t g = clamp32(room - b.granted);
      if (send_control(b.node, Op::credit, b.id, g)) b.granted += g;
    }
  }
  // The peer's bytes, within the node's credit and while its channel keeps up.
  NodeState& ns = nodes_[b.node];
  while (!b.fin_to_node) {
    // Bytes wait for credit; a FIN or an error behind no bytes needs none.
    if (b.node_credit == 0 && c->rcv_queued() != 0) break;
    if (ns.txq.size() >= config_.node_queue) {
      ns.starved.push_back(k);
      break;
    }
    Result<Msg> m = b.sock.read_msg(std::max<std::uint64_t>(1, std::min<std::uint64_t>(b.node_credit, max_payload())));
    if (!m) {
      if (m.error() == Errc::would_block) break;
      reset_node_side(b, relay::rst_code_of(m.error()));
      erase(k);
      return;
    }
    if (m->size() == 0) {
      // The peer's FIN, after all its data (RFC 9293 3.10.7.4, eighth step).
      b.fin_to_node = true;
      (void)send_control(b.node, Op::fin, b.id, 0);
      break;
    }
    const std::size_t n = m->size();
    if (Status st = relay::prepend_header(*m, Header{relay::kVersion, Op::data, 0, b.id, 0}); !st) break;
    b.node_credit -= n;
    bytes_to_nodes_.inc(n);
    (void)send(b.node, std::move(*m));
  }
  if (b.fin_from_node && b.to_tcp.empty() && !b.tcp_shut) {
    (void)b.sock.shutdown_write();
    b.tcp_shut = true;
  }
  if (b.fin_to_node && b.tcp_shut) {
    // Both directions done: TCP finishes its close on its own.
    ++closed_;
    (void)b.sock.close();
    erase(k);
  }
}

void Central::data_from_node(Bridge& b, Msg payload) {
  const std::size_t n = payload.size();
  if (n > b.granted || b.fin_from_node || b.connecting) {
    ++over_credit_;
    reset_node_side(b, RstCode::aborted);
    b.sock.abort();
    erase(key(b.node, b.id));
    return;
  }
  b.granted -= n;
  bytes_from_nodes_.inc(n);
  // One copy, into the send buffer: the channel's mbufs go back at once.
  if (b.to_tcp.empty()) {
    for (const Frag& f : payload.fragments()) {
      if (f.len == 0) continue;
      Result<std::size_t> w = b.sock.write(std::span<const std::byte>(f.data(), f.len));
      const std::size_t took = w ? *w : 0;
      (void)payload.trim_front(took);
      if (took < f.len) break;
    }
  }
  if (payload.size() > 0) {
    b.to_tcp_bytes += payload.size();
    b.to_tcp.push_back(std::move(payload));
  }
}

void Central::from_node(NodeId node, Msg frame) {
  Result<std::span<const std::byte>> head = frame.peek(std::min(frame.size(), relay::kMaxHead));
  if (!head) {
    ++malformed_;
    return;
  }
  Result<relay::Parsed> p = relay::parse(*head, frame.size());
  if (!p) {
    ++malformed_;
    return;
  }
  const Header h = p->header;
  const std::uint64_t k = key(node, h.id);
  if (h.op == Op::connect) {
    if (bridges_.count(k) != 0) {
      ++malformed_;
      return;
    }
    ++connects_;
    tcp::TcpSocket s = tcp_.socket();
    s.set_sndbuf(config_.sndbuf);
    s.set_rcvbuf(config_.rcvbuf);
    const relay::ConnectBody& cb = *p->connect;
    Status st = s.connect(cb.remote_addr, Port{cb.remote_port}, IpAddr{}, Port{cb.local_port});
    if (!st) {
      ++connect_failed_;
      ++rst_to_nodes_;
      (void)send_control(node, Op::rst, h.id, static_cast<std::uint32_t>(relay::rst_code_of(st.error())));
      return;
    }
    Bridge& b = add_bridge(node, h.id, std::move(s));
    b.connecting = true;
    b.node_credit = h.arg;
    return;
  }
  auto it = bridges_.find(k);
  if (it == bridges_.end()) {
    ++unknown_id_;
    return;
  }
  Bridge& b = *it->second;
  switch (h.op) {
    case Op::data: {
      (void)frame.pop(Header::kSize);
      (void)frame.truncate(h.length);
      data_from_node(b, std::move(frame));
      mark(k);
      return;
    }
    case Op::credit:
      b.node_credit += h.arg;
      mark(k);
      return;
    case Op::fin:
      b.fin_from_node = true;
      mark(k);
      return;
    case Op::rst:
      ++rst_from_nodes_;
      b.sock.abort();
      erase(k);
      return;
    default:
      ++malformed_;  // OPEN and CONNECTED are ours to send
      return;
  }
}

// ---- the channel -------------------------------------------------------------------

bool Central::send(NodeId node, Msg frame) {
  NodeState& ns = nodes_[node];
  if (ns.txq.empty()) {
    Status st = steer_.send_relay(node, frame.share());
    if (st) {
      ++frames_to_nodes_;
      return true;
    }
    if (st.error() != Errc::would_block) return false;
  }
  ++frames_queued_;
  ns.txq.push_back(std::move(frame));
  return true;
}

bool Central::send_control(NodeId node, Op op, std::uint32_t id, std::uint32_t arg, std::span<const std::byte> body) {
  Result<Msg> f = relay::make_frame(Header{relay::kVersion, op, 0, id, arg}, body);
  if (!f) return false;
  return send(node, std::move(*f));
}

void Central::flush(NodeId node, NodeState& ns) {
  while (!ns.txq.empty()) {
    Status st = steer_.send_relay(node, ns.txq.front().share());
    if (!st && st.error() == Errc::would_block) break;
    if (st) ++frames_to_nodes_;
    ns.txq.pop_front();
  }
  if (ns.txq.size() < config_.node_queue && !ns.starved.empty()) {
    std::vector<std::uint64_t> s;
    s.swap(ns.starved);
    for (std::uint64_t k : s) mark(k);
  }
}

std::size_t Central::poll(std::size_t) {
  std::size_t work = 0;
  for (auto& [node, ns] : nodes_) {
    if (!ns.txq.empty() || !ns.starved.empty()) {
      const std::size_t before = ns.txq.size();
      flush(node, ns);
      work += before - ns.txq.size();
    }
  }
  if (!accept_dirty_.empty()) {
    std::vector<std::uint16_t> ports;
    ports.swap(accept_dirty_);
    std::sort(ports.begin(), ports.end());
    ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
    for (std::uint16_t p : ports) accept_all(p);
    work += ports.size();
  }
  // Pumping may mark more (its own reads and writes raise events): those
  // wait for the next pass.
  std::vector<std::uint64_t> keys;
  keys.swap(dirty_);
  for (std::uint64_t k : keys) {
    auto it = bridges_.find(k);
    if (it == bridges_.end()) continue;
    it->second->dirty = false;
    pump(*it->second);
    ++work;
  }
  return work;
}

bool Central::before_sleep() noexcept {
  if (!dirty_.empty() || !accept_dirty_.empty()) return false;
  for (auto& [node, ns] : nodes_) {
    if (!ns.txq.empty()) return false;
  }
  return true;
}

}  // namespace xk::filterd

// filterd's control socket (xk/filterd/control_server.hpp).

#include "xk/filterd/control_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "xk/address.hpp"

namespace xk::filterd {

namespace {
constexpr std::uint64_t kListenTag = ~std::uint64_t{0};
constexpr std::uint64_t kTcpListenTag = ~std::uint64_t{0} - 1;
// Reads of one connection per pass: a peer that floods gets this much of
// filterd's attention before the others get theirs.
constexpr int kReadChunks = 4;
constexpr std::size_t kChunk = 16384;
constexpr std::chrono::milliseconds kHousekeeping{100};
// A connection being closed whose peer does not take the last ERROR.
constexpr std::chrono::seconds kClosingLinger{1};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("control socket: " + what + ": " + std::strerror(errno));
}

void set_int(int fd, int level, int opt, int v) { (void)::setsockopt(fd, level, opt, &v, sizeof v); }
}  // namespace

ControlServer::ControlServer(EventLoop& loop, NodeRegistry& registry, Config config)
    : loop_(loop),
      registry_(registry),
      config_(std::move(config)),
      accepted_(counters_.add("accepted")),
      refused_creds_(counters_.add("refused_creds", "connections from a user other than root or filterd's")),
      messages_(counters_.add("messages")),
      bad_messages_(counters_.add("bad_messages", "requests answered with ERROR by the codec")),
      dropped_streams_(counters_.add("dropped_streams", "connections closed for a broken stream")),
      closed_(counters_.add("closed")),
      tcp_accepted_(counters_.add("tcp_accepted", "TCP control connections accepted")),
      refused_peer_limit_(counters_.add("refused_peer_limit", "TCP connections over the per-address limit")),
      refused_token_(counters_.add("refused_token", "TCP connections closed for no proof, a wrong one, or a token sent in clear")),
      refused_replay_(counters_.add("refused_replay", "TCP connections closed for replaying a node's earlier proof")),
      auth_timeouts_(counters_.add("auth_timeouts", "TCP connections closed for saying no HELLO in time")),
      heartbeat_lost_(counters_.add("heartbeat_lost", "TCP connections silent for three heartbeats")),
      dropped_nodes_(counters_.add("dropped_nodes", "connections closed because the node's channel went down")) {
  if (config_.path.empty() && config_.tcp.empty()) throw std::runtime_error("control socket: no path and no TCP address");
  if (!config_.tcp.empty() && config_.token.empty()) {
    throw std::runtime_error("control socket: TCP needs a token (nothing else says who a TCP peer is)");
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) fail("epoll_create1");
  if (!config_.path.empty()) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (config_.path.size() >= sizeof addr.sun_path) {
      ::close(epoll_fd_);
      throw std::runtime_error("control socket: the path must be 1.." + std::to_string(sizeof addr.sun_path - 1) +
                               " bytes");
    }
    std::memcpy(addr.sun_path, config_.path.c_str(), config_.path.size() + 1);
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) fail("socket");
    // A file left by a filterd that died is stale; a live one answers connect.
    int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
      bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      ::close(probe);
      if (live) {
        ::close(listen_fd_);
        ::close(epoll_fd_);
        throw std::runtime_error("control socket: another filterd answers on " + config_.path);
      }
    }
    ::unlink(config_.path.c_str());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      int e = errno;
      ::close(listen_fd_);
      ::close(epoll_fd_);
      errno = e;
      fail("bind " + config_.path);
    }
    ::chmod(config_.path.c_str(), config_.mode);
    if (::listen(listen_fd_, 128) != 0) fail("listen");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenTag;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) fail("epoll_ctl");
  }
  if (!config_.tcp.empty()) open_tcp();
  housekeeping_.emplace(loop_.timers(), [s = this] { s->housekeeping(); });
  housekeeping_->arm_after(kHousekeeping);
  loop_.add(*this);
}

void ControlServer::open_tcp() {
  const auto colon = config_.tcp.rfind(':');
  Result<Ipv4Addr> a = colon == std::string::npos ? Result<Ipv4Addr>(Errc::invalid_argument)
                                                  : parse_ipv4(std::string_view(config_.tcp).substr(0, colon));
  char* end = nullptr;
  const long port = colon == std::string::npos ? -1 : std::strtol(config_.tcp.c_str() + colon + 1, &end, 10);
  if (!a || port < 0 || port > 65535 || end == config_.tcp.c_str() + colon + 1 || *end != '\0') {
    throw std::runtime_error("control socket: TCP address '" + config_.tcp + "' is not A.B.C.D:PORT");
  }
  tcp_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (tcp_fd_ < 0) fail("socket (TCP)");
  set_int(tcp_fd_, SOL_SOCKET, SO_REUSEADDR, 1);  // a restarted filterd binds at once (TIME-WAIT)
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(a->value);
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(tcp_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) fail("bind " + config_.tcp);
  if (::listen(tcp_fd_, 128) != 0) fail("listen (TCP)");
  socklen_t len = sizeof sa;
  if (::getsockname(tcp_fd_, reinterpret_cast<sockaddr*>(&sa), &len) == 0) tcp_port_ = ntohs(sa.sin_port);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTcpListenTag;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, tcp_fd_, &ev) != 0) fail("epoll_ctl");
}

ControlServer::~ControlServer() {
  loop_.remove(*this);
  housekeeping_.reset();
  while (!conns_.empty()) close_conn(conns_.begin()->first);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (tcp_fd_ >= 0) ::close(tcp_fd_);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(config_.path.c_str());
  }
}

std::size_t ControlServer::poll(std::size_t budget) {
  if (quiet_looks_ >= kQuietLooks && ++skipped_ < kLookEvery) return 0;
  skipped_ = 0;
  epoll_event events[32];
  int n = ::epoll_wait(epoll_fd_, events, static_cast<int>(std::min<std::size_t>(budget, 32)), 0);
  if (n > 0) {
    quiet_looks_ = 0;
  } else if (quiet_looks_ < kQuietLooks) {
    ++quiet_looks_;
  }
  std::size_t work = 0;
  for (int i = 0; i < n; ++i) {
    ++work;
    if (events[i].data.u64 == kListenTag) {
      accept_all();
      continue;
    }
    if (events[i].data.u64 == kTcpListenTag) {
      accept_tcp();
      continue;
    }
    const int fd = static_cast<int>(events[i].data.u64);
    auto it = conns_.find(fd);
    if (it == conns_.end()) continue;
    Conn& c = *it->second;
    if (events[i].events & EPOLLOUT) flush(c);
    if (conns_.count(fd) != 0 && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_readable(c);
  }
  return work;
}

void ControlServer::add_conn(int fd, pid_t pid, bool tcp, std::uint32_t peer) {
  auto c = std::make_unique<Conn>();
  c->fd = fd;
  c->pid = pid;
  c->tcp = tcp;
  c->authed = !tcp;
  c->peer = peer;
  c->opened = c->last_rx = loop_.clock().now();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<std::uint64_t>(fd);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return;
  }
  if (tcp) ++per_peer_[peer];
  conns_.emplace(fd, std::move(c));
  ++accepted_;
}

void ControlServer::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a peer that gave up already
    ucred cred{};
    socklen_t len = sizeof cred;
    // Only root or filterd's own user may steer traffic (the file's mode is
    // the first gate; this one holds even if it was loosened).
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != 0 && cred.uid != ::geteuid()) || conns_.size() >= config_.max_connections) {
      ++refused_creds_;
      ::close(fd);
      continue;
    }
    add_conn(fd, cred.pid, false, 0);
  }
}

void ControlServer::accept_tcp() {
  for (;;) {
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    int fd = ::accept4(tcp_fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    const std::uint32_t peer = ntohl(sa.sin_addr.s_addr);
    auto it = per_peer_.find(peer);
    if (conns_.size() >= config_.max_connections || (it != per_peer_.end() && it->second >= config_.max_per_peer)) {
      ++refused_peer_limit_;
      ::close(fd);
      continue;
    }
    set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);  // one small request, one small reply
    set_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
    set_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, static_cast<int>(config_.keepalive_idle.count()));
    set_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, static_cast<int>(config_.keepalive_interval.count()));
    set_int(fd, IPPROTO_TCP, TCP_KEEPCNT, config_.keepalive_probes);
    // Replies that stay unacknowledged (the host vanished mid-exchange) give
    // up in the same time as the keepalive probes (RFC 5482).
    set_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT,
            static_cast<int>((config_.keepalive_idle + config_.keepalive_interval * config_.keepalive_probes).count() *
                             1000));
    ++tcp_accepted_;
    add_conn(fd, 0, true, peer);
  }
}

void ControlServer::on_readable(Conn& c) {
  const int fd = c.fd;
  std::byte buf[kChunk];
  for (int round = 0; round < kReadChunks; ++round) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      c.last_rx = loop_.clock().now();
      if (c.closing) continue;  // the ERROR is on its way; the rest is not read
      c.reader.feed(std::span<const std::byte>(buf, static_cast<std::size_t>(n)));
      process(c);
      if (static_cast<std::size_t>(n) < sizeof buf) break;  // drained
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    close_conn(fd);  // the peer is gone: so is its node
    return;
  }
  flush(c);
}

namespace {
constexpr std::size_t kRememberedProofs = 1024;
}  // namespace

bool ControlServer::seen_proof(const ctl::Proof& p) const noexcept {
  for (const ctl::Proof& q : accepted_proofs_) {
    if (ctl::proofs_equal(p, q)) return true;
  }
  return false;
}

void ControlServer::remember_proof(const ctl::Proof& p) {
  if (accepted_proofs_.size() == kRememberedProofs) accepted_proofs_.pop_front();
  accepted_proofs_.push_back(p);
}

ControlServer::Verdict ControlServer::authenticate(Conn& c, const ctl::Message& m) {
  if (const auto* a = std::get_if<ctl::Auth>(&m.body); a != nullptr && !c.nonces) {
    // Our answer proves we know the token too, over the node's nonce, so a
    // node cannot be fooled by a filterd that does not.
    const Conn::Nonces& n = c.nonces.emplace(Conn::Nonces{a->nonce, ctl::fresh_nonce()});
    const ctl::AuthReply reply{n.ours, ctl::server_proof(config_.token, n.node, n.ours)};
    (void)ctl::encode_into(ctl::Message{m.request_id, reply}, c.out);
    return {.answered = true};
  }
  const auto* h = std::get_if<ctl::Hello>(&m.body);
  if (h == nullptr) return {c.nonces ? "after AUTH, HELLO with the proof" : "over TCP the first request is AUTH"};
  if (!h->token.empty()) return {"the token is never sent: prove it with AUTH and HELLO's proof"};
  if (!c.nonces) return {"over TCP, AUTH comes before HELLO"};
  if (!h->proof) return {"no proof: over TCP, HELLO must carry the proof of the token"};
  if (!ctl::proofs_equal(*h->proof, ctl::node_proof(config_.token, c.nonces->node, c.nonces->ours))) {
    if (seen_proof(*h->proof)) return {"replayed proof", true};
    return {"wrong proof"};
  }
  remember_proof(*h->proof);
  return {};
}

void ControlServer::process(Conn& c) {
  for (;;) {
    ctl::ReadResult r = c.reader.next();
    if (r.need_more()) break;
    if (r.has_error()) {
      const ctl::ProtocolError& e = r.error();
      if (ctl::should_answer(e)) {
        ++bad_messages_;
        (void)ctl::encode_into(ctl::make_error(e), c.out);
      }
      if (e.must_drop()) {
        ++dropped_streams_;
        c.closing = true;
        break;
      }
      continue;
    }
    ++messages_;
    const ctl::Message& m = r.message();
    if (std::holds_alternative<ctl::Ping>(m.body)) c.pinged = true;
    if (!c.authed) {
      // TCP: AUTH, then a HELLO with the right proof; nothing else, and
      // nothing at all after a bad one (the peer may try again on a new
      // connection, with new nonces).
      const Verdict v = authenticate(c, m);
      if (v.refused != nullptr) {
        ++(v.replay ? refused_replay_ : refused_token_);
        (void)ctl::encode_into(ctl::make_error(m.request_id, ctl::ErrorCode::permission_denied, v.refused), c.out);
        c.closing = true;
        break;
      }
      if (v.answered) continue;
    }
    ctl::Message reply = registry_.handle(m, c.node, c.tcp ? 0 : static_cast<std::uint32_t>(c.pid));
    if (c.node != 0) c.authed = true;
    if (Status st = ctl::encode_into(reply, c.out); !st) {
      (void)ctl::encode_into(ctl::make_error(m.request_id, ctl::ErrorCode::internal, "reply too large"), c.out);
    }
  }
}

void ControlServer::flush(Conn& c) {
  const int fd = c.fd;
  std::size_t done = 0;
  while (done < c.out.size()) {
    ssize_t n = ::send(fd, c.out.data() + done, c.out.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    close_conn(fd);
    return;
  }
  c.out.erase(c.out.begin(), c.out.begin() + static_cast<std::ptrdiff_t>(done));
  if (c.out.size() > config_.max_pending_output) {
    close_conn(fd);  // it does not read its replies
    return;
  }
  if (c.out.empty() && c.closing) {
    close_conn(fd);
    return;
  }
  want_output(c, !c.out.empty());
}

void ControlServer::want_output(Conn& c, bool on) {
  // Asked only when it changes: every request's answer comes through here.
  if (c.polling_out == on) return;
  c.polling_out = on;
  epoll_event ev{};
  ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
  ev.data.u64 = static_cast<std::uint64_t>(c.fd);
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void ControlServer::housekeeping() {
  const Time now = loop_.clock().now();
  std::vector<int> doomed;
  for (const auto& [fd, c] : conns_) {
    if (c->closing && now - c->opened > kClosingLinger && now - c->last_rx > kClosingLinger) {
      doomed.push_back(fd);
    } else if (!c->authed && now - c->opened > config_.auth_timeout) {
      ++auth_timeouts_;
      doomed.push_back(fd);
    } else if (c->tcp && c->pinged && config_.heartbeat.count() != 0 && now - c->last_rx > 3 * config_.heartbeat) {
      ++heartbeat_lost_;
      doomed.push_back(fd);
    }
  }
  for (int fd : doomed) close_conn(fd);
  housekeeping_->arm_after(kHousekeeping);
}

void ControlServer::drop_node(NodeId node) {
  for (const auto& [fd, c] : conns_) {
    if (c->node == node) {
      ++dropped_nodes_;
      close_conn(fd);
      return;
    }
  }
}

void ControlServer::close_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  std::unique_ptr<Conn> c = std::move(it->second);
  conns_.erase(it);
  if (c->tcp) {
    auto p = per_peer_.find(c->peer);
    if (p != per_peer_.end() && --p->second == 0) per_peer_.erase(p);
  }
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  ++closed_;
  if (c->node != 0) registry_.node_gone(c->node);
}

}  // namespace xk::filterd

// filterd's control socket (xk/filterd/control_server.hpp).

#include "xk/filterd/control_server.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace xk::filterd {

namespace {
constexpr std::uint64_t kListenTag = ~std::uint64_t{0};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("control socket: " + what + ": " + std::strerror(errno));
}
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
      closed_(counters_.add("closed")) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (config_.path.empty() || config_.path.size() >= sizeof addr.sun_path) {
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
      throw std::runtime_error("control socket: another filterd answers on " + config_.path);
    }
  }
  ::unlink(config_.path.c_str());
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int e = errno;
    ::close(listen_fd_);
    errno = e;
    fail("bind " + config_.path);
  }
  ::chmod(config_.path.c_str(), config_.mode);
  if (::listen(listen_fd_, 128) != 0) fail("listen");
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) fail("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) fail("epoll_ctl");
  loop_.add(*this);
}

ControlServer::~ControlServer() {
  loop_.remove(*this);
  while (!conns_.empty()) close_conn(conns_.begin()->first);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::unlink(config_.path.c_str());
}

std::size_t ControlServer::poll(std::size_t budget) {
  epoll_event events[32];
  int n = ::epoll_wait(epoll_fd_, events, static_cast<int>(std::min<std::size_t>(budget, 32)), 0);
  std::size_t work = 0;
  for (int i = 0; i < n; ++i) {
    ++work;
    if (events[i].data.u64 == kListenTag) {
      accept_all();
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
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->pid = cred.pid;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<std::uint64_t>(fd);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    conns_.emplace(fd, std::move(c));
    ++accepted_;
  }
}

void ControlServer::on_readable(Conn& c) {
  const int fd = c.fd;
  std::byte buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      c.reader.feed(std::span<const std::byte>(buf, static_cast<std::size_t>(n)));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close_conn(fd);  // the peer is gone: so is its node
      return;
    }
    if (errno == EAGAIN) break;
  }
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
    ctl::Message reply = registry_.handle(r.message(), c.node, static_cast<std::uint32_t>(c.pid));
    if (Status st = ctl::encode_into(reply, c.out); !st) {
      (void)ctl::encode_into(ctl::make_error(r.message().request_id, ctl::ErrorCode::internal, "reply too large"),
                             c.out);
    }
  }
  flush(c);
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
  epoll_event ev{};
  ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
  ev.data.u64 = static_cast<std::uint64_t>(c.fd);
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void ControlServer::close_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  std::unique_ptr<Conn> c = std::move(it->second);
  conns_.erase(it);
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  ++closed_;
  if (c->node != 0) registry_.node_gone(c->node);
}

}  // namespace xk::filterd

// A node's control connection to filterd (xk/filterd_client.hpp).

#include "xk/filterd_client.hpp"

#include "xk/graph.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace xk {

namespace fc = filterd::ctl;

namespace {
Errc errc_of(fc::ErrorCode code) noexcept {
  switch (code) {
    case fc::ErrorCode::port_in_use:
    case fc::ErrorCode::no_ports: return Errc::exists;
    case fc::ErrorCode::permission_denied: return Errc::bad_state;
    case fc::ErrorCode::not_found: return Errc::not_found;
    case fc::ErrorCode::too_many: return Errc::no_memory;
    default: return Errc::invalid_argument;
  }
}
}  // namespace

std::unique_ptr<FilterdClient> FilterdClient::connect(const std::string& path, const std::string& name,
                                                      std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) throw std::runtime_error("filterd: bad socket path '" + path + "'");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("filterd: socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error("filterd: cannot connect to " + path + ": " + std::strerror(e));
  }
  std::unique_ptr<FilterdClient> c(new FilterdClient(fd, timeout));
  fc::Hello h;
  h.name = name.substr(0, fc::kMaxNodeName);
  if (h.name.empty()) h.name = "node";
  h.pid = static_cast<std::uint32_t>(::getpid());
  h.queues = 1;
  Result<fc::Message> r = c->request(h);
  if (!r) throw std::runtime_error(std::string("filterd: no answer to HELLO: ") + to_string(r.error()));
  if (const auto* e = std::get_if<fc::Error>(&r->body)) {
    throw std::runtime_error(std::string("filterd refused us: ") + fc::to_string(e->code) + ": " + e->text);
  }
  const auto* hr = std::get_if<fc::HelloReply>(&r->body);
  if (hr == nullptr || hr->channels.empty()) throw std::runtime_error("filterd: HELLO answered with something else");
  c->hello_ = *hr;
  return c;
}

FilterdClient::~FilterdClient() {
  (void)request(fc::Bye{});
  ::close(fd_);
}

Status FilterdClient::send_all(const std::vector<std::byte>& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errc::closed;
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Result<fc::Message> FilterdClient::request(fc::Body body) {
  const std::uint32_t id = next_id_++;
  Result<std::vector<std::byte>> bytes = fc::encode(fc::Message{id, std::move(body)});
  if (!bytes) return bytes.error();
  if (Status st = send_all(*bytes); !st) return st.error();
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    fc::ReadResult r = reader_.next();
    if (r.has_message()) {
      if (r.message().request_id == id) return std::move(r.message());
      continue;  // a late reply to a request that timed out
    }
    if (r.has_error() && r.error().must_drop()) return Errc::malformed;
    if (r.has_error()) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Errc::timed_out;
    pollfd p{fd_, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errc::timed_out;
    std::byte buf[8192];
    ssize_t got = ::read(fd_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Errc::closed;
    reader_.feed(std::span<const std::byte>(buf, static_cast<std::size_t>(got)));
  }
}

std::string FilterdClient::graph_spec(const std::string& tcp_opts) const {
  const fc::Channel& ch = hello_.channels.front();
  std::ostringstream g;
  g << "dpdk net0 devargs="
    << spec_value("net_memif0,role=client,id=" + std::to_string(ch.memif_id) + ",socket=" + hello_.memif_socket)
    << " mtu=" << hello_.mtu;
  // Central mode: relay frames are never dropped (a full ring waits).
  if (hello_.central) g << " tx_keep=on";
  g << "\n";
  g << "eth  eth0 below=net0 mac=" << to_string(ch.node_mac) << "\n";
  g << "arp  arp0 below=eth0\n";
  g << "ipv4 ip0  below=eth0,arp0 addr=" << to_string(hello_.address) << "/" << int{hello_.prefix_len};
  if (hello_.gateway.value != 0) g << " gw=" << to_string(hello_.gateway);
  g << "\n";
  g << "icmp icmp0 below=ip0\n";
  g << "udp  udp0 below=ip0\n";
  char hex[33];
  for (std::size_t i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned>(hello_.secret[i]));
  if (hello_.central) {
    // filterd runs TCP; our sockets are its relayed streams (UDP stays ours).
    g << "relay relay0 below=eth0 peer=" << to_string(hello_.filterd_mac) << "\n";
    g << "tcp  tcp0 below=relay0 backend=relay secret=" << hex;
  } else {
    g << "tcp  tcp0 below=ip0 secret=" << hex;
  }
  if (!tcp_opts.empty()) g << " " << tcp_opts;
  g << "\n";
  return g.str();
}

Result<std::uint16_t> FilterdClient::claim_listen(std::uint8_t proto, std::uint16_t port, bool group) {
  fc::Listen l;
  l.proto = proto == 17 ? fc::Proto::udp : fc::Proto::tcp;
  l.port = port;
  l.group = group;
  Result<fc::Message> r = request(l);
  if (!r) return r.error();
  if (const auto* ok = std::get_if<fc::ListenReply>(&r->body)) return ok->port;
  if (const auto* e = std::get_if<fc::Error>(&r->body)) return errc_of(e->code);
  return Errc::malformed;
}

void FilterdClient::release_listen(std::uint8_t proto, std::uint16_t port) noexcept {
  try {
    (void)request(fc::Unlisten{proto == 17 ? fc::Proto::udp : fc::Proto::tcp, port});
  } catch (...) {
    // Out of memory while encoding: filterd frees the port when we go.
  }
}

Result<std::uint16_t> FilterdClient::claim_connect(std::uint8_t proto, std::uint16_t local_port, Ipv4Addr remote,
                                                   std::uint16_t remote_port) {
  fc::Connect c;
  c.proto = proto == 17 ? fc::Proto::udp : fc::Proto::tcp;
  c.remote_addr = remote;
  c.remote_port = remote_port;
  c.local_port = local_port;
  Result<fc::Message> r = request(c);
  if (!r) return r.error();
  if (const auto* ok = std::get_if<fc::ConnectReply>(&r->body)) return ok->local_port;
  if (const auto* e = std::get_if<fc::Error>(&r->body)) return errc_of(e->code);
  return Errc::malformed;
}

void FilterdClient::release_connect(std::uint8_t proto, std::uint16_t local_port, Ipv4Addr remote,
                                    std::uint16_t remote_port) noexcept {
  try {
    (void)request(fc::Release{proto == 17 ? fc::Proto::udp : fc::Proto::tcp, local_port, remote, remote_port});
  } catch (...) {
  }
}

}  // namespace xk

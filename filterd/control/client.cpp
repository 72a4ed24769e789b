// A node's control connection to filterd (xk/filterd_client.hpp).

#include "xk/filterd_client.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <thread>

#include "xk/driver.hpp"
#include "xk/filterd/token.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

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

void set_int(int fd, int level, int opt, int v) { (void)::setsockopt(fd, level, opt, &v, sizeof v); }

// "tcp:HOST:PORT" or "HOST:PORT" -> (HOST, PORT); HOST may be [v6].
bool split_tcp(const std::string& where, std::string& host, std::string& port) {
  std::string rest = where.rfind("tcp:", 0) == 0 ? where.substr(4) : where;
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) return false;
  host = rest.substr(0, colon);
  port = rest.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return port.find_first_not_of("0123456789") == std::string::npos;
}

// A connected TCP socket to filterd, within `timeout`, or -1 and errno. The
// kernel keeps probing it, so a host of filterd's that vanishes is noticed
// even while the node has nothing to ask.
int dial_tcp(const std::string& where, std::chrono::milliseconds timeout, int& err) {
  std::string host, port;
  if (!split_tcp(where, host, port)) {
    err = EINVAL;
    return -1;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    err = EHOSTUNREACH;
    return -1;
  }
  int fd = -1;
  err = ECONNREFUSED;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
      int so = ETIMEDOUT;
      socklen_t len = sizeof so;
      if (rc == 1) (void)::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
      errno = so;
      rc = so == 0 ? 0 : -1;
    }
    if (rc != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return -1;
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // requests block (with poll's timeout)
  set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);
  set_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
  set_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, 2);
  set_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, 1);
  set_int(fd, IPPROTO_TCP, TCP_KEEPCNT, 3);
  set_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, 5000);
  return fd;
}

// A connected Unix stream socket to `path`, or errno.
int dial(const std::string& path, int& err) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    err = ENAMETOOLONG;
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  // A Unix socket connects at once or not at all (ENOENT: no filterd yet;
  // ECONNREFUSED: the file of a dead one).
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    err = errno;
    ::close(fd);
    return -1;
  }
  return fd;
}

fc::Proto proto_of(std::uint8_t p) noexcept { return p == 17 ? fc::Proto::udp : fc::Proto::tcp; }

// A reconnection's requests are answered by a fresh filterd in
// milliseconds; one that accepted and hangs must not hold the stack long.
constexpr std::chrono::milliseconds kReconnectTimeout{3000};
// Look at the control socket every this many loop passes (a system call).
constexpr std::uint32_t kCheckEvery = 4096;
}  // namespace

// Stack q's door to the shared connection: its port operations carry q.
class FilterdClient::QueuePort final : public PortAuthority {
 public:
  QueuePort(FilterdClient& c, std::uint16_t q) : c_(c), q_(q) {}
  Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool group) override {
    return c_.claim_listen_on(q_, proto, port, group);
  }
  void release_listen(std::uint8_t proto, std::uint16_t port) noexcept override { c_.release_listen_on(q_, proto, port); }
  Result<std::uint16_t> claim_connect(std::uint8_t proto, std::uint16_t local_port, const IpAddr& remote,
                                      std::uint16_t remote_port) override {
    return c_.claim_connect_on(q_, proto, local_port, remote, remote_port);
  }
  void release_connect(std::uint8_t proto, std::uint16_t local_port, const IpAddr& remote,
                       std::uint16_t remote_port) noexcept override {
    c_.release_connect_on(q_, proto, local_port, remote, remote_port);
  }

 private:
  FilterdClient& c_;
  std::uint16_t q_;
};

FilterdClient::FilterdClient(std::string path, std::string name, Options options)
    : path_(std::move(path)), name_(std::move(name)), options_(options) {
  if (options_.queues == 0 || options_.queues > fc::kMaxQueues) {
    throw std::invalid_argument("filterd: " + std::to_string(options_.queues) + " stacks; a node runs 1.." +
                                std::to_string(fc::kMaxQueues));
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw std::runtime_error(std::string("filterd: epoll_create1: ") + std::strerror(errno));
  attached_.resize(options_.queues);
  for (std::uint16_t q = 1; q < options_.queues; ++q) ports_.push_back(std::make_unique<QueuePort>(*this, q));
}

PortAuthority& FilterdClient::queue(std::uint16_t q) {
  if (q >= options_.queues) throw std::out_of_range("filterd: no queue " + std::to_string(q));
  if (q == 0) return *this;
  return *ports_[q - 1u];
}

bool FilterdClient::is_tcp(const std::string& where) {
  if (where.rfind("tcp:", 0) == 0) return true;
  std::string host, port;
  return where.find('/') == std::string::npos && split_tcp(where, host, port);
}

FilterdClient::Options FilterdClient::options_from_env() {
  Options o;
  if (const char* v = std::getenv("XK_FILTERD_TOKEN"); v != nullptr && *v != '\0') {
    o.token = filterd::read_token_file(v);
  }
  if (const char* v = std::getenv("XK_FILTERD_RECONNECT_MS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    long long ms = std::strtoll(v, &end, 10);
    if (end == nullptr || *end != '\0' || ms < 0) {
      throw std::runtime_error(std::string("XK_FILTERD_RECONNECT_MS: '") + v + "' is not a number of milliseconds");
    }
    o.reconnect_for = std::chrono::milliseconds(ms);
  }
  if (const char* v = std::getenv("XK_FILTERD_LEASE"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    long long n = std::strtoll(v, &end, 10);
    if (end == nullptr || *end != '\0' || n < 0 || n > static_cast<long long>(fc::kMaxLeasePorts)) {
      throw std::runtime_error(std::string("XK_FILTERD_LEASE: '") + v + "' is not a number of ports in 0.." +
                               std::to_string(fc::kMaxLeasePorts));
    }
    o.lease_block = static_cast<std::uint16_t>(n);
  }
  return o;
}

std::unique_ptr<FilterdClient> FilterdClient::connect(const std::string& path, const std::string& name,
                                                      Options options) {
  const bool tcp = is_tcp(path);
  if (tcp && options.node_port.empty()) {
    throw std::runtime_error("filterd: a node that reaches filterd over TCP is on another host: give it its own port "
                             "(--port DEVARGS, XK_PORT) on filterd's node port");
  }
  if (tcp && options.queues != 1) {
    throw std::runtime_error("filterd: a node on another host runs one stack (filterd's node port gives it one "
                             "channel)");
  }
  if (tcp && options.token.empty()) {
    throw std::runtime_error("filterd: over TCP, the node proves it knows filterd's token: give it (--filterd-token "
                             "FILE, XK_FILTERD_TOKEN=FILE)");
  }
  std::unique_ptr<FilterdClient> c(new FilterdClient(path, name.substr(0, fc::kMaxNodeName), options));
  if (c->name_.empty()) c->name_ = "node";
  int err = 0;
  c->fd_ = tcp ? dial_tcp(path, options.connect_timeout, err) : dial(path, err);
  if (c->fd_ < 0) throw std::runtime_error("filterd: cannot connect to " + path + ": " + std::strerror(err));
  fc::Hello hello = c->make_hello();
  if (tcp) {
    std::lock_guard<std::mutex> lock(c->mu_);
    if (std::string why = c->prove_token_locked(options.timeout, hello.proof); !why.empty()) {
      throw std::runtime_error("filterd: " + why);
    }
  }
  Result<fc::Message> r = c->request(hello);
  if (!r) throw std::runtime_error(std::string("filterd: no answer to HELLO: ") + to_string(r.error()));
  if (const auto* e = std::get_if<fc::Error>(&r->body)) {
    throw std::runtime_error(std::string("filterd refused us: ") + fc::to_string(e->code) + ": " + e->text);
  }
  const auto* hr = std::get_if<fc::HelloReply>(&r->body);
  if (hr == nullptr || hr->channels.size() != options.queues) {
    throw std::runtime_error("filterd: HELLO answered with something else (or not a channel per stack)");
  }
  if (c->ethernet() && hr->channels.front().memif_id != 0) {
    throw std::runtime_error("filterd gave a memif channel to a node on the node port");
  }
  c->hello_ = *hr;
  c->leasing_ = options.lease_block != 0 && hr->version >= 3 && !hr->central;
  c->ipv6_flows_ = hr->version >= fc::kProtocolVersionIpv6;
  c->leases_.resize(options.queues);
  return c;
}

fc::Hello FilterdClient::make_hello() const {
  fc::Hello h;
  h.name = name_;
  h.pid = static_cast<std::uint32_t>(::getpid());
  h.queues = options_.queues;
  h.version_min = fc::kProtocolVersionMin;
  h.version_max = fc::kProtocolVersion;  // 3: LEASE; 4: IPv6 flows
  if (ethernet()) h.ethernet = options_.node_mac.value_or(MacAddr{});
  return h;
}

std::string FilterdClient::prove_token_locked(std::chrono::milliseconds timeout, std::optional<fc::Proof>& proof) {
  const fc::Nonce ours = fc::fresh_nonce();
  Result<fc::Message> r = request_locked(fc::Auth{ours}, timeout);
  if (!r) return std::string("no answer to AUTH: ") + to_string(r.error());
  if (const auto* e = std::get_if<fc::Error>(&r->body)) {
    return std::string("filterd refused us: ") + fc::to_string(e->code) + ": " + e->text;
  }
  const auto* a = std::get_if<fc::AuthReply>(&r->body);
  if (a == nullptr) return "AUTH answered with something else";
  // filterd proves it first: a peer that does not know the token learns
  // nothing from us but a nonce.
  if (!fc::proofs_equal(a->proof, fc::server_proof(options_.token, ours, a->nonce))) {
    return "filterd did not prove it knows the token (another token, or not our filterd)";
  }
  proof = fc::node_proof(options_.token, ours, a->nonce);
  return {};
}

FilterdClient::~FilterdClient() {
  if (loop_ != nullptr) loop_->remove(*this);
  retry_.reset();
  ping_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::connected && fd_ >= 0) {
    state_ = State::failed;  // going: a BYE that finds filterd gone is no news
    (void)request_locked(fc::Bye{}, std::chrono::milliseconds(1000));
  }
  close_socket();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void FilterdClient::attach_queue(std::uint16_t queue, EventLoop& loop, Hooks hooks) {
  if (queue >= options_.queues) throw std::out_of_range("FilterdClient::attach_queue: no queue " + std::to_string(queue));
  std::lock_guard<std::mutex> lock(mu_);
  if (attached_[queue].loop != nullptr) throw std::logic_error("FilterdClient::attach: attached already");
  attached_[queue] = Attached{&loop, std::move(hooks)};
  if (loop_ != nullptr) return;
  // The first stack attached watches the connection and runs the timer.
  watcher_ = queue;
  retry_.emplace(loop.timers(), [c = this] { c->on_retry(); });
  loop.add(*this);
  loop_ = &loop;
  if (state_ == State::connected) watch(true);
  if (hello_.heartbeat_ms != 0) {
    ping_.emplace(loop.timers(), [c = this] { c->heartbeat(); });
    ping_->arm_after(std::chrono::milliseconds(hello_.heartbeat_ms));
  }
}

void FilterdClient::heartbeat() {
  // filterd holds a TCP node that says nothing for three intervals dead. The
  // reply (OK) is read and dropped like any late one.
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::connected && fd_ >= 0) {
    Result<std::vector<std::byte>> bytes = fc::encode(fc::Message{next_id_++, fc::Ping{}});
    if (bytes && !send_all(*bytes)) lost("send failed");
  }
  ping_->arm_after(std::chrono::milliseconds(hello_.heartbeat_ms));
}

void FilterdClient::detach_queue(std::uint16_t queue) noexcept {
  if (queue >= options_.queues) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (attached_[queue].loop == nullptr) return;
  if (loop_ == attached_[queue].loop && watcher_ == queue) {
    // Nobody watches from now on: a lost filterd is final, and nothing
    // held waits for this loop's passes.
    try {
      (void)flush_outbox_locked();
    } catch (...) {
    }
    loop_->remove(*this);
    retry_.reset();
    ping_.reset();
    loop_ = nullptr;
  }
  attached_[queue] = Attached{};
}

Time FilterdClient::now() const noexcept {
  return loop_ != nullptr ? loop_->clock().now() : Time(std::chrono::steady_clock::now().time_since_epoch());
}

void FilterdClient::watch(bool on) noexcept {
  if (fd_ < 0) return;
  if (on) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd_;
    (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd_, &ev);
  } else {
    (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
  }
}

void FilterdClient::close_socket() noexcept {
  if (fd_ < 0) return;
  watch(false);
  ::close(fd_);
  fd_ = -1;
  reader_ = fc::FrameReader{};
}

// With mu_ held, on any stack's thread.
void FilterdClient::lost(const char* why) {
  close_socket();
  // Held releases never left: the filterd that comes back hears them after
  // the RESYNC, as those made while it was away.
  if (!outbox_.empty()) {
    try {
      for (fc::Body& b : outbox_) released_meanwhile_.push_back(std::move(b));
    } catch (...) {
      // Out of memory: filterd frees those flows when the node goes.
    }
    outbox_.clear();
    outbox_waiting_.store(false, std::memory_order_relaxed);
  }
  if (state_ != State::connected) return;  // a reconnection's own request failed: the attempt says what next
  ++stats_.lost;
  if (loop_ == nullptr || options_.reconnect_for.count() == 0) {
    give_up(std::string("the control connection closed (") + why + ")");
    return;
  }
  state_ = State::reconnecting;
  lost_at_ = now();
  backoff_ = options_.backoff_min;
  std::fprintf(stderr, "filterd: the control connection closed (%s); node %u reconnecting for up to %.1f s\n", why,
               unsigned{hello_.node_id}, static_cast<double>(options_.reconnect_for.count()) / 1000);
  if (loop_->in_loop_thread()) {
    retry_->arm_after(backoff_);
  } else {
    // The timer is the watching stack's: it arms it on its next pass.
    arm_retry_.store(true);
    loop_->wake();
  }
}

void FilterdClient::give_up(const std::string& why) {
  close_socket();
  state_ = State::failed;
  if (retry_ && loop_ != nullptr && loop_->in_loop_thread()) retry_->cancel();
  std::fprintf(stderr, "filterd: node %u gives up: %s; its ports and flows are no longer steered to it\n",
               unsigned{hello_.node_id}, why.c_str());
}

// The timer, on the watching stack's thread: one attempt, and the next one
// later if that did not do it (an attempt a stack made meanwhile counts too).
void FilterdClient::on_retry() {
  (void)reconnect_now();
  if (state_ != State::reconnecting) return;
  std::lock_guard<std::mutex> lock(mu_);
  retry_->arm_after(backoff_);
  backoff_ = std::min(backoff_ * 2, options_.backoff_max);
}

std::optional<FilterdClient::Holdings> FilterdClient::gather_holdings() {
  std::vector<Attached> stacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stacks = attached_;
  }
  Holdings all;
  for (std::size_t q = 0; q < stacks.size(); ++q) {
    const Attached& a = stacks[q];
    if (a.loop == nullptr || !a.hooks.holdings) continue;
    Holdings h;
    if (a.loop->in_loop_thread()) {
      h = a.hooks.holdings();
    } else {
      // The stack's own thread reads its tables; it may finish after we
      // gave up waiting, so the answer lives in a shared box.
      struct Box {
        std::mutex mu;
        std::condition_variable cv;
        std::optional<Holdings> h;
      };
      auto box = std::make_shared<Box>();
      a.loop->post([box, fn = a.hooks.holdings] {
        Holdings got = fn();
        std::lock_guard<std::mutex> lock(box->mu);
        box->h = std::move(got);
        box->cv.notify_all();
      });
      std::unique_lock<std::mutex> lock(box->mu);
      if (!box->cv.wait_for(lock, kReconnectTimeout, [&] { return box->h.has_value(); })) return std::nullopt;
      h = std::move(*box->h);
    }
    for (fc::ListenerEntry& l : h.listeners) l.queue = static_cast<std::uint16_t>(q);
    for (fc::FlowEntry& f : h.flows) f.queue = static_cast<std::uint16_t>(q);
    all.listeners.insert(all.listeners.end(), h.listeners.begin(), h.listeners.end());
    all.flows.insert(all.flows.end(), h.flows.begin(), h.flows.end());
  }
  return all;
}

bool FilterdClient::reconnect_now() {
  if (state_ != State::reconnecting) return state_ == State::connected;
  if (in_attempt_.exchange(true)) return false;  // another stack's thread is at it
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false); }
  } done{in_attempt_};
  int err = 0;
  bool answered = false;
  bool filterd_leases = false;  // the new filterd speaks version 3, in steer mode
  {
    std::unique_lock<std::mutex> lock(mu_);
    ++stats_.attempts;
    // A filterd host that is down does not refuse at once: wait for it only
    // as long as the back-off would.
    fd_ = is_tcp(path_) ? dial_tcp(path_, std::max(backoff_, std::chrono::milliseconds(200)), err) : dial(path_, err);
    if (fd_ >= 0) {
      fc::Hello h = make_hello();
      h.queues = static_cast<std::uint16_t>(hello_.channels.size());
      h.resume = fc::Resume{hello_.node_id, hello_.channels};
      // The same channel: the same MAC on the node port.
      if (h.ethernet) h.ethernet = hello_.channels.front().node_mac;
      Result<fc::Message> r = Errc::closed;
      if (std::string why = is_tcp(path_) ? prove_token_locked(kReconnectTimeout, h.proof) : std::string();
          !why.empty()) {
        std::fprintf(stderr, "filterd: %s\n", why.c_str());  // the next attempt may meet the right filterd
      } else {
        r = request_locked(h, kReconnectTimeout);
      }
      if (r) {
        if (const auto* e = std::get_if<fc::Error>(&r->body)) {
          // Someone has our id or a channel, or filterd does not take us
          // back: our graphs cannot run on other channels.
          give_up(std::string("filterd does not take us back: ") + fc::to_string(e->code) + ": " + e->text);
          return false;
        }
        const auto* hr = std::get_if<fc::HelloReply>(&r->body);
        if (hr == nullptr || hr->node_id != hello_.node_id || hr->channels != hello_.channels) {
          // A filterd that does not know RESUME registers us afresh.
          (void)request_locked(fc::Bye{}, kReconnectTimeout);
          give_up("filterd answered the resuming HELLO with another node id or channels");
          return false;
        }
        if (hr->address != hello_.address || hr->prefix_len != hello_.prefix_len) {
          (void)request_locked(fc::Bye{}, kReconnectTimeout);
          give_up("filterd came back with another address (" + to_string(hr->address) + ")");
          return false;
        }
        if (hr->secret != hello_.secret) {
          // Our connections keep their sequence numbers; only SYN cookies
          // between group members would disagree. filterd should keep its secret.
          std::fprintf(stderr, "filterd: warning: filterd came back with another ISN secret (give it --secret)\n");
        }
        filterd_leases = hr->version >= 3 && !hr->central;
        ipv6_flows_ = hr->version >= fc::kProtocolVersionIpv6;
        answered = true;
      } else {
        close_socket();
      }
    }
  }
  if (answered) {
    // What every stack holds, read on its own thread with no lock held: a
    // stack that asks for a port meanwhile is told to try again.
    std::optional<Holdings> held = gather_holdings();
    std::unique_lock<std::mutex> lock(mu_);
    bool broken = !held.has_value();
    std::size_t refused = 0;
    // The leases first: the RESYNC's connections from leased ports are
    // then covered by them, not installed one by one.
    if (!broken) {
      if (!renew_leases_locked(filterd_leases)) broken = true;
      leasing_ = leasing_ && filterd_leases;
    }
    if (!broken && !ipv6_flows_) {
      // A filterd older than version 4 cannot keep them; their peers get
      // RST from it.
      const auto v6 = std::erase_if(held->flows, [](const fc::FlowEntry& f) { return !f.remote_addr.is_v4(); });
      if (v6 != 0) std::fprintf(stderr, "filterd: %zu IPv6 flows not declared: filterd is older than version 4\n", v6);
    }
    if (!broken) {
      for (const fc::Resync& m : fc::split_resync(held->listeners, held->flows)) {
        Result<fc::Message> a = request_locked(m, kReconnectTimeout);
        if (!a) {
          broken = true;
          break;
        }
        if (const auto* e = std::get_if<fc::Error>(&a->body)) {
          // What another node took meanwhile is lost to us; its peers get
          // RST from filterd, our side times out. The rest is installed.
          ++refused;
          std::fprintf(stderr, "filterd: RESYNC partly refused: %s: %s\n", fc::to_string(e->code), e->text.c_str());
        }
      }
    }
    if (!broken) {
      // Ports a stack gave back while we were away, perhaps after its
      // holdings were read: filterd answers not_found for the others.
      std::vector<fc::Body> meanwhile;
      meanwhile.swap(released_meanwhile_);
      for (fc::Body& b : meanwhile) {
        if (!request_locked(std::move(b), kReconnectTimeout)) {
          broken = true;
          break;
        }
      }
    }
    if (!broken) {
      state_ = State::connected;
      watch(true);
      ++stats_.resumes;
      stats_.resynced += held->listeners.size() + held->flows.size();
      stats_.resync_refused += refused;
      stats_.last_gap = std::chrono::duration_cast<std::chrono::milliseconds>(now() - lost_at_);
      std::fprintf(stderr,
                   "filterd: resumed as node %u after %lld ms (%llu attempts): %zu listeners, %zu flows resynced%s\n",
                   unsigned{hello_.node_id}, static_cast<long long>(stats_.last_gap.count()),
                   static_cast<unsigned long long>(stats_.attempts), held->listeners.size(), held->flows.size(),
                   refused != 0 ? " (some refused)" : "");
      std::vector<Attached> stacks = attached_;
      lock.unlock();
      // Each stack starts its channel again, on its own thread.
      for (const Attached& a : stacks) {
        if (a.loop == nullptr || !a.hooks.resumed) continue;
        if (a.loop->in_loop_thread()) {
          a.hooks.resumed();
        } else {
          a.loop->post([fn = a.hooks.resumed] { fn(); });
        }
      }
      return true;
    }
    close_socket();  // no answer, or it closed again: the next attempt
  }
  if (now() - lost_at_ >= options_.reconnect_for) {
    std::lock_guard<std::mutex> lock(mu_);
    give_up("no filterd on " + path_ + " for " + std::to_string(options_.reconnect_for.count()) + " ms (" +
            (err != 0 ? std::strerror(err) : "it did not answer") + ")");
  }
  return false;
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
  std::lock_guard<std::mutex> lock(mu_);
  return request_locked(std::move(body), options_.timeout);
}

Result<fc::Message> FilterdClient::request_locked(fc::Body body, std::chrono::milliseconds timeout) {
  if (fd_ < 0) return Errc::closed;
  // Held releases first: filterd must read them before this request.
  if (!outbox_.empty()) {
    if (Status st = flush_outbox_locked(); !st) return st.error();
  }
  const std::uint32_t id = next_id_++;
  Result<std::vector<std::byte>> bytes = fc::encode(fc::Message{id, std::move(body)});
  if (!bytes) return bytes.error();
  if (Status st = send_all(*bytes); !st) {
    lost("send failed");
    return st.error();
  }
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = now + timeout;
  const auto spin_until = now + options_.spin;
  for (;;) {
    fc::ReadResult r = reader_.next();
    if (r.has_message()) {
      if (r.message().request_id == id) return std::move(r.message());
      continue;  // a late reply to a request that timed out
    }
    if (r.has_error() && r.error().must_drop()) {
      lost("filterd's stream broke");
      return Errc::malformed;
    }
    if (r.has_error()) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Errc::timed_out;
    pollfd p{fd_, POLLIN, 0};
    if (std::chrono::steady_clock::now() < spin_until) {
      if (::poll(&p, 1, 0) == 0) {
        idle_pause(options_.idle);
        continue;
      }
    } else {
      int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Errc::timed_out;
    }
    std::byte buf[8192];
    ssize_t got = ::read(fd_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      lost("filterd closed it");
      return Errc::closed;
    }
    reader_.feed(std::span<const std::byte>(buf, static_cast<std::size_t>(got)));
  }
}

Status FilterdClient::notify_locked(fc::Body body) {
  if (fd_ < 0) return Errc::closed;
  Result<std::vector<std::byte>> bytes = fc::encode(fc::Message{next_id_++, std::move(body)});
  if (!bytes) return bytes.error();
  if (Status st = send_all(*bytes); !st) {
    lost("send failed");
    return st.error();
  }
  // Its reply is read by the next round trip, or by poll() within a few
  // thousand passes.
  return {};
}

void FilterdClient::hold_release_locked(fc::Body body) {
  if (outbox_.empty()) outbox_since_ = now();
  outbox_.push_back(std::move(body));
  outbox_waiting_.store(true, std::memory_order_relaxed);
  if (outbox_.size() >= kOutboxMax) (void)flush_outbox_locked();
}

Status FilterdClient::flush_outbox_locked() {
  if (outbox_.empty()) return {};
  if (fd_ < 0) return Errc::closed;
  std::vector<std::byte> bytes;
  for (const fc::Body& b : outbox_) {
    if (Status st = fc::encode_into(fc::Message{next_id_++, b}, bytes); !st) return st;
  }
  if (Status st = send_all(bytes); !st) {
    lost("send failed");  // the outbox goes to released_meanwhile_
    return st.error();
  }
  stats_.releases_held += outbox_.size();
  ++stats_.release_batches;
  outbox_.clear();
  outbox_waiting_.store(false, std::memory_order_relaxed);
  // The answers to earlier batches, read as they come: they must never
  // fill the socket (filterd drops a node that does not read its replies).
  (void)drain_locked();
  return {};
}

std::optional<std::size_t> FilterdClient::drain_locked() {
  std::size_t got = 0;
  for (int round = 0; round < 16; ++round) {
    std::byte buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      lost(n == 0 ? "filterd closed it" : std::strerror(errno));
      return std::nullopt;
    }
    got += static_cast<std::size_t>(n);
    // Nothing comes unasked but a late reply or an ERROR before a close:
    // read it, keep the stream in step, and drop it.
    reader_.feed(std::span<const std::byte>(buf, static_cast<std::size_t>(n)));
    for (;;) {
      fc::ReadResult r = reader_.next();
      if (r.need_more()) break;
      if (r.has_error() && r.error().must_drop()) {
        lost("filterd's stream broke");
        return std::nullopt;
      }
    }
    if (static_cast<std::size_t>(n) < sizeof buf) break;
  }
  return got;
}

std::size_t FilterdClient::held_releases() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outbox_.size();
}

bool FilterdClient::before_sleep() noexcept {
  if (!outbox_waiting_.load(std::memory_order_relaxed)) return true;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another stack's round trip: look again
  try {
    (void)flush_outbox_locked();
  } catch (...) {
    return false;  // out of memory encoding: try again on the next pass
  }
  return true;
}

std::size_t FilterdClient::poll(std::size_t) {
  if (arm_retry_.load(std::memory_order_relaxed) && arm_retry_.exchange(false) && state_ == State::reconnecting) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!retry_->armed()) retry_->arm_after(backoff_);
  }
  if (state_ != State::connected) return 0;
  if (outbox_waiting_.load(std::memory_order_relaxed)) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock() && !outbox_.empty() && now() - outbox_since_ >= kOutboxDelay) {
      try {
        (void)flush_outbox_locked();
      } catch (...) {
      }
    }
  }
  if (!check_now_ && ++passes_ < kCheckEvery) return 0;
  // Another stack's round trip has the socket: it sees a close itself.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || fd_ < 0) return 0;
  passes_ = 0;
  check_now_ = false;
  std::optional<std::size_t> got = drain_locked();
  return !got || *got != 0 ? 1 : 0;
}

Status FilterdClient::usable() {
  switch (state_) {
    case State::connected: return {};
    case State::reconnecting: return reconnect_now() ? Status() : Status(Errc::would_block);
    case State::failed: break;
  }
  return Errc::no_route;
}

std::string FilterdClient::graph_spec(const std::string& tcp_opts, std::uint16_t queue) const {
  if (queue >= hello_.channels.size()) throw std::out_of_range("filterd: no channel for queue " + std::to_string(queue));
  const fc::Channel& ch = hello_.channels[queue];
  std::ostringstream g;
  if (ethernet()) {
    // Our own port on filterd's node port (one queue), with the MAC filterd
    // knows us by (set on the port, so that its receive filter takes our
    // frames).
    g << "dpdk net0 devargs=" << spec_value(options_.node_port) << " mtu=" << hello_.mtu
      << " mac=" << to_string(ch.node_mac);
    if (!options_.node_port_opts.empty()) g << " " << options_.node_port_opts;
  } else if (shm_channels()) {
    g << "shm net0 path=" << spec_value(*filterd::ctl::shm_channel_path(hello_, ch.memif_id))
      << " mtu=" << hello_.mtu;
    if (!options_.node_port_opts.empty()) g << " " << options_.node_port_opts;
  } else {
    g << "dpdk net0 devargs="
      << spec_value("net_memif" + std::to_string(queue) + ",role=client,id=" + std::to_string(ch.memif_id) +
                    ",socket=" + hello_.memif_socket + ",rsize=10")
      << " mtu=" << hello_.mtu;
    if (!options_.node_port_opts.empty()) g << " " << options_.node_port_opts;
  }
  const auto given = [&](const char* key) { return options_.node_port_opts.find(key) != std::string::npos; };
  // (The dpdk kind's own: an shm link never coalesces, and refuses what its
  // ring cannot take at once, which the relay keeps.)
  if (!shm_channels()) {
    // Central mode: relay frames are never dropped (a full ring waits).
    if (hello_.central && !given("tx_keep=")) g << " tx_keep=on";
    // TCP's checksums off: receive coalescing does not check them either.
    std::istringstream words(tcp_opts);
    bool csum_off = false;
    for (std::string w; words >> w;) csum_off = csum_off || w == "csum=off";
    if (csum_off && !given("gro_csum=")) g << " gro_csum=carry";
  }
  g << "\n";
  g << "eth  eth0 below=net0 mac=" << to_string(ch.node_mac) << "\n";
  // The shared address is ours and the other nodes': what another node
  // owns goes to filterd, which steers it to that node (the hairpin).
  g << "arp  arp0 below=eth0 static=" << to_string(hello_.address) << "@" << to_string(hello_.filterd_mac) << "\n";
  g << "ipv4 ip0  below=eth0,arp0 addr=" << to_string(hello_.address) << "/" << int{hello_.prefix_len} << " hairpin=on";
  if (hello_.gateway.value != 0) g << " gw=" << to_string(hello_.gateway);
  g << "\n";
  g << "icmp icmp0 below=ip0\n";
  // IPv6 when filterd shares an address of that family: filterd checks it
  // on the external link and answers our neighbour solicitations, so
  // nobody here checks it again (every node holds it), reports groups or
  // asks for routers (filterd is the one on the link); the hairpin as
  // IPv4's.
  std::string ips = "ip0";
  if (hello_.address6) {
    g << "nd   nd0  below=eth0 dad=0 mld=off static=" << to_string(*hello_.address6) << "@"
      << to_string(hello_.filterd_mac) << "\n";
    g << "ipv6 ip6  below=eth0,nd0 addr=" << to_string(*hello_.address6) << "/" << int{hello_.prefix6_len}
      << " hairpin=on ra=off";
    if (hello_.gateway6) g << " gw=" << to_string(*hello_.gateway6);
    g << "\nicmpv6 icmp6 below=ip6,nd0\n";
    ips = "ip0,ip6";
  }
  g << "udp  udp0 below=" << ips << "\n";
  char hex[33];
  for (std::size_t i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned>(hello_.secret[i]));
  if (hello_.central) {
    // filterd runs TCP; our sockets are its relayed streams (UDP stays ours).
    g << "relay relay0 below=eth0 peer=" << to_string(hello_.filterd_mac) << "\n";
    g << "tcp  tcp0 below=relay0 backend=relay secret=" << hex;
  } else {
    g << "tcp  tcp0 below=" << ips << " secret=" << hex;
  }
  if (!tcp_opts.empty()) g << " " << tcp_opts;
  g << "\n";
  return g.str();
}

Result<std::uint16_t> FilterdClient::claim_listen_on(std::uint16_t queue, std::uint8_t proto, std::uint16_t port,
                                                     bool group) {
  if (Status st = usable(); !st) return st.error();
  fc::Listen l;
  l.proto = proto_of(proto);
  l.port = port;
  l.group = group;
  l.queue = queue;
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::connected) return Errc::would_block;
  Result<fc::Message> r = request_locked(l, options_.timeout);
  if (!r) return r.error() == Errc::closed ? Errc::would_block : r.error();
  if (const auto* ok = std::get_if<fc::ListenReply>(&r->body)) return ok->port;
  if (const auto* e = std::get_if<fc::Error>(&r->body)) return errc_of(e->code);
  return Errc::malformed;
}

// A port or flow given back. Away: told to the filterd that comes back,
// after the RESYNC (which may or may not have declared it).
void FilterdClient::release(fc::Body body, bool wait) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::reconnecting) {
      released_meanwhile_.push_back(std::move(body));
    } else if (state_ == State::connected) {
      if (wait) {
        (void)request_locked(std::move(body), options_.timeout);
      } else if (loop_ != nullptr && loop_->in_loop_thread()) {
        hold_release_locked(std::move(body));  // the watching stack's loop sends it
      } else {
        (void)notify_locked(std::move(body));
      }
    }
  } catch (...) {
    // Out of memory while encoding: filterd frees the port when we go.
  }
}

void FilterdClient::release_listen_on(std::uint16_t queue, std::uint8_t proto, std::uint16_t port) noexcept {
  fc::Unlisten u{proto_of(proto), port};
  // One stack's listener; a single-stack node says nothing more (as ever).
  if (options_.queues > 1) u.queue = queue;
  release(u, true);
}

Result<std::uint16_t> FilterdClient::claim_connect_on(std::uint16_t queue, std::uint8_t proto,
                                                      std::uint16_t local_port, const IpAddr& remote,
                                                      std::uint16_t remote_port) {
  if (Status st = usable(); !st) return st.error();
  fc::Connect c;
  c.proto = proto_of(proto);
  c.remote_addr = remote;
  c.remote_port = remote_port;
  c.local_port = local_port;
  c.queue = queue;
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::connected) return Errc::would_block;
  if (!remote.is_v4() && !ipv6_flows_) return Errc::unsupported;
  if (leasing_ && c.proto == fc::Proto::tcp && local_port == 0 && queue < leases_.size()) {
    // From the node's lease: filterd steers the port to this queue already.
    LeasePool& pool = leases_[queue];
    if (pool.free.empty()) (void)lease_more_locked(queue);
    if (!pool.free.empty()) {
      const std::uint16_t port = pool.free.front();
      pool.free.pop_front();
      ++stats_.leased_connects;
      return port;
    }
    // None to be had (the node's cap, or the range is short): CONNECT finds
    // a port or says why not.
  }
  Result<fc::Message> r = request_locked(c, options_.timeout);
  if (!r) return r.error() == Errc::closed ? Errc::would_block : r.error();
  if (const auto* ok = std::get_if<fc::ConnectReply>(&r->body)) return ok->local_port;
  if (const auto* e = std::get_if<fc::Error>(&r->body)) return errc_of(e->code);
  return Errc::malformed;
}

bool FilterdClient::lease_more_locked(std::uint16_t queue) {
  fc::Lease l;
  l.queue = queue;
  l.count = options_.lease_block;
  Result<fc::Message> r = request_locked(l, options_.timeout);
  if (!r) return false;
  if (const auto* e = std::get_if<fc::Error>(&r->body)) {
    // no_ports, too_many: none now. Anything else: this filterd does not
    // lease to us, CONNECT from now on.
    if (e->code != fc::ErrorCode::no_ports && e->code != fc::ErrorCode::too_many) leasing_ = false;
    return false;
  }
  const auto* lr = std::get_if<fc::LeaseReply>(&r->body);
  if (lr == nullptr || lr->ports.empty()) return false;
  LeasePool& pool = leases_[queue];
  for (std::uint16_t p : lr->ports) {
    auto at = std::lower_bound(pool.held.begin(), pool.held.end(), p);
    if (at != pool.held.end() && *at == p) continue;
    pool.held.insert(at, p);
    pool.free.push_back(p);
  }
  ++stats_.leases;
  return true;
}

Status FilterdClient::renew_leases_locked(bool filterd_leases) {
  for (std::size_t q = 0; q < leases_.size(); ++q) {
    LeasePool& pool = leases_[q];
    if (pool.held.empty()) continue;
    std::vector<std::uint16_t> kept;
    if (filterd_leases) {
      for (std::size_t at = 0; at < pool.held.size(); at += fc::kMaxLeasePorts) {
        fc::Lease l;
        l.queue = static_cast<std::uint16_t>(q);
        const std::size_t n = std::min(fc::kMaxLeasePorts, pool.held.size() - at);
        l.ports.assign(pool.held.begin() + static_cast<std::ptrdiff_t>(at),
                       pool.held.begin() + static_cast<std::ptrdiff_t>(at + n));
        Result<fc::Message> r = request_locked(l, kReconnectTimeout);
        if (!r) return r.error();
        if (const auto* lr = std::get_if<fc::LeaseReply>(&r->body)) kept.insert(kept.end(), lr->ports.begin(), lr->ports.end());
      }
      std::sort(kept.begin(), kept.end());
    }
    if (kept.size() != pool.held.size()) {
      std::fprintf(stderr, "filterd: %zu of queue %zu's %zu leased ports are another node's now\n",
                   pool.held.size() - kept.size(), q, pool.held.size());
    }
    // A port lost with a connection on it: the RESYNC that follows declares
    // that connection as a flow of its own (filterd installs it, or refuses
    // it to us), and its end sends a RELEASE, as for a CONNECT's port.
    std::erase_if(pool.free, [&](std::uint16_t p) { return !std::binary_search(kept.begin(), kept.end(), p); });
    pool.held = std::move(kept);
  }
  return {};
}

std::size_t FilterdClient::leased_ports(std::uint16_t queue) const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue < leases_.size() ? leases_[queue].held.size() : 0;
}

std::size_t FilterdClient::free_leased_ports(std::uint16_t queue) const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue < leases_.size() ? leases_[queue].free.size() : 0;
}

void FilterdClient::release_connect_on(std::uint16_t queue, std::uint8_t proto, std::uint16_t local_port,
                                       const IpAddr& remote, std::uint16_t remote_port) noexcept {
  if (proto == 6) {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue < leases_.size()) {
      LeasePool& pool = leases_[queue];
      if (std::binary_search(pool.held.begin(), pool.held.end(), local_port)) {
        // Back to the pool, nothing to tell filterd. The deque's room was
        // there while the port was out, mostly; if not, the port is lost to
        // this node until it goes, not to anyone else.
        try {
          pool.free.push_back(local_port);
        } catch (...) {
        }
        return;
      }
    }
  }
  if (!remote.is_v4() && !ipv6_flows_) return;  // never claimed from this filterd
  // Nobody else can want this 4-tuple, and filterd reads our requests in
  // order: a connect of the same one later comes after it. Not waiting
  // takes a control round trip off every connection a node opens.
  release(fc::Release{proto_of(proto), local_port, remote, remote_port}, false);
}

FilterdClient::Holdings filterd_holdings(const tcp::TcpProtocol* tcp, const udp::UdpProtocol* udp) {
  FilterdClient::Holdings h;
  if (tcp != nullptr) {
    for (const tcp::TcpProtocol::ListenerInfo& l : tcp->listeners()) {
      h.listeners.push_back(fc::ListenerEntry{fc::Proto::tcp, l.port.value, l.group, 0});
    }
    for (const tcp::TcpProtocol::ConnectionInfo& c : tcp->connections()) {
      // A connection opened without the authority (none at the time) has no
      // flow at filterd to declare.
      if (!c.claimed && !c.passive) continue;
      h.flows.push_back(
          fc::FlowEntry{fc::Proto::tcp, c.tuple.local.port, c.tuple.remote.addr, c.tuple.remote.port, 0, c.passive});
    }
  }
  if (udp != nullptr) {
    for (std::uint16_t p : udp->bound_ports()) h.listeners.push_back(fc::ListenerEntry{fc::Proto::udp, p, false, 0});
  }
  return h;
}

void attach_node(FilterdClient& client, EventLoop& loop, tcp::TcpProtocol* tcp, udp::UdpProtocol* udp,
                 Driver* net, std::uint16_t queue) {
  FilterdClient::Hooks hooks;
  hooks.holdings = [tcp, udp] { return filterd_holdings(tcp, udp); };
  // A channel that does not come back by itself (a memif client) is started
  // again; a port of our own on the node port never lost its link.
  if (net != nullptr && !client.ethernet()) {
    hooks.resumed = [net] {
      // filterd made our end of the channel again before it answered;
      // connect to it (a few tries: its socket may take a moment to listen).
      for (int i = 0; i < 50; ++i) {
        const Status st = net->reconnect();
        if (st.error() == Errc::unsupported) return;  // it comes back by itself
        if (st) {
          std::fprintf(stderr, "filterd: channel %s started again\n", net->name().c_str());
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::fprintf(stderr, "filterd: channel %s does not start again\n", net->name().c_str());
    };
  }
  client.attach_queue(queue, loop, std::move(hooks));
}

}  // namespace xk

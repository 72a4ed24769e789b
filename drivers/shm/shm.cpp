#include "xk/drivers/shm.hpp"
#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/tcp_wire.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"
#include "xk/copy.hpp"
#include "xk/segment.hpp"

namespace xk::drivers {

namespace {

constexpr std::size_t kEthHeader = eth::Header::kSize;
constexpr std::size_t kChunk = Msg::kChunkSize;
// Payload pieces shorter than this are copied (inline or into a copy
// chunk) rather than referenced: a reference costs the receiver a buffer
// and a return.
constexpr std::size_t kMinRef = 512;
// Published at once past this many bytes, so the peer starts on a large
// write while the rest is still being cut (as the DPDK driver's bursts).
constexpr std::size_t kFlushBytes = 32 * 1024;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("shm: " + what + ": " + std::strerror(errno));
}

// A spin lock: held for a few stores, by the loop and a reader's thread.
class SpinLock {
 public:
  void lock() noexcept {
    while (flag_.test_and_set(std::memory_order_acquire)) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
  void unlock() noexcept { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

int make_memfd(const char* name, std::size_t bytes) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) fail("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    fail("ftruncate");
  }
  // Its size is fixed from now on: a peer that maps it can rely on it.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    fail("sealing the memfd");
  }
  return fd;
}

// A peer's memfd may be mapped only if it cannot shrink under us (a read
// past its end would be SIGBUS) and holds what it claims.
bool sealed_and_sized(int fd, std::size_t bytes) noexcept {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return false;
  struct stat st {};
  return fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= bytes;
}

MacAddr derived_mac(const std::string& path, bool server) {
  // FNV-1a of the path: both ends of one link differ by the role.
  std::uint32_t h = 2166136261u;
  for (char c : path) h = (h ^ static_cast<std::uint8_t>(c)) * 16777619u;
  MacAddr m;
  m.bytes = {0x02, 0x78, static_cast<std::uint8_t>(h >> 16), static_cast<std::uint8_t>(h >> 8),
             static_cast<std::uint8_t>(h), static_cast<std::uint8_t>(server ? 1 : 2)};
  return m;
}

sockaddr_un socket_address(const std::string& path, socklen_t& len) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(sa.sun_path)) {
    throw std::invalid_argument("shm: path must be 1.." + std::to_string(sizeof(sa.sun_path) - 1) + " bytes");
  }
  std::memcpy(sa.sun_path, path.data(), path.size());
  if (path[0] == '@') sa.sun_path[0] = '\0';  // abstract
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  return sa;
}

}  // namespace

// ---- the arena ---------------------------------------------------------------

namespace shm {

class Arena final : public ChunkSource {
 public:
  static constexpr std::size_t kReserve = 64;  // chunks kept for the driver's copies

  explicit Arena(std::size_t bytes) {
    chunks_ = std::max<std::size_t>(bytes / kChunk, 2 * kReserve);
    size_ = chunks_ * kChunk;
    fd_ = make_memfd("xk-arena", size_);
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) fail("mapping the arena");
    base_ = static_cast<std::byte*>(p);
    free_.reserve(chunks_);
    // Taken from the front first: the pages touched stay few while little is used.
    for (std::size_t i = chunks_; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
  }

  std::byte* take() noexcept override { return take_above(kReserve); }
  // For the driver's copies: may use the reserve.
  std::byte* take_reserved() noexcept { return take_above(0); }
  void give(std::byte* chunk) noexcept override {
    std::lock_guard g(lock_);
    free_.push_back(static_cast<std::uint32_t>((chunk - base_) / kChunk));
  }

  int fd() const noexcept { return fd_; }
  std::size_t size() const noexcept { return size_; }
  std::byte* base() const noexcept { return base_; }
  bool contains(const std::byte* p) const noexcept { return p >= base_ && p < base_ + size_; }

 private:
  std::byte* take_above(std::size_t keep) noexcept {
    std::lock_guard g(lock_);
    if (free_.size() <= keep) return nullptr;
    std::uint32_t i = free_.back();
    free_.pop_back();
    return base_ + std::size_t{i} * kChunk;
  }

  std::size_t chunks_ = 0;
  std::size_t size_ = 0;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  SpinLock lock_;
  std::vector<std::uint32_t> free_;
};

Arena& arena(std::size_t bytes) {
  // One per process, shared by its links; made once and never freed:
  // buffers anywhere in the process may point into it.
  static Arena* a = new Arena(bytes);
  return *a;
}

}  // namespace shm

// The peer's arena as we map it, and what its buffers need to go back:
// alive while the link is up or any buffer over it is held.
struct ShmDriver::PeerArena {
  struct Rec {
    PeerArena* owner;
  };

  PeerArena(const std::byte* b, std::size_t n) : base(b), size(n) {
    for (Rec& r : recs) r.owner = this;
  }

  const std::byte* base;
  std::size_t size;
  SpinLock lock;                   // guards mine and theirs, and the return ring
  Region* mine = nullptr;          // our region: returns go on its ring (null once down)
  const Region* theirs = nullptr;  // the peer's: how far it took them
  // The link's reference and one per buffer handed up: the mapping goes
  // with the last.
  std::atomic<std::uint32_t> refs{1};
  std::atomic<std::uint64_t> lost{0};  // returns with no room: the peer gave a token twice
  std::array<Rec, shm::kTokens> recs;

  // Under the lock: put `token` on the return ring.
  void push(std::uint32_t token) noexcept {
    if (mine == nullptr) return;
    const std::uint32_t tail = mine->ret_tail.v.load(std::memory_order_relaxed);
    if (tail - theirs->ret_head.v.load(std::memory_order_acquire) >= shm::kTokens) {
      lost.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    mine->returns()[tail % shm::kTokens] = token;
    mine->ret_tail.v.store(tail + 1, std::memory_order_release);
  }
  // A buffer over the peer's memory: one more reference to the mapping.
  void hold() noexcept { refs.fetch_add(1, std::memory_order_relaxed); }
  // Buffers handed up and not yet given back.
  std::uint32_t held() const noexcept { return refs.load(std::memory_order_relaxed) - 1; }
  // Drop one reference; the last unmaps.
  void unref() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      munmap(const_cast<std::byte*>(base), size);
      delete this;
    }
  }
  // The deleter of a buffer handed up: its token goes back (any thread).
  static void give_back(void* ctx, std::byte*) {
    auto* rec = static_cast<Rec*>(ctx);
    PeerArena* a = rec->owner;
    a->lock.lock();
    a->push(static_cast<std::uint32_t>(rec - a->recs.data()));
    a->lock.unlock();
    a->unref();
  }
  // The link went down: nothing goes back any more.
  void detach() noexcept {
    lock.lock();
    mine = nullptr;
    theirs = nullptr;
    lock.unlock();
    unref();
  }
};

// One frame being written: the descriptor, in local memory until posted.
struct ShmDriver::Builder {
  Desc d{};
  std::size_t frame_len = 0;
};

// ---- the driver ------------------------------------------------------------

ShmDriver::ShmDriver(std::string name, Config config, EventLoop* loop)
    : Driver(std::move(name), "shm"),
      config_(std::move(config)),
      loop_(loop),
      arena_(shm::arena(config_.arena_mb << 20)),
      rx_frames_(counters().add("rx_frames")),
      rx_bytes_(counters().add("rx_bytes")),
      rx_bad_(counters().add("rx_bad", "descriptors or hellos from the peer that failed a check (dropped)")),
      tx_frames_(counters().add("tx_frames")),
      tx_bytes_(counters().add("tx_bytes")),
      tx_refs_(counters().add("tx_refs", "payload pieces sent by reference into our arena (not copied)")),
      tx_copied_(counters().add("tx_copied", "payload pieces copied into a chunk of our arena")),
      tx_large_frames_(counters().add("tx_large_frames", "frames larger than the MTU sent")),
      tx_gso_(counters().add("tx_gso", "segments cut into frames here (segmentation offload)")),
      drop_too_big_(counters().add("drop_too_big", "frame larger than the peer takes")),
      drop_link_down_(counters().add("drop_link_down", "sent with no peer connected (lost, as on a dead wire)")),
      drop_ring_full_(counters().add("drop_ring_full", "our ring had no free descriptor")),
      drop_no_tokens_(counters().add("drop_no_tokens", "the peer holds every reference we may give out")),
      drop_no_arena_(counters().add("drop_no_arena", "no arena chunk left to copy into")),
      drop_offload_(counters().add("drop_offload", "a checksum offload asked of a link without it, or a bad segment")),
      drop_no_receiver_(counters().add("drop_no_receiver", "arrived with no upper enabled")),
      bad_returns_(counters().add("bad_returns", "tokens the peer gave back that were not out")),
      returns_lost_(counters().add("returns_lost", "buffers of the peer's given back with no room on the ring")),
      links_up_(counters().add("links_up", "peers connected")),
      links_down_(counters().add("links_down", "peers gone")),
      refused_(counters().add("refused", "connections refused: a peer was connected already")),
      wakes_sent_(counters().add("wakes_sent", "eventfd writes to a sleeping peer")),
      sleeps_(counters().add("sleeps", "times the loop slept on this link")) {
  if (config_.ring < 2 || config_.ring > 65536 || (config_.ring & (config_.ring - 1)) != 0) {
    throw std::invalid_argument("shm: ring must be a power of two in 2..65536");
  }
  if (config_.frame_max > shm::kFrameMax) throw std::invalid_argument("shm: frame_max is at most 65549");
  // With role=auto the end that comes first listens; the role (and so the
  // derived MAC) is settled here, before anything else is set up.
  int connected = -1;
  if (config_.auto_role) settle_role(connected);
  mac_ = config_.mac ? *config_.mac : derived_mac(config_.path, config_.server);
  tokens_.assign(shm::kTokens, nullptr);
  free_tokens_.reserve(shm::kTokens);
  for (std::uint32_t t = shm::kTokens; t-- > 0;) free_tokens_.push_back(t);

  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0) fail("eventfd/epoll");
  auto watch = [this](int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) fail("epoll_ctl");
  };
  watch(wake_fd_);
  // A client's next connection attempt; either end's deadline for a hello.
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) fail("timerfd_create");
  watch(timer_fd_);
  socklen_t len = 0;
  sockaddr_un sa = socket_address(config_.path, len);
  if (config_.server) {
    if (listen_fd_ < 0) {  // (settle_role may have bound it)
      listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (listen_fd_ < 0) fail("socket");
      if (config_.path[0] != '@') (void)unlink(config_.path.c_str());  // a socket file left by a crash
      if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), len) != 0) fail("bind " + config_.path);
      if (listen(listen_fd_, 4) != 0) fail("listen");
    }
    watch(listen_fd_);
  } else if (connected >= 0) {
    start_hello(connected);
  } else {
    try_connect();
  }
  if (loop_ != nullptr) loop_->add(*this);
}

ShmDriver::~ShmDriver() {
  if (loop_ != nullptr) loop_->remove(*this);
  // Frames handed to us before the end still go: the last of a connection
  // (its FIN or RST) is often sent just before the process exits.
  flush();
  link_down("closed");
  if (copy_chunk_ != nullptr) copy_chunk_->unref();
  for (int fd : {listen_fd_, timer_fd_, epoll_fd_, wake_fd_}) {
    if (fd >= 0) close(fd);
  }
  if (config_.server && config_.path[0] != '@') (void)unlink(config_.path.c_str());
}

std::size_t ShmDriver::tx_frame_max() const noexcept {
  return state_ == State::up && peer_frame_max_ > config_.mtu + kEthHeader ? peer_frame_max_ : 0;
}

Result<ControlReply> ShmDriver::control_any(const ControlQuery& query) {
  const std::size_t mtu_frame = config_.mtu + kEthHeader;
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{mtu_frame};
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) return ControlReply{std::size_t{0}};
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) {
    Participant p;
    p.push(mac_);
    return ControlReply{p};
  }
  if (std::holds_alternative<ctl::GetOffloads>(query)) {
    LinkOffloads o;
    o.tx_tcp_seg = true;  // cut here, into frames as large as the peer takes
    return ControlReply{o};
  }
  if (std::holds_alternative<ctl::GetFrameMax>(query)) return ControlReply{std::max(mtu_frame, tx_frame_max())};
  // Send buffers in the arena: their segments cross by reference.
  if (std::holds_alternative<ctl::GetChunkSource>(query)) return ControlReply{static_cast<ChunkSource*>(&arena_)};
  return Protocol::control_any(query);
}

// ---- set-up and tear-down -------------------------------------------------

// role=auto: connect if an end listens already (`connected` gets the
// socket), else listen. Two ends that start together: one binds first, the
// other's bind fails and it connects. A file path is never unlinked here
// (it may be a live server's); a stale one leaves this end a client that
// keeps trying, as any client of a dead server.
void ShmDriver::settle_role(int& connected) {
  socklen_t len = 0;
  sockaddr_un sa = socket_address(config_.path, len);
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket");
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) {
      config_.server = false;
      connected = fd;
      return;
    }
    const int why = errno;
    if (why != ECONNREFUSED && why != ENOENT) {  // a listener whose backlog is full: a client
      close(fd);
      config_.server = false;
      return;
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) {
      if (listen(fd, 4) != 0) {
        close(fd);
        fail("listen");
      }
      config_.server = true;
      listen_fd_ = fd;
      return;
    }
    close(fd);
    if (errno != EADDRINUSE) fail("bind " + config_.path);
    // Bound by the other end meanwhile (or a stale file): connect to it.
  }
  config_.server = false;
}

void ShmDriver::try_connect() {
  next_try_ = std::chrono::steady_clock::now() + config_.retry;
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  socklen_t len = 0;
  sockaddr_un sa = socket_address(config_.path, len);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    close(fd);  // no server yet (or its backlog is full): later
    arm_timer(config_.retry);
    return;
  }
  start_hello(fd);
}

void ShmDriver::arm_timer(std::chrono::milliseconds after) noexcept {
  itimerspec t{};
  t.it_value.tv_sec = static_cast<time_t>(after.count() / 1000);
  t.it_value.tv_nsec = static_cast<long>(after.count() % 1000 * 1'000'000);
  (void)timerfd_settime(timer_fd_, 0, &t, nullptr);
}

void ShmDriver::try_accept() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (state_ != State::down) {
      ++refused_;  // one peer at a time
      close(fd);
      continue;
    }
    start_hello(fd);
  }
}

// Our half of the hello: a fresh ring region (indices from zero), our
// arena, our eventfd.
void ShmDriver::start_hello(int fd) {
  sock_ = fd;
  state_ = State::hello;
  // A peer that connects and says nothing must not hold the link: it goes
  // at the deadline, and the socket is free for the next.
  hello_deadline_ = std::chrono::steady_clock::now() + config_.hello_timeout;
  arm_timer(config_.hello_timeout);
  try {
    mine_size_ = Region::bytes(static_cast<std::uint32_t>(config_.ring));
    region_fd_ = make_memfd("xk-shm-ring", mine_size_);
    void* p = mmap(nullptr, mine_size_, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd_, 0);
    if (p == MAP_FAILED) fail("mapping the ring");
    mine_ = new (p) Region();
    mine_->magic = shm::kMagic;
    mine_->version = shm::kVersion;
    mine_->ring = static_cast<std::uint32_t>(config_.ring);
  } catch (const std::exception&) {
    link_down("no memory for the ring");
    return;
  }
  shm::Hello h{};
  h.magic = shm::kMagic;
  h.version = shm::kVersion;
  std::memcpy(h.mac, mac_.bytes.data(), 6);
  h.ring = static_cast<std::uint32_t>(config_.ring);
  h.frame_max = static_cast<std::uint32_t>(config_.frame_max == 0 ? config_.mtu + kEthHeader : config_.frame_max);
  h.arena_size = arena_.size();
  const int fds[3] = {region_fd_, arena_.fd(), wake_fd_};
  iovec iov{&h, sizeof h};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  if (sendmsg(sock_, &m, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof h)) {
    link_down("hello not sent");
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = sock_;
  (void)epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock_, &ev);
  read_hello();
}

namespace {
bool is_eventfd(int fd) {
  char link[64] = {};
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(proc.c_str(), link, sizeof link - 1);
  return n > 0 && std::strcmp(link, "anon_inode:[eventfd]") == 0;
}
}  // namespace

// The peer's half: checked whole before anything of it is used.
void ShmDriver::read_hello() {
  shm::Hello h{};
  iovec iov{&h, sizeof h};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(sock_, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < k; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  auto close_all = [&fds] {
    for (int fd : fds) close(fd);
  };
  if (n <= 0) {
    close_all();
    link_down(n == 0 ? "the peer left during the hello" : "hello not received");
    return;
  }
  const bool ring_ok = h.ring >= 2 && h.ring <= 65536 && (h.ring & (h.ring - 1)) == 0;
  const std::size_t region_bytes = ring_ok ? Region::bytes(h.ring) : 0;
  const bool ok = n == static_cast<ssize_t>(sizeof h) && (m.msg_flags & MSG_CTRUNC) == 0 && fds.size() == 3 &&
                  h.magic == shm::kMagic && h.version == shm::kVersion && ring_ok && h.frame_max >= 60 &&
                  h.frame_max <= shm::kFrameMax && h.arena_size >= kChunk && h.arena_size <= (std::uint64_t{1} << 40) &&
                  sealed_and_sized(fds[0], region_bytes) && sealed_and_sized(fds[1], h.arena_size) &&
                  is_eventfd(fds[2]);
  if (!ok) {
    ++rx_bad_;
    close_all();
    link_down("the peer's hello failed a check");
    return;
  }
  void* region = mmap(nullptr, region_bytes, PROT_READ, MAP_SHARED, fds[0], 0);
  void* arena = region == MAP_FAILED ? MAP_FAILED : mmap(nullptr, h.arena_size, PROT_READ, MAP_SHARED, fds[1], 0);
  close(fds[0]);
  close(fds[1]);
  if (region == MAP_FAILED || arena == MAP_FAILED) {
    if (region != MAP_FAILED) munmap(region, region_bytes);
    close(fds[2]);
    link_down("cannot map the peer's memory");
    return;
  }
  peer_ = static_cast<const Region*>(region);
  peer_size_ = region_bytes;
  peer_wake_fd_ = fds[2];
  peer_ring_ = h.ring;
  peer_frame_max_ = h.frame_max;
  if (peer_->magic != shm::kMagic || peer_->ring != h.ring) {
    munmap(arena, h.arena_size);
    ++rx_bad_;
    link_down("the peer's ring is not what it said");
    return;
  }
  peer_arena_ = new PeerArena(static_cast<const std::byte*>(arena), h.arena_size);
  peer_arena_->mine = mine_;
  peer_arena_->theirs = peer_;
  state_ = State::up;
  ++links_up_;
}

void ShmDriver::link_down(const char* /*why*/) {
  if (state_ == State::down) return;
  if (state_ == State::up) ++links_down_;
  state_ = State::down;
  // The peer reads nothing of ours any more: every buffer it held is ours again.
  for (std::uint32_t t = 0; t < shm::kTokens; ++t) {
    if (tokens_[t] != nullptr) give_token(t);
  }
  if (peer_arena_ != nullptr) {
    returns_lost_.inc(peer_arena_->lost.exchange(0, std::memory_order_relaxed));
    peer_arena_->detach();  // buffers handed up keep its mapping
  }
  peer_arena_ = nullptr;
  if (peer_ != nullptr) munmap(const_cast<Region*>(peer_), peer_size_);
  peer_ = nullptr;
  if (mine_ != nullptr) munmap(mine_, mine_size_);
  mine_ = nullptr;
  for (int* fd : {&region_fd_, &peer_wake_fd_, &sock_}) {
    if (*fd >= 0) {
      if (fd == &sock_) (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, *fd, nullptr);
      close(*fd);
    }
    *fd = -1;
  }
  tx_tail_ = published_ = 0;
  unflushed_bytes_ = 0;
  peer_frame_max_ = 0;
  if (!config_.server) {
    next_try_ = std::chrono::steady_clock::now() + config_.retry;
    arm_timer(config_.retry);
  }
}

// The socket says only that the peer went (EOF); anything it sends after
// the hello is junk, read and counted. What the peer published before it
// left is still in its ring (our mapping outlives it): taken before the
// link goes down, so its last frames -- a FIN, an RST -- are not lost.
std::size_t ShmDriver::check_socket() {
  std::array<char, 256> junk;
  for (;;) {
    const ssize_t n = recv(sock_, junk.data(), junk.size(), MSG_DONTWAIT);
    if (n > 0) {
      ++rx_bad_;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    std::size_t done = 0;
    for (std::size_t got = 1; got != 0 && state_ == State::up;) {
      got = receive(config_.burst);
      done += got;
    }
    link_down("the peer left");
    return done;
  }
}

// ---- the data path ---------------------------------------------------------

std::size_t ShmDriver::poll(std::size_t budget) {
  if (state_ == State::down) {
    if (listen_fd_ >= 0) {
      try_accept();
    } else if (std::chrono::steady_clock::now() >= next_try_) {
      try_connect();
    }
  }
  if (state_ == State::hello) {
    read_hello();
    if (state_ == State::hello && std::chrono::steady_clock::now() >= hello_deadline_) {
      ++rx_bad_;
      link_down("no hello in time");
    }
  }
  if (state_ != State::up) return 0;
  if (++polls_since_check_ >= 1024) {
    polls_since_check_ = 0;
    returns_lost_.inc(peer_arena_->lost.exchange(0, std::memory_order_relaxed));
    const std::size_t last = check_socket();
    if (state_ != State::up) return last;
  }
  std::size_t done = take_returns();
  if (state_ == State::up) done += receive(std::min(budget, config_.burst));
  flush();
  return done;
}

std::size_t ShmDriver::take_returns() {
  const std::uint32_t tail = peer_->ret_tail.v.load(std::memory_order_acquire);
  std::uint32_t head = mine_->ret_head.v.load(std::memory_order_relaxed);
  if (tail - head > shm::kTokens) {
    ++rx_bad_;
    link_down("the peer's return index is corrupt");
    return 0;
  }
  const std::uint32_t* ring = peer_->returns();
  std::size_t n = 0;
  for (; head != tail; ++head, ++n) {
    const std::uint32_t t = ring[head % shm::kTokens];  // read once
    if (t >= shm::kTokens || tokens_[t] == nullptr) {
      ++bad_returns_;
      continue;
    }
    give_token(t);
  }
  if (n != 0) mine_->ret_head.v.store(head, std::memory_order_release);
  return n;
}

std::size_t ShmDriver::receive(std::size_t budget) {
  const std::uint32_t tail = peer_->tx_tail.v.load(std::memory_order_acquire);
  std::uint32_t head = mine_->rx_head.v.load(std::memory_order_relaxed);
  if (tail - head > peer_ring_) {
    ++rx_bad_;
    link_down("the peer's ring index is corrupt");
    return 0;
  }
  std::size_t n = 0;
  Desc d;
  while (head != tail && n < budget) {
    // Copied out before anything is checked: the peer may write the slot
    // while we look.
    const Desc& slot = peer_->descs()[head & (peer_ring_ - 1)];
    std::memcpy(&d, &slot, offsetof(Desc, bytes));
    const std::size_t inl = std::min<std::size_t>(d.inline_len, shm::kInline);
    std::memcpy(d.bytes, slot.bytes, inl);
    ++head;
    ++n;
    mine_->rx_head.v.store(head, std::memory_order_release);
    deliver(d);
    if (state_ != State::up) break;  // the upcall closed the link
  }
  return n;
}

// A descriptor not taken: the tokens it names go back at once (those in
// range; a descriptor of more pieces than one holds names none we trust).
void ShmDriver::drop_tokens(const Desc& d) noexcept {
  if (d.nref > shm::kMaxRefs) return;
  peer_arena_->lock.lock();
  for (std::size_t i = 0; i < d.nref; ++i) {
    if (d.refs[i].token < shm::kTokens) peer_arena_->push(d.refs[i].token);
  }
  peer_arena_->lock.unlock();
}

void ShmDriver::deliver(const Desc& d) {
  const std::size_t rx_max = std::max(config_.mtu + kEthHeader, config_.frame_max);
  bool ok = d.inline_len <= shm::kInline && d.nref <= shm::kMaxRefs;
  std::uint64_t total = d.inline_len;
  for (std::size_t i = 0; ok && i < d.nref; ++i) {
    const Desc::Ref& r = d.refs[i];
    ok = r.token < shm::kTokens && r.len > 0 && std::uint64_t{r.off} + r.len <= peer_arena_->size;
    total += r.len;
  }
  ok = ok && total == d.frame_len && total >= kEthHeader && total <= rx_max;
  if (!ok || !receiving()) {
    ++(ok ? drop_no_receiver_ : rx_bad_);
    drop_tokens(d);
    return;
  }
  Msg frame = Msg::copy_of(std::span(d.bytes, d.inline_len));
  for (std::size_t i = 0; i < d.nref; ++i) {
    const Desc::Ref& r = d.refs[i];
    peer_arena_->hold();
    // Mapped read-only: a layer that answers with these bytes (an echo, the
    // central relay) pushes its headers into a fragment of its own.
    Result<Msg> piece = Msg::wrap_read_only(peer_arena_->base + r.off, r.len, 0, r.len,
                                            BufDeleter{&PeerArena::give_back, &peer_arena_->recs[r.token]});
    if (!piece) {
      // The deleter ran: this token is back; the rest go back unused.
      Desc rest = d;
      rest.nref = static_cast<std::uint8_t>(d.nref - i - 1);
      std::memmove(rest.refs, d.refs + i + 1, rest.nref * sizeof(Desc::Ref));
      drop_tokens(rest);
      ++rx_bad_;
      return;
    }
    frame.join(std::move(*piece));
  }
  // The peer's references running out: layers that keep a frame copy it.
  if (peer_arena_->held() > shm::kTokens / 4 * 3) {
    frame.offload().flags |= Offload::rx_scarce;
  }
  ++rx_frames_;
  rx_bytes_.inc(d.frame_len);
  (void)deliver_up(std::move(frame));
}

// A piece of payload: by reference when it lies in our arena and is worth
// it, else inline while the descriptor has room and holds no reference
// yet, else copied into a chunk of the arena. `rest`: the frame's bytes
// from this piece on (a copy chunk is begun that holds them all, so the
// last reference can always grow).
bool ShmDriver::add_piece(Builder& b, Buf* buf, const std::byte* p, std::size_t n, std::size_t rest) {
  Desc& d = b.d;
  b.frame_len += n;
  if (d.nref == 0 && d.inline_len + n <= shm::kInline) {
    std::memcpy(d.bytes + d.inline_len, p, n);
    d.inline_len = static_cast<std::uint16_t>(d.inline_len + n);
    return true;
  }
  // The last reference is kept for copies.
  if (n >= kMinRef && std::size_t{d.nref} + 1 < shm::kMaxRefs && arena_.contains(p) && !free_tokens_.empty()) {
    const std::uint32_t t = take_token(buf);
    d.refs[d.nref++] = Desc::Ref{t, static_cast<std::uint32_t>(p - arena_.base()), static_cast<std::uint32_t>(n)};
    ++tx_refs_;
    return true;
  }
  // A copy: grows the last reference when that is the copy chunk's tail.
  if (d.nref != 0 && copy_chunk_ != nullptr) {
    Desc::Ref& last = d.refs[d.nref - 1];
    const auto fill = static_cast<std::uint32_t>(copy_chunk_->data() - arena_.base() + copy_fill_);
    if (tokens_[last.token] == copy_chunk_ && last.off + last.len == fill && copy_fill_ + n <= kChunk) {
      copy_into_shared(copy_chunk_->data() + copy_fill_, p, n);
      copy_fill_ += n;
      last.len += static_cast<std::uint32_t>(n);
      return true;
    }
  }
  if (d.nref == shm::kMaxRefs) return false;  // (cannot happen: see `rest`)
  if (free_tokens_.empty()) {
    ++drop_no_tokens_;
    return false;
  }
  if (copy_chunk_ == nullptr || kChunk - copy_fill_ < rest) {
    std::byte* chunk = arena_.take_reserved();
    if (chunk == nullptr) {
      ++drop_no_arena_;
      return false;
    }
    Buf* fresh = Buf::wrap(chunk, kChunk, BufDeleter{[](void* a, std::byte* c) {
                                                 static_cast<shm::Arena*>(a)->give(c);
                                               },
                                               &arena_});
    if (fresh == nullptr) {
      arena_.give(chunk);
      ++drop_no_arena_;
      return false;
    }
    if (copy_chunk_ != nullptr) copy_chunk_->unref();
    copy_chunk_ = fresh;
    copy_fill_ = 0;
  }
  const std::uint32_t t = take_token(copy_chunk_);
  copy_into_shared(copy_chunk_->data() + copy_fill_, p, n);
  d.refs[d.nref++] = Desc::Ref{t, static_cast<std::uint32_t>(copy_chunk_->data() - arena_.base() + copy_fill_),
                               static_cast<std::uint32_t>(n)};
  copy_fill_ += n;
  ++tx_copied_;
  return true;
}

std::uint32_t ShmDriver::take_token(Buf* buf) noexcept {
  const std::uint32_t t = free_tokens_.back();
  free_tokens_.pop_back();
  buf->ref();
  tokens_[t] = buf;
  return t;
}

void ShmDriver::give_token(std::uint32_t t) noexcept {
  tokens_[t]->unref();
  tokens_[t] = nullptr;
  free_tokens_.push_back(t);
}

void ShmDriver::release(Builder& b) noexcept {
  for (std::size_t i = 0; i < b.d.nref; ++i) give_token(b.d.refs[i].token);
  b.d.nref = 0;
}

// The bytes [off, off + len) of `frame` into `b`.
bool ShmDriver::add_range(Builder& b, const Msg& frame, std::size_t off, std::size_t len) {
  std::size_t rest = len;
  for (const Frag& f : frame.fragments()) {
    if (rest == 0) break;
    if (off >= f.len) {
      off -= f.len;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(f.len - off, rest);
    if (!add_piece(b, f.buf, f.data() + off, n, rest)) return false;
    rest -= n;
    off = 0;
  }
  return rest == 0;
}

Status ShmDriver::post(Builder& b) {
  const std::uint32_t ring = mine_->ring;
  if (tx_tail_ - peer_->rx_head.v.load(std::memory_order_acquire) >= ring) {
    flush();
    ++drop_ring_full_;
    release(b);
    return Errc::would_block;
  }
  b.d.frame_len = static_cast<std::uint32_t>(b.frame_len);
  std::memcpy(&mine_->descs()[tx_tail_ & (ring - 1)], &b.d, offsetof(Desc, bytes) + b.d.inline_len);
  ++tx_tail_;
  ++tx_frames_;
  tx_bytes_.inc(b.frame_len);
  if (b.frame_len > config_.mtu + kEthHeader) ++tx_large_frames_;
  unflushed_bytes_ += b.frame_len;
  if (unflushed_bytes_ >= kFlushBytes || tx_tail_ - published_ >= config_.burst) flush();
  return {};
}

void ShmDriver::flush() noexcept {
  if (state_ != State::up || published_ == tx_tail_) return;
  mine_->tx_tail.v.store(tx_tail_, std::memory_order_release);
  published_ = tx_tail_;
  unflushed_bytes_ = 0;
  // Dekker's order with the peer's before_sleep(): it raises its flag, then
  // looks at our tail; we publish the tail, then look at its flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (peer_->asleep.v.load(std::memory_order_relaxed) != 0) {
    const std::uint64_t one = 1;
    if (write(peer_wake_fd_, &one, sizeof one) == sizeof one) ++wakes_sent_;
  }
}

Status ShmDriver::transmit(const Msg& frame) {
  if (state_ != State::up) {
    ++drop_link_down_;
    return {};
  }
  if (frame.offload().has(Offload::tx_tcp_seg)) return transmit_segmented(frame);
  if ((frame.offload().flags & Offload::kTxMask) != 0) {
    ++drop_offload_;
    return Errc::unsupported;
  }
  if (frame.size() > std::max(config_.mtu + kEthHeader, tx_frame_max())) {
    ++drop_too_big_;
    return Errc::too_large;
  }
  Builder b;
  if (!add_range(b, frame, 0, frame.size())) {
    release(b);
    return Errc::would_block;
  }
  return post(b);
}

// Segmentation offload (Offload::tx_tcp_seg): the segment leaves as frames
// of as many whole segments as the peer takes, each under its own copy of
// the headers (xk/segment.hpp) and the TCP checksum over the piece, read
// here, not copied.
Status ShmDriver::transmit_segmented(const Msg& frame) {
  Result<SegmentCut> cut = SegmentCut::of(frame);
  if (!cut || cut->header_len() > shm::kInline) {
    ++drop_offload_;
    return Errc::invalid_argument;
  }
  const std::size_t hlen = cut->header_len(), seg = cut->seg();
  std::size_t step = seg;
  if (const std::size_t max = tx_frame_max(); max >= hlen + 2 * seg) step = (max - hlen) / seg * seg;
  if (hlen + step > std::max(config_.mtu + kEthHeader, tx_frame_max())) {
    ++drop_too_big_;
    return Errc::too_large;
  }
  const bool tcp_csum = frame.offload().has(Offload::tx_tcp_csum);
  const std::size_t pieces = cut->pieces(step);
  for (std::size_t i = 0; i < pieces; ++i) {
    Builder b;
    const std::size_t n = cut->headers(i, step, b.d.bytes, true);
    b.d.inline_len = static_cast<std::uint16_t>(hlen);
    b.frame_len = hlen;
    if (!add_range(b, frame, hlen + i * step, n)) {
      release(b);
      return i == 0 ? Errc::would_block : Status{};  // what went is kept; TCP repairs the rest
    }
    if (tcp_csum) {
      Result<std::uint32_t> body = csum::partial(frame, hlen + i * step, n);
      if (!body) {
        release(b);
        return body.status();
      }
      std::uint16_t ck = csum::finish(csum::combine(cut->tcp_sum(b.d.bytes, n, true), *body, cut->tcp_header_len()));
      // A large frame's field is 0 only when it carries no checksum (as
      // the DPDK driver's large frames: RFC 768's other zero).
      if (ck == 0 && n > seg) ck = 0xffff;
      std::memcpy(b.d.bytes + kEthHeader + cut->ip_header_len() + tcp::Header::kChecksumOffset, &ck, 2);
    }
    if (Status st = post(b); !st) return i == 0 ? st : Status{};
  }
  ++tx_gso_;
  return {};
}

// ---- sleeping --------------------------------------------------------------

bool ShmDriver::before_sleep() noexcept {
  flush();
  // Down or in the hello: the listening socket, the peer's socket or the
  // timer wakes us.
  if (state_ != State::up) return true;
  mine_->asleep.v.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (peer_->tx_tail.v.load(std::memory_order_acquire) != mine_->rx_head.v.load(std::memory_order_relaxed)) {
    mine_->asleep.v.store(0, std::memory_order_relaxed);
    return false;
  }
  ++sleeps_;
  return true;
}

void ShmDriver::after_sleep() noexcept {
  if (mine_ != nullptr) mine_->asleep.v.store(0, std::memory_order_relaxed);
  std::uint64_t v;
  while (read(wake_fd_, &v, sizeof v) == sizeof v) {
  }
  while (read(timer_fd_, &v, sizeof v) == sizeof v) {
  }
  polls_since_check_ = 1024;  // the socket may be what woke us
}

// ---- graph specs -------------------------------------------------------------

void register_shm(Registry& registry) {
  registry.add(
      KindSpec("shm", "Ethernet link to another xk process over shared memory, payload by reference")
          .with_below(0, 0)
          .with_option(OptionSpec::string("path", "set-up socket both ends name (a file, or @name: abstract)").mandatory())
          .with_option(OptionSpec::choice("role", {"server", "client", "auto"},
                                          "server listens on path; auto: the end that comes first does")
                           .defaults_to("client"))
          .with_option(OptionSpec::mac("mac", "this end's MAC address (default: from path and role)"))
          .with_option(OptionSpec::size("mtu", 68, 65535 - 14, "IP MTU").defaults_to("1500"))
          .with_option(OptionSpec::size("frame_max", 0, shm::kFrameMax, "largest frame taken, Ethernet header "
                                                                         "included (0: MTU-sized)")
                           .defaults_to(std::to_string(shm::kFrameMax)))
          .with_option(OptionSpec::integer("ring", 2, 65536, "descriptors in this end's ring (a power of two)")
                           .defaults_to("1024"))
          .with_option(OptionSpec::integer("arena_mb", 8, 1 << 20, "the process's arena of send-buffer chunks, "
                                                                    "shared with its peers (the first link's counts)")
                           .defaults_to("512"))
          .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
            const Options& o = args.options;
            ShmDriver::Config c;
            c.path = o.get_string("path");
            c.server = o.get_string("role") == "server";
            c.auto_role = o.get_string("role") == "auto";
            if (o.has("mac")) c.mac = o.get_mac("mac");
            c.mtu = o.get_size("mtu");
            c.frame_max = o.get_size("frame_max");
            c.ring = static_cast<std::size_t>(o.get_int("ring"));
            c.arena_mb = static_cast<std::size_t>(o.get_int("arena_mb"));
            return std::make_unique<ShmDriver>(args.name, c, args.loop);
          }));
}

}  // namespace xk::drivers

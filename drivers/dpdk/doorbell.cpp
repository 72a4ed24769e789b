#include "xk/drivers/doorbell.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace xk::drivers {
namespace {

// FNV-1a: the page's name must be short and free of '/', the link name is a
// path; the hash keeps two links whose cleaned names agree apart.
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string clean(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    out += ok ? c : '_';
  }
  // Keep the tail: it holds the interface id and the socket's own name.
  return out.size() > 80 ? out.substr(out.size() - 80) : out;
}

// An abstract socket address: a leading NUL, no terminator, no file.
std::string abstract_name(std::uint64_t hash, int side) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "xk-bell-%016llx-%d", static_cast<unsigned long long>(hash), side);
  return std::string(1, '\0') + std::string(buf, static_cast<std::size_t>(n));
}

socklen_t fill(sockaddr_un& a, const std::string& name) {
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
}

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("doorbell: " + what + ": " + std::strerror(errno));
}

}  // namespace

Doorbell::Doorbell(const std::string& link, int side) : side_(side & 1) {
  const std::uint64_t hash = fnv1a(link);
  char hex[24];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  shm_name_ = "/xk-bell-" + clean(link) + "-" + hex;
  owner_ = side_ == 0;

  // The page: whoever comes first creates it; it only ever grows to its size
  // (a shrink would fault the other end's mapping).
  int shm = ::shm_open(shm_name_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (shm < 0) fail("shm_open " + shm_name_);
  struct stat st {};
  if (::fstat(shm, &st) != 0 || (st.st_size < static_cast<off_t>(sizeof(Page)) && ::ftruncate(shm, sizeof(Page)) != 0)) {
    int e = errno;
    ::close(shm);
    errno = e;
    fail("sizing " + shm_name_);
  }
  void* p = ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
  ::close(shm);
  if (p == MAP_FAILED) fail("mmap " + shm_name_);
  page_ = static_cast<Page*>(p);
  page_->side[side_].asleep.store(0, std::memory_order_relaxed);
  page_->caps[side_].rx_frame_max.store(0, std::memory_order_relaxed);

  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    ::munmap(page_, sizeof(Page));
    fail("socket");
  }
  sockaddr_un a{};
  socklen_t len = fill(a, abstract_name(hash, side_));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    // EADDRINUSE: another live process holds this end of the link.
    int e = errno;
    ::close(fd_);
    ::munmap(page_, sizeof(Page));
    errno = e;
    fail("bind (side " + std::to_string(side_) + " of '" + link + "')");
  }
  peer_addr_ = abstract_name(hash, side_ ^ 1);
  peer_sa_len_ = fill(peer_sa_, peer_addr_);
  // Bound: a ring from the peer reaches us from now on.
  page_->caps[side_].rings.store(1, std::memory_order_release);
}

Doorbell::~Doorbell() {
  page_->caps[side_].rings.store(0, std::memory_order_release);
  page_->side[side_].asleep.store(0, std::memory_order_relaxed);
  page_->caps[side_].rx_frame_max.store(0, std::memory_order_release);
  ::munmap(page_, sizeof(Page));
  // The page goes with the server's end, or with the last end out (a server
  // killed with -9 left it; its client, going, finds nobody bound there).
  if (owner_ || !peer_bound()) (void)::shm_unlink(shm_name_.c_str());
  ::close(fd_);
}

bool Doorbell::peer_bound() const noexcept {
  sockaddr_un a{};
  socklen_t len = fill(a, peer_addr_);
  int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return true;  // cannot tell: leave the page
  const bool bound = ::connect(s, reinterpret_cast<sockaddr*>(&a), len) == 0;
  ::close(s);
  return bound;
}

void Doorbell::publish_rx_frame_max(std::uint32_t bytes) noexcept {
  page_->caps[side_].rx_frame_max.store(bytes, std::memory_order_release);
}

bool Doorbell::peer_rings() const noexcept {
  return page_->caps[side_ ^ 1].rings.load(std::memory_order_acquire) != 0;
}

std::uint32_t Doorbell::peer_rx_frame_max() const noexcept {
  return page_->caps[side_ ^ 1].rx_frame_max.load(std::memory_order_acquire);
}

void Doorbell::arm() noexcept {
  page_->side[side_].asleep.store(1, std::memory_order_relaxed);
  // The store must be visible before the caller reads its ring (see the
  // header): a full fence, not just release.
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

std::uint32_t Doorbell::disarm() noexcept {
  page_->side[side_].asleep.store(0, std::memory_order_relaxed);
  std::uint32_t rings = 0;
  char b;
  while (::recv(fd_, &b, 1, MSG_DONTWAIT) >= 0) ++rings;
  return rings;
}

Doorbell::Ring Doorbell::ring() noexcept {
  // The frames on the ring before the flag is read (Dekker, the other half).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::atomic<std::uint32_t>& peer = page_->side[side_ ^ 1].asleep;
  if (peer.load(std::memory_order_relaxed) == 0) return Ring::awake;
  // One ring per sleep: whoever takes the flag down sends it.
  if (peer.exchange(0, std::memory_order_acq_rel) == 0) return Ring::awake;
  const char b = 1;
  if (::sendto(fd_, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&peer_sa_), peer_sa_len_) ==
      1) {
    return Ring::rang;
  }
  // EAGAIN: the peer's queue is full of rings it has not read, so it is
  // awake or about to be. Anything else: nobody at the other end.
  if (errno == EAGAIN) return Ring::rang;
  ++failures_;
  return Ring::lost;
}

std::string Doorbell::memif_link(const std::string& devargs, int& side) {
  // "net_memif0,role=server,id=3,socket=/run/x.sock": keys as net_memif has
  // them, with its defaults (client, id 0, /run/memif.sock).
  const std::size_t comma = devargs.find(',');
  const std::string_view dev = std::string_view(devargs).substr(0, comma);
  if (dev.substr(0, 9) != "net_memif") return "";
  std::string socket = "/run/memif.sock";
  std::string id = "0";
  side = 1;
  std::size_t at = comma;
  while (at != std::string::npos) {
    const std::size_t next = devargs.find(',', at + 1);
    const std::string_view kv = std::string_view(devargs).substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    const std::size_t eq = kv.find('=');
    if (eq != std::string_view::npos) {
      const std::string_view k = kv.substr(0, eq);
      const std::string_view v = kv.substr(eq + 1);
      if (k == "socket") socket = v;
      if (k == "id") id = v;
      if (k == "role") side = v == "server" ? 0 : 1;
    }
    at = next;
  }
  return socket + "#" + id;
}

}  // namespace xk::drivers

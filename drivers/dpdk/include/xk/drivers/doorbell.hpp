#pragma once

// A doorbell between the two ends of a shared-memory link that has no receive
// interrupt (DPDK 22.11's net_memif: rte_eth_dev_rx_intr_enable is -ENOTSUP).
//
// Without one, an idle loop can only sleep on a timer and look again, so a
// frame that arrives while it sleeps waits for the timer (up to the back-off's
// 1 ms): a connection handshake through filterd crosses four such sleeps. With
// one, the side going to sleep raises its "asleep" flag in a page both ends
// map, re-checks its ring, and sleeps on a socket; the side that puts frames
// on that ring rings (one datagram) only when it sees the flag up, so a busy
// link costs one shared-memory load per burst and no system call.
//
// The ordering is Dekker's: the sleeper stores its flag, then reads the ring;
// the sender writes the ring, then reads the flag; a full fence on both sides
// means at least one of them sees the other, so a frame is never left behind
// a sleeper nobody rings.
//
// Both ends name the bell by the link alone (the memif socket and interface
// id they already share), so nothing has to be handed over: the page is a
// POSIX shared memory object, the sockets are abstract Unix datagram sockets
// (no files, gone with the process; per network namespace, as memif's own
// abstract sockets are). Either end may come first; a page left behind by a
// crash holds only two flags and two sizes, which the next user of that end
// overwrites (at worst one wake-up too many). The server's end removes the page when it goes, and so
// does a client that finds no server bound any more.

#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace xk::drivers {

class Doorbell {
 public:
  // The link's name (any string both ends agree on) and this end's side (0 or
  // 1: the memif server is 0). Throws std::runtime_error (with the reason) if
  // the page or the socket cannot be made.
  Doorbell(const std::string& link, int side);
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // Readable when the peer rang (level-triggered until disarm() drains it).
  int fd() const noexcept { return fd_; }

  // About to sleep: raise the flag. The caller must look at its ring after
  // this and disarm() if it finds work.
  void arm() noexcept;
  // Awake again: lower the flag and drain the socket. Returns how many rings
  // were waiting.
  std::uint32_t disarm() noexcept;

  // Frames were put on the peer's ring: wake the peer if it sleeps. awake:
  // no ring needed (no system call); rang: it was asleep and got the ring
  // (or has rings queued already); lost: nobody was bound to hear it (also
  // counted in failures()).
  enum class Ring : std::uint8_t { awake, rang, lost };
  Ring ring() noexcept;

  std::uint64_t failures() const noexcept { return failures_; }

  // What each end takes besides the flags: the largest frame it accepts on
  // this link (0 until it says; then MTU-sized frames only). A link between
  // two xk processes is not a wire, so it may carry frames far larger than
  // the MTU (docs/dpdk-driver.md, "Large frames"); the sender reads the
  // peer's word before it makes one. Cleared again when this end goes.
  void publish_rx_frame_max(std::uint32_t bytes) noexcept;
  std::uint32_t peer_rx_frame_max() const noexcept;
  // Whether the other end's socket exists (a live process holds it).
  bool peer_bound() const noexcept;
  // Whether the other end said it rings this bell (set while its Doorbell
  // lives): frames from it then wake a sleeper with no timer. A page left
  // by an end killed with -9 still says so until the next end of that side
  // comes up (a non-xk peer never does: see docs/dpdk-driver.md).
  bool peer_rings() const noexcept;
  // The names in use (for messages and tests).
  const std::string& shm_name() const noexcept { return shm_name_; }

  // The shared page: one flag per side, each on its own cache line so the
  // two ends' stores do not bounce one line between cores.
  struct alignas(64) Flag {
    std::atomic<std::uint32_t> asleep{0};
  };
  // Each end's word of what it takes, written once, read per large frame:
  // on lines of their own, away from the flags that change every sleep.
  struct alignas(64) Caps {
    std::atomic<std::uint32_t> rx_frame_max{0};
    std::atomic<std::uint32_t> rings{0};  // 1 while this end's bell is up
  };
  struct Page {
    Flag side[2];
    Caps caps[2];
  };

  // The link name of a net_memif port, from its devargs: "<socket>#<id>"
  // (the PMD's defaults filled in), or "" if the devargs are not memif's.
  // Sets `side` from role= (server: 0, client: 1).
  static std::string memif_link(const std::string& devargs, int& side);

 private:
  int side_;
  int fd_ = -1;
  Page* page_ = nullptr;
  std::string shm_name_;
  std::string peer_addr_;  // the peer's abstract socket name (leading NUL)
  sockaddr_un peer_sa_{};  // ... as the address ring() sends to
  socklen_t peer_sa_len_ = 0;
  bool owner_ = false;     // side 0 unlinks the page when it goes (so does
                           // a client that finds no server left)
  std::uint64_t failures_ = 0;
};

}  // namespace xk::drivers

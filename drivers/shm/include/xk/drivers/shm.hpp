#pragma once
// shm: an Ethernet link between two xk processes of one host over shared
// memory, whose payload crosses by reference (docs/shm-driver.md).
//
// Over net_memif every byte is copied twice by the PMD (into the ring's
// slots, out of them), so a POSIX program's byte is copied four times end to
// end where Linux copies it twice (docs/copies.md). This link copies none:
//
// - Each process has one arena, a memfd its peers map read-only, from
//   which its stack's bulk chunks (TCP send buffers) are taken
//   (xk::ChunkSource). A frame's payload that lies in the arena crosses as
//   (offset, length); headers and small frames cross inline in the
//   descriptor; anything else is copied once into a chunk of the arena.
// - The receiver hands that payload up as buffers over the peer's mapping
//   (read-only: a layer that wrote into it would fault, not corrupt), and
//   gives each back on a return ring when its last reference drops: the
//   sender's buffer is reused only then.
// So a program's write() copies into the send buffer and its peer's read()
// copies out of the sender's arena: two copies end to end, as Linux's.
//
// Set-up is a Unix seqpacket socket (`path`, one end listens): each end
// sends a hello with its ring region, its arena and its wake-up eventfd;
// memfds are sealed against shrinking, so a peer cannot make our reads of
// its memory fault. Every index or length read from shared memory is
// checked before use; a bad descriptor is a counted drop. The socket's
// hang-up is the link going down: a server listens again, a client keeps
// trying to connect. Waiting is an eventfd the peer writes when it sees our
// "asleep" flag (Dekker's order, as xk/drivers/doorbell.hpp): a busy link
// makes no system call.
//
// One thread (the loop's) runs the driver; buffers it handed up may be
// released on any thread.

#include <chrono>
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xk/driver.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/ipv4_wire.hpp"

namespace xk::drivers {

namespace shm {

// The process's arena: bulk chunks in a memfd the peers map (created by the
// first driver, kept until the process ends, installed as the chunk source
// of every Buf). Out of chunks, the heap serves the stack and its payload is
// copied into one of `reserve` chunks kept for the driver.
class Arena;
Arena& arena(std::size_t bytes);

// What crosses the link, in shared memory. Every field a peer writes is
// read once, into local memory, and checked there.
inline constexpr std::uint32_t kMagic = 0x786b7368;  // "xksh"
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kInline = 176;         // frame bytes carried in the descriptor
inline constexpr std::size_t kMaxRefs = 6;          // pieces of payload by reference
inline constexpr std::uint32_t kTokens = 16384;     // references a sender may have out
inline constexpr std::size_t kFrameMax = ipv4::Header::kMaxTotal + eth::Header::kSize;  // an IPv4 datagram and its Ethernet header

// One frame: its first inline_len bytes in `bytes`, the rest in nref pieces
// of the sender's arena, in order. The token names the reference, for the
// return ring.
struct Desc {
  struct Ref {
    std::uint32_t token;
    std::uint32_t off;  // into the sender's arena
    std::uint32_t len;
  };
  std::uint16_t inline_len;
  std::uint8_t nref;
  std::uint8_t flags;  // none yet
  std::uint32_t frame_len;
  Ref refs[kMaxRefs];
  std::byte bytes[kInline];
};
static_assert(sizeof(Desc) == 256, "a descriptor is four cache lines");

// A ring region: written by its owner only, mapped read-only by the peer.
// Each index on a cache line of its own, so the two ends' stores never
// share one. After it: `ring` descriptors, then kTokens return slots.
struct Region {
  struct alignas(64) Index {
    std::atomic<std::uint32_t> v{0};
  };
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t ring;  // descriptors (a power of two)
  Index tx_tail;       // descriptors we produced
  Index rx_head;       // the peer's descriptors we consumed
  Index ret_tail;      // the peer's tokens we gave back
  Index ret_head;      // our tokens the peer gave back that we took
  Index asleep;        // we sleep on our eventfd: wake us

  static std::size_t bytes(std::uint32_t ring) noexcept {
    return sizeof(Region) + ring * sizeof(Desc) + kTokens * sizeof(std::uint32_t);
  }
  Desc* descs() noexcept { return reinterpret_cast<Desc*>(this + 1); }
  const Desc* descs() const noexcept { return reinterpret_cast<const Desc*>(this + 1); }
  std::uint32_t* returns() noexcept { return reinterpret_cast<std::uint32_t*>(descs() + ring); }
  const std::uint32_t* returns() const noexcept { return reinterpret_cast<const std::uint32_t*>(descs() + ring); }
};

// The set-up message each end sends once connected, with three descriptors
// (SCM_RIGHTS): its region's memfd, its arena's memfd, its eventfd.
struct Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint8_t mac[6];
  std::uint16_t pad;
  std::uint32_t ring;
  std::uint32_t frame_max;  // the largest frame this end takes
  std::uint64_t arena_size;
};

}  // namespace shm

class ShmDriver final : public Driver, public Pollable {
 public:
  struct Config {
    std::string path;              // the set-up socket (a file; "@name" for an abstract one)
    bool server = false;           // listens on `path` (the other end connects)
    bool auto_role = false;        // whichever end comes first listens (`server` then says which)
    std::optional<MacAddr> mac;    // unset: derived from path and role
    std::size_t mtu = 1500;        // IP MTU of the frames a peer that is not xk would see
    std::size_t frame_max = shm::kFrameMax;  // largest frame taken (0: MTU-sized only)
    std::size_t ring = 1024;       // descriptors in this end's ring (a power of two)
    std::size_t arena_mb = 512;    // the process's arena (the first driver's size counts)
    std::size_t burst = 32;        // frames delivered per poll
    std::chrono::milliseconds retry{20};  // a client's connection attempts
    std::chrono::milliseconds hello_timeout{2000};  // a peer silent this long after connecting goes
  };

  // Opens the socket (a server binds and listens at once; a client tries on
  // each poll). Throws std::runtime_error with the reason.
  ShmDriver(std::string name, Config config, EventLoop* loop = nullptr);
  ~ShmDriver() override;

  // GetMtu: MTU + 14; GetLocalAddr: {MacAddr}; GetHeaderRoom: 0;
  // GetOffloads: segmentation (done here, into large frames); GetFrameMax:
  // the peer's largest frame once up.
  Result<ControlReply> control_any(const ControlQuery& query) override;

  std::size_t poll(std::size_t budget) override;
  int wait_fd() const noexcept override { return epoll_fd_; }
  bool before_sleep() noexcept override;
  void after_sleep() noexcept override;

  // Queue one frame (published to the peer at the end of the poll, or
  // at once past 32 KiB). Link down: the frame is lost, as on a wire
  // without carrier. would_block: the ring or the tokens are full.
  Status transmit(const Msg& frame);
  // What a session above pushes: transmit().
  Status send(Msg frame) override { return transmit(frame); }
  Link link_state() override { return up() ? Link::up : Link::down; }
  // Publish the queued descriptors and wake the peer if it sleeps.
  void flush() noexcept;
  // EventLoop::flush_output(): flush(); the descriptors it published.
  std::size_t flush_output() override {
    const std::uint32_t before = published_;
    flush();
    return published_ - before;
  }

  bool up() const noexcept { return state_ == State::up; }
  // This end listens (with role=auto: it came first).
  bool listening() const noexcept { return config_.server; }
  MacAddr mac() const noexcept { return mac_; }
  // The largest frame the peer takes now (0 while down).
  std::size_t tx_frame_max() const noexcept;
  // References the peer holds now (our buffers it has not given back).
  std::size_t tokens_out() const noexcept { return shm::kTokens - free_tokens_.size(); }

  struct PeerArena;

 private:
  using Desc = shm::Desc;
  using Region = shm::Region;
  enum class State : std::uint8_t { down, hello, up };
  struct Builder;
  void try_connect();
  void arm_timer(std::chrono::milliseconds after) noexcept;
  void settle_role(int& connected);
  void try_accept();
  void start_hello(int fd);
  void read_hello();
  void link_down(const char* why);
  std::size_t check_socket();  // the frames taken from a peer that left
  std::size_t take_returns();
  std::size_t receive(std::size_t budget);
  void deliver(const Desc& d);
  Status transmit_segmented(const Msg& frame);
  bool add_piece(Builder& b, Buf* buf, const std::byte* p, std::size_t n, std::size_t rest);
  bool add_range(Builder& b, const Msg& frame, std::size_t off, std::size_t len);
  // A free token for a reference to `buf` (which it holds), and back.
  std::uint32_t take_token(Buf* buf) noexcept;
  void give_token(std::uint32_t t) noexcept;
  void release(Builder& b) noexcept;
  Status post(Builder& b);
  void drop_tokens(const Desc& d) noexcept;

  Config config_;
  EventLoop* loop_;
  shm::Arena& arena_;
  MacAddr mac_{};
  State state_ = State::down;
  int listen_fd_ = -1;
  int sock_ = -1;
  int wake_fd_ = -1;       // our eventfd: the peer writes it to wake us
  int epoll_fd_ = -1;      // wake_fd_, the socket, the retry timer
  int timer_fd_ = -1;      // a client's next connection attempt, a hello's deadline
  std::chrono::steady_clock::time_point next_try_{};
  std::chrono::steady_clock::time_point hello_deadline_{};
  std::uint32_t polls_since_check_ = 0;

  // Ours (read-write) and the peer's (read-only), per connection.
  int region_fd_ = -1;
  Region* mine_ = nullptr;
  std::size_t mine_size_ = 0;
  const Region* peer_ = nullptr;
  std::size_t peer_size_ = 0;
  int peer_wake_fd_ = -1;
  PeerArena* peer_arena_ = nullptr;
  std::uint32_t peer_ring_ = 0;
  std::size_t peer_frame_max_ = 0;

  // Descriptors written, not yet published; tokens we have out.
  std::uint32_t tx_tail_ = 0;
  std::uint32_t published_ = 0;
  std::size_t unflushed_bytes_ = 0;
  std::vector<Buf*> tokens_;
  std::vector<std::uint32_t> free_tokens_;
  Buf* copy_chunk_ = nullptr;  // where payload outside the arena is copied
  std::size_t copy_fill_ = 0;


  Counter& rx_frames_;
  Counter& rx_bytes_;
  Counter& rx_bad_;
  Counter& tx_frames_;
  Counter& tx_bytes_;
  Counter& tx_refs_;
  Counter& tx_copied_;
  Counter& tx_large_frames_;
  Counter& tx_gso_;
  Counter& drop_too_big_;
  Counter& drop_link_down_;
  Counter& drop_ring_full_;
  Counter& drop_no_tokens_;
  Counter& drop_no_arena_;
  Counter& drop_offload_;
  Counter& drop_no_receiver_;
  Counter& bad_returns_;
  Counter& returns_lost_;
  Counter& links_up_;
  Counter& links_down_;
  Counter& refused_;
  Counter& wakes_sent_;
  Counter& sleeps_;
};

// Make the kind `shm` available to graph specs:
//   shm net0 path=/run/xk/a.sock role=server mtu=1500
void register_shm(Registry& registry);

}  // namespace xk::drivers

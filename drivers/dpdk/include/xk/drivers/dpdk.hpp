#pragma once
// dpdk: the bottom of a graph on a DPDK ethdev port -- any PMD: a NIC, a
// vdev such as net_af_packet (a veth), net_tap, net_pcap, net_memif, net_ring.
//
// Receive is zero-copy: every mbuf segment of a received frame becomes one
// fragment of the Msg handed up, and goes back to its mempool when the last
// fragment referring to it is dropped. Transmit copies once, into a fresh mbuf
// (chained when the frame is larger than one mbuf), and sends in bursts: at
// the end of each poll(), when a burst is full, and on flush().
//
// This header includes no DPDK header, so users of the driver need none of
// DPDK's compile flags; only the link flags travel with the library.
//
// The EAL (DPDK's environment) exists once per process. ensure_eal()
// initializes it on first use; every DpdkDriver calls it with its own config,
// and only the first call's config counts.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xk/drivers/doorbell.hpp"
#include "xk/driver.hpp"
#include "xk/event_loop.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"

struct rte_mbuf;
struct rte_mempool;

namespace xk::drivers {

namespace dpdk {

struct EalConfig {
  // Memory for the EAL heap (mempools, rings), from ordinary pages: the
  // defaults need no hugepages, no PCI access and no shared config.
  std::size_t memory_mb = 256;
  bool no_huge = true;
  bool no_pci = true;
  std::string log_level = "warning";
  // Appended after the defaults, e.g. {"--vdev=net_tap0", "-a", "0000:01:00.0"}.
  std::vector<std::string> extra_args;
};

// Initialize the EAL once for this process (thread-safe). Later calls do
// nothing and ignore their config. The file prefix is unique per process and
// call site ("xk-<pid>-<n>"), so concurrent processes never share state. The
// main lcore may run on any CPU the caller may run on: the calling thread's
// CPU affinity is left as it was. Throws std::runtime_error with DPDK's
// reason (rte_strerror) if initialization fails; a failure is final.
void ensure_eal(const EalConfig& config = {});
bool eal_ready() noexcept;
// The arguments the EAL was initialized with (empty before).
std::vector<std::string> eal_args();

// Probes a virtual device (after ensure_eal) without making a port of it:
// no queues, never started, kept until the process ends. filterd keeps one
// net_memif server interface on its channel socket this way, because DPDK
// 22.11's memif leaves the socket listening (its name taken) when the last
// interface on it is removed, and no interface can be made on it after that.
// Throws std::runtime_error with DPDK's reason.
void probe_vdev(const std::string& devargs);

// Runs `fn` on the EAL's interrupt thread -- where the PMDs handle their
// control events, such as a memif peer connecting or going away -- and waits
// for it; on that thread already, runs it in place. A port's probe, start,
// stop, close and removal go through here: DPDK 22.11's memif handles a
// peer's disconnect on that thread (unmapping the regions, closing the queue
// fds) without locking against rte_eth_dev_stop called from another, and the
// two together corrupted filterd's heap when a node left. An exception from
// `fn` is rethrown here.
void on_interrupt_thread(const std::function<void()>& fn);

// Split "--vdev=a --log-level=lib.eal:debug" into words (spaces separate;
// no quoting).
std::vector<std::string> split_args(const std::string& text);

}  // namespace dpdk

// What the port can do for the layers above; recorded at start-up.
struct DpdkOffloads {
  bool tx_ipv4_cksum = false;
  bool tx_udp_cksum = false;
  bool tx_tcp_cksum = false;
  bool rx_ipv4_cksum = false;  // rx mbufs carry IP checksum good/bad flags
  bool rx_l4_cksum = false;    // ... and UDP/TCP checksum flags
  bool tx_multi_segs = false;  // the PMD sends mbuf chains
  bool rx_scatter = false;     // the PMD receives into mbuf chains
};

struct DpdkLink {
  bool up = false;
  std::uint32_t speed_mbps = 0;
  bool full_duplex = false;
};

class DpdkDriver final : public Driver, public Pollable {
 public:
  struct Config {
    // The device: a vdev spec ("net_af_packet0,iface=veth0"), probed (and
    // removed again on destruction), or the name of a port the EAL already
    // probed (a PCI address given with eal.extra_args).
    std::string devargs;
    std::uint16_t rx_descriptors = 1024;
    std::uint16_t tx_descriptors = 1024;
    std::size_t burst = 32;  // frames per rx/tx burst, at most kMaxBurst
    std::size_t mbufs = 8191;  // mempool size (2^n - 1 is the efficient size)
    // Bytes of frame data per mbuf, not counting headroom. Frames larger than
    // this are chains of mbufs (rx scatter / tx multi-segment). Unset: 2048,
    // or one whole frame when the port cannot chain both ways.
    std::optional<std::size_t> mbuf_data;
    std::optional<std::size_t> mtu;  // IP MTU; unset: the port's own
    std::optional<MacAddr> mac;      // override the port's address
    bool promiscuous = false;
    bool csum_offload = true;  // enable the checksum offloads the port has
    bool rx_interrupt = true;  // sleep on rx interrupts when the PMD has them
    // Without rx interrupts, a sleeping loop is woken by a timer after this
    // long, doubling per idle sleep up to idle_sleep_max (adaptive back-off).
    std::chrono::microseconds idle_sleep_min{50};
    std::chrono::microseconds idle_sleep_max{1000};
    // On a net_memif port, a doorbell (xk/drivers/doorbell.hpp) wakes the
    // sleeping loop as soon as the peer puts frames on its ring; the back-off
    // timer stays as the fallback for a peer that does not ring (not xk, or
    // built without it). Both ends find the bell by the memif socket and id.
    bool doorbell = true;
    // While the peer says it rings (Doorbell::peer_rings), the timer is a
    // safety net only: an idle loop sleeps this long between looks instead
    // of backing off from idle_sleep_min to idle_sleep_max -- some 13
    // wake-ups in every 10 ms of quiet, each one a program thread's when it
    // sleeps beside the stack (xk::Stack::sleep_beside).
    std::chrono::microseconds bell_idle_sleep{10'000};
    // Keep frames the tx ring refuses and send them on a later flush, in
    // order, instead of dropping them; push() says would_block once
    // tx_keep_max frames wait. For channels whose protocol never drops
    // (central mode's relay).
    bool tx_keep = false;
    std::size_t tx_keep_max = 1024;
    // Segmentation offload in software: offer Offload::tx_tcp_seg and cut
    // such a TCP segment into MTU-sized frames while copying it into mbufs
    // (docs/dpdk-driver.md, "Segmentation offload").
    bool gso = true;
    // A frame that is one whole mbuf some port of this process received
    // (filterd forwarding it, a relay) is sent as that mbuf, not copied.
    bool tx_zero_copy = true;
    // Large frames (docs/dpdk-driver.md, "Large frames"): a net_memif link
    // between two xk processes of one host is not a wire, so segments from
    // the stack may cross it as frames of up to this many bytes (whole
    // segments, cut at segment boundaries) instead of MTU-sized ones. Used
    // only once the other end says on the doorbell page that it takes them;
    // a client sizes the ring's slots for them. 0: MTU-sized frames only.
    std::size_t frame_max = kDefaultFrameMax;
    // Payload of a segment the driver cuts leaves in mbufs attached to the
    // stack's own buffers (rte_pktmbuf_attach_extbuf) rather than copied
    // into mbufs first -- on a port whose PMD copies what it sends anyway (a
    // virtual device: memif, af_packet, tap, pcap). Never on a PCI port,
    // whose DMA could not reach the stack's memory.
    bool tx_extbuf = true;
    // Receive coalescing (docs/dpdk-driver.md, "Receive coalescing"): the
    // in-order TCP segments of a flow that arrive in one burst go up as
    // one. gro_verify: each segment's checksum is checked before it merges
    // (and marked good, so TCP does not check it again); off, for stacks
    // with checksums off: the merged checksum is carried from the parts'.
    bool gro = true;
    bool gro_verify = true;
    // The largest frame coalescing makes, Ethernet header included (0: 64
    // KB datagrams). filterd's external port makes them no larger than its
    // nodes' channels take, so they are forwarded whole.
    std::size_t gro_max = 0;
    dpdk::EalConfig eal;
  };

  static constexpr std::size_t kMaxBurst = 256;
  // The default largest frame on a link that carries large frames: 16 KiB
  // slots, 128 of them a ring (docs/dpdk-driver.md, "Large frames", for the
  // sizes measured against each other).
  static constexpr std::size_t kDefaultFrameMax = 16 * 1024;

  // Start-up: initializes the EAL if needed, probes the device, configures one
  // rx and one tx queue and starts the port. Throws std::runtime_error with
  // DPDK's reason on any failure. With a loop, registers itself there.
  DpdkDriver(std::string name, Config config, EventLoop* loop = nullptr);
  // Stops and closes the port, removes a device it probed, frees the mempool
  // (unless received Msgs still hold mbufs: then the pool is left allocated,
  // so those Msgs stay valid, and counted in dpdk_pools_leaked()).
  ~DpdkDriver() override;

  // GetMtu: largest frame without FCS (MTU + 14); GetLocalAddr: {MacAddr};
  // GetHeaderRoom: 0; GetOffloads: the checksum offloads turned on;
  // GetFrameMax: the larger of GetMtu and tx_frame_max().
  Result<ControlReply> control_any(const ControlQuery& query) override;

  // Receive up to `budget` frames and deliver them; then send what is queued.
  std::size_t poll(std::size_t budget) override;
  // The rx interrupt's descriptor, or the back-off timer's (with the doorbell:
  // an epoll set holding both).
  int wait_fd() const noexcept override { return wait_fd_; }
  bool before_sleep() noexcept override;
  void after_sleep() noexcept override;

  // Queue one frame for transmit (copied into an mbuf chain; a frame made
  // only of mbufs this process received goes as those mbufs). would_block if
  // no mbuf is free; too_large above GetFrameMax. A frame marked tx_tcp_seg
  // is cut into MTU-sized frames (segmentation offload in software), or
  // large ones of whole segments where the peer takes them.
  Status transmit(const Msg& frame);
  // What a session above pushes: transmit().
  Status send(Msg frame) override { return transmit(frame); }
  Link link_state() override { return link().up ? Link::up : Link::down; }
  // Send the queued frames now. Frames the tx ring has no room for are freed
  // and counted in tx_drop_full. Returns how many were sent.
  std::size_t flush();
  std::size_t flush_output() override { return flush(); }

  std::uint16_t port_id() const noexcept { return port_; }
  MacAddr mac() const noexcept { return mac_; }
  std::size_t mtu() const noexcept { return mtu_; }
  const DpdkOffloads& offloads() const noexcept { return offloads_; }
  // Free mbufs in this port's pool now (walks every lcore's cache: not for
  // the data path).
  std::size_t mbufs_free() const noexcept;
  // Whether the loop sleeps on an rx interrupt (else on the back-off timer).
  bool rx_interrupt_active() const noexcept { return rx_intr_; }
  // Whether a doorbell wakes the sleeping loop (a memif port, doorbell on).
  bool doorbell_active() const noexcept { return bell_ != nullptr; }
  // The largest frame a segment may leave in now: above the MTU only on a
  // large-frame link whose other end takes them; 0 otherwise.
  std::size_t tx_frame_max() const noexcept;
  // Whether cut segments' payload leaves attached, not copied.
  bool tx_extbuf_active() const noexcept { return ext_pool_ != nullptr; }
  // Queries the port now (no waiting) and updates the link_up counter.
  DpdkLink link();
  // Stops the port and starts it again (frames waiting to be sent are
  // dropped). A net_memif client connects to its server only when it starts
  // -- DPDK 22.11 does not retry after the server went away -- so a node
  // whose filterd came back starts its channel again. not_connected if the
  // port does not start (the memif server is not there yet); try later.
  Status restart();
  // Driver::reconnect: a memif client restarts (restart()); any other port
  // comes back by itself.
  Status reconnect() override;
  // The port's own statistics (rte_eth_stats), folded into counters named
  // port_ipackets, port_opackets, port_imissed, port_ierrors, port_oerrors,
  // port_rx_nombuf.
  void update_port_stats();

 private:
  void deliver(rte_mbuf* head);
  // The port's bursts, fenced on memif (xk/drivers/fault_fence.hpp): a burst
  // the peer's disconnect cut short gets 0 and sets cut_.
  std::uint16_t rx_burst(rte_mbuf** burst, std::uint16_t want);
  std::uint16_t tx_burst(rte_mbuf** burst, std::uint16_t n);
  Status transmit_segmented(const Msg& frame);
  // Sets `m`'s transmit flags to `ol_flags` (checksums for the port; 0:
  // none) with the header lengths they need.
  void request_offloads(rte_mbuf* m, std::uint64_t ol_flags, std::size_t l3_len) noexcept;
  // Queues `m` for the next burst; a full burst goes at once.
  void enqueue(rte_mbuf* m);
  // The received mbuf `f` is one whole window of, or nullptr.
  static rte_mbuf* sole_mbuf(const Frag& f) noexcept;
  // The received mbufs `frame` is made of, chained for the PMD, or nullptr.
  static constexpr std::size_t kMaxChain = 64;
  static rte_mbuf* received_chain(const Msg& frame) noexcept;
  // Append `len` bytes to the chain `head`..`tail`, chaining mbufs as
  // needed; with `sum`, add their checksum (offset `at` in what is summed).
  // false: no mbuf left (the chain is the caller's to free).
  bool append(rte_mbuf* head, rte_mbuf*& tail, const std::byte* src, std::size_t len, std::uint32_t* sum,
              std::size_t at);
  // Chain `len` bytes of fragment `f` from `off` on to `head`..`tail` as an
  // mbuf attached to the fragment's buffer, which it holds a reference to
  // until the PMD frees it; with `sum`, add their checksum. false: no mbuf.
  bool attach(rte_mbuf* head, rte_mbuf*& tail, const Frag& f, std::size_t off, std::size_t len, std::uint32_t* sum,
              std::size_t at);
  void fault_cut(const char* what);
  void start_port();
  void setup_wait();
  void open_doorbell();
  // Says on the doorbell page how large a frame this end takes.
  void publish_frame_max() noexcept;
  std::size_t large_frame_cap(std::size_t limit) const noexcept;
  // Free mbufs this thread can take: the pool's ring and this lcore's
  // cache (cheap enough for the data path; mbufs_free() is exact).
  std::size_t mbufs_free_here() const noexcept;
  void release() noexcept;

  Config config_;
  EventLoop* loop_;
  std::string device_name_;
  bool probed_ = false;  // we probed the device, so we remove it
  bool port_valid_ = false;
  bool started_ = false;
  std::uint16_t port_ = 0;
  rte_mempool* pool_ = nullptr;
  std::size_t tx_unflushed_bytes_ = 0;  // queued since the last flush
  static constexpr std::size_t kTxFlushBytes = 32 * 1024;
  void* pool_ring_ = nullptr;         // pool_'s rte_ring, when its ops are ring-based
  rte_mempool* ext_pool_ = nullptr;  // tx_extbuf: data-less mbufs to attach payload with
  std::uint64_t iova_va_ = 0;        // 1 when IOVA is the virtual address (else none given)
  std::size_t slot_size_ = 0;        // a memif client's slot bytes (0: the server's side, unknown)
  std::size_t data_room_ = 2048;  // the mbufs' data room
  std::size_t rx_mbufs_per_frame_ = 0;  // memif: mbufs the largest frame it may receive takes
  MacAddr mac_{};
  std::size_t mtu_ = 1500;
  DpdkOffloads offloads_;
  bool rx_intr_ = false;
  int epoll_fd_ = -1;  // rx interrupt: the queue's event fd lives in here
  int timer_fd_ = -1;  // no rx interrupt: the back-off timer
  std::unique_ptr<Doorbell> bell_;  // memif: the peer's wake-up call
  std::string bell_link_;
  int bell_side_ = 1;
  // Frames the pre-sleep look at the ring found, delivered by the next poll.
  std::vector<rte_mbuf*> stash_;
  int wait_fd_ = -1;
  std::chrono::microseconds backoff_{0};
  bool intr_switch_ = false;  // the PMD enables/disables the interrupt
  bool intr_armed_ = false;
  bool fenced_ = false;  // memif: its peer's disconnect unmaps memory under a burst
  bool cut_ = false;     // the last burst was cut short
  // The pool is short of mbufs (under a quarter free): received frames say
  // so (Offload::rx_scarce), and layers that keep them copy them. Counting
  // the free mbufs walks every lcore's cache, so it is done once per
  // pool_check_every_ frames received.
  bool scarce_ = false;
  std::size_t scarce_below_ = 0;
  std::size_t pool_check_every_ = 1;
  std::size_t until_pool_check_ = 1;

  std::vector<rte_mbuf*> tx_queue_;

  Counter& rx_frames_;
  Counter& rx_bytes_;
  Counter& rx_multi_seg_;
  Counter& rx_csum_bad_;
  Counter& tx_frames_;
  Counter& tx_bytes_;
  Counter& tx_drop_full_;
  Counter& tx_kept_;
  Counter& tx_nombuf_;
  Counter& drop_too_big_;
  Counter& drop_no_receiver_;
  Counter& drop_offload_;
  Counter& tx_csum_offload_;
  Counter& tx_zero_copy_;
  Counter& tx_gso_;
  Counter& tx_gso_pieces_;
  Counter& tx_large_frames_;
  Counter& tx_extbuf_;
  Counter& drop_wrap_;
  Counter& rx_gro_merged_;
  Counter& rx_gro_groups_;
  Counter& rx_gro_bad_csum_;
  Counter& rx_held_back_;
  Counter& rx_scarce_;
  Counter& link_up_;
  Counter& intr_sleeps_;
  Counter& timer_sleeps_;
  Counter& restarts_;
  Counter& bell_rings_;
  Counter& bell_wakes_;
  Counter& bell_failures_;
  Counter& fault_cuts_;
};

// Mempools left allocated by drivers destroyed while Msgs still held mbufs.
std::size_t dpdk_pools_leaked() noexcept;

// Make the kind `dpdk` available to graph specs:
//   dpdk net0 devargs=net_af_packet0,iface=veth0 mtu=1500 promisc=on
void register_dpdk(Registry& registry);

}  // namespace xk::drivers

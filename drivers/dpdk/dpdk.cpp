#include "xk/drivers/dpdk.hpp"
#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/tcp_wire.hpp"

#include <rte_dev.h>
#include <rte_epoll.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"
#include "xk/segment.hpp"
#include "xk/drivers/fault_fence.hpp"
#include "gro.hpp"

namespace xk::drivers {
namespace {

constexpr std::size_t kEthHeader = eth::Header::kSize;
constexpr std::size_t kDefaultMbufData = 2048;
// Shorter payload pieces are copied: an mbuf to attach costs about as much.
constexpr std::size_t kMinAttach = 256;

std::atomic<std::size_t> g_pools_leaked{0};
std::atomic<unsigned> g_pool_serial{0};

[[noreturn]] void fail(const std::string& who, const std::string& what, int err) {
  throw std::runtime_error("dpdk " + who + ": " + what + ": " + rte_strerror(err < 0 ? -err : err));
}

// The deleter of one received mbuf segment: back to its mempool.
void free_segment(void* ctx, std::byte*) { rte_pktmbuf_free_seg(static_cast<rte_mbuf*>(ctx)); }

std::string device_name_of(const std::string& devargs) { return devargs.substr(0, devargs.find(',')); }

// The port of a device. Usually the port has the device's name, but not
// always (net_ring with nodeaction= names its port after the ring), so the
// devices of all ports are compared too.
bool find_port(const std::string& device, std::uint16_t& port) {
  if (rte_eth_dev_get_port_by_name(device.c_str(), &port) == 0) return true;
  for (std::uint16_t p = rte_eth_find_next(0); p < RTE_MAX_ETHPORTS; p = rte_eth_find_next(static_cast<std::uint16_t>(p + 1))) {
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(p, &info) == 0 && info.device != nullptr && device == rte_dev_name(info.device)) {
      port = p;
      return true;
    }
  }
  return false;
}

// Probing for rx interrupts on a PMD without them makes ethdev log an error;
// the driver expects that answer and falls back, so the line is muted.
class QuietEthdevLog {
 public:
  QuietEthdevLog() : type_(rte_log_register("lib.ethdev")) {
    if (type_ >= 0) {
      level_ = rte_log_get_level(static_cast<std::uint32_t>(type_));
      (void)rte_log_set_level(static_cast<std::uint32_t>(type_), RTE_LOG_CRIT);
    }
  }
  ~QuietEthdevLog() {
    if (type_ >= 0 && level_ >= 0) (void)rte_log_set_level(static_cast<std::uint32_t>(type_), static_cast<std::uint32_t>(level_));
  }
  QuietEthdevLog(const QuietEthdevLog&) = delete;
  QuietEthdevLog& operator=(const QuietEthdevLog&) = delete;

 private:
  int type_;
  int level_ = -1;
};

}  // namespace

std::size_t dpdk_pools_leaked() noexcept { return g_pools_leaked.load(std::memory_order_relaxed); }

namespace {

// The value of `key=` in devargs, or "".
std::string devarg(const std::string& devargs, const std::string& key) {
  const std::string k = "," + key + "=";
  const std::size_t at = devargs.find(k);
  if (at == std::string::npos) return "";
  const std::size_t from = at + k.size();
  return devargs.substr(from, devargs.find(',', from) - from);
}

// How long a memif client tries to start while its server is not there yet.
constexpr int kClientStartTries = 100;
constexpr auto kClientStartPause = std::chrono::milliseconds(50);

bool memif_client(const std::string& devargs) {
  return devargs.rfind("net_memif", 0) == 0 && devargs.find("role=server") == std::string::npos;
}

// A net_memif client makes the link's shared memory, so it sizes the slots.
// DPDK 22.11's memif garbles frames that take several slots: it never clears
// the "next" flag of a packet's first slot, so a slot that once began a
// chain glues whatever later begins there to the frame after it (seen when
// the ring fills part way through a frame and short frames follow, and with
// frames of mixed lengths; docs/dpdk-driver.md). So every frame must fit one
// slot: a slot as large as the largest frame, the MTU's or a large frame's.
// Large slots make a large ring, which the two ends' caches then cycle
// through, so the ring gets fewer of them: about 2 MiB a direction, as
// 1024 slots of 2 KiB (and never under 32 slots).
std::string memif_devargs(const std::string& devargs, std::optional<std::size_t> mtu, std::size_t frame_max) {
  if (!memif_client(devargs)) return devargs;
  std::size_t frame = mtu ? *mtu + kEthHeader + 4 : 0;  // with an FCS's room, as ethdev counts
  frame = std::max(frame, frame_max);
  std::string out = devargs;
  if (frame > kDefaultMbufData && devarg(devargs, "bsize").empty()) {
    const std::size_t bsize = std::min<std::size_t>((frame + 127) / 128 * 128, 65535);
    out += ",bsize=" + std::to_string(bsize);
    if (frame_max != 0 && devarg(devargs, "rsize").empty()) {
      unsigned rsize = 5;
      while (rsize < 10 && (std::size_t{2} << rsize) * frame <= std::size_t{2} << 20) ++rsize;
      out += ",rsize=" + std::to_string(rsize);
    }
  }
  return out;
}

// DPDK 22.11's net_af_packet joins a PACKET_FANOUT group with
// PACKET_FANOUT_FLAG_DEFRAG, so the kernel reassembles IPv4 fragments
// before the PMD sees them: one frame of up to 64 KB per datagram. With the
// PMD's own ring (framesz=2048) anything over 1982 bytes would be cut off,
// so a ring the user did not size gets frames that hold a reassembled
// datagram: framesz must divide blocksz (a whole number of pages), and the
// PMD wants an mbuf data room of framesz - 32, at most 65535 less the
// headroom -- 61440 is the largest size that meets both. 256 frames a ring
// (15 MiB each way). The mbufs get that room (unless the user sized them),
// and the pool at most 1023 of them (63 MB) so it fits the EAL's memory.
constexpr std::size_t kAfPacketFrame = 61440;
constexpr std::size_t kAfPacketFrames = 256;
constexpr std::size_t kAfPacketRxOverhead = 32;  // the PMD's: framesz less what a frame may hold
constexpr std::size_t kAfPacketMbufs = 1023;

bool af_packet(const std::string& devargs) { return devargs.rfind("net_af_packet", 0) == 0; }

std::string af_packet_devargs(const std::string& name, const std::string& devargs, DpdkDriver::Config& config) {
  if (!af_packet(devargs)) return devargs;
  std::string out = devargs;
  std::size_t framesz = 2048;  // the PMD's default
  if (const std::string f = devarg(devargs, "framesz"); !f.empty()) {
    framesz = std::stoul(f);
  } else if (devarg(devargs, "blocksz").empty()) {
    framesz = kAfPacketFrame;
    out += ",blocksz=" + std::to_string(kAfPacketFrame) + ",framesz=" + std::to_string(kAfPacketFrame);
    if (devarg(devargs, "framecnt").empty()) out += ",framecnt=" + std::to_string(kAfPacketFrames);
  }
  const std::size_t holds = framesz > kAfPacketRxOverhead ? framesz - kAfPacketRxOverhead : 0;
  const std::size_t mtu_frame = config.mtu.value_or(RTE_ETHER_MTU) + kEthHeader;
  if (holds < mtu_frame) {
    throw std::invalid_argument("dpdk " + name + ": af_packet framesz=" + std::to_string(framesz) + " holds frames of " +
                                std::to_string(holds) + " bytes, less than the MTU's " + std::to_string(mtu_frame) +
                                " (leave framesz out and the driver sizes the ring)");
  }
  if (config.mbuf_data) {
    if (*config.mbuf_data < holds) {
      throw std::invalid_argument("dpdk " + name + ": af_packet framesz=" + std::to_string(framesz) + " needs mbuf_data >= " +
                                  std::to_string(holds) + " (the PMD copies a whole frame into one mbuf)");
    }
  } else if (holds > kDefaultMbufData) {
    config.mbuf_data = holds;
    config.mbufs = std::min(config.mbufs, kAfPacketMbufs);
  }
  return out;
}

// The external buffer of an attached mbuf goes back with its last mbuf:
// the stack's reference to the buffer is dropped (tx_extbuf).
void release_attached(void*, void* buf) { static_cast<Buf*>(buf)->unref(); }

}  // namespace

DpdkDriver::DpdkDriver(std::string name, Config config, EventLoop* loop)
    : Driver(std::move(name), "dpdk"),
      config_(std::move(config)),
      loop_(loop),
      rx_frames_(counters().add("rx_frames")),
      rx_bytes_(counters().add("rx_bytes")),
      rx_multi_seg_(counters().add("rx_multi_seg", "frames received as a chain of mbufs")),
      rx_csum_bad_(counters().add("rx_csum_bad", "frames the port flagged with a bad IP or L4 checksum")),
      tx_frames_(counters().add("tx_frames", "frames the tx ring took")),
      tx_bytes_(counters().add("tx_bytes")),
      tx_drop_full_(counters().add("tx_drop_full", "frames dropped: the tx ring was full")),
      tx_kept_(counters().add("tx_kept", "tx_keep: frames the ring refused, kept for a later flush")),
      tx_nombuf_(counters().add("tx_nombuf", "frames refused: no free mbuf")),
      drop_too_big_(counters().add("drop_too_big", "frames refused: larger than the MTU allows")),
      drop_no_receiver_(counters().add("drop_no_receiver", "frames received with nobody enabled")),
      drop_offload_(counters().add("drop_offload", "frames refused: a checksum offload the port lacks")),
      tx_csum_offload_(counters().add("tx_csum_offload", "frames sent with a checksum left to the port")),
      tx_zero_copy_(counters().add("tx_zero_copy", "frames sent as the mbuf they were received in (no copy)")),
      tx_gso_(counters().add("tx_gso", "segmentation offload: large TCP segments cut into frames")),
      tx_gso_pieces_(counters().add("tx_gso_pieces", "segmentation offload: frames those became")),
      tx_large_frames_(counters().add("tx_large_frames", "frames larger than the MTU sent on a large-frame link")),
      tx_extbuf_(counters().add("tx_extbuf", "payload pieces sent attached to the stack's buffers (not copied)")),
      drop_wrap_(counters().add("drop_wrap", "frames dropped: no memory to wrap an mbuf")),
      rx_gro_merged_(counters().add("rx_gro_merged", "segments coalesced onto an earlier one of their flow")),
      rx_gro_groups_(counters().add("rx_gro_groups", "frames delivered holding several coalesced segments")),
      rx_gro_bad_csum_(counters().add("rx_gro_bad_csum", "segments left alone: their TCP checksum failed")),
      rx_held_back_(counters().add("rx_held_back", "memif bursts shortened: too few mbufs free for whole frames")),
      rx_scarce_(counters().add("rx_scarce", "frames received while the mempool ran low (layers keeping them copy)")),
      link_up_(counters().add("link_up", "1 if the link was up when last asked")),
      intr_sleeps_(counters().add("intr_sleeps", "loop sleeps armed with the rx interrupt")),
      timer_sleeps_(counters().add("timer_sleeps", "loop sleeps bounded by the back-off timer")),
      restarts_(counters().add("restarts", "times the port was stopped and started again")),
      bell_rings_(counters().add("bell_rings", "doorbell: sleeping peer woken after a transmit")),
      bell_wakes_(counters().add("bell_wakes", "doorbell: rings that woke this loop")),
      bell_failures_(counters().add("bell_failures", "doorbell: rings nobody was there to hear")),
      fault_cuts_(counters().add("fault_cuts", "memif bursts cut short by the peer's disconnect (mbufs lost)")) {
  if (config_.devargs.empty()) throw std::invalid_argument("dpdk " + this->name() + ": devargs is required");
  config_.burst = std::clamp<std::size_t>(config_.burst, 1, kMaxBurst);
  if (config_.idle_sleep_min.count() <= 0) config_.idle_sleep_min = std::chrono::microseconds(1);
  config_.idle_sleep_max = std::max(config_.idle_sleep_max, config_.idle_sleep_min);
  tx_queue_.reserve(config_.burst);
  stash_.reserve(kMaxBurst);  // filled in before_sleep(), which must not allocate
  try {
    dpdk::ensure_eal(config_.eal);
    device_name_ = device_name_of(config_.devargs);
    std::uint16_t port = 0;
    if (!find_port(device_name_, port)) {
      const std::string devargs =
          af_packet_devargs(this->name(), memif_devargs(config_.devargs, config_.mtu, config_.frame_max), config_);
      int rc = 0;
      dpdk::on_interrupt_thread([&] { rc = rte_dev_probe(devargs.c_str()); });
      if (rc != 0) fail(this->name(), "cannot probe '" + devargs + "'", rc);
      if (const std::string b = devarg(devargs, "bsize"); !b.empty()) slot_size_ = std::stoul(b);
      else if (memif_client(devargs)) slot_size_ = kDefaultMbufData;
      probed_ = true;
      if (!find_port(device_name_, port)) {
        throw std::runtime_error("dpdk " + this->name() + ": '" + config_.devargs + "' was probed but has no ethdev port");
      }
    }
    port_ = port;
    port_valid_ = true;
    dpdk::on_interrupt_thread([this] { start_port(); });
    setup_wait();
    publish_frame_max();
    (void)link();
  } catch (...) {
    release();
    throw;
  }
  if (loop_ != nullptr) loop_->add(*this);
}

DpdkDriver::~DpdkDriver() {
  if (loop_ != nullptr) loop_->remove(*this);
  // What the layers sent last (a FIN, a final ACK) still goes out.
  if (started_) (void)flush();
  release();
}

void DpdkDriver::start_port() {
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(port_, &info); rc != 0) fail(name(), "rte_eth_dev_info_get", rc);

  offloads_.tx_multi_segs = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
  offloads_.rx_scatter = (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER) != 0;
  if (config_.csum_offload) {
    offloads_.tx_ipv4_cksum = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
    offloads_.tx_udp_cksum = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) != 0;
    offloads_.tx_tcp_cksum = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_TCP_CKSUM) != 0;
    offloads_.rx_ipv4_cksum = (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) != 0;
    offloads_.rx_l4_cksum =
        (info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_UDP_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM)) ==
        (RTE_ETH_RX_OFFLOAD_UDP_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM);
  }

  std::size_t want_mtu = config_.mtu.value_or(RTE_ETHER_MTU);
  std::size_t frame = want_mtu + kEthHeader;
  // Frames larger than one mbuf travel as chains. When the port cannot chain
  // both ways, and the user did not size the mbufs, make one mbuf hold a frame.
  std::size_t data_room = config_.mbuf_data.value_or(kDefaultMbufData);
  if (!config_.mbuf_data && frame > data_room && !(offloads_.tx_multi_segs && offloads_.rx_scatter)) {
    data_room = frame;
  }
  data_room = std::max<std::size_t>(data_room, info.min_rx_bufsize);
  if (data_room + RTE_PKTMBUF_HEADROOM > UINT16_MAX) {
    throw std::invalid_argument("dpdk " + name() + ": mbuf data room " + std::to_string(data_room) + " too large");
  }

  int socket = rte_eth_dev_socket_id(port_);
  if (socket < 0) socket = SOCKET_ID_ANY;
  char pool_name[RTE_MEMPOOL_NAMESIZE];
  std::snprintf(pool_name, sizeof pool_name, "xk_pool%u", g_pool_serial.fetch_add(1));
  unsigned cache = static_cast<unsigned>(std::min<std::size_t>(RTE_MEMPOOL_CACHE_MAX_SIZE, config_.mbufs / 8));
  pool_ = rte_pktmbuf_pool_create(pool_name, static_cast<unsigned>(config_.mbufs), cache, 0,
                                  static_cast<std::uint16_t>(data_room + RTE_PKTMBUF_HEADROOM), socket);
  if (pool_ == nullptr) fail(name(), "cannot create a mempool of " + std::to_string(config_.mbufs) + " mbufs", rte_errno);
  // tx_extbuf: mbufs with no data room of their own, each with room for the
  // shared info of the buffer it is attached to (its private area). Only
  // where the PMD copies what it sends: a virtual device (named net_*).
  if (config_.tx_extbuf && offloads_.tx_multi_segs && device_name_.rfind("net_", 0) == 0) {
    std::snprintf(pool_name, sizeof pool_name, "xk_ext%u", g_pool_serial.fetch_add(1));
    const auto priv = static_cast<std::uint16_t>(RTE_ALIGN(sizeof(rte_mbuf_ext_shared_info), RTE_MBUF_PRIV_ALIGN));
    ext_pool_ = rte_pktmbuf_pool_create(pool_name, static_cast<unsigned>(config_.mbufs), cache, priv, 0, socket);
    if (ext_pool_ == nullptr) fail(name(), "cannot create a mempool of " + std::to_string(config_.mbufs) + " mbufs", rte_errno);
    iova_va_ = rte_eal_iova_mode() == RTE_IOVA_VA ? 1 : 0;
  }
  // The common store of a ring-based pool (DPDK's default ops), for a
  // cheap count of what is free (mbufs_free_here).
  if (std::strncmp(rte_mempool_get_ops(pool_->ops_index)->name, "ring", 4) == 0) pool_ring_ = pool_->pool_data;
  scarce_below_ = config_.mbufs / 4;
  pool_check_every_ = std::max<std::size_t>(1, config_.mbufs / 16);
  until_pool_check_ = 1;

  // DPDK 22.11's memif reports a 1518-byte max_rx_pktlen, yet it moves longer
  // frames as descriptor chains between the two processes' shared memory: a
  // larger MTU is ours to keep, and ethdev is not told (it would refuse it).
  const bool memif = std::string_view(info.driver_name != nullptr ? info.driver_name : "") == "net_memif";
  const bool soft_mtu = config_.mtu && *config_.mtu + kEthHeader + 4 > info.max_rx_pktlen && memif;
  fenced_ = memif;
  rte_eth_conf conf{};
  if (config_.mtu && !soft_mtu) conf.rxmode.mtu = static_cast<std::uint32_t>(*config_.mtu);
  if (frame > data_room && offloads_.rx_scatter) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
  if (offloads_.tx_multi_segs) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  if (offloads_.tx_ipv4_cksum) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
  if (offloads_.tx_udp_cksum) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
  if (offloads_.tx_tcp_cksum) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
  if (offloads_.rx_ipv4_cksum) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
  if (offloads_.rx_l4_cksum) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_UDP_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM;

  // Rx interrupts are asked for at configure time; a PMD that has none may
  // refuse the configuration or the start, and then runs without.
  bool want_intr = config_.rx_interrupt;
  for (;;) {
    conf.intr_conf.rxq = want_intr ? 1 : 0;
    int rc = rte_eth_dev_configure(port_, 1, 1, &conf);
    std::uint16_t rxd = config_.rx_descriptors;
    std::uint16_t txd = config_.tx_descriptors;
    if (rc == 0) rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_, &rxd, &txd);
    // The configured MTU is ethdev's record; set_mtu also tells the device
    // (af_packet: the kernel interface). Not every PMD has the operation.
    if (rc == 0 && config_.mtu && !soft_mtu) {
      int m = rte_eth_dev_set_mtu(port_, static_cast<std::uint16_t>(*config_.mtu));
      if (m != -ENOTSUP) rc = m;
    }
    if (rc == 0) rc = rte_eth_rx_queue_setup(port_, 0, rxd, static_cast<unsigned>(socket), nullptr, pool_);
    if (rc == 0) rc = rte_eth_tx_queue_setup(port_, 0, txd, static_cast<unsigned>(socket), nullptr);
    if (rc == 0) rc = rte_eth_dev_start(port_);
    // A memif client cannot start before its server listens (its connect is
    // refused): one started beside its peer (mpirun's two ranks) waits for
    // it a while, as it would wait for the link.
    if (rc != 0 && memif_client(config_.devargs)) {
      // Quietly: the PMD logs every refused connect.
      const int log_type = rte_log_register("pmd.net.memif");
      const int level = log_type >= 0 ? rte_log_get_level(static_cast<std::uint32_t>(log_type)) : -1;
      if (level >= 0) (void)rte_log_set_level(static_cast<std::uint32_t>(log_type), RTE_LOG_CRIT);
      for (int tries = 0; rc != 0 && tries < kClientStartTries; ++tries) {
        std::this_thread::sleep_for(kClientStartPause);
        rc = rte_eth_dev_start(port_);
      }
      if (level >= 0) (void)rte_log_set_level(static_cast<std::uint32_t>(log_type), static_cast<std::uint32_t>(level));
    }
    if (rc == 0) {
      started_ = true;
      rx_intr_ = want_intr;  // confirmed (or not) in setup_wait()
      break;
    }
    if (!want_intr) fail(name(), "cannot configure and start port " + std::to_string(port_), rc);
    want_intr = false;
  }

  if (config_.mac) {
    rte_ether_addr addr{};
    std::memcpy(addr.addr_bytes, config_.mac->bytes.data(), 6);
    if (int rc = rte_eth_dev_default_mac_addr_set(port_, &addr); rc != 0) fail(name(), "cannot set the MAC address", rc);
  }
  if (config_.promiscuous) {
    if (int rc = rte_eth_promiscuous_enable(port_); rc != 0) fail(name(), "cannot enable promiscuous mode", rc);
  }
  rte_ether_addr addr{};
  if (int rc = rte_eth_macaddr_get(port_, &addr); rc != 0) fail(name(), "rte_eth_macaddr_get", rc);
  std::memcpy(mac_.bytes.data(), addr.addr_bytes, 6);
  std::uint16_t mtu = 0;
  mtu_ = rte_eth_dev_get_mtu(port_, &mtu) == 0 && mtu != 0 ? mtu : want_mtu;
  if (soft_mtu) mtu_ = *config_.mtu;
  data_room_ = data_room;
  if (memif) rx_mbufs_per_frame_ = (mtu_ + kEthHeader + data_room - 1) / data_room;
}

void DpdkDriver::setup_wait() {
  if (rx_intr_) {
    // The queue's event descriptor goes into an epoll set of our own: the
    // loop's epoll watches that set (epoll descriptors nest), and draining it
    // with rte_epoll_wait lets DPDK read the event the way the PMD needs.
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    QuietEthdevLog quiet;
    bool added = epoll_fd_ >= 0 && rte_eth_dev_rx_intr_ctl_q(port_, 0, epoll_fd_, RTE_INTR_EVENT_ADD, nullptr) == 0;
    if (added) {
      // Most PMDs arm the interrupt on demand; a few (net_tap: the event is
      // the queue's own descriptor) have it on all the time and no switch.
      int rc = rte_eth_dev_rx_intr_enable(port_, 0);
      if (rc == 0 || rc == -ENOTSUP) {
        intr_switch_ = rc == 0;
        if (intr_switch_) (void)rte_eth_dev_rx_intr_disable(port_, 0);
        wait_fd_ = epoll_fd_;
        return;
      }
      (void)rte_eth_dev_rx_intr_ctl_q(port_, 0, epoll_fd_, RTE_INTR_EVENT_DEL, nullptr);
    }
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    epoll_fd_ = -1;
    rx_intr_ = false;
  }
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) throw std::runtime_error("dpdk " + name() + ": timerfd_create: " + std::strerror(errno));
  wait_fd_ = timer_fd_;
  if (config_.doorbell) bell_link_ = Doorbell::memif_link(config_.devargs, bell_side_);
  if (bell_link_.empty()) return;
  // The loop waits on one descriptor per source: an epoll set of our own
  // holds the timer and the bell (whose socket changes on restart()).
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw std::runtime_error("dpdk " + name() + ": epoll_create1: " + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &ev) != 0) {
    throw std::runtime_error("dpdk " + name() + ": epoll_ctl: " + std::strerror(errno));
  }
  wait_fd_ = epoll_fd_;
  open_doorbell();
}

void DpdkDriver::open_doorbell() {
  if (bell_ != nullptr) {
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, bell_->fd(), nullptr);
    bell_.reset();  // frees this end's socket name for the new bell
  }
  try {
    bell_ = std::make_unique<Doorbell>(bell_link_, bell_side_);
  } catch (const std::exception& e) {
    // Not fatal: the back-off timer still wakes the loop, only later.
    std::fprintf(stderr, "dpdk %s: %s; an idle loop wakes on its back-off timer only\n", name().c_str(), e.what());
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, bell_->fd(), &ev) != 0) {
    bell_.reset();
    throw std::runtime_error("dpdk " + name() + ": epoll_ctl: " + std::strerror(errno));
  }
}

// A client takes what its slots hold; a server, what it was configured
// for (the client's word caps what it is sent).
void DpdkDriver::publish_frame_max() noexcept {
  const std::size_t max = bell_ != nullptr ? large_frame_cap(65535) : 0;
  if (max == 0) return;
  bell_->publish_rx_frame_max(static_cast<std::uint32_t>(max));
  rx_mbufs_per_frame_ = std::max(rx_mbufs_per_frame_, (max + data_room_ - 1) / data_room_);
}

std::size_t DpdkDriver::tx_frame_max() const noexcept {
  return bell_ != nullptr ? large_frame_cap(bell_->peer_rx_frame_max()) : 0;
}

// frame_max, `limit` and the slots, whichever is least -- if that is more
// than an MTU-sized frame; else 0 (no large frames).
std::size_t DpdkDriver::large_frame_cap(std::size_t limit) const noexcept {
  std::size_t max = std::min(config_.frame_max, limit);
  if (slot_size_ != 0) max = std::min(max, slot_size_);
  return max > mtu_ + kEthHeader ? max : 0;
}

void DpdkDriver::release() noexcept {
  for (rte_mbuf* m : tx_queue_) rte_pktmbuf_free(m);
  tx_queue_.clear();
  for (rte_mbuf* m : stash_) rte_pktmbuf_free(m);
  stash_.clear();
  bell_.reset();
  auto stop_and_close = [this] {
    if (started_) {
      if (rx_intr_) (void)rte_eth_dev_rx_intr_ctl_q(port_, 0, epoll_fd_, RTE_INTR_EVENT_DEL, nullptr);
      (void)rte_eth_dev_stop(port_);
      started_ = false;
    }
    if (port_valid_) {
      rte_eth_dev_info info{};
      rte_device* dev = rte_eth_dev_info_get(port_, &info) == 0 ? info.device : nullptr;
      (void)rte_eth_dev_close(port_);
      if (probed_ && dev != nullptr) (void)rte_dev_remove(dev);
      port_valid_ = false;
    }
  };
  try {
    dpdk::on_interrupt_thread(stop_and_close);
  } catch (const std::exception&) {
    stop_and_close();  // no alarm could be set: the EAL is going away
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (timer_fd_ >= 0) ::close(timer_fd_);
  epoll_fd_ = timer_fd_ = wait_fd_ = -1;
  // Received Msgs may still hold mbufs (and a net_ring peer in this
  // process attached ones); freeing a pool under them would turn their
  // release into a use after free.
  for (rte_mempool** pool : {&pool_, &ext_pool_}) {
    if (*pool == nullptr) continue;
    if (rte_mempool_full(*pool) != 0) {
      rte_mempool_free(*pool);
    } else {
      g_pools_leaked.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "dpdk %s: %u mbufs still in use at close; the mempool is left allocated\n",
                   name().c_str(), rte_mempool_in_use_count(*pool));
    }
    *pool = nullptr;
  }
  pool_ring_ = nullptr;
}

Result<ControlReply> DpdkDriver::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{mtu_ + kEthHeader};
  if (std::holds_alternative<ctl::GetFrameMax>(query)) return ControlReply{std::max(mtu_ + kEthHeader, tx_frame_max())};
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) return ControlReply{std::size_t{0}};
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) return ControlReply{Participant{mac_}};
  if (std::holds_alternative<ctl::GetOffloads>(query)) {
    return ControlReply{LinkOffloads{.tx_ip_csum = offloads_.tx_ipv4_cksum,
                                     .tx_udp_csum = offloads_.tx_udp_cksum,
                                     .tx_tcp_csum = offloads_.tx_tcp_cksum,
                                     .rx_ip_csum = offloads_.rx_ipv4_cksum,
                                     .rx_l4_csum = offloads_.rx_l4_cksum,
                                     .tx_tcp_seg = config_.gso}};
  }
  return Protocol::control_any(query);
}

Status DpdkDriver::restart() {
  if (!port_valid_) return Errc::closed;
  for (rte_mbuf* m : tx_queue_) rte_pktmbuf_free(m);
  tx_queue_.clear();
  int rc = 0;
  dpdk::on_interrupt_thread([&] {
    if (started_) (void)rte_eth_dev_stop(port_);
    rc = rte_eth_dev_start(port_);
  });
  started_ = false;
  ++restarts_;
  if (rc != 0) return Errc::not_connected;
  started_ = true;
  // A restarted peer (filterd) made a new bell page; this end's is stale.
  if (!bell_link_.empty()) {
    open_doorbell();
    publish_frame_max();
  }
  (void)link();
  return {};
}

Status DpdkDriver::reconnect() {
  if (!memif_client(config_.devargs)) return Errc::unsupported;
  return restart();
}

std::size_t DpdkDriver::poll(std::size_t budget) {
  if (!started_) return 0;
  rte_mbuf* burst[kMaxBurst];
  std::size_t done = 0;
  if (!stash_.empty()) {
    for (rte_mbuf* m : stash_) deliver(m);
    done = stash_.size();
    stash_.clear();
  }
  while (done < budget) {
    auto want = static_cast<std::uint16_t>(std::min(config_.burst, budget - done));
    if (rx_mbufs_per_frame_ > 1) {
      // DPDK 22.11's memif loses the mbufs of a frame it could not finish
      // (an allocation failing part way through a chain leaves the chain
      // allocated, and the frame in the ring): take no more frames than
      // the pool surely holds. The rest wait in the ring.
      const std::size_t fit = mbufs_free_here() / rx_mbufs_per_frame_;
      if (fit < want) {
        ++rx_held_back_;
        scarce_ = true;  // what is received now is kept as a copy
        want = static_cast<std::uint16_t>(fit);
        if (want == 0) break;
      }
    }
    std::uint16_t got = rx_burst(burst, want);
    std::size_t frames = got;
    if (config_.gro && got > 1) {
      gro::Stats st;
      frames = gro::coalesce(burst, got, config_.gro_verify ? gro::Csum::verify : gro::Csum::carry, st,
                             config_.gro_max != 0 ? config_.gro_max : gro::kMaxFrame);
      rx_gro_merged_.inc(st.merged);
      rx_gro_groups_.inc(st.groups);
      rx_gro_bad_csum_.inc(st.bad_csum);
    }
    for (std::size_t i = 0; i < frames; ++i) deliver(burst[i]);
    done += got;
    if (got < want) break;
  }
  std::size_t sent = flush();
  if (done != 0 || sent != 0) backoff_ = std::chrono::microseconds(0);
  return done + sent;
}

std::uint16_t DpdkDriver::rx_burst(rte_mbuf** burst, std::uint16_t want) {
  if (!fenced_) return rte_eth_rx_burst(port_, 0, burst, want);
  std::uint16_t got = 0;
  if (FaultFence::run([&] { got = rte_eth_rx_burst(port_, 0, burst, want); })) return got;
  fault_cut("rx burst");
  return 0;
}

std::uint16_t DpdkDriver::tx_burst(rte_mbuf** burst, std::uint16_t n) {
  if (!fenced_) return rte_eth_tx_burst(port_, 0, burst, n);
  std::uint16_t sent = 0;
  if (FaultFence::run([&] { sent = rte_eth_tx_burst(port_, 0, burst, n); })) return sent;
  fault_cut("tx burst");
  return 0;
}

// A fault inside a memif burst. The PMD marks the link down before it
// unmaps the regions, so the disconnect race finds the link down; a fault
// on a link that is up is something else, and kills the process as it would
// have without the fence.
void DpdkDriver::fault_cut(const char* what) {
  rte_eth_link l{};
  if (rte_eth_link_get_nowait(port_, &l) != 0 || l.link_status == RTE_ETH_LINK_UP) {
    FaultFence::crash(("dpdk " + name() + ": " + what + " on a link that is up").c_str());
  }
  ++fault_cuts_;
  cut_ = true;
}

void DpdkDriver::deliver(rte_mbuf* head) {
  const std::uint64_t flags = head->ol_flags;
  if ((flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_BAD ||
      (flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_BAD) {
    ++rx_csum_bad_;
  }
  const std::uint32_t frame_len = head->pkt_len;
  const std::size_t segs = head->nb_segs;
  if (segs > 1) ++rx_multi_seg_;

  // Each segment becomes its own fragment with its own deleter, so it is
  // unlinked first: freeing a linked head would free the whole chain while
  // later fragments still point into it.
  Msg frame;
  bool failed = false;
  for (rte_mbuf* seg = head; seg != nullptr;) {
    rte_mbuf* next = seg->next;
    seg->next = nullptr;
    seg->nb_segs = 1;
    seg->pkt_len = seg->data_len;
    if (failed || seg->data_len == 0) {
      rte_pktmbuf_free_seg(seg);
    } else {
      Result<Msg> part = Msg::wrap(static_cast<std::byte*>(seg->buf_addr), seg->buf_len, seg->data_off,
                                   seg->data_len, BufDeleter{&free_segment, seg});
      if (part) {
        frame.join(std::move(*part));
      } else {
        failed = true;  // wrap ran the deleter; the rest is freed above
      }
    }
    seg = next;
  }
  if (failed) {
    ++drop_wrap_;
    return;
  }
  if (!receiving()) {
    ++drop_no_receiver_;
    return;
  }
  // What the port verified travels with the frame; ipv4 and the transports
  // then skip their own check (a bad one is still checked, and dropped there).
  if ((flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD) frame.offload().flags |= Offload::rx_ip_good;
  if ((flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD) frame.offload().flags |= Offload::rx_l4_good;
  if (config_.gro && segs > 1 && head->tso_segsz != 0) {
    frame.offload().flags |= Offload::rx_coalesced;  // gro.cpp: the first segment's payload bytes
    frame.offload().seg_size = static_cast<std::uint16_t>(head->tso_segsz);
  }
  // Counted in mbufs, not frames: a 16 KiB frame takes 8.
  if (until_pool_check_ <= segs) {
    until_pool_check_ = pool_check_every_;
    scarce_ = mbufs_free_here() < scarce_below_;
  } else {
    until_pool_check_ -= segs;
  }
  if (scarce_) {
    frame.offload().flags |= Offload::rx_scarce;
    ++rx_scarce_;
  }
  ++rx_frames_;
  rx_bytes_.inc(frame_len);
  (void)deliver_up(std::move(frame));
}

Status DpdkDriver::transmit(const Msg& frame) {
  if (frame.offload().has(Offload::tx_tcp_seg)) return transmit_segmented(frame);
  if (frame.size() > mtu_ + kEthHeader && frame.size() > tx_frame_max()) {
    ++drop_too_big_;
    return Errc::too_large;
  }
  // A checksum request the port cannot honour would put a wrong checksum on
  // the wire: refuse it (the layers ask only for what GetOffloads offered).
  const Offload req = frame.offload();
  std::uint64_t ol_flags = 0;
  if ((req.flags & Offload::kTxMask) != 0) {
    if ((req.has(Offload::tx_ip_csum) && !offloads_.tx_ipv4_cksum) ||
        (req.has(Offload::tx_udp_csum) && !offloads_.tx_udp_cksum) ||
        (req.has(Offload::tx_tcp_csum) && !offloads_.tx_tcp_cksum) || req.l3_len < 20) {
      ++drop_offload_;
      return Errc::unsupported;
    }
    // The family from the frame's EtherType (ipv6 asks only for transport
    // checksums, over a header of 40 bytes).
    std::array<std::byte, 2> type{};
    (void)frame.copy_out(12, type);
    ol_flags = load_be16(type.data()) == eth::kTypeIpv6 ? RTE_MBUF_F_TX_IPV6 : RTE_MBUF_F_TX_IPV4;
    if (req.has(Offload::tx_ip_csum)) ol_flags |= RTE_MBUF_F_TX_IP_CKSUM;
    if (req.has(Offload::tx_udp_csum)) ol_flags |= RTE_MBUF_F_TX_UDP_CKSUM;
    if (req.has(Offload::tx_tcp_csum)) ol_flags |= RTE_MBUF_F_TX_TCP_CKSUM;
  }
  if (config_.tx_keep && tx_queue_.size() >= config_.tx_keep_max) {
    (void)flush();
    if (tx_queue_.size() >= config_.tx_keep_max) return Errc::would_block;
  }
  if (rte_mbuf* m = config_.tx_zero_copy ? received_chain(frame) : nullptr) {
    // A received frame going out again (filterd's hop): the PMD gets a
    // reference of its own to the very mbufs, the message keeps its own.
    request_offloads(m, ol_flags, req.l3_len);  // also clears the rx flags
    ++tx_zero_copy_;
    enqueue(m);
    return {};
  }
  rte_mbuf* head = rte_pktmbuf_alloc(pool_);
  if (head == nullptr) {
    ++tx_nombuf_;
    return Errc::would_block;
  }
  request_offloads(head, ol_flags, req.l3_len);
  rte_mbuf* tail = head;
  for (const Frag& f : frame.fragments()) {
    if (!append(head, tail, f.data(), f.len, nullptr, 0)) {
      rte_pktmbuf_free(head);
      ++tx_nombuf_;
      return Errc::would_block;
    }
  }
  enqueue(head);
  return {};
}

void DpdkDriver::request_offloads(rte_mbuf* m, std::uint64_t ol_flags, std::size_t l3_len) noexcept {
  m->ol_flags = ol_flags;
  if (ol_flags == 0) return;
  m->l2_len = kEthHeader;  // we never send tagged frames
  m->l3_len = static_cast<std::uint16_t>(l3_len);
  ++tx_csum_offload_;
}

// A burst leaves when it holds `burst` frames or 32 KiB: large frames go
// at once in twos, so the receiver starts on a message while the rest of
// it is still being cut (the end of the pass sends what is left).
void DpdkDriver::enqueue(rte_mbuf* m) {
  tx_queue_.push_back(m);
  tx_unflushed_bytes_ += m->pkt_len;
  if (tx_queue_.size() >= config_.burst || tx_unflushed_bytes_ >= kTxFlushBytes) (void)flush();
}

std::size_t DpdkDriver::mbufs_free() const noexcept { return pool_ == nullptr ? 0 : rte_mempool_avail_count(pool_); }

// rte_mempool_avail_count walks every lcore's cache (RTE_MAX_LCORE of
// them): 3-7 % of a bulk transfer's cycles when asked per burst. The pool's
// ring and this thread's cache are what this thread can take from; mbufs in
// other lcores' caches (none in our processes) are not counted, which only
// errs on the side of caution.
std::size_t DpdkDriver::mbufs_free_here() const noexcept {
  if (pool_ring_ == nullptr) return rte_mempool_avail_count(pool_);
  std::size_t n = rte_ring_count(static_cast<const rte_ring*>(pool_ring_));
  if (const rte_mempool_cache* c = rte_mempool_default_cache(pool_, rte_lcore_id()); c != nullptr) n += c->len;
  return n;
}

rte_mbuf* DpdkDriver::sole_mbuf(const Frag& f) noexcept {
  const BufDeleter& d = f.buf->deleter();
  if (!f.buf->external() || d.fn != &free_segment) return nullptr;
  auto* m = static_cast<rte_mbuf*>(d.ctx);
  // deliver() unlinked every segment: one mbuf, whose buffer the Buf wraps.
  if (m->next != nullptr || static_cast<std::byte*>(m->buf_addr) != f.buf->data()) return nullptr;
  // The fragment must be the buffer's only user: the mbuf's window is about
  // to become the fragment's. Another message over it (ipv4's fragments of
  // one received datagram share it), or the mbuf already queued for another
  // window, and the frame is copied.
  if (f.buf->refs() != 1 || rte_mbuf_refcnt_read(m) != 1) return nullptr;
  if (f.off > UINT16_MAX || f.len > UINT16_MAX) return nullptr;
  return m;
}

// A frame made only of mbufs that ports of this process received (one, or
// a coalesced chain) as a chain of those mbufs, each with a reference
// taken for the PMD; null if any fragment is something else.
rte_mbuf* DpdkDriver::received_chain(const Msg& frame) noexcept {
  const std::span<const Frag> frags = frame.fragments();
  if (frags.empty() || frags.size() > kMaxChain) return nullptr;
  std::array<rte_mbuf*, kMaxChain> segs;
  for (std::size_t i = 0; i < frags.size(); ++i) {
    segs[i] = sole_mbuf(frags[i]);
    if (segs[i] == nullptr) return nullptr;  // (each Buf's only user: no mbuf twice)
  }
  rte_mbuf* head = segs[0];
  head->nb_segs = static_cast<std::uint16_t>(frags.size());
  head->pkt_len = static_cast<std::uint32_t>(frame.size());
  for (std::size_t i = 0; i < frags.size(); ++i) {
    rte_mbuf* m = segs[i];
    rte_mbuf_refcnt_update(m, 1);
    m->data_off = static_cast<std::uint16_t>(frags[i].off);
    m->data_len = static_cast<std::uint16_t>(frags[i].len);
    m->next = i + 1 < frags.size() ? segs[i + 1] : nullptr;
  }
  return head;
}

bool DpdkDriver::append(rte_mbuf* head, rte_mbuf*& tail, const std::byte* src, std::size_t len, std::uint32_t* sum,
                        std::size_t at) {
  while (len > 0) {
    std::size_t room = rte_pktmbuf_tailroom(tail);
    if (room == 0) {
      rte_mbuf* seg = rte_pktmbuf_alloc(pool_);
      if (seg == nullptr) return false;
      tail->next = seg;
      tail = seg;
      ++head->nb_segs;
      continue;
    }
    const std::size_t n = std::min(len, room);
    std::byte* dst = static_cast<std::byte*>(tail->buf_addr) + tail->data_off + tail->data_len;
    std::memcpy(dst, src, n);
    // Summed where it was just written: the bytes are in L1, read once more.
    if (sum != nullptr) *sum = csum::combine(*sum, csum::partial(dst, n), at);
    tail->data_len = static_cast<std::uint16_t>(tail->data_len + n);
    head->pkt_len += static_cast<std::uint32_t>(n);
    src += n;
    len -= n;
    at += n;
  }
  return true;
}

bool DpdkDriver::attach(rte_mbuf* head, rte_mbuf*& tail, const Frag& f, std::size_t off, std::size_t len,
                        std::uint32_t* sum, std::size_t at) {
  rte_mbuf* m = rte_pktmbuf_alloc(ext_pool_);
  if (m == nullptr) return false;
  auto* shinfo = static_cast<rte_mbuf_ext_shared_info*>(rte_mbuf_to_priv(m));
  shinfo->free_cb = &release_attached;
  shinfo->fcb_opaque = f.buf;
  rte_mbuf_ext_refcnt_set(shinfo, 1);
  f.buf->ref();
  std::byte* src = f.data() + off;
  const rte_iova_t iova = iova_va_ != 0 ? static_cast<rte_iova_t>(reinterpret_cast<std::uintptr_t>(src)) : RTE_BAD_IOVA;
  rte_pktmbuf_attach_extbuf(m, src, iova, static_cast<std::uint16_t>(len), shinfo);
  m->data_len = static_cast<std::uint16_t>(len);
  tail->next = m;
  tail = m;
  ++head->nb_segs;
  head->pkt_len += static_cast<std::uint32_t>(len);
  if (sum != nullptr) *sum = csum::combine(*sum, csum::partial(src, len), at);
  ++tx_extbuf_;
  return true;
}

// Segmentation offload in software (Offload::tx_tcp_seg): `frame` is the
// Ethernet, IP and TCP headers and a payload of many segments. Every
// seg_size bytes of payload leave as a frame of their own under a copy of
// the headers, fixed up as a NIC's TSO would: IPv4 total length, ID (one
// more per piece) and header checksum, or IPv6 payload length; TCP sequence number, flags (FIN and
// PSH on the last piece only, CWR on the first only, RFC 3168 6.1.2) and
// checksum over the piece (RFC 9293 3.1), summed as the piece is copied.
Status DpdkDriver::transmit_segmented(const Msg& frame) {
  const Offload req = frame.offload();
  Result<SegmentCut> cut = SegmentCut::of(frame);
  if (!cut) {
    ++drop_offload_;
    return Errc::invalid_argument;
  }
  const std::size_t hlen = cut->header_len(), seg = cut->seg();
  if (hlen - kEthHeader + seg > mtu_) {
    ++drop_too_big_;
    return Errc::too_large;
  }
  // On a large-frame link a piece is as many whole segments as a frame
  // there holds (the receiver takes it as one segment); elsewhere, one.
  // Only segments that fill the MTU, so that whoever forwards the frame
  // onto a link with that MTU (filterd) cuts it back into the very same
  // segments without being told their size.
  std::size_t step = seg;
  if (const std::size_t max = tx_frame_max(); max >= hlen + 2 * seg && seg + (hlen - kEthHeader) == mtu_) {
    step = (max - hlen) / seg * seg;
  }
  const std::size_t pieces = cut->pieces(step);
  const bool tcp_csum = req.has(Offload::tx_tcp_csum);

  // A cursor over the payload in the frame's fragments.
  std::span<const Frag> frags = frame.fragments();
  std::size_t fi = 0, fo = hlen;
  while (fi < frags.size() && fo >= frags[fi].len) fo -= frags[fi++].len;

  // tx_keep: the pieces are queued together or not at all, so the queue
  // holds tx_keep_max frames at most (more only for a segment of more
  // pieces than that, alone in an empty queue, which nothing else could send).
  if (config_.tx_keep && tx_queue_.size() + pieces > config_.tx_keep_max) {
    (void)flush();
    if (!tx_queue_.empty() && tx_queue_.size() + pieces > config_.tx_keep_max) return Errc::would_block;
  }
  std::array<std::byte, SegmentCut::kMaxHeaders> hdr;
  for (std::size_t i = 0; i < pieces; ++i) {
    // An IPv4 header checksum is the port's when it can (IPv6 has none).
    const bool port_ip_csum = offloads_.tx_ipv4_cksum && !cut->v6();
    const std::size_t n = cut->headers(i, step, hdr.data(), !port_ip_csum);
    std::uint64_t ol_flags = port_ip_csum ? RTE_MBUF_F_TX_IP_CKSUM : 0;
    std::uint32_t sum = 0;
    std::uint32_t* summing = nullptr;
    std::byte* field = hdr.data() + kEthHeader + cut->ip_header_len() + tcp::Header::kChecksumOffset;
    if (tcp_csum) {
      if (offloads_.tx_tcp_cksum) {
        const std::uint16_t pseudo = csum::fold(cut->tcp_sum(hdr.data(), n, false));  // the port sums the rest
        std::memcpy(field, &pseudo, 2);
        ol_flags |= RTE_MBUF_F_TX_TCP_CKSUM;
      } else {
        sum = cut->tcp_sum(hdr.data(), n, true);
        summing = &sum;
      }
    }
    rte_mbuf* head = rte_pktmbuf_alloc(pool_);
    rte_mbuf* tail = head;
    if (head == nullptr || !append(head, tail, hdr.data(), hlen, nullptr, 0)) {
      if (head != nullptr) rte_pktmbuf_free(head);
      // What is queued goes; the rest is lost as on a full ring (TCP
      // repairs it). Nothing queued yet: TCP may try again.
      tx_nombuf_.inc(pieces - i);
      return i == 0 ? Errc::would_block : Status{};
    }
    const std::uint64_t family = cut->v6() ? RTE_MBUF_F_TX_IPV6 : RTE_MBUF_F_TX_IPV4;
    request_offloads(head, ol_flags != 0 ? ol_flags | family : 0, cut->ip_header_len());
    // The piece's payload, straight from the frame's fragments: attached
    // where the PMD copies anyway, else copied into the mbufs here.
    std::size_t left = n, at = cut->tcp_header_len();
    bool ok = true;
    while (left > 0 && ok) {
      const Frag& f = frags[fi];
      const std::size_t take = std::min(left, f.len - fo);
      ok = ext_pool_ != nullptr && take >= kMinAttach ? attach(head, tail, f, fo, take, summing, at)
                                                      : append(head, tail, f.data() + fo, take, summing, at);
      left -= take;
      at += take;
      fo += take;
      if (fo == f.len) {
        ++fi;
        fo = 0;
      }
    }
    if (!ok) {
      rte_pktmbuf_free(head);
      tx_nombuf_.inc(pieces - i);
      return i == 0 ? Errc::would_block : Status{};
    }
    if (summing != nullptr) {
      std::uint16_t ck = csum::finish(sum);
      // A large frame's field is 0 only when it carries no checksum (the
      // stack's csum off): a computed zero goes as 0xffff, its other form
      // in one's complement (as UDP does, RFC 768), so that whoever cuts
      // the frame (filterd) knows whether to checksum the pieces.
      if (ck == 0 && n > seg) ck = 0xffff;
      // The header copy lies in the first mbuf (kMaxHeaders < any data room).
      std::memcpy(rte_pktmbuf_mtod_offset(head, std::byte*, field - hdr.data()), &ck, 2);
    }
    if (n > seg) ++tx_large_frames_;
    enqueue(head);
  }
  ++tx_gso_;
  tx_gso_pieces_.inc(pieces);
  return {};
}

std::size_t DpdkDriver::flush() {
  tx_unflushed_bytes_ = 0;
  if (tx_queue_.empty()) return 0;
  if (!started_) {
    // A port that did not start again: what waits for it is lost, as on a dead link.
    tx_drop_full_.inc(tx_queue_.size());
    for (rte_mbuf* m : tx_queue_) rte_pktmbuf_free(m);
    tx_queue_.clear();
    return 0;
  }
  const std::size_t n = tx_queue_.size();
  std::uint64_t bytes = 0;
  for (rte_mbuf* m : tx_queue_) bytes += m->pkt_len;
  std::size_t sent = 0;
  while (sent < n) {
    std::uint16_t k = tx_burst(tx_queue_.data() + sent, static_cast<std::uint16_t>(n - sent));
    if (k == 0) break;
    sent += k;
  }
  if (cut_) {
    // The PMD freed some of what it was given and not the rest; which, it
    // cannot say any more. All of it is lost (leaked, never freed twice).
    cut_ = false;
    tx_drop_full_.inc(n - sent);
    tx_frames_.inc(sent);
    tx_queue_.clear();
    return sent;
  }
  // What the ring refused is still ours: kept for the next flush, or freed.
  for (std::size_t i = sent; i < n; ++i) {
    bytes -= tx_queue_[i]->pkt_len;
    if (!config_.tx_keep) rte_pktmbuf_free(tx_queue_[i]);
  }
  tx_frames_.inc(sent);
  tx_bytes_.inc(bytes);
  if (sent != 0 && bell_ != nullptr) {
    switch (bell_->ring()) {
      case Doorbell::Ring::awake: break;
      case Doorbell::Ring::rang: ++bell_rings_; break;
      case Doorbell::Ring::lost: ++bell_failures_; break;
    }
  }
  if (config_.tx_keep) {
    tx_kept_.inc(n - sent);
    tx_queue_.erase(tx_queue_.begin(), tx_queue_.begin() + static_cast<std::ptrdiff_t>(sent));
  } else {
    tx_drop_full_.inc(n - sent);
    tx_queue_.clear();
  }
  return sent;
}

bool DpdkDriver::before_sleep() noexcept {
  (void)flush();
  if (rx_intr_) {
    if (intr_switch_) {
      if (rte_eth_dev_rx_intr_enable(port_, 0) != 0) return false;
      // A frame that arrived before the interrupt was armed raises none.
      if (rte_eth_rx_queue_count(port_, 0) > 0) {
        (void)rte_eth_dev_rx_intr_disable(port_, 0);
        return false;
      }
      intr_armed_ = true;
    }
    ++intr_sleeps_;
    return true;
  }
  if (bell_ != nullptr && started_) {
    // Flag up, then one more look at the ring (the peer may have sent just
    // before it could see the flag); what is there waits in the stash.
    bell_->arm();
    rte_mbuf* burst[kMaxBurst];
    const std::uint16_t got = rx_burst(burst, static_cast<std::uint16_t>(config_.burst));
    if (got != 0) {
      stash_.insert(stash_.end(), burst, burst + got);
      bell_wakes_.inc(bell_->disarm());
      return false;
    }
  }
  // No interrupt can wake the loop for a frame, so a timer does: after the
  // loop's own spin, sleep a little, and longer each idle round (with a
  // doorbell, only for a peer that does not ring).
  if (bell_ != nullptr && started_ && tx_queue_.empty() && bell_->peer_rings()) {
    // The peer wakes us for its frames: the timer is a safety net only (a
    // peer that went with -9, a restart). Not with frames kept for a full
    // tx ring: nothing but the timer sends them once the peer drains it.
    backoff_ = config_.bell_idle_sleep;
  } else {
    backoff_ = backoff_.count() == 0 ? config_.idle_sleep_min : std::min(backoff_ * 2, config_.idle_sleep_max);
  }
  itimerspec spec{};
  spec.it_value.tv_sec = static_cast<time_t>(backoff_.count() / 1'000'000);
  spec.it_value.tv_nsec = static_cast<long>(backoff_.count() % 1'000'000) * 1000;
  if (timerfd_settime(timer_fd_, 0, &spec, nullptr) != 0) return false;
  ++timer_sleeps_;
  return true;
}

void DpdkDriver::after_sleep() noexcept {
  if (rx_intr_) {
    if (intr_armed_) (void)rte_eth_dev_rx_intr_disable(port_, 0);
    intr_armed_ = false;
    // One pass reads every fired event descriptor. Not a loop: a descriptor
    // that stays readable until the queue is empty (net_tap) would spin it.
    rte_epoll_event events[4];
    (void)rte_epoll_wait(epoll_fd_, events, 4, 0);
    return;
  }
  if (bell_ != nullptr) bell_wakes_.inc(bell_->disarm());
  itimerspec off{};
  (void)timerfd_settime(timer_fd_, 0, &off, nullptr);
  std::uint64_t expirations = 0;
  while (::read(timer_fd_, &expirations, sizeof expirations) > 0) {
  }
}

DpdkLink DpdkDriver::link() {
  rte_eth_link l{};
  DpdkLink out;
  if (port_valid_ && rte_eth_link_get_nowait(port_, &l) == 0) {
    out.up = l.link_status == RTE_ETH_LINK_UP;
    out.speed_mbps = l.link_speed;
    out.full_duplex = l.link_duplex == RTE_ETH_LINK_FULL_DUPLEX;
  }
  link_up_.set(out.up ? 1 : 0);
  return out;
}

void DpdkDriver::update_port_stats() {
  rte_eth_stats s{};
  if (rte_eth_stats_get(port_, &s) != 0) return;
  counters().add("port_ipackets").set(s.ipackets);
  counters().add("port_opackets").set(s.opackets);
  counters().add("port_imissed").set(s.imissed);
  counters().add("port_ierrors").set(s.ierrors);
  counters().add("port_oerrors").set(s.oerrors);
  counters().add("port_rx_nombuf").set(s.rx_nombuf);
}

void register_dpdk(Registry& registry) {
  registry.add(
      KindSpec("dpdk", "DPDK ethdev port (any PMD: NIC, af_packet, tap, pcap, memif, ring)")
          .with_below(0, 0)
          .with_option(OptionSpec::string("devargs", "device to probe, e.g. net_af_packet0,iface=veth0").mandatory())
          .with_option(OptionSpec::integer("rxd", 64, 32768, "rx descriptors").defaults_to("1024"))
          .with_option(OptionSpec::integer("txd", 64, 32768, "tx descriptors").defaults_to("1024"))
          .with_option(OptionSpec::integer("burst", 1, DpdkDriver::kMaxBurst, "frames per burst").defaults_to("32"))
          .with_option(OptionSpec::integer("mbufs", 63, 1 << 24, "mempool size").defaults_to("8191"))
          .with_option(OptionSpec::size("mbuf_data", 256, 65535 - RTE_PKTMBUF_HEADROOM,
                                        "frame bytes per mbuf (default 2048, or one frame if the port cannot chain)"))
          .with_option(OptionSpec::integer("mtu", 68, 65535, "IP MTU (default: the port's)"))
          .with_option(OptionSpec::mac("mac", "override the port's MAC address"))
          .with_option(OptionSpec::boolean("promisc", "promiscuous mode").defaults_to("off"))
          .with_option(OptionSpec::choice("csum_offload", {"auto", "off"}, "checksum offloads").defaults_to("auto"))
          .with_option(OptionSpec::choice("rx_intr", {"auto", "off"}, "sleep on rx interrupts").defaults_to("auto"))
          .with_option(OptionSpec::integer("idle_sleep_us", 1, 1'000'000,
                                           "without rx interrupts: longest sleep of an idle loop")
                           .defaults_to("1000"))
          .with_option(OptionSpec::boolean("doorbell", "memif: the peer wakes a sleeping loop at once (else the timer)")
                           .defaults_to("on"))
          .with_option(OptionSpec::integer("bell_idle_sleep_us", 1, 10'000'000,
                                           "memif, a peer that rings the doorbell: longest sleep of an idle loop")
                           .defaults_to("10000"))
          .with_option(OptionSpec::boolean("tx_keep", "keep frames the tx ring refuses for a later flush (never drop)")
                           .defaults_to("off"))
          .with_option(OptionSpec::boolean("gso", "cut large TCP segments from the stack into MTU-sized frames")
                           .defaults_to("on"))
          .with_option(OptionSpec::boolean("tx_zero_copy", "send a frame that is one whole received mbuf as that mbuf")
                           .defaults_to("on"))
          .with_option(OptionSpec::size("frame_max", 0, 65535,
                                        "memif to another xk: largest frame segments may cross in (0: MTU-sized only)")
                           .defaults_to(std::to_string(DpdkDriver::kDefaultFrameMax)))
          .with_option(OptionSpec::boolean("tx_extbuf", "virtual devices: send cut segments' payload attached, not copied")
                           .defaults_to("on"))
          .with_option(OptionSpec::boolean("gro", "coalesce a burst's in-order TCP segments of a flow into one")
                           .defaults_to("on"))
          .with_option(OptionSpec::choice("gro_csum", {"verify", "carry"},
                                          "gro: check each segment's checksum first, or carry it (stacks with csum off)")
                           .defaults_to("verify"))
          .with_option(OptionSpec::size("gro_max", 0, 14 + 65535, "gro: largest frame it makes (0: 64 KB datagrams)")
                           .defaults_to("0"))
          .with_option(OptionSpec::size("eal_mem", 16 << 20, std::uint64_t{1} << 40, "EAL memory (first port only)")
                           .defaults_to("256m"))
          .with_option(OptionSpec::string("eal_args", "extra EAL arguments, space-separated (first port only)"))
          .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
            const Options& o = args.options;
            DpdkDriver::Config c;
            c.devargs = o.get_string("devargs");
            c.rx_descriptors = static_cast<std::uint16_t>(o.get_int("rxd"));
            c.tx_descriptors = static_cast<std::uint16_t>(o.get_int("txd"));
            c.burst = static_cast<std::size_t>(o.get_int("burst"));
            c.mbufs = static_cast<std::size_t>(o.get_int("mbufs"));
            if (o.has("mbuf_data")) c.mbuf_data = o.get_size("mbuf_data");
            if (o.has("mtu")) c.mtu = static_cast<std::size_t>(o.get_int("mtu"));
            if (o.has("mac")) c.mac = o.get_mac("mac");
            c.promiscuous = o.get_bool("promisc");
            c.csum_offload = o.get_string("csum_offload") == "auto";
            c.rx_interrupt = o.get_string("rx_intr") == "auto";
            c.idle_sleep_max = std::chrono::microseconds(o.get_int("idle_sleep_us"));
            c.tx_keep = o.get_bool("tx_keep");
            c.gso = o.get_bool("gso");
            c.tx_zero_copy = o.get_bool("tx_zero_copy");
            c.frame_max = static_cast<std::size_t>(o.get_size("frame_max"));
            c.tx_extbuf = o.get_bool("tx_extbuf");
            c.gro = o.get_bool("gro");
            c.gro_verify = o.get_string("gro_csum") == "verify";
            c.gro_max = static_cast<std::size_t>(o.get_size("gro_max"));
            c.doorbell = o.get_bool("doorbell");
            c.bell_idle_sleep = std::chrono::microseconds(o.get_int("bell_idle_sleep_us"));
            c.eal.memory_mb = static_cast<std::size_t>(o.get_size("eal_mem") >> 20);
            if (o.has("eal_args")) c.eal.extra_args = dpdk::split_args(o.get_string("eal_args"));
            return std::make_unique<DpdkDriver>(args.name, std::move(c), args.loop);
          }));
}

}  // namespace xk::drivers

// The DPDK ethdev driver against real PMDs, all in this process:
//   net_pcap    frames read from a pcap file written here, frames written to one
//               and read back (including 9000-byte frames as mbuf chains);
//   net_ring    a ring PMD whose tx ring is its rx ring: loopback, and a full
//               ring to count tx drops; the idle back-off timer with an EventLoop;
//   net_null    the graph kind and its options;
//   net_af_packet on a veth pair whose other end is in a network namespace
//               (root): frames both ways between xk and the Linux kernel.
// The EAL is initialized once per process; every test shares it.
#include "doubles.hpp"
#include "xk/drivers/dpdk.hpp"
#include "xk/drivers/doorbell.hpp"
#include "xk/drivers/fault_fence.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"

namespace xk::drivers {
namespace {

using Bytes = std::vector<std::byte>;

void init_eal() {
  dpdk::EalConfig eal;
  eal.memory_mb = 128;
  dpdk::ensure_eal(eal);
}

// Every vdev needs a name of its own in this process.
std::string vdev(const std::string& driver) {
  static int serial = 0;
  return driver + std::to_string(serial++);
}

// One end ("server" or "client") of a net_memif link on `sock`.
std::string memif_end(const char* role, const std::string& sock) {
  return vdev("net_memif") + ",role=" + role + ",id=0,socket=" + sock;
}

// A test frame: broadcast destination, a locally administered source, the
// local experimental EtherType 0x88b5 (so nothing else on a link matches), then
// a counting payload seeded by `seed`.
Bytes test_frame(std::size_t len, unsigned seed) {
  Bytes f(len);
  for (std::size_t i = 0; i < 6; ++i) f[i] = std::byte{0xff};
  const unsigned char src[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
  for (std::size_t i = 0; i < 6; ++i) f[6 + i] = std::byte{src[i]};
  f[12] = std::byte{0x88};
  f[13] = std::byte{0xb5};
  for (std::size_t i = 14; i < len; ++i) f[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
  return f;
}

bool is_test_frame(const Bytes& f) { return f.size() >= 14 && f[12] == std::byte{0x88} && f[13] == std::byte{0xb5}; }

Bytes bytes_of(const Msg& m) {
  Bytes b(m.size());
  EXPECT_TRUE(m.copy_out(0, b).ok());
  return b;
}

// The same bytes as a Msg of several fragments, so transmit has to gather.
Msg fragmented(const Bytes& f, std::size_t piece) {
  Msg out;
  for (std::size_t off = 0; off < f.size(); off += piece) {
    std::size_t n = std::min(piece, f.size() - off);
    out.join(Msg::copy_of(std::span(f).subspan(off, n)));
  }
  return out;
}

// The top of the graph: keeps what arrives.
using test::Sink;

// ---- pcap files, written and read by hand (the classic format) ----------

struct PcapRecord {
  Bytes data;
};

void put32(std::ofstream& out, std::uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); }  // NOLINT
void put16(std::ofstream& out, std::uint16_t v) { out.write(reinterpret_cast<const char*>(&v), 2); }  // NOLINT

void write_pcap(const std::filesystem::path& path, const std::vector<Bytes>& frames) {
  std::ofstream out(path, std::ios::binary);
  put32(out, 0xa1b2c3d4);  // magic, microsecond timestamps, host byte order
  put16(out, 2);
  put16(out, 4);
  put32(out, 0);       // thiszone
  put32(out, 0);       // sigfigs
  put32(out, 65535);   // snaplen
  put32(out, 1);       // LINKTYPE_ETHERNET
  std::uint32_t t = 1;
  for (const Bytes& f : frames) {
    put32(out, t++);
    put32(out, 0);
    put32(out, static_cast<std::uint32_t>(f.size()));
    put32(out, static_cast<std::uint32_t>(f.size()));
    out.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));  // NOLINT
  }
}

std::vector<Bytes> read_pcap(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Bytes> frames;
  auto get32 = [&](std::size_t off) {
    std::uint32_t v = 0;
    std::memcpy(&v, all.data() + off, 4);
    return v;
  };
  // Microsecond or nanosecond timestamps (DPDK writes the latter).
  if (all.size() < 24 || (get32(0) != 0xa1b2c3d4 && get32(0) != 0xa1b23c4d)) {
    ADD_FAILURE() << path << ": not a host-order pcap file (" << all.size() << " bytes)";
    return frames;
  }
  std::size_t off = 24;
  while (off + 16 <= all.size()) {
    std::uint32_t caplen = get32(off + 8);
    off += 16;
    if (off + caplen > all.size()) break;
    Bytes f(caplen);
    std::memcpy(f.data(), all.data() + off, caplen);
    frames.push_back(std::move(f));
    off += caplen;
  }
  return frames;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xk-dpdk-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Poll until `sink` holds `want` frames or two seconds pass.
void poll_until(DpdkDriver& drv, const Sink& sink, std::size_t want) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (sink.received.size() < want && std::chrono::steady_clock::now() < deadline) {
    if (drv.poll(32) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

class DpdkTest : public ::testing::Test {
 protected:
  void SetUp() override { init_eal(); }
};

TEST_F(DpdkTest, EalIsInitializedOnceWithoutPinningTheCaller) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  EXPECT_TRUE(dpdk::eal_ready());
  dpdk::ensure_eal({});  // a second call changes nothing
  std::vector<std::string> args = dpdk::eal_args();
  auto has = [&](const std::string& a) { return std::find(args.begin(), args.end(), a) != args.end(); };
  EXPECT_TRUE(has("--no-huge"));
  EXPECT_TRUE(has("--no-pci"));
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
  EXPECT_EQ(dpdk::split_args("  --vdev=net_null0   -l 0 "), (std::vector<std::string>{"--vdev=net_null0", "-l", "0"}));
}

// The EAL's threads block every signal, so a signal sent to the process
// reaches one of the program's own threads (its handler, its EINTR), never
// DPDK's interrupt thread -- and this thread's mask is as it was.
TEST_F(DpdkTest, TheEalsThreadsBlockEverySignalAndTheCallersMaskIsUnchanged) {
  sigset_t now;
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, nullptr, &now), 0);
  EXPECT_EQ(sigismember(&now, SIGTERM), 0);
  int eal_threads = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind("eal-", 0) != 0 && name.rfind("rte", 0) != 0) continue;
    ++eal_threads;
    std::ifstream status(task.path() / "status");
    std::uint64_t blocked = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
    }
    const std::uint64_t term = std::uint64_t{1} << (SIGTERM - 1);
    const std::uint64_t intr = std::uint64_t{1} << (SIGINT - 1);
    EXPECT_EQ(blocked & (term | intr), term | intr) << name << " takes the program's signals";
  }
  EXPECT_GE(eal_threads, 1) << "no EAL thread found (its interrupt thread is eal-intr-thread)";
}

TEST_F(DpdkTest, PcapFramesArriveZeroCopyAndJumboFramesAsMbufChains) {
  TempDir dir;
  std::vector<Bytes> frames = {test_frame(60, 1), test_frame(1514, 2), test_frame(9014, 3)};
  write_pcap(dir / "in.pcap", frames);
  std::size_t leaked_before = dpdk_pools_leaked();
  {
    DpdkDriver::Config c;
    c.devargs = vdev("net_pcap") + ",rx_pcap=" + (dir / "in.pcap").string() + ",tx_pcap=" + (dir / "out.pcap").string();
    c.mtu = 9000;
    c.mbuf_data = 2048;  // so a 9014-byte frame is a chain of five mbufs
    c.mbufs = 511;
    DpdkDriver drv("net0", c);
    Sink sink;
    Participants parts;
    ASSERT_TRUE(drv.open_enable(sink, parts).ok());
    EXPECT_EQ(*drv.control(ctl::GetMtu{}), 9014u);
    EXPECT_EQ(*drv.control(ctl::GetHeaderRoom{}), 0u);

    poll_until(drv, sink, frames.size());
    ASSERT_EQ(sink.received.size(), frames.size());
    for (std::size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(bytes_of(sink.received[i]), frames[i]) << "frame " << i;
    // Zero copy: the mbuf's headroom is the Msg's, so a header goes in place.
    EXPECT_EQ(sink.received[0].fragment_count(), 1u);
    EXPECT_GE(sink.received[0].headroom(), 64u);
    EXPECT_TRUE(sink.received[0].push_in_place(14).ok());
    EXPECT_EQ(sink.received[2].fragment_count(), 5u);
    EXPECT_EQ(drv.counters().value("rx_frames"), 3u);
    EXPECT_EQ(drv.counters().value("rx_bytes"), 60u + 1514u + 9014u);
    EXPECT_EQ(drv.counters().value("rx_multi_seg"), 1u);
    // A piece of a chain outlives the rest of its frame.
    Result<Msg> tail = sink.received[2].split(5000);
    ASSERT_TRUE(tail.ok());
    sink.received.clear();
    EXPECT_EQ(bytes_of(*tail), Bytes(frames[2].begin() + 5000, frames[2].end()));
    tail->reset();
    ASSERT_TRUE(drv.open_disable(sink, parts).ok());
  }
  // Every mbuf went back: the pool was freed, not left behind.
  EXPECT_EQ(dpdk_pools_leaked(), leaked_before);
}

TEST_F(DpdkTest, PcapTransmitCopiesFragmentedFramesIncludingJumboChains) {
  TempDir dir;
  write_pcap(dir / "empty.pcap", {});
  std::vector<Bytes> frames = {test_frame(60, 4), test_frame(1514, 5), test_frame(9014, 6)};
  {
    DpdkDriver::Config c;
    c.devargs = vdev("net_pcap") + ",rx_pcap=" + (dir / "empty.pcap").string() + ",tx_pcap=" + (dir / "out.pcap").string();
    c.mtu = 9000;
    c.mbuf_data = 2048;
    c.mbufs = 511;
    DpdkDriver drv("net0", c);
    Sink sink;
    Participants parts;
    Result<SessionRef> s = drv.open(sink, parts);
    ASSERT_TRUE(s.ok());
    for (const Bytes& f : frames) EXPECT_TRUE((*s)->push(fragmented(f, 700)).ok());
    EXPECT_EQ((*s)->push(Msg::copy_of(test_frame(9015, 7))).error(), Errc::too_large);
    EXPECT_EQ(drv.counters().value("tx_frames"), 0u);  // batched until the poll
    (void)drv.poll(32);
    EXPECT_EQ(drv.counters().value("tx_frames"), 3u);
    EXPECT_EQ(drv.counters().value("tx_bytes"), 60u + 1514u + 9014u);
    EXPECT_EQ(drv.counters().value("drop_too_big"), 1u);
    EXPECT_EQ(drv.counters().value("tx_drop_full"), 0u);
  }  // closing the port closes the pcap file
  std::vector<Bytes> written = read_pcap(dir / "out.pcap");
  ASSERT_EQ(written.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(written[i], frames[i]) << "frame " << i;
}

TEST_F(DpdkTest, MbufsHeldPastTheDriverKeepTheirPoolAlive) {
  TempDir dir;
  write_pcap(dir / "in.pcap", {test_frame(128, 8)});
  std::size_t leaked_before = dpdk_pools_leaked();
  Msg held;
  {
    DpdkDriver::Config c;
    c.devargs = vdev("net_pcap") + ",rx_pcap=" + (dir / "in.pcap").string() + ",tx_pcap=" + (dir / "out.pcap").string();
    c.mbufs = 255;
    DpdkDriver drv("net0", c);
    Sink sink;
    Participants parts;
    ASSERT_TRUE(drv.open_enable(sink, parts).ok());
    poll_until(drv, sink, 1);
    ASSERT_EQ(sink.received.size(), 1u);
    held = std::move(sink.received[0]);
  }
  EXPECT_EQ(dpdk_pools_leaked(), leaked_before + 1);
  // Still readable, and releasing it now is safe (ASan would say otherwise).
  EXPECT_EQ(bytes_of(held), test_frame(128, 8));
  held.reset();
}

// net_ring with CREATE: each queue's tx ring is its rx ring (1023 slots).
std::string ring_devargs() {
  std::string name = vdev("net_ring");
  return name + ",nodeaction=r" + name + ":0:CREATE";
}

// A net_ring port looped back onto itself (what it sends, it receives), a
// Sink enabled on it and a session to push frames into.
struct RingPort {
  explicit RingPort(std::size_t mbufs, std::size_t tx_keep_max = 0, bool gro = false, bool gro_verify = true,
                    std::size_t gro_max = 0)
      : drv("net0", config(mbufs, tx_keep_max, gro, gro_verify, gro_max), &loop) {
    EXPECT_TRUE(drv.open_enable(sink, parts).ok());
    Result<SessionRef> r = drv.open(sink, parts);
    EXPECT_TRUE(r.ok());
    if (r) s = *r;
  }
  ~RingPort() {
    sink.received.clear();
    EXPECT_TRUE(drv.open_disable(sink, parts).ok());
  }
  RingPort(const RingPort&) = delete;
  RingPort& operator=(const RingPort&) = delete;
  // tx_keep_max > 0: keep what the ring refuses (tx_keep), up to that many.
  // gro off unless asked: the tests of what is sent look at each frame.
  static DpdkDriver::Config config(std::size_t mbufs, std::size_t tx_keep_max, bool gro, bool gro_verify,
                                   std::size_t gro_max) {
    DpdkDriver::Config c;
    c.devargs = ring_devargs();
    c.mbufs = mbufs;
    c.gro = gro;
    c.gro_verify = gro_verify;
    c.gro_max = gro_max;
    c.tx_keep = tx_keep_max > 0;
    if (c.tx_keep) c.tx_keep_max = tx_keep_max;
    return c;
  }
  // Sends what is queued, then runs the loop until `n` frames are in.
  void receive(std::size_t n) {
    (void)drv.flush();
    for (int i = 0; i < 200 && sink.received.size() < n; ++i) (void)loop.run_once();
  }
  EventLoop loop;
  DpdkDriver drv;
  Sink sink;
  Participants parts;
  SessionRef s;
};

TEST_F(DpdkTest, RingLoopsFramesBackAndCountsTxDropsWhenTheRingIsFull) {
  RingPort p(2047);

  constexpr std::size_t kSent = 1100;
  for (std::size_t i = 0; i < kSent; ++i) {
    Bytes f = test_frame(64, static_cast<unsigned>(i));
    ASSERT_TRUE(p.s->push(Msg::copy_of(f)).ok()) << i;
  }
  EXPECT_EQ(p.drv.flush(), 0u);  // the ring was already full
  EXPECT_EQ(p.drv.counters().value("tx_frames"), 1023u);
  EXPECT_EQ(p.drv.counters().value("tx_drop_full"), kSent - 1023u);

  for (int i = 0; i < 200 && p.sink.received.size() < 1023; ++i) (void)p.loop.run_once();
  ASSERT_EQ(p.sink.received.size(), 1023u);
  EXPECT_EQ(bytes_of(p.sink.received.front()), test_frame(64, 0));
  EXPECT_EQ(bytes_of(p.sink.received.back()), test_frame(64, 1022));
  EXPECT_EQ(p.drv.counters().value("rx_frames"), 1023u);
}

// ---- segmentation offload (software, any PMD) -------------------------------

// Ethernet + IPv4 (ID 0x1234, DF) + TCP with a 12-byte option block (32
// bytes: doff 8), seq 1000, `flags`, then `payload`.
Bytes gso_frame(const Bytes& payload, std::uint8_t flags) {
  Bytes f(14 + 20 + 32 + payload.size());
  for (std::size_t i = 0; i < 6; ++i) f[i] = std::byte{0x02};
  f[6] = std::byte{0x02};
  f[11] = std::byte{0x01};
  store_be16(f.data() + 12, 0x0800);
  std::byte* ip = f.data() + 14;
  ip[0] = std::byte{0x45};
  store_be16(ip + 2, static_cast<std::uint16_t>(20 + 32 + payload.size()));
  store_be16(ip + 4, 0x1234);
  store_be16(ip + 6, 0x4000);  // DF
  ip[8] = std::byte{64};
  ip[9] = std::byte{6};
  store_be32(ip + 12, 0xc000020b);  // 192.0.2.11
  store_be32(ip + 16, 0xc000020a);  // 192.0.2.10
  std::byte* tcp = ip + 20;
  store_be16(tcp, 49152);
  store_be16(tcp + 2, 5001);
  store_be32(tcp + 4, 1000);
  store_be32(tcp + 8, 77);
  tcp[12] = std::byte{8 << 4};
  tcp[13] = std::byte{flags};
  store_be16(tcp + 14, 4096);
  tcp[20] = std::byte{1};  // NOP, NOP, timestamps
  tcp[21] = std::byte{1};
  tcp[22] = std::byte{8};
  tcp[23] = std::byte{10};
  store_be32(tcp + 24, 5555);
  store_be32(tcp + 28, 6666);
  std::copy(payload.begin(), payload.end(), f.begin() + 66);
  return f;
}

TEST_F(DpdkTest, SegmentationOffloadCutsATcpSegmentIntoMtuSizedFrames) {
  RingPort p(1023);
  Result<LinkOffloads> o = p.drv.control(ctl::GetOffloads{});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->tx_tcp_seg) << "the driver cuts segments in software on any port";

  constexpr std::size_t kSeg = 1448;
  Bytes payload(3 * kSeg + 1000);  // three full pieces and a short one
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>((i * 13 + 5) & 0xff);
  constexpr std::uint8_t kAckPshFinCwr = 0x10 | 0x08 | 0x01 | 0x80;
  for (bool with_csum : {true, false}) {
    // Fragments of odd sizes that do not line up with the pieces.
    Msg m = fragmented(gso_frame(payload, kAckPshFinCwr), 997);
    m.offload().flags = Offload::tx_tcp_seg | (with_csum ? Offload::tx_tcp_csum : 0);
    m.offload().seg_size = kSeg;
    ASSERT_TRUE(p.s->push(std::move(m)).ok());
    p.receive(4);
    ASSERT_EQ(p.sink.received.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      SCOPED_TRACE("piece " + std::to_string(i) + (with_csum ? ", checksum on" : ", checksum off"));
      const Bytes f = bytes_of(p.sink.received[i]);
      const std::size_t n = i < 3 ? kSeg : 1000;
      ASSERT_EQ(f.size(), 14 + 20 + 32 + n);
      const std::byte* ip = f.data() + 14;
      const std::byte* tcp = ip + 20;
      EXPECT_EQ(load_be16(ip + 2), 20 + 32 + n);
      EXPECT_EQ(load_be16(ip + 4), 0x1234 + i);
      EXPECT_EQ(load_be16(ip + 6), 0x4000);
      EXPECT_EQ(csum::fold(csum::partial(ip, 20)), 0xffff) << "IPv4 header checksum";
      EXPECT_EQ(load_be32(tcp + 4), 1000 + i * kSeg);
      EXPECT_EQ(load_be32(tcp + 8), 77u);
      const std::uint8_t want = i == 0 ? (0x10 | 0x80) : i == 3 ? (0x10 | 0x08 | 0x01) : 0x10;
      EXPECT_EQ(std::to_integer<unsigned>(tcp[13]), want) << "FIN/PSH on the last piece, CWR on the first";
      EXPECT_EQ(load_be32(tcp + 24), 5555u) << "every piece carries the options";
      if (with_csum) {
        std::uint32_t sum = csum::pseudo_header_v4(Ipv4Addr{0xc000020b}, Ipv4Addr{0xc000020a}, 6,
                                                   static_cast<std::uint16_t>(32 + n));
        EXPECT_EQ(csum::fold(csum::partial(tcp, 32 + n, sum)), 0xffff) << "TCP checksum";
      } else {
        EXPECT_EQ(load_be16(tcp + 16), 0) << "checksum off: none";
      }
      EXPECT_TRUE(std::equal(f.begin() + 66, f.end(), payload.begin() + static_cast<std::ptrdiff_t>(i * kSeg)));
    }
    p.sink.received.clear();
  }
  EXPECT_EQ(p.drv.counters().value("tx_gso"), 2u);
  EXPECT_EQ(p.drv.counters().value("tx_gso_pieces"), 8u);

  // What the driver cannot cut is refused and counted, never sent half-made.
  Msg bad = Msg::copy_of(test_frame(3000, 1));  // not IPv4
  bad.offload().flags = Offload::tx_tcp_seg;
  bad.offload().seg_size = kSeg;
  EXPECT_EQ(p.s->push(std::move(bad)).error(), Errc::invalid_argument);
  Msg no_size = Msg::copy_of(gso_frame(payload, 0x10));
  no_size.offload().flags = Offload::tx_tcp_seg;
  EXPECT_EQ(p.s->push(std::move(no_size)).error(), Errc::invalid_argument);
  Msg too_big = Msg::copy_of(gso_frame(payload, 0x10));
  too_big.offload().flags = Offload::tx_tcp_seg;
  too_big.offload().seg_size = 1500;  // 20 + 32 + 1500 > the 1500-byte MTU
  EXPECT_EQ(p.s->push(std::move(too_big)).error(), Errc::too_large);
  EXPECT_EQ(p.drv.counters().value("drop_offload"), 2u);
  EXPECT_EQ(p.drv.counters().value("drop_too_big"), 1u);
  (void)p.drv.flush();
  for (int i = 0; i < 20; ++i) (void)p.loop.run_once();
  EXPECT_TRUE(p.sink.received.empty());
}

// The same segment over IPv6: Ethernet + IPv6 (flow label 0x12345, hop
// limit 64, 2001:db8::b -> 2001:db8::a) + the same TCP header and payload.
Bytes gso6_frame(const Bytes& payload, std::uint8_t flags, std::uint8_t next_header = 6) {
  const Bytes v4 = gso_frame(payload, flags);
  Bytes f(14 + 40 + (v4.size() - 34));
  std::copy(v4.begin(), v4.begin() + 12, f.begin());
  store_be16(f.data() + 12, 0x86dd);
  std::byte* ip = f.data() + 14;
  store_be32(ip, 6u << 28 | 0x12345);
  store_be16(ip + 4, static_cast<std::uint16_t>(32 + payload.size()));
  ip[6] = std::byte{next_header};
  ip[7] = std::byte{64};
  for (std::size_t i : {8u, 24u}) {
    ip[i] = std::byte{0x20};
    ip[i + 1] = std::byte{0x01};
    ip[i + 2] = std::byte{0x0d};
    ip[i + 3] = std::byte{0xb8};
  }
  ip[23] = std::byte{0x0b};
  ip[39] = std::byte{0x0a};
  std::copy(v4.begin() + 34, v4.end(), f.begin() + 54);  // TCP header and payload
  return f;
}

TEST_F(DpdkTest, SegmentationOffloadCutsAnIpv6SegmentLikewise) {
  RingPort p(1023);
  constexpr std::size_t kSeg = 1428;  // 1500 - 40 - 32
  Bytes payload(2 * kSeg + 500);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>((i * 7 + 1) & 0xff);
  const Bytes frame = gso6_frame(payload, 0x10 | 0x08 | 0x01);
  Msg m = fragmented(frame, 613);
  m.offload().flags = Offload::tx_tcp_seg | Offload::tx_tcp_csum;
  m.offload().seg_size = kSeg;
  m.offload().l3_len = 40;
  ASSERT_TRUE(p.s->push(std::move(m)).ok());
  p.receive(3);
  ASSERT_EQ(p.sink.received.size(), 3u);
  const IpAddr src = *parse_ip("2001:db8::b"), dst = *parse_ip("2001:db8::a");
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("piece " + std::to_string(i));
    const Bytes f = bytes_of(p.sink.received[i]);
    const std::size_t n = i < 2 ? kSeg : 500;
    ASSERT_EQ(f.size(), 14 + 40 + 32 + n);
    const std::byte* ip = f.data() + 14;
    const std::byte* tcp = ip + 40;
    EXPECT_EQ(load_be16(ip + 4), 32 + n) << "payload length";
    EXPECT_TRUE(std::equal(ip, ip + 4, frame.begin() + 14)) << "version, class and flow label as they were";
    EXPECT_TRUE(std::equal(ip + 6, ip + 40, frame.begin() + 20)) << "next header, hop limit, addresses";
    EXPECT_EQ(load_be32(tcp + 4), 1000 + i * kSeg);
    const std::uint8_t want = i == 2 ? (0x10 | 0x08 | 0x01) : 0x10;
    EXPECT_EQ(std::to_integer<unsigned>(tcp[13]), want) << "FIN/PSH on the last piece";
    const std::uint32_t sum = csum::pseudo_header(src, dst, 6, static_cast<std::uint32_t>(32 + n));
    EXPECT_EQ(csum::fold(csum::partial(tcp, 32 + n, sum)), 0xffff) << "TCP checksum over the IPv6 pseudo-header";
    EXPECT_TRUE(std::equal(f.begin() + 86, f.end(), payload.begin() + static_cast<std::ptrdiff_t>(i * kSeg)));
  }
  // An extension header between IPv6 and TCP is not cut (ipv6 sends none
  // with a segment to cut): refused and counted.
  Msg ext = Msg::copy_of(gso6_frame(payload, 0x10, 0));
  ext.offload().flags = Offload::tx_tcp_seg;
  ext.offload().seg_size = kSeg;
  EXPECT_EQ(p.s->push(std::move(ext)).error(), Errc::invalid_argument);
  EXPECT_EQ(p.drv.counters().value("drop_offload"), 1u);
}

// ---- receive coalescing (GRO) ----------------------------------------------

// A TCP segment as a frame, every checksum right: 192.0.2.11:`sport` ->
// 192.0.2.10:5001, ack 77, the timestamps option (TSval, TSecr), `flags`,
// `payload` bytes of a pattern that follows the sequence number.
struct Seg {
  std::uint32_t seq = 1000;
  std::size_t len = 1000;
  std::uint8_t flags = 0x10;
  std::uint32_t tsval = 5555, tsecr = 6666;
  std::uint16_t win = 4096;
  std::uint16_t sport = 49152;
  std::uint8_t tos = 0;
  std::uint8_t dst_mac_last = 0x02;  // the destination MAC's last byte
};
std::byte stream_byte(std::uint32_t seq) { return static_cast<std::byte>((seq * 7 + 1) & 0xff); }
Bytes seg_frame(const Seg& s) {
  Bytes payload(s.len);
  for (std::size_t i = 0; i < s.len; ++i) payload[i] = stream_byte(s.seq + static_cast<std::uint32_t>(i));
  Bytes f = gso_frame(payload, s.flags);
  std::byte* ip = f.data() + 14;
  std::byte* tcp = ip + 20;
  f[5] = std::byte{s.dst_mac_last};
  ip[1] = std::byte{s.tos};
  const std::uint16_t ipck = csum::finish(csum::partial(ip, 20));
  std::memcpy(ip + 10, &ipck, 2);
  store_be16(tcp, s.sport);
  store_be32(tcp + 4, s.seq);
  store_be16(tcp + 14, s.win);
  store_be32(tcp + 24, s.tsval);
  store_be32(tcp + 28, s.tsecr);
  const std::uint32_t pseudo = csum::pseudo_header_v4(Ipv4Addr{0xc000020b}, Ipv4Addr{0xc000020a}, 6,
                                                      static_cast<std::uint16_t>(32 + s.len));
  const std::uint16_t ck = csum::finish(csum::partial(tcp, 32 + s.len, pseudo));
  std::memcpy(tcp + 16, &ck, 2);
  return f;
}

// What a received frame holds, checked for being one valid segment.
struct Got {
  std::uint32_t seq = 0;
  std::size_t len = 0;
  std::uint8_t flags = 0;
  std::uint16_t sport = 0;
  bool l4_good = false;
  bool csum_ok = false;  // both checksums right
  bool stream = false;   // the payload is the stream's bytes at seq
};
Got got_of(const Msg& m) {
  const Bytes f = bytes_of(m);
  Got g;
  const std::byte* ip = f.data() + 14;
  const std::byte* tcp = ip + 20;
  g.seq = load_be32(tcp + 4);
  g.len = load_be16(ip + 2) - 20 - 32;
  g.flags = std::to_integer<std::uint8_t>(tcp[13]);
  g.sport = load_be16(tcp);
  g.l4_good = (m.offload().flags & Offload::rx_l4_good) != 0;
  const std::uint32_t pseudo = csum::pseudo_header_v4(Ipv4Addr{0xc000020b}, Ipv4Addr{0xc000020a}, 6,
                                                      static_cast<std::uint16_t>(32 + g.len));
  g.stream = f.size() == 66 + g.len;
  for (std::size_t i = 0; g.stream && i < g.len; ++i) {
    g.stream = f[66 + i] == stream_byte(g.seq + static_cast<std::uint32_t>(i));
  }
  g.csum_ok = csum::fold(csum::partial(ip, 20)) == 0xffff && csum::fold(csum::partial(tcp, 32 + g.len, pseudo)) == 0xffff;
  return g;
}

// got_of for any frame, however short: `merged` when its IPv4 total length
// says more than one of the segments sent (all are at most 1400 bytes).
struct AnyGot {
  bool merged = false;
  bool csum_ok = false;
};
AnyGot got_of_any(const Msg& m) {
  AnyGot out;
  const Bytes f = bytes_of(m);
  if (f.size() < 66 || load_be16(f.data() + 12) != 0x0800) return out;
  const std::size_t tot = load_be16(f.data() + 16);
  if (tot < 52 + 1400 + 1 || 14 + tot > f.size()) return out;
  out.merged = true;
  const Got g = got_of(m);
  out.csum_ok = g.csum_ok;
  return out;
}

// Sends `frames` through a looped-back net_ring port with gro on
// (gro_csum=verify, or carry), receives them in one burst, and returns what
// came up.
struct GroCounts {
  std::uint64_t merged = 0, bad = 0;
};
std::vector<Got> coalesced(const std::vector<Bytes>& frames, GroCounts* counts = nullptr, bool verify = true) {
  RingPort p(1023, 0, true, verify);
  std::vector<Got> out;
  for (const Bytes& f : frames) EXPECT_TRUE(p.s->push(Msg::copy_of(f)).ok());
  (void)p.drv.flush();
  (void)p.drv.poll(256);  // one burst
  for (const Msg& m : p.sink.received) out.push_back(got_of(m));
  if (counts != nullptr) *counts = {p.drv.counters().value("rx_gro_merged"), p.drv.counters().value("rx_gro_bad_csum")};
  p.sink.received.clear();
  EXPECT_EQ(p.drv.counters().value("rx_frames"), out.size());
  return out;
}

TEST_F(DpdkTest, GroMergesAFlowsInOrderSegmentsOfABurstIntoOne) {
  std::vector<Bytes> frames;
  for (std::uint32_t i = 0; i < 4; ++i) {
    Seg s;
    s.seq = 1000 + i * 1000;
    s.tsval = 5555 + i / 2;  // TSval may grow
    s.flags = i == 3 ? 0x18 : 0x10;  // PSH on the last
    frames.push_back(seg_frame(s));
  }
  GroCounts n;
  const std::vector<Got> got = coalesced(frames, &n);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].seq, 1000u);
  EXPECT_EQ(got[0].len, 4000u);
  EXPECT_EQ(got[0].flags, 0x18) << "PSH carried onto the merged segment";
  EXPECT_TRUE(got[0].csum_ok) << "headers rewritten, both checksums right";
  EXPECT_TRUE(got[0].stream) << "the payload in order";
  EXPECT_TRUE(got[0].l4_good) << "checked here: TCP need not sum it again";
  EXPECT_EQ(n.merged, 3u);

  // gro_csum=carry (a stack with checksums off): nothing is summed, the
  // merged checksum comes from the parts' -- right when they were right,
  // wrong when one was not (so a stack that does check drops the whole).
  const std::vector<Got> carried = coalesced(frames, &n, false);
  ASSERT_EQ(carried.size(), 1u);
  EXPECT_TRUE(carried[0].csum_ok);
  EXPECT_FALSE(carried[0].l4_good) << "not checked, not marked";
  frames[2][200] ^= std::byte{0x40};
  const std::vector<Got> spoilt = coalesced(frames, &n, false);
  ASSERT_EQ(spoilt.size(), 1u);
  EXPECT_FALSE(spoilt[0].csum_ok);
  EXPECT_EQ(spoilt[0].len, 4000u);
}

TEST_F(DpdkTest, GroNeverMergesAcrossAHoleAStepBackOrAFlagOtherThanAckPsh) {
  auto pair_of = [](Seg b) {
    Seg a;
    return std::vector<Bytes>{seg_frame(a), seg_frame(b)};
  };
  Seg next;
  next.seq = 2000;
  struct Case {
    const char* what;
    Seg b;
  };
  std::vector<Case> cases;
  auto with = [&](const char* what, auto change) {
    Seg b = next;
    change(b);
    cases.push_back({what, b});
  };
  with("a hole", [](Seg& b) { b.seq = 2001; });
  with("a step back", [](Seg& b) { b.seq = 1500; });
  with("SYN", [](Seg& b) { b.flags = 0x12; });
  with("FIN", [](Seg& b) { b.flags = 0x11; });
  with("RST", [](Seg& b) { b.flags = 0x14; });
  with("URG", [](Seg& b) { b.flags = 0x30; });
  with("ECE", [](Seg& b) { b.flags = 0x50; });
  with("CWR", [](Seg& b) { b.flags = 0x90; });
  with("no ACK", [](Seg& b) { b.flags = 0x08; });
  with("no data", [](Seg& b) { b.len = 0; });
  with("another window", [](Seg& b) { b.win = 4097; });
  with("another TSecr", [](Seg& b) { b.tsecr = 6667; });
  with("an older TSval", [](Seg& b) { b.tsval = 5554; });
  with("other ECN bits", [](Seg& b) { b.tos = 0x03; });
  with("a longer segment than the first", [](Seg& b) { b.len = 1001; });
  with("another flow", [](Seg& b) { b.sport = 49153; });
  with("another destination MAC", [](Seg& b) { b.dst_mac_last = 0x03; });
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::vector<Got> got = coalesced(pair_of(c.b));
    ASSERT_EQ(got.size(), 2u) << "merged";
    EXPECT_EQ(got[0].seq, 1000u);
    EXPECT_EQ(got[0].len, 1000u);
    EXPECT_EQ(got[1].seq, c.b.seq) << "in the order they came";
    EXPECT_TRUE(got[0].csum_ok);
  }
  // After a PSH or a shorter segment the group takes no more.
  Seg psh;
  psh.flags = 0x18;
  Seg after_psh;
  after_psh.seq = 2000;
  EXPECT_EQ(coalesced({seg_frame(psh), seg_frame(after_psh)}).size(), 2u) << "PSH ends a group";
  Seg shorter = next;
  shorter.len = 500;
  Seg after_short;
  after_short.seq = 2500;
  const std::vector<Got> s = coalesced({seg_frame(Seg{}), seg_frame(shorter), seg_frame(after_short)});
  ASSERT_EQ(s.size(), 2u) << "a shorter segment joins and is the last";
  EXPECT_EQ(s[0].len, 1500u);
}

TEST_F(DpdkTest, GroLeavesABadChecksumAloneAndKeepsEachFlowsOrder) {
  // A corrupted segment between two good ones: nothing merges across it, it
  // goes up alone (for TCP to count and drop), and is counted.
  Bytes bad = seg_frame(Seg{.seq = 2000});
  bad[100] ^= std::byte{0x01};
  GroCounts n;
  std::vector<Got> got =
      coalesced({seg_frame(Seg{}), bad, seg_frame(Seg{.seq = 3000}), seg_frame(Seg{.seq = 4000})}, &n);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].seq, 1000u);
  EXPECT_EQ(got[1].seq, 2000u);
  EXPECT_FALSE(got[1].csum_ok);
  EXPECT_FALSE(got[1].l4_good) << "the bad one is not marked good";
  EXPECT_EQ(got[2].seq, 3000u);
  EXPECT_EQ(got[2].len, 2000u) << "what follows merges again";
  EXPECT_EQ(n.bad, 1u);
  EXPECT_EQ(n.merged, 1u);

  // Two flows interleaved, and a pure ACK of the first between its data:
  // each flow's order is kept, the ACK ends the group before it.
  got = coalesced({seg_frame(Seg{}), seg_frame(Seg{.sport = 7}), seg_frame(Seg{.seq = 2000}),
                   seg_frame(Seg{.seq = 1000, .sport = 7}), seg_frame(Seg{.seq = 2000, .sport = 7}),
                   seg_frame(Seg{.seq = 3000, .len = 0}), seg_frame(Seg{.seq = 3000})});
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0].sport, 49152);
  EXPECT_EQ(got[0].len, 2000u);
  EXPECT_EQ(got[1].sport, 7);
  EXPECT_EQ(got[1].len, 1000u) << "seq 1000 of flow 7 came before its own 1000 again: a step back";
  EXPECT_EQ(got[2].sport, 7);
  EXPECT_EQ(got[2].len, 2000u);
  EXPECT_EQ(got[3].len, 0u) << "the pure ACK, after the data before it";
  EXPECT_EQ(got[4].seq, 3000u);
  for (const Got& g : got) EXPECT_TRUE(g.csum_ok && g.stream);
}

// ---- GRO over IPv6 ----

// seg_frame's segment over IPv6 (2001:db8::b -> 2001:db8::a), flow label
// `flow`, next header `nh` (6: TCP straight behind the header).
Bytes seg6_frame(const Seg& s, std::uint32_t flow = 0x12345, std::uint8_t nh = 6) {
  Bytes payload(s.len);
  for (std::size_t i = 0; i < s.len; ++i) payload[i] = stream_byte(s.seq + static_cast<std::uint32_t>(i));
  Bytes f = gso6_frame(payload, s.flags, nh);
  std::byte* ip = f.data() + 14;
  std::byte* tcp = ip + 40;
  store_be32(ip, 6u << 28 | std::uint32_t{s.tos} << 20 | flow);
  store_be16(tcp, s.sport);
  store_be32(tcp + 4, s.seq);
  store_be16(tcp + 14, s.win);
  store_be32(tcp + 24, s.tsval);
  store_be32(tcp + 28, s.tsecr);
  const std::uint32_t pseudo = csum::pseudo_header(*parse_ip("2001:db8::b"), *parse_ip("2001:db8::a"), 6,
                                                   static_cast<std::uint32_t>(32 + s.len));
  const std::uint16_t ck = csum::finish(csum::partial(tcp, 32 + s.len, pseudo));
  std::memcpy(tcp + 16, &ck, 2);
  return f;
}

// A received IPv6 frame: its segment's first sequence number, payload
// bytes by the payload length, and whether the TCP checksum holds over the
// whole and the payload is the stream's.
struct Got6 {
  std::uint32_t seq = 0;
  std::size_t len = 0;
  std::uint8_t flags = 0;
  bool csum_ok = false, stream = false, l4_good = false;
};
Got6 got6_of(const Msg& m) {
  const Bytes f = bytes_of(m);
  Got6 g;
  const std::byte* ip = f.data() + 14;
  const std::byte* tcp = ip + 40;
  const std::size_t plen = load_be16(ip + 4);
  g.seq = load_be32(tcp + 4);
  g.len = plen - 32;
  g.flags = std::to_integer<std::uint8_t>(tcp[13]);
  g.l4_good = (m.offload().flags & Offload::rx_l4_good) != 0;
  g.stream = f.size() == 14 + 40 + plen;
  for (std::size_t i = 0; g.stream && i < g.len; ++i) {
    g.stream = f[14 + 40 + 32 + i] == stream_byte(g.seq + static_cast<std::uint32_t>(i));
  }
  const std::uint32_t pseudo = csum::pseudo_header(*parse_ip("2001:db8::b"), *parse_ip("2001:db8::a"), 6,
                                                   static_cast<std::uint32_t>(plen));
  g.csum_ok = csum::fold(csum::partial(tcp, plen, pseudo)) == 0xffff;
  return g;
}

std::vector<Got6> coalesced6(const std::vector<Bytes>& frames, GroCounts* counts = nullptr) {
  RingPort p(1023, 0, true, true);
  std::vector<Got6> out;
  for (const Bytes& f : frames) EXPECT_TRUE(p.s->push(Msg::copy_of(f)).ok());
  (void)p.drv.flush();
  (void)p.drv.poll(256);
  for (const Msg& m : p.sink.received) out.push_back(got6_of(m));
  if (counts != nullptr) *counts = {p.drv.counters().value("rx_gro_merged"), p.drv.counters().value("rx_gro_bad_csum")};
  p.sink.received.clear();
  return out;
}

TEST_F(DpdkTest, GroMergesIpv6SegmentsAsIpv4Ones) {
  std::vector<Bytes> frames;
  for (std::uint32_t i = 0; i < 4; ++i) {
    frames.push_back(seg6_frame(Seg{.seq = 1000 + i * 1000, .flags = static_cast<std::uint8_t>(i == 3 ? 0x18 : 0x10),
                                    .tsval = 5555 + i / 2}));
  }
  GroCounts n;
  std::vector<Got6> got = coalesced6(frames, &n);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].seq, 1000u);
  EXPECT_EQ(got[0].len, 4000u) << "the payload length rewritten";
  EXPECT_EQ(got[0].flags, 0x18);
  EXPECT_TRUE(got[0].csum_ok) << "the checksum over the IPv6 pseudo-header";
  EXPECT_TRUE(got[0].stream);
  EXPECT_TRUE(got[0].l4_good);
  EXPECT_EQ(n.merged, 3u);

  // Another flow label, another traffic class (an ECN mark), extension
  // headers, a bad checksum: each stops a group (and is never merged into
  // one), the stream's order kept.
  Bytes bad = seg6_frame(Seg{.seq = 5000});
  bad[120] ^= std::byte{0x08};
  got = coalesced6({seg6_frame(Seg{.seq = 1000}), seg6_frame(Seg{.seq = 2000}, 0x54321),
                    seg6_frame(Seg{.seq = 3000, .tos = 0x03}), seg6_frame(Seg{.seq = 4000}, 0x12345, 0), bad},
                   &n);
  ASSERT_EQ(got.size(), 5u);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].seq, 1000u + 1000u * i) << i;
  EXPECT_EQ(n.merged, 0u);
  EXPECT_EQ(n.bad, 1u);
  EXPECT_FALSE(got[4].csum_ok);

  // IPv4 and IPv6 segments of the same ports are two flows.
  got = coalesced6({seg6_frame(Seg{.seq = 1000}), seg6_frame(Seg{.seq = 2000})});
  ASSERT_EQ(got.size(), 1u);
  RingPort p(1023, 0, true, true);
  for (const Bytes& f : {seg6_frame(Seg{.seq = 1000}), seg_frame(Seg{.seq = 2000}), seg6_frame(Seg{.seq = 2000})}) {
    ASSERT_TRUE(p.s->push(Msg::copy_of(f)).ok());
  }
  (void)p.drv.flush();
  (void)p.drv.poll(256);
  ASSERT_EQ(p.sink.received.size(), 2u) << "the IPv4 segment does not join the IPv6 flow";
  EXPECT_EQ(got6_of(p.sink.received[0]).len, 2000u);
  p.sink.received.clear();
}

// What the network sends is anything: segments with random bytes spoilt
// (headers included) and random lengths, in bursts, through coalescing. No
// crash, no read out of bounds (ASan), nothing merged that is not a valid
// segment (every merged frame's checksums hold), every mbuf back in the
// pool.
TEST_F(DpdkTest, GroTakesMangledFramesWithoutHarm) {
  RingPort p(2047, 0, true);
  const std::size_t free0 = p.drv.mbufs_free();
  std::mt19937 rng(21);
  std::size_t sent = 0;
  std::uint32_t next[3] = {1000, 1000, 1000};  // three flows, each in order
  for (int burst = 0; burst < 200; ++burst) {
    for (int i = 0; i < 32; ++i) {
      Seg seg;
      const std::size_t flow = rng() % 3;
      seg.sport = static_cast<std::uint16_t>(49152 + flow);
      seg.seq = next[flow];
      seg.len = rng() % 4 == 0 ? 1 + rng() % 1400 : 1000;
      next[flow] += static_cast<std::uint32_t>(seg.len);
      Bytes f = seg_frame(seg);
      switch (rng() % 4) {
        case 0: break;  // left whole
        case 1: f[rng() % std::min<std::size_t>(f.size(), 66)] ^= static_cast<std::byte>(1 + rng() % 255); break;
        case 2: f.resize(14 + rng() % (f.size() - 14)); break;  // cut anywhere after Ethernet
        default: f[rng() % f.size()] = static_cast<std::byte>(rng()); break;
      }
      if (f.size() < 60) f.resize(60);  // as short frames are padded
      if (p.s->push(Msg::copy_of(f)).ok()) ++sent;
    }
    (void)p.drv.flush();
    (void)p.drv.poll(256);
    for (const Msg& m : p.sink.received) {
      const AnyGot g = got_of_any(m);
      if (g.merged) {
        EXPECT_TRUE(g.csum_ok) << "a merged frame with a bad checksum, burst " << burst;
      }
    }
    p.sink.received.clear();
  }
  EXPECT_GT(sent, 6000u);
  EXPECT_GT(p.drv.counters().value("rx_gro_merged"), 0u) << "the whole ones still merged";
  EXPECT_EQ(p.drv.mbufs_free(), free0) << "every mbuf came back";
}

// tx_keep (central mode's relay channels): a segment's pieces are kept
// together or refused together, so the queue never passes tx_keep_max.
TEST_F(DpdkTest, WithTxKeepASegmentsPiecesAreQueuedWholeOrNotAtAll) {
  RingPort p(2047, 8);
  for (std::size_t i = 0; i < 1023; ++i) ASSERT_TRUE(p.s->push(Msg::copy_of(test_frame(64, 1))).ok());
  (void)p.drv.flush();
  ASSERT_EQ(p.drv.counters().value("tx_frames"), 1023u);  // the ring is full now, and nobody reads it
  Bytes payload(5 * 1000);
  auto segment = [&] {
    Msg m = Msg::copy_of(gso_frame(payload, 0x10));
    m.offload().flags = Offload::tx_tcp_seg;
    m.offload().seg_size = 1000;
    return m;
  };
  ASSERT_TRUE(p.s->push(segment()).ok());  // 5 pieces kept
  EXPECT_EQ(p.drv.flush(), 0u);
  EXPECT_EQ(p.s->push(segment()).error(), Errc::would_block) << "5 + 5 pieces > tx_keep_max 8";
  EXPECT_EQ(p.drv.counters().value("tx_drop_full"), 0u) << "kept, never dropped";
  p.receive(1023 + 5);
  EXPECT_EQ(p.sink.received.size(), 1023u + 5u);
  ASSERT_TRUE(p.s->push(segment()).ok()) << "room again";
  p.receive(1023 + 10);
  EXPECT_EQ(p.sink.received.size(), 1023u + 10u);
}

TEST_F(DpdkTest, AReceivedFrameIsSentAgainAsItsOwnMbuf) {
  RingPort p(511);
  const std::size_t free0 = p.drv.mbufs_free();

  const Bytes f = test_frame(200, 3);
  ASSERT_TRUE(p.s->push(Msg::copy_of(f)).ok());
  p.receive(1);
  ASSERT_EQ(p.sink.received.size(), 1u);
  // Forwarded as filterd does it: a new Ethernet header in the same buffer.
  Msg fwd = std::move(p.sink.received.front());
  p.sink.received.clear();
  ASSERT_TRUE(fwd.pop(14).ok());
  Result<std::span<std::byte>> h = fwd.push(14);
  ASSERT_TRUE(h.ok());
  std::copy(f.begin(), f.begin() + 14, h->begin());
  (*h)[0] = std::byte{0x02};  // a unicast destination now
  Bytes want = f;
  want[0] = std::byte{0x02};
  ASSERT_EQ(fwd.fragment_count(), 1u);
  ASSERT_TRUE(p.s->push(std::move(fwd)).ok());
  EXPECT_EQ(p.drv.counters().value("tx_zero_copy"), 1u);
  p.receive(1);
  ASSERT_EQ(p.sink.received.size(), 1u);
  EXPECT_EQ(bytes_of(p.sink.received.front()), want) << "the frame as it was handed over";

  // Two fragments (a received frame and bytes of ours) are copied as before.
  Msg two = std::move(p.sink.received.front());
  p.sink.received.clear();
  ASSERT_TRUE(two.append(std::span(f).first(10)).ok());
  ASSERT_EQ(two.fragment_count(), 2u);
  ASSERT_TRUE(p.s->push(std::move(two)).ok());
  EXPECT_EQ(p.drv.counters().value("tx_zero_copy"), 1u);
  p.receive(1);
  ASSERT_EQ(p.sink.received.size(), 1u);
  EXPECT_EQ(p.sink.received.front().size(), 210u);
  p.sink.received.clear();
  // Two messages over one received mbuf (ipv4 cuts a received datagram so):
  // the first goes while the second still shares it, so it is copied; the
  // second, alone by then, is the mbuf's only user and goes as the mbuf.
  ASSERT_TRUE(p.s->push(Msg::copy_of(test_frame(300, 4))).ok());
  p.receive(1);
  ASSERT_EQ(p.sink.received.size(), 1u);
  Msg whole = std::move(p.sink.received.front());
  p.sink.received.clear();
  Result<Msg> back = whole.split(150);
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(p.s->push(std::move(whole)).ok());
  EXPECT_EQ(p.drv.counters().value("tx_zero_copy"), 1u) << "shared: copied";
  ASSERT_TRUE(p.s->push(std::move(*back)).ok());
  EXPECT_EQ(p.drv.counters().value("tx_zero_copy"), 2u) << "alone: its own mbuf";
  p.receive(2);
  ASSERT_EQ(p.sink.received.size(), 2u);
  const Bytes f4 = test_frame(300, 4);
  EXPECT_EQ(bytes_of(p.sink.received[0]), Bytes(f4.begin(), f4.begin() + 150));
  EXPECT_EQ(bytes_of(p.sink.received[1]), Bytes(f4.begin() + 150, f4.end()));
  p.sink.received.clear();
  // Every reference given back: no mbuf leaked, none freed twice.
  EXPECT_EQ(p.drv.mbufs_free(), free0);
}

TEST_F(DpdkTest, IdleLoopSleepsOnTheBackOffTimerWhenThePmdHasNoRxInterrupt) {
  DpdkDriver::Config c;
  c.devargs = ring_devargs();
  c.mbufs = 255;
  c.idle_sleep_min = std::chrono::microseconds(200);
  c.idle_sleep_max = std::chrono::microseconds(800);
  EventLoop loop;
  DpdkDriver drv("net0", c, &loop);
  EXPECT_FALSE(drv.rx_interrupt_active());
  EXPECT_GE(drv.wait_fd(), 0);

  // Without the timer this wait would last the full second.
  for (int i = 0; i < 4; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(loop.wait(std::chrono::seconds(1)));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  }
  EXPECT_EQ(drv.counters().value("timer_sleeps"), 4u);
  EXPECT_EQ(loop.counters().value("wakeups"), 4u);

  // A frame waiting in the ring is found by the next pass; work resets the back-off.
  Sink sink;
  Participants parts;
  ASSERT_TRUE(drv.open_enable(sink, parts).ok());
  Result<SessionRef> s = drv.open(sink, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->push(Msg::copy_of(test_frame(64, 9))).ok());
  (void)loop.run_once();  // sends
  (void)loop.run_once();  // receives
  ASSERT_EQ(sink.received.size(), 1u);
  sink.received.clear();
  ASSERT_TRUE(drv.open_disable(sink, parts).ok());
}

TEST_F(DpdkTest, GraphKindBuildsAPortAndReportsBadDevargs) {
  Registry registry;
  register_dpdk(registry);
  EventLoop loop;
  {
    Graph g = Graph::build("dpdk net0 devargs=" + vdev("net_null") + " mac=02:00:00:00:00:2a mtu=1500 rxd=256 txd=256"
                           " mbufs=1023 promisc=on rx_intr=off",
                           registry, &loop);
    auto* drv = g.find_as<DpdkDriver>("net0");
    ASSERT_NE(drv, nullptr);
    EXPECT_EQ(*drv->control(ctl::GetMtu{}), 1514u);
    Result<Participant> local = drv->control(ctl::GetLocalAddr{});
    ASSERT_TRUE(local.ok());
    Result<MacAddr> mac = local->peek<MacAddr>();
    ASSERT_TRUE(mac.ok());
    EXPECT_EQ(to_string(*mac), "02:00:00:00:00:2a");
    EXPECT_EQ(drv->counters().value("link_up"), 1u);
  }
  try {
    (void)Graph::build("dpdk net0 devargs=net_nosuchpmd0", registry, &loop);
    FAIL() << "a device nobody can probe must not build";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot probe 'net_nosuchpmd0'"), std::string::npos) << e.what();
    EXPECT_EQ(e.line(), 1u);
  }
}

// ---- af_packet on a veth pair, the far end in a network namespace ------

int run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// Creates the namespace and the veth pair; removes both whatever happens.
class VethInNamespace {
 public:
  VethInNamespace() {
    std::string id = std::to_string(::getpid());
    ns_ = "xk-test-" + id;
    outer_ = "xkt" + id + "a";
    inner_ = "xkt" + id + "b";
    ok_ = run("ip netns add " + ns_) == 0;
    ok_ = ok_ && run("ip link add " + outer_ + " type veth peer name " + inner_) == 0;
    ok_ = ok_ && run("ip link set " + inner_ + " netns " + ns_) == 0;
    ok_ = ok_ && run("ip link set " + outer_ + " up") == 0;
    ok_ = ok_ && run("ip netns exec " + ns_ + " ip link set " + inner_ + " up") == 0;
    ok_ = ok_ && run("ip netns exec " + ns_ + " ip addr add 192.0.2.2/24 dev " + inner_) == 0;
  }
  ~VethInNamespace() {
    run("ip link del " + outer_);
    run("ip netns del " + ns_);
  }
  bool ok() const { return ok_; }
  const std::string& outer() const { return outer_; }

  // A raw packet socket bound to the inner end, made inside the namespace by
  // a thread of its own (setns changes only the calling thread).
  int inner_socket() const {
    int fd = -1;
    std::thread t([&] {
      int nsfd = ::open(("/var/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC);
      if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) return;
      ::close(nsfd);
      int s = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
      if (s < 0) return;
      sockaddr_ll addr{};
      addr.sll_family = AF_PACKET;
      addr.sll_protocol = htons(ETH_P_ALL);
      addr.sll_ifindex = static_cast<int>(if_nametoindex(inner_.c_str()));
      timeval tv{0, 100'000};
      if (addr.sll_ifindex == 0 || ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||  // NOLINT
          setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        ::close(s);
        return;
      }
      fd = s;
    });
    t.join();
    return fd;
  }

 private:
  std::string ns_, outer_, inner_;
  bool ok_ = false;
};

TEST_F(DpdkTest, AfPacketOnVethExchangesFramesWithTheKernel) {
  ASSERT_EQ(::geteuid(), 0u) << "this test needs root: network namespace and veth pair";
  VethInNamespace veth;
  ASSERT_TRUE(veth.ok()) << "could not set up the namespace and veth pair (is iproute2 installed?)";
  int sock = veth.inner_socket();
  ASSERT_GE(sock, 0);

  DpdkDriver::Config c;
  c.devargs = vdev("net_af_packet") + ",iface=" + veth.outer();
  c.mbufs = 2047;
  c.rx_descriptors = 256;
  c.tx_descriptors = 256;
  DpdkDriver drv("net0", c);
  EXPECT_TRUE(drv.link().up);
  Sink sink;
  Participants parts;
  ASSERT_TRUE(drv.open_enable(sink, parts).ok());
  Result<SessionRef> s = drv.open(sink, parts);
  ASSERT_TRUE(s.ok());

  // xk -> Linux.
  std::vector<Bytes> out = {test_frame(60, 10), test_frame(1000, 11), test_frame(1514, 12)};
  for (const Bytes& f : out) ASSERT_TRUE((*s)->push(fragmented(f, 300)).ok());
  EXPECT_EQ(drv.flush(), out.size());
  std::vector<Bytes> seen;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (seen.size() < out.size() && std::chrono::steady_clock::now() < deadline) {
    Bytes buf(2048);
    ssize_t n = ::recv(sock, buf.data(), buf.size(), 0);
    if (n <= 0) continue;
    buf.resize(static_cast<std::size_t>(n));
    if (is_test_frame(buf)) seen.push_back(std::move(buf));
  }
  EXPECT_EQ(seen, out);

  // Linux -> xk.
  std::vector<Bytes> in = {test_frame(60, 20), test_frame(1514, 21)};
  for (const Bytes& f : in) EXPECT_EQ(::send(sock, f.data(), f.size(), 0), static_cast<ssize_t>(f.size()));
  std::vector<Bytes> got;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (got.size() < in.size() && std::chrono::steady_clock::now() < deadline) {
    if (drv.poll(32) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (Msg& m : sink.received) {
      Bytes b = bytes_of(m);
      if (is_test_frame(b)) got.push_back(std::move(b));
    }
    sink.received.clear();  // the kernel's own frames (IPv6 ND ...) too
  }
  EXPECT_EQ(got, in);
  EXPECT_GE(drv.counters().value("rx_frames"), in.size());
  ::close(sock);
  ASSERT_TRUE(drv.open_disable(sink, parts).ok());
}

// The PMD's fanout reassembles IPv4 fragments (PACKET_FANOUT_FLAG_DEFRAG):
// with default devargs the driver sizes the ring so the whole datagram
// arrives -- a 4000-byte ping as one 4042-byte frame, not cut at 1982.
TEST_F(DpdkTest, AfPacketWithDefaultDevargsReceivesReassembledDatagramsWhole) {
  ASSERT_EQ(::geteuid(), 0u) << "this test needs root: network namespace and veth pair";
  VethInNamespace veth;
  ASSERT_TRUE(veth.ok()) << "could not set up the namespace and veth pair (is iproute2 installed?)";
  DpdkDriver::Config c;
  c.devargs = vdev("net_af_packet") + ",iface=" + veth.outer();
  DpdkDriver drv("net0", c);
  Sink sink;
  Participants parts;
  ASSERT_TRUE(drv.open_enable(sink, parts).ok());
  // An address nobody answers for, with a static neighbour: the pings go
  // out, fragmented by the namespace's stack, and reach the outer end.
  ASSERT_EQ(run("ip netns exec xk-test-" + std::to_string(::getpid()) +
                " ip neigh replace 192.0.2.99 lladdr 02:00:00:00:00:99 dev xkt" + std::to_string(::getpid()) + "b"),
            0);
  std::thread ping([&] {
    run("ip netns exec xk-test-" + std::to_string(::getpid()) + " ping -n -c 3 -i 0.2 -W 1 -s 4000 192.0.2.99");
  });
  std::size_t largest = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (largest < 4042 && std::chrono::steady_clock::now() < deadline) {
    if (drv.poll(32) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (Msg& m : sink.received) largest = std::max(largest, m.size());
    sink.received.clear();
  }
  ping.join();
  EXPECT_EQ(largest, 14u + 20 + 8 + 4000) << "one Ethernet frame holding the reassembled echo request";
  ASSERT_TRUE(drv.open_disable(sink, parts).ok());
}

// A ring the user sized is checked at start: too small for the MTU, or
// larger than the mbufs hold, is refused with the reason.
TEST_F(DpdkTest, AfPacketRingThatCannotWorkIsRefused) {
  DpdkDriver::Config c;
  c.devargs = vdev("net_af_packet") + ",iface=lo,blocksz=4096,framesz=1024";
  try {
    DpdkDriver drv("net0", c);
    ADD_FAILURE() << "a 1024-byte frame ring was taken for a 1500-byte MTU";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("framesz=1024 holds frames of 992 bytes"), std::string::npos) << e.what();
  }
  c.devargs = vdev("net_af_packet") + ",iface=lo,blocksz=8192,framesz=8192";
  c.mbuf_data = 2048;
  try {
    DpdkDriver drv("net0", c);
    ADD_FAILURE() << "8 KB frames were taken into 2 KB mbufs";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs mbuf_data >= 8160"), std::string::npos) << e.what();
  }
}

// A raw packet socket on an interface of this namespace.
int packet_socket(const std::string& iface) {
  int s = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (s < 0) return -1;
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
  if (addr.sll_ifindex == 0 || ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {  // NOLINT
    ::close(s);
    return -1;
  }
  return s;
}

// net_tap has rx interrupts: the loop sleeps in epoll until a frame comes.
TEST_F(DpdkTest, TapRxInterruptWakesASleepingLoop) {
  ASSERT_EQ(::geteuid(), 0u) << "this test needs root: a tap interface";
  std::string iface = "xkt" + std::to_string(::getpid()) + "t";
  DpdkDriver::Config c;
  c.devargs = vdev("net_tap") + ",iface=" + iface;
  c.mbufs = 1023;
  c.rx_descriptors = 256;
  c.tx_descriptors = 256;
  EventLoop loop;
  DpdkDriver drv("net0", c, &loop);
  ASSERT_TRUE(drv.rx_interrupt_active());
  Sink sink;
  Participants parts;
  ASSERT_TRUE(drv.open_enable(sink, parts).ok());
  int sock = packet_socket(iface);
  ASSERT_GE(sock, 0);

  Bytes frame = test_frame(100, 30);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)::send(sock, frame.data(), frame.size(), 0);
  });
  // The kernel may send frames of its own on the new interface (IPv6): any
  // frame ends the sleep, so sleep until ours is in.
  bool seen = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    (void)loop.wait(std::chrono::seconds(3));
    (void)loop.run_once();
    for (Msg& m : sink.received) seen = seen || bytes_of(m) == frame;
    sink.received.clear();
  }
  sender.join();
  EXPECT_TRUE(seen);
  EXPECT_GE(drv.counters().value("intr_sleeps"), 1u);
  EXPECT_GE(loop.counters().value("wakeups"), 1u);
  ::close(sock);
  ASSERT_TRUE(drv.open_disable(sink, parts).ok());
}

// A UDP/IPv4 frame from 192.0.2.1:1000 to 192.0.2.2:2000 with `n` payload
// bytes. With `offload`, both checksums are left to the port as the stack
// leaves them (IPv4 field 0; UDP field the pseudo-header sum); otherwise they
// are computed, and `corrupt` spoils the UDP one.
Msg udp_frame(std::size_t n, bool offload, bool corrupt = false) {
  Bytes f(14 + 20 + 8 + n);
  std::fill(f.begin(), f.begin() + 12, std::byte{0x02});
  f[12] = std::byte{0x08};
  f[13] = std::byte{0x00};
  std::byte* ip = f.data() + 14;
  auto put16 = [](std::byte* p, std::uint16_t v) {
    p[0] = std::byte(v >> 8);
    p[1] = std::byte(v & 0xff);
  };
  ip[0] = std::byte{0x45};
  put16(ip + 2, static_cast<std::uint16_t>(20 + 8 + n));
  ip[8] = std::byte{64};
  ip[9] = std::byte{17};
  const Ipv4Addr src{0xC0000201}, dst{0xC0000202};
  put16(ip + 12, 0xC000);
  put16(ip + 14, 0x0201);
  put16(ip + 16, 0xC000);
  put16(ip + 18, 0x0202);
  std::byte* udp = ip + 20;
  put16(udp, 1000);
  put16(udp + 2, 2000);
  put16(udp + 4, static_cast<std::uint16_t>(8 + n));
  for (std::size_t i = 0; i < n; ++i) udp[8 + i] = std::byte(static_cast<unsigned char>(i * 3 + 1));
  std::uint32_t pseudo = csum::pseudo_header_v4(src, dst, 17, static_cast<std::uint16_t>(8 + n));
  std::uint16_t uck, ick = 0;
  if (offload) {
    uck = csum::fold(pseudo);
  } else {
    uck = csum::finish(csum::partial(udp, 8 + n, pseudo));
    if (corrupt) uck = static_cast<std::uint16_t>(uck ^ 0x0101);
    ick = csum::finish(csum::partial(ip, 20));
  }
  std::memcpy(udp + 6, &uck, 2);
  std::memcpy(ip + 10, &ick, 2);
  Msg m = Msg::copy_of(f);
  if (offload) {
    m.offload().flags = Offload::tx_ip_csum | Offload::tx_udp_csum;
    m.offload().l3_len = 20;
  }
  return m;
}

bool udp_frame_checksums_ok(const Bytes& f) {
  if (f.size() < 42) return false;
  const std::byte* ip = f.data() + 14;
  if (csum::fold(csum::partial(ip, 20)) != 0xffff) return false;
  const Ipv4Addr src{0xC0000201}, dst{0xC0000202};
  std::size_t l4 = f.size() - 34;
  std::uint32_t pseudo = csum::pseudo_header_v4(src, dst, 17, static_cast<std::uint16_t>(l4));
  return csum::fold(csum::partial(ip + 20, l4, pseudo)) == 0xffff;
}

// net_tap offers IPv4/UDP/TCP checksum offload (done in the PMD, as a NIC
// would): what the stack leaves to the port arrives right at the kernel, and
// what the kernel sends is flagged verified (or not, when it is wrong).
TEST_F(DpdkTest, TapFillsAndVerifiesChecksumsForUs) {
  ASSERT_EQ(::geteuid(), 0u) << "this test needs root: a tap interface";
  std::string iface = "xkt" + std::to_string(::getpid()) + "o";
  DpdkDriver::Config c;
  c.devargs = vdev("net_tap") + ",iface=" + iface;
  c.mbufs = 1023;
  c.rx_descriptors = 256;
  c.tx_descriptors = 256;
  DpdkDriver drv("net0", c);
  ASSERT_TRUE(drv.offloads().tx_ipv4_cksum && drv.offloads().tx_udp_cksum) << "net_tap should offer tx checksums";
  ASSERT_TRUE(drv.offloads().rx_ipv4_cksum && drv.offloads().rx_l4_cksum) << "net_tap should offer rx checksums";
  Result<LinkOffloads> lo = drv.control(ctl::GetOffloads{});
  ASSERT_TRUE(lo.ok());
  EXPECT_TRUE(lo->tx_ip_csum && lo->tx_udp_csum && lo->tx_tcp_csum && lo->rx_ip_csum && lo->rx_l4_csum);
  Sink sink;
  Participants parts;
  ASSERT_TRUE(drv.open_enable(sink, parts).ok());
  Result<SessionRef> s = drv.open(sink, parts);
  ASSERT_TRUE(s.ok());
  int sock = packet_socket(iface);
  ASSERT_GE(sock, 0);
  timeval tv{0, 100'000};
  ASSERT_EQ(setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);

  // xk -> kernel: checksums left to the port.
  ASSERT_TRUE((*s)->push(udp_frame(777, true)).ok());
  EXPECT_EQ(drv.flush(), 1u);
  EXPECT_EQ(drv.counters().value("tx_csum_offload"), 1u);
  bool seen = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    Bytes buf(2048);
    ssize_t n = ::recv(sock, buf.data(), buf.size(), 0);
    if (n <= 0) continue;
    buf.resize(static_cast<std::size_t>(n));
    if (buf.size() == 14 + 20 + 8 + 777 && buf[23] == std::byte{17}) {
      seen = true;
      EXPECT_TRUE(udp_frame_checksums_ok(buf)) << "the port did not fill the checksums";
    }
  }
  EXPECT_TRUE(seen);

  // kernel -> xk: a good frame is flagged verified, a bad one is not.
  Msg good = udp_frame(100, false);
  Msg bad = udp_frame(101, false, true);
  Bytes gb = bytes_of(good), bb = bytes_of(bad);
  ASSERT_EQ(::send(sock, gb.data(), gb.size(), 0), static_cast<ssize_t>(gb.size()));
  ASSERT_EQ(::send(sock, bb.data(), bb.size(), 0), static_cast<ssize_t>(bb.size()));
  int got_good = 0, got_bad = 0;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while ((got_good == 0 || got_bad == 0) && std::chrono::steady_clock::now() < deadline) {
    if (drv.poll(32) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (Msg& m : sink.received) {
      Bytes b = bytes_of(m);
      if (b == gb) {
        ++got_good;
        EXPECT_TRUE(m.offload().has(Offload::rx_ip_good));
        EXPECT_TRUE(m.offload().has(Offload::rx_l4_good));
      } else if (b == bb) {
        ++got_bad;
        EXPECT_TRUE(m.offload().has(Offload::rx_ip_good));
        EXPECT_FALSE(m.offload().has(Offload::rx_l4_good)) << "a wrong UDP checksum must not be vouched for";
      }
    }
    sink.received.clear();
  }
  EXPECT_EQ(got_good, 1);
  EXPECT_EQ(got_bad, 1);
  EXPECT_GE(drv.counters().value("rx_csum_bad"), 1u);
  ::close(sock);
  ASSERT_TRUE(drv.open_disable(sink, parts).ok());
}

// A request the port cannot honour is refused, never sent with a wrong checksum.
TEST_F(DpdkTest, OffloadRequestsThePortLacksAreRefused) {
  DpdkDriver::Config c;
  c.devargs = vdev("net_null");
  c.mbufs = 511;
  DpdkDriver drv("net0", c);
  Sink sink;
  Participants parts;
  Result<SessionRef> s = drv.open(sink, parts);
  ASSERT_TRUE(s.ok());
  ASSERT_FALSE(drv.offloads().tx_udp_cksum) << "net_null offers no checksum offload";
  EXPECT_EQ((*s)->push(udp_frame(50, true)).error(), Errc::unsupported);
  EXPECT_EQ(drv.counters().value("drop_offload"), 1u);
  EXPECT_TRUE((*s)->push(udp_frame(50, false)).ok());
}

// ---- the doorbell (memif has no rx interrupt) ----------------------------

TEST(Doorbell, RingsOnlyASleepingPeerOncePerSleep) {
  const std::string link = "/run/xk-test-bell-" + std::to_string(getpid()) + ".sock#7";
  Doorbell a(link, 0);
  Doorbell b(link, 1);
  EXPECT_EQ(a.shm_name(), b.shm_name());
  EXPECT_EQ(a.shm_name().find('/', 1), std::string::npos) << a.shm_name();

  EXPECT_EQ(a.ring(), Doorbell::Ring::awake) << "b is awake: no system call, no ring";
  pollfd p{b.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);

  b.arm();
  EXPECT_EQ(a.ring(), Doorbell::Ring::rang);
  EXPECT_EQ(a.ring(), Doorbell::Ring::awake) << "one ring per sleep: the first took the flag down";
  ASSERT_EQ(::poll(&p, 1, 1000), 1);
  EXPECT_EQ(b.disarm(), 1u);
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "disarm drains the socket";

  // Both ways, and a second sleep rings again.
  a.arm();
  b.arm();
  EXPECT_EQ(b.ring(), Doorbell::Ring::rang);
  EXPECT_EQ(a.ring(), Doorbell::Ring::rang);
  EXPECT_EQ(a.disarm(), 1u);
  EXPECT_EQ(b.disarm(), 1u);
  EXPECT_EQ(a.failures(), 0u);
  EXPECT_EQ(b.failures(), 0u);
  EXPECT_TRUE(a.peer_bound());
  EXPECT_TRUE(b.peer_bound());
}

TEST(Doorbell, EachEndSaysItRingsWhileItLives) {
  const std::string link = "/run/xk-test-bell-says-" + std::to_string(getpid()) + ".sock#2";
  Doorbell a(link, 0);
  EXPECT_FALSE(a.peer_rings()) << "nobody at the other end yet";
  {
    Doorbell b(link, 1);
    EXPECT_TRUE(a.peer_rings());
    EXPECT_TRUE(b.peer_rings());
  }
  EXPECT_FALSE(a.peer_rings()) << "the other end went, and said so";
}

TEST(Doorbell, TheLastEndOutRemovesThePage) {
  const std::string link = "/run/xk-test-bell-page-" + std::to_string(getpid()) + ".sock#1";
  auto exists = [](const std::string& name) { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; };
  std::string name;
  {
    Doorbell client(link, 1);
    name = client.shm_name();
    {
      Doorbell server(link, 0);
      EXPECT_TRUE(exists(name));
    }
    EXPECT_FALSE(exists(name)) << "the server's end took the page with it";
  }
  {
    Doorbell server(link, 0);
    {
      Doorbell client(link, 1);
    }
    EXPECT_TRUE(exists(name)) << "a client leaves the page to a live server";
    EXPECT_FALSE(server.peer_bound());
  }
  EXPECT_FALSE(exists(name));
  {
    Doorbell client(link, 1);  // a server killed with -9 left nothing bound
    EXPECT_TRUE(exists(name));
  }
  EXPECT_FALSE(exists(name)) << "nobody at the other end: the client removes it";
}

TEST(Doorbell, APeerThatIsGoneIsAFailureNotACrash) {
  const std::string link = "/run/xk-test-bell-gone-" + std::to_string(getpid()) + ".sock#0";
  Doorbell a(link, 0);
  {
    Doorbell b(link, 1);
    b.arm();
  }  // b goes: its flag comes down with it, so nothing rings
  EXPECT_EQ(a.ring(), Doorbell::Ring::awake);
  EXPECT_THROW(Doorbell(link, 0), std::runtime_error) << "one live process per end";
}

TEST(Doorbell, MemifLinkNamesComeFromTheDevargs) {
  int side = -1;
  EXPECT_EQ(Doorbell::memif_link("net_memif3,role=server,id=5,socket=/tmp/x.sock", side), "/tmp/x.sock#5");
  EXPECT_EQ(side, 0);
  EXPECT_EQ(Doorbell::memif_link("net_memif9,socket=/tmp/x.sock,id=5", side), "/tmp/x.sock#5");
  EXPECT_EQ(side, 1);
  EXPECT_EQ(Doorbell::memif_link("net_memif0", side), "/run/memif.sock#0");
  EXPECT_EQ(side, 1);
  EXPECT_EQ(Doorbell::memif_link("net_memif0,socket-abstract=no,socket=/a,role=client", side), "/a#0");
  EXPECT_EQ(Doorbell::memif_link("net_ring0", side), "");
  EXPECT_EQ(Doorbell::memif_link("net_af_packet0,iface=memif", side), "");
}

// Both ends of one memif link in this process, up. They go down in order:
// the client first, then -- once the EAL's interrupt thread is done with its
// going -- the server (DPDK's memif frees the control channel from both
// threads otherwise, now and then twice: run alone, as ctest runs them, such
// tests crashed at teardown about one run in four to eight).
// Both ends of a memif link up (they connect on the EAL's interrupt
// thread), waiting up to 3 s.
bool both_up(DpdkDriver& a, DpdkDriver& b) {
  for (int i = 0; i < 300 && !(a.link().up && b.link().up); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return a.link().up && b.link().up;
}

struct MemifPair {
  MemifPair(const std::string& tag, DpdkDriver::Config sc, DpdkDriver::Config cc, EventLoop* server_loop = nullptr)
      : server(tag + "s0", std::move(sc), server_loop) {
    client.emplace(tag + "c0", std::move(cc));
  }
  ~MemifPair() {
    client.reset();
    for (int i = 0; i < 100 && server.link().up; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  bool up() { return both_up(server, *client); }
  DpdkDriver server;
  std::optional<DpdkDriver> client;
};

// Two ends of one memif link in this process: a loop that sleeps with a
// one-second back-off is woken by the other end's ring, not by its timer.
TEST_F(DpdkTest, MemifDoorbellWakesASleepingLoopWhenTheOtherEndSends) {
  TempDir dir;
  const std::string sock = (dir / "bell.sock").string();
  DpdkDriver::Config sc;
  sc.devargs = memif_end("server", sock);
  sc.mbufs = 1023;
  sc.idle_sleep_min = sc.idle_sleep_max = std::chrono::seconds(1);
  DpdkDriver::Config cc = sc;
  cc.devargs = memif_end("client", sock);
  EventLoopConfig lc;
  lc.spin = std::chrono::microseconds(0);
  EventLoop sleeper(lc);
  MemifPair pair("bell", sc, cc, &sleeper);
  DpdkDriver& server = pair.server;
  DpdkDriver& client = *pair.client;
  ASSERT_TRUE(server.doorbell_active());
  ASSERT_TRUE(client.doorbell_active());
  EXPECT_FALSE(server.rx_interrupt_active());
  ASSERT_TRUE(pair.up());

  Sink sink;
  Participants parts;
  ASSERT_TRUE(server.open_enable(sink, parts).ok());
  Result<SessionRef> cs = client.open(sink, parts);
  ASSERT_TRUE(cs.ok());

  // The server's loop goes to sleep (flag up) in one thread; this thread
  // sends once it sees the sleep armed.
  std::atomic<bool> woke{false};
  std::thread t([&] { woke = sleeper.wait(std::chrono::seconds(5)); });
  for (int i = 0; i < 500 && server.counters().value("timer_sleeps") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(server.counters().value("timer_sleeps"), 1u);
  ASSERT_TRUE((*cs)->push(Msg::copy_of(test_frame(64, 3))).ok());
  EXPECT_EQ(client.flush(), 1u);
  t.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(client.counters().value("bell_rings"), 1u);
  EXPECT_EQ(server.counters().value("bell_wakes"), 1u);
  EXPECT_EQ(server.counters().value("timer_sleeps"), 1u) << "one sleep, ended by the ring";
  for (int i = 0; i < 10 && sink.received.empty(); ++i) (void)sleeper.run_once();
  ASSERT_EQ(sink.received.size(), 1u);
  EXPECT_EQ(bytes_of(sink.received.front()), test_frame(64, 3));

  // An awake receiver costs the sender no ring.
  ASSERT_TRUE((*cs)->push(Msg::copy_of(test_frame(64, 4))).ok());
  EXPECT_EQ(client.flush(), 1u);
  EXPECT_EQ(client.counters().value("bell_rings"), 1u);
  for (int i = 0; i < 10 && sink.received.size() < 2; ++i) (void)sleeper.run_once();
  EXPECT_EQ(sink.received.size(), 2u);
  sink.received.clear();
  ASSERT_TRUE(server.open_disable(sink, parts).ok());
}

// While the other end rings, an idle loop's timer is a safety net: it
// sleeps bell_idle_sleep (here 1 s) at a time, not idle_sleep_max (1 ms);
// once that end has gone, the back-off is the timer again.
TEST_F(DpdkTest, AnIdleLoopWhosePeerRingsSleepsOnlyOnTheSafetyTimer) {
  using clock = std::chrono::steady_clock;
  TempDir dir;
  const std::string sock = (dir / "quiet.sock").string();
  DpdkDriver::Config sc;
  sc.devargs = memif_end("server", sock);
  sc.mbufs = 1023;
  sc.idle_sleep_min = sc.idle_sleep_max = std::chrono::milliseconds(1);
  sc.bell_idle_sleep = std::chrono::seconds(1);
  DpdkDriver::Config cc = sc;
  cc.devargs = memif_end("client", sock);
  EventLoopConfig lc;
  lc.spin = std::chrono::microseconds(0);
  EventLoop sleeper(lc);
  MemifPair pair("quiet", sc, cc, &sleeper);
  ASSERT_TRUE(pair.server.doorbell_active());
  ASSERT_TRUE(pair.up());
  for (int i = 0; i < 10; ++i) (void)sleeper.run_once();
  auto t0 = clock::now();
  EXPECT_TRUE(sleeper.wait(std::chrono::milliseconds(300)));
  EXPECT_GE(clock::now() - t0, std::chrono::milliseconds(250)) << "woken by a 1 ms timer with a peer that rings";
  pair.client.reset();
  for (int i = 0; i < 10; ++i) (void)sleeper.run_once();
  t0 = clock::now();
  EXPECT_TRUE(sleeper.wait(std::chrono::milliseconds(300)));
  EXPECT_LT(clock::now() - t0, std::chrono::milliseconds(200)) << "no peer rings: the back-off's 1 ms timer";
}

// Long and short frames on one memif ring, as a node's data and its ACKs,
// or a relay's DATA and CREDITs: every frame arrives as it was sent, over
// several turns of the ring. (DPDK 22.11 garbles frames of several slots
// when the ring fills part way through one and short frames follow -- 1665
// of these 6000 with 2048-byte slots -- so a client with MTU 4000 is given
// slots as large as a frame. docs/dpdk-driver.md.)
TEST_F(DpdkTest, MemifMixOfLongAndShortFramesArrivesIntact) {
  TempDir dir;
  const std::string sock = (dir / "mix.sock").string();
  DpdkDriver::Config sc;
  sc.devargs = memif_end("server", sock);
  sc.mbufs = 4095;
  sc.mtu = 4000;
  sc.doorbell = false;
  sc.frame_max = 0;  // the MTU's slots, 1024 of them (large frames: their own test)
  DpdkDriver::Config cc = sc;
  cc.devargs = memif_end("client", sock);
  MemifPair pair("mix", sc, cc);
  DpdkDriver& server = pair.server;
  DpdkDriver& client = *pair.client;
  ASSERT_TRUE(pair.up());
  Sink sink;
  Participants parts;
  ASSERT_TRUE(server.open_enable(sink, parts).ok());
  Result<SessionRef> cs = client.open(sink, parts);
  ASSERT_TRUE(cs.ok());

  // Long and short frames in an uneven pattern, 1500 at a time: more than
  // the ring holds, so sends stop part way (the rest is dropped and
  // counted), as when a fast sender meets a slow receiver. What arrives must
  // be sent frames, whole, in order.
  std::vector<Bytes> sent;
  std::size_t next = 0, received = 0, bad = 0;
  auto drain = [&] {
    for (int k = 0; k < 64; ++k) (void)server.poll(256);
    for (Msg& m : sink.received) {
      const Bytes b = bytes_of(m);
      ++received;
      while (next < sent.size() && sent[next] != b) ++next;  // frames dropped on the way
      if (next == sent.size()) {
        ++bad;  // glued, cut or out of order
      } else {
        ++next;
      }
    }
    sink.received.clear();
  };
  for (unsigned round = 0; round < 4; ++round) {
    for (unsigned i = 0; i < 1500; ++i) {
      const unsigned n = round * 1500 + i;
      const std::size_t len = (n % 3 == 0 || n % 7 == 0) ? 60 + n % 40 : 3000 + n % 1000;
      sent.push_back(test_frame(len, n));
      ASSERT_TRUE((*cs)->push(Msg::copy_of(sent.back())).ok());
    }
    (void)client.flush();
    drain();
  }
  EXPECT_EQ(bad, 0u) << "frames that arrived glued or cut, of " << received;
  EXPECT_GT(received, 1000u);
  EXPECT_GT(client.counters().value("tx_drop_full"), 0u) << "the ring was meant to fill";
  EXPECT_EQ(received + client.counters().value("tx_drop_full"), sent.size());
  ASSERT_TRUE(server.open_disable(sink, parts).ok());
}

// Large frames (docs/dpdk-driver.md): two xk ends of a memif link say on
// the doorbell page what they take; a segment to cut then crosses in frames
// of as many whole segments as fit, each a valid TCP segment, its payload
// attached (tx_extbuf), not copied. An end that takes MTU-sized frames only
// (frame_max=0, as filterd's channels) gets those.
TEST_F(DpdkTest, MemifLargeFramesCarryWholeSegmentsOnceTheOtherEndTakesThem) {
  constexpr std::size_t kSeg = 1448;
  Bytes payload(40000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>((i * 7 + 3) & 0xff);
  // One pair; `server_frame_max` is the server's word. Returns the frames'
  // payload sizes, each checked against the stream.
  auto run = [&](const std::string& tag, std::size_t server_frame_max, std::size_t& client_tx_max) {
    TempDir dir;
    const std::string sock = (dir / (tag + ".sock")).string();
    DpdkDriver::Config sc;
    sc.devargs = memif_end("server", sock);
    sc.mbufs = 1023;
    sc.frame_max = server_frame_max;
    sc.gro = false;  // the frames as they crossed
    DpdkDriver::Config cc = sc;
    cc.devargs = memif_end("client", sock);
    cc.frame_max = 16384;
    MemifPair pair(tag, sc, cc);
    DpdkDriver& server = pair.server;
    DpdkDriver& client = *pair.client;
    std::vector<std::size_t> sizes;
    if (!pair.up()) {
      ADD_FAILURE() << "link down";
      return sizes;
    }
    client_tx_max = client.tx_frame_max();
    EXPECT_EQ(server.tx_frame_max(), server_frame_max == 0 ? 0u : 16384u)
        << "the client's slots hold 16 KiB, and it says so; frame_max=0 sends none either";
    EXPECT_TRUE(client.tx_extbuf_active());
    Sink sink;
    Participants parts;
    EXPECT_TRUE(server.open_enable(sink, parts).ok());
    Result<SessionRef> cs = client.open(sink, parts);
    EXPECT_TRUE(cs.ok());
    if (!cs) return sizes;
    const std::size_t free0 = client.mbufs_free();
    Msg m = fragmented(gso_frame(payload, 0x10 | 0x08), 4000);
    m.offload().flags = Offload::tx_tcp_seg | Offload::tx_tcp_csum;
    m.offload().seg_size = kSeg;
    EXPECT_TRUE((*cs)->push(std::move(m)).ok());
    (void)client.flush();
    std::size_t got = 0;
    for (int k = 0; k < 200 && got < payload.size(); ++k) {
      (void)server.poll(64);
      for (Msg& r : sink.received) {
        const Bytes f = bytes_of(r);
        const std::byte* ip = f.data() + 14;
        const std::byte* tcp = ip + 20;
        const std::size_t n = f.size() - 66;
        EXPECT_EQ(load_be16(ip + 2), 52 + n);
        EXPECT_EQ(csum::fold(csum::partial(ip, 20)), 0xffff) << "IPv4 header checksum";
        EXPECT_EQ(load_be32(tcp + 4), 1000 + got) << "in order, no gap";
        std::uint32_t sum = csum::pseudo_header_v4(Ipv4Addr{0xc000020b}, Ipv4Addr{0xc000020a}, 6,
                                                   static_cast<std::uint16_t>(32 + n));
        EXPECT_EQ(csum::fold(csum::partial(tcp, 32 + n, sum)), 0xffff) << "TCP checksum";
        EXPECT_TRUE(std::equal(f.begin() + 66, f.end(), payload.begin() + static_cast<std::ptrdiff_t>(got)));
        sizes.push_back(n);
        got += n;
      }
      sink.received.clear();
    }
    EXPECT_EQ(got, payload.size());
    EXPECT_EQ(client.mbufs_free(), free0) << "every mbuf the cut took came back";
    EXPECT_GT(client.counters().value("tx_extbuf"), 0u) << "payload attached, not copied";
    EXPECT_TRUE(server.open_disable(sink, parts).ok());
    return sizes;
  };

  std::size_t tx_max = 0;
  const std::size_t per = (16384 - 66) / kSeg * kSeg;  // 11 segments a frame
  EXPECT_EQ(run("large", 16384, tx_max), (std::vector<std::size_t>{per, per, payload.size() - 2 * per}));
  EXPECT_EQ(tx_max, 16384u);
  std::vector<std::size_t> mtu_sized = run("small", 0, tx_max);
  EXPECT_EQ(tx_max, 0u) << "a server with frame_max=0 says nothing: MTU-sized frames";
  ASSERT_EQ(mtu_sized.size(), (payload.size() + kSeg - 1) / kSeg);
  for (std::size_t i = 0; i + 1 < mtu_sized.size(); ++i) EXPECT_EQ(mtu_sized[i], kSeg);
}

// filterd's external port: coalesced frames no larger than a node's channel
// takes (gro_max), marked with the size of the segments they hold; sent on
// to a memif peer that takes large frames, such a frame leaves whole, as the
// very mbufs it came in (no copy); a port with no such peer refuses it.
TEST_F(DpdkTest, GroFramesStayUnderTheirCapAndGoOnWholeAsTheirOwnMbufs) {
  constexpr std::size_t kCap = 66 + 4000;  // four 1000-byte segments
  RingPort p(1023, 0, true, false, kCap);
  const std::size_t free0 = p.drv.mbufs_free();
  std::vector<Bytes> sent;
  for (std::uint32_t i = 0; i < 12; ++i) {
    Seg s;
    s.seq = 1000 + i * 1000;
    sent.push_back(seg_frame(s));
    ASSERT_TRUE(p.s->push(Msg::copy_of(sent.back())).ok());
  }
  (void)p.drv.flush();
  (void)p.drv.poll(256);  // one burst
  ASSERT_EQ(p.sink.received.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const Msg& m = p.sink.received[i];
    const Got g = got_of(m);
    EXPECT_EQ(g.seq, 1000u + i * 4000);
    EXPECT_EQ(g.len, 4000u) << "no group past the cap";
    EXPECT_TRUE(g.csum_ok && g.stream);
    EXPECT_TRUE(m.offload().has(Offload::rx_coalesced));
    EXPECT_EQ(m.offload().seg_size, 1000u) << "where a forwarder would cut it again";
    EXPECT_GT(m.fragment_count(), 1u) << "the parts' mbufs, chained";
  }
  // No large-frame peer on the ring: too large to send as it is.
  EXPECT_EQ(p.s->push(p.sink.received[2].share()).error(), Errc::too_large);

  TempDir dir;
  const std::string sock = (dir / "fwd.sock").string();
  DpdkDriver::Config sc;
  sc.devargs = memif_end("server", sock);
  sc.mbufs = 1023;
  sc.gro = false;
  DpdkDriver::Config cc = sc;
  cc.devargs = memif_end("client", sock);
  MemifPair pair("fwd", sc, cc);
  ASSERT_TRUE(pair.up());
  ASSERT_EQ(pair.server.tx_frame_max(), 16384u);
  Result<std::size_t> fmax = pair.server.control(ctl::GetFrameMax{});
  ASSERT_TRUE(fmax.ok());
  EXPECT_EQ(*fmax, 16384u);
  Sink got;
  Participants parts;
  ASSERT_TRUE(pair.client->open_enable(got, parts).ok());
  Result<SessionRef> ss = pair.server.open(got, parts);
  ASSERT_TRUE(ss.ok());
  (void)pair.client->poll(64);  // a memif client hands the server its rx slots when it polls
  std::vector<Bytes> whole;
  for (Msg& m : p.sink.received) {
    whole.push_back(bytes_of(m));
    EXPECT_TRUE((*ss)->push(std::move(m)).ok());
  }
  p.sink.received.clear();
  (void)pair.server.flush();
  EXPECT_EQ(pair.server.counters().value("tx_zero_copy"), 3u) << "sent as the mbufs they came in";
  for (int k = 0; k < 200 && got.received.size() < 3; ++k) (void)pair.client->poll(64);
  ASSERT_EQ(got.received.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(bytes_of(got.received[i]), whole[i]);
  got.received.clear();
  EXPECT_TRUE(pair.client->open_disable(got, parts).ok());
  EXPECT_EQ(p.drv.mbufs_free(), free0) << "every mbuf of the chains came back to the ring port's pool";
}

// ---- the fault fence (memif unmaps memory under a burst) ----------------

// A page that is mapped, then unmapped: reading it faults.
char* unmapped_page() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  EXPECT_EQ(munmap(p, 4096), 0);
  return static_cast<char*>(p);
}

TEST(FaultFence, AFaultInsideIsCaughtAndTheThreadGoesOn) {
  char* gone = unmapped_page();
  const std::uint64_t before = FaultFence::caught();
  int reached = 0;
  EXPECT_FALSE(FaultFence::run([&] {
    reached = 1;
    reached += *static_cast<volatile char*>(gone);
  }));
  EXPECT_EQ(reached, 1) << "the call stopped at the fault";
  EXPECT_EQ(FaultFence::caught(), before + 1);
  // The thread is whole: the next fence runs to its end.
  int ran = 0;
  EXPECT_TRUE(FaultFence::run([&] { ran = 7; }));
  EXPECT_EQ(ran, 7);
  EXPECT_EQ(FaultFence::caught(), before + 1);
}

// The race itself: one thread reads a region in fenced bursts while another
// unmaps it, as the EAL interrupt thread does to a memif link's regions.
TEST(FaultFence, AnUnmapByAnotherThreadCutsABurstShortInsteadOfKillingTheProcess) {
  constexpr std::size_t kLen = 1 << 20;
  void* p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, kLen);
  const auto* region = static_cast<const volatile unsigned char*>(p);
  std::atomic<bool> reading{false};
  std::uint64_t bursts = 0;
  std::uint64_t sum = 0;
  bool cut = false;
  std::thread reader([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!cut && std::chrono::steady_clock::now() < deadline) {
      cut = !FaultFence::run([&] {
        for (std::size_t i = 0; i < kLen; i += 64) sum += region[i];
      });
      ++bursts;
      reading = true;
    }
  });
  while (!reading) std::this_thread::yield();
  ASSERT_EQ(munmap(p, kLen), 0);
  reader.join();
  EXPECT_TRUE(cut) << "a burst after the unmap must fault";
  ASSERT_GE(bursts, 1u);
  // Every burst before the cut read the whole region; the cut one, a part.
  EXPECT_GE(sum, (bursts - 1) * (kLen / 64));
  EXPECT_LT(sum, bursts * (kLen / 64));
}

// Without a fence a fault still ends the process, and a fault the caller did
// not expect dies through crash().
TEST(FaultFenceDeathTest, AFaultOutsideAFenceStillKillsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        FaultFence::install();
        char* gone = unmapped_page();
        std::printf("%d\n", *static_cast<volatile char*>(gone));
      },
      "");
  EXPECT_DEATH(
      {
        char* gone = unmapped_page();
        if (!FaultFence::run([&] { std::printf("%d\n", *static_cast<volatile char*>(gone)); })) {
          FaultFence::crash("test");
        }
      },
      "the fence did not expect");
}

// Both ends of a memif link in this process; one thread sends and receives on
// the client at full speed while the server goes away under it, over and
// over. The client's interrupt thread unmaps the link's regions while the
// sender may be inside a burst: the fence turns that into a lost burst
// (fault_cuts), and the client sees its link go down, every time.
TEST_F(DpdkTest, MemifClientSurvivesItsServerGoingAwayMidBurst) {
  TempDir dir;
  std::uint64_t cuts = 0;
  std::uint64_t sent_total = 0;
  for (int round = 0; round < 12; ++round) {
    const std::string sock = (dir / ("gone" + std::to_string(round) + ".sock")).string();
    DpdkDriver::Config sc;
    sc.devargs = memif_end("server", sock);
    sc.mbufs = 2047;
    sc.doorbell = false;
    DpdkDriver::Config cc = sc;
    cc.devargs = memif_end("client", sock);
    auto server = std::make_unique<DpdkDriver>("gsrv" + std::to_string(round), sc);
    DpdkDriver client("gcli" + std::to_string(round), cc);
    ASSERT_TRUE(both_up(*server, client)) << "round " << round;
    Sink sink;
    Participants parts;
    ASSERT_TRUE(client.open_enable(sink, parts).ok());
    Result<SessionRef> cs = client.open(sink, parts);
    ASSERT_TRUE(cs.ok());
    std::atomic<bool> stop{false};
    std::atomic<bool> going{false};
    std::thread blaster([&] {
      const Bytes frame = test_frame(1500, static_cast<unsigned>(round));
      while (!stop) {
        for (int i = 0; i < 32; ++i) (void)(*cs)->push(Msg::copy_of(frame));
        (void)client.poll(64);
        sink.received.clear();
        going = true;
      }
    });
    while (!going) std::this_thread::yield();
    // The server polls too (its rx frees ring slots), then goes away at
    // some point within a few milliseconds.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(500 * (round % 7 + 1));
    while (std::chrono::steady_clock::now() < until) (void)server->poll(64);
    server.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop = true;
    blaster.join();
    EXPECT_FALSE(client.link().up) << "round " << round;
    cuts += client.counters().value("fault_cuts");
    sent_total += client.counters().value("tx_frames");
    ASSERT_TRUE(client.open_disable(sink, parts).ok());
  }
  EXPECT_GT(sent_total, 0u);
  std::printf("memif server gone under a busy client 12 times: %llu bursts cut short, %llu frames sent\n",
              static_cast<unsigned long long>(cuts), static_cast<unsigned long long>(sent_total));
}

// A node's channel after filterd restarted: DPDK 22.11's memif client does
// not connect again by itself, Driver::reconnect starts it again (the hook
// filterd's client calls on resume); a memif server end has nothing to do.
TEST_F(DpdkTest, MemifClientReconnectsToAServerThatCameBack) {
  TempDir dir;
  const std::string sock = (dir / "again.sock").string();
  DpdkDriver::Config sc;
  sc.devargs = memif_end("server", sock);
  sc.doorbell = false;
  DpdkDriver::Config cc = sc;
  cc.devargs = memif_end("client", sock);
  auto server = std::make_unique<DpdkDriver>("asrv0", sc);
  DpdkDriver client("acli0", cc);
  ASSERT_TRUE(both_up(*server, client));
  EXPECT_EQ(server->reconnect().error(), Errc::unsupported) << "a memif server waits for its client";
  server.reset();
  for (int i = 0; i < 300 && client.link().up; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_FALSE(client.link().up);
  server = std::make_unique<DpdkDriver>("asrv1", sc);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(client.link().up) << "the client does not come back by itself";
  Status st = client.reconnect();
  for (int i = 0; i < 50 && !st; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = client.reconnect();
  }
  ASSERT_TRUE(st.ok()) << to_string(st.error());
  ASSERT_TRUE(both_up(*server, client));
  // Frames flow again.
  Sink sink;
  Participants parts;
  ASSERT_TRUE(server->open_enable(sink, parts).ok());
  Result<SessionRef> cs = client.open(sink, parts);
  ASSERT_TRUE(cs.ok());
  const Bytes frame = test_frame(600, 7);
  ASSERT_TRUE((*cs)->push(Msg::copy_of(frame)).ok());
  (void)client.poll(8);
  for (int i = 0; i < 200 && sink.received.empty(); ++i) {
    (void)server->poll(8);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(sink.received.size(), 1u);
  EXPECT_EQ(bytes_of(sink.received[0]), frame);
  sink.received.clear();
  ASSERT_TRUE(server->open_disable(sink, parts).ok());
  (void)(*cs)->close();
}

// A memif server closed while its peer leaves: DPDK 22.11's memif handles
// the peer's going on the EAL's interrupt thread without locking against
// rte_eth_dev_stop, so the driver stops and closes its ports there too
// (dpdk::on_interrupt_thread). Before that, closing both ends at once
// corrupted the heap (filterd dropping a node whose process had exited).
TEST_F(DpdkTest, MemifServerClosedWhileItsPeerLeavesEndsCleanly) {
  TempDir dir;
  const std::size_t leaked_before = dpdk_pools_leaked();
  for (int round = 0; round < 100; ++round) {
    const std::string sock = (dir / ("both" + std::to_string(round) + ".sock")).string();
    DpdkDriver::Config sc;
    sc.devargs = memif_end("server", sock);
    sc.mbufs = 511;
    sc.doorbell = false;
    DpdkDriver::Config cc = sc;
    cc.devargs = memif_end("client", sock);
    auto server = std::make_unique<DpdkDriver>("bsrv" + std::to_string(round), sc);
    auto client = std::make_unique<DpdkDriver>("bcli" + std::to_string(round), cc);
    ASSERT_TRUE(both_up(*server, *client)) << "round " << round;
    // The client leaves; the server is closed from another thread the
    // moment its link goes down -- when the interrupt thread has begun to
    // handle the client's disconnect.
    std::thread closer([&] {
      while (server->link().up) std::this_thread::yield();
      server.reset();
    });
    client.reset();
    closer.join();
  }
  // Every pool was whole again at its close.
  EXPECT_EQ(dpdk_pools_leaked(), leaked_before);
}

}  // namespace
}  // namespace xk::drivers

// The shm driver: two xk ends over shared memory. Frames cross inline,
// by reference into the sender's arena, or copied once; references come
// back when the receiver lets go; segments leave as large frames with their
// checksums; a peer that leaves gives everything back; a peer that lies in
// its hello or its descriptors is counted, never followed.
#include "doubles.hpp"
#include "xk/drivers/shm.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"

namespace xk {
namespace {

using drivers::ShmDriver;
namespace shm = drivers::shm;
using Bytes = std::vector<std::byte>;

std::string link_name() {
  static int n = 0;
  return "@xk-shm-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

ShmDriver::Config end(const std::string& path, bool server) {
  ShmDriver::Config c;
  c.path = path;
  c.server = server;
  c.arena_mb = 64;
  c.retry = std::chrono::milliseconds(1);
  return c;
}

Bytes pattern(std::size_t n, unsigned seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return b;
}

Bytes bytes_of(const Msg& m) {
  Bytes b(m.size());
  EXPECT_TRUE(m.copy_out(0, b).ok());
  return b;
}

using test::Sink;

void enable(Protocol& driver, Protocol& upper) {
  Participants none;
  ASSERT_TRUE(driver.open_enable(upper, none).ok());
}

bool poll_until(std::initializer_list<ShmDriver*> ends, const std::function<bool()>& done) {
  for (int i = 0; i < 20000; ++i) {
    if (done()) return true;
    for (ShmDriver* e : ends) (void)e->poll(64);
    if (i > 100) usleep(100);
  }
  return done();
}

// A frame whose payload lies in bulk chunks from the chunk source `link`
// offers (its arena), behind a 14-byte header of its own buffer.
// (A send buffer's way: 60 000 bytes a chunk.)
Msg chunk_frame(Protocol& link, const Bytes& head, const Bytes& payload) {
  Result<ChunkSource*> source = link.control(ctl::GetChunkSource{});
  EXPECT_TRUE(source.ok() && *source != nullptr);
  Msg frame = Msg::copy_of(head);
  for (std::size_t at = 0; at < payload.size(); at += 60000) {
    Msg body = Msg::chunk(source.ok() ? *source : nullptr);
    const std::size_t n = std::min<std::size_t>(60000, payload.size() - at);
    EXPECT_TRUE(body.append(std::span(payload).subspan(at, n)).ok());
    frame.join(std::move(body));
  }
  return frame;
}

struct Link {
  std::string path = link_name();
  ShmDriver server{"s0", end(path, true)};
  ShmDriver client{"c0", end(path, false)};
  Sink sink_s, sink_c;
  Link() {
    enable(server, sink_s);
    enable(client, sink_c);
    EXPECT_TRUE(poll_until({&server, &client}, [&] { return server.up() && client.up(); }));
  }
};

TEST(Shm, FramesCrossInlineByReferenceOrCopiedOnceAndReferencesComeBack) {
  Link l;
  EXPECT_NE(l.server.mac(), l.client.mac());
  // Small: all inline.
  Bytes small = pattern(90, 1);
  ASSERT_TRUE(l.client.transmit(Msg::copy_of(small)).ok());
  // Payload on the heap: copied once into the arena.
  Bytes heap = pattern(3000, 2);
  ASSERT_TRUE(l.client.transmit(Msg::copy_of(heap)).ok());
  // Payload in a send-buffer chunk: by reference.
  Bytes head = pattern(14, 3), body = pattern(20000, 4);
  ASSERT_TRUE(l.client.transmit(chunk_frame(l.client, head, body)).ok());
  // Held until the poll's end or a flush: EventLoop::flush_output() publishes them.
  EXPECT_EQ(l.client.flush_output(), 3u);
  EXPECT_EQ(l.client.flush_output(), 0u);
  ASSERT_TRUE(poll_until({&l.server}, [&] { return l.sink_s.received.size() == 3; }));
  EXPECT_EQ(bytes_of(l.sink_s.received[0]), small);
  EXPECT_EQ(bytes_of(l.sink_s.received[1]), heap);
  Bytes whole = head;
  whole.insert(whole.end(), body.begin(), body.end());
  EXPECT_EQ(bytes_of(l.sink_s.received[2]), whole);
  const CounterSet& c = l.client.counters();
  EXPECT_EQ(c.value("tx_refs"), 1u);
  EXPECT_EQ(c.value("tx_copied"), 1u);
  EXPECT_EQ(c.value("tx_frames"), 3u);
  EXPECT_EQ(l.server.counters().value("rx_bad"), 0u);
  // The receiver holds two references (the copy and the chunk) until it
  // lets go; then they come back to the sender.
  EXPECT_EQ(l.client.tokens_out(), 2u);
  l.sink_s.received.clear();
  EXPECT_TRUE(poll_until({&l.client}, [&] { return l.client.tokens_out() == 0; }));
  EXPECT_EQ(l.client.counters().value("bad_returns"), 0u);

  // And the other way, many at once (more than a ring's worth of returns).
  for (int round = 0; round < 3; ++round) {
    for (unsigned i = 0; i < 500; ++i) {
      ASSERT_TRUE(l.server.transmit(chunk_frame(l.server, pattern(14, i), pattern(1000 + i, i))).ok());
      if (i % 32 == 31) (void)l.client.poll(64);
    }
    l.server.flush();
    ASSERT_TRUE(poll_until({&l.client}, [&] { return l.sink_c.received.size() == 500; }));
    for (unsigned i = 0; i < 500; i += 97) {
      Bytes want = pattern(14, i);
      Bytes p = pattern(1000 + i, i);
      want.insert(want.end(), p.begin(), p.end());
      EXPECT_EQ(bytes_of(l.sink_c.received[i]), want);
    }
    l.sink_c.received.clear();
    EXPECT_TRUE(poll_until({&l.server}, [&] { return l.server.tokens_out() == 0; }));
  }
  EXPECT_EQ(l.server.counters().value("drop_ring_full"), 0u);
}

// Ethernet + IPv4 + TCP (20 bytes) + payload, marked for segmentation.
Msg tso_frame(Protocol& link, const Bytes& payload, std::uint16_t seg) {
  Bytes h(54);
  store_be16(h.data() + 12, 0x0800);
  std::byte* ip = h.data() + 14;
  ip[0] = std::byte{0x45};
  store_be16(ip + 2, static_cast<std::uint16_t>(40 + payload.size()));
  store_be16(ip + 4, 100);
  ip[8] = std::byte{64};
  ip[9] = std::byte{6};
  store_be32(ip + 12, 0xc0000201);
  store_be32(ip + 16, 0xc0000202);
  std::byte* tcp = ip + 20;
  store_be16(tcp, 5001);
  store_be16(tcp + 2, 40000);
  store_be32(tcp + 4, 1000);
  store_be32(tcp + 8, 7);
  tcp[12] = std::byte{0x50};
  tcp[13] = std::byte{0x18};  // ACK PSH
  store_be16(tcp + 14, 65535);
  Msg m = chunk_frame(link, h, payload);
  m.offload().flags = Offload::tx_tcp_seg | Offload::tx_tcp_csum;
  m.offload().seg_size = seg;
  m.offload().l3_len = 20;
  return m;
}

TEST(Shm, SegmentsLeaveAsLargeFramesOfWholeSegmentsWithTheirChecksums) {
  Link l;
  // The peer takes 64 KB frames: a 100 000-byte segment of 1460-byte
  // segments leaves as two frames of whole segments.
  ASSERT_GT(l.client.tx_frame_max(), 60000u);
  Bytes payload = pattern(100000, 9);
  ASSERT_TRUE(l.client.transmit(tso_frame(l.client, payload, 1460)).ok());
  l.client.flush();
  ASSERT_TRUE(poll_until({&l.server}, [&] { return l.sink_s.received.size() == 2; }));
  Bytes joined;
  std::uint32_t seq = 1000;
  for (std::size_t i = 0; i < 2; ++i) {
    Bytes f = bytes_of(l.sink_s.received[i]);
    ASSERT_GT(f.size(), 54u);
    const std::byte* ip = f.data() + 14;
    EXPECT_EQ(load_be16(ip + 2), f.size() - 14);
    EXPECT_EQ(csum::fold(csum::partial(ip, 20)), 0xffff) << "IPv4 checksum of piece " << i;
    const std::uint16_t tcp_len = static_cast<std::uint16_t>(f.size() - 34);
    std::uint32_t sum = csum::pseudo_header_v4(Ipv4Addr{0xc0000201}, Ipv4Addr{0xc0000202}, 6, tcp_len);
    EXPECT_EQ(csum::fold(csum::partial(ip + 20, tcp_len, sum)), 0xffff) << "TCP checksum of piece " << i;
    EXPECT_EQ(load_be32(ip + 24), seq);
    const bool last = i == 1;
    EXPECT_EQ((std::to_integer<unsigned>(ip[33]) & 0x08) != 0, last) << "PSH on the last piece only";
    EXPECT_EQ((f.size() - 54) % 1460 == 0, !last) << "whole segments but the last";
    seq += static_cast<std::uint32_t>(f.size() - 54);
    joined.insert(joined.end(), f.begin() + 54, f.end());
  }
  EXPECT_EQ(joined, payload);
  EXPECT_EQ(l.client.counters().value("tx_large_frames"), 2u);
  EXPECT_EQ(l.client.counters().value("tx_refs"), 3u) << "the two chunks; the second piece straddles them";
  EXPECT_EQ(l.client.counters().value("tx_copied"), 0u);
  l.sink_s.received.clear();
  EXPECT_TRUE(poll_until({&l.client}, [&] { return l.client.tokens_out() == 0; }));
}

TEST(Shm, APeerThatLeavesGivesEverythingBackAndHeldBuffersStayReadable) {
  const std::string path = link_name();
  auto server = std::make_unique<ShmDriver>("s0", end(path, true));
  auto client = std::make_unique<ShmDriver>("c0", end(path, false));
  Sink ss, sc;
  enable(*server, ss);
  enable(*client, sc);
  ASSERT_TRUE(poll_until({server.get(), client.get()}, [&] { return server->up() && client->up(); }));
  Bytes head = pattern(14, 5), body = pattern(30000, 6);
  ASSERT_TRUE(client->transmit(chunk_frame(*client, head, body)).ok());
  ASSERT_TRUE(server->transmit(chunk_frame(*server, head, body)).ok());
  client->flush();
  server->flush();
  ASSERT_TRUE(poll_until({server.get(), client.get()}, [&] { return ss.received.size() == 1 && sc.received.size() == 1; }));
  EXPECT_EQ(server->tokens_out(), 1u);
  // The client goes while the server holds its buffer, and holds one of
  // the server's: the server takes its own back, and what it received
  // stays readable (the mapping lives as long as the buffer).
  client.reset();
  ASSERT_TRUE(poll_until({server.get()}, [&] { return !server->up(); }));
  EXPECT_EQ(server->tokens_out(), 0u);
  EXPECT_EQ(server->counters().value("links_down"), 1u);
  Bytes whole = head;
  whole.insert(whole.end(), body.begin(), body.end());
  EXPECT_EQ(bytes_of(ss.received[0]), whole);
  EXPECT_EQ(bytes_of(sc.received[0]), whole);
  ss.received.clear();
  sc.received.clear();  // its return goes nowhere: the link it came on is gone
  // Sending meanwhile is a frame lost on a dead wire, not an error.
  EXPECT_TRUE(server->transmit(Msg::copy_of(pattern(60, 1))).ok());
  EXPECT_EQ(server->counters().value("drop_link_down"), 1u);
  // A new client: the server listens again.
  client = std::make_unique<ShmDriver>("c1", end(path, false));
  enable(*client, sc);
  ASSERT_TRUE(poll_until({server.get(), client.get()}, [&] { return server->up() && client->up(); }));
  ASSERT_TRUE(client->transmit(Msg::copy_of(pattern(60, 2))).ok());
  client->flush();
  ASSERT_TRUE(poll_until({server.get()}, [&] { return ss.received.size() == 1; }));
  EXPECT_EQ(bytes_of(ss.received[0]), pattern(60, 2));
}

TEST(Shm, FramesSentJustBeforeAPeerLeavesStillArrive) {
  // A process's last frames -- the FIN or RST of its close -- are handed to
  // the driver right before it goes, with no pass of the loop after them
  // to publish the ring: they must arrive all the same.
  const std::string path = link_name();
  ShmDriver server("s0", end(path, true));
  auto client = std::make_unique<ShmDriver>("c0", end(path, false));
  Sink ss, sc;
  enable(server, ss);
  enable(*client, sc);
  ASSERT_TRUE(poll_until({&server, client.get()}, [&] { return server.up() && client->up(); }));
  Bytes head = pattern(14, 8), body = pattern(20000, 9);
  ASSERT_TRUE(client->transmit(Msg::copy_of(pattern(60, 7))).ok());
  ASSERT_TRUE(client->transmit(chunk_frame(*client, head, body)).ok());
  client.reset();  // no flush, no poll: the end of the process
  ASSERT_TRUE(poll_until({&server}, [&] { return !server.up(); }));
  ASSERT_EQ(ss.received.size(), 2u);
  EXPECT_EQ(bytes_of(ss.received[0]), pattern(60, 7));
  Bytes whole = head;
  whole.insert(whole.end(), body.begin(), body.end());
  EXPECT_EQ(bytes_of(ss.received[1]), whole);
}

TEST(Shm, WithRoleAutoTheFirstEndListensAndTheSecondConnects) {
  Registry reg;
  drivers::register_shm(reg);
  EventLoop loop;
  // An abstract name, and a file path (where nothing may be unlinked).
  char dir[] = "/tmp/xk-shm-auto-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  for (const std::string& path : {link_name(), std::string(dir) + "/link.sock"}) {
    Graph a = Graph::build("shm net0 path=" + path + " role=auto\n", reg, &loop);
    Graph b = Graph::build("shm net0 path=" + path + " role=auto\n", reg, &loop);
    auto* first = a.find_as<ShmDriver>("net0");
    auto* second = b.find_as<ShmDriver>("net0");
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    EXPECT_TRUE(first->listening()) << path;
    EXPECT_FALSE(second->listening()) << path;
    ASSERT_TRUE(poll_until({first, second}, [&] { return first->up() && second->up(); })) << path;
    // The two ends' MACs differ (derived from the path and the role each took).
    EXPECT_NE(first->mac(), second->mac()) << path;
    Sink sa, sb;
    enable(*first, sa);
    enable(*second, sb);
    ASSERT_TRUE(second->transmit(Msg::copy_of(pattern(60, 3))).ok());
    second->flush();
    ASSERT_TRUE(poll_until({first, second}, [&] { return sa.received.size() == 1; })) << path;
    EXPECT_EQ(bytes_of(sa.received[0]), pattern(60, 3));
  }
  (void)rmdir(dir);
  EXPECT_THROW((void)Graph::build("shm net0 path=" + link_name() + " role=both\n", reg, &loop), std::exception);
}

// ---- a peer that lies --------------------------------------------------------

int sealed_memfd(std::size_t bytes, bool seal = true) {
  int fd = memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  if (seal) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  }
  return fd;
}

// A hand-made client: its hello and its ring are whatever the test writes.
struct FakePeer {
  int sock = -1;
  int region_fd = -1, arena_fd = -1, wake_fd = -1;
  shm::Region* region = nullptr;
  std::size_t region_bytes = 0;
  static constexpr std::uint32_t kRing = 16;
  static constexpr std::size_t kArena = 1 << 20;

  explicit FakePeer(const std::string& path) {
    sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.data(), path.size());
    sa.sun_path[0] = '\0';
    EXPECT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&sa),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size())),
              0);
    region_bytes = shm::Region::bytes(kRing);
    region_fd = sealed_memfd(region_bytes);
    arena_fd = sealed_memfd(kArena);
    wake_fd = eventfd(0, EFD_CLOEXEC);
    void* p = mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd, 0);
    region = new (p) shm::Region();
    region->magic = shm::kMagic;
    region->version = shm::kVersion;
    region->ring = kRing;
  }
  ~FakePeer() {
    munmap(region, region_bytes);
    if (theirs != nullptr) munmap(const_cast<shm::Region*>(theirs), theirs_bytes);
    for (int fd : {sock, region_fd, arena_fd, wake_fd}) close(fd);
  }
  void hello(shm::Hello h, std::vector<int> fds) {
    iovec iov{&h, sizeof h};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control.data();
    m.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    EXPECT_EQ(sendmsg(sock, &m, 0), static_cast<ssize_t>(sizeof h));
  }
  static shm::Hello good_hello() {
    shm::Hello h{};
    h.magic = shm::kMagic;
    h.version = shm::kVersion;
    h.mac[0] = 0x02;
    h.mac[5] = 0x99;
    h.ring = kRing;
    h.frame_max = static_cast<std::uint32_t>(shm::kFrameMax);
    h.arena_size = kArena;
    return h;
  }
  // The server's region, from its hello (mapped read-only, as a peer does).
  const shm::Region* server_region() {
    if (theirs != nullptr) return theirs;
    shm::Hello h{};
    iovec iov{&h, sizeof h};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 3)] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    if (recvmsg(sock, &m, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof h)) return nullptr;
    int fds[3];
    std::memcpy(fds, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof fds);
    theirs_bytes = shm::Region::bytes(h.ring);
    void* p = mmap(nullptr, theirs_bytes, PROT_READ, MAP_SHARED, fds[0], 0);
    for (int fd : fds) close(fd);
    if (p == MAP_FAILED) return nullptr;
    theirs = static_cast<const shm::Region*>(p);
    return theirs;
  }
  const shm::Region* theirs = nullptr;
  std::size_t theirs_bytes = 0;

  void post(const shm::Desc& d) {
    std::uint32_t t = region->tx_tail.v.load();
    region->descs()[t % kRing] = d;
    region->tx_tail.v.store(t + 1);
  }
};

shm::Desc inline_desc(std::size_t n) {
  shm::Desc d{};
  d.inline_len = static_cast<std::uint16_t>(n);
  d.frame_len = static_cast<std::uint32_t>(n);
  Bytes b = pattern(n, 11);
  std::memcpy(d.bytes, b.data(), n);
  return d;
}

TEST(Shm, AHelloThatFailsACheckIsRefusedAndCounted) {
  const std::string path = link_name();
  ShmDriver server("s0", end(path, true));
  Sink sink;
  enable(server, sink);
  struct Case {
    const char* what;
    std::function<void(FakePeer&)> send;
  };
  std::vector<Case> cases = {
      {"bad magic", [](FakePeer& p) { auto h = FakePeer::good_hello(); h.magic = 1; p.hello(h, {p.region_fd, p.arena_fd, p.wake_fd}); }},
      {"ring not a power of two", [](FakePeer& p) { auto h = FakePeer::good_hello(); h.ring = 15; p.hello(h, {p.region_fd, p.arena_fd, p.wake_fd}); }},
      {"arena larger than its memfd", [](FakePeer& p) { auto h = FakePeer::good_hello(); h.arena_size = 8 << 20; p.hello(h, {p.region_fd, p.arena_fd, p.wake_fd}); }},
      {"an unsealed memfd (could shrink under us)", [](FakePeer& p) { int fd = sealed_memfd(FakePeer::kArena, false); p.hello(FakePeer::good_hello(), {p.region_fd, fd, p.wake_fd}); close(fd); }},
      {"a wake fd that is no eventfd", [](FakePeer& p) { p.hello(FakePeer::good_hello(), {p.region_fd, p.arena_fd, p.arena_fd}); }},
      {"two descriptors", [](FakePeer& p) { p.hello(FakePeer::good_hello(), {p.region_fd, p.arena_fd}); }},
  };
  std::uint64_t bad = 0;
  for (const Case& c : cases) {
    FakePeer peer(path);
    c.send(peer);
    ASSERT_TRUE(poll_until({&server}, [&] { return server.counters().value("rx_bad") == bad + 1; })) << c.what;
    ++bad;
    EXPECT_FALSE(server.up()) << c.what;
  }
  // And a true one is taken.
  FakePeer peer(path);
  peer.hello(FakePeer::good_hello(), {peer.region_fd, peer.arena_fd, peer.wake_fd});
  EXPECT_TRUE(poll_until({&server}, [&] { return server.up(); }));
  EXPECT_EQ(server.counters().value("links_up"), 1u);
}

TEST(Shm, APeerThatSaysNothingIsDroppedAtTheHelloDeadlineAndTheNextIsTaken) {
  const std::string path = link_name();
  ShmDriver::Config sc = end(path, true);
  sc.hello_timeout = std::chrono::milliseconds(100);
  ShmDriver server("s0", sc);
  Sink sink;
  enable(server, sink);
  FakePeer silent(path);  // connects, never says hello
  ASSERT_TRUE(poll_until({&server}, [&] { return server.counters().value("rx_bad") == 1; }));
  EXPECT_FALSE(server.up());
  ShmDriver client("c0", end(path, false));
  EXPECT_TRUE(poll_until({&server, &client}, [&] { return server.up() && client.up(); }))
      << "the silent peer still holds the link";
}

TEST(Shm, DescriptorsThatLieAreDroppedAndCountedAndTheLinkGoesOn) {
  const std::string path = link_name();
  ShmDriver server("s0", end(path, true));
  Sink sink;
  enable(server, sink);
  FakePeer peer(path);
  peer.hello(FakePeer::good_hello(), {peer.region_fd, peer.arena_fd, peer.wake_fd});
  ASSERT_TRUE(poll_until({&server}, [&] { return server.up(); }));

  auto ref_desc = [](std::uint32_t token, std::uint32_t off, std::uint32_t len) {
    shm::Desc d = inline_desc(14);
    d.nref = 1;
    d.refs[0] = {token, off, len};
    d.frame_len = 14 + len;
    return d;
  };
  std::vector<shm::Desc> lies;
  lies.push_back(ref_desc(shm::kTokens, 0, 100));                // a token out of range
  lies.push_back(ref_desc(1, FakePeer::kArena - 10, 100));        // past the end of the arena
  lies.push_back(ref_desc(2, 0xfffffff0u, 0x20));                 // wraps round 2^32
  lies.push_back(ref_desc(3, 0, 0));                              // an empty piece
  {
    shm::Desc d = ref_desc(4, 0, 100);
    d.frame_len = 999;  // not what the pieces add up to
    lies.push_back(d);
  }
  {
    shm::Desc d = inline_desc(14);
    d.inline_len = 4000;  // more than a descriptor holds
    lies.push_back(d);
  }
  {
    shm::Desc d = ref_desc(5, 0, 100);
    d.nref = 200;  // more pieces than a descriptor holds
    lies.push_back(d);
  }
  lies.push_back(inline_desc(6));                                  // shorter than an Ethernet header
  lies.push_back(ref_desc(6, 0, 70000));                           // larger than any frame
  for (const shm::Desc& d : lies) peer.post(d);
  peer.post(inline_desc(100));  // and one honest frame
  ASSERT_TRUE(poll_until({&server}, [&] { return sink.received.size() == 1; }));
  EXPECT_EQ(server.counters().value("rx_bad"), lies.size());
  EXPECT_EQ(bytes_of(sink.received[0]), pattern(100, 11));
  EXPECT_TRUE(server.up());
  // The tokens of the lies that named real ones went back (1, 2, 3, 4
  // and 6; not one out of range, none of a descriptor of 200 pieces).
  const shm::Region* theirs = peer.server_region();
  ASSERT_NE(theirs, nullptr);
  ASSERT_EQ(theirs->ret_tail.v.load(), 5u);
  std::vector<std::uint32_t> back(theirs->returns(), theirs->returns() + 5);
  EXPECT_EQ(back, (std::vector<std::uint32_t>{1, 2, 3, 4, 6}));

  // Returns of tokens we never gave are counted, not followed.
  // (The fake's region is where the server reads our returns from.)
  peer.region->returns()[0] = 7;
  peer.region->returns()[1] = 0xffffffffu;
  peer.region->ret_tail.v.store(2);
  ASSERT_TRUE(poll_until({&server}, [&] { return server.counters().value("bad_returns") == 2; }));

  // An index that jumps beyond the ring: the link goes down, nothing read.
  peer.region->tx_tail.v.store(peer.region->tx_tail.v.load() + 1000);
  ASSERT_TRUE(poll_until({&server}, [&] { return !server.up(); }));
  EXPECT_EQ(sink.received.size(), 1u);
}

TEST(Shm, GraphKindBuildsALinkAndRefusesBadOptions) {
  Registry reg;
  drivers::register_shm(reg);
  const std::string path = link_name();
  EventLoop loop;
  Graph a = Graph::build("shm net0 path=" + path + " role=server mtu=9000\n", reg, &loop);
  auto* s = a.find_as<ShmDriver>("net0");
  ASSERT_NE(s, nullptr);
  Result<std::size_t> mtu = s->control(ctl::GetMtu{});
  ASSERT_TRUE(mtu.ok());
  EXPECT_EQ(*mtu, 9014u);
  EXPECT_THROW((void)Graph::build("shm net0 role=server\n", reg, &loop), GraphError) << "path is mandatory";
  EXPECT_THROW((void)Graph::build("shm net0 path=" + link_name() + " ring=1000\n", reg, &loop), std::exception)
      << "a ring of 1000";
}

}  // namespace
}  // namespace xk

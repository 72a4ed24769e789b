// libxk_packetdrill.so driven as packetdrill drives it: dlopen, look up
// packetdrill_interface_init, fill the table from a --so_flags string, then
// make system calls and move packets and time through the table only. Every
// frame the stack sends is taken apart and checked field by field (IP header,
// checksums computed here independently of xk, TCP flags, sequence numbers,
// options), and packet times are checked against the virtual clock.

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <chrono>
#include <iterator>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "packetdrill_interface.h"

namespace {

constexpr std::uint32_t kLocal = 0xC0A80001;   // 192.168.0.1 (--so_flags local_ip)
constexpr std::uint32_t kRemote = 0xC0000201;  // 192.0.2.1: packetdrill's remote
constexpr std::uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10;

// ---- the wire, written here (not with xk's code) ---------------------------------

void put16(std::vector<std::uint8_t>& b, std::size_t at, std::uint16_t v) {
  b[at] = static_cast<std::uint8_t>(v >> 8);
  b[at + 1] = static_cast<std::uint8_t>(v);
}
void put32(std::vector<std::uint8_t>& b, std::size_t at, std::uint32_t v) {
  put16(b, at, static_cast<std::uint16_t>(v >> 16));
  put16(b, at + 2, static_cast<std::uint16_t>(v));
}
std::uint16_t get16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
std::uint32_t get32(const std::uint8_t* p) { return std::uint32_t{get16(p)} << 16 | get16(p + 2); }

// RFC 1071: the 16-bit one's complement sum, folded.
std::uint32_t sum16(const std::uint8_t* p, std::size_t n, std::uint32_t acc = 0) {
  for (std::size_t i = 0; i + 1 < n; i += 2) acc += get16(p + i);
  if (n % 2 != 0) acc += std::uint32_t{p[n - 1]} << 8;
  return acc;
}
std::uint16_t fold(std::uint32_t acc) {
  while (acc >> 16 != 0) acc = (acc & 0xFFFF) + (acc >> 16);
  return static_cast<std::uint16_t>(acc);
}
// The TCP checksum's pseudo-header sum (RFC 9293 3.1).
std::uint32_t pseudo(std::uint32_t src, std::uint32_t dst, std::size_t tcp_len) {
  return (src >> 16) + (src & 0xFFFF) + (dst >> 16) + (dst & 0xFFFF) + 6 + static_cast<std::uint32_t>(tcp_len);
}

struct Seg {
  std::uint16_t sport = 0, dport = 0;
  std::uint32_t seq = 0, ack = 0;
  std::uint8_t flags = 0;
  std::uint16_t win = 0;
  std::vector<std::uint8_t> opts;
  std::string data;
};

// An IPv4 packet from the remote to the stack.
std::vector<std::uint8_t> build(const Seg& s) {
  const std::size_t opt_len = (s.opts.size() + 3) / 4 * 4;
  const std::size_t tcp_len = 20 + opt_len + s.data.size();
  std::vector<std::uint8_t> b(20 + tcp_len, 0);
  b[0] = 0x45;
  put16(b, 2, static_cast<std::uint16_t>(b.size()));
  put16(b, 4, 0x1234);
  put16(b, 6, 0x4000);  // DF
  b[8] = 64;
  b[9] = 6;
  put32(b, 12, kRemote);
  put32(b, 16, kLocal);
  put16(b, 10, static_cast<std::uint16_t>(~fold(sum16(b.data(), 20))));
  std::uint8_t* t = b.data() + 20;
  put16(b, 20, s.sport);
  put16(b, 22, s.dport);
  put32(b, 24, s.seq);
  put32(b, 28, s.ack);
  t[12] = static_cast<std::uint8_t>((20 + opt_len) / 4 << 4);
  t[13] = s.flags;
  put16(b, 34, s.win);
  std::copy(s.opts.begin(), s.opts.end(), t + 20);
  for (std::size_t i = s.opts.size(); i < opt_len; ++i) t[20 + i] = 1;  // NOP padding
  std::memcpy(t + 20 + opt_len, s.data.data(), s.data.size());
  put16(b, 36, static_cast<std::uint16_t>(~fold(sum16(t, tcp_len, pseudo(kRemote, kLocal, tcp_len)))));
  return b;
}

// A UDP datagram from the remote to the stack.
std::vector<std::uint8_t> build_udp(std::uint16_t sport, std::uint16_t dport, const std::string& data) {
  const std::size_t udp_len = 8 + data.size();
  std::vector<std::uint8_t> b(20 + udp_len, 0);
  b[0] = 0x45;
  put16(b, 2, static_cast<std::uint16_t>(b.size()));
  b[8] = 64;
  b[9] = 17;
  put32(b, 12, kRemote);
  put32(b, 16, kLocal);
  put16(b, 10, static_cast<std::uint16_t>(~fold(sum16(b.data(), 20))));
  put16(b, 20, sport);
  put16(b, 22, dport);
  put16(b, 24, static_cast<std::uint16_t>(udp_len));
  std::memcpy(b.data() + 28, data.data(), data.size());
  std::uint32_t ph = pseudo(kRemote, kLocal, udp_len) - 6 + 17;
  put16(b, 26, static_cast<std::uint16_t>(~fold(sum16(b.data() + 20, udp_len, ph))));
  return b;
}

// What a sent packet's TCP options said.
struct Options {
  std::optional<std::uint16_t> mss;
  std::optional<std::uint8_t> wscale;
  bool sack_permitted = false;
  std::optional<std::pair<std::uint32_t, std::uint32_t>> ts;  // val, ecr
};

struct Sent {
  Seg seg;
  Options opt;
  long long at = 0;
};

// Takes a packet the stack sent apart, checking everything that is not the
// test's business to choose: the IP header (version, length, checksum, TTL,
// addresses, protocol), the TCP checksum and the option encoding.
Sent parse(const std::uint8_t* p, std::size_t n, long long at) {
  Sent r;
  r.at = at;
  EXPECT_GE(n, 40u);
  if (n < 40) return r;
  EXPECT_EQ(p[0], 0x45) << "IPv4, 20-byte header";
  EXPECT_EQ(get16(p + 2), n) << "IP total length";
  EXPECT_EQ(fold(sum16(p, 20)), 0xFFFF) << "IP header checksum";
  EXPECT_EQ(get16(p + 6) & 0x3FFF, 0) << "not a fragment";
  EXPECT_GT(p[8], 0) << "TTL";
  EXPECT_EQ(p[9], 6) << "TCP";
  EXPECT_EQ(get32(p + 12), kLocal) << "source: the stack";
  EXPECT_EQ(get32(p + 16), kRemote) << "destination: the remote";
  const std::uint8_t* t = p + 20;
  const std::size_t tcp_len = n - 20;
  EXPECT_EQ(fold(sum16(t, tcp_len, pseudo(kLocal, kRemote, tcp_len))), 0xFFFF) << "TCP checksum";
  r.seg.sport = get16(t);
  r.seg.dport = get16(t + 2);
  r.seg.seq = get32(t + 4);
  r.seg.ack = get32(t + 8);
  const std::size_t hl = (t[12] >> 4) * 4u;
  EXPECT_GE(hl, 20u);
  EXPECT_LE(hl, tcp_len);
  if (hl < 20 || hl > tcp_len) return r;
  EXPECT_EQ(t[12] & 0x0F, 0) << "reserved bits";
  r.seg.flags = t[13];
  r.seg.win = get16(t + 14);
  EXPECT_EQ(get16(t + 18), 0) << "urgent pointer";
  r.seg.opts.assign(t + 20, t + hl);
  r.seg.data.assign(reinterpret_cast<const char*>(t + hl), tcp_len - hl);
  for (std::size_t i = 20; i < hl;) {
    std::uint8_t kind = t[i];
    if (kind == 0) break;
    if (kind == 1) {
      ++i;
      continue;
    }
    EXPECT_LT(i + 1, hl) << "option length byte present";
    if (i + 1 >= hl) break;
    std::uint8_t len = t[i + 1];
    EXPECT_GE(len, 2) << "option " << int{kind};
    EXPECT_LE(i + len, hl) << "option " << int{kind} << " inside the header";
    if (len < 2 || i + len > hl) break;
    if (kind == 2) {
      EXPECT_EQ(len, 4);
      r.opt.mss = get16(t + i + 2);
    } else if (kind == 3) {
      EXPECT_EQ(len, 3);
      r.opt.wscale = t[i + 2];
    } else if (kind == 4) {
      EXPECT_EQ(len, 2);
      r.opt.sack_permitted = true;
    } else if (kind == 8) {
      EXPECT_EQ(len, 10);
      r.opt.ts = std::make_pair(get32(t + i + 2), get32(t + i + 6));
    }
    i += len;
  }
  return r;
}

std::vector<std::uint8_t> opt_syn(std::uint32_t tsval) {
  // MSS 1460, SACK permitted, timestamps, NOP, window scale 7.
  return {2, 4, 0x05, 0xB4, 4, 2, 8, 10, static_cast<std::uint8_t>(tsval >> 24), static_cast<std::uint8_t>(tsval >> 16),
          static_cast<std::uint8_t>(tsval >> 8), static_cast<std::uint8_t>(tsval), 0, 0, 0, 0, 1, 3, 3, 7};
}
std::vector<std::uint8_t> opt_ts(std::uint32_t val, std::uint32_t ecr) {
  return {1, 1, 8, 10, static_cast<std::uint8_t>(val >> 24), static_cast<std::uint8_t>(val >> 16),
          static_cast<std::uint8_t>(val >> 8), static_cast<std::uint8_t>(val), static_cast<std::uint8_t>(ecr >> 24),
          static_cast<std::uint8_t>(ecr >> 16), static_cast<std::uint8_t>(ecr >> 8), static_cast<std::uint8_t>(ecr)};
}

sockaddr_in addr(std::uint32_t ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(port);
  return a;
}

// ---- the adapter, as packetdrill loads it -----------------------------------------

class Library {
 public:
  Library() {
    // packetdrill's flags but RTLD_DEEPBIND, which the sanitizers' runtime
    // refuses (the library exports one symbol and hides the rest, so it
    // changes nothing for the lookup).
    handle_ = dlopen(XK_PACKETDRILL_SO, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle_ == nullptr) return;
    init_ = reinterpret_cast<packetdrill_interface_init_t>(dlsym(handle_, "packetdrill_interface_init"));
  }
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  packetdrill_interface_init_t init() const { return init_; }
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
  packetdrill_interface_init_t init_ = nullptr;
};

Library& library() {
  static Library lib;
  return lib;
}

class Adapter : public ::testing::Test {
 protected:
  void SetUp() override { open("local_ip=192.168.0.1 prefix=16"); }
  void TearDown() override { close_ifc(); }

  void open(const char* flags) {
    ASSERT_NE(library().handle(), nullptr) << dlerror();
    ASSERT_NE(library().init(), nullptr) << "packetdrill_interface_init is not exported";
    close_ifc();
    ifc_ = packetdrill_interface{};
    library().init()(flags, &ifc_);
    ASSERT_NE(ifc_.userdata, nullptr);
    // Every entry packetdrill may call is filled (a NULL would crash it).
    const packetdrill_interface& f = ifc_;
    auto set = [](auto fn) { return fn != nullptr; };
    const bool filled[] = {
        set(f.free),       set(f.socket),     set(f.bind),        set(f.listen),         set(f.accept),
        set(f.connect),    set(f.read),       set(f.readv),       set(f.recv),           set(f.recvfrom),
        set(f.recvmsg),    set(f.write),      set(f.writev),      set(f.send),           set(f.sendto),
        set(f.sendmsg),    set(f.fcntl),      set(f.ioctl),       set(f.close),          set(f.shutdown),
        set(f.getsockopt), set(f.setsockopt), set(f.poll),        set(f.netdev_send),    set(f.netdev_receive),
        set(f.usleep),     set(f.gettimeofday), set(f.epoll_create), set(f.epoll_ctl),   set(f.epoll_wait),
        set(f.pipe),       set(f.splice)};
    for (std::size_t i = 0; i < std::size(filled); ++i) EXPECT_TRUE(filled[i]) << "entry " << i << " of the table";
    open_ = true;
  }
  void close_ifc() {
    if (open_) ifc_.free(ifc_.userdata);
    open_ = false;
  }

  long long now() {
    timeval tv{};
    EXPECT_EQ(ifc_.gettimeofday(ifc_.userdata, &tv, nullptr), 0);
    return static_cast<long long>(tv.tv_sec) * 1'000'000 + tv.tv_usec;
  }
  void inject(const Seg& s) {
    std::vector<std::uint8_t> b = build(s);
    ASSERT_EQ(ifc_.netdev_send(ifc_.userdata, b.data(), b.size()), 0);
  }
  // The next packet the stack sends (count 0: none within the horizon).
  std::optional<Sent> sniff() {
    std::vector<std::uint8_t> buf(65536);
    std::size_t count = buf.size();
    long long at = 0;
    EXPECT_EQ(ifc_.netdev_receive(ifc_.userdata, buf.data(), &count, &at), 0);
    if (count == 0) return std::nullopt;
    return parse(buf.data(), count, at);
  }
  Sent expect_sent() {
    std::optional<Sent> s = sniff();
    EXPECT_TRUE(s.has_value()) << "the stack sent nothing";
    return s.value_or(Sent{});
  }

  int listener(std::uint16_t port) {
    int fd = ifc_.socket(ifc_.userdata, AF_INET, SOCK_STREAM, IPPROTO_TCP);
    EXPECT_GE(fd, 0);
    int one = 1;
    EXPECT_EQ(ifc_.setsockopt(ifc_.userdata, fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
    sockaddr_in a = addr(kLocal, port);
    EXPECT_EQ(ifc_.bind(ifc_.userdata, fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(ifc_.listen(ifc_.userdata, fd, 1), 0);
    return fd;
  }

  // The remote's SYN, the stack's SYN-ACK (checked), the remote's ACK.
  // Returns the stack's ISN.
  std::uint32_t handshake(std::uint16_t rport, std::uint16_t lport, std::uint32_t riss) {
    const long long before = now();
    inject(Seg{rport, lport, riss, 0, kSyn, 65535, opt_syn(100), {}});
    Sent sa = expect_sent();
    EXPECT_EQ(sa.seg.flags, kSyn | kAck);
    EXPECT_EQ(sa.seg.sport, lport);
    EXPECT_EQ(sa.seg.dport, rport);
    EXPECT_EQ(sa.seg.ack, riss + 1);
    EXPECT_TRUE(sa.seg.data.empty());
    EXPECT_EQ(sa.opt.mss, 1460) << "MTU 1500 - 40";
    EXPECT_TRUE(sa.opt.sack_permitted);
    EXPECT_TRUE(sa.opt.wscale.has_value());
    EXPECT_TRUE(sa.opt.ts.has_value());
    if (sa.opt.ts) {
      EXPECT_EQ(sa.opt.ts->second, 100u) << "TSecr echoes our TSval";
    }
    // Answered at once: stamped with the virtual time of the SYN.
    EXPECT_GE(sa.at, before);
    EXPECT_LE(sa.at, now());
    tsecr_ = sa.opt.ts ? sa.opt.ts->first : 0;
    synack_at_ = sa.at;
    inject(Seg{rport, lport, riss + 1, sa.seg.seq + 1, kAck, 1024, opt_ts(101, tsecr_), {}});
    return sa.seg.seq;
  }

  packetdrill_interface ifc_{};
  bool open_ = false;
  std::uint32_t tsecr_ = 0;     // the stack's TSval in its SYN-ACK
  long long synack_at_ = 0;     // when it sent the SYN-ACK
};

TEST_F(Adapter, PassiveOpenDataBothWaysAndClose) {
  // Quick-ACK mode off: this run shows the delayed-ACK timer on virtual time
  // (FirstDataIsAckedAtOnceInQuickAckMode has the default).
  open("local_ip=192.168.0.1 prefix=16 tcp.quickacks=0");
  const int lfd = listener(8080);
  const std::uint32_t riss = 1000;
  const std::uint32_t iss = handshake(40000, 8080, riss);

  sockaddr_in peer{};
  socklen_t plen = sizeof peer;
  const int fd = ifc_.accept(ifc_.userdata, lfd, reinterpret_cast<sockaddr*>(&peer), &plen);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(ntohl(peer.sin_addr.s_addr), kRemote);
  EXPECT_EQ(ntohs(peer.sin_port), 40000);

  // Data in: one small segment is ACKed by the delayed-ACK timer, 40 ms of
  // virtual time later (RFC 1122 4.2.3.2), which netdev_receive waits for.
  const std::string in(100, 'q');
  const long long t_in = now();
  inject(Seg{40000, 8080, riss + 1, iss + 1, kAck | kPsh, 1024, opt_ts(102, tsecr_), in});
  Sent ack = expect_sent();
  EXPECT_EQ(ack.seg.flags, kAck);
  EXPECT_EQ(ack.seg.seq, iss + 1);
  EXPECT_EQ(ack.seg.ack, riss + 101);
  EXPECT_TRUE(ack.seg.data.empty());
  EXPECT_GE(ack.at - t_in, 40'000) << "the delayed ACK waits 40 ms";
  EXPECT_LE(ack.at - t_in, 41'000);
  ASSERT_TRUE(ack.opt.ts.has_value());
  EXPECT_EQ(ack.opt.ts->second, 102u);
  // The timestamp clock (1 ms ticks, RFC 7323 5.4) runs on virtual time too.
  const long long ts_ms = static_cast<long long>(ack.opt.ts->first - tsecr_);
  EXPECT_NEAR(ts_ms, (ack.at - synack_at_) / 1000, 1);
  char buf[512];
  ASSERT_EQ(ifc_.read(ifc_.userdata, fd, buf, sizeof buf), 100) << std::strerror(errno);
  EXPECT_EQ(std::string(buf, 100), in);

  // Data out.
  const std::string out = "0123456789abcdefghij";
  ASSERT_EQ(ifc_.write(ifc_.userdata, fd, out.data(), out.size()), static_cast<ssize_t>(out.size()));
  Sent d = expect_sent();
  EXPECT_EQ(d.seg.flags & (kSyn | kFin | kRst | kAck), kAck);
  EXPECT_EQ(d.seg.seq, iss + 1);
  EXPECT_EQ(d.seg.ack, riss + 101);
  EXPECT_EQ(d.seg.data, out);
  inject(Seg{40000, 8080, riss + 101, iss + 1 + 20, kAck, 1024, opt_ts(103, tsecr_), {}});

  // Close: our FIN, the remote's FIN, our last ACK.
  ASSERT_EQ(ifc_.close(ifc_.userdata, fd), 0);
  Sent fin = expect_sent();
  EXPECT_EQ(fin.seg.flags, kFin | kAck);
  EXPECT_EQ(fin.seg.seq, iss + 21);
  EXPECT_EQ(fin.seg.ack, riss + 101);
  EXPECT_TRUE(fin.seg.data.empty());
  inject(Seg{40000, 8080, riss + 101, iss + 22, kFin | kAck, 1024, opt_ts(104, tsecr_), {}});
  Sent last = expect_sent();
  EXPECT_EQ(last.seg.flags, kAck);
  EXPECT_EQ(last.seg.seq, iss + 22);
  EXPECT_EQ(last.seg.ack, riss + 102);
  EXPECT_EQ(ifc_.close(ifc_.userdata, lfd), 0);
}

TEST_F(Adapter, ActiveOpenThroughEpollRecvmsgSendmsgShutdown) {
  const int fd = ifc_.socket(ifc_.userdata, AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int on = 1;
  ASSERT_EQ(ifc_.ioctl(ifc_.userdata, fd, FIONBIO, &on), 0);
  EXPECT_NE(ifc_.fcntl(ifc_.userdata, fd, F_GETFL) & O_NONBLOCK, 0) << "FIONBIO set O_NONBLOCK";
  int queued = -1;
  EXPECT_EQ(ifc_.ioctl(ifc_.userdata, fd, FIONREAD, &queued), 0) << "SIOCINQ";
  EXPECT_EQ(queued, 0);
  EXPECT_EQ(ifc_.ioctl(ifc_.userdata, fd, SIOCGIFMTU, &queued), -1);
  EXPECT_EQ(errno, ENOTTY);
  const int ep = ifc_.epoll_create(ifc_.userdata, 1);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLIN;
  ev.data.u64 = 42;
  ASSERT_EQ(ifc_.epoll_ctl(ifc_.userdata, ep, EPOLL_CTL_ADD, fd, &ev), 0);

  sockaddr_in to = addr(kRemote, 80);
  ASSERT_EQ(ifc_.connect(ifc_.userdata, fd, reinterpret_cast<sockaddr*>(&to), sizeof to), -1);
  EXPECT_EQ(errno, EINPROGRESS);
  epoll_event out[2];
  EXPECT_EQ(ifc_.epoll_wait(ifc_.userdata, ep, out, 2, 0), 0) << "not connected yet";
  Sent syn = expect_sent();
  ASSERT_EQ(syn.seg.flags, kSyn);
  ASSERT_TRUE(syn.opt.ts.has_value());
  const std::uint16_t lport = syn.seg.sport;
  const std::uint32_t iss = syn.seg.seq;
  inject(Seg{80, lport, 7000, iss + 1, kSyn | kAck, 65535, opt_syn(500), {}});
  Sent ack = expect_sent();
  EXPECT_EQ(ack.seg.flags, kAck);
  EXPECT_EQ(ack.seg.seq, iss + 1);
  EXPECT_EQ(ack.seg.ack, 7001u);
  ASSERT_TRUE(ack.opt.ts.has_value());
  EXPECT_EQ(ack.opt.ts->second, 500u);
  ASSERT_EQ(ifc_.epoll_wait(ifc_.userdata, ep, out, 2, 1000), 1);
  EXPECT_EQ(out[0].data.u64, 42u);
  EXPECT_NE(out[0].events & EPOLLOUT, 0u);

  // sendmsg gathers two pieces into one segment.
  char a[] = "head-", b[] = "tail";
  iovec iov[2] = {{a, 5}, {b, 4}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = 2;
  ASSERT_EQ(ifc_.sendmsg(ifc_.userdata, fd, &m, 0), 9);
  Sent d = expect_sent();
  EXPECT_EQ(d.seg.seq, iss + 1);
  EXPECT_EQ(d.seg.data, "head-tail");
  // The remote ACKs and answers; recvmsg scatters it.
  inject(Seg{80, lport, 7001, iss + 10, kAck | kPsh, 1024, opt_ts(501, ack.opt.ts->first), "0123456789"});
  char r1[4], r2[16];
  iovec riov[2] = {{r1, sizeof r1}, {r2, sizeof r2}};
  msghdr rm{};
  rm.msg_iov = riov;
  rm.msg_iovlen = 2;
  ASSERT_EQ(ifc_.recvmsg(ifc_.userdata, fd, &rm, 0), 10);
  EXPECT_EQ(std::string(r1, 4), "0123");
  EXPECT_EQ(std::string(r2, 6), "456789");
  EXPECT_EQ(rm.msg_controllen, 0u);

  // A young connection ACKs the data at once (quick-ACK mode, as Linux).
  Sent quick = expect_sent();
  EXPECT_EQ(quick.seg.flags, kAck);
  EXPECT_EQ(quick.seg.ack, 7011u);
  // shutdown(SHUT_WR): our FIN.
  ASSERT_EQ(ifc_.shutdown(ifc_.userdata, fd, SHUT_WR), 0);
  Sent fin = expect_sent();
  EXPECT_EQ(fin.seg.flags, kFin | kAck);
  EXPECT_EQ(fin.seg.seq, iss + 10);
  EXPECT_EQ(fin.seg.ack, 7011u);
  EXPECT_EQ(ifc_.write(ifc_.userdata, fd, "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  EXPECT_EQ(ifc_.close(ifc_.userdata, ep), 0);
  EXPECT_EQ(ifc_.pipe(ifc_.userdata, nullptr), -1);
  EXPECT_EQ(errno, ENOSYS);
}

// A writev is one write: its buffers share segments, and only the segment
// with its last byte has the PSH (as Linux pushes once per sendmsg).
TEST_F(Adapter, WritevBuffersShareSegmentsWithOnePush) {
  const int lfd = listener(8080);
  const std::uint32_t riss = 1000;
  const std::uint32_t iss = handshake(40000, 8080, riss);
  const int fd = ifc_.accept(ifc_.userdata, lfd, nullptr, nullptr);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const std::string head(100, 'h'), body(3000, 'b');
  iovec iov[3] = {{const_cast<char*>(head.data()), head.size()}, {nullptr, 0},
                  {const_cast<char*>(body.data()), body.size()}};
  ASSERT_EQ(ifc_.writev(ifc_.userdata, fd, iov, 3), 3100) << std::strerror(errno);
  std::string got;
  for (std::size_t want : {1448u, 1448u, 204u}) {
    Sent d = expect_sent();
    EXPECT_EQ(d.seg.seq, iss + 1 + got.size());
    EXPECT_EQ(d.seg.data.size(), want);
    EXPECT_EQ(d.seg.flags & kPsh, want == 204u ? kPsh : 0) << "segment at " << got.size();
    got += d.seg.data;
  }
  EXPECT_TRUE(got == head + body) << got.size() << " bytes";
  EXPECT_EQ(ifc_.close(ifc_.userdata, fd), 0);
  EXPECT_EQ(ifc_.close(ifc_.userdata, lfd), 0);
}

// The default: a young connection's first data is ACKed at once, as Linux
// does (quick-ACK mode), not after the 40 ms delayed-ACK timer.
TEST_F(Adapter, FirstDataIsAckedAtOnceInQuickAckMode) {
  const int lfd = listener(8080);
  const std::uint32_t riss = 1000;
  const std::uint32_t iss = handshake(40000, 8080, riss);
  const long long t_in = now();
  inject(Seg{40000, 8080, riss + 1, iss + 1, kAck | kPsh, 1024, opt_ts(102, tsecr_), std::string(100, 'q')});
  Sent ack = expect_sent();
  EXPECT_EQ(ack.seg.flags, kAck);
  EXPECT_EQ(ack.seg.ack, riss + 101);
  EXPECT_LT(ack.at - t_in, 1'000) << "at once, not after the delayed-ACK timer";
  EXPECT_EQ(ifc_.close(ifc_.userdata, lfd), 0);
}

TEST_F(Adapter, UdpBothWays) {
  const int fd = ifc_.socket(ifc_.userdata, AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in me = addr(kLocal, 5353);
  ASSERT_EQ(ifc_.bind(ifc_.userdata, fd, reinterpret_cast<sockaddr*>(&me), sizeof me), 0);
  std::vector<std::uint8_t> dg = build_udp(6000, 5353, "ping");
  ASSERT_EQ(ifc_.netdev_send(ifc_.userdata, dg.data(), dg.size()), 0);
  char buf[16];
  sockaddr_in from{};
  socklen_t flen = sizeof from;
  ASSERT_EQ(ifc_.recvfrom(ifc_.userdata, fd, buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &flen),
            4);
  EXPECT_EQ(std::string(buf, 4), "ping");
  EXPECT_EQ(ntohl(from.sin_addr.s_addr), kRemote);
  EXPECT_EQ(ntohs(from.sin_port), 6000);
  sockaddr_in to = addr(kRemote, 6000);
  ASSERT_EQ(ifc_.sendto(ifc_.userdata, fd, "pong!", 5, 0, reinterpret_cast<sockaddr*>(&to), sizeof to), 5);
  std::vector<std::uint8_t> out(2048);
  std::size_t count = out.size();
  long long at = 0;
  ASSERT_EQ(ifc_.netdev_receive(ifc_.userdata, out.data(), &count, &at), 0);
  ASSERT_EQ(count, 20u + 8 + 5);
  EXPECT_EQ(fold(sum16(out.data(), 20)), 0xFFFF) << "IP header checksum";
  EXPECT_EQ(out[9], 17);
  EXPECT_EQ(get32(&out[12]), kLocal);
  EXPECT_EQ(get32(&out[16]), kRemote);
  EXPECT_EQ(get16(&out[20]), 5353);
  EXPECT_EQ(get16(&out[22]), 6000);
  EXPECT_EQ(get16(&out[24]), 13);
  EXPECT_EQ(fold(sum16(out.data() + 20, 13, pseudo(kLocal, kRemote, 13) - 6 + 17)), 0xFFFF) << "UDP checksum";
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&out[28]), 5), "pong!");
  EXPECT_EQ(ifc_.close(ifc_.userdata, fd), 0);
}

TEST_F(Adapter, SynAckRetransmittedOnVirtualTime) {
  const int lfd = listener(8081);
  inject(Seg{40001, 8081, 5000, 0, kSyn, 65535, opt_syn(7), {}});
  Sent first = expect_sent();
  ASSERT_EQ(first.seg.flags, kSyn | kAck);
  // No ACK: the stack sends the SYN-ACK again when its timer (initial RTO,
  // 1 s; RFC 6298 2.1) expires -- on the virtual clock, so at once in real time.
  const auto real_start = std::chrono::steady_clock::now();
  Sent again = expect_sent();
  EXPECT_EQ(again.seg.flags, kSyn | kAck);
  EXPECT_EQ(again.seg.seq, first.seg.seq);
  EXPECT_EQ(again.seg.ack, 5001u);
  EXPECT_GE(again.at - first.at, 1'000'000);
  EXPECT_LE(again.at - first.at, 1'001'000);
  EXPECT_LT(std::chrono::steady_clock::now() - real_start, std::chrono::milliseconds(500));
  EXPECT_EQ(ifc_.close(ifc_.userdata, lfd), 0);
}

TEST_F(Adapter, ClosedPortAnswersReset) {
  // RFC 9293 3.10.7.1: a SYN to a port nobody listens on gets <SEQ=0><ACK=SEG.SEQ+1><CTL=RST,ACK>.
  inject(Seg{40002, 9999, 777, 0, kSyn, 65535, opt_syn(1), {}});
  Sent rst = expect_sent();
  EXPECT_EQ(rst.seg.flags, kRst | kAck);
  EXPECT_EQ(rst.seg.sport, 9999);
  EXPECT_EQ(rst.seg.dport, 40002);
  EXPECT_EQ(rst.seg.seq, 0u);
  EXPECT_EQ(rst.seg.ack, 778u);
  EXPECT_TRUE(rst.seg.data.empty());
  // And nothing else follows.
  EXPECT_FALSE(sniff().has_value());
}

TEST_F(Adapter, ConnectRefusedByReset) {
  const int fd = ifc_.socket(ifc_.userdata, AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int fl = ifc_.fcntl(ifc_.userdata, fd, F_GETFL);
  ASSERT_GE(fl, 0);
  ASSERT_EQ(ifc_.fcntl(ifc_.userdata, fd, F_SETFL, fl | O_NONBLOCK), 0);
  sockaddr_in to = addr(kRemote, 8080);
  ASSERT_EQ(ifc_.connect(ifc_.userdata, fd, reinterpret_cast<sockaddr*>(&to), sizeof to), -1);
  EXPECT_EQ(errno, EINPROGRESS);
  Sent syn = expect_sent();
  EXPECT_EQ(syn.seg.flags, kSyn);
  EXPECT_EQ(syn.seg.dport, 8080);
  EXPECT_EQ(syn.seg.ack, 0u);
  EXPECT_EQ(syn.opt.mss, 1460);
  EXPECT_TRUE(syn.opt.sack_permitted);
  EXPECT_TRUE(syn.opt.wscale.has_value());
  ASSERT_TRUE(syn.opt.ts.has_value());
  EXPECT_EQ(syn.opt.ts->second, 0u) << "no TSecr in a SYN";
  // The remote refuses.
  inject(Seg{8080, syn.seg.sport, 0, syn.seg.seq + 1, kRst | kAck, 0, {}, {}});
  pollfd p{fd, POLLOUT, 0};
  ASSERT_EQ(ifc_.poll(ifc_.userdata, &p, 1, 1000), 1);
  EXPECT_NE(p.revents & (POLLERR | POLLHUP), 0);
  int err = 0;
  socklen_t len = sizeof err;
  ASSERT_EQ(ifc_.getsockopt(ifc_.userdata, fd, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, ECONNREFUSED);
  EXPECT_EQ(ifc_.close(ifc_.userdata, fd), 0);
  EXPECT_FALSE(sniff().has_value()) << "a refused connection sends nothing more";
}

TEST_F(Adapter, BlockingAcceptInAnotherThread) {
  // packetdrill runs a blocking call in a thread of its own while the main
  // thread injects packets and moves time.
  const int lfd = listener(8082);
  // A bound on the wait, so a failure cannot hang the test.
  timeval limit{10, 0};
  ASSERT_EQ(ifc_.setsockopt(ifc_.userdata, lfd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit), 0);
  int fd = -1;
  std::thread syscall([&] { fd = ifc_.accept(ifc_.userdata, lfd, nullptr, nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(ifc_.usleep(ifc_.userdata, 100'000), 0);
  const std::uint32_t iss = handshake(40003, 8082, 9000);
  syscall.join();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ifc_.write(ifc_.userdata, fd, "x", 1), 1);
  Sent d = expect_sent();
  EXPECT_EQ(d.seg.seq, iss + 1);
  EXPECT_EQ(d.seg.data, "x");
}

TEST_F(Adapter, TimeMovesOnlyWhenToldTo) {
  const long long t0 = now();
  ASSERT_EQ(ifc_.usleep(ifc_.userdata, 2'500'000), 0);
  const long long t1 = now();
  // 2.5 s of usleep, plus the microsecond each gettimeofday lets pass.
  EXPECT_GE(t1 - t0, 2'500'000);
  EXPECT_LE(t1 - t0, 2'500'010);
  // Nothing to send and no timer: netdev_receive says so instead of waiting.
  EXPECT_FALSE(sniff().has_value());
  // The clock reads like a date (it starts at the wall-clock time).
  EXPECT_GT(t0, 1'600'000'000LL * 1'000'000);
}

TEST_F(Adapter, OptionsReachTheStack) {
  open("--local_ip=192.168.0.1 mtu=1000 tcp.wscale=3 tcp.sack=off tcp.ts=off");
  const int lfd = listener(8083);
  inject(Seg{40004, 8083, 1, 0, kSyn, 65535, opt_syn(1), {}});
  Sent sa = expect_sent();
  EXPECT_EQ(sa.seg.flags, kSyn | kAck);
  EXPECT_EQ(sa.opt.mss, 960) << "mtu=1000";
  EXPECT_EQ(sa.opt.wscale, 3);
  EXPECT_FALSE(sa.opt.sack_permitted);
  EXPECT_FALSE(sa.opt.ts.has_value());
  EXPECT_EQ(ifc_.close(ifc_.userdata, lfd), 0);
}

TEST_F(Adapter, BadFlagsFailEveryCallClearly) {
  for (const char* bad : {"local_ip=192.168.0.300", "prefix=40", "mtu=abc", "speed=9", "local_ip",
                          "tcp.wscale=99", "local_ip=192.168.0.0 prefix=24"}) {
    SCOPED_TRACE(bad);
    open(bad);
    errno = 0;
    EXPECT_EQ(ifc_.socket(ifc_.userdata, AF_INET, SOCK_STREAM, 0), -1);
    EXPECT_EQ(errno, EINVAL);
    std::uint8_t pkt[40] = {0x45};
    EXPECT_EQ(ifc_.netdev_send(ifc_.userdata, pkt, sizeof pkt), -1);
    EXPECT_FALSE(sniff().has_value());
    // Time still works, so packetdrill gets as far as reporting the failure.
    const long long t0 = now();
    EXPECT_EQ(ifc_.usleep(ifc_.userdata, 1000), 0);
    EXPECT_GE(now() - t0, 1000);
  }
}

TEST_F(Adapter, BadPacketsAreDroppedNotFatal) {
  const int lfd = listener(8084);
  // Too short for IP, a bad IP checksum, a bad TCP checksum, an empty call.
  std::uint8_t junk[3] = {0x45, 0, 0};
  EXPECT_EQ(ifc_.netdev_send(ifc_.userdata, junk, sizeof junk), 0);
  std::vector<std::uint8_t> syn = build(Seg{40005, 8084, 1, 0, kSyn, 65535, opt_syn(1), {}});
  std::vector<std::uint8_t> bad_ip = syn;
  bad_ip[10] ^= 0xFF;
  EXPECT_EQ(ifc_.netdev_send(ifc_.userdata, bad_ip.data(), bad_ip.size()), 0);
  std::vector<std::uint8_t> bad_tcp = syn;
  bad_tcp[36] ^= 0xFF;
  EXPECT_EQ(ifc_.netdev_send(ifc_.userdata, bad_tcp.data(), bad_tcp.size()), 0);
  EXPECT_EQ(ifc_.netdev_send(ifc_.userdata, nullptr, 0), -1);
  std::vector<std::uint8_t> huge(70000, 0);
  EXPECT_EQ(ifc_.netdev_send(ifc_.userdata, huge.data(), huge.size()), -1);
  EXPECT_EQ(errno, EMSGSIZE);
  EXPECT_FALSE(sniff().has_value()) << "none of them is answered";
  // The good one still is.
  EXPECT_EQ(ifc_.netdev_send(ifc_.userdata, syn.data(), syn.size()), 0);
  EXPECT_EQ(expect_sent().seg.flags, kSyn | kAck);
  EXPECT_EQ(ifc_.close(ifc_.userdata, lfd), 0);
}

// ---- IPv6 (--ip_version=ipv6: so_flags ip_version=ipv6) -------------------------

// packetdrill's IPv6 defaults: the stack fd3d:fa7b:d17d::1/48, the remote
// 2001:db8::1 (off the prefix, through the gateway fd3d:fa7b:d17d::2).
constexpr std::uint8_t kLocal6[16] = {0xfd, 0x3d, 0xfa, 0x7b, 0xd1, 0x7d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr std::uint8_t kRemote6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

std::uint32_t pseudo6(const std::uint8_t* src, const std::uint8_t* dst, std::size_t len, std::uint8_t nh) {
  return sum16(src, 16, sum16(dst, 16, static_cast<std::uint32_t>(len >> 16) + (len & 0xFFFF) + nh));
}

// An IPv6 packet from the remote to the stack: TCP right behind the header.
std::vector<std::uint8_t> build6(const Seg& s) {
  const std::vector<std::uint8_t> v4 = build(s);  // the TCP segment, its checksum redone below
  const std::size_t tcp_len = v4.size() - 20;
  std::vector<std::uint8_t> b(40 + tcp_len, 0);
  b[0] = 0x60;
  put16(b, 4, static_cast<std::uint16_t>(tcp_len));
  b[6] = 6;
  b[7] = 64;
  std::memcpy(b.data() + 8, kRemote6, 16);
  std::memcpy(b.data() + 24, kLocal6, 16);
  std::copy(v4.begin() + 20, v4.end(), b.begin() + 40);
  put16(b, 56, 0);
  put16(b, 56, static_cast<std::uint16_t>(~fold(sum16(b.data() + 40, tcp_len, pseudo6(kRemote6, kLocal6, tcp_len, 6)))));
  return b;
}

// A sent IPv6 packet's TCP segment, the IPv6 header and checksum checked.
Seg parse6(const std::uint8_t* p, std::size_t n) {
  Seg seg;
  EXPECT_GE(n, 60u);
  if (n < 60) return seg;
  EXPECT_EQ(p[0] >> 4, 6) << "IPv6";
  EXPECT_EQ(get16(p + 4), n - 40) << "payload length";
  EXPECT_EQ(p[6], 6) << "TCP straight behind the header";
  EXPECT_GT(p[7], 0) << "hop limit";
  EXPECT_EQ(std::memcmp(p + 8, kLocal6, 16), 0) << "source: the stack";
  EXPECT_EQ(std::memcmp(p + 24, kRemote6, 16), 0) << "destination: the remote";
  EXPECT_NE(get32(p) & 0xFFFFF, 0u) << "a flow label (RFC 6437)";
  const std::uint8_t* t = p + 40;
  const std::size_t tcp_len = n - 40;
  EXPECT_EQ(fold(sum16(t, tcp_len, pseudo6(kLocal6, kRemote6, tcp_len, 6))), 0xFFFF) << "TCP checksum";
  seg.sport = get16(t);
  seg.dport = get16(t + 2);
  seg.seq = get32(t + 4);
  seg.ack = get32(t + 8);
  seg.flags = t[13];
  const std::size_t hl = (t[12] >> 4) * 4u;
  seg.opts.assign(t + 20, t + std::min(hl, tcp_len));
  if (hl <= tcp_len) seg.data.assign(reinterpret_cast<const char*>(t + hl), tcp_len - hl);
  return seg;
}

class Adapter6 : public Adapter {
 protected:
  void SetUp() override { open("ip_version=ipv6"); }
  void inject6(const Seg& s) {
    std::vector<std::uint8_t> b = build6(s);
    ASSERT_EQ(ifc_.netdev_send(ifc_.userdata, b.data(), b.size()), 0);
  }
  std::optional<Seg> sniff6() {
    std::vector<std::uint8_t> buf(65536);
    std::size_t count = buf.size();
    long long at = 0;
    EXPECT_EQ(ifc_.netdev_receive(ifc_.userdata, buf.data(), &count, &at), 0);
    if (count == 0) return std::nullopt;
    return parse6(buf.data(), count);
  }
  Seg expect6() {
    std::optional<Seg> s = sniff6();
    EXPECT_TRUE(s.has_value()) << "the stack sent nothing";
    return s.value_or(Seg{});
  }
};

// A script's passive open, data both ways and close, over IPv6 with
// AF_INET6 sockets, as packetdrill --ip_version=ipv6 runs it.
TEST_F(Adapter6, PassiveOpenDataAndCloseOverIpv6) {
  const int lfd = ifc_.socket(ifc_.userdata, AF_INET6, SOCK_STREAM, IPPROTO_TCP);
  ASSERT_GE(lfd, 0) << std::strerror(errno);
  sockaddr_in6 any{};
  any.sin6_family = AF_INET6;
  any.sin6_port = htons(8080);
  ASSERT_EQ(ifc_.bind(ifc_.userdata, lfd, reinterpret_cast<sockaddr*>(&any), sizeof any), 0) << std::strerror(errno);
  ASSERT_EQ(ifc_.listen(ifc_.userdata, lfd, 1), 0);

  inject6(Seg{40000, 8080, 1000, 0, kSyn, 65535, opt_syn(100), {}});
  const Seg sa = expect6();
  EXPECT_EQ(sa.flags, kSyn | kAck);
  EXPECT_EQ(sa.ack, 1001u);
  ASSERT_GE(sa.opts.size(), 4u);
  EXPECT_EQ(sa.opts[0], 2) << "MSS first";
  EXPECT_EQ(get16(sa.opts.data() + 2), 1440) << "MTU 1500 - 40 (IPv6) - 20";
  inject6(Seg{40000, 8080, 1001, sa.seq + 1, kAck, 1024, {}, {}});

  sockaddr_in6 peer{};
  socklen_t plen = sizeof peer;
  const int fd = ifc_.accept(ifc_.userdata, lfd, reinterpret_cast<sockaddr*>(&peer), &plen);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(plen, sizeof(sockaddr_in6));
  EXPECT_EQ(peer.sin6_family, AF_INET6);
  EXPECT_EQ(std::memcmp(&peer.sin6_addr, kRemote6, 16), 0);
  EXPECT_EQ(ntohs(peer.sin6_port), 40000);

  const std::string in = "over six";
  inject6(Seg{40000, 8080, 1001, sa.seq + 1, kAck | kPsh, 1024, {}, in});
  char buf[64];
  ASSERT_EQ(ifc_.read(ifc_.userdata, fd, buf, sizeof buf), static_cast<ssize_t>(in.size())) << std::strerror(errno);
  EXPECT_EQ(std::string(buf, in.size()), in);
  const std::string out = "and back";
  ASSERT_EQ(ifc_.write(ifc_.userdata, fd, out.data(), out.size()), static_cast<ssize_t>(out.size()));
  Seg d = expect6();
  while (d.data.empty() && d.flags == kAck) d = expect6();  // the ACK of `in` may come first
  EXPECT_EQ(d.data, out);
  EXPECT_EQ(d.seq, sa.seq + 1);
  EXPECT_EQ(d.ack, 1001u + in.size());
  ASSERT_EQ(ifc_.close(ifc_.userdata, fd), 0);
  const Seg fin = expect6();
  EXPECT_EQ(fin.flags & kFin, kFin);
  EXPECT_EQ(ifc_.close(ifc_.userdata, lfd), 0);
}

// An AF_INET6 connect to the IPv6 remote: the SYN leaves from the local
// address; a port nobody listens on answers RST.
TEST_F(Adapter6, ActiveOpenAndResetOverIpv6) {
  const int fd = ifc_.socket(ifc_.userdata, AF_INET6, SOCK_STREAM, IPPROTO_TCP);
  ASSERT_GE(fd, 0);
  int one = 1;
  ASSERT_EQ(ifc_.ioctl(ifc_.userdata, fd, FIONBIO, &one), 0);
  sockaddr_in6 to{};
  to.sin6_family = AF_INET6;
  to.sin6_port = htons(9000);
  std::memcpy(&to.sin6_addr, kRemote6, 16);
  EXPECT_EQ(ifc_.connect(ifc_.userdata, fd, reinterpret_cast<sockaddr*>(&to), sizeof to), -1);
  EXPECT_EQ(errno, EINPROGRESS);
  const Seg syn = expect6();
  EXPECT_EQ(syn.flags, kSyn);
  EXPECT_EQ(syn.dport, 9000);
  inject6(Seg{9000, syn.sport, 5000, syn.seq + 1, kSyn | kAck, 65535, opt_syn(7), {}});
  const Seg ack = expect6();
  EXPECT_EQ(ack.flags, kAck);
  EXPECT_EQ(ack.ack, 5001u);
  EXPECT_EQ(ifc_.close(ifc_.userdata, fd), 0);
  (void)sniff6();  // its FIN

  inject6(Seg{40001, 81, 77, 0, kSyn, 65535, {}, {}});
  const Seg rst = expect6();
  EXPECT_EQ(rst.flags & kRst, kRst);
  EXPECT_EQ(rst.ack, 78u);
}

// --ip_version=ipv4-mapped-ipv6: AF_INET6 sockets, IPv4 on the wire.
TEST_F(Adapter, Ipv4MappedIpv6SocketsSpeakIpv4OnTheWire) {
  open("ip_version=ipv4-mapped-ipv6");
  const int lfd = ifc_.socket(ifc_.userdata, AF_INET6, SOCK_STREAM, IPPROTO_TCP);
  ASSERT_GE(lfd, 0);
  sockaddr_in6 any{};
  any.sin6_family = AF_INET6;
  any.sin6_port = htons(8085);
  ASSERT_EQ(ifc_.bind(ifc_.userdata, lfd, reinterpret_cast<sockaddr*>(&any), sizeof any), 0);
  ASSERT_EQ(ifc_.listen(ifc_.userdata, lfd, 1), 0);
  handshake(40002, 8085, 300);
  sockaddr_in6 peer{};
  socklen_t plen = sizeof peer;
  const int fd = ifc_.accept(ifc_.userdata, lfd, reinterpret_cast<sockaddr*>(&peer), &plen);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(peer.sin6_family, AF_INET6);
  EXPECT_TRUE(IN6_IS_ADDR_V4MAPPED(&peer.sin6_addr));
  std::uint32_t v4;
  std::memcpy(&v4, peer.sin6_addr.s6_addr + 12, 4);
  EXPECT_EQ(ntohl(v4), kRemote);
  EXPECT_EQ(ifc_.close(ifc_.userdata, fd), 0);
  EXPECT_EQ(ifc_.close(ifc_.userdata, lfd), 0);
}

TEST_F(Adapter, BadIpVersionFlagsFailClearly) {
  for (const char* bad : {"ip_version=ipv5", "ip_version=ipv6 local_ip=192.168.0.1", "local_ip=fd3d::1",
                          "ip_version=ipv6 gw=2001:db8::2", "ip_version=ipv6 prefix=128", "ip_version=ipv6 mtu=1000"}) {
    SCOPED_TRACE(bad);
    open(bad);
    errno = 0;
    EXPECT_EQ(ifc_.socket(ifc_.userdata, AF_INET6, SOCK_STREAM, 0), -1);
    EXPECT_EQ(errno, EINVAL);
  }
}

}  // namespace

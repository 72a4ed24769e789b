// xk-test-node: a node for filterd's integration tests, not an xk stack.
// It registers over the control socket (HELLO), opens the channel filterd
// offers (an shm link, or memif with the DPDK driver), and then
//   --sink-udp PORT   counts the UDP datagrams to PORT that filterd steers to
//                     it ("RX udp dport=PORT n=N" whenever N changes), and
//   --forge SPEC      sends hand-made frames from the shared address that the
//                     egress check must refuse: SPEC is
//                     tcp|udp:LOCAL_PORT:REMOTE_ADDR:REMOTE_PORT:COUNT (TCP
//                     segments are RSTs, so one that got out would break the
//                     connection it names). "SENT n=N" when they are out.
// As a node on another host it registers over TCP, proving filterd's token, and
// its MAC, on its own port (filterd's node port at the other end); with
// --forge-from its forged frames carry a source MAC no node has.
// It runs until SIGTERM or SIGINT. Test-only: tests/CMakeLists.txt builds it.
//
//   xk-test-node --filterd PATH --name NAME [--sink-udp PORT] [--forge SPEC]...
//   xk-test-node --filterd tcp:A.B.C.D:PORT --token FILE --port DEVARGS --mac MAC
//                [--forge-from MAC] [--forge SPEC]...

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xk/drivers/dpdk.hpp"
#include "xk/drivers/shm.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/control.hpp"
#include "xk/filterd/token.hpp"
#include "xk/msg.hpp"

namespace {

namespace ctl = xk::filterd::ctl;

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct Forge {
  std::uint8_t proto = 6;
  std::uint16_t local_port = 0;
  xk::Ipv4Addr remote;
  std::uint16_t remote_port = 0;
  int count = 0;
};

Forge parse_forge(const std::string& spec) {
  Forge f;
  char proto[8] = {};
  unsigned lport = 0, rport = 0, a = 0, b = 0, c = 0, d = 0;
  int count = 0;
  if (std::sscanf(spec.c_str(), "%7[a-z]:%u:%u.%u.%u.%u:%u:%d", proto, &lport, &a, &b, &c, &d, &rport, &count) != 8 ||
      (std::strcmp(proto, "tcp") != 0 && std::strcmp(proto, "udp") != 0) || lport == 0 || lport > 65535 ||
      rport == 0 || rport > 65535 || a > 255 || b > 255 || c > 255 || d > 255 || count < 1) {
    throw std::invalid_argument("--forge: '" + spec + "' is not tcp|udp:LPORT:A.B.C.D:RPORT:COUNT");
  }
  f.proto = proto[0] == 't' ? 6 : 17;
  f.local_port = static_cast<std::uint16_t>(lport);
  f.remote = xk::Ipv4Addr{(a << 24) | (b << 16) | (c << 8) | d};
  f.remote_port = static_cast<std::uint16_t>(rport);
  f.count = count;
  return f;
}

// The control connection: HELLO, then held open (closing it is leaving).
class Control {
 public:
  explicit Control(const std::string& path) {
    if (path.rfind("tcp:", 0) == 0) {
      // tcp:A.B.C.D:PORT
      const std::string rest = path.substr(4);
      const auto colon = rest.rfind(':');
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      if (colon == std::string::npos || ::inet_pton(AF_INET, rest.substr(0, colon).c_str(), &sa.sin_addr) != 1) {
        throw std::runtime_error("bad TCP address " + path);
      }
      sa.sin_port = htons(static_cast<std::uint16_t>(std::stoul(rest.substr(colon + 1))));
      fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        throw std::runtime_error("cannot connect to " + path + ": " + std::strerror(errno));
      }
      return;
    }
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof addr.sun_path) throw std::runtime_error("bad control path");
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("cannot connect to " + path + ": " + std::strerror(errno));
    }
  }
  ~Control() { ::close(fd_); }

  ctl::Message ask(ctl::Body body) {
    auto bytes = ctl::encode(ctl::Message{1, std::move(body)});
    if (!bytes || ::send(fd_, bytes->data(), bytes->size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes->size())) {
      throw std::runtime_error("cannot send to filterd");
    }
    for (;;) {
      ctl::ReadResult r = reader_.next();
      if (r.has_message()) return std::move(r).message();
      if (r.has_error()) throw std::runtime_error("bad reply: " + r.error().text);
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) throw std::runtime_error("no reply from filterd");
      std::byte buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) throw std::runtime_error("filterd closed the connection");
      reader_.feed(std::span<const std::byte>(buf, static_cast<std::size_t>(n)));
    }
  }

 private:
  int fd_ = -1;
  ctl::FrameReader reader_;
};

std::uint16_t checksum(const std::vector<std::byte>& b, std::size_t off, std::size_t len, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i + 1 < len; i += 2)
    sum += (std::to_integer<std::uint32_t>(b[off + i]) << 8) | std::to_integer<std::uint32_t>(b[off + i + 1]);
  if (len & 1) sum += std::to_integer<std::uint32_t>(b[off + len - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

void put16(std::vector<std::byte>& b, std::size_t at, std::uint16_t v) {
  b[at] = std::byte(v >> 8);
  b[at + 1] = std::byte(v & 0xFF);
}
void put32(std::vector<std::byte>& b, std::size_t at, std::uint32_t v) {
  put16(b, at, static_cast<std::uint16_t>(v >> 16));
  put16(b, at + 2, static_cast<std::uint16_t>(v));
}

// Ethernet / IPv4 from the shared address / a TCP RST or an empty UDP datagram.
std::vector<std::byte> forged_frame(const ctl::HelloReply& h, const Forge& f, std::uint16_t ip_id,
                                    const std::optional<xk::MacAddr>& from) {
  const std::size_t l4 = f.proto == 6 ? 20 : 8;
  std::vector<std::byte> b(14 + 20 + l4);
  std::memcpy(b.data(), h.filterd_mac.bytes.data(), 6);
  std::memcpy(b.data() + 6, (from ? *from : h.channels.front().node_mac).bytes.data(), 6);
  put16(b, 12, 0x0800);
  b[14] = std::byte{0x45};
  put16(b, 16, static_cast<std::uint16_t>(20 + l4));
  put16(b, 18, ip_id);
  put16(b, 20, 0x4000);  // DF
  b[22] = std::byte{64};
  b[23] = std::byte{f.proto};
  put32(b, 26, h.address.value);
  put32(b, 30, f.remote.value);
  put16(b, 24, checksum(b, 14, 20));
  put16(b, 34, f.local_port);
  put16(b, 36, f.remote_port);
  if (f.proto == 6) {
    put32(b, 38, 0x12345678u + ip_id);  // seq
    b[46] = std::byte{0x50};             // data offset 5
    b[47] = std::byte{0x04};             // RST
  } else {
    put16(b, 38, 8);
  }
  // Pseudo-header (RFC 9293 3.1, RFC 768).
  std::uint32_t sum = (h.address.value >> 16) + (h.address.value & 0xFFFF) + (f.remote.value >> 16) +
                      (f.remote.value & 0xFFFF) + f.proto + static_cast<std::uint32_t>(l4);
  put16(b, f.proto == 6 ? 50 : 40, checksum(b, 34, l4, sum));
  return b;
}

// The channel's receiver: counts the datagrams to the sink port.
class Sink final : public xk::Protocol {
 public:
  explicit Sink(std::uint16_t port) : xk::Protocol("sink", "test-sink"), port_(port) {}
  xk::Status demux(xk::Session&, xk::Msg msg) override {
    ++frames;
    if (port_ == 0 || msg.size() < 14 + 20 + 8) return {};
    auto p = msg.peek(14 + 20 + 8);
    if (!p) return {};
    const std::byte* f = p->data();
    if (std::to_integer<int>(f[12]) != 0x08 || std::to_integer<int>(f[13]) != 0x00 || std::to_integer<int>(f[23]) != 17)
      return {};
    const std::size_t ihl = (std::to_integer<std::size_t>(f[14]) & 0x0F) * 4;
    if (ihl != 20) return {};  // the tests send no IP options
    const auto dport = static_cast<std::uint16_t>((std::to_integer<int>(f[36]) << 8) | std::to_integer<int>(f[37]));
    if (dport == port_) ++datagrams;
    return {};
  }
  std::uint64_t frames = 0;
  std::uint64_t datagrams = 0;

 private:
  std::uint16_t port_;
};

// The node's one channel: its own --port (a node on another host), else
// the shm link or memif socket filterd's HELLO reply names. Frames of MTU
// size only, as filterd takes.
std::unique_ptr<xk::Driver> channel_driver(const ctl::HelloReply& h, const std::string& port, xk::EventLoop& loop) {
  const std::uint32_t id = h.channels.front().memif_id;
  if (std::optional<std::string> shm = ctl::shm_channel_path(h, id); port.empty() && shm) {
    xk::drivers::ShmDriver::Config sc;
    sc.path = *shm;
    sc.mtu = h.mtu;
    sc.frame_max = 0;
    return std::make_unique<xk::drivers::ShmDriver>("net0", sc, &loop);
  }
  xk::drivers::DpdkDriver::Config dc;
  dc.devargs = !port.empty() ? port : "net_memif0,role=client,id=" + std::to_string(id) + ",socket=" + h.memif_socket;
  dc.mtu = h.mtu;
  dc.mbufs = 2047;
  dc.frame_max = 0;
  return std::make_unique<xk::drivers::DpdkDriver>("net0", dc, &loop);
}

int run(int argc, char** argv) {
  std::string control, name = "test-node", token_file, port;
  std::optional<xk::MacAddr> mac, forge_from;
  std::uint16_t sink_port = 0;
  std::vector<Forge> forges;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--filterd") {
      control = value();
    } else if (a == "--name") {
      name = value();
    } else if (a == "--sink-udp") {
      sink_port = static_cast<std::uint16_t>(std::stoul(value()));
    } else if (a == "--forge") {
      forges.push_back(parse_forge(value()));
    } else if (a == "--token") {
      token_file = value();
    } else if (a == "--port") {
      port = value();
    } else if (a == "--mac" || a == "--forge-from") {
      const std::string v = value();
      auto m = xk::parse_mac(v);
      if (!m) throw std::invalid_argument(a + ": '" + v + "' is not a MAC");
      (a == "--mac" ? mac : forge_from) = *m;
    } else {
      throw std::invalid_argument("unknown argument '" + a + "'");
    }
  }
  if (control.empty()) throw std::invalid_argument("--filterd PATH is required");

  Control c(control);
  ctl::Hello hello;
  hello.name = name;
  hello.pid = static_cast<std::uint32_t>(::getpid());
  if (!token_file.empty()) {
    // Over TCP the token is proved, never sent (docs/control-protocol.md).
    const std::vector<std::byte> token = xk::filterd::read_token_file(token_file);
    const ctl::Nonce ours = ctl::fresh_nonce();
    ctl::Message a = c.ask(ctl::Auth{ours});
    const auto* ar = std::get_if<ctl::AuthReply>(&a.body);
    if (ar == nullptr) throw std::runtime_error("AUTH refused");
    if (!ctl::proofs_equal(ar->proof, ctl::server_proof(token, ours, ar->nonce))) {
      throw std::runtime_error("filterd did not prove it knows the token");
    }
    hello.proof = ctl::node_proof(token, ours, ar->nonce);
  }
  // On the node port: its MAC (its port's is left alone: it only sends).
  if (!port.empty()) hello.ethernet = mac.value_or(xk::MacAddr{});
  ctl::Message r = c.ask(hello);
  const auto* h = std::get_if<ctl::HelloReply>(&r.body);
  if (h == nullptr) {
    const auto* e = std::get_if<ctl::Error>(&r.body);
    throw std::runtime_error("HELLO refused: " + (e != nullptr ? e->text : std::string("?")));
  }

  xk::EventLoop loop;
  std::unique_ptr<xk::Driver> net = channel_driver(*h, port, loop);
  Sink sink(sink_port);
  xk::Participants none;
  if (xk::Status st = net->open_enable(sink, none); !st) throw std::runtime_error("cannot receive on the channel");

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (net->link_state() != xk::Driver::Link::up) {
    if (std::chrono::steady_clock::now() > deadline || g_stop.load()) throw std::runtime_error("channel link down");
    loop.run_once();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::printf("ready node=%u memif=%u\n", h->node_id, h->channels.front().memif_id);
  std::fflush(stdout);

  std::uint16_t ip_id = 1;
  int sent = 0;
  for (const Forge& f : forges) {
    for (int k = 0; k < f.count; ++k) {
      xk::Msg m = xk::Msg::copy_of(forged_frame(*h, f, ip_id++, forge_from), 0);
      while (net->send(m.share()) == xk::Status(xk::Errc::would_block)) {
        loop.flush_output();
        loop.run_once();
      }
      loop.flush_output();
      ++sent;
    }
  }
  if (!forges.empty()) {
    std::printf("SENT n=%d\n", sent);
    std::fflush(stdout);
  }

  std::uint64_t shown = ~std::uint64_t{0};
  // filterd may hold a silent node dead (heartbeat_ms): ping as asked.
  const auto beat = std::chrono::milliseconds(h->heartbeat_ms);
  auto next_ping = std::chrono::steady_clock::now() + beat;
  while (!g_stop.load()) {
    if (loop.run_once() == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
    if (beat.count() != 0 && std::chrono::steady_clock::now() >= next_ping) {
      (void)c.ask(ctl::Ping{});
      next_ping += beat;
    }
    if (sink_port != 0 && sink.datagrams != shown) {
      shown = sink.datagrams;
      std::printf("RX udp dport=%u n=%llu\n", sink_port, static_cast<unsigned long long>(shown));
      std::fflush(stdout);
    }
  }
  std::printf("EXIT frames=%llu datagrams=%llu\n", static_cast<unsigned long long>(sink.frames),
              static_cast<unsigned long long>(sink.datagrams));
  (void)net->open_disable(sink, none);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xk-test-node: %s\n", e.what());
    return 1;
  }
}

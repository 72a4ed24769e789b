// xk-memif-pingpong: the floor under every xk latency figure -- one Ethernet
// frame bounced between two processes over net_memif through the DPDK driver
// alone (no eth, ip or transport). tests/bench/tcp_bench.sh subtracts it from
// xk's TCP ping-pong to give the stack's own overhead.
//
//   xk-memif-pingpong server SOCKET
//   xk-memif-pingpong client SOCKET [--size 64] [--count 200000]
//
// The client prints `RESULT half_rtt_avg_us=... half_rtt_p50_us=...`.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "xk/drivers/dpdk.hpp"
#include "xk/event_loop.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// The driver's receiver: keeps the last frame that arrived.
class Catch final : public xk::Protocol {
 public:
  Catch() : Protocol("catch", "bench") {}
  xk::Result<xk::SessionRef> open(xk::Protocol&, xk::Participants&) override { return xk::Errc::unsupported; }
  xk::Status demux(xk::Session&, xk::Msg msg) override {
    frame = std::move(msg);
    ++frames;
    return {};
  }
  xk::Msg frame;
  std::uint64_t frames = 0;
};

int usage() {
  std::fputs("usage: xk-memif-pingpong server|client SOCKET [--size N] [--count N]\n", stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  std::string role = argv[1];
  std::string sock = argv[2];
  std::size_t size = 64;
  std::uint64_t count = 200000;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--size") == 0) size = std::max<std::size_t>(60, std::stoul(argv[i + 1]));
    else if (std::strcmp(argv[i], "--count") == 0) count = std::stoull(argv[i + 1]);
    else return usage();
  }
  if (role != "server" && role != "client") return usage();
  try {
    xk::drivers::DpdkDriver::Config c;
    c.devargs = role == "server" ? "net_memif0,role=server,id=0,socket=" + sock : "net_memif1,role=client,id=0,socket=" + sock;
    c.mbufs = 4095;
    c.frame_max = 0;  // MTU-sized frames: the ring as a filterd channel has it
    xk::drivers::DpdkDriver drv("net0", c);
    Catch up;
    xk::Participants parts;
    if (!drv.open_enable(up, parts)) return 1;
    std::printf("xk-memif-pingpong: %s ready, waiting for the link\n", role.c_str());
    std::fflush(stdout);
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!drv.link().up) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "xk-memif-pingpong: link down\n");
        return 1;
      }
      drv.poll(32);
    }
    if (role == "server") {
      // Bounce every frame until the client says it is done (a frame of 60 bytes
      // whose first byte is 0xff), or 60 s of silence.
      auto last = Clock::now();
      for (;;) {
        if (drv.poll(32) == 0) {
          if (Clock::now() - last > std::chrono::seconds(60)) break;
          continue;
        }
        last = Clock::now();
        if (up.frame.empty()) continue;
        std::byte first{};
        (void)up.frame.copy_out(0, std::span(&first, 1));
        bool bye = first == std::byte{0xff};
        (void)drv.transmit(up.frame);
        drv.flush();
        up.frame.reset();
        if (bye) break;
      }
      return 0;
    }
    std::vector<std::byte> bytes(size, std::byte{0x02});
    xk::Msg ping = xk::Msg::copy_of(bytes);
    std::vector<double> us;
    us.reserve(count);
    for (std::uint64_t i = 0; i < count + 1000; ++i) {
      auto t0 = Clock::now();
      (void)drv.transmit(ping);
      drv.flush();
      std::uint64_t want = up.frames + 1;
      auto limit = t0 + std::chrono::milliseconds(200);
      while (up.frames < want && Clock::now() < limit) drv.poll(32);
      if (up.frames < want) continue;  // lost: send the next
      if (i >= 1000) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::vector<std::byte> bye_bytes(60, std::byte{0xff});
    (void)drv.transmit(xk::Msg::copy_of(bye_bytes));
    drv.flush();
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double v : us) sum += v;
    double avg = us.empty() ? 0 : sum / static_cast<double>(us.size()) / 2;
    double p50 = us.empty() ? 0 : us[us.size() / 2] / 2;
    std::printf("RESULT size=%zu exchanges=%zu half_rtt_avg_us=%.3f half_rtt_p50_us=%.3f\n", size, us.size(), avg, p50);
    (void)drv.open_disable(up, parts);
    return us.size() == count ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xk-memif-pingpong: %s\n", e.what());
    return 1;
  }
}

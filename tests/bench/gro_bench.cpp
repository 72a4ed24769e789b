// Receive coalescing: the DPDK driver's own (drivers/dpdk/gro.cpp) against
// DPDK's librte_gro (rte_gro_reassemble_burst, lightweight mode) on the same
// rx burst: 44 in-order TCP segments of 1448 bytes of one flow, as one
// memif burst brings them. docs/libraries.md says what the figures decide.
//
// Every iteration allocates the 44 mbufs, fills them from prebuilt frames,
// coalesces and frees the result; BM_Gro_AllocFillFree is that frame work
// alone, so the coalescing costs the difference. librte_gro checks no
// checksum (DPDK's guide says so), so beside it runs librte_gro after a
// check of every segment's TCP checksum -- what a stack with checksums on
// would need before trusting a merged segment -- and ours with `carry`
// (no check: for stacks with checksums off) beside plain librte_gro.
#include <benchmark/benchmark.h>
#include <rte_eal.h>
#include <rte_ether.h>
#include <rte_gro.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gro.hpp"
#include "ratio.hpp"

namespace {

constexpr std::size_t kSegments = 44;
constexpr std::size_t kPayload = 1448;
constexpr std::size_t kHeaders = 14 + 20 + 20;
constexpr std::size_t kFrame = kHeaders + kPayload;

rte_mempool* g_pool = nullptr;
std::vector<std::array<std::byte, kFrame>> g_frames;

// One flow's in-order segments with correct IPv4 and TCP checksums.
void build_frames() {
  g_frames.resize(kSegments);
  for (std::size_t i = 0; i < kSegments; ++i) {
    std::byte* f = g_frames[i].data();
    std::memset(f, 0, kFrame);
    auto* eth = reinterpret_cast<rte_ether_hdr*>(f);
    const rte_ether_addr src{{0x02, 0, 0, 0, 0, 1}}, dst{{0x02, 0, 0, 0, 0, 2}};
    eth->src_addr = src;
    eth->dst_addr = dst;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(f + 14);
    ip->version_ihl = 0x45;
    ip->total_length = rte_cpu_to_be_16(static_cast<std::uint16_t>(20 + 20 + kPayload));
    ip->packet_id = rte_cpu_to_be_16(static_cast<std::uint16_t>(100 + i));
    ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
    ip->time_to_live = 64;
    ip->next_proto_id = IPPROTO_TCP;
    ip->src_addr = rte_cpu_to_be_32(0xC0000201);
    ip->dst_addr = rte_cpu_to_be_32(0xC0000202);
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(f + 34);
    tcp->src_port = rte_cpu_to_be_16(40000);
    tcp->dst_port = rte_cpu_to_be_16(5001);
    tcp->sent_seq = rte_cpu_to_be_32(static_cast<std::uint32_t>(1000 + i * kPayload));
    tcp->recv_ack = rte_cpu_to_be_32(77);
    tcp->data_off = 5 << 4;
    tcp->tcp_flags = RTE_TCP_ACK_FLAG;
    tcp->rx_win = rte_cpu_to_be_16(65535);
    for (std::size_t k = 0; k < kPayload; ++k) f[kHeaders + k] = std::byte(static_cast<unsigned char>(i * 7 + k));
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    tcp->cksum = rte_ipv4_udptcp_cksum(ip, tcp);
  }
}

// The rx burst as the driver sees it: lengths and packet type set, the
// checksum state unknown (no PMD here checks them).
bool fill(std::array<rte_mbuf*, kSegments>& burst) {
  if (rte_pktmbuf_alloc_bulk(g_pool, burst.data(), kSegments) != 0) return false;
  for (std::size_t i = 0; i < kSegments; ++i) {
    rte_mbuf* m = burst[i];
    std::memcpy(rte_pktmbuf_mtod(m, void*), g_frames[i].data(), kFrame);
    m->data_len = static_cast<std::uint16_t>(kFrame);
    m->pkt_len = kFrame;
    m->packet_type = RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_TCP;
    m->l2_len = 14;
    m->l3_len = 20;
    m->l4_len = 20;
  }
  return true;
}

void release(rte_mbuf** frames, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) rte_pktmbuf_free(frames[i]);
}

template <class Coalesce>
void run(benchmark::State& state, Coalesce&& coalesce) {
  std::array<rte_mbuf*, kSegments> burst{};
  std::size_t out = 0;
  for (auto _ : state) {
    if (!fill(burst)) {
      state.SkipWithError("out of mbufs");
      return;
    }
    out = coalesce(burst.data(), kSegments);
    release(burst.data(), out);
  }
  state.counters["frames_out"] = static_cast<double>(out);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kSegments * kPayload));
}

void BM_Gro_AllocFillFree(benchmark::State& state) {
  run(state, [](rte_mbuf**, std::size_t n) { return n; });
}
BENCHMARK(BM_Gro_AllocFillFree);

void BM_Gro_Xk_Verify(benchmark::State& state) {
  xk::drivers::gro::Stats st;
  run(state, [&](rte_mbuf** b, std::size_t n) { return xk::drivers::gro::coalesce(b, n, xk::drivers::gro::Csum::verify, st); });
}
BENCHMARK(BM_Gro_Xk_Verify);

void BM_Gro_Xk_Carry(benchmark::State& state) {
  xk::drivers::gro::Stats st;
  run(state, [&](rte_mbuf** b, std::size_t n) { return xk::drivers::gro::coalesce(b, n, xk::drivers::gro::Csum::carry, st); });
}
BENCHMARK(BM_Gro_Xk_Carry);

rte_gro_param gro_param() {
  rte_gro_param p{};
  p.gro_types = RTE_GRO_TCP_IPV4;
  p.max_flow_num = 8;
  p.max_item_per_flow = kSegments;
  p.socket_id = 0;
  return p;
}

void BM_Gro_Rte(benchmark::State& state) {
  rte_gro_param p = gro_param();
  run(state, [&](rte_mbuf** b, std::size_t n) {
    return static_cast<std::size_t>(rte_gro_reassemble_burst(b, static_cast<std::uint16_t>(n), &p));
  });
}
BENCHMARK(BM_Gro_Rte);

void BM_Gro_Rte_AfterVerify(benchmark::State& state) {
  rte_gro_param p = gro_param();
  std::size_t bad = 0;
  run(state, [&](rte_mbuf** b, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      auto* ip = rte_pktmbuf_mtod_offset(b[i], rte_ipv4_hdr*, 14);
      auto* tcp = rte_pktmbuf_mtod_offset(b[i], rte_tcp_hdr*, 34);
      // The pseudo-header and the segment sum to 0xffff when it is intact.
      std::uint32_t sum = rte_ipv4_phdr_cksum(ip, 0);
      sum += rte_raw_cksum(tcp, 20 + kPayload);
      sum = (sum & 0xffff) + (sum >> 16);
      sum = (sum & 0xffff) + (sum >> 16);
      if (sum != 0xffff) ++bad;
    }
    return static_cast<std::size_t>(rte_gro_reassemble_burst(b, static_cast<std::uint16_t>(n), &p));
  });
  state.counters["bad"] = static_cast<double>(bad);
}
BENCHMARK(BM_Gro_Rte_AfterVerify);

}  // namespace

int main(int argc, char** argv) {
  const std::string prefix = "xk-bench-gro-" + std::to_string(getpid());
  std::vector<std::string> eal = {"xk_bench_gro", "--no-huge", "-m", "256", "--no-pci", "--file-prefix", prefix,
                                  "--log-level", "lib.eal:error", "--no-telemetry"};
  std::vector<char*> eal_argv;
  for (std::string& a : eal) eal_argv.push_back(a.data());
  if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
    std::fprintf(stderr, "xk_bench_gro: the EAL did not start\n");
    return 1;
  }
  g_pool = rte_pktmbuf_pool_create("gro_bench", 4096, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  if (g_pool == nullptr) {
    std::fprintf(stderr, "xk_bench_gro: no mbuf pool\n");
    return 1;
  }
  build_frames();
  const int rc = xk::bench::run_with_ratios(
      argc, argv,
      {{"GRO of a 44-segment burst, checksums checked: xk (verify) / librte_gro after a per-segment check",
        "BM_Gro_Xk_Verify", "BM_Gro_Rte_AfterVerify", xk::bench::Metric::bytes_per_second, 1.0, ""},
       {"GRO of a 44-segment burst, no checksum check: xk (carry) / librte_gro", "BM_Gro_Xk_Carry", "BM_Gro_Rte",
        xk::bench::Metric::bytes_per_second, 1.0, ""}});
  rte_eal_cleanup();
  return rc;
}

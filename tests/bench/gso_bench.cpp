// Segmentation offload in software: the DPDK driver's own (transmit_segmented,
// drivers/dpdk/dpdk.cpp) against DPDK's librte_gso (rte_gso_segment), each
// taking the same 64 KB TCP segment from the stack (a Msg: headers and 45
// segments of 1448 bytes) to 45 frames with IPv4 and TCP checksums, sent on
// a net_ring port and drained from it. docs/libraries.md says what the
// figures decide.
//
// Ours: push() the Msg marked tx_tcp_seg; the driver cuts it while it
// attaches the payload to mbufs (tx_extbuf: no copy) and sums each piece's
// checksum as it goes. librte_gso's way: the Msg as an mbuf chain (a header
// mbuf, the payload attached as an external buffer: no copy either),
// rte_gso_segment into header mbufs and indirect mbufs, then both checksums
// of every piece (librte_gso computes none), then the same tx burst.
#include <benchmark/benchmark.h>
#include <rte_ethdev.h>
#include <rte_gso.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ratio.hpp"
#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"
#include "xk/drivers/dpdk.hpp"
#include "xk/event_loop.hpp"
#include "xk/msg.hpp"
#include "xk/protocol.hpp"

namespace {

using xk::drivers::DpdkDriver;

constexpr std::size_t kSeg = 1448;
constexpr std::size_t kPieces = 45;
constexpr std::size_t kPayload = kSeg * kPieces;
constexpr std::size_t kHeaders = 14 + 20 + 20;

// A protocol above the driver that takes nothing (the ring is drained by hand).
class Nobody final : public xk::Protocol {
 public:
  Nobody() : Protocol("nobody0", "nobody") {}
  xk::Status demux(xk::Session&, xk::Msg) override { return {}; }
};

struct World {
  xk::EventLoop loop;
  std::unique_ptr<DpdkDriver> drv;
  Nobody above;
  xk::Participants parts;
  xk::SessionRef session;
  rte_mempool* pool = nullptr;  // librte_gso's side
  std::vector<std::byte> frame = std::vector<std::byte>(kHeaders + kPayload);
  rte_mbuf_ext_shared_info shinfo{};
};
World* g = nullptr;

void build_frame(std::vector<std::byte>& f) {
  std::byte* p = f.data();
  const std::array<std::uint8_t, 12> macs = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1};
  std::memcpy(p, macs.data(), 12);
  xk::store_be16(p + 12, 0x0800);
  std::byte* ip = p + 14;
  ip[0] = std::byte{0x45};
  xk::store_be16(ip + 2, static_cast<std::uint16_t>(40 + kPayload));  // what a TSO frame says (wraps, unused)
  xk::store_be16(ip + 4, 0x1234);
  xk::store_be16(ip + 6, 0x4000);
  ip[8] = std::byte{64};
  ip[9] = std::byte{6};
  xk::store_be32(ip + 12, 0xC0000201);
  xk::store_be32(ip + 16, 0xC0000202);
  std::byte* tcp = ip + 20;
  xk::store_be16(tcp, 40000);
  xk::store_be16(tcp + 2, 5001);
  xk::store_be32(tcp + 4, 1000);
  xk::store_be32(tcp + 8, 77);
  tcp[12] = std::byte{5 << 4};
  tcp[13] = std::byte{0x10};
  xk::store_be16(tcp + 14, 65535);
  for (std::size_t i = 0; i < kPayload; ++i) p[kHeaders + i] = std::byte(static_cast<unsigned char>(i * 13 + 5));
}

xk::Msg stack_segment() {
  xk::Msg m = xk::Msg::copy_of(g->frame);
  m.offload().flags = xk::Offload::tx_tcp_seg | xk::Offload::tx_tcp_csum;
  m.offload().seg_size = kSeg;
  return m;
}

// Takes what the ring holds; returns the frames and whether each piece's
// IPv4 and TCP checksums are right (only when asked: outside the timing).
std::size_t drain(bool check, std::size_t* bad = nullptr) {
  std::array<rte_mbuf*, 64> got{};
  std::size_t total = 0;
  for (;;) {
    const std::uint16_t n = rte_eth_rx_burst(g->drv->port_id(), 0, got.data(), got.size());
    if (n == 0) break;
    for (std::uint16_t i = 0; i < n && check; ++i) {
      std::array<std::byte, 2048> flat{};
      const std::size_t len = rte_pktmbuf_pkt_len(got[i]);
      const auto* p = static_cast<const std::byte*>(rte_pktmbuf_read(got[i], 0, len, flat.data()));
      const std::byte* ip = p + 14;
      const std::uint16_t tcp_len = static_cast<std::uint16_t>(len - 34);
      const std::uint32_t ph = xk::csum::pseudo_header_v4(xk::Ipv4Addr{xk::load_be32(ip + 12)},
                                                          xk::Ipv4Addr{xk::load_be32(ip + 16)}, 6, tcp_len);
      if (len != kHeaders + kSeg || xk::csum::fold(xk::csum::partial(ip, 20)) != 0xffff ||
          xk::csum::fold(xk::csum::partial(ip + 20, tcp_len, ph)) != 0xffff) {
        ++*bad;
      }
    }
    rte_pktmbuf_free_bulk(got.data(), n);
    total += n;
  }
  return total;
}

void BM_Gso_Xk(benchmark::State& state) {
  xk::Msg segment = stack_segment();
  for (auto _ : state) {
    if (!g->session->push(segment.share()).ok()) {
      state.SkipWithError("push failed");
      return;
    }
    (void)g->drv->flush();
    benchmark::DoNotOptimize(drain(false));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kPayload));
}
BENCHMARK(BM_Gso_Xk);

void no_free(void*, void*) {}

// librte_gso's way, one segment: false when it could not.
bool rte_segment_and_send() {
  static rte_gso_ctx ctx = [] {
    rte_gso_ctx c{};
    c.direct_pool = g->pool;
    c.indirect_pool = g->pool;
    c.gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO;
    c.gso_size = static_cast<std::uint16_t>(kHeaders + kSeg);
    c.flag = 0;
    return c;
  }();
  std::array<rte_mbuf*, 64> out{};
  // The stack's segment as an mbuf chain: the headers copied, the payload attached.
  rte_mbuf* head = rte_pktmbuf_alloc(g->pool);
  rte_mbuf* body = rte_pktmbuf_alloc(g->pool);
  if (head == nullptr || body == nullptr) return false;
  std::memcpy(rte_pktmbuf_mtod(head, void*), g->frame.data(), kHeaders);
  head->data_len = kHeaders;
  g->shinfo.free_cb = no_free;
  rte_mbuf_ext_refcnt_set(&g->shinfo, 1);
  rte_pktmbuf_attach_extbuf(body, g->frame.data() + kHeaders, RTE_BAD_IOVA, static_cast<std::uint16_t>(kPayload),
                            &g->shinfo);
  body->data_len = static_cast<std::uint16_t>(kPayload);
  head->next = body;
  head->nb_segs = 2;
  head->pkt_len = kHeaders + kPayload;
  head->l2_len = 14;
  head->l3_len = 20;
  head->l4_len = 20;
  head->tso_segsz = kSeg;
  head->ol_flags = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
  const int n = rte_gso_segment(head, &ctx, out.data(), out.size());
  rte_pktmbuf_free(head);  // the pieces hold their own references
  if (n <= 0) return false;
  for (int i = 0; i < n; ++i) {
    rte_mbuf* m = out[static_cast<std::size_t>(i)];
    auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, 14);
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    auto* tcp = rte_pktmbuf_mtod_offset(m, rte_tcp_hdr*, 34);
    tcp->cksum = 0;
    std::uint16_t body_sum = 0;
    (void)rte_raw_cksum_mbuf(m, 34, m->pkt_len - 34, &body_sum);
    std::uint32_t sum = static_cast<std::uint32_t>(body_sum) + rte_ipv4_phdr_cksum(ip, 0);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    tcp->cksum = static_cast<std::uint16_t>(~sum & 0xffff);
    m->ol_flags = 0;
  }
  const std::uint16_t sent = rte_eth_tx_burst(g->drv->port_id(), 0, out.data(), static_cast<std::uint16_t>(n));
  if (sent < n) rte_pktmbuf_free_bulk(out.data() + sent, static_cast<unsigned>(n - sent));
  return true;
}

void BM_Gso_Rte(benchmark::State& state) {
  for (auto _ : state) {
    if (!rte_segment_and_send()) {
      state.SkipWithError("librte_gso could not cut the segment");
      return;
    }
    benchmark::DoNotOptimize(drain(false));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kPayload));
}
BENCHMARK(BM_Gso_Rte);

// One pass of each, checked: 45 frames of 1448 bytes with good checksums.
bool check_both() {
  std::size_t bad_ours = 0, bad_rte = 0;
  (void)g->session->push(stack_segment());
  (void)g->drv->flush();
  const std::size_t ours = drain(true, &bad_ours);
  const std::size_t rte = rte_segment_and_send() ? drain(true, &bad_rte) : 0;
  std::printf("check: xk's driver made %zu frames (%zu bad), librte_gso and the checksums %zu (%zu bad)\n", ours,
              bad_ours, rte, bad_rte);
  return ours == kPieces && rte == kPieces && bad_ours == 0 && bad_rte == 0;
}

}  // namespace

int main(int argc, char** argv) {
  xk::drivers::dpdk::EalConfig eal;
  eal.memory_mb = 256;
  xk::drivers::dpdk::ensure_eal(eal);
  World w;
  g = &w;
  DpdkDriver::Config c;
  c.devargs = "net_ring0,nodeaction=rnet_ring0:0:CREATE";
  c.mbufs = 4095;
  c.gro = false;
  w.drv = std::make_unique<DpdkDriver>("net0", c, &w.loop);
  if (!w.drv->open_enable(w.above, w.parts).ok()) return 1;
  auto s = w.drv->open(w.above, w.parts);
  if (!s) return 1;
  w.session = *s;
  w.pool = rte_pktmbuf_pool_create("gso_bench", 4095, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  if (w.pool == nullptr) return 1;
  build_frame(w.frame);
  if (!check_both()) std::printf("check failed: the figures below compare unequal work\n");
  const int rc = xk::bench::run_with_ratios(
      argc, argv,
      {{"software GSO, 64 KB into 45 frames with checksums: xk's driver / librte_gso + checksums", "BM_Gso_Xk",
        "BM_Gso_Rte", xk::bench::Metric::bytes_per_second, 1.0, ""}});
  w.session = nullptr;
  (void)w.drv->open_disable(w.above, w.parts);
  w.drv.reset();
  return rc;
}

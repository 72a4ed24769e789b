// getsockopt(TCP_INFO) in the layout of Linux's struct tcp_info, which
// programs written for Linux read (ss-style monitors, iperf3, nginx's
// $tcpinfo_*). Its own translation unit: <linux/tcp.h> and glibc's
// <netinet/tcp.h> cannot meet in one.

#include <linux/tcp.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "socket_api_tcp_info.hpp"

namespace xk::capi {
namespace {

// Linux's numbering of the TCP states (include/net/tcp_states.h).
std::uint8_t linux_state(tcp::State s) noexcept {
  switch (s) {
    case tcp::State::established: return 1;
    case tcp::State::syn_sent: return 2;
    case tcp::State::syn_received: return 3;
    case tcp::State::fin_wait_1: return 4;
    case tcp::State::fin_wait_2: return 5;
    case tcp::State::time_wait: return 6;
    case tcp::State::closed: return 7;
    case tcp::State::close_wait: return 8;
    case tcp::State::last_ack: return 9;
    case tcp::State::listen: return 10;
    case tcp::State::closing: return 11;
  }
  return 7;
}

std::uint32_t us(Duration d) noexcept {
  return static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

}  // namespace

std::size_t linux_tcp_info(const tcp::ConnStats& st, void* out, std::size_t len) noexcept {
  tcp_info t{};
  t.tcpi_state = linux_state(st.state);
  t.tcpi_options = static_cast<std::uint8_t>((st.timestamps ? TCPI_OPT_TIMESTAMPS : 0) | (st.sack ? TCPI_OPT_SACK : 0) |
                                             (st.snd_wscale != 0 || st.rcv_wscale != 0 ? TCPI_OPT_WSCALE : 0) |
                                             (st.ecn ? TCPI_OPT_ECN : 0));
  t.tcpi_snd_wscale = st.snd_wscale & 0xf;
  t.tcpi_rcv_wscale = st.rcv_wscale & 0xf;
  t.tcpi_rto = us(st.rto);
  t.tcpi_snd_mss = st.mss;
  t.tcpi_rcv_mss = st.mss;
  t.tcpi_advmss = st.mss;
  const std::uint32_t mss = std::max<std::uint32_t>(st.mss, 1);
  t.tcpi_unacked = (st.unacked + mss - 1) / mss;  // segments, as Linux counts
  t.tcpi_pmtu = st.pmtu;
  t.tcpi_rtt = us(st.srtt);
  t.tcpi_rttvar = us(st.rttvar);
  t.tcpi_snd_cwnd = st.cwnd / mss;
  // Linux reports an unset slow-start threshold as "infinite".
  t.tcpi_snd_ssthresh = st.ssthresh >= (0x7fffffffu / mss) * mss ? 0x7fffffffu : st.ssthresh / mss;
  t.tcpi_total_retrans = static_cast<std::uint32_t>(st.retransmits);
  t.tcpi_bytes_acked = st.bytes_acked;
  t.tcpi_bytes_received = st.bytes_received;
  t.tcpi_segs_out = static_cast<std::uint32_t>(st.segs_out);
  t.tcpi_segs_in = static_cast<std::uint32_t>(st.segs_in);
  t.tcpi_notsent_bytes = st.notsent;
  t.tcpi_bytes_sent = st.bytes_sent;
  t.tcpi_rcv_ooopack = static_cast<std::uint32_t>(st.ooo_segments);
  t.tcpi_rcv_rtt = st.rcv_rtt_us;
  t.tcpi_rcv_space = st.rcv_space;
  t.tcpi_snd_wnd = st.snd_wnd;
  const std::size_t n = std::min(len, sizeof t);
  std::memcpy(out, &t, n);
  return n;
}

}  // namespace xk::capi

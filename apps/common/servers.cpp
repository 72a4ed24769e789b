#include "xk/apps/servers.hpp"

#include <algorithm>
#include <cstdio>

namespace xk::apps {

// ---- TCP echo ------------------------------------------------------------------

TcpEchoServer::TcpEchoServer(const char* prog, tcp::TcpListener& listener, EventLoop& loop, std::uint64_t stop_after,
                             bool copy)
    : prog_(prog), listener_(listener), loop_(loop), stop_after_(stop_after), copy_(copy) {}

TcpEchoServer::~TcpEchoServer() = default;

std::size_t TcpEchoServer::poll(std::size_t) {
  std::size_t work = 0;
  while (auto s = listener_.accept()) {
    s->set_nodelay(true);  // an echo goes back at once
    conns_.push_back(std::make_unique<Conn>(std::move(*s)));
    ++work;
  }
  for (auto& c : conns_) work += serve(*c);
  std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->done; });
  if (stop_after_ != 0 && finished_ >= stop_after_ && conns_.empty()) loop_.stop();
  return work;
}

bool TcpEchoServer::before_sleep() noexcept {
  if (listener_.events() & tcp::ev_acceptable) return false;
  return std::none_of(conns_.begin(), conns_.end(), [](const std::unique_ptr<Conn>& c) {
    // An echo waiting for room reads nothing more until it has left: then
    // only room wakes it, else something to read.
    const bool unsent = !c->pending.empty() || c->left > 0;
    return (c->sock.events() & (unsent ? tcp::ev_writable | tcp::ev_error : tcp::ev_readable)) != 0;
  });
}

std::size_t TcpEchoServer::serve(Conn& c) {
  if (copy_) return serve_copy(c);
  std::size_t work = 0;
  for (int i = 0; i < 64; ++i) {
    while (!c.pending.empty()) {
      if (!c.sock.write(c.pending.front())) return work;  // the send buffer is full: the rest later
      c.pending.pop_front();
    }
    auto m = c.sock.read_msg(std::size_t{1} << 20);
    if (!m) {
      if (m.error() == Errc::would_block) return work;
      return work + fail(c, m.error());
    }
    ++work;
    if (m->empty()) {  // the peer is done: close our side too
      finish(c);
      return work;
    }
    bytes_ += m->size();
    c.pending.push_back(std::move(*m));
  }
  return work;
}

std::size_t TcpEchoServer::serve_copy(Conn& c) {
  if (c.buf.empty()) c.buf.resize(std::size_t{128} << 10);
  std::size_t work = 0;
  for (int i = 0; i < 64; ++i) {
    while (c.left > 0) {
      auto w = c.sock.write(std::span<const std::byte>(c.buf).subspan(c.off, c.left));
      if (!w) {
        if (w.error() == Errc::would_block) return work;
        return work + fail(c, w.error());
      }
      c.off += *w;
      c.left -= *w;
    }
    auto r = c.sock.read(c.buf);
    if (!r) {
      if (r.error() == Errc::would_block) return work;
      return work + fail(c, r.error());
    }
    ++work;
    if (*r == 0) {  // the peer is done: close our side too
      finish(c);
      return work;
    }
    bytes_ += *r;
    c.off = 0;
    c.left = *r;
  }
  return work;
}

std::size_t TcpEchoServer::fail(Conn& c, Errc e) {
  std::fprintf(stderr, "%s: echo connection: %s\n", prog_, to_string(e));
  ++failures_;
  finish(c);
  return 1;
}

void TcpEchoServer::finish(Conn& c) {
  (void)c.sock.close();
  c.done = true;
  ++finished_;
}

// ---- UDP echo ------------------------------------------------------------------

UdpEchoServer::UdpEchoServer(const char* prog, udp::UdpSocket& sock, EventLoop& loop, std::uint64_t stop_after,
                             bool quiet)
    : prog_(prog), sock_(sock), loop_(loop), stop_after_(stop_after), quiet_(quiet) {}

std::size_t UdpEchoServer::poll(std::size_t budget) {
  std::size_t n = 0;
  while (n < budget) {
    auto d = sock_.recvfrom();
    if (!d) {
      if (d.error() == Errc::would_block) break;
      ++errors_;  // an ICMP error reported on the socket: nothing to echo
      ++n;
      continue;
    }
    ++n;
    ++received_;
    bytes_ += d->payload.size();
    if (Status s = sock_.sendto(std::move(d->payload), d->from, d->from_port); s.ok()) {
      ++echoed_;
    } else {
      ++send_errors_;
      if (!quiet_ && send_errors_ <= 10) {
        std::fprintf(stderr, "%s: echo to %s:%u failed: %s\n", prog_, to_string(d->from).c_str(), d->from_port.value,
                     to_string(s.error()));
      }
    }
    if (stop_after_ != 0 && received_ >= stop_after_) {
      loop_.stop();
      break;
    }
  }
  return n;
}

// ---- TCP helpers -----------------------------------------------------------------

void finish_handshakes(EventLoop& loop, tcp::TcpProtocol& tcp, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until && tcp.connection_count() != tcp.time_wait_count()) loop.run_once();
}

void print_conn_stats(const char* who, const tcp::TcpSocket& s) {
  tcp::ConnStats st = s.stats();
  std::printf("STATS who=%s srtt_us=%.1f rto_ms=%.1f cwnd=%u mss=%u snd_wscale=%u rcv_wscale=%u sack=%d ts=%d "
              "segs_out=%llu segs_in=%llu retransmits=%llu rto_expiries=%llu spurious_rtos=%llu fast_retransmits=%llu\n",
              who, std::chrono::duration<double, std::micro>(st.srtt).count(),
              std::chrono::duration<double, std::milli>(st.rto).count(), st.cwnd, st.mss, st.snd_wscale, st.rcv_wscale,
              st.sack ? 1 : 0, st.timestamps ? 1 : 0, static_cast<unsigned long long>(st.segs_out),
              static_cast<unsigned long long>(st.segs_in), static_cast<unsigned long long>(st.retransmits),
              static_cast<unsigned long long>(st.rto_expiries), static_cast<unsigned long long>(st.spurious_rtos),
              static_cast<unsigned long long>(st.fast_retransmits));
}

}  // namespace xk::apps

#pragma once
// ICMP for a host (RFC 792, RFC 1122 3.2.2). See docs/ipv4-icmp.md.
//
//   icmp icmp0 below=ip0 [err_rate=100] [err_burst=50]
//
// - Enables protocol 1 on ipv4 and answers echo requests (not those sent to a
//   broadcast address: counted and ignored, as Linux does by default).
// - Sends destination unreachables for ipv4 (port, protocol, frag-needed),
//   quoting the offending IP header and 8 bytes of its payload, rate-limited
//   by a token bucket (RFC 1812 4.3.2.8).
// - Parses received unreachable / time exceeded / parameter problem
//   messages and hands them to ipv4 as ctl::NetError, which passes them to
//   the transport that owns the quoted protocol number.
//
// It keeps no state per peer: the ipv4 session a passive open makes for each
// message is closed again once the message is handled.

#include <cstdint>

#include "xk/clock.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"
#include "xk/token_bucket.hpp"
#include "xk/protocols/icmp_wire.hpp"
#include "xk/protocols/ipv4.hpp"

namespace xk::icmp {

struct Config {
  double err_rate = 100;  // error messages per second, long term
  double err_burst = 50;  // and in one burst
};

class IcmpProtocol final : public Protocol, public ipv4::IcmpErrorSink {
 public:
  // `clock` drives the rate limiter; null: the monotonic clock.
  IcmpProtocol(std::string name, ipv4::Ipv4Protocol& ip, const Clock* clock, Config config);
  ~IcmpProtocol() override;

  Status open_done(Protocol& lower, Session& session, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;

  // Destination unreachable about `original` (from its IP header on) to its
  // source. code 4 (frag needed) carries `next_hop_mtu`. Refused (bad_state)
  // about an ICMP error, a non-first fragment, or a broadcast/multicast
  // packet; would_block when the rate limit says no.
  Status send_dest_unreachable(std::uint8_t code, const Msg& original, std::uint16_t next_hop_mtu) override;

 private:
  Status handle(const RxInfo* info, Msg& msg);
  Status handle_error(const Header& h, Msg& msg);

  ipv4::Ipv4Protocol& ip_;
  MonotonicClock own_clock_;
  const Clock& clock_;
  Config config_;
  TokenBucket error_limit_;  // on the errors we send
  bool enabled_ = false;

  Counter& rx_msgs_;
  Counter& drop_truncated_;
  Counter& drop_bad_csum_;
  Counter& drop_malformed_;
  Counter& rx_echo_request_;
  Counter& drop_echo_broadcast_;
  Counter& tx_echo_reply_;
  Counter& rx_echo_reply_;
  Counter& rx_errors_;
  Counter& drop_error_not_ours_;
  Counter& drop_error_no_owner_;
  Counter& rx_other_;
  Counter& tx_dest_unreach_;
  Counter& tx_suppressed_;
  Counter& tx_rate_limited_;
  Counter& drop_tx_;
};

// Make the kind `icmp` available to graph specs (below= one ipv4).
void register_icmp(Registry& registry);

}  // namespace xk::icmp

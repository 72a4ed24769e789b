#pragma once
// ICMPv6 for a host (RFC 4443). See docs/ipv6.md.
//
//   icmpv6 icmp6 below=ip6[,nd0] [err_rate=100] [err_burst=50]
//
// - Enables next header 58 on ipv6, checks every message's checksum over
//   the pseudo-header, answers echo requests (to a group too: RFC 4443
//   4.1 lets a node answer, and `ping ff02::1` expects it).
// - Sends the errors ipv6 asks for (destination unreachable, parameter
//   problem, packet too big), quoting as much of the offending packet as
//   fits in 1280 bytes (2.4 c), never about an error, a packet to a group
//   (but Packet Too Big and the options that ask for it) or from no one
//   host (2.4 e), rate-limited by a token bucket (2.4 f).
// - Hands received errors to ipv6 as ctl::NetError for the transport that
//   owns the quoted packet; Packet Too Big lowers the path MTU first
//   (RFC 8201), so the transport's next segment fits.
// - Hands Neighbor Discovery and MLD messages to nd (below[1]), which
//   keeps the neighbour cache and our addresses' duplicate checks.

#include <cstdint>

#include "xk/clock.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"
#include "xk/token_bucket.hpp"
#include "xk/protocols/icmpv6_wire.hpp"
#include "xk/protocols/ipv6.hpp"
#include "xk/protocols/nd.hpp"

namespace xk::icmpv6 {

struct Config {
  double err_rate = 100;  // error messages per second, long term
  double err_burst = 50;  // and in one burst
};

class Icmpv6Protocol final : public Protocol, public ipv6::IcmpErrorSink {
 public:
  // `nd` may be null (a bare IP link has no neighbours). `clock` drives the
  // rate limiter; null: the monotonic clock.
  Icmpv6Protocol(std::string name, ipv6::Ipv6Protocol& ip, nd::NdProtocol* nd, const Clock* clock, Config config);
  ~Icmpv6Protocol() override;

  Status open_done(Protocol& lower, Session& session, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;

  Status send_error(std::uint8_t type, std::uint8_t code, std::uint32_t param, const Msg& original) override;

 private:
  Status handle(const RxInfo& info, Msg& msg);
  Status handle_error(const Header& h, Msg& msg);

  ipv6::Ipv6Protocol& ip_;
  nd::NdProtocol* nd_;
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
  Counter& tx_echo_reply_;
  Counter& rx_echo_reply_;
  Counter& rx_errors_;
  Counter& rx_packet_too_big_;
  Counter& drop_error_not_ours_;
  Counter& drop_error_no_owner_;
  Counter& rx_nd_;
  Counter& drop_nd_no_resolver_;
  Counter& rx_other_;
  Counter& tx_errors_;
  Counter& tx_suppressed_;
  Counter& tx_rate_limited_;
  Counter& drop_tx_;
};

// Make the kind `icmpv6` available to graph specs (below= ipv6[, nd]).
void register_icmpv6(Registry& registry);

}  // namespace xk::icmpv6

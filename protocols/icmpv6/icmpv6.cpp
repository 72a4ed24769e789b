#include "xk/protocols/icmpv6.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <vector>

#include "xk/checksum.hpp"
#include "xk/event_loop.hpp"

namespace xk::icmpv6 {

namespace {

bool for_nd(std::uint8_t type) noexcept {
  return type == kMldQuery || (type >= kRouterSolicit && type <= kRedirect);
}

}  // namespace

Icmpv6Protocol::Icmpv6Protocol(std::string name, ipv6::Ipv6Protocol& ip, nd::NdProtocol* nd, const Clock* clock,
                               Config config)
    : Protocol(std::move(name), "icmpv6", nd != nullptr ? std::vector<Protocol*>{&ip, nd} : std::vector<Protocol*>{&ip}),
      ip_(ip),
      nd_(nd),
      clock_(clock != nullptr ? *clock : own_clock_),
      config_(config),
      error_limit_(clock_, config.err_rate, config.err_burst),
      rx_msgs_(counters().add("rx_msgs")),
      drop_truncated_(counters().add("drop_truncated", "shorter than the ICMPv6 header")),
      drop_bad_csum_(counters().add("drop_bad_csum")),
      drop_malformed_(counters().add("drop_malformed", "error message with a bad quoted header")),
      rx_echo_request_(counters().add("rx_echo_request")),
      tx_echo_reply_(counters().add("tx_echo_reply")),
      rx_echo_reply_(counters().add("rx_echo_reply")),
      rx_errors_(counters().add("rx_errors", "errors handed to ipv6 for a transport")),
      rx_packet_too_big_(counters().add("rx_packet_too_big", "Packet Too Big that reached the path MTU")),
      drop_error_not_ours_(counters().add("drop_error_not_ours", "quoted packet not from our address")),
      drop_error_no_owner_(counters().add("drop_error_no_owner", "no transport owns the quoted packet")),
      rx_nd_(counters().add("rx_nd", "Neighbor Discovery and MLD messages handed to nd")),
      drop_nd_no_resolver_(counters().add("drop_nd_no_resolver", "ND messages without an nd below")),
      rx_other_(counters().add("rx_other", "types we do not act on")),
      tx_errors_(counters().add("tx_errors")),
      tx_suppressed_(counters().add("tx_suppressed", "errors not sent: about an error, a group, no one host")),
      tx_rate_limited_(counters().add("tx_rate_limited")),
      drop_tx_(counters().add("drop_tx", "ipv6 refused what we sent")) {
  if (!(config_.err_rate > 0) || !(config_.err_burst >= 1)) {
    throw std::invalid_argument("icmpv6: err_rate must be > 0 and err_burst >= 1");
  }
  Participants enable;
  enable.local.push(ProtoNum{ipv6::kIcmpv6});
  if (Status st = ip_.open_enable(*this, enable); !st) {
    throw std::runtime_error("icmpv6: cannot enable next header 58 on '" + ip_.name() + "': " + to_string(st.error()));
  }
  enabled_ = true;
  ip_.attach_icmp(this);
}

Icmpv6Protocol::~Icmpv6Protocol() {
  ip_.attach_icmp(nullptr);
  if (enabled_) {
    Participants enable;
    enable.local.push(ProtoNum{ipv6::kIcmpv6});
    (void)ip_.open_disable(*this, enable);
  }
}

Status Icmpv6Protocol::open_done(Protocol&, Session&, Participants&) { return {}; }

Status Icmpv6Protocol::demux(Session& lower, Msg msg) {
  ++rx_msgs_;
  const RxInfo info = msg.rx();
  Status st = handle(info, msg);
  // No state per peer: forget the session ipv6 made for this message.
  (void)lower.close();
  return st;
}

Status Icmpv6Protocol::handle(const RxInfo& info, Msg& msg) {
  if (msg.size() < Header::kSize) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  // RFC 4443 2.3: over the pseudo-header and the whole message.
  const std::uint32_t pseudo =
      csum::pseudo_header(info.src, info.dst, ipv6::kIcmpv6, static_cast<std::uint32_t>(msg.size()));
  if (csum::finish(csum::partial(msg, pseudo)) != 0) {
    ++drop_bad_csum_;
    return Errc::malformed;
  }
  Result<std::span<const std::byte>> raw = msg.peek(Header::kSize);
  if (!raw) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  const Header h = Header::read(raw->first<Header::kSize>());
  if (for_nd(h.type)) {
    if (nd_ == nullptr) {
      ++drop_nd_no_resolver_;
      return {};
    }
    Result<std::span<const std::byte>> whole = msg.peek(msg.size());
    if (!whole) {
      ++drop_truncated_;
      return Errc::malformed;
    }
    ++rx_nd_;
    return nd_->receive(nd::NdPacket{info.src, info.dst, info.hop_limit, info.reassembled}, *whole);
  }
  switch (h.type) {
    case kEchoRequest: {
      ++rx_echo_request_;
      if (info.src.is_unspecified()) return Errc::malformed;
      // A new message: the request's buffers may be shared.
      std::vector<std::byte> reply(msg.size());
      (void)msg.copy_out(0, reply);
      reply[0] = std::byte{kEchoReply};
      reply[1] = std::byte{0};
      reply[2] = reply[3] = std::byte{0};
      // RFC 4443 4.2: from the address the request went to, when unicast.
      ipv6::Ipv6Protocol::SendOptions opts;
      if (!ipv6::is_multicast(info.dst)) opts.src = info.dst;
      const std::optional<IpAddr> src = opts.src ? opts.src : ip_.source_for(info.src);
      if (!src) {
        ++drop_tx_;
        return Errc::bad_state;
      }
      opts.src = src;
      fill_checksum(reply, *src, info.src);
      Status st = ip_.send(info.src, ipv6::kIcmpv6, Msg::copy_of(reply), opts);
      if (st) {
        ++tx_echo_reply_;
      } else {
        ++drop_tx_;
      }
      return st;
    }
    case kEchoReply:
      ++rx_echo_reply_;
      return {};
    case kDestUnreachable:
    case kPacketTooBig:
    case kTimeExceeded:
    case kParamProblem:
      return handle_error(h, msg);
    case kMldv1Report:
    case kMldv1Done:
    case kMldv2Report:
    default:
      ++rx_other_;
      return {};
  }
}

Status Icmpv6Protocol::handle_error(const Header& h, Msg& msg) {
  (void)msg.trim_front(Header::kSize);
  // The quote: as much of the offending packet as fitted, from its header.
  Result<std::span<const std::byte>> raw = msg.peek(ipv6::Header::kSize);
  if (!raw) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  const ipv6::Header inner = ipv6::Header::read(raw->first<ipv6::Header::kSize>());
  if (inner.version != 6) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  if (!ip_.is_ours(inner.src)) {
    ++drop_error_not_ours_;
    return Errc::malformed;
  }
  ctl::NetError err;
  err.icmp_type = h.type;
  err.icmp_code = h.code;
  switch (h.type) {
    case kPacketTooBig: {
      // RFC 8201 4: the path MTU first, so the transport's next try fits.
      const std::size_t mtu = ip_.update_path_mtu(inner.dst, h.rest);
      ++rx_packet_too_big_;
      err.kind = ctl::NetError::Kind::frag_needed;
      err.next_hop_mtu = static_cast<std::uint16_t>(std::min<std::size_t>(mtu, 0xffff));
      break;
    }
    case kTimeExceeded: err.kind = ctl::NetError::Kind::time_exceeded; break;
    case kParamProblem: err.kind = ctl::NetError::Kind::param_problem; break;
    default: err.kind = ctl::NetError::Kind::unreachable; break;
  }
  err.local = inner.src;
  err.remote = inner.dst;
  (void)msg.trim_front(ipv6::Header::kSize);
  // The transport: right behind the header, or behind a first fragment's
  // header. Other extension headers in a quote are not walked: such an
  // error reaches the protocol named first, without ports.
  std::uint8_t next = inner.next_header;
  if (next == ipv6::kFragment && msg.size() >= ipv6::FragmentHeader::kSize) {
    std::array<std::byte, ipv6::FragmentHeader::kSize> fb{};
    (void)msg.copy_out(0, fb);
    const ipv6::FragmentHeader f = ipv6::FragmentHeader::read(fb);
    next = f.next_header;
    (void)msg.trim_front(ipv6::FragmentHeader::kSize);
    if (f.offset() != 0) next = ipv6::kNoNext;  // no transport header in this piece
  }
  err.protocol = next;
  std::array<std::byte, 8> l4{};
  if ((next == ipv6::kTcp || next == ipv6::kUdp) && msg.size() >= 4) {
    (void)msg.copy_out(0, std::span(l4).first(std::min<std::size_t>(msg.size(), 8)));
    err.local_port = Port{load_be16(l4.data())};
    err.remote_port = Port{load_be16(l4.data() + 2)};
    if (next == ipv6::kTcp && msg.size() >= 8) err.inner_seq = load_be32(l4.data() + 4);
  }
  Status st = ip_.deliver_error(err);
  if (st) {
    ++rx_errors_;
  } else if (st.error() == Errc::not_found) {
    ++drop_error_no_owner_;
  }
  return st;
}

Status Icmpv6Protocol::send_error(std::uint8_t type, std::uint8_t code, std::uint32_t param, const Msg& original) {
  std::array<std::byte, ipv6::Header::kSize> fixed{};
  if (!original.copy_out(0, fixed).ok()) {
    ++tx_suppressed_;
    return Errc::malformed;
  }
  const ipv6::Header inner = ipv6::Header::read(fixed);
  // RFC 4443 2.4 (e): not about an error message, not to a group (but
  // Packet Too Big and an unrecognized option whose type asks for it --
  // ipv6 asks only then), not when the source is not one host.
  bool suppress = inner.src.is_unspecified() || ipv6::is_multicast(inner.src) || inner.src.is_v4();
  const bool group_ok = type == kPacketTooBig || (type == kParamProblem && code == ipv6::kUnrecognizedOption);
  if (ipv6::is_multicast(inner.dst) && !group_ok) suppress = true;
  if (!suppress && inner.next_header == ipv6::kIcmpv6) {
    std::array<std::byte, 1> t{};
    suppress = !original.copy_out(ipv6::Header::kSize, t).ok() || is_error(std::to_integer<std::uint8_t>(t[0]));
  }
  if (suppress) {
    ++tx_suppressed_;
    return Errc::bad_state;
  }
  if (!error_limit_.take()) {
    ++tx_rate_limited_;
    return Errc::would_block;
  }
  // RFC 4443 2.2: from the address the packet was sent to, when ours.
  ipv6::Ipv6Protocol::SendOptions opts;
  opts.src = ip_.is_ours(inner.dst) ? std::optional<IpAddr>(inner.dst) : ip_.source_for(inner.src);
  if (!opts.src) {
    ++drop_tx_;
    return Errc::bad_state;
  }
  // 2.4 (c): as much of the packet as fits the minimum MTU.
  const std::size_t quote = std::min(original.size(), ipv6::kMinMtu - ipv6::Header::kSize - Header::kSize);
  std::vector<std::byte> bytes(Header::kSize + quote);
  Header h;
  h.type = type;
  h.code = code;
  h.rest = param;
  h.write(std::span(bytes).first<Header::kSize>());
  (void)original.copy_out(0, std::span(bytes).subspan(Header::kSize));
  fill_checksum(bytes, *opts.src, inner.src);
  Status st = ip_.send(inner.src, ipv6::kIcmpv6, Msg::copy_of(bytes), opts);
  if (st) {
    ++tx_errors_;
  } else {
    ++drop_tx_;
  }
  return st;
}

void register_icmpv6(Registry& registry) {
  registry.add(KindSpec("icmpv6", "ICMPv6 for a host: echo, errors with rate limit, Packet Too Big, ND to nd")
                   .with_below(1, 2)
                   .with_option(OptionSpec::real("err_rate", 0.001, 1e9, "ICMPv6 errors per second").defaults_to("100"))
                   .with_option(OptionSpec::real("err_burst", 1, 1e9, "ICMPv6 errors in one burst").defaults_to("50"))
                   .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     auto* ip = dynamic_cast<ipv6::Ipv6Protocol*>(args.below[0]);
                     if (ip == nullptr) {
                       throw std::invalid_argument("below '" + args.below[0]->name() + "' (kind " +
                                                   args.below[0]->kind() + ") is not ipv6");
                     }
                     nd::NdProtocol* nd = nullptr;
                     if (args.below.size() > 1) {
                       nd = dynamic_cast<nd::NdProtocol*>(args.below[1]);
                       if (nd == nullptr) {
                         throw std::invalid_argument("below[1] '" + args.below[1]->name() + "' (kind " +
                                                     args.below[1]->kind() + ") is not nd");
                       }
                     }
                     Config c;
                     c.err_rate = args.options.get_real("err_rate");
                     c.err_burst = args.options.get_real("err_burst");
                     const Clock* clock = args.loop != nullptr ? &args.loop->clock() : nullptr;
                     return std::make_unique<Icmpv6Protocol>(args.name, *ip, nd, clock, c);
                   }));
}

}  // namespace xk::icmpv6

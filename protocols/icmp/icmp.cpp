#include "xk/protocols/icmp.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <vector>

#include "xk/checksum.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/icmp_wire.hpp"

namespace xk::icmp {

namespace {

// Fill the checksum of a whole ICMP message whose checksum field is zero.
void fill_checksum(std::span<std::byte> message) {
  std::uint16_t c = csum::finish(csum::partial(message.data(), message.size()));
  std::memcpy(message.data() + 2, &c, 2);  // finish() is in memory order
}

Msg message_of(std::span<const std::byte> bytes) { return Msg::copy_of(bytes); }

}  // namespace

IcmpProtocol::IcmpProtocol(std::string name, ipv4::Ipv4Protocol& ip, const Clock* clock, Config config)
    : Protocol(std::move(name), "icmp", {&ip}),
      ip_(ip),
      clock_(clock != nullptr ? *clock : own_clock_),
      config_(config),
      error_limit_(clock_, config.err_rate, config.err_burst),
      rx_msgs_(counters().add("rx_msgs")),
      drop_truncated_(counters().add("drop_truncated", "shorter than the ICMP header")),
      drop_bad_csum_(counters().add("drop_bad_csum")),
      drop_malformed_(counters().add("drop_malformed", "error message with a bad quoted header")),
      rx_echo_request_(counters().add("rx_echo_request")),
      drop_echo_broadcast_(counters().add("drop_echo_broadcast", "echo requests to a broadcast address, ignored")),
      tx_echo_reply_(counters().add("tx_echo_reply")),
      rx_echo_reply_(counters().add("rx_echo_reply")),
      rx_errors_(counters().add("rx_errors", "unreachable/time exceeded/parameter problem handed to ipv4")),
      drop_error_not_ours_(counters().add("drop_error_not_ours", "quoted datagram not from our address")),
      drop_error_no_owner_(counters().add("drop_error_no_owner", "no transport owns the quoted protocol")),
      rx_other_(counters().add("rx_other", "types we do not act on")),
      tx_dest_unreach_(counters().add("tx_dest_unreach")),
      tx_suppressed_(counters().add("tx_suppressed", "errors not sent: about an error, fragment, broadcast")),
      tx_rate_limited_(counters().add("tx_rate_limited")),
      drop_tx_(counters().add("drop_tx", "ipv4 refused what we sent")) {
  if (!(config_.err_rate > 0) || !(config_.err_burst >= 1)) {
    throw std::invalid_argument("icmp: err_rate must be > 0 and err_burst >= 1");
  }
  Participants enable;
  enable.local.push(ProtoNum{ipv4::kProtoIcmp});
  if (Status st = ip_.open_enable(*this, enable); !st) {
    throw std::runtime_error("icmp: cannot enable protocol 1 on '" + ip_.name() + "': " + to_string(st.error()));
  }
  enabled_ = true;
  ip_.attach_icmp(this);
}

IcmpProtocol::~IcmpProtocol() {
  ip_.attach_icmp(nullptr);
  if (enabled_) {
    Participants enable;
    enable.local.push(ProtoNum{ipv4::kProtoIcmp});
    (void)ip_.open_disable(*this, enable);
  }
}

Status IcmpProtocol::open_done(Protocol&, Session&, Participants&) { return {}; }

Status IcmpProtocol::demux(Session& lower, Msg msg) {
  ++rx_msgs_;
  const RxInfo info = msg.rx();
  Status st = handle(info.src.is_v4() ? &info : nullptr, msg);
  // No state per peer: forget the session ipv4 made for this message (it
  // keeps its own reference until the upcall returns).
  (void)lower.close();
  return st;
}

Status IcmpProtocol::handle(const RxInfo* info, Msg& msg) {
  if (msg.size() < Header::kSize) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  // RFC 792: the checksum covers the whole message.
  if (csum::finish(csum::partial(msg)) != 0) {
    ++drop_bad_csum_;
    return Errc::malformed;
  }
  Result<std::span<const std::byte>> raw = msg.peek(Header::kSize);
  if (!raw) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  const Header h = Header::read(raw->first<Header::kSize>());
  switch (h.type) {
    case kEchoRequest: {
      ++rx_echo_request_;
      if (info == nullptr) return Errc::bad_state;  // not from ipv4
      // RFC 1122 3.2.2.6 lets a host ignore echo requests to a broadcast
      // address; answering them is how smurf amplification works.
      if (info->broadcast) {
        ++drop_echo_broadcast_;
        return {};
      }
      // The reply is a new message: the request's buffers may be shared (ipv4
      // holds a share for errors), and shared bytes are never written.
      std::vector<std::byte> reply(msg.size());
      (void)msg.copy_out(0, reply);
      reply[0] = std::byte{kEchoReply};
      reply[1] = std::byte{0};
      reply[2] = reply[3] = std::byte{0};
      fill_checksum(reply);
      Status st = ip_.send(info->src.v4(), ipv4::kProtoIcmp, message_of(reply));
      if (st) {
        ++tx_echo_reply_;
      } else {
        ++drop_tx_;
      }
      return st;
    }
    case kEchoReply:
      ++rx_echo_reply_;  // no ping client yet
      return {};
    case kDestUnreachable:
    case kTimeExceeded:
    case kParamProblem:
      return handle_error(h, msg);
    default:
      ++rx_other_;
      return {};
  }
}

Status IcmpProtocol::handle_error(const Header& h, Msg& msg) {
  (void)msg.trim_front(Header::kSize);
  // The quote: the offending datagram's IP header and >= 8 bytes of payload.
  Result<std::span<const std::byte>> raw = msg.peek(ipv4::Header::kMinSize);
  if (!raw) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  const ipv4::Header inner = ipv4::Header::read(raw->first<ipv4::Header::kMinSize>());
  if (inner.version != 4 || inner.ihl < 5 || msg.size() < inner.header_length()) {
    ++drop_malformed_;
    return Errc::malformed;
  }
  if (inner.src != ip_.address()) {
    ++drop_error_not_ours_;
    return Errc::malformed;
  }
  ctl::NetError err;
  err.icmp_type = h.type;
  err.icmp_code = h.code;
  if (h.type == kTimeExceeded) {
    err.kind = ctl::NetError::Kind::time_exceeded;
  } else if (h.type == kParamProblem) {
    err.kind = ctl::NetError::Kind::param_problem;
  } else if (h.code == kFragNeeded) {
    err.kind = ctl::NetError::Kind::frag_needed;
    err.next_hop_mtu = h.next_hop_mtu();  // RFC 1191 section 4; 0 from old routers
  } else {
    err.kind = ctl::NetError::Kind::unreachable;
  }
  err.local = inner.src;
  err.remote = inner.dst;
  err.protocol = inner.protocol;
  (void)msg.trim_front(inner.header_length());
  // Ports and sequence only mean something in a first fragment.
  std::array<std::byte, 8> l4{};
  const bool first = (inner.flags_offset & ipv4::Header::kOffsetMask) == 0;
  if (first && (inner.protocol == ipv4::kProtoTcp || inner.protocol == ipv4::kProtoUdp) && msg.size() >= 4) {
    (void)msg.copy_out(0, std::span(l4).first(std::min<std::size_t>(msg.size(), 8)));
    err.local_port = Port{load_be16(l4.data())};
    err.remote_port = Port{load_be16(l4.data() + 2)};
    if (inner.protocol == ipv4::kProtoTcp && msg.size() >= 8) err.inner_seq = load_be32(l4.data() + 4);
  }
  Status st = ip_.deliver_error(err);
  if (st) {
    ++rx_errors_;
  } else if (st.error() == Errc::not_found) {
    ++drop_error_no_owner_;
  }
  return st;
}

Status IcmpProtocol::send_dest_unreachable(std::uint8_t code, const Msg& original, std::uint16_t next_hop_mtu) {
  std::array<std::byte, ipv4::Header::kMinSize> fixed{};
  if (!original.copy_out(0, fixed).ok()) {
    ++tx_suppressed_;
    return Errc::malformed;
  }
  const ipv4::Header inner = ipv4::Header::read(fixed);
  if (inner.version != 4 || inner.ihl < 5 || original.size() < inner.header_length()) {
    ++tx_suppressed_;
    return Errc::malformed;
  }
  // RFC 1122 3.2.2: never about an ICMP error, a non-first fragment, a
  // broadcast or multicast destination, or a source that is not one host.
  bool suppress = (inner.flags_offset & ipv4::Header::kOffsetMask) != 0 || ip_.is_broadcast(inner.dst) ||
                  ipv4::is_multicast(inner.dst) || ip_.is_broadcast(inner.src) || ipv4::is_multicast(inner.src) ||
                  inner.src.value == 0;
  if (!suppress && inner.protocol == ipv4::kProtoIcmp) {
    std::array<std::byte, 1> type{};
    // A quoted ICMP message too short to have a type is not answered either.
    suppress = !original.copy_out(inner.header_length(), type).ok() ||
               is_error(std::to_integer<std::uint8_t>(type[0]));
  }
  if (suppress) {
    ++tx_suppressed_;
    return Errc::bad_state;
  }
  if (!error_limit_.take()) {
    ++tx_rate_limited_;
    return Errc::would_block;
  }
  // RFC 792: the IP header and the first 8 bytes of the datagram's data.
  const std::size_t quote = std::min(original.size(), inner.header_length() + 8);
  std::vector<std::byte> bytes(Header::kSize + quote);
  Header h;
  h.type = kDestUnreachable;
  h.code = code;
  h.rest = code == kFragNeeded ? next_hop_mtu : 0;
  h.write(std::span(bytes).first<Header::kSize>());
  (void)original.copy_out(0, std::span(bytes).subspan(Header::kSize));
  fill_checksum(bytes);
  Status st = ip_.send(inner.src, ipv4::kProtoIcmp, message_of(bytes));
  if (st) {
    ++tx_dest_unreach_;
  } else {
    ++drop_tx_;
  }
  return st;
}

void register_icmp(Registry& registry) {
  registry.add(KindSpec("icmp", "ICMP for a host: echo, destination unreachable, errors to transports")
                   .with_below(1, 1)
                   .with_option(OptionSpec::real("err_rate", 0.001, 1e9, "ICMP errors per second").defaults_to("100"))
                   .with_option(OptionSpec::real("err_burst", 1, 1e9, "ICMP errors in one burst").defaults_to("50"))
                   .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     auto* ip = dynamic_cast<ipv4::Ipv4Protocol*>(args.below[0]);
                     if (ip == nullptr) {
                       throw std::invalid_argument("below '" + args.below[0]->name() + "' (kind " +
                                                   args.below[0]->kind() + ") is not ipv4");
                     }
                     Config c;
                     c.err_rate = args.options.get_real("err_rate");
                     c.err_burst = args.options.get_real("err_burst");
                     const Clock* clock = args.loop != nullptr ? &args.loop->clock() : nullptr;
                     return std::make_unique<IcmpProtocol>(args.name, *ip, clock, c);
                   }));
}

}  // namespace xk::icmp

#include "xk/drivers/pair.hpp"
#include "xk/protocols/eth_wire.hpp"

#include <array>
#include <cstring>
#include <stdexcept>

#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"

namespace xk::drivers {

// ---- link and hub -------------------------------------------------------

PairLink::~PairLink() {
  for (End& e : ends_) {
    if (e.driver != nullptr) e.driver->link_ = nullptr;
  }
}

std::size_t PairLink::attached() const noexcept {
  return (ends_[0].driver != nullptr ? 1u : 0u) + (ends_[1].driver != nullptr ? 1u : 0u);
}

PairLink& PairHub::link(const std::string& name) {
  auto it = links_.find(name);
  if (it == links_.end()) it = links_.emplace(name, std::make_unique<PairLink>(name)).first;
  return *it->second;
}

PairLink* PairHub::find(const std::string& name) const noexcept {
  auto it = links_.find(name);
  return it == links_.end() ? nullptr : it->second.get();
}

// ---- driver -------------------------------------------------------------

PairDriver::PairDriver(std::string name, PairLink& link, Config config, EventLoop* loop)
    : Driver(std::move(name), "pair"),
      config_(config),
      link_(&link),
      loop_(loop),
      tx_frames_(counters().add("tx_frames")),
      rx_frames_(counters().add("rx_frames")),
      drop_too_big_(counters().add("drop_too_big", "frame longer than mtu")),
      drop_queue_full_(counters().add("drop_queue_full", "the peer's inbox was full")),
      drop_no_peer_(counters().add("drop_no_peer", "nothing attached at the other end")),
      drop_no_receiver_(counters().add("drop_no_receiver", "arrived with no upper enabled")),
      drop_bad_offload_(counters().add("drop_bad_offload", "offload asked of a port without it, or of a bad frame")),
      tx_csum_filled_(counters().add("tx_csum_filled", "frames whose checksums this port filled")),
      rx_csum_verified_(counters().add("rx_csum_verified", "IPv4 frames whose checksums this port checked")) {
  if (link.ends_[0].driver == nullptr) {
    end_ = 0;
  } else if (link.ends_[1].driver == nullptr) {
    end_ = 1;
  } else {
    throw std::invalid_argument("pair link '" + link.name() + "' already has two ends");
  }
  link.ends_[end_].driver = this;
  if (loop_ != nullptr) loop_->add(*this);
}

PairDriver::~PairDriver() {
  if (loop_ != nullptr) loop_->remove(*this);
  if (link_ != nullptr) {
    // Frames nobody will poll any more go with us.
    link_->ends_[end_].inbox.clear();
    link_->ends_[end_].driver = nullptr;
  }
}

Result<ControlReply> PairDriver::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{config_.mtu};
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) return ControlReply{std::size_t{0}};
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) {
    Participant p;
    p.push(config_.mac);
    return ControlReply{p};
  }
  if (std::holds_alternative<ctl::GetOffloads>(query)) {
    bool on = config_.csum_offload;
    return ControlReply{LinkOffloads{on, on, on, on, on}};
  }
  return Protocol::control_any(query);
}

// ---- checksum offload, done as a port would --------------------------------

namespace {
constexpr std::size_t kEthHeader = eth::Header::kSize;
constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
}  // namespace

Status PairDriver::fill_requested_checksums(Msg& frame) {
  const Offload req = frame.offload();
  if (!config_.csum_offload || req.l3_len < 20 || req.l3_len > 60) {
    ++drop_bad_offload_;
    return Errc::unsupported;
  }
  const bool tcp = req.has(Offload::tx_tcp_csum);
  const bool udp = req.has(Offload::tx_udp_csum);
  const std::size_t l4 = kEthHeader + req.l3_len;
  const std::size_t field = l4 + (tcp ? 16 : 6);  // where the transport's checksum sits
  const std::size_t head_len = (tcp || udp) ? field + 2 : l4;
  std::array<std::byte, kEthHeader + 60 + 18> head{};
  if (frame.size() < head_len || !frame.copy_out(0, std::span(head).first(head_len))) {
    ++drop_bad_offload_;
    return Errc::invalid_argument;
  }
  if (req.has(Offload::tx_ip_csum)) {
    std::memset(head.data() + kEthHeader + 10, 0, 2);
    std::uint16_t ck = csum::finish(csum::partial(head.data() + kEthHeader, req.l3_len));
    std::memcpy(head.data() + kEthHeader + 10, &ck, 2);
  }
  if (tcp || udp) {
    // The field holds the pseudo-header sum the stack left for us.
    Result<std::uint32_t> sum = csum::partial(frame, l4, frame.size() - l4);
    if (!sum) return sum.status();
    std::uint16_t ck = csum::finish(*sum);
    if (udp && ck == 0) ck = 0xffff;  // RFC 768
    std::memcpy(head.data() + field, &ck, 2);
  }
  // Write the header bytes back (in place when the headroom is ours).
  if (Status st = frame.trim_front(head_len); !st) return st;
  Result<std::span<std::byte>> room = frame.push(head_len);
  if (!room) return room.status();
  std::memcpy(room->data(), head.data(), head_len);
  ++tx_csum_filled_;
  return {};
}

void PairDriver::flag_verified_checksums(Msg& frame) {
  Result<std::span<const std::byte>> eth = frame.peek(kEthHeader + 20);
  if (!eth || load_be16(eth->data() + 12) != kEtherTypeIpv4) return;
  const std::size_t ihl = (std::to_integer<std::size_t>((*eth)[kEthHeader]) & 0x0f) * 4;
  if ((std::to_integer<unsigned>((*eth)[kEthHeader]) >> 4) != 4 || ihl < 20) return;
  Result<std::span<const std::byte>> hdr = frame.peek(kEthHeader + ihl);
  if (!hdr) return;
  const std::byte* ip = hdr->data() + kEthHeader;
  ++rx_csum_verified_;
  if (csum::fold(csum::partial(ip, ihl)) != 0xffff) return;  // bad: left for the stack to find
  frame.offload().flags |= Offload::rx_ip_good;
  // A transport checksum can be checked only in an unfragmented packet.
  const std::uint16_t total = load_be16(ip + 2);
  const std::uint16_t frag = load_be16(ip + 6);
  const auto proto = std::to_integer<std::uint8_t>(ip[9]);
  if ((frag & 0x3fff) != 0 || (proto != 6 && proto != 17) || total < ihl + 8 ||
      frame.size() < kEthHeader + total) {
    return;
  }
  const std::size_t l4_len = total - ihl;
  Ipv4Addr src{load_be32(ip + 12)};
  Ipv4Addr dst{load_be32(ip + 16)};
  std::uint32_t pseudo = csum::pseudo_header_v4(src, dst, proto, static_cast<std::uint16_t>(l4_len));
  Result<std::span<const std::byte>> l4 = frame.peek(kEthHeader + ihl + 8);
  if (!l4) return;
  // A UDP checksum of 0 was never computed (RFC 768): nothing to vouch for.
  if (proto == 17 && load_be16(l4->data() + kEthHeader + ihl + 6) == 0) return;
  Result<std::uint32_t> sum = csum::partial(frame, kEthHeader + ihl, l4_len, pseudo);
  if (sum && csum::fold(*sum) == 0xffff) frame.offload().flags |= Offload::rx_l4_good;
}

Status PairDriver::send(Msg msg) {
  if (msg.size() > config_.mtu) {
    ++drop_too_big_;
    return Errc::too_large;
  }
  if ((msg.offload().flags & Offload::kTxMask) != 0) {
    if (Status st = fill_requested_checksums(msg); !st) return st;
  }
  msg.offload() = Offload{};  // nothing the sender knew crosses the cable
  PairDriver* peer = link_ == nullptr ? nullptr : link_->ends_[1 - end_].driver;
  if (peer == nullptr) {
    // An unplugged cable: the frame is lost, as on a wire without carrier.
    ++drop_no_peer_;
    return {};
  }
  std::deque<Msg>& inbox = link_->ends_[1 - end_].inbox;
  // The bound is the receiver's: it says how much it is willing to hold.
  if (inbox.size() >= peer->config_.queue_limit) {
    ++drop_queue_full_;
    return Errc::would_block;
  }
  ++tx_frames_;
  inbox.push_back(std::move(msg));
  return {};
}

std::size_t PairDriver::queued() const noexcept {
  return link_ == nullptr ? 0 : link_->ends_[end_].inbox.size();
}

std::size_t PairDriver::poll(std::size_t budget) {
  std::size_t done = 0;
  while (done < budget && link_ != nullptr && !link_->ends_[end_].inbox.empty()) {
    std::deque<Msg>& inbox = link_->ends_[end_].inbox;
    Msg msg = std::move(inbox.front());
    inbox.pop_front();
    ++done;
    if (!receiving()) {
      ++drop_no_receiver_;
      continue;
    }
    ++rx_frames_;
    if (config_.csum_offload) flag_verified_checksums(msg);
    (void)deliver_up(std::move(msg));
  }
  return done;
}

void register_pair(Registry& registry, PairHub& hub) {
  PairHub* h = &hub;
  registry.add(KindSpec("pair", "in-process Ethernet link between two graphs (one thread)")
                   .with_below(0, 0)
                   .with_option(OptionSpec::string("link", "name of the shared link (both ends give the same)")
                                    .mandatory())
                   .with_option(OptionSpec::mac("mac", "this end's MAC address").mandatory())
                   .with_option(OptionSpec::size("mtu", 60, 1 << 16, "largest frame, Ethernet header included")
                                    .defaults_to("1514"))
                   .with_option(OptionSpec::integer("queue", 1, 1 << 20, "frames waiting at this end")
                                    .defaults_to("1024"))
                   .with_option(OptionSpec::boolean("csum_offload", "act as a port with IPv4/UDP/TCP checksum offload")
                                    .defaults_to("off"))
                   .with_factory([h](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     const std::string& name = args.options.get_string("link");
                     if (name.empty()) throw std::invalid_argument("link= must name a link");
                     PairDriver::Config config;
                     config.mac = args.options.get_mac("mac");
                     config.mtu = args.options.get_size("mtu");
                     config.queue_limit = static_cast<std::size_t>(args.options.get_int("queue"));
                     config.csum_offload = args.options.get_bool("csum_offload");
                     return std::make_unique<PairDriver>(args.name, h->link(name), config, args.loop);
                   }));
}

}  // namespace xk::drivers

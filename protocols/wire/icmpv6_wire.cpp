// ND options and the addresses Neighbor Discovery derives (icmpv6_wire.hpp).
#include "xk/protocols/icmpv6_wire.hpp"

#include <cstring>

#include "xk/checksum.hpp"
#include "xk/protocols/ipv6_wire.hpp"

namespace xk::icmpv6 {

void fill_checksum(std::span<std::byte> message, const IpAddr& src, const IpAddr& dst) noexcept {
  const std::uint32_t pseudo =
      csum::pseudo_header(src, dst, ipv6::kIcmpv6, static_cast<std::uint32_t>(message.size()));
  const std::uint16_t c = csum::finish(csum::partial(message.data(), message.size(), pseudo));
  std::memcpy(message.data() + 2, &c, 2);  // finish() is in memory order
}

Result<NdOptions> read_nd_options(std::span<const std::byte> b) {
  NdOptions out;
  for (std::size_t at = 0; at < b.size();) {
    if (b.size() - at < 2) return Errc::invalid_argument;
    const std::uint8_t type = std::to_integer<std::uint8_t>(b[at]);
    const std::size_t len = std::size_t{std::to_integer<std::uint8_t>(b[at + 1])} * 8;
    if (len == 0 || b.size() - at < len) return Errc::invalid_argument;
    const std::span<const std::byte> opt = b.subspan(at, len);
    switch (type) {
      case kOptSourceLinkAddr:
      case kOptTargetLinkAddr: {
        // Ethernet: 6 bytes of address (RFC 2464 8); a longer option is
        // another link's and leaves the address unknown.
        if (len != kLinkAddrOptionSize) break;
        MacAddr mac;
        std::memcpy(mac.bytes.data(), opt.data() + 2, 6);
        (type == kOptSourceLinkAddr ? out.source_link : out.target_link) = mac;
        break;
      }
      case kOptMtu:
        if (len == 8) out.mtu = load_be32(opt.data() + 4);
        break;
      case kOptPrefixInfo: {
        if (len != 32) return Errc::invalid_argument;  // RFC 4861 4.6.2: length 4
        PrefixInfo p;
        p.length = std::to_integer<std::uint8_t>(opt[2]);
        const auto flags = std::to_integer<std::uint8_t>(opt[3]);
        p.on_link = (flags & 0x80) != 0;
        p.autonomous = (flags & 0x40) != 0;
        p.valid_lifetime = load_be32(opt.data() + 4);
        p.preferred_lifetime = load_be32(opt.data() + 8);
        IpAddr::Bytes a;
        std::memcpy(a.data(), opt.data() + 16, 16);
        p.prefix = IpAddr::v6(a);
        if (p.length > 128) return Errc::invalid_argument;
        out.prefixes.push_back(p);
        break;
      }
      default: break;  // unknown: skipped
    }
    at += len;
  }
  return out;
}

void write_link_addr_option(std::span<std::byte, kLinkAddrOptionSize> b, std::uint8_t type,
                            const MacAddr& mac) noexcept {
  b[0] = std::byte{type};
  b[1] = std::byte{1};
  std::memcpy(b.data() + 2, mac.bytes.data(), 6);
}

IpAddr link_local_from_mac(const MacAddr& mac) noexcept {
  // RFC 4291 appendix A: the MAC split by ff:fe, the universal/local bit
  // flipped.
  IpAddr::Bytes a{};
  a[0] = 0xfe;
  a[1] = 0x80;
  a[8] = static_cast<std::uint8_t>(mac.bytes[0] ^ 0x02);
  a[9] = mac.bytes[1];
  a[10] = mac.bytes[2];
  a[11] = 0xff;
  a[12] = 0xfe;
  a[13] = mac.bytes[3];
  a[14] = mac.bytes[4];
  a[15] = mac.bytes[5];
  return IpAddr::v6(a);
}

IpAddr solicited_node(const IpAddr& addr) noexcept {
  IpAddr::Bytes a{};
  a[0] = 0xff;
  a[1] = 0x02;
  a[11] = 0x01;
  a[12] = 0xff;
  a[13] = addr.bytes()[13];
  a[14] = addr.bytes()[14];
  a[15] = addr.bytes()[15];
  return IpAddr::v6(a);
}

MacAddr multicast_mac(const IpAddr& group) noexcept {
  const auto& g = group.bytes();
  return MacAddr{{0x33, 0x33, g[12], g[13], g[14], g[15]}};
}

namespace {
// ff02::N, a link-scope group.
IpAddr link_scope_group(std::uint8_t n) noexcept {
  IpAddr::Bytes a{};
  a[0] = 0xff;
  a[1] = 0x02;
  a[15] = n;
  return IpAddr::v6(a);
}
}  // namespace

IpAddr all_nodes() noexcept { return link_scope_group(1); }
IpAddr all_routers() noexcept { return link_scope_group(2); }

}  // namespace xk::icmpv6

#include "xk/segment.hpp"

#include <cstring>

#include "xk/address.hpp"
#include "xk/byteorder.hpp"
#include "xk/checksum.hpp"

namespace xk {

Result<SegmentCut> SegmentCut::of(const Msg& frame) {
  SegmentCut c;
  const std::size_t have = std::min(frame.size(), kMaxHeaders);
  if (Status st = frame.copy_out(0, std::span(c.hdr_).first(have)); !st) return st.error();
  if (have < kEthHeader + ipv4::Header::kMinSize + tcp::Header::kMinSize) return Errc::invalid_argument;
  const std::uint16_t type =
      eth::Header::read(std::span<const std::byte, eth::Header::kSize>(c.hdr_.data(), eth::Header::kSize)).type;
  if (type == eth::kTypeIpv4) {
    const ipv4::Header iph = ipv4::Header::read(c.ip_fixed());
    c.ihl_ = iph.header_length();
    if (iph.version != 4 || c.ihl_ < ipv4::Header::kMinSize || iph.protocol != ipv4::kProtoTcp) {
      return Errc::invalid_argument;
    }
  } else if (type == eth::kTypeIpv6) {
    if (have < kEthHeader + ipv6::Header::kSize + tcp::Header::kMinSize) return Errc::invalid_argument;
    const ipv6::Header iph = ipv6::Header::read(c.ip6_fixed());
    if (iph.version != 6 || iph.next_header != ipv6::kTcp) return Errc::invalid_argument;
    c.ihl_ = ipv6::Header::kSize;
    c.v6_ = true;
  } else {
    return Errc::invalid_argument;
  }
  if (have < kEthHeader + c.ihl_ + tcp::Header::kMinSize) return Errc::invalid_argument;
  c.doff_ = c.tcp_fixed().header_length();
  c.hlen_ = kEthHeader + c.ihl_ + c.doff_;
  c.seg_ = frame.offload().seg_size;
  if (c.doff_ < tcp::Header::kMinSize || c.hlen_ > have || c.hlen_ >= frame.size() || c.seg_ == 0) return Errc::invalid_argument;
  c.payload_ = frame.size() - c.hlen_;
  return c;
}

std::size_t SegmentCut::headers(std::size_t i, std::size_t step, std::byte* out, bool ip_csum) const noexcept {
  using tcp::kCwr, tcp::kFin, tcp::kPsh;
  const std::size_t n = std::min(step, payload_ - i * step);
  const std::size_t count = pieces(step);
  std::memcpy(out, hdr_.data(), hlen_);  // the options as they are
  if (v6_) {
    // The piece's IPv6 header: its payload length, nothing else.
    store_be16(out + kEthHeader + 4, static_cast<std::uint16_t>(doff_ + n));
  } else {
    // The piece's IPv4 header: its length, the next ID, its checksum (or 0).
    const std::span<std::byte, ipv4::Header::kMinSize> ip(out + kEthHeader, ipv4::Header::kMinSize);
    ipv4::Header iph = ipv4::Header::read(ip_fixed());
    iph.total_length = static_cast<std::uint16_t>(ihl_ + doff_ + n);
    iph.id = static_cast<std::uint16_t>(iph.id + i);
    iph.checksum = 0;
    iph.write(ip);
    if (ip_csum) {
      const std::uint16_t ck = csum::finish(csum::partial(ip.data(), ihl_));
      std::memcpy(ip.data() + ipv4::Header::kChecksumOffset, &ck, 2);
    }
  }
  // Its TCP header: the piece's sequence number; FIN and PSH on the last
  // piece only, CWR on the first only; the checksum field left 0.
  tcp::Header th = tcp_fixed();
  th.seq = th.seq + static_cast<std::uint32_t>(i * step);
  if (i + 1 < count) th.flags &= static_cast<std::uint8_t>(~(kFin | kPsh));
  if (i > 0) th.flags &= static_cast<std::uint8_t>(~kCwr);
  th.checksum = 0;
  th.write(std::span<std::byte, tcp::Header::kMinSize>(out + kEthHeader + ihl_, tcp::Header::kMinSize));
  return n;
}

std::uint32_t SegmentCut::tcp_sum(const std::byte* out, std::size_t n, bool with_header) const noexcept {
  const auto len = static_cast<std::uint16_t>(doff_ + n);
  std::uint32_t sum;
  if (v6_) {
    const std::byte* ip = hdr_.data() + kEthHeader;
    sum = csum::pseudo_header(ipv6::Header::address_at(ip + 8), ipv6::Header::address_at(ip + 24), ipv6::kTcp, len);
  } else {
    const ipv4::Header iph = ipv4::Header::read(ip_fixed());
    sum = csum::pseudo_header_v4(iph.src, iph.dst, ipv4::kProtoTcp, len);
  }
  return with_header ? csum::partial(out + kEthHeader + ihl_, doff_, sum) : sum;
}

}  // namespace xk

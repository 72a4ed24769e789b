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
  const std::byte* ip = c.hdr_.data() + kEthHeader;
  c.ihl_ = (std::to_integer<std::size_t>(ip[0]) & 0x0f) * 4;
  const bool ipv4_tcp = have >= kEthHeader + ipv4::Header::kMinSize + tcp::Header::kMinSize &&
                        load_be16(c.hdr_.data() + 12) == eth::kTypeIpv4 && (std::to_integer<unsigned>(ip[0]) >> 4) == 4 &&
                        c.ihl_ >= ipv4::Header::kMinSize && std::to_integer<unsigned>(ip[9]) == ipv4::kProtoTcp &&
                        have >= kEthHeader + c.ihl_ + tcp::Header::kMinSize;
  if (!ipv4_tcp) return Errc::invalid_argument;
  c.doff_ = (std::to_integer<std::size_t>(ip[c.ihl_ + 12]) >> 4) * 4;
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
  std::memcpy(out, hdr_.data(), hlen_);
  std::byte* ip = out + kEthHeader;
  std::byte* th = ip + ihl_;  // the TCP header
  store_be16(ip + 2, static_cast<std::uint16_t>(ihl_ + doff_ + n));
  store_be16(ip + 4, static_cast<std::uint16_t>(load_be16(hdr_.data() + kEthHeader + 4) + i));
  store_be16(ip + 10, 0);
  if (ip_csum) {
    const std::uint16_t ck = csum::finish(csum::partial(ip, ihl_));
    std::memcpy(ip + 10, &ck, 2);
  }
  store_be32(th + 4, load_be32(hdr_.data() + kEthHeader + ihl_ + 4) + static_cast<std::uint32_t>(i * step));
  auto flags = std::to_integer<std::uint8_t>(th[13]);
  if (i + 1 < count) flags &= static_cast<std::uint8_t>(~(kFin | kPsh));
  if (i > 0) flags &= static_cast<std::uint8_t>(~kCwr);
  th[13] = std::byte{flags};
  store_be16(th + tcp::Header::kChecksumOffset, 0);
  return n;
}

std::uint32_t SegmentCut::tcp_sum(const std::byte* out, std::size_t n, bool with_header) const noexcept {
  const std::byte* ip = out + kEthHeader;
  std::uint32_t sum = csum::pseudo_header_v4(Ipv4Addr{load_be32(ip + 12)}, Ipv4Addr{load_be32(ip + 16)}, ipv4::kProtoTcp,
                                             static_cast<std::uint16_t>(doff_ + n));
  return with_header ? csum::partial(ip + ihl_, doff_, sum) : sum;
}

}  // namespace xk

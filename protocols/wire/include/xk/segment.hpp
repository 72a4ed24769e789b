#pragma once
// Cutting a TCP segment the stack marked Offload::tx_tcp_seg into frames,
// over IPv4 or IPv6,
// as a NIC's TSO does (docs/tcp.md, "Segmentation offload"): the drivers
// that do it in software (dpdk, shm) share the reading of the headers and
// the fix-up of each piece's copy of them; each moves the payload its own
// way (into mbufs, by reference).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "xk/msg.hpp"
#include "xk/protocols/eth_wire.hpp"
#include "xk/protocols/ipv4_wire.hpp"
#include "xk/protocols/ipv6_wire.hpp"
#include "xk/protocols/tcp_wire.hpp"
#include "xk/result.hpp"

namespace xk {

class SegmentCut {
 public:
  static constexpr std::size_t kEthHeader = eth::Header::kSize;
  static constexpr std::size_t kMaxHeaders = kEthHeader + ipv4::Header::kMaxSize + tcp::Header::kMaxSize;

  // The frame's Ethernet, IP and TCP headers, read once. invalid_argument
  // unless the frame is one TCP segment with payload behind its headers and
  // a segment size in its offload, over IPv4 (options allowed) or IPv6 (no
  // extension headers: TCP directly behind the fixed header).
  static Result<SegmentCut> of(const Msg& frame);

  bool v6() const noexcept { return v6_; }
  std::size_t header_len() const noexcept { return hlen_; }  // Ethernet + IP + TCP
  std::size_t ip_header_len() const noexcept { return ihl_; }
  std::size_t tcp_header_len() const noexcept { return doff_; }
  std::size_t payload() const noexcept { return payload_; }
  std::size_t seg() const noexcept { return seg_; }
  // Pieces of `step` payload bytes each (the last may be shorter).
  std::size_t pieces(std::size_t step) const noexcept { return (payload_ + step - 1) / step; }
  // Piece i's headers into `out` (header_len() bytes): the frame's, with
  // the IPv4 total length, ID (one more per piece) and header checksum (0
  // when `ip_csum` is false: the port fills it) -- over IPv6 the payload
  // length alone, its header having neither ID nor checksum; the TCP sequence number,
  // flags (FIN and PSH on the last piece only, CWR on the first only, RFC
  // 3168 6.1.2) and a checksum field of 0. Returns the piece's payload bytes.
  std::size_t headers(std::size_t i, std::size_t step, std::byte* out, bool ip_csum) const noexcept;
  // The TCP checksum of a piece whose headers headers() wrote at `out`,
  // before its payload: the pseudo-header, plus the TCP header when
  // `with_header` (a port that sums the rest wants the pseudo-header only).
  std::uint32_t tcp_sum(const std::byte* out, std::size_t n, bool with_header) const noexcept;

 private:
  // The frame's fixed IPv4 or IPv6 header, and its TCP header (ihl_ known).
  std::span<const std::byte, ipv4::Header::kMinSize> ip_fixed() const noexcept {
    return std::span<const std::byte, ipv4::Header::kMinSize>(hdr_.data() + kEthHeader, ipv4::Header::kMinSize);
  }
  std::span<const std::byte, ipv6::Header::kSize> ip6_fixed() const noexcept {
    return std::span<const std::byte, ipv6::Header::kSize>(hdr_.data() + kEthHeader, ipv6::Header::kSize);
  }
  tcp::Header tcp_fixed() const noexcept {
    return tcp::Header::read(
        std::span<const std::byte, tcp::Header::kMinSize>(hdr_.data() + kEthHeader + ihl_, tcp::Header::kMinSize));
  }

  std::array<std::byte, kMaxHeaders> hdr_{};
  std::size_t ihl_ = 0, doff_ = 0, hlen_ = 0, payload_ = 0, seg_ = 0;
  bool v6_ = false;
};

}  // namespace xk

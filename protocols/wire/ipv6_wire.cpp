// The walk of an IPv6 packet's extension headers (RFC 8200 4), with the
// limits of ChainLimits.
#include "xk/protocols/ipv6_wire.hpp"

namespace xk::ipv6 {

const char* to_string(ChainError e) noexcept {
  switch (e) {
    case ChainError::truncated: return "truncated";
    case ChainError::too_many_headers: return "too_many_headers";
    case ChainError::too_many_options: return "too_many_options";
    case ChainError::bad_option_length: return "bad_option_length";
    case ChainError::hop_by_hop_not_first: return "hop_by_hop_not_first";
    case ChainError::unknown_option: return "unknown_option";
    case ChainError::unknown_routing: return "unknown_routing";
  }
  return "?";
}

namespace {

constexpr std::uint8_t kPad1 = 0;
constexpr std::uint8_t kPadN = 1;
constexpr std::uint8_t kRouterAlert = 5;  // RFC 2711, hop-by-hop only, 2 bytes of value

std::uint8_t byte_at(std::span<const std::byte> p, std::size_t i) noexcept { return std::to_integer<std::uint8_t>(p[i]); }

ChainResult refuse(ChainError e) { return ChainResult{std::nullopt, ChainProblem{e}}; }

ChainResult parameter_problem(ChainError e, std::uint8_t code, std::size_t pointer, bool unless_multicast = false) {
  return ChainResult{std::nullopt,
                     ChainProblem{e, true, unless_multicast, code, static_cast<std::uint32_t>(pointer)}};
}

// The options of a hop-by-hop or destination options header at [begin, end):
// an empty result when they are acceptable.
std::optional<ChainResult> walk_options(std::span<const std::byte> p, std::size_t begin, std::size_t end,
                                        bool hop_by_hop, const ChainLimits& limits, Chain& chain) {
  std::size_t options = 0;
  std::size_t padding = 0;  // the current run of padding bytes
  for (std::size_t i = begin; i < end;) {
    const std::uint8_t type = byte_at(p, i);
    if (type == kPad1) {
      if (++padding > limits.max_padding) return refuse(ChainError::too_many_options);
      ++i;
      continue;
    }
    if (end - i < 2) return refuse(ChainError::bad_option_length);
    const std::size_t len = byte_at(p, i + 1);
    if (end - i - 2 < len) return refuse(ChainError::bad_option_length);
    if (type == kPadN) {
      padding += 2 + len;
      if (padding > limits.max_padding) return refuse(ChainError::too_many_options);
      i += 2 + len;
      continue;
    }
    padding = 0;
    if (++options > limits.max_options) return refuse(ChainError::too_many_options);
    if (hop_by_hop && type == kRouterAlert && len == 2) {
      chain.router_alert = true;
    } else {
      // RFC 8200 4.2: the type's two high bits say what to do with an option
      // this node does not know.
      switch (type >> 6) {
        case 0: break;  // skip it
        case 1: return refuse(ChainError::unknown_option);
        case 2: return parameter_problem(ChainError::unknown_option, kUnrecognizedOption, i);
        default: return parameter_problem(ChainError::unknown_option, kUnrecognizedOption, i, true);
      }
    }
    i += 2 + len;
  }
  return std::nullopt;
}

}  // namespace

ChainResult walk_chain(std::span<const std::byte> p, const ChainLimits& limits) {
  if (p.size() < Header::kSize) return refuse(ChainError::truncated);
  Chain chain;
  std::uint8_t next = byte_at(p, Header::kNextHeaderOffset);
  std::size_t off = Header::kSize;
  for (;;) {
    if (next != kHopByHop && next != kDestOptions && next != kRouting && next != kFragment && next != kAuth) break;
    if (chain.headers == limits.max_headers) return refuse(ChainError::too_many_headers);
    // Every extension header starts with its Next Header byte; all but the
    // fragment header (8 bytes) say their length in the second.
    if (p.size() - off < 8) return refuse(ChainError::truncated);
    std::size_t len = 8;
    if (next == kAuth) {
      len = (std::size_t{byte_at(p, off + 1)} + 2) * 4;  // RFC 4302 2.2: in 4-byte units, minus 2
    } else if (next != kFragment) {
      len = (std::size_t{byte_at(p, off + 1)} + 1) * 8;
    }
    if (p.size() - off < len) return refuse(ChainError::truncated);
    switch (next) {
      case kHopByHop:
        // Only right after the IPv6 header (RFC 8200 4.3).
        if (off != Header::kSize) {
          return parameter_problem(ChainError::hop_by_hop_not_first, kUnrecognizedNextHeader, chain.next_header_offset);
        }
        [[fallthrough]];
      case kDestOptions:
        if (auto r = walk_options(p, off + 2, off + len, next == kHopByHop, limits, chain)) return *r;
        break;
      case kRouting:
        // A host routes no type (type 0 is gone, RFC 5095): one with
        // segments left is an error; one with none is skipped (4.4).
        if (byte_at(p, off + 3) != 0) return parameter_problem(ChainError::unknown_routing, kErroneousField, off + 2);
        break;
      case kFragment: {
        const FragmentHeader f = FragmentHeader::read(p.subspan(off).first<FragmentHeader::kSize>());
        chain.fragment = f;
        chain.fragment_offset = off;
        chain.fragment_named_at = chain.next_header_offset;
        if (!f.atomic()) {
          // The walk stops: what follows is a piece of the fragmentable part.
          ++chain.headers;
          chain.upper = f.next_header;
          chain.upper_offset = off + len;
          chain.next_header_offset = off;
          return ChainResult{chain, {}};
        }
        break;  // an atomic fragment is the whole packet: go on (RFC 6946)
      }
      default: break;  // kAuth: skipped; its check is IPsec's
    }
    ++chain.headers;
    chain.next_header_offset = off;
    next = byte_at(p, off);
    off += len;
  }
  chain.upper = next;
  chain.upper_offset = off;
  return ChainResult{chain, {}};
}

}  // namespace xk::ipv6

// libFuzzer harness: the walk of an IPv6 packet's extension headers
// (xk/protocols/ipv6_wire.hpp). The input is an IPv6 packet from its fixed
// header on; its payload length is set to the bytes that follow, as the IP
// layer checks before it walks. Checked, beyond "no crash, no read past the
// end, no UB":
//   - an accepted chain's upper layer starts within the packet, after at
//     most max_headers extension headers;
//   - a walk that stopped at a fragment header says where it is, and the
//     fragment's contents start right after it;
//   - a Parameter Problem points inside the packet;
//   - a walk with no limits that matter accepts at least what the default
//     limits accept, and finds the same upper layer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "xk/protocols/ipv6_wire.hpp"

using namespace xk::ipv6;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < Header::kSize || size > Header::kSize + Header::kMaxPayload) return 0;
  std::vector<std::byte> p(size);
  for (std::size_t i = 0; i < size; ++i) p[i] = std::byte{data[i]};
  xk::store_be16(p.data() + 4, static_cast<std::uint16_t>(size - Header::kSize));

  const ChainResult r = walk_chain(p);
  if (r.chain) {
    const Chain& c = *r.chain;
    if (c.upper_offset > size || c.headers > ChainLimits{}.max_headers) std::abort();
    if (c.next_header_offset >= c.upper_offset) std::abort();
    if (c.fragment && !c.fragment->atomic() && c.fragment_offset + FragmentHeader::kSize != c.upper_offset) std::abort();
  } else if (r.problem.icmp && r.problem.pointer >= size) {
    std::abort();
  }

  ChainLimits loose;
  loose.max_headers = 1000;
  loose.max_options = 1000;
  loose.max_padding = 1000;
  const ChainResult l = walk_chain(p, loose);
  if (r.chain && (!l.chain || l.chain->upper != r.chain->upper || l.chain->upper_offset != r.chain->upper_offset))
    std::abort();
  return 0;
}

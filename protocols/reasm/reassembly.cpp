// What a held fragment costs (reassembly.hpp).
#include "xk/protocols/reassembly.hpp"

namespace xk::ip {

std::size_t truesize(const Msg& m) {
  std::size_t n = kFragmentOverhead;
  const Buf* last = nullptr;
  for (const Frag& f : m.fragments()) {
    if (f.buf != last) n += f.buf->capacity();
    last = f.buf;
  }
  return n;
}

std::size_t compact(Msg& payload) {
  std::size_t mem = truesize(payload);
  if (mem > 2 * payload.size() + 2 * kFragmentOverhead + 512) {
    std::vector<std::byte> tmp(payload.size());
    (void)payload.copy_out(0, tmp);
    payload = Msg::copy_of(tmp, 0);
    mem = truesize(payload);
  } else if (payload.offload().has(Offload::rx_scarce) && payload.own()) {
    mem = truesize(payload);  // the port is short of buffers: keep a copy instead
  }
  return mem;
}

}  // namespace xk::ip

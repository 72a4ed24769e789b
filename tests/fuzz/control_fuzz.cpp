// libFuzzer harness: filterd's control protocol (xk/filterd/control.hpp) and
// the control plane behind it (xk/filterd/registry.hpp). The input is the
// byte stream a peer sends on the control socket.
//
//   1. FrameReader decodes it fed whole and fed in small pieces (sizes taken
//      from the stream itself): both must give the same messages and errors.
//   2. Every decoded message re-encodes, and the bytes decode to an equal
//      message (the codec's promise: whatever decodes re-encodes).
//   3. Every decoded request goes to a NodeRegistry with a real FilterEngine,
//      as if four control connections shared the stream (request_id & 3
//      picks one); each reply must encode. When every connection has closed,
//      nothing of their nodes may be left in the registry or the filter.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "xk/clock.hpp"
#include "xk/filterd/control.hpp"
#include "xk/filterd/filter.hpp"
#include "xk/filterd/registry.hpp"

namespace {

using xk::filterd::ctl::Message;
using xk::filterd::ctl::ReadResult;

struct Outcome {
  std::vector<Message> messages;
  std::vector<xk::filterd::ctl::ErrorCode> errors;
  bool dropped = false;
};

// Reads until the reader wants more bytes or drops the stream.
void drain(xk::filterd::ctl::FrameReader& reader, Outcome& out) {
  for (;;) {
    ReadResult r = reader.next();
    if (r.need_more()) return;
    if (r.has_message()) {
      out.messages.push_back(std::move(r).message());
      continue;
    }
    out.errors.push_back(r.error().code);
    if (r.error().must_drop()) {
      out.dropped = true;
      return;
    }
    // A rejected request is answered; the answer must encode.
    if (xk::filterd::ctl::should_answer(r.error()) && !xk::filterd::ctl::encode(make_error(r.error())).ok())
      std::abort();
  }
}

Outcome decode(std::span<const std::byte> bytes, std::size_t piece) {
  xk::filterd::ctl::FrameReader reader;
  Outcome out;
  for (std::size_t at = 0; at < bytes.size() && !out.dropped; at += piece) {
    reader.feed(bytes.subspan(at, std::min(piece, bytes.size() - at)));
    drain(reader, out);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 256 * 1024) return -1;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);

  Outcome whole = decode(bytes, bytes.size() == 0 ? 1 : bytes.size());
  Outcome pieces = decode(bytes, 1 + (size % 13));
  if (whole.messages != pieces.messages || whole.errors != pieces.errors || whole.dropped != pieces.dropped)
    std::abort();  // the reader depends on how the stream was cut

  for (const Message& m : whole.messages) {
    auto encoded = xk::filterd::ctl::encode(m);
    if (!encoded.ok()) std::abort();  // decoded but does not re-encode
    Outcome again = decode(*encoded, encoded->size());
    if (again.messages.size() != 1 || !(again.messages[0] == m) || !again.errors.empty()) std::abort();
  }

  xk::ManualClock clock;
  xk::filterd::FilterConfig fc;
  fc.shared_ip = xk::Ipv4Addr{0xC000020A};  // 192.0.2.10
  xk::filterd::FilterEngine filter(fc, clock);
  xk::filterd::RegistryConfig rc;
  rc.shared = xk::Ipv4Cidr{xk::Ipv4Addr{0xC000020A}, 24};
  rc.ephemeral_min = 50000;
  rc.ephemeral_max = 50007;  // small, so running out is reachable
  rc.max_nodes = 8;
  rc.node_port_mac = xk::MacAddr{{0x02, 0x78, 0x6b, 0x00, 0x00, 0x02}};
  xk::filterd::NodeRegistry reg(rc, filter,
                                xk::filterd::NodeRegistry::Hooks{[](const xk::filterd::NodeInfo&) { return xk::Status(); },
                                                                 [](xk::filterd::NodeId) {}, {}, {}});
  xk::filterd::NodeId conns[4] = {};
  for (const Message& m : whole.messages) {
    xk::filterd::NodeId& node = conns[m.request_id & 3];
    // peer_pid 0: a peer over TCP, whose HELLO's pid nobody can check.
    Message reply = reg.handle(m, node, /*peer_pid=*/0);
    if (!xk::filterd::ctl::encode(reply).ok()) std::abort();  // a reply that cannot be sent
  }
  for (xk::filterd::NodeId& node : conns) {
    if (node != 0) reg.node_gone(node);
  }
  if (reg.node_count() != 0 || reg.ports_in_use() != 0 || filter.flow_count() != 0 ||
      filter.rule_count() != 0 || filter.listener_count() != 0)
    std::abort();  // every node gone, yet something of theirs is left
  return 0;
}

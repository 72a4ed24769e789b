#pragma once
// The relay micro-protocol on a node's channel (docs/relay-protocol.md):
// Ethernet frames of EtherType 0x88B5 (IEEE 802 local experimental 1)
// between filterd and a node, carrying the byte streams of the TCP
// connections filterd terminates in central mode.
//
//  0        1        2                 4                                 8
// +--------+--------+-----------------+---------------------------------+
// |version |   op   |     length      |          connection id          |
// +--------+--------+-----------------+---------------------------------+
// |               arg                 |  body: `length` bytes ...
// +-----------------------------------+
//
// Every field big-endian. `length` counts the body only; bytes after it are
// Ethernet padding and are ignored. What `arg` and the body mean depends on
// the op (below). parse() checks everything before anything is used:
// malformed frames are the caller's counted drops.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "xk/address.hpp"
#include "xk/ip_addr.hpp"
#include "xk/byteorder.hpp"
#include "xk/result.hpp"

namespace xk::relay {

inline constexpr std::uint16_t kEtherType = 0x88B5;
inline constexpr std::uint8_t kVersion = 1;
// Ids of connections filterd opens (OPEN) have this bit clear; ids of the
// ones a node opens (CONNECT) have it set: neither side can pick the other's.
inline constexpr std::uint32_t kNodeIdBit = 0x80000000u;

enum class Op : std::uint8_t {
  open = 1,       // f->n: a connection accepted for the node. body: tuple; arg: credit for the node
  connect = 2,    // n->f: open one for me. body: connect; arg: credit for filterd
  connected = 3,  // f->n: it is open. body: tuple; arg: credit for the node
  data = 4,       // both: stream bytes (1..MTU-12). arg: 0
  credit = 5,     // both: the sender may send `arg` more bytes (arg > 0)
  fin = 6,        // both: no more bytes from the sender (half-close)
  rst = 7,        // both: the connection is over, abnormally. arg: RstCode
};
const char* to_string(Op op) noexcept;

// Why a connection ended (RST's arg).
enum class RstCode : std::uint32_t {
  reset = 1,        // the remote peer reset it
  refused = 2,      // CONNECT: the peer refused
  timed_out = 3,    // retransmissions or the handshake timed out
  unreachable = 4,  // no route to the peer
  no_listener = 5,  // OPEN for a port the node does not listen on (any more)
  aborted = 6,      // the other side aborted (a user's abort, a node gone, a bad frame)
  in_use = 7,       // CONNECT: the local port is taken
};
RstCode rst_code_of(Errc e) noexcept;
Errc errc_of(RstCode c) noexcept;

struct Header {
  static constexpr std::size_t kSize = 12;
  std::uint8_t version = kVersion;
  Op op = Op::data;
  std::uint16_t length = 0;
  std::uint32_t id = 0;
  std::uint32_t arg = 0;

  static Header read(std::span<const std::byte, kSize> b) noexcept {
    return Header{static_cast<std::uint8_t>(b[0]), static_cast<Op>(b[1]), load_be16(b.data() + 2),
                  load_be32(b.data() + 4), load_be32(b.data() + 8)};
  }
  void write(std::span<std::byte, kSize> b) const noexcept {
    b[0] = std::byte{version};
    b[1] = std::byte{static_cast<std::uint8_t>(op)};
    store_be16(b.data() + 2, length);
    store_be32(b.data() + 4, id);
    store_be32(b.data() + 8, arg);
  }
};

// The bodies that name addresses come in two sizes, one per family: an
// IPv4 body holds 4-byte addresses, an IPv6 body 16-byte ones (never an
// IPv4-mapped address: that is the IPv4 body's to carry). The body's size
// is the family; the version stays 1, and IPv4 frames are as before.

// OPEN and CONNECTED: the connection as filterd's TCP sees it.
//   IPv4: local addr (4) | remote addr (4) | local port | remote port  = 12
//   IPv6: local addr (16) | remote addr (16) | local port | remote port = 36
struct TupleBody {
  static constexpr std::size_t kSize4 = 12;
  static constexpr std::size_t kSize6 = 36;
  static constexpr std::size_t kMaxSize = kSize6;
  IpAddr local_addr;
  IpAddr remote_addr;
  std::uint16_t local_port = 0;
  std::uint16_t remote_port = 0;

  bool v4() const noexcept { return local_addr.is_v4() && remote_addr.is_v4(); }
  std::size_t size() const noexcept { return v4() ? kSize4 : kSize6; }
  // A body of either size; nullopt for any other size or a mapped address
  // in an IPv6 body.
  static std::optional<TupleBody> read(std::span<const std::byte> b) noexcept;
  // Writes size() bytes at the front of `b`; returns them.
  std::span<const std::byte> write(std::span<std::byte, kMaxSize> b) const noexcept;
};

// CONNECT: where to, and from which local port (0: filterd picks).
//   IPv4: remote addr (4) | remote port | local port  = 8
//   IPv6: remote addr (16) | remote port | local port = 20
struct ConnectBody {
  static constexpr std::size_t kSize4 = 8;
  static constexpr std::size_t kSize6 = 20;
  static constexpr std::size_t kMaxSize = kSize6;
  IpAddr remote_addr;
  std::uint16_t remote_port = 0;
  std::uint16_t local_port = 0;

  std::size_t size() const noexcept { return remote_addr.is_v4() ? kSize4 : kSize6; }
  static std::optional<ConnectBody> read(std::span<const std::byte> b) noexcept;
  std::span<const std::byte> write(std::span<std::byte, kMaxSize> b) const noexcept;
};

// A checked frame (the Ethernet payload): its header, and its body when the
// op has a fixed one. `body_offset` + `header.length` <= the frame's size.
struct Parsed {
  Header header;
  std::optional<TupleBody> tuple;      // open, connected
  std::optional<ConnectBody> connect;  // connect
};
// malformed: short, another version, an unknown op, a length past the end, a
// body of the wrong size for its op, a zero credit, a non-zero arg where
// none is defined, a zero id, DATA with no bytes, or an RST code of 0.
Result<Parsed> parse(std::span<const std::byte> frame) noexcept;
// The same, from the frame's first bytes `head` (at least the header and any
// fixed body: 24 bytes, or the whole frame if shorter) and its size; DATA's
// body (the stream) is not looked at.
Result<Parsed> parse(std::span<const std::byte> head, std::size_t frame_size) noexcept;
inline constexpr std::size_t kMaxHead = Header::kSize + TupleBody::kMaxSize;

}  // namespace xk::relay

#include "xk/msg.hpp"

namespace xk::relay {
// A frame of `h.op` with `body` (a control frame), headroom left for the
// Ethernet header. h.length is set from the body.
Result<Msg> make_frame(Header h, std::span<const std::byte> body);
// Puts a DATA header (h.length = the payload's size) in front of `payload`.
Status prepend_header(Msg& payload, Header h);
}  // namespace xk::relay

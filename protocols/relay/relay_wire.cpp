// The relay micro-protocol's wire format (xk/protocols/relay_wire.hpp).

#include "xk/protocols/relay_wire.hpp"

#include <cstring>

namespace xk::relay {

const char* to_string(Op op) noexcept {
  switch (op) {
    case Op::open: return "OPEN";
    case Op::connect: return "CONNECT";
    case Op::connected: return "CONNECTED";
    case Op::data: return "DATA";
    case Op::credit: return "CREDIT";
    case Op::fin: return "FIN";
    case Op::rst: return "RST";
  }
  return "?";
}

RstCode rst_code_of(Errc e) noexcept {
  switch (e) {
    case Errc::reset: return RstCode::reset;
    case Errc::refused: return RstCode::refused;
    case Errc::timed_out: return RstCode::timed_out;
    case Errc::no_route: return RstCode::unreachable;
    case Errc::exists: return RstCode::in_use;
    default: return RstCode::aborted;
  }
}

Errc errc_of(RstCode c) noexcept {
  switch (c) {
    case RstCode::refused:
    case RstCode::no_listener: return Errc::refused;
    case RstCode::timed_out: return Errc::timed_out;
    case RstCode::unreachable: return Errc::no_route;
    case RstCode::in_use: return Errc::exists;
    case RstCode::reset:
    case RstCode::aborted: return Errc::reset;
  }
  return Errc::reset;
}

namespace {

Ipv4Addr read_v4(const std::byte* p) noexcept { return Ipv4Addr{load_be32(p)}; }

// An IPv6 body's address: a mapped one belongs in an IPv4 body.
std::optional<IpAddr> read_v6(const std::byte* p) noexcept {
  IpAddr::Bytes b;
  std::memcpy(b.data(), p, b.size());
  IpAddr a = IpAddr::v6(b);
  if (a.is_v4()) return std::nullopt;
  return a;
}

std::byte* write_addr(std::byte* p, const IpAddr& a, bool v4) noexcept {
  if (v4) {
    store_be32(p, a.v4().value);
    return p + 4;
  }
  std::memcpy(p, a.bytes().data(), 16);
  return p + 16;
}

}  // namespace

std::optional<TupleBody> TupleBody::read(std::span<const std::byte> b) noexcept {
  TupleBody t;
  const std::byte* ports = nullptr;
  if (b.size() == kSize4) {
    t.local_addr = read_v4(b.data());
    t.remote_addr = read_v4(b.data() + 4);
    ports = b.data() + 8;
  } else if (b.size() == kSize6) {
    std::optional<IpAddr> local = read_v6(b.data());
    std::optional<IpAddr> remote = read_v6(b.data() + 16);
    if (!local || !remote) return std::nullopt;
    t.local_addr = *local;
    t.remote_addr = *remote;
    ports = b.data() + 32;
  } else {
    return std::nullopt;
  }
  t.local_port = load_be16(ports);
  t.remote_port = load_be16(ports + 2);
  return t;
}

std::span<const std::byte> TupleBody::write(std::span<std::byte, kMaxSize> b) const noexcept {
  const bool four = v4();
  std::byte* p = write_addr(b.data(), local_addr, four);
  p = write_addr(p, remote_addr, four);
  store_be16(p, local_port);
  store_be16(p + 2, remote_port);
  return std::span<const std::byte>(b).first(size());
}

std::optional<ConnectBody> ConnectBody::read(std::span<const std::byte> b) noexcept {
  ConnectBody c;
  const std::byte* ports = nullptr;
  if (b.size() == kSize4) {
    c.remote_addr = read_v4(b.data());
    ports = b.data() + 4;
  } else if (b.size() == kSize6) {
    std::optional<IpAddr> remote = read_v6(b.data());
    if (!remote) return std::nullopt;
    c.remote_addr = *remote;
    ports = b.data() + 16;
  } else {
    return std::nullopt;
  }
  c.remote_port = load_be16(ports);
  c.local_port = load_be16(ports + 2);
  return c;
}

std::span<const std::byte> ConnectBody::write(std::span<std::byte, kMaxSize> b) const noexcept {
  std::byte* p = write_addr(b.data(), remote_addr, remote_addr.is_v4());
  store_be16(p, remote_port);
  store_be16(p + 2, local_port);
  return std::span<const std::byte>(b).first(size());
}

Result<Parsed> parse(std::span<const std::byte> frame) noexcept { return parse(frame, frame.size()); }

Result<Parsed> parse(std::span<const std::byte> head, std::size_t frame_size) noexcept {
  if (head.size() < Header::kSize || frame_size < head.size()) return Errc::malformed;
  Parsed p;
  p.header = Header::read(head.first<Header::kSize>());
  const Header& h = p.header;
  if (h.version != kVersion || h.id == 0) return Errc::malformed;
  if (h.length > frame_size - Header::kSize) return Errc::malformed;
  if (h.op == Op::data) {
    if (h.length == 0 || h.arg != 0) return Errc::malformed;
    return p;  // the body is the stream: not looked at
  }
  if (h.length > head.size() - Header::kSize) return Errc::malformed;
  std::span<const std::byte> body = head.subspan(Header::kSize, h.length);
  switch (h.op) {
    case Op::open:
    case Op::connected:
      p.tuple = TupleBody::read(body);
      if (!p.tuple || p.tuple->local_port == 0 || p.tuple->remote_port == 0) return Errc::malformed;
      return p;
    case Op::connect:
      if ((h.id & kNodeIdBit) == 0) return Errc::malformed;
      p.connect = ConnectBody::read(body);
      if (!p.connect || p.connect->remote_port == 0 || p.connect->remote_addr.is_unspecified()) return Errc::malformed;
      return p;
    case Op::data:
      return p;  // checked above
    case Op::credit:
      if (!body.empty() || h.arg == 0) return Errc::malformed;
      return p;
    case Op::fin:
      if (!body.empty() || h.arg != 0) return Errc::malformed;
      return p;
    case Op::rst:
      if (!body.empty() || h.arg == 0 || h.arg > static_cast<std::uint32_t>(RstCode::in_use)) return Errc::malformed;
      return p;
  }
  return Errc::malformed;  // an unknown op
}

}  // namespace xk::relay

namespace xk::relay {

Result<Msg> make_frame(Header h, std::span<const std::byte> body) {
  h.length = static_cast<std::uint16_t>(body.size());
  Msg m = Msg::alloc(0, Msg::kDefaultHeadroom);
  if (!body.empty()) {
    if (Status st = m.append(body); !st) return st.error();
  }
  Result<std::span<std::byte>> room = m.push(Header::kSize);
  if (!room) return room.error();
  h.write(room->first<Header::kSize>());
  return m;
}

Status prepend_header(Msg& payload, Header h) {
  if (payload.size() > 0xffff) return Errc::too_large;
  h.length = static_cast<std::uint16_t>(payload.size());
  Result<std::span<std::byte>> room = payload.push(Header::kSize);
  if (!room) return room.error();
  h.write(room->first<Header::kSize>());
  return {};
}

}  // namespace xk::relay

// The relay micro-protocol's wire format (xk/protocols/relay_wire.hpp).

#include "xk/protocols/relay_wire.hpp"

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
      if (body.size() != TupleBody::kSize) return Errc::malformed;
      p.tuple = TupleBody::read(body.first<TupleBody::kSize>());
      if (p.tuple->local_port == 0 || p.tuple->remote_port == 0) return Errc::malformed;
      return p;
    case Op::connect:
      if (body.size() != ConnectBody::kSize || (h.id & kNodeIdBit) == 0) return Errc::malformed;
      p.connect = ConnectBody::read(body.first<ConnectBody::kSize>());
      if (p.connect->remote_port == 0 || p.connect->remote_addr.value == 0) return Errc::malformed;
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

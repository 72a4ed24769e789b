#include "xk/result.hpp"

namespace xk {

const char* to_string(Errc e) noexcept {
  switch (e) {
    case Errc::ok: return "ok";
    case Errc::no_headroom: return "no headroom";
    case Errc::out_of_range: return "out of range";
    case Errc::too_large: return "too large";
    case Errc::no_memory: return "no memory";
    case Errc::not_found: return "not found";
    case Errc::exists: return "already exists";
    case Errc::invalid_argument: return "invalid argument";
    case Errc::unsupported: return "unsupported";
    case Errc::would_block: return "would block";
    case Errc::closed: return "closed";
    case Errc::bad_state: return "bad state";
    case Errc::malformed: return "malformed";
    case Errc::no_route: return "no route";
    case Errc::port_unreachable: return "port unreachable";
    case Errc::proto_unreachable: return "protocol unreachable";
    case Errc::refused: return "connection refused";
    case Errc::reset: return "connection reset";
    case Errc::timed_out: return "timed out";
    case Errc::not_connected: return "not connected";
    case Errc::interrupted: return "interrupted by a signal";
  }
  return "unknown error";
}

}  // namespace xk

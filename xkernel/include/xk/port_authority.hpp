#pragma once
// PortAuthority: who else must agree before a transport takes a port. A stack
// that owns its address alone needs none. Compute nodes that share one
// address behind filterd (docs/filterd.md) do: a port to listen on, or the
// local port of a connection, is host-wide, so the transport asks filterd,
// which also installs the rule that steers the flow's frames to this node --
// before the SYN leaves. The calls are synchronous (a control-socket round
// trip) and happen only at set-up and tear-down, never per packet.

#include <cstdint>

#include "xk/address.hpp"
#include "xk/result.hpp"

namespace xk {

class PortAuthority {
 public:
  virtual ~PortAuthority() = default;

  // A passive open of `proto` (6 TCP, 17 UDP) on `port` (0: the authority
  // picks one). `group`: share the port with other nodes, new flows spread
  // among them (SO_REUSEPORT). Returns the port now ours; exists if taken.
  virtual Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool group) = 0;
  virtual void release_listen(std::uint8_t proto, std::uint16_t port) noexcept = 0;

  // An active open to (remote, remote_port) from `local_port` (0: the
  // authority picks a host-wide free one). Returns the local port; the
  // flow's frames come to this node from then on.
  virtual Result<std::uint16_t> claim_connect(std::uint8_t proto, std::uint16_t local_port, const IpAddr& remote,
                                              std::uint16_t remote_port) = 0;
  // The connection is over (after TIME-WAIT): the 4-tuple may be reused.
  virtual void release_connect(std::uint8_t proto, std::uint16_t local_port, const IpAddr& remote,
                               std::uint16_t remote_port) noexcept = 0;
};

}  // namespace xk

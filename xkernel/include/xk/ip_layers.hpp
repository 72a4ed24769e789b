#pragma once
// A transport over one IP layer per family (tcp below=ip0,ip6): what TCP
// and UDP do alike with the layers below them.

#include <cstdint>
#include <span>

#include "xk/protocol.hpp"

namespace xk {

// Enables protocol number `proto` for `upper` on every layer, or on none: a
// refusal undoes the ones before it and is returned.
inline Status enable_on_each(Protocol& upper, std::span<Protocol* const> layers, std::uint32_t proto) {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Participants parts;
    parts.local.push(ProtoNum{proto});
    if (Status st = layers[i]->open_enable(upper, parts); !st) {
      for (std::size_t j = 0; j < i; ++j) {
        Participants undo;
        undo.local.push(ProtoNum{proto});
        (void)layers[j]->open_disable(upper, undo);
      }
      return st;
    }
  }
  return {};
}

inline void disable_on_each(Protocol& upper, std::span<Protocol* const> layers, std::uint32_t proto) {
  for (Protocol* ip : layers) {
    Participants parts;
    parts.local.push(ProtoNum{proto});
    (void)ip->open_disable(upper, parts);
  }
}

// A session to `peer` for protocol `proto` from the layer of its family:
// each layer says unsupported for another family's address. `local`, when
// given, is the address to send from.
inline Result<SessionRef> open_for_peer(Protocol& upper, std::span<Protocol* const> layers, const IpAddr& peer,
                                        std::uint32_t proto, const IpAddr& local = IpAddr{}) {
  for (Protocol* ip : layers) {
    Participants parts;
    parts.remote.push(peer);
    parts.remote.push(ProtoNum{proto});
    if (!local.is_unspecified()) parts.local.push(local);
    Result<SessionRef> r = ip->open(upper, parts);
    if (r || r.error() != Errc::unsupported) return r;
  }
  return Errc::unsupported;
}

}  // namespace xk

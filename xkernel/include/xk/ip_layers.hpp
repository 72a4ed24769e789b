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

// The port's offloads for each family's packets, as the layer of that
// family reports them (ipv4 all it has; ipv6 the transport checksums and
// segmentation): a layer's family is its local address's. A layer with no
// address yet, or that does not answer, offers nothing.
struct FamilyOffloads {
  LinkOffloads v4, v6;
  const LinkOffloads& of(const IpAddr& a) const noexcept { return a.is_v4() ? v4 : v6; }
};

inline FamilyOffloads offloads_of(std::span<Protocol* const> layers) {
  FamilyOffloads f;
  for (Protocol* ip : layers) {
    Result<Participant> local = ip->control(ctl::GetLocalAddr{});
    Result<IpAddr> addr = local ? local->peek<IpAddr>() : Result<IpAddr>(local.error());
    Result<LinkOffloads> o = ip->control(ctl::GetOffloads{});
    if (addr && o) (addr->is_v4() ? f.v4 : f.v6) = *o;
  }
  return f;
}

}  // namespace xk

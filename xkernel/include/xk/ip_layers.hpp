#pragma once
// A transport over one IP layer per family (tcp below=ip0,ip6): what TCP
// and UDP do alike with the layers below them.

#include <cstdint>
#include <span>

#include "xk/byteorder.hpp"
#include "xk/msg.hpp"
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

// The hairpin of a shared address (ipv4's and ipv6's `hairpin`): whether
// `upper`, the transport of a TCP (`tcp`) or UDP packet `payload` (its
// header first) sent to our own address `dst`, owns it -- its connection,
// or for a SYN its listener (ctl::ClaimsOwn). What nobody takes is ours,
// answered here as ever.
inline bool transport_claims(Protocol* upper, const IpAddr& dst, bool tcp, Msg& payload) {
  if (upper == nullptr) return true;
  Result<std::span<const std::byte>> h = payload.peek(tcp ? 14 : 4);
  if (!h) return true;
  constexpr std::uint8_t kSyn = 0x02, kAck = 0x10;
  const auto flags = tcp ? std::to_integer<std::uint8_t>((*h)[13]) : std::uint8_t{0};
  const ctl::ClaimsOwn q{dst, Port{load_be16(h->data())}, Port{load_be16(h->data() + 2)},
                         tcp && (flags & (kSyn | kAck)) == kSyn};
  return upper->control(q).ok();
}

}  // namespace xk

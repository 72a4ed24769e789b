#pragma once
// Stands where ipv4 stands, for a transport under test (tcp, udp, and
// micro-protocols between): the ipv4 contract of docs/architecture.md --
//   - one session per peer, opened with remote {Ipv4Addr, ProtoNum} (a second
//     open of the same peer is Errc::exists, as in ipv4);
//   - one passive open on the transport's protocol number; a packet from a
//     new peer is announced with open_done before it is handed up;
//   - what it hands up carries the packet's facts (Msg::rx());
//   - sessions answer GetLocalAddr, GetPeerAddr, GetMtu and SetDontFragment;
//     the protocol answers GetMtu, GetHeaderRoom, GetOffloads and GetLocalAddr
//     (its IPv4 address: the family its offloads serve);
// and what is pushed kept in `sent`: the message as given, a copy of its
// bytes (the message may share buffers its sender reuses), and its offloads.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "xk/protocol.hpp"

namespace xk::test {

class FakeIp final : public Protocol {
 public:
  struct Sent {
    Ipv4Addr peer;
    Msg msg;
    std::vector<std::byte> bytes;
    Offload offload;  // what the transport asked of the port (segmentation, checksums)
  };

  FakeIp(Ipv4Addr local, std::uint8_t protocol, std::size_t mtu = 1480)
      : Protocol("ip0", "fake-ipv4"), local_(local), protocol_(protocol), mtu_(mtu) {}

  class S final : public Session {
   public:
    S(FakeIp& ip, Protocol* up, Ipv4Addr peer) : Session(ip, up), ip_(ip), peer_(peer) {}
    Status push(Msg m) override {
      std::vector<std::byte> b(m.size());
      if (!m.copy_out(0, b).ok()) return Errc::malformed;
      const Offload o = m.offload();
      ip_.sent.push_back(Sent{peer_, std::move(m), std::move(b), o});
      return {};
    }
    Status pop(Session&, Msg) override { return Errc::unsupported; }
    Status close() override {
      ip_.sessions.erase(peer_.value);
      return {};
    }
    Result<ControlReply> control_any(const ControlQuery& q) override {
      if (std::holds_alternative<ctl::GetLocalAddr>(q)) return ControlReply{Participant{ip_.local_}};
      if (std::holds_alternative<ctl::GetPeerAddr>(q)) return ControlReply{Participant{peer_}};
      if (std::holds_alternative<ctl::GetMtu>(q)) return ControlReply{ip_.mtu_};
      if (const auto* df = std::get_if<ctl::SetDontFragment>(&q)) {
        dont_fragment = df->df;
        return ControlReply{std::monostate{}};
      }
      return Session::control_any(q);
    }
    Ipv4Addr peer() const { return peer_; }
    bool dont_fragment = false;

   private:
    FakeIp& ip_;
    Ipv4Addr peer_;
  };

  Result<SessionRef> open(Protocol& up, Participants& parts) override {
    Result<ProtoNum> proto = parts.remote.pop<ProtoNum>();
    if (!proto) return proto.error();
    if (proto->value != protocol_) return Errc::invalid_argument;
    Result<IpAddr> addr = parts.remote.pop<IpAddr>();
    if (!addr) return addr.error();
    if (!addr->is_v4()) return Errc::unsupported;  // as ipv4's
    const Ipv4Addr peer = addr->v4();
    if (sessions.contains(peer.value)) return Errc::exists;
    ++opens;
    SessionRef s = make_ref<S>(*this, &up, peer);
    sessions[peer.value] = s;
    return s;
  }
  Status open_enable(Protocol& up, Participants& parts) override {
    Result<ProtoNum> proto = parts.local.pop<ProtoNum>();
    if (!proto) return proto.error();
    if (proto->value != protocol_) return Errc::invalid_argument;
    enabled = &up;
    return {};
  }
  Status open_disable(Protocol&, Participants&) override {
    enabled = nullptr;
    ++disables;
    return {};
  }
  Result<ControlReply> control_any(const ControlQuery& q) override {
    if (std::holds_alternative<ctl::GetMtu>(q)) return ControlReply{mtu_};
    if (std::holds_alternative<ctl::GetHeaderRoom>(q)) return ControlReply{header_room};
    if (std::holds_alternative<ctl::GetOffloads>(q)) return ControlReply{offloads};
    if (std::holds_alternative<ctl::GetLocalAddr>(q)) return ControlReply{Participant{local_}};
    return Protocol::control_any(q);
  }

  // A packet from `peer` to `dst` (our address unless given), handed up as
  // ipv4 would: a new peer is announced with open_done first.
  Status receive(Ipv4Addr peer, Msg m, Ipv4Addr dst = Ipv4Addr{}) {
    if (enabled == nullptr) return Errc::proto_unreachable;
    auto it = sessions.find(peer.value);
    if (it == sessions.end()) {
      SessionRef s = make_ref<S>(*this, enabled, peer);
      sessions[peer.value] = s;
      Participants parts;
      parts.local.push(local_);
      parts.remote.push(peer);
      parts.remote.push(ProtoNum{protocol_});
      if (Status st = enabled->open_done(*this, *s, parts); !st) return st;
      it = sessions.find(peer.value);
      if (it == sessions.end()) return Errc::closed;
    }
    SessionRef s = it->second;
    RxInfo& info = m.rx();
    info = RxInfo{};
    info.src = peer;
    info.dst = dst.value != 0 ? dst : local_;
    info.protocol = protocol_;
    info.broadcast = info.dst != IpAddr(local_);
    info.traffic_class = rx_tos;
    return s->upper()->demux(*s, std::move(m));
  }
  Status receive(Ipv4Addr peer, std::span<const std::byte> bytes, Ipv4Addr dst = Ipv4Addr{}) {
    return receive(peer, Msg::copy_of(bytes), dst);
  }

  std::deque<Sent> sent;
  std::uint8_t rx_tos = 0;  // the TOS byte of what receive() hands up (ECN marks)
  LinkOffloads offloads;     // GetOffloads: none unless a test sets some
  std::size_t header_room = 0;
  std::map<std::uint32_t, SessionRef> sessions;
  Protocol* enabled = nullptr;
  int opens = 0;
  int disables = 0;

 private:
  Ipv4Addr local_;
  std::uint8_t protocol_;
  std::size_t mtu_;
};

}  // namespace xk::test

#pragma once
// eth: Ethernet II over one driver (docs/architecture.md, docs/eth-arp.md).
//
//   open(upper, {remote: MacAddr dst, ProtoNum type})  -> a session sending to dst
//   open_enable(upper, {local: ProtoNum type})         -> frames of that type from
//                                                         a new source create a
//                                                         session (open_done)
//   demux(driver_session, frame)                       -> MAC filter, 802.1Q skip,
//                                                         active map, passive map
//
// Sessions are keyed by (remote MAC, EtherType). An active open of a key that
// already has a session shares it (each open is undone by one close). A
// session opened by one protocol for a type another protocol enabled is
// handed to the enabling protocol by the first frame that arrives on it (its
// open_done is called then): the opener keeps sending through it. This is how
// arp sends IPv4 packets through sessions on which ipv4 receives.

#include <cstdint>
#include <optional>
#include <vector>

#include "xk/demux.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"
#include "xk/protocols/eth_wire.hpp"

namespace xk::eth {

class EthProtocol;

struct EthConfig {
  std::optional<MacAddr> mac;       // default: the driver's GetLocalAddr
  bool pad = true;                  // pad short frames to 60 bytes on send
  std::size_t max_sessions = 4096;  // passive creations beyond this are dropped
};

class EthSession final : public Session {
 public:
  EthSession(EthProtocol& proto, Protocol* upper, MacAddr remote, std::uint16_t type, SessionRef lower);

  Status push(Msg msg) override;
  Status pop(Session& lower, Msg msg) override;
  Status close() override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  const MacAddr& remote() const noexcept { return remote_; }
  std::uint16_t type() const noexcept { return type_; }

 private:
  friend class EthProtocol;
  EthProtocol& proto_;
  MacAddr remote_;
  std::uint16_t type_;
  SessionRef lower_;
  std::uint32_t users_ = 1;  // opens and passive hand-outs not yet closed
};

class EthProtocol final : public Protocol {
 public:
  using Config = EthConfig;

  // Opens a session on `below` and becomes its receiver. Throws
  // std::invalid_argument when no MAC is configured and the driver has none,
  // or when the driver refuses us as its receiver.
  EthProtocol(std::string name, Protocol& below, Config config = {});
  ~EthProtocol() override;

  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  Status open_enable(Protocol& upper, Participants& parts) override;
  Status open_disable(Protocol& upper, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  // Receive frames sent to a multicast group (invalid_argument for an
  // individual address; joining twice is counted, leave once per join).
  Status join_multicast(MacAddr group);
  Status leave_multicast(MacAddr group);

  const MacAddr& mac() const noexcept { return mac_; }
  std::size_t session_count() const noexcept { return active_.size(); }

 private:
  friend class EthSession;

  struct Key {
    MacAddr remote;
    std::uint16_t type;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct TypeKey {
    std::uint16_t type;
    friend bool operator==(const TypeKey&, const TypeKey&) = default;
  };
  struct Group {
    MacAddr mac;
    std::uint32_t joins = 0;
  };

  bool accepts(const MacAddr& dst) const noexcept;
  Status deliver(EthSession& s, Session& lower, Msg msg);
  Status transmit(EthSession& s, Msg msg);

  Protocol& below_;
  Config config_;
  MacAddr mac_;
  SessionRef lower_;
  bool enabled_ = false;
  ActiveMap<Key> active_;
  EnableTable<TypeKey> passive_;
  std::vector<Group> groups_;
  std::size_t driver_mtu_ = 0;
  Counter& rx_frames_;
  Counter& tx_frames_;
  Counter& tx_padded_;
  Counter& rx_vlan_;
  Counter& rx_multicast_;
  Counter& drop_truncated_;
  Counter& drop_not_for_us_;
  Counter& drop_bad_src_;
  Counter& drop_llc_;
  Counter& drop_too_many_tags_;
  Counter& drop_too_big_;
  Counter& drop_session_limit_;
};

// Make the kind `eth` available to graph specs:
//   eth eth0 below=net0 [mac=02:00:00:00:00:01] [pad=on] [max_sessions=4096]
void register_eth(Registry& registry);

}  // namespace xk::eth

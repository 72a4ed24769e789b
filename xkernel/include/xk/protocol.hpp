#pragma once
// The uniform protocol interface (x-kernel's UPI).
//
// Every layer is a Protocol; every conversation through a layer is a Session.
// Both offer one interface, so any protocol can sit on any other that offers
// what it needs:
//
//   Protocol::open(upper, participants)        active open, returns a session
//   Protocol::open_enable / open_disable       passive open: "tell upper about
//                                              new sessions matching this key"
//   Protocol::open_done(lower, session, parts) upcall on the upper protocol when
//                                              a passive open created `session`
//   Protocol::demux(lower_session, msg)        a message arrives from below
//   Session::push(msg)                         send downward
//   Session::pop(lower_session, msg)           deliver upward (called by demux)
//   Session::close()                           end the session
//   control(query)                             typed get/set on either; layers
//                                              answer in control_any(variant)
//
// Sessions are reference counted (SessionRef); maps and upper sessions hold
// references, and close() drops the protocol's own.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "xk/address.hpp"
#include "xk/counters.hpp"
#include "xk/msg.hpp"
#include "xk/result.hpp"

namespace xk {

class Protocol;
class Session;

// ---- intrusive reference ------------------------------------------------

template <class T>
class Ref {
 public:
  Ref() noexcept = default;
  Ref(std::nullptr_t) noexcept {}  // NOLINT
  explicit Ref(T* p) noexcept : p_(p) {
    if (p_ != nullptr) p_->ref_acquire();
  }
  template <class U>
    requires std::is_convertible_v<U*, T*>
  Ref(const Ref<U>& o) noexcept : Ref(o.get()) {}  // NOLINT
  Ref(const Ref& o) noexcept : Ref(o.p_) {}
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref& operator=(Ref o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~Ref() {
    if (p_ != nullptr) p_->ref_release();
  }

  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  friend bool operator==(const Ref& a, const Ref& b) noexcept { return a.p_ == b.p_; }

 private:
  T* p_ = nullptr;
};

template <class T, class... Args>
Ref<T> make_ref(Args&&... args) {
  return Ref<T>(new T(std::forward<Args>(args)...));
}

// ---- typed control queries ----------------------------------------------

enum class ChecksumMode : std::uint8_t {
  off = 0,      // neither computed on send nor verified on receive
  tx_only = 1,  // computed on send, not verified
  rx_only = 2,  // verified on receive, not computed
  on = 3,       // both
};

// What the port can do for the layers above (Offload in msg.hpp): fill the
// IPv4/UDP/TCP checksums on transmit, verify them on receive, cut a large
// TCP segment into MTU-sized ones.
struct LinkOffloads {
  bool tx_ip_csum = false;
  bool tx_udp_csum = false;
  bool tx_tcp_csum = false;
  bool rx_ip_csum = false;
  bool rx_l4_csum = false;
  bool tx_tcp_seg = false;  // Offload::tx_tcp_seg (the DPDK driver cuts in software)
  friend bool operator==(const LinkOffloads&, const LinkOffloads&) = default;
};

namespace ctl {
// Largest message an upper layer may push through this layer in one go.
struct GetMtu {
  using Reply = std::size_t;
};
// Header bytes this layer and every layer below it add in front of a message.
struct GetHeaderRoom {
  using Reply = std::size_t;
};
struct GetLocalAddr {
  using Reply = Participant;
};
struct GetPeerAddr {
  using Reply = Participant;
};
struct GetChecksum {
  using Reply = ChecksumMode;
};
struct SetChecksum {
  ChecksumMode mode = ChecksumMode::on;
  using Reply = std::monostate;
};
struct GetCounters {
  using Reply = const CounterSet*;
};
// The checksum offloads of the port at the bottom (a driver answers; link
// layers and micro-protocols pass it down; ipv4 answers for its link).
struct GetOffloads {
  using Reply = LinkOffloads;
};
// The largest frame the link at the bottom takes now, Ethernet header
// included: GetMtu's answer, or more on a link between two xk processes
// whose other end takes large frames (docs/dpdk-driver.md, "Large frames").
// Asked of a driver directly (no layer passes it on).
struct GetFrameMax {
  using Reply = std::size_t;
};
// Where the link wants bulk buffers to come from (xk/msg.hpp's
// ChunkSource): a link that sends straight out of memory its peer maps
// (the shm driver's arena) answers; eth, ipv4 and the micro-protocols pass
// it down; unsupported: the heap serves.
struct GetChunkSource {
  using Reply = ChunkSource*;
};
// An ICMP error about one of our flows, handed by ipv4 to the transport
// protocol that owns the inner packet's protocol number (RFC 1122 3.2.2.1,
// RFC 1191 for frag-needed). Ports are 0 for transports without them.
struct NetError {
  enum class Kind : std::uint8_t { unreachable, frag_needed, time_exceeded, param_problem };
  Kind kind = Kind::unreachable;
  std::uint8_t icmp_type = 0;
  std::uint8_t icmp_code = 0;
  std::uint16_t next_hop_mtu = 0;  // frag_needed only; 0 if the router did not say
  IpAddr local;                    // the inner packet's source (us)
  IpAddr remote;                   // the inner packet's destination (the peer)
  std::uint8_t protocol = 0;
  Port local_port;
  Port remote_port;
  std::uint32_t inner_seq = 0;     // TCP: the sequence number in the quoted header (RFC 5927)
};
struct DeliverError {
  NetError error;
  using Reply = std::monostate;
};
// Asked of the session a packet came up through, inside the demux upcall:
// ipv4 answers for the packet it is delivering (Errc::bad_state outside an
// upcall); micro-protocols between pass it down.
// RFC 1191: whether the session's packets carry IPv4's don't-fragment bit
// (ipv4 sessions answer; micro-protocols between pass it down).
struct SetDontFragment {
  bool df = true;
  using Reply = std::monostate;
};
// Asked by ipv4 of a transport about a datagram it sends to its own
// address when that address is shared with other stacks (behind filterd,
// ipv4's hairpin=on): whether this stack is the one to receive it -- a
// connection, listener (for a segment that opens one: `opens`) or socket
// of its own at `to`, with `from` as the other end. Success: deliver it
// here; not_found: it is another stack's, out through the link.
// Receive frames sent to a link-layer group address (an IPv6 node's
// solicited-node and all-nodes groups on Ethernet, RFC 2464 7): eth
// answers; a link without groups is unsupported.
struct JoinLinkGroup {
  MacAddr group;
  using Reply = std::monostate;
};
struct ClaimsOwn {
  IpAddr addr;  // the shared address (either family)
  Port from;
  Port to;
  bool opens = false;  // TCP: a SYN without ACK
  using Reply = std::monostate;
};
}  // namespace ctl

using ControlQuery = std::variant<ctl::GetMtu, ctl::GetHeaderRoom, ctl::GetLocalAddr, ctl::GetPeerAddr,
                                  ctl::GetChecksum, ctl::SetChecksum, ctl::GetCounters, ctl::DeliverError,
                                  ctl::GetOffloads, ctl::GetFrameMax, ctl::GetChunkSource, ctl::SetDontFragment,
                                  ctl::ClaimsOwn, ctl::JoinLinkGroup>;
using ControlReply =
    std::variant<std::monostate, std::size_t, Participant, ChecksumMode, const CounterSet*, LinkOffloads,
                 ChunkSource*>;

namespace detail {
template <class Q>
Result<typename Q::Reply> typed_reply(Result<ControlReply> r) {
  if (!r) return r.error();
  if (auto* v = std::get_if<typename Q::Reply>(&*r)) return std::move(*v);
  return Errc::bad_state;  // the layer answered with the wrong type: a bug there
}
}  // namespace detail

// ---- Session ------------------------------------------------------------

class Session {
 public:
  // `self`: the protocol this session belongs to; `upper`: the protocol that
  // receives what this session pops (null at the top of a graph).
  Session(Protocol& self, Protocol* upper) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  virtual ~Session();

  Protocol& protocol() const noexcept { return *self_; }
  Protocol* upper() const noexcept { return upper_; }
  void set_upper(Protocol* upper) noexcept { upper_ = upper; }

  // Send downward through this session.
  virtual Status push(Msg msg) = 0;
  // Receive from below: called by this session's protocol from demux(). The
  // usual body strips this layer's header and calls upper()->demux(*this, msg).
  virtual Status pop(Session& lower, Msg msg) = 0;
  // End the session: the protocol forgets it and releases what it holds below.
  virtual Status close();
  virtual Result<ControlReply> control_any(const ControlQuery& query);

  template <class Q>
  Result<typename Q::Reply> control(const Q& query) {
    return detail::typed_reply<Q>(control_any(ControlQuery{query}));
  }

  // Sessions alive in this process: the leak check compares it across a test.
  static std::int64_t live() noexcept { return live_.load(std::memory_order_relaxed); }

 private:
  template <class>
  friend class Ref;
  void ref_acquire() noexcept { ++refs_; }
  void ref_release() noexcept {
    if (--refs_ == 0) delete this;
  }

  Protocol* self_;
  Protocol* upper_;
  std::uint32_t refs_ = 0;  // one stack, one thread: no atomics needed
  static std::atomic<std::int64_t> live_;
};

using SessionRef = Ref<Session>;

// ---- Protocol -----------------------------------------------------------

class Protocol {
 public:
  // `name`: this instance's name in the graph ("tcp0"); `kind`: what it is ("tcp").
  Protocol(std::string name, std::string kind, std::vector<Protocol*> below = {});
  Protocol(const Protocol&) = delete;
  Protocol& operator=(const Protocol&) = delete;
  virtual ~Protocol();

  const std::string& name() const noexcept { return name_; }
  const std::string& kind() const noexcept { return kind_; }
  // The protocols this one was configured over, in graph-spec order.
  const std::vector<Protocol*>& below() const noexcept { return below_; }
  CounterSet& counters() noexcept { return counters_; }
  const CounterSet& counters() const noexcept { return counters_; }

  // Active open. Default: unsupported.
  virtual Result<SessionRef> open(Protocol& upper, Participants& parts);
  // Passive open. Default: unsupported.
  virtual Status open_enable(Protocol& upper, Participants& parts);
  virtual Status open_disable(Protocol& upper, Participants& parts);
  // Upcall from a lower protocol: its passive open created `session`, whose
  // upper is this protocol. Default: accept it.
  virtual Status open_done(Protocol& lower, Session& session, Participants& parts);
  // A message from below. Default: count and drop.
  virtual Status demux(Session& lower, Msg msg);
  virtual Result<ControlReply> control_any(const ControlQuery& query);

  template <class Q>
  Result<typename Q::Reply> control(const Q& query) {
    return detail::typed_reply<Q>(control_any(ControlQuery{query}));
  }

 protected:
  Counter& drops_no_session() noexcept { return *drop_no_session_; }

 private:
  std::string name_;
  std::string kind_;
  std::vector<Protocol*> below_;
  CounterSet counters_;
  Counter* drop_no_session_;
};

}  // namespace xk

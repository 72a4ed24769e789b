#include "xk/protocols/arp.hpp"

#include <optional>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "xk/protocols/arp_wire.hpp"
#include "xk/protocols/eth_wire.hpp"

namespace xk::arp {

struct ArpProtocol::Entry {
  Entry(ArpProtocol& arp, Ipv4Addr addr, State s)
      : ip(addr), state(s), timer(arp.loop_.timers(), [a = &arp, e = this] { a->on_timer(*e); }) {}

  Ipv4Addr ip;
  MacAddr mac;
  State state;
  unsigned requests_sent = 0;
  std::deque<Msg> pending;
  SessionRef data;  // eth (mac, 0x0800), opened on the first send
  Entry* older = nullptr;
  Entry* newer = nullptr;
  bool linked = false;  // on the age list (every state but permanent)
  Timer timer;          // incomplete: retry; reachable: expiry; failed: end of hold-down
};

Result<StaticEntry> parse_static_entry(std::string_view text) {
  std::size_t at = text.find('@');
  if (at == std::string_view::npos) return Errc::invalid_argument;
  Result<Ipv4Addr> ip = parse_ipv4(text.substr(0, at));
  Result<MacAddr> mac = parse_mac(text.substr(at + 1));
  if (!ip || !mac) return Errc::invalid_argument;
  if (eth::is_multicast(*mac) || eth::is_zero(*mac)) return Errc::invalid_argument;
  return StaticEntry{*ip, *mac};
}

ArpProtocol::ArpProtocol(std::string name, Protocol& below, EventLoop& loop, Config config)
    : Protocol(std::move(name), "arp", {&below}),
      below_(below),
      loop_(loop),
      config_(std::move(config)),
      rx_requests_(counters().add("rx_requests")),
      rx_replies_(counters().add("rx_replies")),
      rx_gratuitous_(counters().add("rx_gratuitous", "sender and target address equal")),
      tx_requests_(counters().add("tx_requests")),
      tx_replies_(counters().add("tx_replies")),
      tx_gratuitous_(counters().add("tx_gratuitous")),
      tx_data_(counters().add("tx_data", "IPv4 packets handed to eth")),
      drop_truncated_(counters().add("drop_truncated", "shorter than 28 bytes")),
      drop_bad_htype_(counters().add("drop_bad_htype", "hardware type not Ethernet (1)")),
      drop_bad_ptype_(counters().add("drop_bad_ptype", "protocol type not IPv4 (0x0800)")),
      drop_bad_hlen_(counters().add("drop_bad_hlen", "hardware length not 6")),
      drop_bad_plen_(counters().add("drop_bad_plen", "protocol length not 4")),
      drop_bad_op_(counters().add("drop_bad_op", "opcode neither request nor reply")),
      drop_bad_sender_(counters().add("drop_bad_sender", "group or zero sender MAC")),
      dup_addr_detected_(counters().add("dup_addr_detected", "another host claims one of our addresses")),
      rx_request_not_for_us_(counters().add("rx_request_not_for_us")),
      rx_reply_not_for_us_(counters().add("rx_reply_not_for_us", "unsolicited: may only refresh an entry")),
      cache_adds_(counters().add("cache_adds")),
      cache_updates_(counters().add("cache_updates", "existing entry refreshed by an ARP packet")),
      cache_expired_(counters().add("cache_expired")),
      cache_evictions_(counters().add("cache_evictions", "oldest learned entry removed at max_entries")),
      static_conflicts_(counters().add("static_conflicts", "ARP packet disagreeing with a static entry")),
      resolve_failed_(counters().add("resolve_failed", "retries exhausted")),
      drop_pending_full_(counters().add("drop_pending_full", "packet refused: queue full")),
      drop_unresolved_(counters().add("drop_unresolved", "queued packets dropped when resolution failed")),
      drop_evicted_(counters().add("drop_evicted", "queued packets dropped with an evicted entry")),
      drop_hold_down_(counters().add("drop_hold_down", "packet refused during the failed hold-down")),
      drop_tx_error_(counters().add("drop_tx_error", "eth refused a packet")),
      drop_not_ipv4_(counters().add("drop_not_ipv4", "packets for a next hop of another family")),
      drop_data_no_listener_(counters().add("drop_data_no_listener", "IPv4 frame with nobody enabled")),
      sink_(this->name() + ".data", drop_data_no_listener_) {
  Result<Participant> local = below.control(ctl::GetLocalAddr{});
  Result<MacAddr> mac = local ? local->peek<MacAddr>() : Result<MacAddr>(local.error());
  if (!mac) throw std::invalid_argument("'" + below.name() + "' has no MAC address (arp needs eth below)");
  mac_ = *mac;
  Participants bcast;
  bcast.remote.push(eth::kBroadcast);
  bcast.remote.push(ProtoNum{eth::kTypeArp});
  Result<SessionRef> s = below.open(*this, bcast);
  if (!s) throw std::invalid_argument("cannot open a broadcast session on '" + below.name() + "'");
  broadcast_ = *s;
  Participants en;
  en.local.push(ProtoNum{eth::kTypeArp});
  if (Status st = below.open_enable(*this, en); !st) {
    (void)broadcast_->close();
    throw std::invalid_argument("'" + below.name() + "' refused EtherType 0x0806: " + to_string(st.error()));
  }
  enabled_ = true;
  for (const StaticEntry& se : config_.statics) add_static(se.ip, se.mac);
}

ArpProtocol::~ArpProtocol() {
  // Entries hold eth sessions and queued packets: give both back first.
  std::vector<Entry*> all;
  entries_.for_each([&](const IpKey&, std::unique_ptr<Entry>& e) { all.push_back(e.get()); });
  for (Entry* e : all) {
    e->pending.clear();
    if (e->data) (void)e->data->close();
  }
  entries_.clear();
  if (broadcast_) (void)broadcast_->close();
  if (enabled_) {
    Participants en;
    en.local.push(ProtoNum{eth::kTypeArp});
    (void)below_.open_disable(*this, en);
  }
}

// ---- cache ----------------------------------------------------------------

ArpProtocol::Entry* ArpProtocol::find(Ipv4Addr ip) const noexcept {
  const std::unique_ptr<Entry>* e = entries_.find(IpKey{ip.value});
  return e == nullptr ? nullptr : e->get();
}

bool ArpProtocol::is_local(Ipv4Addr addr) const noexcept {
  return std::find(locals_.begin(), locals_.end(), addr) != locals_.end();
}

void ArpProtocol::unlink(Entry& e) noexcept {
  if (!e.linked) return;
  (e.older != nullptr ? e.older->newer : oldest_) = e.newer;
  (e.newer != nullptr ? e.newer->older : newest_) = e.older;
  e.older = e.newer = nullptr;
  e.linked = false;
}

void ArpProtocol::make_newest(Entry& e) noexcept {
  unlink(e);
  e.older = newest_;
  (newest_ != nullptr ? newest_->newer : oldest_) = &e;
  newest_ = &e;
  e.linked = true;
}

ArpProtocol::Entry& ArpProtocol::create(Ipv4Addr ip, State state) {
  if (state != State::permanent) {
    // An ARP storm must not grow the cache without bound: the oldest learned
    // entry makes room (static entries are never evicted).
    while (dynamic_count_ >= config_.max_entries && oldest_ != nullptr) {
      ++cache_evictions_;
      remove(*oldest_);
    }
    ++dynamic_count_;
  }
  auto fresh = std::make_unique<Entry>(*this, ip, state);
  Entry& e = *fresh;
  entries_.insert(IpKey{ip.value}, std::move(fresh));
  if (state != State::permanent) make_newest(e);
  return e;
}

void ArpProtocol::drop_pending(Entry& e, Counter& why) {
  why.inc(e.pending.size());
  pending_total_ -= e.pending.size();
  e.pending.clear();
}

void ArpProtocol::remove(Entry& e) {
  drop_pending(e, drop_evicted_);
  if (e.data) (void)e.data->close();
  if (e.state != State::permanent) --dynamic_count_;
  unlink(e);
  entries_.erase(IpKey{e.ip.value});  // destroys e (and cancels its timer)
}

void ArpProtocol::learn(Entry& e, const MacAddr& mac) {
  if (e.data && e.mac != mac) {
    // The neighbour moved to another MAC: the old eth session is stale.
    (void)e.data->close();
    e.data = nullptr;
  }
  e.mac = mac;
  e.state = State::reachable;
  e.requests_sent = 0;
  e.timer.arm_after(config_.timeout);
  make_newest(e);
  flush(e);
}

void ArpProtocol::flush(Entry& e) {
  // Take the queue first: a push may come back into us (a synchronous driver).
  std::deque<Msg> queued = std::move(e.pending);
  e.pending.clear();
  pending_total_ -= queued.size();
  Ipv4Addr ip = e.ip;
  for (Msg& m : queued) {
    Entry* cur = find(ip);
    if (cur == nullptr || cur->state != State::reachable) {
      ++drop_unresolved_;
      continue;
    }
    (void)transmit(*cur, std::move(m));
  }
}

Status ArpProtocol::transmit(Entry& e, Msg packet) {
  if (!e.data) {
    Participants parts;
    parts.remote.push(e.mac);
    parts.remote.push(ProtoNum{eth::kTypeIpv4});
    Result<SessionRef> s = below_.open(sink_, parts);
    if (!s) {
      ++drop_tx_error_;
      return s.error();
    }
    e.data = *s;
  }
  SessionRef via = e.data;
  Status st = via->push(std::move(packet));
  if (st) {
    ++tx_data_;
  } else {
    ++drop_tx_error_;
  }
  return st;
}

void ArpProtocol::on_timer(Entry& e) {
  switch (e.state) {
    case State::incomplete:
      // RFC 1122 2.3.2.1: re-send at most once per retry interval; give up
      // after `retries` re-sends.
      if (e.requests_sent <= config_.retries) {
        ++e.requests_sent;
        Ipv4Addr spa = locals_.empty() ? Ipv4Addr{} : locals_.front();
        (void)send_arp(kOpRequest, eth::kBroadcast, spa, MacAddr{}, e.ip, nullptr);
        e.timer.arm_after(config_.retry_interval);
        return;
      }
      ++resolve_failed_;
      drop_pending(e, drop_unresolved_);
      e.state = State::failed;
      e.timer.arm_after(config_.hold_down);
      return;
    case State::reachable:
      ++cache_expired_;
      remove(e);
      return;
    case State::failed:
      remove(e);
      return;
    case State::permanent:
      return;
  }
}

void ArpProtocol::add_static(Ipv4Addr ip, MacAddr mac) {
  if (Entry* old = find(ip)) remove(*old);
  Entry& e = create(ip, State::permanent);
  e.mac = mac;
}

std::optional<ArpProtocol::EntryView> ArpProtocol::lookup(Ipv4Addr ip) const {
  const Entry* e = find(ip);
  if (e == nullptr) return std::nullopt;
  bool known = e->state == State::reachable || e->state == State::permanent;
  return EntryView{e->ip, known ? e->mac : MacAddr{}, e->state, e->pending.size()};
}

// ---- sending --------------------------------------------------------------

Status ArpProtocol::send_arp(std::uint16_t op, const MacAddr& eth_dst, Ipv4Addr spa, const MacAddr& tha,
                             Ipv4Addr tpa, Session* via) {
  Msg m = Msg::alloc(0);
  Result<std::span<std::byte>> room = m.push(Packet::kSize);
  if (!room) return room.status();
  Packet p;
  p.op = op;
  p.sha = mac_;
  p.spa = spa;
  p.tha = tha;
  p.tpa = tpa;
  p.write(room->first<Packet::kSize>());
  if (via != nullptr) return via->push(std::move(m));
  if (eth::is_broadcast(eth_dst)) {
    if (op == kOpRequest && spa != tpa) ++tx_requests_;
    return broadcast_->push(std::move(m));
  }
  // A unicast frame to a MAC we have no session for (a reply whose sender
  // hardware address differs from the frame's source).
  Participants parts;
  parts.remote.push(eth_dst);
  parts.remote.push(ProtoNum{eth::kTypeArp});
  Result<SessionRef> s = below_.open(*this, parts);
  if (!s) return s.error();
  Status st = (*s)->push(std::move(m));
  (void)(*s)->close();
  return st;
}

namespace {
// Next hops whose link address follows from the IP address itself: limited
// broadcast (RFC 1122 3.3.6) and multicast (RFC 1112 6.4: 01:00:5e followed by
// the low 23 bits of the group).
std::optional<MacAddr> mapped_mac(Ipv4Addr ip) {
  if (ip.value == 0xffffffffu) return eth::kBroadcast;
  if ((ip.value >> 28) == 0xe) {
    return MacAddr{{0x01, 0x00, 0x5e, static_cast<std::uint8_t>((ip.value >> 16) & 0x7f),
                    static_cast<std::uint8_t>(ip.value >> 8), static_cast<std::uint8_t>(ip.value)}};
  }
  return std::nullopt;
}
}  // namespace

Status ArpProtocol::send_to(const IpAddr& next_hop_addr, Msg packet) {
  if (!next_hop_addr.is_v4()) {
    ++drop_not_ipv4_;
    return Errc::unsupported;
  }
  const Ipv4Addr next_hop = next_hop_addr.v4();
  Entry* e = find(next_hop);
  if (e == nullptr) {
    if (std::optional<MacAddr> mac = mapped_mac(next_hop)) {
      add_static(next_hop, *mac);
      e = find(next_hop);
    }
  }
  if (e != nullptr) {
    switch (e->state) {
      case State::reachable:
      case State::permanent:
        return transmit(*e, std::move(packet));
      case State::failed:
        // RFC 1122 2.3.2.2 (and xk/link.hpp): report, do not retry at once.
        ++drop_hold_down_;
        return Errc::no_route;
      case State::incomplete:
        break;
    }
  } else {
    if (config_.max_entries == 0) {
      ++drop_pending_full_;
      return Errc::would_block;
    }
    e = &create(next_hop, State::incomplete);
    e->requests_sent = 0;
    // The first request goes out now; the timer sends the retries.
    on_timer(*e);
  }
  if (e->pending.size() >= config_.pending_per_entry || pending_total_ >= config_.pending_total) {
    ++drop_pending_full_;
    return Errc::would_block;
  }
  e->pending.push_back(std::move(packet));
  ++pending_total_;
  return {};
}

void ArpProtocol::add_local_address(const IpAddr& local) {
  if (!local.is_v4()) return;  // not ours to answer for
  const Ipv4Addr addr = local.v4();
  if (is_local(addr)) return;
  locals_.push_back(addr);
  // Our own address is not a neighbour's.
  if (Entry* e = find(addr); e != nullptr && e->state != State::permanent) remove(*e);
  announce(addr);
}

void ArpProtocol::announce(Ipv4Addr addr) {
  if (!config_.gratuitous) return;
  // RFC 5227 2.3 announcement: a request with sender and target both ours,
  // so neighbours that know us refresh their entry (RFC 826 merge).
  if (send_arp(kOpRequest, eth::kBroadcast, addr, MacAddr{}, addr, nullptr)) ++tx_gratuitous_;
}

void ArpProtocol::announce() {
  for (Ipv4Addr addr : locals_) announce(addr);
}

// ---- receiving ------------------------------------------------------------

Status ArpProtocol::demux(Session& lower, Msg msg) {
  // Every session eth hands us is one passive open per sender MAC: forget it
  // when done, so a storm of senders leaves nothing behind in eth.
  struct CloseAfter {
    Session& s;
    bool ours;
    ~CloseAfter() {
      if (ours) (void)s.close();
    }
  } close_after{lower, &lower.protocol() == &below_ && lower.upper() == this};

  Result<std::span<const std::byte>> raw = msg.pop(Packet::kSize);
  if (!raw) {
    ++drop_truncated_;
    return Errc::malformed;
  }
  // Bytes after the packet are Ethernet padding: ignored.
  Packet p = Packet::read(raw->first<Packet::kSize>());
  // RFC 826 "packet reception": hardware and protocol type first; the
  // lengths must match what those types imply.
  if (p.htype != kHtypeEthernet) {
    ++drop_bad_htype_;
    return Errc::malformed;
  }
  if (p.ptype != kPtypeIpv4) {
    ++drop_bad_ptype_;
    return Errc::malformed;
  }
  if (p.hlen != kHlenEthernet) {
    ++drop_bad_hlen_;
    return Errc::malformed;
  }
  if (p.plen != kPlenIpv4) {
    ++drop_bad_plen_;
    return Errc::malformed;
  }
  if (p.op != kOpRequest && p.op != kOpReply) {
    ++drop_bad_op_;
    return Errc::malformed;
  }
  if (eth::is_multicast(p.sha) || eth::is_zero(p.sha)) {
    ++drop_bad_sender_;
    return Errc::malformed;
  }
  if (p.op == kOpRequest) {
    ++rx_requests_;
  } else {
    ++rx_replies_;
  }
  if (p.spa == p.tpa) ++rx_gratuitous_;
  if (is_local(p.spa)) {
    // Someone else uses one of our addresses (RFC 5227 2.4): never learn it.
    if (p.sha != mac_) ++dup_addr_detected_;
    return Errc::exists;
  }
  bool for_us = is_local(p.tpa);

  // RFC 826 merge: refresh the sender's entry if we have one, whatever the
  // packet is. A sender of 0.0.0.0 (an RFC 5227 probe) teaches nothing.
  bool merged = false;
  if (p.spa.value != 0) {
    if (Entry* e = find(p.spa)) {
      merged = true;
      if (e->state == State::permanent) {
        if (e->mac != p.sha) ++static_conflicts_;
      } else {
        ++cache_updates_;
        learn(*e, p.sha);
      }
    }
    // "Am I the target protocol address? If the merge flag is false, add the
    // triplet": only packets aimed at us add entries.
    if (for_us && !merged && config_.max_entries > 0) {
      ++cache_adds_;
      learn(create(p.spa, State::reachable), p.sha);
    }
  }

  if (!for_us) {
    if (p.op == kOpRequest) {
      ++rx_request_not_for_us_;
    } else {
      ++rx_reply_not_for_us_;
    }
    return {};
  }
  if (p.op == kOpRequest) {
    // "Swap hardware and protocol fields, put the local addresses in the
    // sender fields, set the opcode to reply, send to the old sender."
    Result<Participant> peer = lower.control(ctl::GetPeerAddr{});
    bool same = peer && peer->peek<MacAddr>() && *peer->peek<MacAddr>() == p.sha;
    Status st = send_arp(kOpReply, p.sha, p.tpa, p.sha, p.spa, same ? &lower : nullptr);
    if (st) ++tx_replies_;
    return st;
  }
  return {};
}

// ---- graph kind -----------------------------------------------------------

void register_arp(Registry& registry) {
  registry.add(
      KindSpec("arp", "ARP (RFC 826) for IPv4 over Ethernet: the next-hop resolver of ipv4")
          .with_below(1, 1)
          .with_option(OptionSpec::integer("timeout", 1, 86400, "life of a learned entry, seconds").defaults_to("60"))
          .with_option(OptionSpec::integer("retries", 0, 100, "requests re-sent before giving up").defaults_to("3"))
          .with_option(OptionSpec::integer("retry_ms", 1, 60000, "interval between requests, milliseconds")
                           .defaults_to("1000"))
          .with_option(OptionSpec::integer("hold_down", 0, 3600, "seconds of no_route after a failure")
                           .defaults_to("20"))
          .with_option(OptionSpec::integer("pending", 0, 4096, "packets queued per unresolved neighbour")
                           .defaults_to(std::to_string(ArpConfig{}.pending_per_entry)))
          .with_option(OptionSpec::integer("pending_total", 0, 1 << 20, "packets queued over all neighbours")
                           .defaults_to("256"))
          .with_option(OptionSpec::integer("max_entries", 1, 1 << 22, "learned entries kept (oldest evicted)")
                           .defaults_to("1024"))
          .with_option(OptionSpec::list("static", "permanent entries ip@mac,..."))
          .with_option(OptionSpec::boolean("gratuitous", "announce our addresses").defaults_to("on"))
          .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
            if (args.loop == nullptr) {
              throw std::invalid_argument("arp needs an EventLoop for its timers: pass one to Graph::build");
            }
            ArpProtocol::Config c;
            c.timeout = std::chrono::seconds(args.options.get_int("timeout"));
            c.retries = static_cast<unsigned>(args.options.get_int("retries"));
            c.retry_interval = std::chrono::milliseconds(args.options.get_int("retry_ms"));
            c.hold_down = std::chrono::seconds(args.options.get_int("hold_down"));
            c.pending_per_entry = static_cast<std::size_t>(args.options.get_int("pending"));
            c.pending_total = static_cast<std::size_t>(args.options.get_int("pending_total"));
            c.max_entries = static_cast<std::size_t>(args.options.get_int("max_entries"));
            c.gratuitous = args.options.get_bool("gratuitous");
            if (args.options.has("static")) {
              for (const std::string& word : args.options.get_list("static")) {
                Result<StaticEntry> se = parse_static_entry(word);
                if (!se) throw std::invalid_argument("static=" + word + ": expected ip@mac (192.0.2.1@02:00:00:00:00:01)");
                c.statics.push_back(*se);
              }
            }
            return std::make_unique<ArpProtocol>(args.name, *args.below[0], *args.loop, std::move(c));
          }));
}

}  // namespace xk::arp

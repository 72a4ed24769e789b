#include "xk/drivers/pair.hpp"

#include <stdexcept>

namespace xk::drivers {

class PairSession final : public Session {
 public:
  PairSession(PairDriver& d, Protocol* upper) : Session(d, upper), d_(d) {}
  Status push(Msg msg) override { return d_.transmit(std::move(msg)); }
  // Nothing sits below a driver.
  Status pop(Session&, Msg) override { return Errc::unsupported; }

 private:
  PairDriver& d_;
};

// ---- link and hub -------------------------------------------------------

PairLink::~PairLink() {
  for (End& e : ends_) {
    if (e.driver != nullptr) e.driver->link_ = nullptr;
  }
}

std::size_t PairLink::attached() const noexcept {
  return (ends_[0].driver != nullptr ? 1u : 0u) + (ends_[1].driver != nullptr ? 1u : 0u);
}

PairLink& PairHub::link(const std::string& name) {
  auto it = links_.find(name);
  if (it == links_.end()) it = links_.emplace(name, std::make_unique<PairLink>(name)).first;
  return *it->second;
}

PairLink* PairHub::find(const std::string& name) const noexcept {
  auto it = links_.find(name);
  return it == links_.end() ? nullptr : it->second.get();
}

// ---- driver -------------------------------------------------------------

PairDriver::PairDriver(std::string name, PairLink& link, Config config, EventLoop* loop)
    : Protocol(std::move(name), "pair"),
      config_(config),
      link_(&link),
      loop_(loop),
      tx_frames_(counters().add("tx_frames")),
      rx_frames_(counters().add("rx_frames")),
      drop_too_big_(counters().add("drop_too_big", "frame longer than mtu")),
      drop_queue_full_(counters().add("drop_queue_full", "the peer's inbox was full")),
      drop_no_peer_(counters().add("drop_no_peer", "nothing attached at the other end")),
      drop_no_receiver_(counters().add("drop_no_receiver", "arrived with no upper enabled")) {
  if (link.ends_[0].driver == nullptr) {
    end_ = 0;
  } else if (link.ends_[1].driver == nullptr) {
    end_ = 1;
  } else {
    throw std::invalid_argument("pair link '" + link.name() + "' already has two ends");
  }
  link.ends_[end_].driver = this;
  if (loop_ != nullptr) loop_->add(*this);
}

PairDriver::~PairDriver() {
  if (loop_ != nullptr) loop_->remove(*this);
  if (link_ != nullptr) {
    // Frames nobody will poll any more go with us.
    link_->ends_[end_].inbox.clear();
    link_->ends_[end_].driver = nullptr;
  }
}

Result<SessionRef> PairDriver::open(Protocol& upper, Participants&) {
  return SessionRef(make_ref<PairSession>(*this, &upper));
}

Status PairDriver::open_enable(Protocol& upper, Participants&) {
  if (receiver_ != nullptr && receiver_ != &upper) return Errc::exists;
  receiver_ = &upper;
  rx_session_ = make_ref<PairSession>(*this, &upper);
  return {};
}

Status PairDriver::open_disable(Protocol& upper, Participants&) {
  if (receiver_ != &upper) return Errc::not_found;
  receiver_ = nullptr;
  rx_session_ = nullptr;
  return {};
}

Result<ControlReply> PairDriver::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{config_.mtu};
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) return ControlReply{std::size_t{0}};
  if (std::holds_alternative<ctl::GetLocalAddr>(query)) {
    Participant p;
    p.push(config_.mac);
    return ControlReply{p};
  }
  return Protocol::control_any(query);
}

Status PairDriver::transmit(Msg msg) {
  if (msg.size() > config_.mtu) {
    ++drop_too_big_;
    return Errc::too_large;
  }
  PairDriver* peer = link_ == nullptr ? nullptr : link_->ends_[1 - end_].driver;
  if (peer == nullptr) {
    // An unplugged cable: the frame is lost, as on a wire without carrier.
    ++drop_no_peer_;
    return {};
  }
  std::deque<Msg>& inbox = link_->ends_[1 - end_].inbox;
  // The bound is the receiver's: it says how much it is willing to hold.
  if (inbox.size() >= peer->config_.queue_limit) {
    ++drop_queue_full_;
    return Errc::would_block;
  }
  ++tx_frames_;
  inbox.push_back(std::move(msg));
  return {};
}

std::size_t PairDriver::queued() const noexcept {
  return link_ == nullptr ? 0 : link_->ends_[end_].inbox.size();
}

std::size_t PairDriver::poll(std::size_t budget) {
  std::size_t done = 0;
  while (done < budget && link_ != nullptr && !link_->ends_[end_].inbox.empty()) {
    std::deque<Msg>& inbox = link_->ends_[end_].inbox;
    Msg msg = std::move(inbox.front());
    inbox.pop_front();
    ++done;
    if (receiver_ == nullptr) {
      ++drop_no_receiver_;
      continue;
    }
    ++rx_frames_;
    // Keep the session alive across the upcall even if the upper disables us.
    SessionRef rx = rx_session_;
    (void)receiver_->demux(*rx, std::move(msg));
  }
  return done;
}

void register_pair(Registry& registry, PairHub& hub) {
  PairHub* h = &hub;
  registry.add(KindSpec("pair", "in-process Ethernet link between two graphs (one thread)")
                   .with_below(0, 0)
                   .with_option(OptionSpec::string("link", "name of the shared link (both ends give the same)")
                                    .mandatory())
                   .with_option(OptionSpec::mac("mac", "this end's MAC address").mandatory())
                   .with_option(OptionSpec::size("mtu", 60, 1 << 16, "largest frame, Ethernet header included")
                                    .defaults_to("1514"))
                   .with_option(OptionSpec::integer("queue", 1, 1 << 20, "frames waiting at this end")
                                    .defaults_to("1024"))
                   .with_factory([h](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     const std::string& name = args.options.get_string("link");
                     if (name.empty()) throw std::invalid_argument("link= must name a link");
                     PairDriver::Config config;
                     config.mac = args.options.get_mac("mac");
                     config.mtu = args.options.get_size("mtu");
                     config.queue_limit = static_cast<std::size_t>(args.options.get_int("queue"));
                     return std::make_unique<PairDriver>(args.name, h->link(name), config, args.loop);
                   }));
}

}  // namespace xk::drivers

#include "xk/drivers/loopback.hpp"

namespace xk::drivers {

Loopback::Loopback(std::string name, Config config, EventLoop* loop)
    : Driver(std::move(name), "loopback"),
      config_(config),
      loop_(loop),
      tx_frames_(counters().add("tx_frames")),
      rx_frames_(counters().add("rx_frames")),
      drop_queue_full_(counters().add("drop_queue_full")),
      drop_too_big_(counters().add("drop_too_big")),
      drop_no_receiver_(counters().add("drop_no_receiver")) {
  if (loop_ != nullptr) loop_->add(*this);
}

Loopback::~Loopback() {
  if (loop_ != nullptr) loop_->remove(*this);
}

Result<ControlReply> Loopback::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{config_.mtu};
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) return ControlReply{std::size_t{0}};
  return Protocol::control_any(query);
}

Status Loopback::send(Msg msg) {
  if (msg.size() > config_.mtu) {
    ++drop_too_big_;
    return Errc::too_large;
  }
  if (queue_.size() >= config_.queue_limit) {
    ++drop_queue_full_;
    return Errc::would_block;
  }
  ++tx_frames_;
  queue_.push_back(std::move(msg));
  return {};
}

std::size_t Loopback::poll(std::size_t budget) {
  std::size_t done = 0;
  while (done < budget && !queue_.empty()) {
    Msg msg = std::move(queue_.front());
    queue_.pop_front();
    ++done;
    if (!receiving()) {
      ++drop_no_receiver_;
      continue;
    }
    ++rx_frames_;
    (void)deliver_up(std::move(msg));
  }
  return done;
}

void register_loopback(Registry& registry) {
  registry.add(KindSpec("loopback", "in-process driver: what goes down comes back up")
                   .with_below(0, 0)
                   .with_option(OptionSpec::size("mtu", 1, 1 << 20, "largest frame").defaults_to("1500"))
                   .with_option(OptionSpec::integer("queue", 1, 1 << 20, "frames held until polled")
                                    .defaults_to("4096"))
                   .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     Loopback::Config config;
                     config.mtu = args.options.get_size("mtu");
                     config.queue_limit = static_cast<std::size_t>(args.options.get_int("queue"));
                     return std::make_unique<Loopback>(args.name, config, args.loop);
                   }));
}

}  // namespace xk::drivers

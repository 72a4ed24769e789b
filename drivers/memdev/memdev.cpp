#include "xk/drivers/memdev.hpp"

namespace xk::drivers {

MemDev::MemDev(std::string name, Config config, EventLoop* loop)
    : Driver(std::move(name), "memdev"),
      config_(config),
      loop_(loop),
      tx_frames_(counters().add("tx_frames", "frames the stack sent (taken or waiting)")),
      rx_frames_(counters().add("rx_frames", "injected frames handed to the stack")),
      drop_tx_too_big_(counters().add("drop_tx_too_big", "sent frames over the MTU")),
      drop_tx_full_(counters().add("drop_tx_full", "sent frames refused: nobody took the earlier ones")),
      drop_rx_too_big_(counters().add("drop_rx_too_big", "injected frames over the MTU")),
      drop_rx_full_(counters().add("drop_rx_full", "injected frames refused: the inbox is full")),
      drop_no_receiver_(counters().add("drop_no_receiver", "injected frames with no upper enabled")) {
  if (loop_ != nullptr) loop_->add(*this);
}

MemDev::~MemDev() {
  if (loop_ != nullptr) loop_->remove(*this);
}

Result<ControlReply> MemDev::control_any(const ControlQuery& query) {
  if (std::holds_alternative<ctl::GetMtu>(query)) return ControlReply{config_.mtu};
  if (std::holds_alternative<ctl::GetHeaderRoom>(query)) return ControlReply{std::size_t{0}};
  return Protocol::control_any(query);
}

Status MemDev::inject(Msg frame) {
  if (frame.size() > config_.mtu) {
    ++drop_rx_too_big_;
    return Errc::too_large;
  }
  if (inbox_.size() >= config_.queue_limit) {
    ++drop_rx_full_;
    return Errc::would_block;
  }
  inbox_.push_back(std::move(frame));
  return {};
}

Status MemDev::inject(std::span<const std::byte> frame) {
  if (frame.size() > config_.mtu) {
    ++drop_rx_too_big_;
    return Errc::too_large;
  }
  return inject(Msg::copy_of(frame));
}

std::optional<MemDev::Sent> MemDev::take_sent() {
  if (sent_.empty()) return std::nullopt;
  Sent s = std::move(sent_.front());
  sent_.pop_front();
  return s;
}

Status MemDev::send(Msg frame) {
  if (frame.size() > config_.mtu) {
    ++drop_tx_too_big_;
    return Errc::too_large;
  }
  if (sent_.size() >= config_.queue_limit) {
    ++drop_tx_full_;
    return Errc::would_block;
  }
  ++tx_frames_;
  sent_.push_back(Sent{std::move(frame), loop_ != nullptr ? loop_->clock().now() : Time{}});
  return {};
}

std::size_t MemDev::poll(std::size_t budget) {
  std::size_t done = 0;
  while (done < budget && !inbox_.empty()) {
    Msg frame = std::move(inbox_.front());
    inbox_.pop_front();
    ++done;
    if (!receiving()) {
      ++drop_no_receiver_;
      continue;
    }
    ++rx_frames_;
    (void)deliver_up(std::move(frame));
  }
  return done;
}

void register_memdev(Registry& registry) {
  registry.add(KindSpec("memdev", "in-memory device: the program injects frames and takes what is sent")
                   .with_below(0, 0)
                   .with_option(OptionSpec::size("mtu", 1, 1 << 20, "largest frame either way").defaults_to("1500"))
                   .with_option(OptionSpec::integer("queue", 1, 1 << 20, "frames held each way").defaults_to("4096"))
                   .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     MemDev::Config config;
                     config.mtu = args.options.get_size("mtu");
                     config.queue_limit = static_cast<std::size_t>(args.options.get_int("queue"));
                     return std::make_unique<MemDev>(args.name, config, args.loop);
                   }));
}

}  // namespace xk::drivers

#include "xk/protocols/fault.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace xk::fault {

namespace {

Duration from_ms(double ms) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(ms));
}

bool valid_probability(double p) noexcept { return p >= 0 && p <= 1; }

}  // namespace

FaultProtocol::FaultProtocol(std::string name, Protocol& below, FaultConfig config, EventLoop* loop)
    : PassThrough(std::move(name), "fault", below),
      config_(config),
      loop_(loop),
      clock_(loop != nullptr ? loop->clock() : own_clock_),
      rng_(config.seed) {
  if (!valid_probability(config_.loss) || !valid_probability(config_.duplicate) ||
      !valid_probability(config_.reorder) || !valid_probability(config_.corrupt) || !valid_probability(config_.ce)) {
    throw std::invalid_argument("fault: probabilities must be within 0..1");
  }
  if ((config_.delay.count() != 0 || config_.jitter.count() != 0 || (config_.queue != 0 && config_.rate != 0)) &&
      loop_ == nullptr) {
    throw std::invalid_argument("fault: delay, jitter and queue need an event loop");
  }
  if (config_.delay.count() < 0 || config_.jitter.count() < 0 || config_.reorder_hold.count() < 0) {
    throw std::invalid_argument("fault: negative time");
  }
  if (config_.rate != 0 && config_.burst == 0) throw std::invalid_argument("fault: burst must be > 0");
  static constexpr const char* kDir[2] = {"tx", "rx"};
  for (int d = 0; d < 2; ++d) {
    std::string p = kDir[d];
    dir_counters_[static_cast<std::size_t>(d)] = DirCounters{
        &counters().add(p + "_passed", "messages sent on"),
        &counters().add(p + "_lost", "dropped by loss="),
        &counters().add(p + "_rate_dropped", "dropped over rate="),
        &counters().add(p + "_corrupted", "one bit flipped by corrupt="),
        &counters().add(p + "_ce_marked", "ECN-capable packets marked Congestion Experienced by ce="),
        &counters().add(p + "_duplicated", "sent twice by duplicate="),
        &counters().add(p + "_reordered", "held behind the next message by reorder="),
        &counters().add(p + "_delayed", "held for delay=/jitter="),
    };
  }
  if (loop_ != nullptr) {
    delay_timer_.emplace(loop_->timers(), [this] { on_delay_timer(); });
    hold_timer_tx_.emplace(loop_->timers(), [this] { release_held(kTx); });
    hold_timer_rx_.emplace(loop_->timers(), [this] { release_held(kRx); });
  }
}

FaultProtocol::~FaultProtocol() {
  delay_timer_.reset();
  hold_timer_tx_.reset();
  hold_timer_rx_.reset();
  delayed_.clear();
  held_[kTx].reset();
  held_[kRx].reset();
}

std::size_t FaultProtocol::held() const noexcept {
  return delayed_.size() + (held_[kTx] ? 1u : 0u) + (held_[kRx] ? 1u : 0u);
}

bool FaultProtocol::applies(Dir d) const noexcept {
  return config_.dir == Direction::both || (d == kTx) == (config_.dir == Direction::tx);
}

bool FaultProtocol::chance(double p) noexcept {
  // No draw for a fault that is off: the random sequence depends only on the
  // faults enabled and the seed, so equal configurations repeat exactly.
  if (p <= 0) return false;
  return uniform() < p;
}

Status FaultProtocol::on_tx(PassSession& s, Msg msg) {
  if (!applies(kTx)) return deliver(kTx, s, std::move(msg));
  return process(kTx, s, std::move(msg));
}

Status FaultProtocol::on_rx(PassSession& s, Msg msg) {
  if (!applies(kRx)) return deliver(kRx, s, std::move(msg));
  return process(kRx, s, std::move(msg));
}

Status FaultProtocol::process(Dir d, PassSession& s, Msg msg) {
  DirCounters& c = dir_counters_[d];
  // A lossy link does not tell the sender: drops return success.
  Duration queued{0};
  if (config_.rate != 0 && config_.queue != 0) {
    std::optional<Duration> wait = through_queue(d, msg.size());
    if (!wait) {
      ++*c.rate_dropped;
      return {};
    }
    queued = *wait;
  } else if (config_.rate != 0 && !within_rate(d, msg.size())) {
    ++*c.rate_dropped;
    return {};
  }
  if (chance(config_.loss)) {
    ++*c.lost;
    return {};
  }
  // A congested router marks what is ECN-capable (ECT(0) or ECT(1)).
  const std::uint8_t ecn = msg.offload().tos & 0x03;
  if (d == kTx && ecn != 0 && ecn != 0x03 && chance(config_.ce)) {
    msg.offload().tos |= 0x03;
    ++*c.ce_marked;
  }
  const bool corrupt = chance(config_.corrupt) && !msg.empty();
  if (corrupt) {
    msg = corrupted_copy(msg);
    ++*c.corrupted;
  }
  if (chance(config_.duplicate)) {
    ++*c.duplicated;
    if (corrupt) ++*c.corrupted;  // the twin is a second corrupted message on the wire
    Ref<PassSession> keep(&s);  // the first delivery may close the session
    Msg twin = msg.share();
    Status st = reorder_stage(d, s, std::move(msg), queued);
    (void)reorder_stage(d, s, std::move(twin), queued);
    return st;
  }
  return reorder_stage(d, s, std::move(msg), queued);
}

Status FaultProtocol::reorder_stage(Dir d, PassSession& s, Msg msg, Duration queued) {
  if (!held_[d] && chance(config_.reorder)) {
    ++*dir_counters_[d].reordered;
    held_[d] = Held{Ref<PassSession>(&s), std::move(msg), queued};
    std::optional<Timer>& t = d == kTx ? hold_timer_tx_ : hold_timer_rx_;
    if (t && config_.reorder_hold.count() > 0) t->arm_after(config_.reorder_hold);
    return {};
  }
  Status st = delay_stage(d, s, std::move(msg), queued);
  // The held message goes out behind this one: the two are swapped.
  if (held_[d]) release_held(d);
  return st;
}

void FaultProtocol::release_held(Dir d) {
  if (!held_[d]) return;
  Held h = std::move(*held_[d]);
  held_[d].reset();
  std::optional<Timer>& t = d == kTx ? hold_timer_tx_ : hold_timer_rx_;
  if (t) t->cancel();
  (void)delay_stage(d, *h.session, std::move(h.msg), h.queued);
}

Status FaultProtocol::delay_stage(Dir d, PassSession& s, Msg msg, Duration queued) {
  if (config_.delay.count() == 0 && config_.jitter.count() == 0 && queued.count() == 0) {
    return deliver(d, s, std::move(msg));
  }
  Duration extra = queued;
  if (config_.jitter.count() > 0) {
    extra += Duration(static_cast<Duration::rep>(uniform() * static_cast<double>(config_.jitter.count())));
  }
  Time due = saturating_add(clock_.now(), config_.delay + extra);
  // Keep the queue sorted by due time; equal times stay in arrival order.
  auto at = std::upper_bound(delayed_.begin(), delayed_.end(), due,
                             [](Time t, const Pending& p) { return t < p.due; });
  delayed_.insert(at, Pending{due, d, Ref<PassSession>(&s), std::move(msg)});
  ++*dir_counters_[d].delayed;
  arm_delay_timer();
  return {};
}

void FaultProtocol::arm_delay_timer() {
  if (!delay_timer_) return;
  if (delayed_.empty()) {
    delay_timer_->cancel();
  } else if (!delay_timer_->armed() || delay_timer_->deadline() != delayed_.front().due) {
    delay_timer_->arm(delayed_.front().due);
  }
}

void FaultProtocol::on_delay_timer() {
  Time now = clock_.now();
  // Deliveries may re-enter us and add to the queue: take one at a time.
  while (!delayed_.empty() && delayed_.front().due <= now) {
    Pending p = std::move(delayed_.front());
    delayed_.pop_front();
    (void)deliver(p.dir, *p.session, std::move(p.msg));
  }
  arm_delay_timer();
}

Status FaultProtocol::deliver(Dir d, PassSession& s, Msg msg) {
  if (s.is_closed()) return Errc::closed;
  ++*dir_counters_[d].passed;
  if (d == kTx) return s.send_down(std::move(msg));
  return s.deliver_up(std::move(msg));
}

bool FaultProtocol::within_rate(Dir d, std::size_t bytes) noexcept {
  Bucket& b = buckets_[d];
  Time now = clock_.now();
  auto burst = static_cast<double>(config_.burst);
  if (!b.started) {
    b = Bucket{burst, now, true};
  } else if (now > b.last) {
    double secs = std::chrono::duration<double>(now - b.last).count();
    b.tokens = std::min(burst, b.tokens + secs * static_cast<double>(config_.rate));
    b.last = now;
  }
  if (b.tokens < static_cast<double>(bytes)) return false;
  b.tokens -= static_cast<double>(bytes);
  return true;
}

std::optional<Duration> FaultProtocol::through_queue(Dir d, std::size_t bytes) noexcept {
  const Time now = clock_.now();
  Time& free = link_free_[d];
  if (free < now) free = now;
  const auto rate = static_cast<double>(config_.rate);
  const double backlog = std::chrono::duration<double>(free - now).count() * rate;  // bytes still queued
  if (backlog + static_cast<double>(bytes) > static_cast<double>(config_.queue)) return std::nullopt;
  free += std::chrono::duration_cast<Duration>(std::chrono::duration<double>(static_cast<double>(bytes) / rate));
  return free - now;
}

Msg FaultProtocol::corrupted_copy(const Msg& msg) {
  // The bytes may be shared with the sender (a retransmission queue): flip
  // the bit in a copy of our own, never in place.
  std::vector<std::byte> bytes(msg.size());
  (void)msg.copy_out(0, bytes);
  std::size_t at = static_cast<std::size_t>(rng_() % bytes.size());
  bytes[at] ^= static_cast<std::byte>(1u << (rng_() % 8));
  // The copy carries no Offload flags: a port's "checksum verified" must not
  // vouch for the flipped bit, and a transmit request is dropped with it, so
  // the frame leaves with a checksum that no longer matches, as on a bad link.
  // What IP learned of a received packet still holds: the bit is in the payload
  // or below it.
  Msg copy = Msg::copy_of(bytes);
  copy.rx() = msg.rx();
  return copy;
}

// ---- graph kind ---------------------------------------------------------

void register_fault(Registry& registry) {
  registry.add(
      KindSpec("fault", "pass-through that drops, duplicates, reorders, delays, corrupts or rate-limits messages")
          .with_below(1, 1)
          .with_option(OptionSpec::choice("dir", {"both", "tx", "rx"}, "directions affected").defaults_to("both"))
          .with_option(OptionSpec::real("loss", 0, 1, "probability of dropping a message").defaults_to("0"))
          .with_option(OptionSpec::real("duplicate", 0, 1, "probability of sending a message twice").defaults_to("0"))
          .with_option(OptionSpec::real("reorder", 0, 1, "probability of holding a message behind the next").defaults_to("0"))
          .with_option(OptionSpec::real("reorder_ms", 0, 60000, "longest hold of a reordered message (ms)").defaults_to("10"))
          .with_option(OptionSpec::real("corrupt", 0, 1, "probability of flipping one bit").defaults_to("0"))
          .with_option(OptionSpec::real("ce", 0, 1, "probability of marking an ECN-capable packet CE (above ipv4 or ipv6, tx)")
                           .defaults_to("0"))
          .with_option(OptionSpec::real("delay", 0, 60000, "added delay (ms)").defaults_to("0"))
          .with_option(OptionSpec::real("jitter", 0, 60000, "random extra delay 0..jitter (ms)").defaults_to("0"))
          .with_option(OptionSpec::size("rate", 0, std::uint64_t{1} << 40, "bytes per second; 0: no limit").defaults_to("0"))
          .with_option(OptionSpec::size("burst", 1, std::uint64_t{1} << 40, "token bucket size (bytes)").defaults_to("64k"))
          .with_option(OptionSpec::size("queue", 0, std::uint64_t{1} << 40,
                                        "with rate: a bottleneck queue of this many bytes (0: police with the bucket)")
                           .defaults_to("0"))
          .with_option(OptionSpec::integer("seed", 0, std::numeric_limits<std::int64_t>::max(), "PRNG seed").defaults_to("1"))
          .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
            const Options& o = args.options;
            FaultConfig c;
            const std::string& dir = o.get_string("dir");
            c.dir = dir == "tx" ? Direction::tx : dir == "rx" ? Direction::rx : Direction::both;
            c.loss = o.get_real("loss");
            c.duplicate = o.get_real("duplicate");
            c.reorder = o.get_real("reorder");
            c.reorder_hold = from_ms(o.get_real("reorder_ms"));
            c.corrupt = o.get_real("corrupt");
            c.ce = o.get_real("ce");
            c.delay = from_ms(o.get_real("delay"));
            c.jitter = from_ms(o.get_real("jitter"));
            c.rate = o.get_size("rate");
            c.burst = o.get_size("burst");
            c.queue = o.get_size("queue");
            c.seed = static_cast<std::uint64_t>(o.get_int("seed"));
            return std::make_unique<FaultProtocol>(args.name, *args.below[0], c, args.loop);
          }));
}

}  // namespace xk::fault

#include "xk/timer.hpp"

#include <algorithm>
#include <stdexcept>

namespace xk {
namespace {

using Link = detail::TimerLink;

// run_expired never runs the last tick, so now_ (the next tick) always fits.
constexpr std::uint64_t kLastRunnableTick = ~std::uint64_t{0} - 1;

bool list_empty(const Link& head) noexcept { return head.next == &head; }

void push_back(Link& head, Link& node) noexcept {
  node.prev = head.prev;
  node.next = &head;
  head.prev->next = &node;
  head.prev = &node;
}

void unlink(Link& node) noexcept {
  node.prev->next = node.next;
  node.next->prev = node.prev;
  node.prev = node.next = &node;
}

// The ticks a level-L slot boundary shares with `tick` (bits above level L).
std::uint64_t prefix(std::uint64_t tick, unsigned level) noexcept {
  unsigned shift = (level + 1) * TimerWheel::kSlotBits;
  return shift >= 64 ? 0 : (tick >> shift) << shift;
}

unsigned slot_of(std::uint64_t tick, unsigned level) noexcept {
  return static_cast<unsigned>(tick >> (level * TimerWheel::kSlotBits)) & (TimerWheel::kSlots - 1);
}

}  // namespace

// --- Timer -------------------------------------------------------------------

Timer::~Timer() {
  if (armed()) wheel_->remove(*this);
}

void Timer::arm(Time deadline) noexcept { wheel_->arm(*this, deadline); }

void Timer::arm_after(Duration d) noexcept { arm(saturating_add(wheel_->clock().now(), d)); }

void Timer::cancel() noexcept {
  if (armed()) wheel_->remove(*this);
}

// --- TimerWheel --------------------------------------------------------------

TimerWheel::TimerWheel(const Clock& clock, Duration tick) : clock_(clock) {
  if (tick.count() <= 0) throw std::invalid_argument("TimerWheel: tick must be positive");
  tick_ns_ = tick.count();
  auto unsigned_tick = static_cast<std::uint64_t>(tick_ns_);
  shift_ = std::has_single_bit(unsigned_tick) ? std::countr_zero(unsigned_tick) : -1;
  first_ = 0;
  first_ = split(Time::min()).tick;
  now_ = std::min(to_tick(clock_.now()), kLastRunnableTick) + 1;
}

TimerWheel::~TimerWheel() {
  // Disarm what is left, so those timers' destructors do not touch the wheel.
  auto disarm_all = [](Link& head) {
    while (!list_empty(head)) {
      Timer& t = static_cast<Timer&>(*head.next);
      unlink(t);
      t.where_ = Timer::Where::none;
    }
  };
  disarm_all(due_);
  for (auto& level : slots_) {
    for (Link& slot : level) disarm_all(slot);
  }
}

TimerWheel::Split TimerWheel::split(Time t) const noexcept {
  // Floor division of the signed count (boundaries at whole multiples of the
  // tick since the epoch), then shifted so that Time::min() is tick 0.
  std::int64_t c = t.time_since_epoch().count();
  std::int64_t q;
  bool exact;
  if (shift_ >= 0) {
    q = c >> shift_;  // arithmetic shift: floor
    exact = (c & (tick_ns_ - 1)) == 0;
  } else {
    q = c / tick_ns_;
    std::int64_t r = c % tick_ns_;
    if (r < 0) --q;
    exact = r == 0;
  }
  return {static_cast<std::uint64_t>(q) - first_, exact};
}

std::uint64_t TimerWheel::to_tick(Time t) const noexcept { return split(t).tick; }

std::uint64_t TimerWheel::to_tick_ceil(Time t) const noexcept {
  Split s = split(t);
  return s.tick + (s.exact ? 0 : 1);
}

Time TimerWheel::from_tick(std::uint64_t tick) const noexcept {
  auto q = static_cast<std::int64_t>(tick + first_);
  std::int64_t ns = 0;
  if (__builtin_mul_overflow(q, tick_ns_, &ns)) return q > 0 ? Time::max() : Time::min();
  return Time(Duration(ns));
}

void TimerWheel::arm(Timer& t, Time deadline) noexcept {
  if (t.armed()) {
    remove(t);
  }
  ++armed_;
  t.deadline_ = deadline;
  t.tick_ = to_tick_ceil(deadline);
  // Due already (before the wheel's present, or inside the span being run):
  // park it for the next run, so a run always ends.
  if (t.tick_ < now_ || (running_ && t.tick_ <= run_target_)) {
    push_back(due_, t);
    t.where_ = Timer::Where::due;
    return;
  }
  place(t);
}

void TimerWheel::place(Timer& t) noexcept {
  // Level: the highest bit where the due tick differs from the present. The
  // slot index at that level is then ahead of the present's, so every slot
  // that is occupied lies ahead, and no slot ever wraps around.
  std::uint64_t diff = t.tick_ ^ now_;
  unsigned level = diff == 0 ? 0 : static_cast<unsigned>(63 - std::countl_zero(diff)) / kSlotBits;
  unsigned slot = slot_of(t.tick_, level);
  push_back(slots_[level][slot], t);
  t.where_ = Timer::Where::wheel;
  t.level_ = static_cast<std::uint8_t>(level);
  t.slot_ = static_cast<std::uint8_t>(slot);
  occupied_[level] |= std::uint64_t{1} << slot;
  level_mask_ |= 1u << level;
}

void TimerWheel::remove(Timer& t) noexcept {
  unlink(t);
  if (t.where_ == Timer::Where::wheel) {
    // The timer may already have been taken out of its slot into a batch being
    // fired; the bit then reflects the slot as it is now, which is still right.
    if (list_empty(slots_[t.level_][t.slot_])) {
      occupied_[t.level_] &= ~(std::uint64_t{1} << t.slot_);
      if (occupied_[t.level_] == 0) level_mask_ &= ~(1u << t.level_);
    }
  }
  t.where_ = Timer::Where::none;
  --armed_;
}

void TimerWheel::take(Link& from, Link& to) noexcept {
  if (list_empty(from)) return;
  to.next = from.next;
  to.prev = from.prev;
  to.next->prev = &to;
  to.prev->next = &to;
  from.next = from.prev = &from;
}

void TimerWheel::cascade(unsigned level, unsigned slot) noexcept {
  ++stats_.steps;
  Link batch;
  take(slots_[level][slot], batch);
  occupied_[level] &= ~(std::uint64_t{1} << slot);
  if (occupied_[level] == 0) level_mask_ &= ~(1u << level);
  while (!list_empty(batch)) {
    Timer& t = static_cast<Timer&>(*batch.next);
    __builtin_prefetch(t.next->next);  // a list walk misses the cache on every node
    unlink(t);
    place(t);  // lands at a lower level: it shares this slot's bits with now_
    ++stats_.cascaded;
  }
}

void TimerWheel::move_to(std::uint64_t tick) noexcept {
  std::uint64_t changed = now_ ^ tick;
  now_ = tick;
  if ((changed >> kSlotBits) == 0) return;
  // Levels whose index moved may now stand on an occupied slot: cascade it, so
  // that above level 0 occupied slots stay strictly ahead of the present.
  // Cascaded timers never land on a present slot above level 0 (see place()).
  unsigned top = static_cast<unsigned>(63 - std::countl_zero(changed)) / kSlotBits;
  for (unsigned level = std::min(top, kLevels - 1); level >= 1; --level) {
    unsigned s = slot_of(now_, level);
    if (occupied_[level] & (std::uint64_t{1} << s)) cascade(level, s);
  }
}

std::size_t TimerWheel::fire(Link& batch) noexcept {
  std::size_t n = 0;
  while (!list_empty(batch)) {
    Timer& t = static_cast<Timer&>(*batch.next);
    __builtin_prefetch(t.next->next);
    unlink(t);
    t.where_ = Timer::Where::none;
    --armed_;
    ++n;
    ++stats_.fired;
    // Run a copy: the callback may destroy (or re-arm) its own timer.
    TimerCallback cb = t.callback_;
    if (cb) cb();
  }
  return n;
}

std::size_t TimerWheel::run_expired(Time now) noexcept {
  if (running_) return 0;
  std::uint64_t target = std::min(to_tick(now), kLastRunnableTick);
  running_ = true;
  run_target_ = target;
  std::size_t fired = 0;

  // Timers that were due when armed go first (their ticks are all behind now_).
  if (!list_empty(due_)) {
    Link batch;
    take(due_, batch);
    fired += fire(batch);
  }

  // The lowest occupied level holds the earliest event: above level 0 every
  // occupied slot is strictly ahead of the present, so its start lies beyond
  // the whole current slot of the level below.
  while (level_mask_ != 0) {
    unsigned level = static_cast<unsigned>(std::countr_zero(level_mask_));
    unsigned slot = static_cast<unsigned>(std::countr_zero(occupied_[level]));
    std::uint64_t event = prefix(now_, level) | (std::uint64_t{slot} << (level * kSlotBits));
    if (event > target) break;
    if (level == 0) {
      ++stats_.steps;
      Link batch;
      take(slots_[0][slot], batch);
      occupied_[0] &= ~(std::uint64_t{1} << slot);
      if (occupied_[0] == 0) level_mask_ &= ~1u;
      move_to(event + 1);
      fired += fire(batch);
    } else {
      move_to(event);  // cascades this slot
    }
  }
  if (target >= now_) move_to(target + 1);
  running_ = false;
  return fired;
}

std::size_t TimerWheel::run_due() noexcept {
  if (running_ || list_empty(due_)) return 0;
  // run_target_ still holds the last run's target, behind now_: a callback
  // that arms a timer in the past parks it for the next call, as in a run.
  running_ = true;
  Link batch;
  take(due_, batch);
  std::size_t fired = fire(batch);
  running_ = false;
  return fired;
}

std::optional<Time> TimerWheel::next_deadline() const noexcept {
  if (!list_empty(due_)) return from_tick(now_ - 1);
  if (level_mask_ == 0) return std::nullopt;
  unsigned level = static_cast<unsigned>(std::countr_zero(level_mask_));
  unsigned slot = static_cast<unsigned>(std::countr_zero(occupied_[level]));
  std::uint64_t boundary = prefix(now_, level) | (std::uint64_t{slot} << (level * kSlotBits));
  if (level == 0) return from_tick(boundary);
  // The levels below are empty, so the earliest timer is in this slot. A short
  // slot is scanned for the exact answer (one sleep instead of one per level);
  // a long one gives its start, where run_expired() will cascade it.
  constexpr int kScanLimit = 16;
  const Link& head = slots_[level][slot];
  std::uint64_t earliest = ~std::uint64_t{0};
  int seen = 0;
  for (const Link* l = head.next; l != &head; l = l->next) {
    if (++seen > kScanLimit) return from_tick(boundary);
    earliest = std::min(earliest, static_cast<const Timer*>(l)->tick_);
  }
  return from_tick(earliest);
}

}  // namespace xk

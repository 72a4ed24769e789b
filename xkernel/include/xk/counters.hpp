#pragma once
// Named counters, one set per protocol instance (or any other owner). A counter
// is a plain integer at a stable address, so the data path bumps it with one
// add; the set is only walked when somebody dumps it.

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>

namespace xk {

class Counter {
 public:
  void inc(std::uint64_t n = 1) noexcept { value_ += n; }
  Counter& operator++() noexcept {
    ++value_;
    return *this;
  }
  void set(std::uint64_t v) noexcept { value_ = v; }
  std::uint64_t value() const noexcept { return value_; }

 private:
  std::uint64_t value_ = 0;
};

class CounterSet {
 public:
  explicit CounterSet(std::string owner) : owner_(std::move(owner)) {}
  CounterSet(const CounterSet&) = delete;
  CounterSet& operator=(const CounterSet&) = delete;

  const std::string& owner() const noexcept { return owner_; }

  // Register a counter (or return the existing one of that name). The reference
  // stays valid for the life of the set.
  Counter& add(std::string_view name, std::string_view help = {});
  const Counter* find(std::string_view name) const noexcept;
  // 0 for an unknown name.
  std::uint64_t value(std::string_view name) const noexcept;

  struct Entry {
    std::string name;
    std::string help;
    Counter counter;
  };
  const std::deque<Entry>& entries() const noexcept { return entries_; }

 private:
  std::string owner_;
  std::deque<Entry> entries_;  // deque: stable addresses as it grows
};

// Dump several sets: an aligned text table (owner, counter, value) and JSON
// ({"owner": {"counter": value, ...}, ...}).
std::string counters_table(std::span<const CounterSet* const> sets);
std::string counters_json(std::span<const CounterSet* const> sets);

}  // namespace xk

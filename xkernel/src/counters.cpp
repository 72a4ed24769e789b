#include "xk/counters.hpp"

#include <algorithm>
#include <cstdio>

namespace xk {

Counter& CounterSet::add(std::string_view name, std::string_view help) {
  for (Entry& e : entries_) {
    if (e.name == name) return e.counter;
  }
  entries_.push_back(Entry{std::string(name), std::string(help), Counter{}});
  return entries_.back().counter;
}

const Counter* CounterSet::find(std::string_view name) const noexcept {
  for (const Entry& e : entries_) {
    if (e.name == name) return &e.counter;
  }
  return nullptr;
}

std::uint64_t CounterSet::value(std::string_view name) const noexcept {
  const Counter* c = find(name);
  return c == nullptr ? 0 : c->value();
}

std::string counters_table(std::span<const CounterSet* const> sets) {
  std::size_t owner_w = 5, name_w = 7;  // "owner", "counter"
  for (const CounterSet* s : sets) {
    owner_w = std::max(owner_w, s->owner().size());
    for (const auto& e : s->entries()) name_w = std::max(name_w, e.name.size());
  }
  std::string out;
  auto row = [&](std::string_view owner, std::string_view name, std::string_view value) {
    out.append(owner);
    out.append(owner_w - owner.size() + 2, ' ');
    out.append(name);
    out.append(name_w - name.size() + 2, ' ');
    out.append(value);
    out.push_back('\n');
  };
  row("owner", "counter", "value");
  for (const CounterSet* s : sets) {
    for (const auto& e : s->entries()) row(s->owner(), e.name, std::to_string(e.counter.value()));
  }
  return out;
}

namespace {
void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}
}  // namespace

std::string counters_json(std::span<const CounterSet* const> sets) {
  std::string out = "{";
  bool first_set = true;
  for (const CounterSet* s : sets) {
    if (!first_set) out += ",";
    first_set = false;
    append_json_string(out, s->owner());
    out += ":{";
    bool first = true;
    for (const auto& e : s->entries()) {
      if (!first) out += ",";
      first = false;
      append_json_string(out, e.name);
      out += ":";
      out += std::to_string(e.counter.value());
    }
    out += "}";
  }
  out += "}";
  return out;
}

}  // namespace xk

#include "xk/options.hpp"

#include "text.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <system_error>

namespace xk {

// ---- Ipv4Cidr -----------------------------------------------------------

Ipv4Addr Ipv4Cidr::netmask() const noexcept {
  // A shift by 32 is undefined, so /0 is its own case.
  if (prefix_len == 0) return Ipv4Addr{0};
  return Ipv4Addr{~std::uint32_t{0} << (32 - prefix_len)};
}

Ipv4Addr Ipv4Cidr::network() const noexcept { return Ipv4Addr{addr.value & netmask().value}; }

bool Ipv4Cidr::contains(Ipv4Addr a) const noexcept { return (a.value & netmask().value) == network().value; }

std::string to_string(const Ipv4Cidr& c) { return to_string(c.addr) + "/" + std::to_string(c.prefix_len); }

Result<Ipv4Cidr> parse_cidr(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) return Errc::invalid_argument;
  auto addr = parse_ipv4(text.substr(0, slash));
  if (!addr) return Errc::invalid_argument;
  const std::string_view len = text.substr(slash + 1);
  if (len.empty() || len.size() > 2 || len.front() < '0' || len.front() > '9') return Errc::invalid_argument;
  unsigned prefix = 0;
  auto [next, ec] = std::from_chars(len.data(), len.data() + len.size(), prefix);
  if (ec != std::errc() || next != len.data() + len.size() || prefix > 32) return Errc::invalid_argument;
  return Ipv4Cidr{*addr, static_cast<std::uint8_t>(prefix)};
}

// ---- IpCidr -------------------------------------------------------------

bool IpCidr::contains(const IpAddr& a) const noexcept {
  if (a.is_v4() != addr.is_v4()) return false;
  // An IPv4 prefix counts from the mapped form's 96th bit.
  const unsigned bits = prefix_len + (addr.is_v4() ? 96u : 0u);
  const auto& x = a.bytes();
  const auto& y = addr.bytes();
  const unsigned whole = bits / 8;
  for (unsigned i = 0; i < whole; ++i) {
    if (x[i] != y[i]) return false;
  }
  const unsigned rest = bits % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (x[whole] & mask) == (y[whole] & mask);
}

std::string to_string(const IpCidr& c) { return to_string(c.addr) + "/" + std::to_string(c.prefix_len); }

Result<IpCidr> parse_ip_cidr(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) return Errc::invalid_argument;
  Result<IpAddr> addr = parse_ip(text.substr(0, slash));
  if (!addr) return Errc::invalid_argument;
  const std::string_view len = text.substr(slash + 1);
  if (len.empty() || len.size() > 3 || len.front() < '0' || len.front() > '9') return Errc::invalid_argument;
  unsigned prefix = 0;
  auto [next, ec] = std::from_chars(len.data(), len.data() + len.size(), prefix);
  if (ec != std::errc() || next != len.data() + len.size() || prefix > (addr->is_v4() ? 32u : 128u)) {
    return Errc::invalid_argument;
  }
  return IpCidr{*addr, static_cast<std::uint8_t>(prefix)};
}

// ---- OptionSpec -----------------------------------------------------------

namespace {

OptionSpec make(std::string name, OptionType type, std::string help) {
  OptionSpec s;
  s.name = std::move(name);
  s.type = type;
  s.help = std::move(help);
  return s;
}

constexpr std::int64_t kIntMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kIntMax = std::numeric_limits<std::int64_t>::max();
constexpr double kRealMax = std::numeric_limits<double>::max();
constexpr std::uint64_t kSizeMax = std::numeric_limits<std::uint64_t>::max();

std::string format_real(double v) {
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  if (ec != std::errc()) return "?";
  return std::string(buf.data(), end);
}

struct SizeUnit {
  char suffix;
  std::uint64_t factor;
};
constexpr std::array<SizeUnit, 3> kSizeUnits{{{'g', 1ULL << 30}, {'m', 1ULL << 20}, {'k', 1ULL << 10}}};

std::string format_size(std::uint64_t v) {
  for (const SizeUnit& u : kSizeUnits) {
    if (v != 0 && v % u.factor == 0) return std::to_string(v / u.factor) + u.suffix;
  }
  return std::to_string(v);
}

// Built with appends, not "literal" + std::string: GCC 12 at -O3 reports a
// false -Wrestrict overlap inside that operator (GCC bug 105329).
std::string bounds_text(std::string_view sep, const std::string& a, const std::string& b = {}) {
  std::string out(sep);
  out += a;
  if (!b.empty()) {
    out += "..";
    out += b;
  }
  return out;
}

std::string range_text(const OptionSpec& s) {
  switch (s.type) {
    case OptionType::integer:
      if (s.int_min == kIntMin && s.int_max == kIntMax) return {};
      if (s.int_max == kIntMax) return bounds_text(" >= ", std::to_string(s.int_min));
      if (s.int_min == kIntMin) return bounds_text(" <= ", std::to_string(s.int_max));
      return bounds_text(" ", std::to_string(s.int_min), std::to_string(s.int_max));
    case OptionType::real:
      if (s.real_min == -kRealMax && s.real_max == kRealMax) return {};
      if (s.real_max == kRealMax) return bounds_text(" >= ", format_real(s.real_min));
      if (s.real_min == -kRealMax) return bounds_text(" <= ", format_real(s.real_max));
      return bounds_text(" ", format_real(s.real_min), format_real(s.real_max));
    case OptionType::size:
      if (s.size_min == 0 && s.size_max == kSizeMax) return {};
      if (s.size_max == kSizeMax) return bounds_text(" >= ", format_size(s.size_min));
      return bounds_text(" ", format_size(s.size_min), format_size(s.size_max));
    default:
      return {};
  }
}

using text::join;
using text::lower;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool parse_int(std::string_view t, std::int64_t& out, bool& overflow) {
  overflow = false;
  if (t.empty()) return false;
  int base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    base = 16;
    t.remove_prefix(2);
    // from_chars would take a sign here; "0x-1" is not a number.
    if (t.front() == '-') return false;
  } else if (t.front() == '+') {
    return false;
  }
  auto [next, ec] = std::from_chars(t.data(), t.data() + t.size(), out, base);
  if (ec == std::errc::result_out_of_range) {
    overflow = next == t.data() + t.size();
    return false;
  }
  return ec == std::errc() && next == t.data() + t.size();
}

bool parse_size(std::string_view t, std::uint64_t& out, bool& overflow) {
  overflow = false;
  std::uint64_t factor = 1;
  if (!t.empty()) {
    const char last = lower(t.back());
    for (const SizeUnit& u : kSizeUnits) {
      if (last == u.suffix) {
        factor = u.factor;
        t.remove_suffix(1);
        break;
      }
    }
  }
  if (t.empty() || t.front() < '0' || t.front() > '9') return false;
  std::uint64_t n = 0;
  auto [next, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
  if (next != t.data() + t.size()) return false;
  if (ec == std::errc::result_out_of_range || n > kSizeMax / factor) {
    overflow = true;
    return false;
  }
  if (ec != std::errc()) return false;
  out = n * factor;
  return true;
}

}  // namespace

OptionSpec OptionSpec::integer(std::string name, std::int64_t min, std::int64_t max, std::string help) {
  OptionSpec s = make(std::move(name), OptionType::integer, std::move(help));
  s.int_min = min;
  s.int_max = max;
  return s;
}

OptionSpec OptionSpec::real(std::string name, double min, double max, std::string help) {
  OptionSpec s = make(std::move(name), OptionType::real, std::move(help));
  s.real_min = min;
  s.real_max = max;
  return s;
}

OptionSpec OptionSpec::boolean(std::string name, std::string help) {
  return make(std::move(name), OptionType::boolean, std::move(help));
}

OptionSpec OptionSpec::string(std::string name, std::string help) {
  return make(std::move(name), OptionType::string, std::move(help));
}

OptionSpec OptionSpec::choice(std::string name, std::vector<std::string> choices, std::string help) {
  OptionSpec s = make(std::move(name), OptionType::choice, std::move(help));
  s.choices = std::move(choices);
  return s;
}

OptionSpec OptionSpec::ipv4(std::string name, std::string help) {
  return make(std::move(name), OptionType::ipv4, std::move(help));
}

OptionSpec OptionSpec::cidr(std::string name, std::string help) {
  return make(std::move(name), OptionType::cidr, std::move(help));
}

OptionSpec OptionSpec::mac(std::string name, std::string help) {
  return make(std::move(name), OptionType::mac, std::move(help));
}

OptionSpec OptionSpec::size(std::string name, std::uint64_t min, std::uint64_t max, std::string help) {
  OptionSpec s = make(std::move(name), OptionType::size, std::move(help));
  s.size_min = min;
  s.size_max = max;
  return s;
}

OptionSpec OptionSpec::list(std::string name, std::string help) {
  return make(std::move(name), OptionType::list, std::move(help));
}

OptionSpec OptionSpec::ip(std::string name, std::string help) {
  return make(std::move(name), OptionType::ip, std::move(help));
}

OptionSpec OptionSpec::ip_cidrs(std::string name, std::string help) {
  return make(std::move(name), OptionType::ip_cidrs, std::move(help));
}

std::string describe_type(const OptionSpec& s) {
  switch (s.type) {
    case OptionType::integer:
      return "integer" + range_text(s);
    case OptionType::real:
      return "number" + range_text(s);
    case OptionType::boolean:
      return "on|off";
    case OptionType::string:
      return "text";
    case OptionType::choice:
      return "one of " + join(s.choices, "|");
    case OptionType::ipv4:
      return "IPv4 address (e.g. 192.0.2.1)";
    case OptionType::cidr:
      return "IPv4 address/prefix (e.g. 192.0.2.10/24)";
    case OptionType::mac:
      return "MAC address (e.g. 02:00:00:00:00:01)";
    case OptionType::size:
      return "size in bytes, k/m/g suffix" + range_text(s);
    case OptionType::list:
      return "comma-separated list";
    case OptionType::ip:
      return "IPv4 or IPv6 address (e.g. 192.0.2.1, 2001:db8::1)";
    case OptionType::ip_cidrs:
      return "comma-separated IPv4 or IPv6 address/prefix (e.g. 2001:db8::10/64)";
  }
  return "?";
}

bool parse_option_value(const OptionSpec& s, std::string_view t, OptionValue& out, std::string& why) {
  switch (s.type) {
    case OptionType::integer: {
      std::int64_t v = 0;
      bool overflow = false;
      if (!parse_int(t, v, overflow)) {
        why = overflow ? "out of range" + range_text(s) : "expected an integer";
        if (overflow && range_text(s).empty()) why = "out of the 64-bit range";
        return false;
      }
      if (v < s.int_min || v > s.int_max) {
        why = "out of range" + range_text(s);
        return false;
      }
      out = v;
      return true;
    }
    case OptionType::real: {
      double v = 0;
      // from_chars also takes "inf" and "nan"; isfinite turns both away.
      auto [next, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (t.empty() || ec != std::errc() || next != t.data() + t.size() || !std::isfinite(v)) {
        why = "expected a number";
        return false;
      }
      if (v < s.real_min || v > s.real_max) {
        why = "out of range" + range_text(s);
        return false;
      }
      out = v;
      return true;
    }
    case OptionType::boolean: {
      for (std::string_view yes : {"on", "true", "yes", "1"}) {
        if (iequals(t, yes)) {
          out = true;
          return true;
        }
      }
      for (std::string_view no : {"off", "false", "no", "0"}) {
        if (iequals(t, no)) {
          out = false;
          return true;
        }
      }
      why = "expected on/off (or true/false, yes/no, 1/0)";
      return false;
    }
    case OptionType::string:
      out = std::string(t);
      return true;
    case OptionType::choice:
      for (const auto& c : s.choices) {
        if (c == t) {
          out = c;
          return true;
        }
      }
      why = "expected one of " + join(s.choices, "|");
      return false;
    case OptionType::ipv4: {
      auto a = parse_ipv4(t);
      if (!a) {
        why = "expected an IPv4 address (a.b.c.d)";
        return false;
      }
      out = *a;
      return true;
    }
    case OptionType::cidr: {
      auto c = parse_cidr(t);
      if (!c) {
        why = "expected an IPv4 address with prefix length (a.b.c.d/n, n 0..32)";
        return false;
      }
      out = *c;
      return true;
    }
    case OptionType::mac: {
      auto m = parse_mac(t);
      if (!m) {
        why = "expected a MAC address (xx:xx:xx:xx:xx:xx)";
        return false;
      }
      out = *m;
      return true;
    }
    case OptionType::size: {
      std::uint64_t v = 0;
      bool overflow = false;
      if (!parse_size(t, v, overflow)) {
        why = overflow ? "too large for 64 bits" : "expected a size (a number, optionally followed by k, m or g)";
        return false;
      }
      if (v < s.size_min || v > s.size_max) {
        why = "out of range" + range_text(s);
        return false;
      }
      out = v;
      return true;
    }
    case OptionType::list: {
      std::vector<std::string> items;
      if (!t.empty()) {
        std::size_t start = 0;
        while (true) {
          const auto comma = t.find(',', start);
          const std::string_view item = t.substr(start, comma == std::string_view::npos ? t.npos : comma - start);
          if (item.empty()) {
            why = "empty element in list";
            return false;
          }
          items.emplace_back(item);
          if (comma == std::string_view::npos) break;
          start = comma + 1;
        }
      }
      out = std::move(items);
      return true;
    }
    case OptionType::ip: {
      Result<IpAddr> a = parse_ip(t);
      if (!a) {
        why = "expected an IPv4 or IPv6 address";
        return false;
      }
      out = *a;
      return true;
    }
    case OptionType::ip_cidrs: {
      std::vector<IpCidr> items;
      std::size_t start = 0;
      while (true) {
        const auto comma = t.find(',', start);
        const std::string_view item = t.substr(start, comma == std::string_view::npos ? t.npos : comma - start);
        Result<IpCidr> c = parse_ip_cidr(item);
        if (!c) {
          why = "expected address/prefix of either family (a.b.c.d/n, n 0..32; x:x::x/n, n 0..128), got '" +
                std::string(item) + "'";
          return false;
        }
        items.push_back(*c);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      out = std::move(items);
      return true;
    }
  }
  why = "unknown option type";
  return false;
}

std::string format_option_value(const OptionSpec& s, const OptionValue& v) {
  switch (s.type) {
    case OptionType::integer:
      return std::to_string(std::get<std::int64_t>(v));
    case OptionType::real:
      return format_real(std::get<double>(v));
    case OptionType::boolean:
      return std::get<bool>(v) ? "on" : "off";
    case OptionType::string:
    case OptionType::choice:
      return std::get<std::string>(v);
    case OptionType::ipv4:
      return to_string(std::get<Ipv4Addr>(v));
    case OptionType::cidr:
      return to_string(std::get<Ipv4Cidr>(v));
    case OptionType::mac:
      return to_string(std::get<MacAddr>(v));
    case OptionType::size:
      return format_size(std::get<std::uint64_t>(v));
    case OptionType::list:
      return join(std::get<std::vector<std::string>>(v), ",");
    case OptionType::ip:
      return to_string(std::get<IpAddr>(v));
    case OptionType::ip_cidrs: {
      std::vector<std::string> items;
      for (const IpCidr& c : std::get<std::vector<IpCidr>>(v)) items.push_back(to_string(c));
      return join(items, ",");
    }
  }
  return {};
}

// ---- Options --------------------------------------------------------------

Options::Options(std::string kind, std::vector<OptionSpec> params)
    : kind_(std::move(kind)), params_(std::move(params)), slots_(params_.size()) {}

bool Options::declares(std::string_view name) const noexcept {
  for (const auto& p : params_) {
    if (p.name == name) return true;
  }
  return false;
}

std::size_t Options::index_of(std::string_view name, std::string_view getter) const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return i;
  }
  throw std::invalid_argument(std::string(getter) + "(\"" + std::string(name) + "\"): kind '" + kind_ +
                              "' declares no option '" + std::string(name) + "'");
}

const OptionValue& Options::value_of(std::string_view name, std::string_view getter, OptionType want) const {
  const std::size_t i = index_of(name, getter);
  const OptionSpec& p = params_[i];
  const bool string_like = want == OptionType::string && p.type == OptionType::choice;
  const bool int_as_real = want == OptionType::real && p.type == OptionType::integer;
  if (p.type != want && !string_like && !int_as_real) {
    throw std::invalid_argument(std::string(getter) + "(\"" + p.name + "\"): option '" + p.name + "' of kind '" +
                                kind_ + "' is a " + describe_type(p));
  }
  if (!slots_[i].value) {
    throw std::invalid_argument(std::string(getter) + "(\"" + p.name + "\"): option '" + p.name + "' of kind '" +
                                kind_ + "' has no value (not given, no default): check has() first");
  }
  return *slots_[i].value;
}

bool Options::has(std::string_view name) const { return slots_[index_of(name, "has")].value.has_value(); }

bool Options::given(std::string_view name) const { return slots_[index_of(name, "given")].given; }

std::int64_t Options::get_int(std::string_view name) const {
  return std::get<std::int64_t>(value_of(name, "get_int", OptionType::integer));
}

double Options::get_real(std::string_view name) const {
  const OptionValue& v = value_of(name, "get_real", OptionType::real);
  if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  return std::get<double>(v);
}

bool Options::get_bool(std::string_view name) const {
  return std::get<bool>(value_of(name, "get_bool", OptionType::boolean));
}

const std::string& Options::get_string(std::string_view name) const {
  return std::get<std::string>(value_of(name, "get_string", OptionType::string));
}

Ipv4Addr Options::get_ipv4(std::string_view name) const {
  return std::get<Ipv4Addr>(value_of(name, "get_ipv4", OptionType::ipv4));
}

Ipv4Cidr Options::get_cidr(std::string_view name) const {
  return std::get<Ipv4Cidr>(value_of(name, "get_cidr", OptionType::cidr));
}

MacAddr Options::get_mac(std::string_view name) const {
  return std::get<MacAddr>(value_of(name, "get_mac", OptionType::mac));
}

std::uint64_t Options::get_size(std::string_view name) const {
  return std::get<std::uint64_t>(value_of(name, "get_size", OptionType::size));
}

const std::vector<std::string>& Options::get_list(std::string_view name) const {
  return std::get<std::vector<std::string>>(value_of(name, "get_list", OptionType::list));
}

IpAddr Options::get_ip(std::string_view name) const {
  return std::get<IpAddr>(value_of(name, "get_ip", OptionType::ip));
}

const std::vector<IpCidr>& Options::get_ip_cidrs(std::string_view name) const {
  return std::get<std::vector<IpCidr>>(value_of(name, "get_ip_cidrs", OptionType::ip_cidrs));
}

std::string Options::text(std::string_view name) const {
  const std::size_t i = index_of(name, "text");
  if (!slots_[i].value) {
    throw std::invalid_argument("text(\"" + params_[i].name + "\"): option '" + params_[i].name + "' of kind '" +
                                kind_ + "' has no value (not given, no default): check has() first");
  }
  return format_option_value(params_[i], *slots_[i].value);
}

std::string Options::set(std::string_view name, std::string_view text) {
  const std::size_t i = index_of(name, "set");
  OptionValue v;
  std::string why;
  if (!parse_option_value(params_[i], text, v, why)) return why;
  slots_[i].value = std::move(v);
  slots_[i].given = true;
  return {};
}

void Options::apply_defaults() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (slots_[i].value || !params_[i].default_text) continue;
    OptionValue v;
    std::string why;
    // Defaults are checked when a kind is registered; one that fails here was
    // put into an OptionSpec by hand, past the registry.
    if (!parse_option_value(params_[i], *params_[i].default_text, v, why)) {
      throw std::invalid_argument("kind '" + kind_ + "': default " + params_[i].name + "=" + *params_[i].default_text +
                                  ": " + why);
    }
    slots_[i].value = std::move(v);
  }
}

}  // namespace xk

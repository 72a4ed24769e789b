#pragma once
// Typed configuration options of one graph instance (see docs/graph-spec.md).
//
// A protocol kind declares its parameters as OptionSpecs; the graph builder
// parses `key=value` words against them and hands the protocol's factory an
// Options holding the checked values, defaults applied. Everything here runs at
// start-up, so misuse (asking for an undeclared option, or for the wrong type)
// throws instead of returning an error value.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "xk/address.hpp"
#include "xk/result.hpp"

namespace xk {

// An IPv4 address with a prefix length ("192.0.2.10/24"). The host bits are
// kept: the usual meaning is "my address, on this subnet".
struct Ipv4Cidr {
  Ipv4Addr addr;
  std::uint8_t prefix_len = 0;  // 0..32

  Ipv4Addr netmask() const noexcept;
  Ipv4Addr network() const noexcept;
  // Whether `a` is on this subnet.
  bool contains(Ipv4Addr a) const noexcept;
  friend bool operator==(const Ipv4Cidr&, const Ipv4Cidr&) = default;
};

std::string to_string(const Ipv4Cidr& c);
Result<Ipv4Cidr> parse_cidr(std::string_view text);

// An address of either family with its prefix length, counted in that
// family's bits ("192.0.2.10/24", "2001:db8::10/64").
struct IpCidr {
  IpAddr addr;
  std::uint8_t prefix_len = 0;  // 0..32 for IPv4, 0..128 for IPv6

  // Whether `a` is of the same family and on this prefix.
  bool contains(const IpAddr& a) const noexcept;
  friend bool operator==(const IpCidr&, const IpCidr&) = default;
};

std::string to_string(const IpCidr& c);
Result<IpCidr> parse_ip_cidr(std::string_view text);

enum class OptionType : std::uint8_t {
  integer,  // signed 64-bit, decimal or 0x-hex, within [int_min, int_max]
  real,     // finite double within [real_min, real_max]
  boolean,  // on/off, true/false, yes/no, 1/0
  string,   // any text
  choice,   // one word of `choices`
  ipv4,     // dotted quad
  cidr,     // dotted quad "/" prefix length
  mac,      // six colon-separated hex bytes
  size,     // byte count with optional k/m/g suffix (powers of 1024), within [size_min, size_max]
  list,     // comma-separated words, none empty
  ip,       // an address of either family
  ip_cidrs, // comma-separated addresses of either family, each "/" prefix length
};

// The value of one option; which alternative is held follows the OptionType:
// integer -> int64_t, real -> double, boolean -> bool, string and choice ->
// string, ipv4 -> Ipv4Addr, cidr -> Ipv4Cidr, mac -> MacAddr, size -> uint64_t,
// list -> vector<string>, ip -> IpAddr, ip_cidrs -> vector<IpCidr>.
using OptionValue = std::variant<std::int64_t, double, bool, std::string, Ipv4Addr, Ipv4Cidr, MacAddr, std::uint64_t,
                                 std::vector<std::string>, IpAddr, std::vector<IpCidr>>;

// One declared parameter of a kind: a key=value option or a positional word.
// Build them with the named constructors, then chain .mandatory() or
// .defaults_to("text"):
//
//   OptionSpec::integer("wscale", 0, 14, "window scale shift").defaults_to("7")
//   OptionSpec::cidr("addr", "address/prefix of this interface").mandatory()
struct OptionSpec {
  std::string name;
  OptionType type = OptionType::string;
  std::string help;
  bool required = false;
  // Written as in a spec; checked when the kind is registered.
  std::optional<std::string> default_text;
  std::int64_t int_min = std::numeric_limits<std::int64_t>::min();
  std::int64_t int_max = std::numeric_limits<std::int64_t>::max();
  double real_min = -std::numeric_limits<double>::max();
  double real_max = std::numeric_limits<double>::max();
  std::uint64_t size_min = 0;
  std::uint64_t size_max = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::string> choices;

  static OptionSpec integer(std::string name, std::int64_t min, std::int64_t max, std::string help = {});
  static OptionSpec real(std::string name, double min, double max, std::string help = {});
  static OptionSpec boolean(std::string name, std::string help = {});
  static OptionSpec string(std::string name, std::string help = {});
  static OptionSpec choice(std::string name, std::vector<std::string> choices, std::string help = {});
  static OptionSpec ipv4(std::string name, std::string help = {});
  static OptionSpec cidr(std::string name, std::string help = {});
  static OptionSpec mac(std::string name, std::string help = {});
  static OptionSpec size(std::string name, std::uint64_t min, std::uint64_t max, std::string help = {});
  static OptionSpec list(std::string name, std::string help = {});
  static OptionSpec ip(std::string name, std::string help = {});
  static OptionSpec ip_cidrs(std::string name, std::string help = {});

  OptionSpec& mandatory() & {
    required = true;
    return *this;
  }
  OptionSpec&& mandatory() && { return std::move(mandatory()); }
  OptionSpec& defaults_to(std::string text) & {
    default_text = std::move(text);
    return *this;
  }
  OptionSpec&& defaults_to(std::string text) && { return std::move(defaults_to(std::move(text))); }
};

// What values an option takes, for help and error text: "integer 0..14",
// "one of reno|cubic", "IPv4 address/prefix (e.g. 192.0.2.10/24)", ...
std::string describe_type(const OptionSpec& spec);

// Parse `text` as a value of `spec`. On failure returns false and says why in
// `why` (e.g. "out of range 0..14"); `out` is then unchanged.
bool parse_option_value(const OptionSpec& spec, std::string_view text, OptionValue& out, std::string& why);

// The canonical spelling of a value: what parse_option_value reads back to the
// same value (booleans as on/off, sizes with the largest exact suffix).
std::string format_option_value(const OptionSpec& spec, const OptionValue& value);

// The checked option values of one instance. Getters name the option as it is
// declared; asking for an undeclared name, for the wrong type, or for an
// option that has no value (optional, no default, not given) throws
// std::invalid_argument.
class Options {
 public:
  Options() = default;
  // `kind` names the owner in error text; `params` are the kind's positional
  // parameters followed by its options.
  Options(std::string kind, std::vector<OptionSpec> params);

  const std::string& kind() const noexcept { return kind_; }
  const std::vector<OptionSpec>& params() const noexcept { return params_; }
  bool declares(std::string_view name) const noexcept;

  // Has a value, given in the spec or by default.
  bool has(std::string_view name) const;
  // Was written in the spec (a default does not count).
  bool given(std::string_view name) const;

  std::int64_t get_int(std::string_view name) const;
  double get_real(std::string_view name) const;  // also reads an integer option
  bool get_bool(std::string_view name) const;
  const std::string& get_string(std::string_view name) const;  // string or choice
  Ipv4Addr get_ipv4(std::string_view name) const;
  Ipv4Cidr get_cidr(std::string_view name) const;
  MacAddr get_mac(std::string_view name) const;
  std::uint64_t get_size(std::string_view name) const;
  const std::vector<std::string>& get_list(std::string_view name) const;
  IpAddr get_ip(std::string_view name) const;
  const std::vector<IpCidr>& get_ip_cidrs(std::string_view name) const;
  // The canonical text of any option's value.
  std::string text(std::string_view name) const;

  // For the parser: parse and store a value given in the spec. Returns an
  // empty string on success, else why the text was rejected.
  std::string set(std::string_view name, std::string_view text);
  // For the parser: give every option without a value its default, if any.
  void apply_defaults();

 private:
  struct Slot {
    std::optional<OptionValue> value;
    bool given = false;
  };
  std::size_t index_of(std::string_view name, std::string_view getter) const;
  const OptionValue& value_of(std::string_view name, std::string_view getter, OptionType want) const;

  std::string kind_;
  std::vector<OptionSpec> params_;
  std::vector<Slot> slots_;  // parallel to params_
};

}  // namespace xk

#pragma once
// The machinery behind the control protocol's codec (control.cpp): a message
// is described once, as a list of TLV fields, and that one description
// encodes it, decodes it and checks it. Nothing here knows a message; the
// descriptions are in control.cpp.
//
//   formats  how one value sits in bytes: be<N> (big-endian integer or enum),
//            boolean, ipv4, ip (4 or 16 bytes), ip4 / ip6 (one family
//            in a record), mac, raw<N> (byte array), Text, Blob, U16List,
//            and Record (a struct at fixed offsets, described by parts).
//   fields   one TLV of a message: one(...) (required, or left out when it
//            holds its default), maybe(...) (a std::optional member) and
//            many(...) (a list, one TLV per element), each with an optional
//            rule for its value.
//   layout   a message's fields in ascending tag order, plus an optional
//            rule across fields.
//
// Decoding checks every length before it allocates or reads; a problem stops
// the decoding and is reported as "<tag>: <what is wrong>". Checking (also run
// after decoding, so every message that decodes encodes again) reports the
// first field whose value breaks a rule.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "xk/address.hpp"
#include "xk/ip_addr.hpp"
#include "xk/filterd/control_wire.hpp"
#include "xk/result.hpp"

namespace xk::filterd::ctl::tlv {

// ---- words ------------------------------------------------------------------------

std::string hex(std::uint32_t v, int digits);
inline std::string num(std::uint64_t v) { return std::to_string(v); }
const char* tag_name(Tag tag) noexcept;
std::string describe(Tag tag);  // "tag 0x0011 (local_port)"
std::string describe(std::uint16_t tag);

// UTF-8 as RFC 3629 defines it, and no NUL, so a string can go to C APIs.
bool valid_text(std::string_view s) noexcept;

// What breaks a rule, with the Errc encode() reports for it.
struct Violation {
  Errc errc;  // invalid_argument, or too_large for a string or list over its cap
  std::string text;
};
using Check = std::optional<Violation>;
inline Check bad(std::string text) { return Violation{Errc::invalid_argument, std::move(text)}; }
inline Check over(std::string text) { return Violation{Errc::too_large, std::move(text)}; }

// A rule for one value: `what` names the field in the sentence it returns.
template <class T>
using Rule = Check (*)(const T& value, std::string_view what);

// Why a value's bytes cannot be read; empty when they can.
using Fault = std::optional<std::string>;

inline void store_be64(std::byte* p, std::uint64_t v) noexcept {
  store_be32(p, static_cast<std::uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<std::uint32_t>(v));
}
inline std::uint64_t load_be64(const std::byte* p) noexcept {
  return (std::uint64_t{load_be32(p)} << 32) | load_be32(p + 4);
}

// ---- formats -----------------------------------------------------------------------
//
// A format offers, for its value type T:
//   std::size_t size(const T&)                    bytes the value takes
//   void write(std::byte*, const T&)
//   Fault read(std::span<const std::byte>, T&)     the whole value's bytes
//   Check check(const T&, std::string_view what)   the format's own limits
// A fixed-size format also has kSize, so a Record can place it at an offset.

// A length that must be exact.
inline Fault exact_length(std::size_t got, std::size_t want) {
  if (got == want) return std::nullopt;
  return "length " + num(got) + ", expected " + num(want);
}

// An unsigned big-endian integer of N bytes holding an integer or enum of any
// signedness (an int16 goes out as its two's complement).
template <std::size_t N>
struct BigEndian {
  static constexpr std::size_t kSize = N;

  template <class T>
  static std::uint64_t bits(const T& v) noexcept {
    if constexpr (std::is_enum_v<T>)
      return static_cast<std::uint64_t>(static_cast<std::make_unsigned_t<std::underlying_type_t<T>>>(v));
    else
      return static_cast<std::uint64_t>(static_cast<std::make_unsigned_t<T>>(v));
  }
  template <class T>
  static std::size_t size(const T&) noexcept { return N; }
  template <class T>
  static void write(std::byte* p, const T& v) noexcept {
    const std::uint64_t b = bits(v);
    if constexpr (N == 1) p[0] = std::byte{static_cast<std::uint8_t>(b)};
    if constexpr (N == 2) store_be16(p, static_cast<std::uint16_t>(b));
    if constexpr (N == 4) store_be32(p, static_cast<std::uint32_t>(b));
    if constexpr (N == 8) store_be64(p, b);
  }
  template <class T>
  static Fault read(std::span<const std::byte> v, T& out) {
    if (Fault f = exact_length(v.size(), N)) return f;
    std::uint64_t b = 0;
    if constexpr (N == 1) b = static_cast<std::uint8_t>(v[0]);
    if constexpr (N == 2) b = load_be16(v.data());
    if constexpr (N == 4) b = load_be32(v.data());
    if constexpr (N == 8) b = load_be64(v.data());
    if constexpr (std::is_enum_v<T>)
      out = static_cast<T>(static_cast<std::underlying_type_t<T>>(b));
    else
      out = static_cast<T>(b);
    return std::nullopt;
  }
  template <class T>
  static Check check(const T&, std::string_view) { return std::nullopt; }
};
template <std::size_t N>
inline constexpr BigEndian<N> be{};

// One byte, 0 or 1.
struct Boolean {
  static constexpr std::size_t kSize = 1;
  static std::size_t size(bool) noexcept { return 1; }
  static void write(std::byte* p, bool v) noexcept { p[0] = std::byte{v ? std::uint8_t{1} : std::uint8_t{0}}; }
  static Fault read(std::span<const std::byte> v, bool& out) {
    if (Fault f = exact_length(v.size(), 1)) return f;
    const auto b = static_cast<std::uint8_t>(v[0]);
    if (b > 1) return num(b) + " is neither 0 nor 1";
    out = b == 1;
    return std::nullopt;
  }
  static Check check(bool, std::string_view) { return std::nullopt; }
};
inline constexpr Boolean boolean{};

// An IPv4-only field (HELLO_REPLY's shared address and gateway).
struct Ipv4 {
  static constexpr std::size_t kSize = 4;
  static std::size_t size(const Ipv4Addr&) noexcept { return 4; }
  static void write(std::byte* p, const Ipv4Addr& a) noexcept { store_be32(p, a.value); }
  static Fault read(std::span<const std::byte> v, Ipv4Addr& out) {
    if (Fault f = exact_length(v.size(), 4)) return f;
    out.value = load_be32(v.data());
    return std::nullopt;
  }
  static Check check(const Ipv4Addr&, std::string_view) { return std::nullopt; }
};
inline constexpr Ipv4 ipv4{};

// An IP address of either family as its own TLV: 4 bytes for IPv4, 16 for
// IPv6. An IPv4 address has one encoding only, so 16 bytes holding an
// IPv4-mapped address are refused.
struct Ip {
  static std::size_t size(const IpAddr& a) noexcept { return a.is_v4() ? 4 : 16; }
  static void write(std::byte* p, const IpAddr& a) noexcept {
    if (a.is_v4())
      store_be32(p, a.v4().value);
    else
      std::memcpy(p, a.bytes().data(), 16);
  }
  static Fault read(std::span<const std::byte> v, IpAddr& out) {
    if (v.size() == 4) {
      out = Ipv4Addr{load_be32(v.data())};
      return std::nullopt;
    }
    if (v.size() != 16) return "length " + num(v.size()) + ", expected 4 (IPv4) or 16 (IPv6)";
    IpAddr::Bytes b;
    std::memcpy(b.data(), v.data(), 16);
    out = IpAddr::v6(b);
    if (out.is_v4()) return std::string("an IPv4-mapped address in 16 bytes (IPv4 takes 4)");
    return std::nullopt;
  }
  static Check check(const IpAddr&, std::string_view) { return std::nullopt; }
};
inline constexpr Ip ip{};

// An address of one family at a fixed offset of a record: 4 bytes (V6
// false) or 16 (true). A list whose records come in both families sends
// each under its family's tag.
template <bool V6>
struct IpOf {
  static constexpr std::size_t kSize = V6 ? 16 : 4;
  static std::size_t size(const IpAddr&) noexcept { return kSize; }
  static void write(std::byte* p, const IpAddr& a) noexcept { Ip::write(p, a); }
  static Fault read(std::span<const std::byte> v, IpAddr& out) {
    if (Fault f = exact_length(v.size(), kSize)) return f;
    return Ip::read(v, out);
  }
  static Check check(const IpAddr& a, std::string_view what) {
    if (a.is_v4() == !V6) return std::nullopt;
    return bad(std::string(what) + " is not an " + (V6 ? "IPv6" : "IPv4") + " address");
  }
};
inline constexpr IpOf<false> ip4{};
inline constexpr IpOf<true> ip6{};

struct Mac {
  static constexpr std::size_t kSize = 6;
  static std::size_t size(const MacAddr&) noexcept { return 6; }
  static void write(std::byte* p, const MacAddr& m) noexcept { std::memcpy(p, m.bytes.data(), 6); }
  static Fault read(std::span<const std::byte> v, MacAddr& out) {
    if (Fault f = exact_length(v.size(), 6)) return f;
    std::memcpy(out.bytes.data(), v.data(), 6);
    return std::nullopt;
  }
  static Check check(const MacAddr&, std::string_view) { return std::nullopt; }
};
inline constexpr Mac mac{};

// A byte array of a fixed size (a nonce, a proof, a key).
template <std::size_t N>
struct Bytes {
  static constexpr std::size_t kSize = N;
  using Value = std::array<std::byte, N>;
  static std::size_t size(const Value&) noexcept { return N; }
  static void write(std::byte* p, const Value& b) noexcept { std::memcpy(p, b.data(), N); }
  static Fault read(std::span<const std::byte> v, Value& out) {
    if (Fault f = exact_length(v.size(), N)) return f;
    std::memcpy(out.data(), v.data(), N);
    return std::nullopt;
  }
  static Check check(const Value&, std::string_view) { return std::nullopt; }
};
template <std::size_t N>
inline constexpr Bytes<N> raw{};

// UTF-8 text of Min..Max bytes.
template <std::size_t Min, std::size_t Max>
struct Text {
  static std::size_t size(const std::string& s) noexcept { return s.size(); }
  static void write(std::byte* p, const std::string& s) noexcept {
    if (!s.empty()) std::memcpy(p, s.data(), s.size());
  }
  static Fault read(std::span<const std::byte> v, std::string& out) {
    if (v.size() > Max) return num(v.size()) + " bytes, over the limit of " + num(Max);
    out.assign(reinterpret_cast<const char*>(v.data()), v.size());
    return std::nullopt;
  }
  static Check check(const std::string& s, std::string_view what) {
    if (s.size() > Max) return over(std::string(what) + " is " + num(s.size()) + " bytes, over the limit of " + num(Max));
    if (s.size() < Min) return bad(std::string(what) + " is empty");
    if (!valid_text(s)) return bad(std::string(what) + " is not UTF-8 text without NUL");
    return std::nullopt;
  }
};
template <std::size_t Min, std::size_t Max>
inline constexpr Text<Min, Max> text{};

// Opaque bytes, 1..Max of them (a field that holds none is left out).
template <std::size_t Max>
struct Blob {
  static std::size_t size(const std::vector<std::byte>& b) noexcept { return b.size(); }
  static void write(std::byte* p, const std::vector<std::byte>& b) noexcept {
    if (!b.empty()) std::memcpy(p, b.data(), b.size());
  }
  static Fault read(std::span<const std::byte> v, std::vector<std::byte>& out) {
    if (v.empty() || v.size() > Max) return "length " + num(v.size()) + ", expected 1.." + num(Max);
    out.assign(v.begin(), v.end());
    return std::nullopt;
  }
  static Check check(const std::vector<std::byte>& b, std::string_view what) {
    if (b.size() > Max) return over(std::string(what) + " is " + num(b.size()) + " bytes, over the limit of " + num(Max));
    return std::nullopt;
  }
};
template <std::size_t Max>
inline constexpr Blob<Max> blob{};

// A list of 1..Max nonzero u16 in one value.
template <std::size_t Max>
struct U16List {
  static std::size_t size(const std::vector<std::uint16_t>& v) noexcept { return 2 * v.size(); }
  static void write(std::byte* p, const std::vector<std::uint16_t>& v) noexcept {
    for (std::size_t i = 0; i < v.size(); ++i) store_be16(p + 2 * i, v[i]);
  }
  static Fault read(std::span<const std::byte> v, std::vector<std::uint16_t>& out) {
    if (v.empty() || v.size() > 2 * Max) return "length " + num(v.size()) + ", expected 1.." + num(2 * Max);
    if (v.size() % 2 != 0) return "length " + num(v.size()) + " is odd";
    out.reserve(v.size() / 2);
    for (std::size_t i = 0; i < v.size(); i += 2) out.push_back(load_be16(v.data() + i));
    return std::nullopt;
  }
  static Check check(const std::vector<std::uint16_t>& v, std::string_view what) {
    if (v.size() > Max) return over(num(v.size()) + " " + std::string(what) + ", over the limit of " + num(Max));
    if (std::find(v.begin(), v.end(), std::uint16_t{0}) != v.end()) return bad("0 in the " + std::string(what));
    return std::nullopt;
  }
};
template <std::size_t Max>
inline constexpr U16List<Max> u16_list{};

// ---- records -------------------------------------------------------------------------
//
// A record is a struct R at fixed offsets in one value, `base` bytes and
// more: parts after the base (a counted string, an extension) follow in the
// order listed, and bytes after those are skipped (a later version may add
// them). A part offers
//   std::size_t extra(const R&)                 bytes it adds after the base
//   void write(std::byte* rec, std::size_t& end, const R&)
//   Fault read(std::span<const std::byte> rec, std::size_t& end, R&)
//   Check check(const R&)
// where `end` is where the bytes after the base go on.

// A fixed-size value at an offset of the base.
template <class R, class T, class F>
struct Slot {
  std::size_t off;
  T R::*member;
  const char* what;
  Rule<T> rule;

  std::size_t extra(const R&) const noexcept { return 0; }
  void write(std::byte* rec, std::size_t&, const R& r) const { F::write(rec + off, r.*member); }
  Fault read(std::span<const std::byte> rec, std::size_t&, R& r) const {
    return F::read(rec.subspan(off, F::kSize), r.*member);
  }
  Check check(const R& r) const {
    if (Check c = F::check(r.*member, what)) return c;
    return rule ? rule(r.*member, what) : std::nullopt;
  }
};
template <class R, class T, class F>
constexpr Slot<R, T, F> at(std::size_t off, F, T R::*member, const char* what,
                           std::type_identity_t<Rule<T>> rule = nullptr) {
  return {off, member, what, rule};
}

// A flags byte: each known bit one bool; unknown bits are refused (a later
// version that adds one must not be misread).
template <class R, std::size_t K>
struct Flags {
  std::size_t off;
  std::array<std::pair<std::uint8_t, bool R::*>, K> bits;

  std::size_t extra(const R&) const noexcept { return 0; }
  void write(std::byte* rec, std::size_t&, const R& r) const {
    std::uint8_t b = 0;
    for (const auto& [mask, member] : bits)
      if (r.*member) b |= mask;
    rec[off] = std::byte{b};
  }
  Fault read(std::span<const std::byte> rec, std::size_t&, R& r) const {
    std::uint8_t b = static_cast<std::uint8_t>(rec[off]);
    for (const auto& [mask, member] : bits) {
      r.*member = (b & mask) != 0;
      b &= static_cast<std::uint8_t>(~mask);
    }
    if (b != 0) return "unknown flags " + hex(b, 2);
    return std::nullopt;
  }
  Check check(const R&) const { return std::nullopt; }
};
template <class R, class... Bools>
constexpr Flags<R, sizeof...(Bools)> flags(std::size_t off, std::pair<std::uint8_t, Bools>... bits) {
  return {off, {std::pair<std::uint8_t, bool R::*>(bits.first, bits.second)...}};
}

// A byte with one known value (a layout's format number).
template <class R>
struct Constant {
  std::size_t off;
  std::uint8_t value;
  const char* what;

  std::size_t extra(const R&) const noexcept { return 0; }
  void write(std::byte* rec, std::size_t&, const R&) const { rec[off] = std::byte{value}; }
  Fault read(std::span<const std::byte> rec, std::size_t&, R&) const {
    const auto b = static_cast<std::uint8_t>(rec[off]);
    if (b != value) return std::string(what) + " " + num(b) + ", this receiver knows " + num(value);
    return std::nullopt;
  }
  Check check(const R&) const { return std::nullopt; }
};
template <class R>
constexpr Constant<R> constant(std::size_t off, std::uint8_t value, const char* what) {
  return {off, value, what};
}

// A string after the base, its length in an N-byte field of the base.
template <class R, std::size_t N, std::size_t Min, std::size_t Max>
struct Counted {
  std::size_t len_off;
  std::string R::*member;
  const char* what;

  std::size_t extra(const R& r) const noexcept { return (r.*member).size(); }
  void write(std::byte* rec, std::size_t& end, const R& r) const {
    const std::string& s = r.*member;
    BigEndian<N>::write(rec + len_off, s.size());
    if (!s.empty()) std::memcpy(rec + end, s.data(), s.size());
    end += s.size();
  }
  Fault read(std::span<const std::byte> rec, std::size_t& end, R& r) const {
    std::size_t len = 0;
    (void)BigEndian<N>::read(rec.subspan(len_off, N), len);
    if (rec.size() - end < len) return "length " + num(rec.size()) + ", too short for its " + what;
    if (len > Max) return "a " + std::string(what) + " of " + num(len) + " bytes, over the limit of " + num(Max);
    (r.*member).assign(reinterpret_cast<const char*>(rec.data() + end), len);
    end += len;
    return std::nullopt;
  }
  Check check(const R& r) const { return Text<Min, Max>::check(r.*member, what); }
};
template <class R, std::size_t N, std::size_t Min, std::size_t Max>
constexpr Counted<R, N, Min, Max> counted(std::size_t len_off, BigEndian<N>, Text<Min, Max>, std::string R::*member,
                                          const char* what) {
  return {len_off, member, what};
}

// An optional extension after the variable part: a kind byte and a MAC, there
// when `present` is set. A receiver that finds another kind (or too few bytes)
// leaves it out, as one that predates it would.
template <class R>
struct MacExtension {
  std::uint8_t kind;
  bool R::*present;
  MacAddr R::*member;

  std::size_t extra(const R& r) const noexcept { return r.*present ? 7 : 0; }
  void write(std::byte* rec, std::size_t& end, const R& r) const {
    if (!(r.*present)) return;
    rec[end] = std::byte{kind};
    Mac::write(rec + end + 1, r.*member);
    end += 7;
  }
  Fault read(std::span<const std::byte> rec, std::size_t& end, R& r) const {
    if (rec.size() - end < 7 || static_cast<std::uint8_t>(rec[end]) != kind) return std::nullopt;
    r.*present = true;
    (void)Mac::read(rec.subspan(end + 1, 6), r.*member);
    end += 7;
    return std::nullopt;
  }
  Check check(const R&) const { return std::nullopt; }
};
template <class R>
constexpr MacExtension<R> mac_extension(std::uint8_t kind, bool R::*present, MacAddr R::*member) {
  return {kind, present, member};
}

// A record as a format: `base` bytes at least (exactly, when `exact`).
template <class R, class... Parts>
struct Record {
  std::size_t base;
  bool exact;
  std::tuple<Parts...> parts;
  Check (*also)(const R&) = nullptr;  // a rule across parts

  std::size_t size(const R& r) const {
    return std::apply([&](const auto&... p) { return (base + ... + p.extra(r)); }, parts);
  }
  void write(std::byte* p, const R& r) const {
    std::size_t end = base;
    std::apply([&](const auto&... part) { (part.write(p, end, r), ...); }, parts);
  }
  Fault read(std::span<const std::byte> v, R& r) const {
    if (exact && v.size() != base) return exact_length(v.size(), base);
    if (v.size() < base) return "length " + num(v.size()) + ", at least " + num(base) + " expected";
    std::size_t end = base;
    Fault f;
    std::apply([&](const auto&... part) { ((f = f ? f : part.read(v, end, r)), ...); }, parts);
    return f;
  }
  Check check(const R& r, std::string_view what) const {
    Check c;
    std::apply([&](const auto&... part) { ((c = c ? c : part.check(r)), ...); }, parts);
    if (!c && also) c = also(r);
    if (c && !what.empty()) c->text = std::string(what) + ": " + c->text;
    return c;
  }
};
template <class R, class... Parts>
constexpr Record<R, Parts...> record(std::size_t base, Parts... parts) {
  return {base, false, {parts...}};
}
template <class R, class... Parts>
constexpr Record<R, Parts...> exact_record(std::size_t base, Parts... parts) {
  return {base, true, {parts...}};
}
template <class R, class... Parts>
constexpr Record<R, Parts...> with_rule(Record<R, Parts...> r, Check (*also)(const R&)) {
  r.also = also;
  return r;
}

// A record nested at an offset of another (a node_flow holds a flow).
template <class R, class T, class... Parts>
struct Nested {
  std::size_t off;
  T R::*member;
  Record<T, Parts...> inner;

  std::size_t extra(const R&) const noexcept { return 0; }
  void write(std::byte* rec, std::size_t&, const R& r) const { inner.write(rec + off, r.*member); }
  Fault read(std::span<const std::byte> rec, std::size_t&, R& r) const {
    return inner.read(rec.subspan(off, inner.base), r.*member);
  }
  Check check(const R& r) const { return inner.check(r.*member, ""); }
};
template <class R, class T, class... Parts>
constexpr Nested<R, T, Parts...> nested(std::size_t off, T R::*member, Record<T, Parts...> inner) {
  return {off, member, inner};
}

// ---- the TLVs of one body -------------------------------------------------------------

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}

  template <class F, class T>
  void put(Tag t, const F& format, const T& v) {
    const std::size_t n = format.size(v);
    const std::size_t at = out_.size();
    out_.resize(at + kTlvHeaderSize + n);
    store_be16(out_.data() + at, static_cast<std::uint16_t>(t));
    store_be16(out_.data() + at + 2, static_cast<std::uint16_t>(n));
    format.write(out_.data() + at + kTlvHeaderSize, v);
  }

 private:
  std::vector<std::byte>& out_;
};

enum class Presence : std::uint8_t { required, optional, repeated };

struct FieldSpec {
  Tag tag = Tag::pad;
  Presence presence = Presence::optional;
  std::size_t max_count = 1;  // for repeated fields
};

inline constexpr std::size_t kMaxFields = 16;

// The TLVs of one body, found in one pass against the fields a message has:
// lengths checked, unknown tags skipped (unless critical), duplicates, list
// caps and missing required fields refused. The first problem sticks.
class Decoder {
 public:
  explicit Decoder(std::span<const FieldSpec> spec) : spec_(spec) {}

  bool scan(std::span<const std::byte> body);

  bool ok() const noexcept { return !problem_; }
  const std::string& problem() const { return *problem_; }
  bool fail(std::string text) {
    if (!problem_) problem_ = std::move(text);
    return false;
  }

  std::optional<std::span<const std::byte>> one(Tag t) const noexcept {
    const int i = index(t);
    return i < 0 ? std::nullopt : one_[static_cast<std::size_t>(i)];
  }
  std::span<const std::span<const std::byte>> many(Tag t) const noexcept {
    const int i = index(t);
    if (i < 0) return {};
    return many_[static_cast<std::size_t>(i)];
  }

 private:
  int index(Tag t) const noexcept {
    for (std::size_t i = 0; i < spec_.size(); ++i)
      if (spec_[i].tag == t) return static_cast<int>(i);
    return -1;
  }

  std::span<const FieldSpec> spec_;
  std::array<std::optional<std::span<const std::byte>>, kMaxFields> one_{};
  std::array<std::vector<std::span<const std::byte>>, kMaxFields> many_{};
  std::optional<std::string> problem_;
};

// ---- fields ---------------------------------------------------------------------------

// How a field reaches its value in the message: a member, or the message
// itself (several members in one record).
template <class M, class T>
struct Member {
  T M::*member;
  T* get(M& m) const noexcept { return &(m.*member); }
  const T* get(const M& m) const noexcept { return &(m.*member); }
};
template <class M>
struct Whole {
  M* get(M& m) const noexcept { return &m; }
  const M* get(const M& m) const noexcept { return &m; }
};

enum class Omit : std::uint8_t {
  never,     // required: always sent, must be there
  defaults,  // left out when it holds its default; a default sent is taken
  strictly,  // left out when it holds its default; a default sent is refused (one encoding only)
};

// One value in one TLV.
template <class M, class T, class F, class Access>
struct One {
  Tag tag;
  F format;
  Access access;
  Omit omit;
  Rule<T> rule;

  constexpr FieldSpec spec() const noexcept { return {tag, omit == Omit::never ? Presence::required : Presence::optional, 1}; }
  void put(Writer& w, const M& m) const {
    const T& v = *access.get(m);
    if (omit != Omit::never && v == T{}) return;
    w.put(tag, format, v);
  }
  void take(Decoder& d, M& m) const {
    const auto v = d.one(tag);
    if (!v) return;
    T& out = *access.get(m);
    if (Fault f = format.read(*v, out)) {
      d.fail(describe(tag) + ": " + *f);
    } else if (omit == Omit::strictly && out == T{}) {
      d.fail(describe(tag) + ": the default value (leave the field out instead)");
    }
  }
  Check check(const M& m) const {
    const T& v = *access.get(m);
    if (Check c = format.check(v, tag_name(tag))) return c;
    return rule ? rule(v, tag_name(tag)) : std::nullopt;
  }
};

// A std::optional member: sent when it holds a value.
template <class M, class T, class F>
struct Maybe {
  Tag tag;
  F format;
  std::optional<T> M::*member;
  Rule<T> rule;

  constexpr FieldSpec spec() const noexcept { return {tag, Presence::optional, 1}; }
  void put(Writer& w, const M& m) const {
    if (const auto& v = m.*member) w.put(tag, format, *v);
  }
  void take(Decoder& d, M& m) const {
    const auto v = d.one(tag);
    if (!v) return;
    if (Fault f = format.read(*v, (m.*member).emplace())) d.fail(describe(tag) + ": " + *f);
  }
  Check check(const M& m) const {
    const auto& v = m.*member;
    if (!v) return std::nullopt;
    if (Check c = format.check(*v, tag_name(tag))) return c;
    return rule ? rule(*v, tag_name(tag)) : std::nullopt;
  }
};

// A list, one TLV per element in list order, at most `cap` of them. Access
// may find no list in a message (the channels of a HELLO that resumes
// nothing): elements sent then are refused. With `keep`, the field carries
// only the elements it keeps and another field of the message the rest (the
// flows of each address family under their own tag): decoding appends.
template <class M, class T, class F, class Access>
struct Many {
  Tag tag;
  F format;
  Access access;
  std::size_t cap;
  bool (*keep)(const T&) = nullptr;

  constexpr FieldSpec spec() const noexcept { return {tag, Presence::repeated, cap}; }
  bool mine(const T& v) const { return keep == nullptr || keep(v); }
  void put(Writer& w, const M& m) const {
    if (const std::vector<T>* list = access.get(m))
      for (const T& v : *list)
        if (mine(v)) w.put(tag, format, v);
  }
  void take(Decoder& d, M& m) const {
    const auto values = d.many(tag);
    if (values.empty()) return;
    std::vector<T>* list = access.get(m);
    if (!list) {
      d.fail(describe(tag) + " without " + access.needs());
      return;
    }
    list->reserve(list->size() + values.size());  // capped by the scan
    for (std::span<const std::byte> v : values) {
      if (Fault f = format.read(v, list->emplace_back())) {
        d.fail(describe(tag) + ": " + *f);
        return;
      }
    }
  }
  Check check(const M& m) const {
    const std::vector<T>* list = access.get(m);
    if (!list) return std::nullopt;
    const auto count = static_cast<std::size_t>(std::count_if(list->begin(), list->end(), [&](const T& v) { return mine(v); }));
    if (count > cap) return over(num(count) + " " + tag_name(tag) + " records, over the limit of " + num(cap));
    for (std::size_t i = 0; i < list->size(); ++i)
      if (mine((*list)[i]))
        if (Check c = format.check((*list)[i], std::string(tag_name(tag)) + " " + num(i))) return c;
    return std::nullopt;
  }
};

// A list that is simply a member.
template <class M, class T>
struct ListMember {
  std::vector<T> M::*member;
  std::vector<T>* get(M& m) const noexcept { return &(m.*member); }
  const std::vector<T>* get(const M& m) const noexcept { return &(m.*member); }
  std::string needs() const { return {}; }
};

template <class M, class T, class F>
constexpr One<M, T, F, Member<M, T>> one(Tag tag, F format, T M::*member, std::type_identity_t<Rule<T>> rule = nullptr) {
  return {tag, format, {member}, Omit::never, rule};
}
template <class M, class T, class F>
constexpr One<M, T, F, Member<M, T>> optional(Tag tag, F format, T M::*member,
                                              std::type_identity_t<Rule<T>> rule = nullptr) {
  return {tag, format, {member}, Omit::defaults, rule};
}
template <class M, class T, class F>
constexpr One<M, T, F, Member<M, T>> strict_optional(Tag tag, F format, T M::*member,
                                                     std::type_identity_t<Rule<T>> rule = nullptr) {
  return {tag, format, {member}, Omit::strictly, rule};
}
template <class M, class F>
constexpr One<M, M, F, Whole<M>> whole(Tag tag, F format) {
  return {tag, format, {}, Omit::never, nullptr};
}
template <class M, class T, class F>
constexpr Maybe<M, T, F> maybe(Tag tag, F format, std::optional<T> M::*member,
                               std::type_identity_t<Rule<T>> rule = nullptr) {
  return {tag, format, member, rule};
}
template <class M, class T, class F>
constexpr Many<M, T, F, ListMember<M, T>> many(Tag tag, F format, std::vector<T> M::*member, std::size_t cap) {
  return {tag, format, {member}, cap};
}
template <class M, class T, class F>
constexpr Many<M, T, F, ListMember<M, T>> many_where(Tag tag, F format, std::vector<T> M::*member, std::size_t cap,
                                                     bool (*keep)(const T&)) {
  return {tag, format, {member}, cap, keep};
}
template <class M, class T, class F, class Access>
constexpr Many<M, T, F, Access> many_via(Tag tag, F format, Access access, std::size_t cap) {
  return {tag, format, access, cap};
}

// ---- a message ----------------------------------------------------------------------------

template <class M, class... Fields>
struct Layout {
  std::tuple<Fields...> fields;
  Check (*also)(const M&) = nullptr;  // a rule across fields, after each field's own

  static_assert(sizeof...(Fields) <= kMaxFields);

  constexpr std::array<FieldSpec, sizeof...(Fields)> specs() const {
    return std::apply([](const auto&... f) { return std::array<FieldSpec, sizeof...(Fields)>{f.spec()...}; }, fields);
  }
  // Fields go out in the order listed, which must be ascending tag order.
  constexpr bool ascending() const {
    const auto s = specs();
    for (std::size_t i = 1; i < s.size(); ++i)
      if (static_cast<std::uint16_t>(s[i - 1].tag) >= static_cast<std::uint16_t>(s[i].tag)) return false;
    return true;
  }
  void put(Writer& w, const M& m) const {
    std::apply([&](const auto&... f) { (f.put(w, m), ...); }, fields);
  }
  void take(Decoder& d, M& m) const {
    std::apply([&](const auto&... f) { ((d.ok() ? f.take(d, m) : void()), ...); }, fields);
  }
  Check check(const M& m) const {
    Check c;
    std::apply([&](const auto&... f) { ((c = c ? c : f.check(m)), ...); }, fields);
    if (!c && also) c = also(m);
    return c;
  }
};
template <class M, class... Fields>
constexpr Layout<M, Fields...> layout(Fields... fields) {
  return {{fields...}};
}
template <class M, class... Fields>
constexpr Layout<M, Fields...> layout(Check (*also)(const M&), Fields... fields) {
  return {{fields...}, also};
}

}  // namespace xk::filterd::ctl::tlv

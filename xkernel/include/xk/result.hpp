#pragma once
// Error values for the data path: no exceptions there (docs/style.md). A
// Status says whether an operation worked; a Result<T> carries a value or the
// reason it is missing. Exceptions are for start-up and configuration only.

#include <cstdint>
#include <optional>
#include <utility>

namespace xk {

enum class Errc : std::uint8_t {
  ok = 0,
  no_headroom,       // a header push found no room in front of the data
  out_of_range,      // offset or length past the end of a message
  too_large,         // request exceeds a fixed limit
  no_memory,         // allocation failed or a memory cap was reached
  not_found,         // no session / key / entry
  exists,            // key already bound
  invalid_argument,  // caller passed something malformed
  unsupported,       // the layer does not implement this operation
  would_block,       // try again later
  closed,            // the session or stack is closed
  bad_state,         // operation not allowed in the current state
  malformed,         // input from the network failed validation
  no_route,          // no route or next hop for the destination
  port_unreachable,  // a transport has no receiver for the port (IP answers with ICMP)
  proto_unreachable, // nothing above IP handles the protocol number
  refused,           // the peer refused the connection (RST to our SYN)
  reset,             // the peer reset the connection
  timed_out,         // retransmissions or keepalives went unanswered
  not_connected,     // the operation needs a connected socket
  interrupted,       // a signal handler ran while the caller slept (EINTR)
};

const char* to_string(Errc e) noexcept;

class [[nodiscard]] Status {
 public:
  constexpr Status() noexcept = default;
  constexpr Status(Errc e) noexcept : err_(e) {}  // NOLINT: implicit on purpose
  static constexpr Status success() noexcept { return Status(); }

  constexpr bool ok() const noexcept { return err_ == Errc::ok; }
  constexpr explicit operator bool() const noexcept { return ok(); }
  constexpr Errc error() const noexcept { return err_; }
  friend constexpr bool operator==(Status a, Status b) noexcept { return a.err_ == b.err_; }

 private:
  Errc err_ = Errc::ok;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Errc e) noexcept : err_(e == Errc::ok ? Errc::invalid_argument : e) {}  // NOLINT

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  Errc error() const noexcept { return ok() ? Errc::ok : err_; }
  Status status() const noexcept { return ok() ? Status() : Status(err_); }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Errc err_ = Errc::ok;
};

}  // namespace xk

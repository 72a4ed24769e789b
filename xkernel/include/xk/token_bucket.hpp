#pragma once
// A token bucket on a Clock: `rate` tokens a second, at most `burst` held.
// What ICMP and ICMPv6 limit their error messages with (RFC 1812 4.3.2.8,
// RFC 4443 2.4 f).

#include <algorithm>
#include <chrono>

#include "xk/clock.hpp"

namespace xk {

class TokenBucket {
 public:
  // Starts full.
  TokenBucket(const Clock& clock, double rate, double burst) noexcept
      : clock_(clock), rate_(rate), burst_(burst), tokens_(burst), last_(clock.now()) {}

  // Takes one token if there is one.
  bool take() noexcept {
    const Time now = clock_.now();
    if (now > last_) {
      const double secs = std::chrono::duration<double>(now - last_).count();
      tokens_ = std::min(burst_, tokens_ + secs * rate_);
      last_ = now;
    }
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

 private:
  const Clock& clock_;
  double rate_;
  double burst_;
  double tokens_;
  Time last_;
};

}  // namespace xk

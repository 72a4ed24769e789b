#include "xk/protocols/tcp_isn.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "xk/byteorder.hpp"

namespace xk::tcp {

Secret random_secret() {
  Secret s;
  std::size_t got = 0;
  while (got < s.size()) {
    ssize_t n = ::getrandom(s.data() + got, s.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
  return s;
}

TupleBytes::TupleBytes(const FourTuple& t) noexcept : b_{} {
  std::byte* p = b_.data();
  auto put_addr = [&p](const IpAddr& a) {
    if (a.is_v4()) {
      store_be32(p, a.v4().value);
      p += 4;
    } else {
      std::memcpy(p, a.bytes().data(), 16);
      p += 16;
    }
  };
  put_addr(t.local.addr);
  store_be16(p, t.local.port);
  p += 2;
  put_addr(t.remote.addr);
  store_be16(p, t.remote.port);
  p += 2;
  n_ = static_cast<std::size_t>(p - b_.data());
}

IsnGenerator::IsnGenerator() : secret_(random_secret()) {}

std::uint32_t IsnGenerator::clock_ticks(Time now) noexcept {
  // floor, not truncation, so ticks stay 4 us long on both sides of the epoch.
  auto ticks = std::chrono::floor<std::chrono::duration<std::int64_t, std::ratio<4, 1000000>>>(
      now.time_since_epoch());
  return static_cast<std::uint32_t>(ticks.count());
}

std::uint32_t IsnGenerator::offset(const FourTuple& t) const noexcept {
  return static_cast<std::uint32_t>(siphash24(secret_, TupleBytes(t).span()));
}

SeqNum IsnGenerator::isn(const FourTuple& t, Time now) const noexcept {
  // RFC 6528 3: ISN = M + F(localip, localport, remoteip, remoteport, secretkey).
  return SeqNum(clock_ticks(now)) + offset(t);
}

}  // namespace xk::tcp

#pragma once
// SHA-256 (FIPS 180-4), for checking that a byte stream arrived intact end to
// end (tests, apps). Incremental: update() with any pieces, then digest().

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace xk {

class Sha256 {
 public:
  using Digest = std::array<std::byte, 32>;

  Sha256() noexcept { reset(); }
  void reset() noexcept;
  void update(std::span<const std::byte> data) noexcept;
  // Finishes the hash; the object must be reset() before reuse.
  Digest digest() noexcept;

  static Digest of(std::span<const std::byte> data) noexcept;
  static std::string hex(const Digest& d);

 private:
  void block(const std::byte* p) noexcept;

  std::array<std::uint32_t, 8> h_{};
  std::array<std::byte, 64> buf_{};
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;  // bytes hashed
};

}  // namespace xk

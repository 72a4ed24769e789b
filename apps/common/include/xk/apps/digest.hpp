#pragma once
// SHA-256 of a byte stream, for checking end to end that it arrived intact
// (--verify in xk-ttcp and xk-tcp-perf, and the TCP tests' streams).
// OpenSSL's libcrypto does the hashing, with the CPU's SHA extensions where
// there are some, so a verified transfer still runs near the link's rate.
#include <cstddef>
#include <span>
#include <string>

struct evp_md_ctx_st;

namespace xk::apps {

class StreamDigest {
 public:
  StreamDigest();
  ~StreamDigest();
  StreamDigest(StreamDigest&& o) noexcept;
  StreamDigest& operator=(StreamDigest&& o) noexcept;
  StreamDigest(const StreamDigest&) = delete;
  StreamDigest& operator=(const StreamDigest&) = delete;

  void update(std::span<const std::byte> data) noexcept;
  // Finishes the hash: 64 hex digits. The object starts afresh after it.
  std::string hex();

 private:
  evp_md_ctx_st* ctx_ = nullptr;
};

}  // namespace xk::apps

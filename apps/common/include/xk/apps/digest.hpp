#pragma once
// SHA-256 of a byte stream, for checking end to end that it arrived intact
// (--verify in xk-ttcp and xk-tcp-perf). OpenSSL's libcrypto does the hashing:
// it uses the CPU's SHA extensions where there are some, and xkernel's
// portable Sha256 (kept for the framework, which takes no dependency) would
// cap a verified transfer far below the link (docs/BENCHMARKS.md, "Stream
// digests"). The digest is the same either way.
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

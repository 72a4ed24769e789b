// SHA-256 against FIPS 180-4's examples and Python's hashlib (an independent
// implementation: the expected digests below were printed by it).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "xk/sha256.hpp"

namespace xk {
namespace {

std::string sha_hex(const std::string& s) {
  return Sha256::hex(Sha256::of(std::as_bytes(std::span(s.data(), s.size()))));
}

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(sha_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, MillionAsInPiecesOfEverySize) {
  std::string a(1000000, 'a');
  Sha256 s;
  std::size_t off = 0, step = 1;
  while (off < a.size()) {
    std::size_t n = std::min(step, a.size() - off);
    s.update(std::as_bytes(std::span(a.data() + off, n)));
    off += n;
    step = step % 131 + 1;
  }
  EXPECT_EQ(Sha256::hex(s.digest()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  // Lengths around the 55/56/64-byte padding edges; digests from hashlib.
  const std::pair<std::size_t, const char*> cases[] = {
      {55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
      {56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
      {63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
      {64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
      {65, "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"},
      {119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
      {120, "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98"},
  };
  for (auto [n, want] : cases) EXPECT_EQ(sha_hex(std::string(n, 'x')), want) << n;
}

}  // namespace
}  // namespace xk

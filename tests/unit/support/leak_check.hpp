#pragma once
// A GoogleTest listener that fails any test after which more (or fewer) Msg
// buffers or Sessions are alive than before it. Installed by the shared main.

#include <gtest/gtest.h>

#include <cstdint>

namespace xk::test {

class LeakCheck : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& info) override;
  void OnTestEnd(const ::testing::TestInfo& info) override;

 private:
  std::int64_t bufs_ = 0;
  std::int64_t sessions_ = 0;
};

}  // namespace xk::test

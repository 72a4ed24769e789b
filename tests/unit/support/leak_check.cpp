#include "leak_check.hpp"

#include "xk/msg.hpp"
#include "xk/protocol.hpp"

namespace xk::test {

void LeakCheck::OnTestStart(const ::testing::TestInfo&) {
  bufs_ = Buf::live();
  sessions_ = Session::live();
}

void LeakCheck::OnTestEnd(const ::testing::TestInfo& info) {
  // Runs after the test body and its fixture's TearDown: everything the test
  // made must be gone. ADD_FAILURE here marks the test itself as failed.
  std::int64_t bufs = Buf::live() - bufs_;
  std::int64_t sessions = Session::live() - sessions_;
  if (bufs != 0) {
    ADD_FAILURE_AT(info.file(), info.line())
        << "leak check: " << bufs << " Msg buffer(s) outlived " << info.test_suite_name() << "."
        << info.name();
  }
  if (sessions != 0) {
    ADD_FAILURE_AT(info.file(), info.line())
        << "leak check: " << sessions << " Session(s) outlived " << info.test_suite_name() << "."
        << info.name();
  }
}

}  // namespace xk::test

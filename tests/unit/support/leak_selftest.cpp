// Proves the leak check can fail: each test here keeps something alive past
// its end on purpose. CTest runs this program and requires the leak-check
// failures in its output (see tests/CMakeLists.txt). The objects are released
// at exit, so LeakSanitizer has nothing to report.
#include <gtest/gtest.h>

#include <optional>

#include "xk/msg.hpp"
#include "xk/protocol.hpp"

namespace {

std::optional<xk::Msg> g_kept_msg;

class NullProtocol final : public xk::Protocol {
 public:
  NullProtocol() : Protocol("null0", "null") {}
};

class NullSession final : public xk::Session {
 public:
  explicit NullSession(xk::Protocol& p) : Session(p, nullptr) {}
  xk::Status push(xk::Msg) override { return {}; }
  xk::Status pop(xk::Session&, xk::Msg) override { return {}; }
};

NullProtocol g_proto;
xk::SessionRef g_kept_session;

TEST(LeakSelfTest, MsgOutlivingItsTestFails) { g_kept_msg = xk::Msg::alloc(10); }

TEST(LeakSelfTest, SessionOutlivingItsTestFails) {
  g_kept_session = xk::make_ref<NullSession>(g_proto);
}

TEST(LeakSelfTest, CleanTestPasses) { xk::Msg m = xk::Msg::alloc(10); }

}  // namespace

#include <gtest/gtest.h>

#include "leak_check.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The listeners list owns what it is given.
  ::testing::UnitTest::GetInstance()->listeners().Append(new xk::test::LeakCheck);
  return RUN_ALL_TESTS();
}

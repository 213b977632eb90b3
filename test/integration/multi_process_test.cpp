// The multi-process harness itself: a rank's exit status and both of its output streams
// reach the test, so a failing scenario is always explained.
#include "multi_process.hpp"

#include <gtest/gtest.h>

#include <cstdio>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

MIMATRIX_SCENARIO(fails_loudly) {
  std::printf("to stdout from rank %s\n", std::getenv("RANK"));
  std::fprintf(stderr, "to stderr from rank %s\n", std::getenv("RANK"));
  return std::getenv("RANK")[0] == '1' ? 3 : 0;
}

TEST(multi_process, a_rank_status_and_output_reach_the_test) {
  const auto r = test::run_ranks(2, "shm", "fails_loudly");
  EXPECT_EQ(r.exit_code, 3);
  ASSERT_EQ(r.status.size(), 2u);
  EXPECT_EQ(r.status[0], 0);
  EXPECT_EQ(r.status[1], 3);
  EXPECT_NE(r.output[1].find("to stdout from rank 1"), std::string::npos) << test::all_output(r);
  EXPECT_NE(r.output[1].find("to stderr from rank 1"), std::string::npos) << test::all_output(r);
}

TEST(multi_process, an_unknown_scenario_is_an_error) {
  const auto r = test::run_ranks(1, "shm", "no_such_scenario");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output[0].find("no scenario named 'no_such_scenario'"), std::string::npos) << test::all_output(r);
}

}  // namespace
}  // namespace mimatrix

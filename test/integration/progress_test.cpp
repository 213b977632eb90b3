// Progress across calls over libfabric (shm, tcp): calls waited in opposite orders on
// different ranks, 64 calls of mixed collectives in flight (GDRAA's one-sided calls among
// them) waited in reverse and random order, and a progress thread that finishes calls
// the caller never waits for. Each runs with progress by the caller and by a thread.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"
#include "support/progress_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

/// Prints "PASS <scenario>" when every check was exact.
int verdict(const char* scenario, int rank, int wrong) {
  if (wrong == 0) std::printf("PASS %s rank %d\n", scenario, rank);
  return wrong ? 1 : 0;
}

MIMATRIX_SCENARIO(opposite_orders) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(20));
  return verdict("opposite_orders", comm.rank(), test::opposite_wait_orders(comm));
}

MIMATRIX_SCENARIO(many_in_flight) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  return verdict("many_in_flight", comm.rank(), test::many_in_flight(comm, 64, 7));
}

MIMATRIX_SCENARIO(without_waiting) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(20));
  comm.set_progress(progress_mode::thread);
  return verdict("without_waiting", comm.rank(),
                 test::finishes_without_waiting(comm, std::chrono::seconds(15)) ? 0 : 1);
}

struct case_of {
  std::string provider;
  std::string progress;  // MIMATRIX_PROGRESS
};

class progress_over_fabric : public ::testing::TestWithParam<case_of> {
 protected:
  void expect_pass(int ranks, const std::string& scenario) const {
    const auto r = test::run_ranks(ranks, GetParam().provider, scenario, {{"MIMATRIX_PROGRESS", GetParam().progress}},
                                   std::chrono::seconds(90));
    ASSERT_FALSE(r.timed_out) << test::all_output(r);
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
    for (int rank = 0; rank < ranks; ++rank)
      EXPECT_NE(r.output[std::size_t(rank)].find("PASS " + scenario), std::string::npos) << test::all_output(r);
  }
};

TEST_P(progress_over_fabric, calls_waited_in_opposite_orders_complete) { expect_pass(2, "opposite_orders"); }

TEST_P(progress_over_fabric, sixty_four_calls_in_flight_are_exact_in_any_wait_order) {
  expect_pass(3, "many_in_flight");
}

std::vector<case_of> cases() {
  std::vector<case_of> all;
  for (const auto& provider : test::test_providers())
    for (const char* progress : {"caller", "thread"}) all.push_back({provider, progress});
  return all;
}

INSTANTIATE_TEST_SUITE_P(over, progress_over_fabric, ::testing::ValuesIn(cases()), [](const auto& info) {
  return test::provider_label(info.param.provider) + "_" + info.param.progress;
});

TEST(progress_thread_over_fabric, finishes_calls_nobody_waits_for) {
  for (const auto& provider : test::test_providers()) {
    const auto r = test::run_ranks(2, provider, "without_waiting", {}, std::chrono::seconds(60));
    ASSERT_FALSE(r.timed_out) << test::all_output(r);
    EXPECT_EQ(r.exit_code, 0) << provider << "\n" << test::all_output(r);
    for (int rank = 0; rank < 2; ++rank)
      EXPECT_NE(r.output[std::size_t(rank)].find("PASS without_waiting"), std::string::npos) << test::all_output(r);
  }
}

}  // namespace
}  // namespace mimatrix

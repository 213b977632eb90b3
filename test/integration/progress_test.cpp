// Progress across calls over libfabric (shm, tcp): calls waited in opposite orders on
// different ranks, 64 calls of mixed collectives in flight (GDRAA's one-sided calls among
// them) waited in reverse and random order, and a progress thread that finishes calls
// the caller never waits for. Each runs with progress by the caller and by a thread. A
// progress thread goes on while its caller waits on the store.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/collectives.hpp"
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

// Rank 0's caller waits on the store (a framework's own key, a split) while its call,
// driven by the progress thread, waits for rank 1, on another host. The call's stall check
// asked the store for lost peers under the engine's lock: it queued behind the caller's get,
// rank 0's progress stopped, rank 1's call could not end, and it never set the key.
MIMATRIX_SCENARIO(store_busy_while_a_call_waits) {
  using namespace std::chrono_literals;
  const auto id = bootstrap::identity_from_environment();
  const std::shared_ptr<bootstrap::store> store = bootstrap::open_store(id, 30s);
  communicator<fabric> comm(id, store);
  comm.set_timeout(10s);
  comm.set_progress(progress_mode::thread);
  collectives<fabric> coll(comm);
  const int r = comm.rank(), p = comm.size();
  std::vector<std::int64_t> data(200'000, r + 1);
  if (r == 0) {
    auto pending = coll.allreduce(data.data(), data.data(), data.size(), dtype::int64, reduce::op_kind::sum);
    store->get("test/rank 1 ended its call", 15s);
    pending.wait();
  } else {
    std::this_thread::sleep_for(500ms);  // rank 0's call stalls meanwhile
    coll.allreduce(data.data(), data.data(), data.size(), dtype::int64, reduce::op_kind::sum).wait();
    store->set("test/rank 1 ended its call", bootstrap::bytes_of("1"));
  }
  int wrong = 0;
  for (std::int64_t v : data) wrong += v != std::int64_t(p) * (p + 1) / 2;
  return verdict("store_busy_while_a_call_waits", r, wrong);
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

TEST(progress_thread_over_fabric, goes_on_while_the_caller_waits_on_the_store) {
  const auto r = test::run_ranks(2, "tcp;ofi_rxm", "store_busy_while_a_call_waits", {}, std::chrono::seconds(60),
                                 /*hosts=*/2);
  ASSERT_FALSE(r.timed_out) << test::all_output(r);
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find("PASS store_busy_while_a_call_waits"), std::string::npos)
        << test::all_output(r);
}

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

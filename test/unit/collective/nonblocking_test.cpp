// Non-blocking collectives: start() returns at once, test() and wait() drive them.
#include "mimatrix/allreduce.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allgather.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace {

using transport::inproc;
using sum_t = allreduce<inproc, topology::ring, reduce::sum<std::int64_t>>;

TEST(nonblocking, several_calls_in_flight_complete_in_any_wait_order) {
  const int p = 4;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    sum_t sum(comm);
    allgather<inproc, topology::ring, std::int64_t> gather(comm);
    std::vector<std::int64_t> a(1000, r), b(77, 10 * r), mine{r}, all(p);
    auto first = sum.start(a);
    auto second = sum.start(b);
    auto third = gather.start(mine, all);
    third.wait();
    second.wait();
    first.wait();
    for (auto x : a) ASSERT_EQ(x, 6);
    for (auto x : b) ASSERT_EQ(x, 60);
    for (int j = 0; j < p; ++j) ASSERT_EQ(all[j], j);
  });
}

TEST(nonblocking, polling_test_until_done_gives_the_result) {
  const int p = 3;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    sum_t sum(comm);
    std::vector<std::int64_t> v(100000, r + 1);
    auto pending = sum.start(v);
    while (!pending.test()) {
    }
    EXPECT_FALSE(pending.valid());
    for (auto x : v) ASSERT_EQ(x, 6);
  });
}

// README: a request is not fire-and-forget; one destroyed unwaited, `(void)start()`
// included, waits for its call.
TEST(nonblocking, a_request_going_out_of_scope_or_discarded_finishes_first) {
  const int p = 2;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    sum_t sum(comm);
    std::vector<std::int64_t> v(5000, r + 1);
    { auto pending = sum.start(v); }
    for (auto x : v) ASSERT_EQ(x, 3);
    (void)sum.start(v);
    for (auto x : v) ASSERT_EQ(x, 6);
  });
}

// Issue 11 item 2: a request dropped unfinished swallowed its call's error.
TEST(nonblocking, a_dropped_request_whose_call_fails_says_so_on_stderr) {
  ::testing::internal::CaptureStderr();
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(std::chrono::milliseconds(100));
    sum_t sum(comm);
    std::vector<std::int64_t> v(10, 1);
    if (r == 0) (void)sum.start(v);  // rank 1 never calls: it times out, and nobody waits
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("mimatrix WARN a request dropped without wait() failed: "), std::string::npos) << err;
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
}

}  // namespace
}  // namespace mimatrix

// Non-blocking collectives: start() returns at once, test() and wait() drive them.
#include "mimatrix/allreduce.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <system_error>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allgather.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

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

// Found by a black-box test: a second wait() or test() of a failed request returned as
// if the call had succeeded; a caller that waits twice (a retry loop, a cleanup) read a
// failed call as done.
TEST(nonblocking, a_failed_request_reports_its_error_at_every_later_wait_and_test) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(std::chrono::milliseconds(100));
    sum_t sum(comm);
    std::vector<std::int64_t> v(r == 0 ? 11 : 10, 1);  // the counts disagree: both fail
    auto pending = sum.start(v);
    std::string first;
    try {
      pending.wait();
      ADD_FAILURE() << "rank " << r << ": the call succeeded";
    } catch (const error& e) {
      first = e.what();
    }
    EXPECT_FALSE(pending.valid());
    for (int again = 0; again < 2; ++again) {
      try {
        pending.wait();
        ADD_FAILURE() << "rank " << r << ": a later wait() succeeded";
      } catch (const error& e) {
        EXPECT_EQ(std::string(e.what()), first);
      }
      EXPECT_THROW((void)pending.test(), error);
      std::error_code ec;
      pending.wait(ec);
      EXPECT_TRUE(ec) << "rank " << r;
    }
    request moved = std::move(pending);  // the error goes with the request
    EXPECT_THROW(moved.wait(), error);
    // A request that succeeded waits again at no cost and without error.
    std::vector<std::int64_t> ok(10, 1);
    auto fine = sum.start(ok);
    fine.wait();
    EXPECT_NO_THROW(fine.wait());
  });
}

}  // namespace
}  // namespace mimatrix

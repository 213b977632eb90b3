// Non-blocking collectives: start() returns at once, test() and wait() drive them.
#include "mimatrix/allreduce.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mimatrix

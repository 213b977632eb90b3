// Progress across calls (transport/progress.hpp) over inproc: any wait advances every call
// in flight, a call joins at start(), and a progress thread finishes calls nobody waits for.
#include "mimatrix/transport/progress.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "mimatrix/transport/inproc.hpp"
#include "support/progress_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using transport::inproc;

/// `body(comm)` on `p` ranks whose communicators have a short deadline (a regression
/// fails in seconds, not minutes) and progress by `mode`.
void on_ranks(int p, progress_mode mode, auto body) {
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(10s);
    comm.set_progress(mode);
    body(comm);
  });
}

class progress : public ::testing::TestWithParam<progress_mode> {
 protected:
  static void run(int p, auto body) { on_ranks(p, GetParam(), body); }
};

TEST_P(progress, calls_waited_in_opposite_orders_on_two_ranks_complete) {
  for (int p : {2, 3})
    run(p, [](communicator<inproc>& comm) { EXPECT_EQ(test::opposite_wait_orders(comm), 0); });
}

TEST_P(progress, sixty_four_calls_in_flight_waited_in_reverse_and_random_order_are_exact) {
  for (int p : {2, 3, 4})
    run(p, [p](communicator<inproc>& comm) { EXPECT_EQ(test::many_in_flight(comm, 64, std::uint64_t(p)), 0); });
}

INSTANTIATE_TEST_SUITE_P(by, progress, ::testing::Values(progress_mode::caller, progress_mode::thread),
                         [](const auto& info) { return info.param == progress_mode::thread ? "thread" : "caller"; });

TEST(progress_thread, finishes_calls_the_caller_never_waits_for) {
  on_ranks(3, progress_mode::thread, [](communicator<inproc>& comm) {
    EXPECT_TRUE(test::finishes_without_waiting(comm, 8s)) << "rank " << comm.rank();
  });
}

TEST(progress_thread, can_be_switched_off_with_calls_in_flight) {
  transport::run_inproc(2, [](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_progress(progress_mode::thread);
    allreduce<inproc, topology::ring, reduce::sum<std::int64_t>> sum(comm);
    std::vector<std::int64_t> v(50000, r + 1);
    auto pending = sum.start(v);
    comm.set_progress(progress_mode::caller);
    EXPECT_EQ(comm.transport().progress().mode(), progress_mode::caller);
    pending.wait();
    EXPECT_EQ(v[49999], 3);
  });
}

TEST(progress, a_call_joins_at_start_so_a_peer_waiting_first_sees_it) {
  // Rank 1 waits for its second call before its first: rank 0 must see rank 1 in call #0
  // (joined at start), not report it missing.
  on_ranks(2, progress_mode::caller, [](communicator<inproc>& comm) {
    const int r = comm.rank();
    allreduce<inproc, topology::ring, reduce::sum<std::int64_t>> sum(comm);
    std::vector<std::int64_t> a(10, r), b(10, 2 * r);
    auto first = sum.start(a);
    auto second = sum.start(b);
    if (r == 1) second.wait();
    first.wait();
    second.wait();
    EXPECT_EQ(a[0], 1);
    EXPECT_EQ(b[0], 2);
  });
}

TEST(progress, calls_started_in_different_orders_fail_with_mismatch) {
  on_ranks(2, progress_mode::caller, [](communicator<inproc>& comm) {
    const int r = comm.rank();
    allreduce<inproc, topology::ring, reduce::sum<std::int64_t>> sum(comm);
    allgather<inproc, topology::ring, std::int64_t> gather(comm);
    std::vector<std::int64_t> v(4, r), mine(4, r), all(8);
    std::vector<request> pending;
    if (r == 0) {
      pending.push_back(sum.start(v));
      pending.push_back(gather.start(mine, all));
    } else {
      pending.push_back(gather.start(mine, all));
      pending.push_back(sum.start(v));
    }
    for (auto& call : pending) {
      std::error_code ec;
      call.wait(ec);
      EXPECT_EQ(ec, errc::mismatch) << "rank " << r;
    }
  });
}

}  // namespace
}  // namespace mimatrix

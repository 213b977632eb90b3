// GDRAA's one-sided writes as real RMA writes with remote CQ data (fi_writedata) into
// the peers' registered windows, across processes over shm and tcp;ofi_rxm: which calls
// take the RMA path, exact results over many back-to-back calls (the window's halves
// alternate), calls that do not fit the window, and the fall-back to messages after a
// failure.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/allgather.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/broadcast.hpp"
#include "mimatrix/reduce_scatter.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;
using sum_t = allreduce<fabric, topology::mesh, reduce::sum<std::int64_t>, algorithm::gdraa>;

/// Rank r's element i of call k: distinct in every call, so a write that lands in the
/// wrong call's memory shows.
std::int64_t value(int r, std::size_t i, int k) { return std::int64_t(i % 1000) * 7 + r * 1000003 + k * 31; }

/// Allreduces `calls` times over `n` elements (in place on odd calls) and counts the
/// elements that differ from the exact sum.
int allreduce_calls(communicator<fabric>& comm, sum_t& sum, std::size_t n, int calls) {
  const int p = comm.size();
  int wrong = 0;
  std::vector<std::int64_t> in(n), out(n);
  for (int k = 0; k < calls; ++k) {
    for (std::size_t i = 0; i < n; ++i) in[i] = value(comm.rank(), i, k);
    std::vector<std::int64_t>& result = k % 2 ? in : out;
    if (k % 2)
      sum(in);
    else
      sum(in, out);
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t want = 0;
      for (int r = 0; r < p; ++r) want += value(r, i, k);
      if (result[i] != want && wrong++ == 0)
        std::fprintf(stderr, "rank %d: call %d count %zu element %zu is %lld, expected %lld\n", comm.rank(), k, n, i,
                     static_cast<long long>(result[i]), static_cast<long long>(want));
    }
  }
  return wrong;
}

int check(bool ok, const communicator<fabric>& comm, const char* what) {
  if (!ok) std::fprintf(stderr, "rank %d: %s\n", comm.rank(), what);
  return ok ? 0 : 1;
}

MIMATRIX_SCENARIO(rma_path) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  const int p = comm.size();
  int failures = check(comm.transport().window_bytes() > 0, comm, "no RMA window");
  sum_t sum(comm);

  // Allreduce: every call of these sizes runs over RMA, halves alternating.
  std::size_t before = comm.transport().one_sided_calls();
  failures += allreduce_calls(comm, sum, 1, 40) + allreduce_calls(comm, sum, 1000, 40) +
              allreduce_calls(comm, sum, 300001, 6);
  failures += check(comm.transport().one_sided_calls() - before == 86, comm, "allreduce did not run 86 calls over RMA");

  // Reduce-scatter and allgather over RMA too; broadcast runs as messages (its root may
  // run ahead of the others, so it never writes into a window).
  constexpr std::size_t n = 777;
  before = comm.transport().one_sided_calls();
  reduce_scatter<fabric, topology::mesh, reduce::sum<std::int64_t>, algorithm::gdraa> scatter(comm);
  std::vector<std::int64_t> in(n * std::size_t(p)), block(n);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(comm.rank(), i, 0);
  scatter(in, block);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t want = 0;
    for (int r = 0; r < p; ++r) want += value(r, std::size_t(comm.rank()) * n + i, 0);
    if (block[i] != want) failures += check(false, comm, "reduce_scatter is wrong");
  }
  allgather<fabric, topology::mesh, std::int64_t, algorithm::gdraa> gather(comm);
  std::vector<std::int64_t> all(n * std::size_t(p));
  gather(block, all);
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::int64_t want = 0;
    for (int r = 0; r < p; ++r) want += value(r, i, 0);
    if (all[i] != want) failures += check(false, comm, "allgather is wrong");
  }
  // Back to back: a rank done with call k may write call k+1 into a peer still in call
  // k, which the window's alternating halves keep apart.
  for (int k = 1; k <= 60; ++k) {
    std::vector<std::int64_t> mine(64);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = value(comm.rank(), i, k);
    std::vector<std::int64_t> got(mine.size() * std::size_t(p));
    gather(mine, got);
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i] != value(int(i / mine.size()), i % mine.size(), k)) {
        failures += check(false, comm, ("allgather call " + std::to_string(k) + " is wrong").c_str());
        break;
      }
  }
  broadcast<fabric, topology::mesh, std::int64_t, algorithm::gdraa> bcast(comm);
  std::vector<std::int64_t> data(n, comm.rank() == 1 ? 42 : 0);
  bcast(data, 1);
  for (auto v : data) failures += v == 42 ? 0 : check(false, comm, "broadcast is wrong");
  failures += check(comm.transport().one_sided_calls() - before == 62, comm,
                    "reduce_scatter and allgather should run over RMA, broadcast as messages");
  if (failures == 0) std::printf("rank %d: rma exact\n", comm.rank());
  return failures ? 1 : 0;
}

/// MIMATRIX_WINDOW_BYTES is 64 KiB here: small calls fit, large ones run as messages.
MIMATRIX_SCENARIO(small_window) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  sum_t sum(comm);
  int failures = check(comm.transport().window_bytes() == 64 * 1024, comm, "the window is not 64 KiB");
  std::size_t before = comm.transport().one_sided_calls();
  failures += allreduce_calls(comm, sum, 1000, 4);  // 8 KB output + slots: fits
  failures += check(comm.transport().one_sided_calls() - before == 4, comm, "1000 elements should fit the window");
  before = comm.transport().one_sided_calls();
  failures += allreduce_calls(comm, sum, 100000, 4);  // 800 KB: lowered to messages
  failures += check(comm.transport().one_sided_calls() == before, comm, "800 KB should not fit the window");
  failures += allreduce_calls(comm, sum, 1000, 4);  // and back to RMA, alternating halves
  failures += check(comm.transport().one_sided_calls() - before == 4, comm, "1000 elements should fit again");
  if (failures == 0) std::printf("rank %d: small window exact\n", comm.rank());
  return failures ? 1 : 0;
}

/// MIMATRIX_WINDOW_BYTES=0: no window, every one-sided step runs as a message.
MIMATRIX_SCENARIO(no_window) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  sum_t sum(comm);
  int failures = check(comm.transport().window_bytes() == 0, comm, "a window exists");
  failures += allreduce_calls(comm, sum, 1000, 4) + allreduce_calls(comm, sum, 65537, 2);
  failures += check(comm.transport().one_sided_calls() == 0, comm, "a call ran over RMA without a window");
  if (failures == 0) std::printf("rank %d: no window exact\n", comm.rank());
  return failures ? 1 : 0;
}

/// After a failed call (a bad argument on rank 0) a late write of it could still land,
/// so every rank stops writing into windows, and later calls are exact as messages.
MIMATRIX_SCENARIO(after_a_failure) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  sum_t sum(comm);
  int failures = allreduce_calls(comm, sum, 1000, 2);
  const std::size_t rma = comm.transport().one_sided_calls();
  failures += check(rma == 2, comm, "the first calls should run over RMA");
  std::vector<std::int64_t> in(1000, 1), out(comm.rank() == 0 ? 999 : 1000);
  try {
    sum(in, out);
    failures += check(false, comm, "the bad call succeeded");
  } catch (const error& e) {
    failures += check(e.code() == errc::invalid_argument, comm, e.what());
  }
  const std::size_t after = comm.transport().one_sided_calls();  // the failed call may count
  failures += allreduce_calls(comm, sum, 1000, 4);
  failures += check(comm.transport().one_sided_calls() == after, comm, "RMA was used after a failure");
  if (failures == 0) std::printf("rank %d: messages after the failure exact\n", comm.rank());
  return failures ? 1 : 0;
}

class one_sided : public ::testing::TestWithParam<std::string> {};

void expect_every_rank_says(const bootstrap::launch_result& r, int ranks, const std::string& line) {
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find(line), std::string::npos) << test::all_output(r);
}

TEST_P(one_sided, gdraa_writes_over_rma_and_is_exact_call_after_call) {
  for (int ranks : {2, 3, 5}) expect_every_rank_says(test::run_ranks(ranks, GetParam(), "rma_path"), ranks, "rma exact");
}

TEST_P(one_sided, calls_that_do_not_fit_the_window_run_as_messages) {
  expect_every_rank_says(test::run_ranks(3, GetParam(), "small_window", {{"MIMATRIX_WINDOW_BYTES", "65536"}}), 3,
                         "small window exact");
}

TEST_P(one_sided, without_a_window_every_call_runs_as_messages) {
  expect_every_rank_says(test::run_ranks(3, GetParam(), "no_window", {{"MIMATRIX_WINDOW_BYTES", "0"}}), 3,
                         "no window exact");
}

TEST_P(one_sided, a_failure_ends_rma_on_every_rank) {
  // Over libfabric 1.17's shm, a call after a failed one sometimes loses a message and
  // times out (with messages alone too, so not the window's doing): see
  // docs/transports.md. The RMA fall-back itself is provider-independent.
  if (GetParam() == "shm") GTEST_SKIP() << "shm: the call after a failed one may time out (docs/transports.md)";
  expect_every_rank_says(test::run_ranks(3, GetParam(), "after_a_failure"), 3, "messages after the failure exact");
}

INSTANTIATE_TEST_SUITE_P(over, one_sided, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix

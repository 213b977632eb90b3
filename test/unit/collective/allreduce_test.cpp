#include "mimatrix/allreduce.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace {

using transport::inproc;

// Tiny chunks: many steps of every rank in flight at once, the pipelined path.
TEST(allreduce, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 3, 5, 8})
    for (std::size_t n : {std::size_t(1), std::size_t(17), std::size_t(4099)}) {
      test::check_allreduce<reduce::sum<std::int32_t>>(p, n, test::run_seed(), topology::ring{},
                                                       algorithm::ring(algorithm::policy{8}));
      test::check_allreduce<reduce::sum<float>>(p, n, test::run_seed(), topology::ring{},
                                                algorithm::ring(algorithm::policy{12}));
    }
}

TEST(allreduce, ring_order_permutation_gives_the_same_sums) {
  test::check_allreduce<reduce::sum<std::int64_t>>(5, 1234, test::run_seed(), topology::ring({3, 0, 4, 1, 2}),
                                                   algorithm::ring{});
  test::check_allreduce<reduce::avg<float>>(5, 1234, test::run_seed(), topology::ring({4, 3, 2, 1, 0}),
                                            algorithm::ring{});
}

TEST(allreduce, repeated_calls_reuse_cached_schedules_and_stay_correct) {
  const int p = 4;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>> sum(comm);
    for (int iteration = 0; iteration < 50; ++iteration) {
      std::vector<std::int32_t> v(100 + iteration % 3, r + iteration);
      sum(v);
      for (auto x : v) ASSERT_EQ(x, p * iteration + p * (p - 1) / 2) << "rank " << r << " iteration " << iteration;
    }
  });
}

}  // namespace
}  // namespace mimatrix

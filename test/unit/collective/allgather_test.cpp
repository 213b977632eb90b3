#include "mimatrix/allgather.hpp"

#include <gtest/gtest.h>

#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace {

class allgather_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(allgather_grid, every_count_gathers_every_block) {
  const auto [p, type] = GetParam();
  test::allgather_grid(p, type, topology::ring{}, algorithm::ring{}, test::extent::full);
}

INSTANTIATE_TEST_SUITE_P(ring, allgather_grid, test::grid_params(), test::grid_param_name);

TEST(allgather, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 5})
    for (std::size_t n : {std::size_t(3), std::size_t(1001)})
      test::check_allgather<std::int32_t>(p, n, test::run_seed(), topology::ring{}, algorithm::ring(algorithm::policy{8}));
}

}  // namespace
}  // namespace mimatrix

#include "mimatrix/reduce_scatter.hpp"

#include <gtest/gtest.h>

#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace {

class reduce_scatter_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(reduce_scatter_grid, every_operation_and_count_matches_the_reference) {
  const auto [p, type] = GetParam();
  test::reduce_scatter_grid(p, type, topology::ring{}, algorithm::ring{}, test::extent::full);
}

INSTANTIATE_TEST_SUITE_P(ring, reduce_scatter_grid, test::grid_params(), test::grid_param_name);

TEST(reduce_scatter, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 3, 6})
    for (std::size_t n : {std::size_t(1), std::size_t(33), std::size_t(1000)})
      test::check_reduce_scatter<reduce::sum<std::int64_t>>(p, n, test::run_seed(), topology::ring{},
                                                            algorithm::ring(algorithm::policy{16}));
}

}  // namespace
}  // namespace mimatrix

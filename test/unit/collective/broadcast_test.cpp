#include "mimatrix/broadcast.hpp"

#include <gtest/gtest.h>

#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace {

class broadcast_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(broadcast_grid, every_count_and_root_reaches_every_rank) {
  const auto [p, type] = GetParam();
  test::broadcast_grid(p, type, topology::ring{}, algorithm::ring{}, test::extent::full);
}

INSTANTIATE_TEST_SUITE_P(ring, broadcast_grid, test::grid_params(), test::grid_param_name);

TEST(broadcast, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 4, 7})
    test::check_broadcast<std::int64_t>(p, 999, p - 1, test::run_seed(), topology::ring{},
                                        algorithm::ring(algorithm::policy{8}));
}

}  // namespace
}  // namespace mimatrix

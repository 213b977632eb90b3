#include "mimatrix/algorithm/halving_doubling.hpp"

#include <gtest/gtest.h>

#include "mimatrix/topology/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

// The numeric grid (world sizes × dtypes × counts × operations) for algorithm::halving_doubling,
// every collective, in place and out of place, over the in-process transport.
class halving_doubling_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(halving_doubling_grid, allreduce) {
  const auto [p, type] = GetParam();
  test::allreduce_grid(p, type, topology::ring{}, algorithm::halving_doubling{});
}

TEST_P(halving_doubling_grid, reduce_scatter) {
  const auto [p, type] = GetParam();
  test::reduce_scatter_grid(p, type, topology::ring{}, algorithm::halving_doubling{});
}

TEST_P(halving_doubling_grid, allgather) {
  const auto [p, type] = GetParam();
  test::allgather_grid(p, type, topology::ring{}, algorithm::halving_doubling{});
}

TEST_P(halving_doubling_grid, broadcast) {
  const auto [p, type] = GetParam();
  test::broadcast_grid(p, type, topology::ring{}, algorithm::halving_doubling{});
}

INSTANTIATE_TEST_SUITE_P(halving_doubling, halving_doubling_grid, test::grid_params(test::grid_extent::spread), test::grid_param_name);

}  // namespace
}  // namespace mimatrix

#include "mimatrix/algorithm/hdrm.hpp"

#include <gtest/gtest.h>

#include "mimatrix/topology/bigraph.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

// The numeric grid (world sizes × dtypes × counts × operations) for algorithm::hdrm,
// every collective, in place and out of place, over the in-process transport.
class hdrm_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(hdrm_grid, allreduce) {
  const auto [p, type] = GetParam();
  test::allreduce_grid(p, type, topology::bigraph{}, algorithm::hdrm{});
}

TEST_P(hdrm_grid, reduce_scatter) {
  const auto [p, type] = GetParam();
  test::reduce_scatter_grid(p, type, topology::bigraph{}, algorithm::hdrm{});
}

TEST_P(hdrm_grid, allgather) {
  const auto [p, type] = GetParam();
  test::allgather_grid(p, type, topology::bigraph{}, algorithm::hdrm{});
}

TEST_P(hdrm_grid, broadcast) {
  const auto [p, type] = GetParam();
  test::broadcast_grid(p, type, topology::bigraph{}, algorithm::hdrm{});
}

INSTANTIATE_TEST_SUITE_P(hdrm, hdrm_grid, test::grid_params(test::grid_extent::spread), test::grid_param_name);

}  // namespace
}  // namespace mimatrix

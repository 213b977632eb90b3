// The numeric grid for the hierarchical algorithm: every collective, operation, dtype and
// count on the in-process transport, with nodes of a size that divides each world size.
#include "mimatrix/algorithm/hierarchical.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/topology/hierarchical.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using topo = topology::hierarchical<topology::ring, topology::ring>;
using algo = algorithm::default_for<topo>;  // hierarchical<ring, ring>

class hierarchical_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(hierarchical_grid, allreduce) {
  const auto [p, type] = GetParam();
  test::allreduce_grid(p, type, topo(test::hierarchical_node_size(p)), algo{});
}
TEST_P(hierarchical_grid, reduce_scatter) {
  const auto [p, type] = GetParam();
  test::reduce_scatter_grid(p, type, topo(test::hierarchical_node_size(p)), algo{});
}
TEST_P(hierarchical_grid, allgather) {
  const auto [p, type] = GetParam();
  test::allgather_grid(p, type, topo(test::hierarchical_node_size(p)), algo{});
}
TEST_P(hierarchical_grid, broadcast) {
  const auto [p, type] = GetParam();
  test::broadcast_grid(p, type, topo(test::hierarchical_node_size(p)), algo{});
}

INSTANTIATE_TEST_SUITE_P(hierarchical, hierarchical_grid, test::grid_params(test::grid_extent::spread), test::grid_param_name);

}  // namespace
}  // namespace mimatrix

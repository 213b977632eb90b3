// The numeric grid for GDRAA on a mesh over the in-process transport: every collective,
// every dtype and operation, a spread of world sizes up to 16, counts around p, in and
// out of place.
#include "mimatrix/algorithm/gdraa.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::inproc;

class gdraa_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(gdraa_grid, allreduce) {
  const auto [p, type] = GetParam();
  test::allreduce_grid(p, type, topology::mesh{}, algorithm::gdraa{});
}
TEST_P(gdraa_grid, reduce_scatter) {
  const auto [p, type] = GetParam();
  test::reduce_scatter_grid(p, type, topology::mesh{}, algorithm::gdraa{});
}
TEST_P(gdraa_grid, allgather) {
  const auto [p, type] = GetParam();
  test::allgather_grid(p, type, topology::mesh{}, algorithm::gdraa{});
}
TEST_P(gdraa_grid, broadcast) {
  const auto [p, type] = GetParam();
  test::broadcast_grid(p, type, topology::mesh{}, algorithm::gdraa{});
}

INSTANTIATE_TEST_SUITE_P(mesh, gdraa_grid, test::grid_params(test::grid_extent::spread), test::grid_param_name);

}  // namespace
}  // namespace mimatrix

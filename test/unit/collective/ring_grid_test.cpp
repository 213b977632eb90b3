// The numeric grid for the ring (long tier): every collective, world size 1 to 16, dtype,
// operation and count, the largest at 2^20 elements, in place and out of place, over the
// in-process transport. The quick tier runs pairwise_test.cpp's covering design instead.
#include "mimatrix/algorithm/ring.hpp"

#include <gtest/gtest.h>

#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

class ring_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(ring_grid, allreduce) {
  const auto [p, type] = GetParam();
  test::allreduce_grid(p, type, topology::ring{}, algorithm::ring{}, test::extent::full);
}
TEST_P(ring_grid, reduce_scatter) {
  const auto [p, type] = GetParam();
  test::reduce_scatter_grid(p, type, topology::ring{}, algorithm::ring{}, test::extent::full);
}
TEST_P(ring_grid, allgather) {
  const auto [p, type] = GetParam();
  test::allgather_grid(p, type, topology::ring{}, algorithm::ring{}, test::extent::full);
}
TEST_P(ring_grid, broadcast) {
  const auto [p, type] = GetParam();
  test::broadcast_grid(p, type, topology::ring{}, algorithm::ring{}, test::extent::full);
}

INSTANTIATE_TEST_SUITE_P(ring, ring_grid, test::grid_params(), test::grid_param_name);

}  // namespace
}  // namespace mimatrix

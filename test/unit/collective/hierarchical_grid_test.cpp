// The numeric grid for the hierarchical algorithm: every collective, operation, dtype and
// count on the in-process transport, with nodes of a size that divides each world size.
#include "mimatrix/algorithm/hierarchical.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/topology/hierarchical.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace {

using topo = topology::hierarchical<topology::ring, topology::ring>;
using algo = algorithm::default_for<topo>;  // hierarchical<ring, ring>

/// Nodes of 2 for even groups, of 3 for odd multiples of 3; other odd groups alternate
/// between one node of all ranks and one rank a node, so both degenerate shapes run.
int node_size_for(int p) {
  if (p % 2 == 0) return 2;
  if (p % 3 == 0) return 3;
  return p % 4 == 1 ? p : 1;
}

class hierarchical_grid : public ::testing::TestWithParam<test::grid_param> {};

TEST_P(hierarchical_grid, allreduce) {
  const auto [p, type] = GetParam();
  test::allreduce_grid(p, type, topo(node_size_for(p)), algo{});
}
TEST_P(hierarchical_grid, reduce_scatter) {
  const auto [p, type] = GetParam();
  test::reduce_scatter_grid(p, type, topo(node_size_for(p)), algo{});
}
TEST_P(hierarchical_grid, allgather) {
  const auto [p, type] = GetParam();
  test::allgather_grid(p, type, topo(node_size_for(p)), algo{});
}
TEST_P(hierarchical_grid, broadcast) {
  const auto [p, type] = GetParam();
  test::broadcast_grid(p, type, topo(node_size_for(p)), algo{});
}

INSTANTIATE_TEST_SUITE_P(hierarchical, hierarchical_grid, test::grid_params(test::grid_extent::spread), test::grid_param_name);

// Nodes from host names, ranks scattered over them, and more than two ranks a node.
TEST(hierarchical_collectives, nodes_from_host_names) {
  const topo hosts(std::vector<std::string>{"b", "a", "c", "a", "b", "c", "c", "a", "b", "a", "b", "c"});
  for (std::size_t n : {std::size_t(1), std::size_t(5), std::size_t(12), std::size_t(1001)}) {
    test::check_allreduce<reduce::sum<std::int32_t>>(12, n, test::run_seed() + n, hosts, algo{});
    test::check_allreduce<reduce::avg<float>>(12, n, test::run_seed() + n, hosts, algo{});
    test::check_reduce_scatter<reduce::sum<std::int64_t>>(12, n, test::run_seed() + n, hosts, algo{});
    test::check_allgather<std::uint8_t>(12, n, test::run_seed() + n, hosts, algo{});
    test::check_broadcast<double>(12, n, 7, test::run_seed() + n, hosts, algo{});
  }
}

// The composed type users name: the default algorithm of a hierarchical topology.
TEST(hierarchical_collectives, the_default_algorithm_of_the_topology_is_used) {
  const int p = 8;
  transport::run_inproc(p, [&](int r, transport::inproc::world& w) {
    communicator<transport::inproc> comm(w, r);
    allreduce<transport::inproc, topo, reduce::sum<std::int32_t>> sum(comm, topo(4));
    std::vector<std::int32_t> v(37, r);
    sum(v);
    for (auto x : v) ASSERT_EQ(x, p * (p - 1) / 2) << "rank " << r;
  });
}

}  // namespace
}  // namespace mimatrix

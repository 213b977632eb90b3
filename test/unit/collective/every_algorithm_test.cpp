// Every algorithm on the in-process transport, every collective, a few counts and types:
// small enough to build and run under the sanitizers, where the full per-algorithm grids
// (*_grid_test.cpp) are left out to keep CI's time.
#include <gtest/gtest.h>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace {

template <class Topology, class Algorithm, class MakeTopology>
void check_every_collective(MakeTopology make, const Algorithm& algo) {
  for (int p : {1, 2, 3, 5, 8})
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000)}) {
      SCOPED_TRACE("p " + std::to_string(p) + " count " + std::to_string(n));
      const Topology topo = make(p);
      const std::uint64_t seed = test::run_seed() + 31 * n + p;
      test::check_allreduce<reduce::sum<std::int32_t>>(p, n, seed, topo, algo);
      test::check_allreduce<reduce::avg<float>>(p, n, seed + 1, topo, algo);
      test::check_allreduce<reduce::max<half>>(p, n, seed + 2, topo, algo);
      test::check_reduce_scatter<reduce::sum<std::int64_t>>(p, n, seed + 3, topo, algo);
      test::check_allgather<bfloat16>(p, n, seed + 4, topo, algo);
      test::check_broadcast<std::int8_t>(p, n, p - 1, seed + 5, topo, algo);
      if (::testing::Test::HasFailure()) return;
    }
}

const auto ring_of = [](int) { return topology::ring{}; };

TEST(every_algorithm, recursive_doubling) {
  check_every_collective<topology::ring>(ring_of, algorithm::recursive_doubling{});
}
TEST(every_algorithm, halving_doubling) {
  check_every_collective<topology::ring>(ring_of, algorithm::halving_doubling{});
}
TEST(every_algorithm, hdrm_on_bigraph) {
  check_every_collective<topology::bigraph>([](int) { return topology::bigraph{}; }, algorithm::hdrm{});
}
TEST(every_algorithm, gdraa_on_mesh) {
  check_every_collective<topology::mesh>([](int) { return topology::mesh{}; }, algorithm::gdraa{});
}
TEST(every_algorithm, hierarchical_on_nodes_of_two) {
  using topo = topology::hierarchical<topology::ring, topology::ring>;
  check_every_collective<topo>([](int p) { return topo(p % 2 ? 1 : 2); }, algorithm::default_for<topo>{});
}
TEST(every_algorithm, automatic_on_a_ring_a_mesh_and_a_bigraph) {
  check_every_collective<topology::ring>(ring_of, algorithm::automatic{});
  check_every_collective<topology::mesh>([](int) { return topology::mesh{}; }, algorithm::automatic{});
  check_every_collective<topology::bigraph>([](int) { return topology::bigraph{}; }, algorithm::automatic{});
}

// The composed types users name pick the topology's own algorithm.
static_assert(std::is_same_v<algorithm::default_for<topology::bigraph>, algorithm::hdrm>);
static_assert(std::is_same_v<algorithm::default_for<topology::mesh>, algorithm::gdraa>);
static_assert(std::is_same_v<algorithm::default_for<topology::ring>, algorithm::ring>);

}  // namespace
}  // namespace mimatrix

// Every algorithm on the in-process transport, every collective, a few counts and types.
// A sanitizer build of the quick tier keeps one algorithm of each execution path: GDRAA
// (one-sided writes) and hierarchical (two-sided messages, ring phases, composed
// schedules); the others run under the sanitizers in the long tier.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

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

#ifndef MIMATRIX_TEST_SANITIZER_SUBSET
TEST(every_algorithm, recursive_doubling) {
  check_every_collective<topology::ring>(ring_of, algorithm::recursive_doubling{});
}
TEST(every_algorithm, halving_doubling) {
  check_every_collective<topology::ring>(ring_of, algorithm::halving_doubling{});
}
TEST(every_algorithm, hdrm_on_bigraph) {
  check_every_collective<topology::bigraph>([](int) { return topology::bigraph{}; }, algorithm::hdrm{});
}
#endif
TEST(every_algorithm, gdraa_on_mesh) {
  check_every_collective<topology::mesh>([](int) { return topology::mesh{}; }, algorithm::gdraa{});
}
TEST(every_algorithm, hierarchical_on_nodes_of_two) {
  using topo = topology::hierarchical<topology::ring, topology::ring>;
  check_every_collective<topo>([](int p) { return topo(p % 2 ? 1 : 2); }, algorithm::default_for<topo>{});
}
#ifndef MIMATRIX_TEST_SANITIZER_SUBSET
TEST(every_algorithm, automatic_on_a_ring_a_mesh_and_a_bigraph) {
  check_every_collective<topology::ring>(ring_of, algorithm::automatic{});
  check_every_collective<topology::mesh>([](int) { return topology::mesh{}; }, algorithm::automatic{});
  check_every_collective<topology::bigraph>([](int) { return topology::bigraph{}; }, algorithm::automatic{});
}
#endif

using hierarchical_nodes = topology::hierarchical<topology::ring, topology::ring>;
using hierarchical_algorithm = algorithm::default_for<hierarchical_nodes>;

// Flags carry the call's sequence number: back-to-back calls, where a fast rank's
// writes for call k+1 arrive while a slow peer still runs call k, never mix.
TEST(gdraa, repeated_calls_on_the_default_algorithm_stay_correct) {
  const int p = 5;
  transport::run_inproc(p, [&](int r, transport::inproc::world& w) {
    communicator<transport::inproc> comm(w, r);
    allreduce<transport::inproc, topology::mesh, reduce::sum<std::int32_t>> sum(comm);
    for (int iteration = 0; iteration < 100; ++iteration) {
      std::vector<std::int32_t> v(7 + iteration % 5, r + iteration);
      sum(v);
      for (auto x : v) ASSERT_EQ(x, p * iteration + p * (p - 1) / 2) << "rank " << r << " iteration " << iteration;
    }
  });
}

#ifndef MIMATRIX_TEST_SANITIZER_SUBSET
// allreduce<inproc, bigraph, sum<float>> picks HDRM; explicit shapes work too.
TEST(hdrm, is_what_allreduce_on_bigraph_uses) {
  const int p = 8;
  transport::run_inproc(p, [&](int r, transport::inproc::world& w) {
    communicator<transport::inproc> comm(w, r);
    allreduce<transport::inproc, topology::bigraph, reduce::sum<std::int32_t>> sum(comm, topology::bigraph(4, 2));
    std::vector<std::int32_t> v(37, r);
    sum(v);
    for (auto x : v) ASSERT_EQ(x, p * (p - 1) / 2) << "rank " << r;
  });
}

// Nodes from host names, ranks scattered over them, and more than two ranks a node.
TEST(hierarchical_collectives, nodes_from_host_names) {
  const hierarchical_nodes hosts(std::vector<std::string>{"b", "a", "c", "a", "b", "c", "c", "a", "b", "a", "b", "c"});
  for (std::size_t n : {std::size_t(1), std::size_t(5), std::size_t(12), std::size_t(1001)}) {
    test::check_allreduce<reduce::sum<std::int32_t>>(12, n, test::run_seed() + n, hosts, hierarchical_algorithm{});
    test::check_allreduce<reduce::avg<float>>(12, n, test::run_seed() + n, hosts, hierarchical_algorithm{});
    test::check_reduce_scatter<reduce::sum<std::int64_t>>(12, n, test::run_seed() + n, hosts, hierarchical_algorithm{});
    test::check_allgather<std::uint8_t>(12, n, test::run_seed() + n, hosts, hierarchical_algorithm{});
    test::check_broadcast<double>(12, n, 7, test::run_seed() + n, hosts, hierarchical_algorithm{});
  }
}

// Rail and node algorithms whose messages span several ranks' blocks, on node counts
// that are not powers of two too (issue 16: allgather failed at its first call).
template <class Algorithm, class Topology>
void check_nodes_of_three(const Algorithm& algo) {
  for (int p : {6, 9, 12})
    for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000)}) {
      SCOPED_TRACE("p " + std::to_string(p) + " count " + std::to_string(n));
      const Topology topo(3);
      const std::uint64_t seed = test::run_seed() + 31 * n + p;
      test::check_allgather<std::int32_t>(p, n, seed, topo, algo);
      test::check_reduce_scatter<reduce::sum<std::int64_t>>(p, n, seed + 1, topo, algo);
      test::check_allreduce<reduce::sum<std::int32_t>>(p, n, seed + 2, topo, algo);
      test::check_broadcast<std::int32_t>(p, n, p / 2, seed + 3, topo, algo);
      if (::testing::Test::HasFailure()) return;
    }
}
TEST(hierarchical_collectives, recursive_doubling_in_nodes_halving_doubling_on_rails) {
  check_nodes_of_three<algorithm::hierarchical<algorithm::recursive_doubling, algorithm::halving_doubling>,
                       hierarchical_nodes>({});
}
TEST(hierarchical_collectives, halving_doubling_in_mesh_nodes_hdrm_on_bigraph_rails) {
  check_nodes_of_three<algorithm::hierarchical<algorithm::halving_doubling, algorithm::hdrm>,
                       topology::hierarchical<topology::mesh, topology::bigraph>>({});
}
#endif

// The composed type users name: the default algorithm of a hierarchical topology.
TEST(hierarchical_collectives, the_default_algorithm_of_the_topology_is_used) {
  const int p = 8;
  transport::run_inproc(p, [&](int r, transport::inproc::world& w) {
    communicator<transport::inproc> comm(w, r);
    allreduce<transport::inproc, hierarchical_nodes, reduce::sum<std::int32_t>> sum(comm, hierarchical_nodes(4));
    std::vector<std::int32_t> v(37, r);
    sum(v);
    for (auto x : v) ASSERT_EQ(x, p * (p - 1) / 2) << "rank " << r;
  });
}

// The composed types users name pick the topology's own algorithm.
static_assert(std::is_same_v<algorithm::default_for<topology::bigraph>, algorithm::hdrm>);
static_assert(std::is_same_v<algorithm::default_for<topology::mesh>, algorithm::gdraa>);
static_assert(std::is_same_v<algorithm::default_for<topology::ring>, algorithm::ring>);

}  // namespace
}  // namespace mimatrix

#include "mimatrix/algorithm/hierarchical.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "support/grid.hpp"
#include "support/verify_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;
using ring_topo = topology::hierarchical<topology::ring, topology::ring>;
using ring_algo = algorithm::hierarchical<algorithm::ring, algorithm::ring>;

static_assert(std::is_same_v<algorithm::default_for<ring_topo>, ring_algo>,
              "a hierarchical topology of rings defaults to hierarchical<ring, ring>");
static_assert(algorithm::builds_for<algorithm::hierarchical<>, ring_topo>);

template <class Algorithm, class Topology>
void expect_proved(const Algorithm& algo, const Topology& topo, const schedule::descriptor& d) {
  test::expect_proved(algo, topo, d, " node size " + std::to_string(topo.local_size()));
}

template <class Algorithm, class Topology>
void prove_every_collective(const Algorithm& algo, const Topology& topo, int p) {
  const auto sp = static_cast<std::size_t>(p);
  for (collective kind :
       {collective::allreduce, collective::reduce_scatter, collective::allgather, collective::broadcast})
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(3), sp - 1, sp, sp + 1,
                          2 * sp + 3}) {
      if (kind == collective::broadcast) {
        for (int root : {0, p / 2, p - 1}) expect_proved(algo, topo, {kind, p, n, 4, root});
      } else {
        expect_proved(algo, topo, {kind, p, n, 4, 0});
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
}

struct shape {
  int node_size, nodes;
};

class hierarchical_verified : public ::testing::TestWithParam<shape> {};

// Node sizes 1..4 by node counts 1..8, and a few larger groups up to 64 ranks: every
// collective, counts around p, in place and out of place.
TEST_P(hierarchical_verified, every_collective_and_count) {
  const auto [l, nodes] = GetParam();
  prove_every_collective(ring_algo{}, ring_topo(l), l * nodes);
}

// Chunks of one element turn every phase into many pipelined steps.
TEST_P(hierarchical_verified, with_tiny_chunks) {
  const auto [l, nodes] = GetParam();
  if (l * nodes > 16) GTEST_SKIP() << "tiny chunks run on the smaller groups";
  const algorithm::ring tiny(algorithm::policy{4});
  prove_every_collective(ring_algo(tiny, tiny), ring_topo(l), l * nodes);
}

std::vector<shape> shapes() {
  std::vector<shape> all;
  for (int l = 1; l <= 4; ++l)
    for (int nodes = 1; nodes <= 8; ++nodes) all.push_back({l, nodes});
  for (shape big : {shape{8, 4}, shape{4, 16}, shape{8, 8}, shape{16, 4}, shape{6, 5}}) all.push_back(big);
  return all;
}

INSTANTIATE_TEST_SUITE_P(shapes, hierarchical_verified, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<shape>& info) {
                           return "L" + std::to_string(info.param.node_size) + "_N" +
                                  std::to_string(info.param.nodes);
                         });

// Nodes from host names need not hold consecutive ranks: blocks still land by rank.
TEST(hierarchical, nodes_of_scattered_ranks_are_proved) {
  const ring_topo cyclic(std::vector<std::string>{"a", "b", "c", "a", "b", "c"});
  prove_every_collective(ring_algo{}, cyclic, 6);
  const ring_topo mixed(std::vector<std::string>{"x", "y", "y", "x", "z", "z", "x", "z", "y"});
  prove_every_collective(ring_algo{}, mixed, 9);
}

// Permuted rings inside nodes and along rails are proved too.
TEST(hierarchical, permuted_local_and_global_rings) {
  const ring_topo topo(3, topology::ring({2, 0, 1}), topology::ring({1, 3, 0, 2}));
  prove_every_collective(ring_algo{}, topo, 12);
}

// Recursive doubling, halving-doubling and HDRM send regions that span several ranks'
// blocks (the folds for node counts that are not powers of two, HDRM's halves): embed
// stages such phases through contiguous scratch, for consecutive and scattered nodes.
TEST(hierarchical, phases_whose_regions_span_blocks_are_proved) {
  using rd_hd = algorithm::hierarchical<algorithm::recursive_doubling, algorithm::halving_doubling>;
  for (int l : {2, 3})
    for (int nodes : {3, 5, 6}) prove_every_collective(rd_hd{}, ring_topo(l), l * nodes);
  prove_every_collective(rd_hd{}, ring_topo(std::vector<std::string>{"x", "y", "y", "x", "z", "z", "x", "z", "y"}), 9);
  using mesh_bigraph = topology::hierarchical<topology::mesh, topology::bigraph>;
  using hd_hdrm = algorithm::hierarchical<algorithm::halving_doubling, algorithm::hdrm>;
  for (int p : {6, 9, 12}) prove_every_collective(hd_hdrm{}, mesh_bigraph(3), p);
}

// The point of the rails: in an allreduce, each rank sends only its shard (n/L) across
// nodes, and only to ranks of its own rail.
TEST(hierarchical, allreduce_crosses_nodes_only_along_rails_with_one_shard) {
  const int l = 4, nodes = 3, p = l * nodes;
  const std::size_t n = 1200;
  const ring_topo topo(l);
  for (int r = 0; r < p; ++r) {
    const auto s = ring_algo{}.build(topo, {collective::allreduce, p, n, 4, 0}, r);
    std::size_t across = 0;
    for (const auto& st : s.steps) {
      if (st.kind != schedule::step_kind::send || topo.node_of(st.peer) == topo.node_of(r)) continue;
      EXPECT_EQ(topo.local_rank(st.peer), topo.local_rank(r)) << schedule::to_text(s);
      across += st.bytes();
    }
    // A ring allreduce of n/L elements on N nodes sends 2(N-1)/N of it.
    EXPECT_EQ(across, 2 * (nodes - 1) * (n / l / nodes) * 4) << "rank " << r;
  }
}

TEST(hierarchical, a_group_that_does_not_split_into_nodes_is_rejected) {
  try {
    (void)ring_algo{}.build(ring_topo(4), {collective::allreduce, 6, 10, 4, 0}, 0);
    FAIL() << "accepted 6 ranks in nodes of 4";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("does not split into nodes of 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mimatrix

#include "mimatrix/topology/bigraph.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using topology::bigraph;

TEST(bigraph, shape_groups_switches_and_slots) {
  const bigraph g(4, 2);
  g.check(8);
  EXPECT_EQ(g.capacity(), 8);
  EXPECT_TRUE(g.distinct_links());
  EXPECT_EQ(g.switch_of(5), 2);
  EXPECT_EQ(g.slot_of(5), 1);
  EXPECT_EQ(g.node_of(5), 5);
  EXPECT_EQ(g.group_of(3), 0);
  EXPECT_EQ(g.group_of(4), 1);
  EXPECT_FALSE(bigraph(2, 2).distinct_links());
}

TEST(bigraph, impossible_shapes_are_invalid_arguments_with_a_sentence) {
  for (auto [n, m] : {std::pair{3, 1}, std::pair{0, 1}, std::pair{4, 0}}) {
    try {
      bigraph(n, m);
      FAIL() << n << " " << m;
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
    }
  }
  try {
    bigraph(4, 2).check(9);
    FAIL();
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bigraph{}.check(0), error);
  EXPECT_THROW((void)bigraph{}.switch_of(0), error);  // shape unknown until resolved
}

TEST(bigraph, for_size_picks_power_of_two_shapes_with_distinct_links) {
  EXPECT_EQ(std::make_pair(bigraph::for_size(8).switches(), bigraph::for_size(8).nodes_per_switch()), std::make_pair(4, 2));
  EXPECT_EQ(bigraph::for_size(64).switches(), 16);
  EXPECT_EQ(bigraph::for_size(1024).nodes_per_switch(), 16);
  for (int p = 1; p <= 1100; ++p) {
    const auto g = bigraph::for_size(p);
    EXPECT_GE(g.capacity(), p);
    EXPECT_LT(g.capacity(), 2 * p + 2);
    EXPECT_TRUE(g.distinct_links()) << p;
    EXPECT_NO_THROW(bigraph{}.check(p));
  }
}

TEST(bigraph, paths_take_the_shortest_route) {
  const bigraph g(4, 2);  // switches 0,1 | 2,3
  EXPECT_TRUE(g.path(3, 3).empty());
  const auto same_switch = g.path(0, 1);
  ASSERT_EQ(same_switch.size(), 2u);
  EXPECT_EQ(same_switch[0].to, (bigraph::endpoint{true, 0}));
  const auto across = g.path(1, 6);  // switch 0 -> switch 3
  ASSERT_EQ(across.size(), 3u);
  EXPECT_TRUE(across[1].bipartite());
  EXPECT_EQ(across[1].from, (bigraph::endpoint{true, 0}));
  EXPECT_EQ(across[1].to, (bigraph::endpoint{true, 3}));
  const auto same_group = g.path(0, 2);  // switch 0 -> switch 1 through group 1
  ASSERT_EQ(same_group.size(), 4u);
  EXPECT_TRUE(same_group[1].bipartite() && same_group[2].bipartite());
  EXPECT_EQ(g.group_of_switch(same_group[1].to.index), 1);
}

TEST(bigraph, the_hdrm_mapping_is_a_bijection) {
  for (int p = 1; p <= 300; ++p)
    for (const bigraph& g : {bigraph::for_size(p), bigraph(2 * ((p + 3) / 4), 2)}) {
      if (g.capacity() < p) continue;
      const auto order = algorithm::hdrm::order(g, p);
      std::vector<int> seen(std::size_t(p), 0);
      for (int r : order) {
        ASSERT_TRUE(r >= 0 && r < p) << p;
        ++seen[std::size_t(r)];
      }
      for (int k : seen) ASSERT_EQ(k, 1) << p;
    }
}

/// Flows of one step: sends with the same tag of an allreduce with one element a block
/// (one message a pair and step), grouped by tag.
std::map<std::uint32_t, std::vector<std::pair<int, int>>> steps_of(const std::vector<schedule::schedule>& group) {
  std::map<std::uint32_t, std::vector<std::pair<int, int>>> steps;
  for (const auto& s : group)
    for (const auto& st : s.steps)
      if (st.kind == schedule::step_kind::send) steps[st.tag].push_back({s.rank, st.peer});
  return steps;
}

/// The most flows any directed bipartite link carries in any step, and whether every
/// flow crosses groups.
std::pair<int, bool> worst_link(const bigraph& g, const std::vector<schedule::schedule>& group) {
  int worst = 0;
  bool across = true;
  for (const auto& [tag, flows] : steps_of(group)) {
    std::map<std::pair<int, int>, int> load;
    for (auto [a, b] : flows) {
      across = across && g.group_of(a) != g.group_of(b);
      for (const auto& l : g.path(a, b))
        if (l.bipartite()) worst = std::max(worst, ++load[{l.from.index, l.to.index}]);
    }
  }
  return {worst, across};
}

template <class Algorithm>
std::vector<schedule::schedule> allreduce_group(const Algorithm& algo, const bigraph& g, int p) {
  std::vector<schedule::schedule> group;
  for (int r = 0; r < p; ++r) group.push_back(algo.build(g, {schedule::collective::allreduce, p, std::size_t(p), 4, 0}, r));
  return group;
}

// EFLOPS' claim: with HDRM every halving and doubling step pairs nodes of different
// groups, and no directed bipartite link carries two flows; plain halving-doubling in
// rank order does put two flows on a link.
TEST(bigraph, hdrm_puts_at_most_one_flow_on_every_link_and_identity_does_not) {
  for (auto [n, m] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{4, 2}, std::pair{8, 1}, std::pair{8, 2},
                      std::pair{8, 4}, std::pair{16, 2}, std::pair{16, 4}, std::pair{16, 8}, std::pair{32, 8},
                      std::pair{32, 16}, std::pair{64, 16}}) {
    const bigraph g(n, m);
    const int p = g.capacity();
    const auto [worst, across] = worst_link(g, allreduce_group(algorithm::hdrm{}, g, p));
    EXPECT_TRUE(across) << "N=" << n << " M=" << m;
    EXPECT_LE(worst, 1) << "N=" << n << " M=" << m;
  }
  const bigraph g(4, 2);
  const auto [worst, across] = worst_link(g, allreduce_group(algorithm::halving_doubling{}, g, 8));
  EXPECT_GE(worst, 2);
  EXPECT_FALSE(across);
}

TEST(bigraph, the_digest_of_the_default_shape_is_that_of_the_shape_it_takes) {
  EXPECT_EQ(topology::digest_of(topology::bigraph{}, 8), topology::digest_of(topology::bigraph(4, 2), 8));
  EXPECT_NE(topology::digest_of(topology::bigraph(2, 4), 8), topology::digest_of(topology::bigraph(4, 2), 8));
}

}  // namespace
}  // namespace mimatrix

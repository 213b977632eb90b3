#include "mimatrix/topology/hierarchical.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using hier = topology::hierarchical<topology::ring, topology::ring>;
static_assert(topology::layout<hier>);

std::string rejection(const auto& make) {
  try {
    make();
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    return e.what();
  }
  return "accepted";
}

TEST(topology_hierarchical, an_explicit_node_size_groups_consecutive_ranks) {
  const hier topo(4);
  topo.check(12);
  EXPECT_EQ(topo.local_size(), 4);
  EXPECT_EQ(topo.node_count(12), 3);
  EXPECT_EQ(topo.node_of(9), 2);
  EXPECT_EQ(topo.local_rank(9), 1);
  EXPECT_EQ(topo.rank_at(2, 1), 9);
  EXPECT_EQ(topo.node_ranks(1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(topo.rail_ranks(3, 12), (std::vector<int>{3, 7, 11}));
}

TEST(topology_hierarchical, by_default_every_rank_is_its_own_node) {
  const hier topo;
  topo.check(5);
  EXPECT_EQ(topo.local_size(), 1);
  EXPECT_EQ(topo.node_count(5), 5);
  EXPECT_EQ(topo.rail_ranks(0, 5), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(topology_hierarchical, host_names_group_ranks_in_order_of_first_appearance) {
  const hier topo(std::vector<std::string>{"gpu-b", "gpu-a", "gpu-b", "gpu-a", "gpu-c", "gpu-c"});
  topo.check(6);
  EXPECT_EQ(topo.local_size(), 2);
  EXPECT_EQ(topo.node_count(6), 3);
  EXPECT_EQ(topo.node_ranks(0), (std::vector<int>{0, 2}));  // gpu-b
  EXPECT_EQ(topo.node_ranks(1), (std::vector<int>{1, 3}));  // gpu-a
  EXPECT_EQ(topo.node_ranks(2), (std::vector<int>{4, 5}));  // gpu-c
  EXPECT_EQ(topo.node_of(3), 1);
  EXPECT_EQ(topo.local_rank(3), 1);
  EXPECT_EQ(topo.rail_ranks(1, 6), (std::vector<int>{2, 3, 5}));
  for (int r = 0; r < 6; ++r) EXPECT_EQ(topo.rank_at(topo.node_of(r), topo.local_rank(r)), r);
}

TEST(topology_hierarchical, unequal_hosts_are_rejected_with_the_hosts_and_counts) {
  const auto message =
      rejection([] { hier(std::vector<std::string>{"a", "b", "a", "c", "a"}); });
  EXPECT_NE(message.find("same number of ranks"), std::string::npos) << message;
  EXPECT_NE(message.find("\"a\" 3, \"b\" 1, \"c\" 1"), std::string::npos) << message;
  EXPECT_NE(rejection([] { hier(std::vector<std::string>{}); }).find("host list is empty"), std::string::npos);
}

TEST(topology_hierarchical, groups_that_do_not_fit_are_rejected_with_the_reason) {
  EXPECT_NE(rejection([] { hier(0); }).find("at least one rank, got node size 0"), std::string::npos);
  EXPECT_NE(rejection([] { hier(4).check(10); }).find("group of 10 ranks does not split into nodes of 4"),
            std::string::npos);
  EXPECT_NE(rejection([] { hier(std::vector<std::string>{"a", "b"}).check(3); })
                .find("host list names 2 ranks but the group has 3"),
            std::string::npos);
  // The parts check their own sizes: a local ring order for 3 ranks on nodes of 2.
  EXPECT_NE(rejection([] { hier(2, topology::ring({0, 2, 1})).check(4); }).find("lists 3 ranks but the group has 2"),
            std::string::npos);
}

TEST(topology_hierarchical, the_digest_tells_node_sizes_apart_but_not_spellings_of_one) {
  const hier by_size(2);
  const hier by_hosts(std::vector<std::string>{"a", "a", "b", "b"});
  const hier interleaved(std::vector<std::string>{"a", "b", "a", "b"});
  EXPECT_EQ(topology::digest_of(by_size, 4), topology::digest_of(by_hosts, 4));
  EXPECT_NE(topology::digest_of(by_size, 4), topology::digest_of(hier(4), 4));
  EXPECT_NE(topology::digest_of(by_hosts, 4), topology::digest_of(interleaved, 4));
  EXPECT_NE(topology::digest_of(by_size, 4), topology::digest_of(hier(2, topology::ring({1, 0})), 4));
}

}  // namespace
}  // namespace mimatrix

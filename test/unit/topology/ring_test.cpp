#include "mimatrix/topology/ring.hpp"

#include <gtest/gtest.h>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

TEST(topology_ring, rank_order_by_default) {
  const topology::ring ring;
  ring.check(5);
  EXPECT_EQ(ring.next(4, 5), 0);
  EXPECT_EQ(ring.prev(0, 5), 4);
  EXPECT_EQ(ring.position_of(3), 3);
  EXPECT_EQ(ring.rank_at(2), 2);
}

TEST(topology_ring, a_given_order_sets_the_neighbours) {
  const topology::ring ring({2, 0, 3, 1});
  ring.check(4);
  EXPECT_EQ(ring.rank_at(0), 2);
  EXPECT_EQ(ring.position_of(1), 3);
  EXPECT_EQ(ring.next(2, 4), 0);
  EXPECT_EQ(ring.next(1, 4), 2);
  EXPECT_EQ(ring.prev(2, 4), 1);
}

TEST(topology_ring, orders_that_are_not_permutations_are_rejected_with_the_reason) {
  const auto message = [](const topology::ring& ring, int size) {
    try {
      ring.check(size);
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(topology::ring({0, 1, 1}), 3).find("not a permutation"), std::string::npos);
  EXPECT_NE(message(topology::ring({0, 1}), 3).find("lists 2 ranks but the group has 3"), std::string::npos);
  EXPECT_NE(message(topology::ring({0, 5, 1}), 3).find("rank 5"), std::string::npos);
  EXPECT_NE(message(topology::ring(), 0).find("at least one rank"), std::string::npos);
}

// Ranks compare digests at every call: an order spelled 0..p-1 is the default ring, any
// other order is another ring.
TEST(topology_ring, the_digest_tells_orders_apart_but_not_spellings_of_one) {
  EXPECT_EQ(topology::digest_of(topology::ring{}, 4), topology::digest_of(topology::ring({0, 1, 2, 3}), 4));
  EXPECT_NE(topology::digest_of(topology::ring{}, 4), topology::digest_of(topology::ring({0, 2, 1, 3}), 4));
  EXPECT_NE(topology::digest_of(topology::ring{}, 4), topology::digest_of(topology::ring{}, 5));
}

}  // namespace
}  // namespace mimatrix

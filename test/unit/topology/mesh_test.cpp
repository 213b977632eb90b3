#include "mimatrix/topology/mesh.hpp"

#include <gtest/gtest.h>

#include <string>

#include "mimatrix/topology/layout.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

static_assert(topology::layout<topology::mesh>);

TEST(topology_mesh, every_pair_is_connected) {
  const topology::mesh mesh;
  mesh.check(1);
  mesh.check(64);
  for (int a = 0; a < 5; ++a)
    for (int b = 0; b < 5; ++b) EXPECT_EQ(topology::mesh::connected(a, b, 5), a != b);
  EXPECT_FALSE(topology::mesh::connected(0, 5, 5));
  EXPECT_EQ(topology::mesh::degree(8), 7);
}

TEST(topology_mesh, an_empty_group_is_rejected_with_the_reason) {
  try {
    topology::mesh{}.check(0);
    FAIL() << "check(0) accepted";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("at least one rank, got 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mimatrix

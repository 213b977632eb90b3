#include "mimatrix/schedule/signature.hpp"

#include <gtest/gtest.h>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

TEST(signature, prints_what_a_user_needs_to_find_the_call) {
  signature s{schedule::collective::allreduce, reduce::op_kind::max, dtype::bfloat16, 1000, 0, 7};
  EXPECT_EQ(to_string(s), "allreduce #7 (count 1000, bfloat16, max)");
  s.kind = schedule::collective::broadcast;
  s.root = 3;
  EXPECT_EQ(to_string(s), "broadcast #7 (count 1000, bfloat16, root 3)");
  s.kind = schedule::collective::allgather;
  EXPECT_EQ(to_string(s), "allgather #7 (count 1000, bfloat16)");
}

TEST(signature, any_field_that_differs_makes_signatures_differ) {
  const signature a{schedule::collective::reduce_scatter, reduce::op_kind::sum, dtype::float32, 10, 0, 1};
  signature b = a;
  EXPECT_EQ(a, b);
  b.count = 11;
  EXPECT_NE(a, b);
  b = a;
  b.type = dtype::float64;
  EXPECT_NE(a, b);
  b = a;
  b.op = reduce::op_kind::avg;
  EXPECT_NE(a, b);
  b = a;
  b.sequence = 2;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace mimatrix

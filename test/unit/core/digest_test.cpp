#include "mimatrix/core/digest.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

TEST(digest, equal_sequences_give_equal_values_and_order_and_boundaries_count) {
  EXPECT_EQ(digest{}.mix(1).mix("ring").value(), digest{}.mix(1).mix("ring").value());
  EXPECT_NE(digest{}.mix(1).mix(2).value(), digest{}.mix(2).mix(1).value());
  EXPECT_NE(digest{}.mix("ab").mix("c").value(), digest{}.mix("a").mix("bc").value());
  EXPECT_NE(digest{}.value(), digest{}.mix(0).value());
  static_assert(digest{}.mix(7).value() == digest{}.mix(std::uint64_t(7)).value(), "usable at compile time");
}

}  // namespace
}  // namespace mimatrix

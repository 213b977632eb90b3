// Tests of reduce/ops.hpp: identities are neutral, commutativity is declared, integer
// overflow wraps (no undefined behaviour: this suite also runs under UBSan), min/max, avg.
#include "mimatrix/reduce/ops.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace MIMATRIX_UNIT_ID {

namespace reduce = mimatrix::reduce;
using mimatrix::bfloat16;
using mimatrix::half;
using reduce::op_kind;

// Values that probe each accumulator type: zero, ones, extremes, and (for floats) infinities.
template <class A> std::vector<A> probes() {
  using limits = std::numeric_limits<A>;
  std::vector<A> v{A(0), A(1), A(2), A(5), limits::max(), limits::lowest(), A(limits::max() / 2)};
  // push_back, not insert: g++ 12 -O3 warns falsely (-Warray-bounds) on inserting int8 lists.
  if constexpr (std::is_signed_v<A>)
    for (A x : {A(-1), A(-2), A(-7), A(limits::lowest() + 1)}) v.push_back(x);
  if constexpr (std::is_floating_point_v<A>)
    for (A x : {A(0.5), A(-0.25), limits::infinity(), -limits::infinity(), limits::denorm_min(), limits::min(), A(-0.0)})
      v.push_back(x);
  return v;
}

template <class Op> class operation_test : public ::testing::Test {};
using all_operations = ::testing::Types<
    reduce::sum<std::int8_t>, reduce::sum<std::uint8_t>, reduce::sum<std::int32_t>, reduce::sum<std::int64_t>,
    reduce::sum<half>, reduce::sum<bfloat16>, reduce::sum<float>, reduce::sum<double>,
    reduce::prod<std::int8_t>, reduce::prod<std::uint8_t>, reduce::prod<std::int32_t>, reduce::prod<std::int64_t>,
    reduce::prod<half>, reduce::prod<bfloat16>, reduce::prod<float>, reduce::prod<double>,
    reduce::min<std::int8_t>, reduce::min<std::uint8_t>, reduce::min<std::int32_t>, reduce::min<std::int64_t>,
    reduce::min<half>, reduce::min<bfloat16>, reduce::min<float>, reduce::min<double>,
    reduce::max<std::int8_t>, reduce::max<std::uint8_t>, reduce::max<std::int32_t>, reduce::max<std::int64_t>,
    reduce::max<half>, reduce::max<bfloat16>, reduce::max<float>, reduce::max<double>,
    reduce::avg<std::int8_t>, reduce::avg<std::uint8_t>, reduce::avg<std::int32_t>, reduce::avg<std::int64_t>,
    reduce::avg<half>, reduce::avg<bfloat16>, reduce::avg<float>, reduce::avg<double>>;
TYPED_TEST_SUITE(operation_test, all_operations);

TYPED_TEST(operation_test, models_the_concept) {
  static_assert(reduce::operation<TypeParam>);
  static_assert(std::is_same_v<typename TypeParam::accumulator, mimatrix::accumulator_t<typename TypeParam::value_type>>);
  static_assert(std::is_trivially_copyable_v<TypeParam>, "kernels take operations by value, device included");
}

TYPED_TEST(operation_test, identity_is_neutral) {
  using A = typename TypeParam::accumulator;
  const TypeParam op;
  for (A x : probes<A>()) {
    EXPECT_EQ(op(TypeParam::identity(), x), x) << +x;
    EXPECT_EQ(op(x, TypeParam::identity()), x) << +x;
  }
}

TYPED_TEST(operation_test, declares_commutative_and_is) {
  using A = typename TypeParam::accumulator;
  static_assert(TypeParam::commutative);
  const TypeParam op;
  for (A x : probes<A>())
    for (A y : probes<A>()) {
      const A xy = op(x, y), yx = op(y, x);
      if (std::isnan(static_cast<double>(xy))) EXPECT_TRUE(std::isnan(static_cast<double>(yx)));  // inf - inf
      else EXPECT_EQ(xy, yx) << +x << ", " << +y;
    }
}

TYPED_TEST(operation_test, finalize_is_the_identity_except_for_avg) {
  using A = typename TypeParam::accumulator;
  const TypeParam op;
  if constexpr (TypeParam::kind != op_kind::avg) {
    for (A x : probes<A>()) EXPECT_EQ(op.finalize(x, 3), x);
  }
}

TEST(sum, integer_overflow_wraps) {
  EXPECT_EQ(reduce::sum<std::int32_t>{}(std::numeric_limits<std::int32_t>::max(), 1), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(reduce::sum<std::int32_t>{}(std::numeric_limits<std::int32_t>::min(), -1), std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(reduce::sum<std::int64_t>{}(std::numeric_limits<std::int64_t>::max(), 1), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(reduce::sum<std::int8_t>{}(127, 1), -128);
  EXPECT_EQ(reduce::sum<std::int8_t>{}(-128, -128), 0);
  EXPECT_EQ(reduce::sum<std::uint8_t>{}(255, 2), 1);
}

TEST(prod, integer_overflow_wraps) {
  EXPECT_EQ(reduce::prod<std::int32_t>{}(std::numeric_limits<std::int32_t>::max(), 2), -2);
  EXPECT_EQ(reduce::prod<std::int32_t>{}(std::numeric_limits<std::int32_t>::min(), -1), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(reduce::prod<std::int32_t>{}(65536, 65536), 0);
  EXPECT_EQ(reduce::prod<std::int64_t>{}(std::numeric_limits<std::int64_t>::min(), -1), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(reduce::prod<std::int64_t>{}(std::int64_t{1} << 62, 4), 0);
  EXPECT_EQ(reduce::prod<std::int8_t>{}(-128, -1), -128);
  EXPECT_EQ(reduce::prod<std::int8_t>{}(16, 16), 0);
  EXPECT_EQ(reduce::prod<std::int8_t>{}(-7, 19), 123);            // -133 + 256
  EXPECT_EQ(reduce::prod<std::uint8_t>{}(255, 255), 1);           // 65025 = 254 * 256 + 1
  EXPECT_EQ(reduce::prod<std::uint8_t>{}(16, 17), 16);
}

TEST(sum, is_usable_in_constant_expressions) {
  static_assert(reduce::sum<std::int32_t>{}(2, 3) == 5);
  static_assert(reduce::prod<std::int8_t>{}(-128, -1) == -128);
  static_assert(reduce::min<float>::identity() == std::numeric_limits<float>::infinity());
  static_assert(reduce::max<double>::identity() == -std::numeric_limits<double>::infinity());
  static_assert(reduce::min<std::int8_t>::identity() == 127 && reduce::max<std::int8_t>::identity() == -128);
  static_assert(reduce::min<std::uint8_t>::identity() == 255 && reduce::max<std::uint8_t>::identity() == 0);
}

TEST(min_max, agree_with_std_min_max) {
  const auto values = probes<double>();
  for (double x : values)
    for (double y : values) {
      EXPECT_EQ(std::bit_cast<std::uint64_t>(reduce::min<double>{}(x, y)), std::bit_cast<std::uint64_t>(std::min(x, y)));
      EXPECT_EQ(std::bit_cast<std::uint64_t>(reduce::max<double>{}(x, y)), std::bit_cast<std::uint64_t>(std::max(x, y)));
    }
  const auto ints = probes<std::int64_t>();
  for (std::int64_t x : ints)
    for (std::int64_t y : ints) {
      EXPECT_EQ(reduce::min<std::int64_t>{}(x, y), std::min(x, y));
      EXPECT_EQ(reduce::max<std::int64_t>{}(x, y), std::max(x, y));
    }
  EXPECT_EQ(reduce::min<std::uint8_t>{}(3, 250), 3);
  EXPECT_EQ(reduce::max<std::int8_t>{}(-3, -128), -3);
}

TEST(avg, finalize_divides_by_ranks_truncating_toward_zero) {
  EXPECT_EQ(reduce::avg<std::int32_t>{}.finalize(7, 2), 3);
  EXPECT_EQ(reduce::avg<std::int32_t>{}.finalize(-7, 2), -3);
  EXPECT_EQ(reduce::avg<std::int32_t>{}.finalize(std::numeric_limits<std::int32_t>::min(), 1),
            std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(reduce::avg<std::int64_t>{}.finalize(-9, 4), -2);
  EXPECT_EQ(reduce::avg<std::uint8_t>{}.finalize(255, 2), 127);
  EXPECT_EQ(reduce::avg<float>{}.finalize(7.0f, 2), 3.5f);
  EXPECT_EQ(reduce::avg<double>{}.finalize(1.0, 3), 1.0 / 3.0);
  EXPECT_EQ(reduce::avg<half>{}.finalize(3.0f, 4), 0.75f);  // half accumulates in float
}

TEST(avg, finalize_handles_more_ranks_than_the_element_type_can_count) {
  // An int8 average over 200 or 256 ranks: the rank count does not fit in the element type.
  EXPECT_EQ(reduce::avg<std::int8_t>{}.finalize(-100, 200), 0);
  EXPECT_EQ(reduce::avg<std::int8_t>{}.finalize(127, 100), 1);
  EXPECT_EQ(reduce::avg<std::int8_t>{}.finalize(-128, 256), 0);
  EXPECT_EQ(reduce::avg<std::uint8_t>{}.finalize(255, 256), 0);
  EXPECT_EQ(reduce::avg<std::uint8_t>{}.finalize(255, 200), 1);
  for (int ranks = 1; ranks <= 1000; ++ranks)
    for (int v = -128; v <= 127; ++v)
      ASSERT_EQ(reduce::avg<std::int8_t>{}.finalize(static_cast<std::int8_t>(v), ranks), v / ranks) << v << " / " << ranks;
}

// docs/reduction.md's rule: the sum wraps in the element type, then divides once.
TEST(avg, an_integer_average_divides_the_wrapped_sum) {
  const auto average_of_ones = [](int ranks) {
    const reduce::avg<std::int8_t> avg;
    std::int8_t total = avg.identity();
    for (int r = 0; r < ranks; ++r) total = avg(total, 1);
    return std::pair{total, avg.finalize(total, ranks)};
  };
  EXPECT_EQ(average_of_ones(100), std::pair(std::int8_t(100), std::int8_t(1)));
  EXPECT_EQ(average_of_ones(200), std::pair(std::int8_t(-56), std::int8_t(0)));  // 200 wraps
}

TEST(sum, wraps_like_the_sum_reduced_in_order) {
  // Wrapping sums are associative: any reduction order gives the same int32 result.
  const reduce::sum<std::int32_t> op;
  const std::int32_t xs[] = {std::numeric_limits<std::int32_t>::max(), 7, std::numeric_limits<std::int32_t>::max(), -3};
  std::int32_t left = op.identity(), right = op.identity();
  for (std::int32_t x : xs) left = op(left, x);
  for (int i = 3; i >= 0; --i) right = op(xs[i], right);
  EXPECT_EQ(left, right);
}

TEST(op_kind, names) {
  EXPECT_EQ(reduce::to_string(op_kind::sum), "sum");
  EXPECT_EQ(reduce::to_string(op_kind::prod), "prod");
  EXPECT_EQ(reduce::to_string(op_kind::min), "min");
  EXPECT_EQ(reduce::to_string(op_kind::max), "max");
  EXPECT_EQ(reduce::to_string(op_kind::avg), "avg");
}

}  // namespace

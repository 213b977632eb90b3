// Tests of core/dtype.hpp: half and bfloat16 conversions (every bit pattern, ties, subnormals,
// infinities, NaN, overflow), and the dtype tag's size and name.
#include "mimatrix/core/dtype.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace MIMATRIX_UNIT_ID {

using mimatrix::bfloat16;
using mimatrix::dtype;
using mimatrix::half;

constexpr std::uint32_t all_16_bit_patterns = 1u << 16;

half half_from_bits(std::uint32_t bits) {
  half h;
  h.bits = static_cast<std::uint16_t>(bits);
  return h;
}
bfloat16 bfloat16_from_bits(std::uint32_t bits) {
  bfloat16 b;
  b.bits = static_cast<std::uint16_t>(bits);
  return b;
}
bool is_half_nan(std::uint32_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0; }
bool is_bfloat16_nan(std::uint32_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0; }
float float_from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(half, every_pattern_round_trips_through_float) {
  for (std::uint32_t bits = 0; bits < all_16_bit_patterns; ++bits) {
    const float f = static_cast<float>(half_from_bits(bits));
    if (is_half_nan(bits)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      const half back(f);
      EXPECT_TRUE(is_half_nan(back.bits)) << std::hex << bits;
      EXPECT_EQ(back.bits & 0x200u, 0x200u) << "NaN comes back quiet: " << std::hex << bits;
      EXPECT_EQ(back.bits & 0x81ffu, bits & 0x81ffu) << "sign and payload kept: " << std::hex << bits;
    } else {
      ASSERT_EQ(half(f).bits, bits) << std::hex << bits << " -> " << f;
    }
  }
}

TEST(half, values_are_exact) {
  EXPECT_EQ(static_cast<float>(half_from_bits(0x3c00)), 1.0f);
  EXPECT_EQ(static_cast<float>(half_from_bits(0xc000)), -2.0f);
  EXPECT_EQ(static_cast<float>(half_from_bits(0x7bff)), 65504.0f);  // largest finite
  EXPECT_EQ(static_cast<float>(half_from_bits(0x0400)), 0x1p-14f);  // smallest normal
  EXPECT_EQ(static_cast<float>(half_from_bits(0x03ff)), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(static_cast<float>(half_from_bits(0x0001)), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(static_cast<float>(half_from_bits(0x7c00)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(static_cast<float>(half_from_bits(0xfc00)), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(static_cast<float>(half_from_bits(0x8000))));
}

// Between two neighbouring halves, the float midpoint rounds to the one with the even bit
// pattern, and anything a float step off the midpoint rounds to the nearer one.
TEST(half, ties_round_to_even_everywhere) {
  for (std::uint32_t bits = 0; bits < 0x7c00u; ++bits) {  // every finite non-negative half
    const float lo = static_cast<float>(half_from_bits(bits));
    const float hi = bits + 1 == 0x7c00u ? 65536.0f : static_cast<float>(half_from_bits(bits + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: halves need 11 significant bits, floats have 24
    const std::uint32_t even = (bits & 1u) ? bits + 1 : bits;
    ASSERT_EQ(half(mid).bits, even) << std::hex << bits;
    ASSERT_EQ(half(-mid).bits, even | 0x8000u) << std::hex << bits;
    ASSERT_EQ(half(std::nextafter(mid, 0.0f)).bits, bits) << std::hex << bits;
    ASSERT_EQ(half(std::nextafter(mid, hi)).bits, bits + 1) << std::hex << bits;
  }
}

TEST(half, subnormals_round_to_nearest_even) {
  EXPECT_EQ(half(0x1p-25f).bits, 0x0000u);              // half the smallest: tie, to even zero
  EXPECT_EQ(half(std::nextafter(0x1p-25f, 1.0f)).bits, 0x0001u);
  EXPECT_EQ(half(3 * 0x1p-25f).bits, 0x0002u);          // 1.5 units: tie, to even 2
  EXPECT_EQ(half(5 * 0x1p-25f).bits, 0x0002u);          // 2.5 units: tie, to even 2
  EXPECT_EQ(half(0x1p-26f).bits, 0x0000u);
  EXPECT_EQ(half(-0x1p-26f).bits, 0x8000u);             // the sign survives underflow
  EXPECT_EQ(half(std::numeric_limits<float>::denorm_min()).bits, 0x0000u);
  EXPECT_EQ(half(0x1p-14f - 0x1p-25f).bits, 0x0400u);   // largest subnormal + half a unit: to even normal
}

TEST(half, overflows_to_infinity_at_65520) {
  EXPECT_EQ(half(65504.0f).bits, 0x7bffu);
  EXPECT_EQ(half(std::nextafter(65520.0f, 0.0f)).bits, 0x7bffu);
  EXPECT_EQ(half(65520.0f).bits, 0x7c00u);
  EXPECT_EQ(half(-65520.0f).bits, 0xfc00u);
  EXPECT_EQ(half(1e9f).bits, 0x7c00u);
  EXPECT_EQ(half(std::numeric_limits<float>::max()).bits, 0x7c00u);
  EXPECT_EQ(half(std::numeric_limits<float>::infinity()).bits, 0x7c00u);
  EXPECT_EQ(half(-std::numeric_limits<float>::infinity()).bits, 0xfc00u);
}

TEST(half, nan_stays_nan) {
  EXPECT_TRUE(is_half_nan(half(std::numeric_limits<float>::quiet_NaN()).bits));
  EXPECT_TRUE(is_half_nan(half(std::numeric_limits<float>::signaling_NaN()).bits));
  EXPECT_TRUE(is_half_nan(half(float_from_bits(0x7f800001u)).bits));  // payload only in low bits
  EXPECT_TRUE(is_half_nan(half(float_from_bits(0xffc00000u)).bits));
  EXPECT_EQ(half(float_from_bits(0xffc00000u)).bits & 0x8000u, 0x8000u);
}

TEST(bfloat16, every_pattern_round_trips_through_float) {
  for (std::uint32_t bits = 0; bits < all_16_bit_patterns; ++bits) {
    const float f = static_cast<float>(bfloat16_from_bits(bits));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f), bits << 16);
    if (is_bfloat16_nan(bits)) {
      EXPECT_TRUE(is_bfloat16_nan(bfloat16(f).bits)) << std::hex << bits;
      EXPECT_EQ(bfloat16(f).bits, bits | 0x40u) << "quiet, payload kept: " << std::hex << bits;
    } else {
      ASSERT_EQ(bfloat16(f).bits, bits) << std::hex << bits;
    }
  }
}

TEST(bfloat16, ties_round_to_even_everywhere) {
  for (std::uint32_t bits = 0; bits < 0x7f80u; ++bits) {  // every finite non-negative bfloat16
    const std::uint32_t mid = (bits << 16) | 0x8000u;     // exactly between bits and bits + 1
    const std::uint32_t even = (bits & 1u) ? bits + 1 : bits;
    ASSERT_EQ(bfloat16(float_from_bits(mid)).bits, even) << std::hex << bits;
    ASSERT_EQ(bfloat16(float_from_bits(mid | 0x80000000u)).bits, even | 0x8000u) << std::hex << bits;
    ASSERT_EQ(bfloat16(float_from_bits(mid - 1)).bits, bits) << std::hex << bits;
    ASSERT_EQ(bfloat16(float_from_bits(mid + 1)).bits, bits + 1) << std::hex << bits;
  }
}

TEST(bfloat16, specials) {
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3f80u);
  EXPECT_EQ(bfloat16(1.0f + 0x1p-8f).bits, 0x3f80u);      // tie, to even
  EXPECT_EQ(bfloat16(1.0f + 3 * 0x1p-8f).bits, 0x3f82u);  // tie, to even
  EXPECT_EQ(bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80u);  // rounds up to infinity
  EXPECT_EQ(bfloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80u);
  EXPECT_EQ(bfloat16(-std::numeric_limits<float>::infinity()).bits, 0xff80u);
  EXPECT_EQ(bfloat16(std::numeric_limits<float>::denorm_min()).bits, 0x0000u);  // tie, to even zero
  EXPECT_TRUE(is_bfloat16_nan(bfloat16(std::numeric_limits<float>::quiet_NaN()).bits));
  EXPECT_TRUE(is_bfloat16_nan(bfloat16(float_from_bits(0x7f800001u)).bits));  // would round to inf
  EXPECT_TRUE(is_bfloat16_nan(bfloat16(float_from_bits(0xffffffffu)).bits));  // would carry out
}

TEST(dtype, size_of_every_tag) {
  EXPECT_EQ(mimatrix::size_of(dtype::int8), 1u);
  EXPECT_EQ(mimatrix::size_of(dtype::uint8), 1u);
  EXPECT_EQ(mimatrix::size_of(dtype::int32), 4u);
  EXPECT_EQ(mimatrix::size_of(dtype::int64), 8u);
  EXPECT_EQ(mimatrix::size_of(dtype::float16), 2u);
  EXPECT_EQ(mimatrix::size_of(dtype::bfloat16), 2u);
  EXPECT_EQ(mimatrix::size_of(dtype::float32), 4u);
  EXPECT_EQ(mimatrix::size_of(dtype::float64), 8u);
}

TEST(dtype, to_string_uses_nccl_tests_names) {
  EXPECT_EQ(mimatrix::to_string(dtype::int8), "int8");
  EXPECT_EQ(mimatrix::to_string(dtype::uint8), "uint8");
  EXPECT_EQ(mimatrix::to_string(dtype::int32), "int32");
  EXPECT_EQ(mimatrix::to_string(dtype::int64), "int64");
  EXPECT_EQ(mimatrix::to_string(dtype::float16), "half");
  EXPECT_EQ(mimatrix::to_string(dtype::bfloat16), "bfloat16");
  EXPECT_EQ(mimatrix::to_string(dtype::float32), "float");
  EXPECT_EQ(mimatrix::to_string(dtype::float64), "double");
}

// The tag, the C++ type's size and the accumulator agree for every element type.
template <class T> constexpr bool consistent = mimatrix::size_of(mimatrix::dtype_of<T>) == sizeof(T);
static_assert(consistent<std::int8_t> && consistent<std::uint8_t> && consistent<std::int32_t> &&
              consistent<std::int64_t> && consistent<half> && consistent<bfloat16> && consistent<float> &&
              consistent<double>);
static_assert(std::is_same_v<mimatrix::accumulator_t<half>, float>);
static_assert(std::is_same_v<mimatrix::accumulator_t<bfloat16>, float>);
static_assert(std::is_same_v<mimatrix::accumulator_t<std::int8_t>, std::int8_t>);
static_assert(std::is_same_v<mimatrix::accumulator_t<double>, double>);
static_assert(std::is_trivially_copyable_v<half> && std::is_trivially_copyable_v<bfloat16>);
static_assert(!mimatrix::element<char16_t> && !mimatrix::element<long double>);

}  // namespace

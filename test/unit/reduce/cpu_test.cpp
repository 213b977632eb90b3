// Tests of reduce/cpu.hpp: combine and finalize against the one-element reference for every
// dtype x op, size and aliasing (dst == a, dst == b, separate), bit for bit.
#include "mimatrix/reduce/cpu.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "reference.hpp"

namespace MIMATRIX_UNIT_ID {

namespace reduce = mimatrix::reduce;
namespace cpu = mimatrix::reduce::cpu;
using mimatrix::bfloat16;
using mimatrix::half;
using reduce::test::bits_of;
using reduce::test::same_result;

std::uint64_t fresh_seed() { return std::random_device{}(); }  // fresh data each run; printed on failure

enum class aliasing { separate, dst_is_a, dst_is_b };

template <class Op> class cpu_kernel_test : public ::testing::Test {};
using all_operations = ::testing::Types<MIMATRIX_TEST_ALL_OPERATIONS>;
TYPED_TEST_SUITE(cpu_kernel_test, all_operations);

TYPED_TEST(cpu_kernel_test, combine_equals_the_reference) {
  using T = typename TypeParam::value_type;
  const TypeParam op;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (std::size_t n : reduce::test::sizes)
    for (aliasing mode : {aliasing::separate, aliasing::dst_is_a, aliasing::dst_is_b}) {
      std::vector<T> a = reduce::test::random_elements<T>(rng, n);
      std::vector<T> b = reduce::test::random_elements<T>(rng, n);
      std::vector<T> expected(n);
      for (std::size_t i = 0; i < n; ++i) expected[i] = reduce::test::combine_one(op, a[i], b[i]);
      std::vector<T> separate(n);
      T* dst = mode == aliasing::dst_is_a ? a.data() : mode == aliasing::dst_is_b ? b.data() : separate.data();
      cpu::combine(op, dst, a.data(), b.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_result(dst[i], expected[i]))
            << "n " << n << ", aliasing " << int(mode) << ", i " << i << ": " << +bits_of(dst[i]) << " vs "
            << +bits_of(expected[i]);
    }
}

TYPED_TEST(cpu_kernel_test, combine_at_an_odd_offset_equals_the_reference) {
  // Misaligned pointers: the kernels may not assume any alignment beyond the element's.
  using T = typename TypeParam::value_type;
  const TypeParam op;
  std::mt19937_64 rng(fresh_seed());
  constexpr std::size_t n = 1000, offset = 1;
  std::vector<T> a = reduce::test::random_elements<T>(rng, n + offset);
  std::vector<T> b = reduce::test::random_elements<T>(rng, n + offset);
  std::vector<T> dst(n + offset);
  cpu::combine(op, dst.data() + offset, a.data() + offset, b.data() + offset, n);
  for (std::size_t i = offset; i < n + offset; ++i)
    ASSERT_TRUE(same_result(dst[i], reduce::test::combine_one(op, a[i], b[i]))) << i;
}

TYPED_TEST(cpu_kernel_test, finalize_equals_the_reference) {
  using T = typename TypeParam::value_type;
  const TypeParam op;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (std::size_t n : reduce::test::sizes)
    for (int ranks : {1, 2, 3, 7, 128, 200, 256, 1000}) {
      std::vector<T> data = reduce::test::random_elements<T>(rng, n);
      std::vector<T> expected(n);
      for (std::size_t i = 0; i < n; ++i) expected[i] = reduce::test::finalize_one(op, data[i], ranks);
      cpu::finalize(op, data.data(), n, ranks);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_result(data[i], expected[i])) << "n " << n << ", ranks " << ranks << ", i " << i;
    }
}

// avg of 8- and 32-bit integers divides through double; check it at every int8 and uint8 value
// and the int32 edges, where a rounded quotient could land on the wrong integer.
TEST(cpu_finalize, integer_avg_is_exact) {
  for (int ranks = 1; ranks <= 300; ++ranks) {
    std::vector<std::int8_t> s(256);
    std::vector<std::uint8_t> u(256);
    for (int v = 0; v < 256; ++v) {
      s[v] = static_cast<std::int8_t>(v - 128);
      u[v] = static_cast<std::uint8_t>(v);
    }
    cpu::finalize(reduce::avg<std::int8_t>{}, s.data(), s.size(), ranks);
    cpu::finalize(reduce::avg<std::uint8_t>{}, u.data(), u.size(), ranks);
    for (int v = 0; v < 256; ++v) {
      ASSERT_EQ(s[v], (v - 128) / ranks) << v - 128 << " / " << ranks;
      ASSERT_EQ(u[v], v / ranks) << v << " / " << ranks;
    }
  }
  constexpr std::int32_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
  std::vector<std::int32_t> edges;
  for (std::int32_t d = 0; d < 70; ++d) edges.insert(edges.end(), {lo + d, hi - d, d, -d});
  for (int ranks : {1, 2, 3, 7, 10, 64, 65, 1000, 65536, 1 << 30, hi}) {
    std::vector<std::int32_t> data = edges;
    cpu::finalize(reduce::avg<std::int32_t>{}, data.data(), data.size(), ranks);
    for (std::size_t i = 0; i < edges.size(); ++i)
      ASSERT_EQ(data[i], static_cast<std::int32_t>(std::int64_t{edges[i]} / ranks)) << edges[i] << " / " << ranks;
  }
}

// The vectorizable conversions in cpu.hpp are twins of dtype.hpp's: check every half and,
// for float inputs, every sign/exponent/top mantissa bits with the rounding-relevant low bits.
TEST(cpu_conversions, half_to_float_matches_dtype_for_every_half) {
  for (std::uint32_t h = 0; h < (1u << 16); ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(cpu::detail::half_to_float(bits)),
              std::bit_cast<std::uint32_t>(mimatrix::detail::half_bits_to_float(bits)))
        << std::hex << h;
  }
}

TEST(cpu_conversions, float_to_16_bit_matches_dtype) {
  constexpr std::uint32_t low_patterns[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000,
                                            0x7fff, 0x8000, 0x8001, 0x9000, 0xefff, 0xf000, 0xffff};
  std::mt19937 rng(fresh_seed());
  for (std::uint32_t high = 0; high < (1u << 16); ++high)
    for (std::uint32_t low : low_patterns) {
      for (std::uint32_t x : {(high << 16) | low, (high << 16) | static_cast<std::uint32_t>(rng() & 0xffffu)}) {
        const float f = std::bit_cast<float>(x);
        ASSERT_EQ(cpu::detail::float_to_half(f), mimatrix::detail::float_to_half_bits(f)) << std::hex << x;
        ASSERT_EQ(cpu::detail::float_to_bfloat16(f), mimatrix::detail::float_to_bfloat16_bits(f)) << std::hex << x;
      }
    }
}

TEST(cpu_combine, int64_min_max_pick_like_the_operation) {
  // int64 min/max may be computed with integer arithmetic instead of compares: probe overflow.
  constexpr std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
  const std::vector<std::int64_t> values{lo, lo + 1, -2, -1, 0, 1, 2, hi - 1, hi, lo / 2, hi / 2};
  std::vector<std::int64_t> a, b;
  for (std::int64_t x : values)
    for (std::int64_t y : values) {
      a.push_back(x);
      b.push_back(y);
    }
  std::vector<std::int64_t> mn(a.size()), mx(a.size());
  cpu::combine(reduce::min<std::int64_t>{}, mn.data(), a.data(), b.data(), a.size());
  cpu::combine(reduce::max<std::int64_t>{}, mx.data(), a.data(), b.data(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(mn[i], std::min(a[i], b[i])) << a[i] << ", " << b[i];
    EXPECT_EQ(mx[i], std::max(a[i], b[i])) << a[i] << ", " << b[i];
  }
}

}  // namespace

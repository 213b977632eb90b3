// Shared by the reduction kernel tests: every dtype x op, random inputs with the awkward values
// mixed in, and the one-element-at-a-time reference the kernels must equal bit for bit.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::reduce::test {

#define MIMATRIX_TEST_OPS(T) reduce::sum<T>, reduce::prod<T>, reduce::min<T>, reduce::max<T>, reduce::avg<T>
/// Every operation over every element type, for TYPED_TEST_SUITE.
#define MIMATRIX_TEST_ALL_OPERATIONS                                                                      \
  MIMATRIX_TEST_OPS(std::int8_t), MIMATRIX_TEST_OPS(std::uint8_t), MIMATRIX_TEST_OPS(std::int32_t),         \
      MIMATRIX_TEST_OPS(std::int64_t), MIMATRIX_TEST_OPS(mimatrix::half), MIMATRIX_TEST_OPS(mimatrix::bfloat16), \
      MIMATRIX_TEST_OPS(float), MIMATRIX_TEST_OPS(double)

/// Sizes around the host kernels' 64-element block and the device kernels' 16-byte packs.
inline constexpr std::size_t sizes[] = {0, 1, 2, 7, 63, 64, 65, 127, 1000, 4099};

/// The bits of an element, so that NaN results compare too.
template <class T> auto bits_of(T v) {
  if constexpr (sizeof(T) == 1) return static_cast<std::uint8_t>(std::bit_cast<std::uint8_t>(v));
  else if constexpr (sizeof(T) == 2) return std::bit_cast<std::uint16_t>(v);
  else if constexpr (sizeof(T) == 4) return std::bit_cast<std::uint32_t>(v);
  else return std::bit_cast<std::uint64_t>(v);
}

/// Random elements: a quarter of them raw random bits (every exponent, NaN and infinity
/// included unless `with_nan` is false), the rest small values, with the extremes sprinkled in.
template <class T> std::vector<T> random_elements(std::mt19937_64& rng, std::size_t n, bool with_nan = true) {
  std::vector<T> v(n);
  using A = accumulator_t<T>;
  std::uniform_int_distribution<int> pick(0, 15);
  std::uniform_int_distribution<int> small(-100, 100);
  for (auto& x : v) {
    const int p = pick(rng);
    if (p < 4) {
      x = std::bit_cast<T>(static_cast<decltype(bits_of(T{}))>(rng()));
      if constexpr (std::is_floating_point_v<A>)
        if (!with_nan && std::isnan(static_cast<double>(widen<T>(x)))) x = narrow<T>(A(1));
    } else if (p == 4) {
      x = narrow<T>(std::numeric_limits<A>::max());
    } else if (p == 5) {
      x = narrow<T>(std::numeric_limits<A>::lowest());
    } else if (p == 6 && std::is_floating_point_v<A>) {
      x = narrow<T>(std::numeric_limits<A>::denorm_min() * A(small(rng)));
    } else {
      x = narrow<T>(static_cast<A>(small(rng)) / (std::is_floating_point_v<A> ? A(8) : A(1)));
    }
  }
  return v;
}

/// The reference: one element at a time, through dtype.hpp's widen and narrow.
template <operation Op> typename Op::value_type combine_one(const Op& op, typename Op::value_type a, typename Op::value_type b) {
  using T = typename Op::value_type;
  return narrow<T>(op(widen<T>(a), widen<T>(b)));
}
template <operation Op> typename Op::value_type finalize_one(const Op& op, typename Op::value_type v, int ranks) {
  using T = typename Op::value_type;
  if constexpr (Op::kind != op_kind::avg) return v;  // no pass at all, so NaN payloads stay too
  else return narrow<T>(op.finalize(widen<T>(v), ranks));
}

/// Bit for bit, except that a NaN result need only be a NaN: with two NaN operands, which
/// payload survives depends on the operand order the compiler picks (x86 keeps the first),
/// and GPUs return a canonical NaN.
template <class T> bool same_result(T got, T expected) {
  if constexpr (std::is_floating_point_v<accumulator_t<T>>)
    if (std::isnan(static_cast<double>(widen<T>(expected)))) return std::isnan(static_cast<double>(widen<T>(got)));
  return bits_of(got) == bits_of(expected);
}

}  // namespace mimatrix::reduce::test

// Host reduction kernels: element-wise combine and finalize, written so that g++ vectorizes
// them at -O2 as well as -O3 for every dtype (docs/reduction.md says how that is checked).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mimatrix/reduce/ops.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

// "No iteration depends on another", even when dst is a or b (distance 0 is no dependence):
// the vectorizer then needs no run-time alias check, which -O2's cost model never pays for.
#if defined(__clang__)
#define MIMATRIX_DETAIL_INDEPENDENT_ITERATIONS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define MIMATRIX_DETAIL_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define MIMATRIX_DETAIL_INDEPENDENT_ITERATIONS
#endif

namespace mimatrix::reduce::cpu {

namespace detail {

/// Elements a block. g++ -O2 ("very cheap" cost model) vectorizes only loops whose trip count
/// is a known multiple of the vector width, so the hot loops run over whole blocks; 64 is a
/// multiple of every width up to 512-bit vectors of bytes.
inline constexpr std::size_t block = 64;

template <class T>
inline constexpr bool is_float16 = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// Branch-free twins of dtype.hpp's conversions, bit-identical to them (cpu_test compares them
// over every half and a sweep of floats): a loop that calls them has no control flow, so it
// vectorizes. Each computes every candidate result and picks one with `select`.

/// c ? a : b with masks, not ?: -- g++ would sink a floating-point candidate into a branch
/// and then, as it might trap (-ftrapping-math), refuse to if-convert the loop.
inline std::uint32_t select(bool c, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(c);
  return (a & mask) | (b & ~mask);
}

inline float half_to_float(std::uint16_t h) {
  constexpr std::uint32_t rebias = (127u - 15u) << 23;  // exponent bias 15 -> 127
  constexpr std::uint32_t exponent_mask = 0x7c00u << 13;
  constexpr float subnormal_unit = 0x1p-24f;  // value of the lowest mantissa bit of a subnormal
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t magnitude = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t exponent = magnitude & exponent_mask;
  const std::uint32_t normal = magnitude + rebias;
  const std::uint32_t inf_nan = normal + rebias;  // exponent 31 -> 255, payload kept
  const std::uint32_t subnormal =
      std::bit_cast<std::uint32_t>(static_cast<float>(h & 0x3ffu) * subnormal_unit);  // exact
  const std::uint32_t bits = select(exponent == exponent_mask, inf_nan, select(exponent == 0, subnormal, normal));
  return std::bit_cast<float>(sign | bits);
}

inline std::uint16_t float_to_half(float f) {
  constexpr std::uint32_t infinity = 0x7f800000u;
  constexpr std::uint32_t overflow = 0x477ff000u;       // 65520: rounds to half's infinity
  constexpr std::uint32_t smallest_normal = 0x38800000u;  // 2^-14
  constexpr std::uint32_t rebias = (127u - 15u) << 23;
  constexpr std::uint32_t round_half_down = 0x0fffu;  // one less than half a half-ulp
  // Adding 0.5 puts a half-subnormal's mantissa in the low float bits, and the float add
  // rounds it to nearest even for us (the default rounding mode; DAZ/FTZ cannot change it).
  constexpr float subnormal_magic = 0.5f;
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  const std::uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);  // quiet, top payload bits kept
  const std::uint32_t normal = (ax - rebias + round_half_down + ((ax >> 13) & 1u)) >> 13;
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(std::bit_cast<float>(ax) + subnormal_magic) -
                                  std::bit_cast<std::uint32_t>(subnormal_magic);
  const std::uint32_t bits =
      select(ax > infinity, nan, select(ax >= overflow, 0x7c00u, select(ax < smallest_normal, subnormal, normal)));
  return static_cast<std::uint16_t>(sign | bits);
}

inline float bfloat16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t float_to_bfloat16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t nan = (x >> 16) | 0x40u;  // quiet
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;  // nearest even
  return static_cast<std::uint16_t>(select((x & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

/// widen/narrow of dtype.hpp, through the branch-free conversions for 16-bit floats.
template <element T> inline accumulator_t<T> load(T v) {
  if constexpr (std::is_same_v<T, half>) return half_to_float(v.bits);
  else if constexpr (std::is_same_v<T, bfloat16>) return bfloat16_to_float(v.bits);
  else return widen<T>(v);
}
template <element T> inline T store(accumulator_t<T> v) {
  T r{};
  if constexpr (std::is_same_v<T, half>) r.bits = float_to_half(v);
  else if constexpr (std::is_same_v<T, bfloat16>) r.bits = float_to_bfloat16(v);
  else r = narrow<T>(v);
  return r;
}

// The x86-64 baseline (SSE2) has no 64-bit compare (pcmpgtq is SSE4.2), so g++ leaves int64
// min/max scalar. Spelled as integer arithmetic they vectorize, and pick the same element.
#if defined(__x86_64__) && !defined(__SSE4_2__)
inline constexpr bool int64_compare_by_arithmetic = true;
#else
inline constexpr bool int64_compare_by_arithmetic = false;
#endif

/// All ones when a < b (signed), else zero: the sign of a - b, corrected for overflow.
inline std::uint64_t less_mask(std::int64_t a, std::int64_t b) {
  const auto x = static_cast<std::uint64_t>(a), y = static_cast<std::uint64_t>(b), d = x - y;
  return std::uint64_t{0} - ((d ^ ((x ^ y) & (d ^ x))) >> 63);
}

/// op(x, y) in the accumulator type.
template <operation Op>
inline typename Op::accumulator apply(const Op& op, typename Op::accumulator x, typename Op::accumulator y) {
  using A = typename Op::accumulator;
  if constexpr (int64_compare_by_arithmetic && std::is_same_v<A, std::int64_t> &&
                (Op::kind == op_kind::min || Op::kind == op_kind::max)) {
    // min keeps x unless y < x; max keeps x unless x < y (as ops.hpp does).
    const std::uint64_t take_y = Op::kind == op_kind::min ? less_mask(y, x) : less_mask(x, y);
    return static_cast<A>((static_cast<std::uint64_t>(y) & take_y) | (static_cast<std::uint64_t>(x) & ~take_y));
  } else {
    return op(x, y);
  }
}

/// op on one element pair, through the accumulator type.
template <operation Op>
inline typename Op::value_type combine_one(const Op& op, typename Op::value_type a, typename Op::value_type b) {
  using T = typename Op::value_type;
  return store<T>(apply(op, load<T>(a), load<T>(b)));
}

#if defined(__F16C__)
// With F16C the hardware converts 8 halves at once, exactly (round to nearest even, subnormals,
// quiet NaN with payload), so a half block goes float -> op -> half in three short passes.
inline constexpr std::size_t f16c_lanes = 8;
inline constexpr int f16c_nearest_even = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline void halves_to_floats(const half* src, float* dst) {
  for (std::size_t k = 0; k < block; k += f16c_lanes)
    _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k))));
}
inline void floats_to_halves(const float* src, half* dst) {
  for (std::size_t k = 0; k < block; k += f16c_lanes)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + k), f16c_nearest_even));
}

template <operation Op>
inline void combine_half_block(const Op& op, half* dst, const half* a, const half* b) {
  alignas(32) float x[block];
  alignas(32) float y[block];
  halves_to_floats(a, x);
  halves_to_floats(b, y);
  for (std::size_t k = 0; k < block; ++k) x[k] = op(x[k], y[k]);
  floats_to_halves(x, dst);
}
#endif

// Integer avg divides by a run-time rank count, and vectors have no integer division. For
// 32-bit and narrower integers a double quotient truncates to the exact integer quotient
// (|a| < 2^31, so a quotient just below an integer is never rounded up to it), and converts.
template <class A>
inline constexpr bool divides_through_double = std::is_integral_v<A> && sizeof(A) <= sizeof(std::int32_t);

/// op.finalize on one element, through the accumulator type.
template <operation Op>
inline typename Op::value_type finalize_one(const Op& op, typename Op::value_type v, int ranks) {
  using T = typename Op::value_type;
  using A = typename Op::accumulator;
  if constexpr (Op::kind == op_kind::avg && divides_through_double<A>)
    return static_cast<T>(static_cast<std::int32_t>(static_cast<double>(v) / static_cast<double>(ranks)));
  else
    return store<T>(op.finalize(load<T>(v), ranks));
}

}  // namespace detail

/// dst[i] = op(a[i], b[i]) for i < n. `dst` may be `a` or `b`; no other overlap.
/// Results are bit-identical to narrow(op(widen(a[i]), widen(b[i]))) element by element.
template <operation Op>
void combine(const Op& op, typename Op::value_type* dst, const typename Op::value_type* a,
             const typename Op::value_type* b, std::size_t n) {
  using T = typename Op::value_type;
  std::size_t i = 0;
  for (; i + detail::block <= n; i += detail::block) {
#if defined(__F16C__)
    if constexpr (std::is_same_v<T, half>) {
      detail::combine_half_block(op, dst + i, a + i, b + i);
      continue;
    }
#endif
    T* d = dst + i;
    const T* x = a + i;
    const T* y = b + i;
    MIMATRIX_DETAIL_INDEPENDENT_ITERATIONS
    for (std::size_t k = 0; k < detail::block; ++k) d[k] = detail::combine_one(op, x[k], y[k]);
  }
  for (; i < n; ++i) dst[i] = detail::combine_one(op, a[i], b[i]);  // the last partial block
}

/// data[i] = op.finalize(data[i], ranks): avg's division, a no-op (and no pass) for the others.
template <operation Op>
void finalize(const Op& op, typename Op::value_type* data, std::size_t n, int ranks) {
  if constexpr (Op::kind == op_kind::avg) {
    std::size_t i = 0;
    for (; i + detail::block <= n; i += detail::block) {
      auto* d = data + i;
      for (std::size_t k = 0; k < detail::block; ++k) d[k] = detail::finalize_one(op, d[k], ranks);
    }
    for (; i < n; ++i) data[i] = detail::finalize_one(op, data[i], ranks);
  }
}

}  // namespace mimatrix::reduce::cpu

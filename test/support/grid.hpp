// Test support for the collective grid: fresh random data per run, reference
// results, and the tolerance each element type is checked with.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::test {

/// One seed a test run, printed so that a failure can be replayed (MIMATRIX_SEED).
inline std::uint64_t run_seed() {
  static const std::uint64_t seed = [] {
    if (const char* s = std::getenv("MIMATRIX_SEED")) return static_cast<std::uint64_t>(std::strtoull(s, nullptr, 10));
    return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return seed;
}

/// Quick mode (sanitizer builds) keeps the grid's shape but drops its largest cases.
constexpr bool quick =
#if defined(MIMATRIX_TEST_QUICK)
    true;
#else
    false;
#endif

/// A build with the long tier (MIMATRIX_LONG_TESTS) widens the sweeps that its quick-tier
/// binaries run too: the verifier's world sizes, for one.
constexpr bool long_tier =
#if defined(MIMATRIX_TEST_LONG)
    true;
#else
    false;
#endif

/// How many world sizes a grid runs: every one from 1 to 16 (the ring's grid, the
/// reference), or a spread (the other algorithms', whose schedules the symbolic verifier
/// proves for every size: there the grid checks execution and arithmetic).
enum class grid_extent { every_size, spread };

/// The world sizes of a grid (quick mode: the smaller spread, odd, even and powers of two).
inline std::vector<int> grid_world_sizes(grid_extent extent = grid_extent::every_size) {
  if (quick) return {1, 2, 3, 4, 5, 8, 13, 16};
  if (extent == grid_extent::spread) return {1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 16};
  std::vector<int> sizes;
  for (int p = 1; p <= 16; ++p) sizes.push_back(p);
  return sizes;
}

/// The grid's counts for a group of p: edge cases around p, and large ones (`largest`
/// is left out when 0).
inline std::vector<std::size_t> grid_counts(int p, std::size_t largest) {
  std::vector<std::size_t> counts{0, 1, 2, 3, 7, std::size_t(p) - 1, std::size_t(p), std::size_t(p) + 1, 1000};
  if (!quick) counts.push_back(65537);
  if (!quick && largest) counts.push_back(largest);
  return counts;
}

/// splitmix64: fast, and good enough to make every element different.
struct random_stream {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

/// Values that keep every operation's result representable: small integers (their
/// arithmetic wraps anyway, exactly), floats near one for products.
template <class Op>
std::vector<typename Op::value_type> random_values(std::size_t n, std::uint64_t seed) {
  using T = typename Op::value_type;
  random_stream gen{seed * 0x2545f4914f6cdd1dull};
  std::vector<T> v(n);
  if constexpr (std::is_integral_v<T>) {
    const std::int64_t lo = std::is_signed_v<T> ? -100 : 0;
    for (auto& x : v) x = static_cast<T>(lo + static_cast<std::int64_t>(gen.next() % 201));
  } else {
    const bool product = Op::kind == reduce::op_kind::prod;
    for (auto& x : v) x = T(static_cast<float>(gen.uniform(product ? 0.8 : -1.0, product ? 1.25 : 1.0)));
  }
  return v;
}

template <class T> constexpr double epsilon() {
  if constexpr (std::is_same_v<T, half>) return 1.0 / 2048;
  else if constexpr (std::is_same_v<T, bfloat16>) return 1.0 / 256;
  else if constexpr (std::is_same_v<T, float>) return 1.0 / (1 << 23);
  else return 1.0 / (1ull << 52);
}

template <class T> double to_double(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) return static_cast<double>(static_cast<float>(v));
  else return static_cast<double>(v);
}

/// The reference reduction of every element over all ranks, and how far a correct
/// result may be from it: exact for integers, min and max; for floating-point sums and
/// products, about p rounding steps of the element type (each hop rounds). Computed
/// rank by rank, streaming through memory.
struct reference {
  std::vector<double> value;
  std::vector<double> tolerance;  // empty when every result must be exact
};

template <class Op>
reference reduce_reference(const std::vector<std::vector<typename Op::value_type>>& inputs) {
  using T = typename Op::value_type;
  const Op op{};
  const int p = static_cast<int>(inputs.size());
  const std::size_t n = inputs.empty() ? 0 : inputs[0].size();
  reference ref;
  ref.value.resize(n);
  if constexpr (std::is_integral_v<T>) {
    std::vector<accumulator_t<T>> acc(n);
    for (std::size_t e = 0; e < n; ++e) acc[e] = widen<T>(inputs[0][e]);
    for (int r = 1; r < p; ++r)
      for (std::size_t e = 0; e < n; ++e) acc[e] = op(acc[e], widen<T>(inputs[r][e]));
    for (std::size_t e = 0; e < n; ++e) ref.value[e] = static_cast<double>(narrow<T>(op.finalize(acc[e], p)));
  } else {
    constexpr auto kind = Op::kind;
    constexpr bool exact = kind == reduce::op_kind::min || kind == reduce::op_kind::max;
    std::vector<double>& acc = ref.value;
    std::vector<double> magnitude(exact ? 0 : n);
    for (std::size_t e = 0; e < n; ++e) acc[e] = to_double(inputs[0][e]);
    if (!exact)
      for (std::size_t e = 0; e < n; ++e) magnitude[e] = std::abs(acc[e]);
    for (int r = 1; r < p; ++r)
      for (std::size_t e = 0; e < n; ++e) {
        const double x = to_double(inputs[r][e]);
        if constexpr (kind == reduce::op_kind::sum || kind == reduce::op_kind::avg) {
          acc[e] += x;
          magnitude[e] += std::abs(x);
        } else if constexpr (kind == reduce::op_kind::prod) {
          acc[e] *= x;
        } else if constexpr (kind == reduce::op_kind::min) {
          acc[e] = std::min(acc[e], x);
        } else {
          acc[e] = std::max(acc[e], x);
        }
      }
    if constexpr (!exact) {
      const double steps = 2.0 * (p + 1) * epsilon<T>();
      ref.tolerance.resize(n);
      for (std::size_t e = 0; e < n; ++e) {
        if constexpr (kind == reduce::op_kind::prod) magnitude[e] = std::abs(acc[e]);
        if constexpr (kind == reduce::op_kind::avg) {
          acc[e] /= p;
          magnitude[e] /= p;
        }
        ref.tolerance[e] = steps * magnitude[e];
      }
    }
  }
  return ref;
}

/// Where `got` (elements [offset, offset + n) of the result) first misses the reference,
/// or npos.
template <class T>
std::size_t first_miss(const std::vector<T>& got, const reference& ref, std::size_t offset = 0) {
  for (std::size_t e = 0; e < got.size(); ++e) {
    const double d = std::abs(to_double(got[e]) - ref.value[offset + e]);
    if (ref.tolerance.empty() ? d != 0 : !(d <= ref.tolerance[offset + e])) return e;
  }
  return static_cast<std::size_t>(-1);
}

}  // namespace mimatrix::test

// Host reduction kernels. Loops run over fixed-size blocks so that the compiler
// vectorizes them at -O2 as well as -O3 (a known trip count needs no cost model).
#pragma once

#include <algorithm>
#include <cstddef>

#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::reduce::cpu {

namespace detail {
inline constexpr std::size_t block = 64;  // elements per vectorized block
}

/// dst[i] = op(a[i], b[i]) for i < n. `dst` may be `a` or `b`; no other overlap.
template <operation Op>
void combine(const Op& op, typename Op::value_type* dst, const typename Op::value_type* a,
             const typename Op::value_type* b, std::size_t n) {
  using T = typename Op::value_type;
  using A = typename Op::accumulator;
  std::size_t i = 0;
  for (; i + detail::block <= n; i += detail::block) {
    A x[detail::block];
    for (std::size_t k = 0; k < detail::block; ++k) x[k] = op(widen<T>(a[i + k]), widen<T>(b[i + k]));
    for (std::size_t k = 0; k < detail::block; ++k) dst[i + k] = narrow<T>(x[k]);
  }
  for (; i < n; ++i) dst[i] = narrow<T>(op(widen<T>(a[i]), widen<T>(b[i])));
}

/// data[i] = op.finalize(data[i], ranks): avg's division, a no-op for the others.
template <operation Op>
void finalize(const Op& op, typename Op::value_type* data, std::size_t n, int ranks) {
  using T = typename Op::value_type;
  if constexpr (Op::kind == op_kind::avg)
    for (std::size_t i = 0; i < n; ++i) data[i] = narrow<T>(op.finalize(widen<T>(data[i]), ranks));
}

}  // namespace mimatrix::reduce::cpu

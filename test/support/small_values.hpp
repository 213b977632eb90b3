// Integer-valued test data that every dtype holds exactly, and what each reduction of it
// gives: the collectives' exactness tests on host and device buffers share them.
#pragma once

#include <algorithm>
#include <cstddef>

#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::test {

/// Small integers (1 to 5): every dtype holds each input, and the sum, product and
/// average of a few ranks exactly (an integer average truncated), whatever the order.
inline int small_value(int rank, std::size_t i) { return 1 + int((i * 7 + std::size_t(rank) * 3) % 5); }

/// `op` over small_value(r, i) of ranks 0..p-1.
inline double reduced_small_values(reduce::op_kind op, int p, std::size_t i, bool integral) {
  double acc = small_value(0, i);
  for (int r = 1; r < p; ++r) {
    const double v = small_value(r, i);
    switch (op) {
      case reduce::op_kind::sum:
      case reduce::op_kind::avg: acc += v; break;
      case reduce::op_kind::prod: acc *= v; break;
      case reduce::op_kind::min: acc = std::min(acc, v); break;
      case reduce::op_kind::max: acc = std::max(acc, v); break;
    }
  }
  if (op != reduce::op_kind::avg) return acc;
  return integral ? double(static_cast<long long>(acc) / p) : acc / p;
}

}  // namespace mimatrix::test

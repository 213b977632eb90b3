// What the rooted collectives (reduce, gather, scatter) share: positions counted from
// the root, the binomial tree over them, and the group of one.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <vector>

#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::algorithm::detail {

/// p = 1: the result is the input; a reduce finalizes it once.
inline void build_rooted_single(schedule::builder& b) {
  const auto& d = b.desc();
  const schedule::region in{schedule::buffer::input, 0, d.input_bytes(0)};
  const schedule::region out{schedule::buffer::output, 0, d.output_bytes(0)};
  const auto copied = b.copy(in, out);
  if (schedule::reduces(d.kind)) b.finalize(out, {copied});
}

/// Positions [first, first + blocks) that are consecutive ranks too: their blocks are
/// one contiguous range of a buffer in rank order, starting at `rank`'s block.
struct rank_run {
  int first = 0;
  int rank = 0;
  int blocks = 0;
};

/// The binomial tree over positions v = (rank - root) mod p (MPICH's): v's parent is
/// v - lowbit(v), its children are v + m for m = lowbit(v)/2, ..., 2, 1 (the root's:
/// bit_ceil(p)/2, ..., 1) below p, and its subtree is the positions [v, v + extent(v)).
///
///   p = 6, root 0:   0 ─┬─ 4 ── 5        subtrees: 0: [0,6)  4: [4,6)
///                       ├─ 2 ── 3                  2: [2,4)  1, 3, 5: themselves
///                       └─ 1
///
/// @par Thread Safety
/// A plain value.
struct binomial_tree {
  int size = 1;
  int root = 0;
  int position = 0;  // this rank's

  binomial_tree(const schedule::descriptor& d, int rank)
      : size(d.size), root(d.root), position((rank - d.root + d.size) % d.size) {}

  int rank_at(int v) const { return (v + root) % size; }
  int span(int v) const { return v == 0 ? int(std::bit_ceil(unsigned(size))) : (v & -v); }
  int extent(int v) const { return std::min(span(v), size - v); }
  int parent() const { return position - span(position); }

  /// This rank's children, the largest subtree first.
  std::vector<int> children() const {
    std::vector<int> out;
    for (int m = span(position) / 2; m >= 1; m /= 2)
      if (position + m < size) out.push_back(position + m);
    return out;
  }

  /// Positions [lo, hi) in runs of consecutive ranks: one, or two where they wrap past
  /// rank p-1 (only a subtree hanging off the root can).
  std::vector<rank_run> runs(int lo, int hi) const {
    const int first = rank_at(lo), head = std::min(hi - lo, size - first);
    std::vector<rank_run> out{{lo, first, head}};
    if (head < hi - lo) out.push_back({lo + head, 0, hi - lo - head});
    return out;
  }
};

}  // namespace mimatrix::algorithm::detail

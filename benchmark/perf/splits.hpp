// The v-forms' split sizes (--skew): one deterministic uneven layout that mimatrix's
// programs and the baselines all compute, so that their tables time the same calls.
#pragma once

#include "report.hpp"

#include <cstddef>
#include <numeric>
#include <utility>
#include <vector>

namespace mimatrix::perf {

/// A rank's blocks, one a rank, back to back in rank order (c10d's split sizes), in elements.
struct blocks {
  std::vector<std::size_t> counts, displs;

  [[nodiscard]] std::size_t total() const { return std::accumulate(counts.begin(), counts.end(), std::size_t{0}); }
  /// Block b's {displacement, count}: the extent data.hpp's fill_blocks_at and check_blocks_at take.
  [[nodiscard]] std::pair<std::size_t, std::size_t> extent(std::size_t b) const { return {displs[b], counts[b]}; }
};

inline blocks back_to_back(std::vector<std::size_t> counts) {
  blocks b{std::move(counts), {}};
  std::size_t at = 0;
  for (std::size_t c : b.counts) {
    b.displs.push_back(at);
    at += c;
  }
  return b;
}

/// Rank `from`'s `total` elements over `nranks` blocks, block j in proportion to
/// 1 + skew * ((7 from + 3 j) % 5) / 4, rounded down, what rounding leaves one element each
/// to the first blocks. skew 0: even blocks (total / nranks each where nranks divides it).
inline std::vector<std::size_t> split(std::size_t total, int nranks, int from, double skew) {
  auto const n = static_cast<std::size_t>(nranks);
  std::vector<double> weight(n);
  double sum = 0;
  for (std::size_t j = 0; j < n; ++j) {
    weight[j] = 1.0 + skew * static_cast<double>((7 * static_cast<std::size_t>(from) + 3 * j) % 5) / 4.0;
    sum += weight[j];
  }
  std::vector<std::size_t> counts(n);
  std::size_t given = 0;
  for (std::size_t j = 0; j < n; ++j) {
    counts[j] = static_cast<std::size_t>(static_cast<double>(total) * weight[j] / sum);
    if (given + counts[j] > total) counts[j] = total - given;  // rounding up at the last bit
    given += counts[j];
  }
  for (std::size_t j = 0; given < total; j = (j + 1) % n, ++given) ++counts[j];
  return counts;
}

/// One rank's blocks in a v-form: what it sends and what it receives.
struct block_layout {
  blocks send, recv;
};

/// Rank `rank`'s layout in v-form `c` of `total` elements a rank (the size column's):
///  - alltoallv: it sends split(total, n, rank) and receives block i of rank i's split;
///  - allgatherv: rank j's block is split(total, n, 0)[j] (rank 0's alltoallv split), so
///    every output holds `total`; it sends its own block.
inline block_layout layout_of(collective c, std::size_t total, int nranks, int rank, double skew) {
  auto const r = static_cast<std::size_t>(rank);
  if (c == collective::allgatherv) {
    blocks all = back_to_back(split(total, nranks, 0, skew));
    return {back_to_back({all.counts[r]}), std::move(all)};
  }
  std::vector<std::size_t> from(static_cast<std::size_t>(nranks));
  for (int i = 0; i < nranks; ++i) from[static_cast<std::size_t>(i)] = split(total, nranks, i, skew)[r];
  return {back_to_back(split(total, nranks, rank, skew)), back_to_back(std::move(from))};
}

}  // namespace mimatrix::perf

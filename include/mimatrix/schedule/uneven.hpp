// The per-rank counts of MPI's v-forms (gatherv, scatterv, allgatherv, reduce_scatter_v,
// alltoallv): where each rank's block lies in the buffer that holds one block per rank.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace mimatrix::schedule {

/// Block j holds counts[j] elements from element displs[j] of its buffer. Empty displs:
/// the blocks lie back to back in rank order (c10d's split sizes).
struct blocks {
  std::vector<std::size_t> counts;
  std::vector<std::size_t> displs;

  std::size_t count(int j) const { return counts[std::size_t(j)]; }
  std::size_t displ(int j) const {
    if (!displs.empty()) return displs[std::size_t(j)];
    return std::accumulate(counts.begin(), counts.begin() + j, std::size_t(0));
  }
  /// The elements the buffer must hold: to the end of its last block.
  std::size_t extent() const {
    if (displs.empty()) return std::accumulate(counts.begin(), counts.end(), std::size_t(0));
    std::size_t end = 0;
    for (std::size_t j = 0; j < counts.size(); ++j) end = std::max(end, displs[j] + counts[j]);
    return end;
  }
  /// The same blocks with their displacements spelled out, so that displ() is O(1).
  blocks spelled() const {
    if (!displs.empty()) return *this;
    blocks b{counts, std::vector<std::size_t>(counts.size())};
    std::exclusive_scan(counts.begin(), counts.end(), b.displs.begin(), std::size_t(0));
    return b;
  }
  friend bool operator==(const blocks&, const blocks&) = default;
};

/// A v-form call as one rank sees it. `many` is the buffer with a block per rank:
/// allgatherv's and gatherv's output (block j from rank j), reduce_scatter_v's,
/// scatterv's and alltoallv's input (block j for rank j). `received` is alltoallv's
/// output (block j from rank j). Off the root, gatherv and scatterv know only their own
/// count: it is at their index, and the others' are 0.
struct uneven {
  blocks many;
  blocks received;  // alltoallv only
  /// What every rank of the call holds alike and must agree on, as a digest carried by
  /// every message: allgatherv's and reduce_scatter_v's counts. 0 where the ranks know
  /// different parts (a message's length then proves its two ends agree).
  std::uint64_t agreed = 0;

  friend bool operator==(const uneven&, const uneven&) = default;
};

/// A digest of per-rank counts (FNV-1a over their bytes, then mixed), never 0.
inline std::uint64_t counts_digest(const std::vector<std::size_t>& counts) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t c : counts)
    for (int b = 0; b < 8; ++b) h = (h ^ ((std::uint64_t(c) >> (8 * b)) & 0xff)) * 1099511628211ull;
  h ^= h >> 29;
  return h | 1;
}

/// Why `b` cannot describe a buffer of a group of `p` ranks: counts or displacements not
/// one per rank, or (`disjoint`, for a buffer the call writes) two blocks that overlap.
/// `what` names the argument ("recv_counts").
inline std::optional<std::string> blocks_problem(const blocks& b, int p, bool disjoint, const std::string& what) {
  if (b.counts.size() != std::size_t(p))
    return what + " holds " + std::to_string(b.counts.size()) + " counts for a group of " + std::to_string(p);
  if (!b.displs.empty() && b.displs.size() != std::size_t(p))
    return what + "' displacements hold " + std::to_string(b.displs.size()) + " entries for a group of " +
           std::to_string(p) + " (none: the blocks lie back to back)";
  if (!disjoint || b.displs.empty()) return std::nullopt;
  std::vector<int> order(static_cast<std::size_t>(p));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return b.displ(x) < b.displ(y); });
  int last = -1;  // the nonempty block that ends last so far
  std::size_t end = 0;
  for (int j : order) {
    if (b.count(j) == 0) continue;
    if (last >= 0 && b.displ(j) < end)
      return what + ": block " + std::to_string(j) + " [" + std::to_string(b.displ(j)) + ", +" +
             std::to_string(b.count(j)) + ") overlaps block " + std::to_string(last) + " [" +
             std::to_string(b.displ(last)) + ", +" + std::to_string(b.count(last)) +
             "); the blocks a call writes must not overlap";
    if (b.displ(j) + b.count(j) > end) {
      end = b.displ(j) + b.count(j);
      last = j;
    }
  }
  return std::nullopt;
}

}  // namespace mimatrix::schedule

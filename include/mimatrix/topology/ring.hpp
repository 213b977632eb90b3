// topology::ring: ranks on a directed ring, in rank order or in a given order (to
// follow the physical wiring, e.g. keep ring neighbours on the same switch).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::topology {

/// @par Thread Safety
/// Immutable after construction: safe to share between threads.
class ring {
 public:
  static constexpr std::string_view name = "ring";

  /// Ranks in rank order: 0 -> 1 -> ... -> p-1 -> 0.
  ring() = default;
  /// Ranks in the order given: order[k] is the rank at position k of the ring.
  explicit ring(std::vector<int> order) : order_(std::move(order)) {}

  /// Throws invalid_argument unless the order (if given) is a permutation of 0..size-1.
  void check(int size) const {
    if (size < 1) throw error(errc::invalid_argument, "topology::ring: a ring needs at least one rank, got " + std::to_string(size));
    if (order_.empty()) return;
    if (static_cast<int>(order_.size()) != size)
      throw error(errc::invalid_argument, "topology::ring: the order lists " + std::to_string(order_.size()) +
                                              " ranks but the group has " + std::to_string(size));
    std::vector<bool> seen(order_.size());
    for (int r : order_) {
      if (r < 0 || r >= size || seen[r])
        throw error(errc::invalid_argument, "topology::ring: the order is not a permutation of 0.." +
                                                std::to_string(size - 1) + " (rank " + std::to_string(r) + ")");
      seen[r] = true;
    }
  }

  /// The rank at ring position `position` (0 <= position < size).
  int rank_at(int position) const { return order_.empty() ? position : order_[position]; }

  /// The ring position of `rank`.
  int position_of(int rank) const {
    if (order_.empty()) return rank;
    for (int k = 0; k < static_cast<int>(order_.size()); ++k)
      if (order_[k] == rank) return k;
    return -1;
  }

  int next(int rank, int size) const { return rank_at((position_of(rank) + 1) % size); }
  int prev(int rank, int size) const { return rank_at((position_of(rank) + size - 1) % size); }

  const std::vector<int>& order() const { return order_; }

  /// The ring's order for `size` ranks, once check(size) has passed (topology::digest_of).
  std::uint64_t digest(int size) const {
    mimatrix::digest d;
    d.mix(name);
    for (int k = 0; k < size; ++k) d.mix(std::uint64_t(rank_at(k)));
    return d.value();
  }

 private:
  std::vector<int> order_;
};

}  // namespace mimatrix::topology

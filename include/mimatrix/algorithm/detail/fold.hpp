// Folding a group of any size onto a power of two (MPICH): with r = p - 2^floor(lg p),
// the first 2r positions pair up; the even one of each pair hands its data to the odd
// one and sits out until the result comes back.
#pragma once

#include <bit>
#include <string>
#include <string_view>
#include <vector>

#include "mimatrix/core/error.hpp"

namespace mimatrix::algorithm::detail {

/// Throws invalid_argument unless `order` is empty or a permutation of 0..size-1.
inline void check_order(const std::vector<int>& order, int size, std::string_view who) {
  if (order.empty()) return;
  if (static_cast<int>(order.size()) != size)
    throw error(errc::invalid_argument, std::string(who) + ": the rank mapping lists " + std::to_string(order.size()) +
                                            " ranks but the group has " + std::to_string(size));
  std::vector<bool> seen(order.size());
  for (int r : order) {
    if (r < 0 || r >= size || seen[std::size_t(r)])
      throw error(errc::invalid_argument, std::string(who) + ": the rank mapping is not a permutation of 0.." +
                                              std::to_string(size - 1) + " (rank " + std::to_string(r) + ")");
    seen[std::size_t(r)] = true;
  }
}

/// Which ranks form the power-of-two core and which are folded into it.
///
///   positions    0   1   2   3   4   5        p = 6, core 4, r = 2
///                 \─►│    \─►│   │   │         extras 0 and 2 fold into 1 and 3
///   core index       0       1   2   3
///
/// Positions are mapped to ranks by `order` (position k is rank order[k]; empty: k).
///
/// @par Thread Safety
/// Immutable after construction.
class fold {
 public:
  fold(int size, const std::vector<int>& order) : size_(size), core_size_(int(std::bit_floor(unsigned(size)))) {
    const int extras = size - core_size_;
    const auto at = [&](int position) { return order.empty() ? position : order[std::size_t(position)]; };
    core_.resize(std::size_t(core_size_));
    extra_.assign(std::size_t(core_size_), -1);
    index_.resize(std::size_t(size));
    for (int c = 0; c < core_size_; ++c) {
      core_[std::size_t(c)] = at(c < extras ? 2 * c + 1 : c + extras);
      index_[std::size_t(core_[std::size_t(c)])] = c;
      if (c < extras) {
        extra_[std::size_t(c)] = at(2 * c);
        index_[std::size_t(at(2 * c))] = -1 - c;
      }
    }
  }

  int size() const { return size_; }
  /// 2^floor(lg p): the ranks that run the power-of-two algorithm.
  int core_size() const { return core_size_; }
  /// The rank at core index c.
  int core_rank(int c) const { return core_[std::size_t(c)]; }
  /// The rank folded into core index c, or -1.
  int extra_rank(int c) const { return extra_[std::size_t(c)]; }
  bool is_extra(int rank) const { return index_[std::size_t(rank)] < 0; }
  /// A core rank's core index, or for an extra rank the index of the core rank it folds into.
  int index_of(int rank) const {
    const int i = index_[std::size_t(rank)];
    return i < 0 ? -1 - i : i;
  }
  /// lg(core size): the steps of recursive halving or doubling.
  int steps() const { return std::countr_zero(unsigned(core_size_)); }

 private:
  int size_;
  int core_size_;
  std::vector<int> core_, extra_, index_;  // index_[rank]: c for a core rank, -1-c for an extra
};

}  // namespace mimatrix::algorithm::detail

// The receives a fabric call posts into the caller's buffers, admitted to the provider in
// schedule order: at most `width` of them from the earliest one not yet done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mimatrix::transport::detail::fabric {

/// Providers bound their posted receives (rxm over tcp: 2048 an endpoint), so a call posts
/// at most `width` plain receives at once. Which ones is what matters: steps become ready
/// in no order their data comes in (halving-doubling's last doubling step may write its
/// region once the first halving step's sends are done, long before the doubling's first
/// step may), and places given in the order steps became ready went to receives whose
/// peers send only after this rank's earlier receives, held back for want of a place; the
/// peers, doing the same, waited for this rank (issue 53). Positions count the plain
/// receives in schedule order, which is the order of the algorithm's phases on every
/// rank, and a receive is admitted only within `width` of the earliest one not done, so
/// that one always is. Staged receives (recv_reduce) have their own window: their slots.
///
/// @par Thread Safety
/// One call's; used under the engine's lock like the rest of the call.
class receive_window {
 public:
  /// Plain receives posted at once, at most.
  static constexpr std::uint32_t width = 256;

  /// For a new call: no receives.
  void clear() {
    done_.clear();
    first_open_ = 0;
  }
  /// The next plain receive in schedule order; returns its position.
  std::uint32_t add() {
    done_.push_back(0);
    return static_cast<std::uint32_t>(done_.size() - 1);
  }
  /// Whether the receive at `position` may be posted now.
  bool admits(std::uint32_t position) const { return position < first_open_ + width; }
  /// The receive at `position` has ended; the window moves past the receives done.
  void finish(std::uint32_t position) {
    done_[position] = 1;
    while (first_open_ < done_.size() && done_[first_open_]) ++first_open_;
  }

 private:
  std::vector<std::uint8_t> done_;  // by position
  std::size_t first_open_ = 0;      // the earliest position not done
};

}  // namespace mimatrix::transport::detail::fabric

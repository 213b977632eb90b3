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
/// that one always is. A receive ready outside the window is held here, not retried every
/// round, and comes due once the window reaches it. Staged receives (recv_reduce) have
/// their own window: their slots.
///
/// @par Thread Safety
/// One call's; used under the engine's lock like the rest of the call.
class receive_window {
 public:
  /// Plain receives posted at once, at most.
  static constexpr std::uint32_t width = 256;

  /// For a new call: no receives.
  void clear() {
    steps_.clear();
    state_.clear();
    due_.clear();
    first_open_ = 0;
    holding_ = 0;
  }
  /// Step `id`, the next plain receive in schedule order; returns its position.
  std::uint32_t add(std::uint32_t id) {
    steps_.push_back(id);
    state_.push_back(open);
    return static_cast<std::uint32_t>(steps_.size() - 1);
  }
  /// Whether the receive at `position` may be posted now.
  bool admits(std::uint32_t position) const { return position < first_open_ + width; }
  /// The receive at `position`, ready but not admitted, waits here until the window reaches it.
  void hold(std::uint32_t position) {
    state_[position] = held;
    ++holding_;
  }
  /// The receive at `position` has ended; the window moves past the receives done, and
  /// those held that it now admits come due.
  void finish(std::uint32_t position) {
    state_[position] = done;
    const std::size_t before = first_open_ + width;
    while (first_open_ < state_.size() && state_[first_open_] == done) ++first_open_;
    for (std::size_t p = before; p < first_open_ + width && p < state_.size(); ++p)
      if (state_[p] == held) {
        state_[p] = open;
        --holding_;
        due_.push_back(steps_[p]);
      }
  }
  /// The steps held back that the window now admits, in schedule order: the caller posts
  /// them and clears the list.
  std::vector<std::uint32_t>& due() { return due_; }
  /// Receives held back now.
  std::size_t holding() const { return holding_; }
  /// The earliest plain receive not done (its step), or -1 when all are.
  std::int64_t earliest_open() const { return first_open_ < steps_.size() ? std::int64_t(steps_[first_open_]) : -1; }

 private:
  enum : std::uint8_t { open, held, done };
  std::vector<std::uint32_t> steps_;  // by position
  std::vector<std::uint8_t> state_;   // by position
  std::vector<std::uint32_t> due_;
  std::size_t first_open_ = 0;  // the earliest position not done
  std::size_t holding_ = 0;
};

}  // namespace mimatrix::transport::detail::fabric

// What groups whose calls are parts of one call share: once a part fails on this rank,
// the parts after it must not run on data that was never reduced. A part whose first
// message has not left yet fails instead, and tells its peers (step_executor::try_post).
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "mimatrix/core/error.hpp"

namespace mimatrix::transport {

/// @par Thread Safety
/// Any thread: progress threads of several groups mark and read it.
class shared_fate {
 public:
  /// The first failure is kept; later ones say nothing new.
  void mark(errc code, const std::string& why) {
    std::lock_guard lock(mutex_);
    if (failed_.load(std::memory_order_relaxed)) return;
    code_ = code;
    why_ = why;
    failed_.store(true, std::memory_order_release);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  /// Once failed(): what failed first (written once, before failed() turned true).
  errc code() const { return code_; }
  const std::string& why() const { return why_; }

 private:
  std::mutex mutex_;
  std::atomic<bool> failed_{false};
  errc code_ = errc::aborted;
  std::string why_;
};

}  // namespace mimatrix::transport

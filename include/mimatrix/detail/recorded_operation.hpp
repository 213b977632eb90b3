// A call whose end is recorded: wraps the transport's operation when the communicator has
// a call hook (or MIMATRIX_TIMELINE), so calls without one pay nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "mimatrix/call_record.hpp"
#include "mimatrix/core/log.hpp"
#include "mimatrix/core/operation.hpp"

namespace mimatrix::detail {

class recorded_operation final : public operation {
 public:
  /// `hooks` belong to the communicator, which outlives its calls.
  recorded_operation(std::unique_ptr<operation> inner, call_record record, const std::vector<call_hook>& hooks)
      : inner_(std::move(inner)), record_(std::move(record)), hooks_(hooks) {}

  bool test(std::error_code& ec) override {
    const bool done = inner_->test(ec);
    if (done) finish(ec);
    return done;
  }
  void wait(std::error_code& ec) override {
    inner_->wait(ec);
    finish(ec);
  }
  const std::string& message() const override { return inner_->message(); }
  int last_peer() const override { return inner_->last_peer(); }

 private:
  void finish(const std::error_code& ec) noexcept {
    if (std::exchange(finished_, true)) return;
    record_.end = std::chrono::steady_clock::now();
    record_.error = ec;
    record_.waited_on = inner_->last_peer();
    for (const call_hook& hook : hooks_) {
      try {
        hook(record_);
      } catch (const std::exception& e) {  // a hook must not turn a finished call into a failed one
        hook_threw(e.what());
      } catch (...) {
        hook_threw("an exception not derived from std::exception");
      }
    }
  }

  /// The process's first throwing hook always reaches stderr (a hook's bug is the user's
  /// to see); later ones are logged at MIMATRIX_DEBUG=WARN.
  static void hook_threw(const std::string& what) {
    static std::atomic<bool> told{false};
    const std::string line = "a call hook threw: " + what;
    if (!told.exchange(true) && !log_enabled(log_level::warn))
      std::fprintf(stderr, "mimatrix: %s (the call's result stands; further ones with MIMATRIX_DEBUG=WARN)\n",
                   line.c_str());
    else
      log(log_level::warn, line);
  }

  std::unique_ptr<operation> inner_;
  call_record record_;
  const std::vector<call_hook>& hooks_;
  bool finished_ = false;
};

}  // namespace mimatrix::detail

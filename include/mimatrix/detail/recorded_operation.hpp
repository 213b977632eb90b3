// A call whose end is recorded: wraps the transport's operation when the communicator has
// a call hook (or MIMATRIX_TIMELINE) or a flight record, so calls without pay nothing.
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
#include "mimatrix/detail/flight_recorder.hpp"

namespace mimatrix::detail {

class recorded_operation final : public operation {
 public:
  /// `hooks` and `flight` belong to the communicator, which outlives its calls. The call
  /// is in `flight`'s record from here (start_in_flight), its operation comes after
  /// (adopt): a launch that hangs or throws is recorded too.
  recorded_operation(call_record record, const std::vector<call_hook>& hooks, flight_recorder* flight)
      : record_(std::move(record)), hooks_(hooks), flight_(flight) {}
  ~recorded_operation() override {
    if (flight_ && !finished_) flight_->record().release(slot_);
  }

  /// Enters the call in the flight record.
  void start_in_flight(const flight_entry& e) {
    if (flight_) slot_ = flight_->record().start(e, &stall_);
  }
  /// The transport's operation, which notes where it stalls in the flight record.
  void adopt(std::unique_ptr<operation> inner) {
    inner_ = std::move(inner);
    if (flight_) inner_->watch_stalls(&stall_);
  }
  /// The launch threw `e`: the flight record says so.
  void launch_failed(const error& e) {
    finished_ = true;
    if (flight_) flight_->record().finish(slot_, e.code(), e.what());
  }

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
  void watch_stalls(flight_stall_note* note) override { inner_->watch_stalls(note); }

 private:
  void finish(const std::error_code& ec) noexcept {
    if (std::exchange(finished_, true)) return;
    if (flight_) {
      flight_->record().finish(slot_, ec, ec ? std::string_view(inner_->message()) : std::string_view());
      if (ec) flight_->call_failed(ec);
    }
    if (hooks_.empty()) return;
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

  flight_stall_note stall_;  // before inner_: the executor writes it until it is destroyed
  std::unique_ptr<operation> inner_;
  call_record record_;
  const std::vector<call_hook>& hooks_;
  flight_recorder* flight_;
  flight_record::slot slot_{};
  bool finished_ = false;
};

}  // namespace mimatrix::detail

// A call made of calls on other groups (detail/across_hosts.hpp): its parts start in
// order, and end as one request. A rank that cannot start a part refuses the rest on
// their groups, so that no peer waits out its deadline in a part this rank never made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/core/operation.hpp"
#include "mimatrix/detail/collectives_core.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::detail {

/// The requests of one composed call as one: done once every one is; its error is the
/// first one's that failed, in order.
class all_of final : public operation {
 public:
  /// `names[k]` says in its error what part k was, after `what`; `on_failure` runs once,
  /// at the first failure seen.
  all_of(std::vector<request> parts, std::vector<std::string> names, std::string what,
         std::function<void()> on_failure = {})
      : parts_(std::move(parts)), names_(std::move(names)), what_(std::move(what)), on_failure_(std::move(on_failure)) {}
  ~all_of() override {
    std::error_code ignored;
    all_of::wait(ignored);
  }

  bool test(std::error_code& ec) override {
    bool done = true;
    for (std::size_t k = 0; k < parts_.size(); ++k) done &= settle(k, false);
    ec = done ? first_failure() : std::error_code{};
    return done;
  }
  void wait(std::error_code& ec) override {
    for (std::size_t k = 0; k < parts_.size(); ++k) settle(k, true);
    ec = first_failure();
  }
  const std::string& message() const override { return message_; }

 private:
  /// Whether part k has ended; keeps its failure.
  bool settle(std::size_t k, bool block) {
    request& r = parts_[k];
    if (!r.valid()) return true;
    try {
      if (block)
        r.wait();
      else if (!r.test())
        return false;
    } catch (const error& e) {
      if (failures_.empty() && on_failure_) on_failure_();
      failures_.resize(parts_.size());
      // The request adds the code's message again.
      failures_[k] = {e.code(), what_ + ", " + names_[k] + ", failed (its group's ranks are named as in that group): " +
                                    e.reason()};
    }
    return true;
  }
  /// The failure of the earliest part that failed (the later ones follow from it), once all ended.
  std::error_code first_failure() {
    for (const auto& [code, why] : failures_)
      if (code) {
        message_ = why;
        return code;
      }
    return {};
  }

  std::vector<request> parts_;
  std::vector<std::string> names_;
  std::string what_;
  std::function<void()> on_failure_;
  std::vector<std::pair<std::error_code, std::string>> failures_;  // by part, once one failed
  std::string message_;
};

/// Starts a composed call's parts in order, each on its group. Once this rank refused the
/// call or could not start a part, it refuses every later part on its group
/// (collectives_core::refuse): the peers there fail at once, and each group's later calls
/// still pair up, where a part skipped would shift them all by one (a black-box test: the
/// flat call of an allreduce's tail waited out its deadline on every other rank).
///
/// @par Thread Safety
/// One thread, as the call it makes.
class composed_call {
 public:
  /// `what` leads every error: "rank R: an allreduce of N elements across H hosts".
  explicit composed_call(std::string what) : what_(std::move(what)) {}
  composed_call(composed_call&&) noexcept = default;
  composed_call& operator=(composed_call&&) = delete;
  ~composed_call() { settle_started(); }

  /// The call is refused before its parts: `why` says what was wrong with it. The first
  /// reason stands.
  void refuse(const std::string& why) {
    if (!failure_) failure_ = error(errc::invalid_argument, what_ + ": " + why);
  }
  bool refused() const { return failure_.has_value(); }

  /// Starts the part that `start` makes on `group` (as a `kind`, `name`d in errors), or,
  /// once the call is refused, refuses it there. A part that throws at its start has told
  /// its own peers (engine_core::start, collectives_core).
  template <class Start>
  void part(collectives_core& group, schedule::collective kind, std::string name, Start&& start) {
    if (!failure_) {
      try {
        started_.push_back(start());
        names_.push_back(std::move(name));
      } catch (const error& e) {
        failure_ = error(e.code(), what_ + ", " + name + ", could not start: " + e.reason());
      }
      return;
    }
    try {
      group.refuse(kind, failure_->reason());
    } catch (const error&) {  // NOLINT(bugprone-empty-catch): the first error is the one to report
    }
  }

  /// The parts as one request, `on_failure` run at the first failure. Once refused, throws
  /// the first reason, after the parts that started ended (they may read the buffers).
  request finish(std::function<void()> on_failure = {}) {
    if (failure_) {
      if (!started_.empty() && on_failure) on_failure();
      settle_started();
      throw *failure_;
    }
    const std::uint64_t sequence = started_.empty() ? 0 : started_.front().sequence();
    return request(std::make_unique<all_of>(std::move(started_), std::move(names_), what_, std::move(on_failure)),
                   sequence);
  }

 private:
  /// Waits for the parts started, quietly: the refusal is the error to report.
  void settle_started() {
    for (request& r : started_) {
      std::error_code ignored;
      r.wait(ignored);
    }
    started_.clear();
  }

  std::string what_;
  std::vector<request> started_;
  std::vector<std::string> names_;
  std::optional<error> failure_;
};

}  // namespace mimatrix::detail

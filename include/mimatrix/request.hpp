// request: the handle a non-blocking collective returns. Progress happens inside
// test() and wait(), as in MPI; a request that goes out of scope waits first, so
// no peer can still be reading the caller's buffers, and reports a failure on stderr.
// A failed request keeps its error: every later wait() or test() reports it again.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "mimatrix/core/error.hpp"
#include "mimatrix/core/operation.hpp"

namespace mimatrix {

/// @par Thread Safety
/// A request is used by one thread at a time.
class [[nodiscard]] request {
 public:
  request() = default;
  /// `sequence`: the call's number on its communicator (sequence()).
  /// `observer` (the flight record) hears of the call's end.
  request(std::unique_ptr<detail::operation> op, std::uint64_t sequence, detail::call_observer* observer = nullptr)
      : op_(op.release()), sequence_(sequence), observer_(observer) {}
  request(request&& other) noexcept
      : op_(std::move(other.op_)),
        sequence_(other.sequence_),
        observer_(other.observer_),
        failed_(std::exchange(other.failed_, {})),
        last_message_(std::move(other.last_message_)) {}
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      finish_quietly();
      op_ = std::move(other.op_);
      sequence_ = other.sequence_;
      observer_ = other.observer_;
      failed_ = std::exchange(other.failed_, {});
      last_message_ = std::move(other.last_message_);
    }
    return *this;
  }
  ~request() { finish_quietly(); }

  /// True when there is an operation that has not been waited for (after its wait or a
  /// test that saw it end: false, failed or not).
  bool valid() const { return op_ != nullptr; }

  /// The call's sequence number on its communicator, alike on every rank (as c10d's
  /// Work::getSequencenumber); it stays after wait(). A call composed across hosts
  /// reports its first part's, on the host's group. 0 for a default-made request. A p2p
  /// batch's is this rank's own count of its batches, which is not alike across ranks
  /// (batches meet by pair epochs, p2p.hpp).
  std::uint64_t sequence() const { return sequence_; }

  /// Progresses without blocking; true when complete. Throws `mimatrix::error` if it failed,
  /// and again at every later call.
  [[nodiscard]] bool test() {
    std::error_code ec;
    const bool done = test(ec);
    if (ec) throw error(ec, last_message_);
    return done;
  }
  [[nodiscard]] bool test(std::error_code& ec) {
    ec = failed_;
    if (!op_) return true;
    if (!detail::test_operation(*op_, ec)) return false;
    release(ec);
    return true;
  }

  /// Blocks until complete. Throws `mimatrix::error` if it failed, and again at every
  /// later call: a caller that waits twice never reads a failed call as done.
  void wait() {
    std::error_code ec;
    wait(ec);
    if (ec) throw error(ec, last_message_);
  }
  void wait(std::error_code& ec) {
    ec = failed_;
    if (!op_) return;
    detail::wait_operation(*op_, ec);
    release(ec);
  }

 private:
  void release(const std::error_code& ec) {
    if (observer_) observer_->call_ended(sequence_, ec, *op_);
    if (ec) last_message_ = detail::message_of(*op_);
    failed_ = ec;
    op_.reset();
  }
  /// Waits for a request dropped unfinished; its error has no one to go to, so it goes to
  /// stderr, always: a failed call must never pass unseen.
  void finish_quietly() noexcept {
    if (!op_) return;
    std::error_code ec;
    detail::wait_operation(*op_, ec);
    if (observer_) observer_->call_ended(sequence_, ec, *op_);
    if (ec) {
      const std::string line = "mimatrix WARN a request dropped without wait() failed: " + detail::message_of(*op_) + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
    }
    op_.reset();
  }

  std::unique_ptr<detail::operation, detail::operation_deleter> op_;  // out of line: operation.hpp
  std::uint64_t sequence_ = 0;
  detail::call_observer* observer_ = nullptr;  // the communicator's, which outlives its calls
  std::error_code failed_;  // kept: reported by every later wait() and test()
  std::string last_message_;
};

}  // namespace mimatrix

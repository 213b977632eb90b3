// What a transport runs for one collective call, as a request drives it: the seam
// between the collectives above and the transports below.
#pragma once

#include <cstdint>
#include <string>
#include <system_error>

#include "mimatrix/core/config.hpp"

namespace mimatrix {

namespace transport {
struct stall_note;
}

namespace detail {
class operation;

/// Told of each call's end by its request (the flight record): a virtual call only where
/// one watches.
class call_observer {
 public:
  /// Call `sequence` ended with `ec` (its message in `op`), seen by test() or wait().
  virtual void call_ended(std::uint64_t sequence, const std::error_code& ec, const operation& op) noexcept = 0;

 protected:
  ~call_observer() = default;
};

/// What a transport runs for one collective call.
class operation {
 public:
  virtual ~operation() = default;
  /// Makes whatever progress is possible without blocking; true once finished
  /// (successfully or not: then `ec` holds the error and `message()` says why).
  virtual bool test(std::error_code& ec) = 0;
  /// Blocks until finished or failed (a deadline bounds every wait).
  virtual void wait(std::error_code& ec) = 0;
  virtual const std::string& message() const = 0;
  /// The peer whose data came last (the one the call waited on longest); -1 if none.
  virtual int last_peer() const { return -1; }
  /// Where the call stalls goes to `note` from now on (the flight record's; it outlives
  /// the operation). An operation that cannot tell ignores it.
  virtual void watch_stalls(transport::stall_note* note) { (void)note; }
};

/// What a request calls of its operation, out of line with separate compilation. Inline,
/// a user's unit that saw the executor's classes (transport/inproc.hpp, in mimatrix.hpp)
/// had g++ devirtualize the calls speculatively and emit the executor with them: 80 KB of
/// code and 3.7 s more to compile one typed call (issue 53 item 6).
MIMATRIX_DECL bool test_operation(operation& op, std::error_code& ec);
MIMATRIX_DECL void wait_operation(operation& op, std::error_code& ec);
MIMATRIX_DECL const std::string& message_of(const operation& op);
struct operation_deleter {
  MIMATRIX_DECL void operator()(operation* op) const noexcept;
};
}  // namespace detail

}  // namespace mimatrix

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/core/impl/operation.ipp"
#endif

// What a transport runs for one collective call, as a request drives it: the seam
// between the collectives above and the transports below.
#pragma once

#include <string>
#include <system_error>

namespace mimatrix {

namespace detail {
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
};
}  // namespace detail

}  // namespace mimatrix

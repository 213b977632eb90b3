// The step executor's per-call state: a count of unfinished dependencies and a status
// byte a step, the lists of steps ready, refused and waiting for flags, and the call's
// clock.
#pragma once

#include <chrono>
#include <string>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::transport {

/// One value a step of a call: step i's at [i * stride]. Its own array by default; a
/// simulator of thousands of ranks lends each rank a column of one table laid out step by
/// step (`lend`), so that ranks that run in step touch the same cache lines instead of
/// one line each, and fills the table itself, step by step (strided writes, rank by rank,
/// would each miss the cache).
template <class T>
class step_column {
 public:
  /// n entries of `value`, in its own array.
  void reset(std::size_t n, T value) {
    own_.assign(n, value);
    data_ = own_.data();
    stride_ = 1;
    size_ = n;
    lent_ = false;
  }
  /// n entries at data[i * stride], set by the lender for one call (the executor leaves
  /// them as they are); the table must outlive the call.
  void lend(T* data, std::size_t stride, std::size_t n) {
    own_ = {};
    data_ = data;
    stride_ = stride;
    size_ = n;
    lent_ = true;
  }
  bool lent() const { return lent_; }

  T& operator[](std::size_t i) { return data_[i * stride_]; }
  const T& operator[](std::size_t i) const { return data_[i * stride_]; }
  const T* address(std::size_t i) const { return data_ + i * stride_; }
  std::size_t size() const { return size_; }

 private:
  T* data_ = nullptr;  // first: what every access reads
  std::size_t stride_ = 1;
  std::size_t size_ = 0;
  bool lent_ = false;
  std::vector<T> own_;
};

/// A call's bookkeeping. A transport may keep one across calls (step_executor takes and
/// returns it) so that the steady state allocates nothing.
struct step_bookkeeping {
  struct status {  // one byte: a simulator holds one a step for thousands of ranks
    bool ready : 1 = false;    // its dependencies are done
    bool posted : 1 = false;   // the transport has it and it has not ended
    bool queued : 1 = false;   // refused by back-pressure; retried in order
    bool arrived : 1 = false;  // a receive's data came before the step was ready
    bool done : 1 = false;
  };
  static_assert(sizeof(status) == 1);
  step_column<std::uint32_t> pending;  // unfinished dependencies, per step
  step_column<status> steps;
  std::vector<schedule::step_id> ready, queued, flag_waits;
  std::vector<std::uint32_t> flags;                         // flags arrived, by tag
  std::vector<std::pair<std::uint32_t, int>> flag_sources;  // (tag, writer) of each flag
  std::vector<schedule::step_id> unstaged;  // ready, but the input they read is not on the host yet

  /// The call's clock: read only by a call that waits (step_executor::idle), so it is kept
  /// here, off the executor's object, which every round reads.
  struct call_clock {
    std::chrono::steady_clock::time_point deadline, probe_at, ended_check_at;
    bool started = false;
    bool probed = false;  // the liveness probe has run
    std::string silent_but_running;  // peers that did not answer it, alive on this host
  } clock;
};

}  // namespace mimatrix::transport

// communicator: a group of ranks bound to one transport endpoint, with the settings
// and the call sequence numbers that its collectives share.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>

#include "mimatrix/core/options.hpp"
#include "mimatrix/detail/plan_cache.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// @par Thread Safety
/// Used by one thread at a time (its progress thread, if set, is its own business).
/// Every rank must start the collectives of a communicator in the same order, as with MPI
/// and NCCL; they may be waited for in any order.
template <transport::backend Transport>
class communicator {
 public:
  /// Builds the transport endpoint from `args` (for inproc: the world and the rank).
  template <class... Args>
    requires std::constructible_from<Transport, Args...>
  explicit communicator(Args&&... args)
      : transport_(std::forward<Args>(args)...), options_(options::from_environment()) {
    set_progress(options_.progress);
  }

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }

  Transport& transport() { return transport_; }
  const Transport& transport() const { return transport_; }
  const options& settings() const { return options_; }
  void set_timeout(std::chrono::milliseconds timeout) { options_.timeout = timeout; }

  /// Who advances calls in flight (default: MIMATRIX_PROGRESS, else the caller). With
  /// progress_mode::thread, a thread of this communicator drives every started call while
  /// the caller computes; test() and wait() still advance them too.
  void set_progress(progress_mode mode) {
    options_.progress = mode;
    if constexpr (transport::has_progress_engine<Transport>) transport_.progress().set_mode(mode);
  }

  /// The sequence number of the next call; every rank numbers its calls alike.
  std::uint64_t next_sequence() { return sequence_++; }

  /// The schedules its collectives built, least recently used evicted first.
  detail::plan_cache& plans() { return plans_; }
  const detail::plan_cache& plans() const { return plans_; }

 private:
  Transport transport_;
  options options_;
  std::uint64_t sequence_ = 0;
  detail::plan_cache plans_;
};

}  // namespace mimatrix

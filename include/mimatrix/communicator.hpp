// communicator: a group of ranks bound to one transport endpoint, with the settings
// and the call sequence numbers that its collectives share.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

#include "mimatrix/core/error.hpp"
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

  /// The sequence number of the next call; every rank numbers its calls alike. Throws
  /// `invalid_argument` when another thread still has calls in flight here: two threads
  /// starting calls on one communicator would number them in an order the peers cannot
  /// share, and silently pair the wrong buffers when the calls look alike.
  std::uint64_t next_sequence() {
    claim_for_this_thread();
    return sequence_++;
  }

  /// The schedules its collectives built, least recently used evicted first.
  detail::plan_cache& plans() { return plans_; }
  const detail::plan_cache& plans() const { return plans_; }

 private:
  /// Calls in flight belong to the thread that started them; once they are done, any
  /// thread may start the next (handing a communicator over is allowed).
  void claim_for_this_thread() {
    if constexpr (transport::has_progress_engine<Transport>) {
      const auto me = std::this_thread::get_id();
      const auto owner = owner_.load(std::memory_order_relaxed);
      if (owner == me) return;
      if (owner != std::thread::id{} && transport_.progress().in_flight() > 0)
        throw error(errc::invalid_argument,
                    "rank " + std::to_string(rank()) + ": a second thread started a collective on this communicator "
                    "while calls another thread started are in flight; use one communicator per thread "
                    "(calls of one communicator must start in the same order on every rank)");
      owner_.store(me, std::memory_order_relaxed);
    }
  }

  Transport transport_;
  options options_;
  std::uint64_t sequence_ = 0;
  detail::plan_cache plans_;
  std::atomic<std::thread::id> owner_{};
};

}  // namespace mimatrix

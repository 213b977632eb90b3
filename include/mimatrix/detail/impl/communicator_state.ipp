// communicator_state's definitions: in every unit when header-only, once with separate
// compilation.
#pragma once

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "mimatrix/algorithm/selection.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/log.hpp"
#include "mimatrix/detail/communicator_state.hpp"
#include "mimatrix/detail/plan_cache.hpp"
#include "mimatrix/detail/flight_recorder.hpp"
#include "mimatrix/detail/flight_signal.hpp"
#include "mimatrix/detail/timeline.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::detail {

struct communicator_state::calls {
  plan_cache plans;
  std::atomic<std::thread::id> owner{};
};

MIMATRIX_DECL communicator_state::communicator_state(int rank) : calls_(std::make_unique<calls>()) {
  try {
    options_ = options::from_environment();
    (void)algorithm::selection::from_environment();  // a bad MIMATRIX_ALGO fails here, not at a first call
    flight_signal_ = flight_signal_from_environment();
  } catch (const error& e) {
    throw error(e.code(), "rank " + std::to_string(rank) + ": " + e.reason());
  }
}

MIMATRIX_DECL communicator_state::~communicator_state() = default;

// Calls in flight belong to the thread that started them; once they are done, any thread
// may start the next (handing a communicator over is allowed). Two threads starting calls
// on one communicator would number them in an order the peers cannot share, and silently
// pair the wrong buffers when the calls look alike.
MIMATRIX_DECL std::uint64_t communicator_state::take_sequence(int rank, transport::progress_engine* progress) {
  if (grouping_)
    throw error(errc::invalid_argument,
                "rank " + std::to_string(rank) + ": a collective inside group_start()/group_end(); groups hold "
                "send and recv only (collectives in groups are not yet supported): call it before group_start() "
                "or after group_end()");
  claim_calls(rank, progress);
  if (options_.progress != announced_progress_) announce_progress(rank);
  return sequence_++;
}

MIMATRIX_DECL communicator_state::batch_numbers communicator_state::take_batch(int rank, int size,
                                                                               transport::progress_engine* progress,
                                                                               std::span<const int> peers) {
  claim_calls(rank, progress);
  if (epochs_.size() < std::size_t(size)) epochs_.resize(std::size_t(size), 0);
  batch_numbers n{batches_++, {}};
  n.epochs.reserve(peers.size());
  for (int peer : peers) n.epochs.emplace_back(peer, epochs_[std::size_t(peer)]++);
  return n;
}

MIMATRIX_DECL void communicator_state::claim_calls(int rank, transport::progress_engine* progress) {
  if (progress) {
    const auto me = std::this_thread::get_id();
    const auto owner = calls_->owner.load(std::memory_order_relaxed);
    if (owner != me) {
      if (owner != std::thread::id{} && progress->in_flight() > 0)
        throw error(errc::invalid_argument,
                    "rank " + std::to_string(rank) + ": a second thread started a collective on this communicator "
                    "while calls another thread started are in flight; use one communicator per thread "
                    "(calls of one communicator must start in the same order on every rank)");
      calls_->owner.store(me, std::memory_order_relaxed);
    }
  }
}

// Said at the first call and at the first after a change: set_progress often follows the
// constructor at once, so the mode at opening is not the one calls run under.
MIMATRIX_DECL void communicator_state::announce_progress(int rank) {
  announced_progress_ = options_.progress;
  if (log_enabled(log_level::info))
    log(log_level::info, "rank " + std::to_string(rank) + ": calls from #" + std::to_string(sequence_) +
                             " on run with progress " +
                             (options_.progress == progress_mode::thread ? "thread" : "caller"));
}

MIMATRIX_DECL plan_cache& communicator_state::plans() { return calls_->plans; }
MIMATRIX_DECL const plan_cache& communicator_state::plans() const { return calls_->plans; }

MIMATRIX_DECL void communicator_state::opened(int rank, int size, const std::string& transport) {
  if (log_enabled(log_level::info))
    log(log_level::info, "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": communicator over " +
                             transport + " opened (timeout " + std::to_string(options_.timeout.count()) +
                             " ms; the progress mode is said at the first call)");
}

MIMATRIX_DECL void communicator_state::open_timeline(const std::string& group, int world_rank) {
  if (const char* pattern = std::getenv("MIMATRIX_TIMELINE"); pattern && *pattern) {
    const timeline_member who{group, world_rank};
    auto file = std::make_shared<timeline_file>(timeline_path(pattern, who), who);
    hooks_.push_back([file](const call_record& r) { file->write(r); });
  }
}

MIMATRIX_DECL void communicator_state::open_flight_record(const std::string& group, int world_rank, int rank,
                                                          int size) {
  if (options_.flight_record == 0) return;
  flight_ = std::make_unique<flight_recorder>(options_.flight_record, flight_member{group, world_rank, rank, size},
                                              flight_signal_);
}

MIMATRIX_DECL std::string communicator_state::dump_flight_record(const std::string& path, int rank) const {
  if (!flight_)
    throw error(errc::invalid_argument, "rank " + std::to_string(rank) +
                                            ": dump_flight_record: the flight record is off (MIMATRIX_FLIGHT_RECORD=0)");
  return flight_->dump(path, "request");
}

MIMATRIX_DECL void communicator_state::closing(int rank, int size) const {
  if (log_enabled(log_level::info))
    log(log_level::info, "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": communicator closing after " +
                             std::to_string(sequence_) + " call(s)");
}

MIMATRIX_DECL void set_progress_mode(transport::progress_engine& progress, progress_mode mode) {
  progress.set_mode(mode);
}

}  // namespace mimatrix::detail

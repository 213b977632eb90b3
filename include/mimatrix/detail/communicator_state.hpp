// What a communicator keeps besides its transport: its settings, the numbering of its
// calls and the plans its collectives built. Plain code, the same for every transport,
// so that separate compilation compiles it once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mimatrix/call_record.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/transport/fwd.hpp"

namespace mimatrix::detail {

class plan_cache;
class flight_recorder;

/// @par Thread Safety
/// As its communicator: one thread at a time.
class communicator_state {
 public:
  /// Settings from the environment (options::from_environment); a malformed one is an
  /// `invalid_argument` naming rank `rank`.
  MIMATRIX_DECL explicit communicator_state(int rank);
  MIMATRIX_DECL ~communicator_state();
  communicator_state(const communicator_state&) = delete;
  communicator_state& operator=(const communicator_state&) = delete;

  options& settings() { return options_; }
  const options& settings() const { return options_; }

  /// The sequence number the next call will take; reading it changes nothing.
  std::uint64_t next_sequence() const { return sequence_; }
  /// Takes the sequence number of a call rank `rank` starts, whose transport's calls in
  /// flight are on `progress` (null: it has no progress engine). Throws `invalid_argument`
  /// when another thread still has calls in flight there: two threads starting calls on
  /// one communicator would number them in an order the peers cannot share.
  /// Throws `invalid_argument` inside group_start()/group_end(), which hold p2p only for now.
  MIMATRIX_DECL std::uint64_t take_sequence(int rank, transport::progress_engine* progress);

  /// The numbers of a p2p batch: `local`, this rank's own count of batches (it names the
  /// batch in errors; other ranks count theirs), and the pair epoch of each peer it names:
  /// this rank's k-th batch naming peer q meets q's k-th batch naming this rank.
  struct batch_numbers {
    std::uint64_t local = 0;
    std::vector<std::pair<int, std::uint64_t>> epochs;  // (peer, epoch), as `peers` lists them
  };
  /// Takes the numbers of a batch rank `rank` of `size` starts with distinct `peers` (not
  /// itself), checking the starting thread as take_sequence() does. The collectives'
  /// sequence is not touched: next_sequence() is the same after it.
  MIMATRIX_DECL batch_numbers take_batch(int rank, int size, transport::progress_engine* progress,
                                         std::span<const int> peers);
  /// Inside group_start()/group_end() (p2p_core): collectives are refused until it ends.
  void set_grouping(bool on) { grouping_ = on; }
  bool grouping() const { return grouping_; }
  /// The history call `sequence`'s signature carries (signature::history); `shape` is
  /// what of a call with a root the ranks must agree on (its root and count, folded to 16
  /// bits, never 0; 0 for other calls), folded in for the calls after it. The fold is a
  /// bijection of the history for each shape, so ranks whose histories once differed stay
  /// apart: every later call that moves data between them fails with `mismatch`.
  std::uint16_t take_history(std::uint16_t shape, std::uint64_t sequence) {
    const std::uint16_t before = history_;
    if (shape) {
      history_ = static_cast<std::uint16_t>(((history_ << 5) | (history_ >> 11)) ^ shape);
      folded_ = {sequence, before};
    }
    return before;
  }
  /// Rooted call `sequence` failed here: every rank was told, so its shape leaves the
  /// history (over shm the next call runs). Only while it is the last folded in: of rooted
  /// calls in flight together, an earlier one's failure leaves the later ones' shapes, and
  /// the calls after them fail as their histories say.
  void forget_root(std::uint64_t sequence) {
    if (folded_ && folded_->first == sequence) history_ = folded_->second;
    folded_.reset();
  }

  MIMATRIX_DECL plan_cache& plans();
  MIMATRIX_DECL const plan_cache& plans() const;

  /// Hooks every finished call's record reaches (communicator::on_call, the timeline).
  void add_call_hook(call_hook hook) { hooks_.push_back(std::move(hook)); }
  const std::vector<call_hook>& call_hooks() const { return hooks_; }

  /// The communicator is up as rank `rank` of `size` over `transport`: says so at
  /// MIMATRIX_DEBUG=INFO.
  MIMATRIX_DECL void opened(int rank, int size, const std::string& transport);
  /// Opens the timeline MIMATRIX_TIMELINE names, if it does, for the communicator of group
  /// `group` (as its transport names it) in the process of world rank `world_rank`.
  MIMATRIX_DECL void open_timeline(const std::string& group, int world_rank);
  /// Opens the flight record (MIMATRIX_FLIGHT_RECORD; detail/flight_recorder.hpp) of the
  /// communicator of group `group`, rank `rank` of `size`, in the process of world rank
  /// `world_rank`; none when the setting is 0.
  MIMATRIX_DECL void open_flight_record(const std::string& group, int world_rank, int rank, int size);
  /// Writes the flight record to `path` (empty: the default path) and returns the path;
  /// throws `invalid_argument` naming rank `rank` when it is off or cannot be written.
  MIMATRIX_DECL std::string dump_flight_record(const std::string& path, int rank) const;
  /// The flight record; null when off.
  flight_recorder* flight() const { return flight_.get(); }
  /// Says so at MIMATRIX_DEBUG=INFO.
  MIMATRIX_DECL void closing(int rank, int size) const;

  /// Expires with this state, so that a collectives object kept past its communicator
  /// refuses its calls (refuse_if_destroyed) instead of reading freed memory.
  std::weak_ptr<const void> liveness() const { return alive_; }

 private:
  struct calls;  // the plans and the thread whose calls are in flight
  /// Says at MIMATRIX_DEBUG=INFO which progress mode calls run under from now on.
  MIMATRIX_DECL void announce_progress(int rank);
  /// The check both numberings make: calls in flight belong to the thread that started them.
  MIMATRIX_DECL void claim_calls(int rank, transport::progress_engine* progress);

  options options_;
  std::uint64_t sequence_ = 0;
  std::uint16_t history_ = 0;
  std::uint64_t batches_ = 0;          // p2p batches started
  std::vector<std::uint64_t> epochs_;  // by peer: batches started that name it
  bool grouping_ = false;
  std::optional<std::pair<std::uint64_t, std::uint16_t>> folded_;  // the last broadcast folded in, and the history before
  std::optional<progress_mode> announced_progress_;  // the mode last said; none before the first call
  std::unique_ptr<calls> calls_;
  std::vector<call_hook> hooks_;
  int flight_signal_ = 0;  // MIMATRIX_FLIGHT_RECORD_SIGNAL, checked at construction
  std::unique_ptr<flight_recorder> flight_;
  std::shared_ptr<const int> alive_ = std::make_shared<const int>(0);
};

/// Throws `invalid_argument` naming rank `rank` and the `call` when the communicator that
/// `alive` came from (communicator_state::liveness) is gone.
inline void refuse_if_destroyed(const std::weak_ptr<const void>& alive, int rank, std::string_view call) {
  if (alive.expired())
    throw error(errc::invalid_argument,
                "rank " + std::to_string(rank) + ": " + std::string(call) +
                    " on a communicator that has been destroyed: a collective object must not outlive the "
                    "communicator it was made on");
}

/// `progress.set_mode(mode)`, for headers that only declare progress_engine.
MIMATRIX_DECL void set_progress_mode(transport::progress_engine& progress, progress_mode mode);

}  // namespace mimatrix::detail

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/detail/impl/communicator_state.ipp"
#endif

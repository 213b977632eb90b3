// The in-process pair board: where the two sides of a pair-batch (rank a's k-th p2p batch
// naming b, and b's k-th naming a) leave their manifests. Threads share it, so the second
// side to come finds an op either lacks at once, before any data moves, and both sides
// fail with a `mismatch` that names the peer and the tag (schedule::p2p::difference).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/p2p.hpp"

namespace mimatrix::transport::detail {

/// Why a call or a pair-batch failed, as the first rank that saw it said it.
struct failure {
  errc code = errc::aborted;
  std::string message;
  bool own = false;  // in the words of the side that reads it (a pair-batch's mismatch), not another rank's
};

/// @par Thread Safety
/// Every member may be called from any rank's thread.
class inproc_pair_board {
 public:
  /// One side of a pair-batch: rank `rank`'s batch with `peer` of pair epoch `epoch` on
  /// the endpoints opened `instance`-th (inproc_world::open, alike on both ranks).
  struct side {
    std::uint64_t instance = 0;
    int rank = 0, peer = 0;
    std::uint64_t epoch = 0;
    std::uint64_t local = 0;  // the rank's own batch number, for its messages
  };

  /// Rank `s.rank` entered its side with manifest `mine`. Returns the pair-batch's
  /// failure if it has one, or the mismatch this side makes with the peer's, recorded for
  /// the peer to read (failed()).
  std::optional<failure> meet(const side& s, std::vector<schedule::p2p::manifest_entry> mine) {
    std::lock_guard lock(mutex_);
    auto& started = started_[{s.instance, s.rank, s.peer}];
    started = std::max(started, s.epoch + 1);
    entry& e = entries_[key(s)];
    e.sides[slot(s)] = std::move(mine);
    e.locals[slot(s)] = s.local;
    return failure_of(e, s);
  }

  /// The pair-batch's failure, as side `s` tells it (a mismatch in its own words).
  std::optional<failure> failed(const side& s) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key(s));
    return it == entries_.end() ? std::nullopt : failure_of(it->second, s);
  }

  /// Records the first failure of the pair-batch (its peer fails at once).
  void fail(const side& s, failure f) {
    std::lock_guard lock(mutex_);
    entry& e = entries_[key(s)];
    if (!e.failed && !e.mismatch) e.failed = std::move(f);
  }

  /// "" once the peer has entered its side; else "rank 3 has not started its batch #5
  /// with this rank (it has started 4 with this rank)".
  std::string missing(const side& s) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key(s));
    if (it != entries_.end() && it->second.sides[1 - slot(s)]) return {};
    auto started = started_.find({s.instance, s.peer, s.rank});
    return "rank " + std::to_string(s.peer) + " has not started its batch #" + std::to_string(s.epoch) +
           " with this rank (it has started " + std::to_string(started == started_.end() ? 0 : started->second) +
           " with this rank)";
  }

  /// Side `s` is done; the second side to leave frees the entry.
  void leave(const side& s) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key(s));
    if (it != entries_.end() && ++it->second.left == 2) entries_.erase(it);
  }

 private:
  using pair_key = std::tuple<std::uint64_t, int, int, std::uint64_t>;  // instance, lower rank, higher, epoch
  struct entry {
    std::optional<std::vector<schedule::p2p::manifest_entry>> sides[2];  // the lower rank's, the higher's
    std::uint64_t locals[2] = {0, 0};
    std::optional<failure> failed;
    bool mismatch = false;  // the sides differ: each tells it from its own view
    int left = 0;
  };

  static pair_key key(const side& s) {
    return {s.instance, std::min(s.rank, s.peer), std::max(s.rank, s.peer), s.epoch};
  }
  static int slot(const side& s) { return s.rank < s.peer ? 0 : 1; }

  static std::optional<failure> failure_of(entry& e, const side& s) {
    if (e.failed) return e.failed;
    const auto& mine = e.sides[slot(s)];
    const auto& theirs = e.sides[1 - slot(s)];
    if (!mine || !theirs) return std::nullopt;
    if (!e.mismatch && schedule::p2p::agree(*mine, *theirs)) return std::nullopt;
    e.mismatch = true;
    return failure{errc::mismatch, "rank " + std::to_string(s.rank) + ": p2p batch #" +
                                       std::to_string(e.locals[slot(s)]) + " (batch #" + std::to_string(s.epoch) +
                                       " with rank " + std::to_string(s.peer) + "): " +
                                       schedule::p2p::difference(s.rank, s.peer, *mine, *theirs),
                   true};
  }

  std::mutex mutex_;
  std::map<pair_key, entry> entries_;
  std::map<std::tuple<std::uint64_t, int, int>, std::uint64_t> started_;  // (instance, rank, peer): batches entered
};

}  // namespace mimatrix::transport::detail

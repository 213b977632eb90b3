// The schedules a communicator has built, shared by all its collectives and evicted least
// recently used first: a model with hundreds of tensor sizes keeps its hot ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::detail {

/// One rank's schedule for one call, as built and, when it has one-sided steps a
/// transport may refuse, lowered to messages.
struct plan_set {
  std::shared_ptr<const schedule::schedule> as_built, lowered;  // lowered: null when not needed
  std::size_t most_scratch = 0;  // over every rank's schedule (one-sided ones only)
};

struct plan_key {
  std::uint64_t owner = 0;  // the collective object (its topology and algorithm)
  schedule::collective kind = schedule::collective::allreduce;
  std::size_t count = 0, elem_size = 0;
  int root = 0;
  auto tied() const { return std::tie(owner, kind, count, elem_size, root); }
  // Spelled out: nvcc's front end drops the operator== that a defaulted <=> implies.
  friend bool operator==(const plan_key& a, const plan_key& b) { return a.tied() == b.tied(); }
  friend bool operator<(const plan_key& a, const plan_key& b) { return a.tied() < b.tied(); }
};

/// @par Thread Safety
/// Used by the thread that starts calls (the communicator's rule).
class plan_cache {
 public:
  /// Schedules are a few kilobytes to a few megabytes each (256: room for a large model's
  /// distinct tensor sizes).
  static constexpr std::size_t default_capacity = 256;

  explicit plan_cache(std::size_t capacity = default_capacity) : capacity_(capacity ? capacity : 1) {}

  /// A fresh owner number for a collective object's keys.
  std::uint64_t new_owner() { return ++owners_; }

  /// The entry for `key`, built by `build()` if absent; valid until the next call.
  template <class Build>
  const plan_set& find_or_build(const plan_key& key, Build&& build) {
    if (auto it = index_.find(key); it != index_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    ++misses_;
    plan_set built = build();
    while (lru_.size() >= capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    lru_.emplace_front(key, std::move(built));
    index_.emplace(key, lru_.begin());
    return lru_.front().second;
  }

  std::size_t size() const { return lru_.size(); }
  std::size_t capacity() const { return capacity_; }
  /// Keeps at most `n` (at least 1) schedules, dropping the least recently used now.
  void set_capacity(std::size_t n) {
    capacity_ = n ? n : 1;
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  std::size_t hits() const { return hits_; }
  std::size_t misses() const { return misses_; }

 private:
  using entries = std::list<std::pair<plan_key, plan_set>>;
  std::size_t capacity_;
  entries lru_;  // most recently used first
  std::map<plan_key, entries::iterator> index_;
  std::uint64_t owners_ = 0;
  std::size_t hits_ = 0, misses_ = 0;
};

}  // namespace mimatrix::detail

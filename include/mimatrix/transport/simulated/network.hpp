// transport::simulated's flow-level network: links with a bandwidth and a latency, flows
// over paths of links, and max-min fair sharing of every link among the flows on it
// (progressive filling), recomputed only where flows start or end.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/simulated/detail/radix_heap.hpp"

namespace mimatrix::transport::simulated {

using link_id = std::uint32_t;
using flow_id = std::uint32_t;

/// One direction of a cable (or a PCIe lane group, a NIC port): its rate and the time a
/// byte takes to cross it.
struct link_spec {
  double bytes_per_second = 0;
  double latency = 0;  // seconds
};

/// Flows over links, in simulated seconds.
///
/// A flow of b bytes over a path sends at the max-min fair rate of its path: each link's
/// bandwidth is split equally among its flows, except that a flow held back elsewhere
/// leaves its unused share to the others. Rates change only when a flow starts or ends.
/// A flow's last byte leaves its source at finish time; it reaches the destination
/// path_latency() later (the caller adds that). A link that a path names twice carries
/// that flow twice (it counts as two flows there, and its bytes are carried twice).
///
/// A recomputation visits only the flows a change can affect: those connected to it
/// through links, and no slower than the slowest flow that changed. Its cost follows the
/// part of the network that changed, not the whole network, and a fast flow that ends
/// costs little.
///
/// @par Thread Safety
/// A plain value: one thread at a time.
class network {
 public:
  link_id add_link(link_spec spec);
  std::size_t links() const;
  const link_spec& link(link_id id) const;
  /// The sum of the latencies along `path`.
  double path_latency(std::span<const link_id> path) const;

  /// Makes room for `links` links and `flows` flows in progress (paths of about four
  /// links) at once. Either way, once its buffers have grown, a run allocates nothing.
  void reserve(std::size_t links, std::size_t flows);

  /// Starts `bytes` (> 0) over `path` (at least one link) at time `now`, which is not
  /// before any time given before. Flow ids are reused once a flow has finished. Bad
  /// arguments (here and in add_link) throw mimatrix::error, errc::invalid_argument.
  flow_id start(std::span<const link_id> path, double bytes, double now);

  /// The earliest time at which a flow in progress sends its last byte; infinity when
  /// none is in progress. Rates are recomputed here, once for every change since.
  double next_finish();

  /// Moves time to `t` (at most next_finish()) and appends the flows whose last byte has
  /// left by then to `done`. Flows that finish within a relative 1e-9 of `t` (equal
  /// shares finish together, whatever the rounding) finish at `t`. Their order in `done`
  /// is unspecified but the same on every run.
  void finish_until(double t, std::vector<flow_id>& done);

  /// Ends every flow in progress where it is, its rest unsent (a run that failed leaves
  /// some): the next run starts on an idle network, at the time this one stopped.
  void drop_flows();
  /// Flows in progress, and one flow's current rate in bytes per second (for tests; 0 once
  /// it has finished).
  std::size_t active() const;
  double rate(flow_id id);
  /// Bytes a link has carried so far, for utilisation reports.
  double carried(link_id id) const;
  /// The latest time given to start() or finish_until().
  double now() const { return now_; }

 private:
  // A flow's place on a link: `slot` indexes the link's users, so a flow leaves in O(1).
  struct hop {
    link_id link;
    std::uint32_t slot;
  };
  // A flow on a link, and where in hops_ its hop there is (to fix the back-pointer on a
  // swap without a look at the flow).
  struct user {
    flow_id flow;
    std::uint32_t hop;
  };
  // Users live in one pool: [first, first + count) of users_, room for `room`. A list that
  // outgrows its room moves to the end with twice the room, so the pool stays bounded.
  struct link_state {
    double capacity;
    double carried;  // bytes, up to each current user's `since`
    double left;     // filling: capacity not yet given out
    std::uint32_t first = 0, count = 0, room = 0;
    std::uint32_t unfrozen = 0;  // filling: users without a rate yet
    std::uint32_t seen = 0;      // == stamp_: in this recomputation's component
    std::uint32_t dirty = 0;     // == dirty_stamp_: listed in dirty_
  };
  // One cache line a flow: a flow's fields are read together. Its hops are
  // [first, first + count) of hops_; a finished id keeps that room for the next flow.
  struct alignas(64) flow_state {
    double remaining = 0;  // bytes left at `since`
    double since = 0;      // when `rate` took effect
    double rate = 0;       // 0 until its first recomputation
    double new_rate = 0;   // filling: `unset` until frozen
    double bound = 0;      // filling: the least capacity of its links no other flow uses
    std::uint32_t first = 0, count = 0, room = 0;
    std::uint32_t version = 0;  // moves on at every rate change and finish
    std::uint32_t seen = 0;
    bool running = false;
  };
  // A finish time; stale once the flow's version has moved on.
  struct pending {
    double at;
    flow_id flow;
    std::uint32_t version;
  };

  static constexpr double infinity = std::numeric_limits<double>::infinity();
  static constexpr double unset = -1;

  [[noreturn]] static void fail(const std::string& what);
  void check_link(link_id id) const;
  std::uint32_t next_stamp();
  void grow_users(link_state& s);
  void mark_dirty(link_id id, link_state& l);
  void recompute();
  void collect_component(double below);
  void fill(double below);
  void freeze(flow_id f, double rate);
  void settle();
  void end(flow_id f);
  bool stale(const pending& p) const { return p.version != flows_[p.flow].version; }
  // Filling: in this recomputation (slower flows keep their rates) and not frozen yet.
  bool waiting(flow_id f) const { return flows_[f].seen == stamp_ && flows_[f].new_rate == unset; }

  std::vector<link_spec> spec_;
  std::vector<link_state> links_;
  std::vector<user> users_;
  std::vector<link_id> dirty_;  // links whose users changed since the rates were computed

  std::vector<flow_state> flows_;
  std::vector<hop> hops_;
  std::vector<flow_id> free_;
  std::size_t active_ = 0;

  std::vector<pending> finishes_;  // min-heap of finish times, stale entries skipped
  std::vector<std::uint64_t> due_;  // finish_until: a bit a flow finishing now
  std::vector<std::size_t> scan_;   // finish_until: heap positions to look at
  std::vector<link_id> component_links_;
  std::vector<flow_id> component_flows_;
  detail::radix_heap shares_;  // filling: links by share
  std::size_t frozen_ = 0;
  double max_bound_ = 0;  // filling: the largest bound in the component
  std::vector<flow_id> fresh_;       // started since the rates were computed
  double change_level_ = infinity;  // the least old rate of the flows ended since then
  std::uint32_t stamp_ = 0;
  std::uint32_t dirty_stamp_ = 1;
  double now_ = 0;
};

// ---- implementation ---------------------------------------------------------------------

namespace detail {
// std::*_heap keep the greatest first, so "greater" puts the least first.
struct later_finish {
  template <class P>
  bool operator()(const P& a, const P& b) const { return a.at > b.at; }
};
}  // namespace detail

inline void network::fail(const std::string& what) {
  throw error(errc::invalid_argument, "transport::simulated::network: " + what);
}

inline void network::check_link(link_id id) const {
  if (id >= links_.size()) fail("no link " + std::to_string(id) + " (" + std::to_string(links_.size()) + " links)");
}

inline link_id network::add_link(link_spec spec) {
  if (!(spec.bytes_per_second > 0) || !std::isfinite(spec.bytes_per_second))
    fail("link " + std::to_string(links_.size()) + " needs a positive, finite bytes_per_second, got " +
         std::to_string(spec.bytes_per_second));
  if (!(spec.latency >= 0) || !std::isfinite(spec.latency))
    fail("link " + std::to_string(links_.size()) + " needs a finite latency >= 0, got " + std::to_string(spec.latency));
  if (links_.size() >= std::numeric_limits<link_id>::max()) fail("too many links");
  const auto id = static_cast<link_id>(links_.size());
  spec_.push_back(spec);
  link_state s;
  s.capacity = spec.bytes_per_second;
  s.carried = 0;
  s.left = 0;
  links_.push_back(s);
  return id;
}

inline std::size_t network::links() const { return links_.size(); }

inline const link_spec& network::link(link_id id) const {
  check_link(id);
  return spec_[id];
}

inline double network::path_latency(std::span<const link_id> path) const {
  double sum = 0;
  for (link_id l : path) sum += link(l).latency;
  return sum;
}

inline void network::reserve(std::size_t links, std::size_t flows) {
  spec_.reserve(links);
  links_.reserve(links);
  dirty_.reserve(links);
  component_links_.reserve(links);
  users_.reserve(8 * flows + 4 * links);
  flows_.reserve(flows);
  hops_.reserve(4 * flows);
  free_.reserve(flows);
  fresh_.reserve(flows);
  component_flows_.reserve(flows);
  finishes_.reserve(2 * flows + 1024);
}

inline std::uint32_t network::next_stamp() {
  if (++stamp_ == 0) {  // wrapped: old marks could alias the new stamp
    for (auto& l : links_) l.seen = 0;
    for (auto& f : flows_) f.seen = 0;
    stamp_ = 1;
  }
  return stamp_;
}

inline void network::mark_dirty(link_id id, link_state& l) {
  if (l.dirty == dirty_stamp_) return;
  l.dirty = dirty_stamp_;
  dirty_.push_back(id);
}

inline void network::grow_users(link_state& s) {
  if (users_.size() > std::numeric_limits<std::uint32_t>::max() - 2 * std::size_t{s.room} - 1) fail("too many flows");
  const auto first = static_cast<std::uint32_t>(users_.size());
  const std::uint32_t room = std::max<std::uint32_t>(1, 2 * s.room);
  users_.resize(users_.size() + room);
  std::copy_n(users_.begin() + s.first, s.count, users_.begin() + first);
  s.first = first;
  s.room = room;
}

inline flow_id network::start(std::span<const link_id> path, double bytes, double now) {
  if (path.empty()) fail("a flow needs at least one link");
  if (!(bytes > 0) || !std::isfinite(bytes)) fail("a flow needs a positive, finite size, got " + std::to_string(bytes));
  if (!(now >= now_)) fail("time went back: start at " + std::to_string(now) + " after " + std::to_string(now_));
  if (path.size() > std::numeric_limits<std::uint32_t>::max() / 4) fail("path too long");
  link_id last = 0;
  for (link_id l : path) last = std::max(last, l);
  if (last >= links_.size()) check_link(last);
  if (now > now_) {
    recompute();  // the flows so far ran at their rates up to `now`
    now_ = now;
  }

  flow_id f;
  if (!free_.empty()) {
    f = free_.back();
    free_.pop_back();
  } else {
    if (flows_.size() >= std::numeric_limits<flow_id>::max()) fail("too many flows in progress");
    f = static_cast<flow_id>(flows_.size());
    flows_.emplace_back();
  }
  const auto n = static_cast<std::uint32_t>(path.size());
  if (flows_[f].room < n) {  // the old room is abandoned; rooms double, so this stays bounded
    if (hops_.size() > std::numeric_limits<std::uint32_t>::max() - 2 * std::size_t{n}) fail("too many flows");
    flows_[f].room = std::bit_ceil(n);
    flows_[f].first = static_cast<std::uint32_t>(hops_.size());
    hops_.resize(hops_.size() + flows_[f].room);
  }
  flow_state& s = flows_[f];
  s.count = n;
  bool alone = true;  // no other flow on any link of the path (nor this one twice)
  double least = infinity;
  for (std::uint32_t k = 0; k < n; ++k) {
    const link_id id = path[k];
    link_state& l = links_[id];
    alone = alone && l.count == 0;
    least = std::min(least, l.capacity);
    if (l.count == l.room) grow_users(l);
    hops_[s.first + k] = {id, l.count};
    users_[l.first + l.count++] = {f, s.first + k};
  }
  s.remaining = bytes;
  s.since = now_;
  s.running = true;
  ++s.version;
  ++active_;
  if (alone) {
    // Its own component: max-min gives it its least capacity and changes no other rate,
    // so no recomputation (a contention-free cluster never needs one).
    s.rate = least;
    finishes_.push_back({now_ + bytes / least, f, s.version});
    std::push_heap(finishes_.begin(), finishes_.end(), detail::later_finish{});
    return f;
  }
  s.rate = 0;
  for (std::uint32_t k = 0; k < n; ++k) mark_dirty(path[k], links_[path[k]]);
  fresh_.push_back(f);
  return f;
}

inline double network::next_finish() {
  recompute();
  while (!finishes_.empty() && stale(finishes_.front())) {
    std::pop_heap(finishes_.begin(), finishes_.end(), detail::later_finish{});
    finishes_.pop_back();
  }
  return finishes_.empty() ? infinity : finishes_.front().at;
}

inline void network::finish_until(double t, std::vector<flow_id>& done) {
  recompute();  // flows started since the last next_finish() need their rates
  if (t > now_) now_ = t;
  const double limit = t + 1e-9 * std::abs(t);
  if (finishes_.empty() || finishes_.front().at > limit) return;
  // Few due: a pop each (log n steps). Many (every flow of a ring step): one pass over the
  // heap and a rebuild cost less. The due entries are the top of the heap (a parent is
  // never later than its children), so counting them, up to "many", costs no more.
  const std::size_t many = 2 * finishes_.size() / static_cast<std::size_t>(std::bit_width(finishes_.size()));
  std::size_t due_count = 0;
  scan_.assign(1, 0);
  while (!scan_.empty() && due_count < many) {
    const std::size_t i = scan_.back();
    scan_.pop_back();
    if (i >= finishes_.size() || finishes_[i].at > limit) continue;
    ++due_count;
    scan_.push_back(2 * i + 1);
    scan_.push_back(2 * i + 2);
  }
  if (due_count < many) {
    while (!finishes_.empty() && finishes_.front().at <= limit) {
      std::pop_heap(finishes_.begin(), finishes_.end(), detail::later_finish{});
      const pending p = finishes_.back();
      finishes_.pop_back();
      if (stale(p)) continue;
      end(p.flow);
      done.push_back(p.flow);
    }
    return;
  }
  // Ended in id order, through a bitmap: memory is then walked in order, not at random.
  due_.resize((flows_.size() + 63) / 64);
  auto due = std::partition(finishes_.begin(), finishes_.end(), [&](const pending& p) { return p.at > limit; });
  for (auto it = due; it != finishes_.end(); ++it)
    if (!stale(*it)) due_[it->flow / 64] |= std::uint64_t{1} << (it->flow % 64);
  finishes_.erase(due, finishes_.end());
  std::make_heap(finishes_.begin(), finishes_.end(), detail::later_finish{});
  const std::size_t freed = free_.size();
  for (std::size_t w = 0; w < due_.size(); ++w)
    for (; due_[w] != 0; due_[w] &= due_[w] - 1) {
      const auto f = static_cast<flow_id>(64 * w + static_cast<std::size_t>(std::countr_zero(due_[w])));
      end(f);
      done.push_back(f);
    }
  // The least id is reused first: flows started in order then end in that order.
  std::reverse(free_.begin() + static_cast<std::ptrdiff_t>(freed), free_.end());
}

inline void network::end(flow_id f) {
  flow_state& s = flows_[f];
  const double sent = s.remaining;  // the rest, all of it: rounding must not lose bytes
  bool alone = true;  // it leaves empty links only: no other rate changes
  for (std::uint32_t k = 0; k < s.count; ++k) alone = alone && links_[hops_[s.first + k].link].count == 1;
  for (std::uint32_t k = 0; k < s.count; ++k) {
    const hop h = hops_[s.first + k];  // re-read: a swap below may have moved this flow's own slot
    link_state& l = links_[h.link];
    l.carried += sent;
    const user last = users_[l.first + --l.count];
    users_[l.first + h.slot] = last;
    hops_[last.hop].slot = h.slot;
    if (!alone) mark_dirty(h.link, l);
  }
  if (!alone) change_level_ = std::min(change_level_, s.rate);
  s.remaining = 0;
  s.rate = 0;
  s.running = false;
  ++s.version;
  --active_;
  free_.push_back(f);
}

inline std::size_t network::active() const { return active_; }

inline void network::drop_flows() {
  for (flow_id f = 0; f < flows_.size() && active_ > 0; ++f)
    if (flows_[f].running) {
      flows_[f].remaining = 0;  // carried counts what was sent, not the rest
      end(f);
    }
}

inline double network::rate(flow_id id) {
  if (id >= flows_.size()) fail("no flow " + std::to_string(id));
  recompute();
  return flows_[id].running ? flows_[id].rate : 0;
}

inline double network::carried(link_id id) const {
  check_link(id);
  const link_state& l = links_[id];
  double sum = l.carried;
  for (std::uint32_t i = 0; i < l.count; ++i) {
    const flow_state& f = flows_[users_[l.first + i].flow];
    sum += std::min(f.rate * (now_ - f.since), f.remaining);
  }
  return sum;
}

}  // namespace mimatrix::transport::simulated

#include "mimatrix/transport/simulated/detail/max_min.hpp"

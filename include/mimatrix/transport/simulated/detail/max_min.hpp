// The network's max-min fair sharing: which flows a change can affect, and progressive
// filling over them. Definitions of network members, apart from its flows and links
// (network.hpp includes this file last).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "mimatrix/transport/simulated/network.hpp"

namespace mimatrix::transport::simulated {

inline void network::recompute() {
  if (dirty_.empty()) return;
  // Slower flows than every change keep their rates (see collect_component). A new flow's
  // rate is at least its least fair share (capacity / users) on its path, since shares
  // only rise during the filling. When every flow is new (a ring step's start), all are
  // open, and sorting them out is skipped.
  double below = 0;
  if (fresh_.size() != active_) {
    double level = change_level_;
    for (flow_id f : fresh_) {
      const flow_state& s = flows_[f];
      for (std::uint32_t k = 0; s.running && k < s.count; ++k) {
        const link_state& l = links_[hops_[s.first + k].link];
        level = std::min(level, l.capacity / l.count);
      }
    }
    below = level * (1 - 1e-6);  // the margin keeps flows level with a change but for rounding
  }
  fresh_.clear();
  change_level_ = infinity;
  collect_component(below);
  if (++dirty_stamp_ == 0) {
    for (auto& l : links_) l.dirty = 0;
    dirty_stamp_ = 1;
  }
  dirty_.clear();
  fill(below);
  settle();
}

// Which flows can change. Progressive filling freezes flows in order of rate, and a change
// only alters the filling from the lowest rate it touches (a finished flow's old rate, a
// new flow's least share): below that the filling is the same as before. So the flows
// slower than `below` keep their rates and count only as load on their links, and the
// rest is max-min over what they leave, which splits into connected components. Only the
// components holding a changed link are recomputed: a breadth-first walk from those links
// through open flows (new, or at least `below`), which also readies each link and flow
// for fill(). With `below` at 0 that is the whole connected component.
inline void network::collect_component(double below) {
  const std::uint32_t stamp = next_stamp();
  component_links_.clear();
  component_flows_.clear();
  max_bound_ = 0;
  auto open = [&](const flow_state& s) { return s.rate == 0 || s.rate >= below; };  // 0: new
  auto visit = [&](link_id id) {
    link_state& l = links_[id];
    l.seen = stamp;
    l.left = l.capacity;
    l.unfrozen = l.count;
    if (below > 0)
      for (std::uint32_t j = 0; j < l.count; ++j) {
        const flow_state& u = flows_[users_[l.first + j].flow];
        if (!open(u)) {
          l.left -= u.rate;
          --l.unfrozen;
        }
      }
    if (l.unfrozen > 0) component_links_.push_back(id);
  };
  for (link_id l : dirty_)
    if (links_[l].seen != stamp) visit(l);
  for (std::size_t i = 0; i < component_links_.size(); ++i) {
    const link_state& l = links_[component_links_[i]];
    for (std::uint32_t j = 0; j < l.count; ++j) {
      const flow_id f = users_[l.first + j].flow;
      flow_state& s = flows_[f];
      if (s.seen == stamp || !open(s)) continue;
      s.seen = stamp;
      s.new_rate = unset;
      component_flows_.push_back(f);
      double bound = infinity;
      for (std::uint32_t k = 0; k < s.count; ++k) {
        const link_id m = hops_[s.first + k].link;
        if (links_[m].count == 1) bound = std::min(bound, links_[m].capacity);
        if (links_[m].seen != stamp) visit(m);
      }
      s.bound = bound;
      max_bound_ = std::max(max_bound_, bound);
    }
  }
}

inline void network::freeze(flow_id f, double rate) {
  flow_state& s = flows_[f];
  s.new_rate = rate;
  ++frozen_;
  for (std::uint32_t k = 0; k < s.count; ++k) {
    link_state& l = links_[hops_[s.first + k].link];
    l.left -= rate;
    --l.unfrozen;
  }
}

// Progressive filling. A link with a single user only caps that flow, so it stays out of
// the heap and becomes the flow's `bound` (most host links, in a fat tree); so does a
// link whose fair share is at least every flow's bound, since shares only rise. A flow
// is frozen at its bound when one of its links comes up and the bound is below every
// share left. A link's share only rises as its users freeze (each at no more than the
// share), so a heap entry is a lower bound, refreshed when popped.
inline void network::fill(double below) {
  shares_.clear();
  frozen_ = 0;
  for (link_id l : component_links_) {  // every one has a user still open
    const link_state& s = links_[l];
    if (s.count > 1 && s.left / s.unfrozen < max_bound_) shares_.push(s.left / s.unfrozen, l);
  }

  // The filling level only rises, and open flows end at `below` or above: rounding must not
  // take a share under either.
  double level = below;
  while (!shares_.empty() && frozen_ < component_flows_.size()) {
    const link_id id = shares_.pop();
    link_state& l = links_[id];
    if (l.unfrozen == 0) continue;
    // Every other link's share is at least `next`, so a flow bound below both that and
    // this link's share reaches its bound before anything else holds it.
    const double next = shares_.empty() ? infinity : shares_.top();
    double s = l.left / l.unfrozen;
    for (bool again = true; again;) {
      again = false;
      const double cap = std::min(s, next);
      for (std::uint32_t j = 0; j < l.count; ++j) {
        const flow_id f = users_[l.first + j].flow;
        if (waiting(f) && flows_[f].bound < cap) {
          freeze(f, flows_[f].bound);
          again = true;
        }
      }
      if (l.unfrozen == 0) break;
      s = l.left / l.unfrozen;
    }
    if (l.unfrozen == 0) continue;
    if (s > next) {  // no longer the least: back in line
      shares_.push(s, id);
      continue;
    }
    level = std::max(level, s);
    for (std::uint32_t j = 0; j < l.count; ++j) {
      const flow_id f = users_[l.first + j].flow;
      if (waiting(f)) freeze(f, level);
    }
  }
}

// Applies the new rates at now_: bytes sent at the old rate are booked, and flows whose
// rate changed get a new finish time.
inline void network::settle() {
  const std::size_t old = finishes_.size();
  for (flow_id f : component_flows_) {
    flow_state& s = flows_[f];
    const double r = s.new_rate == unset ? s.bound : s.new_rate;  // unset: held by its bound only
    if (r == s.rate) continue;
    const double sent = std::min(s.rate * (now_ - s.since), s.remaining);
    if (sent > 0) {
      s.remaining -= sent;
      for (std::uint32_t k = 0; k < s.count; ++k) links_[hops_[s.first + k].link].carried += sent;
    }
    s.since = now_;
    s.rate = r;
    ++s.version;
    finishes_.push_back({now_ + s.remaining / r, f, s.version});
  }
  const std::size_t added = finishes_.size() - old;
  if (finishes_.size() > 2 * active_ + 1024) {  // mostly stale: keep only the live entries
    finishes_.erase(std::remove_if(finishes_.begin(), finishes_.end(), [&](const pending& p) { return stale(p); }),
                    finishes_.end());
    std::make_heap(finishes_.begin(), finishes_.end(), detail::later_finish{});
  } else if (added > old / 4) {
    std::make_heap(finishes_.begin(), finishes_.end(), detail::later_finish{});
  } else {
    for (std::size_t i = old + 1; i <= finishes_.size(); ++i)
      std::push_heap(finishes_.begin(), finishes_.begin() + static_cast<std::ptrdiff_t>(i), detail::later_finish{});
  }
}

}  // namespace mimatrix::transport::simulated

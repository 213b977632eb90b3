// Lowering one-sided steps to messages, for transports without one-sided writes: every
// write becomes a send met by a recv on the target straight into the landing region,
// every notify an empty message, and every wait a join of those receives.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::schedule {

namespace detail {

/// Where a region lies in a rank's memory, assuming input and output may be one memory
/// (in place): two regions that could overlap in either buffer mode do.
struct extent {
  int space = 0;  // 0: input/output, 1: scratch
  std::size_t begin = 0, end = 0;
};
inline extent extent_of(const descriptor& d, int rank, const region& r) {
  if (r.where == buffer::scratch) return {1, r.offset, r.offset + r.bytes};
  const std::size_t base = r.where == buffer::input ? d.in_place_input_offset(rank) : d.in_place_output_offset(rank);
  return {0, base + r.offset, base + r.offset + r.bytes};
}
inline bool overlaps(const extent& a, const extent& b) {
  return a.space == b.space && a.begin < b.end && b.begin < a.end;
}

}  // namespace detail

/// Rewrites a group's one-sided steps into send/recv, for transports without one-sided
/// writes. On the writer, a write becomes a send of its source (same deps) and a notify
/// an empty send. On the target, each becomes a recv into the landing region, which
/// depends on the target's steps that touch those bytes and are not ordered after the
/// wait (a race-free group orders them before the write); the wait becomes a join of its
/// deps and those recvs (a wait for 0 flags). Message tags are the flag tags shifted past
/// every tag the group already uses. Steps are renumbered in a topological order close to
/// the original one. The result is proved by `verify` like any other group.
///
/// Throws mimatrix::error(invalid_argument) when two writes land on overlapping bytes of
/// one rank (the emulation could not order their receives) or the new deps would form a
/// cycle (a step that must precede a landing is ordered after its wait).
///
/// @par Thread Safety
/// A pure function: safe to call from any thread.
inline std::vector<schedule> lower_one_sided(std::span<const schedule> group) {
  const int p = static_cast<int>(group.size());
  std::uint64_t base = 0;  // first tag free for lowered messages
  for (const auto& s : group)
    for (const auto& st : s.steps)
      if (is_communication(st.kind)) base = std::max<std::uint64_t>(base, std::uint64_t(st.tag) + 1);

  // Incoming one-sided steps of each rank: (writer, step index).
  std::vector<std::vector<std::pair<int, step_id>>> incoming(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r)
    for (step_id i = 0; i < group[std::size_t(r)].steps.size(); ++i) {
      const auto& st = group[std::size_t(r)].steps[i];
      if (!is_one_sided(st.kind)) continue;
      if (st.peer < 0 || st.peer >= p || st.peer == r)
        throw error(errc::invalid_argument, "schedule::lower_one_sided: rank " + std::to_string(r) + " step " +
                                                std::to_string(i) + " (" + to_string(st) + ") names a bad peer");
      if (base + st.tag > std::numeric_limits<std::uint32_t>::max())
        throw error(errc::invalid_argument, "schedule::lower_one_sided: tags run out of 32 bits");
      incoming[std::size_t(st.peer)].emplace_back(r, i);
    }

  std::vector<schedule> lowered;
  lowered.reserve(group.size());
  for (int t = 0; t < p; ++t) {
    const schedule& s = group[std::size_t(t)];
    const auto& in = incoming[std::size_t(t)];
    const std::size_t n = s.steps.size(), m = in.size();
    const auto fail = [&](const std::string& what) {
      throw error(errc::invalid_argument, "schedule::lower_one_sided: rank " + std::to_string(t) + ": " + what);
    };

    // Nodes 0..n-1: the original steps, rewritten; n..n+m-1: the new receives. Their
    // deps grow (waits gain receives), so they are kept a list a node until rebuilt.
    std::vector<step> nodes(s.steps.begin(), s.steps.end());
    std::vector<std::vector<step_id>> deps(n);
    for (std::size_t i = 0; i < n; ++i) {
      auto& st = nodes[i];
      const auto old = s.deps(step_id(i));
      deps[i].assign(old.begin(), old.end());
      if (st.kind == step_kind::write) {
        st = step{.kind = step_kind::send, .peer = st.peer, .tag = std::uint32_t(base + st.tag), .src = st.src};
      } else if (st.kind == step_kind::notify) {
        st = step{.kind = step_kind::send, .peer = st.peer, .tag = std::uint32_t(base + st.tag), .src = {buffer::input, 0, 0}};
      } else if (st.kind == step_kind::wait) {
        st.count = 0;
      }
    }
    // Local reachability of the original schedule: row i = the steps before step i.
    const std::size_t words = (n + 63) / 64;
    std::vector<std::uint64_t> reach(n * words, 0);
    for (std::size_t i = 0; i < n; ++i)
      for (step_id d : s.deps(step_id(i))) {
        for (std::size_t k = 0; k < words; ++k) reach[i * words + k] |= reach[std::size_t(d) * words + k];
        reach[i * words + d / 64] |= std::uint64_t(1) << (d % 64);
      }
    const auto after = [&](std::size_t later, std::size_t earlier) {
      return (reach[later * words + earlier / 64] >> (earlier % 64) & 1) != 0;
    };

    std::vector<detail::extent> landed;
    for (std::size_t k = 0; k < m; ++k) {
      const auto [writer, i] = in[k];
      const step& w = group[std::size_t(writer)].steps[i];
      std::size_t wait_at = n;
      for (std::size_t j = 0; j < n; ++j)
        if (s.steps[j].kind == step_kind::wait && s.steps[j].tag == w.tag) wait_at = j;
      if (wait_at == n) fail("no wait counts the flag of rank " + std::to_string(writer) + " step " + std::to_string(i));
      const step recv{.kind = step_kind::recv, .peer = writer, .tag = std::uint32_t(base + w.tag),
                      .dst = w.kind == step_kind::write ? w.dst : region{buffer::scratch, 0, 0}};
      std::vector<step_id> recv_deps;
      if (w.kind == step_kind::write && w.dst.bytes) {
        const auto e = detail::extent_of(s.desc, t, w.dst);
        for (const auto& other : landed)
          if (detail::overlaps(e, other))
            fail("two writes land on overlapping bytes (" + to_string(w.dst) + "); the emulation cannot order them");
        landed.push_back(e);
        for (std::size_t j = 0; j < n; ++j) {
          const step& x = s.steps[j];
          if (x.kind == step_kind::wait || after(j, wait_at)) continue;
          const bool reads = x.kind == step_kind::send || x.kind == step_kind::recv_reduce || x.kind == step_kind::reduce ||
                             x.kind == step_kind::copy || x.kind == step_kind::write || x.kind == step_kind::reduce_slots;
          const bool writes = x.kind != step_kind::send && x.kind != step_kind::write && x.kind != step_kind::notify;
          if ((reads && detail::overlaps(e, detail::extent_of(s.desc, t, x.src))) ||
              (writes && detail::overlaps(e, detail::extent_of(s.desc, t, x.dst))))
            recv_deps.push_back(step_id(j));
        }
      }
      deps[wait_at].push_back(step_id(n + k));
      nodes.push_back(recv);
      deps.push_back(std::move(recv_deps));
    }

    // Topological order, smallest original position first; a cycle is an error.
    const std::size_t total = n + m;
    std::vector<std::vector<std::size_t>> succ(total);
    std::vector<std::size_t> indegree(total, 0);
    for (std::size_t v = 0; v < total; ++v)
      for (step_id d : deps[v]) {
        succ[d].push_back(v);
        ++indegree[v];
      }
    // Receives rank just before the step they feed first, so they are posted early.
    std::vector<double> position(total);
    for (std::size_t v = 0; v < n; ++v) position[v] = double(v);
    for (std::size_t v = n; v < total; ++v) position[v] = -1.0 + 1e-6 * double(v - n);
    const auto later = [&](std::size_t a, std::size_t b) { return position[a] > position[b]; };
    std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(later)> ready(later);
    for (std::size_t v = 0; v < total; ++v)
      if (indegree[v] == 0) ready.push(v);
    std::vector<step_id> renumber(total, 0);
    builder b(s.desc, t, s.algorithm);
    std::size_t edges = 0;
    for (const auto& d : deps) edges += d.size();
    b.reserve(total, edges);
    if (s.scratch_bytes) (void)b.scratch(s.scratch_bytes);
    std::size_t placed = 0;
    while (!ready.empty()) {
      const auto v = ready.top();
      ready.pop();
      for (auto& d : deps[v]) d = renumber[d];
      renumber[v] = b.add(nodes[v], deps[v]);
      ++placed;
      for (auto w : succ[v])
        if (--indegree[w] == 0) ready.push(w);
    }
    if (placed != total)
      fail("a step that must precede a landing is ordered after the wait for it: the receives would form a cycle");
    lowered.push_back(std::move(b).build());
    lowered.back().agreement = s.agreement;
  }
  return lowered;
}

}  // namespace mimatrix::schedule

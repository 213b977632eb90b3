// The verifier's third layer: no two unordered steps touch the same bytes, within a rank
// and where one-sided writes land across ranks (check c of verify()).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/schedule/verify/matching.hpp"

namespace mimatrix::schedule::detail {

class race_check : public matching_check {
 public:
  using matching_check::matching_check;

 protected:
  // --- c) races ------------------------------------------------------------------------
  // Steps are indexed in a topological order (deps point back), so per element it is
  // enough to order every access after the last write and every write after the reads
  // since that write: the rest follows by transitivity.
  bool check_races() {
    for (int r = 0; r < p_; ++r)
      if (!check_races(r)) return false;
    return true;
  }

  bool check_races(int r) {
    const auto& steps = group_[std::size_t(r)].steps;
    const auto n = steps.size();
    const auto w = (n + 63) / 64;
    reach_.assign(n * w, 0);  // row i holds the steps that complete before step i starts
    std::uint64_t* const reach = reach_.data();  // raw pointers: this is the hot loop
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t* const row = reach + i * w;
      for (step_id d : deps_of(r, i)) {
        const std::uint64_t* const from = reach + std::size_t(d) * w;
        for (std::size_t k = 0; k <= d / 64; ++k) row[k] |= from[k];  // from has no bits past d
        row[d / 64] |= std::uint64_t(1) << (d % 64);
      }
    }
    const auto ordered = [reach, w](std::size_t before, std::size_t after) {
      return (reach[after * w + before / 64] >> (before % 64) & 1) != 0;
    };

    const auto& l = layouts_[std::size_t(r)];
    std::size_t base[3] = {0, l.elems[0], l.elems[0] + l.elems[1]};
    last_write_.assign(base[2] + l.elems[2], no_step);
    reads_.assign(last_write_.size(), no_step);
    read_nodes_.clear();

    const auto race = [&](std::size_t earlier, bool earlier_writes, std::size_t later, bool later_writes,
                          const region& rg, std::size_t k) {
      return fail("race on rank " + std::to_string(r) + " at " + byte_at(rg, k) + ": step " + std::to_string(earlier) +
                  " (" + to_string(steps[earlier]) + ") " + (earlier_writes ? "writes" : "reads") + " it and step " +
                  std::to_string(later) + " (" + to_string(steps[later]) + ") " + (later_writes ? "writes" : "reads") +
                  " it, but neither depends on the other" +
                  (options_.in_place ? " (in place: input and output are one memory)" : ""));
    };

    std::uint32_t* const last_write = last_write_.data();
    std::uint32_t* const reads = reads_.data();
    for (std::size_t i = 0; i < n; ++i) {
      const auto& st = steps[i];
      if (reads_src(st.kind)) {
        const auto first = base[l.array[std::size_t(st.src.where)]] + first_elem(r, st.src);
        for (std::size_t k = 0; k < st.src.bytes / es_; ++k) {
          const auto x = first + k;
          const auto lw = last_write[x];
          if (lw != no_step && lw != i && !ordered(lw, i)) return race(lw, true, i, false, st.src, k);
          if (reads[x] == no_step || read_nodes_[reads[x]].first != i) {
            read_nodes_.emplace_back(std::uint32_t(i), reads[x]);
            reads[x] = std::uint32_t(read_nodes_.size() - 1);
          }
        }
      }
      if (writes_dst(st.kind)) {
        const auto first = base[l.array[std::size_t(st.dst.where)]] + first_elem(r, st.dst);
        for (std::size_t k = 0; k < st.dst.bytes / es_; ++k) {
          const auto x = first + k;
          const auto lw = last_write[x];
          if (lw != no_step && lw != i && !ordered(lw, i)) return race(lw, true, i, true, st.dst, k);
          for (auto node = reads[x]; node != no_step; node = read_nodes_[node].second) {
            const auto reader = read_nodes_[node].first;
            if (reader != i && !ordered(reader, i)) return race(reader, false, i, true, st.dst, k);
          }
          last_write[x] = std::uint32_t(i);
          reads[x] = no_step;
        }
      }
    }
    return true;
  }

  // --- c2) races across ranks ----------------------------------------------------------
  // A write lands in its target's memory at some moment between its start and the
  // arrival of its flag. Every step of the target that touches those bytes must be
  // ordered after the wait that counts the flag, or must have completed before the
  // write started, through any chain of cause and effect across ranks; two writes
  // landing on the same bytes must be ordered the same way. Happens-before is the
  // transitive closure of a global DAG: local deps; a send or recv's partner precedes
  // the steps that depend on it (the data has been read or written by then); a write or
  // notify precedes the wait that counts its flag. Only the steps that take part in a
  // question get a bit ("interesting" steps), so the closure stays small.
  bool check_landing_races() {
    const auto total = offsets_.back();
    // Landed elements of each rank, as CSR lists of the writes landing there, over the
    // rank's flat element index (input, output, scratch arrays back to back).
    const auto flat_base = [&](int r) {
      const auto& l = layouts_[std::size_t(r)];
      return std::array<std::size_t, 3>{0, l.elems[0], l.elems[0] + l.elems[1]};
    };
    const auto flat = [&](int r, const region& rg) {
      const auto& l = layouts_[std::size_t(r)];
      return flat_base(r)[std::size_t(l.array[std::size_t(rg.where)])] + first_elem(r, rg);
    };
    std::vector<std::vector<std::uint32_t>> land_begin(static_cast<std::size_t>(p_)), land(static_cast<std::size_t>(p_));
    for (int t = 0; t < p_; ++t) {
      const auto& l = layouts_[std::size_t(t)];
      land_begin[std::size_t(t)].assign(l.elems[0] + l.elems[1] + l.elems[2] + 1, 0);
    }
    std::vector<std::uint32_t> writes;
    for (std::uint32_t g = 0; g < total; ++g) {
      const auto r = int(rank_of_[g]);
      const auto& st = at(r, g - offsets_[std::size_t(r)]);
      if (st.kind != step_kind::write) continue;
      writes.push_back(g);
      auto& b = land_begin[std::size_t(st.peer)];
      const auto first = flat(st.peer, st.dst);
      for (std::size_t k = 0; k < st.dst.bytes / es_; ++k) ++b[first + k + 1];
    }
    for (int t = 0; t < p_; ++t) {
      auto& b = land_begin[std::size_t(t)];
      for (std::size_t x = 0; x + 1 < b.size(); ++x) b[x + 1] += b[x];
      land[std::size_t(t)].assign(b.back(), no_step);
    }
    {
      std::vector<std::vector<std::uint32_t>> fill(static_cast<std::size_t>(p_));
      for (int t = 0; t < p_; ++t)
        fill[std::size_t(t)].assign(land_begin[std::size_t(t)].begin(), land_begin[std::size_t(t)].end() - 1);
      for (const auto g : writes) {
        const auto r = int(rank_of_[g]);
        const auto& st = at(r, g - offsets_[std::size_t(r)]);
        const auto first = flat(st.peer, st.dst);
        for (std::size_t k = 0; k < st.dst.bytes / es_; ++k)
          land[std::size_t(st.peer)][fill[std::size_t(st.peer)][first + k]++] = g;
      }
    }

    // Interesting steps: writes, the waits that count their flags, and every step that
    // touches landed bytes of its own rank.
    const auto touches_landed = [&](int t, const region& rg) {
      const auto first = flat(t, rg);
      const auto& b = land_begin[std::size_t(t)];
      for (std::size_t k = 0; k < rg.bytes / es_; ++k)
        if (b[first + k + 1] != b[first + k]) return true;
      return false;
    };
    std::vector<std::uint32_t> bit(total, no_step);
    std::uint32_t interesting = 0;
    for (std::uint32_t g = 0; g < total; ++g) {
      const auto r = int(rank_of_[g]);
      const auto& st = at(r, g - offsets_[std::size_t(r)]);
      const bool take = st.kind == step_kind::write || (st.kind == step_kind::wait && incoming_[g] != 0) ||
                        (reads_src(st.kind) && touches_landed(r, st.src)) ||
                        (writes_dst(st.kind) && touches_landed(r, st.dst));
      if (take) bit[g] = interesting++;
    }
    const std::size_t words = (std::size_t(interesting) + 63) / 64;
    if (words && total > (std::size_t(1) << 26) / words)
      return fail("group is too large to check races across ranks (" + std::to_string(total) + " steps, " +
                  std::to_string(interesting) + " of them around one-sided writes)");

    // The global DAG's edges, u -> v, as successor lists; Kahn's order; then every
    // step's set of interesting ancestors.
    std::vector<std::uint32_t> begin(total + 1, 0), succ;
    const auto for_each_edge = [&](auto&& edge) {
      for (std::uint32_t v = 0; v < total; ++v) {
        const auto r = int(rank_of_[v]);
        for (step_id d : deps_of(r, v - offsets_[std::size_t(r)])) {
          const auto u = std::uint32_t(offsets_[std::size_t(r)] + d);
          edge(u, v);
          if (partner_[u] != no_step) edge(partner_[u], v);
        }
      }
      for (std::uint32_t u = 0; u < total; ++u)
        if (flag_wait_[u] != no_step) edge(u, flag_wait_[u]);
    };
    for_each_edge([&](std::uint32_t u, std::uint32_t) { ++begin[u + 1]; });
    for (std::size_t g = 0; g < total; ++g) begin[g + 1] += begin[g];
    succ.resize(begin[total]);
    std::vector<std::uint32_t> indegree(total, 0);
    {
      std::vector<std::uint32_t> fill(begin.begin(), begin.end() - 1);
      for_each_edge([&](std::uint32_t u, std::uint32_t v) {
        succ[fill[u]++] = v;
        ++indegree[v];
      });
    }
    std::vector<std::uint64_t> anc(total * words, 0);
    std::vector<std::uint32_t> order;
    order.reserve(total);
    for (std::uint32_t g = 0; g < total; ++g)
      if (indegree[g] == 0) order.push_back(g);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const auto u = order[k];
      const std::uint64_t* from = anc.data() + std::size_t(u) * words;
      for (auto e = begin[u]; e < begin[u + 1]; ++e) {
        const auto v = succ[e];
        std::uint64_t* row = anc.data() + std::size_t(v) * words;
        for (std::size_t w = 0; w < words; ++w) row[w] |= from[w];
        if (bit[u] != no_step) row[bit[u] / 64] |= std::uint64_t(1) << (bit[u] % 64);
        if (--indegree[v] == 0) order.push_back(v);
      }
    }
    // A cycle means a deadlock, which the simulation reports with its blocked steps.
    const auto before = [&](std::uint32_t u, std::uint32_t v) {  // u completes before v starts
      return bit[u] != no_step && (anc[std::size_t(v) * words + bit[u] / 64] >> (bit[u] % 64) & 1) != 0;
    };

    for (const auto w1 : writes) {
      const auto r = int(rank_of_[w1]);
      const auto& st = at(r, w1 - offsets_[std::size_t(r)]);
      const int t = st.peer;
      const auto first = flat(t, st.dst);
      const auto& b = land_begin[std::size_t(t)];
      for (std::size_t k = 0; k < st.dst.bytes / es_; ++k)
        for (auto e = b[first + k]; e < b[first + k + 1]; ++e) {
          const auto w2 = land[std::size_t(t)][e];
          if (w2 <= w1 || before(w1, w2) || before(w2, w1)) continue;
          return fail("race across ranks on rank " + std::to_string(t) + " at " + byte_at(st.dst, k) + ": " +
                      where(w1) + " and " + where(w2) + " both land there, and neither is ordered before the other");
        }
    }
    for (int t = 0; t < p_; ++t) {
      const auto& steps = group_[std::size_t(t)].steps;
      const auto& b = land_begin[std::size_t(t)];
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto x = std::uint32_t(offsets_[std::size_t(t)] + i);
        if (bit[x] == no_step) continue;
        const auto& st = steps[i];
        for (const bool is_write : {false, true}) {
          if (is_write ? !writes_dst(st.kind) : !reads_src(st.kind)) continue;
          const region& rg = is_write ? st.dst : st.src;
          const auto first = flat(t, rg);
          for (std::size_t k = 0; k < rg.bytes / es_; ++k)
            for (auto e = b[first + k]; e < b[first + k + 1]; ++e) {
              const auto w = land[std::size_t(t)][e];
              if (before(x, w) || before(flag_wait_[w], x)) continue;
              return fail("race across ranks on rank " + std::to_string(t) + " at " + byte_at(rg, k) + ": " + where(w) +
                          " lands there and " + where(t, i) + (is_write ? " writes" : " reads") +
                          " it, but it is neither ordered after " + where(flag_wait_[w]) +
                          ", which counts the write's flag, nor complete before the write starts" +
                          (options_.in_place ? " (in place: input and output are one memory)" : ""));
            }
        }
      }
    }
    return true;
  }

  std::vector<std::uint64_t> reach_;
  std::vector<std::uint32_t> last_write_, reads_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> read_nodes_;  // (step, next) lists
};

}  // namespace mimatrix::schedule::detail

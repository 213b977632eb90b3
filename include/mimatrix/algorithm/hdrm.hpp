// algorithm::hdrm: EFLOPS' Halving-Doubling with Rank Mapping (HPCA 2020) — Rabenseifner's
// allreduce on a BiGraph, ranks placed so that every step pairs nodes of different
// groups over distinct bipartite links; the default algorithm on topology::bigraph.
#pragma once

#include <bit>
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/bigraph.hpp"

namespace mimatrix::algorithm {

/// Halving-doubling over BiGraph with the rank mapping of EFLOPS (DESIGN.md §4).
///
/// With N switches (N/2 a group), M nodes a switch and P = M·N a power of two, virtual
/// rank v sits on node
///
///   j = v / N,  i = (v % N) / 2,
///   switch = popcount(v) even ? (i + j) % (N/2) : N/2 + i,   node = switch·M + j.
///
/// v and v ^ 2^k differ in one bit, so their popcounts differ in parity: every partner
/// of every halving or doubling step is in the other group, one bipartite hop away.
/// N = 4, M = 2 (P = 8), step 0 of the halving (distance 4):
///
///   v (node, switch)        partner            link
///   0 (0, sw0)     <->  4 (5, sw2)      sw0 - sw2
///   1 (4, sw2)     <->  5 (3, sw1)      sw2 - sw1
///   2 (6, sw3)     <->  6 (1, sw0)      sw3 - sw0
///   3 (2, sw1)     <->  7 (7, sw3)      sw1 - sw3
///
/// With M <= N/2 no two flows of a step share a directed bipartite link (the property
/// test in test/unit/topology/bigraph_test.cpp checks it up to 1024 ranks). With
/// M > N/2 the mapping still puts every pair across groups, but links are shared.
/// Other sizes (fewer ranks than N·M, or N·M not a power of two) fold (MPICH): the
/// power-of-two core gets even-popcount positions from group 0 and odd ones from group
/// 1 as long as both last, so its steps still cross groups; the rest fold into it.
///
/// Cost: that of halving_doubling, 2·lg p·α + 2(p-1)/p·n·β + (p-1)/p·n·γ, at full link
/// bandwidth because no link carries two flows.
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class hdrm {
 public:
  static constexpr std::string_view name = "hdrm";

  hdrm() = default;
  explicit hdrm(policy tuning) : tuning_(tuning) {}

  schedule::schedule build(const topology::bigraph& topo, const schedule::descriptor& desc, int rank) const {
    topo.check(desc.size);
    return halving_doubling::build_mapped(desc, rank, order(topo, desc.size), tuning_, name);
  }

  /// Virtual position -> rank for `size` ranks on `topo` (a permutation of 0..size-1).
  static std::vector<int> order(const topology::bigraph& topo, int size) {
    const auto shape = topo.resolved(size);
    shape.check(size);
    const int n = shape.switches(), m = shape.nodes_per_switch();
    std::vector<int> out(static_cast<std::size_t>(size));
    if (size == shape.capacity() && std::has_single_bit(unsigned(size))) {
      for (int v = 0; v < size; ++v) out[std::size_t(v)] = node(v, n, m);
      return out;
    }
    // Fold: core index c wants a rank of group popcount(c) % 2; the ranks left over fold
    // into core indices 0..r-1 (positions 2c and 2c+1 of the fold).
    std::vector<int> groups[2];
    for (int r = 0; r < size; ++r) groups[shape.group_of(r)].push_back(r);
    std::size_t next[2] = {0, 0};
    const int core = int(std::bit_floor(unsigned(size))), extras = size - core;
    std::vector<int> core_rank(static_cast<std::size_t>(core));
    for (int c = 0; c < core; ++c) {
      int g = std::popcount(unsigned(c)) % 2;
      if (next[g] == groups[g].size()) g = 1 - g;
      core_rank[std::size_t(c)] = groups[g][next[g]++];
    }
    std::vector<int> rest;
    for (int g : {0, 1})
      for (std::size_t k = next[g]; k < groups[g].size(); ++k) rest.push_back(groups[g][k]);
    for (int c = 0; c < core; ++c) {
      if (c < extras) {
        out[std::size_t(2 * c)] = rest[std::size_t(c)];
        out[std::size_t(2 * c + 1)] = core_rank[std::size_t(c)];
      } else {
        out[std::size_t(c + extras)] = core_rank[std::size_t(c)];
      }
    }
    return out;
  }

  /// The node of virtual rank v on N switches of M nodes (P = N·M a power of two).
  static constexpr int node(int v, int switches, int nodes_per_switch) {
    const int j = v / switches, i = (v % switches) / 2, half = switches / 2;
    const int s = std::popcount(unsigned(v)) % 2 == 0 ? (i + j) % half : half + i;
    return s * nodes_per_switch + j;
  }

  const policy& tuning() const { return tuning_; }
  void complete_policy(const policy& suggested) { tuning_ = complete(tuning_, suggested); }

 private:
  policy tuning_ = select_policy();
};

template <>
struct default_algorithm<topology::bigraph> {
  using type = hdrm;
};

}  // namespace mimatrix::algorithm

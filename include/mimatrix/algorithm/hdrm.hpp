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
/// Other sizes (fewer ranks than N·M, or N·M not a power of two) run halving-doubling in
/// rank order, folding as it does (MPICH). A mapping that only put every core step across
/// the groups measured slower than rank order on 11 of 12 such shapes in the simulator
/// (64 MiB: 127.5 ms against 70.0 at 100 ranks), so none is applied; mapping them onto
/// distinct links is left.
///
/// Cost: that of halving_doubling, 2·lg p·α + 2(p-1)/p·n·β + (p-1)/p·n·γ, at full link
/// bandwidth on a full power-of-two shape, because no link carries two flows.
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
    for (int v = 0; v < size; ++v) out[std::size_t(v)] = v;
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

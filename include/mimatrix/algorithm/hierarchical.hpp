// algorithm::hierarchical: collectives in phases inside nodes and across nodes along
// rails (Horovod/NCCL hierarchical allreduce), each phase a flat algorithm's schedule on a
// subgroup, embedded with schedule/compose.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/ring.hpp"  // the default topology's default algorithm
#include "mimatrix/schedule/compose.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/hierarchical.hpp"

namespace mimatrix::algorithm {

/// As an algorithm argument of `hierarchical`: the topology's default algorithm.
struct topology_default {};

namespace detail {

template <class Algorithm, class Topology>
using resolved_t = std::conditional_t<std::is_same_v<Algorithm, topology_default>, default_for<Topology>, Algorithm>;

/// schedule::embed translates two-sided and local steps only, so one-sided algorithms
/// (GDRAA) are no phase: naming one, or a topology whose default it is, fails to compile.
template <class Algorithm>
concept composable = !requires { requires Algorithm::one_sided; };

template <class Algorithm, class Topology>
concept phase_for = !std::is_void_v<resolved_t<Algorithm, Topology>> &&
                    builds_for<resolved_t<Algorithm, Topology>, Topology> &&
                    composable<resolved_t<Algorithm, Topology>>;

}  // namespace detail

/// Hierarchical collectives on `topology::hierarchical<Local, Global>`: N nodes of L ranks,
/// LocalAlgo inside each node, GlobalAlgo along each rail (the N ranks of one local
/// rank). Allreduce on 2 nodes of 3 ranks, n elements in shards S0 S1 S2 of n/3:
///
///   phase 1  intra-node reduce-scatter (LocalAlgo, every node at once)
///     node 0: ranks 0 1 2 -> rank 0 holds node 0's sum of S0, rank 1 of S1, rank 2 of S2
///     node 1: ranks 3 4 5 -> rank 3 holds node 1's sum of S0, rank 4 of S1, rank 5 of S2
///   phase 2  inter-node allreduce of each shard on its rail (GlobalAlgo, all rails at once)
///     rail 0: 0 <-> 3 on S0      rail 1: 1 <-> 4 on S1      rail 2: 2 <-> 5 on S2
///   phase 3  intra-node allgather of the shards (LocalAlgo)
///     node 0: 0 -> S0, 1 -> S1, 2 -> S2 to the others; node 1 likewise
///
/// When L does not divide n, the last n mod L elements skip the shards: an intra-node
/// allreduce then an allreduce on every rail (fewer than L elements; no third phase).
///
/// Reduce-scatter: N intra-node reduce-scatters at once (one for the blocks of each
/// node's ranks), then a reduce-scatter along the rail. Allgather: an allgather along the
/// rail, then N intra-node allgathers (one for the blocks from each node). Broadcast: a
/// broadcast along the root's rail, then one inside every node from its rank on that rail.
///
/// Cost (allreduce, β and γ per element byte, n bytes): the local terms of LocalAlgo's
/// reduce-scatter and allgather on L ranks, plus GlobalAlgo's allreduce of n/L bytes on N
/// ranks; with rings: 2(L-1)·α_l + 2(L-1)/L·n·β_l + 2(N-1)·α_g + 2(N-1)/(N·L)·n·β_g +
/// (p-1)/p·n·γ. See docs/algorithms/hierarchical.md.
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
template <class LocalAlgo = topology_default, class GlobalAlgo = topology_default>
class hierarchical {
  static_assert(detail::composable<LocalAlgo> && detail::composable<GlobalAlgo>,
                "mimatrix: a one-sided algorithm (gdraa) cannot be a phase of algorithm::hierarchical: its phases "
                "run as messages; name ring, recursive_doubling or halving_doubling");

 public:
  static constexpr std::string_view name = "hierarchical";

  hierarchical() = default;
  hierarchical(LocalAlgo local, GlobalAlgo global) : local_(std::move(local)), global_(std::move(global)) {}

  /// Both phases take the suggestion, the topologies' defaults when they build.
  void complete_policy(const policy& suggested) {
    suggested_ = suggested;
    if constexpr (tunable<LocalAlgo>) local_.complete_policy(suggested);
    if constexpr (tunable<GlobalAlgo>) global_.complete_policy(suggested);
  }

  /// Both phases, and the chunk a topology's default phase takes (digest_of).
  std::uint64_t digest() const {
    return mimatrix::digest{}
        .mix(name)
        .mix(std::uint64_t(chunk_bytes_of(suggested_)))
        .mix(digest_of(local_))
        .mix(digest_of(global_))
        .value();
  }

  template <class Local, class Global>
    requires detail::phase_for<LocalAlgo, Local> && detail::phase_for<GlobalAlgo, Global>
  schedule::schedule build(const topology::hierarchical<Local, Global>& topo, const schedule::descriptor& desc,
                           int rank) const {
    topo.check(desc.size);
    schedule::builder b(desc, rank, name);
    if (desc.count == 0) return std::move(b).build();
    const auto& local = pick<Local>(local_, suggested_);
    const auto& global = pick<Global>(global_, suggested_);
    const phases<Local, Global, std::remove_cvref_t<decltype(local)>, std::remove_cvref_t<decltype(global)>> x{
        topo, local, global, desc, rank};
    switch (desc.kind) {
      case schedule::collective::allreduce: x.allreduce(b); break;
      case schedule::collective::reduce_scatter: x.reduce_scatter(b); break;
      case schedule::collective::allgather: x.allgather(b); break;
      case schedule::collective::broadcast: x.broadcast(b); break;
      default: refuse_collective(name, desc.kind, rank);
    }
    return std::move(b).build();
  }

 private:
  using buffer = schedule::buffer;
  using collective = schedule::collective;
  using ids = std::vector<schedule::step_id>;

  /// The algorithm to run on `Topology`: the one given, or the topology's default.
  template <class Topology, class Algorithm>
  static decltype(auto) pick(const Algorithm& given, const policy& suggested) {
    if constexpr (std::is_same_v<Algorithm, topology_default>) {
      default_for<Topology> chosen{};
      if constexpr (tunable<default_for<Topology>>) chosen.complete_policy(suggested);
      return chosen;
    } else {
      return (given);
    }
  }

  /// One call on one rank: who it is in its node and on its rail, and the phases.
  template <class Local, class Global, class L, class G>
  struct phases {
    const topology::hierarchical<Local, Global>& topo;
    const L& local_algo;
    const G& global_algo;
    const schedule::descriptor& desc;
    int rank;

    int local_size() const { return topo.local_size(); }
    int nodes() const { return topo.node_count(desc.size); }
    int node() const { return topo.node_of(rank); }
    int local_rank() const { return topo.local_rank(rank); }
    std::size_t es() const { return desc.elem_size; }
    std::size_t block_bytes() const { return desc.count * es(); }

    schedule::descriptor sub(collective kind, int size, std::size_t count, int root = 0) const {
      return {kind, size, count, es(), root};
    }
    /// Intra-node phases exchange only within a node and rail phases only within a rail:
    /// no pair of ranks is in both, so the two families may reuse tags. Within a family,
    /// each embedding gets its own offset of a shared stride.
    schedule::embedding in_node(schedule::tag_map tags, bool keep_finalize = false) const {
      schedule::embedding e;
      e.ranks = topo.node_ranks(node());
      e.tags = tags;
      e.keep_finalize = keep_finalize;
      return e;
    }
    schedule::embedding on_rail(schedule::tag_map tags, bool keep_finalize = true) const {
      schedule::embedding e;
      e.ranks = topo.rail_ranks(local_rank(), desc.size);
      e.tags = tags;
      e.keep_finalize = keep_finalize;
      return e;
    }
    /// Blocks of `bytes` each: sub block j at host block blocks[j] of `where`.
    static schedule::region_map blocks(buffer where, const std::vector<int>& at, std::size_t bytes) {
      schedule::region_map m;
      for (std::size_t j = 0; j < at.size(); ++j) m.place(j * bytes, bytes, where, std::size_t(at[j]) * bytes);
      return m;
    }

    /// Shards of ⌊n/L⌋ elements through the three phases; the remainder by an intra-node
    /// then a rail allreduce.
    void allreduce(schedule::builder& b) const {
      const auto l = static_cast<std::size_t>(local_size());
      const std::size_t shard = desc.count / l, rest = desc.count % l;
      const auto j = static_cast<std::size_t>(local_rank());
      constexpr std::uint32_t intra_phases = 3, rail_phases = 2;  // tag strides
      if (shard > 0) {
        auto rs = in_node({intra_phases, 0});
        rs.input = schedule::region_map::at(buffer::input, 0);
        rs.output = schedule::region_map::at(buffer::output, j * shard * es());
        const auto reduced = schedule::embed(
            b, local_algo.build(topo.local_topology(), sub(collective::reduce_scatter, local_size(), shard), local_rank()),
            rs);
        auto ar = on_rail({rail_phases, 0});
        ar.input = ar.output = schedule::region_map::at(buffer::output, j * shard * es());
        const auto summed = schedule::embed(
            b, global_algo.build(topo.global_topology(), sub(collective::allreduce, nodes(), shard), node()), ar,
            reduced);
        // The allgather's input is block j of its output: in place, as every algorithm allows.
        auto ag = in_node({intra_phases, 1});
        ag.input = schedule::region_map::at(buffer::output, j * shard * es());
        ag.output = schedule::region_map::at(buffer::output, 0);
        (void)schedule::embed(
            b, local_algo.build(topo.local_topology(), sub(collective::allgather, local_size(), shard), local_rank()),
            ag, summed);
      }
      if (rest > 0) {
        const std::size_t at = l * shard * es();
        auto ar = in_node({intra_phases, 2});
        ar.input = schedule::region_map::at(buffer::input, at);
        ar.output = schedule::region_map::at(buffer::output, at);
        const auto node_sum = schedule::embed(
            b, local_algo.build(topo.local_topology(), sub(collective::allreduce, local_size(), rest), local_rank()),
            ar);
        auto rail = on_rail({rail_phases, 1});
        rail.input = rail.output = schedule::region_map::at(buffer::output, at);
        (void)schedule::embed(
            b, global_algo.build(topo.global_topology(), sub(collective::allreduce, nodes(), rest), node()), rail,
            node_sum);
      }
    }

    /// Rank r wants block r. Inside each node k, a reduce-scatter of the blocks of node
    /// k's ranks leaves local rank j with node-sums of the blocks of rank (k, j) for every
    /// k, in a scratch slot per node; the rail's reduce-scatter of those slots finishes.
    void reduce_scatter(schedule::builder& b) const {
      const int n_nodes = nodes();
      const auto slots = b.scratch(std::size_t(n_nodes) * block_bytes());
      ids reduced;
      for (int k = 0; k < n_nodes; ++k) {
        auto rs = in_node({static_cast<std::uint32_t>(n_nodes), static_cast<std::uint32_t>(k)});
        rs.input = blocks(buffer::input, topo.node_ranks(k), block_bytes());
        rs.output = schedule::region_map::at(buffer::scratch, slots.offset + std::size_t(k) * block_bytes());
        const auto exits = schedule::embed(
            b, local_algo.build(topo.local_topology(), sub(collective::reduce_scatter, local_size(), desc.count),
                                local_rank()),
            rs);
        reduced.insert(reduced.end(), exits.begin(), exits.end());
      }
      auto rail = on_rail({1, 0});
      rail.input = schedule::region_map::at(buffer::scratch, slots.offset);
      rail.output = schedule::region_map::at(buffer::output, 0);
      (void)schedule::embed(
          b, global_algo.build(topo.global_topology(), sub(collective::reduce_scatter, n_nodes, desc.count), node()),
          rail, reduced);
    }

    /// Rank (k, j) first gathers the blocks of rail j, block of rank (k', j) in its place,
    /// then node by node gathers the blocks of the other local ranks.
    void allgather(schedule::builder& b) const {
      const int n_nodes = nodes();
      auto rail = on_rail({1, 0});
      rail.input = schedule::region_map::at(buffer::input, 0);
      rail.output = blocks(buffer::output, topo.rail_ranks(local_rank(), desc.size), block_bytes());
      const auto gathered = schedule::embed(
          b, global_algo.build(topo.global_topology(), sub(collective::allgather, n_nodes, desc.count), node()), rail);
      for (int k = 0; k < n_nodes; ++k) {
        auto ag = in_node({static_cast<std::uint32_t>(n_nodes), static_cast<std::uint32_t>(k)});
        ag.input = schedule::region_map::at(buffer::output, std::size_t(topo.rank_at(k, local_rank())) * block_bytes());
        ag.output = blocks(buffer::output, topo.node_ranks(k), block_bytes());
        (void)schedule::embed(
            b, local_algo.build(topo.local_topology(), sub(collective::allgather, local_size(), desc.count),
                                local_rank()),
            ag, gathered);
      }
    }

    /// Along the root's rail, then inside every node from that rail's rank.
    void broadcast(schedule::builder& b) const {
      const int root_node = topo.node_of(desc.root), root_local = topo.local_rank(desc.root);
      ids arrived;
      if (local_rank() == root_local) {
        auto rail = on_rail({1, 0});
        rail.input = schedule::region_map::at(buffer::input, 0);
        rail.output = schedule::region_map::at(buffer::output, 0);
        arrived = schedule::embed(
            b, global_algo.build(topo.global_topology(), sub(collective::broadcast, nodes(), desc.count, root_node),
                                 node()),
            rail);
      }
      // The node's root reads what the rail delivered into the output; others read nothing.
      auto bc = in_node({1, 0});
      bc.input = schedule::region_map::at(local_rank() == root_local ? buffer::output : buffer::input, 0);
      bc.output = schedule::region_map::at(buffer::output, 0);
      (void)schedule::embed(
          b, local_algo.build(topo.local_topology(), sub(collective::broadcast, local_size(), desc.count, root_local),
                              local_rank()),
          bc, arrived);
    }
  };

  [[no_unique_address]] LocalAlgo local_{};
  [[no_unique_address]] GlobalAlgo global_{};
  policy suggested_{};  // for phases left to the topology's default
};

/// Each part's default: rings inside nodes and along rails for hierarchical<ring, ring>;
/// none where a part's default is no phase (GDRAA, a mesh's).
template <class Local, class Global>
struct default_algorithm<topology::hierarchical<Local, Global>> {
  using type = std::conditional_t<!detail::phase_for<topology_default, Local> ||
                                      !detail::phase_for<topology_default, Global>,
                                  void, hierarchical<default_for<Local>, default_for<Global>>>;
};

}  // namespace mimatrix::algorithm

// algorithm::binomial: reduce, gather and scatter along a binomial tree rooted at the
// call's root — ⌈lg p⌉ rounds, latency-optimal for small and medium messages.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/detail/partition.hpp"
#include "mimatrix/algorithm/detail/rooted.hpp"
#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/model/cost.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::algorithm {

/// Binomial-tree rooted collectives on any topology (ranks in rank order, any root).
///
/// Positions count from the root (v = rank - root mod p). Gather on p = 8: in round k
/// every position with lowbit(v) = 2^k sends everything its subtree holds to v - 2^k,
/// one message of 2^k blocks in position order; scatter runs the rounds backwards;
/// reduce sends partial sums of the whole buffer instead of blocks:
///
///   round 0        round 1        round 2        the root (position 0) holds
///     1 -> 0         2 -> 0         4 -> 0         blocks 0..7, or the sum of all
///     3 -> 2         6 -> 4
///     5 -> 4
///     7 -> 6
///
/// A subtree's positions wrap past rank p-1 at most once, below the root: those go as
/// two messages, one for each run of consecutive ranks, straight from and into the
/// root's buffer. Elsewhere a subtree's blocks sit in scratch, in position order. Reduce
/// is cut into chunks of the policy's size, so the levels of the tree pipeline.
///
/// Cost: reduce ⌊lg p⌋α + ⌈lg p⌉·n(β + γ); gather, scatter ⌊lg p⌋α + (p-1)/p·Nβ (N:
/// the root's p blocks). The root takes ⌈lg p⌉ messages, but the longest chain of them,
/// from the deepest position (2^⌊lg p⌋ - 1), is ⌊lg p⌋ hops: on other p than powers of
/// two, the subtrees' start-ups overlap the root's other messages.
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class binomial {
 public:
  static constexpr std::string_view name = "binomial";

  static constexpr bool runs(schedule::collective k) {
    return k == schedule::collective::reduce || k == schedule::collective::gather ||
           k == schedule::collective::scatter;
  }

  binomial() = default;
  explicit binomial(policy tuning) : tuning_(tuning) {}

  template <topology::layout Topology>
  schedule::schedule build(const Topology& topo, const schedule::descriptor& desc, int rank) const {
    topo.check(desc.size);
    schedule::builder b(desc, rank, name);
    if (!runs(desc.kind)) detail::refuse_collective(name, desc, rank, "reduce, gather and scatter");
    if (desc.count == 0) return std::move(b).build();
    if (desc.size == 1) {
      detail::build_rooted_single(b);
      return std::move(b).build();
    }
    const detail::binomial_tree tree(desc, rank);
    switch (desc.kind) {
      case schedule::collective::reduce:
        build_reduce(b, tree, detail::chunk_elems_for(tuning_, desc.elem_size));
        break;
      case schedule::collective::gather: build_gather(b, tree); break;
      case schedule::collective::scatter: build_scatter(b, tree); break;
      default: break;
    }
    return std::move(b).build();
  }

  /// The α-β-γ time of `d` (model::cost's conventions), or nothing for what it does not run.
  std::optional<double> predict(const model::network& net, const schedule::descriptor& d) const {
    if (!runs(d.kind)) return std::nullopt;
    if (d.size <= 1) return 0.0;
    const auto& l = net.link;
    const double hops = model::detail::folding(d.size).lg, n = double(d.count) * double(d.elem_size);
    if (d.kind == schedule::collective::reduce)
      return hops * l.alpha + model::detail::ceil_lg(d.size) * n * (l.beta + l.gamma);
    return hops * l.alpha + model::detail::fraction(d.size) * n * d.size * l.beta;
  }

  const policy& tuning() const { return tuning_; }
  void complete_policy(const policy& suggested) { tuning_ = complete(tuning_, suggested); }

 private:
  using buffer = schedule::buffer;
  using region = schedule::region;

  /// Each chunk climbs the tree on its own (tag = chunk): a rank adds its children's
  /// partial sums, the smallest subtree (the first ready) first, into scratch — into
  /// the output on the root, whose input may be that output (recv_reduce allows it).
  static void build_reduce(schedule::builder& b, const detail::binomial_tree& t, std::size_t chunk_elems) {
    const auto& d = b.desc();
    const auto es = d.elem_size;
    auto children = t.children();
    std::reverse(children.begin(), children.end());
    const bool root = t.position == 0;
    region acc{buffer::output, 0, d.count * es};
    if (!root && !children.empty()) acc = b.scratch(d.count * es);
    const detail::chunking ch{d.count, chunk_elems};
    for (std::size_t k = 0; k < ch.chunks(); ++k) {
      const auto tag = static_cast<std::uint32_t>(k);
      const auto at = [&](region r) { return region{r.where, r.offset + ch.start(k) * es, ch.length(k) * es}; };
      region src = at({buffer::input, 0, d.count * es});
      std::vector<schedule::step_id> last;
      for (int c : children) {
        last.assign(1, b.add(schedule::step_kind::recv_reduce, t.rank_at(c), tag, src, at(acc), last));
        src = at(acc);
      }
      if (root)
        b.add(schedule::step_kind::finalize, -1, 0, {}, at(acc), last);
      else
        b.add(schedule::step_kind::send, t.rank_at(t.parent()), tag, src, {}, last);
    }
  }

  /// Blocks [first, first + blocks) of positions counted from `base`, in `r`.
  static region blocks_of(region r, int first, int blocks, std::size_t block) {
    return {r.where, r.offset + std::size_t(first) * block, std::size_t(blocks) * block};
  }

  /// What position v's subtree holds, as the messages between v and its parent: one,
  /// or a message a run of ranks below the root (tag = run); offsets from position v.
  static std::vector<detail::rank_run> to_parent(const detail::binomial_tree& t, int v) {
    if (v - t.span(v) == 0) return t.runs(v, v + t.extent(v));
    return {{v, t.rank_at(v), t.extent(v)}};
  }

  static void build_gather(schedule::builder& b, const detail::binomial_tree& t) {
    const auto& d = b.desc();
    const std::size_t block = d.count * d.elem_size;
    const region in{buffer::input, 0, block};
    const int v = t.position;
    if (v == 0) {
      // In place the input is the root's output block: the copy is then a no-op.
      b.copy(in, blocks_of({buffer::output, 0, 0}, t.root, 1, block));
      for (int c : t.children()) {
        std::uint32_t tag = 0;
        for (const auto& run : to_parent(t, c))
          b.recv(t.rank_at(c), tag++, blocks_of({buffer::output, 0, 0}, run.rank, run.blocks, block));
      }
      return;
    }
    const int extent = t.extent(v);
    std::vector<schedule::step_id> held;
    region acc = in;
    if (extent > 1) {
      acc = b.scratch(std::size_t(extent) * block);
      held.push_back(b.copy(in, blocks_of(acc, 0, 1, block)));
      for (int c : t.children()) held.push_back(b.recv(t.rank_at(c), 0, blocks_of(acc, c - v, t.extent(c), block)));
    }
    std::uint32_t tag = 0;
    for (const auto& run : to_parent(t, v))
      b.add(schedule::step_kind::send, t.rank_at(t.parent()), tag++, blocks_of(acc, run.first - v, run.blocks, block),
            {}, held);
  }

  /// One send after another, the largest subtree first (as recursive_doubling's
  /// broadcast: sent at once they would share the link and delay every subtree).
  static void build_scatter(schedule::builder& b, const detail::binomial_tree& t) {
    const auto& d = b.desc();
    const std::size_t block = d.count * d.elem_size;
    const region out{buffer::output, 0, block};
    const int v = t.position;
    std::vector<schedule::step_id> after;
    if (v == 0) {
      for (int c : t.children()) {
        std::uint32_t tag = 0;
        for (const auto& run : to_parent(t, c)) {
          const auto src = blocks_of({buffer::input, 0, 0}, run.rank, run.blocks, block);
          after.assign(1, b.add(schedule::step_kind::send, t.rank_at(c), tag++, src, {}, after));
        }
      }
      // In place the output is the root's input block, which no send reads.
      b.copy(blocks_of({buffer::input, 0, 0}, t.root, 1, block), out);
      return;
    }
    const int extent = t.extent(v);
    const region acc = extent > 1 ? b.scratch(std::size_t(extent) * block) : out;
    std::vector<schedule::step_id> held;
    std::uint32_t tag = 0;
    for (const auto& run : to_parent(t, v))
      held.push_back(b.recv(t.rank_at(t.parent()), tag++, blocks_of(acc, run.first - v, run.blocks, block)));
    if (extent == 1) return;
    b.add(schedule::step_kind::copy, -1, 0, blocks_of(acc, 0, 1, block), out, held);
    after = held;
    for (int c : t.children())
      after.assign(1, b.add(schedule::step_kind::send, t.rank_at(c), 0, blocks_of(acc, c - v, t.extent(c), block),
                            {}, after));
  }

  policy tuning_ = select_policy();
};

}  // namespace mimatrix::algorithm

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

#include "mimatrix/algorithm/default_for.hpp"
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
/// two runs, one for each run of consecutive ranks, straight from and into the root's
/// buffer. Elsewhere a subtree's blocks sit in scratch, in position order. Every message
/// is cut into chunks of the policy's size (a run's bytes, so small blocks still travel
/// together), and each chunk moves on as soon as what it holds has arrived: the levels
/// of the tree pipeline, for reduce, gather and scatter alike.
///
/// Cost: reduce ⌊lg p⌋α + ⌈lg p⌉·n(β + γ); gather, scatter ⌊lg p⌋α + (p-1)/p·Nβ (N:
/// the root's p blocks). The root takes ⌈lg p⌉ runs, but the longest chain of them,
/// from the deepest position (2^⌊lg p⌋ - 1), is ⌊lg p⌋ hops: on other p than powers of
/// two, the subtrees' start-ups overlap the root's other messages. Chunked, the
/// bandwidth term stays the root's (p-1)/p·Nβ; filling the pipeline adds up to ⌊lg p⌋
/// chunks' β, which the model leaves out.
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
    if (!runs(desc.kind)) refuse_collective(name, desc.kind, rank);
    if (desc.count == 0) return std::move(b).build();
    if (desc.size == 1) {
      detail::build_rooted_single(b);
      return std::move(b).build();
    }
    const detail::binomial_tree tree(desc, rank);
    const std::size_t chunk_elems = detail::chunk_elems_for(tuning_, desc.elem_size);
    switch (desc.kind) {
      case schedule::collective::reduce: build_reduce(b, tree, chunk_elems); break;
      case schedule::collective::gather: build_gather(b, tree, chunk_elems); break;
      case schedule::collective::scatter: build_scatter(b, tree, chunk_elems); break;
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
      const auto at = [&](region r) { return detail::chunk_of(r, ch, k, es); };
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

  /// What position v's subtree holds, as the runs between v and its parent: one, or a
  /// run of ranks below the root each; offsets from position v.
  static std::vector<detail::rank_run> to_parent(const detail::binomial_tree& t, int v) {
    if (v - t.span(v) == 0) return t.runs(v, v + t.extent(v));
    return {{v, t.rank_at(v), t.extent(v)}};
  }

  /// The messages between position c and its parent: each run, where `place(run)` has
  /// it, cut into chunks; `f(chunk, tag)`, the tag counting them (both ends agree).
  template <class Place, class F>
  static void for_each_message(const detail::binomial_tree& t, int c, std::size_t chunk_elems, std::size_t elem_size,
                               Place place, F f) {
    std::uint32_t tag = 0;
    for (const auto& run : to_parent(t, c))
      detail::for_each_chunk(place(run), chunk_elems, elem_size, [&](region piece, std::size_t) { f(piece, tag++); });
  }

  /// The steps that wrote ranges of one scratch region, by offset, so that a chunk read
  /// from it waits for just the writes it overlaps (read in increasing offsets).
  struct writes {
    std::vector<std::pair<region, schedule::step_id>> by_offset;
    std::size_t from = 0;

    void sort() {
      std::sort(by_offset.begin(), by_offset.end(),
                [](const auto& x, const auto& y) { return x.first.offset < y.first.offset; });
    }
    void rewind() { from = 0; }
    /// The writes that overlap `r` appended to `deps`; `r` may not start before the last.
    void overlapping(region r, std::vector<schedule::step_id>& deps) {
      const auto end = [](region x) { return x.offset + x.bytes; };
      while (from < by_offset.size() && end(by_offset[from].first) <= r.offset) ++from;
      for (std::size_t j = from; j < by_offset.size() && by_offset[j].first.offset < end(r); ++j)
        deps.push_back(by_offset[j].second);
    }
  };

  /// Each chunk of a subtree's range climbs on its own: a rank forwards it once the
  /// writes it overlaps (its own block's copy, its children's chunks) are done.
  static void build_gather(schedule::builder& b, const detail::binomial_tree& t, std::size_t chunk_elems) {
    const auto& d = b.desc();
    const std::size_t es = d.elem_size, block = d.count * es;
    const region in{buffer::input, 0, block};
    const int v = t.position;
    if (v == 0) {
      // In place the input is the root's output block: the copy is then a no-op.
      b.copy(in, blocks_of({buffer::output, 0, 0}, t.root, 1, block));
      for (int c : t.children())
        for_each_message(
            t, c, chunk_elems, es,
            [&](const detail::rank_run& run) { return blocks_of({buffer::output, 0, 0}, run.rank, run.blocks, block); },
            [&](region piece, std::uint32_t tag) { b.recv(t.rank_at(c), tag, piece); });
      return;
    }
    region acc = in;
    writes held;
    if (t.extent(v) > 1) {
      acc = b.scratch(std::size_t(t.extent(v)) * block);
      const region own = blocks_of(acc, 0, 1, block);
      held.by_offset.emplace_back(own, b.copy(in, own));
      for (int c : t.children())
        for_each_message(
            t, c, chunk_elems, es,
            [&](const detail::rank_run& run) { return blocks_of(acc, run.first - v, run.blocks, block); },
            [&](region piece, std::uint32_t tag) { held.by_offset.emplace_back(piece, b.recv(t.rank_at(c), tag, piece)); });
      held.sort();
    }
    std::vector<schedule::step_id> after;
    for_each_message(
        t, v, chunk_elems, es,
        [&](const detail::rank_run& run) { return blocks_of(acc, run.first - v, run.blocks, block); },
        [&](region piece, std::uint32_t tag) {
          after.clear();
          held.overlapping(piece, after);
          b.add(schedule::step_kind::send, t.rank_at(t.parent()), tag, piece, {}, after);
        });
  }

  /// One child after another, the largest subtree first (as recursive_doubling's
  /// broadcast: sent at once they would share the link and delay every subtree): a
  /// child's chunks wait for the previous child's last; each chunk a rank forwards
  /// waits too for the chunks from its parent that it overlaps.
  static void build_scatter(schedule::builder& b, const detail::binomial_tree& t, std::size_t chunk_elems) {
    const auto& d = b.desc();
    const std::size_t es = d.elem_size, block = d.count * es;
    const region out{buffer::output, 0, block};
    const int v = t.position;
    const int extent = t.extent(v);
    const region acc = v == 0 ? region{buffer::input, 0, 0} : extent > 1 ? b.scratch(std::size_t(extent) * block) : out;
    writes held;
    if (v != 0) {
      for_each_message(
          t, v, chunk_elems, es,
          [&](const detail::rank_run& run) { return blocks_of(acc, run.first - v, run.blocks, block); },
          [&](region piece, std::uint32_t tag) {
            held.by_offset.emplace_back(piece, b.recv(t.rank_at(t.parent()), tag, piece));
          });
      if (extent == 1) return;
      std::vector<schedule::step_id> own;
      held.overlapping(blocks_of(acc, 0, 1, block), own);
      b.add(schedule::step_kind::copy, -1, 0, blocks_of(acc, 0, 1, block), out, own);
    }
    // The root's runs sit in its input at their ranks' blocks; elsewhere in scratch.
    const auto place = [&](const detail::rank_run& run) {
      return v == 0 ? blocks_of(acc, run.rank, run.blocks, block) : blocks_of(acc, run.first - v, run.blocks, block);
    };
    std::optional<schedule::step_id> previous_child;
    std::vector<schedule::step_id> after;
    for (int c : t.children()) {
      const auto before = previous_child;
      held.rewind();
      for_each_message(t, c, chunk_elems, es, place, [&](region piece, std::uint32_t tag) {
        after.clear();
        if (before) after.push_back(*before);
        held.overlapping(piece, after);
        previous_child = b.add(schedule::step_kind::send, t.rank_at(c), tag, piece, {}, after);
      });
    }
    // In place the root's output is its input block, which no send reads.
    if (v == 0) b.copy(blocks_of(acc, t.root, 1, block), out);
  }

  policy tuning_ = select_policy();
};

}  // namespace mimatrix::algorithm

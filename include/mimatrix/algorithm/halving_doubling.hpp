// algorithm::halving_doubling: Rabenseifner's allreduce (recursive-halving
// reduce-scatter, then recursive-doubling allgather), its two halves as reduce_scatter
// and allgather, and a scatter + allgather broadcast; any group size through MPICH's
// fold, any rank mapping (HDRM reuses it with its own).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/detail/fold.hpp"
#include "mimatrix/algorithm/detail/partition.hpp"
#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::algorithm {
namespace detail {

/// Elements [start, start + length) of a buffer.
struct element_range {
  std::size_t start = 0;
  std::size_t length = 0;
};

/// The data a core index is responsible for: its element ranges (its "units"), the same
/// in every buffer. Recursive halving and doubling move units of ranges of core indices.
using unit_map = std::vector<std::vector<element_range>>;

/// Where element e of a unit lives: `base` bytes into buffer `where`.
struct place {
  schedule::buffer where = schedule::buffer::output;
  std::size_t base = 0;
};

/// A step that wrote (or read) an element range: dependencies are taken on the steps
/// whose ranges overlap, so chunks pipeline and dependency lists stay short.
struct access {
  element_range range;
  schedule::step_id id = 0;
};
using accesses = std::vector<access>;

/// The steps in `list` whose range overlaps `r`.
inline std::vector<schedule::step_id> overlapping(const accesses& list, element_range r) {
  std::vector<schedule::step_id> out;
  for (const auto& a : list)
    if (a.range.start < r.start + r.length && r.start < a.range.start + a.range.length) out.push_back(a.id);
  return out;
}

inline void append(accesses& to, const accesses& from) { to.insert(to.end(), from.begin(), from.end()); }

/// The steps of recursive halving and doubling over a fold, for one rank. A step's
/// message is the merged element ranges of a range of core indices, cut into chunks;
/// both sides derive the same ranges, so empty ones are skipped on both.
class halving_doubling_steps {
 public:
  halving_doubling_steps(schedule::builder& b, const fold& f, std::size_t chunk_elems)
      : b_(b), fold_(f), chunk_elems_(chunk_elems), es_(b.desc().elem_size) {
    const auto& d = b.desc();
    const std::size_t total = d.largest_bytes() / es_;
    stride_ = std::size_t(d.size) + chunking{total, chunk_elems_}.chunks() + 1;
  }

  int index() const { return fold_.index_of(b_.rank()); }
  bool extra() const { return fold_.is_extra(b_.rank()); }
  /// The core rank an extra folds into, or the extra folded into a core rank (-1: none).
  int fold_partner() const { return extra() ? fold_.core_rank(index()) : fold_.extra_rank(index()); }

  /// The units of core indices [lo, hi), sorted, adjacent ones merged, empty ones dropped.
  static std::vector<element_range> ranges(const unit_map& units, int lo, int hi) {
    std::vector<element_range> all;
    for (int c = lo; c < hi; ++c)
      for (const auto& u : units[std::size_t(c)])
        if (u.length) all.push_back(u);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
    std::vector<element_range> merged;
    for (const auto& u : all) {
      if (!merged.empty() && merged.back().start + merged.back().length == u.start)
        merged.back().length += u.length;
      else
        merged.push_back(u);
    }
    return merged;
  }

  schedule::region region(place at, element_range r) const { return {at.where, at.base + r.start * es_, r.length * es_}; }

  /// Each chunk waits for the steps of `after` that overlap it.
  accesses send(int peer, int step, place from, const std::vector<element_range>& rs, const accesses& after) {
    return messages(rs, step, [&](element_range r, std::uint32_t tag) {
      return b_.add(schedule::step_kind::send, peer, tag, region(from, r), {}, overlapping(after, r));
    });
  }
  accesses recv(int peer, int step, place to, const std::vector<element_range>& rs, const accesses& after) {
    return messages(rs, step, [&](element_range r, std::uint32_t tag) {
      return b_.add(schedule::step_kind::recv, peer, tag, {}, region(to, r), overlapping(after, r));
    });
  }
  /// to = op(from, what peer sent), element range by element range.
  accesses recv_reduce(int peer, int step, place from, place to, const std::vector<element_range>& rs,
                       const accesses& after) {
    return messages(rs, step, [&](element_range r, std::uint32_t tag) {
      return b_.add(schedule::step_kind::recv_reduce, peer, tag, region(from, r), region(to, r), overlapping(after, r));
    });
  }
  /// Finalizes `at` over each range of `written`, after the step that wrote it.
  accesses finalize(place at, const accesses& written) {
    accesses out;
    for (const auto& w : written)
      out.push_back({w.range, b_.add(schedule::step_kind::finalize, -1, 0, {}, region(at, w.range),
                                     std::vector<schedule::step_id>{w.id})});
    return out;
  }
  access copy(place from, place to, element_range r, const accesses& after) {
    return {r, b_.add(schedule::step_kind::copy, -1, 0, region(from, r), region(to, r), overlapping(after, r))};
  }

  /// What recursive halving leaves behind: the steps that wrote this rank's units, and
  /// the sends of every step (the doubling's receives must wait for them).
  struct halving_result {
    accesses last;
    std::vector<accesses> sends;  // sends[k]: step k, distance core/2^(k+1)
  };

  /// Recursive halving over the core: at step k the partner is index ^ (core >> (k+1));
  /// each keeps the half of its range that holds its own index, reduces the partner's
  /// copy of it from `from` (then `to`) into `to`, and sends the other half. At the end
  /// core index c holds units[c], reduced over the whole group, in `to`.
  halving_result halving(const unit_map& units, place from, place to, accesses last, int first_step) {
    const int core = fold_.core_size(), c = index();
    halving_result result;
    int lo = 0, hi = core;
    for (int mask = core / 2, k = 0; mask >= 1; mask /= 2, ++k) {
      const int partner = fold_.core_rank(c ^ mask), mid = lo + mask;
      const bool upper = (c & mask) != 0;
      const auto give = ranges(units, upper ? lo : mid, upper ? mid : hi);
      const auto keep = ranges(units, upper ? mid : lo, upper ? hi : mid);
      result.sends.push_back(send(partner, first_step + k, from, give, last));
      last = recv_reduce(partner, first_step + k, from, to, keep, last);
      (upper ? lo : hi) = mid;
      from = to;
    }
    result.last = std::move(last);
    return result;
  }

  /// Recursive doubling over the core: at step k the partner is index ^ 2^k; each sends
  /// the range of units it holds (after `ready`, what wrote it) and receives the
  /// partner's, after `guard(2^k)` (what still reads it). Returns every write.
  template <class Guard>
  accesses doubling(const unit_map& units, place at, accesses ready, Guard&& guard, int first_step) {
    const int core = fold_.core_size(), c = index();
    for (int mask = 1, k = 0; mask < core; mask *= 2, ++k) {
      const int partner = fold_.core_rank(c ^ mask);
      const int mine = c & ~(mask - 1), theirs = (c ^ mask) & ~(mask - 1);
      send(partner, first_step + k, at, ranges(units, mine, mine + mask), ready);
      append(ready, recv(partner, first_step + k, at, ranges(units, theirs, theirs + mask), guard(mask)));
    }
    return ready;
  }

 private:
  /// One message a chunk of each range; tags are unique per step and pair.
  template <class Emit>
  accesses messages(const std::vector<element_range>& rs, int step, Emit&& emit) {
    accesses out;
    std::size_t m = 0;
    for (const auto& r : rs) {
      const chunking ch{r.length, chunk_elems_};
      for (std::size_t k = 0; k < ch.chunks(); ++k, ++m) {
        const element_range piece{r.start + ch.start(k), ch.length(k)};
        out.push_back({piece, emit(piece, static_cast<std::uint32_t>(std::size_t(step) * stride_ + m))});
      }
    }
    return out;
  }

  schedule::builder& b_;
  const fold& fold_;
  std::size_t chunk_elems_;
  std::size_t es_;
  std::size_t stride_;
};

/// Units of a reduce_scatter or allgather: the blocks (of `n` elements, block j at j·n)
/// of a core index's rank and of the rank folded into it.
inline unit_map rank_blocks(const fold& f, std::size_t n) {
  unit_map units(static_cast<std::size_t>(f.core_size()));
  for (int c = 0; c < f.core_size(); ++c) {
    units[std::size_t(c)].push_back({std::size_t(f.core_rank(c)) * n, n});
    if (f.extra_rank(c) >= 0) units[std::size_t(c)].push_back({std::size_t(f.extra_rank(c)) * n, n});
  }
  return units;
}

/// p = 1: the result is the input.
inline void build_single(schedule::builder& b) {
  const auto& d = b.desc();
  const auto c = b.copy({schedule::buffer::input, 0, d.input_bytes(0)}, {schedule::buffer::output, 0, d.output_bytes(0)});
  if (d.kind == schedule::collective::allreduce || d.kind == schedule::collective::reduce_scatter)
    b.finalize({schedule::buffer::output, 0, d.output_bytes(0)}, {c});
}

inline constexpr place input_at{schedule::buffer::input, 0};
inline constexpr place output_at{schedule::buffer::output, 0};

/// Rabenseifner: fold, recursive-halving reduce-scatter of `count` elements in core
/// blocks, finalize the own block, recursive-doubling allgather, unfold.
inline void build_hd_allreduce(schedule::builder& b, const fold& f, std::size_t chunk_elems) {
  halving_doubling_steps s(b, f, chunk_elems);
  const int core = f.core_size(), lg = f.steps();
  const std::vector<element_range> all{{0, b.desc().count}};
  if (s.extra()) {
    const auto sent = s.send(s.fold_partner(), 0, input_at, all, {});
    s.recv(s.fold_partner(), 2 * lg + 1, output_at, all, sent);
    return;
  }
  const block_partition part{b.desc().count, std::size_t(core)};
  unit_map units(static_cast<std::size_t>(core));
  for (int k = 0; k < core; ++k) units[std::size_t(k)].push_back({part.start(std::size_t(k)), part.length(std::size_t(k))});

  accesses last;
  place from = input_at;
  if (s.fold_partner() >= 0) {
    last = s.recv_reduce(s.fold_partner(), 0, input_at, output_at, all, {});
    from = output_at;
  }
  const auto half = s.halving(units, from, output_at, last, 1);
  auto ready = s.finalize(output_at, half.last);
  // The doubling receive at distance m overwrites what the halving sent at distance m.
  ready = s.doubling(units, output_at, ready,
                     [&](int mask) -> const accesses& { return half.sends[std::size_t(lg - 1 - std::countr_zero(unsigned(mask)))]; },
                     1 + lg);
  if (s.fold_partner() >= 0) s.send(s.fold_partner(), 2 * lg + 1, output_at, all, ready);
}

/// The halving half with partial sums in a scratch copy of the input; the own block is
/// copied out and finalized, the folded rank's block finalized and sent to it.
inline void build_hd_reduce_scatter(schedule::builder& b, const fold& f, std::size_t chunk_elems) {
  halving_doubling_steps s(b, f, chunk_elems);
  const std::size_t n = b.desc().count, p = std::size_t(f.size());
  const int lg = f.steps();
  if (s.extra()) {
    const auto sent = s.send(s.fold_partner(), 0, input_at, {{0, p * n}}, {});
    // In place the output is block `rank` of the input, which the send reads.
    accesses shifted;
    for (const auto& a : sent)
      if (a.range.start < (std::size_t(b.rank()) + 1) * n && std::size_t(b.rank()) * n < a.range.start + a.range.length)
        shifted.push_back({{0, n}, a.id});
    s.recv(s.fold_partner(), lg + 1, output_at, {{0, n}}, shifted);
    return;
  }
  const auto acc_region = b.scratch(p * n * b.desc().elem_size);
  const place acc{acc_region.where, acc_region.offset};
  accesses last;
  place from = input_at;
  if (s.fold_partner() >= 0) {
    last = s.recv_reduce(s.fold_partner(), 0, input_at, acc, {{0, p * n}}, {});
    from = acc;
  }
  const auto half = s.halving(rank_blocks(f, n), from, acc, last, 1);
  const element_range own{std::size_t(b.rank()) * n, n};
  const auto out = b.add(schedule::step_kind::copy, -1, 0, s.region(acc, own), s.region(output_at, {0, n}),
                         overlapping(half.last, own));
  b.finalize(s.region(output_at, {0, n}), {out});
  if (s.fold_partner() >= 0) {
    const element_range theirs{std::size_t(s.fold_partner()) * n, n};
    accesses written;  // the parts of the last writes that fall in the folded rank's block
    for (const auto& a : half.last) {
      const auto lo = std::max(a.range.start, theirs.start);
      const auto hi = std::min(a.range.start + a.range.length, theirs.start + theirs.length);
      if (lo < hi) written.push_back({{lo, hi - lo}, a.id});
    }
    s.send(s.fold_partner(), lg + 1, acc, {theirs}, s.finalize(acc, written));
  }
}

/// The doubling half: each rank's block starts in its output slot (the folded rank's
/// arrives first), doubles lg p times, and the whole result goes back to the folded rank.
inline void build_hd_allgather(schedule::builder& b, const fold& f, std::size_t chunk_elems) {
  halving_doubling_steps s(b, f, chunk_elems);
  const std::size_t n = b.desc().count, p = std::size_t(f.size());
  const int lg = f.steps();
  const std::vector<element_range> everything{{0, p * n}};
  const element_range own{std::size_t(b.rank()) * n, n};
  if (s.extra()) {
    const auto sent = s.send(s.fold_partner(), 0, input_at, {{0, n}}, {});
    accesses shifted;  // in place the input is block `rank` of the output
    for (const auto& a : sent) shifted.push_back({{own.start + a.range.start, a.range.length}, a.id});
    s.recv(s.fold_partner(), lg + 1, output_at, everything, shifted);
    return;
  }
  accesses ready{{own, b.copy(s.region(input_at, {0, n}), s.region(output_at, own))}};
  if (s.fold_partner() >= 0)
    append(ready, s.recv(s.fold_partner(), 0, output_at, {{std::size_t(s.fold_partner()) * n, n}}, {}));
  static const accesses none;  // static: nvcc takes a reference to a captured local for one to a temporary
  ready = s.doubling(rank_blocks(f, n), output_at, ready, [&](int) -> const accesses& { return none; }, 1);
  if (s.fold_partner() >= 0) s.send(s.fold_partner(), lg + 1, output_at, everything, ready);
}

/// Van de Geijn: a binomial scatter of p blocks from the root, then the doubling
/// allgather of them (over a fold of the positions counted from the root).
inline void build_hd_broadcast(schedule::builder& b, const std::vector<int>& order, std::size_t chunk_elems) {
  const auto& d = b.desc();
  const int p = d.size;
  const auto rank_at = [&](int position) { return order.empty() ? position : order[std::size_t(position)]; };
  int root_position = 0;
  while (rank_at(root_position) != d.root) ++root_position;
  std::vector<int> rotated(static_cast<std::size_t>(p));
  for (int v = 0; v < p; ++v) rotated[std::size_t(v)] = rank_at((root_position + v) % p);
  const fold f(p, rotated);
  halving_doubling_steps s(b, f, chunk_elems);
  const block_partition part{d.count, std::size_t(p)};
  // Blocks [lo, hi) of positions counted from the root, or nothing when empty.
  const auto blocks = [&](int lo, int hi) {
    const element_range r{part.start(std::size_t(lo)), part.start(std::size_t(hi)) - part.start(std::size_t(lo))};
    return r.length ? std::vector<element_range>{r} : std::vector<element_range>{};
  };
  int v = 0;
  while (rotated[std::size_t(v)] != b.rank()) ++v;

  // Binomial scatter: position v receives blocks [v, v + lowbit(v)) from v - lowbit(v)
  // and passes the upper halves on to v + lowbit(v)/2, v + lowbit(v)/4, ...
  const int span = v == 0 ? int(std::bit_ceil(unsigned(p))) : (v & -v);
  accesses scattered;
  place from = output_at;
  if (v == 0) {
    from = input_at;
    for (const auto& r : blocks(0, 1)) scattered.push_back(s.copy(input_at, output_at, r, {}));
  } else {
    scattered = s.recv(rotated[std::size_t(v - span)], 0, output_at, blocks(v, std::min(v + span, p)), {});
  }
  const accesses received = scattered;
  // Everything the scatter did: the allgather reads what it wrote, and overwrites (with
  // equal data) blocks that its sends may still be reading.
  for (int mask = span / 2; mask >= 1; mask /= 2)
    if (v + mask < p)
      append(scattered, s.send(rotated[std::size_t(v + mask)], 0, from, blocks(v + mask, std::min(v + 2 * mask, p)), received));
  if (p == 1) return;

  const int lg = f.steps(), extras = p - f.core_size();
  const auto everything = blocks(0, p);
  if (s.extra()) {
    append(scattered, s.send(s.fold_partner(), 1, output_at, blocks(v, v + 1), scattered));
    s.recv(s.fold_partner(), lg + 2, output_at, everything, scattered);
    return;
  }
  unit_map units(static_cast<std::size_t>(f.core_size()));
  for (int c = 0; c < f.core_size(); ++c)
    units[std::size_t(c)] = c < extras ? blocks(2 * c, 2 * c + 2) : blocks(c + extras, c + extras + 1);
  auto ready = scattered;
  // The folded rank is position v - 1.
  if (s.fold_partner() >= 0) append(ready, s.recv(s.fold_partner(), 1, output_at, blocks(v - 1, v), scattered));
  ready = s.doubling(units, output_at, ready, [&](int) -> const accesses& { return scattered; }, 2);
  if (s.fold_partner() >= 0) s.send(s.fold_partner(), lg + 2, output_at, everything, ready);
}

}  // namespace detail
}  // namespace mimatrix::algorithm

namespace mimatrix::algorithm {

/// Rabenseifner's halving-doubling on any topology, with an optional rank mapping.
///
/// Allreduce on p = 8 (core indices = ranks without a mapping), blocks B0..B7 of the
/// buffer. Recursive halving: at step k each rank exchanges with rank ^ (4 >> k), sends
/// the half of its current range that the partner keeps and reduces the half it keeps;
/// recursive doubling then retraces the steps backwards, sending the whole range held:
///
///   halving   step 0 (distance 4)   step 1 (distance 2)   step 2 (distance 1)
///     rank 0   B4-7 -> 4, keeps B0-3  B2-3 -> 2, keeps B0-1  B1 -> 1, keeps B0
///     rank 5   B0-3 -> 1, keeps B4-7  B6-7 -> 7, keeps B4-5  B4 -> 4, keeps B5
///   doubling  step 0 (distance 1)   step 1 (distance 2)   step 2 (distance 4)
///     rank 0   B0 -> 1                B0-1 -> 2              B0-3 -> 4
///
/// Non-powers of two fold first (MPICH): with r = p - 2^floor(lg p), positions 2i < 2r
/// send their whole buffer to 2i+1, which reduces it in and runs the core; the result
/// goes back at the end. A mapping (virtual position -> real rank) reorders who pairs
/// with whom without changing the schedule's shape.
///
/// Cost (p a power of two): 2·lg p·α + 2(p-1)/p·n·β + (p-1)/p·n·γ; a fold adds
/// 2·α + 2·n·β + n·γ.
///
/// reduce_scatter is the halving half (partial sums in a scratch copy of the input),
/// allgather the doubling half, broadcast a binomial scatter of p blocks from the root
/// followed by the doubling allgather (Van de Geijn).
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class halving_doubling {
 public:
  static constexpr std::string_view name = "halving_doubling";

  halving_doubling() = default;
  explicit halving_doubling(policy tuning) : tuning_(tuning) {}
  /// `order[k]` is the rank at virtual position k (a permutation of the group's ranks).
  explicit halving_doubling(std::vector<int> order, policy tuning = select_policy())
      : tuning_(tuning), order_(std::move(order)) {}

  template <topology::layout Topology>
  schedule::schedule build(const Topology& topo, const schedule::descriptor& desc, int rank) const {
    topo.check(desc.size);
    detail::check_order(order_, desc.size, name);
    return build_mapped(desc, rank, order_, tuning_, name);
  }

  /// The schedule for `order` without a topology, named `algorithm` (HDRM's entry).
  static schedule::schedule build_mapped(const schedule::descriptor& desc, int rank, const std::vector<int>& order,
                                         const policy& tuning, std::string_view algorithm) {
    schedule::builder b(desc, rank, algorithm);
    if (desc.count == 0) return std::move(b).build();
    if (desc.size == 1) {
      detail::build_single(b);
      return std::move(b).build();
    }
    const std::size_t chunk = detail::chunk_elems_for(tuning, desc.elem_size);
    switch (desc.kind) {
      case schedule::collective::allreduce: detail::build_hd_allreduce(b, detail::fold(desc.size, order), chunk); break;
      case schedule::collective::reduce_scatter:
        detail::build_hd_reduce_scatter(b, detail::fold(desc.size, order), chunk);
        break;
      case schedule::collective::allgather: detail::build_hd_allgather(b, detail::fold(desc.size, order), chunk); break;
      case schedule::collective::broadcast: detail::build_hd_broadcast(b, order, chunk); break;
      default: refuse_collective(name, desc.kind, rank);
    }
    return std::move(b).build();
  }

  const policy& tuning() const { return tuning_; }
  void complete_policy(const policy& suggested) { tuning_ = complete(tuning_, suggested); }
  const std::vector<int>& order() const { return order_; }

  /// The chunk and the order, an order 0..p-1 alike with the default (digest_of).
  std::uint64_t digest() const {
    mimatrix::digest d;
    d.mix(name).mix(std::uint64_t(chunk_bytes_of(tuning_)));
    bool identity = true;
    for (std::size_t k = 0; k < order_.size(); ++k) identity = identity && order_[k] == int(k);
    if (!identity)
      for (int r : order_) d.mix(std::uint64_t(r));
    return d.value();
  }

 private:
  policy tuning_ = select_policy();
  std::vector<int> order_;
};

}  // namespace mimatrix::algorithm

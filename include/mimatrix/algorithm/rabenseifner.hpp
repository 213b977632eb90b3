// algorithm::rabenseifner: reduce for large messages — a recursive-halving
// reduce-scatter, then a binomial gather of the reduced blocks to the root.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/detail/fold.hpp"
#include "mimatrix/algorithm/detail/partition.hpp"
#include "mimatrix/algorithm/detail/rooted.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/model/cost.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::algorithm {

/// Rabenseifner's reduce on any topology, any root (Thakur, Rabenseifner & Gropp 2005
/// §4.5): halving_doubling's reduce-scatter, whose second half is a gather to the root
/// instead of an allgather.
///
/// p = 8, root R = core index 7, blocks B0..B7 of the buffer. Recursive halving leaves
/// core index c holding Bc summed over the group; then a binomial tree over w = c ^ 7
/// (the root is w = 0) gathers them, each message a contiguous range of blocks:
///
///   halving   3 steps (distance 4, 2, 1)     c keeps the half holding Bc
///   gather    step 0           step 1           step 2
///             6 -> 7  B6       5 -> 7  B4-5     3 -> 7  B0-3
///             4 -> 5  B4       1 -> 3  B0-1
///             2 -> 3  B2
///             0 -> 1  B0
///
/// Ranks are ordered from the one after the root, so the root comes last and always
/// belongs to the power-of-two core: with r = p - 2^floor(lg p), the first 2r of that
/// order pair up and the even ones hand their whole buffer to the odd ones and are done.
///
/// Cost (p a power of two): 2 lg p·α + 2(p-1)/p·nβ + (p-1)/p·nγ; a fold adds α + nβ + nγ.
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class rabenseifner {
 public:
  static constexpr std::string_view name = "rabenseifner";

  static constexpr bool runs(schedule::collective k) { return k == schedule::collective::reduce; }

  rabenseifner() = default;
  explicit rabenseifner(policy tuning) : tuning_(tuning) {}

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
    build_reduce(b, detail::chunk_elems_for(tuning_, desc.elem_size));
    return std::move(b).build();
  }

  /// The α-β-γ time of a reduce (model::cost's conventions), or nothing for another call.
  std::optional<double> predict(const model::network& net, const schedule::descriptor& d) const {
    if (!runs(d.kind)) return std::nullopt;
    if (d.size <= 1) return 0.0;
    const auto& l = net.link;
    const model::detail::folding fold(d.size);
    const double n = double(d.count) * double(d.elem_size), f = model::detail::fraction(fold.p2);
    return 2 * fold.lg * l.alpha + 2 * f * n * l.beta + f * n * l.gamma +
           (fold.extra > 0 ? l.alpha + n * l.beta + n * l.gamma : 0);
  }

  const policy& tuning() const { return tuning_; }
  void complete_policy(const policy& suggested) { tuning_ = complete(tuning_, suggested); }

 private:
  static void build_reduce(schedule::builder& b, std::size_t chunk_elems) {
    using detail::accesses;
    const auto& d = b.desc();
    const int p = d.size;
    std::vector<int> order(static_cast<std::size_t>(p));
    for (int k = 0; k < p; ++k) order[std::size_t(k)] = (d.root + 1 + k) % p;
    const detail::fold f(p, order);
    detail::halving_doubling_steps s(b, f, chunk_elems);
    const std::vector<detail::element_range> all{{0, d.count}};
    if (s.extra()) {
      s.send(s.fold_partner(), 0, detail::input_at, all, {});
      return;
    }
    const int core = f.core_size(), lg = f.steps(), c = s.index(), w = c ^ (core - 1);
    const bool root = b.rank() == d.root;
    // Partial sums at their own offsets: in the output on the root, scratch elsewhere.
    detail::place acc = detail::output_at;
    if (!root) acc = {schedule::buffer::scratch, b.scratch(d.count * d.elem_size).offset};
    accesses written;
    detail::place from = detail::input_at;
    if (s.fold_partner() >= 0) {
      written = s.recv_reduce(s.fold_partner(), 0, detail::input_at, acc, all, {});
      from = acc;
    }
    const detail::block_partition part{d.count, std::size_t(core)};
    detail::unit_map units(static_cast<std::size_t>(core));
    for (int k = 0; k < core; ++k)
      units[std::size_t(k)].push_back({part.start(std::size_t(k)), part.length(std::size_t(k))});
    auto half = s.halving(units, from, acc, std::move(written), 1);
    written = std::move(half.last);
    // A gathered block lands where halving sent it from (on the root in place, also
    // the input): after that send.
    accesses sent;
    for (const auto& step : half.sends) detail::append(sent, step);

    // Gather over w: the subtree of w is [w, w + lowbit(w)), an aligned range whose
    // core indices (w ^ (core-1)) are an aligned range too, so blocks stay contiguous.
    const int span = w == 0 ? core : (w & -w);
    for (int m = 1; m < span; m *= 2) {
      const int lo = (c ^ m) & ~(m - 1);
      detail::append(written, s.recv(f.core_rank(c ^ m), lg + 1, acc, s.ranges(units, lo, lo + m), sent));
    }
    if (!root) {
      const int lo = c & ~(span - 1);
      s.send(f.core_rank(c ^ span), lg + 1, acc, s.ranges(units, lo, lo + span), written);
      return;
    }
    std::vector<schedule::step_id> before;
    for (const auto& a : written) before.push_back(a.id);
    for (const auto& a : sent) before.push_back(a.id);
    b.add(schedule::step_kind::finalize, -1, 0, {}, {schedule::buffer::output, 0, d.count * d.elem_size}, before);
  }

  policy tuning_ = select_policy();
};

}  // namespace mimatrix::algorithm

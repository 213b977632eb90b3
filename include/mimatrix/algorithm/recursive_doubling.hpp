// algorithm::recursive_doubling: latency-optimal collectives for small messages —
// allreduce by exchanging the whole buffer at distance 2^k, allgather by recursive
// doubling, broadcast down a binomial tree, reduce_scatter by recursive halving.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/detail/fold.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::algorithm {

/// Recursive doubling on any topology (ranks in rank order).
///
/// Allreduce on p = 8: at step k every rank swaps its whole partial sum with
/// rank ^ 2^k and adds the partner's, so after lg p steps every rank holds the total:
///
///   step 0 (distance 1)   step 1 (distance 2)   step 2 (distance 4)
///     0 <-> 1               0 <-> 2               0 <-> 4
///     2 <-> 3               1 <-> 3               1 <-> 5
///     4 <-> 5               4 <-> 6               2 <-> 6
///     6 <-> 7               5 <-> 7               3 <-> 7
///   holds {0,1}             {0..3}                {0..7}
///
/// Non-powers of two fold first (MPICH): with r = p - 2^floor(lg p), ranks 2i < 2r send
/// their buffer to 2i+1 and wait; the core of 2^floor(lg p) ranks runs the exchange;
/// 2i+1 sends the result back.
///
/// Broadcast: a binomial tree from any root; position v (counted from the root) gets
/// the buffer from v - lowbit(v) and passes it to v + lowbit(v)/2, v + lowbit(v)/4, ...
///
/// Cost (Thakur, Rabenseifner & Gropp 2005), p a power of two:
///   allreduce  lg p·(α + n·β + n·γ)       (a fold adds 2·α + 2·n·β + n·γ)
///   allgather  lg p·α + (p-1)/p·n·β       (n: the gathered size)
///   broadcast  ⌈lg p⌉·(α + n·β)
///   reduce_scatter  lg p·α + (p-1)/p·n·(β + γ)   (n: the input size)
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class recursive_doubling {
 public:
  static constexpr std::string_view name = "recursive_doubling";

  template <topology::layout Topology>
  schedule::schedule build(const Topology& topo, const schedule::descriptor& desc, int rank) const {
    topo.check(desc.size);
    schedule::builder b(desc, rank, name);
    if (desc.count == 0) return std::move(b).build();
    if (desc.size == 1) {
      detail::build_single(b);
      return std::move(b).build();
    }
    // Small messages: one message a step, never chunked.
    constexpr std::size_t whole = std::numeric_limits<std::size_t>::max() / 2;
    const detail::fold f(desc.size, {});
    switch (desc.kind) {
      case schedule::collective::allreduce: build_allreduce(b, f); break;
      case schedule::collective::reduce_scatter: detail::build_hd_reduce_scatter(b, f, whole); break;
      case schedule::collective::allgather: detail::build_hd_allgather(b, f, whole); break;
      case schedule::collective::broadcast: build_broadcast(b); break;
      default: refuse_collective(name, desc.kind, rank);
    }
    return std::move(b).build();
  }

 private:
  using buffer = schedule::buffer;

  /// Each step: send the partial result, receive the partner's into scratch, then add
  /// it in (a receive may not reduce into memory the own send still reads).
  static void build_allreduce(schedule::builder& b, const detail::fold& f) {
    const auto bytes = b.desc().count * b.desc().elem_size;
    const schedule::region in{buffer::input, 0, bytes}, out{buffer::output, 0, bytes};
    const int lg = f.steps(), c = f.index_of(b.rank());
    const auto done_tag = static_cast<std::uint32_t>(lg + 1);
    if (f.is_extra(b.rank())) {
      const auto sent = b.send(f.core_rank(c), 0, in);
      b.recv(f.core_rank(c), done_tag, out, {sent});
      return;
    }
    const int extra = f.extra_rank(c);
    schedule::step_id last = extra >= 0 ? b.recv_reduce(extra, 0, in, out) : b.copy(in, out);
    const auto tmp = b.scratch(bytes);
    schedule::step_id added = last;
    for (int k = 0; k < lg; ++k) {
      const int partner = f.core_rank(c ^ (1 << k));
      const auto tag = static_cast<std::uint32_t>(k + 1);
      const auto sent = b.send(partner, tag, out, {last});
      const auto got = k == 0 ? b.recv(partner, tag, tmp) : b.recv(partner, tag, tmp, {added});
      added = last = b.reduce(tmp, out, {sent, got});
    }
    const auto fin = b.finalize(out, {last});
    if (extra >= 0) b.send(extra, done_tag, out, {fin});
  }

  static void build_broadcast(schedule::builder& b) {
    const auto& d = b.desc();
    const int p = d.size, v = (b.rank() - d.root + p) % p;
    const auto bytes = d.count * d.elem_size;
    const schedule::region in{buffer::input, 0, bytes}, out{buffer::output, 0, bytes};
    const auto rank_at = [&](int position) { return (position + d.root) % p; };
    const int span = v == 0 ? int(std::bit_ceil(unsigned(p))) : (v & -v);
    std::vector<schedule::step_id> sent, after;  // after: what the next send waits for
    if (v != 0) after.push_back(b.recv(rank_at(v - span), 0, out));
    // One send after another, the largest subtree first: sent at once, they would share
    // the rank's link, and the first child would start its own sends only when all of
    // them were done (lg p (lg p + 1)/2 times nβ instead of lg p, seen in the simulator).
    for (int mask = span / 2; mask >= 1; mask /= 2) {
      if (v + mask >= p) continue;
      sent.push_back(b.add(schedule::step_kind::send, rank_at(v + mask), 0, v == 0 ? in : out, {}, after));
      after.assign(1, sent.back());
    }
    // After the sends: in place the root's input is its output (the copy is then a no-op).
    if (v == 0) b.add(schedule::step_kind::copy, -1, 0, in, out, sent);
  }
};

}  // namespace mimatrix::algorithm

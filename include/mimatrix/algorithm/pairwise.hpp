// algorithm::pairwise: the pairwise-exchange alltoall (MPICH's large-message alltoall):
// p-1 steps, each a block to one peer and a block from another, straight between the
// user's buffers.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/detail/partition.hpp"
#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/model/cost.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/layout.hpp"

namespace mimatrix::algorithm {

/// Pairwise-exchange alltoall on any topology (ranks in rank order), any p.
///
/// Rank r keeps its own block (a local copy) and at step k = 1..p-1 sends input block
/// `to` to rank `to` and receives output block `from` from rank `from`. For p a power
/// of two the partner is r ^ k (to = from: each step is p/2 disjoint swaps, both
/// directions of a link busy); otherwise to = r+k, from = r-k (mod p). On p = 4:
///
///   step 1 (r^1)     step 2 (r^2)     step 3 (r^3)
///     0 <-> 1          0 <-> 2          0 <-> 3
///     2 <-> 3          1 <-> 3          1 <-> 2
///   rank 0 sends B1    B2               B3   and gets block 0 of each partner
///
/// Blocks are cut into chunks (the policy's chunk bytes), one message each. At most
/// `window` sends and `window` receives of a rank are in flight: message i waits for
/// message i - window of its kind. Every rank numbers messages alike (step-major,
/// chunk-minor) and a message only waits for lower numbers, so the window cannot
/// deadlock; it bounds the senders one receiver sees at once (incast) and the requests
/// an executor holds, which p-1 messages at once would not for large p. Window 0: all
/// at once.
///
/// Cost: α + (p-2)g + (p-1)·n/p·β, n the whole input (p blocks): the window keeps
/// messages in flight, so their start-ups overlap (one α, the others at the gap g) and
/// the rank's link carries its p-1 blocks back to back.
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class pairwise {
 public:
  static constexpr std::string_view name = "pairwise";
  /// Messages of each kind in flight on a rank when the caller names no window.
  static constexpr std::size_t default_window = 8;

  pairwise() = default;
  explicit pairwise(policy tuning, std::size_t window = default_window) : tuning_(tuning), window_(window) {}

  static constexpr bool runs(schedule::collective k) { return k == schedule::collective::alltoall; }

  template <topology::layout Topology>
  schedule::schedule build(const Topology& topo, const schedule::descriptor& desc, int rank) const {
    topo.check(desc.size);
    schedule::builder b(desc, rank, name);
    if (!runs(desc.kind)) refuse_collective(name, desc.kind, rank);
    if (desc.count == 0) return std::move(b).build();
    build_alltoall(b, detail::chunking{desc.count, detail::chunk_elems_for(tuning_, desc.elem_size)});
    return std::move(b).build();
  }

  /// α + (p-2)g + (p-1)·n/p·β, n the input's bytes; empty for any collective but alltoall.
  std::optional<double> predict(const model::network& net, const schedule::descriptor& d) const {
    if (!runs(d.kind)) return std::nullopt;
    if (d.size <= 1) return 0.0;
    const double block = static_cast<double>(d.count) * static_cast<double>(d.elem_size);
    return net.link.alpha + (d.size - 2) * net.message_gap + (d.size - 1) * block * net.link.beta;
  }

  const policy& tuning() const { return tuning_; }
  std::size_t window() const { return window_; }
  void complete_policy(const policy& suggested) { tuning_ = complete(tuning_, suggested); }

 private:
  using buffer = schedule::buffer;

  void build_alltoall(schedule::builder& b, const detail::chunking& ch) const {
    const int p = b.size(), r = b.rank();
    const std::size_t es = b.desc().elem_size, n = b.desc().count;
    const auto chunk = [&](buffer where, int blk, std::size_t c) {
      return detail::elements(where, static_cast<std::size_t>(blk) * n + ch.start(c), ch.length(c), es);
    };
    const std::size_t messages = static_cast<std::size_t>(p - 1) * ch.chunks();
    const std::size_t w = window_ == 0 ? messages : window_;
    const std::size_t waiting = messages > w ? messages - w : 0;  // messages with a dep
    b.reserve(1 + 2 * messages, 2 * waiting);
    // The own block touches no bytes a message does: it needs no order.
    b.copy(detail::elements(buffer::input, static_cast<std::size_t>(r) * n, n, es),
           detail::elements(buffer::output, static_cast<std::size_t>(r) * n, n, es));
    const bool xor_pairs = std::has_single_bit(static_cast<unsigned>(p));
    // sends[i % w], recvs[i % w]: message i's steps, until message i + w replaces them.
    std::vector<schedule::step_id> sends(std::min(w, messages)), recvs(std::min(w, messages));
    std::size_t i = 0;
    for (int k = 1; k < p; ++k) {
      const int to = xor_pairs ? r ^ k : (r + k) % p, from = xor_pairs ? r ^ k : (r - k + p) % p;
      // A pair of ranks meets at one step only, so the chunk is a unique tag.
      for (std::size_t c = 0; c < ch.chunks(); ++c, ++i) {
        const auto tag = static_cast<std::uint32_t>(c);
        auto& s = sends[i % w];
        auto& v = recvs[i % w];
        if (i < w) {
          s = b.send(to, tag, chunk(buffer::input, to, c));
          v = b.recv(from, tag, chunk(buffer::output, from, c));
        } else {
          s = b.send(to, tag, chunk(buffer::input, to, c), {s});
          v = b.recv(from, tag, chunk(buffer::output, from, c), {v});
        }
      }
    }
  }

  policy tuning_ = select_policy();
  std::size_t window_ = default_window;
};

}  // namespace mimatrix::algorithm

// algorithm::linear: reduce, gather and scatter with the root exchanging directly with
// every other rank — one round trip per peer, no forwarding, no scratch.
#pragma once

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

/// Direct (flat-tree) rooted collectives on any topology, any root.
///
/// Gather on p = 4, root 1: every rank sends its block straight into the root's output;
/// scatter is the reverse; reduce has the root add each rank's buffer in turn:
///
///   rank 0 ──B0──┐
///   rank 2 ──B2──┼──► root 1: output B0 B1 B2 B3  (B1 copied from its input)
///   rank 3 ──B3──┘
///
/// Nothing is forwarded, so a block travels once, but the root handles p-1 messages and
/// takes all its traffic on one link: right for small groups or as a baseline. A gather
/// or scatter block goes as chunks of the policy's size, a message each (tag = chunk),
/// straight from and into the user's buffers; reduce sends whole buffers.
///
/// Every exchange is in flight at once, so their start-ups overlap: one α, the other
/// p-2 messages at the gap g (as GDRAA's direct phase), then the root's link and its
/// reductions one after another. Cost: reduce α + (p-2)g + (p-1)·n(β + γ); gather,
/// scatter α + (p-2)g + (p-1)/p·Nβ (N: the root's p blocks).
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class linear {
 public:
  static constexpr std::string_view name = "linear";

  static constexpr bool runs(schedule::collective k) {
    return k == schedule::collective::reduce || k == schedule::collective::gather ||
           k == schedule::collective::scatter;
  }

  linear() = default;
  explicit linear(policy tuning) : tuning_(tuning) {}

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
    const int p = desc.size, root = desc.root;
    const std::size_t block = desc.count * desc.elem_size;
    const region in{buffer::input, 0, block}, out{buffer::output, 0, block};
    const auto block_of = [&](buffer where, int r) { return region{where, std::size_t(r) * block, block}; };
    const std::size_t chunk_elems = detail::chunk_elems_for(tuning_, desc.elem_size);
    // Block `r` to or from `peer`, a message a chunk.
    const auto exchange = [&](schedule::step_kind kind, int peer, region r) {
      detail::for_each_chunk(r, chunk_elems, desc.elem_size, [&](region piece, std::size_t c) {
        const auto tag = static_cast<std::uint32_t>(c);
        if (kind == schedule::step_kind::send)
          b.send(peer, tag, piece);
        else
          b.recv(peer, tag, piece);
      });
    };
    const bool reduces = desc.kind == schedule::collective::reduce;
    if (rank != root) {
      if (reduces)
        b.send(root, 0, in);
      else
        exchange(desc.kind == schedule::collective::scatter ? schedule::step_kind::recv : schedule::step_kind::send,
                 root, desc.kind == schedule::collective::scatter ? out : in);
      return std::move(b).build();
    }
    const std::size_t messages = reduces ? 1 : detail::chunking{desc.count, chunk_elems}.chunks();
    b.reserve(std::size_t(p - 1) * messages + 2, std::size_t(p));
    switch (desc.kind) {
      case schedule::collective::gather:
        b.copy(in, block_of(buffer::output, root));  // in place: the same bytes, a no-op
        for (int k = 1; k < p; ++k)
          exchange(schedule::step_kind::recv, (root + k) % p, block_of(buffer::output, (root + k) % p));
        break;
      case schedule::collective::scatter:
        for (int k = 1; k < p; ++k)
          exchange(schedule::step_kind::send, (root + k) % p, block_of(buffer::input, (root + k) % p));
        b.copy(block_of(buffer::input, root), out);  // in place: the same bytes
        break;
      default: {
        // One receive at a time into the output (in place it is the input: recv_reduce
        // reads and writes the same bytes); the ranks after the root first.
        std::vector<schedule::step_id> last;
        region src = in;
        for (int k = 1; k < p; ++k) {
          last.assign(1, b.add(schedule::step_kind::recv_reduce, (root + k) % p, 0, src, out, last));
          src = out;
        }
        b.add(schedule::step_kind::finalize, -1, 0, {}, out, last);
      }
    }
    return std::move(b).build();
  }

  /// The α-β-γ time of `d` (model::cost's conventions), or nothing for what it does not run.
  std::optional<double> predict(const model::network& net, const schedule::descriptor& d) const {
    if (!runs(d.kind)) return std::nullopt;
    if (d.size <= 1) return 0.0;
    const auto& l = net.link;
    const double n = double(d.count) * double(d.elem_size), peers = d.size - 1;
    const double start = l.alpha + (d.size - 2) * net.message_gap;
    if (d.kind == schedule::collective::reduce) return start + peers * n * (l.beta + l.gamma);
    return start + model::detail::fraction(d.size) * n * d.size * l.beta;
  }

  const policy& tuning() const { return tuning_; }
  void complete_policy(const policy& suggested) { tuning_ = complete(tuning_, suggested); }

 private:
  using buffer = schedule::buffer;
  using region = schedule::region;

  policy tuning_ = select_policy();
};

}  // namespace mimatrix::algorithm

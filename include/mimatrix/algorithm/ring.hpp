// algorithm::ring: bandwidth-optimal ring collectives (Baidu/Horovod allreduce =
// reduce-scatter + allgather), chunked so that each step's reduction overlaps the
// transfer of the next chunk, and a pipelined chain broadcast.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/detail/partition.hpp"
#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/ring.hpp"

namespace mimatrix::algorithm {

/// Ring schedules for every collective.
///
/// Allreduce on p = 4 ranks, block k of the buffer shown as Bk. Position q sends to
/// q+1 and receives from q-1; in reduce-scatter step s it sends block q-1-s and
/// reduces the incoming block q-2-s into its own copy; after p-1 steps it holds the
/// complete block q, which allgather then passes around the ring:
///
///   reduce-scatter         step 0          step 1          step 2
///     rank 0 -> 1           B3              B2              B1     rank 1 owns B1
///     rank 1 -> 2           B0              B3              B2     rank 2 owns B2
///     rank 2 -> 3           B1              B0              B3     rank 3 owns B3
///     rank 3 -> 0           B2              B1              B0     rank 0 owns B0
///   allgather              step 0          step 1          step 2
///     rank q -> q+1         Bq              Bq-1            Bq-2
///
/// Cost: 2(p-1)·α + 2(p-1)/p·n·β + (p-1)/p·n·γ.
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class ring {
 public:
  static constexpr std::string_view name = "ring";

  ring() = default;
  explicit ring(policy tuning) : tuning_(tuning) {}

  schedule::schedule build(const topology::ring& topo, const schedule::descriptor& desc, int rank) const {
    topo.check(desc.size);
    schedule::builder b(desc, rank, name);
    if (desc.count == 0) return std::move(b).build();
    const context ctx{topo, desc, topo.position_of(rank), detail::chunk_elems_for(tuning_, desc.elem_size)};
    switch (desc.kind) {
      case schedule::collective::allreduce: build_allreduce(b, ctx); break;
      case schedule::collective::reduce_scatter: build_reduce_scatter(b, ctx); break;
      case schedule::collective::allgather: build_allgather(b, ctx); break;
      case schedule::collective::broadcast: build_broadcast(b, ctx); break;
    }
    return std::move(b).build();
  }

  const policy& tuning() const { return tuning_; }
  void complete_policy(const policy& suggested) { tuning_ = complete(tuning_, suggested); }

 private:
  using ids = std::vector<schedule::step_id>;
  using buffer = schedule::buffer;

  struct context {
    const topology::ring& topo;
    const schedule::descriptor& desc;
    int position;
    std::size_t chunk_elems;

    int size() const { return desc.size; }
    int left() const { return topo.rank_at((position + size() - 1) % size()); }
    int right() const { return topo.rank_at((position + 1) % size()); }
    /// The block that position `position + k` owns (blocks are numbered by rank).
    std::size_t block(int k) const { return static_cast<std::size_t>(topo.rank_at(((position + k) % size() + size()) % size())); }
    std::size_t es() const { return desc.elem_size; }
  };

  /// Tags are unique per (sender, receiver) pair: one per (step, chunk).
  static std::uint32_t tag(int step, std::size_t chunk, std::size_t max_chunks) {
    return static_cast<std::uint32_t>(static_cast<std::size_t>(step) * max_chunks + chunk);
  }

  static schedule::region whole(buffer where, std::size_t bytes) { return {where, 0, bytes}; }

  static void build_allreduce(schedule::builder& b, const context& x) {
    const int p = x.size();
    if (p == 1) {
      const auto c = b.copy(whole(buffer::input, x.desc.input_bytes()), whole(buffer::output, x.desc.output_bytes()));
      b.finalize(whole(buffer::output, x.desc.output_bytes()), {c});
      return;
    }
    const detail::block_partition part{x.desc.count, static_cast<std::size_t>(p)};
    const auto chunks_of = [&](std::size_t blk) { return detail::chunking{part.length(blk), x.chunk_elems}; };
    const std::size_t max_chunks = chunks_of(0).chunks();
    const auto at = [&](buffer where, std::size_t blk, std::size_t c) {
      const auto ch = chunks_of(blk);
      return detail::elements(where, part.start(blk) + ch.start(c), ch.length(c), x.es());
    };

    std::vector<ids> rs_send(p - 1), rs_reduce(p - 1), ag_send(p - 1), ag_recv(p - 1);
    for (int s = 0; s < p - 1; ++s) {
      const auto sent = x.block(-1 - s), received = x.block(-2 - s);
      for (std::size_t c = 0; c < chunks_of(sent).chunks(); ++c)
        rs_send[s].push_back(s == 0 ? b.send(x.right(), tag(s, c, max_chunks), at(buffer::input, sent, c))
                                    : b.send(x.right(), tag(s, c, max_chunks), at(buffer::output, sent, c),
                                             {rs_reduce[s - 1][c]}));
      for (std::size_t c = 0; c < chunks_of(received).chunks(); ++c)
        rs_reduce[s].push_back(b.recv_reduce(x.left(), tag(s, c, max_chunks), at(buffer::input, received, c),
                                             at(buffer::output, received, c)));
    }
    const auto own = x.block(0);
    ids finalized;
    for (std::size_t c = 0; c < chunks_of(own).chunks(); ++c)
      finalized.push_back(b.finalize(at(buffer::output, own, c), {rs_reduce[p - 2][c]}));
    for (int s = 0; s < p - 1; ++s) {
      const auto sent = x.block(-s), received = x.block(-1 - s);
      const int step = p - 1 + s;
      for (std::size_t c = 0; c < chunks_of(sent).chunks(); ++c)
        ag_send[s].push_back(b.send(x.right(), tag(step, c, max_chunks), at(buffer::output, sent, c),
                                    {s == 0 ? finalized[c] : ag_recv[s - 1][c]}));
      // In place, this block may still be leaving in reduce-scatter step s.
      for (std::size_t c = 0; c < chunks_of(received).chunks(); ++c)
        ag_recv[s].push_back(
            b.recv(x.left(), tag(step, c, max_chunks), at(buffer::output, received, c), {rs_send[s][c]}));
    }
  }

  /// Like allreduce's first half, with partial sums in scratch slots (one per step)
  /// and the last step reducing straight into the output.
  static void build_reduce_scatter(schedule::builder& b, const context& x) {
    const int p = x.size();
    const std::size_t n = x.desc.count;
    if (p == 1) {
      const auto c = b.copy(whole(buffer::input, x.desc.input_bytes()), whole(buffer::output, x.desc.output_bytes()));
      b.finalize(whole(buffer::output, x.desc.output_bytes()), {c});
      return;
    }
    const detail::chunking ch{n, x.chunk_elems};
    const auto chunk = [&](schedule::region block, std::size_t c) {
      return schedule::region{block.where, block.offset + ch.start(c) * x.es(), ch.length(c) * x.es()};
    };
    const auto input_block = [&](std::size_t blk) { return detail::elements(buffer::input, blk * n, n, x.es()); };
    std::vector<schedule::region> slot;
    for (int s = 0; s < p - 2; ++s) slot.push_back(b.scratch(n * x.es()));
    const schedule::region out = whole(buffer::output, n * x.es());

    std::vector<ids> send(p - 1), reduce(p - 1);
    for (int s = 0; s < p - 1; ++s) {
      const auto sent = x.block(-1 - s), received = x.block(-2 - s);
      for (std::size_t c = 0; c < ch.chunks(); ++c) {
        send[s].push_back(s == 0 ? b.send(x.right(), tag(s, c, ch.chunks()), chunk(input_block(sent), c))
                                 : b.send(x.right(), tag(s, c, ch.chunks()), chunk(slot[s - 1], c), {reduce[s - 1][c]}));
        reduce[s].push_back(b.recv_reduce(x.left(), tag(s, c, ch.chunks()), chunk(input_block(received), c),
                                          chunk(s == p - 2 ? out : slot[s], c)));
      }
    }
    for (std::size_t c = 0; c < ch.chunks(); ++c) b.finalize(chunk(out, c), {reduce[p - 2][c]});
  }

  /// Allreduce's second half; the own block is copied in after it has left, so that an
  /// in-place input (block `rank` of the output) is never overwritten while read.
  static void build_allgather(schedule::builder& b, const context& x) {
    const int p = x.size();
    const std::size_t n = x.desc.count;
    const auto own = static_cast<std::size_t>(x.topo.rank_at(x.position));
    const auto output_block = [&](std::size_t blk) { return detail::elements(buffer::output, blk * n, n, x.es()); };
    if (p == 1) {
      b.copy(whole(buffer::input, n * x.es()), output_block(own));
      return;
    }
    const detail::chunking ch{n, x.chunk_elems};
    const auto chunk = [&](schedule::region block, std::size_t c) {
      return schedule::region{block.where, block.offset + ch.start(c) * x.es(), ch.length(c) * x.es()};
    };
    std::vector<ids> send(p - 1), recv(p - 1);
    for (int s = 0; s < p - 1; ++s) {
      const auto sent = x.block(-s), received = x.block(-1 - s);
      for (std::size_t c = 0; c < ch.chunks(); ++c) {
        send[s].push_back(s == 0 ? b.send(x.right(), tag(s, c, ch.chunks()), chunk(whole(buffer::input, n * x.es()), c))
                                 : b.send(x.right(), tag(s, c, ch.chunks()), chunk(output_block(sent), c), {recv[s - 1][c]}));
        recv[s].push_back(b.recv(x.left(), tag(s, c, ch.chunks()), chunk(output_block(received), c)));
      }
    }
    b.add(schedule::step_kind::copy, -1, 0, whole(buffer::input, n * x.es()), output_block(own), send[0]);
  }

  /// A pipelined chain from the root around the ring: each chunk is forwarded as soon
  /// as it arrives, so the time is (p-1+chunks)·(α + chunk·β).
  static void build_broadcast(schedule::builder& b, const context& x) {
    const int p = x.size();
    const std::size_t n = x.desc.count;
    const int from_root = (x.position - x.topo.position_of(x.desc.root) + p) % p;
    const detail::chunking ch{n, x.chunk_elems};
    const auto chunk = [&](buffer where, std::size_t c) { return detail::elements(where, ch.start(c), ch.length(c), x.es()); };
    if (from_root == 0) {
      ids sent;
      for (std::size_t c = 0; p > 1 && c < ch.chunks(); ++c)
        sent.push_back(b.send(x.right(), static_cast<std::uint32_t>(c), chunk(buffer::input, c)));
      b.add(schedule::step_kind::copy, -1, 0, whole(buffer::input, n * x.es()), whole(buffer::output, n * x.es()), sent);
      return;
    }
    for (std::size_t c = 0; c < ch.chunks(); ++c) {
      const auto got = b.recv(x.left(), static_cast<std::uint32_t>(c), chunk(buffer::output, c));
      if (from_root < p - 1) b.send(x.right(), static_cast<std::uint32_t>(c), chunk(buffer::output, c), {got});
    }
  }

  policy tuning_ = select_policy();
};

template <>
struct default_algorithm<topology::ring> {
  using type = ring;
};

}  // namespace mimatrix::algorithm

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
      default: refuse_collective(name, desc.kind, rank);
    }
    return std::move(b).build();
  }

  const policy& tuning() const { return tuning_; }
  void complete_policy(const policy& suggested) { tuning_ = complete(tuning_, suggested); }

 private:
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
      b.reserve(2, 1);
      const auto c = b.copy(whole(buffer::input, x.desc.input_bytes(0)), whole(buffer::output, x.desc.output_bytes(0)));
      b.finalize(whole(buffer::output, x.desc.output_bytes(0)), {c});
      return;
    }
    const detail::block_partition part{x.desc.count, static_cast<std::size_t>(p)};
    const auto chunks_of = [&](std::size_t blk) { return detail::chunking{part.length(blk), x.chunk_elems}; };
    const std::size_t max_chunks = chunks_of(0).chunks();  // block 0 is among the longest
    const auto at = [&](buffer where, std::size_t blk, std::size_t c) {
      const auto ch = chunks_of(blk);
      return detail::elements(where, part.start(blk) + ch.start(c), ch.length(c), x.es());
    };

    // Each half sends and receives every block but one: reduce-scatter sends all but
    // the own block and receives all but block(-1), allgather sends all but block(1)
    // and receives all but the own; the own block is finalized once. Every step
    // depends on one other but the reduce-scatter receives and first sends, which are
    // one a chunk of every block: `all` of them.
    std::size_t all = 0;
    for (std::size_t blk = 0; blk < part.parts; ++blk) all += chunks_of(blk).chunks();
    const std::size_t own_chunks = chunks_of(x.block(0)).chunks();
    const std::size_t steps = 4 * all - own_chunks - chunks_of(x.block(-1)).chunks() - chunks_of(x.block(1)).chunks();
    b.reserve(steps, steps - all);

    // latest[c]: the newest step on chunk c of the block that moves next (its reduction
    // in reduce-scatter, its finalize or receipt in allgather). rs_sent[s·max_chunks + c]:
    // reduce-scatter step s's send of chunk c, which allgather step s's receive, writing
    // the same block in place, waits for.
    std::vector<schedule::step_id> latest(max_chunks), rs_sent(static_cast<std::size_t>(p - 1) * max_chunks);
    for (int s = 0; s < p - 1; ++s) {
      const auto sent = x.block(-1 - s), received = x.block(-2 - s);
      schedule::step_id* sends = rs_sent.data() + static_cast<std::size_t>(s) * max_chunks;
      for (std::size_t c = 0; c < chunks_of(sent).chunks(); ++c)
        sends[c] = s == 0 ? b.send(x.right(), tag(s, c, max_chunks), at(buffer::input, sent, c))
                          : b.send(x.right(), tag(s, c, max_chunks), at(buffer::output, sent, c), {latest[c]});
      for (std::size_t c = 0; c < chunks_of(received).chunks(); ++c)
        latest[c] = b.recv_reduce(x.left(), tag(s, c, max_chunks), at(buffer::input, received, c),
                                  at(buffer::output, received, c));
    }
    const auto own = x.block(0);
    for (std::size_t c = 0; c < own_chunks; ++c) latest[c] = b.finalize(at(buffer::output, own, c), {latest[c]});
    for (int s = 0; s < p - 1; ++s) {
      const auto sent = x.block(-s), received = x.block(-1 - s);
      const int step = p - 1 + s;
      const schedule::step_id* rs_sends = rs_sent.data() + static_cast<std::size_t>(s) * max_chunks;
      for (std::size_t c = 0; c < chunks_of(sent).chunks(); ++c)
        b.send(x.right(), tag(step, c, max_chunks), at(buffer::output, sent, c), {latest[c]});
      // In place, this block may still be leaving in reduce-scatter step s.
      for (std::size_t c = 0; c < chunks_of(received).chunks(); ++c)
        latest[c] = b.recv(x.left(), tag(step, c, max_chunks), at(buffer::output, received, c), {rs_sends[c]});
    }
  }

  /// Like allreduce's first half, with partial sums in scratch slots (one per step)
  /// and the last step reducing straight into the output.
  static void build_reduce_scatter(schedule::builder& b, const context& x) {
    const int p = x.size();
    const std::size_t n = x.desc.count;
    if (p == 1) {
      b.reserve(2, 1);
      const auto c = b.copy(whole(buffer::input, x.desc.input_bytes(0)), whole(buffer::output, x.desc.output_bytes(0)));
      b.finalize(whole(buffer::output, x.desc.output_bytes(0)), {c});
      return;
    }
    const detail::chunking ch{n, x.chunk_elems};
    const auto chunk = [&](schedule::region block, std::size_t c) {
      return schedule::region{block.where, block.offset + ch.start(c) * x.es(), ch.length(c) * x.es()};
    };
    const auto input_block = [&](std::size_t blk) { return detail::elements(buffer::input, blk * n, n, x.es()); };
    std::vector<schedule::region> slot;
    slot.reserve(static_cast<std::size_t>(p - 2));
    for (int s = 0; s < p - 2; ++s) slot.push_back(b.scratch(n * x.es()));
    const schedule::region out = whole(buffer::output, n * x.es());

    // p-1 steps of a send and a receive a chunk, then a finalize a chunk; each send
    // after the first step waits for the previous step's reduction, each finalize for
    // the last one.
    const std::size_t steps = (2 * static_cast<std::size_t>(p - 1) + 1) * ch.chunks();
    b.reserve(steps, static_cast<std::size_t>(p - 1) * ch.chunks());
    std::vector<schedule::step_id> reduced(ch.chunks());  // chunk c's newest reduction
    for (int s = 0; s < p - 1; ++s) {
      const auto sent = x.block(-1 - s), received = x.block(-2 - s);
      for (std::size_t c = 0; c < ch.chunks(); ++c) {
        if (s == 0)
          b.send(x.right(), tag(s, c, ch.chunks()), chunk(input_block(sent), c));
        else
          b.send(x.right(), tag(s, c, ch.chunks()), chunk(slot[s - 1], c), {reduced[c]});
        reduced[c] = b.recv_reduce(x.left(), tag(s, c, ch.chunks()), chunk(input_block(received), c),
                                   chunk(s == p - 2 ? out : slot[s], c));
      }
    }
    for (std::size_t c = 0; c < ch.chunks(); ++c) b.finalize(chunk(out, c), {reduced[c]});
  }

  /// Allreduce's second half; the own block is copied in after it has left, so that an
  /// in-place input (block `rank` of the output) is never overwritten while read.
  static void build_allgather(schedule::builder& b, const context& x) {
    const int p = x.size();
    const std::size_t n = x.desc.count;
    const auto own = static_cast<std::size_t>(x.topo.rank_at(x.position));
    const auto output_block = [&](std::size_t blk) { return detail::elements(buffer::output, blk * n, n, x.es()); };
    if (p == 1) {
      b.reserve(1, 0);
      b.copy(whole(buffer::input, n * x.es()), output_block(own));
      return;
    }
    const detail::chunking ch{n, x.chunk_elems};
    const auto chunk = [&](schedule::region block, std::size_t c) {
      return schedule::region{block.where, block.offset + ch.start(c) * x.es(), ch.length(c) * x.es()};
    };
    // p-1 steps of a send and a receive a chunk, then the copy; each send after the
    // first step waits for the previous step's receive, the copy for the first sends.
    b.reserve(2 * static_cast<std::size_t>(p - 1) * ch.chunks() + 1, static_cast<std::size_t>(p - 1) * ch.chunks());
    std::vector<schedule::step_id> first_sends(ch.chunks()), received_last(ch.chunks());
    for (int s = 0; s < p - 1; ++s) {
      const auto sent = x.block(-s), received = x.block(-1 - s);
      for (std::size_t c = 0; c < ch.chunks(); ++c) {
        if (s == 0)
          first_sends[c] = b.send(x.right(), tag(s, c, ch.chunks()), chunk(whole(buffer::input, n * x.es()), c));
        else
          b.send(x.right(), tag(s, c, ch.chunks()), chunk(output_block(sent), c), {received_last[c]});
        received_last[c] = b.recv(x.left(), tag(s, c, ch.chunks()), chunk(output_block(received), c));
      }
    }
    b.add(schedule::step_kind::copy, -1, 0, whole(buffer::input, n * x.es()), output_block(own), first_sends);
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
      const std::size_t sends = p > 1 ? ch.chunks() : 0;
      b.reserve(sends + 1, sends);  // the sends, then the copy after them
      std::vector<schedule::step_id> sent(sends);
      for (std::size_t c = 0; c < sends; ++c)
        sent[c] = b.send(x.right(), static_cast<std::uint32_t>(c), chunk(buffer::input, c));
      b.add(schedule::step_kind::copy, -1, 0, whole(buffer::input, n * x.es()), whole(buffer::output, n * x.es()), sent);
      return;
    }
    const bool forwards = from_root < p - 1;
    b.reserve(ch.chunks() * (forwards ? 2 : 1), forwards ? ch.chunks() : 0);  // receive, then forward after it
    for (std::size_t c = 0; c < ch.chunks(); ++c) {
      const auto got = b.recv(x.left(), static_cast<std::uint32_t>(c), chunk(buffer::output, c));
      if (forwards) b.send(x.right(), static_cast<std::uint32_t>(c), chunk(buffer::output, c), {got});
    }
  }

  policy tuning_ = select_policy();
};

template <>
struct default_algorithm<topology::ring> {
  using type = ring;
};

}  // namespace mimatrix::algorithm

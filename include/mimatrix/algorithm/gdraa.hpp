// algorithm::gdraa: MiMatrix's GPU-Direct RDMA allreduce (arXiv 1802.02326) on a full
// mesh: one-sided writes into registered landing areas and exactly two synchronizations
// a call, whatever the group size; the other collectives are its phases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/algorithm/detail/partition.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/mesh.hpp"

namespace mimatrix::algorithm {

/// GDRAA schedules for every collective.
///
/// Allreduce on p = 3 ranks; rank j owns shard Sj of the buffer, and rank j's scratch
/// is its landing area, one slot per writer (the writers other than j, in rank order):
///
///   phase A (all p-1 writes of a rank in flight)      sync 1   fused reduce
///     rank 0: S1 -> rank 1 slot 0, S2 -> rank 2 slot 0    rank j waits for  out Sj = in Sj
///     rank 1: S0 -> rank 0 slot 0, S2 -> rank 2 slot 1    p-1 flags (tag 0)  (+) every slot,
///     rank 2: S0 -> rank 0 slot 1, S1 -> rank 1 slot 1                       then finalize
///   phase B                                            sync 2
///     rank j: reduced Sj -> output Sj of every peer     p-1 flags (tag 1)
///
/// Every step of a rank is a write or a local step: no send, no recv, no handshake; the
/// only synchronizations are the two waits, and flags carry the call's sequence
/// number, so they never need resetting. In place, phase B overwrites a block the
/// target itself wrote out in phase A; that is safe because the target's phase-A write
/// had landed before the writer's sync 1 completed (the verifier proves it).
/// Reduce-scatter is phase A + sync 1 + the reduction (shards are the output blocks),
/// allgather is phase B + sync 2, broadcast is the root writing to every rank, which
/// waits for its one flag.
///
/// Cost: 2α + 2(p-1)/p·n·β + (p-1)/p·n·γ when the writes overlap; the price is
/// (p-1)-to-1 incast at every receiver.
///
/// @par Thread Safety
/// Stateless: `build` may be called from any number of threads.
class gdraa {
 public:
  static constexpr std::string_view name = "gdraa";
  /// Its schedules write into peers (write/notify/wait), which schedule::embed cannot
  /// place as a phase of a composed algorithm yet.
  static constexpr bool one_sided = true;

  /// Flag tags: one for each synchronization.
  static constexpr std::uint32_t sync_1 = 0;
  static constexpr std::uint32_t sync_2 = 1;

  schedule::schedule build(const topology::mesh& topo, const schedule::descriptor& desc, int rank) const {
    topo.check(desc.size);
    schedule::builder b(desc, rank, name);
    if (desc.count == 0) return std::move(b).build();
    switch (desc.kind) {
      case schedule::collective::allreduce: build_allreduce(b); break;
      case schedule::collective::reduce_scatter: (void)build_reduce_scatter(b); break;
      case schedule::collective::allgather: build_allgather(b); break;
      case schedule::collective::broadcast: build_broadcast(b); break;
      default: refuse_collective(name, desc.kind, rank);
    }
    return std::move(b).build();
  }

  /// The schedules for device memory that every rank reaches (threads of one process, or
  /// processes of one node through CUDA IPC), where each rank runs its part as one pass
  /// over the others' memory (transport/direct_collective.hpp). Every collective there
  /// needs both synchronizations: sync 1 says where a rank's buffers lie, and that its
  /// stream has reached the call; sync 2, that a pass which reads or writes them has run.
  /// Allreduce has both already. Reduce-scatter gains sync 2 (the owner of a block has
  /// read it, so its holder may reuse its input); allgather gains sync 1 (a rank's output
  /// may be written); in a broadcast every rank tells every other (sync 1), and the
  /// root's writes follow its copy (sync 2). On host memory these would be one needless
  /// synchronization more, so build() leaves them out.
  schedule::schedule build_on_shared_device(const topology::mesh& topo, const schedule::descriptor& desc,
                                            int rank) const {
    if (desc.kind == schedule::collective::allreduce || desc.count == 0 || desc.size == 1)
      return build(topo, desc, rank);
    topo.check(desc.size);
    schedule::builder b(desc, rank, name);
    const int p = b.size(), r = b.rank();
    const auto others = static_cast<std::uint32_t>(p - 1);
    switch (desc.kind) {
      case schedule::collective::reduce_scatter: {
        const schedule::step_id done = build_reduce_scatter(b);
        for (int j = 0; j < p; ++j)
          if (j != r) b.notify(j, sync_2, {done});
        b.wait(sync_2, others);
        break;
      }
      case schedule::collective::allgather:
        for (int j = 0; j < p; ++j)
          if (j != r) b.notify(j, sync_1);
        build_allgather(b, b.wait(sync_1, others));
        break;
      case schedule::collective::broadcast: {
        // Every rank tells every other, not the root alone: each then sees every peer's
        // call, its root included, and ranks that name different roots fail with a
        // mismatch rather than each wait for a root that waits for them (a black-box test).
        const region in{buffer::input, 0, desc.count * desc.elem_size}, out{buffer::output, 0, in.bytes};
        for (int j = 0; j < p; ++j)
          if (j != r) b.notify(j, sync_1);
        const schedule::step_id told = b.wait(sync_1, others);
        if (r != desc.root) {
          b.wait(sync_2, 1);
          break;
        }
        // In place the copy rewrites the input with itself; the writes read it after.
        const schedule::step_id copied = b.copy(in, out, {told});
        for (int j = 0; j < p; ++j)
          if (j != r) b.write(j, sync_2, in, out, {copied});
        break;
      }
      default: refuse_collective(name, desc.kind, rank);
      case schedule::collective::allreduce: break;
    }
    return std::move(b).build();
  }

 private:
  using buffer = schedule::buffer;
  using region = schedule::region;
  using ids = std::vector<schedule::step_id>;

  /// Writer i's slot in rank j's landing area (j's own shard needs none).
  static std::size_t slot_of(int writer, int target) { return static_cast<std::size_t>(writer < target ? writer : writer - 1); }

  /// Phase A, sync 1 and the fused reduction: shard j of this rank's input goes to slot
  /// `rank` of rank j's landing area; this rank reduces its own shard and its p-1 slots
  /// into `own_out` and finalizes it. `shard(j)` is shard j of the input, `length(j)`
  /// its bytes. Returns the finalize step.
  template <class Shard, class Length>
  static schedule::step_id reduce_own_shard(schedule::builder& b, const Shard& shard, const Length& length,
                                            region own_out) {
    const int p = b.size(), r = b.rank();
    if (p == 1) return b.finalize(own_out, {b.copy(shard(r), own_out)});
    for (int j = 0; j < p; ++j)
      if (j != r) {
        const region slot{buffer::scratch, slot_of(r, j) * length(j), length(j)};
        b.write(j, sync_1, shard(j), slot);
      }
    // The landing area is the whole scratch (its first and only allocation), so writers
    // can compute where their slot lies in it.
    const region slots = b.scratch(static_cast<std::size_t>(p - 1) * length(r));
    const auto arrived = b.wait(sync_1, static_cast<std::uint32_t>(p - 1));
    // In place the copy is a no-op: own_out is the own input shard.
    const auto own = b.copy(shard(r), own_out);
    const auto reduced = b.reduce_slots(slots, own_out, ids{own, arrived});
    return b.finalize(own_out, {reduced});
  }

  static void build_allreduce(schedule::builder& b) {
    const auto& d = b.desc();
    const int p = b.size(), r = b.rank();
    const detail::block_partition part{d.count, static_cast<std::size_t>(p)};
    const auto shard = [&](buffer where, int j) {
      return detail::elements(where, part.start(static_cast<std::size_t>(j)), part.length(static_cast<std::size_t>(j)),
                              d.elem_size);
    };
    const auto length = [&](int j) { return part.length(static_cast<std::size_t>(j)) * d.elem_size; };
    const auto done = reduce_own_shard(b, [&](int j) { return shard(buffer::input, j); }, length,
                                       shard(buffer::output, r));
    if (p == 1) return;
    for (int j = 0; j < p; ++j)
      if (j != r) b.write(j, sync_2, shard(buffer::output, r), shard(buffer::output, r), {done});
    b.wait(sync_2, static_cast<std::uint32_t>(p - 1));
  }

  /// Returns the finalize of this rank's block.
  static schedule::step_id build_reduce_scatter(schedule::builder& b) {
    const auto& d = b.desc();
    const std::size_t bytes = d.count * d.elem_size;
    return reduce_own_shard(b, [&](int j) { return region{buffer::input, static_cast<std::size_t>(j) * bytes, bytes}; },
                     [&](int) { return bytes; }, region{buffer::output, 0, bytes});
  }

  /// Phase B alone: this rank's input lands in block `rank` of every peer's output, after
  /// `ready` (sync 1 on device memory every rank reaches) where there is one.
  static void build_allgather(schedule::builder& b, std::optional<schedule::step_id> ready = std::nullopt) {
    const auto& d = b.desc();
    const int p = b.size(), r = b.rank();
    const std::size_t bytes = d.count * d.elem_size;
    const region in{buffer::input, 0, bytes}, own{buffer::output, static_cast<std::size_t>(r) * bytes, bytes};
    // In place the copy rewrites the input (block `rank` of the output) with itself: the
    // writes read it only after that.
    const auto copied = ready ? b.copy(in, own, {*ready}) : b.copy(in, own);
    for (int j = 0; j < p; ++j)
      if (j != r) b.write(j, sync_2, in, own, {copied});
    if (p > 1) b.wait(sync_2, static_cast<std::uint32_t>(p - 1));
  }

  /// The root writes its input into every rank's output; each of them waits for it.
  static void build_broadcast(schedule::builder& b) {
    const auto& d = b.desc();
    const int p = b.size(), r = b.rank();
    const region in{buffer::input, 0, d.count * d.elem_size}, out{buffer::output, 0, d.count * d.elem_size};
    if (r != d.root) {
      b.wait(sync_1, 1);
      return;
    }
    ids written;
    for (int j = 0; j < p; ++j)
      if (j != r) written.push_back(b.write(j, sync_1, in, out));
    // In place the copy rewrites the input with itself: only after the writes read it.
    b.add(schedule::step_kind::copy, -1, 0, in, out, written);
  }
};

template <>
struct default_algorithm<topology::mesh> {
  using type = gdraa;
};

}  // namespace mimatrix::algorithm

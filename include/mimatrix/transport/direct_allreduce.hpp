// GDRAA's allreduce on device memory that every rank reaches (threads of one process, or
// processes on one node through CUDA IPC), run as the paper means it: rank j owns shard j,
// and between GDRAA's two synchronizations it runs one pass (device::port::reduce_many)
// that reads shard j of every rank's input where it lies and writes the finalized sum into
// shard j of every rank's output. Each rank reads and writes the buffer once, 2n buffers
// of traffic for n ranks, the least an allreduce of ranks sharing memory makes (a
// receiver-driven ring makes 2.5n). The transport carries the synchronizations: at sync 1
// each rank tells each owner where the owner's shard lies in its input and output (once its
// stream has reached the call), at sync 2 that its pass has run. This class reads GDRAA's
// schedule and runs its local steps; transport/fabric/execution_direct.hpp and
// detail/inproc_execution.hpp carry the synchronizations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/device_steps.hpp"
#include "mimatrix/transport/host_steps.hpp"

namespace mimatrix::transport {

/// @par Thread Safety
/// As its execution: under its progress engine's lock.
class direct_allreduce {
 public:
  /// Whether `plan` is GDRAA's allreduce with peers to reduce with.
  static bool fits(const schedule::schedule& plan) {
    return plan.algorithm == "gdraa" && plan.desc.kind == schedule::collective::allreduce && plan.desc.size > 1 &&
           plan.desc.count > 0;
  }

  /// Reads the tags of the two synchronizations, their waits and this rank's shard from
  /// GDRAA's schedule (algorithm/gdraa.hpp): sync 1's writes read the input, sync 2's the
  /// output; the reduce_slots step writes this rank's shard.
  explicit direct_allreduce(const schedule::schedule& plan)
      : inputs_(std::size_t(plan.desc.size), nullptr), outputs_(std::size_t(plan.desc.size), nullptr) {
    for (const schedule::step& st : plan.steps)
      if (st.kind == schedule::step_kind::write) tags_[sync_of(st)] = st.tag;
    for (schedule::step_id id = 0; id < plan.steps.size(); ++id) {
      const schedule::step& st = plan.steps[id];
      if (st.kind == schedule::step_kind::wait && st.count > 0) waits_[st.tag == tags_[0] ? 0 : 1] = id;
      if (st.kind == schedule::step_kind::reduce_slots) shard_ = st.dst;
    }
  }

  /// Which synchronization a write of the schedule is: 0 (sync 1) or 1 (sync 2).
  static int sync_of(const schedule::step& write) { return write.src.where == schedule::buffer::input ? 0 : 1; }
  /// The flag tag of sync `k` (0 or 1), and the step that waits for it.
  std::uint32_t tag(int k) const { return tags_[k]; }
  schedule::step_id wait(int k) const { return waits_[k]; }
  /// The bytes of this rank's shard, which every peer's sync 1 must match.
  std::size_t shard_bytes() const { return shard_.bytes; }

  /// Where this rank's shard lies in rank `r`'s input and output, as this rank reaches them.
  void reach(int r, const void* input, void* output) {
    inputs_[std::size_t(r)] = input;
    outputs_[std::size_t(r)] = output;
  }

  /// How a local step of the schedule ran: done at once, queued on the call's stream as
  /// any device step is, or not a step of the direct way (the executor runs it).
  enum class local { done, queued, not_direct };

  /// Runs GDRAA's local step `st` of rank `rank` the direct way. The copy of the own shard
  /// is nothing (the pass reads the input where it lies); reduce_slots queues the pass over
  /// every rank's shard, in rank order so that every shard sums alike; the finalize is
  /// folded into the pass, so it only marks its end on the stream (sync 2 then follows).
  /// Throws what the device throws.
  local run(const schedule::step& st, const host_buffers& mem, device_steps& device, int rank) {
    switch (st.kind) {
      case schedule::step_kind::copy:
        return local::done;
      case schedule::step_kind::reduce_slots:
        reach(rank, mem.input + shard_.offset, mem.output + shard_.offset);
        device.reduce_many(outputs_.data(), outputs_.size(), inputs_.data(), inputs_.size(), shard_.bytes);
        return local::queued;
      case schedule::step_kind::finalize:
        return local::queued;
      default:
        return local::not_direct;
    }
  }

 private:
  std::uint32_t tags_[2] = {};
  schedule::step_id waits_[2] = {};
  schedule::region shard_{};
  std::vector<const void*> inputs_;  // by rank: this rank's shard of its input
  std::vector<void*> outputs_;       // ... and of its output
};

}  // namespace mimatrix::transport

// GDRAA's collectives on device memory that every rank reaches (threads of one process, or
// processes on one node through CUDA IPC), run as the paper means them: rank j owns part j,
// and between two synchronizations it runs one pass (device::port::reduce_many) over the
// ranks' memory where it lies. Allreduce: shard j of every input is folded into shard j of
// every output, 2p buffers of traffic, the least for ranks sharing memory (a
// receiver-driven ring makes 2.5p). Reduce-scatter: block j of every input into rank j's
// output. Allgather: rank j's input into block j of every output. Broadcast: the root's
// input into every output, the root's pass alone. Each source is read once and each
// destination written once. The transport carries the synchronizations: at
// sync 1 each rank tells each owner where the owner's part lies in its input and output
// (once its stream has reached the call), at sync 2 that the owner's pass has run. This
// class reads GDRAA's schedule (algorithm::gdraa::build_on_shared_device) and runs its
// local steps; transport/fabric/execution_direct.hpp and detail/inproc_execution.hpp carry
// the synchronizations.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/device_steps.hpp"
#include "mimatrix/transport/host_steps.hpp"

namespace mimatrix::transport {

/// @par Thread Safety
/// As its execution: under its progress engine's lock.
class direct_collective {
 public:
  /// Where an owner's part lies in one rank's buffers: a region of its input and one of
  /// its output, either of them empty (bytes 0) where the owner neither reads nor writes.
  struct part {
    schedule::region input{schedule::buffer::input, 0, 0};
    schedule::region output{schedule::buffer::output, 0, 0};
  };

  /// Whether `plan` is a GDRAA collective with peers that runs as one pass a rank: its
  /// allreduce, or a reduce-scatter, allgather or broadcast built with both
  /// synchronizations (gdraa::build_on_shared_device), not build()'s one.
  static bool fits(const schedule::schedule& plan) {
    using schedule::collective;
    if (plan.algorithm != "gdraa" || plan.desc.size < 2 || plan.desc.count == 0) return false;
    if (plan.desc.kind == collective::allreduce) return true;  // build()'s has both
    int waits = 0, notifies = 0;
    for (const schedule::step& st : plan.steps) {
      waits += st.kind == schedule::step_kind::wait && st.count > 0;
      notifies += st.kind == schedule::step_kind::notify;
    }
    switch (plan.desc.kind) {
      case collective::allreduce: return true;
      case collective::reduce_scatter:
      case collective::allgather: return waits == 2;
      case collective::broadcast:  // build()'s root waits for nothing, its others for one write
        return waits == (plan.rank == plan.desc.root ? 1 : 2) && notifies == plan.desc.size - 1;
      default: return false;  // GDRAA runs the four above only
    }
    return false;
  }

  /// Reads the tags of the two synchronizations and every owner's part from GDRAA's
  /// schedule (algorithm/gdraa.hpp). The waits come in order, sync 1's first; a
  /// broadcast's root waits for sync 1 alone, and its writes are sync 2. An allreduce's sync-1 write to owner j reads shard j of the input, and its
  /// reduce_slots writes this rank's shard; the blocks of the other collectives follow
  /// from the descriptor (a broadcast's root owns the whole buffer).
  explicit direct_collective(const schedule::schedule& plan)
      : kind_(plan.desc.kind),
        rank_(plan.rank),
        root_(plan.desc.root),
        parts_(std::size_t(plan.desc.size)),
        inputs_(std::size_t(plan.desc.size), nullptr),
        outputs_(std::size_t(plan.desc.size), nullptr) {
    const bool broadcast = kind_ == schedule::collective::broadcast;
    int k = 0;
    for (schedule::step_id id = 0; id < plan.steps.size(); ++id) {
      const schedule::step& st = plan.steps[id];
      if (st.kind == schedule::step_kind::wait && st.count > 0 && k < 2) {
        tags_[k] = st.tag;
        waits_[k++] = id;
      }
      if (broadcast && st.kind == schedule::step_kind::write) tags_[1] = st.tag;
    }
    const std::size_t block = plan.desc.count * plan.desc.elem_size;
    for (int j = 0; j < plan.desc.size; ++j) {
      part& p = parts_[std::size_t(j)];
      if (kind_ == schedule::collective::reduce_scatter) {
        p.input = {schedule::buffer::input, std::size_t(j) * block, block};
        if (j == rank_) p.output = {schedule::buffer::output, 0, block};
      } else if (kind_ == schedule::collective::allgather) {
        if (j == rank_) p.input = {schedule::buffer::input, 0, block};
        p.output = {schedule::buffer::output, std::size_t(j) * block, block};
      } else if (broadcast && j == root_) {
        if (j == rank_) p.input = {schedule::buffer::input, 0, block};
        p.output = {schedule::buffer::output, 0, block};
      }
    }
    if (kind_ != schedule::collective::allreduce) return;
    for (const schedule::step& st : plan.steps) {
      if (st.kind == schedule::step_kind::write && st.tag == tags_[0]) shard(st.peer, st.src);
      if (st.kind == schedule::step_kind::reduce_slots) shard(rank_, st.dst);
    }
  }

  /// How many synchronizations peer `j` sends this rank, sync 1 first: both from every
  /// peer, except in a broadcast, where sync 2 comes from the root alone, to the others.
  int syncs_from(int j) const {
    return kind_ != schedule::collective::broadcast || (rank_ != root_ && j == root_) ? 2 : 1;
  }

  /// Which synchronization a write or notify of the schedule is: 0 (sync 1) or 1 (sync 2).
  int sync_of(const schedule::step& st) const { return st.tag == tags_[0] ? 0 : 1; }
  /// The flag tag of sync `k` (0 or 1), and the step that waits for it.
  std::uint32_t tag(int k) const { return tags_[k]; }
  schedule::step_id wait(int k) const { return waits_[k]; }
  /// Where owner `j`'s part lies in this rank's buffers (what sync 1 tells j).
  const part& offer(int j) const { return parts_[std::size_t(j)]; }
  /// The bytes of this rank's part in every peer's input and output, which every peer's
  /// sync 1 must match: what this rank's offer to itself holds, alike on every rank.
  std::size_t wanted_input_bytes() const {
    const bool none = kind_ == schedule::collective::allgather || kind_ == schedule::collective::broadcast;
    return none ? 0 : parts_[std::size_t(rank_)].input.bytes;
  }
  std::size_t wanted_output_bytes() const {
    return kind_ == schedule::collective::reduce_scatter ? 0 : parts_[std::size_t(rank_)].output.bytes;
  }
  /// The bytes the pass reads from each source and writes to each destination (a
  /// broadcast's: the root's buffer, on every rank).
  std::size_t part_bytes() const {
    if (kind_ == schedule::collective::broadcast) return parts_[std::size_t(root_)].output.bytes;
    return std::max(wanted_input_bytes(), wanted_output_bytes());
  }

  /// Where this rank's part lies in rank `r`'s input and output, as this rank reaches them
  /// (null where the pass neither reads nor writes there).
  void reach(int r, const void* input, void* output) {
    inputs_[std::size_t(r)] = input;
    outputs_[std::size_t(r)] = output;
  }

  /// How a local step of the schedule ran: done at once, queued on the call's stream as
  /// any device step is, or not a step of the direct way (the executor runs it).
  enum class local { done, queued, not_direct };

  /// Runs GDRAA's local step `st` the direct way. The pass over every rank's part is
  /// queued where the schedule reduces (reduce_slots) or, for allgather and a broadcast's
  /// root, copies this rank's input into place. The copy of the own shard before a
  /// reduction is nothing (the pass reads the input where it lies); the finalize is folded
  /// into the pass, so it only marks its end on the stream (sync 2 then follows). Throws
  /// what the device throws.
  local run(const schedule::step& st, const host_buffers& mem, device_steps& device) {
    const bool pass = st.kind == schedule::step_kind::reduce_slots ||
                      (st.kind == schedule::step_kind::copy && (kind_ == schedule::collective::allgather ||
                                                                kind_ == schedule::collective::broadcast));
    if (pass) {
      const part& own = parts_[std::size_t(rank_)];
      const std::byte* in = own.input.bytes ? mem.input + own.input.offset : nullptr;
      std::byte* out = own.output.bytes ? mem.output + own.output.offset : nullptr;
      // An allgather or broadcast in place has its input in place already.
      const bool copies = kind_ == schedule::collective::allgather || kind_ == schedule::collective::broadcast;
      reach(rank_, in, copies && out == in ? nullptr : out);
      // port::reduce_many lets dsts[d] be srcs[d] and nothing else overlap. An allreduce's
      // pairs line up in rank order; a reduce-scatter's one destination (in place, this
      // rank's block of its input) and an allgather's one source (in place, this rank's
      // block of its output) line up with this rank's own operand when that comes first.
      const bool own_first = kind_ != schedule::collective::allreduce;
      srcs_.clear();
      dsts_.clear();
      const auto add = [&](std::size_t r) {
        if (inputs_[r]) srcs_.push_back(inputs_[r]);
        if (outputs_[r]) dsts_.push_back(outputs_[r]);
      };
      if (own_first) add(std::size_t(rank_));
      for (std::size_t r = 0; r < inputs_.size(); ++r)
        if (!own_first || r != std::size_t(rank_)) add(r);
      device.reduce_many(dsts_.data(), dsts_.size(), srcs_.data(), srcs_.size(), part_bytes());
      return local::queued;
    }
    switch (st.kind) {
      case schedule::step_kind::copy: return local::done;
      case schedule::step_kind::finalize: return local::queued;
      default: return local::not_direct;
    }
  }

 private:
  /// An allreduce's shard of owner `j`: at one offset in the input and the output.
  void shard(int j, const schedule::region& r) {
    parts_[std::size_t(j)] = {{schedule::buffer::input, r.offset, r.bytes}, {schedule::buffer::output, r.offset, r.bytes}};
  }

  schedule::collective kind_;
  int rank_;
  int root_;  // a broadcast's
  std::uint32_t tags_[2] = {};
  schedule::step_id waits_[2] = {};
  std::vector<part> parts_;          // by owner: where its part lies in this rank's buffers
  std::vector<const void*> inputs_;  // by rank: this rank's part of its input, where the pass reads one
  std::vector<void*> outputs_;       // ... and of its output, where the pass writes one
  std::vector<const void*> srcs_;    // the pass's operands, reused call to call
  std::vector<void*> dsts_;
};

}  // namespace mimatrix::transport

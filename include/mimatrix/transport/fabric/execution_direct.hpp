// GDRAA's allreduce on device buffers that every peer on this host reaches (CUDA IPC), as
// the paper's direct writes, with the least memory traffic an allreduce of ranks sharing
// memory can make. Rank j owns shard j. At sync 1 each rank tells each peer where that
// peer's shard lies in its input and output (once its stream has reached the call); rank
// j then runs one pass (device::port::reduce_many) that reads shard j of every rank's
// input where it lies and writes the sum, finalized, into shard j of every rank's output;
// at sync 2 it tells each peer that the pass has run. Each rank reads the buffer once and
// writes it once: 2n buffers of traffic for n ranks, where a pull-only schedule that
// copies the others' sums in makes 2.5n and more. Nothing goes through host memory, and
// there are exactly two synchronizations, as GDRAA promises.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/fabric/execution.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"
#include "mimatrix/transport/fabric/wire.hpp"

namespace mimatrix::transport::detail::fabric {

inline bool execution::writes_peers_directly(device::port& port) const {
  const auto& d = plan().desc;
  return plan().algorithm == "gdraa" && d.kind == schedule::collective::allreduce && d.size > 1 && d.count > 0 &&
         reaches_peers_device_memory(port, 2 * sizeof(shared_region));
}

inline void execution::prepare_direct() {
  auto& d = direct_state_;
  const auto ranks = std::size_t(plan().desc.size);
  d.inputs.assign(ranks, nullptr);
  d.outputs.assign(ranks, nullptr);
  d.taken.assign(ranks, 0);
  // GDRAA's writes of sync 1 read the input, those of sync 2 the output; each sync has one wait.
  for (schedule::step_id id = 0; id < plan().steps.size(); ++id) {
    const schedule::step& st = step_at(id);
    if (st.kind == kind::write) d.tags[st.src.where == schedule::buffer::input ? 0 : 1] = st.tag;
  }
  for (schedule::step_id id = 0; id < plan().steps.size(); ++id) {
    const schedule::step& st = step_at(id);
    if (st.kind == kind::wait && st.count > 0) d.waits[st.tag == d.tags[0] ? 0 : 1] = id;
    if (st.kind == kind::reduce_slots) {
      d.shard_offset = st.dst.offset;
      d.shard_bytes = st.dst.bytes;
    }
  }
}

inline execution::posted execution::post_direct(schedule::step_id id) {
  const schedule::step& st = step_at(id);
  const std::uint64_t tag = wire::data_tag(plan().rank, sig().sequence, st.tag);
  if (st.src.where != schedule::buffer::input)  // sync 2: this rank's pass has run
    return small_->try_send(st.peer, tag, packed_, nullptr, 0) ? posted::done : posted::deferred;
  // Sync 1, sent once this rank's stream has reached the call (try_post holds it back
  // until then): the target may read this input and write this output from now on.
  const shared_region& in = exported_[std::size_t(schedule::buffer::input)];
  const shared_region& out = exported_[std::size_t(schedule::buffer::output)];
  const shared_region where[2] = {{in.block, in.offset + st.src.offset, st.src.bytes},
                                  {out.block, out.offset + st.src.offset, st.src.bytes}};
  return small_->try_send(st.peer, tag, packed_, where, sizeof where) ? posted::done : posted::deferred;
}

inline bool execution::run_direct(schedule::step_id id) {
  auto& d = direct_state_;
  const schedule::step& st = step_at(id);
  switch (st.kind) {
    case kind::copy:  // the pass reads this rank's input where it lies
      return true;
    case kind::reduce_slots: {
      const auto me = std::size_t(plan().rank);
      d.inputs[me] = mem_.input + d.shard_offset;
      d.outputs[me] = mem_.output + d.shard_offset;
      try {  // sources and destinations in rank order: every rank's shard sums alike
        device()->reduce_many(d.outputs.data(), d.outputs.size(), d.inputs.data(), d.inputs.size(), d.shard_bytes);
      } catch (const error& e) {
        return device_failed(e);
      }
      return true;  // the finalize behind it waits on the stream
    }
    case kind::finalize:  // folded into the pass: done, and the peers told, once it has run
      device()->then([this, id] {
        if (!finished()) complete(id);
      });
      return false;
    default:
      return step_executor::run_local(id);
  }
}

inline bool execution::take_direct() {
  auto& d = direct_state_;
  bool any = false;
  for (int peer = 0; peer < plan().desc.size; ++peer) {
    if (peer == plan().rank) continue;
    std::uint8_t& taken = d.taken[std::size_t(peer)];
    while (taken < 2 && !finished()) {
      const std::uint32_t sync = d.tags[taken];
      const local_mailboxes::message* m = small_->try_peek(peer, wire::data_tag(peer, sig().sequence, sync));
      if (!m) break;
      shared_region where[2]{};
      const std::size_t expected = taken == 0 ? sizeof where : 0;
      if (m->bytes == expected && expected) std::memcpy(where, m->payload, sizeof where);
      const bool same_call = m->data == packed_;
      const bool fits = m->bytes == expected && (!expected || (where[0].bytes == d.shard_bytes &&
                                                               where[1].bytes == d.shard_bytes));
      small_->take(peer);
      error_context at = context(d.waits[taken]);
      at.peer = peer;
      if (!same_call || !fits) {
        fail(errc::mismatch,
             describe(at, !same_call ? wire::disagreement(peer, m->data, packed_, sig(), plan().algorithm)
                                     : "rank " + std::to_string(peer) + " sent " + std::to_string(m->bytes) +
                                           " bytes for synchronization " + std::to_string(taken + 1) +
                                           " where this rank expected its shard of " +
                                           std::to_string(d.shard_bytes) + " bytes (" + to_string(sig()) +
                                           "; run every rank on device buffers of one kind of port)"));
        return true;
      }
      if (taken == 0) {
        try {
          d.inputs[std::size_t(peer)] = port_->import_memory(where[0].block) + where[0].offset;
          d.outputs[std::size_t(peer)] = port_->import_memory(where[1].block) + where[1].offset;
        } catch (const error& e) {
          fail(errc::transport, describe(at, "rank " + std::to_string(peer) +
                                                 "'s device memory cannot be opened here: " + e.what()));
          return true;
        }
      }
      ++taken;
      any = true;
      raise_flag(sync, peer);
    }
  }
  return any;
}

}  // namespace mimatrix::transport::detail::fabric

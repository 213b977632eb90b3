// The fabric transport's part of GDRAA's allreduce on device buffers that every peer on
// this host reaches (CUDA IPC): the two synchronizations, through the mailboxes, of
// transport/direct_allreduce.hpp, which runs the one pass a rank. At sync 1 a rank tells
// each peer where that peer's shard lies in its input and output (two exported regions),
// once its stream has reached the call; the peer opens those blocks once. At sync 2 it
// tells each peer that its pass has run. Nothing goes through host memory.
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

inline bool execution::writes_peers_directly(const endpoint& ep, const schedule::schedule& plan,
                                             const device::port& port) {
  return direct_allreduce::fits(plan) && ep.reaches_peers_device_memory(port, direct_sync_bytes());
}

inline execution::posted execution::post_direct(schedule::step_id id) {
  const schedule::step& st = step_at(id);
  const std::uint64_t tag = wire::data_tag(plan().rank, sig().sequence, st.tag);
  if (direct_allreduce::sync_of(st) == 1)  // this rank's pass has run
    return small_->try_send(st.peer, tag, packed_, nullptr, 0) ? posted::done : posted::deferred;
  // Sync 1, sent once this rank's stream has reached the call (try_post holds it back
  // until then): the target may read this input and write this output from now on.
  const shared_region& in = exported_[std::size_t(schedule::buffer::input)];
  const shared_region& out = exported_[std::size_t(schedule::buffer::output)];
  const shared_region where[2] = {{in.block, in.offset + st.src.offset, st.src.bytes},
                                  {out.block, out.offset + st.src.offset, st.src.bytes}};
  return small_->try_send(st.peer, tag, packed_, where, sizeof where) ? posted::done : posted::deferred;
}

inline bool execution::take_direct() {
  const direct_allreduce& d = *direct_;
  bool any = false;
  for (int peer = 0; peer < plan().desc.size; ++peer) {
    if (peer == plan().rank) continue;
    std::uint8_t& taken = direct_taken_[std::size_t(peer)];
    while (taken < 2 && !finished()) {
      const std::uint32_t sync = d.tag(taken);
      const local_mailboxes::message* m = small_->try_peek(peer, wire::data_tag(peer, sig().sequence, sync));
      if (!m) break;
      shared_region where[2]{};
      const std::size_t expected = taken == 0 ? sizeof where : 0, bytes = m->bytes;
      const std::uint64_t data = m->data;
      if (bytes == expected && expected) std::memcpy(where, m->payload, sizeof where);
      small_->take(peer);  // m is gone
      const bool same_call = data == packed_;
      const bool fits = bytes == expected && (!expected || (where[0].bytes == d.shard_bytes() &&
                                                            where[1].bytes == d.shard_bytes()));
      error_context at = context(d.wait(taken));
      at.peer = peer;
      at.bytes = taken == 0 ? std::int64_t(d.shard_bytes()) : -1;  // the wait step's own is none
      if (!same_call || !fits) {
        fail(errc::mismatch,
             describe(at, !same_call ? wire::disagreement(peer, data, packed_, sig(), plan().algorithm)
                                     : "rank " + std::to_string(peer) + " sent " + std::to_string(bytes) +
                                           " bytes for synchronization " + std::to_string(taken + 1) +
                                           " where this rank expected its shard of " +
                                           std::to_string(d.shard_bytes()) + " bytes (" + to_string(sig()) +
                                           "; run every rank on device buffers of one kind of port)"));
        return true;
      }
      if (taken == 0) {
        try {
          direct_->reach(peer, port_->import_memory(where[0].block) + where[0].offset,
                         port_->import_memory(where[1].block) + where[1].offset);
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

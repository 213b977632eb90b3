// The fabric transport's part of GDRAA's collectives on device buffers that every peer on
// this host reaches (CUDA IPC): the two synchronizations, through the mailboxes, of
// transport/direct_collective.hpp, which runs the one pass a rank. At sync 1 a rank tells
// each peer where that peer's part lies in its input and output (two exported regions,
// either empty), once its stream has reached the call; the peer opens those blocks once.
// At sync 2 it tells each peer that its pass has run. Nothing goes through host memory.
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
  return direct_collective::fits(plan) && ep.reaches_peers_device_memory(port, direct_sync_bytes());
}

inline execution::posted execution::post_direct(schedule::step_id id) {
  const schedule::step& st = step_at(id);
  const std::uint64_t tag = wire::data_tag(plan().rank, sig().sequence, st.tag);
  if (direct_->sync_of(st) == 1)  // this rank's pass has run
    return small_->try_send(st.peer, tag, packed_, nullptr, 0) ? posted::done : posted::deferred;
  // Sync 1, sent once this rank's stream has reached the call (try_post holds it back
  // until then): the target may read this input and write this output from now on.
  const direct_collective::part& part = direct_->offer(st.peer);
  const shared_region& in = exported_[std::size_t(schedule::buffer::input)];
  const shared_region& out = exported_[std::size_t(schedule::buffer::output)];
  const shared_region where[2] = {{in.block, in.offset + part.input.offset, part.input.bytes},
                                  {out.block, out.offset + part.output.offset, part.output.bytes}};
  return small_->try_send(st.peer, tag, packed_, where, sizeof where) ? posted::done : posted::deferred;
}

inline bool execution::take_direct() {
  direct_collective& d = *direct_;
  bool any = false;
  for (int peer = 0; peer < plan().desc.size; ++peer) {
    if (peer == plan().rank) continue;
    std::uint8_t& taken = direct_taken_[std::size_t(peer)];
    while (taken < d.syncs_from(peer) && !finished()) {
      const std::uint32_t sync = d.tag(taken);
      const local_mailboxes::message* m = small_->try_peek(peer, wire::data_tag(peer, sig().sequence, sync));
      if (!m) break;
      shared_region where[2]{};
      const std::size_t expected = taken == 0 ? sizeof where : 0, bytes = m->bytes;
      const std::uint64_t data = m->data;
      if (bytes == expected && expected) std::memcpy(where, m->payload, sizeof where);
      small_->take(peer);  // m is gone
      const bool same_call = data == packed_;
      const bool fits = bytes == expected && (!expected || (where[0].bytes == d.wanted_input_bytes() &&
                                                            where[1].bytes == d.wanted_output_bytes()));
      error_context at = context(d.wait(taken));
      at.peer = peer;
      at.bytes = taken == 0 ? std::int64_t(d.part_bytes()) : -1;  // the wait step's own is none
      if (!same_call || !fits) {
        const std::string offered =
            bytes != expected ? std::to_string(bytes) + " bytes for synchronization " + std::to_string(taken + 1)
                              : std::to_string(where[0].bytes) + " bytes of its input and " +
                                    std::to_string(where[1].bytes) + " of its output";
        fail(errc::mismatch,
             describe(at, !same_call ? wire::disagreement(peer, data, packed_, sig(), plan())
                                     : "rank " + std::to_string(peer) + " offered " + offered +
                                           " where this rank expected its part, " +
                                           std::to_string(d.wanted_input_bytes()) + " bytes of an input and " +
                                           std::to_string(d.wanted_output_bytes()) + " of an output (" +
                                           to_string(sig()) +
                                           "; run every rank on device buffers of one kind of port)"));
        return true;
      }
      if (taken == 0) {
        try {
          const auto open = [&](const shared_region& r) {
            return r.bytes ? port_->import_memory(r.block) + r.offset : nullptr;
          };
          d.reach(peer, open(where[0]), open(where[1]));
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

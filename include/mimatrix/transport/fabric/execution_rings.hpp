// A fabric execution's mailbox and bulk-ring path: which ring a message takes, and how
// the receives whose dependencies are done take what arrived, checked before it touches
// the caller's buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/fabric/execution.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"
#include "mimatrix/transport/fabric/wire.hpp"

namespace mimatrix::transport::detail::fabric {

inline local_mailboxes* execution::box_for(const schedule::step& st) const {
  for (local_mailboxes* box : {small_, bulk_})
    if (box && st.bytes() <= box->payload_bytes() && box->reaches(st.peer)) return box;
  return nullptr;
}

inline bool execution::poll_mailboxes() {
  bool changed = false;
  ++poll_round_;
  for (std::size_t k = 0; k < polls_.size() && !finished();) {
    local_mailboxes& box = *state_[polls_[k]].box;
    const int peer = step_at(polls_[k]).peer;
    std::uint32_t& looked = looked_[2 * std::size_t(peer) + (&box == bulk_)];
    if (looked == poll_round_) {
      ++k;
      continue;
    }
    looked = poll_round_;
    bool took = false;
    while (!finished() && take_arrived(box, peer)) took = true;
    changed |= took;
    k = took ? 0 : k + 1;  // taking reorders polls_
  }
  return changed;
}

inline bool execution::take_arrived(local_mailboxes& box, int peer) {
  std::size_t at = polls_.size();
  const local_mailboxes::message* m = box.try_peek_if(peer, [&](std::uint64_t tag) {
    for (std::size_t j = 0; j < polls_.size(); ++j) {
      const schedule::step& st = step_at(polls_[j]);
      if (st.peer == peer && state_[polls_[j]].box == &box && wire::data_tag(peer, sig().sequence, st.tag) == tag) {
        at = j;
        return true;
      }
    }
    return false;
  });
  if (!m) return false;
  const schedule::step_id id = polls_[at];
  polls_[at] = polls_.back();
  polls_.pop_back();
  state_[id].polling = false;
  const schedule::step& st = step_at(id);
  if (shared_) return take_shared(box, peer, id, *m);
  if (m->data != packed_ || m->bytes != st.dst.bytes) [[unlikely]] {
    reject(box, peer, id, *m);
    return true;
  }
  arrive(id, m->payload);  // the step is ready: read where it lies
  box.take(peer);
  return true;
}

// Inline by its declaration: g++ refuses `inline` on a definition after `noinline`.
void execution::reject(local_mailboxes& box, int peer, schedule::step_id id, const local_mailboxes::message& m) {
  const std::string why = m.data != packed_
                              ? wire::disagreement(peer, m.data, packed_, sig(), plan())
                              : "rank " + std::to_string(peer) + " sent " + std::to_string(m.bytes) +
                                    " bytes where " + std::to_string(step_at(id).dst.bytes) + " were expected (" +
                                    to_string(sig()) + ")";
  box.take(peer);
  fail(errc::mismatch, describe(context(id), why));
}

inline bool execution::find_untaken() {
  const std::uint64_t sequence = sig().sequence & wire::sequence_mask;
  const auto of_this_call = [&](std::uint64_t tag) { return ((tag >> wire::tag_bits) & wire::sequence_mask) == sequence; };
  int from = -1;
  each_box([&](local_mailboxes& box) {
    for (int peer = 0; peer < plan().desc.size && from < 0; ++peer)
      if (peer != plan().rank && box.reaches(peer) && box.try_peek_if(peer, of_this_call)) from = peer;
  });
  if (from < 0) return true;
  fail(errc::mismatch,
       describe(stuck_context(), "rank " + std::to_string(from) + " sent this rank a message of " + to_string(sig()) +
                                     " that no step of this rank takes: the ranks disagree on the call (for a "
                                     "call with a root, most likely on its root; this rank's is " +
                                     std::to_string(sig().root) + ")"));
  return false;
}

inline void execution::find_misrouted() {
  for (schedule::step_id id = 0; id < state_.size() && !finished(); ++id) {
    const schedule::step& st = step_at(id);
    const step_state& s = state_[id];
    if ((st.kind != kind::recv && st.kind != kind::recv_reduce) || !(s.request || s.polling)) continue;
    const std::uint64_t tag = wire::data_tag(st.peer, sig().sequence, st.tag);
    each_box([&](local_mailboxes& box) {
      if (&box == s.box || !box.reaches(st.peer) || finished()) return;
      if (const local_mailboxes::message* m = box.try_peek(st.peer, tag)) reject(box, st.peer, id, *m);
    });
  }
}

inline void execution::unblock_rings() {
  each_box([](local_mailboxes& box) { box.discard_if(-1, [](std::uint64_t) { return false; }); });
}

}  // namespace mimatrix::transport::detail::fabric

// A fabric execution's message path: tagged sends and receives (small sends injected),
// what the provider's answer to a post means, recv_reduce staging and the receive window
// in schedule order, and the completions the endpoint hands back.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <sys/types.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/fabric/call.hpp"
#include "mimatrix/transport/fabric/error.hpp"
#include "mimatrix/transport/fabric/execution.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"
#include "mimatrix/transport/fabric/wire.hpp"

namespace mimatrix::transport::detail::fabric {

constexpr std::string_view endpoint_closed = "'s fabric endpoint was closed after ";

/// Whether `origin` is another rank's word that it closed its endpoint ("rank 2's fabric
/// endpoint was closed after ..."): cause and advice are in it, so a rank that closes its
/// own for it passes it on as it is, not nested in words of its own.
inline bool tells_a_closed_endpoint(std::string_view origin) {
  if (!origin.starts_with("rank ")) return false;
  const std::size_t end = origin.find_first_not_of("0123456789", 5);
  return end != std::string_view::npos && end > 5 && origin.substr(end).starts_with(endpoint_closed);
}

// Only the failed calls' messages: an earlier call on a stream that has not failed may
// still be in flight (calls on a stream start before the stream reaches them), its
// messages not yet received (they were dropped once any call had failed).
inline void execution::discard_late_messages() {
  const std::uint64_t sequence = sig().sequence;
  const auto now = static_cast<std::uint32_t>(sequence) & wire::sequence_mask;
  each_box([&](local_mailboxes& box) {
    box.discard_if(-1, [&](std::uint64_t tag) {
      const auto call = static_cast<std::uint32_t>((tag & call_bits) >> wire::tag_bits);
      const std::uint64_t back = (now - call) & wire::sequence_mask;
      return wire::earlier(call, now) && back <= sequence && ep_->failed(sequence - back);
    });
  });
}

inline void execution::on_failure(errc code, bool tell_others) {
  // This call's messages still waiting would only fill the rings.
  const std::uint64_t mine = wire::data_tag(0, sig().sequence, 0) & call_bits;
  each_box([&](local_mailboxes& box) {
    box.discard_if(-1, [&](std::uint64_t tag) { return (tag & call_bits) == mine; });
  });
  // A call that concluded (its output on its way back) gave state_ to the next call.
  for (std::size_t i = 0; ws_ && i < state_.size(); ++i) {
    step_state& s = state_[i];
    if (!s.request) continue;
    if (ep_->ep()) ep_->watched("fi_cancel", -1, [&] { return fi_cancel(&ep_->ep()->fid, &s.request->ctx); });
    ep_->orphan(s.request);
    s.request = nullptr;
    --in_flight_;
  }
  const auto until = clock::now() + std::chrono::milliseconds(200);
  while (ep_->orphans() && clock::now() < until)
    if (!ep_->progress()) std::this_thread::yield();
  if (tell_others) ep_->announce_failure(sig().sequence, code, origin());
  if (code == errc::peer_lost) ep_->lose_peer({code, origin()});
  // A transfer the provider neither finished nor cancelled (a peer stopped mid-message
  // over tcp;ofi_rxm) would write into the caller's buffers after they are handed back.
  const bool uncancelled = ep_->orphans() != 0;
  // A message longer than its receive makes tcp;ofi_rxm drop that connection, and not
  // every rank learns which: a rank whose send met the dropped connection sees only a
  // lost peer. Every rank stops alike, so none can succeed at a later call that
  // another fails (the rxm providers are alike; shm truncates harmlessly).
  const bool dropped = (code == errc::mismatch || connection_lost_) && ep_->provider() != "shm";
  if (!uncancelled && !dropped) return give_back_memory();
  // Calls after it fail with its code, whatever closes the endpoint on the way: after a lost
  // peer as lost-peer calls, after a mismatch as mismatched ones (the rank whose longer
  // message over tcp closed a connection once got `aborted`, the others `mismatch`).
  if (tells_a_closed_endpoint(origin()))
    ep_->disable(code, origin());
  else if (uncancelled)
    ep_->disable(code, "rank " + std::to_string(plan().rank) + std::string(endpoint_closed) + to_string(sig()) +
                             " failed with transfers the provider could not cancel (" + origin() +
                             "); create a new communicator");
  else
    ep_->disable(code, "rank " + std::to_string(plan().rank) + std::string(endpoint_closed) + to_string(sig()) +
                             " failed (" + origin() + "): " + ep_->provider() +
                             (code == errc::mismatch ? " drops a connection that carried a message longer "
                                                       "than the receive posted for it"
                                                     : " dropped a connection to a peer") +
                             "; create a new communicator");
  give_back_memory();
}

inline execution::posted execution::post(schedule::step_id id) {
  const schedule::step& st = step_at(id);
  if (schedule::is_one_sided(st.kind)) return direct_ ? post_direct(id) : post_write(id);
  if (local_mailboxes* box = state_[id].box) {
    if (st.kind != kind::send) return poll_later(id);
    if (shared_) return post_shared(id);
    if (!box->try_send(st.peer, wire::data_tag(plan().rank, sig().sequence, st.tag), packed_, mem_.read(st.src),
                       st.src.bytes))
      return posted::deferred;  // the ring is full
    return posted::done;
  }
  // Device memory is never injected: the provider would read it with the CPU.
  if (st.kind == kind::send && st.src.bytes <= ep_->inject_bytes() && !hmem_) return inject(id);
  const bool staged_here = is_staged(id);
  if (st.kind == kind::recv && !staged_here && !receives_.admits(state_[id].position)) {
    receives_.hold(state_[id].position);  // until the earlier receives are done (receive_window.hpp)
    return posted::held;
  }
  posted_op* r = ep_->acquire(this, id);
  const std::uint64_t tag = wire::data_tag(st.kind == kind::send ? plan().rank : st.peer, sig().sequence, st.tag);
  if (st.kind == kind::send) {
    const std::byte* data = mem_.read(st.src);
    return posted_as(id, r, "fi_tsenddata", ep_->watched("fi_tsenddata", st.peer, [&] {
      return fi_tsenddata(ep_->ep(), data, st.src.bytes, descriptor(data, st.src.bytes), packed_,
                          ep_->address(st.peer), tag, &r->ctx);
    }));
  }
  std::byte* data = staged_here ? staged(id) : mem_.write(st.dst);
  return posted_as(id, r, "fi_trecv", ep_->watched("fi_trecv", st.peer, [&] {
    return fi_trecv(ep_->ep(), data, st.dst.bytes, descriptor(data, st.dst.bytes), ep_->address(st.peer), tag, 0,
                    &r->ctx);
  }));
}

inline bool execution::post_due() {
  auto& due = receives_.due();
  for (std::size_t k = 0; k < due.size() && !finished(); ++k) release(due[k]);
  due.clear();
  return true;
}

inline std::string execution::stall_detail() const {
  if (!ws_ || receives_.holding() == 0) return ep_->behind(sig().sequence);
  return "; " + std::to_string(receives_.holding()) + " receive(s) held back for the receive window (" +
         std::to_string(receive_window::width) + " plain receives from step " +
         std::to_string(receives_.earliest_open()) + ", the earliest not done)" + ep_->behind(sig().sequence);
}

inline execution::posted execution::posted_as(schedule::step_id id, posted_op* r, const char* call, ssize_t ret) {
  if (ret == -FI_EAGAIN) {
    ep_->release(r);
    return posted::deferred;
  }
  if (ret != 0) {
    ep_->release(r);
    fail_post(id, call, ret);
    return posted::done;
  }
  state_[id].request = r;
  ++in_flight_;
  return posted::started;
}

inline execution::posted execution::inject(schedule::step_id id) {
  const schedule::step& st = step_at(id);
  const ssize_t ret = ep_->watched("fi_tinjectdata", st.peer, [&] {
    return fi_tinjectdata(ep_->ep(), mem_.read(st.src), st.src.bytes, packed_, ep_->address(st.peer),
                          wire::data_tag(plan().rank, sig().sequence, st.tag));
  });
  if (ret == -FI_EAGAIN) return posted::deferred;
  if (ret != 0) fail_post(id, "fi_tinjectdata", ret);
  return posted::done;
}

inline void execution::fail_post(schedule::step_id id, const char* call, ssize_t ret) {
  const int peer = step_at(id).peer;
  const std::string what = explain_fabric_call(call, ret, ep_->provider());
  if (is_peer_loss(static_cast<int>(ret))) return lose_peer(id, peer, what);
  const std::vector<int> silent = ep_->silent_peers(probe_grace(timeout()));
  if (std::find(silent.begin(), silent.end(), peer) != silent.end())
    return fail(errc::peer_lost, describe(context(id), "rank " + std::to_string(peer) +
                                                           " is unreachable: it did not answer a liveness probe after " +
                                                           what));
  fail(errc::transport, describe(context(id), what));
}

inline void execution::on_complete(posted_op& r, const fi_cq_tagged_entry& e) {
  const schedule::step_id id = r.step;
  state_[id].request = nullptr;
  --in_flight_;
  ep_->release(&r);
  const schedule::step& st = step_at(id);
  if (st.kind == kind::recv && !hmem_) receives_.finish(state_[id].position);
  if (st.kind == kind::send || schedule::is_one_sided(st.kind)) return complete(id);
  if ((e.flags & FI_REMOTE_CQ_DATA) && e.data != packed_)
    return fail(errc::mismatch,
                describe(context(id), wire::disagreement(st.peer, e.data, packed_, sig(), plan())));
  if (e.len != st.dst.bytes)
    return fail(errc::mismatch, describe(context(id), "rank " + std::to_string(st.peer) + " sent " +
                                                          std::to_string(e.len) + " bytes where " +
                                                          std::to_string(st.dst.bytes) + " were expected (" +
                                                          to_string(sig()) + ")"));
  if (!is_staged(id)) return complete(id);
  arrive(id, staged(id));
}

inline void execution::on_error(posted_op& r, const fi_cq_err_entry& e) {
  const schedule::step_id id = r.step;
  state_[id].request = nullptr;
  --in_flight_;
  ep_->release(&r);
  const schedule::step& st = step_at(id);
  if (st.kind == kind::recv && !hmem_) receives_.finish(state_[id].position);
  const int code = e.err < 0 ? -e.err : e.err;  // providers differ in the sign
  if (code == FI_ETRUNC && (e.flags & FI_REMOTE_CQ_DATA) && e.data != packed_)  // another call's message
    return fail(errc::mismatch,
                describe(context(id), wire::disagreement(st.peer, e.data, packed_, sig(), plan())));
  if (code == FI_ETRUNC)
    return fail(errc::mismatch,
                describe(context(id), "rank " + std::to_string(st.peer) + " sent " +
                                          (e.olen ? std::to_string(st.dst.bytes + e.olen) : "more than " +
                                                                                                std::to_string(st.dst.bytes)) +
                                          " bytes where " + std::to_string(st.dst.bytes) + " were expected (" +
                                          to_string(sig()) + ")"));
  const std::string what = std::string(schedule::to_string(st.kind)) + " failed: " + ep_->explain(e);
  if (schedule::is_one_sided(st.kind) && code == FI_EINVAL)
    return fail(errc::transport, describe(context(id), what + " (the peer's window may be smaller: set "
                                                             "MIMATRIX_WINDOW_BYTES alike on every rank)"));
  // Our own cancels never reach here (the request is orphaned first), so a cancel or an
  // I/O error on a peer's message means the provider gave up on that peer.
  if (code == FI_ECANCELED || code == FI_EIO || is_peer_loss(code)) return lose_peer(id, st.peer, what);
  fail(errc::transport, describe(context(id), what));
}

/// The provider dropped the connection to `peer`. That peer may be a survivor that
/// failed first and closed its endpoint (a rank does after a lost connection), so what
/// it announced, or a peer on this host whose process has ended, names the cause better.
inline void execution::lose_peer(schedule::step_id id, int peer, const std::string& what) {
  connection_lost_ = true;
  if (auto f = ep_->failure(sig().sequence)) return end_failed(*f);
  const std::string gone = ended_peers();
  fail(errc::peer_lost, describe(context(id), "rank " + std::to_string(peer) + " is unreachable (" + what + ")" +
                                                  (gone.empty() ? "" : "; " + gone)));
}

inline void execution::stage_more() {
  while (!free_slots_.empty() && next_reduce_ < reduces_.size() && !finished()) {
    const schedule::step_id id = reduces_[next_reduce_++];
    state_[id].slot = free_slots_.back();
    free_slots_.pop_back();
    post_early(id);
  }
}

inline void execution::register_whole_buffers() {
  registration_cache& mr = ep_->registrations();
  if (hmem_) return;  // register_device_buffers(), which may fail the call
  if (!mr.required()) return;
  mr.descriptor(mem_.input, plan().desc.input_bytes(plan().rank));
  mr.descriptor(mem_.output, plan().desc.output_bytes(plan().rank));
  mr.descriptor(mem_.scratch, plan().scratch_bytes);
  mr.descriptor(staging_, slot_bytes_ * free_slots_.size());
}

}  // namespace mimatrix::transport::detail::fabric

// One rank's execution of one schedule over libfabric: the port of the step executor
// (step_executor.hpp). Messages go as tagged sends (small ones injected), through
// shared-memory mailboxes between ranks on one host, or as RMA writes into the peers'
// windows (window.hpp) for one-sided steps: the call's output and scratch then live in
// this rank's window, and the output is copied out at the end. Each recv_reduce is
// received into a staging slot as early as the call starts, so data flows while earlier
// steps still reduce; -FI_EAGAIN is back-pressure.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/wire.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport::detail::fabric {

class execution final : public step_executor, private call {
  using kind = schedule::step_kind;

 public:
  execution(std::shared_ptr<endpoint> endpoint, std::shared_ptr<const schedule::schedule> plan, const std::byte* input,
            std::byte* output, const signature& sig, const reduce::host_kernels& kernels,
            std::chrono::milliseconds timeout)
      : step_executor(endpoint->engine(), std::move(plan), sig, kernels, timeout, endpoint->take_bookkeeping()),
        ep_(std::move(endpoint)),
        packed_(wire::pack(sig)),
        ws_(ep_->take_workspace()),
        user_output_(output) {
    mem_ = {input, output, nullptr};
    const auto& steps = this->plan().steps;
    const std::size_t n = steps.size();
    state_.assign(n, step_state{});
    looked_.assign(2 * std::size_t(this->plan().desc.size), 0);
    std::size_t slot_bytes = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const schedule::step& st = steps[i];
      if (schedule::is_one_sided(st.kind) || (st.kind == kind::wait && st.count > 0)) {
        one_sided_ = true;
        if (st.tag > wire::max_flag_tag)
          throw error(errc::invalid_argument, "transport::fabric: flag tag " + std::to_string(st.tag) +
                                                  " exceeds the " + std::to_string(wire::flag_tag_bits) +
                                                  " bits a write's CQ data carries");
      }
      if (schedule::is_communication(st.kind) && st.tag > wire::max_tag)
        throw error(errc::invalid_argument, "transport::fabric: schedule tag " + std::to_string(st.tag) +
                                                " exceeds the " + std::to_string(wire::tag_bits) + " bits a tag carries");
      if (schedule::is_communication(st.kind) && (state_[i].box = box_for(st))) continue;
      if (st.kind == kind::recv_reduce) {
        reduces_.push_back(static_cast<schedule::step_id>(i));
        slot_bytes = std::max(slot_bytes, (st.dst.bytes + 63) / 64 * 64);
      }
    }
    // Staging is a few slots reused in schedule order, not one block a step: data then
    // arrives in memory the reduction reads while it is still in cache.
    const std::size_t slots =
        std::clamp<std::size_t>(ep_->staging_bytes() / std::max<std::size_t>(slot_bytes, 1), 2, max_staged);
    slot_bytes_ = slot_bytes;
    staging_ = ws_->staging.reserve(std::min(slots, reduces_.size()) * slot_bytes);
    for (std::size_t k = std::min(slots, reduces_.size()); k > 0; --k) free_slots_.push_back(k - 1);
    if (ep_->any_failure()) {  // late messages of failed calls
      const auto now = static_cast<std::uint32_t>(sig.sequence) & wire::sequence_mask;
      each_box([&](local_mailboxes& box) {
        box.discard_if(-1, [&](std::uint64_t tag) {
          return wire::earlier(static_cast<std::uint32_t>((tag & call_bits) >> wire::tag_bits), now);
        });
      });
    }
    if (one_sided_)
      use_window();
    else
      mem_.scratch = ws_->scratch.reserve(this->plan().scratch_bytes);
    register_whole_buffers();
    if (auto f = ep_->failure(sig.sequence))
      fail_from(f->code, f->message);
    else
      stage_more();  // receives into staging depend on nothing: post as many as there are slots now
    start();
  }

  ~execution() override {
    leave();
    ep_->give_bookkeeping(release_bookkeeping());
  }

  void finish() override {
    std::error_code ignored;
    wait(ignored);
  }

 private:
  // Staging for recv_reduce: about fabric_options::staging_bytes, in at least 2 and at
  // most max_staged slots.
  static constexpr std::size_t max_staged = 64;

  // ---- the port ---------------------------------------------------------------------

  bool poll() override {
    if (auto f = ep_->failure(sig().sequence)) return fail_from(f->code, f->message), true;
    // A call whose messages all go through mailboxes needs the provider only for control
    // messages (aborts, liveness probes): reading its queue every round would double the
    // latency of a small call.
    bool changed = in_flight_ || one_sided_ || (++rounds_ & 63) == 0 ? ep_->progress() : false;
    if (finished()) return true;
    if (one_sided_) changed |= take_flags();
    if (!polls_.empty() && !finished()) changed |= poll_mailboxes();
    return changed;
  }

  /// Posts a send, receive, write or notify.
  posted post(schedule::step_id id) override {
    const schedule::step& st = step_at(id);
    if (schedule::is_one_sided(st.kind)) return post_write(id);
    if (local_mailboxes* box = state_[id].box) {
      if (st.kind != kind::send) return poll_later(id);
      if (!box->try_send(st.peer, wire::data_tag(plan().rank, sig().sequence, st.tag), packed_, mem_.read(st.src),
                         st.src.bytes))
        return posted::deferred;  // the ring is full
      return posted::done;
    }
    if (st.kind == kind::send && st.src.bytes <= ep_->inject_bytes()) return inject(id);
    if (st.kind == kind::recv && posted_receives_ >= max_posted_receives)
      return posted::deferred;  // held back by us: the provider's receive queue stays open to recv_reduce
    posted_op* r = ep_->acquire(this, id);
    const std::uint64_t tag = wire::data_tag(st.kind == kind::send ? plan().rank : st.peer, sig().sequence, st.tag);
    if (st.kind == kind::send) {
      const std::byte* data = mem_.read(st.src);
      return posted_as(id, r, "fi_tsenddata",
                       fi_tsenddata(ep_->ep(), data, st.src.bytes, ep_->registrations().descriptor(data, st.src.bytes),
                                    packed_, ep_->address(st.peer), tag, &r->ctx));
    }
    std::byte* data = st.kind == kind::recv ? mem_.write(st.dst) : staged(id);
    const posted p = posted_as(id, r, "fi_trecv",
                               fi_trecv(ep_->ep(), data, st.dst.bytes,
                                        ep_->registrations().descriptor(data, st.dst.bytes), ep_->address(st.peer),
                                        tag, 0, &r->ctx));
    if (p == posted::started && st.kind == kind::recv) ++posted_receives_;
    return p;
  }

  /// What a libfabric post's return means for the step.
  posted posted_as(schedule::step_id id, posted_op* r, const char* call, ssize_t ret) {
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

  /// A small send: the provider copies it before returning, so the step is done at once.
  posted inject(schedule::step_id id) {
    const schedule::step& st = step_at(id);
    const ssize_t ret = fi_tinjectdata(ep_->ep(), mem_.read(st.src), st.src.bytes, packed_, ep_->address(st.peer),
                                       wire::data_tag(plan().rank, sig().sequence, st.tag));
    if (ret == -FI_EAGAIN) return posted::deferred;
    if (ret != 0) fail_post(id, "fi_tinjectdata", ret);
    return posted::done;
  }

  /// Every step is done: a one-sided call's output comes out of the window.
  bool conclude() override {
    if (one_sided_ && plan().desc.output_bytes()) std::memcpy(user_output_, mem_.output, plan().desc.output_bytes());
    give_back_memory();
    return true;
  }

  /// Idle, the provider's queue is read every round (a mailbox-only call reads it every
  /// 64th when busy): a peer's abort may need a connection set up first, which takes
  /// progress on both sides.
  void stalled(int rounds) override {
    if (rounds > 256) (void)ep_->progress();
    if (!finished() && rounds >= stalled_rounds && (rounds & 63) == 0) unblock_rings();
  }

  bool probes() const override { return true; }
  std::vector<int> silent_peers(std::chrono::milliseconds grace) override { return ep_->silent_peers(grace); }

  std::string_view route(schedule::step_id id) const override {
    return state_[id].box ? "through shared memory" : std::string_view();
  }

  /// Staged receives are posted in schedule order as slots free up (stage_more()).
  bool posts_early(schedule::step_id id) const override { return !state_[id].box; }
  const std::byte* arrived_data(schedule::step_id id) override { return staged(id); }

  /// A staged recv_reduce has been reduced: its slot goes to the next one.
  void consumed(schedule::step_id id) override {
    if (state_[id].box) return;
    free_slots_.push_back(state_[id].slot);
    stage_more();
  }

  /// Cancels the receives still posted (a late message must not land in the caller's
  /// buffers), waits briefly for the provider to let go, and tells the others.
  void on_failure(errc code, bool tell_others) override {
    // This call's messages still waiting would only fill the rings.
    const std::uint64_t mine = wire::data_tag(0, sig().sequence, 0) & call_bits;
    each_box([&](local_mailboxes& box) {
      box.discard_if(-1, [&](std::uint64_t tag) { return (tag & call_bits) == mine; });
    });
    for (auto& s : state_) {
      if (!s.request) continue;
      fi_cancel(&ep_->ep()->fid, &s.request->ctx);
      ep_->orphan(s.request);
      s.request = nullptr;
      --in_flight_;
    }
    const auto until = clock::now() + std::chrono::milliseconds(200);
    while (ep_->orphans() && clock::now() < until)
      if (!ep_->progress()) std::this_thread::yield();
    give_back_memory();
    if (tell_others) ep_->announce_failure(sig().sequence, code, message());
  }

  // ---- shared-memory mailboxes (messages between ranks on this host) -----------------

  /// The mailbox a message of `st` moves through, or null for the provider: small
  /// messages by the small rings, chunks up to a bulk slot by the bulk rings. Both ends
  /// decide alike: same bytes, same host, the same settings on every rank.
  local_mailboxes* box_for(const schedule::step& st) const {
    for (local_mailboxes* box : {small_, bulk_})
      if (box && st.bytes() <= box->payload_bytes() && box->reaches(st.peer)) return box;
    return nullptr;
  }

  posted poll_later(schedule::step_id id) {
    state_[id].polling = true;
    polls_.push_back(id);
    return posted::started;
  }

  /// Takes what arrived for the receives whose dependencies are done: once a round for
  /// each mailbox and peer, the earliest message any of them wants, as long as there are
  /// such. A message is read where it lies, and checked before it touches the caller's
  /// buffers.
  bool poll_mailboxes() {
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

  /// Takes one message from `peer` in `box` that a polled receive wants; false if none.
  bool take_arrived(local_mailboxes& box, int peer) {
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
    if (m->data != packed_ || m->bytes != st.dst.bytes) [[unlikely]] {
      reject(box, peer, id, *m);
      return true;
    }
    arrive(id, m->payload);  // the step is ready: read where it lies
    box.take(peer);
    return true;
  }

  /// A message of another call, or of another length, for receive `id`: the call fails.
  /// Out of line: the polling loop stays small.
  [[gnu::cold, gnu::noinline]] void reject(local_mailboxes& box, int peer, schedule::step_id id,
                                           const local_mailboxes::message& m) {
    const std::string why = m.data != packed_
                                ? "rank " + std::to_string(peer) + " runs " +
                                      to_string(wire::unpack(m.data, sig().sequence)) + " but this rank runs " +
                                      to_string(sig())
                                : "rank " + std::to_string(peer) + " sent " + std::to_string(m.bytes) +
                                      " bytes where " + std::to_string(step_at(id).dst.bytes) + " were expected (" +
                                      to_string(sig()) + ")";
    box.take(peer);
    fail(errc::mismatch, describe(context(id), why));
  }

  /// A call that makes no progress may wait on a message queued behind others in a full
  /// ring (its peer blocked sending into the ring this rank does not read yet): set
  /// everything that arrived aside, so every ring has room again.
  void unblock_rings() {
    each_box([](local_mailboxes& box) { box.discard_if(-1, [](std::uint64_t) { return false; }); });
  }

  /// Calls `f` with each mailbox this endpoint has.
  template <class F>
  void each_box(F f) {
    for (local_mailboxes* box : {small_, bulk_})
      if (box) f(*box);
  }

  // ---- one-sided steps -------------------------------------------------------------

  /// The call's output and scratch live in this rank's half of the window, output first:
  /// a writer finds any region of its target from its own schedule, since every rank's
  /// output has the same size.
  void use_window() {
    const std::size_t need = scratch_offset() + plan().scratch_bytes;
    if (ep_->window_half_bytes() < need)
      throw error(errc::invalid_argument,
                  "transport::fabric: a one-sided call needs " + std::to_string(need) +
                      " bytes of RMA window but each half has " + std::to_string(ep_->window_half_bytes()) +
                      " (MIMATRIX_WINDOW_BYTES); lower the schedule (schedule::lower_one_sided) or enlarge the window");
    half_ = ep_->begin_one_sided(this);
    mem_.output = ep_->window().half(half_);
    mem_.scratch = mem_.output + scratch_offset();
    digest_ = wire::digest(packed_);
  }

  std::size_t scratch_offset() const { return (plan().desc.output_bytes() + 63) / 64 * 64; }

  /// A write (or a notify: a write of nothing) into the peer's window, raising its flag.
  posted post_write(schedule::step_id id) {
    const schedule::step& st = step_at(id);
    const std::size_t bytes = st.kind == kind::write ? st.src.bytes : 0;
    const std::size_t offset = st.kind == kind::write ? (st.dst.where == schedule::buffer::scratch ? scratch_offset() : 0) + st.dst.offset : 0;
    const std::byte* src = bytes ? mem_.read(st.src) : nullptr;
    posted_op* r = ep_->acquire(this, id);
    const window_announcement& target = ep_->peer_window(st.peer);
    const ssize_t ret = fi_writedata(ep_->ep(), src, bytes,
                                     bytes ? ep_->registrations().descriptor(src, bytes) : nullptr,
                                     wire::flag_data(plan().rank, sig().sequence, st.tag, digest_), ep_->address(st.peer),
                                     rma_window::remote_address(target, half_, offset), target.key, &r->ctx);
    return posted_as(id, r, "fi_writedata", ret);
  }

  /// Counts the flags peers raised for this call; a flag from another call's signature
  /// means the writer runs another call (its data landed only in this rank's window).
  bool take_flags() {
    bool changed = false;
    std::string odd;
    ep_->take_flags(static_cast<std::uint32_t>(sig().sequence) & wire::sequence_mask, [&](const wire::flag& f) {
      changed = true;
      if (f.digest != digest_) {
        if (odd.empty())
          odd = "rank " + std::to_string(f.writer) + " wrote to this rank for a call other than " + to_string(sig());
        return;
      }
      if (odd.empty()) raise_flag(f.tag, f.writer);
    });
    if (!odd.empty()) fail(errc::mismatch, describe(stuck_context(), odd));
    return changed;
  }

  /// A post the provider refused. Providers name a dead peer's connection in their own
  /// words (rxm: -FI_EOTHER), so unless the code says so, a liveness probe decides.
  void fail_post(schedule::step_id id, const char* call, ssize_t ret) {
    const int peer = step_at(id).peer;
    const std::string what = explain_fabric_call(call, ret, ep_->provider());
    if (is_peer_loss(static_cast<int>(ret)))
      return fail(errc::peer_lost, describe(context(id), "rank " + std::to_string(peer) + " is unreachable (" + what + ")"));
    const std::vector<int> silent = ep_->silent_peers(probe_grace(timeout()));
    if (std::find(silent.begin(), silent.end(), peer) != silent.end())
      return fail(errc::peer_lost, describe(context(id), "rank " + std::to_string(peer) +
                                                             " is unreachable: it did not answer a liveness probe after " +
                                                             what));
    fail(errc::transport, describe(context(id), what));
  }

  // ---- completions (called from the endpoint's progress) ------------------------------

  void on_complete(posted_op& r, const fi_cq_tagged_entry& e) override {
    const schedule::step_id id = r.step;
    state_[id].request = nullptr;
    --in_flight_;
    ep_->release(&r);
    const schedule::step& st = step_at(id);
    if (st.kind == kind::recv) --posted_receives_;
    if (st.kind == kind::send || schedule::is_one_sided(st.kind)) return complete(id);
    if ((e.flags & FI_REMOTE_CQ_DATA) && e.data != packed_)
      return fail(errc::mismatch, describe(context(id), "rank " + std::to_string(st.peer) + " runs " +
                                                            to_string(wire::unpack(e.data, sig().sequence)) +
                                                            " but this rank runs " + to_string(sig())));
    if (e.len != st.dst.bytes)
      return fail(errc::mismatch, describe(context(id), "rank " + std::to_string(st.peer) + " sent " +
                                                            std::to_string(e.len) + " bytes where " +
                                                            std::to_string(st.dst.bytes) + " were expected (" +
                                                            to_string(sig()) + ")"));
    if (st.kind == kind::recv) return complete(id);
    arrive(id, staged(id));
  }

  void on_error(posted_op& r, const fi_cq_err_entry& e) override {
    const schedule::step_id id = r.step;
    state_[id].request = nullptr;
    --in_flight_;
    ep_->release(&r);
    const schedule::step& st = step_at(id);
    if (st.kind == kind::recv) --posted_receives_;
    const int code = e.err < 0 ? -e.err : e.err;  // providers differ in the sign
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
    if (code == FI_ECANCELED || code == FI_EIO || is_peer_loss(code))
      return fail(errc::peer_lost,
                  describe(context(id), "rank " + std::to_string(st.peer) + " is unreachable (" + what + ")"));
    fail(errc::transport, describe(context(id), what));
  }

  // ---- staging ------------------------------------------------------------------------

  std::byte* staged(schedule::step_id id) { return staging_ + state_[id].slot * slot_bytes_; }

  /// Gives free staging slots to the next recv_reduce steps, in schedule order, and posts
  /// their receives. In order, the earliest unfinished one always has a slot.
  void stage_more() {
    while (!free_slots_.empty() && next_reduce_ < reduces_.size() && !finished()) {
      const schedule::step_id id = reduces_[next_reduce_++];
      state_[id].slot = free_slots_.back();
      free_slots_.pop_back();
      post_early(id);
    }
  }

  // ---- memory -------------------------------------------------------------------------

  /// Providers that need registered memory get each buffer whole, once: the chunks then
  /// find it in the cache instead of registering pages one chunk at a time.
  void register_whole_buffers() {
    registration_cache& mr = ep_->registrations();
    if (!mr.required()) return;
    mr.descriptor(mem_.input, plan().desc.input_bytes());
    mr.descriptor(mem_.output, plan().desc.output_bytes());
    mr.descriptor(mem_.scratch, plan().scratch_bytes);
    mr.descriptor(staging_, slot_bytes_ * free_slots_.size());
  }

  /// Returns the call's memory to the endpoint; the call touches none of it afterwards.
  void give_back_memory() {
    if (!ws_) return;
    if (one_sided_) ep_->end_one_sided(this);
    if (ep_->orphans())
      ep_->retire_workspace(std::move(ws_));
    else
      ep_->give_workspace(std::move(ws_));
  }

  std::shared_ptr<endpoint> ep_;
  std::uint64_t packed_;
  std::unique_ptr<workspace> ws_;
  std::byte* user_output_;
  bool one_sided_ = false;    // runs writes and waits over the RMA window
  std::size_t half_ = 0;      // the window half this call uses
  std::uint32_t digest_ = 0;  // of the signature, as flags carry it
  std::byte* staging_ = nullptr;
  // The workspace's parts, by name (valid until give_back_memory()).
  std::vector<step_state>& state_ = ws_->state;
  std::vector<schedule::step_id>& reduces_ = ws_->reduces;  // the recv_reduce steps, in schedule order
  std::vector<std::size_t>& free_slots_ = ws_->free_slots;
  std::vector<schedule::step_id>& polls_ = ws_->polls;
  std::vector<std::uint32_t>& looked_ = ws_->looked;  // per peer and mailbox: the poll round it was last read in
  std::uint32_t poll_round_ = 0;
  local_mailboxes* small_ = ep_->mailboxes();     // messages up to 512 bytes, to ranks on this host
  local_mailboxes* bulk_ = ep_->bulk_mailboxes();  // chunks up to a bulk slot, to ranks on this host
  /// The sequence bits of a data tag.
  static constexpr std::uint64_t call_bits = wire::data_tag(0, wire::sequence_mask, 0);
  std::size_t next_reduce_ = 0;  // the first of reduces_ without a slot
  std::size_t slot_bytes_ = 0;
  std::size_t in_flight_ = 0;        // this call's posted libfabric operations
  std::size_t posted_receives_ = 0;  // of them, receives of recv steps
  /// recv steps posted to the provider at once, in the order they became ready. Providers
  /// bound their posted receives (rxm over tcp: a few thousand); a later phase's receives,
  /// ready early, must not take the room that this phase's recv_reduce receives need.
  static constexpr std::size_t max_posted_receives = 256;
  std::uint32_t rounds_ = 0;
  /// Rounds without progress (about 20 ms in wait()) after which a call sets aside what
  /// its rings hold (unblock_rings).
  static constexpr int stalled_rounds = 20000;
};

}  // namespace mimatrix::transport::detail::fabric

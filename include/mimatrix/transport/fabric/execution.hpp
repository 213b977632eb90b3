// One rank's execution of one schedule over libfabric: a dependency-driven state machine
// that posts every ready message at once, receives each recv_reduce into a staging block
// as early as the call starts (so data flows while earlier steps still reduce), treats
// -FI_EAGAIN as back-pressure, and ends every wait at the call's deadline. One-sided
// steps run as RMA writes into the peers' windows (window.hpp): the call's output and
// scratch then live in this rank's window, and the output is copied out at the end.
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
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/wire.hpp"
#include "mimatrix/transport/host_steps.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::transport::detail {

class fabric_execution final : public execution, private fabric_call {
  using clock = std::chrono::steady_clock;
  using kind = schedule::step_kind;

 public:
  fabric_execution(std::shared_ptr<fabric_endpoint> endpoint, std::shared_ptr<const schedule::schedule> plan,
                   const std::byte* input, std::byte* output, const signature& sig,
                   const reduce::host_kernels& kernels, std::chrono::milliseconds timeout)
      : execution(endpoint->engine()),
        ep_(std::move(endpoint)),
        plan_(std::move(plan)),
        sig_(sig),
        packed_(wire::pack(sig)),
        kernels_(kernels),
        timeout_(timeout),
        ws_(ep_->take_workspace()),
        mem_{input, output, nullptr},
        user_output_(output) {
    const auto& steps = plan_->steps;
    const std::size_t n = steps.size();
    pending_.resize(n);
    state_.assign(n, fabric_step_state{});
    looked_.assign(2 * std::size_t(plan_->desc.size), 0);
    std::size_t slot_bytes = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const schedule::step& st = steps[i];
      pending_[i] = static_cast<std::uint32_t>(plan_->deps(static_cast<schedule::step_id>(i)).size());
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
      const auto now = static_cast<std::uint32_t>(sig_.sequence) & wire::sequence_mask;
      each_box([&](local_mailboxes& box) {
        box.discard_if(-1, [&](std::uint64_t tag) {
          return wire::earlier(static_cast<std::uint32_t>((tag & call_bits) >> wire::tag_bits), now);
        });
      });
    }
    if (one_sided_)
      use_window();
    else
      mem_.scratch = ws_->scratch.reserve(plan_->scratch_bytes);
    register_whole_buffers();
    if (auto f = ep_->failure(sig_.sequence)) {
      fail_from(*f);
      return;
    }
    // Receives into staging depend on nothing: post as many as there are slots now.
    stage_more();
    for (std::size_t i = 0; i < n; ++i)
      if (pending_[i] == 0) ready_.push_back(static_cast<schedule::step_id>(i));
    advance();
    enter();
  }

  ~fabric_execution() override { leave(); }

  void finish() override {
    std::error_code ignored;
    wait(ignored);
  }

 private:
  /// Idle, the provider's queue is read every round (a mailbox-only call reads it every
  /// 64th when busy): a peer's abort may need a connection set up first, which takes
  /// progress on both sides.
  void idle(int rounds) override {
    if (rounds > 256) (void)ep_->progress();
    if (finished() || (rounds != 1 && (rounds & 63) != 0)) return;
    if (rounds >= stalled_rounds) unblock_rings();
    check_time();
  }

  // Staging for recv_reduce: about fabric_options::staging_bytes, in at least 2 and at
  // most max_staged slots.
  static constexpr std::size_t max_staged = 64;


  const schedule::step& step_at(schedule::step_id id) const { return plan_->steps[id]; }

  /// One round of progress; true if anything changed.
  bool advance() override {
    if (finished()) return false;
    if (auto f = ep_->failure(sig_.sequence)) return fail_from(*f), true;
    // A call whose messages all go through mailboxes needs the provider only for control
    // messages (aborts, liveness probes): reading its queue every round would double the
    // latency of a small call.
    bool changed = in_flight_ || one_sided_ || (++rounds_ & 63) == 0 ? ep_->progress() : false;
    if (finished()) return true;
    if (one_sided_) changed |= take_flags();
    if (!polls_.empty()) changed |= poll_mailboxes();
    if (finished()) return true;
    changed |= post_queued();
    changed |= start_ready();
    if (!finished() && completed_ == plan_->steps.size()) {
      if (one_sided_ && plan_->desc.output_bytes())
        std::memcpy(user_output_, mem_.output, plan_->desc.output_bytes());
      succeed();
      give_back_memory();
      changed = true;
    }
    return changed;
  }

  bool start_ready() {
    if (ready_.empty()) return false;
    // Index loop: completing a local step appends to ready_.
    for (std::size_t k = 0; k < ready_.size() && !finished(); ++k) {
      const schedule::step_id id = ready_[k];
      const schedule::step& st = step_at(id);
      switch (st.kind) {
        case kind::send:
        case kind::recv:
        case kind::write:
        case kind::notify:
          if (!post(id)) to_post_.push_back(id);
          break;
        case kind::recv_reduce:
          state_[id].ready = true;
          if (state_[id].box)
            poll_later(id);
          else if (state_[id].arrived)
            reduce_staged(id);
          break;
        case kind::wait:  // count 0: a join of its dependencies; else flags from peers
          state_[id].ready = true;
          if (st.count == 0 || flags_[st.tag] >= st.count) {
            state_[id].arrived = true;
            complete(id);
          }
          break;
        default:
          run_local_step(kernels_, st, mem_, plan_->desc.size);
          complete(id);
      }
    }
    ready_.clear();
    return true;
  }

  /// Retries every post that met back-pressure, keeping those still refused in order: a
  /// full ring to one peer must not hold back messages to the others (one of which may
  /// be what that peer waits for).
  bool post_queued() {
    std::size_t kept = 0;
    for (std::size_t k = 0; k < to_post_.size(); ++k)
      if (finished() || !post(to_post_[k])) to_post_[kept++] = to_post_[k];
    const bool changed = kept < to_post_.size();
    to_post_.resize(kept);
    return changed;
  }

  /// Posts a send or receive; false on back-pressure (-FI_EAGAIN).
  bool post(schedule::step_id id) {
    const schedule::step& st = step_at(id);
    if (schedule::is_one_sided(st.kind)) return post_write(id);
    if (local_mailboxes* box = state_[id].box) {
      if (st.kind != kind::send) return poll_later(id), true;
      if (!box->try_send(st.peer, wire::data_tag(plan_->rank, sig_.sequence, st.tag), packed_, mem_.read(st.src),
                         st.src.bytes))
        return false;  // the ring is full: back-pressure
      complete(id);
      return true;
    }
    if (st.kind == kind::send && st.src.bytes <= ep_->inject_bytes()) return inject(id);
    fabric_request* r = ep_->acquire(this, id);
    const std::uint64_t tag =
        wire::data_tag(st.kind == kind::send ? plan_->rank : st.peer, sig_.sequence, st.tag);
    ssize_t ret;
    const char* call;
    if (st.kind == kind::send) {
      const std::byte* data = mem_.read(st.src);
      call = "fi_tsenddata";
      ret = fi_tsenddata(ep_->ep(), data, st.src.bytes, ep_->registrations().descriptor(data, st.src.bytes),
                         packed_, ep_->address(st.peer), tag, &r->ctx);
    } else {
      if (st.kind == kind::recv && posted_receives_ >= max_posted_receives) {
        ep_->release(r);
        return false;  // held back by us: the provider's receive queue stays open to recv_reduce
      }
      std::byte* data = st.kind == kind::recv ? mem_.write(st.dst) : staged(id);
      call = "fi_trecv";
      ret = fi_trecv(ep_->ep(), data, st.dst.bytes, ep_->registrations().descriptor(data, st.dst.bytes),
                     ep_->address(st.peer), tag, 0, &r->ctx);
    }
    if (ret == -FI_EAGAIN) {
      ep_->release(r);
      return false;
    }
    if (ret != 0) {
      ep_->release(r);
      fail_post(id, call, ret);
      return true;
    }
    state_[id].request = r;
    ++in_flight_;
    if (st.kind == kind::recv) ++posted_receives_;
    return true;
  }

  /// A small send: the provider copies it before returning, so the step is done at once.
  bool inject(schedule::step_id id) {
    const schedule::step& st = step_at(id);
    const ssize_t ret = fi_tinjectdata(ep_->ep(), mem_.read(st.src), st.src.bytes, packed_, ep_->address(st.peer),
                                       wire::data_tag(plan_->rank, sig_.sequence, st.tag));
    if (ret == -FI_EAGAIN) return false;
    if (ret != 0) {
      fail_post(id, "fi_tinjectdata", ret);
      return true;
    }
    complete(id);
    return true;
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

  void poll_later(schedule::step_id id) {
    state_[id].polling = true;
    polls_.push_back(id);
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
        if (st.peer == peer && state_[polls_[j]].box == &box && wire::data_tag(peer, sig_.sequence, st.tag) == tag) {
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
    if (m->data != packed_ || m->bytes != st.dst.bytes) {
      const std::string why = m->data != packed_
                                  ? "rank " + std::to_string(peer) + " runs " +
                                        to_string(wire::unpack(m->data, sig_.sequence)) + " but this rank runs " +
                                        to_string(sig_)
                                  : "rank " + std::to_string(peer) + " sent " + std::to_string(m->bytes) +
                                        " bytes where " + std::to_string(st.dst.bytes) + " were expected (" +
                                        to_string(sig_) + ")";
      box.take(peer);
      fail(errc::mismatch, describe(context(id), why));
      return true;
    }
    if (st.kind == kind::recv_reduce)
      kernels_.combine(mem_.write(st.dst), mem_.read(st.src), m->payload, st.dst.bytes);
    else if (st.dst.bytes)
      std::memcpy(mem_.write(st.dst), m->payload, st.dst.bytes);
    box.take(peer);
    state_[id].arrived = true;
    complete(id);
    return true;
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
    const std::size_t need = scratch_offset() + plan_->scratch_bytes;
    if (ep_->window_half_bytes() < need)
      throw error(errc::invalid_argument,
                  "transport::fabric: a one-sided call needs " + std::to_string(need) +
                      " bytes of RMA window but each half has " + std::to_string(ep_->window_half_bytes()) +
                      " (MIMATRIX_WINDOW_BYTES); lower the schedule (schedule::lower_one_sided) or enlarge the window");
    flags_.assign(wire::max_flag_tag + 1, 0);
    half_ = ep_->begin_one_sided(this);
    mem_.output = ep_->window().half(half_);
    mem_.scratch = mem_.output + scratch_offset();
    digest_ = wire::digest(packed_);
  }

  std::size_t scratch_offset() const { return (plan_->desc.output_bytes() + 63) / 64 * 64; }

  /// A write (or a notify: a write of nothing) into the peer's window, raising its flag.
  bool post_write(schedule::step_id id) {
    const schedule::step& st = step_at(id);
    const std::size_t bytes = st.kind == kind::write ? st.src.bytes : 0;
    const std::size_t offset = st.kind == kind::write ? (st.dst.where == schedule::buffer::scratch ? scratch_offset() : 0) + st.dst.offset : 0;
    const std::byte* src = bytes ? mem_.read(st.src) : nullptr;
    fabric_request* r = ep_->acquire(this, id);
    const window_announcement& target = ep_->peer_window(st.peer);
    const ssize_t ret = fi_writedata(ep_->ep(), src, bytes,
                                     bytes ? ep_->registrations().descriptor(src, bytes) : nullptr,
                                     wire::flag_data(plan_->rank, sig_.sequence, st.tag, digest_), ep_->address(st.peer),
                                     rma_window::remote_address(target, half_, offset), target.key, &r->ctx);
    if (ret == -FI_EAGAIN) {
      ep_->release(r);
      return false;
    }
    if (ret != 0) {
      ep_->release(r);
      fail_post(id, "fi_writedata", ret);
      return true;
    }
    state_[id].request = r;
    ++in_flight_;
    return true;
  }

  /// Counts the flags peers raised for this call; a flag from another call's signature
  /// means the writer runs another call (its data landed only in this rank's window).
  bool take_flags() {
    bool changed = false;
    std::string odd;
    ep_->take_flags(static_cast<std::uint32_t>(sig_.sequence) & wire::sequence_mask, [&](const wire::flag& f) {
      changed = true;
      if (f.digest != digest_) {
        if (odd.empty()) odd = "rank " + std::to_string(f.writer) + " wrote to this rank for a call other than " + to_string(sig_);
        return;
      }
      ++flags_[f.tag];
    });
    if (!odd.empty()) {
      fail(errc::mismatch, describe(stuck_context(), odd));
      return true;
    }
    if (changed)
      for (std::size_t i = 0; i < state_.size(); ++i) {
        const schedule::step& st = plan_->steps[i];
        if (st.kind == kind::wait && st.count > 0 && state_[i].ready && !state_[i].arrived && flags_[st.tag] >= st.count) {
          state_[i].arrived = true;
          complete(static_cast<schedule::step_id>(i));
        }
      }
    return changed;
  }

  /// A post the provider refused. Providers name a dead peer's connection in their own
  /// words (rxm: -FI_EOTHER), so unless the code says so, a liveness probe decides.
  void fail_post(schedule::step_id id, const char* call, ssize_t ret) {
    const int peer = step_at(id).peer;
    const std::string what = explain_fabric_call(call, ret, ep_->provider());
    if (is_peer_loss(static_cast<int>(ret)))
      return fail(errc::peer_lost, describe(context(id), "rank " + std::to_string(peer) + " is unreachable (" + what + ")"));
    const std::vector<int> silent = ep_->silent_peers(probe_grace(timeout_));
    if (std::find(silent.begin(), silent.end(), peer) != silent.end())
      return fail(errc::peer_lost, describe(context(id), "rank " + std::to_string(peer) +
                                                             " is unreachable: it did not answer a liveness probe after " +
                                                             what));
    fail(errc::transport, describe(context(id), what));
  }

  // ---- completions (called from the endpoint's progress) ------------------------------

  void on_complete(fabric_request& r, const fi_cq_tagged_entry& e) override {
    const schedule::step_id id = r.step;
    state_[id].request = nullptr;
    --in_flight_;
    ep_->release(&r);
    const schedule::step& st = step_at(id);
    if (st.kind == kind::recv) --posted_receives_;
    if (st.kind == kind::send || schedule::is_one_sided(st.kind)) return complete(id);
    if ((e.flags & FI_REMOTE_CQ_DATA) && e.data != packed_)
      return fail(errc::mismatch, describe(context(id), "rank " + std::to_string(st.peer) + " runs " +
                                                            to_string(wire::unpack(e.data, sig_.sequence)) +
                                                            " but this rank runs " + to_string(sig_)));
    if (e.len != st.dst.bytes)
      return fail(errc::mismatch, describe(context(id), "rank " + std::to_string(st.peer) + " sent " +
                                                            std::to_string(e.len) + " bytes where " +
                                                            std::to_string(st.dst.bytes) + " were expected (" +
                                                            to_string(sig_) + ")"));
    if (st.kind == kind::recv) return complete(id);
    state_[id].arrived = true;
    if (state_[id].ready) reduce_staged(id);
  }

  void on_error(fabric_request& r, const fi_cq_err_entry& e) override {
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
                                            to_string(sig_) + ")"));
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

  std::byte* staged(schedule::step_id id) { return staging_ + state_[id].slot * slot_bytes_; }

  /// Gives free staging slots to the next recv_reduce steps, in schedule order, and
  /// queues their receives. In order, the earliest unfinished one always has a slot.
  void stage_more() {
    while (!free_slots_.empty() && next_reduce_ < reduces_.size()) {
      const schedule::step_id id = reduces_[next_reduce_++];
      state_[id].slot = free_slots_.back();
      free_slots_.pop_back();
      to_post_.push_back(id);
    }
  }

  void reduce_staged(schedule::step_id id) {
    const schedule::step& st = step_at(id);
    kernels_.combine(mem_.write(st.dst), mem_.read(st.src), staged(id), st.dst.bytes);
    free_slots_.push_back(state_[id].slot);
    stage_more();
    complete(id);
  }

  void complete(schedule::step_id id) {
    ++completed_;
    schedule::release_successors(*plan_, id, pending_, ready_);
  }

  // ---- deadlines and failures ---------------------------------------------------------

  /// The deadline counts from the call's first wait, not its start: on this kind of VM a
  /// clock read costs a tenth of a small call, which most often never waits.
  void check_time() {
    const auto now = clock::now();
    if (!clock_started_) {
      clock_started_ = true;
      deadline_ = now + timeout_;
      // Probe peers' liveness a little before the deadline, so a lost rank is named
      // within it.
      probe_at_ = deadline_ - 2 * probe_grace(timeout_);
    }
    if (!probed_ && now >= probe_at_) {
      probed_ = true;
      const std::vector<int> silent = ep_->silent_peers(probe_grace(timeout_));
      while (advance()) {  // the probe progressed the endpoint: the call may be done
      }
      if (finished()) return;
      if (!silent.empty()) {
        std::string who;
        for (int r : silent) who += (who.empty() ? "" : ", ") + std::to_string(r);
        return fail(errc::peer_lost,
                    describe(stuck_context(), "rank(s) " + who + " did not answer a liveness probe (exited, killed, "
                                                                 "or stuck outside mimatrix) while " + stuck_reason()));
      }
    }
    if (clock::now() >= deadline_)
      fail(errc::timeout, describe(stuck_context(), "timed out after " + std::to_string(timeout_.count()) +
                                                        " ms " + stuck_reason()));
  }

  /// How long a liveness probe waits for answers: an eighth of the call's timeout,
  /// between 50 ms and 1 s.
  static std::chrono::milliseconds probe_grace(std::chrono::milliseconds timeout) {
    return std::clamp(timeout / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  }

  std::string stuck_reason() const {
    std::string s = waiting_for();
    std::size_t receives = 0;
    for (schedule::step_id id : to_post_) receives += step_at(id).kind == kind::send ? 0 : 1;
    if (!to_post_.empty())
      s += "; " + std::to_string(to_post_.size()) + " post(s) held back (by the provider's -FI_EAGAIN, or receives over the cap of " +
           std::to_string(max_posted_receives) + "; " +
           std::to_string(receives) + " of them receives), first step " +
           std::to_string(to_post_.front()) + " to rank " + std::to_string(step_at(to_post_.front()).peer);
    return s;
  }

  std::string waiting_for() const {
    for (std::size_t i = 0; i < state_.size(); ++i) {
      const schedule::step& st = plan_->steps[i];
      if (st.kind == kind::wait && st.count > 0 && !state_[i].arrived)
        return "waiting for one-sided writes (flag " + std::to_string(st.tag) + "): " + std::to_string(flags_[st.tag]) +
               " of " + std::to_string(st.count) + " arrived";
      if (st.kind == kind::recv_reduce && !state_[i].arrived)
        return "waiting for data from rank " + std::to_string(st.peer) + " (recv_reduce, tag " +
               std::to_string(st.tag) + ")";
      if (state_[i].polling)
        return "waiting for data from rank " + std::to_string(st.peer) + " (" + std::string(schedule::to_string(st.kind)) +
               " through shared memory, tag " + std::to_string(st.tag) + ")";
      if (st.kind == kind::recv && state_[i].request)
        return "waiting for data from rank " + std::to_string(st.peer) + " (recv, tag " + std::to_string(st.tag) + ")";
    }
    for (std::size_t i = 0; i < state_.size(); ++i)
      if (state_[i].request)
        return "waiting for rank " + std::to_string(plan_->steps[i].peer) + " to take a send (tag " +
               std::to_string(plan_->steps[i].tag) + ")";
    return "with " + std::to_string(plan_->steps.size() - completed_) + " steps left";
  }

  error_context stuck_context() const {
    for (std::size_t i = 0; i < state_.size(); ++i)
      if (state_[i].request) return context(static_cast<schedule::step_id>(i));
    return {plan_->rank, -1, schedule::to_string(sig_.kind), static_cast<std::int64_t>(sig_.sequence)};
  }

  error_context context(schedule::step_id id) const {
    const schedule::step& st = step_at(id);
    return {plan_->rank, st.peer, schedule::to_string(sig_.kind), static_cast<std::int64_t>(sig_.sequence),
            static_cast<std::int64_t>(id), static_cast<std::int64_t>(st.bytes())};
  }

  void fail_from(const fabric_failure& f) {
    end(f.code, "rank " + std::to_string(plan_->rank) + ": " + to_string(sig_) + " failed on another rank: " +
                    f.message);
  }

  /// Fails this rank's call and tells every other rank.
  void fail(errc code, std::string message) {
    if (finished()) return;
    end(code, message);
    ep_->announce_failure(sig_.sequence, code, this->message());
  }

  /// Ends the call with an error: cancels the receives still posted (a late message must
  /// not land in the caller's buffers) and waits briefly for the provider to let go.
  void end(errc code, std::string message) {
    end_with(code, std::move(message));
    // This call's messages still waiting would only fill the rings.
    const std::uint64_t mine = wire::data_tag(0, sig_.sequence, 0) & call_bits;
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
  }

  /// Providers that need registered memory get each buffer whole, once: the chunks then
  /// find it in the cache instead of registering pages one chunk at a time.
  void register_whole_buffers() {
    registration_cache& mr = ep_->registrations();
    if (!mr.required()) return;
    mr.descriptor(mem_.input, plan_->desc.input_bytes());
    mr.descriptor(mem_.output, plan_->desc.output_bytes());
    mr.descriptor(mem_.scratch, plan_->scratch_bytes);
    mr.descriptor(staging_, slot_bytes_ * free_slots_.size());
  }

  /// Returns the call's memory to the endpoint; the call touches none of it afterwards.
  void give_back_memory() {
    if (one_sided_) ep_->end_one_sided(this);
    if (ep_->orphans())
      ep_->retire_workspace(std::move(ws_));
    else
      ep_->give_workspace(std::move(ws_));
  }

  std::shared_ptr<fabric_endpoint> ep_;
  std::shared_ptr<const schedule::schedule> plan_;
  signature sig_;
  std::uint64_t packed_;
  const reduce::host_kernels& kernels_;
  std::chrono::milliseconds timeout_;
  clock::time_point deadline_, probe_at_;
  std::unique_ptr<fabric_workspace> ws_;
  host_buffers mem_;
  std::byte* user_output_;
  bool one_sided_ = false;  // runs writes and waits over the RMA window
  std::size_t half_ = 0;      // the window half this call uses
  std::uint32_t digest_ = 0;  // of the signature, as flags carry it
  std::byte* staging_ = nullptr;
  // The workspace's parts, by name (valid until give_back_memory()).
  std::vector<std::uint32_t>& pending_ = ws_->pending;
  std::vector<fabric_step_state>& state_ = ws_->state;
  std::vector<schedule::step_id>& ready_ = ws_->ready;
  std::vector<schedule::step_id>& to_post_ = ws_->to_post;
  std::vector<schedule::step_id>& reduces_ = ws_->reduces;  // the recv_reduce steps, in schedule order
  std::vector<std::size_t>& free_slots_ = ws_->free_slots;
  std::vector<std::uint32_t>& flags_ = ws_->flags;  // arrived flags of this call, by tag
  std::vector<schedule::step_id>& polls_ = ws_->polls;
  std::vector<std::uint32_t>& looked_ = ws_->looked;  // per peer and mailbox: the poll round it was last read in
  std::uint32_t poll_round_ = 0;
  local_mailboxes* small_ = ep_->mailboxes();     // messages up to 512 bytes, to ranks on this host
  local_mailboxes* bulk_ = ep_->bulk_mailboxes();  // chunks up to a bulk slot, to ranks on this host
  /// The sequence bits of a data tag.
  static constexpr std::uint64_t call_bits = wire::data_tag(0, wire::sequence_mask, 0);
  std::size_t next_reduce_ = 0;  // the first of reduces_ without a slot
  std::size_t slot_bytes_ = 0;
  std::size_t completed_ = 0;
  std::size_t in_flight_ = 0;  // this call's posted libfabric operations
  std::size_t posted_receives_ = 0;  // of them, receives of recv steps
  /// recv steps posted to the provider at once, in the order they became ready. Providers
  /// bound their posted receives (rxm over tcp: a few thousand); a later phase's receives,
  /// ready early, must not take the room that this phase's recv_reduce receives need.
  static constexpr std::size_t max_posted_receives = 256;
  std::uint32_t rounds_ = 0;
  /// Rounds without progress (about 20 ms in wait()) after which a call sets aside what
  /// its rings hold (unblock_rings).
  static constexpr int stalled_rounds = 20000;
  bool probed_ = false;
  bool clock_started_ = false;
};

}  // namespace mimatrix::transport::detail

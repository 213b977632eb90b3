// One rank's execution of one schedule over libfabric: the port of the step executor
// (step_executor.hpp). Messages go as tagged sends (small ones injected), through
// shared-memory mailboxes between ranks on one host, or as RMA writes into the peers'
// windows (window.hpp) for one-sided steps: the call's output and scratch then live in
// this rank's window, and the output is copied out at the end. Each recv_reduce is
// received into a staging slot as early as the call starts, so data flows while earlier
// steps still reduce; -FI_EAGAIN is back-pressure.
// This file declares the class, with its set-up and the executor's hooks; the paths are
// defined by idea in execution_messages.hpp (tagged messages and staging),
// execution_rings.hpp (mailboxes and bulk rings), execution_one_sided.hpp (RMA writes
// and flags), execution_shared.hpp (device memory read by peers on this host),
// execution_device_memory.hpp (device memory the provider moves: FI_HMEM) and
// execution_direct.hpp (GDRAA's collectives on peers' device memory), included at the end.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/device/rank_streams.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/fabric/call.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"
#include "mimatrix/transport/fabric/wire.hpp"
#include "mimatrix/transport/direct_collective.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport::detail::fabric {

class execution final : public step_executor, private call {
  using kind = schedule::step_kind;

 public:
  execution(std::shared_ptr<endpoint> endpoint, std::shared_ptr<const schedule::schedule> plan, const std::byte* input,
            std::byte* output, const signature& sig, const reduce::host_kernels& kernels,
            std::chrono::milliseconds timeout, const device::stream* caller = nullptr,
            device::rank_streams* resources = nullptr)
      : step_executor(endpoint->engine(), std::move(plan), sig, kernels, timeout, endpoint->take_bookkeeping()),
        ep_(std::move(endpoint)),
        packed_(wire::pack(sig, this->plan().algorithm, this->plan().agreement)),
        ws_(ep_->take_workspace()),
        user_output_(output) {
    // A call unmade by an exception (bad input, or a rank's pool short of device memory:
    // rank_streams::made_outside, which makes it again) gives its workspace back, or the
    // endpoint would count it in flight for ever, and its bookkeeping, for the next try.
    // Device work it queued is let go of once the engine's lock is released.
    struct unmade_guard {
      execution& call;
      device::rank_streams* resources;
      bool made = false;
      ~unmade_guard() {
        if (made) return;
        if (resources) resources->let_go_later(call.take_device_work());
        call.give_back_memory();
        call.ep_->give_bookkeeping(call.release_bookkeeping());
      }
    } unmade{*this, resources};
    mem_ = {input, output, nullptr};
    ep_->runs(sig, packed_, this->plan());
    ep_->allow(timeout);
    share_fate(ep_->fate());
    shared_ = caller && shares_device_memory(*caller->device);
    if (caller && !shared_ && writes_peers_directly(*ep_, this->plan(), *caller->device)) direct_.emplace(this->plan());
    const auto& steps = this->plan().steps;
    const std::size_t n = steps.size();
    state_.assign(n, step_state{});
    receives_.clear();
    looked_.assign(2 * std::size_t(this->plan().desc.size), 0);
    std::size_t slot_bytes = 0;
    bool any_box = false;
    for (std::size_t i = 0; i < n; ++i) {
      const schedule::step& st = steps[i];
      if (schedule::is_one_sided(st.kind) || (st.kind == kind::wait && st.count > 0)) {
        one_sided_ = !direct_;  // direct: its writes and waits are synchronizations (execution_direct.hpp)
        if (st.tag > wire::max_flag_tag)
          throw error(errc::invalid_argument, "transport::fabric: flag tag " + std::to_string(st.tag) +
                                                  " exceeds the " + std::to_string(wire::flag_tag_bits) +
                                                  " bits a write's CQ data carries");
      }
      if (schedule::is_communication(st.kind) && st.tag > wire::max_tag)
        throw error(errc::invalid_argument, "transport::fabric: schedule tag " + std::to_string(st.tag) +
                                                " exceeds the " + std::to_string(wire::tag_bits) + " bits a tag carries");
      if (schedule::is_communication(st.kind) && (state_[i].box = shared_ ? small_ : box_for(st))) {
        any_box = true;
        continue;
      }
      if (st.kind == kind::recv) state_[i].position = receives_.add(static_cast<std::uint32_t>(i));
      if (st.kind == kind::recv_reduce) {
        reduces_.push_back(static_cast<schedule::step_id>(i));
        slot_bytes = std::max(slot_bytes, (st.dst.bytes + 63) / 64 * 64);
      }
    }
    hmem_ = caller && !shared_ && !direct_ && !one_sided_ && !any_box && ep_->moves_device_memory() &&
            caller->device->network().iface != device::network_memory::interface::none;
    if (hmem_) {
      port_memory_ = caller->device->network();
      slot_bytes = stage_every_receive();
    } else if (shared_) {  // device buffers that peers read directly
      run_on_device(*caller, *resources);
    } else if (direct_) {  // a GDRAA collective straight on the peers' device memory
      run_on_device(*caller, *resources, 0, /*with_scratch=*/false);
      run_directly(*direct_);
      direct_taken_.assign(std::size_t(this->plan().desc.size), 0);
    } else if (caller) {  // device buffers the provider cannot move: the call runs on host copies
      // A one-sided call's output is in the window until conclude() copies it out whole.
      stage_through_host(*caller, *resources, input, output, !one_sided_);
      user_output_ = mem_.output;
    }
    // Staging is a few slots reused in schedule order, not one block a step: data then
    // arrives in memory the reduction reads while it is still in cache.
    const std::size_t slots =
        std::clamp<std::size_t>(ep_->staging_bytes() / std::max<std::size_t>(slot_bytes, 1), 2, max_staged);
    slot_bytes_ = slot_bytes;
    const std::size_t staged_bytes = std::min(slots, reduces_.size()) * slot_bytes;
    if (hmem_) {  // device memory behind the call's scratch
      run_on_device(*caller, *resources, staged_bytes);
      staging_ = staged_bytes ? mem_.scratch + scratch_end() : nullptr;
    } else {
      staging_ = ws_->staging.reserve(staged_bytes);
    }
    for (std::size_t k = std::min(slots, reduces_.size()); k > 0; --k) free_slots_.push_back(k - 1);
    if (ep_->any_failure()) discard_late_messages();
    if (one_sided_)
      use_window();
    else if (!shared_ && !hmem_ && !direct_)
      mem_.scratch = ws_->scratch.reserve(this->plan().scratch_bytes);
    if (!shared_ && !direct_) register_whole_buffers();
    if (const fabric::failure* d = ep_->disabled())
      fail(d->code, "rank " + std::to_string(this->plan().rank) + ": " + to_string(sig) + " cannot run: " + d->message,
           d->message);
    else if (const fabric::failure* a = ep_->aborted())
      abandon(a->code, "rank " + std::to_string(this->plan().rank) + ": " + to_string(sig) + " cannot run: " + a->message,
              a->message);
    else if (auto f = ep_->failure(sig.sequence))
      fail_from(f->code, f->message);
    else if ((shared_ || direct_) && !export_buffers(*caller->device)) {
      // failed, saying why
    } else if (hmem_ && !register_device_buffers()) {
      // failed, saying why
    } else
      stage_more();  // receives into staging depend on nothing: post as many as there are slots now
    unmade.made = true;
    start();
  }

  ~execution() override {
    leave();
    const auto lock = ep_->engine().lock();  // calls made on other threads take from the pool
    ep_->give_bookkeeping(release_bookkeeping());
  }

  void finish() override {
    std::error_code ignored;
    wait(ignored);
  }

  /// The mailbox message of GDRAA's sync 1 on device memory: where the owner's part lies
  /// in the sender's input and output (writes_peers_directly).
  static constexpr std::size_t direct_sync_bytes() { return 2 * sizeof(shared_region); }

  /// Whether a call of `plan` over `ep` on `port`'s memory is a GDRAA collective on device
  /// memory that its peers reach: it then runs as one pass a rank (direct_collective.hpp)
  /// between the two synchronizations, with no RMA window (fabric::runs_as_built).
  static bool writes_peers_directly(const endpoint& ep, const schedule::schedule& plan, const device::port& port);

 private:
  // Staging for recv_reduce: about fabric_options::staging_bytes, in 2 to max_staged slots.
  static constexpr std::size_t max_staged = 64;

  // ---- the port ---------------------------------------------------------------------

  bool poll() override {
    if (auto f = ep_->failure(sig().sequence)) return end_failed(*f), true;
    // A call whose messages all go through mailboxes needs the provider only for control
    // messages (aborts, liveness probes): reading its queue every round would double the
    // latency of a small call.
    bool changed = in_flight_ || one_sided_ || (++rounds_ & 63) == 0 ? ep_->progress() : false;
    if (finished()) return true;
    if (one_sided_) changed |= take_flags();
    if (shared_) {
      changed |= send_reads();
      changed |= take_reads();
    }
    if (direct_) changed |= take_direct();
    if (!polls_.empty() && !finished()) changed |= poll_mailboxes();
    if (!receives_.due().empty() && !finished()) changed |= post_due();
    return changed;
  }

  /// Posts the receives held back that the receive window now admits.
  bool post_due();

  /// Posts a send, receive, write or notify.
  posted post(schedule::step_id id) override;

  /// What a libfabric post's return means for the step.
  posted posted_as(schedule::step_id id, posted_op* r, const char* call, ssize_t ret);

  /// A small send: the provider copies it before returning, so the step is done at once.
  posted inject(schedule::step_id id);

  /// The endpoint knows this call failed: aborted (here or elsewhere), or on another rank.
  [[gnu::cold, gnu::noinline]] void end_failed(const fabric::failure& f) {
    if (&f == ep_->aborted())
      abandon(f.code, "rank " + std::to_string(plan().rank) + ": " + to_string(sig()) + " ended: " + f.message, f.message);
    else
      fail_from(f.code, f.message);
  }

  /// A post the provider refused. Providers name a dead peer's connection in their own
  /// words (rxm: -FI_EOTHER), so unless the code says so, a liveness probe decides.
  void fail_post(schedule::step_id id, const char* call, ssize_t ret);
  void lose_peer(schedule::step_id id, int peer, const std::string& what);

  /// Every step is done: a one-sided call's output comes out of the window.
  bool conclude() override {
    if (shared_ && (send_reads(), !reads_due_.empty())) return false;  // a sender waits for them
    if (plan().desc.kind == schedule::collective::broadcast && !find_untaken()) return false;
    if (const auto out = plan().desc.output_bytes(plan().rank); one_sided_ && out) std::memcpy(user_output_, mem_.output, out);
    give_back_memory();
    return true;
  }

  /// Idle, the provider's queue is read every round (a mailbox-only call reads it every
  /// 64th when busy): a peer's abort may need a connection set up first, which takes
  /// progress on both sides.
  void stalled(int rounds) override {
    if (rounds > 256) (void)ep_->progress();
    if (!finished() && rounds >= stalled_rounds && (rounds & 63) == 0) {
      unblock_rings();
      find_misrouted();
      if (const auto now = clock::now(); now >= next_question_ && !finished()) {  // which call does it run?
        ep_->ask_which_call(stuck_context().peer, sig().sequence, packed_, plan().agreement);
        next_question_ = now + question_interval;
      }
    }
  }
  bool probes() const override { return true; }
  std::vector<int> silent_peers(std::chrono::milliseconds grace) override { return ep_->silent_peers(grace); }
  std::string stall_detail() const override;  // receives held for the window, ranks behind
  std::string ended_peers() const override { return ep_->ended_peers(); }
  std::vector<std::string> running_peers(const std::vector<int>& p) const override {
    return ep_->local_peers(bootstrap::detail::process_mark::status::running, &p);
  }

  std::string_view route(schedule::step_id id) const override {
    return state_[id].box ? "through shared memory" : std::string_view();
  }

  /// Staged receives are posted in schedule order as slots free up (stage_more()).
  bool posts_early(schedule::step_id id) const override { return is_staged(id); }
  bool is_staged(schedule::step_id id) const {
    return !state_[id].box && (hmem_ || step_at(id).kind == kind::recv_reduce);
  }
  const std::byte* arrived_data(schedule::step_id id) override { return staged(id); }

  /// A staged receive has been reduced or copied out: its slot goes to the next one.
  void consumed(schedule::step_id id) override {
    if (shared_) return read_done(id);
    if (state_[id].box) return;
    free_slots_.push_back(state_[id].slot);
    stage_more();
  }

  /// Cancels the receives still posted (a late message must not land in the caller's
  /// buffers), waits briefly for the provider to let go, and tells the others.
  void on_failure(errc code, bool tell_others) override;
  void discard_late_messages();  // of earlier calls that failed, from the mailboxes

  // ---- mailboxes, messages between ranks on this host (execution_rings.hpp) ----------

  /// The mailbox a message of `st` moves through, or null for the provider: small
  /// messages by the small rings, chunks up to a bulk slot by the bulk rings. Both ends
  /// decide alike: same bytes, same host, the same settings on every rank.
  local_mailboxes* box_for(const schedule::step& st) const;

  posted poll_later(schedule::step_id id) {
    state_[id].polling = true;
    polls_.push_back(id);
    return posted::started;
  }

  /// Takes what arrived for the receives whose dependencies are done: once a round for each
  /// mailbox and peer, the earliest message any of them wants, while there are such. A
  /// message is read where it lies, checked before it touches the caller's buffers.
  bool poll_mailboxes();

  /// Takes one message from `peer` in `box` that a polled receive wants; false if none.
  bool take_arrived(local_mailboxes& box, int peer);

  /// A message of another call, or of another length, for receive `id`: the call fails.
  /// Out of line: the polling loop stays small.
  [[gnu::cold, gnu::noinline]] inline void reject(local_mailboxes& box, int peer, schedule::step_id id,
                                                  const local_mailboxes::message& m);

  /// A call that makes no progress may wait on a message queued behind others in a full
  /// ring (its peer blocked sending into the ring this rank does not read yet): set
  /// everything that arrived aside, so every ring has room again.
  void unblock_rings();

  /// A peer whose message for a waiting receive took another route (a mailbox where this
  /// rank expects the provider, or the other mailbox) sent another length or runs another
  /// call: the route follows the size, so mismatched calls route apart and would
  /// otherwise only time out. Fails the call with `mismatch`, as a message met would.
  void find_misrouted();

  /// With every step done, a message of this call still in a mailbox was sent by a peer
  /// whose schedule differs where no message of this rank's meets it: ranks that disagree
  /// on a broadcast's root are both roots, and neither receives. Fails the call with
  /// `mismatch`; false then. Sees the mailboxes only (shared memory, up to a chunk), and
  /// only what has arrived: the other rank finds it when it concludes.
  bool find_untaken();

  /// Calls `f` with each mailbox this endpoint has.
  template <class F>
  void each_box(F f) {
    for (local_mailboxes* box : {small_, bulk_})
      if (box) f(*box);
  }

  // ---- one-sided steps (execution_one_sided.hpp) -----------------------------------

  /// The call's output and scratch live in this rank's half of the window, output first: a
  /// writer finds any region of its target from its own schedule (every output is alike).
  void use_window();

  std::size_t scratch_offset() const { return (plan().desc.output_bytes(plan().rank) + 63) / 64 * 64; }

  /// A write (or a notify: a write of nothing) into the peer's window, raising its flag.
  posted post_write(schedule::step_id id);

  /// Counts the flags peers raised for this call; a flag from another call's signature
  /// means the writer runs another call (its data landed only in this rank's window).
  bool take_flags();

  // ---- device memory that peers on this host read (execution_shared.hpp) ------------

  /// What a send posts instead of its data when its receiver reads the sender's device
  /// memory itself (as NCCL's P2P transport over CUDA IPC).
  struct shared_region {
    device::shared_memory block;
    std::uint64_t offset;  // in the block
    std::uint64_t bytes;
  };

  /// Whether this call's device buffers are read by its peers directly: they are reached
  /// (endpoint::reaches_peers_device_memory), and the schedule has no one-sided step
  /// (GDRAA's collectives run as writes_peers_directly).
  bool shares_device_memory(device::port& port) const;

  /// Exports the call's buffers once; false (the call failed, saying why) where the port
  /// cannot share them.
  bool export_buffers(device::port& port);

  /// Posts the region a send reads to its receiver, which answers once it has read it.
  posted post_shared(schedule::step_id id);

  /// A receive's region from `peer`, checked and opened, is read where it lies.
  bool take_shared(local_mailboxes& box, int peer, schedule::step_id id, const local_mailboxes::message& m);

  /// Receive `id` has read its sender's memory: the sender is told (send_reads()).
  void read_done(schedule::step_id id);

  /// Tells senders what was read, as their rings have room; true if any went.
  bool send_reads();

  /// The sends whose receivers have read them are done; true if any.
  bool take_reads();

  // ---- GDRAA's collectives on peers' device memory (execution_direct.hpp) -----------

  /// A write or notify of sync 1 tells its target where the target's part lies in this
  /// rank's input and output; one of sync 2, that this rank's pass has run.
  posted post_direct(schedule::step_id id);

  /// Takes each peer's synchronizations in order, opening its blocks and raising flags.
  bool take_direct();

  // ---- completions, from the endpoint's progress (execution_messages.hpp) -------------

  void on_complete(posted_op& r, const fi_cq_tagged_entry& e) override;

  void on_error(posted_op& r, const fi_cq_err_entry& e) override;

  // ---- staging (execution_messages.hpp) -----------------------------------------------

  std::byte* staged(schedule::step_id id) { return staging_ + state_[id].slot * slot_bytes_; }

  /// Gives free staging slots to the next recv_reduce steps, in schedule order, and posts
  /// their receives. In order, the earliest unfinished one always has a slot.
  void stage_more();

  // ---- device memory the provider moves itself (FI_HMEM) ----------------------------

  /// Every receive of a call whose device buffers go to the provider as they are lands in
  /// a device staging slot, and its copy or reduction runs on the stream from there: the
  /// provider writes no caller buffer that work queued before the call may still use.
  /// Returns the slot size; reduces_ becomes every receive, in schedule order.
  std::size_t stage_every_receive();

  /// Registers the call's device buffers whole, once; false (the call failed, saying
  /// why) where the provider refuses.
  bool register_device_buffers();

  /// A buffer's descriptor: device memory registered with its interface on that path,
  /// host memory as the provider needs it otherwise.
  void* descriptor(const std::byte* data, std::size_t bytes) {
    return hmem_ ? ep_->registrations().device_descriptor(data, bytes, port_memory_)
                 : ep_->registrations().descriptor(data, bytes);
  }

  // ---- memory -------------------------------------------------------------------------

  /// Providers that need registered memory get each buffer whole, once: the chunks then
  /// find it in the cache instead of registering pages one chunk at a time.
  void register_whole_buffers();

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
  bool shared_ = false;             // device buffers read by peers directly (execution_shared.hpp)
  bool hmem_ = false;               // device buffers the provider moves itself (FI_HMEM)
  std::optional<direct_collective> direct_;  // a GDRAA collective on peers' device memory (execution_direct.hpp)
  std::vector<std::uint8_t> direct_taken_;  // ... by peer: its synchronizations taken (0 to 2)
  device::network_memory port_memory_{};  // how the provider names them, when hmem_
  device::port* port_ = nullptr;     // their port, when shared_
  std::array<shared_region, 3> exported_{};  // by schedule::buffer: the call's buffers as peers open them
  std::vector<schedule::step_id> unread_;     // sends whose receivers have not read them yet
  std::vector<schedule::step_id> read_;       // of them, those read this round
  std::vector<std::pair<int, std::uint64_t>> reads_due_;  // (sender, read_tag) not sent yet
  std::unique_ptr<workspace> ws_;
  std::byte* user_output_;
  bool one_sided_ = false;    // runs writes and waits over the RMA window
  bool connection_lost_ = false;  // the provider reported a connection to a peer gone
  std::size_t half_ = 0;      // the window half this call uses
  std::uint32_t digest_ = 0;  // of the signature, as flags carry it
  std::byte* staging_ = nullptr;
  // The workspace's parts, by name (valid until give_back_memory()).
  std::vector<step_state>& state_ = ws_->state;
  std::vector<schedule::step_id>& reduces_ = ws_->reduces;  // the recv_reduce steps, in schedule order
  std::vector<std::size_t>& free_slots_ = ws_->free_slots;
  std::vector<schedule::step_id>& polls_ = ws_->polls;
  std::vector<std::uint32_t>& looked_ = ws_->looked;  // per peer and mailbox: the poll round it was last read in
  receive_window& receives_ = ws_->receives;          // plain receives through the provider (receive_window.hpp)
  std::uint32_t poll_round_ = 0;
  local_mailboxes* small_ = ep_->mailboxes();     // messages up to 512 bytes, to ranks on this host
  local_mailboxes* bulk_ = ep_->bulk_mailboxes();  // chunks up to a bulk slot, to ranks on this host
  /// The sequence bits of a data tag.
  static constexpr std::uint64_t call_bits = wire::data_tag(0, wire::sequence_mask, 0);
  std::size_t next_reduce_ = 0;  // the first of reduces_ without a slot
  std::size_t slot_bytes_ = 0;
  std::size_t in_flight_ = 0;  // this call's posted libfabric operations
  std::uint32_t rounds_ = 0;
  /// Rounds without progress (about 20 ms in wait()) after which a call sets aside what
  /// its rings hold (unblock_rings).
  static constexpr int stalled_rounds = 20000;
  clock::time_point next_question_{};  // when a stalled call next asks the peer it waits on which call it runs
  static constexpr std::chrono::milliseconds question_interval{500};
};

}  // namespace mimatrix::transport::detail::fabric

// The members defined out of the class, by idea.
#include "mimatrix/transport/fabric/execution_messages.hpp"
#include "mimatrix/transport/fabric/execution_one_sided.hpp"
#include "mimatrix/transport/fabric/execution_rings.hpp"
#include "mimatrix/transport/fabric/execution_shared.hpp"
#include "mimatrix/transport/fabric/execution_device_memory.hpp"
#include "mimatrix/transport/fabric/execution_direct.hpp"

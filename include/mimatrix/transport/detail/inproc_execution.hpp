// One rank's execution of one schedule over the in-process transport: the port of the
// step executor (step_executor.hpp). A send is a descriptor posted in the receiver's
// mailbox; the receiver matches it, reads the sender's memory and releases it. One-sided
// writes addressed to this rank are applied here, by the target, while it runs the call
// they belong to. On device memory (device_steps.hpp) a receiver's copy runs on its stream,
// and the sender is released once that copy is done; GDRAA's collectives there run as one
// pass a rank over the others' memory (direct_collective.hpp), sync 1 only saying where.
#pragma once

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/device/rank_streams.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/batch_call.hpp"
#include "mimatrix/transport/detail/inproc_world.hpp"
#include "mimatrix/transport/direct_collective.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport::detail {

class inproc_execution final : public step_executor {
 public:
  /// Joins the call at once: a peer waiting for it sees this rank there, whatever this
  /// rank waits for next.
  /// `call` is the call's key on the world (inproc_world::call_key).
  inproc_execution(std::shared_ptr<progress_engine> engine, inproc_world& world, int rank, std::uint64_t call,
                   std::shared_ptr<const schedule::schedule> plan, const std::byte* input, std::byte* output,
                   const signature& sig, const reduce::host_kernels& kernels, std::chrono::milliseconds timeout,
                   const device::stream* caller = nullptr, device::rank_streams* resources = nullptr)
      : step_executor(*engine, std::move(plan), sig, kernels, timeout, nullptr),
        owner_(std::move(engine)),
        world_(world),
        rank_(rank),
        call_(call),
        sends_(std::make_unique<posted_send[]>(this->plan().steps.size())) {
    mem_ = {input, output, nullptr};
    if (caller && direct_collective::fits(this->plan())) {  // threads reach each other's device memory
      direct_.emplace(this->plan());
      run_on_device(*caller, *resources, 0, /*with_scratch=*/false);
      run_directly(*direct_);
      held_.assign(this->plan().steps.size(), nullptr);
    } else if (caller) {
      run_on_device(*caller, *resources);
      held_.assign(this->plan().steps.size(), nullptr);
    } else {
      scratch_.resize(this->plan().scratch_bytes);
      mem_.scratch = scratch_.data();
    }
    if (auto f = world_.join(rank_, call_, sig, this->plan().algorithm, this->plan().agreement))
      fail(f->code, f->message);
    start();
  }

  /// A p2p batch (`call`) on host memory: enters its side of each pair-batch on the
  /// board at once, and fails at once where a peer's side that is there differs.
  /// `instance`: this rank's endpoint (inproc_world::open).
  inproc_execution(std::shared_ptr<progress_engine> engine, inproc_world& world, int rank, std::uint64_t instance,
                   std::shared_ptr<const schedule::schedule> plan, const batch_call& call,
                   std::chrono::milliseconds timeout)
      : step_executor(*engine, std::move(plan), call.sig, reduce::host_kernels_for(dtype::uint8, reduce::op_kind::sum),
                      timeout, nullptr),
        owner_(std::move(engine)),
        world_(world),
        rank_(rank),
        call_(0),
        sends_(std::make_unique<posted_send[]>(this->plan().steps.size())),
        entries_(call.entries.begin(), call.entries.end()),
        batch_(true) {
    mem_.entries = entries_.data();
    keys_.assign(std::size_t(world.size()), 0);
    for (const auto& [peer, epoch] : call.epochs) {
      keys_[std::size_t(peer)] = inproc_world::call_key(instance, epoch);
      sides_.push_back({instance, rank, peer, epoch, call.sig.sequence});
    }
    for (const auto& s : sides_) {
      auto f = world_.pairs().meet(s, schedule::p2p::manifest(call.ops, s.peer));
      world_.notify(s.peer);
      if (f) {
        adopt(*f);
        break;
      }
    }
    start();
  }

  ~inproc_execution() override { leave(); }

 private:
  // ---- the port ---------------------------------------------------------------------

  posted post(schedule::step_id id) override {
    const schedule::step& st = step_at(id);
    if (st.kind == schedule::step_kind::recv || st.kind == schedule::step_kind::recv_reduce) {
      waiting_.push_back(id);  // matched in poll()
      return posted::started;
    }
    posted_send& ps = sends_[id];
    ps.kind = st.kind == schedule::step_kind::send    ? posted_kind::message
              : st.kind == schedule::step_kind::write ? posted_kind::write
                                                      : posted_kind::notify;
    ps.source = rank_;
    ps.sequence = key_for(st.peer);
    ps.pair = batch_;
    ps.tag = st.tag;
    ps.data = st.kind == schedule::step_kind::notify ? nullptr : mem_.read(st.src);
    ps.bytes = st.kind == schedule::step_kind::notify ? 0 : st.src.bytes;
    ps.dst = st.dst;
    ps.out = nullptr;
    ps.out_bytes = 0;
    if (direct_ && direct_->sync_of(st) == 0) {  // where the target's part lies in this input and output
      const direct_collective::part& part = direct_->offer(st.peer);
      ps.data = part.input.bytes ? mem_.read(part.input) : nullptr;
      ps.bytes = part.input.bytes;
      ps.out = part.output.bytes ? mem_.write(part.output) : nullptr;
      ps.out_bytes = part.output.bytes;
    }
    ps.sig = &sig();
    world_.post(st.peer, &ps);
    in_flight_.push_back(id);
    return posted::started;
  }

  bool poll() override {
    bool changed = match_receives();
    if (!finished()) changed |= apply_writes();
    if (!finished()) changed |= reap_sends();
    return changed;
  }

  /// Every rank's signature must be seen before success is reported, so that no rank
  /// finishes a call another rank got wrong.
  bool conclude() override {
    if (batch_) {  // every step is done, so every peer entered its side
      if (adopt_pair_failure()) return false;
      for (const auto& s : sides_) world_.pairs().leave(s);
      return true;
    }
    if (auto f = world_.failed(call_)) return fail_from(f->code, f->message), false;
    if (!world_.missing(call_).empty()) return false;
    world_.leave(call_);
    return true;
  }

  /// Rounds without progress before the board is read: a peer is usually microseconds away.
  void stalled(int rounds) override {
    if (rounds < world_.spin_limit()) return;
    if (batch_) {
      adopt_pair_failure();
      return;
    }
    if (auto f = world_.failed(call_)) fail_from(f->code, f->message);
  }

  /// A landing on device memory is done: the sender's memory is free again.
  void consumed(schedule::step_id id) override {
    if (held_.empty() || !held_[id]) return;
    release(std::exchange(held_[id], nullptr));
  }

  std::string stall_detail() const override {
    if (batch_) {
      std::string absent;
      for (const auto& s : sides_)
        if (std::string m = world_.pairs().missing(s); !m.empty()) absent += "; " + m;
      return absent;
    }
    const std::string absent = world_.missing(call_);
    return absent.empty() ? std::string() : "; rank(s) " + absent + " never called " + to_string(sig());
  }

  /// Records the failure for the other ranks and takes back every send that a receiver
  /// has not claimed (waiting for one being read now).
  void on_failure(errc code, bool) override {
    if (batch_) {  // the batch fails as a whole: each of its peers' sides fails too
      for (const auto& s : sides_) {
        world_.pairs().fail(s, {code, origin()});
        world_.notify(s.peer);
      }
    } else {
      world_.fail(call_, {code, origin()});
    }
    // What this rank holds and will not read now (a landing the device refused), before
    // it waits for its peers to let go of its own: they may be waiting likewise.
    for (posted_send*& held : held_)
      if (held) release(std::exchange(held, nullptr));
    for (schedule::step_id id : in_flight_) {
      posted_send& ps = sends_[id];
      if (!world_.withdraw(step_at(id).peer, &ps))
        while (!ps.done.load(std::memory_order_acquire)) std::this_thread::yield();
    }
    in_flight_.clear();
    if (batch_)
      for (const auto& s : sides_) world_.pairs().leave(s);
    else
      world_.leave(call_);
  }

  // ---- p2p --------------------------------------------------------------------------

  /// The key of this call's messages with `peer`: the call's, or its pair-batch's with it.
  std::uint64_t key_for(int peer) const { return batch_ ? keys_[std::size_t(peer)] : call_; }

  /// Ends the batch with a pair-batch's failure: a mismatch in this rank's words, another
  /// rank's failure as theirs.
  void adopt(const failure& f) {
    if (f.own)
      fail(f.code, f.message);
    else
      fail_from(f.code, f.message);
  }
  bool adopt_pair_failure() {
    for (const auto& s : sides_)
      if (auto f = world_.pairs().failed(s)) {
        adopt(*f);
        return true;
      }
    return false;
  }

  // ---- matching ---------------------------------------------------------------------

  bool match_receives() {
    if (waiting_.empty()) return false;
    matched_.clear();
    {
      auto& box = world_.box(rank_);
      std::lock_guard lock(box.mutex);
      std::size_t kept = 0;
      for (schedule::step_id id : waiting_) {
        const schedule::step& st = step_at(id);
        posted_send* found = nullptr;
        for (std::size_t i = 0; i < box.posted.size(); ++i) {
          posted_send* ps = box.posted[i];
          if (ps->kind == posted_kind::message && ps->source == st.peer && ps->pair == batch_ &&
              ps->sequence == key_for(st.peer) &&
              ps->tag == st.tag) {
            found = ps;
            box.posted[i] = box.posted.back();
            box.posted.pop_back();
            break;
          }
        }
        if (found)
          matched_.emplace_back(id, found);
        else
          waiting_[kept++] = id;
      }
      waiting_.resize(kept);
    }
    for (std::size_t m = 0; m < matched_.size(); ++m) {
      const auto [id, ps] = matched_[m];
      const schedule::step& st = step_at(id);
      // A batch's sides were compared on the pair board before either posted.
      const bool other_call = !batch_ && !(*ps->sig == sig());
      if (other_call || ps->bytes != st.dst.bytes) {
        const std::string what = other_call
                                     ? "rank " + std::to_string(ps->source) + " sent for " + to_string(*ps->sig) +
                                           " but this rank runs " + to_string(sig())
                                     : "rank " + std::to_string(ps->source) + " sent " + std::to_string(ps->bytes) +
                                           " bytes where " + std::to_string(st.dst.bytes) + " were expected";
        // Fail (on the board) before releasing: a released sender must not finish the
        // call as a success.
        fail(errc::mismatch, describe(context(id), what));
        for (std::size_t rest = m; rest < matched_.size(); ++rest) release(matched_[rest].second);
        return true;
      }
      if (device()) held_[id] = ps;  // read by a copy on this rank's stream: released once it ran
      arrive(id, static_cast<const std::byte*>(ps->data));
      if (!device()) release(ps);
    }
    return !matched_.empty();
  }

  /// Applies the writes and notifies of this call that wait in the mailbox: copies each
  /// write into this rank's own buffer, raises its flag, and releases the writer. Those of
  /// a later call stay until this rank runs it.
  bool apply_writes() {
    // Only a rank that waits for flags gets writes: the others never lock for them.
    if (flags_raised() >= flags_expected()) return false;
    arrived_.clear();
    {
      auto& box = world_.box(rank_);
      std::lock_guard lock(box.mutex);
      std::size_t kept = 0;
      for (posted_send* ps : box.posted) {
        if (ps->kind != posted_kind::message && ps->sequence == call_)
          arrived_.push_back(ps);
        else
          box.posted[kept++] = ps;
      }
      box.posted.resize(kept);
    }
    for (std::size_t m = 0; m < arrived_.size(); ++m) {
      posted_send* ps = arrived_[m];
      std::string what;
      if (!(*ps->sig == sig()))
        what = "rank " + std::to_string(ps->source) + " wrote for " + to_string(*ps->sig) + " but this rank runs " +
               to_string(sig());
      else if (ps->kind == posted_kind::write && !lands_inside(ps->dst))
        what = "rank " + std::to_string(ps->source) + " wrote " + schedule::to_string(ps->dst) +
               ", which is not inside this rank's output (" + std::to_string(plan().desc.output_bytes(plan().rank)) +
               " bytes) or scratch (" + std::to_string(plan().scratch_bytes) + " bytes)";
      else if (direct_ && ps->tag == direct_->tag(0) &&
               (ps->bytes != direct_->wanted_input_bytes() || ps->out_bytes != direct_->wanted_output_bytes()))
        what = "rank " + std::to_string(ps->source) + " offered " + std::to_string(ps->bytes) +
               " bytes of its input and " + std::to_string(ps->out_bytes) + " of its output where this rank's part is " +
               std::to_string(direct_->wanted_input_bytes()) + " and " + std::to_string(direct_->wanted_output_bytes()) +
               " (run every rank on device buffers)";
      if (!what.empty()) {
        // Read the entry before releasing it: the writer may free it at once.
        const error_context where{rank_, ps->source, schedule::call_name(sig()),
                                  static_cast<std::int64_t>(sig().sequence), -1, static_cast<std::int64_t>(ps->bytes)};
        what += " (flag tag " + std::to_string(ps->tag) + ")";
        // Fail (on the board) before releasing: a released writer must not finish the
        // call as a success.
        fail(errc::mismatch, describe(where, what));
        for (std::size_t rest = m; rest < arrived_.size(); ++rest) release(arrived_[rest]);
        return true;
      }
      if (direct_) {  // nothing to copy: sync 1 says where this rank's pass reads and writes
        if (ps->tag == direct_->tag(0)) direct_->reach(ps->source, ps->data, ps->out);
        const std::uint32_t tag = ps->tag;
        const int source = ps->source;
        release(ps);
        raise_flag(tag, source);
        continue;
      }
      if (device()) {
        if (ps->kind == posted_kind::write)
          device()->copy(mem_.write(ps->dst), static_cast<const std::byte*>(ps->data), ps->bytes);
        device()->then([this, ps, tag = ps->tag, source = ps->source] {
          release(ps);
          if (!finished()) raise_flag(tag, source);
        });
        continue;
      }
      if (ps->kind == posted_kind::write && ps->bytes) std::memcpy(mem_.write(ps->dst), ps->data, ps->bytes);
      const std::uint32_t tag = ps->tag;
      const int source = ps->source;
      release(ps);
      raise_flag(tag, source);
    }
    return !arrived_.empty();
  }

  bool lands_inside(const schedule::region& r) const {
    const std::size_t size = r.where == schedule::buffer::output    ? plan().desc.output_bytes(plan().rank)
                             : r.where == schedule::buffer::scratch ? plan().scratch_bytes
                                                                    : 0;  // never the input
    return r.where != schedule::buffer::input && r.offset <= size && r.bytes <= size - r.offset;
  }

  /// Tells the sender its data has been taken.
  void release(posted_send* ps) {
    const int source = ps->source;
    ps->done.store(true, std::memory_order_release);  // ps may be gone after this
    world_.notify(source);
  }

  bool reap_sends() {
    std::size_t kept = 0;
    const std::size_t before = in_flight_.size();
    for (std::size_t k = 0; k < before; ++k) {
      const schedule::step_id id = in_flight_[k];
      if (sends_[id].done.load(std::memory_order_acquire))
        done_.push_back(id);
      else
        in_flight_[kept++] = id;
    }
    in_flight_.resize(kept);
    for (schedule::step_id id : done_) complete(id);
    done_.clear();
    return kept != before;
  }

  std::shared_ptr<progress_engine> owner_;
  inproc_world& world_;
  int rank_;
  std::uint64_t call_;  // the key of this call on the world: its sequence and communicator
  std::vector<std::byte> scratch_;
  std::unique_ptr<posted_send[]> sends_;  // indexed by step id; used by send steps
  std::vector<schedule::step_id> waiting_, in_flight_, done_;
  std::vector<std::pair<schedule::step_id, posted_send*>> matched_;
  std::vector<posted_send*> arrived_;  // writes being applied
  std::vector<posted_send*> held_;     // on device memory: sends whose data a copy still reads, by step
  std::optional<direct_collective> direct_;  // a GDRAA collective on device memory, as one pass a rank
  // A p2p batch's: its buffer table, each peer's key (call_key of the pair epoch), its sides on the pair board.
  std::vector<std::byte*> entries_;
  bool batch_ = false;
  std::vector<std::uint64_t> keys_;
  std::vector<inproc_pair_board::side> sides_;
};

}  // namespace mimatrix::transport::detail

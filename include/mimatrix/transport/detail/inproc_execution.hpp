// One rank's execution of one schedule over the in-process transport: a dependency-
// driven state machine that keeps every ready step in flight, advanced with the
// communicator's other calls by its progress engine. One-sided writes addressed to this
// rank are applied here, by the target, while it runs the call they belong to.
#pragma once

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/detail/inproc_world.hpp"
#include "mimatrix/transport/host_steps.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::transport::detail {

class inproc_execution final : public execution {
  using clock = std::chrono::steady_clock;

 public:
  /// Joins the call at once: a peer waiting for it sees this rank there, whatever this
  /// rank waits for next.
  inproc_execution(std::shared_ptr<progress_engine> engine, inproc_world& world, int rank,
                   std::shared_ptr<const schedule::schedule> plan, const std::byte* input, std::byte* output,
                   const signature& sig, const reduce::host_kernels& kernels, std::chrono::milliseconds timeout)
      : execution(*engine),
        owner_(std::move(engine)),
        world_(world),
        rank_(rank),
        plan_(std::move(plan)),
        sig_(sig),
        kernels_(kernels),
        timeout_(timeout),
        deadline_(clock::now() + timeout),
        scratch_(plan_->scratch_bytes),
        mem_{input, output, scratch_.data()},
        pending_(plan_->steps.size()),
        sends_(std::make_unique<posted_send[]>(plan_->steps.size())) {
    for (std::size_t i = 0; i < plan_->steps.size(); ++i) {
      pending_[i] = static_cast<std::uint32_t>(plan_->deps(static_cast<schedule::step_id>(i)).size());
      if (pending_[i] == 0) ready_.push_back(static_cast<schedule::step_id>(i));
      if (plan_->steps[i].kind == schedule::step_kind::wait) flags_expected_ += plan_->steps[i].count;
    }
    while (!finished() && advance()) {
    }
    enter();
  }

  ~inproc_execution() override { leave(); }

 private:
  /// Rounds without progress before the board and the clock are read: a peer is usually
  /// microseconds away.
  void idle(int rounds) override {
    if (rounds >= world_.spin_limit()) check_peers_and_deadline();
  }

  enum class phase { joining, running, checking };
  const schedule::step& step_at(schedule::step_id id) const { return plan_->steps[id]; }

  /// One round of progress; true if anything changed.
  bool advance() override {
    switch (phase_) {
      case phase::joining:
        if (auto f = world_.join(rank_, sig_)) return fail(f->code, f->message), true;
        phase_ = phase::running;
        return true;
      case phase::running: {
        bool changed = start_ready();
        changed |= match_receives();
        changed |= apply_writes();
        changed |= finish_waits();
        changed |= reap_sends();
        if (!finished() && completed_ == plan_->steps.size()) {
          phase_ = phase::checking;
          changed = true;
        }
        return changed;
      }
      case phase::checking:
        // Every rank's signature must be seen before success is reported, so that no
        // rank finishes a call another rank got wrong.
        if (auto f = world_.failed(sig_.sequence)) return fail_from(*f), true;
        if (!world_.missing(sig_.sequence).empty()) return false;
        succeed();
        world_.leave(sig_.sequence);
        return true;
    }
    return false;
  }

  bool start_ready() {
    if (ready_.empty()) return false;
    // Index loop: completing a local step appends to ready_.
    for (std::size_t k = 0; k < ready_.size(); ++k) {
      const schedule::step_id id = ready_[k];
      const schedule::step& st = step_at(id);
      switch (st.kind) {
        case schedule::step_kind::send:
        case schedule::step_kind::write:
        case schedule::step_kind::notify: {
          posted_send& ps = sends_[id];
          ps.kind = st.kind == schedule::step_kind::send    ? posted_kind::message
                    : st.kind == schedule::step_kind::write ? posted_kind::write
                                                            : posted_kind::notify;
          ps.source = rank_;
          ps.sequence = sig_.sequence;
          ps.tag = st.tag;
          ps.data = st.kind == schedule::step_kind::notify ? nullptr : mem_.read(st.src);
          ps.bytes = st.kind == schedule::step_kind::notify ? 0 : st.src.bytes;
          ps.dst = st.dst;
          ps.sig = &sig_;
          world_.post(st.peer, &ps);
          in_flight_.push_back(id);
          break;
        }
        case schedule::step_kind::wait:
          if (flags(st.tag) >= st.count)
            complete(id);
          else
            flag_waits_.push_back(id);
          break;
        case schedule::step_kind::recv:
        case schedule::step_kind::recv_reduce:
          waiting_.push_back(id);
          break;
        default:
          run_local_step(kernels_, st, mem_, plan_->desc.size);
          complete(id);
      }
    }
    ready_.clear();
    return true;
  }


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
          if (ps->kind == posted_kind::message && ps->source == st.peer && ps->sequence == sig_.sequence &&
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
      if (!(*ps->sig == sig_) || ps->bytes != st.dst.bytes) {
        const std::string what = !(*ps->sig == sig_)
                                     ? "rank " + std::to_string(ps->source) + " sent for " + to_string(*ps->sig) +
                                           " but this rank runs " + to_string(sig_)
                                     : "rank " + std::to_string(ps->source) + " sent " + std::to_string(ps->bytes) +
                                           " bytes where " + std::to_string(st.dst.bytes) + " were expected";
        // Fail (on the board) before releasing: a released sender must not finish the
        // call as a success.
        fail(errc::mismatch, describe(context(id), what));
        for (std::size_t rest = m; rest < matched_.size(); ++rest) release(matched_[rest].second);
        return true;
      }
      if (st.kind == schedule::step_kind::recv) {
        if (ps->bytes) std::memcpy(mem_.write(st.dst), ps->data, ps->bytes);
      } else {
        kernels_.combine(mem_.write(st.dst), mem_.read(st.src), ps->data, ps->bytes);
      }
      release(ps);
      complete(id);
    }
    return !matched_.empty();
  }

  /// Applies the writes and notifies of this call that wait in the mailbox: copies each
  /// write into this rank's own buffer, raises its flag, and releases the writer. Those of
  /// a later call stay until this rank runs it.
  bool apply_writes() {
    // Only a rank that waits for flags gets writes: the others never lock for them.
    if (flag_sources_.size() >= flags_expected_) return false;
    arrived_.clear();
    {
      auto& box = world_.box(rank_);
      std::lock_guard lock(box.mutex);
      std::size_t kept = 0;
      for (posted_send* ps : box.posted) {
        if (ps->kind != posted_kind::message && ps->sequence == sig_.sequence)
          arrived_.push_back(ps);
        else
          box.posted[kept++] = ps;
      }
      box.posted.resize(kept);
    }
    for (std::size_t m = 0; m < arrived_.size(); ++m) {
      posted_send* ps = arrived_[m];
      std::string what;
      if (!(*ps->sig == sig_))
        what = "rank " + std::to_string(ps->source) + " wrote for " + to_string(*ps->sig) + " but this rank runs " +
               to_string(sig_);
      else if (ps->kind == posted_kind::write && !lands_inside(ps->dst))
        what = "rank " + std::to_string(ps->source) + " wrote " + schedule::to_string(ps->dst) +
               ", which is not inside this rank's output (" + std::to_string(plan_->desc.output_bytes()) +
               " bytes) or scratch (" + std::to_string(plan_->scratch_bytes) + " bytes)";
      if (!what.empty()) {
        // Read the entry before releasing it: the writer may free it at once.
        const error_context where{rank_, ps->source, schedule::to_string(sig_.kind),
                                  static_cast<std::int64_t>(sig_.sequence), -1, static_cast<std::int64_t>(ps->bytes)};
        what += " (flag tag " + std::to_string(ps->tag) + ")";
        // Fail (on the board) before releasing: a released writer must not finish the
        // call as a success.
        fail(errc::mismatch, describe(where, what));
        for (std::size_t rest = m; rest < arrived_.size(); ++rest) release(arrived_[rest]);
        return true;
      }
      if (ps->kind == posted_kind::write && ps->bytes) std::memcpy(mem_.write(ps->dst), ps->data, ps->bytes);
      raise(ps->tag, ps->source);
      release(ps);
    }
    return !arrived_.empty();
  }

  bool lands_inside(const schedule::region& r) const {
    const std::size_t size = r.where == schedule::buffer::output    ? plan_->desc.output_bytes()
                             : r.where == schedule::buffer::scratch ? plan_->scratch_bytes
                                                                    : 0;  // never the input
    return r.where != schedule::buffer::input && r.offset <= size && r.bytes <= size - r.offset;
  }

  /// Flags of this call are counted here, so a flag never outlives its call.
  void raise(std::uint32_t tag, int source) {
    flag_sources_.emplace_back(tag, source);
    for (auto& [t, n] : flag_counts_)
      if (t == tag) return void(++n);
    flag_counts_.emplace_back(tag, 1u);
  }
  std::uint32_t flags(std::uint32_t tag) const {
    for (const auto& [t, n] : flag_counts_)
      if (t == tag) return n;
    return 0;
  }

  bool finish_waits() {
    const std::size_t before = flag_waits_.size();
    std::size_t kept = 0;
    for (schedule::step_id id : flag_waits_) {
      if (flags(step_at(id).tag) >= step_at(id).count)
        complete(id);
      else
        flag_waits_[kept++] = id;
    }
    flag_waits_.resize(kept);
    return kept != before;
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
    for (schedule::step_id id : in_flight_) {
      if (sends_[id].done.load(std::memory_order_acquire))
        complete(id);
      else
        in_flight_[kept++] = id;
    }
    in_flight_.resize(kept);
    return kept != before;
  }

  void complete(schedule::step_id id) {
    ++completed_;
    schedule::release_successors(*plan_, id, pending_, ready_);
  }

  /// When blocked: adopts another rank's failure, or fails on the deadline. True if failed.
  bool check_peers_and_deadline() {
    if (auto f = world_.failed(sig_.sequence)) {
      fail_from(*f);
      return true;
    }
    if (clock::now() < deadline_) return false;
    fail(errc::timeout, describe(stuck_context(), stuck_reason()));
    return true;
  }

  error_context context(schedule::step_id id) const {
    const schedule::step& st = step_at(id);
    return {rank_, st.peer, schedule::to_string(sig_.kind), static_cast<std::int64_t>(sig_.sequence),
            static_cast<std::int64_t>(id), static_cast<std::int64_t>(st.bytes())};
  }

  error_context stuck_context() const {
    if (!waiting_.empty()) return context(waiting_.front());
    if (!flag_waits_.empty()) return context(flag_waits_.front());
    if (!in_flight_.empty()) return context(in_flight_.front());
    return {rank_, -1, schedule::to_string(sig_.kind), static_cast<std::int64_t>(sig_.sequence)};
  }

  std::string stuck_reason() {
    std::string why = "timed out after " + std::to_string(timeout_.count()) + " ms ";
    if (!waiting_.empty()) {
      const schedule::step& st = step_at(waiting_.front());
      why += "waiting for " + std::string(schedule::to_string(st.kind)) + " from rank " + std::to_string(st.peer) +
             " (tag " + std::to_string(st.tag) + ")";
    } else if (!flag_waits_.empty()) {
      const schedule::step& st = step_at(flag_waits_.front());
      std::string from;
      for (const auto& [tag, source] : flag_sources_)
        if (tag == st.tag) from += (from.empty() ? "" : ", ") + std::to_string(source);
      why += "in a wait for " + std::to_string(st.count) + " flags with tag " + std::to_string(st.tag) + ", of which " +
             std::to_string(flags(st.tag)) + " arrived" + (from.empty() ? "" : " (from rank(s) " + from + ")");
    } else if (!in_flight_.empty()) {
      const schedule::step& st = step_at(in_flight_.front());
      why += "waiting for rank " + std::to_string(st.peer) + " to take a " +
             std::string(schedule::to_string(st.kind)) + " (tag " + std::to_string(st.tag) + ")";
    } else {
      why += "waiting for the other ranks to enter the call";
    }
    const std::string absent = world_.missing(sig_.sequence);
    if (!absent.empty()) why += "; rank(s) " + absent + " never called " + to_string(sig_);
    return why;
  }

  void fail_from(const failure& f) {
    fail(f.code, "rank " + std::to_string(rank_) + ": " + to_string(sig_) + " failed on another rank: " + f.message);
  }

  /// Ends this execution: records the failure for the other ranks and takes back
  /// every send that a receiver has not claimed (waiting for one being read now).
  void fail(errc code, std::string message) {
    world_.fail(sig_.sequence, {code, message});
    for (schedule::step_id id : in_flight_) {
      posted_send& ps = sends_[id];
      if (!world_.withdraw(step_at(id).peer, &ps))
        while (!ps.done.load(std::memory_order_acquire)) std::this_thread::yield();
    }
    in_flight_.clear();
    end_with(code, std::move(message));
    world_.leave(sig_.sequence);
  }

  std::shared_ptr<progress_engine> owner_;
  inproc_world& world_;
  int rank_;
  std::shared_ptr<const schedule::schedule> plan_;
  signature sig_;
  const reduce::host_kernels& kernels_;
  std::chrono::milliseconds timeout_;
  clock::time_point deadline_;
  std::vector<std::byte> scratch_;
  host_buffers mem_;
  std::vector<std::uint32_t> pending_;  // unfinished dependencies per step
  std::unique_ptr<posted_send[]> sends_;  // indexed by step id; used by send steps
  std::vector<schedule::step_id> ready_, waiting_, in_flight_, flag_waits_;
  std::vector<std::pair<schedule::step_id, posted_send*>> matched_;
  std::vector<posted_send*> arrived_;                             // writes being applied
  std::vector<std::pair<std::uint32_t, std::uint32_t>> flag_counts_;  // (tag, flags) of this call
  std::vector<std::pair<std::uint32_t, int>> flag_sources_;          // (tag, writer) of every flag raised
  std::size_t flags_expected_ = 0;                                    // the sum of the waits' counts
  std::size_t completed_ = 0;
  phase phase_ = phase::joining;
};

}  // namespace mimatrix::transport::detail

// The transport-neutral executor: one rank's run of one schedule, written once for every
// transport. It keeps the dependency counts, starts every ready step at once, consumes
// receives a transport took early (pipelining), counts one-sided flags, retries what
// back-pressure refused in order, bounds the call by its deadline (with a liveness probe
// before it where the transport has one), and names the step and the peer a stuck call
// waits for. A transport implements only the port below: how a step is posted, how
// arrivals are polled, and its part of ending a call.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/device_steps.hpp"
#include "mimatrix/transport/direct_collective.hpp"
#include "mimatrix/transport/host_staging.hpp"
#include "mimatrix/transport/host_steps.hpp"
#include "mimatrix/transport/progress.hpp"
#include "mimatrix/transport/shared_fate.hpp"
#include "mimatrix/transport/stall_note.hpp"
#include "mimatrix/transport/step_bookkeeping.hpp"

namespace mimatrix::transport {

class step_executor : public execution {
 public:
  using clock = std::chrono::steady_clock;

 protected:
  /// What a transport's post() did with a step.
  enum class posted : std::uint8_t {
    started,   // it ends later: complete(), arrive() or fail()
    done,      // it ended at once (or the call failed)
    deferred,  // back-pressure: retried next round, after those refused before it
    held,      // held back by the transport's own window: not retried; it calls release() when it may go
  };

  step_executor(progress_engine& engine, std::shared_ptr<const schedule::schedule> plan, const signature& sig,
                const reduce::host_kernels& kernels, std::chrono::milliseconds timeout,
                std::unique_ptr<step_bookkeeping> book);

  // ---- the port: what a transport implements ----------------------------------------

  /// Starts a send, recv, recv_reduce, write or notify whose dependencies are done (or a
  /// recv_reduce early, through post_early()).
  virtual posted post(schedule::step_id id) = 0;
  /// Takes what arrived and completed; true if anything changed.
  virtual bool poll() = 0;
  /// Every step is done: the transport's last checks; true once the call may succeed (it is then polled no more).
  virtual bool conclude() { return true; }
  /// A round that moved nothing, the n-th in a row: the transport's remedies, and
  /// failures other ranks reported (adopt them with fail_from()).
  virtual void stalled(int rounds) { (void)rounds; }
  /// Whether the transport can probe its peers' liveness (silent_peers()).
  virtual bool probes() const { return false; }
  /// Peers that did not answer a liveness probe within `grace`.
  virtual std::vector<int> silent_peers(std::chrono::milliseconds grace) {
    (void)grace;
    return {};
  }
  /// Peers whose processes have ended, as the transport can tell without their answer, each
  /// with how ("rank 2 (pid 4242) exited or was killed (...)"; none or cannot tell: ""). Asked
  /// every ended_check_interval of a stuck call.
  virtual std::string ended_peers() const { return {}; }
  /// Of `peers`, those on this host whose processes run, each as "rank 2 (pid 4242)".
  virtual std::vector<std::string> running_peers(const std::vector<int>& peers) const {
    (void)peers;
    return {};
  }
  /// What the message of a stuck call adds (ranks that never came, the post cap).
  virtual std::string stall_detail() const { return {}; }
  /// How a receive's data moves, for the message of a stuck call ("through shared memory").
  virtual std::string_view route(schedule::step_id id) const {
    (void)id;
    return {};
  }
  /// Whether the transport posts this receive itself, through post_early(), in an order
  /// of its own (staging slots), rather than once its dependencies are done.
  virtual bool posts_early(schedule::step_id id) const {
    (void)id;
    return false;
  }
  /// The data of a receive that arrive()d before its step was ready.
  virtual const std::byte* arrived_data(schedule::step_id id) {
    (void)id;
    return nullptr;
  }
  /// A receive's data has been consumed: its buffer may be reused.
  virtual void consumed(schedule::step_id id) { (void)id; }
  /// Puts a receive's data where its step says (a copy, or a reduction into dst); true
  /// when done now, false when the transport completes the step later (a simulated
  /// transport charges the reduction's time). Without data (null), only the time counts.
  inline virtual bool land(schedule::step_id id, const std::byte* data);  // inline: progress.hpp says why
  /// Runs a reduce, reduce_slots, copy or finalize step: true when done now, false when
  /// the transport completes it later.
  inline virtual bool run_local(schedule::step_id id);
  /// The transport's part of ending with an error: tell the others (unless the failure
  /// came from them), take back what is posted, give back what peers lent, let go of the
  /// call's memory.
  virtual void on_failure(errc code, bool tell_others) = 0;

  // ---- what a transport calls -------------------------------------------------------

  /// The call's buffers are device memory of `caller`'s port: its local steps and
  /// landings run on the rank's stream after `caller`'s earlier work and before its later
  /// work; its scratch is device memory (device_steps.hpp) with `extra_bytes` more behind
  /// the plan's (scratch_end()) for the transport, or none without `with_scratch`. Call before start().
  void run_on_device(const device::stream& caller, device::rank_streams& resources, std::size_t extra_bytes = 0,
                     bool with_scratch = true) {
    const std::size_t scratch = extra_bytes ? scratch_end() + extra_bytes : plan_->scratch_bytes;
    device_ = std::make_unique<device_steps>(caller, resources.take_stream(*caller.device), kernels_, plan_->desc.size,
                                             resources.scratch(*caller.device, with_scratch ? scratch : 0));
    mem_.scratch = device_->scratch();
  }
  device_steps* device() { return device_.get(); }
  /// The device work queued so far and what it uses, taken from a call being unmade
  /// (rank_streams::let_go_later): letting go of it waits for that work.
  std::shared_ptr<void> take_device_work() {
    struct work {
      std::unique_ptr<device_steps> device;
      std::unique_ptr<host_staging> staging;  // goes first, as in the call
    };
    if (!device_ && !staging_) return nullptr;
    return std::make_shared<work>(work{std::move(device_), std::move(staging_)});
  }
  /// The call is a part of a call split across groups (`fate`, shared with them, null:
  /// none): its failure marks `fate` before its gates open, and it fails at its first post
  /// once another part failed. Call before start().
  void share_fate(std::shared_ptr<shared_fate> fate) { fate_ = std::move(fate); }
  /// The call is a GDRAA collective on device memory every rank reaches: its local steps
  /// run as `d` says; the transport carries its two synchronizations (direct_collective.hpp).
  void run_directly(direct_collective& d) { direct_ = &d; }
  /// Where the transport's part of the device scratch begins (run_on_device's extra).
  std::size_t scratch_end() const { return (plan_->scratch_bytes + 255) / 256 * 256; }
  /// The call's buffers are device memory of `caller`'s port, which this transport moves
  /// only through host memory: the executor runs it on host copies, in a pipeline
  /// (host_staging.hpp), and mem_'s input and output become those. Output pieces go back
  /// as they are done unless the transport writes the output elsewhere first
  /// (`pipelined_output` false). The derived constructor calls it before it uses mem_.
  void stage_through_host(const device::stream& caller, device::rank_streams& resources, const std::byte* input,
                          std::byte* output, bool pipelined_output) {
    if (plan_->desc.kind == schedule::collective::broadcast && plan_->rank != plan_->desc.root) input = nullptr;
    staging_ = std::make_unique<host_staging>(caller, resources, kernels_, *plan_, input, output, pipelined_output);
    mem_.input = input ? staging_->input() : nullptr;
    mem_.output = staging_->output();
  }
  /// Releases the steps without dependencies and runs what it can, then joins the
  /// engine. The derived constructor calls it last.
  void start();
  /// Posts a recv_reduce before its dependencies are done: its data then flows while
  /// earlier steps still reduce.
  void post_early(schedule::step_id id);
  /// A post the transport held (posted::held) may go now: it is posted again at once. A
  /// held post costs no round anything, where a deferred one is tried again every round.
  void release(schedule::step_id id);
  /// Step `id` has ended.
  void complete(schedule::step_id id);
  /// A receive's data is at `data` (until consumed()): copied or reduced into its
  /// destination now if the step is ready, else once it is.
  void arrive(schedule::step_id id, const std::byte* data);
  /// A peer raised flag `tag` for this call.
  void raise_flag(std::uint32_t tag, int writer);
  /// Fails this rank's call (the transport tells the other ranks); `origin`: the failure it
  /// follows from, if not its own (origin()).
  void fail(errc code, std::string message, std::string origin = {});
  /// Another rank, or an earlier call here, failed this call; `origin` names where it began.
  void fail_from(errc code, const std::string& origin);
  /// Ends this call with `message` as it is, telling no one (an abort they know of).
  void abandon(errc code, std::string message, std::string origin = {});
  /// Starts loading what running or completing step `id` touches: a transport that
  /// knows which steps of many calls come next (a simulator of thousands of ranks)
  /// overlaps their cache misses instead of taking them one by one.
  void prefetch(schedule::step_id id) const {
    __builtin_prefetch(plan_->steps.data() + id);
    __builtin_prefetch(book_->steps.address(id));
    __builtin_prefetch(book_->pending.address(id));
    __builtin_prefetch(plan_->dep_begin.data() + id);
    __builtin_prefetch(plan_->successor_begin.data() + id);
  }
  /// prefetch() for the steps that are ready to start.
  void prefetch_ready_steps() const {
    for (schedule::step_id id : book_->ready) prefetch(id);
  }
  /// Gives the bookkeeping back to the transport; the executor touches it no more.
  std::unique_ptr<step_bookkeeping> release_bookkeeping() { return std::move(book_); }

  const schedule::schedule& plan() const { return *plan_; }
  const schedule::step& step_at(schedule::step_id id) const { return plan_->steps[id]; }
  const signature& sig() const { return sig_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  int last_peer() const final { return last_peer_; }
  void watch_stalls(stall_note* note) final { stall_note_.store(note, std::memory_order_release); }
  std::size_t flags_expected() const { return flags_expected_; }
  std::size_t flags_raised() const { return book_->flag_sources.size(); }
  error_context context(schedule::step_id id) const;
  error_context stuck_context() const;
  /// Which step waits for what, from whom: "waiting for data from rank 1 (recv, tag 3)".
  std::string stuck_reason() const;

  host_buffers mem_;

  /// One round; a transport that drives its calls itself (the simulator, whose time is
  /// not the clock's) runs rounds directly instead of through the engine.
  inline bool advance() final;

 private:
  inline void idle(int rounds) final;
  bool start_ready();
  bool retry_queued();
  void post_now(schedule::step_id id);
  /// post(), or deferred while a send or write would read device input still being made.
  posted try_post(schedule::step_id id);
  /// The device failed or refused this call's work; false (the step is not done).
  [[gnu::cold]] bool device_failed(const error& e);
  /// Ends the call's device work after a failure: what peers lent is let go of, and the
  /// caller's stream goes on.
  void settle_device_after_failure();
  void consume(schedule::step_id id, const std::byte* data);
  std::uint32_t flags(std::uint32_t tag) const { return tag < book_->flags.size() ? book_->flags[tag] : 0; }
  /// The step a stuck call waits on: a receive or wait before a send; none: -1.
  std::int64_t stuck_step() const;
  /// Every step done, only work queued on the rank's stream left: no peer holds the call.
  bool device_work_only() const { return completed_ == plan_->steps.size() && device_ && device_->working(); }
  void check_time();
  void note_stall() const;  // the stuck step into watch_stalls()' note (stall path only)

  // What every round reads comes first, together (with execution's and mem_, two cache
  // lines); the call's clock, which only a call that waits long reads, is kept in the
  // bookkeeping (step_bookkeeping::clock). A simulator keeps thousands of executors, and
  // every line of each is loaded at each of its turns.
  std::shared_ptr<const schedule::schedule> plan_;
  std::unique_ptr<step_bookkeeping> book_;
  std::size_t completed_ = 0;
  std::unique_ptr<device_steps> device_;
  std::unique_ptr<host_staging> staging_;
  const reduce::host_kernels& kernels_;
  int last_peer_ = -1;      // of the last receive done
  bool concluded_ = false;  // conclude() said yes; the output may still be on its way back
  signature sig_;
  std::chrono::milliseconds timeout_;
  std::size_t flags_expected_ = 0;  // the sum of the waits' counts
  direct_collective* direct_ = nullptr;  // run_directly(); last, apart from what every round reads
  std::shared_ptr<shared_fate> fate_;    // share_fate(); read at posts and failures only
  std::atomic<stall_note*> stall_note_{nullptr};  // watch_stalls(); stalls only
};

// ---- implementation ---------------------------------------------------------------------

inline step_executor::step_executor(progress_engine& engine, std::shared_ptr<const schedule::schedule> plan,
                                    const signature& sig, const reduce::host_kernels& kernels,
                                    std::chrono::milliseconds timeout, std::unique_ptr<step_bookkeeping> book)
    : execution(engine),
      plan_(std::move(plan)),
      book_(book ? std::move(book) : std::make_unique<step_bookkeeping>()),
      kernels_(kernels),
      sig_(sig),
      timeout_(bounded_timeout(timeout)) {  // a per-call milliseconds::max() must not overflow the deadline
  const std::size_t n = plan_->steps.size();
  const bool counted = book_->pending.lent();  // the lender set the counts (step_column::lend)
  if (!counted) book_->pending.reset(n, 0);
  if (!book_->steps.lent()) book_->steps.reset(n, step_bookkeeping::status{});
  book_->ready.clear();
  book_->queued.clear();
  book_->unstaged.clear();
  book_->clock = {};
  book_->flag_waits.clear();
  book_->flag_sources.clear();
  std::uint32_t most_tag = 0;
  bool waits = false;
  for (std::size_t i = 0; i < n; ++i) {
    const schedule::step& st = plan_->steps[i];
    if (!counted) book_->pending[i] = static_cast<std::uint32_t>(plan_->deps(static_cast<schedule::step_id>(i)).size());
    if (st.kind == schedule::step_kind::wait && st.count > 0) {
      flags_expected_ += st.count;
      most_tag = std::max(most_tag, st.tag);
      waits = true;
    }
  }
  book_->flags.assign(waits ? std::size_t(most_tag) + 1 : 0, 0);
}

inline void step_executor::start() {
  if (!finished()) {
    for (std::size_t i = 0; i < plan_->steps.size(); ++i)  // the plan, not the counts: one cache line a step when lent
      if (plan_->dep_begin[i + 1] == plan_->dep_begin[i]) book_->ready.push_back(static_cast<schedule::step_id>(i));
    while (!finished() && advance()) {
    }
  }
  enter();
}

inline bool step_executor::advance() {
  if (finished()) return false;
  bool changed = false;
  try {
    changed = device_ && device_->poll();
    if (staging_) changed |= staging_->poll();
  } catch (const error& e) {  // the device failed work of this call (a progress thread must not throw)
    device_failed(e);
    return true;
  }
  // Once concluded (fabric gave its workspace to the next call), only a staged output's way back is left.
  if (!concluded_) {
    changed |= poll();
    if (finished()) return true;
    changed |= retry_queued();
    changed |= start_ready();
  }
  try {  // the device may fail the last work queued (a progress thread must not throw)
    if (!finished() && completed_ == plan_->steps.size() && (!device_ || device_->settled())) {
      if (!concluded_) concluded_ = conclude();
      if (concluded_ && (!staging_ || staging_->returned())) {
        succeed();
        if (device_) device_->finish();
        changed = true;
      }
    }
  } catch (const error& e) {
    if (!finished()) device_failed(e);  // after succeed(), the call's work has all run
    return true;
  }
  return changed;
}

inline void step_executor::idle(int rounds) {
  if (!concluded_) stalled(rounds);
  // The clock is read once in 64 idle rounds: on a VM a read costs a tenth of a small call.
  if (finished() || (rounds != 1 && (rounds & 63) != 0)) return;
  check_time();
}

inline bool step_executor::start_ready() {
  auto& ready = book_->ready;
  if (staging_ && !book_->unstaged.empty()) {  // steps that waited for their input: again
    ready.insert(ready.end(), book_->unstaged.begin(), book_->unstaged.end());
    book_->unstaged.clear();
  }
  if (ready.empty()) return false;
  bool started = false;
  // Index loop: completing a local step appends to ready.
  for (std::size_t k = 0; k < ready.size() && !finished(); ++k) {
    const schedule::step_id id = ready[k];
    const schedule::step& st = step_at(id);
    if (staging_ && !staging_->readable(st)) {  // its input is still on its way to the host
      book_->unstaged.push_back(id);
      continue;
    }
    started = true;
    auto& s = book_->steps[id];
    s.ready = true;
    switch (st.kind) {
      case schedule::step_kind::send:
      case schedule::step_kind::write:
      case schedule::step_kind::notify:
        post_now(id);
        break;
      case schedule::step_kind::recv:
      case schedule::step_kind::recv_reduce:
        if (s.arrived)  // a transport that takes messages before their receive is ready
          consume(id, arrived_data(id));
        else if (!s.posted && !s.queued && !posts_early(id))
          post_now(id);
        break;
      case schedule::step_kind::wait:  // count 0: a join of its dependencies; else flags from peers
        if (st.count == 0 || flags(st.tag) >= st.count)
          complete(id);
        else
          book_->flag_waits.push_back(id);
        break;
      default:
        if (run_local(id))
          complete(id);
        else
          s.posted = true;
    }
  }
  ready.clear();
  return started;
}

inline step_executor::posted step_executor::try_post(schedule::step_id id) {
  // On device memory nothing leaves before the caller's stream has reached the call: a
  // send or write, which the wire or a peer reads, and a notify, which may let a peer
  // write this rank's output (GDRAA's sync 1 of an allgather or broadcast).
  if (device_) {
    const auto kind = step_at(id).kind;
    if ((kind == schedule::step_kind::send || schedule::is_one_sided(kind)) && !device_->input_ready())
      return posted::deferred;
  }
  if (fate_ && fate_->failed()) [[unlikely]] {  // after the input check: a failed part's gate opened it
    fail(fate_->code(), "rank " + std::to_string(plan_->rank) + ": " + to_string(sig_) +
                            " is a part of a call whose earlier part failed: " + fate_->why());
    return posted::done;  // nothing completes: the call has ended
  }
  return post(id);
}

inline void step_executor::post_now(schedule::step_id id) {
  auto& s = book_->steps[id];
  switch (try_post(id)) {
    case posted::started:
      if (!finished()) s.posted = true;
      break;
    case posted::done:
      if (!finished()) complete(id);
      break;
    case posted::deferred:
      s.queued = true;
      book_->queued.push_back(id);
      break;
    case posted::held:
      s.queued = true;
      break;
  }
}

inline void step_executor::release(schedule::step_id id) {
  auto& s = book_->steps[id];
  if (!s.queued || s.done || finished()) return;
  s.queued = false;
  post_now(id);
}

inline void step_executor::post_early(schedule::step_id id) {
  auto& s = book_->steps[id];
  if (s.posted || s.queued || s.done) return;
  post_now(id);
}

/// Retries every post that met back-pressure, keeping those still refused in order: a
/// full queue to one peer must not hold back messages to the others (one of which may be
/// what that peer waits for).
inline bool step_executor::retry_queued() {
  auto& queued = book_->queued;
  if (queued.empty()) return false;
  std::size_t kept = 0;
  const std::size_t before = queued.size();
  for (std::size_t k = 0; k < before; ++k) {
    const schedule::step_id id = queued[k];
    if (finished()) return true;
    auto& s = book_->steps[id];
    const posted r = try_post(id);
    if (finished()) return true;
    if (r == posted::deferred) {
      queued[kept++] = id;
      continue;
    }
    if (r == posted::held) continue;  // queued still, until release()
    s.queued = false;
    if (r == posted::started)
      s.posted = true;
    else
      complete(id);
  }
  queued.resize(kept);
  return kept < before;
}

inline void step_executor::complete(schedule::step_id id) {
  if (const auto& st = plan_->steps[id]; st.kind == schedule::step_kind::recv || st.kind == schedule::step_kind::recv_reduce)
    last_peer_ = st.peer;
  auto& s = book_->steps[id];
  s.posted = false;
  s.done = true;
  ++completed_;
  if (staging_) staging_->written(plan_->steps[id]);
  schedule::release_successors(*plan_, id, book_->pending, book_->ready);
}

inline void step_executor::raise_flag(std::uint32_t tag, int writer) {
  book_->flag_sources.emplace_back(tag, writer);
  if (tag >= book_->flags.size()) return;  // no wait of this rank's counts it
  ++book_->flags[tag];
  auto& waits = book_->flag_waits;
  std::size_t kept = 0;
  for (schedule::step_id id : waits) {
    if (flags(step_at(id).tag) >= step_at(id).count)
      complete(id);
    else
      waits[kept++] = id;
  }
  waits.resize(kept);
}

}  // namespace mimatrix::transport

#include "mimatrix/transport/detail/step_failure.hpp"
#include "mimatrix/transport/detail/step_local_work.hpp"

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
#include <cstring>
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
#include "mimatrix/transport/host_steps.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::transport {

/// A call's bookkeeping. A transport may keep one across calls (step_executor takes and
/// returns it) so that the steady state allocates nothing.
struct step_bookkeeping {
  struct status {  // one byte: a simulator holds one a step for thousands of ranks
    bool ready : 1 = false;    // its dependencies are done
    bool posted : 1 = false;   // the transport has it and it has not ended
    bool queued : 1 = false;   // refused by back-pressure; retried in order
    bool arrived : 1 = false;  // a receive's data came before the step was ready
    bool done : 1 = false;
  };
  static_assert(sizeof(status) == 1);
  std::vector<std::uint32_t> pending;  // unfinished dependencies, per step
  std::vector<status> steps;
  std::vector<schedule::step_id> ready, queued, flag_waits;
  std::vector<std::uint32_t> flags;                         // flags arrived, by tag
  std::vector<std::pair<std::uint32_t, int>> flag_sources;  // (tag, writer) of each flag
};

class step_executor : public execution {
 public:
  using clock = std::chrono::steady_clock;

 protected:
  /// What a transport's post() did with a step.
  enum class posted : std::uint8_t {
    started,   // it ends later: complete(), arrive() or fail()
    done,      // it ended at once (or the call failed)
    deferred,  // back-pressure: retried next round, after those refused before it
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
  /// Every step is done: the transport's last checks; true once the call may succeed.
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
  /// Peers whose processes have ended, as the transport can tell without their answer
  /// ("rank 2 (pid 4242)"; none or cannot tell: ""). Asked every ended_check_interval
  /// of a stuck call.
  virtual std::string ended_peers() const { return {}; }
  /// What the message of a stuck call adds (ranks that never came, the post cap).
  virtual std::string stall_detail() const { return {}; }
  /// How a receive's data moves, for the message of a stuck call ("through shared memory").
  virtual std::string_view route(schedule::step_id id) const {
    (void)id;
    return {};
  }
  /// Whether the transport posts this recv_reduce itself, through post_early(), in an
  /// order of its own (staging slots), rather than once its dependencies are done.
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
  virtual bool land(schedule::step_id id, const std::byte* data);
  /// Runs a reduce, reduce_slots, copy or finalize step: true when done now, false when
  /// the transport completes it later.
  virtual bool run_local(schedule::step_id id);
  /// The transport's part of ending with an error: tell the others (unless the failure
  /// came from them), take back what is posted, let go of the call's memory.
  virtual void on_failure(errc code, bool tell_others) = 0;

  // ---- what a transport calls -------------------------------------------------------

  /// The call's buffers are device memory of `caller`'s port: its local steps and
  /// landings run on `own`, after `caller`'s earlier work and before its later work
  /// (device_steps.hpp). The derived constructor calls it before start().
  void run_on_device(const device::stream& caller, device::stream_handle own) {
    device_ = std::make_unique<device_steps>(caller, own, kernels_, plan_->desc.size);
  }
  device_steps* device() { return device_.get(); }
  /// Releases the steps without dependencies and runs what it can, then joins the
  /// engine. The derived constructor calls it last.
  void start();
  /// Posts a recv_reduce before its dependencies are done: its data then flows while
  /// earlier steps still reduce.
  void post_early(schedule::step_id id);
  /// Step `id` has ended.
  void complete(schedule::step_id id);
  /// A receive's data is at `data` (until consumed()): copied or reduced into its
  /// destination now if the step is ready, else once it is.
  void arrive(schedule::step_id id, const std::byte* data);
  /// A peer raised flag `tag` for this call.
  void raise_flag(std::uint32_t tag, int writer);
  /// Fails this rank's call (the transport tells the other ranks).
  void fail(errc code, std::string message);
  /// Another rank failed this call.
  void fail_from(errc code, const std::string& message);
  /// Ends this call with `message` as it is, telling no one (an abort they know of).
  void abandon(errc code, std::string message);
  /// Starts loading what running or completing step `id` touches: a transport that
  /// knows which steps of many calls come next (a simulator of thousands of ranks)
  /// overlaps their cache misses instead of taking them one by one.
  void prefetch(schedule::step_id id) const {
    __builtin_prefetch(plan_->steps.data() + id);
    __builtin_prefetch(book_->steps.data() + id);
    __builtin_prefetch(book_->pending.data() + id);
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
  std::size_t flags_expected() const { return flags_expected_; }
  std::size_t flags_raised() const { return book_->flag_sources.size(); }
  error_context context(schedule::step_id id) const;
  error_context stuck_context() const;
  /// Which step waits for what, from whom: "waiting for data from rank 1 (recv, tag 3)".
  std::string stuck_reason() const;

  host_buffers mem_;

  /// One round; a transport that drives its calls itself (the simulator, whose time is
  /// not the clock's) runs rounds directly instead of through the engine.
  bool advance() final;

 private:
  void idle(int rounds) final;
  bool start_ready();
  bool retry_queued();
  void post_now(schedule::step_id id);
  /// post(), or deferred while a send or write would read device input still being made.
  posted try_post(schedule::step_id id);
  /// Ends the call's device work after a failure: what peers lent is let go of, and the
  /// caller's stream goes on.
  void settle_device_after_failure();
  void consume(schedule::step_id id, const std::byte* data);
  std::uint32_t flags(std::uint32_t tag) const { return tag < book_->flags.size() ? book_->flags[tag] : 0; }
  /// The step a stuck call waits on: a receive or wait before a send; none: -1.
  std::int64_t stuck_step() const;
  void check_time();

  std::shared_ptr<const schedule::schedule> plan_;
  signature sig_;
  const reduce::host_kernels& kernels_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<step_bookkeeping> book_;
  std::unique_ptr<device_steps> device_;
  std::size_t completed_ = 0;
  std::size_t flags_expected_ = 0;  // the sum of the waits' counts
  clock::time_point deadline_, probe_at_, ended_check_at_;
  bool clock_started_ = false;
  int last_peer_ = -1;  // of the last receive done
  bool probed_ = false;
};

/// How often a stuck call asks whether a peer's process has ended: a killed peer on this
/// host is named within about twice this.
inline constexpr std::chrono::milliseconds ended_check_interval{100};

/// How long a liveness probe waits for answers: an eighth of the call's timeout, between
/// 50 ms and 1 s.
inline std::chrono::milliseconds probe_grace(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

// ---- implementation ---------------------------------------------------------------------

inline step_executor::step_executor(progress_engine& engine, std::shared_ptr<const schedule::schedule> plan,
                                    const signature& sig, const reduce::host_kernels& kernels,
                                    std::chrono::milliseconds timeout, std::unique_ptr<step_bookkeeping> book)
    : execution(engine),
      plan_(std::move(plan)),
      sig_(sig),
      kernels_(kernels),
      timeout_(bounded_timeout(timeout)),  // a per-call milliseconds::max() must not overflow the deadline
      book_(book ? std::move(book) : std::make_unique<step_bookkeeping>()) {
  const std::size_t n = plan_->steps.size();
  book_->pending.resize(n);
  book_->steps.assign(n, step_bookkeeping::status{});
  book_->ready.clear();
  book_->queued.clear();
  book_->flag_waits.clear();
  book_->flag_sources.clear();
  std::uint32_t most_tag = 0;
  bool waits = false;
  for (std::size_t i = 0; i < n; ++i) {
    const schedule::step& st = plan_->steps[i];
    book_->pending[i] = static_cast<std::uint32_t>(plan_->deps(static_cast<schedule::step_id>(i)).size());
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
    for (std::size_t i = 0; i < plan_->steps.size(); ++i)
      if (book_->pending[i] == 0) book_->ready.push_back(static_cast<schedule::step_id>(i));
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
  } catch (const error& e) {  // the device failed work of this call (a progress thread must not throw)
    fail(e.code() == errc::cuda ? errc::cuda : errc::transport, describe(stuck_context(), e.what()));
    return true;
  }
  changed |= poll();
  if (finished()) return true;
  changed |= retry_queued();
  changed |= start_ready();
  if (!finished() && completed_ == plan_->steps.size() && (!device_ || device_->settled()) && conclude()) {
    succeed();
    if (device_) device_->finish();
    changed = true;
  }
  return changed;
}

inline void step_executor::idle(int rounds) {
  stalled(rounds);
  // The clock is read once in 64 idle rounds: on a VM a read costs a tenth of a small call.
  if (finished() || (rounds != 1 && (rounds & 63) != 0)) return;
  check_time();
}

inline bool step_executor::start_ready() {
  auto& ready = book_->ready;
  if (ready.empty()) return false;
  // Index loop: completing a local step appends to ready.
  for (std::size_t k = 0; k < ready.size() && !finished(); ++k) {
    const schedule::step_id id = ready[k];
    const schedule::step& st = step_at(id);
    auto& s = book_->steps[id];
    s.ready = true;
    switch (st.kind) {
      case schedule::step_kind::send:
      case schedule::step_kind::write:
      case schedule::step_kind::notify:
        post_now(id);
        break;
      case schedule::step_kind::recv:
        if (s.arrived)  // a transport that takes messages before their receive is ready
          consume(id, arrived_data(id));
        else
          post_now(id);
        break;
      case schedule::step_kind::recv_reduce:
        if (s.arrived)
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
  return true;
}

inline step_executor::posted step_executor::try_post(schedule::step_id id) {
  if (device_) {
    const auto kind = step_at(id).kind;
    if ((kind == schedule::step_kind::send || kind == schedule::step_kind::write) && !device_->input_ready())
      return posted::deferred;
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
  }
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
  schedule::release_successors(*plan_, id, book_->pending, book_->ready);
}

inline void step_executor::arrive(schedule::step_id id, const std::byte* data) {
  if (book_->steps[id].ready)
    consume(id, data);
  else
    book_->steps[id].arrived = true;
}

inline bool step_executor::run_local(schedule::step_id id) {
  if (!device_) {
    run_local_step(kernels_, step_at(id), mem_, plan_->desc.size);
    return true;
  }
  device_->run_local(step_at(id), mem_);
  if (device_steps::feeds_stream_only(*plan_, id)) return true;
  device_->then([this, id] {
    if (!finished()) complete(id);
  });
  return false;
}

inline bool step_executor::land(schedule::step_id id, const std::byte* data) {
  const schedule::step& st = step_at(id);
  if (!data) return true;
  if (device_) {
    device_->land(st, mem_, data);
    device_->then([this, id] {
      consumed(id);
      if (!finished()) complete(id);
    });
    return false;
  }
  if (st.kind == schedule::step_kind::recv_reduce)
    kernels_.combine(mem_.write(st.dst), mem_.read(st.src), data, st.dst.bytes);
  else if (st.dst.bytes)
    std::memcpy(mem_.write(st.dst), data, st.dst.bytes);
  return true;
}

inline void step_executor::consume(schedule::step_id id, const std::byte* data) {
  book_->steps[id].arrived = false;
  if (!land(id, data)) {
    book_->steps[id].posted = true;  // the transport completes it
    return;
  }
  consumed(id);
  complete(id);
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

inline void step_executor::fail(errc code, std::string message) {
  if (finished()) return;
  end_with(code, std::move(message));
  settle_device_after_failure();
  on_failure(code, true);
}

inline void step_executor::abandon(errc code, std::string message) {
  if (finished()) return;
  end_with(code, std::move(message));
  settle_device_after_failure();
  on_failure(code, false);
}

inline void step_executor::fail_from(errc code, const std::string& message) {
  if (finished()) return;
  end_with(code, "rank " + std::to_string(plan_->rank) + ": " + to_string(sig_) + " failed on another rank: " +
                     message);
  settle_device_after_failure();
  on_failure(code, false);
}

inline void step_executor::settle_device_after_failure() {
  if (!device_) return;
  device_->drain();
  device_->finish();
}

/// The deadline counts from the call's first idle round, not its start: most small calls
/// never wait, and reading the clock costs.
inline void step_executor::check_time() {
  const auto now = clock::now();
  if (!clock_started_) {
    clock_started_ = true;
    deadline_ = now + timeout_;
    // Probe peers' liveness a little before the deadline, so a lost rank is named within it.
    probe_at_ = deadline_ - 2 * probe_grace(timeout_);
    ended_check_at_ = now + ended_check_interval;
  }
  if (now >= ended_check_at_) {
    ended_check_at_ = now + ended_check_interval;
    if (const std::string gone = ended_peers(); !gone.empty()) {
      while (advance()) {  // what it sent before it exited may still be queued
      }
      if (finished()) return;
      return fail(errc::peer_lost, describe(stuck_context(), gone + " exited or was killed (no such process on "
                                                                    "this host now); this rank was " + stuck_reason()));
    }
  }
  if (probes() && !probed_ && now >= probe_at_) {
    probed_ = true;
    const std::vector<int> silent = silent_peers(probe_grace(timeout_));
    while (advance()) {  // the probe progressed the transport: the call may be done
    }
    if (finished()) return;
    if (!silent.empty()) {
      std::string who;
      for (int r : silent) who += (who.empty() ? "" : ", ") + std::to_string(r);
      return fail(errc::peer_lost,
                  describe(stuck_context(), "rank(s) " + who +
                                                " did not answer a liveness probe (exited, killed, or stuck outside "
                                                "mimatrix) while " + stuck_reason()));
    }
  }
  if (clock::now() >= deadline_)
    fail(errc::timeout,
         describe(stuck_context(), "timed out after " + std::to_string(timeout_.count()) + " ms " + stuck_reason()));
}

inline std::int64_t step_executor::stuck_step() const {
  const auto& steps = book_->steps;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto kind = plan_->steps[i].kind;
    const bool receives = kind == schedule::step_kind::recv || kind == schedule::step_kind::recv_reduce ||
                          kind == schedule::step_kind::wait;
    if (receives && steps[i].ready && !steps[i].done) return std::int64_t(i);
  }
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i].posted || steps[i].queued) return std::int64_t(i);
  return -1;
}

inline error_context step_executor::context(schedule::step_id id) const {
  const schedule::step& st = step_at(id);
  return {plan_->rank, st.peer, schedule::to_string(sig_.kind), static_cast<std::int64_t>(sig_.sequence),
          static_cast<std::int64_t>(id), static_cast<std::int64_t>(st.bytes())};
}

inline error_context step_executor::stuck_context() const {
  if (const std::int64_t id = stuck_step(); id >= 0) return context(static_cast<schedule::step_id>(id));
  return {plan_->rank, -1, schedule::to_string(sig_.kind), static_cast<std::int64_t>(sig_.sequence)};
}

inline std::string step_executor::stuck_reason() const {
  std::string why;
  const std::int64_t at = stuck_step();
  if (at < 0) {
    why = completed_ == plan_->steps.size() ? "with every step done, waiting for the other ranks to end the call"
                                            : "with " + std::to_string(plan_->steps.size() - completed_) +
                                                  " steps left";
  } else {
    const auto id = static_cast<schedule::step_id>(at);
    const schedule::step& st = step_at(id);
    const std::string kind(schedule::to_string(st.kind));
    if (st.kind == schedule::step_kind::wait) {
      std::string from;
      for (const auto& [tag, source] : book_->flag_sources)
        if (tag == st.tag) from += (from.empty() ? "" : ", ") + std::to_string(source);
      why = "in a wait for " + std::to_string(st.count) + " flags with tag " + std::to_string(st.tag) +
            ", of which " + std::to_string(flags(st.tag)) + " arrived" +
            (from.empty() ? "" : " (from rank(s) " + from + ")");
    } else if (st.kind == schedule::step_kind::recv || st.kind == schedule::step_kind::recv_reduce) {
      const std::string_view via = route(id);
      why = "waiting for data from rank " + std::to_string(st.peer) + " (" + kind + ", tag " +
            std::to_string(st.tag) + (via.empty() ? "" : ", " + std::string(via)) + ")";
    } else {
      why = "waiting for rank " + std::to_string(st.peer) + " to take a " + kind + " (tag " +
            std::to_string(st.tag) + ")";
    }
  }
  if (const auto& queued = book_->queued; !queued.empty()) {
    std::size_t receives = 0;
    for (schedule::step_id id : queued) receives += step_at(id).kind == schedule::step_kind::send ? 0 : 1;
    why += "; " + std::to_string(queued.size()) + " post(s) held back by back-pressure (" + std::to_string(receives) +
           " of them receives), first step " + std::to_string(queued.front()) + " to rank " +
           std::to_string(step_at(queued.front()).peer);
  }
  return why + stall_detail();
}

}  // namespace mimatrix::transport

// One simulated rank's run of its schedule: the step executor's port, with posts handed
// to the simulation (flows on the network, work on the rank's processor) and arrivals
// handed back by it. Also tracks each step's depth in chains of messages.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/host_steps.hpp"
#include "mimatrix/transport/simulated/compute_costs.hpp"
#include "mimatrix/transport/step_bookkeeping.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport::simulated::detail {

inline constexpr std::uint32_t no_message = 0xFFFFFFFFu;

/// A step's depth in chains of messages, and its message's (depths saturate at 65534).
/// The simulation keeps them for all ranks in one table, step by step: ranks that run in
/// step then touch neighbouring entries, not one cache line each.
struct step_depth {
  std::uint16_t known = 0;     // depth + 1; 0: not yet settled
  std::uint16_t incoming = 0;  // of the message a receive took
};

/// A schedule's receives by (peer, tag), sorted: a message finds its step. Generators
/// emit them in order, so the sort is usually skipped. Shared by the ranks that share
/// the schedule.
struct receive_index {
  std::vector<std::uint64_t> keys;
  std::vector<schedule::step_id> steps;

  static std::uint64_t key(int peer, std::uint32_t tag) { return (std::uint64_t(std::uint32_t(peer)) << 32) | tag; }

  explicit receive_index(const schedule::schedule& plan) {
    for (schedule::step_id id = 0; id < plan.steps.size(); ++id) {
      const schedule::step& st = plan.steps[id];
      if (st.kind != schedule::step_kind::recv && st.kind != schedule::step_kind::recv_reduce) continue;
      keys.push_back(key(st.peer, st.tag));
      steps.push_back(id);
    }
    if (std::is_sorted(keys.begin(), keys.end())) return;
    std::vector<std::pair<std::uint64_t, schedule::step_id>> both(keys.size());
    for (std::size_t i = 0; i < both.size(); ++i) both[i] = {keys[i], steps[i]};
    std::sort(both.begin(), both.end());
    for (std::size_t i = 0; i < both.size(); ++i) std::tie(keys[i], steps[i]) = both[i];
  }
};

/// What a simulated rank asks of its simulation.
class rank_host {
 public:
  virtual const compute_costs& costs() const = 0;
  /// A send, write or notify of `st` by `rank`'s step `id` to `peer`, `depth` messages deep.
  virtual void send(int rank, int peer, schedule::step_id id, const schedule::step& st, const std::byte* data,
                    std::uint32_t depth) = 0;
  /// The rank's processor works `seconds` on step `id`, after what it does already.
  virtual void compute(int rank, schedule::step_id id, double seconds) = 0;
  /// The depth a flag with `tag` brings to `rank`.
  virtual std::uint32_t flag_depth(int rank, std::uint32_t tag) const = 0;
  /// A held message's data, and its end once the receive has consumed it.
  virtual const std::byte* data(std::uint32_t m) const = 0;
  virtual void release(std::uint32_t m) = 0;

 protected:
  ~rank_host() = default;
};

class rank_execution final : public step_executor {
 public:
  /// `plan` may be another rank's whose schedule is this one's up to a rotation of the
  /// ranks (without payload only): its peers are then shifted by the difference. Step
  /// i's depth is depths[i * stride]. `book` is handed to the executor. With `payloads`
  /// the rank moves real data; its input or output may still be null where the call
  /// gives it none (a reduce's output off the root, a scatter's input).
  rank_execution(rank_host& sim, progress_engine& engine, int rank, std::shared_ptr<const schedule::schedule> plan,
                 std::shared_ptr<const receive_index> receives, const signature& sig,
                 const reduce::host_kernels& kernels, bool payloads, const std::byte* input, std::byte* output,
                 step_depth* depths, std::size_t stride, std::unique_ptr<step_bookkeeping> book)
      : rank_execution(sim, engine, rank, std::move(plan), std::move(receives), sig, kernels, payloads, input, output,
                       depths, stride, std::move(book), *book) {}

  ~rank_execution() override {
    if (!finished()) abandon(errc::aborted, "transport::simulated: the simulation ended before this rank's call");
    leave();
  }

  int rank() const { return rank_; }
  /// Rounds until nothing moves; true once the call has ended. A round after which
  /// round_idle() holds would move nothing: it is not run.
  bool run_rounds() {
    while (!finished() && advance() && !round_idle()) {
    }
    return finished();
  }
  /// Whether a round now would do nothing: no step is ready or refused, and one is still
  /// with the simulation (so the call cannot end yet). Such a rank is not given a round:
  /// thousands of ranks in step would each take two rounds a message for nothing.
  bool round_idle() const { return outstanding_ > 0 && book_.ready.empty() && book_.queued.empty(); }
  std::string why_stuck() const { return stuck_reason(); }

 private:
  rank_execution(rank_host& sim, progress_engine& engine, int rank, std::shared_ptr<const schedule::schedule> plan,
                 std::shared_ptr<const receive_index> receives, const signature& sig,
                 const reduce::host_kernels& kernels, bool payloads, const std::byte* input, std::byte* output,
                 step_depth* depths, std::size_t stride, std::unique_ptr<step_bookkeeping>&& book,
                 const step_bookkeeping& view)
      : step_executor(engine, std::move(plan), sig, kernels, std::chrono::hours(24), std::move(book)),  // time is simulated
        book_(view),
        sim_(sim),
        rank_(rank),
        size_(this->plan().desc.size),
        shift_(((rank - this->plan().rank) % size_ + size_) % size_),
        receives_(std::move(receives)),
        depths_(depths),
        stride_(stride) {
    if (payloads) {
      payload_ = std::make_unique<payload>();
      payload_->scratch.resize(this->plan().scratch_bytes);
      payload_->held.assign(this->plan().steps.size(), no_message);
    }
    mem_ = {input, output, payloads ? payload_->scratch.data() : nullptr};
    start();
  }

 public:
  // Thousands of ranks' state is far apart and cold at each one's turn: the simulation
  // loads what a rank's next turn touches a few turns ahead, so that misses overlap. These
  // read this object and its bookkeeping, which the simulation loaded before.

  /// What the next arrival touches: the receive it most likely matches.
  void prefetch_arrival() const {
    if (next_receive_ < receives_->steps.size()) prefetch_step(receives_->steps[next_receive_]);
  }
  /// What a round's ready steps touch, and the list itself.
  void prefetch_ready_list() const { __builtin_prefetch(book_.ready.data()); }
  void prefetch_ready() const {
    for (schedule::step_id id : book_.ready) {
      prefetch_step(id);
      for (schedule::step_id dep : plan().deps(id)) __builtin_prefetch(depths_ + dep * stride_);
    }
  }
  /// What running or completing step `id` touches: its state, and its successors' counts.
  void prefetch_step(schedule::step_id id) const {
    __builtin_prefetch(book_.steps.address(id), 1);
    __builtin_prefetch(depths_ + id * stride_, 1);
    __builtin_prefetch(book_.ready.data(), 1);
    for (schedule::step_id next : plan().successors(id)) __builtin_prefetch(book_.pending.address(next), 1);
  }

  /// Step `id` has ended (a send's last byte left, a write landed, work done).
  void finish(schedule::step_id id) {
    --outstanding_;
    complete(id);
  }
  /// A raised flag.
  void flag(std::uint32_t tag, int writer) { raise_flag(tag, writer); }
  /// A message from `from` with `tag` arrived, with `depth` messages behind it; its data
  /// is message `m` of the simulation (or no_message without payload).
  void take(int from, std::uint32_t tag, std::uint32_t m, std::uint32_t depth) {
    const std::uint64_t key = receive_index::key(unshifted(from), tag);
    const auto& keys = receives_->keys;
    // Messages mostly come in the order of their receives: try the one after the last.
    std::size_t at = next_receive_;
    if (at >= keys.size() || keys[at] != key) {
      at = std::size_t(std::lower_bound(keys.begin(), keys.end(), key) - keys.begin());
      if (at == keys.size() || keys[at] != key)
        throw error(errc::mismatch, "transport::simulated: rank " + std::to_string(rank_) +
                                        " got a message from rank " + std::to_string(from) + " with tag " +
                                        std::to_string(tag) + " that no receive of its schedule takes");
    }
    next_receive_ = at + 1;
    const schedule::step_id id = receives_->steps[at];
    depths_[id * stride_].incoming = saturated(depth);
    if (payload_) payload_->held[id] = m;
    arrive(id, m == no_message ? nullptr : sim_.data(m));
  }
  /// A write's data lands in this rank's output or scratch.
  void land_write(const schedule::region& dst, const std::vector<std::byte>& data) {
    if (payload_ && !data.empty()) std::memcpy(mem_.write(dst), data.data(), data.size());
  }

 private:
  // ---- the port ---------------------------------------------------------------------

  posted post(schedule::step_id id) override {
    const schedule::step& st = step_at(id);
    if (st.kind == schedule::step_kind::recv || st.kind == schedule::step_kind::recv_reduce)
      return posted::started;  // matched when its message arrives
    const std::uint32_t depth = settle(id, 0);
    ++outstanding_;  // first: a flag or an empty send may finish() within send()
    sim_.send(rank_, shifted(st.peer), id, st,
              st.kind == schedule::step_kind::notify || !payload_ ? nullptr : mem_.read(st.src), depth);
    return posted::started;
  }

  bool poll() override { return false; }  // the simulation pushes completions

  const std::byte* arrived_data(schedule::step_id id) override {
    return !payload_ || payload_->held[id] == no_message ? nullptr : sim_.data(payload_->held[id]);
  }

  bool land(schedule::step_id id, const std::byte* data) override {
    const schedule::step& st = step_at(id);
    settle(id, depths_[id * stride_].incoming);
    step_executor::land(id, data);
    if (payload_ && payload_->held[id] != no_message) {
      sim_.release(payload_->held[id]);
      payload_->held[id] = no_message;
    }
    const compute_costs& c = sim_.costs();
    const double rate = st.kind == schedule::step_kind::recv_reduce ? c.reduce_bytes_per_second : c.copy_bytes_per_second;
    return charge(id, st.dst.bytes, rate);
  }

  bool run_local(schedule::step_id id) override {
    const schedule::step& st = step_at(id);
    settle(id, 0);
    if (payload_) step_executor::run_local(id);
    const compute_costs& c = sim_.costs();
    switch (st.kind) {
      case schedule::step_kind::reduce: return charge(id, st.dst.bytes, c.reduce_bytes_per_second);
      case schedule::step_kind::reduce_slots: return charge(id, st.src.bytes, c.reduce_bytes_per_second);
      case schedule::step_kind::copy: return charge(id, st.dst.bytes, c.copy_bytes_per_second);
      default: return true;  // finalize: avg's division is not modelled
    }
  }

  void on_failure(errc, bool) override {}

  // ---- helpers ----------------------------------------------------------------------

  /// True (done now) when the work is free; else the processor takes it on.
  bool charge(schedule::step_id id, std::uint64_t bytes, double rate) {
    if (rate <= 0 || bytes == 0) return true;
    ++outstanding_;
    sim_.compute(rank_, id, double(bytes) / rate);
    return false;
  }

  /// Fixes step `id`'s depth once its dependencies are done: the deepest of them, or
  /// `incoming` (a message's) if deeper.
  std::uint32_t settle(schedule::step_id id, std::uint32_t incoming) {
    std::uint32_t d = incoming;
    for (schedule::step_id dep : plan().deps(id)) d = std::max(d, depth_of(dep));
    depths_[id * stride_].known = std::uint16_t(saturated(d) + 1);
    return d;
  }
  /// A done step's depth; waits are joined inside the executor, so theirs is found here.
  std::uint32_t depth_of(schedule::step_id id) {
    if (const std::uint16_t known = depths_[id * stride_].known) return known - 1u;
    const schedule::step& st = step_at(id);
    return settle(id, st.kind == schedule::step_kind::wait && st.count ? sim_.flag_depth(rank_, st.tag) : 0);
  }

  /// A peer of the schedule as this rank's, and back.
  int shifted(int peer) const { return shift_ == 0 ? peer : (peer + shift_) % size_; }
  int unshifted(int rank) const { return shift_ == 0 ? rank : (rank - shift_ + size_) % size_; }

  static std::uint16_t saturated(std::uint32_t d) { return std::uint16_t(std::min<std::uint32_t>(d, 65534)); }

  // What every turn reads first, in one cache line.
  const step_bookkeeping& book_;  // the executor's, read only (round_idle(), prefetches)
  rank_host& sim_;
  int rank_, size_, shift_;
  int outstanding_ = 0;  // steps posted to the simulation (sends, writes, notifies, work) not yet finished
  std::shared_ptr<const receive_index> receives_;
  step_depth* depths_;  // step i's: depths_[i * stride_]
  std::size_t stride_;
  std::size_t next_receive_ = 0;
  // With payloads only (small runs): apart, so that a payload-free rank is four cache lines.
  struct payload {
    std::vector<std::uint32_t> held;  // the message a receive has not consumed yet
    std::vector<std::byte> scratch;
  };
  std::unique_ptr<payload> payload_;
};

}  // namespace mimatrix::transport::simulated::detail

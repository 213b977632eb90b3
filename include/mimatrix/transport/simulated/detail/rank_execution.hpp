// One simulated rank's run of its schedule: the step executor's port, with posts handed
// to the simulation (flows on the network, work on the rank's processor) and arrivals
// handed back by it. Also tracks each step's depth in chains of messages.
#pragma once

#include <algorithm>
#include <chrono>
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
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport::simulated::detail {

inline constexpr std::uint32_t no_message = 0xFFFFFFFFu;

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
  /// ranks (without payload only): its peers are then shifted by the difference.
  rank_execution(rank_host& sim, progress_engine& engine, int rank, std::shared_ptr<const schedule::schedule> plan,
                 std::shared_ptr<const receive_index> receives, const signature& sig,
                 const reduce::host_kernels& kernels, const std::byte* input, std::byte* output)
      : step_executor(engine, std::move(plan), sig, kernels, std::chrono::hours(24), nullptr),  // time is simulated
        sim_(sim),
        rank_(rank),
        size_(this->plan().desc.size),
        shift_(((rank - this->plan().rank) % size_ + size_) % size_),
        receives_(std::move(receives)),
        depths_(this->plan().steps.size()) {
    if (output) {
      scratch_.resize(this->plan().scratch_bytes);
      held_.assign(this->plan().steps.size(), no_message);
    }
    mem_ = {input, output, output ? scratch_.data() : nullptr};
    start();
  }

  ~rank_execution() override {
    if (!finished()) abandon(errc::aborted, "transport::simulated: the simulation ended before this rank's call");
    leave();
  }

  int rank() const { return rank_; }
  /// Rounds until nothing moves; true once the call has ended.
  bool run_rounds() {
    while (!finished() && advance()) {
    }
    return finished();
  }
  std::string why_stuck() const { return stuck_reason(); }

  /// Starts loading what the next arrival, or step `id`, will touch (see prefetch()).
  void prefetch_arrival() const {
    if (next_receive_ >= receives_->steps.size()) return;
    __builtin_prefetch(receives_->keys.data() + next_receive_);
    __builtin_prefetch(receives_->steps.data() + next_receive_);
  }
  /// The steps its next round will start.
  void prefetch_ready() const { prefetch_ready_steps(); }
  void prefetch_step(schedule::step_id id) const {
    prefetch(id);
    __builtin_prefetch(depths_.data() + id);
  }

  /// Step `id` has ended (a send's last byte left, a write landed, work done).
  void finish(schedule::step_id id) { complete(id); }
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
    depths_[id].incoming = saturated(depth);
    if (!held_.empty()) held_[id] = m;
    arrive(id, m == no_message ? nullptr : sim_.data(m));
  }
  /// A write's data lands in this rank's output or scratch.
  void land_write(const schedule::region& dst, const std::vector<std::byte>& data) {
    if (mem_.output && !data.empty()) std::memcpy(mem_.write(dst), data.data(), data.size());
  }

 private:
  // ---- the port ---------------------------------------------------------------------

  posted post(schedule::step_id id) override {
    const schedule::step& st = step_at(id);
    if (st.kind == schedule::step_kind::recv || st.kind == schedule::step_kind::recv_reduce)
      return posted::started;  // matched when its message arrives
    const std::uint32_t depth = settle(id, 0);
    sim_.send(rank_, shifted(st.peer), id, st,
              st.kind == schedule::step_kind::notify || !mem_.output ? nullptr : mem_.read(st.src), depth);
    return posted::started;
  }

  bool poll() override { return false; }  // the simulation pushes completions

  const std::byte* arrived_data(schedule::step_id id) override {
    return held_.empty() || held_[id] == no_message ? nullptr : sim_.data(held_[id]);
  }

  bool land(schedule::step_id id, const std::byte* data) override {
    const schedule::step& st = step_at(id);
    settle(id, depths_[id].incoming);
    step_executor::land(id, data);
    if (!held_.empty() && held_[id] != no_message) {
      sim_.release(held_[id]);
      held_[id] = no_message;
    }
    const compute_costs& c = sim_.costs();
    const double rate = st.kind == schedule::step_kind::recv_reduce ? c.reduce_bytes_per_second : c.copy_bytes_per_second;
    return charge(id, st.dst.bytes, rate);
  }

  bool run_local(schedule::step_id id) override {
    const schedule::step& st = step_at(id);
    settle(id, 0);
    if (mem_.output) step_executor::run_local(id);
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
    sim_.compute(rank_, id, double(bytes) / rate);
    return false;
  }

  /// Fixes step `id`'s depth once its dependencies are done: the deepest of them, or
  /// `incoming` (a message's) if deeper.
  std::uint32_t settle(schedule::step_id id, std::uint32_t incoming) {
    std::uint32_t d = incoming;
    for (schedule::step_id dep : plan().deps(id)) d = std::max(d, depth_of(dep));
    depths_[id].known = std::uint16_t(saturated(d) + 1);
    return d;
  }
  /// A done step's depth; waits are joined inside the executor, so theirs is found here.
  std::uint32_t depth_of(schedule::step_id id) {
    if (depths_[id].known) return depths_[id].known - 1;
    const schedule::step& st = step_at(id);
    return settle(id, st.kind == schedule::step_kind::wait && st.count ? sim_.flag_depth(rank_, st.tag) : 0);
  }

  /// A peer of the schedule as this rank's, and back.
  int shifted(int peer) const { return shift_ == 0 ? peer : (peer + shift_) % size_; }
  int unshifted(int rank) const { return shift_ == 0 ? rank : (rank - shift_ + size_) % size_; }

  rank_host& sim_;
  int rank_, size_, shift_;
  std::shared_ptr<const receive_index> receives_;
  /// A step's depth in chains of messages, and its message's: one array of 4 bytes a
  /// step, since thousands of ranks hold one each (depths saturate at 65534).
  struct depth {
    std::uint16_t known = 0;     // depth + 1; 0: not yet settled
    std::uint16_t incoming = 0;  // of the message a receive took
  };
  static std::uint16_t saturated(std::uint32_t d) { return std::uint16_t(std::min<std::uint32_t>(d, 65534)); }
  std::vector<depth> depths_;
  std::vector<std::uint32_t> held_;  // with payloads: the message a receive has not consumed yet
  std::vector<std::byte> scratch_;
  std::size_t next_receive_ = 0;
};

}  // namespace mimatrix::transport::simulated::detail

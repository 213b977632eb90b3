// transport::simulated: every rank of a group runs its real schedule through the one
// step executor, in one process, while a flow-level model of the cluster's network and a
// per-rank compute model say how long each step takes. Time is simulated, not measured.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/progress.hpp"
#include "mimatrix/transport/simulated/cluster.hpp"
#include "mimatrix/transport/simulated/compute_costs.hpp"
#include "mimatrix/transport/simulated/detail/channels.hpp"
#include "mimatrix/transport/simulated/detail/event_queue.hpp"
#include "mimatrix/transport/simulated/detail/packed_objects.hpp"
#include "mimatrix/transport/simulated/detail/rank_execution.hpp"
#include "mimatrix/transport/simulated/detail/run_checks.hpp"
#include "mimatrix/transport/simulated/network.hpp"
#include "mimatrix/transport/step_bookkeeping.hpp"
#include "mimatrix/transport/step_executor.hpp"

namespace mimatrix::transport::simulated {

/// What one simulated call did.
struct run_result {
  double seconds = 0;                // when the last rank finished, from a common start
  std::vector<double> finished;      // each rank's finish
  std::uint64_t messages = 0;        // sends and writes
  std::uint64_t flags_only = 0;      // notifies: synchronization without data
  double network_bytes = 0;          // bytes that crossed links between ranks
  /// The longest chain of messages in which each one's sending waited for the one before
  /// it to arrive: the call's synchronizations (ring 2(p-1), halving-doubling 2 lg p,
  /// GDRAA 2).
  int message_rounds = 0;
  std::size_t schedule_bytes = 0;    // the schedules' memory, all ranks
  double wall_seconds = 0;           // the simulation's own run time (schedules built apart)
};

/// Runs one call of every rank of a group on a cluster. With payloads, every step moves
/// and reduces real data, so the results can be checked; without (null buffers), only
/// time moves, and thousands of ranks fit in memory.
///
/// @par Thread Safety
/// One thread; a simulation is used for one call and then discarded.
class simulation final : private detail::rank_host {
 public:
  simulation(cluster& net, compute_costs costs) : cluster_(net), costs_(checked(costs)) {}

  /// Runs `plans[r]` on rank r. `inputs`/`outputs` are empty (no payload) or hold one
  /// buffer per rank, sized as the plans' descriptor says.
  run_result run(const std::vector<std::shared_ptr<const schedule::schedule>>& plans,
                 const reduce::host_kernels& kernels, const std::vector<const std::byte*>& inputs = {},
                 const std::vector<std::byte*>& outputs = {});

  double now() const { return now_; }

 private:
  // ---- detail::rank_host: what a rank's execution calls -----------------------------
  const compute_costs& costs() const override { return costs_; }
  void send(int rank, int peer, schedule::step_id id, const schedule::step& st, const std::byte* data,
            std::uint32_t depth) override;
  void compute(int rank, schedule::step_id id, double seconds) override;
  std::uint32_t flag_depth(int rank, std::uint32_t tag) const override;
  const std::byte* data(std::uint32_t m) const override { return messages_[m].data.data(); }
  void release(std::uint32_t m) override;

  enum class event_kind : std::uint8_t { arrive, complete, post };
  struct event {  // its time is its run's (event_queue): ties keep the order of scheduling
    event_kind kind;
    std::uint32_t message;  // arrive, post: the message; complete: the step
    int rank;
  };
  struct message {
    int from = 0, to = 0;
    schedule::step_id step = 0;  // the sender's step
    schedule::step_kind kind = schedule::step_kind::send;
    std::uint32_t tag = 0;
    std::uint32_t depth = 0;  // of the sending step
    schedule::region dst{};   // write: where it lands at the target
    double bytes = 0;
    double latency = 0;
    std::uint32_t channel = detail::no_index;  // its connection and route (detail::channels)
    std::vector<std::byte> data;  // with payloads
  };

  std::uint32_t new_message();
  void prefetch_rank(int rank) const;
  static constexpr std::size_t ahead = 8;  // items whose memory is loaded before their turn
  void enqueue(std::uint32_t m);
  void start_flow(std::uint32_t m);
  void next_on_channel(const message& sent);
  void deliver(std::uint32_t m);
  void schedule_event(double time, event_kind kind, int rank, std::uint32_t what) {
    events_.push(time, {kind, what, rank});
  }
  void sort_done_keys();
  void touch(int rank);
  /// touch(), unless its round would do nothing (rank_execution::round_idle()).
  void wake(int rank) {
    if (!ranks_[std::size_t(rank)].round_idle()) touch(rank);
  }
  void advance_touched();
  [[noreturn]] void stuck() const;

  cluster& cluster_;
  compute_costs costs_;
  bool payloads_ = false;
  double now_ = 0, start_ = 0;
  detail::event_queue<event> events_;
  std::vector<message> messages_;
  std::vector<std::uint32_t> free_messages_;
  std::vector<std::uint32_t> flow_message_;  // by flow id
  std::vector<double> cpu_free_, nic_free_;
  std::vector<std::vector<std::uint32_t>> flag_depths_;  // by rank, by tag
  std::vector<std::unique_ptr<progress_engine>> engines_;
  detail::packed_objects<detail::rank_execution> ranks_;  // in rank order, streamed through
  std::vector<const step_bookkeeping*> books_;              // each rank's executor's, to prefetch
  std::vector<detail::step_depth> depths_;                 // step i of rank r: [i * ranks + r]
  // The executors' per-step state, likewise step by step (step_column::lend): ranks that
  // run in step share its cache lines, as they share the depths'.
  std::vector<std::uint32_t> pending_;
  std::vector<step_bookkeeping::status> statuses_;
  std::vector<int> touched_;
  std::vector<char> is_touched_;
  std::vector<link_id> path_;
  std::vector<flow_id> done_flows_;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> done_keys_;  // (from, to) of each
  detail::channels channels_;
  std::vector<event> batch_;
  run_result result_;
};

// ---- implementation ---------------------------------------------------------------------

namespace detail {
/// A progress engine's port that never waits: simulated time moves only between rounds.
struct no_pause final : progress_port {
  void pause(std::uint64_t, int) override {}
};
}  // namespace detail

inline run_result simulation::run(const std::vector<std::shared_ptr<const schedule::schedule>>& plans,
                                  const reduce::host_kernels& kernels, const std::vector<const std::byte*>& inputs,
                                  const std::vector<std::byte*>& outputs) {
  const auto wall = std::chrono::steady_clock::now();
  const int p = static_cast<int>(plans.size());
  payloads_ = detail::check_run(cluster_.ranks(), plans, kernels, inputs, outputs);
  if (p == 0) return {};
  if (cluster_.net.active() != 0)
    throw error(errc::invalid_argument, "transport::simulated: the cluster's network carries flows of another run");
  // A run that fails leaves its flows: the cluster is free for the next one all the same.
  struct drop_on_failure {
    network& net;
    int unwinding = std::uncaught_exceptions();
    ~drop_on_failure() {
      if (std::uncaught_exceptions() > unwinding) net.drop_flows();
    }
  } guard{cluster_.net};
  result_ = {};
  events_.clear();  // a run that threw may have left some
  messages_.clear();
  free_messages_.clear();
  result_.finished.assign(std::size_t(p), 0);
  cpu_free_.assign(std::size_t(p), 0);
  nic_free_.assign(std::size_t(p), 0);
  flag_depths_.assign(std::size_t(p), {});
  is_touched_.assign(std::size_t(p), 0);
  ranks_.reset(std::size_t(p));  // before their engines
  engines_.clear();
  channels_.clear(std::size_t(p));
  engines_.reserve(std::size_t(p));
  start_ = now_ = cluster_.net.now();  // a network used before runs on from where it stopped
  const auto& d = plans.front()->desc;
  const signature sig{d.kind, kernels.op, kernels.type, d.count, d.root, 0};
  // One receive index a distinct schedule: ranks may share one (a rotation, see
  // build_schedules), which only a run without payload can (regions are rank 0's).
  std::size_t most_steps = 0;
  for (const auto& plan : plans) most_steps = std::max(most_steps, plan->steps.size());
  depths_.assign(most_steps * std::size_t(p), {});
  pending_.assign(most_steps * std::size_t(p), 0);
  statuses_.assign(most_steps * std::size_t(p), {});
  // Each rank's state is allocated by kind, rank after rank (engines, bookkeeping, its
  // arrays), not rank by rank: the same kind of state of ranks in step then lies close.
  for (int r = 0; r < p; ++r) engines_.push_back(std::make_unique<progress_engine>(std::make_unique<detail::no_pause>()));
  std::vector<std::unique_ptr<step_bookkeeping>> books(static_cast<std::size_t>(p));
  books_.resize(std::size_t(p));
  for (int r = 0; r < p; ++r) books_[std::size_t(r)] = (books[std::size_t(r)] = std::make_unique<step_bookkeeping>()).get();
  std::shared_ptr<const detail::receive_index> receives;
  const schedule::schedule* indexed = nullptr;
  std::size_t roots = 0;  // steps without dependencies: all ready at the start
  for (int r = 0; r < p; ++r) {
    const auto& plan = *plans[std::size_t(r)];
    if (&plan != indexed) {
      roots = 0;
      for (std::size_t i = 0; i < plan.steps.size(); ++i) roots += plan.dep_begin[i + 1] == plan.dep_begin[i];
      indexed = &plan;
    }
    books[std::size_t(r)]->ready.reserve(std::max<std::size_t>(roots, 16));
  }
  for (std::size_t i = 0; i < most_steps; ++i)  // step by step, as the table lies
    for (int r = 0; r < p; ++r)
      if (const auto& plan = *plans[std::size_t(r)]; i < plan.steps.size())
        pending_[i * std::size_t(p) + std::size_t(r)] = plan.dep_begin[i + 1] - plan.dep_begin[i];
  for (int r = 0; r < p; ++r) {
    const std::size_t n = plans[std::size_t(r)]->steps.size();
    books[std::size_t(r)]->pending.lend(pending_.data() + r, std::size_t(p), n);
    books[std::size_t(r)]->steps.lend(statuses_.data() + r, std::size_t(p), n);
  }
  indexed = nullptr;
  for (int r = 0; r < p; ++r) {
    const auto& plan = plans[std::size_t(r)];
    if (plan.get() != indexed) {
      result_.schedule_bytes += plan->memory_bytes();
      receives = std::make_shared<const detail::receive_index>(*plan);
      indexed = plan.get();
    }
    ranks_.emplace_back(static_cast<detail::rank_host&>(*this), *engines_[std::size_t(r)], r, plan, receives, sig,
                        kernels, payloads_, payloads_ ? inputs[std::size_t(r)] : nullptr,
                        payloads_ ? outputs[std::size_t(r)] : nullptr, depths_.data() + r, std::size_t(p),
                        std::move(books[std::size_t(r)]));
  }
  for (int r = 0; r < p; ++r) touch(r);
  advance_touched();  // every rank runs what it can at time 0

  const double inf = std::numeric_limits<double>::infinity();
  while (true) {
    const double flow_at = cluster_.net.next_finish();
    const double event_at = events_.next_time();
    const double t = std::min(flow_at, event_at);
    if (t == inf) break;
    now_ = t;
    if (flow_at <= t) {
      done_flows_.clear();
      cluster_.net.finish_until(t, done_flows_);
      // Their messages first: the flows started below may reuse these ids. In the order
      // of their channels, not of the network's flow ids (which depend on the runs
      // before): the same call gives the same result every time.
      done_keys_.clear();
      for (std::size_t i = 0; i < done_flows_.size(); ++i) {
        if (i + ahead < done_flows_.size()) __builtin_prefetch(&messages_[flow_message_[done_flows_[i + ahead]]]);
        const std::uint32_t m = flow_message_[done_flows_[i]];
        done_keys_.push_back({std::uint64_t(messages_[m].from) << 32 | std::uint32_t(messages_[m].to), m});
      }
      sort_done_keys();
      // Thousands of ranks' state lies far apart in memory: each item's is loaded a few
      // items ahead, so that the cache misses of many ranks overlap.
      const std::size_t n = done_keys_.size();
      for (std::size_t i = 0; i < n; ++i) {
        if (i + 2 * ahead < n) {
          __builtin_prefetch(&messages_[done_keys_[i + 2 * ahead].second]);
          prefetch_rank(int(done_keys_[i + 2 * ahead].first >> 32));
        }
        if (i + ahead < n) {
          const message& next = messages_[done_keys_[i + ahead].second];
          ranks_[std::size_t(next.from)].prefetch_step(next.step);
        }
        const std::uint32_t m = done_keys_[i].second;
        const message& msg = messages_[m];
        next_on_channel(msg);
        // The last byte has left: a send's buffer is free; the data lands a latency later.
        if (msg.kind == schedule::step_kind::send) {
          ranks_[std::size_t(msg.from)].finish(msg.step);
          wake(msg.from);
        }
        schedule_event(t + msg.latency, event_kind::arrive, msg.to, m);
      }
    }
    while (events_.next_time() <= t) {  // runs at t, in order; what they schedule at t after
      events_.pop_run(batch_);
      const std::size_t n = batch_.size();
      for (std::size_t i = 0; i < n; ++i) {
        if (i + 2 * ahead < n) {
          const event& far = batch_[i + 2 * ahead];
          if (far.kind != event_kind::complete) __builtin_prefetch(&messages_[far.message]);
          prefetch_rank(far.rank);
        }
        if (i + ahead < n) {
          const event& next = batch_[i + ahead];
          if (next.kind == event_kind::arrive) ranks_[std::size_t(next.rank)].prefetch_arrival();
          else if (next.kind == event_kind::complete) ranks_[std::size_t(next.rank)].prefetch_step(next.message);
        }
        const event& e = batch_[i];
        switch (e.kind) {
          case event_kind::arrive: deliver(e.message); break;
          case event_kind::complete:
            ranks_[std::size_t(e.rank)].finish(e.message);
            wake(e.rank);
            break;
          case event_kind::post: enqueue(e.message); break;
        }
      }
    }
    advance_touched();
  }
  for (int r = 0; r < p; ++r)
    if (!ranks_[std::size_t(r)].finished()) stuck();
  for (int r = 0; r < p; ++r) {
    std::error_code ec;
    if (!ranks_[std::size_t(r)].test(ec) || ec)
      throw error(errc::transport, "transport::simulated: rank " + std::to_string(r) + " failed: " +
                                       ranks_[std::size_t(r)].message());
    result_.seconds = std::max(result_.seconds, result_.finished[std::size_t(r)]);
  }
  ranks_.clear();
  engines_.clear();
  depths_ = {};
  pending_ = {};
  statuses_ = {};
  result_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  return std::move(result_);
}

/// Sorts done_keys_. Ranks in step start their flows in the order of their turns, so
/// their flows end sorted, or rotated (a ring: from rank 1 on, then rank 0): no sort then.
inline void simulation::sort_done_keys() {
  auto& k = done_keys_;
  const auto descent = std::is_sorted_until(k.begin(), k.end());
  if (descent == k.end()) return;
  if (k.back() <= k.front() && std::is_sorted(descent, k.end()))
    std::rotate(k.begin(), descent, k.end());
  else
    std::sort(k.begin(), k.end());
}

inline void simulation::touch(int rank) {
  if (is_touched_[std::size_t(rank)]) return;
  is_touched_[std::size_t(rank)] = 1;
  touched_.push_back(rank);
}

/// Runs a round on every rank something happened to; what they post starts now.
inline void simulation::advance_touched() {
  for (std::size_t k = 0; k < touched_.size(); ++k) {  // a round may touch more ranks
    if (k + 3 * ahead < touched_.size()) prefetch_rank(touched_[k + 3 * ahead]);
    if (k + 2 * ahead < touched_.size()) ranks_[std::size_t(touched_[k + 2 * ahead])].prefetch_ready_list();
    if (k + ahead < touched_.size()) ranks_[std::size_t(touched_[k + ahead])].prefetch_ready();
    const int r = touched_[k];
    is_touched_[std::size_t(r)] = 0;
    auto& exec = ranks_[std::size_t(r)];
    if (exec.finished()) continue;
    if (exec.run_rounds()) result_.finished[std::size_t(r)] = now_ - start_;
  }
  touched_.clear();
}

inline std::uint32_t simulation::new_message() {
  if (!free_messages_.empty()) {
    const std::uint32_t m = free_messages_.back();
    free_messages_.pop_back();
    return m;
  }
  messages_.emplace_back();
  return static_cast<std::uint32_t>(messages_.size() - 1);
}

inline void simulation::send(int rank, int peer, schedule::step_id id, const schedule::step& st,
                             const std::byte* data, std::uint32_t depth) {
  const std::uint32_t m = new_message();
  message& msg = messages_[m];
  msg.from = rank;
  msg.to = peer;
  msg.step = id;
  msg.kind = st.kind;
  msg.tag = st.tag;
  msg.depth = depth;
  msg.dst = st.dst;
  msg.bytes = st.kind == schedule::step_kind::notify ? 0 : double(st.src.bytes);
  if (payloads_ && data && msg.bytes > 0)
    msg.data.assign(data, data + st.src.bytes);  // the sender may reuse its buffer once the send completes
  else
    msg.data.clear();
  if (st.kind == schedule::step_kind::notify)
    ++result_.flags_only;
  else
    ++result_.messages;
  msg.channel = channels_.of(rank, peer);
  if (!channels_.routed(msg.channel)) {
    cluster_.path(rank, peer, path_);
    channels_.set_route(msg.channel, path_, cluster_.net.path_latency(path_));
  }
  msg.latency = channels_.latency(msg.channel) + costs_.message_overhead;
  double& free_at = nic_free_[std::size_t(rank)];
  const double start = std::max(now_, free_at);
  free_at = start + costs_.message_gap;
  if (start > now_)
    schedule_event(start, event_kind::post, rank, m);
  else
    enqueue(m);
}

/// A rank's executor and its bookkeeping: addresses known without a load from either.
inline void simulation::prefetch_rank(int rank) const {
  // Not the last line of either: a payload's buffers, the flags (waits only).
  const std::byte* object = ranks_.address(std::size_t(rank));
  for (std::size_t at = 0; at + 64 < sizeof(detail::rank_execution); at += 64) __builtin_prefetch(object + at, 1);
  const auto* book = reinterpret_cast<const std::byte*>(books_[std::size_t(rank)]);
  constexpr std::size_t hot = offsetof(step_bookkeeping, queued) + sizeof(step_bookkeeping::queued);
  for (std::size_t at = 0; at < hot; at += 64) __builtin_prefetch(book + at);
  __builtin_prefetch(book + hot - 1);
}

inline void simulation::enqueue(std::uint32_t m) {
  const message& msg = messages_[m];
  if (msg.bytes <= 0) return start_flow(m);  // a flag overtakes nothing it must not
  if (channels_.acquire(msg.channel, m)) start_flow(m);
}

/// `sent`'s last byte has left: the next message of its channel goes on the wire.
inline void simulation::next_on_channel(const message& sent) {
  const std::uint32_t next = channels_.release(sent.channel);
  if (next != detail::no_index) start_flow(next);
}

inline void simulation::start_flow(std::uint32_t m) {
  message& msg = messages_[m];
  if (msg.bytes <= 0) {  // a flag or an empty message: only the latency
    if (msg.kind == schedule::step_kind::send) {
      ranks_[std::size_t(msg.from)].finish(msg.step);
      wake(msg.from);
    }
    schedule_event(now_ + msg.latency, event_kind::arrive, msg.to, m);
    return;
  }
  result_.network_bytes += msg.bytes;
  const flow_id f = cluster_.net.start(channels_.path(msg.channel), msg.bytes, now_);
  if (flow_message_.size() <= f) flow_message_.resize(std::size_t(f) + 1);
  flow_message_[f] = m;
}

/// The message's data reaches its target: a receive takes it, or a write lands and
/// raises its flag; a write or notify then completes at its writer.
inline void simulation::deliver(std::uint32_t m) {
  message& msg = messages_[m];
  auto& target = ranks_[std::size_t(msg.to)];
  const std::uint32_t depth = msg.depth + 1;
  result_.message_rounds = std::max(result_.message_rounds, int(depth));
  if (msg.kind == schedule::step_kind::send) {
    const bool held = !msg.data.empty();  // until the receive has consumed it (release())
    target.take(msg.from, msg.tag, held ? m : detail::no_message, depth);
    wake(msg.to);
    if (!held) free_messages_.push_back(m);
    return;
  } else {
    if (msg.kind == schedule::step_kind::write && !msg.data.empty()) target.land_write(msg.dst, msg.data);
    auto& depths = flag_depths_[std::size_t(msg.to)];
    if (depths.size() <= msg.tag) depths.resize(std::size_t(msg.tag) + 1, 0);
    depths[msg.tag] = std::max(depths[msg.tag], depth);
    target.flag(msg.tag, msg.from);
    ranks_[std::size_t(msg.from)].finish(msg.step);
    wake(msg.from);
  }
  wake(msg.to);
  release(m);
}

inline void simulation::release(std::uint32_t m) {
  messages_[m].data.clear();
  free_messages_.push_back(m);
}

inline void simulation::compute(int rank, schedule::step_id id, double seconds) {
  double& free_at = cpu_free_[std::size_t(rank)];
  const double end = std::max(now_, free_at) + seconds;
  free_at = end;
  schedule_event(end, event_kind::complete, rank, id);
}

inline std::uint32_t simulation::flag_depth(int rank, std::uint32_t tag) const {
  const auto& depths = flag_depths_[std::size_t(rank)];
  return tag < depths.size() ? depths[tag] : 0;
}

[[noreturn]] inline void simulation::stuck() const {
  std::string why;
  int stuck_ranks = 0;
  for (std::size_t k = 0; k < ranks_.size(); ++k)
    if (const auto& r = ranks_[k]; !r.finished() && ++stuck_ranks <= 4)
      why += "; rank " + std::to_string(r.rank()) + " " + r.why_stuck();
  throw error(errc::timeout, "transport::simulated: the call cannot finish: nothing is in flight at " +
                                 std::to_string(now_) + " s and " + std::to_string(stuck_ranks) +
                                 " rank(s) have steps left" + why);
}

}  // namespace mimatrix::transport::simulated

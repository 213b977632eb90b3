// The device memory space of the step executor: a call's local steps and landings run as
// work queued on a stream of the call's own, in dependency order, and the executor learns
// of their end through events, not by synchronizing. The call starts after the work the
// caller queued before it, and the caller's later work waits for the call (a gate), as
// NCCL's stream semantics have it.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <utility>

#include "mimatrix/core/error.hpp"
#include "mimatrix/device/port.hpp"
#include "mimatrix/device/rank_streams.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/host_steps.hpp"

namespace mimatrix::transport {

/// One call's device work. The steps' buffers are device memory of `caller`'s port.
///
/// @par Thread Safety
/// As its execution: under its progress engine's lock.
class device_steps {
 public:
  /// Queues, on `own`, a wait for the work queued so far on `caller`, and on `caller` a
  /// gate that finish() opens. `scratch`: the call's device memory for partial sums,
  /// where the kernels combine (they cannot read pageable host memory).
  device_steps(const device::stream& caller, device::pooled_stream own, const reduce::host_kernels& kernels,
               int ranks, device::pooled_buffer scratch = {})
      : port_(*caller.device), own_stream_(std::move(own)), own_(own_stream_.get()), kernels_(kernels), ranks_(ranks),
        scratch_(std::move(scratch)) {
    input_ = port_.record(caller.handle);
    port_.wait(own_, input_);
    gate_ = port_.hold(caller.handle);
  }
  device_steps(const device_steps&) = delete;
  device_steps& operator=(const device_steps&) = delete;
  /// Waits for the work still queued (a failed call's: its scratch and stream must outlive
  /// it). Runs on the thread that lets go of the call, never the progress thread, which may
  /// be the one that opens the gate this work waits behind.
  ~device_steps() {
    try {
      finish();
      if (!pending_.empty()) port_.synchronize(own_);
    } catch (const error&) {  // the device failed: nothing queued will run
    }
    for (auto& p : pending_) port_.free_event(p.done);
    port_.free_event(input_);
  }

  /// The call's scratch in device memory (null: none).
  std::byte* scratch() const { return scratch_.data(); }

  /// Whether the caller's earlier work is done, so that a peer or the wire may read the
  /// input.
  bool input_ready() {
    try {
      if (!input_done_) input_done_ = port_.done(input_);
    } catch (const error&) {  // the device failed: poll() names it and fails the call
      input_done_ = true;
    }
    return input_done_;
  }

  /// Queues a reduce, reduce_slots, copy or finalize step.
  void run_local(const schedule::step& st, const host_buffers& mem) {
    switch (st.kind) {
      case schedule::step_kind::reduce: {
        std::byte* dst = mem.write(st.dst);
        port_.combine(own_, kernels_, dst, dst, mem.read(st.src), st.dst.bytes);
        break;
      }
      case schedule::step_kind::reduce_slots: {
        if (!st.dst.bytes) break;
        std::byte* dst = mem.write(st.dst);
        const std::byte* slots = mem.read(st.src);
        for (std::size_t s = 0; s < st.src.bytes / st.dst.bytes; ++s)
          port_.combine(own_, kernels_, dst, dst, slots + s * st.dst.bytes, st.dst.bytes);
        break;
      }
      case schedule::step_kind::copy:
        if (st.dst.bytes) port_.copy(own_, mem.write(st.dst), mem.read(st.src), st.dst.bytes);
        break;
      case schedule::step_kind::finalize:
        port_.finalize(own_, kernels_, mem.write(st.dst), st.dst.bytes, ranks_);
        break;
      default:
        break;
    }
  }

  /// Queues a receive's landing: a copy from `data`, or its reduction into dst.
  void land(const schedule::step& st, const host_buffers& mem, const std::byte* data) {
    if (st.kind == schedule::step_kind::recv_reduce)
      port_.combine(own_, kernels_, mem.write(st.dst), mem.read(st.src), data, st.dst.bytes);
    else if (st.dst.bytes)
      port_.copy(own_, mem.write(st.dst), data, st.dst.bytes);
  }

  /// Queues one pass that reduces `srcs` and writes the result to each of `dsts`
  /// (device::port::reduce_many), finalized for the call's ranks.
  void reduce_many(void* const* dsts, std::size_t ndst, const void* const* srcs, std::size_t nsrc,
                   std::size_t bytes) {
    port_.reduce_many(own_, kernels_, dsts, ndst, srcs, nsrc, bytes, ranks_);
  }

  /// Queues a copy of `bytes` from `src` to `dst` (a one-sided write applied here).
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
    if (bytes) port_.copy(own_, dst, src, bytes);
  }

  /// Runs `action` from poll() once the work queued so far is done.
  void then(std::function<void()> action) { pending_.push_back({port_.record(own_), std::move(action)}); }

  /// Runs the actions whose work is done, in order; true if any ran.
  bool poll() {
    bool any = false;
    while (!pending_.empty() && port_.done(pending_.front().done)) {
      auto action = std::move(pending_.front().action);
      port_.free_event(pending_.front().done);
      pending_.pop_front();
      if (action) action();
      any = true;
    }
    return any;
  }

  /// Whether work queued on the rank's stream has not yet run (as far as poll() saw).
  bool working() const { return !pending_.empty(); }

  /// Whether everything queued has run: steps completed early (their successors being
  /// queued behind them) leave no action, so a last one marks the end of the call's work.
  bool settled() {
    if (!fenced_) {
      fenced_ = true;
      then(nullptr);
    }
    return pending_.empty();
  }

  /// Opens the caller's stream behind this call's work (queued on the call's stream: it
  /// never waits for that work); once. A failed call's actions are dropped: its transport
  /// lets go of what peers lent it.
  void finish() {
    if (!gate_) return;
    port_.open(own_, gate_);
    gate_ = nullptr;
  }

  /// Whether step `id`'s successors all run on the stream behind it: it may then count
  /// as done once queued, stream order keeping them after it.
  static bool feeds_stream_only(const schedule::schedule& plan, schedule::step_id id) {
    for (schedule::step_id k : plan.successors(id))
      if (!is_stream_work(plan.steps[k].kind)) return false;
    return true;
  }

  static bool is_stream_work(schedule::step_kind kind) {
    return kind == schedule::step_kind::reduce || kind == schedule::step_kind::reduce_slots ||
           kind == schedule::step_kind::copy || kind == schedule::step_kind::finalize;
  }

 private:
  struct pending {
    device::event done;
    std::function<void()> action;
  };

  device::port& port_;
  device::pooled_stream own_stream_;  // the call's alone while it runs (rank_streams.hpp says why)
  device::stream_handle own_;
  const reduce::host_kernels& kernels_;
  int ranks_;
  device::pooled_buffer scratch_;
  device::event input_ = nullptr;
  device::gate gate_ = nullptr;
  bool input_done_ = false;
  bool fenced_ = false;
  std::deque<pending> pending_;
};

}  // namespace mimatrix::transport

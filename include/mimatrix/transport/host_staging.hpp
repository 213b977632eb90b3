// A call on device buffers over a transport that moves host memory only (fabric without
// FI_HMEM): the executor runs it on host copies, without blocking the caller, and in a
// pipeline. On the rank's own stream, after the caller's earlier work, the input is
// copied out piece by piece, and a step runs as soon as the pieces it reads are on the
// host; a piece of the output is copied back as soon as every step that writes it is
// done, while the call goes on. The caller's later work waits behind the last copy back
// (a gate), as NCCL's stream semantics have it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "mimatrix/device/rank_streams.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/device_steps.hpp"

namespace mimatrix::transport {

/// @par Thread Safety
/// As its execution: under its progress engine's lock.
class host_staging {
 public:
  /// The pieces copies move, at least: MIMATRIX_STAGING_PIECE_BYTES, else 1 MiB (a copy
  /// on a GPU costs a few microseconds besides its bytes). At most 64 pieces a buffer.
  static std::size_t piece_bytes() {
    static const std::size_t bytes = [] {
      const char* v = std::getenv("MIMATRIX_STAGING_PIECE_BYTES");
      const long long n = v ? std::atoll(v) : 0;
      return n > 0 ? std::size_t(n) : std::size_t(1) << 20;
    }();
    return bytes;
  }

  /// Queues the input's copy to the host (`input` null: none) after `caller`'s earlier
  /// work, and holds `caller`'s later work. With `pipelined_output`, pieces of the output
  /// go back as they are done (see written()); else all of it once every step is.
  host_staging(const device::stream& caller, device::rank_streams& resources,
               const reduce::host_kernels& kernels, const schedule::schedule& plan, const std::byte* input,
               std::byte* output, bool pipelined_output)
      : in_(input ? resources.staging(*caller.device, plan.desc.input_bytes(plan.rank)) : device::pooled_buffer{}),
        out_(resources.staging(*caller.device, plan.desc.output_bytes(plan.rank))),
        copies_(caller, resources.take_stream(*caller.device), kernels, plan.desc.size),
        device_output_(output),
        output_bytes_(plan.desc.output_bytes(plan.rank)),
        out_piece_(piece_for(output_bytes_)),
        pipelined_(pipelined_output) {
    const std::size_t in_bytes = input ? plan.desc.input_bytes(plan.rank) : 0;
    const std::size_t in_piece = piece_for(in_bytes);
    for (std::size_t at = 0; at < in_bytes; at += in_piece) {
      const std::size_t end = std::min(in_bytes, at + in_piece);
      copies_.copy(in_.data() + at, input + at, end - at);
      copies_.then([this, end] { input_here_ = end; });
    }
    writers_.assign(output_bytes_ ? (output_bytes_ + out_piece_ - 1) / out_piece_ : 0, 0);
    back_.assign(writers_.size(), false);
    if (!pipelined_) return;
    for (const schedule::step& st : plan.steps)
      if (writes_output(st)) each_piece(st.dst, [&](std::size_t k) { ++writers_[k]; });
  }

  /// The host copies the call runs on.
  const std::byte* input() const { return in_.data(); }
  std::byte* output() const { return out_.data(); }

  /// Takes what the stream has done; true if anything.
  bool poll() { return copies_.poll(); }
  /// Whether step `st` may run: the input it reads is on the host. Steps that read no
  /// input run at once (a receive lands in host memory; its piece goes back on the own
  /// stream, behind the caller's earlier work and the input's copies).
  bool readable(const schedule::step& st) const {
    if (st.src.where != schedule::buffer::input || st.src.bytes == 0) return true;
    switch (st.kind) {
      case schedule::step_kind::send:
      case schedule::step_kind::write:
      case schedule::step_kind::recv_reduce:
      case schedule::step_kind::reduce:
      case schedule::step_kind::reduce_slots:
      case schedule::step_kind::copy:
        return st.src.offset + st.src.bytes <= input_here_;
      default:
        return true;
    }
  }

  /// Step `st` is done: the output pieces it was the last to write go back now.
  void written(const schedule::step& st) {
    if (!pipelined_ || !writes_output(st)) return;
    each_piece(st.dst, [&](std::size_t k) {
      if (writers_[k] > 0 && --writers_[k] == 0) copy_back(k);
    });
  }

  /// Every step is done: queues what is left to copy back and opens the caller's stream
  /// behind it (once); true once the copies have run, so the host copies may go.
  bool returned() {
    if (!queued_back_) {
      queued_back_ = true;
      for (std::size_t k = 0; k < writers_.size(); ++k)
        copy_back(k);  // the pieces not back yet: written by no step, or not pipelined
      copies_.then([this] { returned_ = true; });
      copies_.finish();
    }
    return returned_;
  }

  /// The call failed: lets the caller's stream go on behind the copies queued (its output
  /// is left as it was, but for pieces already done), without waiting for them: they may
  /// wait behind an earlier call's gate, which the thread calling this may have to open.
  /// The host copies live until they have run (copies_ goes first).
  void abandon() { copies_.finish(); }

 private:
  static std::size_t piece_for(std::size_t bytes) {
    return std::max<std::size_t>({piece_bytes(), (bytes + 63) / 64, 1});
  }
  static bool writes_output(const schedule::step& st) {
    if (st.dst.where != schedule::buffer::output || st.dst.bytes == 0) return false;
    switch (st.kind) {
      case schedule::step_kind::recv:
      case schedule::step_kind::recv_reduce:
      case schedule::step_kind::reduce:
      case schedule::step_kind::reduce_slots:
      case schedule::step_kind::copy:
      case schedule::step_kind::finalize:
        return true;
      default:
        return false;
    }
  }
  template <class F>
  void each_piece(const schedule::region& r, F&& f) const {
    const std::size_t end = std::min<std::size_t>(r.offset + r.bytes, output_bytes_);
    for (std::size_t k = r.offset / out_piece_; k * out_piece_ < end; ++k) f(k);
  }
  void copy_back(std::size_t k) {
    if (back_[k]) return;
    back_[k] = true;
    const std::size_t at = k * out_piece_;
    copies_.copy(device_output_ + at, out_.data() + at, std::min(out_piece_, output_bytes_ - at));
  }

  device::pooled_buffer in_, out_;
  device_steps copies_;  // events and the gate on the caller's stream; goes before the buffers
  std::byte* device_output_;
  std::size_t output_bytes_;
  std::size_t out_piece_;
  bool pipelined_;                      // output pieces go back as their writers finish
  std::size_t input_here_ = 0;          // bytes of the input on the host, from its start
  std::vector<std::uint32_t> writers_;  // by output piece: steps writing it not done yet
  std::vector<bool> back_;              // by output piece: its copy back is queued
  bool queued_back_ = false;
  bool returned_ = false;
};

}  // namespace mimatrix::transport

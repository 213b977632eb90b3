// The local steps of a schedule (reduce, copy, finalize) on host memory, shared by
// every transport that keeps its buffers on the host.
#pragma once

#include <cstddef>
#include <cstring>

#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::transport {

/// The memory behind a schedule's three buffers on one rank.
struct host_buffers {
  const std::byte* input = nullptr;
  std::byte* output = nullptr;
  std::byte* scratch = nullptr;
  /// The buffer table's entries (a p2p batch's buffers, schedule::entry); a sent entry is
  /// only read. A pointer, not a span: executors keep these four words in one half line.
  std::byte* const* entries = nullptr;

  const std::byte* read(const schedule::region& r) const {
    switch (r.where) {
      case schedule::buffer::input: return input + r.offset;
      case schedule::buffer::output: return output + r.offset;
      case schedule::buffer::scratch: return scratch + r.offset;
      default: return entries[schedule::entry_index(r.where)] + r.offset;
    }
  }
  /// Schedules never write their input (in place, input and output are one memory).
  std::byte* write(const schedule::region& r) const {
    if (schedule::is_entry(r.where)) [[unlikely]]
      return entries[schedule::entry_index(r.where)] + r.offset;
    return r.where == schedule::buffer::scratch ? scratch + r.offset : output + r.offset;
  }
};

/// dst = op(dst, slot 0, ..., slot k-1) for `slots` back-to-back slots of `bytes` each,
/// in cache-sized blocks: each block of dst is loaded once, combined with every slot and
/// stored once, so the pass costs one read of each slot and one read and write of dst.
inline void combine_slots(const reduce::host_kernels& k, std::byte* dst, const std::byte* slots,
                          std::size_t slot_count, std::size_t bytes) {
  const std::size_t block = 16 * 1024 / k.elem_size * k.elem_size;  // fits L1 with a slot beside it
  for (std::size_t at = 0; at < bytes; at += block) {
    const std::size_t n = bytes - at < block ? bytes - at : block;
    for (std::size_t s = 0; s < slot_count; ++s) k.combine(dst + at, dst + at, slots + s * bytes + at, n);
  }
}

/// Runs a reduce, reduce_slots, copy or finalize step (wait is a pure join here).
inline void run_local_step(const reduce::host_kernels& k, const schedule::step& st, const host_buffers& mem,
                           int ranks) {
  switch (st.kind) {
    case schedule::step_kind::reduce: {
      std::byte* dst = mem.write(st.dst);
      k.combine(dst, dst, mem.read(st.src), st.dst.bytes);
      break;
    }
    case schedule::step_kind::reduce_slots:
      if (st.dst.bytes) combine_slots(k, mem.write(st.dst), mem.read(st.src), st.src.bytes / st.dst.bytes, st.dst.bytes);
      break;
    case schedule::step_kind::copy: {
      const std::byte* src = mem.read(st.src);
      std::byte* dst = mem.write(st.dst);
      if (src != dst && st.dst.bytes) std::memmove(dst, src, st.dst.bytes);  // in place: same memory
      break;
    }
    case schedule::step_kind::finalize:
      k.finalize(mem.write(st.dst), st.dst.bytes, ranks);
      break;
    default:
      break;  // communication and one-sided steps belong to the transport
  }
}

}  // namespace mimatrix::transport

// What a finished call was, for a user's hook and the timeline (MIMATRIX_TIMELINE): the
// job server's monitoring and a framework's profiler read the same record.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix {

struct call_record {
  schedule::collective kind = schedule::collective::allreduce;
  std::uint64_t sequence = 0;
  std::uint32_t tag = 0;   // call_options::tag
  std::string algorithm;   // the schedule's ("ring", "gdraa", ...)
  dtype type = dtype::float32;
  std::size_t bytes = 0;   // nccl-tests' size: the larger of a rank's input and output
  int rank = 0, size = 1;
  std::chrono::steady_clock::time_point start, end;  // started; seen finished by test() or wait()
  /// The peer whose data came last (the one the call waited on longest); -1 if none.
  int waited_on = -1;
  std::error_code error;   // empty when it succeeded
  /// barrier() made the call (an allreduce of one byte): it is named barrier.
  bool barrier = false;

  /// What the caller called: "barrier", or the collective.
  std::string_view name() const { return barrier ? std::string_view("barrier") : schedule::to_string(kind); }

  double seconds() const { return std::chrono::duration<double>(end - start).count(); }
  /// nccl-tests' bus bandwidth in GB/s: bytes / time, times 2(p-1)/p for allreduce,
  /// (p-1)/p for reduce-scatter, allgather, gather, scatter and alltoall, 1 for broadcast
  /// and reduce.
  double bus_bandwidth_gbps() const {
    const double t = seconds();
    if (t <= 0) return 0;
    const double p = size;
    const double factor = kind == schedule::collective::allreduce ? 2 * (p - 1) / p
                          : kind == schedule::collective::broadcast || kind == schedule::collective::reduce ? 1.0
                                                                                                            : (p - 1) / p;
    return double(bytes) / t / 1e9 * factor;
  }
};

/// Called once per finished call, on the thread that saw it finish (test() or wait(),
/// or a dropped request's destructor).
using call_hook = std::function<void(const call_record&)>;

}  // namespace mimatrix

// What simulation::run refuses before it runs anything: schedules that are not one call of
// one group (a real transport finds that only where a message meets a receive; with
// payloads, a rank given more bytes than its peers' schedules carry would read past them),
// kernels of another element size than the schedules', and missing buffers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::transport::simulated::detail {

/// Whether the run carries payloads; errc::invalid_argument or errc::mismatch, naming the
/// rank, for what it cannot run.
inline bool check_run(int cluster_ranks, const std::vector<std::shared_ptr<const schedule::schedule>>& plans,
                      const reduce::host_kernels& kernels, const std::vector<const std::byte*>& inputs,
                      const std::vector<std::byte*>& outputs) {
  const auto fail = [](errc code, const std::string& what) { throw error(code, "transport::simulated: " + what); };
  const int p = static_cast<int>(plans.size());
  if (p != cluster_ranks)
    fail(errc::invalid_argument,
         std::to_string(p) + " schedules for a cluster of " + std::to_string(cluster_ranks) + " ranks");
  const bool payloads = !outputs.empty() || !inputs.empty();
  if (payloads && (int(outputs.size()) != p || int(inputs.size()) != p))
    fail(errc::invalid_argument, "with payloads, every rank needs an input and an output (" +
                                     std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
                                     " outputs for " + std::to_string(p) + " ranks); without, give neither");
  for (int r = 0; r < p; ++r)
    if (!plans[std::size_t(r)]) fail(errc::invalid_argument, "rank " + std::to_string(r) + "'s schedule is null");
  if (p == 0) return payloads;
  const schedule::descriptor& d = plans.front()->desc;
  if (d.size != p)
    fail(errc::invalid_argument, "the schedules are for a group of " + std::to_string(d.size) + " ranks, not " +
                                     std::to_string(p) + " (" + schedule::to_string(d) + ")");
  for (int r = 1; r < p; ++r)
    if (const schedule::descriptor& mine = plans[std::size_t(r)]->desc; !(mine == d))
      fail(errc::mismatch, "rank " + std::to_string(r) + "'s schedule is for " + schedule::to_string(mine) +
                               ", rank 0's for " + schedule::to_string(d) + ": the ranks would not run one call");
  if (!payloads) return false;
  if (kernels.elem_size != d.elem_size)
    fail(errc::invalid_argument, "the kernels reduce elements of " + std::to_string(kernels.elem_size) +
                                     " bytes, the schedules' are " + std::to_string(d.elem_size) + " (" +
                                     schedule::to_string(d) + ")");
  for (int r = 0; r < p; ++r) {
    if (const int given = plans[std::size_t(r)]->rank; given != r)
      fail(errc::invalid_argument, "rank " + std::to_string(r) + " is given rank " + std::to_string(given) +
                                       "'s schedule, which only a run without payload may share");
    if (d.input_bytes(r) && d.reads_input(r) && !inputs[std::size_t(r)])
      fail(errc::invalid_argument, "rank " + std::to_string(r) + "'s input is null (" + schedule::to_string(d) + ")");
    if (d.output_bytes(r) && !outputs[std::size_t(r)])
      fail(errc::invalid_argument, "rank " + std::to_string(r) + "'s output is null (" + schedule::to_string(d) + ")");
  }
  return true;
}

}  // namespace mimatrix::transport::simulated::detail

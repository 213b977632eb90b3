// Buffers that no call may take: an input and an output that overlap other than in place,
// and, on a device stream, buffers that are not the port's device memory. The engine's
// check and the composition across hosts, which refuses before any of its parts starts
// (naming the whole call, not a part), ask these questions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <tuple>

#include "mimatrix/device/port.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::detail {

/// Why `in` and `out` may not serve call `d` on `rank`: they overlap, and not as in place
/// is defined (the input in_place_input_offset bytes into the output, or the output
/// in_place_output_offset bytes into the input). None where they may, or hold nothing.
inline std::optional<std::string> overlap_problem(const schedule::descriptor& d, int rank, const void* in,
                                                  const void* out) {
  const std::size_t in_bytes = d.input_bytes(rank), out_bytes = d.output_bytes(rank);
  if (!in || !out || !in_bytes || !out_bytes) return std::nullopt;
  const auto* in_begin = static_cast<const std::byte*>(in);
  const auto* out_begin = static_cast<const std::byte*>(out);
  if (!(in_begin < out_begin + out_bytes && out_begin < in_begin + in_bytes)) return std::nullopt;
  if (!d.may_run_in_place())
    return "the input [" + device::describe_address(in) + ", +" + std::to_string(in_bytes) +
           " bytes) overlaps the output [" + device::describe_address(out) + ", +" + std::to_string(out_bytes) +
           " bytes); " + std::string(schedule::to_string(d.kind)) + " never runs in place (as NCCL's)";
  if (in_begin - d.in_place_input_offset(rank) == out_begin - d.in_place_output_offset(rank)) return std::nullopt;
  return "the input [" + device::describe_address(in) + ", +" + std::to_string(in_bytes) +
         " bytes) overlaps the output [" + device::describe_address(out) + ", +" + std::to_string(out_bytes) +
         " bytes) without being in place (in place, the input starts " +
         std::to_string(d.in_place_input_offset(rank)) + " bytes into the output, or the output " +
         std::to_string(d.in_place_output_offset(rank)) + " bytes into the input)";
}

/// Why this rank's buffers of call `d` on a stream of `port` cannot be: named by the
/// rank that holds them, rather than by the peer whose kernel would fault on them.
inline std::optional<std::string> device_buffer_problem(const device::port& port, const schedule::descriptor& d,
                                                        int rank, const void* in, const void* out) {
  for (const auto& [what, at, bytes] : {std::tuple{"input", in, d.reads_input(rank) ? d.input_bytes(rank) : 0},
                                        std::tuple{"output", out, d.output_bytes(rank)}})
    if (std::string bad = port.not_device_memory(at, bytes); !bad.empty())
      return std::string("the ") + what + " (" + std::to_string(bytes) + " bytes) is " + bad +
             ", not the device memory that a call on a stream of device::" + std::string(port.name()) +
             "_port needs";
  return std::nullopt;
}

}  // namespace mimatrix::detail

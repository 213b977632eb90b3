// What a rank believes it is running: compared across ranks so that a disagreement
// ends in a `mismatch` error naming both sides instead of a hang or corrupted data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::schedule {

struct signature {
  collective kind = collective::allreduce;
  reduce::op_kind op = reduce::op_kind::sum;
  dtype type = dtype::float32;
  std::size_t count = 0;
  int root = 0;
  std::uint64_t sequence = 0;
  std::uint32_t tag = 0;  // the caller's label of the call (call_options::tag)
  /// The roots and counts of the calls with a root before this one on its communicator,
  /// folded (detail::communicator_state::take_history): some ranks of such a call only
  /// send (a broadcast's root, a gather's leaves), so no message of that call proves the
  /// ranks agreed on it; the next call that moves data does.
  std::uint16_t history = 0;

  friend bool operator==(const signature&, const signature&) = default;
};

/// "allreduce #7 (count 1000, float, sum)", "reduce #8 (count 4, float, max, root 2)", or
/// "... sum, tag 12)" for a tagged call.
inline std::string to_string(const signature& s) {
  std::string text = std::string(to_string(s.kind)) + " #" + std::to_string(s.sequence) +
                     " (count " + std::to_string(s.count) + ", " + std::string(to_string(s.type));
  if (reduces(s.kind)) text += ", " + std::string(reduce::to_string(s.op));
  if (has_root(s.kind)) text += ", root " + std::to_string(s.root);
  if (s.tag) text += ", tag " + std::to_string(s.tag);
  return text + ")";
}

}  // namespace mimatrix::schedule

namespace mimatrix {
using schedule::signature;  // the name every transport and collective uses
}  // namespace mimatrix

// What a rank believes it is running: compared across ranks so that a disagreement
// ends in a `mismatch` error naming both sides instead of a hang or corrupted data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
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
  /// A v-form (per-rank counts): `count` is then the digest of the counts every rank
  /// holds alike (schedule::uneven::agreed), 0 where they hold different parts.
  bool uneven = false;

  friend bool operator==(const signature&, const signature&) = default;
};

/// The name of a signature's call: "allgatherv" for a v-form.
constexpr std::string_view call_name(const signature& s) { return call_name(s.kind, s.uneven); }

/// "allreduce #7 (count 1000, float, sum)", "reduce #8 (count 4, float, max, root 2)",
/// "allgatherv #9 (counts digest 0x3f2a, float)", or "... sum, tag 12)" for a tagged call;
/// "p2p batch #4" for a p2p batch.
inline std::string to_string(const signature& s) {
  if (s.kind == collective::p2p) return std::string(call_name(s)) + " #" + std::to_string(s.sequence);  // this rank's own number
  std::string text = std::string(call_name(s)) + " #" + std::to_string(s.sequence) + " (";
  if (!s.uneven) {
    text += "count " + std::to_string(s.count) + ", ";
  } else if (s.count) {
    char digest[24];
    std::snprintf(digest, sizeof digest, "%llx", static_cast<unsigned long long>(s.count));
    text += "counts digest 0x" + std::string(digest) + ", ";
  }
  text += std::string(to_string(s.type));
  if (reduces(s.kind)) text += ", " + std::string(reduce::to_string(s.op));
  if (has_root(s.kind)) text += ", root " + std::to_string(s.root);
  if (s.tag) text += ", tag " + std::to_string(s.tag);
  return text + ")";
}

}  // namespace mimatrix::schedule

namespace mimatrix {
using schedule::signature;  // the name every transport and collective uses
}  // namespace mimatrix

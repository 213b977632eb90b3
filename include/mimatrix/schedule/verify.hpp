// The symbolic verifier: runs a whole group of schedules on sets of contributions instead
// of numbers and proves structure, matching, race freedom (within a rank, and across ranks
// where one-sided writes land), deadlock freedom and the result. Each check is a layer in
// verify/: structure, matching, races, simulation (which also checks the result).
#pragma once

#include <span>
#include <string>
#include <utility>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/verify/simulation.hpp"

namespace mimatrix::schedule {

namespace detail {

class verifier : public simulation_check {
 public:
  using simulation_check::simulation_check;

  verify_result run() {
    const bool ok = check_structure() && match() && match_flags() && check_races() &&
                    (!one_sided_ || check_landing_races()) && simulate() && check_result();
    return {ok, ok ? std::string() : std::move(message_)};
  }
  bool structure_and_matching() { return check_structure() && match() && match_flags(); }
  const std::string& message() const { return message_; }
};

}  // namespace detail

/// Proves a group of schedules (group[r] is rank r's) against its descriptor:
///  a) structure: one descriptor, regions inside their buffers and element-aligned,
///     peers in range, deps earlier, successor lists consistent;
///  b) every send meets exactly one recv/recv_reduce with the same tag and bytes; every
///     write/notify meets the one wait on its peer with its tag, whose count is the
///     number of flags raised there;
///  c) no two unordered steps of a rank touch the same bytes unless both only read, and
///     every step touching bytes a write lands in is ordered after the wait counting its
///     flag or before the write, across ranks (happens-before over sends, recvs, flags);
///  d) the group runs to completion under rendezvous semantics (writes and notifies
///     never block; a wait completes once its flags have arrived), never reads unwritten
///     data and never counts a contribution twice;
///  e) every output element holds what the collective promises, finalized once if reduced.
/// Reports the first problem. A pure function: safe to call from any thread.
[[nodiscard]] inline verify_result verify(std::span<const schedule> group, verify_options options = {}) {
  return detail::verifier(group, options).run();
}

/// The checks a p2p batch's schedules take (schedule/p2p.hpp; group[r] is rank r's batch
/// of one epoch): a) structure, over the buffer table's entries, and b) every send meets
/// one receive with its tag and bytes. A batch has no result to prove, and no step of it
/// waits for another, so it cannot deadlock.
[[nodiscard]] inline verify_result verify_matching(std::span<const schedule> group) {
  detail::verifier v(group, {});
  const bool ok = v.structure_and_matching();
  return {ok, ok ? std::string() : v.message()};
}

/// verify(), throwing mimatrix::error(errc::invalid_argument) with the message on failure.
inline void verify_or_throw(std::span<const schedule> group, verify_options options = {}) {
  if (auto result = verify(group, options); !result) throw error(errc::invalid_argument, result.message);
}

}  // namespace mimatrix::schedule

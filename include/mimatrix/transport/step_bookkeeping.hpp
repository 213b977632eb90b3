// The step executor's per-call state: a count of unfinished dependencies and a status
// byte a step, and the lists of steps ready, refused and waiting for flags.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::transport {

/// A call's bookkeeping. A transport may keep one across calls (step_executor takes and
/// returns it) so that the steady state allocates nothing.
struct step_bookkeeping {
  struct status {  // one byte: a simulator holds one a step for thousands of ranks
    bool ready : 1 = false;    // its dependencies are done
    bool posted : 1 = false;   // the transport has it and it has not ended
    bool queued : 1 = false;   // refused by back-pressure; retried in order
    bool arrived : 1 = false;  // a receive's data came before the step was ready
    bool done : 1 = false;
  };
  static_assert(sizeof(status) == 1);
  std::vector<std::uint32_t> pending;  // unfinished dependencies, per step
  std::vector<status> steps;
  std::vector<schedule::step_id> ready, queued, flag_waits;
  std::vector<std::uint32_t> flags;                         // flags arrived, by tag
  std::vector<std::pair<std::uint32_t, int>> flag_sources;  // (tag, writer) of each flag
};

}  // namespace mimatrix::transport

// Where a stalled call waits: a note its executor writes only on its stall path, and the
// flight record (detail/flight_record.hpp) reads at a dump.
#pragma once

#include <atomic>
#include <cstdint>

#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::transport {

/// The step a stalled call waits on, as its executor last saw it (only on the stall path:
/// at its first check after ended_check_interval of waiting, and when it fails). Relaxed
/// atomics: a dump may read one field of a newer note than another, never a torn field.
struct stall_note {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::int32_t> step{-1};  // -1: no stall seen
  std::atomic<std::int32_t> peer{-1};
  std::atomic<std::uint32_t> tag{0};
  std::atomic<std::uint8_t> kind{0};  // schedule::step_kind

  void note(std::int64_t at, int from, std::uint32_t with_tag, std::uint64_t size, schedule::step_kind k) {
    peer.store(from, std::memory_order_relaxed);
    tag.store(with_tag, std::memory_order_relaxed);
    bytes.store(size, std::memory_order_relaxed);
    kind.store(static_cast<std::uint8_t>(k), std::memory_order_relaxed);
    step.store(static_cast<std::int32_t>(at), std::memory_order_release);
  }
};

}  // namespace mimatrix::transport

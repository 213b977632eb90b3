// Tuning numbers for algorithms: a plain struct chosen by a constexpr selector, never
// constants inside an algorithm.
#pragma once

#include <cstddef>

namespace mimatrix::algorithm {

struct policy {
  /// Messages are cut into chunks of at most this many bytes, so that one step's
  /// reduction overlaps the next chunk's transfer.
  std::size_t chunk_bytes = 256 * 1024;
};

/// The policy for an in-process transport (zero-copy, so chunks only serve pipelining).
constexpr policy select_policy() { return policy{}; }

}  // namespace mimatrix::algorithm

// Tuning numbers for schedules: a plain struct chosen by a constexpr selector, never
// constants inside an algorithm. What a policy leaves open (0) the transport fills, so
// algorithms and transports both see it here, below either of them.
#pragma once

#include <cstddef>

namespace mimatrix::schedule {

struct policy {
  /// Messages are cut into chunks of at most this many bytes, so that one step's
  /// reduction overlaps the next chunk's transfer. 0: the transport's choice (see
  /// transport::suggests_policy), else default_chunk_bytes.
  std::size_t chunk_bytes = 0;
};

/// The chunk when neither the algorithm nor the transport names one: small enough to
/// pipeline a few MiB, large enough that per-message costs stay small.
inline constexpr std::size_t default_chunk_bytes = 256 * 1024;

/// `mine`, with what it leaves open taken from `suggested`.
constexpr policy complete(policy mine, const policy& suggested) {
  if (mine.chunk_bytes == 0) mine.chunk_bytes = suggested.chunk_bytes;
  return mine;
}

/// The chunk `p` stands for.
constexpr std::size_t chunk_bytes_of(const policy& p) { return p.chunk_bytes ? p.chunk_bytes : default_chunk_bytes; }

/// The policy for an in-process transport (zero-copy, so chunks only serve pipelining).
constexpr policy select_policy() { return policy{}; }

}  // namespace mimatrix::schedule

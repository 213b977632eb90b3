// Settings: a communicator's, with deadlines that are finite by default and can be set
// from the environment (MIMATRIX_TIMEOUT_MS) without recompiling, and one call's.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mimatrix/core/config.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/device_stream.hpp"

namespace mimatrix {

/// Who advances calls in flight: only the caller, inside test() and wait(), or also a
/// thread per communicator while the caller computes (MIMATRIX_PROGRESS=caller|thread).
enum class progress_mode : std::uint8_t { caller, thread };

/// The longest deadline mimatrix keeps: 100 years, which is "never" for a job. Longer ones
/// (`MIMATRIX_TIMEOUT_MS=9223372036854775807`, `milliseconds::max()`) are cut to it, so that
/// `now + timeout` cannot overflow the steady clock (int64 nanoseconds: 292 years).
inline constexpr std::chrono::milliseconds max_timeout = std::chrono::hours(24 * 365 * 100);

/// `timeout` saturated to [0, max_timeout].
constexpr std::chrono::milliseconds bounded_timeout(std::chrono::milliseconds timeout) noexcept {
  return timeout < std::chrono::milliseconds(0) ? std::chrono::milliseconds(0)
                                                : timeout > max_timeout ? max_timeout : timeout;
}

/// `timeout` from now, saturated: a deadline that never overflows (see max_timeout).
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) noexcept {
  return std::chrono::steady_clock::now() + bounded_timeout(timeout);
}

/// The most calls a flight record keeps: 10 million entries are about 3 GB.
inline constexpr std::size_t flight_record_max = 10'000'000;

struct options {
  /// How long one collective may wait for its peers before it fails with `timeout`.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};

  progress_mode progress = progress_mode::caller;

  /// How many of its last calls a communicator keeps in its flight record
  /// (MIMATRIX_FLIGHT_RECORD; 0: none). Read when the communicator opens. Off by default
  /// until it costs at most 2% of an 8 B call over shm (measured 2.5-12%, docs/faults.md).
  std::size_t flight_record = 0;

  /// Defaults, overridden by MIMATRIX_TIMEOUT_MS, MIMATRIX_PROGRESS and
  /// MIMATRIX_FLIGHT_RECORD when they are set.
  /// A deadline beyond max_timeout (or beyond a long long) is cut to max_timeout.
  MIMATRIX_DECL static options from_environment();
};

/// What one runtime-typed call (collectives<>) may set besides its buffers.
struct call_options {
  /// An algorithm by name ("ring", "gdraa", "hdrm", "halving_doubling",
  /// "recursive_doubling", "hierarchical"), or empty for algorithm::automatic (the cost
  /// model, or a MIMATRIX_ALGO rule), as "automatic" is. Every rank must name the same one.
  std::string algorithm{};
  /// A deadline for this call instead of the communicator's; positive.
  std::optional<std::chrono::milliseconds> timeout{};
  /// Set: the buffers are device memory of the stream's port, and the call is ordered on
  /// the stream as NCCL's calls are: it runs after the work queued there before it, and
  /// the work queued there after it sees its result. Keep the request until then (a
  /// dropped one waits on the host). Unset: host memory.
  std::optional<device::stream> stream{};
  /// The caller's label of this call (a bucket's index, say), which every rank must give
  /// the same call. Calls still match by their order of starting; a rank whose call at
  /// that place carries another tag fails with `mismatch`, naming both, where two
  /// calls of one shape started in different orders would otherwise reduce each other's
  /// data. It also names the call in errors and in call_record. 0: untagged.
  std::uint32_t tag = 0;

  /// The algorithm it pins; empty where it leaves the choice to algorithm::automatic.
  std::string_view pinned_algorithm() const {
    return algorithm == "automatic" ? std::string_view() : std::string_view(algorithm);
  }
};

}  // namespace mimatrix

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/core/impl/options.ipp"
#endif

// Per-communicator settings: deadlines that are finite by default and can be set
// from the environment (MIMATRIX_TIMEOUT_MS) without recompiling.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mimatrix/core/error.hpp"

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
  return std::clamp(timeout, std::chrono::milliseconds(0), max_timeout);
}

/// `timeout` from now, saturated: a deadline that never overflows (see max_timeout).
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) noexcept {
  return std::chrono::steady_clock::now() + bounded_timeout(timeout);
}

struct options {
  /// How long one collective may wait for its peers before it fails with `timeout`.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};

  progress_mode progress = progress_mode::caller;

  /// Defaults, overridden by MIMATRIX_TIMEOUT_MS and MIMATRIX_PROGRESS when they are set.
  /// A deadline beyond max_timeout (or beyond a long long) is cut to max_timeout.
  static options from_environment() {
    options o;
    if (const char* v = std::getenv("MIMATRIX_TIMEOUT_MS"); v && *v) {
      char* end = nullptr;
      const long long ms = std::strtoll(v, &end, 10);
      if (*end != '\0' || ms <= 0)
        throw error(errc::invalid_argument, "MIMATRIX_TIMEOUT_MS must be a positive number of milliseconds, got '" +
                                                std::string(v) + "'");
      o.timeout = bounded_timeout(std::chrono::milliseconds(ms));  // strtoll saturates too
    }
    if (const char* v = std::getenv("MIMATRIX_PROGRESS"); v && *v) {
      const std::string mode(v);
      if (mode != "caller" && mode != "thread")
        throw error(errc::invalid_argument, "MIMATRIX_PROGRESS must be 'caller' or 'thread', got '" + mode + "'");
      o.progress = mode == "thread" ? progress_mode::thread : progress_mode::caller;
    }
    return o;
  }
};

}  // namespace mimatrix

// Per-communicator settings: deadlines that are finite by default and can be set
// from the environment (MIMATRIX_TIMEOUT_MS) without recompiling.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>

#include "mimatrix/core/error.hpp"

namespace mimatrix {

struct options {
  /// How long one collective may wait for its peers before it fails with `timeout`.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};

  /// Defaults, overridden by MIMATRIX_TIMEOUT_MS when it is set.
  static options from_environment() {
    options o;
    if (const char* v = std::getenv("MIMATRIX_TIMEOUT_MS"); v && *v) {
      char* end = nullptr;
      const long long ms = std::strtoll(v, &end, 10);
      if (*end != '\0' || ms <= 0)
        throw error(errc::invalid_argument, "MIMATRIX_TIMEOUT_MS must be a positive number of milliseconds, got '" +
                                                std::string(v) + "'");
      o.timeout = std::chrono::milliseconds(ms);
    }
    return o;
  }
};

}  // namespace mimatrix

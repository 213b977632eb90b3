// options::from_environment: in every unit when header-only, once with separate compilation.
#pragma once

#include <cstdlib>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"

namespace mimatrix {

MIMATRIX_DECL options options::from_environment() {
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

}  // namespace mimatrix

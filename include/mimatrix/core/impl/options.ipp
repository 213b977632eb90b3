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
  if (const char* v = std::getenv("MIMATRIX_FLIGHT_RECORD"); v && *v) {
    // Digits only: strtoull would take "-1" as 2^64 - 1 and " 5" as 5.
    char* end = nullptr;
    const unsigned long long n = *v >= '0' && *v <= '9' ? std::strtoull(v, &end, 10) : 0;
    if (!end || *end != '\0' || n > flight_record_max)
      throw error(errc::invalid_argument, "MIMATRIX_FLIGHT_RECORD must be a number of calls in [0, " +
                                              std::to_string(flight_record_max) + "] (0: off), got '" +
                                              std::string(v) + "'");
    o.flight_record = std::size_t(n);
  }
  return o;
}

}  // namespace mimatrix

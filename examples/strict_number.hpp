// Strict numbers on a command line: the whole string, range-checked, the error naming the
// flag and the value (std::stoll took "12x" as 12, std::atoi "abc" as 0). Shared by the
// examples and the benchmarks (which include it from here).
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

namespace mimatrix::examples {

/// A flag's whole value as an integer in [lo, hi].
inline std::int64_t parse_integer(const std::string& flag, const std::string& v, std::int64_t lo,
                                  std::int64_t hi = std::numeric_limits<std::int64_t>::max()) {
  std::int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec == std::errc::invalid_argument || end != v.data() + v.size())
    throw std::invalid_argument(flag + " takes an integer, not '" + v + "'");
  if (ec == std::errc::result_out_of_range || x < lo || x > hi)
    throw std::invalid_argument(flag + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], not " + v);
  return x;
}

inline std::string shortest(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

/// A flag's whole value as a finite number in [lo, hi] (lo_open: strictly above lo).
inline double parse_number(const std::string& flag, const std::string& v, double lo, double hi, bool lo_open = false) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0])) || used != v.size() || !std::isfinite(x))
    throw std::invalid_argument(flag + " takes a number, not '" + v + "'");
  if (x < lo || x > hi || (lo_open && x == lo))
    throw std::invalid_argument(flag + " must be " + (lo_open ? "> " : ">= ") + shortest(lo) + " and <= " + shortest(hi) +
                                ", not " + v);
  return x;
}

}  // namespace mimatrix::examples

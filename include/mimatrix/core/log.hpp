// Diagnostics on stderr, switched on by MIMATRIX_DEBUG=WARN|INFO|TRACE (like NCCL_DEBUG).
#pragma once

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace mimatrix {

enum class log_level : int { none, warn, info, trace };

/// MIMATRIX_DEBUG as a level (case-insensitive; unset or unknown: none), or `text`'s.
inline log_level parse_log_level(std::string_view text) {
  std::string v(text);
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (v == "WARN") return log_level::warn;
  if (v == "INFO") return log_level::info;
  if (v == "TRACE") return log_level::trace;
  return log_level::none;
}

/// Read once, on first use.
inline log_level debug_level() {
  static const log_level level = [] {
    const char* v = std::getenv("MIMATRIX_DEBUG");
    return v ? parse_log_level(v) : log_level::none;
  }();
  return level;
}

inline bool log_enabled(log_level level) { return level != log_level::none && debug_level() >= level; }

/// One line, "mimatrix INFO <message>", written with one call so that lines from
/// different threads do not interleave.
///
/// @par Thread Safety
/// Safe from any thread.
inline void log(log_level level, std::string_view message) {
  if (!log_enabled(level)) return;
  std::string line = level == log_level::warn ? "mimatrix WARN " : level == log_level::info ? "mimatrix INFO " : "mimatrix TRACE ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace mimatrix

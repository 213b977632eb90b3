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

/// What is wrong with MIMATRIX_DEBUG=`text`, or "" when it is a level, empty, NONE, OFF or 0.
inline std::string debug_setting_complaint(std::string_view text) {
  std::string v(text);
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (parse_log_level(v) != log_level::none || v.empty() || v == "NONE" || v == "OFF" || v == "0") return "";
  return "mimatrix: MIMATRIX_DEBUG='" + std::string(text) + "' is not WARN, INFO or TRACE (nor NONE): no log";
}

/// Read once, on first use. A value that is no level says so once on stderr, where the
/// user looks for the log they asked for.
inline log_level debug_level() {
  static const log_level level = [] {
    const char* v = std::getenv("MIMATRIX_DEBUG");
    if (!v) return log_level::none;
    if (const std::string complaint = debug_setting_complaint(v); !complaint.empty())
      std::fprintf(stderr, "%s\n", complaint.c_str());
    return parse_log_level(v);
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

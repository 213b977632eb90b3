// MIMATRIX_TIMELINE=file.json: every call as a Chrome trace event ("ph":"X"), which
// Perfetto and chrome://tracing load, as Horovod's timeline. One file a communicator of a
// process, named by its group and its world rank; events carry the world rank as pid and
// wall-clock microseconds, so the files of every host and group merge into one view.
#pragma once

#include <chrono>
#include <cstdint>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "mimatrix/call_record.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::detail {

/// Who writes a timeline: the communicator's group as its transport names it (alike on its
/// ranks, unlike any other group this process opened: "world/0", "world/0split0/color1/0")
/// and the rank of its process in the world.
struct timeline_member {
  std::string group;
  int world_rank = 0;
};

/// `group` as a part of a file name: '/' and anything else not [A-Za-z0-9._] become '-'.
inline std::string timeline_file_part(std::string_view group) {
  std::string part;
  for (char c : group) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
    part += plain ? c : '-';
  }
  return part.empty() ? "group" : part;
}

/// The file `who` writes for MIMATRIX_TIMELINE=`pattern`: "%g" becomes the group and "%r"
/// the world rank; those missing go before the extension as ".<group>" and ".rank<r>".
inline std::string timeline_path(std::string pattern, const timeline_member& who) {
  std::string added;
  if (const auto at = pattern.find("%g"); at != std::string::npos) pattern.replace(at, 2, timeline_file_part(who.group));
  else added += "." + timeline_file_part(who.group);
  if (const auto at = pattern.find("%r"); at != std::string::npos) pattern.replace(at, 2, std::to_string(who.world_rank));
  else added += ".rank" + std::to_string(who.world_rank);
  const auto dot = pattern.rfind('.');
  const auto slash = pattern.rfind('/');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  return has_extension ? pattern.insert(dot, added) : pattern + added;
}

/// `text` inside a JSON string: quotes, backslashes and control characters escaped.
inline std::string json_escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

/// @par Thread Safety
/// write() from any thread.
class timeline_file {
 public:
  /// Throws `invalid_argument` naming the world rank when `path` cannot be written.
  timeline_file(const std::string& path, timeline_member who)
      : file_(std::fopen(path.c_str(), "w")), who_(std::move(who)) {
    if (!file_)
      throw error(errc::invalid_argument, "rank " + std::to_string(who_.world_rank) + " (world): MIMATRIX_TIMELINE: cannot write '" + path +
                                              "' for group '" + who_.group + "'");
    // A track a communicator: its calls may overlap the process's other communicators'.
    std::fprintf(file_,
                 "[\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}},\n"
                 "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                 who_.world_rank, who_.world_rank, who_.world_rank, tid_, json_escaped(who_.group).c_str());
  }
  timeline_file(const timeline_file&) = delete;
  timeline_file& operator=(const timeline_file&) = delete;
  ~timeline_file() {
    std::fputs("\n]\n", file_);
    std::fclose(file_);
  }

  void write(const call_record& r) {
    const std::int64_t start_ns = wall_ns(r.start);
    const double dur_us = std::chrono::duration<double, std::micro>(r.end - r.start).count();
    std::lock_guard lock(mutex_);
    std::fprintf(file_,
                 ",\n{\"name\": \"%s #%llu\", \"cat\": \"mimatrix\", \"ph\": \"X\", \"ts\": %lld.%03lld, \"dur\": %.3f, "
                 "\"pid\": %d, \"tid\": %d, \"args\": {\"group\": \"%s\", \"rank\": %d, \"algorithm\": \"%s\", "
                 "\"dtype\": \"%s\", \"bytes\": %zu, \"busbw_gbps\": %.4f, \"waited_on\": %d, \"tag\": %u, "
                 "\"error\": \"%s\"}}",
                 std::string(r.name()).c_str(), static_cast<unsigned long long>(r.sequence),
                 static_cast<long long>(start_ns / 1000), static_cast<long long>(start_ns % 1000), dur_us,
                 who_.world_rank, tid_, json_escaped(who_.group).c_str(), r.rank, json_escaped(r.algorithm).c_str(),
                 std::string(to_string(r.type)).c_str(), r.bytes, r.bus_bandwidth_gbps(), r.waited_on, r.tag,
                 r.error ? json_escaped(r.error.message()).c_str() : "");
    std::fflush(file_);
  }

 private:
  /// Nanoseconds since the epoch by the wall clock, which hosts share (NTP): the records'
  /// steady clock starts anywhere, so each file would begin at another moment.
  static int next_track() {
    static std::atomic<int> opened{0};
    return opened++;
  }
  std::int64_t wall_ns(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch() + wall_minus_steady_).count();
  }

  std::FILE* file_;
  timeline_member who_;
  int tid_ = next_track();
  std::chrono::nanoseconds wall_minus_steady_ = std::chrono::system_clock::now().time_since_epoch() -
                                                std::chrono::steady_clock::now().time_since_epoch();
  std::mutex mutex_;
};

}  // namespace mimatrix::detail

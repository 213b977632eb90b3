// MIMATRIX_TIMELINE=file.json: every call as a Chrome trace event ("ph":"X"), which
// Perfetto and chrome://tracing load, as Horovod's timeline. One file a rank: "%r" in the
// name becomes the rank, else ".rank<r>" goes before the extension when there are several.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "mimatrix/call_record.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::detail {

/// The file rank `rank` of `size` writes for MIMATRIX_TIMELINE=`pattern`.
inline std::string timeline_path(std::string pattern, int rank, int size) {
  if (const auto at = pattern.find("%r"); at != std::string::npos) return pattern.replace(at, 2, std::to_string(rank));
  if (size == 1) return pattern;
  const auto dot = pattern.rfind('.');
  const auto slash = pattern.rfind('/');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  return has_extension ? pattern.insert(dot, ".rank" + std::to_string(rank)) : pattern + ".rank" + std::to_string(rank);
}

/// @par Thread Safety
/// write() from any thread.
class timeline_file {
 public:
  explicit timeline_file(const std::string& path) : file_(std::fopen(path.c_str(), "w")), path_(path) {
    if (!file_) throw error(errc::invalid_argument, "MIMATRIX_TIMELINE: cannot write '" + path + "'");
    std::fputs("[\n", file_);
  }
  timeline_file(const timeline_file&) = delete;
  timeline_file& operator=(const timeline_file&) = delete;
  ~timeline_file() {
    std::fputs("\n]\n", file_);
    std::fclose(file_);
  }

  void write(const call_record& r) {
    const auto us = [](auto t) {
      return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
    };
    std::lock_guard lock(mutex_);
    std::fprintf(file_,
                 "%s{\"name\": \"%s #%llu\", \"cat\": \"mimatrix\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, "
                 "\"pid\": %d, \"tid\": 0, \"args\": {\"algorithm\": \"%s\", \"dtype\": \"%s\", \"bytes\": %zu, "
                 "\"busbw_gbps\": %.4f, \"waited_on\": %d, \"tag\": %u, \"error\": \"%s\"}}",
                 first_ ? "" : ",\n", std::string(schedule::to_string(r.kind)).c_str(),
                 static_cast<unsigned long long>(r.sequence), us(r.start), us(r.end) - us(r.start), r.rank,
                 r.algorithm.c_str(), std::string(to_string(r.type)).c_str(), r.bytes, r.bus_bandwidth_gbps(),
                 r.waited_on, r.tag, r.error ? r.error.message().c_str() : "");
    first_ = false;
    std::fflush(file_);
  }

 private:
  std::FILE* file_;
  std::string path_;
  std::mutex mutex_;
  bool first_ = true;
};

}  // namespace mimatrix::detail

// A flight record's dump: one JSON file a communicator of a process, which
// scripts/mimatrix-trace reads with every other rank's. Written from a snapshot, never
// under a lock that calls take.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <unistd.h>

#include "mimatrix/core/error.hpp"
#include "mimatrix/detail/flight_record.hpp"
#include "mimatrix/detail/timeline.hpp"

namespace mimatrix::detail {

/// Who a dump is of: the communicator's group, its world rank, and its place in the group.
struct flight_member {
  std::string group;
  int world_rank = 0;
  int rank = 0;
  int size = 1;
};

/// The directory of dumps: MIMATRIX_FLIGHT_RECORD_DIR, else /tmp (as PyTorch's Flight
/// Recorder; a job over several hosts sets a shared directory).
inline std::string flight_directory() {
  const char* dir = std::getenv("MIMATRIX_FLIGHT_RECORD_DIR");
  return dir && *dir ? std::string(dir) : std::string("/tmp");
}

/// `<dir>/flight.<group>.rank<world rank>.json`: a later dump of the same communicator
/// replaces the earlier.
inline std::string flight_path(const flight_member& who) {
  return flight_directory() + "/flight." + timeline_file_part(who.group) + ".rank" + std::to_string(who.world_rank) +
         ".json";
}

/// Microseconds since the epoch, for JSON numbers that a double holds exactly.
inline long long flight_us(std::int64_t ns) { return static_cast<long long>(ns / 1000); }

inline void write_flight_entry(std::FILE* f, const flight_entry& e) {
  std::fprintf(f,
               "{\"sequence\": %llu, \"tag\": %u, \"collective\": \"%s\", \"barrier\": %s, \"dtype\": \"%s\", "
               "\"op\": \"%s\", \"in_count\": %llu, \"out_count\": %llu, \"root\": %d, \"algorithm\": \"%s\", "
               "\"path\": \"%s\", \"lowered\": %s, \"state\": \"%s\", \"started_us\": %lld",
               static_cast<unsigned long long>(e.sequence), e.tag, std::string(schedule::to_string(e.kind)).c_str(),
               e.barrier ? "true" : "false", std::string(to_string(e.type)).c_str(),
               std::string(reduce::to_string(e.op)).c_str(), static_cast<unsigned long long>(e.in_count),
               static_cast<unsigned long long>(e.out_count), e.root, json_escaped(e.algorithm).c_str(),
               std::string(to_string(e.path)).c_str(), e.lowered ? "true" : "false",
               std::string(to_string(e.state)).c_str(), flight_us(e.started_ns));
  if (e.state == flight_state::failed) std::fprintf(f, ", \"ended_us\": %lld", flight_us(e.ended_ns));
  if (e.state == flight_state::completed) std::fprintf(f, ", \"completed_by_us\": %lld", flight_us(e.ended_ns));
  if (e.state == flight_state::failed)
    std::fprintf(f, ", \"error\": \"%s\", \"message\": \"%s\"",
                 json_escaped(make_error_code(static_cast<errc>(e.error)).message()).c_str(),
                 json_escaped(e.message).c_str());
  if (e.stall_step >= 0)
    std::fprintf(f, ", \"waiting\": {\"step\": %lld, \"kind\": \"%s\", \"peer\": %d, \"tag\": %u, \"bytes\": %llu}",
                 static_cast<long long>(e.stall_step), std::string(schedule::to_string(e.stall_kind)).c_str(),
                 e.stall_peer, e.stall_tag, static_cast<unsigned long long>(e.stall_bytes));
  std::fputs("}", f);
}

/// Writes `snap` of `who` to `path` (through a temporary file, renamed: a reader never sees
/// half a dump); `reason` says what asked for it ("timeout", "signal", "request").
/// Throws `invalid_argument` naming the rank when `path` cannot be written.
inline void write_flight_dump(const std::string& path, const flight_member& who, const flight_snapshot& snap,
                              std::string_view reason) {
  static std::atomic<unsigned> dumps{0};  // two threads may dump one communicator at once
  const std::string temporary = path + ".part" + std::to_string(::getpid()) + "." + std::to_string(dumps++);
  std::FILE* f = std::fopen(temporary.c_str(), "w");
  if (!f)
    throw error(errc::invalid_argument, "rank " + std::to_string(who.world_rank) +
                                            " (world): flight record: cannot write '" + temporary + "' for group '" +
                                            who.group + "' (MIMATRIX_FLIGHT_RECORD_DIR)");
  char host[256] = {};
  (void)::gethostname(host, sizeof host - 1);
  std::fprintf(f,
               "{\"mimatrix_flight_record\": 1, \"group\": \"%s\", \"world_rank\": %d, \"rank\": %d, \"size\": %d, "
               "\"host\": \"%s\", \"pid\": %d, \"reason\": \"%s\", \"dumped_us\": %lld, \"capacity\": %zu, "
               "\"recorded\": %llu, \"calls\": [",
               json_escaped(who.group).c_str(), who.world_rank, who.rank, who.size, json_escaped(host).c_str(),
               static_cast<int>(::getpid()), json_escaped(reason).c_str(), flight_us(wall_now_ns()), snap.capacity,
               static_cast<unsigned long long>(snap.recorded));
  for (std::size_t k = 0; k < snap.calls.size(); ++k) {
    std::fputs(k ? ",\n  " : "\n  ", f);
    write_flight_entry(f, snap.calls[k]);
  }
  std::fputs("\n]}\n", f);
  const bool written = std::fflush(f) == 0 && !std::ferror(f);
  std::fclose(f);
  if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw error(errc::invalid_argument, "rank " + std::to_string(who.world_rank) +
                                            " (world): flight record: cannot write '" + path + "'");
  }
}

}  // namespace mimatrix::detail

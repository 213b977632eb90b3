// Whose files in /dev/shm are the library's, and whether their owner lives (issue 53). A
// process marks itself there before its first endpoint: "mimatrix-owner-p<pid>-<start>",
// holding its process_mark. The files under a marked pid (shm_files.hpp: libfabric shm's
// "<pid>:<domain>:<endpoint>" regions, 16 MiB each, and mimatrix's mailbox segments) are
// then provably a mimatrix process's, and the mark says whether that process ended.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "mimatrix/bootstrap/detail/process_mark.hpp"
#include "mimatrix/bootstrap/detail/shm_files.hpp"

namespace mimatrix::bootstrap::detail {

inline constexpr std::string_view shm_owner_prefix = "mimatrix-owner-p";

/// Writes `self`'s mark in `dir` (where it can be checked); whether it did.
inline bool mark_shm_owner(const process_mark& self, const std::string& dir = "/dev/shm") {
  const std::string text = self.encode();
  if (text.empty()) return false;
  const std::string path =
      dir + "/" + std::string(shm_owner_prefix) + std::to_string(self.pid) + "-" + std::to_string(self.started);
  std::ofstream out(path, std::ios::trunc);
  return bool(out << text << '\n');
}

/// The mark a file of `dir` named `name` holds, if it is one.
inline std::optional<process_mark> shm_owner_of(const std::string& dir, std::string_view name) {
  if (!name.starts_with(shm_owner_prefix)) return std::nullopt;
  std::ifstream in(dir + "/" + std::string(name));
  std::stringstream text;
  text << in.rdbuf();
  auto mark = process_mark::decode(text.str());
  const std::string expected = std::string(shm_owner_prefix) + (mark ? std::to_string(mark->pid) + "-" + std::to_string(mark->started) : "");
  return mark && name == expected ? mark : std::nullopt;
}

/// When `path` last changed (its ctime), in clock ticks after boot, as process start times
/// are counted; none when it cannot be read.
inline std::optional<std::int64_t> changed_after_boot(const std::string& path) {
  struct stat st {};
  timespec real{}, boot{};
  if (::stat(path.c_str(), &st) != 0 || ::clock_gettime(CLOCK_REALTIME, &real) != 0 ||
      ::clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
    return std::nullopt;
  const auto ns = [](const timespec& t) { return std::int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec; };
  return (ns(st.st_ctim) - ns(real) + ns(boot)) / (1'000'000'000 / ::sysconf(_SC_CLK_TCK));
}

/// Removes the files in `dir` of every process marked there that has ended, and its mark;
/// returns how many it removed. Kept: those of a live process, of a mark `self` cannot
/// check (another boot, pid namespace or emulated host), and of a pid no mark names. Where
/// the pid is another process's now, only the files that last changed a second or more
/// before that one started: the rest may be its own.
inline std::size_t remove_shm_files_of_ended_owners(const process_mark& self, const std::string& dir = "/dev/shm") {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
  }
  std::size_t removed = 0;
  for (const std::string& marker : names) {
    const auto owner = shm_owner_of(dir, marker);
    if (!owner || owner->pid == self.pid || !self.can_check(*owner) || !owner->ended()) continue;
    // When the process that holds the pid now started; -1: none, or the owner, a zombie.
    const auto now_holder = process_mark::start_of(owner->pid);
    const std::int64_t successor = now_holder && *now_holder != owner->started ? std::int64_t(*now_holder) : -1;
    const std::int64_t margin = ::sysconf(_SC_CLK_TCK);
    for (const std::string& name : names) {
      if (name == marker || !shm_file_of(name, pid_t(owner->pid))) continue;
      const std::string path = dir + "/" + name;
      const auto changed = changed_after_boot(path);
      const bool before_successor = successor < 0 || (changed && *changed + margin < successor);
      if (before_successor && ::unlink(path.c_str()) == 0) ++removed;
    }
    if (::unlink((dir + "/" + marker).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace mimatrix::bootstrap::detail

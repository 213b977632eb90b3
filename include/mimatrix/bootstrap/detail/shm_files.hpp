// What a dead process leaves in /dev/shm: libfabric's shm provider names its regions after
// the process id ("<pid>:<n>:<m>"), and mimatrix's mailbox segments carry it too
// ("mimatrix-...-p<pid>-..."). A process with a recycled pid fails to open its endpoint
// over the former (fi_enable: -FI_EBUSY); both waste memory. Whoever knows the owner is
// dead removes them: the process itself before its first endpoint (its pid cannot have
// any yet), and the launcher after a rank dies.
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace mimatrix::bootstrap::detail {

/// Whether `name`, a file in /dev/shm, belongs to process `pid` by the names above.
inline bool shm_file_of(std::string_view name, pid_t pid) {
  const std::string id = std::to_string(pid);
  if (name.starts_with(id + ":")) return true;
  return name.starts_with("mimatrix-") && name.find("-p" + id + "-") != std::string_view::npos;
}

/// Removes the files in `dir` that belong to `pid`; returns how many it removed.
inline std::size_t remove_shm_files_of(pid_t pid, const std::string& dir = "/dev/shm") {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::size_t removed = 0;
  while (const dirent* e = ::readdir(d))
    if (shm_file_of(e->d_name, pid) && ::unlink((dir + "/" + e->d_name).c_str()) == 0) ++removed;
  ::closedir(d);
  return removed;
}

}  // namespace mimatrix::bootstrap::detail

// What killed ranks leave in /dev/shm must not break a later job. libfabric's shm provider
// names each endpoint's region after its process id (/dev/shm/<pid>:<n>:<m>); a killed
// rank's regions stay, and a later process that gets the same pid fails in fi_enable
// with -FI_EBUSY. Before its first endpoint, a process removes the regions under its own
// pid: none of them can be its own yet, so their owner is gone.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

namespace mimatrix::transport::detail::fabric {

/// Removes the files in `dir` named "<pid>:..."; returns how many it removed.
inline std::size_t remove_shm_regions_of(pid_t pid, const std::string& dir) {
  const std::string prefix = std::to_string(pid) + ":";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::size_t removed = 0;
  while (const dirent* e = ::readdir(d))
    if (std::string_view(e->d_name).starts_with(prefix) && ::unlink((dir + "/" + e->d_name).c_str()) == 0)
      ++removed;
  ::closedir(d);
  return removed;
}

/// Once a process (a forked child is another): the regions a dead process with this pid
/// left in /dev/shm. Called before the process opens its first shm endpoint.
inline std::size_t remove_stale_shm_regions() {
  static std::mutex mutex;
  static pid_t cleaned = 0;
  std::lock_guard lock(mutex);
  const pid_t self = ::getpid();
  if (cleaned == self) return 0;
  cleaned = self;
  return remove_shm_regions_of(self, "/dev/shm");
}

}  // namespace mimatrix::transport::detail::fabric

// What killed ranks leave in /dev/shm must not break a later job (bootstrap/detail/
// shm_files.hpp says what and why). Before its first endpoint, a process removes the
// files under its own pid: none of them can be its own yet, so their owner is gone.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <mutex>

#include "mimatrix/bootstrap/detail/shm_files.hpp"

namespace mimatrix::transport::detail::fabric {

/// Once a process (a forked child is another): the files a dead process with this pid
/// left in /dev/shm. Called before the process opens its first shm endpoint.
inline std::size_t remove_stale_shm_regions() {
  static std::mutex mutex;
  static pid_t cleaned = 0;
  std::lock_guard lock(mutex);
  const pid_t self = ::getpid();
  if (cleaned == self) return 0;
  cleaned = self;
  return bootstrap::detail::remove_shm_files_of(self);
}

}  // namespace mimatrix::transport::detail::fabric

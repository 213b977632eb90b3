// What killed ranks leave in /dev/shm must not break a later job nor fill the host's memory
// (bootstrap/detail/shm_files.hpp and shm_owners.hpp say what and why). Before its first
// endpoint, a process removes the files under its own pid (none can be its own yet, so
// their owner is gone) and marks itself their owner; at every endpoint, it removes those
// of every marked process on this host that has ended.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <mutex>

#include "mimatrix/bootstrap/detail/process_mark.hpp"
#include "mimatrix/bootstrap/detail/shm_files.hpp"
#include "mimatrix/bootstrap/detail/shm_owners.hpp"

namespace mimatrix::transport::detail::fabric {

/// Called before an endpoint opens; returns how many files it removed. The first call of
/// a process (a forked child is another) removes the files a dead process with this pid
/// left and marks this process; every call removes those of ended marked processes.
inline std::size_t remove_stale_shm_regions() {
  static std::mutex mutex;
  static pid_t marked = 0;
  std::lock_guard lock(mutex);
  const auto self = bootstrap::detail::process_mark::self();
  std::size_t removed = 0;
  if (marked != ::getpid()) {
    marked = ::getpid();
    removed += bootstrap::detail::remove_shm_files_of(marked);
    (void)bootstrap::detail::mark_shm_owner(self);
  }
  return removed + bootstrap::detail::remove_shm_files_of_ended_owners(self);
}

}  // namespace mimatrix::transport::detail::fabric

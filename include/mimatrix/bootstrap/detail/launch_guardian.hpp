// The launcher's guardian: a process forked before the ranks that ends every rank's process
// group if the launcher dies without doing it (SIGKILL, a crash). A rank's own child dies
// with the launcher (PR_SET_PDEATHSIG), but what that child started does not: a rank run
// through a wrapper script went on training with no parent (a black-box test). Then it
// removes the shared memory of the ranks it ended (shm_owners.hpp).
#pragma once

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <ctime>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/detail/process_mark.hpp"
#include "mimatrix/bootstrap/detail/shm_owners.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::bootstrap::detail {

/// The launcher's side: tells the guardian each rank's process group as it starts, and that
/// the launch ended cleanly (the guardian then exits at once).
/// @par Thread Safety
/// One thread (the launcher's).
class launch_guardian {
 public:
  /// Forks the guardian for at most `ranks` groups; SIGTERM then, after `kill_after`, SIGKILL.
  launch_guardian(std::size_t ranks, std::chrono::milliseconds kill_after) : groups_(ranks) {
    // A socket pair, not a pipe: a write after the guardian died (someone killed it) must
    // fail, not raise SIGPIPE in the launcher (MSG_NOSIGNAL).
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
      throw error(std::error_code(errno, std::system_category()), "launch_local: could not make the guardian's socket");
    unique_fd read_end(fds[0]);
    write_.reset(fds[1]);
    pid_ = ::fork();
    if (pid_ < 0)
      throw error(std::error_code(errno, std::system_category()), "launch_local: could not fork the guardian");
    if (pid_ == 0) guard(read_end.get(), kill_after);  // never returns
  }
  launch_guardian(const launch_guardian&) = delete;
  launch_guardian& operator=(const launch_guardian&) = delete;
  /// The launch is over and its ranks are reaped: the guardian ends without a signal.
  ~launch_guardian() {
    const pid_t done = 0;
    (void)!::send(write_.get(), &done, sizeof done, MSG_NOSIGNAL);
    write_.reset();
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

  /// Rank process group `group` started.
  void add(pid_t group) { (void)!::send(write_.get(), &group, sizeof group, MSG_NOSIGNAL); }

 private:
  // In the forked child of a possibly multi-threaded process: system calls only.
  [[noreturn]] void guard(int fd, std::chrono::milliseconds kill_after) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::sigaction(s, &ignore, nullptr);
    ::setpgid(0, 0);  // away from the terminal's signals: they are the launcher's to handle
    // Only the socket stays open: an inherited socket or output pipe held here would outlive
    // the launcher (a listening port not freed, a reader waiting for EOF).
    const int kept = ::fcntl(fd, F_DUPFD, 10);  // above stdio, which /dev/null replaces
    const int null = ::open("/dev/null", O_RDWR);
    for (int to = 0; to < 3 && null >= 0; ++to) ::dup2(null, to);
    ::dup2(kept, 3);
    ::close_range(4, ~0u, 0);
    std::size_t n = 0;
    for (;;) {
      pid_t group = 0;
      std::size_t have = 0;
      while (have < sizeof group) {
        const ssize_t got = ::read(3, reinterpret_cast<char*>(&group) + have, sizeof group - have);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        have += std::size_t(got);
      }
      if (have < sizeof group) break;  // EOF: the launcher died without saying it was done
      if (group == 0) ::_exit(0);
      if (n < groups_.size()) groups_[n++] = group;
    }
    for (std::size_t i = 0; i < n; ++i) ::kill(-groups_[i], SIGTERM);
    if (!wait_for_groups(n, kill_after)) {
      for (std::size_t i = 0; i < n; ++i) ::kill(-groups_[i], SIGKILL);
      (void)wait_for_groups(n, std::chrono::seconds(2));
    }
    // The ranks it ended could not remove their shared memory. The only code here that
    // allocates, last and after the ranks are gone: glibc's fork leaves malloc usable in
    // the child, and a guardian that hung here would hold nothing the ranks need.
    remove_shm_files_of_ended_owners(self_);
    ::_exit(0);
  }

  /// Whether the first `n` groups ended within `limit`, polled every 50 ms.
  bool wait_for_groups(std::size_t n, std::chrono::milliseconds limit) const {
    for (long long k = 0; k <= limit.count() / 50; ++k) {
      bool alive = false;
      for (std::size_t i = 0; i < n; ++i) alive = alive || ::kill(-groups_[i], 0) == 0;
      if (!alive) return true;
      const timespec pause{0, 50'000'000};
      ::nanosleep(&pause, nullptr);
    }
    return false;
  }

  std::vector<pid_t> groups_;  // allocated before the fork: the guardian only writes into it
  process_mark self_ = process_mark::self();  // read before the fork: whose marks it can check
  unique_fd write_;
  pid_t pid_ = -1;
};

}  // namespace mimatrix::bootstrap::detail

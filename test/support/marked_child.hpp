// A forked child process that tells its parent its process mark, for the tests that
// watch peers on this host (process marks, the provider watchdog).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "mimatrix/bootstrap/detail/process_mark.hpp"

namespace mimatrix::test {

struct marked_child {
  pid_t pid;
  bootstrap::detail::process_mark mark;
};

/// Forks a child that sends its mark through a pipe, then exits at once or (the default)
/// pauses until it is signalled; returns once the mark has arrived.
inline marked_child spawn_marked_child(bool exit_at_once = false) {
  using bootstrap::detail::process_mark;
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    const std::string text = process_mark::self().encode();
    (void)!::write(fds[1], text.data(), text.size());
    ::close(fds[1]);
    if (exit_at_once) ::_exit(0);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, std::size_t(n));
  ::close(fds[0]);
  const auto mark = process_mark::decode(text);
  if (!mark) throw std::runtime_error("the child sent no mark: '" + text + "'");
  return {pid, *mark};
}

}  // namespace mimatrix::test

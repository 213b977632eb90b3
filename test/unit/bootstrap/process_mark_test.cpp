// bootstrap::detail::process_mark: a peer process on this host reads as running, stopped or
// ended from /proc, and one reaped while its stat file is being read reads as ended (that
// read fails with ESRCH; a stream threw there, which escaped a liveness probe in CI).
#include "mimatrix/bootstrap/detail/process_mark.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

namespace {

using mimatrix::bootstrap::detail::process_mark;

// A child that sends its mark through a pipe, then exits at once or waits to be signalled.
process_mark spawn(bool exit_at_once, pid_t& pid) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  pid = ::fork();
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
  return *mark;
}

TEST(process_mark, a_running_stopped_and_killed_process_reads_as_such) {
  pid_t pid = 0;
  const process_mark mark = spawn(false, pid);
  ASSERT_TRUE(process_mark::self().can_check(mark));
  EXPECT_EQ(mark.state(), process_mark::status::running);
  int status = 0;
  ::kill(pid, SIGSTOP);
  ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
  EXPECT_EQ(mark.state(), process_mark::status::stopped);
  ::kill(pid, SIGKILL);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_EQ(mark.state(), process_mark::status::ended);
  EXPECT_TRUE(mark.ended());
}

TEST(process_mark, a_process_reaped_while_it_is_read_reads_as_ended_and_never_throws) {
  for (int i = 0; i < 200; ++i) {
    pid_t pid = 0;
    const process_mark mark = spawn(true, pid);
    std::atomic<bool> reaped{false};
    std::thread reaper([&] {
      int status = 0;
      ::waitpid(pid, &status, 0);
      reaped = true;
    });
    // Reads race the exit and the reaping: zombie, then gone, maybe between open and read.
    bool ended = false;
    for (int reads = 0; reads < 100000 && !ended; ++reads) {
      ASSERT_NO_THROW(ended = mark.ended()) << "child " << i;
    }
    reaper.join();
    EXPECT_TRUE(ended || mark.ended()) << "child " << i;
    EXPECT_TRUE(reaped);
  }
}

}  // namespace

// bootstrap::detail::process_mark: a peer process on this host reads as running, stopped or
// ended from /proc, and one reaped while its stat file is being read reads as ended (that
// read fails with ESRCH; a stream threw there, which escaped a liveness probe in CI).
#include "mimatrix/bootstrap/detail/process_mark.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "support/marked_child.hpp"

namespace MIMATRIX_UNIT_ID {

using mimatrix::bootstrap::detail::process_mark;
using mimatrix::test::spawn_marked_child;

TEST(process_mark, a_running_stopped_and_killed_process_reads_as_such) {
  const auto [pid, mark] = spawn_marked_child();
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
    const auto child = spawn_marked_child(true);
    const pid_t pid = child.pid;  // a plain name: lambdas capture no structured binding before clang 16
    const process_mark& mark = child.mark;
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

// Hosts emulated on one machine (mimatrix-run --hosts) must not see each other's
// processes, as real hosts cannot: the fault tests of a rank on another host rely on it.
TEST(process_mark, processes_on_two_emulated_hosts_cannot_check_each_other) {
  const char* before = std::getenv("MIMATRIX_HOST_ID");
  const std::string kept = before ? before : "";
  ::setenv("MIMATRIX_HOST_ID", "emulated host 0", 1);
  const process_mark first = process_mark::self();
  ::setenv("MIMATRIX_HOST_ID", "emulated-host-1", 1);
  const process_mark second = process_mark::self();
  if (before)
    ::setenv("MIMATRIX_HOST_ID", kept.c_str(), 1);
  else
    ::unsetenv("MIMATRIX_HOST_ID");
  if (first.where.empty()) GTEST_SKIP() << "this process cannot be checked here (no boot id or pid namespace)";
  EXPECT_FALSE(first.can_check(second));
  EXPECT_TRUE(first.can_check(first));
  const auto decoded = process_mark::decode(first.encode());  // one word: the host's spaces replaced
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->where, first.where);
}

}  // namespace

// Tests of bootstrap/launch.hpp: exit codes, captured and prefixed output, the environment
// the ranks see, the timeout and grace that kill ranks, and what ends with the launch (what
// a rank leaves in its process group; everything, through the guardian, if the launcher dies).
#include "mimatrix/bootstrap/launch.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::bootstrap::launch_local;
using mimatrix::bootstrap::launch_options;

launch_options shell(int ranks, const std::string& script) {
  launch_options o;
  o.ranks = ranks;
  o.argv = {"/bin/sh", "-c", script};
  o.capture = true;
  o.grace = 2s;
  return o;
}

TEST(launch_local, every_rank_exiting_0_is_success) {
  const auto r = launch_local(shell(3, "exit 0"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_EQ(r.status, (std::vector<int>{0, 0, 0}));
  EXPECT_FALSE(r.timed_out);
}

TEST(launch_local, the_first_failure_is_the_exit_code) {
  auto o = shell(3, "if [ \"$RANK\" = 1 ]; then exit 3; fi; exit 0");
  const auto r = launch_local(o);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.status, (std::vector<int>{0, 3, 0}));
}

TEST(launch_local, a_rank_killed_by_a_signal_is_128_plus_it) {
  const auto r = launch_local(shell(2, "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; exit 0"));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r.status, (std::vector<int>{128 + SIGKILL, 0}));
}

TEST(launch_local, removes_the_shared_memory_files_of_a_rank_killed_by_a_signal) {
  // What libfabric's shm provider and mimatrix's mailboxes name after a process; a rank
  // killed mid-job cannot remove them, and a later process with its pid would trip on them.
  auto o = shell(2,
                 "touch /dev/shm/$$:0:0 /dev/shm/mimatrix-mb-test-r$RANK-p$$-0123; echo $$; "
                 "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; exit 0");
  o.prefix = false;
  const auto r = launch_local(o);
  EXPECT_EQ(r.status, (std::vector<int>{128 + SIGKILL, 0}));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string pid = r.output[std::size_t(rank)].substr(0, r.output[std::size_t(rank)].find('\n'));
    ASSERT_FALSE(pid.empty());
    const bool killed = rank == 0;
    for (const std::string& file : {"/dev/shm/" + pid + ":0:0", "/dev/shm/mimatrix-mb-test-r" + std::to_string(rank) + "-p" + pid + "-0123"}) {
      EXPECT_EQ(::access(file.c_str(), F_OK) == 0, !killed) << file << (killed ? " stayed" : " was removed");
      ::unlink(file.c_str());  // a rank that exited by itself is trusted to have cleaned up
    }
  }
}

TEST(launch_local, ranks_see_their_environment) {
  auto o = shell(3, "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $EXTRA; echo port=$MASTER_PORT");
  o.prefix = false;
  o.env = {{"EXTRA", "x y"}};
  const auto r = launch_local(o);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.output.size(), 3u);
  std::string port;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string& out = r.output[rank];
    const std::string r_ = std::to_string(rank);
    EXPECT_EQ(out.substr(0, out.find('\n') + 1), r_ + " 3 " + r_ + " 3 127.0.0.1 x y\n") << out;
    const auto at = out.find("port=");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string p = out.substr(at + 5, out.find('\n', at) - at - 5);
    EXPECT_GT(std::stoi(p), 0) << out;
    if (rank == 0) port = p;
    EXPECT_EQ(p, port) << "every rank meets on one port";
  }
}

// Emulated hosts: ranks in rank order, each with its host's local rank and size and an id
// of its own host's, so that no memory is shared across them; they must divide evenly.
TEST(launch_local, ranks_spread_over_emulated_hosts_see_their_hosts) {
  auto o = shell(4, "echo $RANK $LOCAL_RANK $LOCAL_WORLD_SIZE $MIMATRIX_HOST_ID");
  o.prefix = false;
  o.hosts = 2;
  const auto r = launch_local(o);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, (std::vector<std::string>{"0 0 2 emulated-host-0\n", "1 1 2 emulated-host-0\n",
                                                 "2 0 2 emulated-host-1\n", "3 1 2 emulated-host-1\n"}));
  o.hosts = 3;
  try {
    (void)launch_local(o);
    ADD_FAILURE() << "4 ranks over 3 hosts were launched";
  } catch (const mimatrix::error& e) {
    EXPECT_NE(std::string(e.what()).find("4 ranks cannot be spread evenly over 3 hosts"), std::string::npos) << e.what();
  }
}

TEST(launch_local, options_env_wins_over_the_defaults) {
  auto o = shell(2, "echo $MASTER_ADDR:$MASTER_PORT $RANK");
  o.prefix = false;
  o.env = {{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "4242"}, {"RANK", "7"}};
  const auto r = launch_local(o);
  EXPECT_EQ(r.output, (std::vector<std::string>{"10.1.2.3:4242 7\n", "10.1.2.3:4242 7\n"}));
}

TEST(launch_local, captured_output_is_prefixed_line_by_line) {
  const auto r = launch_local(shell(2, "echo one; echo two >&2; printf 'no end'"));
  ASSERT_EQ(r.exit_code, 0);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& out = r.output[rank];
    const std::string tag = "[" + std::to_string(rank) + "] ";
    EXPECT_NE(out.find(tag + "one\n"), std::string::npos) << out;
    EXPECT_NE(out.find(tag + "two\n"), std::string::npos) << out;
    EXPECT_NE(out.find(tag + "no end\n"), std::string::npos) << "a partial last line is flushed: " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
  }
}

TEST(launch_local, printed_output_goes_to_stdout_and_stderr_prefixed) {
  auto o = shell(2, "echo out-$RANK; echo err-$RANK >&2");
  o.capture = false;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const auto r = launch_local(o);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.output.empty());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string tag = "[" + std::to_string(rank) + "] ";
    EXPECT_NE(out.find(tag + "out-" + std::to_string(rank) + "\n"), std::string::npos) << out;
    EXPECT_NE(err.find(tag + "err-" + std::to_string(rank) + "\n"), std::string::npos) << err;
  }
  EXPECT_EQ(out.find("err-"), std::string::npos) << out;
  EXPECT_EQ(err.find("out-"), std::string::npos) << err;
}

TEST(launch_local, the_timeout_kills_every_rank) {
  auto o = shell(2, "sleep 100");
  o.timeout = 200ms;
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_local(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_EQ(r.status, (std::vector<int>{128 + SIGTERM, 128 + SIGTERM}));
}

TEST(launch_local, survivors_of_a_failure_are_killed_after_the_grace) {
  auto o = shell(3, "if [ \"$RANK\" = 2 ]; then exit 5; fi; sleep 100");
  o.grace = 150ms;
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_local(o);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 1500ms);
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.failed_rank, 2);
  EXPECT_EQ(r.status, (std::vector<int>{128 + SIGTERM, 128 + SIGTERM, 5}));
}

TEST(launch_local, sigkill_follows_a_sigterm_that_is_ignored) {
  auto o = shell(1, "trap '' TERM; sleep 100");
  o.timeout = 100ms;
  o.kill_after = 150ms;
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_local(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_EQ(r.status, (std::vector<int>{128 + SIGKILL}));
}

TEST(launch_local, sigterm_to_the_launcher_is_passed_on) {
  auto o = shell(2, "if [ \"$RANK\" = 0 ]; then kill -TERM $PPID; fi; sleep 100");
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_local(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_EQ(r.status, (std::vector<int>{128 + SIGTERM, 128 + SIGTERM}));
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  // And the test process's own SIGTERM handling is back as it was (sanitizers have their own).
  struct sigaction now {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, before.sa_handler);
}

TEST(launch_local, sighup_to_the_launcher_is_passed_on) {
  // A closed terminal: the launcher died of it and left the ranks running (a black-box test).
  auto o = shell(2, "if [ \"$RANK\" = 0 ]; then kill -HUP $PPID; fi; sleep 100");
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_local(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_EQ(r.status, (std::vector<int>{128 + SIGHUP, 128 + SIGHUP}));
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet).
bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  return line.size() > line.rfind(')') + 2 && line[line.rfind(')') + 2] == 'Z';
}

/// The pids a captured rank printed, one a line after its "[rank] " prefix.
std::vector<pid_t> printed_pids(const std::string& output) {
  std::vector<pid_t> pids;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (const auto at = line.find("] pid "); at != std::string::npos) pids.push_back(pid_t(std::stol(line.substr(at + 6))));
  return pids;
}

// A wrapper script's program outlives the rank's own process (the shell) when both get
// the timeout's SIGTERM: its last lines were cut off (a black-box test). Now its output is
// read until its group ends, within kill_after.
TEST(launch_local, a_wrapped_programs_last_lines_after_the_wrapper_exits_are_kept) {
  auto o = shell(2, "sh -c 'trap \"sleep 0.3; echo late; exit 1\" TERM; while :; do sleep 0.05; done'; true");
  o.timeout = 300ms;
  o.kill_after = 3s;
  const auto r = launch_local(o);
  EXPECT_TRUE(r.timed_out);
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find("[" + std::to_string(rank) + "] late"), std::string::npos)
        << r.output[std::size_t(rank)];
}

// A rank's background work went on running after the launch (a black-box test): what is
// left of a rank's process group when the launch ends gets SIGTERM.
TEST(launch_local, what_a_rank_leaves_running_ends_with_the_launch) {
  auto o = shell(2, "sleep 100 & echo pid $!; exit 0");
  o.kill_after = 2s;
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_local(o);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);  // SIGTERM ends a sleep at once
  for (int rank = 0; rank < 2; ++rank) {
    const auto pids = printed_pids(r.output[std::size_t(rank)]);
    ASSERT_EQ(pids.size(), 1u) << r.output[std::size_t(rank)];
    for (int k = 0; k < 100 && !gone(pids[0]); ++k) std::this_thread::sleep_for(10ms);  // init reaps it
    EXPECT_TRUE(gone(pids[0])) << "rank " << rank << "'s background sleep " << pids[0] << " outlived the launch";
  }
}

// The launcher killed by SIGKILL cannot end its ranks' groups: its guardian does.
TEST(launch_local, a_launcher_killed_by_sigkill_leaves_nothing_of_its_ranks_running) {
  char dir[] = "/tmp/mimatrix_guardian_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/pids";
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    // A wrapper's program: the rank's own process (the shell) dies with the launcher, this not.
    auto o = shell(2, "sleep 100 & echo $! >> " + file + "; wait");
    o.capture = false;
    o.prefix = false;
    launch_local(o);
    ::_exit(0);
  }
  std::vector<pid_t> pids;
  for (int k = 0; k < 500 && pids.size() < 2; ++k) {
    std::this_thread::sleep_for(10ms);
    std::ifstream in(file);
    pids.clear();
    for (pid_t p; in >> p;) pids.push_back(p);
  }
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t p : pids) {
    for (int k = 0; k < 300 && !gone(p); ++k) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(gone(p)) << "a rank's sleep " << p << " outlived its killed launcher by 3 s";
    if (!gone(p)) ::kill(p, SIGKILL);
  }
  std::filesystem::remove_all(dir);
}

TEST(launch_local, a_program_that_cannot_run_exits_127) {
  launch_options o;
  o.ranks = 2;
  o.argv = {"/nonexistent/program"};
  o.capture = true;
  o.grace = 1s;
  const auto r = launch_local(o);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.output[0].find("[0] cannot execute '/nonexistent/program': No such file or directory"),
            std::string::npos)
      << r.output[0];
}

TEST(launch_local, bad_options_are_rejected) {
  launch_options o;
  o.ranks = 0;
  o.argv = {"true"};
  EXPECT_THROW(launch_local(o), mimatrix::error);
  o.ranks = 1;
  o.argv.clear();
  EXPECT_THROW(launch_local(o), mimatrix::error);
  o.argv = {"true"};
  o.env = {{"A=B", "c"}};
  EXPECT_THROW(launch_local(o), mimatrix::error);
  o.env.clear();
  o.ranks = mimatrix::bootstrap::max_local_ranks + 1;  // grew to gigabytes before any rank started
  EXPECT_THROW(launch_local(o), mimatrix::error);
}

}  // namespace

// What killed ranks leave in /dev/shm is removed (issue 53, defect 9c): libfabric shm's
// regions ("<pid>:<domain>:<endpoint>", 16 MiB each) of a process killed outside any
// launcher go when the next communicator starts on the host, those of a rank killed behind
// a wrapper script when mimatrix-run sees it die; a live process's are never touched.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

extern char** environ;

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

/// libfabric shm's regions of process `pid` in /dev/shm.
int regions_of(pid_t pid) {
  const std::string prefix = std::to_string(pid) + ":";
  int n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(d)) n += std::string(e->d_name).starts_with(prefix);
    ::closedir(d);
  }
  return n;
}

MIMATRIX_SCENARIO(holds_shm_regions) {
  communicator<transport::fabric> comm;
  // As a rank stuck in a provider call: only SIGKILL ends it. (libfabric shm's SIGTERM
  // handler, which this replaces, removes the regions itself.)
  std::signal(SIGTERM, SIG_IGN);
  std::printf("pid %d\n", int(::getpid()));
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(120));  // until killed
  return 0;
}

MIMATRIX_SCENARIO(opens_a_communicator) {
  communicator<transport::fabric> comm;
  return 0;
}

MIMATRIX_SCENARIO(rank_one_killed_behind_a_wrapper) {
  communicator<transport::fabric> comm;
  allreduce<transport::fabric, topology::ring, reduce::sum<int>> sum(comm);
  std::vector<int> v(1000, 1);
  sum(v);
  test::wait_until_the_others_finished(comm, "shm_owners.first_call");
  if (comm.rank() == 1) {
    std::printf("pid %d\n", int(::getpid()));
    std::fflush(stdout);
    ::kill(::getpid(), SIGKILL);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return 0;
}

// A launcher of one holder rank, killed by the test: its guardian ends the rank.
MIMATRIX_SCENARIO(launches_a_holder) {
  bootstrap::launch_options o;
  o.ranks = 1;
  o.argv = {test::self_executable()};
  o.env = {{"MIMATRIX_TEST_SCENARIO", "holds_shm_regions"}, {"MIMATRIX_PROVIDER", "shm"}};
  o.prefix = false;  // the holder's "pid <n>" as it wrote it
  (void)bootstrap::launch_local(o);
  return 0;
}

/// A one-rank job of this binary's `scenario` over shm, outside any launcher, its output
/// to `out` (none: this process's).
pid_t spawn_alone(const std::string& scenario, const char* out = nullptr) {
  std::vector<std::string> env = {"MIMATRIX_TEST_SCENARIO=" + scenario, "MIMATRIX_PROVIDER=shm", "RANK=0",
                                  "WORLD_SIZE=1"};
  for (char** e = environ; *e; ++e)
    if (!std::string(*e).starts_with("MASTER_") && !std::string(*e).starts_with("MIMATRIX_")) env.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = test::self_executable();
  char* argv[] = {self.data(), nullptr};
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (out) ::posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, self.c_str(), &actions, nullptr, argv, envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  return spawned == 0 ? pid : -1;
}

/// The pid the holder wrote to `path`, waiting up to 30 s for it; 0 if none.
pid_t holder_pid_in(const std::string& path) {
  for (int k = 0; k < 3000; ++k) {
    int pid = 0;
    if (std::FILE* f = std::fopen(path.c_str(), "r")) {
      const int read = std::fscanf(f, "pid %d", &pid);
      std::fclose(f);
      if (read == 1 && pid > 0) return pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

TEST(shm_owners, a_killed_processs_regions_go_when_the_next_communicator_starts_and_a_live_ones_stay) {
  const pid_t holder = spawn_alone("holds_shm_regions");
  ASSERT_GT(holder, 0);
  for (int k = 0; k < 3000 && regions_of(holder) == 0; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int held = regions_of(holder);
  ASSERT_GT(held, 0) << "the holder opened no shm region";
  auto r = test::run_ranks(2, "shm", "opens_a_communicator");
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  EXPECT_EQ(regions_of(holder), held) << "a live process's regions were removed";
  ::kill(holder, SIGKILL);
  ASSERT_EQ(::waitpid(holder, nullptr, 0), holder);
  EXPECT_EQ(regions_of(holder), held) << "nothing removes them before the next communicator";
  r = test::run_ranks(2, "shm", "opens_a_communicator");
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  EXPECT_EQ(regions_of(holder), 0) << "the killed process's regions outlived the next communicator's start";
}

TEST(shm_owners, a_rank_killed_behind_a_wrapper_leaves_no_region_after_the_launcher_sees_it_die) {
  bootstrap::launch_options o;
  o.ranks = 2;
  o.argv = {"/bin/sh", "-c", "\"$0\"; exit $?", test::self_executable()};  // sh stays the rank's process
  o.env = {{"MIMATRIX_TEST_SCENARIO", "rank_one_killed_behind_a_wrapper"}, {"MIMATRIX_PROVIDER", "shm"}};
  o.capture = true;
  o.timeout = std::chrono::seconds(60);
  const auto r = bootstrap::launch_local(o);
  const auto at = r.output[1].find("pid ");
  ASSERT_NE(at, std::string::npos) << test::all_output(r);
  const int victim = std::stoi(r.output[1].substr(at + 4));
  EXPECT_EQ(r.status[1], 128 + SIGKILL) << test::all_output(r);
  EXPECT_EQ(regions_of(victim), 0) << "rank 1 (pid " << victim << ") left its shm regions";
}

TEST(shm_owners, a_dead_launchers_guardian_removes_the_regions_of_the_ranks_it_ends) {
  const std::string out = ::testing::TempDir() + "mimatrix-holder-" + std::to_string(::getpid());
  const pid_t launcher = spawn_alone("launches_a_holder", out.c_str());
  ASSERT_GT(launcher, 0);
  const pid_t holder = holder_pid_in(out);
  std::remove(out.c_str());
  ASSERT_GT(holder, 0) << "the holder never started";
  ASSERT_GT(regions_of(holder), 0);
  ::kill(launcher, SIGKILL);
  ASSERT_EQ(::waitpid(launcher, nullptr, 0), launcher);
  for (int k = 0; k < 2000 && regions_of(holder) > 0; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(regions_of(holder), 0) << "the guardian ended rank pid " << holder << " and left its regions";
}

}  // namespace
}  // namespace mimatrix

// Which files in /dev/shm a sweep removes (issue 53, defect 9c): a marked owner's that
// ended, never a live one's, an unmarked pid's, or those newer than a reused pid's process.
#include "mimatrix/bootstrap/detail/shm_owners.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace mimatrix::bootstrap::detail {
namespace MIMATRIX_UNIT_ID {

struct sweep_dir {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("mimatrix-shm-owners-" + std::to_string(::getpid()));
  sweep_dir() { std::filesystem::create_directories(path); }
  ~sweep_dir() { std::filesystem::remove_all(path); }
  void make(const std::string& name, const std::string& text = {}) const { std::ofstream(path / name) << text; }
  bool has(const std::string& name) const { return std::filesystem::exists(path / name); }
  /// A mark of process `pid` started at `started`, as `self` writes its own.
  void mark(const process_mark& self, long pid, std::uint64_t started) const {
    process_mark m = self;
    m.pid = pid;
    m.started = started;
    make(std::string(shm_owner_prefix) + std::to_string(pid) + "-" + std::to_string(started), m.encode() + "\n");
  }
};

/// The pid of a process that has ended (a child, reaped).
long ended_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

TEST(shm_owners, an_ended_owners_files_go_and_only_theirs) {
  const process_mark self = process_mark::self();
  ASSERT_FALSE(self.encode().empty());
  const sweep_dir dir;
  const long dead = ended_pid();
  const std::string d = std::to_string(dead);
  dir.mark(self, dead, 12345);
  dir.make(d + ":0:0");
  dir.make(d + ":1:0");
  dir.make("mimatrix-mb-job-r1-p" + d + "-00ff");
  dir.make(d + "0:0:0");  // another pid's
  dir.mark(self, self.pid, self.started);  // a live owner's
  dir.make(std::to_string(self.pid) + ":0:0");
  const long unmarked = ended_pid();
  dir.make(std::to_string(unmarked) + ":0:0");  // another program's, perhaps
  EXPECT_EQ(remove_shm_files_of_ended_owners(self, dir.path.string()), 4u);
  EXPECT_FALSE(dir.has(d + ":0:0"));
  EXPECT_FALSE(dir.has("mimatrix-mb-job-r1-p" + d + "-00ff"));
  EXPECT_TRUE(dir.has(d + "0:0:0"));
  EXPECT_TRUE(dir.has(std::to_string(self.pid) + ":0:0"));
  EXPECT_TRUE(dir.has(std::to_string(unmarked) + ":0:0"));
}

TEST(shm_owners, a_reused_pids_newer_files_and_unreadable_marks_stay) {
  const process_mark self = process_mark::self();
  const sweep_dir dir;
  // Pid 1 started at boot, long before these files: a mark of an earlier pid 1 ended,
  // but whatever changed after pid 1's process started may be that process's.
  dir.mark(self, 1, 1);
  dir.make("1:0:0");
  const long dead = ended_pid();
  dir.make(std::string(shm_owner_prefix) + std::to_string(dead) + "-1", "not a mark\n");
  dir.make(std::to_string(dead) + ":0:0");
  process_mark elsewhere = self;
  elsewhere.where += "/host:other";
  const long dead_elsewhere = ended_pid();
  dir.mark(elsewhere, dead_elsewhere, 1);
  dir.make(std::to_string(dead_elsewhere) + ":0:0");
  EXPECT_EQ(remove_shm_files_of_ended_owners(self, dir.path.string()), 1u);  // the mark of pid 1
  EXPECT_TRUE(dir.has("1:0:0"));
  EXPECT_TRUE(dir.has(std::to_string(dead) + ":0:0"));
  EXPECT_TRUE(dir.has(std::to_string(dead_elsewhere) + ":0:0"));
}

}  // namespace MIMATRIX_UNIT_ID
}  // namespace mimatrix::bootstrap::detail

// The job server's state file: what it writes reads back the same; a write that fails says
// why with the system's reason for that write; a file no generation could have is refused
// naming what is wrong (these were checked by hand when a black-box test found them).
#include "state_file.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace mimatrix::job {
namespace MIMATRIX_UNIT_ID {

/// A directory of its own, removed with everything in it.
struct scratch_dir {
  std::filesystem::path path;
  scratch_dir() {
    std::string name = (std::filesystem::temp_directory_path() / "mimatrix_state_XXXXXX").string();
    path = ::mkdtemp(name.data());
  }
  ~scratch_dir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& text = {}) const {
    const auto p = (path / name).string();
    if (!text.empty()) std::ofstream(p) << text;
    return p;
  }
};

// The reason a refusal gives ("" when it reads).
std::string refusal_of(const std::string& path) {
  try {
    read_state_file(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(state_file, what_is_written_reads_back_the_same) {
  scratch_dir dir;
  const std::string path = dir.file("job.state");
  EXPECT_FALSE(read_state_file(path).has_value());  // none yet: a fresh start
  const saved_state written{7, 1234, {{1, 40, "h1:20:ab", "h1"}, {0, 88, "h0:10:cd", "h0"}}};
  ASSERT_EQ(write_state_file(path, written), "");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const auto read = read_state_file(path);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->generation, 7u);
  EXPECT_EQ(read->completed_step, 1234u);
  ASSERT_EQ(read->members.size(), 2u);
  EXPECT_EQ(read->members[0].rank, 1u);
  EXPECT_EQ(read->members[0].batch, 40u);
  EXPECT_EQ(read->members[0].key, "h1:20:ab");
  EXPECT_EQ(read->members[1].host, "h0");
}

// Regression (review): the failure was logged with errno read after other calls; now the
// reason is the failing write's own.
TEST(state_file, a_write_that_fails_names_the_file_and_the_systems_reason) {
  scratch_dir dir;
  const std::string path = (dir.path / "missing" / "job.state").string();
  EXPECT_EQ(state_file_unwritable(path), "No such file or directory");
  const std::string why = write_state_file(path, saved_state{1, 0, {{0, 8, "k", "h"}}});
  EXPECT_EQ(why, path + ".tmp: No such file or directory");
  EXPECT_EQ(state_file_unwritable(dir.file("job.state")), "");
}

TEST(state_file, a_file_no_generation_could_have_is_refused_naming_what) {
  scratch_dir dir;
  const std::string head = "mimatrix-job-state 1\ngeneration 3\ncompleted_step 10\n";
  EXPECT_NE(refusal_of(dir.file("a", "something else\n")).find("is not a job state file"), std::string::npos);
  EXPECT_NE(refusal_of(dir.file("b", head + "member 0 8 k0 h\nmember 0 8 k1 h\n")).find("has rank 0 twice"),
            std::string::npos);
  EXPECT_NE(refusal_of(dir.file("c", head + "member 5 8 k0 h\nmember 0 8 k1 h\n")).find("past its 2 members"),
            std::string::npos);
  EXPECT_NE(refusal_of(dir.file("d", head + "member 0 0 k0 h\n")).find("gives rank 0 batch 0"), std::string::npos);
  EXPECT_NE(refusal_of(dir.file("e", head + "member 0 x k0 h\n")).find("a 'member' line that does not read"),
            std::string::npos);
  EXPECT_NE(refusal_of(dir.file("f", head + "member 0 8 k h\nmember 1 8 k h\n")).find("the worker key 'k' twice"),
            std::string::npos);
  EXPECT_NE(refusal_of(dir.file("g", head + "leader 0\n")).find("an unknown entry 'leader'"), std::string::npos);
  EXPECT_EQ(refusal_of(dir.file("h", head + "member 1 8 k1 h\nmember 0 8 k0 h\n")), "");
}

}  // namespace MIMATRIX_UNIT_ID
}  // namespace mimatrix::job

// Tests of bootstrap/file_store.hpp: values, counters shared by threads and by processes,
// a get that waits for a later set, and the timeout message.
#include "mimatrix/bootstrap/file_store.hpp"

#include <gtest/gtest.h>

#include "support/bytes.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::errc;
using mimatrix::bootstrap::file_store;

using mimatrix::test::bytes;
using mimatrix::test::text;

/// A fresh directory under the temporary directory, removed at the end of the test.
class file_store_test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "mimatrix-file-store-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    dir_ = root_ + "/job/store";  // not there yet: the store creates it
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string root_, dir_;
};

TEST_F(file_store_test, set_get_add) {
  file_store s(dir_ + "/");
  EXPECT_EQ(s.where(), "file:" + dir_);
  EXPECT_TRUE(std::filesystem::is_directory(dir_));
  s.set("a", bytes("hello"));
  EXPECT_EQ(text(s.get("a", 0ms)), "hello");
  s.set("a", bytes("replaced"));
  EXPECT_EQ(text(s.get("a", 0ms)), "replaced");
  s.set("with/slash and space", bytes("odd"));
  EXPECT_EQ(text(s.get("with/slash and space", 0ms)), "odd");
  s.set("", bytes("empty key"));
  EXPECT_EQ(text(s.get("", 0ms)), "empty key");
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -7), -2);
  EXPECT_EQ(text(s.get("n", 0ms)), "-2");
  // Another object on the same directory sees the same values.
  file_store other(dir_);
  EXPECT_EQ(text(other.get("a", 0ms)), "replaced");
  EXPECT_EQ(other.add("n", 2), 0);
}

TEST_F(file_store_test, a_key_never_set_times_out_naming_it) {
  file_store s(dir_);
  const auto start = std::chrono::steady_clock::now();
  try {
    s.get("never", 100ms);
    FAIL() << "nothing thrown";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::timeout);
    const std::string m = e.what();
    EXPECT_NE(m.find("'never'"), std::string::npos) << m;
    EXPECT_NE(m.find("file:" + dir_), std::string::npos) << m;
    EXPECT_NE(m.find("100 ms"), std::string::npos) << m;
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 95ms);
}

TEST_F(file_store_test, get_waits_for_a_later_set) {
  file_store s(dir_);
  std::thread late([&] {
    file_store writer(dir_);
    std::this_thread::sleep_for(80ms);
    writer.set("late", bytes("here"));
  });
  EXPECT_EQ(text(s.get("late", 2s)), "here");
  late.join();
}

TEST_F(file_store_test, threads_share_a_counter) {
  constexpr int threads = 4, adds = 50;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      file_store s(dir_);
      for (int i = 0; i < adds; ++i) s.add("count", 1);
    });
  for (auto& t : pool) t.join();
  EXPECT_EQ(file_store(dir_).add("count", 0), threads * adds);
}

TEST_F(file_store_test, processes_share_a_counter) {
  constexpr int adds = 100;
  file_store s(dir_);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    try {
      file_store mine(dir_);
      for (int i = 0; i < adds; ++i) mine.add("count", 1);
      mine.set("child/done", bytes("1"));
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  for (int i = 0; i < adds; ++i) s.add("count", 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(text(s.get("child/done", 0ms)), "1");
  EXPECT_EQ(s.add("count", 0), 2 * adds);
}

TEST_F(file_store_test, a_path_that_cannot_be_a_directory_is_named) {
  file_store s(dir_);
  s.set("file", bytes("x"));
  const std::string blocked = s.path_of("file") + "/sub";
  try {
    file_store bad(blocked);
    FAIL() << "made a directory under a file";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(s.path_of("file")), std::string::npos) << e.what();
  }
}

}  // namespace

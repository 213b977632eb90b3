// Tests of bootstrap/memory_store.hpp: values, counters and waiting, shared by threads.
#include "mimatrix/bootstrap/memory_store.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::errc;
using mimatrix::bootstrap::memory_store;

TEST(memory_store, set_get_add) {
  memory_store s;
  EXPECT_EQ(s.where(), "memory:");
  const std::vector<std::byte> v{std::byte{1}, std::byte{2}};
  s.set("k", v);
  EXPECT_EQ(s.get("k", 0ms), v);
  EXPECT_EQ(s.add("n", 3), 3);
  EXPECT_EQ(s.add("n", 4), 7);
  const auto seven = s.get("n", 0ms);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(seven.data()), seven.size()), "7");
  EXPECT_THROW(s.add("k", 1), mimatrix::error);  // not a counter
}

TEST(memory_store, get_waits_for_another_thread) {
  memory_store s;
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    s.set("late", {std::byte{9}});
  });
  EXPECT_EQ(s.get("late", 2s), std::vector<std::byte>{std::byte{9}});
  late.join();
}

TEST(memory_store, threads_share_a_counter) {
  memory_store s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) s.add("count", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(s.add("count", 0), 4000);
}

TEST(memory_store, a_key_never_set_times_out_naming_it) {
  memory_store s;
  try {
    s.get("never", 20ms);
    FAIL() << "nothing thrown";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::timeout);
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("20 ms"), std::string::npos) << e.what();
  }
}

}  // namespace

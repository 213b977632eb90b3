// The watch for peers on other hosts gone without a word: it tells what the store set, and
// a stalled call that asks it never waits for the store, whatever holds the store up.
#include "mimatrix/transport/fabric/lost_watch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/bootstrap/memory_store.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using transport::detail::fabric::lost_watch;

using lost_ranks = std::vector<std::pair<int, std::string>>;

/// What lost_watch::look() says once the store has been read (bounded: 5 s).
lost_ranks told(lost_watch& watch) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  lost_ranks said;
  while ((said = watch.look()).empty() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  return said;
}

TEST(lost_watch, tells_the_ranks_the_store_says_are_lost) {
  auto store = std::make_shared<bootstrap::memory_store>();
  lost_watch watch(store, "g/", 0, 4);
  EXPECT_TRUE(watch.look().empty());
  store->set("g/lost/2", bootstrap::bytes_of("(host b pid 7) lost its connection"));
  store->set("g/lost/3", bootstrap::bytes_of("(host c pid 8) lost its connection"));
  store->add("g/lost/any", 1);
  EXPECT_EQ(told(watch), (lost_ranks{{2, "(host b pid 7) lost its connection"}, {3, "(host c pid 8) lost its connection"}}));
}

/// A store whose requests wait until the test lets them go (a caller's blocking get ahead).
class held_store final : public bootstrap::store {
 public:
  void set(const std::string&, const std::vector<std::byte>&) override {}
  std::vector<std::byte> get(const std::string&, std::chrono::milliseconds) override {
    hold();
    throw error(errc::timeout, "not set");
  }
  std::int64_t add(const std::string&, std::int64_t) override {
    hold();
    return 1;
  }
  std::string where() const override { return "held"; }
  void let_go() {
    std::lock_guard lock(mutex_);
    held_ = false;
    changed_.notify_all();
  }
  bool asked() {
    std::lock_guard lock(mutex_);
    return asked_;
  }

 private:
  void hold() {
    std::unique_lock lock(mutex_);
    asked_ = true;
    changed_.wait(lock, [&] { return !held_; });
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = true, asked_ = false;
};

TEST(lost_watch, a_look_never_waits_for_a_store_that_is_held_up) {
  auto store = std::make_shared<held_store>();
  std::atomic<bool> looked{false}, released_late{false};
  // Were a look to wait for the store, this would let it go (and the test fail) in 10 s.
  std::thread watchdog([&] {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!looked && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    released_late = !looked;
    store->let_go();
  });
  {
    lost_watch watch(store, "g/", 0, 2);
    for (int k = 0; k < 100; ++k) {
      EXPECT_TRUE(watch.look().empty());
      std::this_thread::sleep_for(1ms);
    }
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!store->asked() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(store->asked()) << "the watch never read the store";
    looked = true;
  }  // its end waits for the read the store held
  watchdog.join();
  EXPECT_FALSE(released_late) << "a look waited for the store";
}

TEST(lost_watch, gives_up_on_a_store_that_fails) {
  struct failing final : bootstrap::store {
    std::atomic<int> reads{0};
    void set(const std::string&, const std::vector<std::byte>&) override {}
    std::vector<std::byte> get(const std::string&, std::chrono::milliseconds) override { return {}; }
    std::int64_t add(const std::string&, std::int64_t) override {
      ++reads;
      throw error(errc::transport, "the store is gone");
    }
    std::string where() const override { return "gone"; }
  };
  auto store = std::make_shared<failing>();
  lost_watch watch(store, "g/", 0, 2);
  for (int k = 0; k < 20; ++k) {
    EXPECT_TRUE(watch.look().empty());
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(store->reads.load(), 1) << "asked again after the store failed";
}

}  // namespace
}  // namespace mimatrix

// device/closing_thread.hpp: work runs in the order given, on a thread other than the
// caller's (a close that waits for the device must not hold the progress thread), and
// what is still queued when the thread object goes runs before its destructor returns.
#include "mimatrix/device/closing_thread.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace MIMATRIX_UNIT_ID {

using mimatrix::device::closing_thread;

TEST(closing_thread, runs_work_in_order_off_the_callers_thread_and_all_of_it_before_it_goes) {
  std::mutex mutex;
  std::vector<int> order;
  std::atomic<bool> on_caller{false};
  std::atomic<bool> release{false};
  const auto caller = std::this_thread::get_id();
  {
    closing_thread closer;
    // The first blocks until released: the rest queue behind it and the caller goes on.
    closer.run_later([&] {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard lock(mutex);
      order.push_back(0);
    });
    for (int k = 1; k <= 50; ++k)
      closer.run_later([&, k] {
        on_caller = on_caller || std::this_thread::get_id() == caller;
        std::lock_guard lock(mutex);
        order.push_back(k);
      });
    {
      std::lock_guard lock(mutex);
      EXPECT_TRUE(order.empty());  // nothing ran on the caller while the first blocks
    }
    release = true;
  }  // the destructor runs what is left
  ASSERT_EQ(order.size(), 51u);
  for (int k = 0; k <= 50; ++k) EXPECT_EQ(order[std::size_t(k)], k);
  EXPECT_FALSE(on_caller);
}

}  // namespace

// device::host_port: streams run their work in order and apart from the caller, events
// say when work is done, a stream can wait for another's event, and a gate holds a
// stream until it is opened from another stream.
#include "mimatrix/device/host_port.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "mimatrix/reduce/host_kernels.hpp"

namespace mimatrix::device {
namespace {

using namespace std::chrono_literals;

TEST(host_port, a_stream_runs_its_work_in_order_after_the_caller_returns) {
  host_port dev({.lag = 2ms});
  stream_handle s = dev.make_stream();
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) dev.enqueue(s, [&order, i] { order.push_back(i); });
  event e = dev.record(s);
  EXPECT_FALSE(dev.done(e));  // five operations of 2 ms each are still queued
  dev.synchronize(s);
  EXPECT_TRUE(dev.done(e));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  dev.free_event(e);
  dev.free_stream(s);
}

TEST(host_port, copy_combine_and_finalize_run_on_the_stream) {
  host_port dev;
  stream_handle s = dev.make_stream();
  std::vector<std::int32_t> a{1, 2, 3}, b{10, 20, 30}, c(3);
  const auto& sum = reduce::host_kernels_for(dtype::int32, reduce::op_kind::sum);
  const auto& avg = reduce::host_kernels_for(dtype::int32, reduce::op_kind::avg);
  dev.copy(s, c.data(), a.data(), 3 * sizeof(std::int32_t));
  dev.combine(s, sum, c.data(), c.data(), b.data(), 3 * sizeof(std::int32_t));
  dev.finalize(s, avg, c.data(), 3 * sizeof(std::int32_t), 11);
  dev.synchronize(s);
  EXPECT_EQ(c, (std::vector<std::int32_t>{1, 2, 3}));
  dev.free_stream(s);
}

TEST(host_port, a_stream_waits_for_another_streams_event) {
  host_port dev;
  stream_handle first = dev.make_stream(), second = dev.make_stream();
  std::atomic<bool> slow_done{false};
  bool seen = false;
  dev.enqueue(first, [&] {
    std::this_thread::sleep_for(20ms);
    slow_done = true;
  });
  event e = dev.record(first);
  dev.wait(second, e);
  dev.free_event(e);  // the wait keeps what it needs
  dev.enqueue(second, [&] { seen = slow_done.load(); });
  dev.synchronize(second);
  EXPECT_TRUE(seen);
  dev.free_stream(first);
  dev.free_stream(second);
}

TEST(host_port, a_gate_holds_a_stream_until_another_stream_opens_it) {
  host_port dev;
  stream_handle held = dev.make_stream(), opener = dev.make_stream();
  std::atomic<int> step{0};
  gate g = dev.hold(held);
  dev.enqueue(held, [&] { EXPECT_EQ(step.load(), 1); });
  event after = dev.record(held);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(dev.done(after));  // held
  dev.enqueue(opener, [&] { step = 1; });
  dev.open(opener, g);
  dev.synchronize(held);
  EXPECT_TRUE(dev.done(after));
  dev.free_event(after);
  dev.free_stream(held);
  dev.free_stream(opener);
}

TEST(host_port, freeing_a_stream_runs_what_it_holds_first) {
  host_port dev({.lag = 1ms});
  stream_handle s = dev.make_stream();
  int ran = 0;
  for (int i = 0; i < 3; ++i) dev.enqueue(s, [&] { ++ran; });
  dev.free_stream(s);
  EXPECT_EQ(ran, 3);
}

}  // namespace
}  // namespace mimatrix::device

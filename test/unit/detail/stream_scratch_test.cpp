// detail::stream_scratch: a block is lent again only once the work queued on the stream
// it was released after has run, and never once its call failed; the smallest free block
// that fits serves; the blocks go, after their work, with the object (whose streams may
// have gone first).
#include "mimatrix/detail/stream_scratch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "mimatrix/device/host_port.hpp"

namespace mimatrix::detail {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;

TEST(stream_scratch, a_block_whose_work_is_queued_is_not_lent_until_it_has_run) {
  device::host_port dev;
  const device::stream_handle s = dev.make_stream();
  stream_scratch scratch;
  const std::size_t first = scratch.take(dev, 4096);
  std::atomic<bool> go{false};
  dev.enqueue(s, [&] {
    while (!go) std::this_thread::sleep_for(1ms);  // the call's parts, still running
  });
  scratch.release_after(first, s);
  const std::size_t second = scratch.take(dev, 4096);
  EXPECT_NE(second, first);
  EXPECT_NE(scratch.at(second), scratch.at(first));
  scratch.release_after(second, s);
  go = true;
  dev.synchronize(s);
  const std::size_t again = scratch.take(dev, 1000);
  EXPECT_TRUE(again == first || again == second);
  EXPECT_EQ(scratch.blocks(), 2u);
  scratch.release_after(again, s);
  dev.free_stream(s);
}

TEST(stream_scratch, a_taken_block_is_not_lent_twice_and_the_smallest_that_fits_serves) {
  device::host_port dev;
  const device::stream_handle s = dev.make_stream();
  stream_scratch scratch;
  const std::size_t large = scratch.take(dev, 1 << 16);
  const std::size_t small = scratch.take(dev, 1 << 10);
  EXPECT_NE(large, small);  // `large` is taken: not lent again before its release
  scratch.release_after(large, s);
  scratch.release_after(small, s);
  dev.synchronize(s);
  EXPECT_EQ(scratch.take(dev, 512), small);
  EXPECT_EQ(scratch.take(dev, 2048), large);  // the small one is taken, and too small
  const std::size_t grown = scratch.take(dev, 1 << 20);
  EXPECT_EQ(scratch.blocks(), 3u);
  for (std::size_t i : {small, large, grown}) scratch.release_after(i, s);
  dev.free_stream(s);
}

TEST(stream_scratch, a_block_whose_call_failed_is_never_lent_again) {
  device::host_port dev;
  const device::stream_handle s = dev.make_stream();
  stream_scratch scratch;
  const std::size_t failed = scratch.take(dev, 256);
  const auto spoiled = scratch.spoiled(failed);  // as the call's request holds it
  scratch.release_after(failed, s);
  *spoiled = true;  // the request saw a part fail
  dev.synchronize(s);
  const std::size_t next = scratch.take(dev, 256);
  EXPECT_NE(next, failed);
  scratch.release_after(next, s);
  dev.synchronize(s);
  EXPECT_EQ(scratch.take(dev, 256), next);
  scratch.release_after(next, s);
  dev.free_stream(s);
}

TEST(stream_scratch, going_waits_for_the_work_that_uses_its_blocks) {
  device::host_port dev({.device_memory_only = true});
  const device::stream_handle s = dev.make_stream();
  std::atomic<bool> ran{false};
  {
    stream_scratch scratch;
    const std::size_t i = scratch.take(dev, 64);
    std::byte* block = scratch.at(i);
    dev.enqueue(s, [&ran, block] {
      std::this_thread::sleep_for(50ms);
      block[63] = std::byte{1};  // would fault on a freed block
      ran = true;
    });
    scratch.release_after(i, s);
  }
  EXPECT_TRUE(ran);
  dev.free_stream(s);
}

}  // namespace
}  // namespace mimatrix::detail

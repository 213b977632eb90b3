// Tests of transport/fabric/receive_window.hpp: plain receives are admitted in schedule
// order, so the earliest one not done always may be posted, whatever became ready first.
#include "mimatrix/transport/fabric/receive_window.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace mimatrix::transport::detail::fabric {
namespace MIMATRIX_UNIT_ID {

constexpr std::uint32_t width = receive_window::width;

receive_window with(std::uint32_t receives) {
  receive_window w;
  for (std::uint32_t k = 0; k < receives; ++k) EXPECT_EQ(w.add(), k);
  return w;
}

TEST(receive_window, admits_the_first_width_receives_in_schedule_order) {
  const receive_window w = with(3 * width);
  EXPECT_TRUE(w.admits(0));
  EXPECT_TRUE(w.admits(width - 1));
  EXPECT_FALSE(w.admits(width));
  EXPECT_FALSE(w.admits(3 * width - 1));
}

// Issue 53: later receives done first (a later phase's, ready early) must not move the
// window; only the earliest one not done does, and then past every one done behind it.
TEST(receive_window, moves_only_when_the_earliest_receive_is_done) {
  receive_window w = with(3 * width);
  for (std::uint32_t k = 1; k < width; ++k) w.finish(k);
  EXPECT_FALSE(w.admits(width));
  w.finish(0);
  EXPECT_TRUE(w.admits(2 * width - 1));
  EXPECT_FALSE(w.admits(2 * width));
}

TEST(receive_window, clear_starts_a_new_call) {
  receive_window w = with(2 * width);
  for (std::uint32_t k = 0; k < width; ++k) w.finish(k);
  EXPECT_TRUE(w.admits(2 * width - 1));
  w.clear();
  EXPECT_EQ(w.add(), 0u);
  EXPECT_FALSE(w.admits(width));
}

}  // namespace
}  // namespace mimatrix::transport::detail::fabric

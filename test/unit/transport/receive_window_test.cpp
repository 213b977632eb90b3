// Tests of transport/fabric/receive_window.hpp: plain receives are admitted in schedule
// order, so the earliest one not done always may be posted, whatever became ready first;
// those held back come due, once each, as the window reaches them.
#include "mimatrix/transport/fabric/receive_window.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace mimatrix::transport::detail::fabric {
namespace MIMATRIX_UNIT_ID {

constexpr std::uint32_t width = receive_window::width;

receive_window with(std::uint32_t receives) {
  receive_window w;
  for (std::uint32_t k = 0; k < receives; ++k) EXPECT_EQ(w.add(1000 + k), k);  // step 1000 + k
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
  w.hold(2 * width - 1);
  w.clear();
  EXPECT_EQ(w.add(7), 0u);
  EXPECT_FALSE(w.admits(width));
  EXPECT_EQ(w.holding(), 0u);
  EXPECT_TRUE(w.due().empty());
  EXPECT_EQ(w.earliest_open(), 7);
}

TEST(receive_window, receives_held_come_due_in_schedule_order_once_the_window_reaches_them) {
  receive_window w = with(3 * width);
  w.hold(2 * width + 1);
  w.hold(width);
  w.hold(width + 5);
  EXPECT_EQ(w.holding(), 3u);
  w.finish(1);  // not the earliest: nothing moves
  EXPECT_TRUE(w.due().empty());
  w.finish(0);  // the window now reaches width + 1
  EXPECT_EQ(w.due(), (std::vector<std::uint32_t>{1000 + width}));
  w.due().clear();
  for (std::uint32_t k = 2; k < width; ++k) w.finish(k);
  EXPECT_EQ(w.due(), (std::vector<std::uint32_t>{1000 + width + 5}));
  EXPECT_EQ(w.holding(), 1u);
  EXPECT_EQ(w.earliest_open(), 1000 + width);
}

}  // namespace
}  // namespace mimatrix::transport::detail::fabric

// step_column: a call's per-step values in an array of its own, or in a column lent from
// a table of many ranks laid out step by step (transport::simulated's).
#include "mimatrix/transport/step_bookkeeping.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::step_column;

TEST(step_column, reset_gives_an_array_of_its_own) {
  step_column<std::uint32_t> c;
  c.reset(5, 7);
  EXPECT_FALSE(c.lent());
  ASSERT_EQ(c.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(c[i], 7u);
  c[3] = 1;
  EXPECT_EQ(c.address(3) - c.address(0), 3);  // contiguous
  c.reset(2, 0);
  EXPECT_EQ(c[0] + c[1], 0u);
}

TEST(step_column, a_lent_column_reads_and_writes_the_lenders_table_step_by_step) {
  constexpr std::size_t ranks = 3, steps = 4;
  std::vector<std::uint32_t> table(ranks * steps);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = std::uint32_t(i);  // the lender's values
  std::vector<step_column<std::uint32_t>> columns(ranks);
  for (std::size_t r = 0; r < ranks; ++r) columns[r].lend(table.data() + r, ranks, steps);
  for (std::size_t r = 0; r < ranks; ++r) {
    EXPECT_TRUE(columns[r].lent());
    EXPECT_EQ(columns[r].size(), steps);
    for (std::size_t i = 0; i < steps; ++i) EXPECT_EQ(columns[r][i], i * ranks + r);  // left as the lender set them
    EXPECT_EQ(columns[r].address(1) - columns[r].address(0), std::ptrdiff_t(ranks));
  }
  --columns[1][2];  // a rank's step: its entry only
  EXPECT_EQ(table[2 * ranks + 1], 2 * ranks + 1 - 1);
  EXPECT_EQ(table[2 * ranks + 0], 2 * ranks + 0);
  EXPECT_EQ(table[2 * ranks + 2], 2 * ranks + 2);
  columns[0].reset(2, 9);  // back to an array of its own: the table is left alone
  EXPECT_FALSE(columns[0].lent());
  EXPECT_EQ(table[0], 0u);
  EXPECT_EQ(columns[0][1], 9u);
}

}  // namespace
}  // namespace mimatrix

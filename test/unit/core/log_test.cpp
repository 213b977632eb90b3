#include "mimatrix/core/log.hpp"

#include <gtest/gtest.h>

#include <string>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

TEST(log, levels_parse_in_any_case_and_anything_else_is_none) {
  EXPECT_EQ(parse_log_level("WARN"), log_level::warn);
  EXPECT_EQ(parse_log_level("info"), log_level::info);
  EXPECT_EQ(parse_log_level("Trace"), log_level::trace);
  EXPECT_EQ(parse_log_level("bogus"), log_level::none);
}

// Found by a black-box test: MIMATRIX_DEBUG=bogus gave no log and no word of why.
TEST(log, a_setting_that_is_no_level_is_named_and_the_ways_to_say_off_are_not) {
  const std::string complaint = debug_setting_complaint("bogus");
  EXPECT_NE(complaint.find("MIMATRIX_DEBUG='bogus'"), std::string::npos) << complaint;
  EXPECT_NE(complaint.find("WARN, INFO or TRACE"), std::string::npos) << complaint;
  for (const char* fine : {"WARN", "info", "TRACE", "", "NONE", "off", "0"})
    EXPECT_EQ(debug_setting_complaint(fine), "") << fine;
}

}  // namespace
}  // namespace mimatrix

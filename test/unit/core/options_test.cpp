#include "mimatrix/core/options.hpp"

#include <gtest/gtest.h>

#include "mimatrix/bootstrap/launch.hpp"

#include <cstdlib>
#include <string>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

// Found by a black-box test: the README's `{.algorithm = "ring", .timeout = ...}` failed a
// user's g++ build with -Wextra -Werror ("missing initializer for member stream"): g++
// warns for a member left out of a designated initializer unless it has a default member
// initializer. This file is built with -Wextra (and -Werror in CI): it fails to compile if
// one goes missing.
TEST(options, a_designated_initializer_may_name_any_fields_and_the_rest_keep_their_defaults) {
  const call_options o{.algorithm = "ring", .timeout = std::chrono::seconds(30)};
  EXPECT_FALSE(o.stream.has_value());
  EXPECT_EQ(o.tag, 0u);
  const call_options tagged{.tag = 7};
  EXPECT_TRUE(tagged.algorithm.empty());
  EXPECT_FALSE(tagged.timeout.has_value());
  const bootstrap::launch_options l{.ranks = 2};
  EXPECT_TRUE(l.argv.empty());
  EXPECT_TRUE(l.env.empty());
}

TEST(options, default_deadline_is_finite) {
  ::unsetenv("MIMATRIX_TIMEOUT_MS");
  const auto o = options::from_environment();
  EXPECT_GT(o.timeout.count(), 0);
  EXPECT_LE(o.timeout, std::chrono::hours(1));
}

TEST(options, the_environment_sets_the_deadline) {
  ::setenv("MIMATRIX_TIMEOUT_MS", "1234", 1);
  EXPECT_EQ(options::from_environment().timeout, std::chrono::milliseconds(1234));
  ::unsetenv("MIMATRIX_TIMEOUT_MS");
}

TEST(options, a_bad_deadline_in_the_environment_is_an_error_that_quotes_it) {
  for (const char* bad : {"soon", "-5", "0", "10s"}) {
    ::setenv("MIMATRIX_TIMEOUT_MS", bad, 1);
    try {
      (void)options::from_environment();
      ADD_FAILURE() << "accepted " << bad;
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  ::unsetenv("MIMATRIX_TIMEOUT_MS");
}

TEST(options, progress_is_the_callers_unless_the_environment_asks_for_a_thread) {
  ::unsetenv("MIMATRIX_PROGRESS");
  EXPECT_EQ(options::from_environment().progress, progress_mode::caller);
  ::setenv("MIMATRIX_PROGRESS", "thread", 1);
  EXPECT_EQ(options::from_environment().progress, progress_mode::thread);
  ::setenv("MIMATRIX_PROGRESS", "caller", 1);
  EXPECT_EQ(options::from_environment().progress, progress_mode::caller);
  ::setenv("MIMATRIX_PROGRESS", "threads", 1);
  try {
    (void)options::from_environment();
    ADD_FAILURE() << "accepted 'threads'";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("'threads'"), std::string::npos) << e.what();
  }
  ::unsetenv("MIMATRIX_PROGRESS");
}

TEST(options, the_longest_deadline_saturates_instead_of_overflowing) {
  // 9223372036854775807 (and beyond: strtoll saturates) means "never": cut to max_timeout,
  // whose deadline the steady clock can still hold.
  for (const char* huge : {"9223372036854775807", "99999999999999999999"}) {
    ::setenv("MIMATRIX_TIMEOUT_MS", huge, 1);
    EXPECT_EQ(options::from_environment().timeout, max_timeout) << huge;
  }
  ::unsetenv("MIMATRIX_TIMEOUT_MS");
  const auto now = std::chrono::steady_clock::now();
  EXPECT_GT(deadline_after(std::chrono::milliseconds::max()), now + std::chrono::hours(24 * 365 * 99));
  EXPECT_EQ(bounded_timeout(std::chrono::milliseconds::max()), max_timeout);
  EXPECT_EQ(bounded_timeout(std::chrono::milliseconds(-5)), std::chrono::milliseconds(0));
  EXPECT_EQ(bounded_timeout(std::chrono::milliseconds(1234)), std::chrono::milliseconds(1234));
}

}  // namespace
}  // namespace mimatrix

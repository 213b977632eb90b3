#include "mimatrix/algorithm/selection.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using algorithm::selection;
using schedule::collective;

std::string algorithm_for(const selection& s, collective kind, std::uint64_t bytes) {
  const auto* rule = s.match(kind, bytes);
  return rule ? rule->algorithm : std::string("(none)");
}

/// The message of the error parsing `text` throws.
std::string parse_error(const std::string& text) {
  try {
    (void)selection::parse(text);
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' parsed";
  return {};
}

TEST(selection, parses_collectives_ranges_and_names) {
  const auto s = selection::parse("allreduce:ring;allreduce@0-8K:recursive_doubling;broadcast:ring");
  ASSERT_EQ(s.rules().size(), 3u);
  EXPECT_EQ(s.rules()[0].kind, collective::allreduce);
  EXPECT_FALSE(s.rules()[0].bytes);
  EXPECT_EQ(s.rules()[1].bytes, (algorithm::byte_range{0, 8192}));
  EXPECT_EQ(s.rules()[1].algorithm, "recursive_doubling");
  EXPECT_EQ(s.rules()[1].text, "allreduce@0-8K:recursive_doubling");
  EXPECT_EQ(s.rules()[2].kind, collective::broadcast);
}

TEST(selection, sizes_take_binary_suffixes_and_open_ends) {
  const auto s = selection::parse("allreduce@64K-:a; allgather@-1m:b; broadcast@2G:c; reduce_scatter@7-7:d");
  EXPECT_EQ(s.rules()[0].bytes, (algorithm::byte_range{64 * 1024, UINT64_MAX}));
  EXPECT_EQ(s.rules()[1].bytes, (algorithm::byte_range{0, 1024 * 1024}));
  EXPECT_EQ(s.rules()[2].bytes, (algorithm::byte_range{2ull << 30, 2ull << 30}));
  EXPECT_EQ(s.rules()[3].bytes, (algorithm::byte_range{7, 7}));
}

TEST(selection, spaces_case_and_empty_rules_are_forgiven) {
  const auto s = selection::parse("  AllReduce @ 0 - 8K : Recursive_Doubling ;; ;\t* : RING ;");
  ASSERT_EQ(s.rules().size(), 2u);
  EXPECT_EQ(s.rules()[0].algorithm, "recursive_doubling");
  EXPECT_EQ(s.rules()[0].bytes, (algorithm::byte_range{0, 8192}));
  EXPECT_FALSE(s.rules()[1].kind);
  EXPECT_EQ(s.rules()[1].algorithm, "ring");
  EXPECT_TRUE(selection::parse("").empty());
  EXPECT_TRUE(selection::parse(" ; ").empty());
}

TEST(selection, the_most_specific_rule_wins) {
  const auto s = selection::parse(
      "*:ring; allreduce:hdrm; allreduce@0-8K:recursive_doubling; allreduce@0-64K:halving_doubling; "
      "*@1M-:gdraa");
  EXPECT_EQ(algorithm_for(s, collective::allreduce, 8), "recursive_doubling");       // narrowest range
  EXPECT_EQ(algorithm_for(s, collective::allreduce, 8192), "recursive_doubling");    // ends are included
  EXPECT_EQ(algorithm_for(s, collective::allreduce, 8193), "halving_doubling");
  EXPECT_EQ(algorithm_for(s, collective::allreduce, 100000), "hdrm");                // named over '*'
  EXPECT_EQ(algorithm_for(s, collective::allreduce, 1 << 20), "gdraa");              // ranged over unranged
  EXPECT_EQ(algorithm_for(s, collective::broadcast, 8), "ring");
  EXPECT_EQ(algorithm_for(selection::parse("allreduce@0-8K:a"), collective::allreduce, 9000), "(none)");
  EXPECT_EQ(algorithm_for(selection::parse("allreduce@0-8K:a"), collective::allgather, 8), "(none)");
  // Equal ranges: a named collective beats '*'; otherwise the later rule wins.
  EXPECT_EQ(algorithm_for(selection::parse("allreduce@0-8K:a; *@0-8K:b"), collective::allreduce, 8), "a");
  EXPECT_EQ(algorithm_for(selection::parse("allreduce:a; allreduce:b"), collective::allreduce, 8), "b");
}

TEST(selection, malformed_strings_say_what_is_wrong_and_what_was_expected) {
  struct bad {
    std::string text, quoted, expected;
  };
  for (const auto& b : std::initializer_list<bad>{
           {"allreduce", "'allreduce'", "expected collective[@range]:algorithm"},
           {"allreduce:", "'allreduce:'", "expected a name"},
           {"allreduce:ring;allredice:ring", "rule 2 'allredice:ring'", "expected allreduce, reduce_scatter"},
           {"allreduce@:ring", "'allreduce@:ring'", "expected sizes like 0-8K"},
           {"allreduce@8X:ring", "'8X'", "expected digits with an optional K, M or G suffix"},
           {"allreduce@8KB:ring", "'8KB'", "expected digits"},
           {"allreduce@1M-8K:ring", "'1M-8K' ends before it starts", "expected low-high"},
           {"allreduce@-:ring", "'-' has no ends", "expected sizes"},
           {"allreduce@99999999999G:ring", "'99999999999G' is too large", ""},
           {"allreduce:ring tree", "'ring tree' is not an algorithm name", "expected letters"},
       }) {
    const std::string message = parse_error(b.text);
    EXPECT_NE(message.find("MIMATRIX_ALGO"), std::string::npos) << message;
    EXPECT_NE(message.find(b.quoted), std::string::npos) << message;
    EXPECT_NE(message.find(b.expected), std::string::npos) << message;
  }
}

TEST(selection, reads_mimatrix_algo) {
  ::setenv("MIMATRIX_ALGO", "broadcast@1K-:ring", 1);
  const auto s = selection::from_environment();
  ::unsetenv("MIMATRIX_ALGO");
  EXPECT_EQ(algorithm_for(s, collective::broadcast, 4096), "ring");
  EXPECT_TRUE(selection::from_environment().empty());
  ::setenv("MIMATRIX_ALGO", "broadcast@1K:", 1);
  EXPECT_THROW((void)selection::from_environment(), error);
  ::unsetenv("MIMATRIX_ALGO");
}

}  // namespace
}  // namespace mimatrix

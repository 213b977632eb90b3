// Tests of core/error.hpp: the category, errc <-> std::error_code, and describe()'s text.
#include "mimatrix/core/error.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <system_error>

namespace MIMATRIX_UNIT_ID {

using mimatrix::errc;

constexpr errc all_codes[] = {errc::invalid_argument, errc::mismatch, errc::timeout, errc::peer_lost,
                              errc::aborted,          errc::transport, errc::cuda};

TEST(error_category, is_named_mimatrix) { EXPECT_STREQ(mimatrix::error_category().name(), "mimatrix"); }

TEST(error_category, every_code_has_its_own_message) {
  std::set<std::string> messages;
  for (errc e : all_codes) {
    const std::string m = mimatrix::error_category().message(static_cast<int>(e));
    EXPECT_FALSE(m.empty());
    EXPECT_NE(m, "unknown mimatrix error") << static_cast<int>(e);
    messages.insert(m);
  }
  EXPECT_EQ(messages.size(), std::size(all_codes));
  EXPECT_EQ(mimatrix::error_category().message(0), "unknown mimatrix error");
  EXPECT_EQ(mimatrix::error_category().message(1000), "unknown mimatrix error");
}

TEST(error_code, compares_with_errc) {
  const std::error_code ec = errc::timeout;  // implicit: errc is an error-code enum
  EXPECT_EQ(ec, errc::timeout);
  EXPECT_NE(ec, errc::aborted);
  EXPECT_EQ(&ec.category(), &mimatrix::error_category());
  EXPECT_EQ(ec.message(), "timed out");
  EXPECT_TRUE(static_cast<bool>(ec));
  EXPECT_EQ(mimatrix::make_error_code(errc::cuda).message(), "CUDA error");
  // mimatrix's codes are its own: not equivalent to the generic ones of the same name.
  EXPECT_NE(ec, std::errc::timed_out);
  EXPECT_NE(std::error_code(errc::invalid_argument), std::errc::invalid_argument);
}

TEST(error, is_a_system_error_carrying_the_code) {
  try {
    throw mimatrix::error(errc::peer_lost, "rank 2 stopped answering");
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::peer_lost);
    EXPECT_NE(std::string(e.what()).find("rank 2 stopped answering"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer lost"), std::string::npos) << e.what();
    return;
  }
  FAIL() << "nothing thrown";
}

TEST(error, takes_any_error_code) {
  const mimatrix::error e(std::make_error_code(std::errc::connection_reset), "fabric");
  EXPECT_EQ(e.code(), std::errc::connection_reset);
}

TEST(describe, names_every_field_that_is_set) {
  const mimatrix::error_context c{.rank = 3, .peer = 2, .operation = "allreduce", .sequence = 12, .step = 4, .bytes = 4096};
  EXPECT_EQ(mimatrix::describe(c, "timed out after 30 s"),
            "rank 3, allreduce #12, step 4, peer 2, 4096 bytes: timed out after 30 s");
}

TEST(describe, leaves_out_fields_that_are_not_set) {
  EXPECT_EQ(mimatrix::describe({}, "boom"), "boom");
  EXPECT_EQ(mimatrix::describe({.rank = 0}, "boom"), "rank 0: boom");
  EXPECT_EQ(mimatrix::describe({.bytes = 0}, "boom"), "0 bytes: boom");
  EXPECT_EQ(mimatrix::describe({.operation = "allgather"}, "boom"), "allgather: boom");
  EXPECT_EQ(mimatrix::describe({.sequence = 5}, "boom"), "#5: boom");
  EXPECT_EQ(mimatrix::describe({.rank = 1, .sequence = 5}, "boom"), "rank 1, #5: boom");
  EXPECT_EQ(mimatrix::describe({.rank = 1, .peer = 7, .step = 0}, "boom"), "rank 1, step 0, peer 7: boom");
}

TEST(throw_error, throws_the_code_with_the_description) {
  try {
    mimatrix::throw_error(errc::mismatch, {.rank = 1, .peer = 0, .operation = "broadcast"}, "count 8 vs 16");
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::mismatch);
    EXPECT_NE(std::string(e.what()).find("rank 1, broadcast, peer 0: count 8 vs 16"), std::string::npos) << e.what();
    return;
  }
  FAIL() << "nothing thrown";
}

}  // namespace

// What a call that must fail says: the message of the mimatrix::error it throws, its code
// checked.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "mimatrix/core/error.hpp"

namespace mimatrix::test {

/// The message of the error `f` throws, expecting `code`; an empty one, and a test
/// failure, when it throws nothing.
template <class F>
std::string refusal(F&& f, errc code = errc::invalid_argument) {
  try {
    std::forward<F>(f)();
  } catch (const error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

}  // namespace mimatrix::test

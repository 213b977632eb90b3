// The concept every topology models: a named structure that can check whether it
// holds a given number of ranks.
#pragma once

#include <concepts>
#include <string_view>

namespace mimatrix::topology {

/// A topology: `name` for logs and signatures, and `check(size)`, which throws
/// `mimatrix::error` (invalid_argument) when the topology cannot hold `size` ranks.
template <class T>
concept layout = std::copy_constructible<T> && requires(const T& t, int size) {
  { T::name } -> std::convertible_to<std::string_view>;
  t.check(size);
};

}  // namespace mimatrix::topology

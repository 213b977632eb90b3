// The concept every topology models: a named structure that can check whether it
// holds a given number of ranks.
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include "mimatrix/core/digest.hpp"

namespace mimatrix::topology {

/// A topology: `name` for logs and signatures, and `check(size)`, which throws
/// `mimatrix::error` (invalid_argument) when the topology cannot hold `size` ranks.
template <class T>
concept layout = std::copy_constructible<T> && requires(const T& t, int size) {
  { T::name } -> std::convertible_to<std::string_view>;
  t.check(size);
};

/// A digest of `t`'s structure for `size` ranks: equal on ranks whose topologies place
/// every rank alike, whatever way they were spelled (an explicit order 0..p-1 and the
/// default one). A topology with parameters says so with `digest(size)`; one without
/// is its name. Ranks compare it, so that ones built with different parameters fail
/// with `mismatch` rather than wait for messages that never come.
template <layout T>
std::uint64_t digest_of(const T& t, int size) {
  if constexpr (requires { { t.digest(size) } -> std::convertible_to<std::uint64_t>; }) return t.digest(size);
  else return mimatrix::digest{}.mix(T::name).value();
}

}  // namespace mimatrix::topology

// The chunk policy as algorithms name it (it lives in schedule/policy.hpp, where
// transports see it too), and the concept of an algorithm that takes one.
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include "mimatrix/core/digest.hpp"
#include "mimatrix/schedule/policy.hpp"

namespace mimatrix::algorithm {

using schedule::chunk_bytes_of;
using schedule::complete;
using schedule::default_chunk_bytes;
using schedule::policy;
using schedule::select_policy;

/// Algorithms with tuning numbers: `a.complete_policy(p)` takes `p`'s numbers for what
/// the algorithm's own policy leaves open. The collectives call it once, with the
/// transport's suggestion.
template <class Algorithm>
concept tunable = requires(Algorithm& a, const policy& p) { a.complete_policy(p); };

/// A digest of what shapes `a`'s schedules beyond the topology: its name and chunk, or
/// what `a.digest()` says (an algorithm with more parameters, as a rank order). Ranks
/// compare it with the topology's (topology::digest_of) at every call.
template <class Algorithm>
std::uint64_t digest_of(const Algorithm& a) {
  if constexpr (requires { { a.digest() } -> std::convertible_to<std::uint64_t>; }) {
    return a.digest();
  } else {
    mimatrix::digest d;
    if constexpr (requires { Algorithm::name; }) d.mix(std::string_view(Algorithm::name));
    if constexpr (requires { a.tuning(); }) d.mix(std::uint64_t(chunk_bytes_of(a.tuning())));
    return d.value();
  }
}

}  // namespace mimatrix::algorithm

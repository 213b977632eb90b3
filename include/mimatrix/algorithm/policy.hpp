// The chunk policy as algorithms name it (it lives in schedule/policy.hpp, where
// transports see it too), and the concept of an algorithm that takes one.
#pragma once

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

}  // namespace mimatrix::algorithm

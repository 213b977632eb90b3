// Test support for algorithms: build a whole group's schedules and prove them with the
// symbolic verifier, out of place and in place.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "support/grid.hpp"

namespace mimatrix::test {

template <class Algorithm, class Topology>
std::vector<schedule::schedule> build_group(const Algorithm& algo, const Topology& topo,
                                            const schedule::descriptor& d) {
  std::vector<schedule::schedule> group;
  for (int r = 0; r < d.size; ++r) group.push_back(algo.build(topo, d, r));
  return group;
}

/// Proves `d`'s schedules in both buffer layouts; `context` names what else the caller varies.
template <class Algorithm, class Topology>
void expect_proved(const Algorithm& algo, const Topology& topo, const schedule::descriptor& d,
                   const std::string& context = {}) {
  const auto group = build_group(algo, topo, d);
  std::string chunk;
  if constexpr (requires { algo.tuning().chunk_bytes; })
    chunk = " chunk=" + std::to_string(algorithm::chunk_bytes_of(algo.tuning()));
  for (bool in_place : {false, true}) {
    if (in_place && !d.may_run_in_place()) continue;
    const auto result = schedule::verify(group, {in_place});
    ASSERT_TRUE(result) << Algorithm::name << ": " << schedule::to_string(d) << " root=" << d.root << chunk << context
                        << (in_place ? " in place" : " out of place") << ": " << result.message;
  }
}

/// p = 1..64 in a long-tier build; otherwise (quick tier, sanitizers) p <= 17 and sizes
/// around 24, 32, 48 and 64.
inline std::vector<int> verified_world_sizes() {
  std::vector<int> sizes;
  for (int p = 1; p <= 64; ++p)
    if ((long_tier && !quick) || p <= 17 || p == 24 || p == 31 || p == 32 || p == 33 || p == 48 || p == 63 || p == 64)
      sizes.push_back(p);
  return sizes;
}

}  // namespace mimatrix::test

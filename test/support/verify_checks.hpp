// Test support for algorithms: build a whole group's schedules and prove them with the
// symbolic verifier, out of place and in place.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "mimatrix/topology/ring.hpp"
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

/// A build of collective `kind`, which `algo` does not run, is refused with invalid_argument
/// naming the algorithm, the call and the rank, even with nothing to move.
template <class Algorithm>
void expect_refuses(const Algorithm& algo, schedule::collective kind) {
  for (std::size_t n : {std::size_t(0), std::size_t(4)}) {
    try {
      (void)algo.build(topology::ring{}, {kind, 4, n, 4, 0}, 1);
      ADD_FAILURE() << Algorithm::name << " built a " << schedule::to_string(kind) << " schedule";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), make_error_code(errc::invalid_argument));
      const std::string want = "rank 1: algorithm " + std::string(Algorithm::name) + " builds no " +
                               std::string(schedule::to_string(kind));
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

/// Gather and scatter of `make(chunk)` proved on p ranks with chunks of 8 and 12 bytes
/// (2 and 3 elements of 4 bytes, 4 and 6 of 2), so that chunks straddle blocks, for
/// several counts and roots, in place and out of place.
template <class Make>
void expect_gather_and_scatter_proved_in_small_chunks(int p, Make make) {
  const std::size_t sp = static_cast<std::size_t>(p);
  for (std::size_t chunk : {std::size_t(8), std::size_t(12)})
    for (std::size_t elem_size : {std::size_t(4), std::size_t(2)})
      for (schedule::collective kind : {schedule::collective::gather, schedule::collective::scatter})
        for (std::size_t n : {std::size_t(1), std::size_t(5), sp + 1, 2 * sp + 3})
          for (int root : {0, p / 2, p - 1}) {
            expect_proved(make(algorithm::policy{chunk}), topology::ring{}, {kind, p, n, elem_size, root});
            if (::testing::Test::HasFatalFailure()) return;
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

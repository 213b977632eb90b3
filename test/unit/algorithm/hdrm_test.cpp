#include "mimatrix/algorithm/hdrm.hpp"

#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "support/grid.hpp"
#include "support/verify_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;
using topology::bigraph;
using test::expect_proved;

class hdrm_verified : public ::testing::TestWithParam<int> {};

// Every collective on the BiGraph shaped for p (folded when p is not a power of two).
TEST_P(hdrm_verified, every_collective_and_count) {
  const int p = GetParam();
  const std::size_t sp = static_cast<std::size_t>(p);
  for (std::size_t chunk : {std::size_t(256) << 10, std::size_t(4)})
    for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather,
                            collective::broadcast})
      for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(3), sp - 1, sp, sp + 1,
                            2 * sp + 3}) {
        if (chunk < 8 && (p > 16 || n > sp + 1)) continue;
        const algorithm::hdrm algo(algorithm::policy{chunk});
        if (kind == collective::broadcast) {
          for (int root : {0, p - 1}) expect_proved(algo, bigraph{}, {kind, p, n, 4, root});
        } else {
          expect_proved(algo, bigraph{}, {kind, p, n, 4, 0});
        }
        if (HasFatalFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(p, hdrm_verified, ::testing::ValuesIn(test::verified_world_sizes()));

// Full power-of-two BiGraphs with M <= N/2, up to 1024 ranks: allreduce, small counts.
TEST(hdrm, full_bigraphs_up_to_1024_ranks) {
  for (auto [n, m] : {std::pair{2, 1}, std::pair{4, 2}, std::pair{8, 4}, std::pair{16, 8}, std::pair{32, 16},
                      std::pair{64, 16}, std::pair{128, 8}}) {
    const int p = n * m;
    if (test::quick && p > 256) continue;
    const bigraph g(n, m);
    for (std::size_t count : {std::size_t(1), std::size_t(p) + 1}) {
      expect_proved(algorithm::hdrm{}, g, {collective::allreduce, p, count, 4, 0});
      if (HasFatalFailure()) return;
    }
  }
}

// Shapes that are not a full power of two fold: partly filled and N·M = 12, 24.
TEST(hdrm, folded_shapes) {
  for (auto [n, m, p] : {std::tuple{4, 3, 12}, std::tuple{8, 3, 24}, std::tuple{8, 4, 27}, std::tuple{16, 4, 50},
                         std::tuple{4, 4, 16}})
    for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather,
                            collective::broadcast}) {
      expect_proved(algorithm::hdrm{}, bigraph(n, m), {kind, p, std::size_t(p) + 2, 4, p / 3});
      if (HasFatalFailure()) return;
    }
}

TEST(hdrm, is_the_default_on_bigraph) {
  static_assert(std::is_same_v<algorithm::default_for<bigraph>, algorithm::hdrm>);
  const auto s = algorithm::hdrm{}.build(bigraph(4, 2), {collective::allreduce, 8, 8, 4, 0}, 0);
  EXPECT_EQ(s.algorithm, "hdrm");
}

TEST(hdrm, ranks_that_do_not_fit_are_an_invalid_argument) {
  EXPECT_THROW((void)algorithm::hdrm{}.build(bigraph(4, 2), {collective::allreduce, 9, 8, 4, 0}, 0), error);
}

}  // namespace
}  // namespace mimatrix

#include "mimatrix/algorithm/recursive_doubling.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "mimatrix/topology/ring.hpp"
#include "support/grid.hpp"
#include "support/verify_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;

void expect_proved(const schedule::descriptor& d) {
  test::expect_proved(algorithm::recursive_doubling{}, topology::ring{}, d);
}

class recursive_doubling_verified : public ::testing::TestWithParam<int> {};

// Every collective, for counts around p and two element sizes, is proved correct in
// place and out of place; broadcast from several roots.
TEST_P(recursive_doubling_verified, every_collective_and_count) {
  const int p = GetParam();
  const std::size_t sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  for (std::size_t elem_size : {std::size_t(4), std::size_t(2)})
    for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather,
                            collective::broadcast})
      for (std::size_t n : counts) {
        if (kind == collective::broadcast) {
          for (int root : {0, 1 % p, p / 2, p - 1}) expect_proved({kind, p, n, elem_size, root});
        } else {
          expect_proved({kind, p, n, elem_size, 0});
        }
        if (HasFatalFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(p, recursive_doubling_verified, ::testing::ValuesIn(test::verified_world_sizes()));

// lg p exchanges of the whole buffer, no more.
TEST(recursive_doubling, allreduce_exchanges_the_whole_buffer_lg_p_times) {
  const auto s = algorithm::recursive_doubling{}.build(topology::ring{}, {collective::allreduce, 16, 10, 4, 0}, 5);
  int sends = 0;
  for (const auto& st : s.steps)
    if (st.kind == schedule::step_kind::send) {
      ++sends;
      EXPECT_EQ(st.bytes(), 40u);
      EXPECT_EQ(st.peer & ~(st.peer ^ 5), st.peer & 5) << schedule::to_text(s);
    }
  EXPECT_EQ(sends, 4);
}

// Non-powers of two: 2r ranks fold, the even ones sit out with one send and one receive.
TEST(recursive_doubling, allreduce_folds_the_extra_ranks) {
  const int p = 11;  // core 8, r = 3: ranks 0, 2, 4 fold into 1, 3, 5
  for (int r = 0; r < 6; r += 2) {
    const auto s = algorithm::recursive_doubling{}.build(topology::ring{}, {collective::allreduce, p, 7, 4, 0}, r);
    ASSERT_EQ(s.steps.size(), 2u) << schedule::to_text(s);
    EXPECT_EQ(s.steps[0].peer, r + 1);
  }
  const auto host = algorithm::recursive_doubling{}.build(topology::ring{}, {collective::allreduce, p, 7, 4, 0}, 1);
  int sends = 0;
  for (const auto& st : host.steps) sends += st.kind == schedule::step_kind::send;
  EXPECT_EQ(sends, 3 + 1);
}

// A binomial tree: the root sends ceil(lg p) times, every other rank receives once.
TEST(recursive_doubling, broadcast_is_a_binomial_tree) {
  const int p = 13, root = 5;
  int receives = 0;
  for (int r = 0; r < p; ++r) {
    const auto s = algorithm::recursive_doubling{}.build(topology::ring{}, {collective::broadcast, p, 9, 4, root}, r);
    int sends = 0;
    for (const auto& st : s.steps) {
      sends += st.kind == schedule::step_kind::send;
      receives += st.kind == schedule::step_kind::recv;
    }
    if (r == root) {
      EXPECT_EQ(sends, 4);
    }
  }
  EXPECT_EQ(receives, p - 1);
}

}  // namespace
}  // namespace mimatrix

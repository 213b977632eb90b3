#include "mimatrix/algorithm/bruck.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "mimatrix/topology/ring.hpp"
#include "support/grid.hpp"
#include "support/verify_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;

int ceil_lg(int p) {
  int lg = 0;
  while ((1 << lg) < p) ++lg;
  return lg;
}

// Alltoall never runs in place, so it is proved out of place only.
void expect_proved(const schedule::descriptor& d) {
  const auto group = test::build_group(algorithm::bruck{}, topology::ring{}, d);
  const auto result = schedule::verify(group, {false});
  ASSERT_TRUE(result) << "bruck: " << schedule::to_string(d) << ": " << result.message;
}

class bruck_verified : public ::testing::TestWithParam<int> {};

// Counts around p and two element sizes. Each block moves up to lg p times through
// scratch, so the verifier's work grows as p²·count·lg p: above p = 32 the largest
// count is proved for one element size only (without this, p near 64 took 0.5 s each).
TEST_P(bruck_verified, alltoall_every_count) {
  const int p = GetParam();
  const std::size_t sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  for (std::size_t elem_size : {std::size_t(4), std::size_t(2)})
    for (std::size_t n : counts) {
      if (p > 32 && elem_size == 2 && n == 2 * sp + 3) continue;
      expect_proved({collective::alltoall, p, n, elem_size, 0});
      if (HasFatalFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(p, bruck_verified, ::testing::ValuesIn(test::verified_world_sizes()));

// ⌈lg p⌉ messages, step k to r + 2^k carrying the blocks whose index has bit k set.
TEST(bruck, alltoall_sends_ceil_lg_p_messages) {
  for (int p : {2, 3, 5, 8, 13, 16, 33}) {
    for (int r : {0, 1 % p, p - 1}) {
      const auto s = algorithm::bruck{}.build(topology::ring{}, {collective::alltoall, p, 3, 4, 0}, r);
      std::vector<int> to;
      int receives = 0;
      for (const auto& st : s.steps) {
        if (st.kind == schedule::step_kind::send) {
          const int k = static_cast<int>(st.tag);
          EXPECT_EQ(st.peer, (r + (1 << k)) % p);
          int moved = 0;
          for (int i = 0; i < p; ++i) moved += (i >> k) & 1;
          EXPECT_EQ(st.bytes(), std::size_t(moved) * 12) << "p=" << p << " step " << k;
          to.push_back(st.peer);
        }
        receives += st.kind == schedule::step_kind::recv;
      }
      EXPECT_EQ(to.size(), std::size_t(ceil_lg(p))) << "p=" << p << "\n" << schedule::to_text(s);
      EXPECT_EQ(receives, ceil_lg(p));
    }
  }
}

// The proof bites: a rank that rotates back the wrong way is refused.
TEST(bruck, alltoall_rotated_back_the_wrong_way_is_refused) {
  const int p = 5;
  auto group = test::build_group(algorithm::bruck{}, topology::ring{}, {collective::alltoall, p, 2, 4, 0});
  // The last p steps copy scratch block i to output block (r - i) % p; make it (r + i).
  auto& steps = group[2].steps;
  for (int i = 0; i < p; ++i) steps[steps.size() - std::size_t(p - i)].dst.offset = std::size_t((2 + i) % p) * 8;
  const auto result = schedule::verify(group, {false});
  EXPECT_FALSE(result);
  EXPECT_NE(result.message.find("alltoall expects origin"), std::string::npos) << result.message;
}

// A group of one copies its block; no scratch.
TEST(bruck, alltoall_on_one_rank_is_a_copy) {
  const auto s = algorithm::bruck{}.build(topology::ring{}, {collective::alltoall, 1, 7, 4, 0}, 0);
  ASSERT_EQ(s.steps.size(), 1u);
  EXPECT_EQ(s.steps[0].kind, schedule::step_kind::copy);
  EXPECT_EQ(s.scratch_bytes, 0u);
}

// Alltoall only; the selector's predict follows ⌈lg p⌉(α + n/2·β).
TEST(bruck, runs_alltoall_and_predicts_its_cost) {
  EXPECT_TRUE(algorithm::runs_collective<algorithm::bruck>(collective::alltoall));
  EXPECT_FALSE(algorithm::runs_collective<algorithm::bruck>(collective::allreduce));
  EXPECT_FALSE(algorithm::runs_collective<algorithm::bruck>(collective::gather));
  model::network net;
  net.link = {1e-6, 1e-9, 0};
  const auto t = algorithm::bruck{}.predict(net, {collective::alltoall, 5, 100, 4, 0});
  ASSERT_TRUE(t);
  // Steps send blocks {1, 3}, {2, 3}, {4}: 5 blocks of 400 bytes; block 4 arrived
  // nowhere before, so step 2 waits for no arrival: a chain of two start-ups.
  EXPECT_DOUBLE_EQ(*t, 2 * 1e-6 + 5 * 400 * 1e-9);
  EXPECT_DOUBLE_EQ(*algorithm::bruck{}.predict(net, {collective::alltoall, 8, 100, 4, 0}), 3 * (1e-6 + 4 * 400 * 1e-9));
  EXPECT_EQ(algorithm::bruck{}.predict(net, {collective::alltoall, 1, 100, 4, 0}), 0.0);
  EXPECT_FALSE(algorithm::bruck{}.predict(net, {collective::broadcast, 5, 100, 4, 0}));
}

// Any other collective is refused with a sentence, even with nothing to move.
TEST(bruck, other_collectives_are_refused) { test::expect_refuses(algorithm::bruck{}, collective::allgather); }

}  // namespace
}  // namespace mimatrix

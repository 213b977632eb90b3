#include "mimatrix/algorithm/rabenseifner.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/default_for.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "mimatrix/topology/ring.hpp"
#include "support/grid.hpp"
#include "support/verify_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;
using schedule::step_kind;

static_assert(algorithm::runs_collective<algorithm::rabenseifner>(collective::reduce));
static_assert(!algorithm::runs_collective<algorithm::rabenseifner>(collective::gather));
static_assert(!algorithm::runs_collective<algorithm::rabenseifner>(collective::allreduce));
static_assert(algorithm::predicts_cost<algorithm::rabenseifner>);

class rabenseifner_verified : public ::testing::TestWithParam<int> {};

// Reduce from four roots, for counts around p and two element sizes, proved in place
// and out of place; chunked too (2 elements a chunk).
TEST_P(rabenseifner_verified, every_count_and_root) {
  const int p = GetParam();
  const std::size_t sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  const algorithm::rabenseifner chunked(algorithm::policy{8});
  for (std::size_t elem_size : {std::size_t(4), std::size_t(2)})
    for (std::size_t n : counts)
      for (int root : {0, 1 % p, p / 2, p - 1}) {
        test::expect_proved(algorithm::rabenseifner{}, topology::ring{}, {collective::reduce, p, n, elem_size, root});
        if (elem_size == 4 && p <= 17)
          test::expect_proved(chunked, topology::ring{}, {collective::reduce, p, n, elem_size, root});
        if (HasFatalFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(p, rabenseifner_verified, ::testing::ValuesIn(test::verified_world_sizes()));

// Bandwidth-optimal: the root receives (p-1)/p of the buffer while halving and as much
// again in the gather, 2(p-1)/p·n in all, and sends nothing after the halving.
TEST(rabenseifner, root_receives_twice_p_minus_1_over_p_of_the_buffer) {
  const int p = 16, root = 5;
  const std::size_t count = 1600, bytes = count * 4;
  const auto s = algorithm::rabenseifner{}.build(topology::ring{}, {collective::reduce, p, count, 4, root}, root);
  std::size_t received = 0, sent = 0;
  for (const auto& st : s.steps) {
    if (st.kind == step_kind::recv || st.kind == step_kind::recv_reduce) received += st.bytes();
    if (st.kind == step_kind::send) sent += st.bytes();
  }
  EXPECT_EQ(received, 2 * bytes * (p - 1) / p) << schedule::to_text(s);
  EXPECT_EQ(sent, bytes * (p - 1) / p);
  EXPECT_EQ(s.scratch_bytes, 0u);
}

// p = 6 folds two ranks; the root is never one of them, whatever it is.
TEST(rabenseifner, the_root_is_never_folded_out) {
  const int p = 6;
  for (int root = 0; root < p; ++root) {
    const auto s = algorithm::rabenseifner{}.build(topology::ring{}, {collective::reduce, p, 12, 4, root}, root);
    int finals = 0;
    for (const auto& st : s.steps) finals += st.kind == step_kind::finalize;
    EXPECT_EQ(finals, 1) << schedule::to_text(s);
    EXPECT_GT(s.steps.size(), 2u);
  }
}

TEST(rabenseifner, refuses_collectives_it_does_not_run) { test::expect_refuses(algorithm::rabenseifner{}, collective::gather); }

TEST(rabenseifner, predicts_halving_and_gather) {
  model::network net;
  net.link = {1e-6, 1e-9, 1e-10};
  const algorithm::rabenseifner a;
  EXPECT_FALSE(a.predict(net, {collective::allreduce, 8, 100, 4, 0}));
  const double n = 400;
  EXPECT_DOUBLE_EQ(*a.predict(net, {collective::reduce, 8, 100, 4, 0}),
                   6 * 1e-6 + 2 * 7.0 / 8 * n * 1e-9 + 7.0 / 8 * n * 1e-10);
  // p = 6: a core of 4 and a fold.
  EXPECT_DOUBLE_EQ(*a.predict(net, {collective::reduce, 6, 100, 4, 0}),
                   4 * 1e-6 + 2 * 3.0 / 4 * n * 1e-9 + 3.0 / 4 * n * 1e-10 + 1e-6 + n * 1e-9 + n * 1e-10);
}

}  // namespace
}  // namespace mimatrix

#include "mimatrix/algorithm/linear.hpp"

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

static_assert(algorithm::runs_collective<algorithm::linear>(collective::reduce));
static_assert(algorithm::runs_collective<algorithm::linear>(collective::gather));
static_assert(algorithm::runs_collective<algorithm::linear>(collective::scatter));
static_assert(!algorithm::runs_collective<algorithm::linear>(collective::allgather));
static_assert(algorithm::predicts_cost<algorithm::linear>);

class linear_verified : public ::testing::TestWithParam<int> {};

// Reduce, gather and scatter from four roots, for counts around p and two element
// sizes, proved in place and out of place.
TEST_P(linear_verified, every_collective_count_and_root) {
  const int p = GetParam();
  const std::size_t sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  for (std::size_t elem_size : {std::size_t(4), std::size_t(2)})
    for (collective kind : {collective::reduce, collective::gather, collective::scatter})
      for (std::size_t n : counts)
        for (int root : {0, 1 % p, p / 2, p - 1}) {
          test::expect_proved(algorithm::linear{}, topology::ring{}, {kind, p, n, elem_size, root});
          if (HasFatalFailure()) return;
        }
}

class linear_chunked : public ::testing::TestWithParam<int> {};

// Gather and scatter cut into chunks of 8 and 12 bytes (2 and 3 elements of 4 bytes, 4
// and 6 of 2), so that blocks split unevenly, a message a chunk; proved in place and
// out of place.
TEST_P(linear_chunked, gather_and_scatter_in_small_chunks) {
  test::expect_gather_and_scatter_proved_in_small_chunks(GetParam(), [](algorithm::policy c) { return algorithm::linear(c); });
}

INSTANTIATE_TEST_SUITE_P(p, linear_verified, ::testing::ValuesIn(test::verified_world_sizes()));
INSTANTIATE_TEST_SUITE_P(p, linear_chunked, ::testing::Range(1, 18));

// A block of 44 bytes in chunks of 12 goes as ceil(44/12) = 4 messages (12, 12, 12, 8),
// each straight into or out of its place in the root's buffer, tags 0..3.
TEST(linear, a_block_larger_than_the_chunk_goes_as_ceil_bytes_over_chunk_messages) {
  const int p = 5, root = 2;
  const algorithm::linear a(algorithm::policy{12});
  for (collective kind : {collective::gather, collective::scatter}) {
    const schedule::descriptor d{kind, p, 11, 4, root};
    for (int r = 0; r < p; ++r) {
      const auto s = a.build(topology::ring{}, d, r);
      int messages = 0;
      std::size_t bytes = 0;
      for (const auto& st : s.steps) {
        if (st.kind != step_kind::send && st.kind != step_kind::recv) continue;
        const auto& where = st.kind == step_kind::send ? st.src : st.dst;
        EXPECT_LE(where.bytes, 12u);
        if (r == root) {
          EXPECT_GE(where.offset, std::size_t(st.peer) * 44u);
          EXPECT_LE(where.offset + where.bytes, std::size_t(st.peer + 1) * 44u);
        }
        EXPECT_LT(st.tag, 4u);
        bytes += where.bytes;
        ++messages;
      }
      EXPECT_EQ(messages, r == root ? 4 * (p - 1) : 4) << schedule::to_text(s);
      EXPECT_EQ(bytes, (r == root ? std::size_t(p - 1) : 1u) * 44u);
    }
  }
}

// The root receives each block straight into its place in the output; the others send once.
TEST(linear, gather_root_receives_p_minus_1_blocks_into_the_output) {
  const int p = 7, root = 4;
  const schedule::descriptor d{collective::gather, p, 5, 4, root};
  for (int r = 0; r < p; ++r) {
    const auto s = algorithm::linear{}.build(topology::ring{}, d, r);
    EXPECT_EQ(s.scratch_bytes, 0u);
    int receives = 0, sends = 0;
    for (const auto& st : s.steps) {
      sends += st.kind == step_kind::send;
      if (st.kind != step_kind::recv) continue;
      ++receives;
      EXPECT_EQ(st.dst.offset, std::size_t(st.peer) * 20u);
    }
    EXPECT_EQ(receives, r == root ? p - 1 : 0) << schedule::to_text(s);
    EXPECT_EQ(sends, r == root ? 0 : 1);
  }
}

// Reduce: p-1 receive-reduces one after another and one finalize, on the root only.
TEST(linear, reduce_root_adds_every_rank_in_turn) {
  const auto s = algorithm::linear{}.build(topology::ring{}, {collective::reduce, 6, 9, 4, 2}, 2);
  int adds = 0, finals = 0;
  for (const auto& st : s.steps) {
    adds += st.kind == step_kind::recv_reduce;
    finals += st.kind == step_kind::finalize;
  }
  EXPECT_EQ(adds, 5);
  EXPECT_EQ(finals, 1);
}

TEST(linear, refuses_collectives_it_does_not_run) { test::expect_refuses(algorithm::linear{}, collective::allreduce); }

TEST(linear, predicts_direct_exchanges) {
  model::network net;
  net.link = {1e-6, 1e-9, 1e-10};
  const algorithm::linear a;
  EXPECT_FALSE(a.predict(net, {collective::alltoall, 8, 100, 4, 0}));
  net.message_gap = 2e-7;
  // All exchanges in flight at once: one start-up, the others at the gap.
  EXPECT_DOUBLE_EQ(*a.predict(net, {collective::reduce, 5, 100, 4, 0}), 1e-6 + 3 * 2e-7 + 4 * (400e-9 + 400e-10));
  EXPECT_DOUBLE_EQ(*a.predict(net, {collective::scatter, 8, 100, 4, 0}), 1e-6 + 6 * 2e-7 + 7.0 / 8 * 3200e-9);
}

}  // namespace
}  // namespace mimatrix

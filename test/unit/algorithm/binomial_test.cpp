#include "mimatrix/algorithm/binomial.hpp"

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

static_assert(algorithm::runs_collective<algorithm::binomial>(collective::reduce));
static_assert(algorithm::runs_collective<algorithm::binomial>(collective::gather));
static_assert(algorithm::runs_collective<algorithm::binomial>(collective::scatter));
static_assert(!algorithm::runs_collective<algorithm::binomial>(collective::allreduce));
static_assert(!algorithm::runs_collective<algorithm::binomial>(collective::broadcast));
static_assert(algorithm::predicts_cost<algorithm::binomial>);

std::vector<std::size_t> counts_for(int p) {
  const std::size_t sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  return counts;
}

class binomial_verified : public ::testing::TestWithParam<int> {};

// Reduce, gather and scatter from four roots, for counts around p and two element
// sizes, proved in place and out of place; reduce chunked too (2 elements a chunk, each
// climbing the tree on its own).
TEST_P(binomial_verified, every_collective_count_and_root) {
  const int p = GetParam();
  const algorithm::binomial chunked(algorithm::policy{8});
  for (std::size_t elem_size : {std::size_t(4), std::size_t(2)})
    for (collective kind : {collective::reduce, collective::gather, collective::scatter})
      for (std::size_t n : counts_for(p))
        for (int root : {0, 1 % p, p / 2, p - 1}) {
          const schedule::descriptor d{kind, p, n, elem_size, root};
          test::expect_proved(algorithm::binomial{}, topology::ring{}, d);
          if (kind == collective::reduce && elem_size == 4 && p <= 17)
            test::expect_proved(chunked, topology::ring{}, d);
          if (HasFatalFailure()) return;
        }
}

class binomial_chunked : public ::testing::TestWithParam<int> {};

// Gather and scatter cut into chunks of 8 and 12 bytes (2 and 3 elements of 4 bytes, 4
// and 6 of 2), so that chunks straddle blocks and subtrees' runs split unevenly, each
// forwarded as soon as what it overlaps has arrived; proved in place and out of place.
TEST_P(binomial_chunked, gather_and_scatter_in_small_chunks) {
  test::expect_gather_and_scatter_proved_in_small_chunks(GetParam(), [](algorithm::policy c) { return algorithm::binomial(c); });
}

INSTANTIATE_TEST_SUITE_P(p, binomial_verified, ::testing::ValuesIn(test::verified_world_sizes()));
INSTANTIATE_TEST_SUITE_P(p, binomial_chunked, ::testing::Range(1, 18));

// p = 2: rank 1's block of 44 bytes in chunks of 12 goes as ceil(44/12) = 4 messages
// (12, 12, 12, 8, tags 0..3) straight into or out of the root's buffer. p = 8, root 0:
// position 4's subtree (4 blocks, 176 bytes) reaches the root as ceil(176/12) = 15.
TEST(binomial, a_block_larger_than_the_chunk_goes_as_ceil_bytes_over_chunk_messages) {
  const algorithm::binomial a(algorithm::policy{12});
  for (collective kind : {collective::gather, collective::scatter})
    for (int p : {2, 8}) {
      const schedule::descriptor d{kind, p, 11, 4, 0};
      const auto root = a.build(topology::ring{}, d, 0);
      const int peer = p / 2;
      int messages = 0;
      std::size_t bytes = 0;
      for (const auto& st : root.steps) {
        if (st.kind != step_kind::send && st.kind != step_kind::recv) continue;
        const auto& where = st.kind == step_kind::send ? st.src : st.dst;
        EXPECT_LE(where.bytes, 12u);
        if (st.peer != peer) continue;
        EXPECT_GE(where.offset, std::size_t(peer) * 44u);
        EXPECT_EQ(st.tag, std::uint32_t(messages));
        bytes += where.bytes;
        ++messages;
      }
      const std::size_t subtree = std::size_t(p - peer) * 44u;
      EXPECT_EQ(bytes, subtree) << schedule::to_text(root);
      EXPECT_EQ(messages, int((subtree + 11) / 12)) << schedule::to_text(root);
    }
}

// Gather on p = 4, root 0, in chunks of one block: position 2 forwards its own block's
// chunk after its copy alone, not after position 3's, which it forwards after receiving.
TEST(binomial, gather_forwards_each_chunk_once_it_has_arrived) {
  const algorithm::binomial a(algorithm::policy{16});
  const auto s = a.build(topology::ring{}, {collective::gather, 4, 4, 4, 0}, 2);
  std::vector<schedule::step_id> sends;
  for (std::size_t i = 0; i < s.steps.size(); ++i)
    if (s.steps[i].kind == step_kind::send) sends.push_back(schedule::step_id(i));
  ASSERT_EQ(sends.size(), 2u) << schedule::to_text(s);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto deps = s.deps(sends[k]);
    ASSERT_EQ(deps.size(), 1u) << schedule::to_text(s);
    EXPECT_EQ(s.steps[deps[0]].kind, k == 0 ? step_kind::copy : step_kind::recv) << schedule::to_text(s);
  }
}

int ceil_lg(int p) {
  int lg = 0;
  while ((1 << lg) < p) ++lg;
  return lg;
}

// Every rank sends its partial sum once; the root adds ceil(lg p) of them, nobody more.
TEST(binomial, reduce_is_a_tree_of_ceil_lg_p_levels) {
  for (int p : {5, 8, 13}) {
    const schedule::descriptor d{collective::reduce, p, 10, 4, p / 2};
    int messages = 0;
    for (int r = 0; r < p; ++r) {
      const auto s = algorithm::binomial{}.build(topology::ring{}, d, r);
      int sends = 0, receives = 0;
      for (const auto& st : s.steps) {
        sends += st.kind == step_kind::send;
        receives += st.kind == step_kind::recv_reduce;
      }
      messages += sends;
      EXPECT_EQ(sends, r == d.root ? 0 : 1) << schedule::to_text(s);
      EXPECT_LE(receives, ceil_lg(p));
      if (r == d.root) {
        EXPECT_EQ(receives, ceil_lg(p));
      }
    }
    EXPECT_EQ(messages, p - 1);
  }
}

// p = 6, root 3: position 2's subtree is ranks 5 and 0, which wrap past rank 5; they
// reach the root as two messages, straight into its output (no scratch on the root).
TEST(binomial, gather_splits_a_subtree_that_wraps) {
  const schedule::descriptor d{collective::gather, 6, 3, 4, 3};
  const auto root = algorithm::binomial{}.build(topology::ring{}, d, 3);
  EXPECT_EQ(root.scratch_bytes, 0u);
  int from_five = 0;
  for (const auto& st : root.steps)
    if (st.kind == step_kind::recv && st.peer == 5) {
      ++from_five;
      EXPECT_EQ(st.dst.bytes, 12u);
      EXPECT_TRUE(st.dst.offset == 5 * 12u || st.dst.offset == 0u) << schedule::to_text(root);
    }
  EXPECT_EQ(from_five, 2);
  const auto five = algorithm::binomial{}.build(topology::ring{}, d, 5);
  EXPECT_EQ(five.scratch_bytes, 24u);
}

TEST(binomial, refuses_collectives_it_does_not_run) { test::expect_refuses(algorithm::binomial{}, collective::allreduce); }

TEST(binomial, predicts_the_tree) {
  model::network net;
  net.link = {1e-6, 1e-9, 1e-10};
  const algorithm::binomial a;
  EXPECT_FALSE(a.predict(net, {collective::allreduce, 8, 100, 4, 0}));
  // On 5 ranks the root takes 3 messages, the deepest (position 3) is 2 hops away.
  EXPECT_DOUBLE_EQ(*a.predict(net, {collective::reduce, 5, 100, 4, 0}), 2 * 1e-6 + 3 * (400e-9 + 400e-10));
  EXPECT_DOUBLE_EQ(*a.predict(net, {collective::gather, 8, 100, 4, 0}), 3 * 1e-6 + 7.0 / 8 * 3200e-9);
  EXPECT_DOUBLE_EQ(*a.predict(net, {collective::scatter, 1, 100, 4, 0}), 0.0);
}

}  // namespace
}  // namespace mimatrix

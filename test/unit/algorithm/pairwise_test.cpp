#include "mimatrix/algorithm/pairwise.hpp"

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

// Alltoall never runs in place, so it is proved out of place only.
void expect_proved(const algorithm::pairwise& algo, const schedule::descriptor& d) {
  const auto group = test::build_group(algo, topology::ring{}, d);
  const auto result = schedule::verify(group, {false});
  ASSERT_TRUE(result) << "pairwise: " << schedule::to_string(d) << " chunk=" << algorithm::chunk_bytes_of(algo.tuning())
                      << " window=" << algo.window() << ": " << result.message;
}

class pairwise_verified : public ::testing::TestWithParam<int> {};

// Counts around p and two element sizes, unchunked (the default chunk is far larger).
TEST_P(pairwise_verified, alltoall_every_count) {
  const int p = GetParam();
  const std::size_t sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  for (std::size_t elem_size : {std::size_t(4), std::size_t(2)})
    for (std::size_t n : counts) {
      expect_proved(algorithm::pairwise{}, {collective::alltoall, p, n, elem_size, 0});
      if (HasFatalFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(p, pairwise_verified, ::testing::ValuesIn(test::verified_world_sizes()));

// Chunks of 8 bytes (several a block) under windows of one message, a few, and all.
TEST(pairwise, alltoall_chunked_under_every_window) {
  for (int p : {1, 2, 3, 4, 5, 7, 8, 12, 16})
    for (std::size_t window : {std::size_t(0), std::size_t(1), std::size_t(3), algorithm::pairwise::default_window})
      for (std::size_t n : {std::size_t(1), std::size_t(5), std::size_t(9)}) {
        expect_proved(algorithm::pairwise{{.chunk_bytes = 8}, window}, {collective::alltoall, p, n, 4, 0});
        if (HasFatalFailure()) return;
      }
}

// p-1 messages of one block each, one to every other rank, and one local copy.
TEST(pairwise, alltoall_sends_one_block_to_every_other_rank) {
  for (int p : {6, 8}) {
    for (int r = 0; r < p; ++r) {
      const auto s = algorithm::pairwise{}.build(topology::ring{}, {collective::alltoall, p, 10, 4, 0}, r);
      std::set<int> to, from;
      int copies = 0;
      for (const auto& st : s.steps) {
        if (st.kind == schedule::step_kind::send) {
          EXPECT_EQ(st.bytes(), 40u);
          EXPECT_EQ(st.src.offset, std::size_t(st.peer) * 40) << "input block `peer` goes to `peer`";
          to.insert(st.peer);
        }
        if (st.kind == schedule::step_kind::recv) {
          EXPECT_EQ(st.dst.offset, std::size_t(st.peer) * 40) << "output block `peer` comes from `peer`";
          from.insert(st.peer);
        }
        copies += st.kind == schedule::step_kind::copy;
      }
      EXPECT_EQ(to.size(), std::size_t(p - 1)) << schedule::to_text(s);
      EXPECT_EQ(from.size(), std::size_t(p - 1));
      EXPECT_FALSE(to.contains(r));
      EXPECT_EQ(copies, 1);
      EXPECT_EQ(s.steps.size(), std::size_t(2 * (p - 1) + 1));
      EXPECT_EQ(s.scratch_bytes, 0u);
    }
  }
}

// The window: no more than `window` sends (or receives) are free of dependencies, and
// message i waits for message i - window alone.
TEST(pairwise, alltoall_keeps_a_window_of_messages_in_flight) {
  const auto s = algorithm::pairwise{{}, 3}.build(topology::ring{}, {collective::alltoall, 20, 4, 4, 0}, 7);
  int free_sends = 0, free_recvs = 0;
  for (schedule::step_id i = 0; i < s.steps.size(); ++i) {
    const auto kind = s.steps[i].kind;
    if (kind == schedule::step_kind::copy) continue;
    EXPECT_LE(s.deps(i).size(), 1u);
    if (s.deps(i).empty()) (kind == schedule::step_kind::send ? free_sends : free_recvs) += 1;
    else EXPECT_EQ(s.steps[s.deps(i)[0]].kind, kind);
  }
  EXPECT_EQ(free_sends, 3);
  EXPECT_EQ(free_recvs, 3);
}

// The proof bites: a rank that files two received blocks in each other's place is refused.
TEST(pairwise, alltoall_with_blocks_swapped_is_refused) {
  auto group = test::build_group(algorithm::pairwise{}, topology::ring{}, {collective::alltoall, 3, 2, 4, 0});
  std::vector<schedule::step*> recvs;
  for (auto& st : group[1].steps)
    if (st.kind == schedule::step_kind::recv) recvs.push_back(&st);
  ASSERT_EQ(recvs.size(), 2u);
  std::swap(recvs[0]->dst, recvs[1]->dst);
  const auto result = schedule::verify(group, {false});
  EXPECT_FALSE(result);
  EXPECT_NE(result.message.find("alltoall expects origin"), std::string::npos) << result.message;
}

// Alltoall only; the selector's predict follows α + (p-2)g + (p-1)·n/p·β: the window
// keeps messages in flight, so their start-ups overlap.
TEST(pairwise, runs_alltoall_and_predicts_its_cost) {
  EXPECT_TRUE(algorithm::runs_collective<algorithm::pairwise>(collective::alltoall));
  for (collective k : {collective::allreduce, collective::reduce_scatter, collective::allgather, collective::broadcast,
                       collective::reduce, collective::gather, collective::scatter})
    EXPECT_FALSE(algorithm::runs_collective<algorithm::pairwise>(k)) << schedule::to_string(k);
  model::network net;
  net.link = {1e-6, 1e-9, 0};
  net.message_gap = 2e-7;
  const auto t = algorithm::pairwise{}.predict(net, {collective::alltoall, 8, 1000, 4, 0});
  ASSERT_TRUE(t);
  EXPECT_DOUBLE_EQ(*t, 1e-6 + 6 * 2e-7 + 7 * 4000 * 1e-9);
  EXPECT_EQ(algorithm::pairwise{}.predict(net, {collective::alltoall, 1, 1000, 4, 0}), 0.0);
  EXPECT_FALSE(algorithm::pairwise{}.predict(net, {collective::allreduce, 8, 1000, 4, 0}));
}

// Any other collective is refused with a sentence, even with nothing to move.
TEST(pairwise, other_collectives_are_refused) { test::expect_refuses(algorithm::pairwise{}, collective::allgather); }

}  // namespace
}  // namespace mimatrix

// Tests for the schedule IR: the packed region, the flat dependency and successor arrays,
// the builder's limits, and the footprint of a ring allreduce schedule at 4096 ranks.
#include "mimatrix/schedule/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/topology/ring.hpp"
#include "support/refusal.hpp"

namespace MIMATRIX_UNIT_ID {

using namespace mimatrix::schedule;
using mimatrix::errc;
using mimatrix::error;

constexpr std::size_t es = 4;

/// deps and successors are one relation read both ways, and the arrays hold exactly it.
::testing::AssertionResult deps_and_successors_agree(const schedule& s) {
  const auto n = step_id(s.steps.size());
  if (s.dep_begin.size() != n + 1u || s.successor_begin.size() != n + 1u)
    return ::testing::AssertionFailure() << "ranges are not one a step";
  std::size_t edges = 0;
  for (step_id i = 0; i < n; ++i)
    for (step_id d : s.deps(i)) {
      ++edges;
      const auto succ = s.successors(d);
      if (d >= i || std::count(succ.begin(), succ.end(), i) != 1)
        return ::testing::AssertionFailure() << "step " << i << " depends on " << d << ", not listed once as its successor";
    }
  if (edges != s.dep_ids.size() || edges != s.successor_ids.size())
    return ::testing::AssertionFailure() << edges << " edges, " << s.dep_ids.size() << " deps, "
                                         << s.successor_ids.size() << " successors";
  return ::testing::AssertionSuccess();
}

schedule ring_allreduce(int size, int rank, std::size_t count) {
  return mimatrix::algorithm::ring{}.build(mimatrix::topology::ring{}, {collective::allreduce, size, count, es, 0}, rank);
}

TEST(schedule, region_keeps_a_56_bit_offset_in_the_word_of_its_buffer) {
  static_assert(sizeof(region) == 16 && sizeof(step) == 48);
  const region r{buffer::scratch, region::offset_limit - 1, 7};
  EXPECT_EQ(r.where, buffer::scratch);
  EXPECT_EQ(r.offset, region::offset_limit - 1);
  EXPECT_EQ(r.bytes, 7u);
  EXPECT_EQ(r, (region{buffer::scratch, region::offset_limit - 1, 7}));
  EXPECT_NE(r, (region{buffer::output, region::offset_limit - 1, 7}));
}

TEST(schedule, deps_and_successors_are_flat_arrays) {
  builder b({collective::allreduce, 2, 2, es, 0}, 0, "test");
  const region in{buffer::input, 0, 2 * es}, out{buffer::output, 0, 2 * es};
  const auto sent = b.send(1, 0, in);
  const auto got = b.recv(1, 0, out);
  const std::vector<step_id> both{sent, got};
  const auto joined = b.wait(0, 0, both);
  const auto last = b.add({.kind = step_kind::finalize, .dst = out}, {joined});
  const auto s = std::move(b).build();
  ASSERT_EQ(s.steps.size(), 4u);
  EXPECT_TRUE(s.deps(sent).empty());
  EXPECT_EQ(std::vector<step_id>(s.deps(joined).begin(), s.deps(joined).end()), both);
  EXPECT_EQ(std::vector<step_id>(s.successors(sent).begin(), s.successors(sent).end()), std::vector<step_id>{joined});
  EXPECT_EQ(std::vector<step_id>(s.deps(last).begin(), s.deps(last).end()), std::vector<step_id>{joined});
  EXPECT_TRUE(s.successors(last).empty());
  EXPECT_TRUE(deps_and_successors_agree(s));

  // An executor's release: step 2 becomes ready once both of its deps are done.
  std::vector<std::uint32_t> pending(s.steps.size());
  for (step_id i = 0; i < s.steps.size(); ++i) pending[i] = std::uint32_t(s.deps(i).size());
  std::vector<step_id> ready;
  release_successors(s, sent, pending, ready);
  EXPECT_TRUE(ready.empty());
  release_successors(s, got, pending, ready);
  EXPECT_EQ(ready, std::vector<step_id>{joined});
}

TEST(schedule, builder_refuses_a_later_dependency) {
  builder b({collective::allreduce, 2, 2, es, 0}, 0, "test");
  const auto first = b.copy({buffer::input, 0, es}, {buffer::output, 0, es});
  EXPECT_THROW(b.copy({buffer::input, 0, es}, {buffer::output, 0, es}, {first + 1}), std::logic_error);
  // The refused step left nothing behind.
  b.finalize({buffer::output, 0, es}, {first});
  const auto s = std::move(b).build();
  EXPECT_EQ(s.steps.size(), 2u);
  EXPECT_TRUE(deps_and_successors_agree(s));
}

// Found by a black-box test: elements of 0 bytes ended the process with SIGFPE in the ring's
// chunking (through ring::build or the simulator), and a broadcast root outside the group
// reached the simulator as "a message that no receive takes".
TEST(schedule, builder_refuses_a_descriptor_no_schedule_can_have_naming_rank_and_call) {
  using mimatrix::test::refusal;
  const mimatrix::topology::ring topo;
  const mimatrix::algorithm::ring ring;
  EXPECT_NE(refusal([&] { (void)ring.build(topo, {collective::allreduce, 8, 1000, 0, 0}, 2); })
                .find("rank 2, ring allreduce: elements of 0 bytes"),
            std::string::npos);
  EXPECT_NE(refusal([&] { (void)ring.build(topo, {collective::broadcast, 8, 1000, es, 9}, 0); })
                .find("rank 0, ring broadcast: root 9 is outside a group of 8"),
            std::string::npos);
  EXPECT_NE(refusal([&] { (void)ring.build(topo, {collective::broadcast, 8, 1000, es, -1}, 0); }).find("root -1"),
            std::string::npos);
  EXPECT_NE(refusal([] { builder({collective::allgather, 4, 10, es, 0}, 4, "test"); })
                .find("rank 4, test allgather: rank 4 is outside a group of 4"),
            std::string::npos);
  EXPECT_NE(refusal([] { builder({collective::allgather, 0, 10, es, 0}, 0, "test"); }).find("a group of 0 ranks"),
            std::string::npos);
  // A root is a broadcast's alone: the others keep whatever the field holds.
  EXPECT_NO_THROW((void)ring.build(topo, {collective::allreduce, 8, 1000, es, 9}, 7));
}

TEST(schedule, builder_refuses_offsets_past_56_bits) {
  const auto refuses = [](auto&& make, const std::string& what) {
    try {
      make();
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("2^56"), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error for " << what;
  };
  // A buffer so large that its offsets could not be held.
  refuses([] { builder({collective::allreduce, 4, region::offset_limit / es, es, 0}, 3, "test"); }, "rank 3");
  // ... also where count x elem_size wraps around to a few bytes (a black-box test: 2^61 + 1
  // elements of 8 bytes ran as a 16-byte call), and an allgather's group times it.
  refuses([] { builder({collective::allreduce, 2, (std::size_t(1) << 61) + 1, 8, 0}, 0, "test"); }, "elements of 8");
  refuses([] { builder({collective::allgather, 1 << 10, std::size_t(1) << 47, 1, 0}, 0, "test"); }, "times 1024");
  EXPECT_NO_THROW(builder({collective::allgather, 1 << 10, (std::size_t(1) << 46) - 1, 1, 0}, 0, "test"));
  builder b({collective::allreduce, 2, 2, es, 0}, 1, "test");
  (void)b.scratch(region::offset_limit - 8);
  refuses([&] { (void)b.scratch(8); }, "scratch");
  refuses([&] { b.copy({buffer::scratch, region::offset_limit - 4, 8}, {buffer::output, 0, 8}); }, "step 0's src");
  EXPECT_NO_THROW(b.copy({buffer::scratch, region::offset_limit - 8, 8}, {buffer::output, 0, 8}));
}

TEST(schedule, build_leaves_no_array_a_quarter_unused) {
  for (int size : {3, 8, 100, 1000}) {
    const auto s = ring_allreduce(size, 2, 1000);
    EXPECT_TRUE(deps_and_successors_agree(s));
    const auto unused = [](const auto& v) { return v.capacity() - v.size(); };
    EXPECT_LT(unused(s.steps), std::max<std::size_t>(1, s.steps.capacity() / 4)) << size;
    EXPECT_LT(unused(s.dep_ids), std::max<std::size_t>(1, s.dep_ids.capacity() / 4)) << size;
    EXPECT_LT(unused(s.dep_begin), std::max<std::size_t>(1, s.dep_begin.capacity() / 4)) << size;
    EXPECT_EQ(s.memory_bytes(), s.steps.capacity() * sizeof(step) +
                                    (s.dep_ids.capacity() + s.dep_begin.capacity() + s.successor_ids.capacity() +
                                     s.successor_begin.capacity()) * sizeof(std::uint32_t));
  }
}

// Issue 10: one rank of a 4096-rank ring allreduce in at most 1 MiB (it was 1.66 MiB
// of arrays plus 12,285 heap blocks of dependencies). Bytes only: timings are the
// benchmark's (benchmark/micro/schedule_bench.cpp).
TEST(schedule, ring_allreduce_at_4096_ranks_fits_in_a_mebibyte) {
  const auto s = ring_allreduce(4096, 17, std::size_t(1) << 20);
  EXPECT_EQ(s.steps.size(), 4u * 4095 + 1);  // one chunk a block: 2(p-1) sends, p-1 of each receive, a finalize
  EXPECT_EQ(s.dep_ids.size(), 3u * 4095);
  EXPECT_LE(s.memory_bytes(), std::size_t(1) << 20);
  EXPECT_TRUE(deps_and_successors_agree(s));
}

}  // namespace

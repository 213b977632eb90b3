#include "mimatrix/algorithm/ring.hpp"

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "support/grid.hpp"
#include "support/verify_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;
using test::build_group;
using test::expect_proved;

class ring_verified : public ::testing::TestWithParam<int> {};

// Every collective, for counts around p and chunk sizes from one element up, is proved
// correct in place and out of place.
TEST_P(ring_verified, every_collective_count_and_chunking) {
  const int p = GetParam();
  const std::size_t sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  // Chunks of one and three elements multiply the steps; they run for the smaller groups.
  std::vector<std::size_t> elem_sizes{4};
  if (p <= 16) elem_sizes.push_back(2);
  for (std::size_t elem_size : elem_sizes)
    for (std::size_t chunk : {std::size_t(256) << 10, 3 * elem_size, elem_size})
      for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather,
                              collective::broadcast})
        for (std::size_t n : counts) {
          if (p > 12 && chunk < 4 * elem_size && n > sp + 1) continue;
          const algorithm::ring algo(algorithm::policy{chunk});
          if (kind == collective::broadcast) {
            for (int root : {0, p / 2, p - 1}) expect_proved(algo, topology::ring{}, {kind, p, n, elem_size, root});
          } else {
            expect_proved(algo, topology::ring{}, {kind, p, n, elem_size, 0});
          }
          if (HasFatalFailure()) return;
        }
}

INSTANTIATE_TEST_SUITE_P(p, ring_verified, ::testing::ValuesIn(test::verified_world_sizes()));

TEST(ring, permuted_rings_are_proved_too) {
  for (int p : {3, 5, 8, 13}) {
    // k -> 2k+1 (mod p) is a permutation for odd p; even p runs the ring backwards.
    std::vector<int> order(p);
    for (int k = 0; k < p; ++k) order[k] = p % 2 ? (2 * k + 1) % p : p - 1 - k;
    const topology::ring topo(order);
    for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather,
                            collective::broadcast})
      expect_proved(algorithm::ring(algorithm::policy{8}), topo, {kind, p, 2 * static_cast<std::size_t>(p) + 1, 4, 1});
  }
}

TEST(ring, allreduce_sends_each_rank_two_p_minus_one_blocks) {
  const int p = 6;
  const auto s = algorithm::ring{}.build({}, {collective::allreduce, p, 600, 4, 0}, 2);
  int sends = 0, recvs = 0;
  for (const auto& st : s.steps) {
    sends += st.kind == schedule::step_kind::send;
    recvs += st.kind == schedule::step_kind::send ? 0 : schedule::is_communication(st.kind);
    if (schedule::is_communication(st.kind)) {
      EXPECT_EQ(st.bytes(), 100u * 4) << schedule::to_text(s);
    }
  }
  EXPECT_EQ(sends, 2 * (p - 1));
  EXPECT_EQ(recvs, 2 * (p - 1));
}

// The generator reserves exactly the steps and dependencies it adds (builder::reserve),
// so no array grows by doubling: a larger reservation would show as spare capacity, a
// smaller one as a doubled array (reserve allocates exactly what it is asked for in
// libstdc++ and libc++).
TEST(ring, reserves_exactly_what_it_builds) {
  for (collective kind :
       {collective::allreduce, collective::reduce_scatter, collective::allgather, collective::broadcast})
    for (int p : {1, 2, 3, 5, 8, 64})
      for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000)})
        for (int rank : {0, p / 2, p - 1}) {
          // Three-element chunks: blocks of unequal chunk counts once n > p.
          const auto s = algorithm::ring(algorithm::policy{12}).build({}, {kind, p, n, 4, p / 2}, rank);
          const std::string where = std::string(to_string(kind)) + ", p " + std::to_string(p) + ", count " +
                                    std::to_string(n) + ", rank " + std::to_string(rank);
          EXPECT_EQ(s.steps.capacity(), s.steps.size()) << where;
          EXPECT_EQ(s.dep_ids.capacity(), s.dep_ids.size()) << where;
        }
}

// The verifier is not vacuous on real schedules: dropping the dependency that keeps an
// in-place allgather receive from overwriting a block still being sent is caught.
TEST(ring, the_verifier_catches_a_dropped_dependency) {
  const schedule::descriptor d{collective::allreduce, 4, 40, 4, 0};
  auto group = build_group(algorithm::ring{}, topology::ring{}, d);
  ASSERT_TRUE(schedule::verify(group, {true}));
  const auto& s = group[1];
  bool dropped = false;
  schedule::builder rebuilt(s.desc, 1, "ring");
  for (schedule::step_id i = 0; i < s.steps.size(); ++i) {
    const bool drop = !dropped && s.steps[i].kind == schedule::step_kind::recv && !s.deps(i).empty();
    dropped = dropped || drop;
    rebuilt.add(s.steps[i], drop ? std::span<const schedule::step_id>{} : s.deps(i));
  }
  ASSERT_TRUE(dropped);
  group[1] = std::move(rebuilt).build();
  const auto result = schedule::verify(group, {true});
  EXPECT_FALSE(result);
  EXPECT_NE(result.message.find("rank 1"), std::string::npos) << result.message;
}

}  // namespace
}  // namespace mimatrix

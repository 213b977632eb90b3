#include "mimatrix/algorithm/halving_doubling.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "mimatrix/topology/ring.hpp"
#include "support/grid.hpp"
#include "support/verify_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;

void expect_proved(const algorithm::halving_doubling& algo, const schedule::descriptor& d) {
  test::expect_proved(algo, topology::ring{}, d, algo.order().empty() ? "" : " mapped");
}

/// A mapping that moves every rank: k -> (5k + 3) mod p when that is a permutation,
/// else the reverse order.
std::vector<int> scrambled(int p) {
  std::vector<int> order(static_cast<std::size_t>(p));
  const bool coprime = p % 5 != 0;
  for (int k = 0; k < p; ++k) order[std::size_t(k)] = coprime ? (5 * k + 3) % p : p - 1 - k;
  return order;
}

class halving_doubling_verified : public ::testing::TestWithParam<int> {};

// Every collective, for counts around p, element sizes, chunkings, identity and
// scrambled mappings, is proved correct in place and out of place.
TEST_P(halving_doubling_verified, every_collective_count_and_chunking) {
  const int p = GetParam();
  const std::size_t sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  std::vector<std::size_t> elem_sizes{4};
  if (p <= 16) elem_sizes.push_back(2);
  for (std::size_t elem_size : elem_sizes)
    for (std::size_t chunk : {std::size_t(256) << 10, 3 * elem_size, elem_size})
      for (bool mapped : {false, true})
        for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather,
                                collective::broadcast})
          for (std::size_t n : counts) {
            // Tiny chunks multiply the steps: small groups take all of them, larger
            // groups the small counts, the largest none.
            if ((p > 12 || test::quick) && chunk < 4 * elem_size && n > sp + 1) continue;
            if (p > 24 && chunk < 4 * elem_size) continue;
            const algorithm::policy tuning{chunk};
            const algorithm::halving_doubling algo =
                mapped ? algorithm::halving_doubling(scrambled(p), tuning) : algorithm::halving_doubling(tuning);
            if (kind == collective::broadcast) {
              for (int root : {0, p / 2, p - 1}) expect_proved(algo, {kind, p, n, elem_size, root});
            } else {
              expect_proved(algo, {kind, p, n, elem_size, 0});
            }
            if (HasFatalFailure()) return;
          }
}

INSTANTIATE_TEST_SUITE_P(p, halving_doubling_verified, ::testing::ValuesIn(test::verified_world_sizes()));

// Rabenseifner's volume: each core rank sends (p-1)/p of the buffer in each half, in
// lg p messages a half.
TEST(halving_doubling, allreduce_moves_two_p_minus_one_over_p_of_the_buffer) {
  const int p = 8;
  const auto s = algorithm::halving_doubling{}.build(topology::ring{}, {collective::allreduce, p, 800, 4, 0}, 3);
  std::size_t sent = 0;
  int sends = 0;
  for (const auto& st : s.steps)
    if (st.kind == schedule::step_kind::send) {
      sent += st.bytes();
      ++sends;
    }
  EXPECT_EQ(sends, 2 * 3) << schedule::to_text(s);
  EXPECT_EQ(sent, 2u * 700 * 4);
}

// Non-powers of two fold: the extra ranks send once and receive once.
TEST(halving_doubling, folded_ranks_send_once_and_receive_the_result) {
  const int p = 6;  // positions 0 and 2 fold into 1 and 3
  for (int r : {0, 2}) {
    const auto s = algorithm::halving_doubling{}.build(topology::ring{}, {collective::allreduce, p, 60, 4, 0}, r);
    ASSERT_EQ(s.steps.size(), 2u) << schedule::to_text(s);
    EXPECT_EQ(s.steps[0].kind, schedule::step_kind::send);
    EXPECT_EQ(s.steps[0].peer, r + 1);
    EXPECT_EQ(s.steps[1].kind, schedule::step_kind::recv);
  }
}

TEST(halving_doubling, a_bad_mapping_is_an_invalid_argument) {
  const algorithm::halving_doubling algo(std::vector<int>{0, 1, 1});
  try {
    (void)algo.build(topology::ring{}, {collective::allreduce, 3, 4, 4, 0}, 0);
    FAIL() << "expected an error";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("permutation"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)algorithm::halving_doubling(std::vector<int>{0, 1}).build(topology::ring{}, {collective::allreduce, 3, 4, 4, 0}, 0),
               error);
}

// The algorithm's digest (ranks compare it): the chunk and a rank order count, an order
// spelled 0..p-1 is the default.
TEST(halving_doubling, the_digest_tells_chunks_and_orders_apart_but_not_spellings_of_one) {
  using algorithm::digest_of;
  const algorithm::halving_doubling plain;
  EXPECT_EQ(digest_of(plain), digest_of(algorithm::halving_doubling(std::vector<int>{0, 1, 2, 3})));
  EXPECT_NE(digest_of(plain), digest_of(algorithm::halving_doubling(std::vector<int>{1, 0, 2, 3})));
  EXPECT_NE(digest_of(plain), digest_of(algorithm::halving_doubling(algorithm::policy{4096})));
  EXPECT_NE(digest_of(algorithm::ring(algorithm::policy{4096})), digest_of(algorithm::ring{}));
  EXPECT_NE(digest_of(algorithm::ring{}), digest_of(plain));
}

}  // namespace
}  // namespace mimatrix

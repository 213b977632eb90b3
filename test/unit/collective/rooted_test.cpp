// Reduce, gather, scatter and alltoall on the in-process transport, quick tier: every
// algorithm that runs each, with every dtype (each beside a different operation where the
// call reduces), world sizes 1 to 12, counts from 0 up, every kind of root, in place and
// out of place. The verifier proves the schedules for p = 1 to 64 (test/unit/algorithm);
// this checks execution and arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/binomial.hpp"
#include "mimatrix/algorithm/bruck.hpp"
#include "mimatrix/algorithm/linear.hpp"
#include "mimatrix/algorithm/pairwise.hpp"
#include "mimatrix/algorithm/rabenseifner.hpp"
#include "support/rooted_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

constexpr int world_sizes[] = {1, 2, 3, 4, 5, 7, 8, 12};

std::vector<std::size_t> counts_for(int p) {
  return {0, 1, 7, std::size_t(p) + 1, test::quick ? 100 : 4099};
}

std::vector<int> roots_for(int p) {
  if (p == 1) return {0};
  return {0, p - 1, p / 2};
}

// Each dtype once, beside an operation that cycles through all five.
using reduce_rows = std::tuple<reduce::sum<std::int8_t>, reduce::max<std::uint8_t>, reduce::prod<std::int32_t>,
                               reduce::min<std::int64_t>, reduce::avg<half>, reduce::sum<bfloat16>,
                               reduce::max<float>, reduce::avg<double>>;
using element_rows = std::tuple<std::int8_t, std::uint8_t, std::int32_t, std::int64_t, half, bfloat16, float, double>;

template <class Algorithm, std::size_t... K>
void reduce_every_row(std::index_sequence<K...>) {
  std::size_t row = 0;
  for (int p : world_sizes)
    for (std::size_t n : counts_for(p))
      for (int root : roots_for(p)) {
        const std::size_t k = row++ % sizeof...(K);  // the dtype rotates with the shape
        ((k == K ? test::check_reduce<std::tuple_element_t<K, reduce_rows>>(p, n, root, test::run_seed() + row,
                                                                            topology::ring{}, Algorithm{})
                 : void()),
         ...);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

template <class Algorithm, bool Gather, std::size_t... K>
void gather_or_scatter_every_row(std::index_sequence<K...>) {
  std::size_t row = 0;
  for (int p : world_sizes)
    for (std::size_t n : counts_for(p))
      for (int root : roots_for(p)) {
        const std::size_t k = row++ % sizeof...(K);
        const auto one = [&]<class T>() {
          if constexpr (Gather) test::check_gather<T>(p, n, root, test::run_seed() + row, topology::ring{}, Algorithm{});
          else test::check_scatter<T>(p, n, root, test::run_seed() + row, topology::ring{}, Algorithm{});
        };
        ((k == K ? one.template operator()<std::tuple_element_t<K, element_rows>>() : void()), ...);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

template <class Algorithm, std::size_t... K>
void alltoall_every_row(std::index_sequence<K...>) {
  std::size_t row = 0;
  for (int p : world_sizes)
    for (std::size_t n : counts_for(p)) {
      const std::size_t k = row++ % sizeof...(K);
      ((k == K ? test::check_alltoall<std::tuple_element_t<K, element_rows>>(p, n, test::run_seed() + row,
                                                                             topology::ring{}, Algorithm{})
               : void()),
       ...);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

constexpr auto rows = std::make_index_sequence<8>{};

TEST(rooted, reduce_binomial) { reduce_every_row<algorithm::binomial>(rows); }
TEST(rooted, reduce_linear) { reduce_every_row<algorithm::linear>(rows); }
TEST(rooted, reduce_rabenseifner) { reduce_every_row<algorithm::rabenseifner>(rows); }
TEST(rooted, reduce_automatic) { reduce_every_row<algorithm::automatic>(rows); }
TEST(rooted, gather_binomial) { gather_or_scatter_every_row<algorithm::binomial, true>(rows); }
TEST(rooted, gather_linear) { gather_or_scatter_every_row<algorithm::linear, true>(rows); }
TEST(rooted, gather_automatic) { gather_or_scatter_every_row<algorithm::automatic, true>(rows); }
TEST(rooted, scatter_binomial) { gather_or_scatter_every_row<algorithm::binomial, false>(rows); }
TEST(rooted, scatter_linear) { gather_or_scatter_every_row<algorithm::linear, false>(rows); }
TEST(rooted, scatter_automatic) { gather_or_scatter_every_row<algorithm::automatic, false>(rows); }
TEST(rooted, alltoall_pairwise) { alltoall_every_row<algorithm::pairwise>(rows); }
TEST(rooted, alltoall_bruck) { alltoall_every_row<algorithm::bruck>(rows); }
TEST(rooted, alltoall_automatic) { alltoall_every_row<algorithm::automatic>(rows); }

}  // namespace
}  // namespace mimatrix

#include "mimatrix/allreduce.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/dtypes.hpp"
#include "support/grid.hpp"

namespace mimatrix {
namespace {

using transport::inproc;

/// Runs one allreduce out of place and in place on p ranks and checks every element
/// of every rank against the reference; all ranks must agree bit for bit.
template <class Op>
void check_allreduce(int p, std::size_t n, std::uint64_t seed, algorithm::ring algo = {}) {
  using T = typename Op::value_type;
  std::vector<std::vector<T>> in(p), out(p, std::vector<T>(n)), in_place(p);
  for (int r = 0; r < p; ++r) in[r] = test::random_values<Op>(n, seed + r);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, Op> sum(comm, {}, algo);
    sum(in[r], out[r]);
    in_place[r] = in[r];
    sum(in_place[r]);
  });
  for (std::size_t e = 0; e < n; ++e) {
    const auto ref = test::reduce_reference<Op>(in, e);
    for (int r = 0; r < p; ++r) {
      const double got = test::to_double(out[r][e]);
      if (std::abs(got - ref.value) > ref.tolerance ||
          std::memcmp(&out[r][e], &out[0][e], sizeof(T)) != 0 ||
          std::memcmp(&in_place[r][e], &out[r][e], sizeof(T)) != 0) {
        FAIL() << reduce::to_string(Op::kind) << "<" << to_string(dtype_of<T>) << "> p=" << p << " count=" << n
               << " seed=" << seed << ": rank " << r << " element " << e << " is " << got << " (in place "
               << test::to_double(in_place[r][e]) << ", rank 0 " << test::to_double(out[0][e]) << "), expected "
               << ref.value << " ± " << ref.tolerance;
      }
    }
  }
}

template <class T>
void check_every_operation(int p, std::size_t n, std::uint64_t seed) {
  check_allreduce<reduce::sum<T>>(p, n, seed);
  check_allreduce<reduce::prod<T>>(p, n, seed + 1000);
  check_allreduce<reduce::min<T>>(p, n, seed + 2000);
  check_allreduce<reduce::max<T>>(p, n, seed + 3000);
  check_allreduce<reduce::avg<T>>(p, n, seed + 4000);
}

class allreduce_grid : public ::testing::TestWithParam<std::tuple<int, dtype>> {};

TEST_P(allreduce_grid, every_operation_and_count_matches_the_reference) {
  const auto [p, type] = GetParam();
  test::with_dtype(type, [&, p = p](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t n : test::grid_counts(p, std::size_t(1) << 20)) {
      SCOPED_TRACE("count " + std::to_string(n));
      check_every_operation<T>(p, n, test::run_seed() + n);
      if (HasFatalFailure()) return;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(ring, allreduce_grid,
                         ::testing::Combine(::testing::ValuesIn(test::grid_world_sizes()), ::testing::ValuesIn(test::all_dtypes)),
                         [](const auto& info) {
                           return test::grid_name(std::get<0>(info.param), std::get<1>(info.param));
                         });

// Tiny chunks: many steps of every rank in flight at once, the pipelined path.
TEST(allreduce, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 3, 5, 8})
    for (std::size_t n : {std::size_t(1), std::size_t(17), std::size_t(4099)}) {
      check_allreduce<reduce::sum<std::int32_t>>(p, n, test::run_seed(), algorithm::ring(algorithm::policy{8}));
      check_allreduce<reduce::sum<float>>(p, n, test::run_seed(), algorithm::ring(algorithm::policy{12}));
    }
}

TEST(allreduce, ring_order_permutation_gives_the_same_sums) {
  const int p = 5;
  const std::size_t n = 1234;
  std::vector<std::vector<std::int64_t>> data(p);
  for (int r = 0; r < p; ++r) data[r] = test::random_values<reduce::sum<std::int64_t>>(n, test::run_seed() + r);
  std::vector<std::int64_t> expected(n);
  for (std::size_t e = 0; e < n; ++e)
    for (int r = 0; r < p; ++r) expected[e] += data[r][e];
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, reduce::sum<std::int64_t>> sum(comm, topology::ring({3, 0, 4, 1, 2}));
    sum(data[r]);
  });
  for (int r = 0; r < p; ++r) EXPECT_EQ(data[r], expected) << "rank " << r;
}

TEST(allreduce, repeated_calls_reuse_cached_schedules_and_stay_correct) {
  const int p = 4;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>> sum(comm);
    for (int iteration = 0; iteration < 50; ++iteration) {
      std::vector<std::int32_t> v(100 + iteration % 3, r + iteration);
      sum(v);
      for (auto x : v) ASSERT_EQ(x, p * iteration + p * (p - 1) / 2) << "rank " << r << " iteration " << iteration;
    }
  });
}

}  // namespace
}  // namespace mimatrix

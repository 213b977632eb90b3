#include "mimatrix/reduce_scatter.hpp"

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

/// p ranks each reduce p·n elements; rank r must get block r of the reduction, out of
/// place and in place (block r of its own input) alike.
template <class Op>
void check_reduce_scatter(int p, std::size_t n, std::uint64_t seed, algorithm::ring algo = {}) {
  using T = typename Op::value_type;
  std::vector<std::vector<T>> in(p), out(p, std::vector<T>(n)), in_place(p);
  for (int r = 0; r < p; ++r) in[r] = test::random_values<Op>(p * n, seed + r);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    reduce_scatter<inproc, topology::ring, Op> scatter(comm, {}, algo);
    scatter(in[r], out[r]);
    in_place[r] = in[r];
    scatter(in_place[r]);
  });
  for (int r = 0; r < p; ++r)
    for (std::size_t e = 0; e < n; ++e) {
      const auto ref = test::reduce_reference<Op>(in, r * n + e);
      const double got = test::to_double(out[r][e]);
      if (std::abs(got - ref.value) > ref.tolerance ||
          std::memcmp(&in_place[r][r * n + e], &out[r][e], sizeof(T)) != 0)
        FAIL() << reduce::to_string(Op::kind) << "<" << to_string(dtype_of<T>) << "> p=" << p << " count=" << n
               << " seed=" << seed << ": rank " << r << " element " << e << " is " << got << " (in place "
               << test::to_double(in_place[r][r * n + e]) << "), expected " << ref.value << " ± " << ref.tolerance;
    }
}

class reduce_scatter_grid : public ::testing::TestWithParam<std::tuple<int, dtype>> {};

TEST_P(reduce_scatter_grid, every_operation_and_count_matches_the_reference) {
  const auto [p, type] = GetParam();
  test::with_dtype(type, [&, p = p](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t n : test::grid_counts(p, (std::size_t(1) << 20) / p)) {
      SCOPED_TRACE("count " + std::to_string(n));
      const auto seed = test::run_seed() + n;
      check_reduce_scatter<reduce::sum<T>>(p, n, seed);
      check_reduce_scatter<reduce::prod<T>>(p, n, seed + 1);
      check_reduce_scatter<reduce::min<T>>(p, n, seed + 2);
      check_reduce_scatter<reduce::max<T>>(p, n, seed + 3);
      check_reduce_scatter<reduce::avg<T>>(p, n, seed + 4);
      if (HasFatalFailure()) return;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(ring, reduce_scatter_grid,
                         ::testing::Combine(::testing::ValuesIn(test::grid_world_sizes()),
                                            ::testing::ValuesIn(test::all_dtypes)),
                         [](const auto& info) {
                           return test::grid_name(std::get<0>(info.param), std::get<1>(info.param));
                         });

TEST(reduce_scatter, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 3, 6})
    for (std::size_t n : {std::size_t(1), std::size_t(33), std::size_t(1000)})
      check_reduce_scatter<reduce::sum<std::int64_t>>(p, n, test::run_seed(), algorithm::ring(algorithm::policy{16}));
}

}  // namespace
}  // namespace mimatrix

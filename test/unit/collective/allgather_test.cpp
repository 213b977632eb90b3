#include "mimatrix/allgather.hpp"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/dtypes.hpp"
#include "support/grid.hpp"

namespace mimatrix {
namespace {

using transport::inproc;

/// Every rank must end with block j = rank j's input, bit for bit, out of place and
/// in place (its input already at block rank of the output).
template <class T>
void check_allgather(int p, std::size_t n, std::uint64_t seed, algorithm::ring algo = {}) {
  std::vector<std::vector<T>> in(p), out(p, std::vector<T>(p * n)), in_place(p, std::vector<T>(p * n));
  for (int r = 0; r < p; ++r) in[r] = test::random_values<reduce::sum<T>>(n, seed + r);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allgather<inproc, topology::ring, T> gather(comm, {}, algo);
    gather(in[r], out[r]);
    std::copy(in[r].begin(), in[r].end(), in_place[r].begin() + static_cast<std::ptrdiff_t>(r * n));
    gather(in_place[r]);
  });
  std::vector<T> expected;
  for (int j = 0; j < p; ++j) expected.insert(expected.end(), in[j].begin(), in[j].end());
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(out[r] == expected) << to_string(dtype_of<T>) << " p=" << p << " count=" << n << " rank " << r;
    ASSERT_TRUE(in_place[r] == expected) << "in place, " << to_string(dtype_of<T>) << " p=" << p << " count=" << n
                                         << " rank " << r;
  }
}

class allgather_grid : public ::testing::TestWithParam<std::tuple<int, dtype>> {};

TEST_P(allgather_grid, every_count_gathers_every_block) {
  const auto [p, type] = GetParam();
  test::with_dtype(type, [&, p = p](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t n : test::grid_counts(p, (std::size_t(1) << 20) / p)) {
      SCOPED_TRACE("count " + std::to_string(n));
      check_allgather<T>(p, n, test::run_seed() + n);
      if (HasFatalFailure()) return;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(ring, allgather_grid,
                         ::testing::Combine(::testing::ValuesIn(test::grid_world_sizes()),
                                            ::testing::ValuesIn(test::all_dtypes)),
                         [](const auto& info) {
                           return test::grid_name(std::get<0>(info.param), std::get<1>(info.param));
                         });

TEST(allgather, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 5})
    for (std::size_t n : {std::size_t(3), std::size_t(1001)})
      check_allgather<std::int32_t>(p, n, test::run_seed(), algorithm::ring(algorithm::policy{8}));
}

}  // namespace
}  // namespace mimatrix

#include "mimatrix/broadcast.hpp"

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

/// Every rank must end with the root's buffer, from every root, out of place (other
/// ranks pass no input) and in place.
template <class T>
void check_broadcast(int p, std::size_t n, int root, std::uint64_t seed, algorithm::ring algo = {}) {
  const std::vector<T> data = test::random_values<reduce::sum<T>>(n, seed);
  std::vector<std::vector<T>> out(p, std::vector<T>(n)), in_place(p, std::vector<T>(n));
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    broadcast<inproc, topology::ring, T> bcast(comm, {}, algo);
    bcast(r == root ? std::span<const T>(data) : std::span<const T>(), out[r], root);
    if (r == root) in_place[r] = data;
    bcast(in_place[r], root);
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(out[r] == data) << to_string(dtype_of<T>) << " p=" << p << " count=" << n << " root " << root
                                << " rank " << r;
    ASSERT_TRUE(in_place[r] == data) << "in place, p=" << p << " count=" << n << " root " << root << " rank " << r;
  }
}

class broadcast_grid : public ::testing::TestWithParam<std::tuple<int, dtype>> {};

TEST_P(broadcast_grid, every_count_and_root_reaches_every_rank) {
  const auto [p, type] = GetParam();
  test::with_dtype(type, [&, p = p](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t n : test::grid_counts(p, std::size_t(1) << 20)) {
      SCOPED_TRACE("count " + std::to_string(n));
      for (int root : {0, p - 1, p / 2}) check_broadcast<T>(p, n, root, test::run_seed() + n + root);
      if (HasFatalFailure()) return;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(ring, broadcast_grid,
                         ::testing::Combine(::testing::ValuesIn(test::grid_world_sizes()),
                                            ::testing::ValuesIn(test::all_dtypes)),
                         [](const auto& info) {
                           return test::grid_name(std::get<0>(info.param), std::get<1>(info.param));
                         });

TEST(broadcast, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 4, 7}) check_broadcast<std::int64_t>(p, 999, p - 1, test::run_seed(), algorithm::ring(algorithm::policy{8}));
}

}  // namespace
}  // namespace mimatrix

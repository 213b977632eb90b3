#include "mimatrix/reduce_scatter.hpp"

#include <gtest/gtest.h>

#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

TEST(reduce_scatter, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 3, 6})
    for (std::size_t n : {std::size_t(1), std::size_t(33), std::size_t(1000)})
      test::check_reduce_scatter<reduce::sum<std::int64_t>>(p, n, test::run_seed(), topology::ring{},
                                                            algorithm::ring(algorithm::policy{16}));
}

}  // namespace
}  // namespace mimatrix

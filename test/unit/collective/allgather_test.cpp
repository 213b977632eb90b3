#include "mimatrix/allgather.hpp"

#include <gtest/gtest.h>

#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

TEST(allgather, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 5})
    for (std::size_t n : {std::size_t(3), std::size_t(1001)})
      test::check_allgather<std::int32_t>(p, n, test::run_seed(), topology::ring{}, algorithm::ring(algorithm::policy{8}));
}

}  // namespace
}  // namespace mimatrix

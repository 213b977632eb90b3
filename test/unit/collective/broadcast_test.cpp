#include "mimatrix/broadcast.hpp"

#include <gtest/gtest.h>

#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

TEST(broadcast, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 4, 7})
    test::check_broadcast<std::int64_t>(p, 999, p - 1, test::run_seed(), topology::ring{},
                                        algorithm::ring(algorithm::policy{8}));
}

}  // namespace
}  // namespace mimatrix

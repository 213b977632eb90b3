// Receives held back must never starve the receives that drain them (issue 53): calls
// of thousands of small chunks, every algorithm, 2 to 4 ranks, over shm and tcp;ofi_rxm.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "multi_process.hpp"
#include "small_chunks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

MIMATRIX_SCENARIO(small_chunks) { return test::small_chunks_run().run(); }

// The reported case: halving-doubling with a permuted order, 512-byte chunks, 300,007
// elements on 4 ranks. The second doubling step's receives are ready almost at once
// (their region is free once the first halving step's sends are done) and took the 256
// places for plain receives, given in the order steps became ready; the first doubling
// step's receives waited behind them, and so did the partner's across the second step:
// each timed out waiting for the other, in the first call.
TEST(back_pressure, halving_doubling_with_512_byte_chunks_on_4_ranks_over_tcp_does_not_stall) {
  test::expect_small_chunks_exact({.chunks = "512", .count = 300007, .algorithms = "halving_doubling", .calls = 4}, 4,
                                  "tcp;ofi_rxm", "small_chunks", std::chrono::seconds(90));
}

// Every algorithm at 256-, 512- and 4096-byte chunks: more plain receives a call than
// may be posted at once wherever the chunk is small.
TEST(back_pressure, every_algorithm_with_small_chunks_is_exact_on_2_to_4_ranks) {
  for (const auto& provider : test::test_providers())
    for (int ranks = 2; ranks <= 4; ++ranks)
      test::expect_small_chunks_exact({.chunks = "256,512,4096", .count = 100003}, ranks, provider, "small_chunks",
                                      std::chrono::seconds(90));
}

}  // namespace
}  // namespace mimatrix

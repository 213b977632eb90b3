// Device calls on buffers that the caller frees and allocates again between calls (a
// framework without a caching allocator): peers read each rank's buffers directly, so
// each call opens blocks; a block whose owner has freed it must be closed once a newer
// block of that owner lands on its address (device/import_table.hpp), or every call
// would keep another of the peer's blocks open (for CUDA: undefined behaviour, and the
// peer's memory pinned). Through the host port, which reuses a freed block's address as
// CUDA's allocator does.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/device/host_port.hpp"
#include "multi_process.hpp"
#include "support/device_array.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using test::device_array;
using transport::fabric;

MIMATRIX_SCENARIO(fresh_buffers_every_call) {
  device::host_port dev({.lag = 5us, .device_memory_only = true});
  communicator<fabric> comm;
  comm.set_timeout(30s);
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  const device::stream s{&dev, dev.make_stream()};
  constexpr std::size_t n = 20'000;
  constexpr int rounds = 12;
  int wrong = 0;
  std::size_t opened_early = 0;
  for (int round = 0; round < rounds; ++round) {
    // GDRAA's pass (no algorithm named) reads every rank's input and writes every
    // rank's output; the ring's receivers read their senders' buffers.
    for (const char* algorithm : {"", "ring"}) {
      device_array<std::int64_t> in(dev, n), out(dev, n, -1);
      for (std::size_t i = 0; i < n; ++i) in[i] = std::int64_t(i) * (r + 1) + round;
      coll.allreduce(in.data(), out.data(), n, dtype::int64, reduce::op_kind::sum,
                     {.algorithm = algorithm, .timeout = {}, .stream = s, .tag = 0})
          .wait();
      dev.synchronize(s.handle);
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i) bad += out[i] != std::int64_t(i) * (p * (p + 1) / 2) + p * round;
      if (bad) std::printf("rank %d: round %d, %s: %d wrong\n", r, round, *algorithm ? algorithm : "gdraa", bad);
      wrong += bad;
    }  // both freed here (a call that has ended has been read by every peer): the next
       // buffers take their addresses
    if (round == 1) opened_early = dev.imported_blocks();  // the pools have grown by then
  }
  const std::size_t opened = dev.imported_blocks();
  std::printf("rank %d: %zu peers' blocks open after two rounds, %zu after %d\n", r, opened_early,
              opened, rounds);
  dev.free_stream(s.handle);
  const bool bounded = opened_early > 0 && opened <= opened_early;
  if (wrong == 0 && bounded) std::printf("rank %d: fresh buffers exact, blocks bounded\n", r);
  return wrong == 0 && bounded ? 0 : 1;
}

class device_fresh_buffers : public ::testing::TestWithParam<std::string> {};

TEST_P(device_fresh_buffers, peers_close_the_blocks_a_rank_freed_and_every_call_is_exact) {
  const auto result = test::run_ranks(3, GetParam(), "fresh_buffers_every_call", {{"MIMATRIX_MAILBOX", "on"}});
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("fresh buffers exact, blocks bounded"), std::string::npos)
        << test::all_output(result);
}

INSTANTIATE_TEST_SUITE_P(fabric, device_fresh_buffers, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix

// Device buffers across processes over libfabric, which moves host memory here: the
// collectives stage the call through host copies (detail/staged_call.hpp). Exact results
// on a host "device" whose streams run late, after a late producer queued on the stream
// and before a consumer queued after the call, with only the stream synchronized.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/device/host_port.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace {

using namespace std::chrono_literals;
using transport::fabric;

MIMATRIX_SCENARIO(staged_collectives) {
  communicator<fabric> comm;
  comm.set_timeout(30s);
  collectives<fabric> coll(comm);
  const int p = comm.size(), r = comm.rank();
  device::host_port dev({.lag = 100us});
  const device::stream s{&dev, dev.make_stream()};
  const call_options on_stream{.algorithm = {}, .timeout = {}, .stream = s};
  int wrong = 0;

  constexpr std::size_t n = 100'003;
  std::vector<std::int64_t> data(n, 0), seen;
  dev.enqueue(s.handle, [&] {
    std::this_thread::sleep_for(30ms);
    for (std::size_t i = 0; i < n; ++i) data[i] = std::int64_t(i % 1000) * (r + 1);
  });
  auto pending = coll.allreduce(data.data(), data.data(), n, dtype::int64, reduce::op_kind::sum, on_stream);
  dev.enqueue(s.handle, [&] { seen = data; });
  dev.synchronize(s.handle);
  pending.wait();
  for (std::size_t i = 0; i < n && seen.size() == n; ++i)
    wrong += seen[i] != std::int64_t(i % 1000) * (p * (p + 1) / 2);
  wrong += seen.size() != n;

  std::vector<float> mine(1000, float(r + 1)), all(1000 * std::size_t(p));
  coll.allgather(mine.data(), all.data(), mine.size(), dtype::float32, on_stream).wait();
  for (std::size_t i = 0; i < all.size(); ++i) wrong += all[i] != float(i / 1000 + 1);

  std::vector<std::int32_t> root(777, 5), got(777, 0);
  coll.broadcast(r == p - 1 ? root.data() : nullptr, got.data(), got.size(), dtype::int32, p - 1, on_stream).wait();
  for (std::int32_t v : got) wrong += v != 5;

  dev.free_stream(s.handle);
  if (wrong == 0) std::printf("rank %d: staged device calls exact\n", r);
  return wrong == 0 ? 0 : 1;
}

class device_staging : public ::testing::TestWithParam<std::string> {};

TEST_P(device_staging, stages_device_buffers_through_the_host_exactly) {
  constexpr int ranks = 3;
  const auto result = test::run_ranks(ranks, GetParam(), "staged_collectives");
  EXPECT_EQ(result.exit_code, 0) << test::all_output(result);
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(result.output[std::size_t(r)].find("staged device calls exact"), std::string::npos)
        << test::all_output(result);
}

INSTANTIATE_TEST_SUITE_P(fabric, device_staging, ::testing::ValuesIn(test::test_providers()),
                         [](const auto& info) { return test::provider_label(info.param); });

}  // namespace
}  // namespace mimatrix

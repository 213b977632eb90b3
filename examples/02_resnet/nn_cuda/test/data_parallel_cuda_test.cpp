// The GPU training step across ranks (threads over inproc, one GPU): gradients allreduced
// from device memory on each rank's stream as backward makes them. Two ranks given the same
// batch, each counting it as half of a global batch twice its size, take exactly the step one
// rank takes on it alone (local batch norm sees the same batch; halves sum exactly), and
// overlapped and after-backward allreduces agree. Skips where there is no GPU.
#include "train/device_data_parallel.hpp"

#include "nn_cuda/collective_port.hpp"

#include <mimatrix/communicator.hpp>
#include <mimatrix/transport/inproc.hpp>

#include "test/weight_difference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

namespace mx = mimatrix;
namespace rn = mimatrix::resnet;
using mx::transport::inproc;

constexpr std::int64_t side = 12, batch = 4;

std::string no_device() {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status);
  return devices > 0 ? "" : "cudaGetDeviceCount: 0 devices";
}

// Every rank's weights after `steps` steps on the same batch, each rank counting it as
// 1/ranks of the global batch.
std::vector<std::vector<std::vector<float>>> train(int ranks, bool overlap, int steps, std::uint32_t seed) {
  std::mt19937 data_rng(seed);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> images(std::size_t(batch * side * side));
  for (float& x : images) x = pixel(data_rng);
  std::vector<std::uint8_t> labels;
  for (std::int64_t i = 0; i < batch; ++i) labels.push_back(std::uint8_t(data_rng() % 10));

  std::vector<std::vector<std::vector<float>>> weights(static_cast<std::size_t>(ranks));
  mx::transport::run_inproc(ranks, [&](int rank, inproc::world& world) {
    mx::communicator<inproc> comm(world, rank);
    mx::collectives<inproc> coll(comm);
    rn::nn_cuda::context ctx;  // this thread's stream and caching pool
    std::mt19937 rng(7);
    rn::train::cuda_resnet net(ctx, rn::model::architecture_named("resnet20"), 1, 10, rng);
    rn::nn_cuda::sgd sgd(ctx, net.parameters(), {});
    // Small buckets: several allreduces in flight on the stream at once.
    rn::train::device_data_parallel<inproc> dp(coll, ctx, net, sgd, {.bucket_bytes = 16 << 10, .overlap = overlap},
                                               rn::nn_cuda::collective_port());
    const auto x = rn::nn_cuda::device_tensor::from_host({batch, 1, side, side}, images, ctx.stream());
    // Ranks that are threads share one CUDA context. A rank's first pass picks cuDNN's
    // algorithms (cudnnFind frees what it allocated: a cudaFree, which waits for the whole
    // device) and loads kernels: were another rank's collective already holding its stream
    // at a gate, waiting for this rank, neither would go on. So one pass first, without
    // collectives (weights unchanged; the steps overwrite the gradients), and a barrier.
    {
      rn::nn_cuda::softmax_cross_entropy warm(ctx);
      (void)warm.forward(net.forward(x, rn::model::phase::train), labels);
      net.backward(warm.backward(), [](rn::nn_cuda::parameter&) {});
      ctx.synchronize();
    }
    coll.barrier();
    for (int step = 0; step < steps; ++step) (void)dp.step(x, labels, std::uint64_t(batch * ranks), 0.05f);
    dp.drain();
    for (const auto* p : net.parameters()) weights[std::size_t(rank)].push_back(p->value.to_host(ctx.stream()));
  });
  return weights;
}

using mimatrix::resnet::test::worst_difference;

TEST(data_parallel_cuda, two_ranks_on_one_batch_take_one_ranks_step_overlapped_or_not) {
  if (const std::string why = no_device(); !why.empty()) GTEST_SKIP() << "needs a CUDA device (" << why << ")";
  const std::uint32_t seed = std::random_device{}();
  RecordProperty("seed", std::to_string(seed));
  const auto alone = train(1, true, 2, seed);
  for (bool overlap : {true, false}) {
    const auto two = train(2, overlap, 2, seed);
    // cuDNN may pick other algorithms in another context: agreement to float rounding.
    EXPECT_LT(worst_difference(two[0], alone[0]), 1e-5) << (overlap ? "overlapped" : "after backward");
    EXPECT_LT(worst_difference(two[1], two[0]), 1e-5) << "the ranks drifted apart";
  }
}

}  // namespace

// Wait-free backpropagation on device gradients (the GPU trainer's buckets), run through the
// host implementation of device::port: buckets fill, allreduce and copy back on the training
// stream with no host wait, on a "device" whose work runs late and whose kernels refuse host
// memory, as a GPU's would. Exact sums of integers, step after step, overlapped or not.
#include "train/device_gradients.hpp"

#include "train/wait_free.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/device/host_port.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/device_array.hpp"

namespace {

using namespace std::chrono_literals;
namespace rn = mimatrix::resnet;
using mimatrix::collectives;
using mimatrix::communicator;
using mimatrix::device::host_port;
using mimatrix::test::device_array;
using mimatrix::transport::inproc;

// As nn_cuda::parameter is seen by device_gradients: a gradient in device memory.
struct device_parameter {
  struct view {
    float* p;
    std::size_t n;
    float* data() const { return p; }
    std::size_t size() const { return n; }
  };
  explicit device_parameter(host_port& dev, std::size_t n) : memory(dev, std::max<std::size_t>(n, 1)), grad{memory.data(), n} {}
  device_array<float> memory;
  view grad;
};

using buckets = rn::train::gradient_buckets<collectives<inproc>, rn::train::device_gradients<device_parameter>>;

// Rank r's gradient element i at step s: small integers, so every sum is exact in float.
float value(int r, int step, std::size_t i) { return float((r + 1) * int(i % 7) + step); }

void expect_summed_gradients(bool overlap) {
  constexpr int ranks = 3;
  // Around a bucket's edge (4 KiB = 1024 floats), an empty one, and one past a bucket alone.
  const std::vector<std::size_t> sizes = {5, 1000, 0, 24, 3000, 17, 700, 4000};
  host_port dev({.lag = 20us, .device_memory_only = true});
  mimatrix::transport::run_inproc(ranks, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const auto stream = dev.make_stream();
    std::vector<std::unique_ptr<device_parameter>> params;
    for (std::size_t n : sizes) params.push_back(std::make_unique<device_parameter>(dev, n));
    buckets b(coll, {.bucket_bytes = 4096, .overlap = overlap}, {dev, stream});
    for (int step = 0; step < 3; ++step) {
      for (auto& p : params)
        for (std::size_t i = 0; i < p->grad.n; ++i) p->grad.p[i] = value(r, step, i);
      for (auto it = params.rbegin(); it != params.rend(); ++it) b.ready(**it);  // backward's order
      (void)b.finish();
      // A consumer ordered by the stream alone (the optimizer's kernel): it sees the sums.
      std::vector<std::unique_ptr<device_array<float>>> seen;
      for (auto& p : params) {
        seen.push_back(std::make_unique<device_array<float>>(dev, std::max<std::size_t>(p->grad.n, 1)));
        if (p->grad.n > 0) dev.copy(stream, seen.back()->data(), p->grad.p, p->grad.n * sizeof(float));
      }
      dev.synchronize(stream);
      for (std::size_t k = 0; k < params.size(); ++k)
        for (std::size_t i = 0; i < sizes[k]; ++i) {
          float want = 0;
          for (int q = 0; q < ranks; ++q) want += value(q, step, i);
          ASSERT_EQ((*seen[k])[i], want) << "rank " << r << ", step " << step << ", parameter " << k << ", element "
                                         << i << (overlap ? ", overlapped" : ", after backward");
        }
      EXPECT_GE(b.buckets_last_step(), 4u);  // small ones fused, large ones alone
    }
    b.drain();
    dev.free_stream(stream);
  });
}

TEST(device_gradients, overlapped_buckets_allreduce_on_the_stream_exactly) { expect_summed_gradients(true); }

TEST(device_gradients, buckets_started_after_backward_allreduce_on_the_stream_exactly) {
  expect_summed_gradients(false);
}

}  // namespace

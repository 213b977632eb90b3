// Wait-free backpropagation on device gradients (the GPU trainer's buckets), run through the
// host implementation of device::port: buckets fill, allreduce and copy back on the training
// stream with no host wait, on a "device" whose work runs late and whose kernels refuse host
// memory, as a GPU's would. Exact sums of integers, step after step, overlapped or not.
#include "train/device_gradients.hpp"

#include "train/wait_free.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <thread>
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

// A bucket in flight must not hold backward: its allreduce runs on a communication stream,
// so work queued on the compute stream after it runs while it waits for a peer. Rank 1 joins
// the allreduce only once rank 0's later backward work has run; on the compute stream the
// call's gate would hold that work until rank 1 joined, and neither would go on.
TEST(device_gradients, backward_goes_on_while_a_bucket_waits_for_its_peers) {
  host_port dev({.lag = 0us, .device_memory_only = true});
  std::atomic<bool> later_backward_ran{false};
  std::atomic<bool> rank1_saw_it{false};
  mimatrix::transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const auto compute = dev.make_stream();
    device_parameter p(dev, 2000);
    for (std::size_t i = 0; i < 2000; ++i) p.grad.p[i] = value(r, 0, i);
    buckets b(coll, {.bucket_bytes = 4096, .overlap = true}, {dev, compute});
    if (r == 1) {
      const auto until = std::chrono::steady_clock::now() + 30s;
      while (!later_backward_ran && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      rank1_saw_it = later_backward_ran.load();
    }
    b.ready(p);  // a full bucket: its allreduce starts
    if (r == 0) dev.enqueue(compute, [&] { later_backward_ran = true; });
    (void)b.finish();
    dev.synchronize(compute);
    for (std::size_t i = 0; i < 2000; ++i) ASSERT_EQ(p.grad.p[i], value(0, 0, i) + value(1, 0, i)) << "rank " << r;
    b.drain();
    dev.free_stream(compute);
  });
  EXPECT_TRUE(rank1_saw_it) << "the compute stream was held by a bucket's allreduce";
}

}  // namespace

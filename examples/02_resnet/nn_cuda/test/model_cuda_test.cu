// The same model code over the GPU layers: ResNet-20 built over cuda_layers from the seed
// the CPU one uses takes a training step's forward and backward to the CPU network's logits,
// loss and every parameter gradient (1e-3 of the largest magnitude: cuDNN's algorithms sum
// in other orders, through 20 layers). Skips where there is no GPU.
#include "model/basic_resnet.hpp"
#include "model/cuda_layers.hpp"
#include "nn_cuda/softmax_cross_entropy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model_reference.hpp"

namespace {

namespace rn = mimatrix::resnet;
using gpu_resnet = rn::model::basic_resnet<rn::model::cuda_layers>;

std::string no_device() {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status);
  return devices > 0 ? "" : "cudaGetDeviceCount: 0 devices";
}

double relative_difference(const std::vector<float>& actual, const std::vector<float>& expected) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::abs(double(actual[i]) - double(expected[i])));
    scale = std::max(scale, std::abs(double(expected[i])));
  }
  return worst / std::max(scale, 1e-12);
}

TEST(model_cuda, resnet20_over_the_gpu_layers_takes_the_cpu_networks_step) {
  if (const std::string why = no_device(); !why.empty()) GTEST_SKIP() << "needs a CUDA device (" << why << ")";
  const std::vector<std::int64_t> shape{8, 1, 28, 28};
  std::mt19937 data_rng(std::random_device{}());
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> images(8 * 28 * 28);
  for (float& x : images) x = pixel(data_rng);
  std::vector<std::uint8_t> labels(8);
  for (auto& l : labels) l = std::uint8_t(data_rng() % 10);
  const auto cpu = rn::nn_cuda::test::cpu_model_step("resnet20", 5, images, shape, labels, 10);

  rn::nn_cuda::context ctx;
  std::mt19937 rng(5);
  gpu_resnet net(ctx, rn::model::architecture_named("resnet20"), 1, 10, rng);
  const auto x = rn::nn_cuda::device_tensor::from_host(shape, images, ctx.stream());
  const auto logits = net.forward(x, rn::model::phase::train);
  rn::nn_cuda::softmax_cross_entropy loss(ctx);
  const double value = loss.forward(logits, labels);
  net.backward(loss.backward(), [](rn::nn_cuda::parameter&) {});
  EXPECT_LT(relative_difference(logits.to_host(ctx.stream()), cpu.logits), 1e-3);
  EXPECT_NEAR(value, cpu.loss, 1e-3 * std::abs(cpu.loss));
  ASSERT_EQ(net.parameters().size(), cpu.parameter_grads.size());
  for (std::size_t i = 0; i < cpu.parameter_grads.size(); ++i)
    EXPECT_LT(relative_difference(net.parameters()[i]->grad.to_host(ctx.stream()), cpu.parameter_grads[i]), 1e-3)
        << "parameter " << i << " (" << net.parameters()[i]->name << ")";
}

}  // namespace

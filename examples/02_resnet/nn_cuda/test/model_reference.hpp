// One training step's forward and backward of a CPU network (model::resnet on oneDNN), as
// host vectors: the reference the same network over the GPU layers is compared with.
// Compiled apart (model_reference.cpp), so the nvcc-compiled test never includes oneDNN.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mimatrix::resnet::nn_cuda::test {

struct model_step {
  std::vector<float> logits;
  double loss = 0;
  std::vector<std::vector<float>> parameter_grads;  // in the network's parameters() order
};

/// `model` ("resnet20", ...) built from std::mt19937(seed), on images N x C x H x W.
model_step cpu_model_step(const std::string& model, std::uint32_t seed, std::span<const float> images,
                          std::vector<std::int64_t> shape, std::span<const std::uint8_t> labels, std::int64_t classes);

}  // namespace mimatrix::resnet::nn_cuda::test

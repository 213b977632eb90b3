// The CPU layers (nn/, on oneDNN) as functions of host vectors: the reference the GPU layers
// are compared with. Compiled apart (nn_reference.cpp, by the host compiler with oneDNN's
// flags), so the nvcc-compiled test never includes oneDNN.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mimatrix::resnet::nn_cuda::test {

using dims = std::vector<std::int64_t>;

struct host_tensor {
  dims shape;
  std::vector<float> data;
};

/// One forward and one backward of a CPU layer.
struct reference_result {
  host_tensor output;
  host_tensor grad_input;
  std::vector<std::vector<float>> parameter_grads;  // in the layer's parameters() order
};

/// The parameters a CPU layer draws at construction from std::mt19937(seed).
std::vector<float> conv2d_initial_weight(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
                                         std::uint32_t seed);
std::vector<std::vector<float>> linear_initial_parameters(std::int64_t in_features, std::int64_t out_features,
                                                          std::uint32_t seed);

reference_result conv2d_reference(const host_tensor& input, const host_tensor& weight, std::int64_t stride,
                                  std::int64_t padding, const host_tensor& grad_output);

struct batch_norm_result : reference_result {
  std::vector<float> running_mean, running_var;  // after the training forward
  host_tensor inferred;                           // infer(input) with those
};
batch_norm_result batch_norm_reference(const host_tensor& input, std::span<const float> gamma,
                                       std::span<const float> beta, float momentum, float epsilon,
                                       const host_tensor& grad_output);

reference_result relu_reference(const host_tensor& input, const host_tensor& grad_output);
reference_result global_average_pool_reference(const host_tensor& input, const host_tensor& grad_output);
reference_result max_pool_reference(const host_tensor& input, std::int64_t kernel, std::int64_t stride,
                                    std::int64_t padding, const host_tensor& grad_output);
reference_result linear_reference(const host_tensor& input, const host_tensor& weight, std::span<const float> bias,
                                  const host_tensor& grad_output);

struct softmax_cross_entropy_result {
  double loss;
  std::int64_t correct;
  host_tensor grad;
};
softmax_cross_entropy_result softmax_cross_entropy_reference(const host_tensor& logits,
                                                             std::span<const std::int32_t> labels);

/// output = a + b; grad_input is both inputs' gradient.
reference_result add_reference(const host_tensor& a, const host_tensor& b, const host_tensor& grad_output);

}  // namespace mimatrix::resnet::nn_cuda::test

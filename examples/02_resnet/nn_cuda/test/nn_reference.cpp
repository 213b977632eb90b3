// The CPU reference for nn_cuda_test: each function builds the nn/ layer, sets the given
// parameters, and runs one forward and one backward.
#include "nn_reference.hpp"

#include "nn/add.hpp"
#include "nn/batch_norm.hpp"
#include "nn/context.hpp"
#include "nn/conv2d.hpp"
#include "nn/linear.hpp"
#include "nn/pooling.hpp"
#include "nn/relu.hpp"
#include "nn/softmax_cross_entropy.hpp"
#include "nn/tensor.hpp"

#include <algorithm>
#include <random>

namespace mimatrix::resnet::nn_cuda::test {
namespace {

nn::context& cpu() {
  static nn::context ctx;  // one engine for the whole test binary
  return ctx;
}

nn::tensor to_cpu(const host_tensor& h) {
  nn::tensor t(h.shape);
  t.data = h.data;
  return t;
}

host_tensor to_host(const nn::tensor& t) { return {t.shape, t.data}; }

void set(nn::tensor& into, std::span<const float> values) { into.data.assign(values.begin(), values.end()); }

// Any layer with forward(tensor) and backward(tensor) and parameters().
template <class Layer>
reference_result run(Layer& layer, const host_tensor& input, const host_tensor& grad_output) {
  reference_result r;
  r.output = to_host(layer.forward(to_cpu(input)));
  r.grad_input = to_host(layer.backward(to_cpu(grad_output)));
  for (const nn::parameter* p : layer.parameters()) r.parameter_grads.push_back(p->grad.data);
  return r;
}

}  // namespace

std::vector<float> conv2d_initial_weight(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
                                         std::uint32_t seed) {
  std::mt19937 rng(seed);
  nn::conv2d conv(cpu(), in_channels, out_channels, kernel, 1, 0, rng);
  return conv.weight().value.data;
}

std::vector<std::vector<float>> linear_initial_parameters(std::int64_t in_features, std::int64_t out_features,
                                                          std::uint32_t seed) {
  std::mt19937 rng(seed);
  nn::linear fc(cpu(), in_features, out_features, rng);
  return {fc.weight().value.data, fc.bias().value.data};
}

reference_result conv2d_reference(const host_tensor& input, const host_tensor& weight, std::int64_t stride,
                                  std::int64_t padding, const host_tensor& grad_output) {
  std::mt19937 unused;
  nn::conv2d conv(cpu(), weight.shape[1], weight.shape[0], weight.shape[2], stride, padding, unused);
  set(conv.weight().value, weight.data);
  return run(conv, input, grad_output);
}

batch_norm_result batch_norm_reference(const host_tensor& input, std::span<const float> gamma,
                                       std::span<const float> beta, float momentum, float epsilon,
                                       const host_tensor& grad_output) {
  nn::batch_norm bn(cpu(), input.shape[1], momentum, epsilon);
  set(bn.gamma().value, gamma);
  set(bn.beta().value, beta);
  batch_norm_result r;
  static_cast<reference_result&>(r) = run(bn, input, grad_output);
  r.running_mean = bn.running_mean().data;
  r.running_var = bn.running_var().data;
  r.inferred = to_host(bn.infer(to_cpu(input)));
  return r;
}

reference_result relu_reference(const host_tensor& input, const host_tensor& grad_output) {
  nn::relu layer(cpu());
  return run(layer, input, grad_output);
}

reference_result global_average_pool_reference(const host_tensor& input, const host_tensor& grad_output) {
  nn::global_average_pool pool(cpu());
  return run(pool, input, grad_output);
}

reference_result max_pool_reference(const host_tensor& input, std::int64_t kernel, std::int64_t stride,
                                    std::int64_t padding, const host_tensor& grad_output) {
  nn::max_pool pool(cpu(), kernel, stride, padding);
  return run(pool, input, grad_output);
}

reference_result linear_reference(const host_tensor& input, const host_tensor& weight, std::span<const float> bias,
                                  const host_tensor& grad_output) {
  std::mt19937 unused;
  nn::linear fc(cpu(), weight.shape[1], weight.shape[0], unused);
  set(fc.weight().value, weight.data);
  set(fc.bias().value, bias);
  return run(fc, input, grad_output);
}

softmax_cross_entropy_result softmax_cross_entropy_reference(const host_tensor& logits,
                                                             std::span<const std::int32_t> labels) {
  nn::softmax_cross_entropy ce;
  const double loss = ce.forward(to_cpu(logits), labels);
  return {loss, ce.correct(), to_host(ce.backward())};
}

reference_result add_reference(const host_tensor& a, const host_tensor& b, const host_tensor& grad_output) {
  return {to_host(nn::add::forward(to_cpu(a), to_cpu(b))), to_host(nn::add::backward(to_cpu(grad_output))), {}};
}

}  // namespace mimatrix::resnet::nn_cuda::test

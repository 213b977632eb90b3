// The GPU layers against the CPU ones (nn/, oneDNN) on the same random inputs and
// parameters, to 1e-4 of the largest magnitude: forward outputs, input and parameter
// gradients, batch norm's running statistics and inference; and each GPU layer against
// central finite differences, as nn_test.cpp checks the CPU layers. Every test that needs
// a GPU skips where there is none; the error messages are checked everywhere.
#include "nn_cuda/add.hpp"
#include "nn_cuda/batch_norm.hpp"
#include "nn_cuda/check.hpp"
#include "nn_cuda/context.hpp"
#include "nn_cuda/conv2d.hpp"
#include "nn_cuda/linear.hpp"
#include "nn_cuda/pooling.hpp"
#include "nn_cuda/relu.hpp"
#include "nn_cuda/sgd.hpp"
#include "nn_cuda/softmax_cross_entropy.hpp"
#include "nn_cuda/tensor.hpp"

#include "test/gradient_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn_reference.hpp"

namespace {

using namespace mimatrix::resnet::nn_cuda;
namespace optim = mimatrix::resnet::optim;
using test::host_tensor;

// GPU against CPU: both float32, summed in different orders (and cuDNN's algorithms).
constexpr double match_tolerance = 1e-4;
// Finite differences in float, as nn_test.cpp: relative to the largest analytic entry.
constexpr double gradient_tolerance = 1e-2;
constexpr float step = 1e-2f;

// Empty when there is a device; else why not.
std::string no_device() {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status);
  return devices > 0 ? "" : "cudaGetDeviceCount: 0 devices";
}

// max |actual - expected| / max |expected|.
void expect_matches(const std::string& what, const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::abs(double{actual[i]} - double{expected[i]}));
    scale = std::max(scale, std::abs(double{expected[i]}));
  }
  const double error = worst / std::max(scale, 1e-12);
  std::cout << "[ match    ] " << what << ": max relative difference " << error << '\n';
  EXPECT_LT(error, match_tolerance) << what;
}

class nn_cuda_test : public testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = no_device(); !why.empty()) GTEST_SKIP() << "needs a CUDA device (" << why << ")";
    seed = std::random_device{}();
    rng.seed(seed);
    RecordProperty("seed", std::to_string(seed));  // fresh data each run; the seed reproduces it
    ctx.emplace();
  }

  host_tensor random_host(const dims& shape, float lo = -1.0f, float hi = 1.0f) {
    host_tensor t{shape, std::vector<float>(static_cast<std::size_t>(device_tensor::element_count(shape)))};
    std::uniform_real_distribution<float> uniform(lo, hi);
    for (float& v : t.data) v = uniform(rng);
    return t;
  }

  device_tensor upload(const host_tensor& h) { return device_tensor::from_host(h.shape, h.data, ctx->stream()); }
  host_tensor download(const device_tensor& d) { return {d.shape(), d.to_host(ctx->stream())}; }
  std::vector<float> values(const device_tensor& d) { return d.to_host(ctx->stream()); }

  static double weighted_sum(const host_tensor& out, const host_tensor& weights) {
    double sum = 0;
    for (std::size_t i = 0; i < out.data.size(); ++i) sum += double{out.data[i]} * weights.data[i];
    return sum;
  }

  static double gradient_error(const std::function<double()>& loss, std::vector<float>& x,
                               const std::vector<float>& analytic) {
    return mimatrix::resnet::test::gradient_error(loss, x, analytic, step);
  }

  static void expect_gradient(const std::string& what, double error) {
    std::cout << "[ gradient ] " << what << ": max relative error " << error << '\n';
    EXPECT_LT(error, gradient_tolerance) << what;
  }

  std::uint32_t seed = 0;
  std::mt19937 rng;
  std::optional<context> ctx;
};

// Needs no device: the strings come from the libraries' tables.
TEST(nn_cuda_check, names_the_call_the_status_and_the_place) {
  const auto message = [](auto status) {
    const auto call = [status] { return status; };
    try {
      MIMATRIX_NN_CUDA_CHECK(call());
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  const std::string cuda = message(cudaErrorInvalidValue);
  EXPECT_NE(cuda.find("call()"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("cudaErrorInvalidValue"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("nn_cuda_test.cu:"), std::string::npos) << cuda;
  const std::string cudnn = message(CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(cudnn.find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << cudnn;
  const std::string cublas = message(CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(cublas.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << cublas;
  EXPECT_EQ(message(cudaSuccess), "no exception");
}

TEST_F(nn_cuda_test, tensors_round_trip_and_copy) {
  const auto h = random_host({2, 3, 4, 5});
  device_tensor d = upload(h);
  EXPECT_EQ(values(d), h.data);
  device_tensor copy;
  EXPECT_EQ(copy.size(), 0u);
  copy.copy_from(d, ctx->stream());
  EXPECT_EQ(copy.shape(), h.shape);
  copy.reshape({2, 60});
  EXPECT_EQ(values(copy), h.data);
  EXPECT_THROW(copy.reshape({2, 61}), std::invalid_argument);
  EXPECT_THROW(d.copy_from_host(std::vector<float>(3), ctx->stream()), std::invalid_argument);
  d.fill_zero(ctx->stream());
  EXPECT_EQ(values(d), std::vector<float>(h.data.size(), 0.0f));
}

TEST_F(nn_cuda_test, conv2d_matches_the_cpu_layer) {
  for (const std::int64_t stride : {1, 2}) {
    for (const std::int64_t padding : {0, 1}) {
      const auto init_seed = seed + static_cast<std::uint32_t>(stride * 2 + padding);
      std::mt19937 init(init_seed);
      conv2d conv(*ctx, 3, 4, 3, stride, padding, init);
      // He initialization on the host: the CPU layer's weights from the same seed.
      const host_tensor weight{conv.weight().value.shape(), values(conv.weight().value)};
      EXPECT_EQ(weight.data, test::conv2d_initial_weight(3, 4, 3, init_seed));
      // A second batch size, then the first again: plans cached per shape.
      for (const std::int64_t batch : {2, 1, 2}) {
        const auto in = random_host({batch, 3, 7, 6});  // H != W catches a transposition
        const auto out = download(conv.forward(upload(in)));
        const auto r = random_host(out.shape);
        const auto grad_in = download(conv.backward(upload(r)));
        const auto cpu = test::conv2d_reference(in, weight, stride, padding, r);
        const auto what = "conv2d stride " + std::to_string(stride) + " padding " + std::to_string(padding) +
                          " batch " + std::to_string(batch);
        ASSERT_EQ(out.shape, cpu.output.shape) << what;
        expect_matches(what + " output", out.data, cpu.output.data);
        expect_matches(what + " input gradient", grad_in.data, cpu.grad_input.data);
        expect_matches(what + " weight gradient", values(conv.weight().grad), cpu.parameter_grads.at(0));
      }
    }
  }
}

TEST_F(nn_cuda_test, conv2d_gradients) {
  for (const std::int64_t stride : {1, 2}) {
    conv2d conv(*ctx, 3, 4, 3, stride, 1, rng);
    auto in = random_host({2, 3, 6, 5});
    const auto r = random_host(conv.output_shape(in.shape));
    (void)conv.forward(upload(in));
    const auto grad_in = values(conv.backward(upload(r)));
    const auto grad_w = values(conv.weight().grad);
    auto w = values(conv.weight().value);
    auto loss = [&] {
      conv.weight().value.copy_from_host(w, ctx->stream());
      return weighted_sum(download(conv.forward(upload(in))), r);
    };
    const auto s = std::to_string(stride);
    expect_gradient("conv2d stride " + s + " input", gradient_error(loss, in.data, grad_in));
    expect_gradient("conv2d stride " + s + " weight", gradient_error(loss, w, grad_w));
  }
}

TEST_F(nn_cuda_test, batch_norm_matches_the_cpu_layer) {
  // A momentum other than the default, so cuDNN's factor cannot be 1 - momentum unnoticed.
  constexpr float momentum = 0.25f, epsilon = 1e-5f;
  batch_norm bn(*ctx, 3, momentum, epsilon);
  const auto gamma = random_host({3}, 0.5f, 1.5f), beta = random_host({3});
  bn.gamma().value.copy_from_host(gamma.data, ctx->stream());
  bn.beta().value.copy_from_host(beta.data, ctx->stream());
  const auto in = random_host({4, 3, 5, 6}, -2.0f, 3.0f);
  const auto out = download(bn.forward(upload(in)));
  const auto r = random_host(in.shape);
  const auto grad_in = download(bn.backward(upload(r)));
  const auto inferred = download(bn.infer(upload(in)));
  const auto cpu = test::batch_norm_reference(in, gamma.data, beta.data, momentum, epsilon, r);
  expect_matches("batch_norm output", out.data, cpu.output.data);
  expect_matches("batch_norm input gradient", grad_in.data, cpu.grad_input.data);
  expect_matches("batch_norm gamma gradient", values(bn.gamma().grad), cpu.parameter_grads.at(0));
  expect_matches("batch_norm beta gradient", values(bn.beta().grad), cpu.parameter_grads.at(1));
  expect_matches("batch_norm running mean", values(bn.running_mean()), cpu.running_mean);
  expect_matches("batch_norm running variance (unbiased)", values(bn.running_var()), cpu.running_var);
  expect_matches("batch_norm inference", inferred.data, cpu.inferred.data);
}

TEST_F(nn_cuda_test, batch_norm_training_gradients) {
  batch_norm bn(*ctx, 3);
  auto gamma = random_host({3}, 0.5f, 1.5f).data, beta = random_host({3}).data;
  bn.gamma().value.copy_from_host(gamma, ctx->stream());
  bn.beta().value.copy_from_host(beta, ctx->stream());
  auto in = random_host({4, 3, 3, 2});
  const auto r = random_host(in.shape);
  (void)bn.forward(upload(in));
  const auto grad_in = values(bn.backward(upload(r)));
  const auto grad_gamma = values(bn.gamma().grad), grad_beta = values(bn.beta().grad);
  auto loss = [&] {
    bn.gamma().value.copy_from_host(gamma, ctx->stream());
    bn.beta().value.copy_from_host(beta, ctx->stream());
    return weighted_sum(download(bn.forward(upload(in))), r);
  };
  expect_gradient("batch_norm input", gradient_error(loss, in.data, grad_in));
  expect_gradient("batch_norm gamma", gradient_error(loss, gamma, grad_gamma));
  expect_gradient("batch_norm beta", gradient_error(loss, beta, grad_beta));
}

TEST_F(nn_cuda_test, relu_matches_the_cpu_layer_and_its_gradients) {
  relu layer(*ctx);
  auto in = random_host({2, 3, 4, 4}, 0.1f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  for (float& v : in.data) v = negative(rng) ? -v : v;  // |x| >= 0.1 > step: no kink crossed
  const auto r = random_host(in.shape);
  const auto out = download(layer.forward(upload(in)));
  const auto grad_in = download(layer.backward(upload(r)));
  const auto cpu = test::relu_reference(in, r);
  expect_matches("relu output", out.data, cpu.output.data);
  expect_matches("relu input gradient", grad_in.data, cpu.grad_input.data);
  auto loss = [&] { return weighted_sum(download(layer.forward(upload(in))), r); };
  expect_gradient("relu input", gradient_error(loss, in.data, grad_in.data));
}

TEST_F(nn_cuda_test, global_average_pool_matches_the_cpu_layer_and_its_gradients) {
  global_average_pool pool(*ctx);
  auto in = random_host({2, 3, 4, 5});
  const auto r = random_host({2, 3, 1, 1});
  const auto out = download(pool.forward(upload(in)));
  ASSERT_EQ(out.shape, (dims{2, 3, 1, 1}));
  const auto grad_in = download(pool.backward(upload(r)));
  const auto cpu = test::global_average_pool_reference(in, r);
  expect_matches("global_average_pool output", out.data, cpu.output.data);
  expect_matches("global_average_pool input gradient", grad_in.data, cpu.grad_input.data);
  auto loss = [&] { return weighted_sum(download(pool.forward(upload(in))), r); };
  expect_gradient("global_average_pool input", gradient_error(loss, in.data, grad_in.data));
}

TEST_F(nn_cuda_test, max_pool_matches_the_cpu_layer_and_its_gradients) {
  max_pool pool(*ctx, 3, 2, 1);
  // A permutation of well-separated values: no window has a near tie that a step could flip.
  host_tensor in{{2, 2, 5, 6}, std::vector<float>(2 * 2 * 5 * 6)};
  for (std::size_t i = 0; i < in.data.size(); ++i) in.data[i] = 0.1f * static_cast<float>(i);
  std::shuffle(in.data.begin(), in.data.end(), rng);
  const auto r = random_host(pool.output_shape(in.shape));
  const auto out = download(pool.forward(upload(in)));
  ASSERT_EQ(out.shape, (dims{2, 2, 3, 3}));
  const auto grad_in = download(pool.backward(upload(r)));
  const auto cpu = test::max_pool_reference(in, 3, 2, 1, r);
  expect_matches("max_pool output", out.data, cpu.output.data);
  expect_matches("max_pool input gradient", grad_in.data, cpu.grad_input.data);
  auto loss = [&] { return weighted_sum(download(pool.forward(upload(in))), r); };
  expect_gradient("max_pool input", gradient_error(loss, in.data, grad_in.data));
}

TEST_F(nn_cuda_test, linear_matches_the_cpu_layer_and_its_gradients) {
  std::mt19937 init(seed);
  linear fc(*ctx, 6, 4, init);
  const host_tensor weight{fc.weight().value.shape(), values(fc.weight().value)};
  auto bias = values(fc.bias().value);
  const auto cpu_init = test::linear_initial_parameters(6, 4, seed);
  EXPECT_EQ(weight.data, cpu_init.at(0));
  EXPECT_EQ(bias, cpu_init.at(1));

  auto in = random_host({3, 6, 1, 1});  // as global_average_pool gives it
  const auto r = random_host({3, 4});
  const auto out = download(fc.forward(upload(in)));
  const auto grad_in = download(fc.backward(upload(r)));
  ASSERT_EQ(grad_in.shape, in.shape);
  EXPECT_EQ(fc.last_input().shape(), (dims{3, 6}));
  const auto grad_w = values(fc.weight().grad), grad_b = values(fc.bias().grad);
  const auto cpu = test::linear_reference(in, weight, bias, r);
  expect_matches("linear output", out.data, cpu.output.data);
  expect_matches("linear input gradient", grad_in.data, cpu.grad_input.data);
  expect_matches("linear weight gradient", grad_w, cpu.parameter_grads.at(0));
  expect_matches("linear bias gradient", grad_b, cpu.parameter_grads.at(1));

  auto w = weight.data;
  auto loss = [&] {
    fc.weight().value.copy_from_host(w, ctx->stream());
    fc.bias().value.copy_from_host(bias, ctx->stream());
    return weighted_sum(download(fc.forward(upload(in))), r);
  };
  expect_gradient("linear input", gradient_error(loss, in.data, grad_in.data));
  expect_gradient("linear weight", gradient_error(loss, w, grad_w));
  expect_gradient("linear bias", gradient_error(loss, bias, grad_b));
}

TEST_F(nn_cuda_test, softmax_cross_entropy_matches_the_cpu_one_and_its_gradient) {
  softmax_cross_entropy ce(*ctx);
  // More classes than a warp has lanes, so each lane strides over several.
  auto logits = random_host({5, 37}, -2.0f, 2.0f);
  const std::vector<std::int32_t> labels{0, 36, 4, 1, 20};
  const double loss = ce.forward(upload(logits), labels);
  const auto grad = download(ce.backward());
  const auto cpu = test::softmax_cross_entropy_reference(logits, labels);
  EXPECT_NEAR(loss, cpu.loss, match_tolerance * std::abs(cpu.loss));
  EXPECT_EQ(ce.correct(), cpu.correct);
  expect_matches("softmax_cross_entropy gradient", grad.data, cpu.grad.data);
  auto f = [&] { return ce.forward(upload(logits), labels); };
  expect_gradient("softmax_cross_entropy logits", gradient_error(f, logits.data, grad.data));

  // A row whose label is its largest logit counts as correct.
  host_tensor peaked{{2, 3}, {0.0f, 5.0f, 1.0f, 2.0f, 0.0f, 1.0f}};
  const std::vector<std::uint8_t> hits{1, 2};  // bytes, as the data pipeline's batches
  (void)ce.forward(upload(peaked), hits);
  EXPECT_EQ(ce.correct(), 1);
}

TEST_F(nn_cuda_test, softmax_cross_entropy_is_stable_for_large_logits) {
  softmax_cross_entropy ce(*ctx);
  const host_tensor logits{{2, 3}, {1000.0f, 0.0f, -1000.0f, 0.0f, 0.0f, 0.0f}};
  const std::vector<std::uint8_t> labels{1, 2};
  const double loss = ce.forward(upload(logits), labels);
  EXPECT_NEAR(loss, (1000.0 + std::log(3.0)) / 2.0, 1e-5);
  EXPECT_EQ(ce.correct(), 0);  // row 1 ties: the first maximum (index 0) is the guess
  for (const float g : values(ce.backward())) EXPECT_TRUE(std::isfinite(g));
  const std::vector<std::uint8_t> out_of_range{1, 3};
  EXPECT_THROW((void)ce.forward(upload(logits), out_of_range), std::invalid_argument);
}

TEST_F(nn_cuda_test, add_matches_the_cpu_one_and_its_gradients) {
  auto a = random_host({2, 3, 2, 2});
  auto b = random_host(a.shape);
  const auto r = random_host(a.shape);
  const auto out = download(add::forward(*ctx, upload(a), upload(b)));
  const auto grad = download(add::backward(*ctx, upload(r)));
  const auto cpu = test::add_reference(a, b, r);
  expect_matches("add output", out.data, cpu.output.data);
  expect_matches("add gradient", grad.data, cpu.grad_input.data);
  auto loss = [&] { return weighted_sum(download(add::forward(*ctx, upload(a), upload(b))), r); };
  expect_gradient("add a", gradient_error(loss, a.data, grad.data));
  expect_gradient("add b", gradient_error(loss, b.data, grad.data));
  device_tensor into = upload(a);
  add::accumulate(*ctx, into, upload(b));
  expect_matches("add in place", values(into), cpu.output.data);
  EXPECT_THROW((void)add::forward(*ctx, upload(a), upload(random_host({2, 3, 2, 3}))), std::invalid_argument);
}

// The one-launch optimizer on the device against its own chunking run on the host
// (multi_tensor_sgd_test.cpp checks that against the CPU optimizer bit for bit): nvcc
// contracts the device's arithmetic into FMAs, so to a float's rounding.
TEST_F(nn_cuda_test, sgd_takes_the_steps_of_the_host_rule) {
  const optim::sgd_settings settings{0.9f, 0, 5e-4f, true};
  std::vector<parameter> params;
  params.reserve(3);
  std::vector<host_tensor> expected, grads;
  for (const dims& shape : {dims{5}, dims{64, 16, 3, 3}, dims{3000}}) {
    params.emplace_back("p", shape);
    expected.push_back(random_host(shape));
    params.back().value.copy_from_host(expected.back().data, ctx->stream());
  }
  std::vector<parameter*> pointers;
  for (auto& p : params) pointers.push_back(&p);
  sgd gpu(*ctx, pointers, settings);
  std::vector<std::vector<float>> buffers;
  detail::sgd_plan plan;
  for (auto& v : expected) buffers.emplace_back(v.data.size(), 0.0f);
  for (std::size_t i = 0; i < params.size(); ++i) grads.push_back(random_host(params[i].value.shape()));
  for (std::size_t i = 0; i < params.size(); ++i)
    plan.add(expected[i].data.data(), grads[i].data.data(), buffers[i].data(), std::int64_t(expected[i].data.size()));
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      grads[i] = random_host(params[i].value.shape());
      plan.slots[i].grad = grads[i].data.data();
      params[i].grad.copy_from_host(grads[i].data, ctx->stream());
    }
    const float lr = 0.1f;
    gpu.step(lr);
    const optim::detail::sgd_coefficients c{settings.weight_decay, settings.momentum, 1, lr};
    for (std::int64_t chunk = 0; chunk < plan.chunks; ++chunk)
      (step == 0 ? detail::sgd_chunk<true, true, true, true> : detail::sgd_chunk<true, true, false, true>)(
          plan.slots.data(), int(plan.slots.size()), chunk, 0, 1, c);
    for (std::size_t i = 0; i < params.size(); ++i) {
      expect_matches("sgd value " + std::to_string(i), values(params[i].value), expected[i].data);
      expect_matches("sgd momentum " + std::to_string(i), values(gpu.momentum_buffers()[i]), buffers[i]);
    }
  }
  EXPECT_THROW(gpu.step(-1.0f), std::invalid_argument);
}

// The context's caching pool: a layer's second step takes every block from the cache.
TEST_F(nn_cuda_test, a_repeated_step_allocates_nothing_from_the_driver) {
  std::mt19937 init(1);
  conv2d conv(*ctx, 3, 8, 3, 1, 1, init);
  const auto x = upload(random_host({4, 3, 16, 16}));
  (void)conv.backward(conv.forward(x));
  ctx->synchronize();
  const auto first = ctx->memory();
  for (int i = 0; i < 3; ++i) (void)conv.backward(conv.forward(x));
  ctx->synchronize();
  const auto later = ctx->memory();
  EXPECT_GT(first.raw_allocations, 0u);
  EXPECT_EQ(later.raw_allocations, first.raw_allocations);
  EXPECT_GT(later.reuses, first.reuses);
  EXPECT_EQ(later.in_use_bytes, first.in_use_bytes);
}

}  // namespace

// The ResNet layers against central finite differences (every input and parameter
// gradient), convolution against a naive loop, and batch norm's running statistics.
#include "nn/add.hpp"
#include "nn/batch_norm.hpp"
#include "nn/context.hpp"
#include "nn/conv2d.hpp"
#include "nn/linear.hpp"
#include "nn/pooling.hpp"
#include "nn/relu.hpp"
#include "nn/softmax_cross_entropy.hpp"
#include "nn/tensor.hpp"

#include "test/gradient_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace mimatrix::resnet::nn;

// Finite differences in float: relative to the largest analytic gradient entry.
constexpr double tolerance = 1e-2;
constexpr float step = 1e-2f;

class nn_test : public testing::Test {
 protected:
  void SetUp() override {
    const auto seed = std::random_device{}();
    rng.seed(seed);
    RecordProperty("seed", std::to_string(seed));  // fresh data each run; the seed reproduces it
  }

  tensor random_tensor(const dnnl::memory::dims& shape, float lo = -1.0f, float hi = 1.0f) {
    tensor t(shape);
    std::uniform_real_distribution<float> uniform(lo, hi);
    for (float& v : t.data) v = uniform(rng);
    return t;
  }

  static double weighted_sum(const tensor& out, const tensor& weights) {
    double sum = 0;
    for (std::size_t i = 0; i < out.size(); ++i) sum += double{out.data[i]} * weights.data[i];
    return sum;
  }

  static double gradient_error(const std::function<double()>& loss, std::vector<float>& x,
                               const std::vector<float>& analytic) {
    return mimatrix::resnet::test::gradient_error(loss, x, analytic, step);
  }

  static void expect_gradient(const std::string& what, double error) {
    std::cout << "[ gradient ] " << what << ": max relative error " << error << '\n';
    EXPECT_LT(error, tolerance) << what;
  }

  std::mt19937 rng;
  context ctx;
};

// out[n][o][y][x] = sum_{c,i,j} in[n][c][y*s - p + i][x*s - p + j] * w[o][c][i][j]
tensor naive_conv(const tensor& in, const tensor& w, std::int64_t s, std::int64_t p) {
  const auto n = in.dim(0), c = in.dim(1), h = in.dim(2), wd = in.dim(3);
  const auto o = w.dim(0), k = w.dim(2);
  tensor out({n, o, (h + 2 * p - k) / s + 1, (wd + 2 * p - k) / s + 1});
  const auto oh = out.dim(2), ow = out.dim(3);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t f = 0; f < o; ++f)
      for (std::int64_t y = 0; y < oh; ++y)
        for (std::int64_t x = 0; x < ow; ++x) {
          double sum = 0;
          for (std::int64_t ch = 0; ch < c; ++ch)
            for (std::int64_t i = 0; i < k; ++i)
              for (std::int64_t j = 0; j < k; ++j) {
                const auto iy = y * s - p + i, ix = x * s - p + j;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                sum += double{in.data[((b * c + ch) * h + iy) * wd + ix]} *
                       w.data[((f * c + ch) * k + i) * k + j];
              }
          out.data[((b * o + f) * oh + y) * ow + x] = static_cast<float>(sum);
        }
  return out;
}

TEST_F(nn_test, conv2d_forward_matches_a_naive_loop) {
  for (const std::int64_t stride : {1, 2}) {
    for (const std::int64_t padding : {0, 1}) {
      conv2d conv(ctx, 3, 4, 3, stride, padding, rng);
      // A second batch size, then the first again: primitives cached per shape.
      for (const std::int64_t batch : {2, 1, 2}) {
        const auto in = random_tensor({batch, 3, 7, 6});  // H != W catches a transposition
        const auto out = conv.forward(in);
        const auto expected = naive_conv(in, conv.weight().value, stride, padding);
        ASSERT_EQ(out.shape, expected.shape);
        for (std::size_t i = 0; i < out.size(); ++i)
          ASSERT_NEAR(out.data[i], expected.data[i], 1e-4) << "stride " << stride << " at " << i;
      }
    }
  }
}

TEST_F(nn_test, conv2d_gradients) {
  for (const std::int64_t stride : {1, 2}) {
    conv2d conv(ctx, 3, 4, 3, stride, 1, rng);
    auto in = random_tensor({2, 3, 6, 5});
    const auto r = random_tensor(conv.output_shape(in.shape));
    conv.forward(in);
    const auto grad_in = conv.backward(r);
    auto loss = [&] { return weighted_sum(conv.forward(in), r); };
    const auto s = std::to_string(stride);
    expect_gradient("conv2d stride " + s + " input", gradient_error(loss, in.data, grad_in.data));
    expect_gradient("conv2d stride " + s + " weight",
                    gradient_error(loss, conv.weight().value.data, conv.weight().grad.data));
  }
}

TEST_F(nn_test, batch_norm_training_gradients) {
  batch_norm bn(ctx, 3);
  bn.gamma().value = random_tensor({3}, 0.5f, 1.5f);
  bn.beta().value = random_tensor({3});
  auto in = random_tensor({4, 3, 3, 2});
  const auto r = random_tensor(in.shape);
  bn.forward(in);
  const auto grad_in = bn.backward(r);
  auto loss = [&] { return weighted_sum(bn.forward(in), r); };
  expect_gradient("batch_norm input", gradient_error(loss, in.data, grad_in.data));
  expect_gradient("batch_norm gamma",
                  gradient_error(loss, bn.gamma().value.data, bn.gamma().grad.data));
  expect_gradient("batch_norm beta",
                  gradient_error(loss, bn.beta().value.data, bn.beta().grad.data));
}

TEST_F(nn_test, batch_norm_updates_running_statistics_and_infers_with_them) {
  constexpr float momentum = 0.25f, epsilon = 1e-5f;
  batch_norm bn(ctx, 2, momentum, epsilon);
  bn.gamma().value = random_tensor({2}, 0.5f, 1.5f);
  bn.beta().value = random_tensor({2});
  const auto in = random_tensor({3, 2, 4, 5}, -2.0f, 3.0f);
  bn.forward(in);
  for (std::int64_t c = 0; c < 2; ++c) {
    double sum = 0, squares = 0;
    const std::int64_t n = 3 * 4 * 5;
    for (std::int64_t b = 0; b < 3; ++b)
      for (std::int64_t i = 0; i < 20; ++i) sum += in.data[(b * 2 + c) * 20 + i];
    const double mean = sum / n;
    for (std::int64_t b = 0; b < 3; ++b)
      for (std::int64_t i = 0; i < 20; ++i) {
        const double d = in.data[(b * 2 + c) * 20 + i] - mean;
        squares += d * d;
      }
    const double unbiased = squares / (n - 1);
    const double running_mean = momentum * mean;  // from 0
    const double running_var = (1 - momentum) * 1.0 + momentum * unbiased;  // from 1
    EXPECT_NEAR(bn.running_mean().data[c], running_mean, 1e-5);
    EXPECT_NEAR(bn.running_var().data[c], running_var, 1e-4);

    const auto out = bn.infer(in);
    const double g = bn.gamma().value.data[c], beta = bn.beta().value.data[c];
    for (std::int64_t b = 0; b < 3; ++b)
      for (std::int64_t i = 0; i < 20; ++i) {
        const auto at = (b * 2 + c) * 20 + i;
        const double expected =
            g * (in.data[at] - running_mean) / std::sqrt(running_var + epsilon) + beta;
        EXPECT_NEAR(out.data[at], expected, 1e-4);
      }
  }
}

TEST_F(nn_test, relu_gradients_away_from_zero) {
  relu layer(ctx);
  auto in = random_tensor({2, 3, 4, 4}, 0.1f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  for (float& v : in.data) v = negative(rng) ? -v : v;  // |x| >= 0.1 > step: no kink crossed
  const auto r = random_tensor(in.shape);
  layer.forward(in);
  const auto grad_in = layer.backward(r);
  auto loss = [&] { return weighted_sum(layer.forward(in), r); };
  expect_gradient("relu input", gradient_error(loss, in.data, grad_in.data));
}

TEST_F(nn_test, global_average_pool_gradients) {
  global_average_pool pool(ctx);
  auto in = random_tensor({2, 3, 4, 5});
  const auto r = random_tensor({2, 3, 1, 1});
  const auto out = pool.forward(in);
  ASSERT_EQ(out.shape, (dnnl::memory::dims{2, 3, 1, 1}));
  const auto grad_in = pool.backward(r);
  auto loss = [&] { return weighted_sum(pool.forward(in), r); };
  expect_gradient("global_average_pool input", gradient_error(loss, in.data, grad_in.data));
}

TEST_F(nn_test, max_pool_gradients) {
  max_pool pool(ctx, 3, 2, 1);
  // A permutation of well-separated values: no window has a near tie that a step could flip.
  tensor in({2, 2, 5, 6});
  std::vector<float> values(in.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * static_cast<float>(i);
  std::shuffle(values.begin(), values.end(), rng);
  in.data = values;
  const auto r = random_tensor(pool.output_shape(in.shape));
  const auto out = pool.forward(in);
  ASSERT_EQ(out.shape, (dnnl::memory::dims{2, 2, 3, 3}));
  const auto grad_in = pool.backward(r);
  auto loss = [&] { return weighted_sum(pool.forward(in), r); };
  expect_gradient("max_pool input", gradient_error(loss, in.data, grad_in.data));
}

TEST_F(nn_test, linear_gradients) {
  linear fc(ctx, 6, 4, rng);
  auto in = random_tensor({3, 6, 1, 1});  // as global_average_pool gives it
  const auto r = random_tensor({3, 4});
  fc.forward(in);
  const auto grad_in = fc.backward(r);
  ASSERT_EQ(grad_in.shape, in.shape);
  auto loss = [&] { return weighted_sum(fc.forward(in), r); };
  expect_gradient("linear input", gradient_error(loss, in.data, grad_in.data));
  expect_gradient("linear weight",
                  gradient_error(loss, fc.weight().value.data, fc.weight().grad.data));
  expect_gradient("linear bias", gradient_error(loss, fc.bias().value.data, fc.bias().grad.data));
}

TEST_F(nn_test, softmax_cross_entropy_gradient) {
  softmax_cross_entropy ce;
  auto logits = random_tensor({4, 5}, -2.0f, 2.0f);
  const std::vector<std::int32_t> labels{0, 3, 4, 1};
  ce.forward(logits, labels);
  const auto grad = ce.backward();
  auto loss = [&] { return ce.forward(logits, labels); };
  expect_gradient("softmax_cross_entropy logits", gradient_error(loss, logits.data, grad.data));
}

TEST_F(nn_test, softmax_cross_entropy_is_stable_for_large_logits) {
  softmax_cross_entropy ce;
  tensor logits({2, 3});
  logits.data = {1000.0f, 0.0f, -1000.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<std::uint8_t> labels{1, 2};  // bytes, as the data pipeline's batches
  const double loss = ce.forward(logits, labels);
  EXPECT_NEAR(loss, (1000.0 + std::log(3.0)) / 2.0, 1e-6);
  EXPECT_EQ(ce.correct(), 0);  // row 1 ties: the first maximum (index 0) is the guess
  for (const float g : ce.backward().data) EXPECT_TRUE(std::isfinite(g));
  const std::vector<std::uint8_t> out_of_range{1, 3};
  EXPECT_THROW((void)ce.forward(logits, out_of_range), std::invalid_argument);
}

TEST_F(nn_test, add_gradients) {
  auto a = random_tensor({2, 3, 2, 2});
  auto b = random_tensor(a.shape);
  const auto r = random_tensor(a.shape);
  const auto grad = add::backward(r);
  tensor summed = a;
  add::accumulate(summed, b);
  EXPECT_EQ(summed.data, add::forward(a, b).data);  // in place, the same sums
  auto loss = [&] { return weighted_sum(add::forward(a, b), r); };
  expect_gradient("add a", gradient_error(loss, a.data, grad.data));
  expect_gradient("add b", gradient_error(loss, b.data, grad.data));
}

}  // namespace

// Batch normalization over NCHW activations: training forward with batch statistics
// (updating running averages) and its backward in plain C++, local or synchronized across
// ranks by a reducer of its statistics; inference with the running ones on oneDNN.
#pragma once

#include "context.hpp"
#include "tensor.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace mimatrix::resnet::nn {

// @par Thread Safety: as its context (one thread at a time).
class batch_norm {
 public:
  // running = (1 - momentum) * running + momentum * batch, as PyTorch.
  batch_norm(context& ctx, std::int64_t channels, float momentum = 0.1f, float epsilon = 1e-5f)
      : ctx_(ctx), momentum_(momentum), epsilon_(epsilon),
        gamma_("batch_norm.gamma", {channels}), beta_("batch_norm.beta", {channels}),
        running_mean_({channels}), running_var_({channels}), mean_({channels}),
        variance_({channels}) {
    for (float& g : gamma_.value.data) g = 1.0f;
    for (float& v : running_var_.data) v = 1.0f;
  }

  /// Sums a vector across the ranks that share the global batch (an allreduce).
  using statistics_reducer = std::function<void(std::span<double>)>;

  /// Synchronized batch norm (as PyTorch's SyncBatchNorm): the statistics and the input's
  /// gradient cover the global batch, so P ranks compute what one rank would on all of it.
  /// Costs two small allreduces a layer a step, forward and backward. Empty: local statistics.
  void synchronize_with(statistics_reducer reduce) { reduce_ = std::move(reduce); }

  // Training: normalizes with this batch's statistics and updates the running ones. Keeps
  // the input for backward: pass it as an rvalue to lend it rather than copy it.
  tensor forward(tensor input) {
    input_ = std::move(input);
    return forward_training();
  }

  // Inference: normalizes with the running statistics; no backward after it.
  tensor infer(const tensor& input) {
    auto& p = primitives_for(input.shape);
    tensor output(input.shape);
    ctx_.run(p.inference, {{DNNL_ARG_SRC, ctx_.wrap(input)},
                                      {DNNL_ARG_SCALE, ctx_.wrap(gamma_.value)},
                                      {DNNL_ARG_SHIFT, ctx_.wrap(beta_.value)},
                                      {DNNL_ARG_MEAN, ctx_.wrap(running_mean_)},
                                      {DNNL_ARG_VARIANCE, ctx_.wrap(running_var_)},
                                      {DNNL_ARG_DST, ctx_.wrap(output)}});
    return output;
  }

  // After forward: returns the input's gradient; writes gamma's and beta's.
  tensor backward(const tensor& grad_output) { return backward_training(grad_output); }

  [[nodiscard]] std::vector<parameter*> parameters() { return {&gamma_, &beta_}; }
  [[nodiscard]] parameter& gamma() { return gamma_; }
  [[nodiscard]] parameter& beta() { return beta_; }
  [[nodiscard]] const tensor& running_mean() const { return running_mean_; }
  [[nodiscard]] const tensor& running_var() const { return running_var_; }
  // For a checkpoint or a new rank taking the group's state.
  [[nodiscard]] tensor& running_mean() { return running_mean_; }
  [[nodiscard]] tensor& running_var() { return running_var_; }

 private:
  void update_running(double count) {
    const auto unbias = static_cast<float>(count > 1 ? count / (count - 1) : 1.0);
    for (std::size_t c = 0; c < mean_.size(); ++c) {
      running_mean_.data[c] = (1 - momentum_) * running_mean_.data[c] + momentum_ * mean_.data[c];
      running_var_.data[c] =
          (1 - momentum_) * running_var_.data[c] + momentum_ * unbias * variance_.data[c];
    }
  }

  // Training runs in plain C++ rather than oneDNN: its nchw batch norm is slow, and one
  // path serves both local and synchronized statistics. Two passes, each summed across
  // ranks when synchronized: the mean (with the count a channel, the last entry), then the
  // squared deviations from it (no cancellation, unlike E[x^2] - mean^2). Sums are float
  // within a plane, double across planes.
  tensor forward_training() {
    const auto n = input_.dim(0), channels = input_.dim(1), plane = input_.dim(2) * input_.dim(3);
    const float* in = input_.data.data();
    std::vector<double> sums(static_cast<std::size_t>(channels + 1), 0.0);
    each_channel(channels, [&](std::int64_t c) {
      double sum = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float* x = in + (i * channels + c) * plane;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (std::int64_t k = 0; k < plane; ++k) s += x[k];
        sum += s;
      }
      sums[std::size_t(c)] = sum;
    });
    sums.back() = static_cast<double>(n * plane);
    if (reduce_) reduce_(sums);
    count_ = sums.back();
    for (std::int64_t c = 0; c < channels; ++c) mean_.data[std::size_t(c)] = static_cast<float>(sums[std::size_t(c)] / count_);
    sums.assign(static_cast<std::size_t>(channels), 0.0);
    each_channel(channels, [&](std::int64_t c) {
      const float mean = mean_.data[std::size_t(c)];
      double sum = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float* x = in + (i * channels + c) * plane;
        float q = 0;
#pragma omp simd reduction(+ : q)
        for (std::int64_t k = 0; k < plane; ++k) q += (x[k] - mean) * (x[k] - mean);
        sum += q;
      }
      sums[std::size_t(c)] = sum;
    });
    if (reduce_) reduce_(sums);
    for (std::int64_t c = 0; c < channels; ++c) variance_.data[std::size_t(c)] = static_cast<float>(sums[std::size_t(c)] / count_);
    tensor output(input_.shape);
    float* out = output.data.data();
    each_channel(channels, [&](std::int64_t c) {
      const float mean = mean_.data[std::size_t(c)], invstd = 1.0f / std::sqrt(variance_.data[std::size_t(c)] + epsilon_);
      const float scale = gamma_.value.data[std::size_t(c)] * invstd, shift = beta_.value.data[std::size_t(c)];
      for (std::int64_t i = 0; i < n; ++i) {
        const float* x = in + (i * channels + c) * plane;
        float* y = out + (i * channels + c) * plane;
#pragma omp simd
        for (std::int64_t k = 0; k < plane; ++k) y[k] = (x[k] - mean) * scale + shift;
      }
    });
    update_running(count_);
    return output;
  }

  // dx = gamma / std * (dy - sum(dy) / M - xhat * sum(dy * xhat) / M), sums over the batch
  // (the global one when synchronized); gamma's and beta's gradients stay this rank's sums
  // (the trainer sums them).
  tensor backward_training(const tensor& grad_output) {
    const auto n = input_.dim(0), channels = input_.dim(1), plane = input_.dim(2) * input_.dim(3);
    const float* in = input_.data.data();
    const float* d_out = grad_output.data.data();
    std::vector<double> sums(static_cast<std::size_t>(2 * channels), 0.0);
    each_channel(channels, [&](std::int64_t c) {
      const float mean = mean_.data[std::size_t(c)], invstd = 1.0f / std::sqrt(variance_.data[std::size_t(c)] + epsilon_);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float* x = in + (i * channels + c) * plane;
        const float* dy = d_out + (i * channels + c) * plane;
        float s = 0, p = 0;
#pragma omp simd reduction(+ : s, p)
        for (std::int64_t k = 0; k < plane; ++k) s += dy[k], p += dy[k] * (x[k] - mean);
        sum_dy += s;
        sum_dy_xhat += double(p) * invstd;
      }
      sums[std::size_t(c)] = sum_dy;
      sums[std::size_t(channels + c)] = sum_dy_xhat;
    });
    for (std::int64_t c = 0; c < channels; ++c) {
      beta_.grad.data[std::size_t(c)] = static_cast<float>(sums[std::size_t(c)]);
      gamma_.grad.data[std::size_t(c)] = static_cast<float>(sums[std::size_t(channels + c)]);
    }
    if (reduce_) reduce_(sums);
    tensor grad_input(input_.shape);
    float* d_in = grad_input.data.data();
    each_channel(channels, [&](std::int64_t c) {
      const float mean = mean_.data[std::size_t(c)], invstd = 1.0f / std::sqrt(variance_.data[std::size_t(c)] + epsilon_);
      const auto dy_mean = static_cast<float>(sums[std::size_t(c)] / count_);
      const auto dy_xhat_mean = static_cast<float>(sums[std::size_t(channels + c)] / count_);
      const float scale = gamma_.value.data[std::size_t(c)] * invstd;
      for (std::int64_t i = 0; i < n; ++i) {
        const float* x = in + (i * channels + c) * plane;
        const float* dy = d_out + (i * channels + c) * plane;
        float* dx = d_in + (i * channels + c) * plane;
#pragma omp simd
        for (std::int64_t k = 0; k < plane; ++k)
          dx[k] = scale * (dy[k] - dy_mean - (x[k] - mean) * invstd * dy_xhat_mean);
      }
    });
    return grad_input;
  }

  // Channels are independent: each is one thread's (oneDNN's OpenMP threads), its sums in
  // one order whatever the thread count, so results do not depend on it.
  template <class Body>
  static void each_channel(std::int64_t channels, const Body& body) {
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < channels; ++c) body(c);
  }

  struct primitives {
    dnnl::batch_normalization_forward inference;
  };

  primitives& primitives_for(const dnnl::memory::dims& shape) {
    if (auto it = cache_.find(shape); it != cache_.end()) return it->second;
    using namespace dnnl;
    const auto data = plain_desc(shape);
    const auto affine = normalization_flags::use_scale | normalization_flags::use_shift;
    const batch_normalization_forward::primitive_desc inference_pd(
        {prop_kind::forward_inference, data, epsilon_,
         affine | normalization_flags::use_global_stats},
        ctx_.engine);
    return cache_.emplace(shape, primitives{batch_normalization_forward(inference_pd)}).first->second;
  }

  context& ctx_;
  float momentum_, epsilon_;
  parameter gamma_, beta_;
  tensor running_mean_, running_var_;
  tensor mean_, variance_;  // the last training batch's, for backward
  statistics_reducer reduce_;
  double count_ = 0;        // elements a channel in the last synchronized batch, all ranks'
  tensor input_;
  std::map<dnnl::memory::dims, primitives> cache_;
};

}  // namespace mimatrix::resnet::nn

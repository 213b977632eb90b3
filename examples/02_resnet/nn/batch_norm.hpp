// Batch normalization over NCHW activations on oneDNN: training forward with batch
// statistics (updating running averages), its backward, and inference with running stats.
#pragma once

#include "context.hpp"
#include "tensor.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
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

  // Training: normalizes with this batch's statistics and updates the running ones.
  tensor forward(const tensor& input) {
    input_ = input;
    auto& p = primitives_for(input.shape);
    tensor output(input.shape);
    ctx_.run(p.forward, {{DNNL_ARG_SRC, ctx_.wrap(input_)},
                                    {DNNL_ARG_SCALE, ctx_.wrap(gamma_.value)},
                                    {DNNL_ARG_SHIFT, ctx_.wrap(beta_.value)},
                                    {DNNL_ARG_MEAN, ctx_.wrap(mean_)},
                                    {DNNL_ARG_VARIANCE, ctx_.wrap(variance_)},
                                    {DNNL_ARG_DST, ctx_.wrap(output)}});
    // oneDNN's variance is biased (divides by n); the running one is unbiased, as PyTorch.
    const auto n = static_cast<float>(input.size() / mean_.size());
    const float unbias = n > 1.0f ? n / (n - 1.0f) : 1.0f;
    for (std::size_t c = 0; c < mean_.size(); ++c) {
      running_mean_.data[c] = (1 - momentum_) * running_mean_.data[c] + momentum_ * mean_.data[c];
      running_var_.data[c] =
          (1 - momentum_) * running_var_.data[c] + momentum_ * unbias * variance_.data[c];
    }
    return output;
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
  tensor backward(const tensor& grad_output) {
    auto& p = primitives_for(input_.shape);
    tensor grad_input(input_.shape);
    ctx_.run(p.backward, {{DNNL_ARG_SRC, ctx_.wrap(input_)},
                                     {DNNL_ARG_MEAN, ctx_.wrap(mean_)},
                                     {DNNL_ARG_VARIANCE, ctx_.wrap(variance_)},
                                     {DNNL_ARG_DIFF_DST, ctx_.wrap(grad_output)},
                                     {DNNL_ARG_SCALE, ctx_.wrap(gamma_.value)},
                                     // oneDNN 2.6 asks for shift too, though unused
                                     {DNNL_ARG_SHIFT, ctx_.wrap(beta_.value)},
                                     {DNNL_ARG_DIFF_SRC, ctx_.wrap(grad_input)},
                                     {DNNL_ARG_DIFF_SCALE, ctx_.wrap(gamma_.grad)},
                                     {DNNL_ARG_DIFF_SHIFT, ctx_.wrap(beta_.grad)}});
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {&gamma_, &beta_}; }
  [[nodiscard]] parameter& gamma() { return gamma_; }
  [[nodiscard]] parameter& beta() { return beta_; }
  [[nodiscard]] const tensor& running_mean() const { return running_mean_; }
  [[nodiscard]] const tensor& running_var() const { return running_var_; }

 private:
  struct primitives {
    dnnl::batch_normalization_forward forward, inference;
    dnnl::batch_normalization_backward backward;
  };

  primitives& primitives_for(const dnnl::memory::dims& shape) {
    if (auto it = cache_.find(shape); it != cache_.end()) return it->second;
    using namespace dnnl;
    const auto data = plain_desc(shape);
    const auto affine = normalization_flags::use_scale | normalization_flags::use_shift;
    const batch_normalization_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, data, epsilon_, affine}, ctx_.engine);
    const batch_normalization_forward::primitive_desc inference_pd(
        {prop_kind::forward_inference, data, epsilon_,
         affine | normalization_flags::use_global_stats},
        ctx_.engine);
    const batch_normalization_backward::primitive_desc backward_pd(
        {prop_kind::backward, data, data, epsilon_, affine}, ctx_.engine, forward_pd);
    return cache_.emplace(shape, primitives{batch_normalization_forward(forward_pd),
                                            batch_normalization_forward(inference_pd),
                                            batch_normalization_backward(backward_pd)})
        .first->second;
  }

  context& ctx_;
  float momentum_, epsilon_;
  parameter gamma_, beta_;
  tensor running_mean_, running_var_;
  tensor mean_, variance_;  // the last training batch's, for backward
  tensor input_;
  std::map<dnnl::memory::dims, primitives> cache_;
};

}  // namespace mimatrix::resnet::nn

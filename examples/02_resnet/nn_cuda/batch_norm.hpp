// Batch normalization over NCHW activations on cuDNN (spatial mode: one mean and variance a
// channel): training forward with batch statistics, updating running averages as PyTorch,
// its backward, and inference with the running statistics.
#pragma once

#include "context.hpp"
#include "descriptors.hpp"
#include "tensor.hpp"

#include <cudnn.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimatrix::resnet::nn_cuda {

// The CPU layer's semantics, which are cuDNN's too: the output is normalized with the
// biased batch variance; running = (1 - momentum) * running + momentum * batch, with the
// unbiased variance (count / (count - 1)) in the running one. cuDNN's
// exponentialAverageFactor is the momentum. Statistics are this GPU's batch only: no
// synchronized batch norm (nn::batch_norm::synchronize_with) here.
// @par Thread Safety: as its context (one thread at a time).
class batch_norm {
 public:
  batch_norm(context& ctx, std::int64_t channels, float momentum = 0.1f, float epsilon = 1e-5f)
      : ctx_(ctx), momentum_(momentum), epsilon_(epsilon), gamma_("batch_norm.gamma", {channels}),
        beta_("batch_norm.beta", {channels}), running_mean_({channels}), running_var_({channels}),
        saved_mean_({channels}), saved_inv_std_({channels}) {
    const std::vector<float> ones(static_cast<std::size_t>(channels), 1.0f);
    gamma_.value.copy_from_host(ones, ctx_.stream());
    beta_.value.fill_zero(ctx_.stream());
    running_mean_.fill_zero(ctx_.stream());
    running_var_.copy_from_host(ones, ctx_.stream());
    gamma_.grad.fill_zero(ctx_.stream());
    beta_.grad.fill_zero(ctx_.stream());
  }

  // Training: normalizes with this batch's statistics and updates the running ones.
  device_tensor forward(const device_tensor& input) {
    const auto& p = plan_for(input.shape());
    if (input.size() / static_cast<std::size_t>(input.dim(1)) < 2)
      throw std::invalid_argument("batch_norm: training needs more than one value a channel");
    input_.copy_from(input, ctx_.stream());  // owned, for backward
    device_tensor output(input.shape());
    MIMATRIX_NN_CUDA_CHECK(cudnnBatchNormalizationForwardTraining(
        ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &detail::one, &detail::zero, p.data.get(), input_.data(),
        p.data.get(), output.data(), p.channels.get(), gamma_.value.data(), beta_.value.data(), double{momentum_},
        running_mean_.data(), running_var_.data(), double{epsilon_}, saved_mean_.data(), saved_inv_std_.data()));
    return output;
  }

  // Inference: normalizes with the running statistics; no backward after it.
  device_tensor infer(const device_tensor& input) {
    const auto& p = plan_for(input.shape());
    device_tensor output(input.shape());
    MIMATRIX_NN_CUDA_CHECK(cudnnBatchNormalizationForwardInference(
        ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &detail::one, &detail::zero, p.data.get(), input.data(),
        p.data.get(), output.data(), p.channels.get(), gamma_.value.data(), beta_.value.data(),
        running_mean_.data(), running_var_.data(), double{epsilon_}));
    return output;
  }

  // After forward: returns the input's gradient; writes (overwrites) gamma's and beta's.
  device_tensor backward(const device_tensor& grad_output) {
    if (grad_output.shape() != input_.shape())
      throw std::invalid_argument("batch_norm: backward's gradient is not the last forward's shape");
    const auto& p = plan_for(input_.shape());
    device_tensor grad_input(input_.shape());
    // The batch mean and 1 / sqrt(var + epsilon) forward saved spare cuDNN recomputing them.
    MIMATRIX_NN_CUDA_CHECK(cudnnBatchNormalizationBackward(
        ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &detail::one, &detail::zero, &detail::one, &detail::zero,
        p.data.get(), input_.data(), p.data.get(), grad_output.data(), p.data.get(), grad_input.data(),
        p.channels.get(), gamma_.value.data(), gamma_.grad.data(), beta_.grad.data(), double{epsilon_},
        saved_mean_.data(), saved_inv_std_.data()));
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {&gamma_, &beta_}; }
  [[nodiscard]] parameter& gamma() { return gamma_; }
  [[nodiscard]] parameter& beta() { return beta_; }
  [[nodiscard]] const device_tensor& running_mean() const { return running_mean_; }
  [[nodiscard]] const device_tensor& running_var() const { return running_var_; }
  // For a checkpoint or a new rank taking the group's state.
  [[nodiscard]] device_tensor& running_mean() { return running_mean_; }
  [[nodiscard]] device_tensor& running_var() { return running_var_; }

 private:
  struct plan {
    detail::tensor_descriptor data;      // input, output and their gradients
    detail::tensor_descriptor channels;  // 1 x C x 1 x 1: gamma, beta, means and variances
  };

  const plan& plan_for(const dims& shape) {
    if (auto it = cache_.find(shape); it != cache_.end()) return it->second;
    if (shape.size() != 4 || shape[1] != gamma_.value.dim(0))
      throw std::invalid_argument("batch_norm: the input is not N x " + std::to_string(gamma_.value.dim(0)) +
                                  " x H x W");
    plan p{detail::make_tensor_descriptor(shape), {}};
    cudnnTensorDescriptor_t raw = nullptr;
    MIMATRIX_NN_CUDA_CHECK(cudnnCreateTensorDescriptor(&raw));
    p.channels.reset(raw);
    MIMATRIX_NN_CUDA_CHECK(cudnnDeriveBNTensorDescriptor(p.channels.get(), p.data.get(), CUDNN_BATCHNORM_SPATIAL));
    return cache_.emplace(shape, std::move(p)).first->second;
  }

  context& ctx_;
  float momentum_, epsilon_;
  parameter gamma_, beta_;
  device_tensor running_mean_, running_var_;
  device_tensor saved_mean_, saved_inv_std_;  // the last training batch's, for backward
  device_tensor input_;
  std::map<dims, plan> cache_;
};

}  // namespace mimatrix::resnet::nn_cuda

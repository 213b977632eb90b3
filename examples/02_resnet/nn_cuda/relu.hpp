// ReLU on cuDNN's activation, forward and backward, descriptors cached per input shape.
#pragma once

#include "context.hpp"
#include "descriptors.hpp"
#include "tensor.hpp"

#include <cudnn.h>

#include <map>
#include <stdexcept>
#include <vector>

namespace mimatrix::resnet::nn_cuda {

// @par Thread Safety: as its context (one thread at a time).
class relu {
 public:
  explicit relu(context& ctx) : ctx_(ctx), activation_(detail::make_activation_descriptor()) {
    MIMATRIX_NN_CUDA_CHECK(
        cudnnSetActivationDescriptor(activation_.get(), CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }

  device_tensor forward(const device_tensor& input) {
    const auto& data = descriptor_for(input.shape());
    device_tensor output(input.shape());
    MIMATRIX_NN_CUDA_CHECK(cudnnActivationForward(ctx_.cudnn(), activation_.get(), &detail::one, data.get(),
                                                  input.data(), &detail::zero, data.get(), output.data()));
    output_.copy_from(output, ctx_.stream());
    return output;
  }

  device_tensor backward(const device_tensor& grad_output) {
    if (grad_output.shape() != output_.shape())
      throw std::invalid_argument("relu: backward's gradient is not the last forward's shape");
    const auto& data = descriptor_for(output_.shape());
    device_tensor grad_input(output_.shape());
    // Only the output is kept: relu(y) = y, so (y, y) is an input/output pair with the same
    // mask (y > 0 exactly where x > 0) as the real (x, y), and stands in for it.
    MIMATRIX_NN_CUDA_CHECK(cudnnActivationBackward(ctx_.cudnn(), activation_.get(), &detail::one, data.get(),
                                                   output_.data(), data.get(), grad_output.data(), data.get(),
                                                   output_.data(), &detail::zero, data.get(), grad_input.data()));
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {}; }

 private:
  const detail::tensor_descriptor& descriptor_for(const dims& shape) {
    if (auto it = cache_.find(shape); it != cache_.end()) return it->second;
    return cache_.emplace(shape, detail::make_tensor_descriptor(shape)).first->second;
  }

  context& ctx_;
  detail::activation_descriptor activation_;
  device_tensor output_;  // the last forward's output
  std::map<dims, detail::tensor_descriptor> cache_;
};

}  // namespace mimatrix::resnet::nn_cuda

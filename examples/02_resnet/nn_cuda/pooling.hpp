// Pooling on cuDNN: global average (NCHW to NC11, before a ResNet's classifier) and max
// pooling (the ImageNet stem's 3x3, stride 2, padding 1).
#pragma once

#include "context.hpp"
#include "descriptors.hpp"
#include "tensor.hpp"

#include <cudnn.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

namespace mimatrix::resnet::nn_cuda::detail {

// A pooling's descriptors for one input shape, and the forward and backward both poolings
// run. cudnnPoolingBackward takes the forward's input and output (max pooling finds where
// each maximum came from in them), so forward keeps copies of both.
// @par Thread Safety: as its context (one thread at a time).
class pooling {
 public:
  struct plan {
    pooling_descriptor pool;
    tensor_descriptor input, output;
  };

  explicit pooling(context& ctx) : ctx_(ctx) {}

  device_tensor forward(const plan& p, const device_tensor& input, dims output_shape) {
    device_tensor output(std::move(output_shape));
    MIMATRIX_NN_CUDA_CHECK(cudnnPoolingForward(ctx_.cudnn(), p.pool.get(), &one, p.input.get(), input.data(), &zero,
                                               p.output.get(), output.data()));
    input_.copy_from(input, ctx_.stream());
    output_.copy_from(output, ctx_.stream());
    return output;
  }

  device_tensor backward(const plan& p, const device_tensor& grad_output) {
    if (grad_output.shape() != output_.shape())
      throw std::invalid_argument("pooling: backward's gradient is not the last forward's output shape");
    device_tensor grad_input(input_.shape());
    MIMATRIX_NN_CUDA_CHECK(cudnnPoolingBackward(ctx_.cudnn(), p.pool.get(), &one, p.output.get(), output_.data(),
                                                p.output.get(), grad_output.data(), p.input.get(), input_.data(),
                                                &zero, p.input.get(), grad_input.data()));
    return grad_input;
  }

  [[nodiscard]] const dims& input_shape() const { return input_.shape(); }

  // Descriptors for (window, padding, stride) over an input shape.
  static plan make_plan(cudnnPoolingMode_t mode, const dims& in, const dims& out, std::int64_t window_h,
                        std::int64_t window_w, std::int64_t padding, std::int64_t stride) {
    if (in.size() != 4) throw std::invalid_argument("pooling: the input is not N x C x H x W");
    plan p{make_pooling_descriptor(), make_tensor_descriptor(in), make_tensor_descriptor(out)};
    const int pad = to_int(padding, "padding"), step = to_int(stride, "stride");
    MIMATRIX_NN_CUDA_CHECK(cudnnSetPooling2dDescriptor(p.pool.get(), mode, CUDNN_NOT_PROPAGATE_NAN,
                                                       to_int(window_h, "window height"),
                                                       to_int(window_w, "window width"), pad, pad, step, step));
    return p;
  }

 private:
  context& ctx_;
  device_tensor input_, output_;  // the last forward's
};

}  // namespace mimatrix::resnet::nn_cuda::detail

namespace mimatrix::resnet::nn_cuda {

// @par Thread Safety: as its context (one thread at a time).
class global_average_pool {
 public:
  explicit global_average_pool(context& ctx) : pooling_(ctx) {}

  device_tensor forward(const device_tensor& input) {
    return pooling_.forward(plan_for(input.shape()), input, {input.dim(0), input.dim(1), 1, 1});
  }

  device_tensor backward(const device_tensor& grad_output) {
    return pooling_.backward(plan_for(pooling_.input_shape()), grad_output);
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {}; }

 private:
  const detail::pooling::plan& plan_for(const dims& in) {
    if (auto it = cache_.find(in); it != cache_.end()) return it->second;
    if (in.size() != 4) throw std::invalid_argument("global_average_pool: the input is not N x C x H x W");
    // The window is the whole plane, without padding, so either average mode is the mean.
    return cache_
        .emplace(in, detail::pooling::make_plan(CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, in,
                                                {in[0], in[1], 1, 1}, in[2], in[3], 0, 1))
        .first->second;
  }

  detail::pooling pooling_;
  std::map<dims, detail::pooling::plan> cache_;
};

// @par Thread Safety: as its context (one thread at a time).
class max_pool {
 public:
  max_pool(context& ctx, std::int64_t kernel, std::int64_t stride, std::int64_t padding)
      : pooling_(ctx), kernel_(kernel), stride_(stride), padding_(padding) {}

  [[nodiscard]] dims output_shape(const dims& in) const {
    return {in[0], in[1], (in[2] + 2 * padding_ - kernel_) / stride_ + 1, (in[3] + 2 * padding_ - kernel_) / stride_ + 1};
  }

  device_tensor forward(const device_tensor& input) {
    return pooling_.forward(plan_for(input.shape()), input, output_shape(input.shape()));
  }

  device_tensor backward(const device_tensor& grad_output) {
    return pooling_.backward(plan_for(pooling_.input_shape()), grad_output);
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {}; }

 private:
  const detail::pooling::plan& plan_for(const dims& in) {
    if (auto it = cache_.find(in); it != cache_.end()) return it->second;
    if (in.size() != 4) throw std::invalid_argument("max_pool: the input is not N x C x H x W");
    // Padding never wins a maximum. Overlapping windows (stride < kernel) add into the same
    // input gradient; the deterministic mode makes that sum the same run to run.
    return cache_
        .emplace(in, detail::pooling::make_plan(CUDNN_POOLING_MAX_DETERMINISTIC, in, output_shape(in), kernel_,
                                                kernel_, padding_, stride_))
        .first->second;
  }

  detail::pooling pooling_;
  std::int64_t kernel_, stride_, padding_;
  std::map<dims, detail::pooling::plan> cache_;
};

}  // namespace mimatrix::resnet::nn_cuda

// Pooling on oneDNN: global average (NCHW to NC11, before a ResNet's classifier) and max
// pooling (the ImageNet stem's 3x3, stride 2, padding 1).
#pragma once

#include "context.hpp"
#include "tensor.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
#include <vector>

namespace mimatrix::resnet::nn {

// @par Thread Safety: as its context (one thread at a time).
class global_average_pool {
 public:
  explicit global_average_pool(context& ctx) : ctx_(ctx) {}

  tensor forward(const tensor& input) {
    input_shape_ = input.shape;
    auto& p = primitives_for(input.shape);
    tensor output({input.dim(0), input.dim(1), 1, 1});
    ctx_.run(p.forward,
                      {{DNNL_ARG_SRC, ctx_.wrap(input)}, {DNNL_ARG_DST, ctx_.wrap(output)}});
    return output;
  }

  tensor backward(const tensor& grad_output) {
    auto& p = primitives_for(input_shape_);
    tensor grad_input(input_shape_);
    ctx_.run(p.backward, {{DNNL_ARG_DIFF_DST, ctx_.wrap(grad_output)},
                                     {DNNL_ARG_DIFF_SRC, ctx_.wrap(grad_input)}});
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {}; }

 private:
  struct primitives {
    dnnl::pooling_forward forward;
    dnnl::pooling_backward backward;
  };

  primitives& primitives_for(const dnnl::memory::dims& in) {
    if (auto it = cache_.find(in); it != cache_.end()) return it->second;
    using namespace dnnl;
    const auto src = plain_desc(in);
    const auto dst = plain_desc({in[0], in[1], 1, 1});
    const memory::dims kernel{in[2], in[3]}, strides{1, 1}, padding{0, 0};
    // No padding, so excluding it or not is the same average.
    const auto algo = algorithm::pooling_avg_exclude_padding;
    const pooling_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, algo, src, dst, strides, kernel, padding, padding},
        ctx_.engine);
    const pooling_backward::primitive_desc backward_pd(
        {algo, src, dst, strides, kernel, padding, padding}, ctx_.engine, forward_pd);
    return cache_.emplace(in, primitives{pooling_forward(forward_pd),
                                         pooling_backward(backward_pd)})
        .first->second;
  }

  context& ctx_;
  dnnl::memory::dims input_shape_;
  std::map<dnnl::memory::dims, primitives> cache_;
};

// @par Thread Safety: as its context (one thread at a time).
class max_pool {
 public:
  max_pool(context& ctx, std::int64_t kernel, std::int64_t stride, std::int64_t padding)
      : ctx_(ctx), kernel_(kernel), stride_(stride), padding_(padding) {}

  [[nodiscard]] dnnl::memory::dims output_shape(const dnnl::memory::dims& in) const {
    return {in[0], in[1], (in[2] + 2 * padding_ - kernel_) / stride_ + 1,
            (in[3] + 2 * padding_ - kernel_) / stride_ + 1};
  }

  tensor forward(const tensor& input) {
    input_shape_ = input.shape;
    auto& p = primitives_for(input.shape);
    tensor output(output_shape(input.shape));
    // Where each maximum came from, for backward.
    workspace_ = dnnl::memory(p.workspace, ctx_.engine);
    ctx_.run(p.forward, {{DNNL_ARG_SRC, ctx_.wrap(input)},
                                    {DNNL_ARG_DST, ctx_.wrap(output)},
                                    {DNNL_ARG_WORKSPACE, workspace_}});
    return output;
  }

  tensor backward(const tensor& grad_output) {
    auto& p = primitives_for(input_shape_);
    tensor grad_input(input_shape_);
    ctx_.run(p.backward, {{DNNL_ARG_DIFF_DST, ctx_.wrap(grad_output)},
                                     {DNNL_ARG_WORKSPACE, workspace_},
                                     {DNNL_ARG_DIFF_SRC, ctx_.wrap(grad_input)}});
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {}; }

 private:
  struct primitives {
    dnnl::pooling_forward forward;
    dnnl::pooling_backward backward;
    dnnl::memory::desc workspace;
  };

  primitives& primitives_for(const dnnl::memory::dims& in) {
    if (auto it = cache_.find(in); it != cache_.end()) return it->second;
    using namespace dnnl;
    const auto src = plain_desc(in);
    const auto dst = plain_desc(output_shape(in));
    const memory::dims kernel{kernel_, kernel_}, strides{stride_, stride_},
        padding{padding_, padding_};
    const pooling_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, algorithm::pooling_max, src, dst, strides, kernel, padding,
         padding},
        ctx_.engine);
    const pooling_backward::primitive_desc backward_pd(
        {algorithm::pooling_max, src, dst, strides, kernel, padding, padding}, ctx_.engine,
        forward_pd);
    return cache_.emplace(in, primitives{pooling_forward(forward_pd),
                                         pooling_backward(backward_pd),
                                         forward_pd.workspace_desc()})
        .first->second;
  }

  context& ctx_;
  std::int64_t kernel_, stride_, padding_;
  dnnl::memory::dims input_shape_;
  dnnl::memory workspace_;
  std::map<dnnl::memory::dims, primitives> cache_;
};

}  // namespace mimatrix::resnet::nn

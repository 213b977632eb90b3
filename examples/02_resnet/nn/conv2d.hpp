// A 2-D convolution without bias (ResNets put batch norm after every convolution), on
// oneDNN: forward, backward data and backward weights, primitives cached per input shape.
#pragma once

#include "context.hpp"
#include "tensor.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace mimatrix::resnet::nn {

// @par Thread Safety: as its context (one thread at a time).
class conv2d {
 public:
  conv2d(context& ctx, std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         std::int64_t stride, std::int64_t padding, std::mt19937& rng)
      : ctx_(ctx), stride_(stride), padding_(padding),
        weight_("conv2d.weight", {out_channels, in_channels, kernel, kernel}) {
    // He initialization: keeps the activations' variance through ReLUs.
    std::normal_distribution<float> normal(
        0.0f, std::sqrt(2.0f / static_cast<float>(in_channels * kernel * kernel)));
    for (float& w : weight_.value.data) w = normal(rng);
  }

  [[nodiscard]] dnnl::memory::dims output_shape(const dnnl::memory::dims& in) const {
    const auto& w = weight_.value.shape;
    return {in[0], w[0], (in[2] + 2 * padding_ - w[2]) / stride_ + 1,
            (in[3] + 2 * padding_ - w[3]) / stride_ + 1};
  }

  tensor forward(const tensor& input) {
    input_ = input;  // backward weights needs it
    auto& p = primitives_for(input.shape);
    tensor output(output_shape(input.shape));
    ctx_.run(p.forward, {{DNNL_ARG_SRC, ctx_.wrap(input_)},
                                    {DNNL_ARG_WEIGHTS, ctx_.wrap(weight_.value)},
                                    {DNNL_ARG_DST, ctx_.wrap(output)}});
    return output;
  }

  // Returns the input's gradient; writes the weight's into parameters()[0]->grad.
  tensor backward(const tensor& grad_output) {
    auto& p = primitives_for(input_.shape);
    tensor grad_input(input_.shape);
    ctx_.run(p.backward_data, {{DNNL_ARG_DIFF_DST, ctx_.wrap(grad_output)},
                                          {DNNL_ARG_WEIGHTS, ctx_.wrap(weight_.value)},
                                          {DNNL_ARG_DIFF_SRC, ctx_.wrap(grad_input)}});
    ctx_.run(p.backward_weights, {{DNNL_ARG_SRC, ctx_.wrap(input_)},
                                             {DNNL_ARG_DIFF_DST, ctx_.wrap(grad_output)},
                                             {DNNL_ARG_DIFF_WEIGHTS, ctx_.wrap(weight_.grad)}});
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {&weight_}; }
  [[nodiscard]] parameter& weight() { return weight_; }

 private:
  struct primitives {
    dnnl::convolution_forward forward;
    dnnl::convolution_backward_data backward_data;
    dnnl::convolution_backward_weights backward_weights;
  };

  primitives& primitives_for(const dnnl::memory::dims& in) {
    if (auto it = cache_.find(in); it != cache_.end()) return it->second;
    using namespace dnnl;
    const auto src = plain_desc(in);
    const auto weights = plain_desc(weight_.value.shape);
    const auto dst = plain_desc(output_shape(in));
    const memory::dims strides{stride_, stride_}, padding{padding_, padding_};
    const auto algo = algorithm::convolution_direct;
    const convolution_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, algo, src, weights, dst, strides, padding, padding},
        ctx_.engine);
    const convolution_backward_data::primitive_desc data_pd(
        {algo, src, weights, dst, strides, padding, padding}, ctx_.engine, forward_pd);
    const convolution_backward_weights::primitive_desc weights_pd(
        {algo, src, weights, dst, strides, padding, padding}, ctx_.engine, forward_pd);
    return cache_.emplace(in, primitives{convolution_forward(forward_pd),
                                         convolution_backward_data(data_pd),
                                         convolution_backward_weights(weights_pd)})
        .first->second;
  }

  context& ctx_;
  std::int64_t stride_, padding_;
  parameter weight_;
  tensor input_;
  std::map<dnnl::memory::dims, primitives> cache_;
};

}  // namespace mimatrix::resnet::nn

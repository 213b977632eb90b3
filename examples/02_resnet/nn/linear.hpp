// A fully connected layer with bias on oneDNN's inner product: input N x F (an NCHW input is
// flattened, so it takes global_average_pool's N x C x 1 x 1 directly), output N x O.
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
class linear {
 public:
  linear(context& ctx, std::int64_t in_features, std::int64_t out_features, std::mt19937& rng)
      : ctx_(ctx), weight_("linear.weight", {out_features, in_features}),
        bias_("linear.bias", {out_features}) {
    // PyTorch's default: uniform in +-1/sqrt(fan_in), weights and bias alike.
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
    std::uniform_real_distribution<float> uniform(-bound, bound);
    for (float& w : weight_.value.data) w = uniform(rng);
    for (float& b : bias_.value.data) b = uniform(rng);
  }

  tensor forward(const tensor& input) {
    input_shape_ = input.shape;
    input_ = flat(input);
    auto& p = primitives_for(input_.shape);
    tensor output({input_.dim(0), weight_.value.dim(0)});
    ctx_.run(p.forward, {{DNNL_ARG_SRC, ctx_.wrap(input_)},
                                    {DNNL_ARG_WEIGHTS, ctx_.wrap(weight_.value)},
                                    {DNNL_ARG_BIAS, ctx_.wrap(bias_.value)},
                                    {DNNL_ARG_DST, ctx_.wrap(output)}});
    return output;
  }

  // Returns the input's gradient in the input's shape; writes the weight's and bias's.
  tensor backward(const tensor& grad_output) {
    auto& p = primitives_for(input_.shape);
    tensor grad_input(input_.shape);
    ctx_.run(p.backward_data, {{DNNL_ARG_DIFF_DST, ctx_.wrap(grad_output)},
                                          {DNNL_ARG_WEIGHTS, ctx_.wrap(weight_.value)},
                                          {DNNL_ARG_DIFF_SRC, ctx_.wrap(grad_input)}});
    ctx_.run(p.backward_weights, {{DNNL_ARG_SRC, ctx_.wrap(input_)},
                                             {DNNL_ARG_DIFF_DST, ctx_.wrap(grad_output)},
                                             {DNNL_ARG_DIFF_WEIGHTS, ctx_.wrap(weight_.grad)},
                                             {DNNL_ARG_DIFF_BIAS, ctx_.wrap(bias_.grad)}});
    grad_input.shape = input_shape_;
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {&weight_, &bias_}; }
  /// The last forward's input, N x F: sufficient-factor broadcasting sends it as V.
  [[nodiscard]] const tensor& last_input() const { return input_; }
  [[nodiscard]] parameter& weight() { return weight_; }
  [[nodiscard]] parameter& bias() { return bias_; }

 private:
  struct primitives {
    dnnl::inner_product_forward forward;
    dnnl::inner_product_backward_data backward_data;
    dnnl::inner_product_backward_weights backward_weights;
  };

  static tensor flat(const tensor& t) {
    tensor f = t;
    f.shape = {t.dim(0), static_cast<std::int64_t>(t.size()) / t.dim(0)};
    return f;
  }

  primitives& primitives_for(const dnnl::memory::dims& in) {
    if (auto it = cache_.find(in); it != cache_.end()) return it->second;
    using namespace dnnl;
    const auto src = plain_desc(in);
    const auto weights = plain_desc(weight_.value.shape);
    const auto bias = plain_desc(bias_.value.shape);
    const auto dst = plain_desc({in[0], weight_.value.dim(0)});
    const inner_product_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, src, weights, bias, dst}, ctx_.engine);
    const inner_product_backward_data::primitive_desc data_pd({src, weights, dst}, ctx_.engine,
                                                              forward_pd);
    const inner_product_backward_weights::primitive_desc weights_pd(
        {src, weights, bias, dst}, ctx_.engine, forward_pd);
    return cache_.emplace(in, primitives{inner_product_forward(forward_pd),
                                         inner_product_backward_data(data_pd),
                                         inner_product_backward_weights(weights_pd)})
        .first->second;
  }

  context& ctx_;
  parameter weight_, bias_;
  dnnl::memory::dims input_shape_;
  tensor input_;  // flattened to N x F
  std::map<dnnl::memory::dims, primitives> cache_;
};

}  // namespace mimatrix::resnet::nn

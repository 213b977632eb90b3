// ReLU on oneDNN's eltwise primitives, forward and backward, cached per input shape.
#pragma once

#include "context.hpp"
#include "tensor.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <utility>
#include <vector>

namespace mimatrix::resnet::nn {

// @par Thread Safety: as its context (one thread at a time).
class relu {
 public:
  explicit relu(context& ctx) : ctx_(ctx) {}

  // Keeps the input for backward: pass it as an rvalue to lend it rather than copy it.
  tensor forward(tensor input) {
    input_ = std::move(input);
    auto& p = primitives_for(input_.shape);
    tensor output(input_.shape);
    ctx_.run(p.forward,
                      {{DNNL_ARG_SRC, ctx_.wrap(input_)}, {DNNL_ARG_DST, ctx_.wrap(output)}});
    return output;
  }

  tensor backward(const tensor& grad_output) {
    auto& p = primitives_for(input_.shape);
    tensor grad_input(input_.shape);
    ctx_.run(p.backward, {{DNNL_ARG_SRC, ctx_.wrap(input_)},
                                     {DNNL_ARG_DIFF_DST, ctx_.wrap(grad_output)},
                                     {DNNL_ARG_DIFF_SRC, ctx_.wrap(grad_input)}});
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {}; }

 private:
  struct primitives {
    dnnl::eltwise_forward forward;
    dnnl::eltwise_backward backward;
  };

  primitives& primitives_for(const dnnl::memory::dims& shape) {
    if (auto it = cache_.find(shape); it != cache_.end()) return it->second;
    using namespace dnnl;
    const auto data = plain_desc(shape);
    const eltwise_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, algorithm::eltwise_relu, data, 0.0f, 0.0f}, ctx_.engine);
    const eltwise_backward::primitive_desc backward_pd(
        {algorithm::eltwise_relu, data, data, 0.0f, 0.0f}, ctx_.engine, forward_pd);
    return cache_.emplace(shape, primitives{eltwise_forward(forward_pd),
                                            eltwise_backward(backward_pd)})
        .first->second;
  }

  context& ctx_;
  tensor input_;
  std::map<dnnl::memory::dims, primitives> cache_;
};

}  // namespace mimatrix::resnet::nn

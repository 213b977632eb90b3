// A 2-D convolution without bias (ResNets put batch norm after every convolution), on
// oneDNN: forward, backward data and backward weights, primitives cached per input shape,
// in the layouts oneDNN runs fastest, behind plain NCHW/OIHW tensors.
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
    auto& p = primitives_for(input.shape);
    tensor output(output_shape(input.shape));
    // The input in the primitive's layout, kept (owned: the caller's may go) for backward.
    src_ = dnnl::memory(p.forward_pd.src_desc(), ctx_.engine);
    ctx_.run(dnnl::reorder(ctx_.wrap(input), src_), {{DNNL_ARG_FROM, ctx_.wrap(input)}, {DNNL_ARG_TO, src_}});
    const dnnl::memory weights = p.to_inner(ctx_, ctx_.wrap(weight_.value), p.forward_pd.weights_desc());
    const dnnl::memory dst = p.inner_or(ctx_, ctx_.wrap(output), p.forward_pd.dst_desc());
    ctx_.run(p.forward, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    p.to_plain(ctx_, dst, ctx_.wrap(output));
    input_shape_ = input.shape;
    return output;
  }

  // Returns the input's gradient; writes the weight's into parameters()[0]->grad.
  tensor backward(const tensor& grad_output) {
    auto& p = primitives_for(input_shape_);
    tensor grad_input(input_shape_);
    const dnnl::memory diff_dst = p.to_inner(ctx_, ctx_.wrap(grad_output), p.data_pd.diff_dst_desc());
    const dnnl::memory weights = p.to_inner(ctx_, ctx_.wrap(weight_.value), p.data_pd.weights_desc());
    const dnnl::memory diff_src = p.inner_or(ctx_, ctx_.wrap(grad_input), p.data_pd.diff_src_desc());
    ctx_.run(p.backward_data, {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, diff_src}});
    p.to_plain(ctx_, diff_src, ctx_.wrap(grad_input));
    const dnnl::memory diff_dst_w = p.weights_pd.diff_dst_desc() == diff_dst.get_desc()
                                        ? diff_dst
                                        : p.to_inner(ctx_, ctx_.wrap(grad_output), p.weights_pd.diff_dst_desc());
    const dnnl::memory src = p.weights_pd.src_desc() == src_.get_desc()
                                 ? src_
                                 : p.to_inner(ctx_, src_, p.weights_pd.src_desc());
    const dnnl::memory diff_weights = p.inner_or(ctx_, ctx_.wrap(weight_.grad), p.weights_pd.diff_weights_desc());
    ctx_.run(p.backward_weights, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst_w}, {DNNL_ARG_DIFF_WEIGHTS, diff_weights}});
    p.to_plain(ctx_, diff_weights, ctx_.wrap(weight_.grad));
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {&weight_}; }
  [[nodiscard]] parameter& weight() { return weight_; }

 private:
  // The primitives let oneDNN choose its layouts (`any`): on x86 its blocked ones (nChw16c)
  // run the direct JIT kernels, several times faster than the gemm path plain NCHW gets.
  // Tensors stay plain outside: they are reordered in and out at the layer's edges.
  struct primitives {
    dnnl::convolution_forward::primitive_desc forward_pd;
    dnnl::convolution_backward_data::primitive_desc data_pd;
    dnnl::convolution_backward_weights::primitive_desc weights_pd;
    dnnl::convolution_forward forward;
    dnnl::convolution_backward_data backward_data;
    dnnl::convolution_backward_weights backward_weights;

    // `plain` as `inner` wants it: itself, or reordered into a new buffer.
    static dnnl::memory to_inner(context& ctx, const dnnl::memory& plain, const dnnl::memory::desc& inner) {
      if (plain.get_desc() == inner) return plain;
      dnnl::memory m(inner, ctx.engine);
      ctx.run(dnnl::reorder(plain, m), {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, m}});
      return m;
    }
    // Where a primitive writes: the plain tensor itself when the layouts agree.
    static dnnl::memory inner_or(context& ctx, const dnnl::memory& plain, const dnnl::memory::desc& inner) {
      return plain.get_desc() == inner ? plain : dnnl::memory(inner, ctx.engine);
    }
    static void to_plain(context& ctx, const dnnl::memory& inner, const dnnl::memory& plain) {
      if (inner.get_data_handle() == plain.get_data_handle()) return;
      ctx.run(dnnl::reorder(inner, plain), {{DNNL_ARG_FROM, inner}, {DNNL_ARG_TO, plain}});
    }
  };

  primitives& primitives_for(const dnnl::memory::dims& in) {
    if (auto it = cache_.find(in); it != cache_.end()) return it->second;
    using namespace dnnl;
    using tag = memory::format_tag;
    const memory::desc src(in, memory::data_type::f32, tag::any);
    const memory::desc weights(weight_.value.shape, memory::data_type::f32, tag::any);
    const memory::desc dst(output_shape(in), memory::data_type::f32, tag::any);
    const memory::dims strides{stride_, stride_}, padding{padding_, padding_};
    const auto algo = algorithm::convolution_direct;
    const convolution_forward::primitive_desc forward_pd(
        {prop_kind::forward_training, algo, src, weights, dst, strides, padding, padding}, ctx_.engine);
    const convolution_backward_data::primitive_desc data_pd(
        {algo, src, weights, dst, strides, padding, padding}, ctx_.engine, forward_pd);
    const convolution_backward_weights::primitive_desc weights_pd(
        {algo, src, weights, dst, strides, padding, padding}, ctx_.engine, forward_pd);
    return cache_.emplace(in, primitives{forward_pd, data_pd, weights_pd, convolution_forward(forward_pd),
                                         convolution_backward_data(data_pd),
                                         convolution_backward_weights(weights_pd)})
        .first->second;
  }

  context& ctx_;
  std::int64_t stride_, padding_;
  parameter weight_;
  dnnl::memory::dims input_shape_;
  dnnl::memory src_;  // the last forward's input, in the forward primitive's layout
  std::map<dnnl::memory::dims, primitives> cache_;
};

}  // namespace mimatrix::resnet::nn

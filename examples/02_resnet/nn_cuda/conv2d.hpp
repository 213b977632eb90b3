// A 2-D convolution without bias (ResNets put batch norm after every convolution), on cuDNN:
// forward, backward data and backward filter, with descriptors and algorithms chosen once
// per input shape, on plain NCHW/OIHW tensors.
#pragma once

#include "context.hpp"
#include "descriptors.hpp"
#include "tensor.hpp"

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace mimatrix::resnet::nn_cuda {

// @par Thread Safety: as its context (one thread at a time).
class conv2d {
 public:
  conv2d(context& ctx, std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         std::int64_t stride, std::int64_t padding, std::mt19937& rng)
      : ctx_(ctx), stride_(stride), padding_(padding),
        weight_("conv2d.weight", {out_channels, in_channels, kernel, kernel}),
        filter_(detail::make_filter_descriptor(weight_.value.shape())) {
    // He initialization, drawn on the host in the CPU layer's order: the same rng state
    // gives the same weights on either.
    std::normal_distribution<float> normal(
        0.0f, std::sqrt(2.0f / static_cast<float>(in_channels * kernel * kernel)));
    std::vector<float> w(weight_.value.size());
    for (float& v : w) v = normal(rng);
    weight_.value.copy_from_host(w, ctx_.stream());
    weight_.grad.fill_zero(ctx_.stream());
  }

  [[nodiscard]] dims output_shape(const dims& in) const {
    const auto& w = weight_.value.shape();
    return {in[0], w[0], (in[2] + 2 * padding_ - w[2]) / stride_ + 1, (in[3] + 2 * padding_ - w[3]) / stride_ + 1};
  }

  device_tensor forward(const device_tensor& input) {
    const auto& p = plan_for(input.shape());
    device_tensor output(output_shape(input.shape()));
    input_.copy_from(input, ctx_.stream());  // owned (the caller's may go): backward filter reads it
    MIMATRIX_NN_CUDA_CHECK(cudnnConvolutionForward(
        ctx_.cudnn(), &detail::one, p.input.get(), input_.data(), filter_.get(), weight_.value.data(),
        p.convolution.get(), p.forward, ctx_.workspace(p.workspace_bytes), p.workspace_bytes, &detail::zero,
        p.output.get(), output.data()));
    return output;
  }

  // Returns the input's gradient; writes the weight's into parameters()[0]->grad.
  device_tensor backward(const device_tensor& grad_output) {
    if (grad_output.shape() != output_shape(input_.shape()))
      throw std::invalid_argument("conv2d: backward's gradient is not the last forward's output shape");
    const auto& p = plan_for(input_.shape());
    device_tensor grad_input(input_.shape());
    void* workspace = ctx_.workspace(p.workspace_bytes);
    MIMATRIX_NN_CUDA_CHECK(cudnnConvolutionBackwardData(
        ctx_.cudnn(), &detail::one, filter_.get(), weight_.value.data(), p.output.get(), grad_output.data(),
        p.convolution.get(), p.backward_data, workspace, p.workspace_bytes, &detail::zero, p.input.get(),
        grad_input.data()));
    MIMATRIX_NN_CUDA_CHECK(cudnnConvolutionBackwardFilter(
        ctx_.cudnn(), &detail::one, p.input.get(), input_.data(), p.output.get(), grad_output.data(),
        p.convolution.get(), p.backward_filter, workspace, p.workspace_bytes, &detail::zero, filter_.get(),
        weight_.grad.data()));
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {&weight_}; }
  [[nodiscard]] parameter& weight() { return weight_; }

 private:
  // Descriptors and algorithms for one input shape; one workspace covers all three calls.
  struct plan {
    detail::tensor_descriptor input, output;
    detail::convolution_descriptor convolution;
    cudnnConvolutionFwdAlgo_t forward{};
    cudnnConvolutionBwdDataAlgo_t backward_data{};
    cudnnConvolutionBwdFilterAlgo_t backward_filter{};
    std::size_t workspace_bytes = 0;
  };

  // The fastest algorithm cuDNN measured that ran (results come sorted by time), runs with
  // the descriptor's math type (Find may also time other math types: a tensor-op result
  // under FMA math can be refused when used) and tells its workspace (`workspace(algo,
  // &bytes)`). Prefers results of the descriptor's own math type.
  template <class Perf, class Workspace>
  static std::pair<decltype(Perf{}.algo), std::size_t> fastest(const Perf* results, int count, cudnnMathType_t math,
                                                                 const Workspace& workspace, const char* what) {
    for (const bool same_math : {true, false})
      for (int i = 0; i < count; ++i) {
        std::size_t bytes = 0;
        if (results[i].status != CUDNN_STATUS_SUCCESS || (same_math && results[i].mathType != math)) continue;
        if (workspace(results[i].algo, &bytes) == CUDNN_STATUS_SUCCESS) return {results[i].algo, bytes};
      }
    throw std::runtime_error(std::string("conv2d: cuDNN found no ") + what + " algorithm for this shape");
  }

  const plan& plan_for(const dims& in) {
    if (auto it = cache_.find(in); it != cache_.end()) return it->second;
    if (in.size() != 4 || in[1] != weight_.value.dim(1))
      throw std::invalid_argument("conv2d: the input is not N x " + std::to_string(weight_.value.dim(1)) +
                                  " x H x W");
    plan p{detail::make_tensor_descriptor(in), detail::make_tensor_descriptor(output_shape(in)),
           detail::make_convolution_descriptor()};
    const int pad = detail::to_int(padding_, "padding"), stride = detail::to_int(stride_, "stride");
    // Cross-correlation, as oneDNN's (and every framework's) "convolution".
    MIMATRIX_NN_CUDA_CHECK(cudnnSetConvolution2dDescriptor(p.convolution.get(), pad, pad, stride, stride, 1, 1,
                                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // FMA math keeps float32 exact to the CPU layers; the default lets Ampere and later use TF32.
    const cudnnMathType_t math = ctx_.tensor_float32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    MIMATRIX_NN_CUDA_CHECK(cudnnSetConvolutionMathType(p.convolution.get(), math));
    // cudnnFind* runs each algorithm once (with memory it allocates itself: a cudaFree,
    // which waits for the whole device) and reports times; done once per shape, so a
    // training run pays it in its first step, before its first collective.
    const auto h = ctx_.cudnn();
    int count = 0;
    std::size_t bytes[3] = {};
    cudnnConvolutionFwdAlgoPerf_t forward[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    MIMATRIX_NN_CUDA_CHECK(cudnnFindConvolutionForwardAlgorithm(h, p.input.get(), filter_.get(), p.convolution.get(),
                                                                p.output.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                                &count, forward));
    std::tie(p.forward, bytes[0]) = fastest(forward, count, math, [&](cudnnConvolutionFwdAlgo_t a, std::size_t* b) {
      return cudnnGetConvolutionForwardWorkspaceSize(h, p.input.get(), filter_.get(), p.convolution.get(),
                                                     p.output.get(), a, b);
    }, "forward");
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    MIMATRIX_NN_CUDA_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, filter_.get(), p.output.get(),
                                                                     p.convolution.get(), p.input.get(),
                                                                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
                                                                     data));
    std::tie(p.backward_data, bytes[1]) = fastest(data, count, math, [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t* b) {
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, filter_.get(), p.output.get(), p.convolution.get(),
                                                          p.input.get(), a, b);
    }, "backward data");
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    MIMATRIX_NN_CUDA_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, p.input.get(), p.output.get(),
                                                                       p.convolution.get(), filter_.get(),
                                                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                                       &count, filter));
    std::tie(p.backward_filter, bytes[2]) =
        fastest(filter, count, math, [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t* b) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.input.get(), p.output.get(), p.convolution.get(),
                                                                filter_.get(), a, b);
        }, "backward filter");
    p.workspace_bytes = std::max({bytes[0], bytes[1], bytes[2]});
    return cache_.emplace(in, std::move(p)).first->second;
  }

  context& ctx_;
  std::int64_t stride_, padding_;
  parameter weight_;
  detail::filter_descriptor filter_;
  device_tensor input_;  // the last forward's input
  std::map<dims, plan> cache_;
};

}  // namespace mimatrix::resnet::nn_cuda

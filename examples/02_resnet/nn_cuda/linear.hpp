// A fully connected layer with bias on cuBLAS: input N x F (an NCHW input is flattened, so it
// takes global_average_pool's N x C x 1 x 1 directly), output N x O, weight O x F row-major.
#pragma once

#include "context.hpp"
#include "descriptors.hpp"
#include "tensor.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimatrix::resnet::nn_cuda::detail {

// Kernels (linear.cu): out[r][c] = bias[c] for every row; sums[c] = sum over r of in[r][c].
void broadcast_rows(const float* bias, std::int64_t rows, std::int64_t cols, float* out, cudaStream_t stream);
void column_sums(const float* in, std::int64_t rows, std::int64_t cols, float* sums, cudaStream_t stream);

}  // namespace mimatrix::resnet::nn_cuda::detail

namespace mimatrix::resnet::nn_cuda {

// cuBLAS is column-major: it sees a row-major R x C matrix as its C x R transpose (leading
// dimension C). So each product is computed transposed, where every operand is one cuBLAS
// sees directly or transposes itself:
//   forward           Y = X W^T + b   as  Y^T  = (W^T)^T X^T   gemm(T, N; m O, n N, k F)
//   backward data     dX = dY W       as  dX^T = W^T dY^T      gemm(N, N; m F, n N, k O)
//   backward weights  dW = dY^T X     as  dW^T = X^T (dY^T)^T  gemm(N, T; m F, n O, k N)
// The bias is written first and the product added to it (beta = 1).
// @par Thread Safety: as its context (one thread at a time).
class linear {
 public:
  linear(context& ctx, std::int64_t in_features, std::int64_t out_features, std::mt19937& rng)
      : ctx_(ctx), weight_("linear.weight", {out_features, in_features}), bias_("linear.bias", {out_features}) {
    // PyTorch's default, drawn on the host in the CPU layer's order (weights, then bias).
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
    std::uniform_real_distribution<float> uniform(-bound, bound);
    std::vector<float> w(weight_.value.size()), b(bias_.value.size());
    for (float& v : w) v = uniform(rng);
    for (float& v : b) v = uniform(rng);
    weight_.value.copy_from_host(w, ctx_.stream());
    bias_.value.copy_from_host(b, ctx_.stream());
    weight_.grad.fill_zero(ctx_.stream());
    bias_.grad.fill_zero(ctx_.stream());
  }

  device_tensor forward(const device_tensor& input) {
    const std::int64_t n = input.dim(0), f = weight_.value.dim(1), o = weight_.value.dim(0);
    if (n <= 0 || static_cast<std::int64_t>(input.size()) != n * f)
      throw std::invalid_argument("linear: the input does not flatten to N x " + std::to_string(f));
    input_shape_ = input.shape();
    input_.copy_from(input, ctx_.stream());  // owned: backward weights reads it
    input_.reshape({n, f});
    device_tensor output({n, o});
    detail::broadcast_rows(bias_.value.data(), n, o, output.data(), ctx_.stream());
    MIMATRIX_NN_CUDA_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, to_int(o), to_int(n), to_int(f),
                                       &detail::one, weight_.value.data(), to_int(f), input_.data(), to_int(f),
                                       &detail::one, output.data(), to_int(o)));
    return output;
  }

  // Returns the input's gradient in the input's shape; writes the weight's and bias's.
  device_tensor backward(const device_tensor& grad_output) {
    const std::int64_t n = input_.dim(0), f = weight_.value.dim(1), o = weight_.value.dim(0);
    if (grad_output.shape() != dims{n, o})
      throw std::invalid_argument("linear: backward's gradient is not the last forward's N x O");
    device_tensor grad_input({n, f});
    MIMATRIX_NN_CUDA_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, to_int(f), to_int(n), to_int(o),
                                       &detail::one, weight_.value.data(), to_int(f), grad_output.data(), to_int(o),
                                       &detail::zero, grad_input.data(), to_int(f)));
    MIMATRIX_NN_CUDA_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, to_int(f), to_int(o), to_int(n),
                                       &detail::one, input_.data(), to_int(f), grad_output.data(), to_int(o),
                                       &detail::zero, weight_.grad.data(), to_int(f)));
    detail::column_sums(grad_output.data(), n, o, bias_.grad.data(), ctx_.stream());
    grad_input.reshape(input_shape_);
    return grad_input;
  }

  [[nodiscard]] std::vector<parameter*> parameters() { return {&weight_, &bias_}; }
  /// The last forward's input, N x F: sufficient-factor broadcasting sends it as V.
  [[nodiscard]] const device_tensor& last_input() const { return input_; }
  [[nodiscard]] parameter& weight() { return weight_; }
  [[nodiscard]] parameter& bias() { return bias_; }

 private:
  static int to_int(std::int64_t v) { return detail::to_int(v, "linear: a matrix dimension"); }

  context& ctx_;
  parameter weight_, bias_;
  dims input_shape_;
  device_tensor input_;  // flattened to N x F
};

}  // namespace mimatrix::resnet::nn_cuda

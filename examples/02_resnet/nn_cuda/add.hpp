// The residual add on the GPU: output = a + b; both inputs' gradient is the output's.
#pragma once

#include "context.hpp"
#include "tensor.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>

namespace mimatrix::resnet::nn_cuda::detail {

// Kernel (add.cu): out[i] = a[i] + b[i].
void add_elementwise(const float* a, const float* b, std::int64_t n, float* out, cudaStream_t stream);

}  // namespace mimatrix::resnet::nn_cuda::detail

namespace mimatrix::resnet::nn_cuda {

// Stateless like the CPU one; its functions take the context whose stream they run on.
// @par Thread Safety: as the context passed in.
struct add {
  [[nodiscard]] static device_tensor forward(context& ctx, const device_tensor& a, const device_tensor& b) {
    if (a.shape() != b.shape()) throw std::invalid_argument("add: the inputs' shapes differ");
    device_tensor out(a.shape());
    detail::add_elementwise(a.data(), b.data(), static_cast<std::int64_t>(a.size()), out.data(), ctx.stream());
    return out;
  }
  // into += other, in place: the residual add without a new tensor (what the models do).
  static void accumulate(context& ctx, device_tensor& into, const device_tensor& other) {
    if (into.shape() != other.shape()) throw std::invalid_argument("add: the inputs' shapes differ");
    detail::add_elementwise(into.data(), other.data(), static_cast<std::int64_t>(into.size()), into.data(),
                            ctx.stream());
  }
  // The gradient of both a and b: a copy of the output's.
  [[nodiscard]] static device_tensor backward(context& ctx, const device_tensor& grad_output) {
    device_tensor grad;
    grad.copy_from(grad_output, ctx.stream());
    return grad;
  }
};

}  // namespace mimatrix::resnet::nn_cuda

// x *= factor on the GPU (cuBLAS's scal), queued on the context's stream.
#pragma once

#include "check.hpp"
#include "context.hpp"
#include "tensor.hpp"

#include <cublas_v2.h>

#include <climits>
#include <stdexcept>

namespace mimatrix::resnet::nn_cuda {

inline void scale(context& ctx, device_tensor& x, float factor) {
  if (x.size() == 0) return;
  if (x.size() > std::size_t(INT_MAX)) throw std::invalid_argument("nn_cuda::scale: more than INT_MAX elements");
  MIMATRIX_NN_CUDA_CHECK(cublasSscal(ctx.cublas(), int(x.size()), &factor, x.data(), 1));
}

}  // namespace mimatrix::resnet::nn_cuda

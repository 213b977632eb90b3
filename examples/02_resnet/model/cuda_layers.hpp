// The GPU layer set (cuDNN, cuBLAS: nn_cuda/) for the models, in .cu units; see layers.hpp.
#pragma once

#include "nn_cuda/add.hpp"
#include "nn_cuda/batch_norm.hpp"
#include "nn_cuda/context.hpp"
#include "nn_cuda/conv2d.hpp"
#include "nn_cuda/linear.hpp"
#include "nn_cuda/pooling.hpp"
#include "nn_cuda/relu.hpp"
#include "nn_cuda/tensor.hpp"

namespace mimatrix::resnet::model {

/// @par Thread Safety: stateless; its layers are as their context (one stream, one thread).
struct cuda_layers {
  using context = nn_cuda::context;
  using tensor = nn_cuda::device_tensor;
  using parameter = nn_cuda::parameter;
  using conv2d = nn_cuda::conv2d;
  using batch_norm = nn_cuda::batch_norm;
  using relu = nn_cuda::relu;
  using max_pool = nn_cuda::max_pool;
  using global_average_pool = nn_cuda::global_average_pool;
  using linear = nn_cuda::linear;

  static void accumulate(context& ctx, tensor& into, const tensor& other) { nn_cuda::add::accumulate(ctx, into, other); }
};

}  // namespace mimatrix::resnet::model

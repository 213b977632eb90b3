// The layer sets a model is built from: the CPU's (oneDNN) here; the GPU's (cuDNN, cuBLAS)
// in cuda_layers.hpp, for .cu units. A model names its layers through one of them, so the
// same model code runs above both.
#pragma once

#include "nn/add.hpp"
#include "nn/batch_norm.hpp"
#include "nn/context.hpp"
#include "nn/conv2d.hpp"
#include "nn/linear.hpp"
#include "nn/pooling.hpp"
#include "nn/relu.hpp"
#include "nn/tensor.hpp"

namespace mimatrix::resnet::model {

/// @par Thread Safety: stateless; its layers are as their context (one thread at a time).
struct cpu_layers {
  using context = nn::context;
  using tensor = nn::tensor;
  using parameter = nn::parameter;
  using conv2d = nn::conv2d;
  using batch_norm = nn::batch_norm;
  using relu = nn::relu;
  using max_pool = nn::max_pool;
  using global_average_pool = nn::global_average_pool;
  using linear = nn::linear;

  static void accumulate(context&, tensor& into, const tensor& other) { nn::add::accumulate(into, other); }
};

}  // namespace mimatrix::resnet::model

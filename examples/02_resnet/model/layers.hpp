// The layer sets a model is built from: the CPU's (oneDNN) here; the GPU's (cuDNN, cuBLAS)
// in cuda_layers.hpp, for .cu units. A model names its layers through one of them, so the
// same model code runs above both.
#pragma once

#include "nn/batch_norm.hpp"
#include "nn/context.hpp"
#include "nn/conv2d.hpp"
#include "nn/linear.hpp"
#include "nn/pooling.hpp"
#include "nn/relu.hpp"
#include "nn/tensor.hpp"

#include <cstdint>
#include <stdexcept>

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

  /// into += other, in place (the residual add without a copy).
  static void accumulate(context&, tensor& into, const tensor& other) {
    if (into.shape != other.shape) throw std::invalid_argument("residual add: the shapes differ");
    float* a = into.data.data();
    const float* b = other.data.data();
    const auto n = std::int64_t(into.size());
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
};

}  // namespace mimatrix::resnet::model

// The residual add: output = a + b (or a += b in place); both inputs' gradient is the output's.
#pragma once

#include "tensor.hpp"

#include <cstdint>
#include <stdexcept>

namespace mimatrix::resnet::nn {

// @par Thread Safety: stateless.
struct add {
  [[nodiscard]] static tensor forward(const tensor& a, const tensor& b) {
    if (a.shape != b.shape) throw std::invalid_argument("add: the inputs' shapes differ");
    tensor out = a;
    for (std::size_t i = 0; i < out.size(); ++i) out.data[i] += b.data[i];
    return out;
  }
  /// into += other, in place: the residual add without a copy (the models' way).
  static void accumulate(tensor& into, const tensor& other) {
    if (into.shape != other.shape) throw std::invalid_argument("add: the inputs' shapes differ");
    float* a = into.data.data();
    const float* b = other.data.data();
    const auto n = static_cast<std::int64_t>(into.size());
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
  // The gradient of both a and b.
  [[nodiscard]] static tensor backward(const tensor& grad_output) { return grad_output; }
};

}  // namespace mimatrix::resnet::nn

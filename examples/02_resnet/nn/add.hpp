// The residual add: output = a + b; both inputs' gradient is the output's.
#pragma once

#include "tensor.hpp"

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
  // The gradient of both a and b.
  [[nodiscard]] static tensor backward(const tensor& grad_output) { return grad_output; }
};

}  // namespace mimatrix::resnet::nn

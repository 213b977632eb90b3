// A float32 tensor: a shape (NCHW for activations, OIHW for weights) and its data, plus
// the parameter a layer trains (value and gradient, so a trainer can allreduce the gradient).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::resnet::nn {

// @par Thread Safety: a plain value type.
struct tensor {
  dnnl::memory::dims shape;
  std::vector<float> data;

  tensor() = default;
  explicit tensor(dnnl::memory::dims s)
      : shape(std::move(s)), data(static_cast<std::size_t>(element_count(shape)), 0.0f) {}

  static std::int64_t element_count(const dnnl::memory::dims& s) {
    return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>{});
  }
  [[nodiscard]] std::size_t size() const { return data.size(); }
  [[nodiscard]] std::int64_t dim(std::size_t i) const { return shape.at(i); }
};

struct parameter {
  std::string name;
  tensor value;
  tensor grad;  // overwritten by each backward (each layer is used once a step)

  parameter(std::string n, dnnl::memory::dims shape)
      : name(std::move(n)), value(shape), grad(std::move(shape)) {}
};

}  // namespace mimatrix::resnet::nn

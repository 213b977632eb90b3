// The one oneDNN CPU engine and stream that every layer of a network runs on.
#pragma once

#include "tensor.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <stdexcept>
#include <unordered_map>

namespace mimatrix::resnet::nn {

// The plain layout of a tensor of this rank: C, NC (or OI), NCHW (or OIHW). Layers keep
// plain layouts so tensors stay std::vectors a trainer can allreduce without reorders.
inline dnnl::memory::desc plain_desc(const dnnl::memory::dims& shape) {
  using tag = dnnl::memory::format_tag;
  switch (shape.size()) {
    case 1: return {shape, dnnl::memory::data_type::f32, tag::a};
    case 2: return {shape, dnnl::memory::data_type::f32, tag::ab};
    case 4: return {shape, dnnl::memory::data_type::f32, tag::abcd};
    default: throw std::invalid_argument("mimatrix::resnet::nn: tensors have rank 1, 2 or 4");
  }
}

// @par Thread Safety: a stream executes in order; layers sharing a context must be used
// from one thread at a time (oneDNN parallelizes inside each primitive).
struct context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};

  // Runs `p` and waits: a layer hands back plain vectors at once.
  void run(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
    p.execute(stream, args);
    stream.wait();
  }

  // Wraps a tensor's buffer without copying. oneDNN takes a non-const handle even for
  // inputs it only reads, hence the const_cast.
  [[nodiscard]] dnnl::memory wrap(const tensor& t) const {
    return {plain_desc(t.shape), engine, const_cast<float*>(t.data.data())};
  }
};

}  // namespace mimatrix::resnet::nn

// A float32 tensor in GPU memory: a shape (NCHW for activations, OIHW for weights) and a
// contiguous buffer, plus the parameter a layer trains (value and gradient, both on the GPU,
// so a trainer can allreduce the gradient where it lies).
#pragma once

#include "buffer.hpp"
#include "check.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::resnet::nn_cuda {

using dims = std::vector<std::int64_t>;

// Move-only (a copy is a device-to-device copy on a stream: copy_from). Host transfers are
// made on the given stream and wait for it, so the host data is ready when they return.
// @par Thread Safety: distinct objects: safe; one object: one thread at a time.
class device_tensor {
 public:
  device_tensor() = default;
  // Uninitialized: every layer overwrites its outputs; fill_zero() where zeros are meant.
  explicit device_tensor(dims shape)
      : shape_(std::move(shape)), memory_(bytes()) {}

  static std::int64_t element_count(const dims& s) {
    for (const std::int64_t d : s)
      if (d < 0) throw std::invalid_argument("mimatrix::resnet::nn_cuda: a negative dimension");
    return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>{});
  }

  static device_tensor from_host(dims shape, std::span<const float> host, cudaStream_t stream) {
    device_tensor t(std::move(shape));
    t.copy_from_host(host, stream);
    return t;
  }

  void copy_from_host(std::span<const float> host, cudaStream_t stream) {
    if (host.size() != size())
      throw std::invalid_argument("mimatrix::resnet::nn_cuda: copy_from_host of " + std::to_string(host.size()) +
                                  " floats into a tensor of " + std::to_string(size()));
    if (host.empty()) return;
    MIMATRIX_NN_CUDA_CHECK(cudaMemcpyAsync(data(), host.data(), bytes(), cudaMemcpyHostToDevice, stream));
    MIMATRIX_NN_CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` may go when we return
  }

  // Queued on `stream`, no wait: `host` must stay unchanged until the stream has run the
  // copy (page-locked memory, else the driver copies it first and the host waits anyway).
  void copy_from_host_async(std::span<const float> host, cudaStream_t stream) {
    if (host.size() != size())
      throw std::invalid_argument("mimatrix::resnet::nn_cuda: copy_from_host_async of " + std::to_string(host.size()) +
                                  " floats into a tensor of " + std::to_string(size()));
    if (!host.empty())
      MIMATRIX_NN_CUDA_CHECK(cudaMemcpyAsync(data(), host.data(), bytes(), cudaMemcpyHostToDevice, stream));
  }

  [[nodiscard]] std::vector<float> to_host(cudaStream_t stream) const {
    std::vector<float> host(size());
    if (host.empty()) return host;
    MIMATRIX_NN_CUDA_CHECK(cudaMemcpyAsync(host.data(), data(), bytes(), cudaMemcpyDeviceToHost, stream));
    MIMATRIX_NN_CUDA_CHECK(cudaStreamSynchronize(stream));
    return host;
  }

  // Becomes a copy of `other` (shape and contents), reusing this buffer when it is large enough.
  void copy_from(const device_tensor& other, cudaStream_t stream) {
    memory_.reserve(other.bytes());
    shape_ = other.shape_;
    if (bytes() > 0)
      MIMATRIX_NN_CUDA_CHECK(cudaMemcpyAsync(data(), other.data(), bytes(), cudaMemcpyDeviceToDevice, stream));
  }

  void fill_zero(cudaStream_t stream) {
    if (bytes() > 0) MIMATRIX_NN_CUDA_CHECK(cudaMemsetAsync(data(), 0, bytes(), stream));
  }

  // The same elements under another shape (linear flattens N x C x 1 x 1 to N x C).
  void reshape(dims shape) {
    if (element_count(shape) != element_count(shape_))
      throw std::invalid_argument("mimatrix::resnet::nn_cuda: reshape changes the element count");
    shape_ = std::move(shape);
  }

  [[nodiscard]] const dims& shape() const { return shape_; }
  // 0 for a default-constructed tensor (no shape), as the CPU tensor.
  [[nodiscard]] std::size_t size() const {
    return shape_.empty() ? 0 : static_cast<std::size_t>(element_count(shape_));
  }
  [[nodiscard]] std::size_t bytes() const { return size() * sizeof(float); }
  [[nodiscard]] std::int64_t dim(std::size_t i) const { return shape_.at(i); }
  [[nodiscard]] float* data() { return static_cast<float*>(memory_.data()); }
  [[nodiscard]] const float* data() const { return static_cast<const float*>(memory_.data()); }

 private:
  dims shape_;
  detail::device_buffer memory_;  // at least size() floats (copy_from may leave it larger)
};

// The name the CPU layers use, so code templated on a layer set can say `tensor`.
using tensor = device_tensor;

// @par Thread Safety: as device_tensor.
struct parameter {
  std::string name;
  device_tensor value;
  device_tensor grad;  // overwritten by each backward (each layer is used once a step)

  // Both uninitialized: the layer that owns it sets the value and zeroes the gradient.
  parameter(std::string n, const dims& shape) : name(std::move(n)), value(shape), grad(shape) {}
};

}  // namespace mimatrix::resnet::nn_cuda

// Raw GPU memory that frees itself: what tensors, label arrays and workspaces are made of.
#pragma once

#include "check.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace mimatrix::resnet::nn_cuda::detail {

// cudaMalloc'd bytes, move-only. cudaFree waits for the device, so work still queued on the
// buffer finishes before the memory goes back.
// @par Thread Safety: distinct objects: safe; one object: one thread at a time.
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) MIMATRIX_NN_CUDA_CHECK(cudaMalloc(&data_, bytes_));
  }
  ~device_buffer() {
    if (data_) (void)cudaFree(data_);  // a destructor cannot throw; the memory is gone either way
  }
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    device_buffer(std::move(other)).swap(*this);
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void swap(device_buffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }

  // At least `bytes`, reallocating (contents lost) only when it is smaller.
  void reserve(std::size_t bytes) {
    if (bytes > bytes_) device_buffer(bytes).swap(*this);
  }

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace mimatrix::resnet::nn_cuda::detail

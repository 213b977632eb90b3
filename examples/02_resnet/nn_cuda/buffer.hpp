// Raw GPU memory that frees itself: what tensors, label arrays and workspaces are made of.
// It comes from the caching pool of the context current on this thread (as PyTorch's
// current stream), or from cudaMalloc where none is.
#pragma once

#include "caching_pool.hpp"
#include "check.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <utility>

namespace mimatrix::resnet::nn_cuda {

namespace detail {

// cudaMalloc and cudaFree for a caching_pool: null when the device is full, a throw for
// anything else (no device, a sticky error), which the cache could not cure.
struct cuda_memory {
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it, so later checks do not see it
      return nullptr;
    }
    MIMATRIX_NN_CUDA_CHECK(status);
    return p;
  }
  void free(void* p) { (void)cudaFree(p); }  // from a destructor: the memory is gone either way
};

}  // namespace detail

using device_pool = caching_pool<detail::cuda_memory>;

namespace detail {

// The pool new buffers on this thread come from: a live nn_cuda::context's, while it is the
// only one on this thread. With two, neither pools: a block one stream released could go to
// the other's work while the first still uses it.
struct thread_pool {
  std::shared_ptr<device_pool> pool;
  int contexts = 0;  // live on this thread
};
inline thread_pool& this_thread_pool() {
  thread_local thread_pool current;
  return current;
}

// Device bytes, move-only, from the current pool (kept alive while the buffer lives) or
// cudaMalloc. Released to a pool, the block may serve the next allocation at once: the
// work queued after it on the context's one stream runs after the work still using it.
// cudaFree (no pool) waits for the device instead.
// @par Thread Safety: distinct objects: safe; one object: one thread at a time.
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t bytes) : pool_(this_thread_pool().pool), bytes_(bytes) {
    if (bytes_ == 0) return;
    if (pool_)
      data_ = pool_->allocate(bytes_);
    else
      MIMATRIX_NN_CUDA_CHECK(cudaMalloc(&data_, bytes_));
  }
  ~device_buffer() {
    if (!data_) return;
    if (pool_)
      pool_->release(data_);
    else
      cuda_memory{}.free(data_);
  }
  device_buffer(device_buffer&& other) noexcept
      : pool_(std::move(other.pool_)), data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    device_buffer(std::move(other)).swap(*this);
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void swap(device_buffer& other) noexcept {
    std::swap(pool_, other.pool_);
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
  std::shared_ptr<device_pool> pool_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost), move-only: a copy from it to the device is
// asynchronous (from pageable memory the driver stages it and the host waits).
// @par Thread Safety: distinct objects: safe; one object: one thread at a time.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  ~pinned_buffer() {
    if (data_) (void)cudaFreeHost(data_);
  }
  pinned_buffer(pinned_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  // At least `bytes` (contents lost when it grows).
  void reserve(std::size_t bytes) {
    if (bytes <= bytes_) return;
    pinned_buffer fresh;
    MIMATRIX_NN_CUDA_CHECK(cudaMallocHost(&fresh.data_, bytes));
    fresh.bytes_ = bytes;
    *this = std::move(fresh);
  }
  [[nodiscard]] void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace detail

}  // namespace mimatrix::resnet::nn_cuda

// The CUDA stream, cuDNN and cuBLAS handles and workspace that every GPU layer of a network
// runs on: the counterpart of nn::context's oneDNN engine and stream.
#pragma once

#include "buffer.hpp"
#include "check.hpp"
#include "descriptors.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <memory>
#include <utility>

namespace mimatrix::resnet::nn_cuda {

// Owns a stream on the device current at construction, and cuDNN and cuBLAS handles bound
// to it: every layer's work is queued on that one stream, in order, and only host transfers
// (tensor to_host, a loss) wait for it.
//
// `tensor_float32`: let cuDNN's convolutions and cuBLAS's matrix products use TF32 tensor
// cores (A100, H100: several times faster, about 1e-3 relative error). Off by default: plain
// float32 FMA, matching the CPU layers to about 1e-6.
// Its caching pool (caching_pool.hpp) serves every tensor made on this thread while it
// lives, as PyTorch's allocator serves the current stream: after a network's first step,
// a step allocates nothing from the driver, and no cudaFree stalls the stream. (Two live
// contexts on one thread: neither pools, see buffer.hpp.)
// @par Thread Safety: a stream executes in order; layers sharing a context must be used
// from one thread at a time, the one that made it (its pool serves that thread).
class context {
 public:
  explicit context(bool tensor_float32 = false)
      : tensor_float32_(tensor_float32), pool_(std::make_shared<device_pool>()) {
    cudaStream_t s = nullptr;
    // Non-blocking: work of the legacy default stream (a library's, another thread's) does
    // not wait for this stream, which may wait behind a collective's gate.
    MIMATRIX_NN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_.reset(s);
    cudnnHandle_t dnn = nullptr;
    MIMATRIX_NN_CUDA_CHECK(cudnnCreate(&dnn));
    cudnn_.reset(dnn);
    MIMATRIX_NN_CUDA_CHECK(cudnnSetStream(dnn, s));
    cublasHandle_t blas = nullptr;
    MIMATRIX_NN_CUDA_CHECK(cublasCreate(&blas));
    cublas_.reset(blas);
    MIMATRIX_NN_CUDA_CHECK(cublasSetStream(blas, s));
    MIMATRIX_NN_CUDA_CHECK(cublasSetMathMode(blas, tensor_float32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    auto& current = detail::this_thread_pool();  // last: a throw above leaves it as it was
    current.pool = ++current.contexts == 1 ? pool_ : nullptr;
  }

  ~context() {
    auto& current = detail::this_thread_pool();
    if (--current.contexts == 0 || current.pool == pool_) current.pool = nullptr;
  }

  // Layers hold a reference to their context.
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  [[nodiscard]] cudaStream_t stream() const { return stream_.get(); }
  [[nodiscard]] cudnnHandle_t cudnn() const { return cudnn_.get(); }
  [[nodiscard]] cublasHandle_t cublas() const { return cublas_.get(); }
  [[nodiscard]] bool tensor_float32() const { return tensor_float32_; }

  // Scratch memory for one cuDNN call, grown on demand and shared by every layer (they run
  // in order on one stream). Growing frees the old buffer, which waits for the device.
  [[nodiscard]] void* workspace(std::size_t bytes) {
    workspace_.reserve(bytes);
    return workspace_.data();
  }

  [[nodiscard]] pool_statistics memory() const { return pool_->statistics(); }

  void synchronize() const { MIMATRIX_NN_CUDA_CHECK(cudaStreamSynchronize(stream())); }

 private:
  bool tensor_float32_;
  // Destroyed after the workspace (which returns to it); tensors that outlive the context
  // keep it alive.
  std::shared_ptr<device_pool> pool_;
  // Declared before the handles, destroyed after them: the handles go before the stream.
  detail::owned<cudaStream_t, cudaStreamDestroy> stream_;
  detail::owned<cudnnHandle_t, cudnnDestroy> cudnn_;
  detail::owned<cublasHandle_t, cublasDestroy> cublas_;
  detail::device_buffer workspace_;
};

}  // namespace mimatrix::resnet::nn_cuda

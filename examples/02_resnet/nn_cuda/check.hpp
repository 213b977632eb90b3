// Error checks for CUDA, cuDNN and cuBLAS calls: a failed call throws std::runtime_error
// naming the call, the library's status and the file and line it was made on.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace mimatrix::resnet::nn_cuda::detail {

[[noreturn]] inline void fail(const char* call, const std::string& status, const char* file, int line) {
  throw std::runtime_error(std::string("mimatrix::resnet::nn_cuda: ") + call + " failed with " + status + " at " +
                           file + ":" + std::to_string(line));
}

inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    fail(call, std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")", file, line);
}

inline void check(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) fail(call, cudnnGetErrorString(status), file, line);
}

inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(call, std::string(cublasGetStatusName(status)) + " (" + cublasGetStatusString(status) + ")", file, line);
}

}  // namespace mimatrix::resnet::nn_cuda::detail

/// Runs a CUDA runtime, cuDNN or cuBLAS call and throws std::runtime_error if it fails.
#define MIMATRIX_NN_CUDA_CHECK(call) ::mimatrix::resnet::nn_cuda::detail::check((call), #call, __FILE__, __LINE__)

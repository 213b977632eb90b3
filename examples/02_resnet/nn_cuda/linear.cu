// linear's kernels: the bias broadcast over the output's rows, and the bias gradient (the
// output gradient's column sums).
#include "linear.hpp"

#include "check.hpp"
#include "launch.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mimatrix::resnet::nn_cuda::detail {
namespace {

__global__ void broadcast_rows_kernel(const float* bias, std::int64_t rows, std::int64_t cols, float* out) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    out[i] = bias[i % cols];
}

// A thread a column: neighbouring threads read neighbouring floats of each row.
__global__ void column_sums_kernel(const float* in, std::int64_t rows, std::int64_t cols, float* sums) {
  for (std::int64_t c = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; c < cols;
       c += std::int64_t{gridDim.x} * blockDim.x) {
    float s = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) s += in[r * cols + c];
    sums[c] = s;
  }
}

}  // namespace

void broadcast_rows(const float* bias, std::int64_t rows, std::int64_t cols, float* out, cudaStream_t stream) {
  if (rows * cols == 0) return;
  broadcast_rows_kernel<<<blocks_for(rows * cols), default_launch.threads, 0, stream>>>(bias, rows, cols, out);
  MIMATRIX_NN_CUDA_CHECK(cudaGetLastError());
}

void column_sums(const float* in, std::int64_t rows, std::int64_t cols, float* sums, cudaStream_t stream) {
  if (cols == 0) return;
  column_sums_kernel<<<blocks_for(cols), default_launch.threads, 0, stream>>>(in, rows, cols, sums);
  MIMATRIX_NN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mimatrix::resnet::nn_cuda::detail

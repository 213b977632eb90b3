// add's kernel: an elementwise sum by grid-stride loop (out may be a: each element is read
// before it is written, by the same thread).
#include "add.hpp"

#include "check.hpp"
#include "launch.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mimatrix::resnet::nn_cuda::detail {
namespace {

__global__ void add_kernel(const float* a, const float* b, std::int64_t n, float* out) {
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    out[i] = a[i] + b[i];
}

}  // namespace

void add_elementwise(const float* a, const float* b, std::int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), default_launch.threads, 0, stream>>>(a, b, n, out);
  MIMATRIX_NN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mimatrix::resnet::nn_cuda::detail

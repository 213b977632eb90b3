// softmax_cross_entropy's kernels: a warp a row for forward (the row's maximum, its first
// index, the log of the sum of exponentials, the probabilities, and the row's loss and hit
// added into the totals), and an elementwise backward.
#include "softmax_cross_entropy.hpp"

#include "check.hpp"
#include "launch.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

namespace mimatrix::resnet::nn_cuda::detail {
namespace {

constexpr int warp = 32;
constexpr int rows_per_block = 4;  // four warps a block
constexpr unsigned all_lanes = 0xffffffffu;

__global__ void forward_kernel(const float* logits, const std::int32_t* labels, std::int64_t rows,
                               std::int64_t classes, float* probabilities, softmax_totals* totals) {
  const std::int64_t row = std::int64_t{blockIdx.x} * rows_per_block + threadIdx.x / warp;
  const int lane = static_cast<int>(threadIdx.x % warp);
  if (row >= rows) return;  // a whole warp leaves together: the shuffles below stay full
  const float* x = logits + row * classes;
  float* p = probabilities + row * classes;

  // The maximum and its first index (the CPU layer's std::max_element: ties go to the lowest).
  float top = -INFINITY;
  std::int64_t at = classes;
  for (std::int64_t j = lane; j < classes; j += warp)
    if (x[j] > top || (x[j] == top && j < at)) top = x[j], at = j;
  for (int offset = warp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(all_lanes, top, offset);
    const std::int64_t other_at = __shfl_xor_sync(all_lanes, at, offset);
    if (other > top || (other == top && other_at < at)) top = other, at = other_at;
  }

  float sum = 0.0f;
  for (std::int64_t j = lane; j < classes; j += warp) sum += expf(x[j] - top);
  for (int offset = warp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(all_lanes, sum, offset);
  const float log_sum = logf(sum);
  for (std::int64_t j = lane; j < classes; j += warp) p[j] = expf(x[j] - top - log_sum);

  if (lane == 0) {
    const std::int32_t label = labels[row];
    atomicAdd(&totals->loss, -static_cast<double>(x[label] - top - log_sum));
    if (at == label) atomicAdd(&totals->correct, 1ull);
  }
}

__global__ void backward_kernel(const float* probabilities, const std::int32_t* labels, std::int64_t rows,
                                std::int64_t classes, float* grad) {
  const std::int64_t n = rows * classes;
  const float scale = 1.0f / static_cast<float>(rows);
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t row = i / classes, j = i % classes;
    grad[i] = (probabilities[i] - (j == labels[row] ? 1.0f : 0.0f)) * scale;
  }
}

}  // namespace

void softmax_cross_entropy_forward(const float* logits, const std::int32_t* labels, std::int64_t rows,
                                   std::int64_t classes, float* probabilities, softmax_totals* totals,
                                   cudaStream_t stream) {
  MIMATRIX_NN_CUDA_CHECK(cudaMemsetAsync(totals, 0, sizeof(softmax_totals), stream));
  const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  forward_kernel<<<blocks, rows_per_block * warp, 0, stream>>>(logits, labels, rows, classes, probabilities, totals);
  MIMATRIX_NN_CUDA_CHECK(cudaGetLastError());
}

void softmax_cross_entropy_backward(const float* probabilities, const std::int32_t* labels, std::int64_t rows,
                                    std::int64_t classes, float* grad, cudaStream_t stream) {
  if (rows * classes == 0) return;
  backward_kernel<<<blocks_for(rows * classes), default_launch.threads, 0, stream>>>(probabilities, labels, rows,
                                                                                    classes, grad);
  MIMATRIX_NN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mimatrix::resnet::nn_cuda::detail

// sgd's kernel: a thread block a chunk (multi_tensor_sgd.hpp), by grid-stride over chunks.
#include "sgd.hpp"

#include "check.hpp"
#include "launch.hpp"

#include <algorithm>
#include <cstdint>

namespace mimatrix::resnet::nn_cuda::detail {
namespace {

template <bool Decay, bool Momentum, bool First, bool Nesterov>
__global__ void sgd_kernel(const sgd_slot* slots, int count, std::int64_t chunks, optim::detail::sgd_coefficients c) {
  for (std::int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x)
    sgd_chunk<Decay, Momentum, First, Nesterov>(slots, count, chunk, threadIdx.x, blockDim.x, c);
}

}  // namespace

void launch_sgd(const sgd_slot* slots, int count, std::int64_t chunks, bool decay, bool momentum, bool first,
                bool nesterov, optim::detail::sgd_coefficients c, cudaStream_t stream) {
  if (chunks == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(chunks, default_launch.max_blocks));
  optim::detail::with_sgd_flags(decay, momentum, first, nesterov,
                                [&]<bool Decay, bool Momentum, bool First, bool Nesterov>() {
                                  sgd_kernel<Decay, Momentum, First, Nesterov>
                                      <<<blocks, default_launch.threads, 0, stream>>>(slots, count, chunks, c);
                                });
  MIMATRIX_NN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mimatrix::resnet::nn_cuda::detail

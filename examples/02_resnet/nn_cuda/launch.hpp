// How the GPU layers' own kernels are launched: one grid-stride loop shape for all.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mimatrix::resnet::nn_cuda::detail {

struct launch_policy {
  int threads = 256;
  std::int64_t max_blocks = 4096;  // enough to fill an H100 (132 SMs) many times over
};

inline constexpr launch_policy default_launch{};

// Blocks for `n` elements, one a thread, the rest by grid-stride.
inline unsigned blocks_for(std::int64_t n, const launch_policy& p = default_launch) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + p.threads - 1) / p.threads, 1, p.max_blocks));
}

}  // namespace mimatrix::resnet::nn_cuda::detail

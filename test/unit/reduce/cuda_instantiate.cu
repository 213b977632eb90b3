// Instantiates every CUDA reduction kernel (each dtype x op), so a build with nvcc proves
// they all compile, with or without a GPU to run them.
#include "mimatrix/reduce/cuda.cuh"

namespace mimatrix::reduce::cuda {

#define MIMATRIX_INSTANTIATE(Op, T)                                                              \
  template void combine(const Op<T>&, T*, const T*, const T*, std::size_t, cudaStream_t,         \
                        const launch_policy&);                                                   \
  template void finalize(const Op<T>&, T*, std::size_t, int, cudaStream_t, const launch_policy&);
#define MIMATRIX_INSTANTIATE_OPS(T)                                                              \
  MIMATRIX_INSTANTIATE(sum, T)                                                                   \
  MIMATRIX_INSTANTIATE(prod, T)                                                                  \
  MIMATRIX_INSTANTIATE(min, T)                                                                   \
  MIMATRIX_INSTANTIATE(max, T)                                                                   \
  MIMATRIX_INSTANTIATE(avg, T)

MIMATRIX_INSTANTIATE_OPS(std::int8_t)
MIMATRIX_INSTANTIATE_OPS(std::uint8_t)
MIMATRIX_INSTANTIATE_OPS(std::int32_t)
MIMATRIX_INSTANTIATE_OPS(std::int64_t)
MIMATRIX_INSTANTIATE_OPS(half)
MIMATRIX_INSTANTIATE_OPS(bfloat16)
MIMATRIX_INSTANTIATE_OPS(float)
MIMATRIX_INSTANTIATE_OPS(double)

#undef MIMATRIX_INSTANTIATE_OPS
#undef MIMATRIX_INSTANTIATE

}  // namespace mimatrix::reduce::cuda

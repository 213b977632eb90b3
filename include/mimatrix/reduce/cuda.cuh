// CUDA reduction kernels: the functors of ops.hpp applied element-wise on the device, launched
// on the caller's stream. For .cu files only; host-only code uses reduce/cpu.hpp.
#pragma once

#if !defined(__CUDACC__)
#error "mimatrix/reduce/cuda.cuh holds CUDA kernels: include it from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <system_error>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/grid_loops.hpp"
#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::reduce::cuda {

/// How a kernel is launched. The grid is capped and the kernels stride over the rest: enough
/// blocks to fill every SM of any current GPU (132 SMs x 8 blocks of 256 on H100), no more.
struct launch_policy {
  int threads_per_block = 256;
  int max_blocks = 4096;
};

/// The most sources and destinations one reduce_many takes: the ranks of a node.
using grid::max_operands;
/// reduce_many's operands, passed to the kernel by value.
using grid::many_operands;

namespace detail {

/// This thread's first element, and the grid's stride, for the loops of grid_loops.hpp.
__device__ inline std::size_t first_element() { return std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; }
__device__ inline std::size_t grid_stride() { return std::size_t{gridDim.x} * blockDim.x; }

template <bool Packed, operation Op>
__global__ void combine_kernel(Op op, typename Op::value_type* dst, const typename Op::value_type* a,
                               const typename Op::value_type* b, std::size_t n) {
  grid::combine<Packed>(op, dst, a, b, n, first_element(), grid_stride());
}

template <bool Packed, operation Op>
__global__ void reduce_many_kernel(Op op, many_operands<typename Op::value_type> m, std::size_t n, int ranks) {
  grid::reduce_many<Packed>(op, m, n, ranks, first_element(), grid_stride());
}

template <operation Op>
__global__ void finalize_kernel(Op op, typename Op::value_type* data, std::size_t n, int ranks) {
  grid::finalize(op, data, n, ranks, first_element(), grid_stride());
}

inline unsigned grid_size(std::size_t work_items, const launch_policy& policy) {
  const std::size_t per_block = static_cast<std::size_t>(policy.threads_per_block);
  const std::size_t blocks = (work_items + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < static_cast<std::size_t>(policy.max_blocks) ? blocks : policy.max_blocks);
}

template <operation Op>
[[nodiscard]] cudaError_t launch_combine(const Op& op, typename Op::value_type* dst,
                                         const typename Op::value_type* a, const typename Op::value_type* b,
                                         std::size_t n, cudaStream_t stream, const launch_policy& policy) {
  using T = typename Op::value_type;
  if (n == 0) return cudaSuccess;
  const unsigned threads = static_cast<unsigned>(policy.threads_per_block);
  if (grid::pack_aligned<T>(dst) && grid::pack_aligned<T>(a) && grid::pack_aligned<T>(b)) {
    combine_kernel<true><<<grid_size(grid::packed_items<T>(n), policy), threads, 0, stream>>>(op, dst, a, b, n);
  } else {
    combine_kernel<false><<<grid_size(n, policy), threads, 0, stream>>>(op, dst, a, b, n);
  }
  return cudaGetLastError();
}

template <operation Op>
[[nodiscard]] cudaError_t launch_finalize(const Op& op, typename Op::value_type* data, std::size_t n, int ranks,
                                          cudaStream_t stream, const launch_policy& policy) {
  if constexpr (Op::kind != op_kind::avg) {
    return cudaSuccess;  // finalize is the identity: no pass over memory
  } else {
    if (n == 0) return cudaSuccess;
    finalize_kernel<<<grid_size(n, policy), static_cast<unsigned>(policy.threads_per_block), 0, stream>>>(
        op, data, n, ranks);
    return cudaGetLastError();
  }
}

template <operation Op>
[[nodiscard]] cudaError_t launch_reduce_many(const Op& op, const many_operands<typename Op::value_type>& m,
                                             std::size_t n, int ranks, cudaStream_t stream,
                                             const launch_policy& policy) {
  using T = typename Op::value_type;
  if (n == 0) return cudaSuccess;
  const unsigned threads = static_cast<unsigned>(policy.threads_per_block);
  if (grid::pack_aligned(m)) {
    reduce_many_kernel<true><<<grid_size(grid::packed_items<T>(n), policy), threads, 0, stream>>>(op, m, n, ranks);
  } else {
    reduce_many_kernel<false><<<grid_size(n, policy), threads, 0, stream>>>(op, m, n, ranks);
  }
  return cudaGetLastError();
}

/// Loads Op's kernels now (under lazy loading, CUDA's default, a kernel loads at its first
/// launch, which may need the whole context to synchronize: a deadlock while a gate's kernel
/// spins waiting for that launch's work). The first failure, or cudaSuccess.
template <operation Op>
[[nodiscard]] cudaError_t load_kernels() {
  cudaFuncAttributes attributes{};
  for (const void* kernel : {reinterpret_cast<const void*>(&combine_kernel<true, Op>),
                             reinterpret_cast<const void*>(&combine_kernel<false, Op>),
                             reinterpret_cast<const void*>(&reduce_many_kernel<true, Op>),
                             reinterpret_cast<const void*>(&reduce_many_kernel<false, Op>),
                             reinterpret_cast<const void*>(&finalize_kernel<Op>)})
    if (const cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) return e;
  return cudaSuccess;
}

/// "reduce::cuda::combine sum<float> of 1000 elements: cudaErrorInvalidConfiguration (...)".
template <operation Op>
std::string describe_failure(std::string_view kernel, std::size_t n, cudaError_t e) {
  std::string s = "reduce::cuda::";
  s += kernel;
  s += ' ';
  s += to_string(Op::kind);
  s += '<';
  s += to_string(dtype_of<typename Op::value_type>);
  s += "> of " + std::to_string(n) + " elements: ";
  s += cudaGetErrorName(e);
  s += " (";
  s += cudaGetErrorString(e);
  s += ')';
  return s;
}

}  // namespace detail

/// dst[i] = op(a[i], b[i]) for i < n, on device memory, queued on `stream`. `dst` may be `a`
/// or `b`; no other overlap. Results equal cpu::combine's bit for bit. Throws
/// mimatrix::error(errc::cuda) naming the CUDA error when the launch fails; errors of the
/// kernel itself surface at the stream's next synchronization, as with any CUDA launch.
/// @par Thread Safety  Like any launch: safe from several threads on different streams.
template <operation Op>
void combine(const Op& op, typename Op::value_type* dst, const typename Op::value_type* a,
             const typename Op::value_type* b, std::size_t n, cudaStream_t stream, const launch_policy& policy = {}) {
  if (const cudaError_t e = detail::launch_combine(op, dst, a, b, n, stream, policy); e != cudaSuccess)
    throw error(errc::cuda, detail::describe_failure<Op>("combine", n, e));
}

/// As above; a failed launch sets `ec` to errc::cuda instead of throwing.
template <operation Op>
void combine(const Op& op, typename Op::value_type* dst, const typename Op::value_type* a,
             const typename Op::value_type* b, std::size_t n, cudaStream_t stream, std::error_code& ec) noexcept {
  ec = detail::launch_combine(op, dst, a, b, n, stream, launch_policy{}) == cudaSuccess ? std::error_code{}
                                                                                        : make_error_code(errc::cuda);
}

/// Every m.dst[d][i] = op.finalize(op(m.src[0][i], ..., m.src[k-1][i]), ranks) for i < n
/// (avg's division; no finalize for the other ops), queued on `stream`: one pass over
/// memory. m.dst[d] may be m.src[d]; nothing else overlaps. Throws
/// mimatrix::error(errc::invalid_argument) for no operand or more than max_operands of
/// either, else errors as for combine.
template <operation Op>
void reduce_many(const Op& op, const many_operands<typename Op::value_type>& m, std::size_t n, int ranks,
                 cudaStream_t stream, const launch_policy& policy = {}) {
  if (m.sources < 1 || m.sources > max_operands || m.destinations < 1 || m.destinations > max_operands)
    throw error(errc::invalid_argument, "reduce::cuda::reduce_many takes 1 to " + std::to_string(max_operands) +
                                            " sources and destinations, not " + std::to_string(m.sources) + " and " +
                                            std::to_string(m.destinations));
  if (const cudaError_t e = detail::launch_reduce_many(op, m, n, ranks, stream, policy); e != cudaSuccess)
    throw error(errc::cuda, detail::describe_failure<Op>("reduce_many", n, e));
}

/// data[i] = op.finalize(data[i], ranks) on device memory (avg's division; nothing for the
/// others), queued on `stream`. Errors as for combine.
template <operation Op>
void finalize(const Op& op, typename Op::value_type* data, std::size_t n, int ranks, cudaStream_t stream,
              const launch_policy& policy = {}) {
  if (const cudaError_t e = detail::launch_finalize(op, data, n, ranks, stream, policy); e != cudaSuccess)
    throw error(errc::cuda, detail::describe_failure<Op>("finalize", n, e));
}

/// As above; a failed launch sets `ec` to errc::cuda instead of throwing.
template <operation Op>
void finalize(const Op& op, typename Op::value_type* data, std::size_t n, int ranks, cudaStream_t stream,
              std::error_code& ec) noexcept {
  ec = detail::launch_finalize(op, data, n, ranks, stream, launch_policy{}) == cudaSuccess
           ? std::error_code{}
           : make_error_code(errc::cuda);
}

}  // namespace mimatrix::reduce::cuda

// CUDA reduction kernels: the functors of ops.hpp applied element-wise on the device, launched
// on the caller's stream. For .cu files only; host-only code uses reduce/cpu.hpp.
#pragma once

#if !defined(__CUDACC__)
#error "mimatrix/reduce/cuda.cuh holds CUDA kernels: include it from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::reduce::cuda {

/// How a kernel is launched. The grid is capped and the kernels stride over the rest: enough
/// blocks to fill every SM of any current GPU (132 SMs x 8 blocks of 256 on H100), no more.
struct launch_policy {
  int threads_per_block = 256;
  int max_blocks = 4096;
};

namespace detail {

/// Bytes one thread moves per access when all pointers allow it: 128-bit loads and stores
/// (ld.global.v4) reach full memory bandwidth for every element size, bytes included.
inline constexpr std::size_t pack_bytes = 16;

template <class T> struct alignas(pack_bytes) pack {
  static constexpr std::size_t lanes = pack_bytes / sizeof(T);
  T lane[lanes];
};

template <class T> bool pack_aligned(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(pack<T>) == 0;
}

template <operation Op>
__device__ inline typename Op::value_type combine_one(const Op& op, typename Op::value_type a,
                                                      typename Op::value_type b) {
  using T = typename Op::value_type;
  return narrow<T>(op(widen<T>(a), widen<T>(b)));
}

/// dst[i] = op(a[i], b[i]); with Packed, whole packs first and the remainder element-wise.
template <bool Packed, operation Op>
__global__ void combine_kernel(Op op, typename Op::value_type* dst, const typename Op::value_type* a,
                               const typename Op::value_type* b, std::size_t n) {
  using T = typename Op::value_type;
  const std::size_t first = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  std::size_t done = 0;
  if constexpr (Packed) {
    using P = pack<T>;
    const std::size_t packs = n / P::lanes;
    for (std::size_t p = first; p < packs; p += stride) {
      const P x = reinterpret_cast<const P*>(a)[p];
      const P y = reinterpret_cast<const P*>(b)[p];
      P r;
#pragma unroll
      for (std::size_t k = 0; k < P::lanes; ++k) r.lane[k] = combine_one(op, x.lane[k], y.lane[k]);
      reinterpret_cast<P*>(dst)[p] = r;
    }
    done = packs * P::lanes;
  }
  for (std::size_t i = done + first; i < n; i += stride) dst[i] = combine_one(op, a[i], b[i]);
}

template <operation Op>
__global__ void finalize_kernel(Op op, typename Op::value_type* data, std::size_t n, int ranks) {
  using T = typename Op::value_type;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    data[i] = narrow<T>(op.finalize(widen<T>(data[i]), ranks));
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
  if (pack_aligned<T>(dst) && pack_aligned<T>(a) && pack_aligned<T>(b)) {
    const std::size_t items = n / pack<T>::lanes + n % pack<T>::lanes;
    combine_kernel<true><<<grid_size(items, policy), threads, 0, stream>>>(op, dst, a, b, n);
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

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

/// The most sources and destinations one reduce_many takes: the ranks of a node.
inline constexpr int max_operands = 8;

/// reduce_many's operands, passed to the kernel by value.
template <class T>
struct many_operands {
  T* dst[max_operands] = {};
  const T* src[max_operands] = {};
  int destinations = 0;
  int sources = 0;
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

/// Every dst[d][i] = finalize(op(src[0][i], ..., src[k-1][i])): each source read once,
/// each destination written once, whole packs first when every pointer allows it.
template <bool Packed, operation Op>
__global__ void reduce_many_kernel(Op op, many_operands<typename Op::value_type> m, std::size_t n, int ranks) {
  using T = typename Op::value_type;
  const std::size_t first = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  const auto finalized = [&](T v) {
    if constexpr (Op::kind == op_kind::avg) return narrow<T>(op.finalize(widen<T>(v), ranks));
    else return v;
  };
  std::size_t done = 0;
  if constexpr (Packed) {
    using P = pack<T>;
    const std::size_t packs = n / P::lanes;
    for (std::size_t p = first; p < packs; p += stride) {
      P acc = reinterpret_cast<const P*>(m.src[0])[p];
      for (int s = 1; s < m.sources; ++s) {
        const P x = reinterpret_cast<const P*>(m.src[s])[p];
#pragma unroll
        for (std::size_t k = 0; k < P::lanes; ++k) acc.lane[k] = combine_one(op, acc.lane[k], x.lane[k]);
      }
#pragma unroll
      for (std::size_t k = 0; k < P::lanes; ++k) acc.lane[k] = finalized(acc.lane[k]);
      for (int d = 0; d < m.destinations; ++d) reinterpret_cast<P*>(m.dst[d])[p] = acc;
    }
    done = packs * P::lanes;
  }
  for (std::size_t i = done + first; i < n; i += stride) {
    T acc = m.src[0][i];
    for (int s = 1; s < m.sources; ++s) acc = combine_one(op, acc, m.src[s][i]);
    acc = finalized(acc);
    for (int d = 0; d < m.destinations; ++d) m.dst[d][i] = acc;
  }
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

template <operation Op>
[[nodiscard]] cudaError_t launch_reduce_many(const Op& op, const many_operands<typename Op::value_type>& m,
                                             std::size_t n, int ranks, cudaStream_t stream,
                                             const launch_policy& policy) {
  using T = typename Op::value_type;
  if (n == 0) return cudaSuccess;
  bool aligned = true;
  for (int d = 0; d < m.destinations; ++d) aligned = aligned && pack_aligned<T>(m.dst[d]);
  for (int s = 0; s < m.sources; ++s) aligned = aligned && pack_aligned<T>(m.src[s]);
  const unsigned threads = static_cast<unsigned>(policy.threads_per_block);
  if (aligned) {
    const std::size_t items = n / pack<T>::lanes + n % pack<T>::lanes;
    reduce_many_kernel<true><<<grid_size(items, policy), threads, 0, stream>>>(op, m, n, ranks);
  } else {
    reduce_many_kernel<false><<<grid_size(n, policy), threads, 0, stream>>>(op, m, n, ranks);
  }
  return cudaGetLastError();
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

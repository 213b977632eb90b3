// The loops of the CUDA reduction kernels (cuda.cuh), in plain C++ that nvcc compiles for
// the device and any compiler for the host. A kernel's thread runs one of them with its
// first element and the grid's stride. So their indexing, packing, folding and aliasing
// are tested on the host, where there is no GPU (test/unit/reduce/grid_loops_test.cpp),
// and only the launch needs a device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mimatrix/core/config.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/reduce/ops.hpp"

#if defined(__CUDA_ARCH__)  // nvcc's device pass; the host compiler knows no such pragma
#define MIMATRIX_GRID_UNROLL _Pragma("unroll")
#else
#define MIMATRIX_GRID_UNROLL
#endif

namespace mimatrix::reduce::grid {

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

/// Bytes one thread moves per access when all pointers allow it: 128-bit loads and stores
/// (ld.global.v4) reach full memory bandwidth for every element size, bytes included.
inline constexpr std::size_t pack_bytes = 16;

template <class T>
struct alignas(pack_bytes) pack {
  static constexpr std::size_t lanes = pack_bytes / sizeof(T);
  T lane[lanes];
};

template <class T>
bool pack_aligned(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(pack<T>) == 0;
}

/// Whether every operand of `m` allows the packed loop.
template <class T>
bool pack_aligned(const many_operands<T>& m) {
  bool aligned = true;
  for (int d = 0; d < m.destinations; ++d) aligned = aligned && pack_aligned<T>(m.dst[d]);
  for (int s = 0; s < m.sources; ++s) aligned = aligned && pack_aligned<T>(m.src[s]);
  return aligned;
}

/// The work items of a packed loop over `n` elements: the whole packs, then the rest one
/// element each. The grid needs no more threads than this.
template <class T>
constexpr std::size_t packed_items(std::size_t n) {
  return n / pack<T>::lanes + n % pack<T>::lanes;
}

template <operation Op>
MIMATRIX_HOST_DEVICE inline typename Op::value_type combine_one(const Op& op, typename Op::value_type a,
                                                                typename Op::value_type b) {
  using T = typename Op::value_type;
  return narrow<T>(op(widen<T>(a), widen<T>(b)));
}

/// avg's division; the other operations leave the value as it is (NaN payloads included).
template <operation Op>
MIMATRIX_HOST_DEVICE inline typename Op::value_type finalize_one(const Op& op, typename Op::value_type v, int ranks) {
  using T = typename Op::value_type;
  if constexpr (Op::kind == op_kind::avg) return narrow<T>(op.finalize(widen<T>(v), ranks));
  else return v;
}

/// The thread whose first element is `first`, in a grid of `stride` threads: calls
/// `pack_at(p)` for its whole packs (with Packed), then `element_at(i)` for its elements
/// after them.
template <bool Packed, class T, class PackAt, class ElementAt>
MIMATRIX_HOST_DEVICE inline void stride_over(std::size_t n, std::size_t first, std::size_t stride, PackAt&& pack_at,
                                             ElementAt&& element_at) {
  std::size_t done = 0;
  if constexpr (Packed) {
    const std::size_t packs = n / pack<T>::lanes;
    for (std::size_t p = first; p < packs; p += stride) pack_at(p);
    done = packs * pack<T>::lanes;
  }
  for (std::size_t i = done + first; i < n; i += stride) element_at(i);
}

/// A thread of a grid (stride_over): dst[i] = op(a[i], b[i]) for its elements. `dst` may
/// be `a` or `b`.
template <bool Packed, operation Op>
MIMATRIX_HOST_DEVICE inline void combine(const Op& op, typename Op::value_type* dst, const typename Op::value_type* a,
                                         const typename Op::value_type* b, std::size_t n, std::size_t first,
                                         std::size_t stride) {
  using T = typename Op::value_type;
  using P = pack<T>;
  stride_over<Packed, T>(
      n, first, stride,
      [&](std::size_t p) {
        const P x = reinterpret_cast<const P*>(a)[p];
        const P y = reinterpret_cast<const P*>(b)[p];
        P r;
        MIMATRIX_GRID_UNROLL
        for (std::size_t k = 0; k < P::lanes; ++k) r.lane[k] = combine_one(op, x.lane[k], y.lane[k]);
        reinterpret_cast<P*>(dst)[p] = r;
      },
      [&](std::size_t i) { dst[i] = combine_one(op, a[i], b[i]); });
}

/// A thread of a grid (stride_over): every m.dst[d][i] = finalize(op(m.src[0][i], ...,
/// m.src[k-1][i])) for its elements, folded in source order; each source read once, each
/// destination written once. m.dst[d] may be m.src[d]: a thread reads an element of every
/// source before it writes that element anywhere.
template <bool Packed, operation Op>
MIMATRIX_HOST_DEVICE inline void reduce_many(const Op& op, const many_operands<typename Op::value_type>& m,
                                             std::size_t n, int ranks, std::size_t first, std::size_t stride) {
  using T = typename Op::value_type;
  using P = pack<T>;
  stride_over<Packed, T>(
      n, first, stride,
      [&](std::size_t p) {
        P acc = reinterpret_cast<const P*>(m.src[0])[p];
        for (int s = 1; s < m.sources; ++s) {
          const P x = reinterpret_cast<const P*>(m.src[s])[p];
          MIMATRIX_GRID_UNROLL
          for (std::size_t k = 0; k < P::lanes; ++k) acc.lane[k] = combine_one(op, acc.lane[k], x.lane[k]);
        }
        MIMATRIX_GRID_UNROLL
        for (std::size_t k = 0; k < P::lanes; ++k) acc.lane[k] = finalize_one(op, acc.lane[k], ranks);
        for (int d = 0; d < m.destinations; ++d) reinterpret_cast<P*>(m.dst[d])[p] = acc;
      },
      [&](std::size_t i) {
        T acc = m.src[0][i];
        for (int s = 1; s < m.sources; ++s) acc = combine_one(op, acc, m.src[s][i]);
        acc = finalize_one(op, acc, ranks);
        for (int d = 0; d < m.destinations; ++d) m.dst[d][i] = acc;
      });
}

/// As combine's thread: data[i] = finalize(data[i]) for its elements.
template <operation Op>
MIMATRIX_HOST_DEVICE inline void finalize(const Op& op, typename Op::value_type* data, std::size_t n, int ranks,
                                          std::size_t first, std::size_t stride) {
  for (std::size_t i = first; i < n; i += stride) data[i] = finalize_one(op, data[i], ranks);
}

}  // namespace mimatrix::reduce::grid

#undef MIMATRIX_GRID_UNROLL

// The (dtype, op) -> host kernel table: executors combine through these pointers, so they
// are compiled once for every operation, and runtime-typed calls find theirs by value.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

#include "mimatrix/core/config.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/reduce/cpu.hpp"
#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::reduce {

/// One operation's kernels on host memory, over byte counts of its element type.
struct host_kernels {
  dtype type = dtype::float32;
  op_kind op = op_kind::sum;
  std::size_t elem_size = 4;
  /// dst = op(a, b); dst may be a or b.
  void (*combine)(std::byte* dst, const std::byte* a, const std::byte* b, std::size_t bytes) = nullptr;
  /// data = op.finalize(data, ranks): avg's division, nothing for the others.
  void (*finalize)(std::byte* data, std::size_t bytes, int ranks) = nullptr;
};

namespace detail {
/// Every dtype and every operation, in their enums' order (a kernel table's, a port's).
inline constexpr std::array every_dtype{dtype::int8,     dtype::uint8,    dtype::int32,   dtype::int64,
                                        dtype::float16,  dtype::bfloat16, dtype::float32, dtype::float64};
inline constexpr std::array every_op{op_kind::sum, op_kind::prod, op_kind::min, op_kind::max, op_kind::avg};

template <operation Op>
void combine_bytes(std::byte* dst, const std::byte* a, const std::byte* b, std::size_t bytes) {
  using T = typename Op::value_type;
  cpu::combine(Op{}, reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(a), reinterpret_cast<const T*>(b),
               bytes / sizeof(T));
}
template <operation Op>
void finalize_bytes(std::byte* data, std::size_t bytes, int ranks) {
  using T = typename Op::value_type;
  cpu::finalize(Op{}, reinterpret_cast<T*>(data), bytes / sizeof(T), ranks);
}
}  // namespace detail

/// The kernels of `Op`. Kernels are plain functions, so an operation carries no state.
template <operation Op>
  requires std::is_empty_v<Op> && std::is_default_constructible_v<Op>
inline constexpr host_kernels host_kernels_of{dtype_of<typename Op::value_type>, Op::kind,
                                              sizeof(typename Op::value_type), &detail::combine_bytes<Op>,
                                              &detail::finalize_bytes<Op>};

/// The kernels of (type, op); throws `invalid_argument` naming a value outside the enums
/// (a framework's cast gone wrong).
MIMATRIX_DECL const host_kernels& host_kernels_for(dtype type, op_kind op);

}  // namespace mimatrix::reduce

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/reduce/impl/host_kernels.ipp"
#endif
